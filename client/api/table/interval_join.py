"""Interval joins (Flink's time-windowed joins): a join whose condition bounds one side's time
attribute by the other's, ``l.ts BETWEEN r.ts - INTERVAL '4' HOUR AND r.ts`` (or ``>``, ``>=``,
``<``, ``<=`` comparisons, with ``+``/``-`` intervals on either side).

Planner part: :func:`extract_bounds` finds the bounds in a join condition the way Flink's
IntervalJoinUtil does (both time attributes rowtime, or both proctime; a lower and an upper bound
of ``l.ts - r.ts``; a strict bound moves by 1 ms), and :func:`interval_join_of` makes an
:class:`IntervalJoin` node of it. Runtime part: :class:`IntervalJoinCore` is one join key's two row
caches and Flink's TimeIntervalJoin rules; :class:`IntervalJoinFunction` keeps it in keyed state
with timers that expire rows.

Semantics (Flink's): a left row at ``tl`` pairs with each right row at ``tr`` where ``lower <= tl -
tr <= upper`` (and the rest of the condition holds). Output is append-only (+I). A row stays cached
while the other side's operator time (the watermark for rowtime, the clock for proctime) has not
passed the last time a partner could have; then it is dropped, and an outer join emits it padded
with nulls if it never joined. A row that arrives after that point joins what is still cached and,
if outer and unjoined, is emitted padded at once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from millstream.common.row import Row, RowKind
from millstream.common.typeinfo import Types
from millstream.datastream.functions import KeyedCoProcessFunction
from millstream.datastream.state import ValueStateDescriptor
from millstream.table import plan as p
from millstream.table import planner
from millstream.table.expression import Resolved, TableException, epoch_millis
from millstream.table.runtime_functions import row_of
from millstream.table.types import DataTypes

__all__ = ["IntervalJoin", "Bounds", "extract_bounds", "interval_join_of", "IntervalJoinCore", "IntervalJoinFunction",
           "JOIN_TYPES", "join_columns", "output_delay"]

JOIN_TYPES = ("INNER", "LEFT", "RIGHT", "FULL")
LONG_MAX = 2**63 - 1

_FLIP = {"greater_than": "less_than", "greater_than_or_equal": "less_than_or_equal", "less_than": "greater_than",
         "less_than_or_equal": "greater_than_or_equal"}


def join_columns(left: p.Columns, right: p.Columns, join_type: str) -> p.Columns:
    """The joined row's columns: a side that an outer join may pad with nulls becomes nullable."""
    pad_left, pad_right = join_type in ("RIGHT", "FULL"), join_type in ("LEFT", "FULL")
    return tuple((n, t.nullable_() if pad_left else t) for n, t in left) + \
        tuple((n, t.nullable_() if pad_right else t) for n, t in right)


@dataclass(frozen=True)
class Bounds:
    """``lower <= l.ts - r.ts <= upper`` (ms) on left column ``left_time`` and right column
    ``right_time`` (indices within each side); ``event_time``: both are rowtime attributes."""

    left_time: int
    right_time: int
    lower: int
    upper: int
    event_time: bool


def _conjuncts(c: Resolved | None) -> list[Resolved]:
    if c is None:
        return []
    if c.kind == "call" and c.value == "and":
        return [x for a in c.args for x in _conjuncts(a)]
    return [c]


def _time_plus(e: Resolved) -> tuple[int, int] | None:
    """(column, ms) of ``col``, ``col + INTERVAL``, ``col - INTERVAL`` (or ``INTERVAL + col``)."""
    if e.kind == "ref":
        return e.value, 0
    if e.kind == "cast" and e.args[0].kind == "ref" and e.args[0].dtype.root == e.dtype.root:
        return e.args[0].value, 0
    if e.kind == "call" and e.value in ("plus", "minus") and len(e.args) == 2:
        a, b = e.args
        if b.kind == "lit" and hasattr(b.value, "total_seconds") and (base := _time_plus(a)) is not None:
            ms = int(b.value.total_seconds() * 1000)
            return base[0], base[1] + (ms if e.value == "plus" else -ms)
        if e.value == "plus" and a.kind == "lit" and hasattr(a.value, "total_seconds") and (base := _time_plus(b)):
            return base[0], base[1] + int(a.value.total_seconds() * 1000)
    return None


def _comparisons(c: Resolved) -> list[tuple[Resolved, str, Resolved]] | None:
    if c.kind == "call" and c.value in _FLIP:
        return [(c.args[0], c.value, c.args[1])]
    if c.kind == "call" and c.value == "equals":
        return [(c.args[0], "greater_than_or_equal", c.args[1]), (c.args[0], "less_than_or_equal", c.args[1])]
    if c.kind == "call" and c.value == "between":
        x, lo, hi = c.args
        return [(x, "greater_than_or_equal", lo), (x, "less_than_or_equal", hi)]
    return None


def extract_bounds(condition: Resolved | None, left: p.Columns, right: p.Columns) -> tuple[Bounds, Resolved | None] | None:
    """The time bounds in a join condition (over the joined row) and what else it says; None when
    it has no lower and upper bound between a left and a right time attribute of one kind."""
    width = len(left)
    lower: int | None = None
    upper: int | None = None
    times: tuple[int, int] | None = None
    rest: list[Resolved] = []
    for c in _conjuncts(condition):
        found: list[tuple[tuple[int, int], str, int]] = []
        for a, op, b in _comparisons(c) or []:
            ta, tb = _time_plus(a), _time_plus(b)
            if ta is None or tb is None:
                found = []
                break
            if ta[0] >= width > tb[0]:  # right OP left: flip to left OP' right
                ta, tb, op = tb, ta, _FLIP[op]
            if not (ta[0] < width <= tb[0]):
                found = []
                break
            lt, rt = left[ta[0]][1].time_attr, right[tb[0] - width][1].time_attr
            if lt is None or lt != rt:
                found = []
                break
            # l + ca OP r + cb  <=>  l - r OP cb - ca
            found.append(((ta[0], tb[0] - width), op, tb[1] - ta[1]))
        if not found or (times is not None and any(f[0] != times for f in found)):
            rest.append(c)
            continue
        for cols, op, v in found:
            times = cols
            if op.startswith("greater"):
                v = v + 1 if op == "greater_than" else v
                lower = v if lower is None else max(lower, v)
            else:
                v = v - 1 if op == "less_than" else v
                upper = v if upper is None else min(upper, v)
    if times is None or lower is None or upper is None:
        return None
    remaining: Resolved | None = None
    for c in rest:
        remaining = c if remaining is None else planner._and(remaining, c)
    event_time = left[times[0]][1].time_attr == "ROWTIME"
    return Bounds(times[0], times[1], lower, upper, event_time), remaining


@dataclass(frozen=True, eq=False)
class IntervalJoin(p.TwoInputNode):
    """An interval join of ``left`` and ``right`` on equal keys and time ``bounds``; ``condition``:
    the rest of the join condition over the joined row. Insert-only."""

    bounds: Bounds = None  # type: ignore[assignment]
    condition: Resolved | None = None
    join_type: str = "INNER"

    @property
    def updating(self) -> bool:
        return False

    def describe(self) -> str:
        b = self.bounds
        names = self.names
        lt, rt = names[b.left_time], names[len(self.left.columns) + b.right_time]
        eqs = [f"=({names[a]}, {names[len(self.left.columns) + k]})" for a, k in zip(self.left_keys, self.right_keys)]
        where = " AND ".join(eqs + [f">=({lt}, +({rt}, {b.lower}:INTERVAL))", f"<=({lt}, +({rt}, {b.upper}:INTERVAL))"]
                             + ([str(self.condition)] if self.condition is not None else []))
        kind = {"INNER": "InnerJoin", "LEFT": "LeftOuterJoin", "RIGHT": "RightOuterJoin", "FULL": "FullOuterJoin"}
        return (f"IntervalJoin(joinType=[{kind[self.join_type]}], windowBounds=[isRowTime={str(b.event_time).lower()}, "
                f"leftLowerBound={b.lower}, leftUpperBound={b.upper}, leftTimeIndex={b.left_time}, "
                f"rightTimeIndex={b.right_time}], where=[{where}], select=[{', '.join(names)}])")


def interval_join_of(left: p.PlanNode, right: p.PlanNode, left_keys: Sequence[int], right_keys: Sequence[int],
                     rest: Resolved | None, join_type: str) -> IntervalJoin | None:
    """The interval join of a join whose non-equi condition ``rest`` bounds the time attributes;
    None when it does not. Both inputs' time attributes stay time attributes (Flink's
    RelTimeIndicatorConverter keeps them for an interval join, whose operator holds its output
    watermark back by the bounds: see :func:`output_delay`), so a window over the join works."""
    # an equality of the two time attributes (``l.ts = r.ts``) is the bound [0, 0], not a join key
    width = len(left.columns)
    keys, times = [], []
    for a, b in zip(left_keys, right_keys):
        lt, rt = left.columns[a][1], right.columns[b][1]
        if lt.time_attr is not None and lt.time_attr == rt.time_attr:
            times.append(Resolved("call", DataTypes.BOOLEAN(), (Resolved("ref", lt, value=a, text=left.names[a]),
                                  Resolved("ref", rt, value=width + b, text=right.names[b])), "equals",
                                  f"=({left.names[a]}, {right.names[b]})"))
        else:
            keys.append((a, b))
    for c in times:
        rest = c if rest is None else planner._and(rest, c)
    found = extract_bounds(rest, left.columns, right.columns)
    if found is None:
        return None
    left_keys, right_keys = tuple(a for a, _ in keys), tuple(b for _, b in keys)
    bounds, remaining = found  # empty bounds (lower > upper) are valid, as in Flink: no row pairs, outer rows pad
    columns = join_columns(left.columns, right.columns, join_type)
    return IntervalJoin(columns, left, right, tuple(left_keys), tuple(right_keys), bounds, remaining, join_type)


# -- runtime ------------------------------------------------------------------------------------


def output_delay(bounds: Bounds) -> int:
    """How far (ms) the join's output watermark trails its input watermark. Flink's is the longer
    of the two sides' reaches, ``max(-lower, upper)`` (RowTimeIntervalJoin.getMaxOutputDelay with
    no allowed lateness): a row joins only partners within its reach, so a joined row's times are
    at most that far behind the watermark. Millstream keeps a row one ms beyond its reach (see
    :meth:`IntervalJoinCore.expiry`), so an outer row padded at that point could be exactly at the
    held-back watermark: the hold-back is one ms more, and such a row is never late downstream."""
    return max(-bounds.lower, bounds.upper, 0) + 1


class IntervalJoinCore:
    """One join key's caches, ``{time: [[row, joined], ...]}`` per side, and Flink's rules for a
    new row and for expiring cached ones. ``lower``/``upper`` bound ``left time - right time``."""

    def __init__(self, lower: int, upper: int, join_type: str, condition: Resolved | None,
                 left_width: int, right_width: int) -> None:
        self.lower, self.upper, self.join_type, self.condition = lower, upper, join_type, condition
        self.left_width, self.right_width = left_width, right_width
        self.caches: tuple[dict[int, list[list[Any]]], dict[int, list[list[Any]]]] = ({}, {})

    # how long past its own time a row of each side can still meet a partner
    def _reach(self, left: bool) -> int:
        return -self.lower if left else self.upper

    def _outer(self, left: bool) -> bool:
        return self.join_type in (("LEFT", "FULL") if left else ("RIGHT", "FULL"))

    def _pad(self, row: tuple[Any, ...], left: bool) -> Row:
        return row_of(list(row) + [None] * self.right_width if left else [None] * self.left_width + list(row))

    def process(self, row: tuple[Any, ...], t: int, left: bool, operator_time: int) -> list[Row]:
        """A new row of one side at time ``t`` when the operator time (watermark or clock) is
        ``operator_time``: its joined rows, or its padded row when outer and it can join no more."""
        out: list[Row] = []
        others = self.caches[1 if left else 0]
        lo, hi = (t - self.upper, t - self.lower) if left else (t + self.lower, t + self.upper)
        joined = False
        for ot, entries in others.items():
            if not lo <= ot <= hi:
                continue
            for entry in entries:
                values = row + entry[0] if left else entry[0] + row
                if self.condition is None or self.condition.eval(list(values)) is True:
                    out.append(row_of(list(values)))
                    joined = True
                    entry[1] = True
        out += self.expire(not left, operator_time)
        if operator_time < t + self._reach(left):
            self.caches[0 if left else 1].setdefault(t, []).append([row, joined])
        elif not joined and self._outer(left):
            out.append(self._pad(row, left))
        return out

    def expiry(self, t: int, left: bool) -> int:
        """The operator time from which a row of ``left``'s side at ``t`` can join no more."""
        return t + self._reach(left) + 1

    def expire(self, left: bool, operator_time: int) -> list[Row]:
        """Drops the rows of one side that can join no more; an outer side's unjoined ones leave padded."""
        cache = self.caches[0 if left else 1]
        out: list[Row] = []
        for t in [t for t in cache if operator_time >= self.expiry(t, left)]:
            for row, joined in cache.pop(t):
                if not joined and self._outer(left):
                    out.append(self._pad(row, left))
        return out

    @property
    def empty(self) -> bool:
        return not self.caches[0] and not self.caches[1]


class IntervalJoinFunction(KeyedCoProcessFunction):
    """Flink's RowTimeIntervalJoin / ProcTimeIntervalJoin: an :class:`IntervalJoinCore` per key in
    keyed state, and one timer per cached row's expiry (event time: the watermark; processing
    time: the clock) that drops it (padded out when outer and unjoined)."""

    def __init__(self, bounds: Bounds, join_type: str, condition: Resolved | None, left_width: int,
                 right_width: int) -> None:
        self.bounds, self.join_type, self.condition = bounds, join_type, condition
        self.left_width, self.right_width = left_width, right_width

    def open(self, runtime_context: Any) -> None:
        self.state = runtime_context.get_state(ValueStateDescriptor("interval-join", Types.PICKLED_BYTE_ARRAY()))

    def _core(self) -> IntervalJoinCore:
        core = self.state.value()
        if core is None:
            core = IntervalJoinCore(self.bounds.lower, self.bounds.upper, self.join_type, self.condition,
                                    self.left_width, self.right_width)
        return core

    def _save(self, core: IntervalJoinCore) -> None:
        self.state.clear() if core.empty else self.state.update(core)

    def _operator_time(self, ctx: Any) -> int:
        ts = ctx.timer_service()
        return int(ts.current_watermark()) if self.bounds.event_time else int(ts.current_processing_time())

    def _process(self, value: Row, ctx: Any, left: bool) -> Iterable[Row]:
        if value.get_row_kind() not in (RowKind.INSERT, RowKind.UPDATE_AFTER):
            raise TableException("An interval join needs insert-only inputs (Flink's too): got a retraction")
        row = tuple(value)
        b = self.bounds
        if b.event_time:
            ts = row[b.left_time if left else b.right_time]
            if ts is None:
                return []  # Flink drops a row whose rowtime is null: it can join nothing
            t = epoch_millis(ts)
        else:
            t = int(ctx.timer_service().current_processing_time())
        core = self._core()
        cached_before = t in core.caches[0 if left else 1]
        out = core.process(row, t, left, self._operator_time(ctx))
        if not cached_before and t in core.caches[0 if left else 1]:
            expiry = core.expiry(t, left)
            timers = ctx.timer_service()
            timers.register_event_time_timer(expiry) if b.event_time else timers.register_processing_time_timer(expiry)
        self._save(core)
        return out

    def process_element1(self, value: Row, ctx: Any) -> Iterable[Row]:
        return self._process(value, ctx, True)

    def process_element2(self, value: Row, ctx: Any) -> Iterable[Row]:
        return self._process(value, ctx, False)

    def on_timer(self, timestamp: int, ctx: Any) -> Iterable[Row]:
        core = self.state.value()
        if core is None:
            return []
        out = core.expire(True, timestamp) + core.expire(False, timestamp)
        self._save(core)
        return out


def _translate(node: IntervalJoin, env: Any, batch: bool) -> Any:
    for side in node.inputs:
        if planner.really_updating(side):
            raise TableException("An interval join needs insert-only inputs; this one is updating (Flink supports "
                                 "interval joins on append-only tables only)")
    left = planner.translate(node.left, env, batch)
    right = planner.translate(node.right, env, batch)
    connected = left.connect(right).key_by(planner.KeyOf(node.left_keys), planner.KeyOf(node.right_keys))
    f = IntervalJoinFunction(node.bounds, node.join_type, node.condition, len(node.left.columns),
                             len(node.right.columns))
    out = connected.process(f).name(node.describe())
    if node.bounds.event_time:  # Flink's KeyedCoProcessOperatorWithWatermarkDelay
        out.get_transformation().factory.watermark_delay = output_delay(node.bounds)
    return out.set_parallelism(1) if not node.left_keys else out


planner.register_translation(IntervalJoin, _translate)
