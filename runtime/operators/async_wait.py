"""Async I/O (Flink's AsyncWaitOperator): an AsyncFunction's calls in flight on an asyncio loop.

Each subtask owns one asyncio loop on one thread (not a thread per record): ``async_invoke``
coroutines run there, many at once. Everything else happens on the task's thread: records enter
the element queue there, finished calls come back through a thread-safe queue and are emitted
there, so downstream operators are never called from the loop.

The element queue keeps Flink's guarantees:

- ordered: results leave in input order; unordered: as they finish, but a watermark is a fence:
  no result of a record after it leaves before it, and it leaves only after every record before it;
- at most ``capacity`` inputs in the queue (so at most that many calls in flight; as in Flink,
  finished inputs that wait to leave in order and watermarks count too): a full queue blocks the
  task (backpressure), which keeps handling finished calls while it waits;
- a checkpoint holds the inputs still in the queue (finished or not, with the watermarks between
  them); a restore calls them again, so each input's results are emitted exactly once after the
  last completed checkpoint.
"""
from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import queue
import threading
from typing import Any

from millstream.runtime import operator_factories
from millstream.runtime.operators.base import OperatorContext, StreamOperator
from millstream.runtime.timestamps import stamped, timestamps_of

__all__ = ["AsyncWaitOperator", "OrderedElementQueue", "UnorderedElementQueue"]

STOP_TIMEOUT_S = 5.0  # how long closing waits for cancelled calls to unwind
log = logging.getLogger(__name__)
POLL_MS = 2  # how soon an idle task loop looks again for finished calls while some are in flight


class _Record:
    """One input in the queue and, once its call finished, its results or error."""

    __slots__ = ("value", "timestamp", "result", "error", "phase", "done")

    def __init__(self, value: Any, timestamp: int | None) -> None:
        self.value = value
        self.timestamp = timestamp
        self.result: list[Any] = []
        self.error: BaseException | None = None
        self.phase = "async_invoke"
        self.done = False


class _Watermark:
    __slots__ = ("timestamp",)

    def __init__(self, timestamp: int) -> None:
        self.timestamp = timestamp


class OrderedElementQueue:
    """Inputs and watermarks in arrival order; only the head may leave."""

    def __init__(self) -> None:
        self._items: collections.deque[Any] = collections.deque()

    def __len__(self) -> int:
        return len(self._items)

    def add(self, item: Any) -> None:
        self._items.append(item)

    def pop_ready(self) -> list[Any]:
        out = []
        items = self._items
        while items and (type(items[0]) is _Watermark or items[0].done):
            out.append(items.popleft())
        return out

    def items(self) -> list[Any]:
        return list(self._items)


class UnorderedElementQueue:
    """Segments of inputs, each closed by the watermark that followed them. Inputs of the first
    segment leave as soon as they are done; its watermark leaves when the segment is empty."""

    def __init__(self) -> None:
        # each segment: [records in arrival order, closing watermark or None while open]
        self._segments: collections.deque[list[Any]] = collections.deque([[[], None]])
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, item: Any) -> None:
        self._size += 1
        if type(item) is _Watermark:
            self._segments[-1][1] = item
            self._segments.append([[], None])
        else:
            self._segments[-1][0].append(item)

    def pop_ready(self) -> list[Any]:
        out: list[Any] = []
        segments = self._segments
        while True:
            records, watermark = segments[0]
            if any(r.done for r in records):
                out.extend(r for r in records if r.done)
                records[:] = [r for r in records if not r.done]
            if records or watermark is None:
                break
            out.append(watermark)
            segments.popleft()
        self._size -= len(out)
        return out

    def items(self) -> list[Any]:
        out: list[Any] = []
        for records, watermark in self._segments:
            out.extend(records)
            if watermark is not None:
                out.append(watermark)
        return out


class AsyncWaitOperator(StreamOperator):
    uses_processing_time = True  # the task loop wakes it to hand finished calls on

    def __init__(self, factory: operator_factories.AsyncWaitFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        self._function = factory.function
        self._capacity = factory.capacity
        self._timeout_s = factory.timeout_ms / 1000 if factory.timeout_ms > 0 else None
        self._strategy = factory.retry_strategy
        self._queue: Any = OrderedElementQueue() if factory.ordered else UnorderedElementQueue()
        self._finished: queue.SimpleQueue[_Record] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._restored: list[tuple[Any, ...]] = []

    # -- lifecycle -----------------------------------------------------------------------------

    def open(self) -> None:
        super().open()
        loop = self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, daemon=True,
                                        name=f"async-io {self.name} ({self.ctx.env.subtask_index + 1})")
        self._thread.start()
        restored, self._restored = self._restored, []
        for item in restored:  # the inputs in flight at the checkpoint: call them again, in order
            if item[0] == "w":
                self._queue.add(_Watermark(item[1]))
            else:
                self._start(item[1], item[2])

    def close(self) -> None:
        self._stop_loop()
        super().close()

    def _stop_loop(self) -> None:
        """Cancels the calls still in flight (nobody waits for them any more) and ends the loop."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self._loop = None

        async def cancel_calls() -> None:
            calls = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for call in calls:
                call.cancel()
            await asyncio.gather(*calls, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(cancel_calls(), loop).result(STOP_TIMEOUT_S)
        except (TimeoutError, concurrent.futures.TimeoutError):
            log.warning("Operator '%s': async calls did not end within %s s of their cancellation", self.name,
                        STOP_TIMEOUT_S)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(STOP_TIMEOUT_S)
        if not thread.is_alive():
            loop.close()

    # -- records and watermarks ----------------------------------------------------------------

    def process_batch(self, records: list[Any]) -> None:
        timestamps = timestamps_of(records)
        for i, value in enumerate(records):
            while len(self._queue) >= self._capacity:  # as Flink: finished inputs waiting to leave count
                if not self._wait_for_a_call():
                    return  # the task is cancelled: its loop stops at its next look
            self._start(value, timestamps[i] if timestamps is not None else None)
        self._hand_on()

    def process_watermark(self, watermark: int) -> None:
        if watermark <= self.current_watermark:
            return
        self.current_watermark = watermark
        if len(self._queue):
            self._queue.add(_Watermark(watermark))  # leaves behind the records before it
        else:
            self.watermark_output(watermark)

    def on_processing_time(self, now_ms: int) -> None:
        self._hand_on()

    def next_timer_ms(self) -> int | None:
        return self.ctx.env.now_ms() + POLL_MS if len(self._queue) else None

    def end_input(self) -> None:
        """Every input's call finishes and its results leave before the task ends (Flink waits for
        the in-flight inputs at the end of input too)."""
        while len(self._queue):
            if not self._wait_for_a_call():
                return

    # -- checkpoints ---------------------------------------------------------------------------

    def snapshot_state(self, checkpoint_id: int) -> Any:
        items = [("w", item.timestamp) if type(item) is _Watermark else ("r", item.value, item.timestamp)
                 for item in self._queue.items()]
        return items or None

    def initialize_state(self, state: Any) -> None:
        self._restored = list(state or [])

    # -- the calls -----------------------------------------------------------------------------

    def _start(self, value: Any, timestamp: int | None) -> None:
        record = _Record(value, timestamp)
        self._queue.add(record)
        assert self._loop is not None, "open() the operator first"
        asyncio.run_coroutine_threadsafe(self._call(record), self._loop)

    def _wait_for_a_call(self) -> bool:
        """Blocks the task until at least one call finished (and hands results on); False when
        the task was cancelled meanwhile."""
        env = self.ctx.env
        while True:
            self._wake.clear()
            if self._hand_on():
                return True
            if env.is_cancelled():
                return False
            self._wake.wait(0.1)

    def _hand_on(self) -> int:
        """Takes the finished calls from the loop and emits what the queue lets leave."""
        finished = 0
        while True:
            try:
                record = self._finished.get_nowait()
            except queue.Empty:
                break
            if record.error is not None:
                self.fail(record.error, record.phase)
            record.done = True
            finished += 1
        if finished:
            self._emit(self._queue.pop_ready())
        return finished

    def _emit(self, items: list[Any]) -> None:
        records: list[Any] = []
        stamps: list[int | None] = []
        for item in items:
            if type(item) is _Watermark:
                self._output(records, stamps)
                records, stamps = [], []
                self.watermark_output(item.timestamp)
            else:
                records.extend(item.result)
                stamps.extend([item.timestamp] * len(item.result))
        self._output(records, stamps)

    def _output(self, records: list[Any], stamps: list[int | None]) -> None:
        if records:
            self.output(stamped(records, stamps if any(s is not None for s in stamps) else None))

    async def _call(self, record: _Record) -> None:
        """On the loop: the call with its retries, bounded by the timeout; then back to the task."""
        try:
            if self._timeout_s is None:
                result = await self._attempts(record.value)
            else:
                attempts = asyncio.ensure_future(self._attempts(record.value))
                done, _ = await asyncio.wait({attempts}, timeout=self._timeout_s)
                if done:
                    result = attempts.result()
                else:
                    attempts.cancel()
                    record.phase = "timeout"
                    result = self._function.timeout(record.value)
            record.result = self._checked(result, record.phase)
        except asyncio.CancelledError:
            raise  # the operator is closing: nobody waits for this record any more
        except Exception as exc:
            record.error = exc
        self._finished.put(record)
        self._wake.set()

    async def _attempts(self, value: Any) -> Any:
        """``async_invoke`` until its outcome does not match the retry predicate or the strategy
        gives up; an exception that is not retried propagates."""
        attempts = 0
        while True:
            attempts += 1
            error: Exception | None = None
            result: Any = None
            try:
                result = await self._function.async_invoke(value)
            except Exception as exc:
                error = exc
            if self._retry_wanted(result, error) and self._strategy.can_retry(attempts):
                await asyncio.sleep(max(self._strategy.get_backoff_time_millis(attempts), 0) / 1000)
                continue
            if error is not None:
                raise error
            return result

    def _retry_wanted(self, result: Any, error: Exception | None) -> bool:
        predicate = self._strategy.get_retry_predicate()
        if error is not None:
            test = predicate.exception_predicate()
            return test is not None and bool(test(error))
        test = predicate.result_predicate()
        return test is not None and bool(test(result))

    @staticmethod
    def _checked(result: Any, phase: str) -> list[Any]:
        if isinstance(result, (list, tuple)):
            return list(result)
        raise TypeError(f"AsyncFunction.{phase}() should return a list of results (an empty list for none), "
                        f"got {type(result).__name__}: {result!r}")
