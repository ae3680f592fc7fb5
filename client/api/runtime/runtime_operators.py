"""Runtime operators: what a task builds from each operator factory and pushes records through.

Operators work a batch at a time: ``process_batch(records)`` takes a list and hands one list per
output to ``output`` (the next operator's ``process_batch``, a fan-out, or a result writer), so the
per-record cost is the user's function inside a list comprehension, not a chain of Python calls.
Lists handed downstream are never mutated afterwards by anyone (several consumers may share one).

Each operator's own work runs in a ``try`` that turns an exception into an :class:`OperatorError`
naming the operator and the phase (key selector, map, on_timer...); emitting happens outside it,
so a failure downstream is reported by the operator where it happened.
"""
from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, NoReturn

from millstream.common.row import Row
from millstream.common.serialization import Encoder
from millstream.datastream import functions as fn
from millstream.datastream.data_stream import OutputTag
from millstream.runtime import operators as ops
from millstream.runtime.sources import SourceCancelled, SourceFunctionReader, SourceReader, create_source_reader
from millstream.runtime.state_backend import VALUE, KeyedStateBackend, TimerQueue
from millstream.runtime.task_environment import BATCH, StreamingRuntimeContext, TaskEnvironment

__all__ = [
    "Emit", "OperatorContext", "OperatorError", "StreamOperator", "SourceOperator", "create_operator", "discard",
]

Emit = Callable[[list[Any]], None]
LONG_MIN = -(2**63)
_MISSING: Any = object()
_INF = float("inf")
_flatten = itertools.chain.from_iterable
COLLECT_BATCH_SIZE = 1024  # records per emit_collect call unless the sink's options say otherwise


def discard(records: list[Any]) -> None:
    """The output of an operator nobody consumes (or of a side output nobody asked for)."""


class OperatorError(RuntimeError):
    """A failure inside one operator; the message names the operator, the subtask and the phase."""

    def __init__(self, message: str, operator_name: str) -> None:
        super().__init__(message)
        self.operator_name = operator_name


@dataclass
class OperatorContext:
    """What the chain gives each operator: identity, environment, and keyed state when keyed."""

    name: str
    node_id: int
    operator_id: str  # hex of the 16-byte operator hash: the key of this operator's state
    env: TaskEnvironment
    runtime_context: StreamingRuntimeContext
    key_selector: Callable[[Any], Any] | None = None
    backend: KeyedStateBackend | None = None


def _call_target(function: Any, wrapper: type, method: str) -> Callable[..., Any]:
    """The callable to invoke per record: a wrapped lambda directly, skipping the wrapper's method."""
    if type(function) is wrapper:
        target: Callable[..., Any] = getattr(function, "fn")
        return target
    bound: Callable[..., Any] = getattr(function, method)
    return bound


def _is_side_output(value: Any) -> bool:
    return type(value) is tuple and len(value) == 2 and isinstance(value[0], OutputTag)


class StreamOperator:
    """Base of all runtime operators. ``output`` and ``side_outputs`` are wired by the chain."""

    has_timers: ClassVar[bool] = False

    def __init__(self, factory: ops.OperatorFactory, ctx: OperatorContext) -> None:
        self.factory = factory
        self.ctx = ctx
        self.name = ctx.name
        self.output: Emit = discard
        self.side_outputs: dict[str, Emit] = {}
        self._opened = False
        self._closed = False

    def fail(self, exc: BaseException, what: str) -> NoReturn:
        """Re-raises ``exc`` as an OperatorError naming this operator (an OperatorError passes as is)."""
        if isinstance(exc, (OperatorError, SourceCancelled)):
            raise exc
        env = self.ctx.env
        raise OperatorError(
            f"Operator '{self.name}' (subtask {env.subtask_index + 1}/{env.parallelism}) failed in {what}: "
            f"{type(exc).__name__}: {exc}",
            self.name,
        ) from exc

    def user_functions(self) -> list[Any]:
        function = self.factory.user_function()
        return [function] if isinstance(function, fn.Function) else []

    def open(self) -> None:
        self._opened = True
        for function in self.user_functions():
            try:
                function.open(self.ctx.runtime_context)
            except Exception as e:
                self.fail(e, "open()")

    def process_batch(self, records: list[Any]) -> None:
        raise NotImplementedError

    def end_input(self) -> None:
        """The input ended: emit what is held back (BATCH results, final timers)."""

    def flush(self) -> None:
        """Hand buffered output on (called on the buffer timeout and at the end)."""

    def close(self) -> None:
        if self._closed or not self._opened:
            return
        self._closed = True
        for function in self.user_functions():
            try:
                function.close()
            except Exception as e:
                self.fail(e, "close()")

    # -- keyed operators -----------------------------------------------------------------------

    def _backend(self) -> KeyedStateBackend:
        if self.ctx.backend is None or self.ctx.key_selector is None:
            raise ValueError(f"Operator '{self.name}' ({self.factory.kind}) needs a keyed stream: use key_by() first")
        return self.ctx.backend

    def key_batch(self, records: list[Any]) -> tuple[list[Any], list[int]]:
        """Keys and key groups of a batch, computed up front so a failing key selector is reported as such."""
        selector = self.ctx.key_selector
        backend = self.ctx.backend
        assert selector is not None and backend is not None
        try:
            keys = list(map(selector, records))
            key_groups = backend.assign_key_groups(keys)
        except Exception as e:
            self.fail(e, "the key selector")
        return keys, key_groups


# -- one-input operators ---------------------------------------------------------------------


class MapOperator(StreamOperator):
    def __init__(self, factory: ops.MapFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        self._fn = _call_target(factory.function, fn._MapWrapper, "map")

    def process_batch(self, records: list[Any]) -> None:
        try:
            out = list(map(self._fn, records))  # C-level loop: only the user's function runs per record
        except Exception as e:
            self.fail(e, "map")
        self.output(out)


class FlatMapOperator(StreamOperator):
    def __init__(self, factory: ops.FlatMapFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        self._fn = _call_target(factory.function, fn._FlatMapWrapper, "flat_map")

    def process_batch(self, records: list[Any]) -> None:
        try:
            out = list(_flatten(map(self._fn, records)))
        except Exception as e:
            self.fail(e, "flat_map")
        if out:
            self.output(out)


class FilterOperator(StreamOperator):
    def __init__(self, factory: ops.FilterFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        self._fn = _call_target(factory.function, fn._FilterWrapper, "filter")

    def process_batch(self, records: list[Any]) -> None:
        try:
            out = list(filter(self._fn, records))
        except Exception as e:
            self.fail(e, "filter")
        if out:
            self.output(out)


class _KeyedRecordOperator(StreamOperator):
    """Keyed map / flat_map / filter: the function may use keyed state, so the key is set per record."""

    def __init__(self, factory: Any, ctx: OperatorContext, function: Callable[[Any], Any]) -> None:
        super().__init__(factory, ctx)
        self._fn = function
        self._state = self._backend()


class KeyedMapOperator(_KeyedRecordOperator):
    def process_batch(self, records: list[Any]) -> None:
        keys, key_groups = self.key_batch(records)
        b, f = self._state, self._fn
        out: list[Any] = []
        try:
            for key, kg, r in zip(keys, key_groups, records):
                b.current_key, b.current_key_group = key, kg
                out.append(f(r))
        except Exception as e:
            self.fail(e, "map")
        self.output(out)


class KeyedFlatMapOperator(_KeyedRecordOperator):
    def process_batch(self, records: list[Any]) -> None:
        keys, key_groups = self.key_batch(records)
        b, f = self._state, self._fn
        out: list[Any] = []
        try:
            for key, kg, r in zip(keys, key_groups, records):
                b.current_key, b.current_key_group = key, kg
                out.extend(f(r))
        except Exception as e:
            self.fail(e, "flat_map")
        if out:
            self.output(out)


class KeyedFilterOperator(_KeyedRecordOperator):
    def process_batch(self, records: list[Any]) -> None:
        keys, key_groups = self.key_batch(records)
        b, f = self._state, self._fn
        out: list[Any] = []
        try:
            for key, kg, r in zip(keys, key_groups, records):
                b.current_key, b.current_key_group = key, kg
                if f(r):
                    out.append(r)
        except Exception as e:
            self.fail(e, "filter")
        if out:
            self.output(out)


# -- process functions -----------------------------------------------------------------------


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
        return self._operator.watermark

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
    """KeyedProcessFunction with keyed state and timers. Event-time timers fire at the end of input
    (the final watermark); processing-time timers fire on ``on_processing_time``, and in BATCH mode
    also at the end of input, as Flink does. In STREAMING mode, processing-time timers still pending
    when a bounded input ends are dropped, as in Flink."""

    has_timers = True

    def __init__(self, factory: ops.KeyedProcessFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        self._state = self._backend()
        self.watermark = LONG_MIN
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

    def end_input(self) -> None:
        self.watermark = 2**63 - 1  # Flink's final watermark (Long.MAX_VALUE)
        self._fire(self._state.event_timers, _INF, "EVENT_TIME")
        if self.ctx.env.runtime_mode == BATCH:
            self._fire(self._state.processing_timers, _INF, "PROCESSING_TIME")


# -- reduce and aggregations -----------------------------------------------------------------


class ReduceOperator(StreamOperator):
    """Rolling reduce per key: emits every updated value in STREAMING mode, only the final value per
    key at the end of input in BATCH mode (Flink's StreamGroupedReduceOperator / BatchGroupedReduceOperator)."""

    STATE_NAME = "_op_state"  # Flink's name for this operator's value state

    def __init__(self, factory: Any, ctx: OperatorContext, reduce: Callable[[Any, Any], Any] | None = None) -> None:
        super().__init__(factory, ctx)
        self._state = self._backend()
        self._table = self._state.table(self.STATE_NAME, VALUE)
        self._batch_mode = ctx.env.runtime_mode == BATCH
        self._reduce = reduce or _call_target(factory.function, fn._ReduceWrapper, "reduce")
        self._what = "reduce"
        # Only a ReduceFunction class can reach keyed state (through open's runtime context); a
        # wrapped lambda or an aggregation cannot, so they skip setting the key per record.
        self._sets_key = reduce is None and type(factory.function) is not fn._ReduceWrapper

    def process_batch(self, records: list[Any]) -> None:
        keys, key_groups = self.key_batch(records)
        groups, reduce, b = self._table.groups, self._reduce, self._state
        sets_key = self._sets_key
        out: list[Any] = []
        append = out.append
        try:
            for key, kg, r in zip(keys, key_groups, records):
                d = groups.get(kg)
                if d is None:
                    d = groups[kg] = {}
                cur = d.get(key, _MISSING)
                if cur is not _MISSING:
                    if sets_key:
                        b.current_key, b.current_key_group = key, kg
                    r = reduce(cur, r)
                d[key] = r
                append(r)
        except Exception as e:
            self.fail(e, self._what)
        if out and not self._batch_mode:
            self.output(out)

    def end_input(self) -> None:
        if self._batch_mode:
            final = [value for _, _, value in self._table.items()]
            if final:
                self.output(final)


def _replace_tuple(record: tuple[Any, ...], i: int, value: Any) -> tuple[Any, ...]:
    if type(record) is tuple:
        return record[:i] + (value,) + record[i + 1 :]
    make: Any = type(record)  # a namedtuple: positional fields
    return make(*record[:i], value, *record[i + 1 :])  # type: ignore[no-any-return]


def _replace_list(record: list[Any], i: int, value: Any) -> list[Any]:
    copy = list(record)
    copy[i] = value
    return copy


def _replace_row(record: Row, i: int, value: Any) -> Row:
    values = list(record)
    values[i] = value
    row = Row(*values)
    row._fields = record._fields
    row.set_row_kind(record.get_row_kind())
    return row


def _field_access(sample: Any, field: int | str) -> tuple[Callable[[Any], Any], Callable[[Any, Any], Any]]:
    """(get, replace) for ``field`` of records shaped like ``sample``; replace returns a new record,
    because an emitted record must never change afterwards."""
    if isinstance(sample, Row):
        if isinstance(field, str):
            names = sample._fields
            if not names or field not in names:
                raise KeyError(f"Row {sample!r} has no field named {field!r}")
            index = names.index(field)
        else:
            index = field + len(sample) if field < 0 else field
        return (lambda r: r[index]), (lambda r, v: _replace_row(r, index, v))
    if isinstance(sample, (tuple, list)):
        if isinstance(field, str):
            names = getattr(type(sample), "_fields", None)
            if not names or field not in names:
                raise KeyError(f"A {type(sample).__name__} record has no field named {field!r}; use a position")
            index = names.index(field)
        else:
            index = field + len(sample) if field < 0 else field
        sample[index]  # an out-of-range position fails on the first record
        replace: Any = _replace_list if isinstance(sample, list) else _replace_tuple
        return (lambda r: r[index]), (lambda r, v: replace(r, index, v))
    if isinstance(sample, dict):
        return (lambda r: r[field]), (lambda r, v: {**r, field: v})
    if field in (0, "0"):  # a plain value (number) aggregates as itself
        return (lambda r: r), (lambda r, v: v)
    raise TypeError(f"Cannot aggregate field {field!r} of a record of type {type(sample).__name__}")


def make_aggregator(aggregation: str, field: int | str, sample: Any) -> Callable[[Any, Any], Any]:
    """The reduce function of ``sum/min/max/min_by/max_by`` for records shaped like ``sample``.

    sum/min/max keep the other fields of the key's first record and replace the field; min_by and
    max_by return a whole record and keep the earlier one on ties (Flink's defaults).
    """
    if type(sample) is tuple and isinstance(field, int) and aggregation == "sum":  # the word-count shape
        i = field + len(sample) if field < 0 else field
        sample[i]
        if i == len(sample) - 1:
            return lambda cur, new: cur[:i] + (cur[i] + new[i],)
        return lambda cur, new: cur[:i] + (cur[i] + new[i],) + cur[i + 1 :]
    get, replace = _field_access(sample, field)
    if aggregation == "sum":
        return lambda cur, new: replace(cur, get(cur) + get(new))
    if aggregation == "min":
        return lambda cur, new: replace(cur, v) if (v := get(new)) < get(cur) else cur
    if aggregation == "max":
        return lambda cur, new: replace(cur, v) if (v := get(new)) > get(cur) else cur
    if aggregation == "min_by":
        return lambda cur, new: new if get(new) < get(cur) else cur
    if aggregation == "max_by":
        return lambda cur, new: new if get(new) > get(cur) else cur
    raise ValueError(f"Unknown aggregation {aggregation!r}")


class AggregationOperator(ReduceOperator):
    """``sum/min/max/min_by/max_by``: a reduce whose function is built from the first record's shape."""

    def __init__(self, factory: ops.AggregationFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx, reduce=_unresolved)
        if factory.aggregation not in ("sum", "min", "max", "min_by", "max_by"):
            raise ValueError(f"Operator '{self.name}': unknown aggregation {factory.aggregation!r}")
        self._what = f"{factory.aggregation}({factory.field!r})"
        self._resolved = False

    def process_batch(self, records: list[Any]) -> None:
        if not self._resolved and records:  # resolve (and validate) the field on the first record
            factory: Any = self.factory
            try:
                self._reduce = make_aggregator(factory.aggregation, factory.field, records[0])
            except Exception as e:
                self.fail(e, self._what)
            self._resolved = True
        super().process_batch(records)


def _unresolved(cur: Any, new: Any) -> Any:
    raise AssertionError("aggregation used before its first record")


# -- sinks -----------------------------------------------------------------------------------


class PrintSinkOperator(StreamOperator):
    """Flink's PrintSinkFunction: ``id:N> `` / ``N> `` / ``id> `` prefixes (N = subtask + 1 when parallel)."""

    def __init__(self, factory: ops.PrintSinkFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        env = ctx.env
        prefix = factory.sink_identifier or ""
        if env.parallelism > 1:
            prefix = f"{prefix}:{env.subtask_index + 1}" if prefix else str(env.subtask_index + 1)
        self.prefix = f"{prefix}> " if prefix else ""
        self._stderr = factory.to_stderr

    def process_batch(self, records: list[Any]) -> None:
        p = self.prefix
        try:
            lines = [p + str(r) for r in records] if p else [str(r) for r in records]
            if self._stderr:
                self.ctx.env.print_lines(lines, to_stderr=True)
            else:
                self.ctx.env.print_lines(lines)
        except Exception as e:
            self.fail(e, "print")


class _SinkContext:
    """The ``context`` argument of ``SinkFunction.invoke``."""

    def __init__(self, env: TaskEnvironment) -> None:
        self._env = env

    def current_processing_time(self) -> int:
        return self._env.now_ms()

    def current_watermark(self) -> int:
        return LONG_MIN

    def timestamp(self) -> int | None:
        return None


class SinkFunctionOperator(StreamOperator):
    def __init__(self, factory: ops.SinkFunctionFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        function = factory.function
        if type(function) is fn._SinkWrapper:
            f = function.fn
            self._invoke: Callable[[Any], Any] = f
        else:
            invoke, sink_ctx = function.invoke, _SinkContext(ctx.env)
            self._invoke = lambda value: invoke(value, sink_ctx)

    def process_batch(self, records: list[Any]) -> None:
        invoke = self._invoke
        try:
            for r in records:
                invoke(r)
        except Exception as e:
            self.fail(e, "invoke")


class FileSinkOperator(StreamOperator):
    """Row-format file sink: this subtask writes ``<base_path>/part-<subtask>-0``, one encoded record per line."""

    def __init__(self, factory: ops.FileSinkFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        self.path = os.path.join(factory.base_path, f"part-{ctx.env.subtask_index}-0")
        self._encoder: Any = factory.encoder or Encoder.simple_string_encoder()
        self._file: Any = None

    def open(self) -> None:
        base = self.factory.base_path  # type: ignore[attr-defined]
        try:
            os.makedirs(base, exist_ok=True)
            self._file = open(self.path, "wb")
        except OSError as e:
            self.fail(e, f"opening its output: cannot write to directory {base!r}")
        super().open()

    def process_batch(self, records: list[Any]) -> None:
        enc = self._encoder
        try:
            if type(enc) is Encoder:  # the simple string encoder: one join and one encode per batch
                data = ("\n".join([str(r) for r in records]) + "\n").encode(enc.charset)
            else:
                data = b"".join([enc.encode(r) for r in records])
            self._file.write(data)
        except Exception as e:
            self.fail(e, f"writing {self.path!r}")

    def flush(self) -> None:
        if self._file is not None:
            try:
                self._file.flush()
            except OSError as e:
                self.fail(e, f"writing {self.path!r}")

    def close(self) -> None:
        f, self._file = self._file, None
        try:
            if f is not None:
                f.close()
        except OSError as e:
            self.fail(e, f"closing {self.path!r}")
        finally:
            super().close()


class CollectSinkOperator(StreamOperator):
    """Sends records to the client for ``execute_and_collect``, ``batch_size`` records per call at
    most, the rest on flush (buffer timeout or end of input): never one call per record."""

    def __init__(self, factory: ops.CollectSinkFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        self._collect_id = factory.collect_id
        self._batch_size = max(1, int(factory.options.get("batch_size", COLLECT_BATCH_SIZE)))
        self._buffer: list[Any] = []

    def process_batch(self, records: list[Any]) -> None:
        buf = self._buffer
        buf.extend(records)
        if len(buf) >= self._batch_size:
            n = len(buf) - len(buf) % self._batch_size
            for i in range(0, n, self._batch_size):
                self._send(buf[i : i + self._batch_size])
            del buf[:n]

    def _send(self, records: list[Any]) -> None:
        try:
            self.ctx.env.emit_collect(self._collect_id, records)
        except Exception as e:
            self._buffer = []
            self.fail(e, "sending records to the client")

    def flush(self) -> None:
        if self._buffer:
            buf, self._buffer = self._buffer, []
            self._send(buf)

    def end_input(self) -> None:
        self.flush()


# -- sources ---------------------------------------------------------------------------------


class SourceOperator(StreamOperator):
    """The head of a source chain; the chain's ``run_source`` drives its reader, created in ``open()``
    so that a missing input fails as this operator's error."""

    def __init__(self, factory: ops.SourceFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        self.reader: SourceReader | SourceFunctionReader | None = None
        self.start_positions: dict[str, Any] = {}  # set before open() when restoring

    def open(self) -> None:
        super().open()
        try:
            reader = create_source_reader(self.factory, self.ctx.env, self.ctx.runtime_context, self.start_positions)  # type: ignore[arg-type]
            reader.open()
        except Exception as e:
            self.fail(e, "opening the source")
        self.reader = reader

    def process_batch(self, records: list[Any]) -> None:
        raise TypeError(f"Source operator '{self.name}' has no input")

    def close(self) -> None:
        try:
            if self.reader is not None:
                self.reader.close()
        finally:
            super().close()


_OPERATORS: dict[type, Callable[[Any, OperatorContext], StreamOperator]] = {
    ops.MapFactory: MapOperator,
    ops.FlatMapFactory: FlatMapOperator,
    ops.FilterFactory: FilterOperator,
    ops.ProcessFactory: ProcessOperator,
    ops.KeyedProcessFactory: KeyedProcessOperator,
    ops.ReduceFactory: ReduceOperator,
    ops.AggregationFactory: AggregationOperator,
    ops.PrintSinkFactory: PrintSinkOperator,
    ops.SinkFunctionFactory: SinkFunctionOperator,
    ops.FileSinkFactory: FileSinkOperator,
    ops.CollectSinkFactory: CollectSinkOperator,
}

_KEYED: dict[type, tuple[type[_KeyedRecordOperator], type, str]] = {
    ops.MapFactory: (KeyedMapOperator, fn._MapWrapper, "map"),
    ops.FlatMapFactory: (KeyedFlatMapOperator, fn._FlatMapWrapper, "flat_map"),
    ops.FilterFactory: (KeyedFilterOperator, fn._FilterWrapper, "filter"),
}


def create_operator(factory: ops.OperatorFactory, ctx: OperatorContext) -> StreamOperator:
    """The runtime operator for ``factory``; map/flat_map/filter on a keyed stream get keyed variants."""
    if isinstance(factory, ops.SourceFactory):
        return SourceOperator(factory, ctx)
    keyed = _KEYED.get(type(factory)) if ctx.key_selector is not None else None
    if keyed is not None:
        cls, wrapper, method = keyed
        return cls(factory, ctx, _call_target(factory.user_function(), wrapper, method))
    make = _OPERATORS.get(type(factory))
    if make is None:
        raise TypeError(f"Operator '{ctx.name}': no runtime operator for {type(factory).__name__} ({factory.kind})")
    return make(factory, ctx)
