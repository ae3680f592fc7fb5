"""Runtime operators: what a task builds from each operator factory and pushes records through.

This module holds the base class, the stateless and keyed one-input operators, reduce and the
aggregations, and the source head; process functions live in ``process`` and sinks in ``sinks``.

Operators work a batch at a time: ``process_batch(records)`` takes a list and hands one list per
output to ``output`` (the next operator's ``process_batch``, a fan-out, or a result writer), so the
per-record cost is the user's function inside a C-level ``map``/``filter``, not a chain of Python calls.
Lists handed downstream are never mutated afterwards by anyone (several consumers may share one).

Each operator's own work runs in a ``try`` that turns an exception into an :class:`OperatorError`
naming the operator and the phase (key selector, map, on_timer...); emitting happens outside it,
so a failure downstream is reported by the operator where it happened.
"""
from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass
from typing import Any, Callable, NoReturn

from millstream.common.row import Row
from millstream.datastream import functions as fn
from millstream.runtime import operator_factories
from millstream.runtime.keys import hashable_keys
from millstream.runtime.narrowing import NarrowedKey
from millstream.runtime.operators.sources import SourceCancelled, SourceFunctionReader, SourceReader, create_source_reader
from millstream.runtime.operators.watermarking import Watermarking
from millstream.runtime.state.heap_backend import VALUE, KeyedStateBackend
from millstream.runtime.task.environment import BATCH, StreamingRuntimeContext, TaskEnvironment
from millstream.runtime.timestamps import LONG_MIN, filtered, key_groups_of, repeated, stamped, timestamps_of

__all__ = [
    "Emit", "OperatorContext", "OperatorError", "StreamOperator", "SourceOperator", "call_target",
    "discard", "make_aggregator",
]

Emit = Callable[[list[Any]], None]
_MISSING: Any = object()
_flatten = itertools.chain.from_iterable


def discard(records: list[Any]) -> None:
    """The output of an operator nobody consumes (or of a side output nobody asked for)."""


def _ignore(event: Any) -> None:
    """The watermark output of an operator nobody consumes."""


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
    key_selector2: Callable[[Any], Any] | None = None  # a keyed two-input operator's second input's


def call_target(function: Any, wrapper: type, method: str) -> Callable[..., Any]:
    """The callable to invoke per record: a wrapped lambda directly, skipping the wrapper's method."""
    if type(function) is wrapper:
        target: Callable[..., Any] = getattr(function, "fn")
        return target
    bound: Callable[..., Any] = getattr(function, method)
    return bound


class StreamOperator:
    """Base of all runtime operators. ``output`` and ``side_outputs`` are wired by the chain."""

    def __init__(self, factory: operator_factories.OperatorFactory, ctx: OperatorContext) -> None:
        self.factory = factory
        self.ctx = ctx
        self.name = ctx.name
        self.output: Emit = discard
        self.side_outputs: dict[str, Emit] = {}
        self.watermark_output: Callable[[int], None] = _ignore
        self.status_output: Callable[[bool], None] = _ignore
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
        """The input ended: emit what is held back (BATCH results). The final watermark (``LONG_MAX``)
        reached the operator just before, so every event-time timer has fired already."""

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

    # -- time (Flink's processWatermark and processing-time services) ----------------------------
    # Watermarks go downstream through ``watermark_output`` and idleness through ``status_output``,
    # both wired by the chain to every consumer (main and side outputs, chained and over the network).

    current_watermark = LONG_MIN
    uses_processing_time = False  # True: the chain calls on_processing_time / next_timer_ms

    def process_watermark(self, watermark: int) -> None:
        """A watermark reached this operator: what it makes due fires first (``on_event_time``),
        then it goes downstream. A watermark that does not advance is dropped."""
        if watermark <= self.current_watermark:
            return
        self.current_watermark = watermark
        self.on_event_time(watermark)
        self.watermark_output(watermark)

    def on_event_time(self, watermark: int) -> None:
        """Fires event-time timers (windows) up to and including ``watermark``."""

    def process_watermark_status(self, idle: bool) -> None:
        """The input became idle (it holds no watermark back downstream) or active again."""
        self.status_output(idle)

    def on_processing_time(self, now_ms: int) -> None:
        """Fires processing-time timers due at ``now_ms`` (only when ``uses_processing_time``)."""

    def next_timer_ms(self) -> int | None:
        """When ``on_processing_time`` has something to do next, so an idle task loop wakes for it."""
        return None

    # -- checkpoints (Flink's CheckpointedFunction / CheckpointListener, operator side) -----------
    # The task calls these on its own thread. Keyed state is snapshotted by the chain, not here.

    # True when this operator's non-keyed state is broadcast state (the same on every subtask): a
    # rescaled restore then gives every new subtask one copy instead of a round-robin share.
    broadcast_operator_state = False

    def snapshot_state(self, checkpoint_id: int) -> Any:
        """Barrier ``checkpoint_id`` reached this operator: called after the chain's ``flush()`` and
        before any record after the barrier. Returns this operator's non-keyed state as a picklable
        value the operator will not mutate afterwards, or None when it has none."""
        return None

    def initialize_state(self, state: Any) -> None:
        """Restore: called after construction and before ``open()`` with what ``snapshot_state``
        returned in the checkpoint being restored; not called when there is nothing to restore."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` is complete on every task (it may subsume earlier ones whose
        notification never came): the moment to make output of checkpoints <= id visible."""

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` will never complete."""

    def has_uncommitted_output(self) -> bool:
        """True while output waits for a checkpoint to complete: after ``end_input()`` the task keeps
        taking part in checkpoints until no operator says so (Flink's final checkpoint, FLIP-147)."""
        return False

    # -- keyed operators -----------------------------------------------------------------------

    def _backend(self) -> KeyedStateBackend:
        if self.ctx.backend is None or self.ctx.key_selector is None:
            raise ValueError(f"Operator '{self.name}' ({self.factory.kind}) needs a keyed stream: use key_by() first")
        return self.ctx.backend

    def key_batch(self, records: list[Any], input_index: int = 0) -> tuple[list[Any], list[int]]:
        """Keys and key groups of a batch, computed up front so a failing key selector is reported as
        such; ``input_index`` 1: the second input's selector (a keyed two-input operator)."""
        selector = self.ctx.key_selector2 if input_index else self.ctx.key_selector
        backend = self.ctx.backend
        assert selector is not None and backend is not None
        try:
            keys = selector.keys_of(records) if type(selector) is NarrowedKey else list(map(selector, records))
            # A batch as it arrived over the keyed exchange carries the key groups its producer
            # computed for the same keys (exact str/bytes/int ones): looking every key up again cost
            # ~0.26 us a key once the window's panes had pushed the cache out of the CPU's.
            shipped = key_groups_of(records)
            r = backend.key_group_range
            if (shipped and len(shipped) == len(keys)
                    and r.start_key_group <= min(shipped) and max(shipped) <= r.end_key_group):
                key_groups = list(shipped)
            else:
                try:
                    key_groups = backend.assign_key_groups(keys)  # hashes every key: fails on an unhashable one
                except TypeError:
                    # PyFlink accepts list, dict and set keys (it compares serialized keys): hold their
                    # hashable twins. Paid only by batches with such a key, never on the common path.
                    keys = hashable_keys(keys)
                    key_groups = backend.assign_key_groups(keys)
            if backend.record_cleanups:  # state TTL: incremental cleanup per record, run per batch
                backend.run_record_cleanups(len(records))
        except Exception as e:
            self.fail(e, "the second input's key selector" if input_index else "the key selector")
        return keys, key_groups


# -- one-input operators ---------------------------------------------------------------------


class MapOperator(StreamOperator):
    def __init__(self, factory: operator_factories.MapFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        self._fn = call_target(factory.function, fn._MapWrapper, "map")

    def process_batch(self, records: list[Any]) -> None:
        try:
            out = list(map(self._fn, records))  # C-level loop: only the user's function runs per record
        except Exception as e:
            self.fail(e, "map")
        self.output(stamped(out, timestamps_of(records)))


class FlatMapOperator(StreamOperator):
    """A batch is expanded a slice at a time, each slice sized from the records per input seen so
    far to give about ``OUTPUT_TARGET`` records: what follows in the chain then walks a list that
    still sits in the CPU cache (a word count's passes over a batch ran 2.5x slower per record once
    its batches outgrew a core's L2 cache)."""

    OUTPUT_TARGET = 2048

    def __init__(self, factory: operator_factories.FlatMapFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        self._fn = call_target(factory.function, fn._FlatMapWrapper, "flat_map")
        self._slice = 256  # inputs per slice; the first slice measures the expansion
        # A function with flat_map_batch(records) -> one list of outputs per record takes a slice in
        # one call (the Table API's pandas functions: millstream.table.vectorized).
        self._batch_fn = getattr(factory.function, "flat_map_batch", None)

    def process_batch(self, records: list[Any]) -> None:
        if len(records) <= self._slice:
            self._expand(records)
            return
        start = 0
        while start < len(records):  # each slice sized by the one before
            end = start + self._slice
            self._expand(records[start:end])
            start = end

    def _expand(self, records: list[Any]) -> None:
        ts = timestamps_of(records)
        try:
            if self._batch_fn is not None:
                parts = self._batch_fn(records)
                out = list(_flatten(parts)) if ts is None else repeated(parts, ts)
            elif ts is None:
                out = list(_flatten(map(self._fn, records)))
            else:
                out = repeated([list(part) for part in map(self._fn, records)], ts)
        except Exception as e:
            self.fail(e, "flat_map")
        self._slice = max(1, len(records) * self.OUTPUT_TARGET // max(len(out), 1))
        if out:
            self.output(out)


class FilterOperator(StreamOperator):
    def __init__(self, factory: operator_factories.FilterFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        self._fn = call_target(factory.function, fn._FilterWrapper, "filter")

    def process_batch(self, records: list[Any]) -> None:
        ts = timestamps_of(records)
        try:
            out = list(filter(self._fn, records)) if ts is None else filtered(records, ts, list(map(self._fn, records)))
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
        self.output(stamped(out, timestamps_of(records)))


class KeyedFlatMapOperator(_KeyedRecordOperator):
    def process_batch(self, records: list[Any]) -> None:
        keys, key_groups = self.key_batch(records)
        b, f, ts = self._state, self._fn, timestamps_of(records)
        out: list[Any] = []
        parts: list[list[Any]] = []
        try:
            for key, kg, r in zip(keys, key_groups, records):
                b.current_key, b.current_key_group = key, kg
                if ts is None:
                    out.extend(f(r))
                else:
                    parts.append(list(f(r)))
        except Exception as e:
            self.fail(e, "flat_map")
        if ts is not None:
            out = repeated(parts, ts)
        if out:
            self.output(out)


class KeyedFilterOperator(_KeyedRecordOperator):
    def process_batch(self, records: list[Any]) -> None:
        keys, key_groups = self.key_batch(records)
        b, f = self._state, self._fn
        keep: list[Any] = []
        try:
            for key, kg, r in zip(keys, key_groups, records):
                b.current_key, b.current_key_group = key, kg
                keep.append(f(r))
        except Exception as e:
            self.fail(e, "filter")
        out = filtered(records, timestamps_of(records), keep)
        if out:
            self.output(out)


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
        self._reduce = reduce or call_target(factory.function, fn._ReduceWrapper, "reduce")
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
            self.output(stamped(out, timestamps_of(records)))

    def end_input(self) -> None:
        if self._batch_mode:
            final = [value for _, _, value in self._table.items()]
            if final:
                self.output(final)


def _replace_tuple(record: tuple[Any, ...], i: int, value: Any) -> tuple[Any, ...]:
    if type(record) is tuple:
        return record[:i] + (value,) + record[i + 1 :]
    make: Any = type(record)  # a namedtuple: positional fields
    return make(*record[:i], value, *record[i + 1 :])


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


def _tuple_sum(field: int, sample: tuple[Any, ...]) -> Callable[[Any, Any], Any]:
    """sum on a plain tuple, the word-count shape: built without slicing when the tuple is a pair
    (~2x faster per record); any record of another shape takes the generic path."""
    i = field + len(sample) if field < 0 else field
    sample[i]  # an out-of-range position fails on the first record

    def other_shape(cur: Any, new: Any) -> Any:
        get, replace = _field_access(cur, field)
        return replace(cur, get(cur) + new[field])

    if len(sample) == 2 and i == 1:
        return lambda cur, new: (cur[0], cur[1] + new[1]) if type(cur) is tuple and len(cur) == 2 else other_shape(cur, new)
    if len(sample) == 2:
        return lambda cur, new: (cur[0] + new[0], cur[1]) if type(cur) is tuple and len(cur) == 2 else other_shape(cur, new)
    return lambda cur, new: cur[:i] + (cur[i] + new[i],) + cur[i + 1 :] if type(cur) is tuple else other_shape(cur, new)


def make_aggregator(aggregation: str, field: int | str, sample: Any) -> Callable[[Any, Any], Any]:
    """The reduce function of ``sum/min/max/min_by/max_by`` for records shaped like ``sample``.

    sum/min/max keep the other fields of the key's first record and replace the field; min_by and
    max_by return a whole record and keep the earlier one on ties (Flink's defaults).
    """
    if type(sample) is tuple and isinstance(field, int) and aggregation == "sum":
        return _tuple_sum(field, sample)
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

    def __init__(self, factory: operator_factories.AggregationFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx, reduce=_unresolved)
        if factory.aggregation not in ("sum", "min", "max", "min_by", "max_by"):
            raise ValueError(f"Operator '{self.name}': unknown aggregation {factory.aggregation!r}")
        self._what = f"{factory.aggregation}({factory.field!r})"
        self._resolved = False
        self._pairs = False  # the word-count shape: see _sum_pairs

    def process_batch(self, records: list[Any]) -> None:
        if not self._resolved and records:  # resolve (and validate) the field on the first record
            factory: Any = self.factory
            try:
                self._reduce = make_aggregator(factory.aggregation, factory.field, records[0])
            except Exception as e:
                self.fail(e, self._what)
            self._resolved = True
            sample = records[0]
            self._pairs = (
                factory.aggregation == "sum" and type(sample) is tuple and len(sample) == 2 and factory.field in (1, -1)
            )
        if self._pairs:
            self._sum_pairs(records)
        else:
            super().process_batch(records)

    def _sum_pairs(self, records: list[Any]) -> None:
        """``sum(1)`` over ``(key, count)`` pairs, word count's shape: the generic loop with the sum
        inlined, saving a Python call per record. Other shapes fall back to the aggregator."""
        keys, key_groups = self.key_batch(records)
        groups, reduce = self._table.groups, self._reduce
        out: list[Any] = []
        append = out.append
        try:
            for key, kg, r in zip(keys, key_groups, records):
                d = groups.get(kg)
                if d is None:
                    d = groups[kg] = {}
                cur = d.get(key, _MISSING)
                if cur is not _MISSING:
                    if type(cur) is tuple and len(cur) == 2:
                        r = (cur[0], cur[1] + r[1])
                    else:
                        r = reduce(cur, r)
                d[key] = r
                append(r)
        except Exception as e:
            self.fail(e, self._what)
        if out and not self._batch_mode:
            self.output(stamped(out, timestamps_of(records)))


def _unresolved(cur: Any, new: Any) -> Any:
    raise AssertionError("aggregation used before its first record")


# -- sources ---------------------------------------------------------------------------------


class SourceOperator(StreamOperator):
    """The head of a source chain; the chain's ``run_source`` drives its reader, created in ``open()``
    so that a missing input fails as this operator's error. Batches go out through ``emit_batch``:
    with ``from_source``'s WatermarkStrategy they are stamped and followed by watermarks."""

    def __init__(self, factory: operator_factories.SourceFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        self.reader: SourceReader | SourceFunctionReader | None = None
        self.start_positions: dict[str, Any] = {}  # set before open() when restoring
        self.assigned_splits = False  # a rescaled restore: read exactly the splits in start_positions
        self._watermarking: Any = None
        strategy = factory.watermark_strategy
        # no_watermarks() without an assigner changes nothing per batch (the final watermark still comes)
        if strategy is not None and not (strategy.kind == "none" and strategy.timestamp_assigner is None):
            self._watermarking = Watermarking(self, strategy)
            self.uses_processing_time = ctx.env.auto_watermark_interval_ms > 0

    def emit_batch(self, records: list[Any]) -> None:
        if self._watermarking is None:
            self.output(records)
        else:
            reader = self.reader
            if isinstance(reader, SourceReader):
                for split in reader.added_splits():
                    self._watermarking.add_split(split)
                self._watermarking.emit(records, reader.batch_split)
                for split in reader.released_splits():
                    self._watermarking.release_split(split)
            else:
                self._watermarking.emit(records)

    def emit_source_watermark(self, watermark: int) -> None:
        """A watermark the SourceFunction emitted itself."""
        if watermark > self.current_watermark:
            self.current_watermark = watermark
            self.watermark_output(watermark)

    def process_watermark(self, watermark: int) -> None:
        """Only the final watermark reaches a source (from the chain at its end of input)."""
        if self._watermarking is not None:
            self._watermarking.end_of_input()
        else:
            super().process_watermark(watermark)

    def on_processing_time(self, now_ms: int) -> None:
        self._watermarking.periodic()

    def next_timer_ms(self) -> int | None:
        return self._watermarking.next_periodic_ms()

    def open(self) -> None:
        super().open()
        reader = None
        try:
            reader = create_source_reader(self.factory, self.ctx.env, self.ctx.runtime_context,  # type: ignore[arg-type]
                                          self.start_positions, self.assigned_splits)
            reader.open()
        except Exception as e:
            if reader is not None:  # self.reader is not set, so close() would never reach it
                with contextlib.suppress(Exception):
                    reader.close()
            self.fail(e, "opening the source")
        self.reader = reader

    def process_batch(self, records: list[Any]) -> None:
        raise TypeError(f"Source operator '{self.name}' has no input")

    def snapshot_state(self, checkpoint_id: int) -> Any:
        if isinstance(self.reader, SourceReader):
            self.reader.on_checkpoint(checkpoint_id)
        return super().snapshot_state(checkpoint_id)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        super().notify_checkpoint_complete(checkpoint_id)
        if isinstance(self.reader, SourceReader):
            try:
                self.reader.notify_checkpoint_complete(checkpoint_id)
            except Exception as e:
                self.fail(e, "notify_checkpoint_complete")

    def close(self) -> None:
        try:
            if self.reader is not None:
                self.reader.close()
        finally:
            super().close()
