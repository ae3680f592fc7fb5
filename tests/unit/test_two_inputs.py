"""Two-input streams: connect (Co-Map, Co-Flat Map, Co-Process, Keyed Co-Process) and broadcast state,
from the public API through the StreamGraph and JobGraph to the running chain (Flink's CoStreamMap,
CoProcessOperator, KeyedCoProcessOperator, CoBroadcastWithNonKeyedOperator, CoBroadcastWithKeyedOperator).

Expected outputs are written from Flink's rules, not read off the implementation.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import cloudpickle
import pytest

from millstream.common import Types
from millstream.datastream import (
    BroadcastConnectedStream,
    BroadcastProcessFunction,
    BroadcastStream,
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    ConnectedStreams,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
    MapFunction,
    OutputTag,
    StreamExecutionEnvironment,
)
from millstream.datastream.state import MapStateDescriptor, ValueStateDescriptor
from millstream.runtime.task.barrier_handler import CheckpointBarrier
from millstream.runtime.task.chain import OperatorError
from millstream.runtime.task.checkpointing import TaskCheckpointer
from millstream.runtime.task.worker_events import CheckpointAcknowledged
from millstream.runtime.task.environment import ManualClock
from tests.unit.test_runtime_chain import Run, collect, make_chain, run_job, vertex

JOB = b"j" * 16


@pytest.fixture
def env() -> StreamExecutionEnvironment:
    e = StreamExecutionEnvironment.get_execution_environment()
    e.set_parallelism(1)
    return e


def feed(run: Run, v: Any, *batches: tuple[int, list[Any]]) -> None:
    """``(input index, records)`` batches into the head of ``v``, in this order."""
    target = v.inputs[0].target_node_id
    for input_index, records in batches:
        run.chain.process_batch(records, target, input_index)


def started(v: Any, **kwargs: Any) -> Run:
    run = make_chain(v, **kwargs)
    run.chain.open()
    return run


def finish(run: Run, collect_id: str = "out") -> list[Any]:
    run.chain.end_input()
    run.chain.close()
    return run.collected(collect_id)


# -- functions used below ----------------------------------------------------------------------


class Tagged(CoMapFunction):
    def map1(self, value: Any) -> Any:
        return ("first", value)

    def map2(self, value: Any) -> Any:
        return ("second", value)


class Split(CoFlatMapFunction):
    def flat_map1(self, value: str) -> Iterable[str]:
        return value.split()

    def flat_map2(self, value: int) -> Iterable[int]:
        return range(value)


class Join(KeyedCoProcessFunction):
    """Orders (id, item) on input 1 and payments (id, amount) on input 2, joined by id in either order."""

    def open(self, runtime_context: Any) -> None:
        self.order = runtime_context.get_state(ValueStateDescriptor("order", Types.PICKLED_BYTE_ARRAY()))
        self.payment = runtime_context.get_state(ValueStateDescriptor("payment", Types.PICKLED_BYTE_ARRAY()))

    def process_element1(self, value: Any, ctx: Any) -> Any:
        paid = self.payment.value()
        if paid is None:
            self.order.update(value[1])
        else:
            yield (ctx.get_current_key(), value[1], paid)

    def process_element2(self, value: Any, ctx: Any) -> Any:
        item = self.order.value()
        if item is None:
            self.payment.update(value[1])
        else:
            yield (ctx.get_current_key(), item, value[1])


RULES = MapStateDescriptor("rules", Types.STRING(), Types.INT())


class Threshold(KeyedBroadcastProcessFunction):
    """Rules (name, limit) on the broadcast side; readings (name, value) alert when over the limit."""

    def open(self, runtime_context: Any) -> None:
        self.seen = runtime_context.get_state(ValueStateDescriptor("seen", Types.INT()))

    def process_element(self, value: Any, ctx: Any) -> Any:
        seen = (self.seen.value() or 0) + 1
        self.seen.update(seen)
        limit = ctx.get_broadcast_state(RULES).get(value[0])
        if limit is not None and value[1] > limit:
            yield (ctx.get_current_key(), value[1], limit, seen)

    def process_broadcast_element(self, value: Any, ctx: Any) -> Any:
        ctx.get_broadcast_state(RULES).put(value[0], value[1])
        return None


class Enrich(BroadcastProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Any:
        yield (value, ctx.get_broadcast_state(RULES).get(value))

    def process_broadcast_element(self, value: Any, ctx: Any) -> Any:
        ctx.get_broadcast_state(RULES).put(value[0], value[1])
        yield OutputTag("rules-seen", Types.STRING()), value[0]


# -- API, StreamGraph and JobGraph -------------------------------------------------------------


def test_connect_gives_pyflinks_two_input_types_and_operator_names(env: StreamExecutionEnvironment) -> None:
    a, b = env.from_collection([1]), env.from_collection(["x"])
    connected = a.connect(b)
    assert isinstance(connected, ConnectedStreams) and connected.stream1 is a and connected.stream2 is b
    assert connected.map(Tagged()).get_name() == "Co-Map"
    assert connected.flat_map(Split()).get_name() == "Co-Flat Map"
    keyed = connected.key_by(lambda x: x, lambda y: y)
    assert keyed._is_keyed_stream() and not connected._is_keyed_stream()
    assert keyed.process(Join()).get_name() == "Keyed Co-Process"
    broadcast = b.broadcast(RULES)
    assert isinstance(broadcast, BroadcastStream) and broadcast.broadcast_state_descriptors == [RULES]
    assert isinstance(a.connect(broadcast), BroadcastConnectedStream)
    assert a.connect(broadcast).process(Enrich()).get_name() == "Co-Process-Broadcast"
    assert a.key_by(lambda x: x).connect(broadcast).process(Threshold()).get_name() == "Co-Process-Broadcast-Keyed"
    assert not isinstance(b.broadcast(), BroadcastStream)  # without descriptors: a plain broadcast partitioning


def test_wrong_functions_and_descriptors_are_rejected_with_a_clear_error(env: StreamExecutionEnvironment) -> None:
    a, b = env.from_collection([1]), env.from_collection([2])
    with pytest.raises(TypeError, match="CoMapFunction"):
        a.connect(b).map(lambda x: x)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="CoFlatMapFunction"):
        a.connect(b).flat_map(Tagged())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="KeyedCoProcessFunction needs keyed connected streams"):
        a.connect(b).process(Join())
    with pytest.raises(TypeError, match="KeyedBroadcastProcessFunction"):
        a.key_by(lambda x: x).connect(b.broadcast(RULES)).process(Enrich())
    with pytest.raises(TypeError, match="key_by"):
        a.connect(b.broadcast(RULES)).process(Threshold())
    with pytest.raises(TypeError, match="MapStateDescriptor"):
        b.broadcast(ValueStateDescriptor("v", Types.INT()))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="two broadcast state descriptors are named 'rules'"):
        b.broadcast(RULES, MapStateDescriptor("rules", Types.STRING(), Types.STRING()))
    a.connect(b).key_by(lambda x: x, lambda y: str(y)).process(Join())  # untyped keys: not checked
    with pytest.raises(TypeError, match="key types of the two keyed streams differ"):
        a.key_by(lambda x: x, Types.INT()).connect(b.key_by(lambda y: str(y), Types.STRING())).process(Join())
    other = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(ValueError, match="same StreamExecutionEnvironment"):
        a.connect(other.from_collection([3]))


def test_a_two_input_vertex_has_one_job_edge_per_input_and_is_never_chained_to_them(
    env: StreamExecutionEnvironment,
) -> None:
    a, b = env.from_collection([1]), env.from_collection([2])
    collect(a.connect(b).map(Tagged()).map(lambda x: x))  # the operators after it do chain
    v = vertex(env, "Co-Map")
    assert v.name == "Co-Map -> Map -> Sink: Collect Sink"
    assert sorted((e.input_index, e.ship_strategy) for e in v.inputs) == [(0, "FORWARD"), (1, "FORWARD")]
    assert {e.target_node_id for e in v.inputs} == {v.operators[0].node_id}
    assert not v.operators[0].state_key_selector and not v.operators[0].state_key_selector2


def test_keyed_connect_hashes_both_inputs_and_ships_both_key_selectors(env: StreamExecutionEnvironment) -> None:
    env.set_parallelism(3)
    orders, payments = env.from_collection([("o1", "book")]), env.from_collection([("o1", 12)])
    collect(orders.connect(payments).key_by(lambda o: o[0], lambda p: p[0]).process(Join()))
    graph = env.get_stream_graph()
    join = next(n for n in graph.nodes.values() if n.operator_name == "Keyed Co-Process")
    assert sorted(e.type_number for e in join.in_edges) == [0, 1]
    v = vertex(env, "Keyed Co-Process")
    assert sorted((e.input_index, e.ship_strategy) for e in v.inputs) == [(0, "HASH"), (1, "HASH")]
    op = v.operators[0]
    assert cloudpickle.loads(op.state_key_selector).get_key(("o1", "book")) == "o1"
    assert cloudpickle.loads(op.state_key_selector2).get_key(("o2", 5)) == "o2"


def test_a_broadcast_connect_broadcasts_the_rules_and_keys_only_the_data_side(env: StreamExecutionEnvironment) -> None:
    env.set_parallelism(2)
    readings, rules = env.from_collection([("a", 1)]), env.from_collection([("a", 0)])
    collect(readings.key_by(lambda r: r[0]).connect(rules.broadcast(RULES)).process(Threshold()))
    v = vertex(env, "Co-Process-Broadcast-Keyed")
    assert sorted((e.input_index, e.ship_strategy) for e in v.inputs) == [(0, "HASH"), (1, "BROADCAST")]
    assert v.operators[0].state_key_selector and not v.operators[0].state_key_selector2


# -- co-map, co-flat-map, co-process -----------------------------------------------------------


def test_co_map_and_co_flat_map_call_the_method_of_each_records_input(env: StreamExecutionEnvironment) -> None:
    a, b = env.from_collection(["a b"]), env.from_collection([2])
    collect(a.connect(b).map(Tagged()), "map")
    collect(a.connect(b).flat_map(Split()), "flat")
    run = started(vertex(env, "Co-Map"))
    feed(run, vertex(env, "Co-Map"), (1, [7]), (0, ["p", "q"]), (1, [8]))
    assert finish(run, "map") == [("second", 7), ("first", "p"), ("first", "q"), ("second", 8)]
    v = vertex(env, "Co-Flat Map")
    run = started(v)
    feed(run, v, (0, ["to be", ""]), (1, [3, 0]))
    assert finish(run, "flat") == ["to", "be", 0, 1, 2]


def test_a_failing_co_map_names_the_operator_and_the_method(env: StreamExecutionEnvironment) -> None:
    class Bad(CoMapFunction):
        def map1(self, value: Any) -> Any:
            return value

        def map2(self, value: Any) -> Any:
            return 1 // value

    collect(env.from_collection([1]).connect(env.from_collection([0])).map(Bad()))
    v = vertex(env, "Co-Map")
    run = started(v)
    with pytest.raises(OperatorError, match=r"Operator 'Co-Map' \(subtask 1/1\) failed in map2: ZeroDivisionError"):
        feed(run, v, (1, [0]))


def test_co_process_emits_side_outputs_and_refuses_timers_on_unkeyed_streams(env: StreamExecutionEnvironment) -> None:
    odd = OutputTag("odd", Types.INT())

    class Route(CoProcessFunction):
        def process_element1(self, value: int, ctx: Any) -> Any:
            if value % 2:
                yield odd, value
            else:
                yield value

        def process_element2(self, value: str, ctx: Any) -> Any:
            if value == "timer":
                ctx.timer_service().register_processing_time_timer(5)
            yield value.upper()

    main = env.from_collection([1]).connect(env.from_collection(["x"])).process(Route())
    collect(main, "main")
    collect(main.get_side_output(odd), "odd")
    v = vertex(env, "Co-Process")
    run = started(v)
    feed(run, v, (0, [1, 2, 3]), (1, ["x"]))
    run.chain.end_input()
    assert run.collected("main") == [2, "X"] and run.collected("odd") == [1, 3]
    with pytest.raises(OperatorError, match="only supported on a keyed stream"):
        feed(run, v, (1, ["timer"]))


def test_keyed_co_process_joins_both_inputs_in_either_order_at_parallelism_3(env: StreamExecutionEnvironment) -> None:
    env.set_parallelism(3)
    orders = env.from_collection([(f"o{i}", f"item{i}") for i in range(20)])
    payments = env.from_collection([(f"o{i}", i * 10) for i in range(20) if i % 4])  # o0, o4, ... unpaid
    collect(orders.connect(payments).key_by(lambda o: o[0], lambda p: p[0]).process(Join()))
    out = run_job(env)["out"]
    assert sorted(out) == sorted((f"o{i}", f"item{i}", i * 10) for i in range(20) if i % 4)


def test_keyed_co_process_state_and_keys_are_shared_by_both_inputs(env: StreamExecutionEnvironment) -> None:
    collect(env.from_collection([("k", 0)]).connect(env.from_collection([("k", 0)]))
            .key_by(lambda o: o[0], lambda p: p[0]).process(Join()))
    v = vertex(env, "Keyed Co-Process")
    run = started(v)
    feed(run, v, (1, [("b", 5), ("a", 1)]), (0, [("a", "apple"), ("c", "cherry")]), (1, [("c", 3)]))
    assert finish(run) == [("a", "apple", 1), ("c", "cherry", 3)]


class Reminder(KeyedCoProcessFunction):
    """An order (id, delay) on input 1 sets a processing-time reminder; a payment on input 2 cancels it."""

    def open(self, runtime_context: Any) -> None:
        self.due = runtime_context.get_state(ValueStateDescriptor("due", Types.LONG()))

    def process_element1(self, value: Any, ctx: Any) -> Any:
        due = ctx.timer_service().current_processing_time() + value[1]
        ctx.timer_service().register_processing_time_timer(due)
        self.due.update(due)
        return None

    def process_element2(self, value: Any, ctx: Any) -> Any:
        due = self.due.value()
        if due is not None:
            ctx.timer_service().delete_processing_time_timer(due)
            self.due.clear()
        return None

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        yield (ctx.get_current_key(), timestamp, ctx.time_domain(), ctx.timestamp())


def test_keyed_co_process_processing_time_timers_fire_per_key_and_can_be_deleted_from_the_other_input(
    env: StreamExecutionEnvironment,
) -> None:
    collect(env.from_collection([("a", 1)]).connect(env.from_collection(["a"]))
            .key_by(lambda o: o[0], lambda p: p).process(Reminder()))
    v = vertex(env, "Keyed Co-Process")
    clock = ManualClock(1_000)
    run = started(v, clock=clock)
    feed(run, v, (0, [("a", 100), ("b", 50), ("c", 200)]), (1, ["b"]))  # b paid: its reminder is deleted
    clock.advance(99)
    run.chain.between_batches()
    run.chain.flush()
    assert run.collected() == []
    assert run.chain.next_timer_ms() == 1_100
    clock.advance(1)
    run.chain.between_batches()
    run.chain.flush()
    assert run.collected() == [("a", 1_100, "PROCESSING_TIME", 1_100)]
    clock.advance(100)
    run.chain.between_batches()
    run.chain.flush()
    assert run.collected()[1:] == [("c", 1_200, "PROCESSING_TIME", 1_200)]


def test_co_map_and_co_process_functions_on_keyed_connected_streams_get_keyed_state(
    env: StreamExecutionEnvironment,
) -> None:
    class CountBoth(CoMapFunction):
        def open(self, runtime_context: Any) -> None:
            self.count = runtime_context.get_state(ValueStateDescriptor("n", Types.INT()))

        def _bump(self, key: str) -> Any:
            n = (self.count.value() or 0) + 1
            self.count.update(n)
            return (key, n)

        def map1(self, value: str) -> Any:
            return self._bump(value)

        def map2(self, value: tuple[str, int]) -> Any:
            return self._bump(value[0])

    collect(env.from_collection(["a"]).connect(env.from_collection([("a", 1)]))
            .key_by(lambda w: w, lambda t: t[0]).map(CountBoth()))
    v = vertex(env, "Co-Map")
    run = started(v)
    feed(run, v, (0, ["a", "b"]), (1, [("a", 9), ("b", 9)]), (0, ["a"]))
    assert finish(run) == [("a", 1), ("b", 1), ("a", 2), ("b", 2), ("a", 3)]


# -- broadcast state ---------------------------------------------------------------------------


def test_keyed_broadcast_rules_reach_every_parallel_instance(env: StreamExecutionEnvironment) -> None:
    env.set_parallelism(3)
    rules = env.from_collection([("a", 10), ("b", 20), ("c", 30)])  # created first: read first by run_job
    readings = env.from_collection([(k, v) for v in (5, 15, 25, 35) for k in "abcd"])
    collect(readings.key_by(lambda r: r[0]).connect(rules.broadcast(RULES)).process(Threshold()))
    out = run_job(env)["out"]
    # a > 10: 15 (2nd a), 25, 35; b > 20: 25, 35; c > 30: 35; d has no rule
    assert sorted(out) == sorted([
        ("a", 15, 10, 2), ("a", 25, 10, 3), ("a", 35, 10, 4), ("b", 25, 20, 3), ("b", 35, 20, 4), ("c", 35, 30, 4),
    ])


def test_broadcast_state_is_read_only_on_the_data_side_and_unknown_descriptors_are_named(
    env: StreamExecutionEnvironment,
) -> None:
    class Sneaky(BroadcastProcessFunction):
        def process_element(self, value: Any, ctx: Any) -> Any:
            state = ctx.get_broadcast_state(RULES)
            if value == "put":
                state.put("x", 1)
            elif value == "clear":
                state.clear()
            elif value == "other":
                ctx.get_broadcast_state(MapStateDescriptor("other", Types.STRING(), Types.INT()))
            yield sorted(state.items())

        def process_broadcast_element(self, value: Any, ctx: Any) -> Any:
            ctx.get_broadcast_state(RULES).put(*value)
            return None

    collect(env.from_collection(["x"]).connect(env.from_collection([("a", 1)]).broadcast(RULES)).process(Sneaky()))
    v = vertex(env, "Co-Process-Broadcast")
    run = started(v)
    feed(run, v, (0, ["read"]), (1, [("a", 1), ("b", 2)]), (0, ["read"]))
    run.chain.flush()
    assert run.collected() == [[], [("a", 1), ("b", 2)]]
    with pytest.raises(OperatorError, match="has no attribute 'put'"):
        feed(run, v, (0, ["put"]))
    with pytest.raises(OperatorError, match="read-only"):
        feed(run, v, (0, ["clear"]))
    with pytest.raises(OperatorError, match=r"broadcast state 'other' does not exist \(declared: \['rules'\]\)"):
        feed(run, v, (0, ["other"]))


def test_broadcast_side_emits_and_writes_side_outputs(env: StreamExecutionEnvironment) -> None:
    main = env.from_collection(["a"]).connect(env.from_collection([("a", 1)]).broadcast(RULES)).process(Enrich())
    collect(main, "main")
    collect(main.get_side_output(OutputTag("rules-seen", Types.STRING())), "seen")
    v = vertex(env, "Co-Process-Broadcast")
    run = started(v)
    feed(run, v, (0, ["a"]), (1, [("a", 1)]), (0, ["a", "z"]))
    finish(run)
    assert run.collected("main") == [("a", None), ("a", 1), ("z", None)]
    assert run.collected("seen") == ["a"]


def test_keyed_broadcast_side_has_no_key_and_timers_read_the_broadcast_state(env: StreamExecutionEnvironment) -> None:
    class Later(KeyedBroadcastProcessFunction):
        def open(self, runtime_context: Any) -> None:
            self.last = runtime_context.get_state(ValueStateDescriptor("last", Types.INT()))

        def process_element(self, value: Any, ctx: Any) -> Any:
            self.last.update(value[1])
            ctx.timer_service().register_processing_time_timer(ctx.current_processing_time() + 10)
            return None

        def process_broadcast_element(self, value: Any, ctx: Any) -> Any:
            if value[0] == "touch-keyed-state":
                self.last.value()
            ctx.get_broadcast_state(RULES).put(*value)
            return None

        def on_timer(self, timestamp: int, ctx: Any) -> Any:
            yield (ctx.get_current_key(), self.last.value(), ctx.get_broadcast_state(RULES).get(ctx.get_current_key()),
                   ctx.time_domain())

    collect(env.from_collection([("a", 1)]).key_by(lambda r: r[0])
            .connect(env.from_collection([("a", 1)]).broadcast(RULES)).process(Later()))
    v = vertex(env, "Co-Process-Broadcast-Keyed")
    clock = ManualClock(1_000)
    run = started(v, clock=clock)
    feed(run, v, (0, [("a", 5), ("b", 6)]), (1, [("a", 100)]))
    clock.advance(10)
    run.chain.between_batches()
    run.chain.flush()
    assert run.collected() == [("a", 5, 100, "PROCESSING_TIME"), ("b", 6, None, "PROCESSING_TIME")]
    with pytest.raises(OperatorError, match="process_broadcast_element: RuntimeError: No key set for state 'last'"):
        feed(run, v, (1, [("touch-keyed-state", 0)]))


def _broadcast_job(env: StreamExecutionEnvironment, parallelism: int) -> Any:
    env.set_parallelism(parallelism)
    env.set_max_parallelism(8)
    collect(env.from_collection([("a", 1)]).key_by(lambda r: r[0])
            .connect(env.from_collection([("a", 10)]).broadcast(RULES)).process(Threshold()))
    return vertex(env, "Co-Process-Broadcast-Keyed")


def test_broadcast_state_is_snapshotted_and_every_subtask_gets_it_after_a_rescale(tmp_path: Path) -> None:
    old = _broadcast_job(StreamExecutionEnvironment.get_execution_environment(), 2)
    handles = []
    for subtask in range(2):
        run = started(old, subtask=subtask)
        sent: list[Any] = []
        checkpointer = TaskCheckpointer(run.chain, lambda event: None, str(tmp_path), JOB, sent.append)
        feed(run, old, (1, [("a", 10), ("b", 20)]))  # every subtask gets every rule
        checkpointer.checkpoint(CheckpointBarrier(1, 0))
        checkpointer.close()
        [ack] = sent
        assert type(ack) is CheckpointAcknowledged and ack.state_size > 0
        path, size = ack.state_path, ack.state_size
        handles.append((subtask, path, size))

    new = _broadcast_job(StreamExecutionEnvironment.get_execution_environment(), 4)
    for subtask in range(4):
        run = make_chain(new, subtask=subtask)
        checkpointer = TaskCheckpointer(run.chain, lambda event: None, str(tmp_path), JOB, lambda m: None)
        # what the JobMaster hands a new subtask: the old snapshots overlapping its key groups; operator
        # (list) state only from old subtask j where j % 4 == subtask, so subtasks 2 and 3 get none of it
        old_owner = subtask // 2
        checkpointer.restore_rescaled(1, [(j, p, s, j % 4 == subtask) for j, p, s in handles if j == old_owner])
        run.chain.open()
        mine = [k for k in "ab" if _owner(k, 8, 4) == subtask]
        feed(run, new, (0, [(k, 100) for k in mine]))
        limits = {"a": 10, "b": 20}
        assert finish(run) == [(k, 100, limits[k], 1) for k in mine]
        assert run.chain.head.broadcast_states.snapshot() == {"rules": limits}, subtask


def _owner(key: str, max_parallelism: int, parallelism: int) -> int:
    from millstream.runtime.keygroups import KeyGroupAssigner

    return KeyGroupAssigner(max_parallelism, parallelism).key_group(key) * parallelism // max_parallelism


def test_restoring_broadcast_state_of_an_undeclared_descriptor_is_an_error(env: StreamExecutionEnvironment) -> None:
    v = _broadcast_job(env, 1)
    run = make_chain(v)
    with pytest.raises(ValueError, match="holds broadcast state 'old-rules', which this job does not declare"):
        run.chain.head.initialize_state({"broadcast": {"old-rules": {"a": 1}}})


def test_a_map_after_a_connect_keeps_working_as_a_one_input_operator(env: StreamExecutionEnvironment) -> None:
    class Double(MapFunction):
        def map(self, value: Any) -> Any:
            return value * 2

    collect(env.from_collection([1, 2]).connect(env.from_collection([3])).map(Tagged()).map(lambda t: t[1]).map(Double()))
    assert sorted(run_job(env)["out"]) == [2, 4, 6]


def test_a_keyed_co_process_with_a_watermark_delay_holds_its_output_watermark_back(
    env: StreamExecutionEnvironment,
) -> None:
    # Flink's KeyedCoProcessOperatorWithWatermarkDelay (an interval join's operator): timers fire at
    # the input watermark, the output watermark trails it by the delay; the final one passes as is
    joined = env.from_collection([("k", 0)]).connect(env.from_collection([("k", 0)])) \
        .key_by(lambda o: o[0], lambda p: p[0]).process(Join())
    joined.get_transformation().factory.watermark_delay = 300
    collect(joined.key_by(lambda r: r[0]))  # a keyed exchange: the join's watermarks go over the network
    v = vertex(env, "Keyed Co-Process")
    run = started(v)
    (writer,) = run.writers.values()
    run.chain.process_watermark(1_000, 0)
    assert writer.watermarks == []  # the combined watermark waits for input 1
    run.chain.process_watermark(2_000, 1)
    run.chain.process_watermark(5_000, 0)
    run.chain.process_watermark(2**63 - 1, 1)
    run.chain.process_watermark(2**63 - 1, 0)
    assert writer.watermarks == [700, 1_700, 4_700, 2**63 - 1]
