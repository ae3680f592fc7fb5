"""Process-function operators: ``ProcessFunction`` and ``KeyedProcessFunction`` with side outputs,
keyed state and timers (Flink's ProcessOperator / KeyedProcessOperator).

Results are yielded; ``yield output_tag, value`` (or ``ctx.output(output_tag, value)``) goes to the
side output with that tag id. Timers live in the operator's keyed state backend, per key group, so
they are snapshotted with the state.
"""
from __future__ import annotations

from typing import Any, NoReturn

from millstream.datastream import functions as fn
from millstream.datastream.time_domain import TimeDomain
from millstream.runtime.output_tag import OutputTag
from millstream.runtime import operator_factories
from millstream.runtime.operators.base import OperatorContext, StreamOperator, discard
from millstream.runtime.state.heap_backend import KeyedStateBackend, TimerQueue
from millstream.runtime.task.environment import BATCH, TaskEnvironment
from millstream.runtime.timestamps import stamped, timestamps_of

__all__ = ["ProcessOperator", "KeyedProcessOperator"]

_INF = float("inf")


def _is_side_output(value: Any) -> bool:
    return type(value) is tuple and len(value) == 2 and isinstance(value[0], OutputTag)



class _NonKeyedTimerService(fn.TimerService):
    def __init__(self, env: TaskEnvironment, operator: StreamOperator) -> None:
        self._env = env
        self._operator = operator

    def current_processing_time(self) -> int:
        return self._env.now_ms()

    def current_watermark(self) -> int:
        return self._operator.current_watermark

    def _unsupported(self) -> NoReturn:
        raise RuntimeError("Setting timers is only supported on a keyed stream: use key_by() and a KeyedProcessFunction.")

    def register_processing_time_timer(self, timestamp: int) -> None:
        self._unsupported()

    def register_event_time_timer(self, timestamp: int) -> None:
        self._unsupported()

    def delete_processing_time_timer(self, timestamp: int) -> None:
        self._unsupported()

    def delete_event_time_timer(self, timestamp: int) -> None:
        self._unsupported()


class _KeyedTimerService(_NonKeyedTimerService):
    """Timers of the current key; they live in the backend so they are snapshotted with the state."""

    def __init__(self, env: TaskEnvironment, backend: KeyedStateBackend, operator: "KeyedProcessOperator") -> None:
        super().__init__(env, operator)
        self._b = backend

    def _queue_args(self, timestamp: int) -> tuple[int, Any, int]:
        b = self._b
        if b.current_key_group < 0:
            raise RuntimeError("Timers can only be set while processing a record or a timer (a key must be set).")
        return int(timestamp), b.current_key, b.current_key_group

    def register_processing_time_timer(self, timestamp: int) -> None:
        self._b.processing_timers.register(*self._queue_args(timestamp))

    def register_event_time_timer(self, timestamp: int) -> None:
        self._b.event_timers.register(*self._queue_args(timestamp))

    def delete_processing_time_timer(self, timestamp: int) -> None:
        self._b.processing_timers.delete(*self._queue_args(timestamp))

    def delete_event_time_timer(self, timestamp: int) -> None:
        self._b.event_timers.delete(*self._queue_args(timestamp))


class _ProcessContext(fn.ProcessFunction.Context):
    def __init__(self, operator: "_ProcessBase", timers: fn.TimerService) -> None:
        self._operator = operator
        self._timers = timers

    def timer_service(self) -> fn.TimerService:
        return self._timers

    def timestamp(self) -> int | None:
        """The current record's timestamp (a timer's in ``on_timer``); None when it has none."""
        return self._operator.stamp

    def output(self, output_tag: OutputTag, value: Any) -> None:
        """Emit to a side output (Flink's ``ctx.output``), like ``yield output_tag, value``."""
        self._operator.side_output(output_tag.tag_id, value)


class _KeyedContext(_ProcessContext, fn.KeyedProcessFunction.OnTimerContext):
    """The context of ``process_element`` and, with a timer set, of ``on_timer``."""

    def __init__(self, operator: "_ProcessBase", timers: fn.TimerService, backend: KeyedStateBackend) -> None:
        super().__init__(operator, timers)
        self._b = backend
        self.domain: TimeDomain | None = None

    def get_current_key(self) -> Any:
        return self._b.current_key

    # None outside on_timer: one object serves as process_element's Context, which has no time domain
    def time_domain(self) -> TimeDomain | None:  # type: ignore[override]
        return self.domain


class _ProcessBase(StreamOperator):
    """Shared by the process operators: results are yielded; ``(OutputTag, value)`` goes to a side output.

    Outputs take the timestamp of the record (or event-time timer) that produced them, as Flink's
    TimestampedCollector: ``stamp`` is that timestamp, ``stamping`` whether outputs carry one.
    """

    def __init__(self, factory: Any, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        self._fn = factory.function
        self._side: dict[str, list[Any]] = {}
        self._side_ts: dict[str, list[int | None]] = {}
        self.stamp: int | None = None
        self.stamping = False

    def side_output(self, tag_id: str, value: Any) -> None:
        buf = self._side.get(tag_id)
        if buf is None:
            buf = self._side[tag_id] = []
        buf.append(value)
        if self.stamping:
            self._side_ts.setdefault(tag_id, []).append(self.stamp)

    def _take(self, result: Any, out: list[Any]) -> None:
        if result is None:
            return
        for v in result:
            if _is_side_output(v):
                self.side_output(v[0].tag_id, v[1])
            else:
                out.append(v)

    def _loop(self, records: list[Any], process: Any, ctx: Any, what: str,
              keyed: tuple[list[Any], list[int]] | None = None) -> None:
        """Calls ``process(record, ctx)`` per record (with its key set when ``keyed`` gives keys and
        key groups) and emits the results, stamped with their record's timestamp."""
        ts = timestamps_of(records)
        take = self._take
        out: list[Any] = []
        out_ts: list[int | None] | None = None
        try:
            if ts is None and keyed is None:
                for r in records:
                    take(process(r, ctx), out)
            elif ts is None:
                b = self.ctx.backend
                for key, kg, r in zip(*keyed, records):  # type: ignore[misc]
                    b.current_key, b.current_key_group = key, kg  # type: ignore[union-attr]
                    take(process(r, ctx), out)
            else:
                b = self.ctx.backend
                self.stamping = True
                out_ts = []
                for i, r in enumerate(records):
                    if keyed is not None:
                        b.current_key, b.current_key_group = keyed[0][i], keyed[1][i]  # type: ignore[union-attr]
                    self.stamp = t = ts[i]
                    n = len(out)
                    take(process(r, ctx), out)
                    if len(out) > n:
                        out_ts.extend([t] * (len(out) - n))
        except Exception as e:
            self._side.clear()
            self._side_ts.clear()
            self.fail(e, what)
        finally:
            self.stamp, self.stamping = None, False
        self._emit(out, out_ts)

    def _emit(self, out: list[Any], out_ts: list[int | None] | None = None) -> None:
        if out:
            self.output(stamped(out, out_ts))
        if self._side:
            side, self._side = self._side, {}
            side_ts, self._side_ts = self._side_ts, {}
            for tag_id, records in side.items():
                self.side_outputs.get(tag_id, discard)(stamped(records, side_ts.get(tag_id)))


class ProcessOperator(_ProcessBase):
    def __init__(self, factory: operator_factories.ProcessFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        self._ctx = _ProcessContext(self, _NonKeyedTimerService(ctx.env, self))

    def process_batch(self, records: list[Any]) -> None:
        self._loop(records, self._fn.process_element, self._ctx, "process_element")


class KeyedProcessOperator(_ProcessBase):
    """KeyedProcessFunction with keyed state and timers. Event-time timers fire, in timestamp order,
    when a watermark reaches them (at the latest the final watermark at the end of input);
    processing-time timers fire on ``on_processing_time``, and in BATCH mode also at the end of
    input, as Flink does. In STREAMING mode, processing-time timers still pending when a bounded
    input ends are dropped, as in Flink."""

    uses_processing_time = True

    def __init__(self, factory: operator_factories.KeyedProcessFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        self._state = self._backend()
        self._ctx = _KeyedContext(self, _KeyedTimerService(ctx.env, self._state, self), self._state)

    def process_batch(self, records: list[Any]) -> None:
        self._ctx.domain = None
        self._loop(records, self._fn.process_element, self._ctx, "process_element", self.key_batch(records))

    def _fire(self, queue: TimerQueue, up_to: float, domain: TimeDomain) -> None:
        """Fires the timers up to ``up_to``. Results of an event-time timer carry its timestamp; a
        processing-time timer's carry none (Flink erases it), though ``ctx.timestamp()`` is the
        timer's in both."""
        b, on_timer, ctx, take = self._state, self._fn.on_timer, self._ctx, self._take
        out: list[Any] = []
        out_ts: list[int | None] | None = [] if domain is TimeDomain.EVENT_TIME else None
        ctx.domain = domain
        try:
            while (timer := queue.poll(up_to)) is not None:
                ts, b.current_key, b.current_key_group = timer
                self.stamp, self.stamping = ts, out_ts is not None
                n = len(out)
                take(on_timer(ts, ctx), out)
                if out_ts is not None and len(out) > n:
                    out_ts.extend([ts] * (len(out) - n))
        except Exception as e:
            self._side.clear()
            self._side_ts.clear()
            self.fail(e, "on_timer")
        finally:
            ctx.domain = None
            self.stamp, self.stamping = None, False
        self._emit(out, out_ts)

    def on_processing_time(self, now_ms: int) -> None:
        self._fire(self._state.processing_timers, now_ms, TimeDomain.PROCESSING_TIME)

    def next_timer_ms(self) -> int | None:
        return self._state.processing_timers.peek()

    def on_event_time(self, watermark: int) -> None:
        self._fire(self._state.event_timers, watermark, TimeDomain.EVENT_TIME)

    def end_input(self) -> None:
        if self.ctx.env.runtime_mode == BATCH:
            self._fire(self._state.processing_timers, _INF, TimeDomain.PROCESSING_TIME)
