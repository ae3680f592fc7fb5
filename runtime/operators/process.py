"""Process-function operators: ``ProcessFunction`` and ``KeyedProcessFunction`` with side outputs,
keyed state and timers (Flink's ProcessOperator / KeyedProcessOperator).

Results are yielded; ``yield output_tag, value`` (or ``ctx.output(output_tag, value)``) goes to the
side output with that tag id. Timers live in the operator's keyed state backend, per key group, so
they are snapshotted with the state.
"""
from __future__ import annotations

from typing import Any, NoReturn

from millstream.datastream import functions as fn
from millstream.runtime.output_tag import OutputTag
from millstream.runtime import factories as ops
from millstream.runtime.operators.base import LONG_MIN, OperatorContext, StreamOperator, discard
from millstream.runtime.state.heap_backend import KeyedStateBackend, TimerQueue
from millstream.runtime.task.environment import BATCH, TaskEnvironment

__all__ = ["ProcessOperator", "KeyedProcessOperator"]

_INF = float("inf")


def _is_side_output(value: Any) -> bool:
    return type(value) is tuple and len(value) == 2 and isinstance(value[0], OutputTag)



class _NonKeyedTimerService(fn.TimerService):
    def __init__(self, env: TaskEnvironment) -> None:
        self._env = env

    def current_processing_time(self) -> int:
        return self._env.now_ms()

    def current_watermark(self) -> int:
        return LONG_MIN

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
        super().__init__(env)
        self._b = backend
        self._operator = operator

    def current_watermark(self) -> int:
        return self._operator.current_watermark

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
        return None  # records carry no timestamps until event time arrives

    def output(self, output_tag: OutputTag, value: Any) -> None:
        """Emit to a side output (Flink's ``ctx.output``), like ``yield output_tag, value``."""
        self._operator.side_buffer(output_tag.tag_id).append(value)


class _KeyedContext(_ProcessContext, fn.KeyedProcessFunction.OnTimerContext):
    """The context of ``process_element`` and, with a timer set, of ``on_timer``."""

    def __init__(self, operator: "_ProcessBase", timers: fn.TimerService, backend: KeyedStateBackend) -> None:
        super().__init__(operator, timers)
        self._b = backend
        self.timer_timestamp: int | None = None
        self.domain = ""

    def timestamp(self) -> int | None:
        return self.timer_timestamp

    def get_current_key(self) -> Any:
        return self._b.current_key

    def time_domain(self) -> str:
        return self.domain


class _ProcessBase(StreamOperator):
    """Shared by the process operators: results are yielded; ``(OutputTag, value)`` goes to a side output."""

    def __init__(self, factory: Any, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        self._fn = factory.function
        self._side: dict[str, list[Any]] = {}

    def side_buffer(self, tag_id: str) -> list[Any]:
        buf = self._side.get(tag_id)
        if buf is None:
            buf = self._side[tag_id] = []
        return buf

    def _take(self, result: Any, out: list[Any]) -> None:
        if result is None:
            return
        for v in result:
            if _is_side_output(v):
                self.side_buffer(v[0].tag_id).append(v[1])
            else:
                out.append(v)

    def _emit(self, out: list[Any]) -> None:
        if out:
            self.output(out)
        if self._side:
            side, self._side = self._side, {}
            for tag_id, records in side.items():
                self.side_outputs.get(tag_id, discard)(records)


class ProcessOperator(_ProcessBase):
    def __init__(self, factory: ops.ProcessFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        self._ctx = _ProcessContext(self, _NonKeyedTimerService(ctx.env))

    def process_batch(self, records: list[Any]) -> None:
        process, ctx, take = self._fn.process_element, self._ctx, self._take
        out: list[Any] = []
        try:
            for r in records:
                take(process(r, ctx), out)
        except Exception as e:
            self._side.clear()
            self.fail(e, "process_element")
        self._emit(out)


class KeyedProcessOperator(_ProcessBase):
    """KeyedProcessFunction with keyed state and timers. Event-time timers fire, in timestamp order,
    when a watermark reaches them (at the latest the final watermark at the end of input);
    processing-time timers fire on ``on_processing_time``, and in BATCH mode also at the end of
    input, as Flink does. In STREAMING mode, processing-time timers still pending when a bounded
    input ends are dropped, as in Flink."""

    uses_processing_time = True

    def __init__(self, factory: ops.KeyedProcessFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        self._state = self._backend()
        self._ctx = _KeyedContext(self, _KeyedTimerService(ctx.env, self._state, self), self._state)

    def process_batch(self, records: list[Any]) -> None:
        keys, key_groups = self.key_batch(records)
        b, process, ctx, take = self._state, self._fn.process_element, self._ctx, self._take
        ctx.timer_timestamp, ctx.domain = None, ""
        out: list[Any] = []
        try:
            for key, kg, r in zip(keys, key_groups, records):
                b.current_key = key
                b.current_key_group = kg
                take(process(r, ctx), out)
        except Exception as e:
            self._side.clear()
            self.fail(e, "process_element")
        self._emit(out)

    def _fire(self, queue: TimerQueue, up_to: float, domain: str) -> None:
        b, on_timer, ctx, take = self._state, self._fn.on_timer, self._ctx, self._take
        out: list[Any] = []
        try:
            while (timer := queue.poll(up_to)) is not None:
                ts, b.current_key, b.current_key_group = timer
                ctx.timer_timestamp, ctx.domain = ts, domain
                take(on_timer(ts, ctx), out)
        except Exception as e:
            self._side.clear()
            self.fail(e, "on_timer")
        finally:
            ctx.timer_timestamp, ctx.domain = None, ""
        self._emit(out)

    def on_processing_time(self, now_ms: int) -> None:
        self._fire(self._state.processing_timers, now_ms, "PROCESSING_TIME")

    def next_timer_ms(self) -> int | None:
        return self._state.processing_timers.peek()

    def on_event_time(self, watermark: int) -> None:
        self._fire(self._state.event_timers, watermark, "EVENT_TIME")

    def end_input(self) -> None:
        if self.ctx.env.runtime_mode == BATCH:
            self._fire(self._state.processing_timers, _INF, "PROCESSING_TIME")
