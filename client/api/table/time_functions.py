"""The functions the tasks run for event time in a table program: the rowtime timestamp
assigner, window aggregation on Millstream's window operator, window TVF assignment, OVER
aggregation, Top-N and deduplication. Pure cores (frames, rankings) next to the DataStream
functions that keep them in keyed state.

Time values: a TIMESTAMP / TIMESTAMP_LTZ column holds a naive ``datetime`` in UTC (Millstream's
session time zone); a row's event time is its rowtime column in epoch milliseconds.
"""
from __future__ import annotations

import bisect
from typing import Any, Iterable, Sequence

from millstream.common.row import Row, RowKind
from millstream.common.time import Duration
from millstream.common.typeinfo import Types
from millstream.common.watermark_strategy import TimestampAssigner
from millstream.datastream.functions import (AggregateFunction, FlatMapFunction, KeyedProcessFunction,
                                             ProcessWindowFunction)
from millstream.datastream.state import ValueStateDescriptor
from millstream.datastream.window import (EventTimeSessionWindows, ProcessingTimeSessionWindows,
                                          SlidingEventTimeWindows, SlidingProcessingTimeWindows, TimeWindow,
                                          TumblingEventTimeWindows, TumblingProcessingTimeWindows, WindowAssigner)
from millstream.datastream.triggers import EventTimeTrigger, ProcessingTimeTrigger
from millstream.table.expression import epoch_millis, from_epoch_millis
from millstream.table.runtime_functions import AggCall, GroupState, row_of
from millstream.table.window import WindowSpec

__all__ = ["RowtimeAssigner", "window_assigner", "WindowAccumulate", "WindowEmit", "WindowTVFFunction",
           "CumulativeWindows", "OverAggregateFunction", "frame_values", "TopN", "RankFunction",
           "DeduplicateFunction", "assign_windows"]


class RowtimeAssigner(TimestampAssigner):
    """A row's event time: its rowtime column (WATERMARK FOR <column>)."""

    def __init__(self, column: int) -> None:
        self.column = column

    def extract_timestamp(self, value: Row, record_timestamp: int) -> int:
        ts = value[self.column]
        if ts is None:
            raise ValueError(f"a rowtime attribute must not be null (column {self.column} of {value})")
        return epoch_millis(ts)


# -- windows ----------------------------------------------------------------------------------


class CumulativeWindows(WindowAssigner):
    """CUMULATE: windows that start every ``max_size`` and end every ``step`` after their start
    (``[0, 2)``, ``[0, 4)``, ... ``[0, max)``); a row is in each of them that contains it."""

    def __init__(self, max_size: int, step: int, event_time: bool, offset: int = 0) -> None:
        if step <= 0 or max_size % step:
            raise ValueError(f"CUMULATE needs a step that divides the max size, got step {step} ms and "
                             f"max size {max_size} ms")
        self.max_size, self.step, self.event_time, self.offset = max_size, step, event_time, offset

    def assign_windows(self, element: Any, timestamp: int, context: Any) -> list[TimeWindow]:
        t = timestamp if self.event_time else int(context.get_current_processing_time())
        spec = WindowSpec("cumulate", 0, "", self.max_size, self.step, offset=self.offset)
        return [TimeWindow(s, e) for s, e in assign_windows(spec, t)]

    def get_default_trigger(self, env: Any = None) -> Any:
        return EventTimeTrigger() if self.event_time else ProcessingTimeTrigger()

    def is_event_time(self) -> bool:
        return self.event_time

    def __repr__(self) -> str:
        return f"CumulativeWindows({self.max_size}, {self.step})"


def assign_windows(spec: WindowSpec, t: int) -> list[tuple[int, int]]:
    """The [start, end) windows (ms) of kind tumble / hop / cumulate that contain time ``t``; window
    starts (and CUMULATE's step ends) are shifted by the spec's offset."""
    o = spec.offset
    if spec.kind == "tumble":
        start = t - (t - o) % spec.size
        return [(start, start + spec.size)]
    if spec.kind == "hop":
        last = t - (t - o) % spec.slide
        return [(s, s + spec.size) for s in range(last, t - spec.size, -spec.slide)]
    if spec.kind == "cumulate":
        start = t - (t - o) % spec.size
        first_end = t - (t - o) % spec.slide + spec.slide
        return [(start, e) for e in range(first_end, start + spec.size + 1, spec.slide)]
    raise ValueError(f"a {spec.kind} window is assigned by merging, not per row")


def window_assigner(spec: WindowSpec) -> Any:
    """Millstream's window assigner for a table window."""
    size, slide, gap = Duration.of_millis(spec.size), Duration.of_millis(spec.slide), Duration.of_millis(spec.gap)
    offset = Duration.of_millis(spec.aligned_offset)
    if spec.kind == "tumble":
        return (TumblingEventTimeWindows if spec.event_time else TumblingProcessingTimeWindows).of(size, offset)
    if spec.kind == "hop":
        return (SlidingEventTimeWindows if spec.event_time else SlidingProcessingTimeWindows).of(size, slide, offset)
    if spec.kind == "session":
        return (EventTimeSessionWindows if spec.event_time else ProcessingTimeSessionWindows).with_gap(gap)
    if spec.kind == "cumulate":
        return CumulativeWindows(spec.size, spec.slide, spec.event_time, spec.aligned_offset)
    raise ValueError(f"unknown window kind {spec.kind}")


def merge_accumulator(call: AggCall, a: Any, b: Any) -> Any:
    """Two accumulators of one aggregate as one (session windows merge their panes)."""
    if hasattr(call, "merge"):  # a pandas UDAF's argument lists (millstream.table.vectorized)
        return call.merge(a, b)
    if call.func in ("min", "max"):
        out = dict(a)
        for v, n in b.items():
            out[v] = out.get(v, 0) + n
        return out
    return [call.round(a[0] + b[0]), a[1] + b[1]]


class WindowAccumulate(AggregateFunction):
    """The aggregates of one window pane, incrementally (a :class:`GroupState` per pane)."""

    def __init__(self, calls: Sequence[AggCall]) -> None:
        self.calls = tuple(calls)

    def create_accumulator(self) -> GroupState:
        return GroupState.new(self.calls)

    def add(self, value: Row, accumulator: GroupState) -> GroupState:
        accumulator.apply(self.calls, list(value), True)
        return accumulator

    def get_result(self, accumulator: GroupState) -> tuple[Any, ...]:
        return accumulator.values(self.calls)

    def merge(self, acc_a: GroupState, acc_b: GroupState) -> GroupState:
        accs = [merge_accumulator(c, a, b) for c, a, b in zip(self.calls, acc_a.accs, acc_b.accs)]
        return GroupState(accs, acc_a.rows + acc_b.rows)


class WindowEmit(ProcessWindowFunction):
    """A fired window's row: the group keys, the aggregates, then the window properties asked
    for (``start`` / ``end`` TIMESTAMP(3), ``rowtime`` = end - 1 ms, ``proctime``)."""

    def __init__(self, properties: Sequence[str]) -> None:
        self.properties = tuple(properties)

    def process(self, key: Any, context: Any, elements: Iterable[tuple[Any, ...]]) -> Iterable[Row]:
        window = context.window()
        for values in elements:
            props = []
            for p in self.properties:
                if p == "start":
                    props.append(from_epoch_millis(window.start))
                elif p == "end":
                    props.append(from_epoch_millis(window.end))
                elif p == "rowtime":
                    props.append(from_epoch_millis(window.end - 1))
                else:
                    props.append(from_epoch_millis(int(context.current_processing_time())))
            yield row_of(tuple(key) + tuple(values) + tuple(props))


class WindowTVFFunction(FlatMapFunction):
    """A window table function (TUMBLE / HOP / CUMULATE) without aggregation: each row once per
    window that contains its time column, with window_start, window_end and window_time."""

    def __init__(self, spec: WindowSpec) -> None:
        self.spec = spec

    def flat_map(self, value: Row) -> Iterable[Row]:
        values = list(value)
        t = epoch_millis(values[self.spec.time_col])
        for start, end in assign_windows(self.spec, t):
            yield row_of(values + [from_epoch_millis(start), from_epoch_millis(end), from_epoch_millis(end - 1)],
                         value.get_row_kind())


# -- OVER aggregation ---------------------------------------------------------------------------


def frame_values(calls: Sequence[AggCall], frame: Sequence[Sequence[Any]]) -> tuple[Any, ...]:
    """The aggregates of the rows of one over frame."""
    state = GroupState.new(calls)
    for r in frame:
        state.apply(calls, r, True)
    return state.values(calls)


class OverAggregateFunction(KeyedProcessFunction):
    """Flink's OverAggregate per partition key, ordered by a time attribute.

    Event time: a row waits (keyed state, a timer at its rowtime) until the watermark passes it,
    then rows are processed in rowtime order, so the result does not depend on arrival order; a row
    whose rowtime is not after the last time processed for its key is late and dropped (Flink's
    RowTime*OverFunction, whose last processed time starts at 0). Processing time: rows are
    processed as they arrive. ``rows``: the frame is the ``preceding`` rows before the current one
    (None: unbounded), in order; otherwise (RANGE) the rows whose time is at most ``preceding`` ms
    before the current row's, peers (same time) included. Each row leaves with its aggregates
    appended, as an insert."""

    def __init__(self, order_col: int, event_time: bool, rows: bool, preceding: int | None,
                 calls: Sequence[AggCall]) -> None:
        self.order_col, self.event_time, self.rows, self.preceding = order_col, event_time, rows, preceding
        self.calls = tuple(calls)

    def open(self, runtime_context: Any) -> None:
        # pending: {rowtime: [rows]}; history: [(time, row)] the frames may still need; last: last time processed
        self.pending = runtime_context.get_state(ValueStateDescriptor("pending", Types.PICKLED_BYTE_ARRAY()))
        self.history = runtime_context.get_state(ValueStateDescriptor("history", Types.PICKLED_BYTE_ARRAY()))
        self.last = runtime_context.get_state(ValueStateDescriptor("last", Types.PICKLED_BYTE_ARRAY()))

    def process_element(self, value: Row, ctx: Any) -> Iterable[Row]:
        values = tuple(value)
        if not self.event_time:
            now = int(ctx.timer_service().current_processing_time())
            yield from self._process(now, [values])
            return
        t = epoch_millis(values[self.order_col])
        if t <= (self.last.value() or 0):
            return  # late
        pending = self.pending.value() or {}
        if t not in pending:
            ctx.timer_service().register_event_time_timer(t)
        pending.setdefault(t, []).append(values)
        self.pending.update(pending)

    def on_timer(self, timestamp: int, ctx: Any) -> Iterable[Row]:
        pending = self.pending.value() or {}
        rows = pending.pop(timestamp, [])
        self.pending.update(pending) if pending else self.pending.clear()
        self.last.update(timestamp)
        yield from self._process(timestamp, rows)

    def _process(self, t: int, rows: list[tuple[Any, ...]]) -> Iterable[Row]:
        history: list[tuple[int, tuple[Any, ...]]] = self.history.value() or []
        if self.rows:
            for r in rows:
                frame_rows = [h for _, h in history] + [r]
                if self.preceding is not None:
                    frame_rows = frame_rows[-(self.preceding + 1):]
                yield row_of(r + frame_values(self.calls, frame_rows))
                history.append((t, r))
                if self.preceding is not None and len(history) > self.preceding:
                    history = history[-self.preceding:]
        else:
            history += [(t, r) for r in rows]
            if self.preceding is not None:
                history = [(ht, h) for ht, h in history if ht >= t - self.preceding]
            aggs = frame_values(self.calls, [h for _, h in history])
            for r in rows:
                yield row_of(r + aggs)
        self.history.update(history)


# -- Top-N and deduplication -------------------------------------------------------------------


class TopN:
    """One partition's ranking of an insert-only input by ``order`` (column, ascending), the first
    ``n`` rows kept; ties keep arrival order. :meth:`add` returns the changes Flink's
    AppendOnlyTopNFunction emits: with the rank number, -U/+U for every rank that now holds
    another row (+I for a rank that was empty); without it, +I of the new row and -D of the row
    pushed out of the top ``n``."""

    def __init__(self, order: Sequence[tuple[int, bool]], n: int, with_rank: bool) -> None:
        self.order, self.n, self.with_rank = tuple(order), n, with_rank
        self.keys: list[tuple[Any, ...]] = []
        self.rows: list[tuple[Any, ...]] = []

    def _key(self, row: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(_Desc(row[c]) if not asc else _Asc(row[c]) for c, asc in self.order)

    def add(self, row: tuple[Any, ...]) -> list[Row]:
        key = self._key(row)
        pos = bisect.bisect_right(self.keys, key)
        if pos >= self.n:
            return []
        self.keys.insert(pos, key)
        self.rows.insert(pos, row)
        out: list[Row] = []
        if self.with_rank:
            for rank in range(pos, min(len(self.rows), self.n)):
                if rank + 1 < len(self.rows):
                    old = self.rows[rank + 1]
                    out.append(row_of(old + (rank + 1,), RowKind.UPDATE_BEFORE))
                    out.append(row_of(self.rows[rank] + (rank + 1,), RowKind.UPDATE_AFTER))
                else:
                    out.append(row_of(self.rows[rank] + (rank + 1,)))
        else:
            out.append(row_of(row))
            if len(self.rows) > self.n:
                out.append(row_of(self.rows[self.n], RowKind.DELETE))
        del self.keys[self.n:], self.rows[self.n:]
        return out


class _Asc:
    """A sort key part, ascending with nulls first (Flink's default for ASC)."""

    __slots__ = ("v",)

    def __init__(self, v: Any) -> None:
        self.v = v

    def __lt__(self, other: "_Asc") -> bool:
        if self.v is None or other.v is None:
            return self.v is None and other.v is not None
        return self.v < other.v

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Asc) and self.v == other.v


class _Desc(_Asc):
    """Descending with nulls last (Flink's default for DESC)."""

    def __lt__(self, other: "_Asc") -> bool:
        if self.v is None or other.v is None:
            return other.v is None and self.v is not None
        return self.v > other.v


class RankFunction(KeyedProcessFunction):
    """Top-N per partition key (``ROW_NUMBER() OVER (PARTITION BY .. ORDER BY ..) ... WHERE rn <= N``)
    on an insert-only input: a :class:`TopN` in keyed state."""

    def __init__(self, order: Sequence[tuple[int, bool]], n: int, with_rank: bool) -> None:
        self.order, self.n, self.with_rank = tuple(order), n, with_rank

    def open(self, runtime_context: Any) -> None:
        self.state = runtime_context.get_state(ValueStateDescriptor("topn", Types.PICKLED_BYTE_ARRAY()))

    def process_element(self, value: Row, ctx: Any) -> Iterable[Row]:
        if value.get_row_kind() not in (RowKind.INSERT, RowKind.UPDATE_AFTER):
            raise ValueError("RankFunction takes an insert-only input; the planner gives an updating one to "
                             "rank_functions.RetractableRankFunction (Flink's RetractStrategy)")
        top = self.state.value() or TopN(self.order, self.n, self.with_rank)
        out = top.add(tuple(value))
        self.state.update(top)
        yield from out


class DeduplicateFunction(KeyedProcessFunction):
    """Deduplication (``ROW_NUMBER() OVER (PARTITION BY k ORDER BY time) = 1``), Flink's
    Deduplicate functions: ordered by proctime, keep the first row (later ones are dropped, an
    insert-only result) or the last (-U of the kept row, +U of the new one); ordered by rowtime,
    the row with the smallest (first) or largest (last, ties: the later) rowtime wins, and a
    winner that changes is retracted -U/+U."""

    def __init__(self, keep_last: bool, rowtime_col: int | None, with_rank: bool) -> None:
        self.keep_last, self.rowtime_col, self.with_rank = keep_last, rowtime_col, with_rank

    def open(self, runtime_context: Any) -> None:
        self.state = runtime_context.get_state(ValueStateDescriptor("kept", Types.PICKLED_BYTE_ARRAY()))

    def _out(self, row: tuple[Any, ...], kind: RowKind) -> Row:
        return row_of(row + ((1,) if self.with_rank else ()), kind)

    def process_element(self, value: Row, ctx: Any) -> Iterable[Row]:
        row = tuple(value)
        kept = self.state.value()
        if kept is None:
            self.state.update(row)
            yield self._out(row, RowKind.INSERT)
            return
        if self.rowtime_col is None:
            replaces = self.keep_last
        else:
            new, old = epoch_millis(row[self.rowtime_col]), epoch_millis(kept[self.rowtime_col])
            replaces = new >= old if self.keep_last else new < old
        if replaces:
            self.state.update(row)
            yield self._out(kept, RowKind.UPDATE_BEFORE)
            yield self._out(row, RowKind.UPDATE_AFTER)
