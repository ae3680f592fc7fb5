"""Async I/O (AsyncDataStream / AsyncFunction): the element queues' rules and the operator run in a
real OperatorChain (fake TaskEnvironment, real asyncio loop); the cluster runs are in
tests/integration/test_async_io.py."""
from __future__ import annotations

import asyncio
import functools
import time

import pytest

from millstream.common import Duration, Time, Types
from millstream.datastream import AsyncDataStream, AsyncFunction, AsyncRetryStrategy, StreamExecutionEnvironment
from millstream.datastream import async_retry_predicates
from millstream.datastream.async_retry_strategies import ExponentialBackoffDelayRetryStrategy, NO_RETRY_STRATEGY
from millstream.runtime.operators.async_wait import OrderedElementQueue, UnorderedElementQueue, _Record, _Watermark
from millstream.runtime.task.chain import OperatorError

from .test_runtime_chain import collect, make_chain, run_job, vertex


def done(record: _Record) -> _Record:
    record.done = True
    return record


def test_ordered_queue_lets_only_the_head_leave() -> None:
    q = OrderedElementQueue()
    a, b, w, c = _Record("a", None), _Record("b", None), _Watermark(5), _Record("c", None)
    for item in (a, b, w, c):
        q.add(item)
    done(b), done(c)
    assert q.pop_ready() == []
    done(a)
    assert q.pop_ready() == [a, b, w, c] and len(q) == 0


def test_unordered_queue_lets_records_overtake_each_other_but_never_a_watermark() -> None:
    q = UnorderedElementQueue()
    a, b, w, c = _Record("a", None), _Record("b", None), _Watermark(5), _Record("c", None)
    for item in (a, b, w, c):
        q.add(item)
    done(c)
    assert q.pop_ready() == []  # c is behind the watermark
    done(b)
    assert q.pop_ready() == [b]
    assert [type(i).__name__ for i in q.items()] == ["_Record", "_Watermark", "_Record"]
    done(a)
    assert q.pop_ready() == [a, w, c] and len(q) == 0


class Delayed(AsyncFunction):
    """Answers ``[value * 10]`` after ``delays[value]`` seconds; counts calls in flight."""

    def __init__(self, delays: dict, default: float = 0.0) -> None:
        self.delays, self.default = delays, default

    def open(self, runtime_context) -> None:
        self.in_flight = self.peak = 0

    async def async_invoke(self, value):
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(self.delays.get(value, self.default))
        finally:
            self.in_flight -= 1
        return [value * 10]


def job(ordered: bool, function: AsyncFunction, values, capacity: int = 100, timeout=Time.seconds(10),
        strategy=None) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    ds = env.from_collection(values)
    if strategy is None:
        wait = AsyncDataStream.ordered_wait if ordered else AsyncDataStream.unordered_wait
        out = wait(ds, function, timeout, capacity, Types.INT())
    else:
        wait = AsyncDataStream.ordered_wait_with_retry if ordered else AsyncDataStream.unordered_wait_with_retry
        out = wait(ds, function, timeout, strategy, capacity, Types.INT())
    collect(out)
    return env


def test_ordered_wait_keeps_input_order_and_unordered_lets_fast_calls_out_first() -> None:
    delays = {1: 0.3, 2: 0.0, 3: 0.1}
    assert run_job(job(True, Delayed(delays), [1, 2, 3]))["out"] == [10, 20, 30]
    assert run_job(job(False, Delayed(delays), [1, 2, 3]))["out"] == [20, 30, 10]


def test_at_most_capacity_calls_are_in_flight() -> None:
    function = Delayed({}, default=0.01)
    env = job(False, function, list(range(40)), capacity=3)
    v = vertex(env)
    run = make_chain(v)
    run.chain.open()
    assert run.chain.run_source()
    run.chain.end_input()
    operator = next(o for o in run.chain.operators if o.name == "async wait operator")
    assert operator._function.peak == 3
    run.chain.close()
    assert sorted(run.collected()) == [10 * i for i in range(40)]


class Slow(AsyncFunction):
    async def async_invoke(self, value):
        await asyncio.sleep(5)
        return [value]


class SlowWithFallback(Slow):
    def timeout(self, value):
        return [-value]


def test_a_call_past_its_timeout_fails_the_job_with_timeout_error_unless_timeout_is_overridden() -> None:
    with pytest.raises(OperatorError, match="TimeoutError: Async function call has timed out for input: 1"):
        run_job(job(True, Slow(), [1], timeout=Duration.of_millis(50)))
    assert run_job(job(True, SlowWithFallback(), [1, 2], timeout=Duration.of_millis(50)))["out"] == [-1, -2]


class Flaky(AsyncFunction):
    """Fails the first ``failures`` calls of each value with ConnectionError."""

    def __init__(self, failures: int) -> None:
        self.failures = failures

    def open(self, runtime_context) -> None:
        self.calls: dict = {}

    async def async_invoke(self, value):
        self.calls[value] = self.calls.get(value, 0) + 1
        if self.calls[value] <= self.failures:
            raise ConnectionError(f"call {self.calls[value]} for {value} failed")
        return [value]


def retry_on(error_type: type, attempts: int) -> AsyncRetryStrategy:
    return AsyncRetryStrategy.fixed_delay(
        max_attempts=attempts, backoff_time_millis=1, result_predicate=None,
        exception_predicate=functools.partial(async_retry_predicates.exception_type_predicate,
                                              expected_error_type=error_type))


def test_retries_follow_the_strategy_and_its_predicate() -> None:
    assert run_job(job(True, Flaky(2), [1, 2], strategy=retry_on(ConnectionError, 2)))["out"] == [1, 2]
    with pytest.raises(OperatorError, match="ConnectionError: call 3 for 1 failed"):
        run_job(job(True, Flaky(3), [1], strategy=retry_on(ConnectionError, 2)))
    with pytest.raises(OperatorError, match="ConnectionError: call 1 for 1 failed"):  # predicate does not match
        run_job(job(True, Flaky(1), [1], strategy=retry_on(KeyError, 5)))


class EmptyFirst(AsyncFunction):
    def open(self, runtime_context) -> None:
        self.calls = 0

    async def async_invoke(self, value):
        self.calls += 1
        return [] if self.calls == 1 else [value]


def test_a_result_predicate_retries_an_empty_result() -> None:
    strategy = AsyncRetryStrategy.fixed_delay(3, 1, async_retry_predicates.empty_result_predicate, None)
    assert run_job(job(True, EmptyFirst(), [7], strategy=strategy))["out"] == [7]
    assert run_job(job(True, EmptyFirst(), [7]))["out"] == []  # no retry: the empty result stands


class NotAList(AsyncFunction):
    async def async_invoke(self, value):
        return value


def test_a_result_that_is_not_a_list_is_a_clear_error() -> None:
    with pytest.raises(OperatorError, match="should return a list of results"):
        run_job(job(True, NotAList(), [1]))


def test_in_flight_inputs_are_snapshotted_and_called_again_after_restore() -> None:
    env = job(True, Delayed({1: 0.0, 2: 5.0, 3: 0.0}), [1, 2, 3])
    v = vertex(env)
    run = make_chain(v)
    run.chain.open()
    assert run.chain.run_source()
    operator = next(o for o in run.chain.operators if o.name == "async wait operator")
    deadline = time.monotonic() + 5
    while len(operator._queue) > 2 and time.monotonic() < deadline:  # the task loop's housekeeping
        run.chain.between_batches()
        time.sleep(0.01)
    run.chain.flush()
    state = operator.snapshot_state(1)
    run.chain.close()
    assert run.collected() == [10]  # 2 is slow, 3 waits behind it (ordered)
    assert state == [("r", 2, None), ("r", 3, None)]
    restored = make_chain(v)
    restored_op = next(o for o in restored.chain.operators if o.name == "async wait operator")
    restored_op._function.delays = {}
    restored_op.initialize_state(state)
    restored.chain.open()
    restored.chain.end_input()
    restored.chain.close()
    assert restored.collected() == [20, 30]


def test_bad_arguments_are_named() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    ds = env.from_collection([1])

    class NotAsync(AsyncFunction):
        def async_invoke(self, value):  # type: ignore[override]
            return [value]

    with pytest.raises(TypeError, match="should be declared as 'async def'"):
        AsyncDataStream.unordered_wait(ds, NotAsync(), Time.seconds(1))
    with pytest.raises(ValueError, match="capacity must be a positive int"):
        AsyncDataStream.unordered_wait(ds, Slow(), Time.seconds(1), 0)
    with pytest.raises(ValueError, match="Timeout should be configured"):
        AsyncDataStream.ordered_wait_with_retry(ds, Slow(), Time.seconds(0), retry_on(KeyError, 1))
    with pytest.raises(ValueError, match="max_attempts should be greater than zero"):
        AsyncRetryStrategy.fixed_delay(0, 10)
    backoff = ExponentialBackoffDelayRetryStrategy(5, 100, 1000, 3.0, None, None)
    assert [backoff.get_backoff_time_millis(n) for n in (1, 2, 3, 4)] == [100, 300, 900, 1000]
    assert backoff.can_retry(5) and not backoff.can_retry(6) and not NO_RETRY_STRATEGY.can_retry(1)


class EventLog:
    """A ResultWriter that keeps records and watermarks in the one order they were emitted."""

    def __init__(self) -> None:
        self.events: list = []

    def emit(self, records) -> None:
        from millstream.runtime.timestamps import timestamps_of

        stamps = timestamps_of(records) or [None] * len(records)
        self.events.extend(("record", r, t) for r, t in zip(records, stamps))

    def flush(self) -> None:
        pass

    def emit_watermark(self, watermark: int) -> None:
        self.events.append(("watermark", watermark))

    def emit_watermark_status(self, idle: bool) -> None:
        pass


def test_unordered_results_keep_their_timestamps_and_never_overtake_a_watermark() -> None:
    from millstream.runtime.task.chain import OperatorChain
    from millstream.runtime.task.environment import ManualClock, SimpleTaskEnvironment
    from millstream.runtime.timestamps import TimestampedBatch

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    looked_up = AsyncDataStream.unordered_wait(env.from_collection([0]).rebalance(), Delayed({1: 0.3, 3: 0.0, 4: 0.2}),
                                               Time.seconds(10), 10)
    looked_up.rebalance().map(lambda x: x)
    v = next(v for v in env.get_job_graph().proto.vertices if v.name == "async wait operator")
    log = EventLog()
    task_env = SimpleTaskEnvironment(task_name=v.name, subtask_index=0, parallelism=1, max_parallelism=128,
                                     clock=ManualClock(1_000))
    chain = OperatorChain(v, task_env, {ds.id: log for ds in v.produced})
    chain.open()
    target = v.inputs[0].target_node_id
    chain.process_batch(TimestampedBatch([1, 2], [100, 200]), target)  # 1 is slow, 2 fast
    chain.process_watermark(250)
    chain.process_batch(TimestampedBatch([3, 4], [300, 400]), target)  # 3 fast, 4 slower
    chain.end_input()
    chain.close()
    records = [(e[1], e[2]) for e in log.events if e[0] == "record"]
    assert records[:2] == [(20, 200), (10, 100)]  # the fast one first, each with its input's timestamp
    assert sorted(records[2:]) == [(30, 300), (40, 400)]
    kinds = [e[0] if e[0] == "record" else e[1] for e in log.events]
    assert kinds.index(250) == 2  # after both records before it, before both after it
    assert log.events[-1] == ("watermark", 2**63 - 1)  # the final watermark behind everything


def test_a_task_blocked_on_a_full_queue_stops_waiting_when_cancelled() -> None:
    import threading

    env = job(True, Slow(), [1, 2, 3], capacity=1, timeout=Time.seconds(60))
    v = vertex(env)
    run = make_chain(v)
    run.chain.open()
    finished = threading.Event()
    worker = threading.Thread(target=lambda: (run.chain.run_source(), finished.set()), daemon=True)
    worker.start()
    assert not finished.wait(0.3)  # blocked: one slow call holds the only place
    run.env.cancel()
    assert finished.wait(2), "the task did not stop waiting after its cancellation"
    run.chain.close()  # cancels the call in flight and ends the loop
