"""Window joins (Flink's WindowJoin): a join of two window TVF results whose condition equates
both sides' ``window_start`` and ``window_end`` (and, usually, keys). Each window's rows of both
sides are joined once, when the watermark passes the window's end; the result is append-only and
a window's state goes then. A row of a window the watermark has already passed is late and
dropped, as Flink's WindowJoinOperator drops it.

Join types: INNER, LEFT, RIGHT and FULL (a row with no partner in its window leaves padded with
nulls), SEMI and ANTI (the left rows that have, or have not, a partner; only the left columns).

Planner part: :func:`window_join_of` recognises the plan (each side a window TVF or a window
aggregation, possibly under Calcs that keep ``window_start``/``window_end`` as columns, both with
the same window). Runtime
part: :func:`join_window` (pure) and :class:`WindowJoinFunction` (keyed state and a timer per
window).
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
from millstream.table.interval_join import join_columns
from millstream.table.runtime_functions import row_of

__all__ = ["WindowJoin", "window_join_of", "window_columns", "join_window", "WindowJoinFunction",
           "WINDOW_JOIN_TYPES"]

WINDOW_JOIN_TYPES = ("INNER", "LEFT", "RIGHT", "FULL", "SEMI", "ANTI")


def window_columns(node: p.PlanNode) -> tuple[Any, dict[int, str]] | None:
    """The window under ``node`` and its columns that are the window's ``start``/``end``/``time``:
    a window TVF or a window TVF's aggregation, possibly under Calcs. None: not windowed."""
    if isinstance(node, p.WindowTVF):
        width = len(node.input.columns)
        return node.window, {width: "start", width + 1: "end", width + 2: "time"}
    if isinstance(node, p.WindowAggregate) and not node.group_window:
        first = len(node.keys) + len(node.calls)
        return node.window, {first + i: {"rowtime": "time", "proctime": "time"}.get(r, r)
                             for i, r in enumerate(node.properties)}
    if isinstance(node, p.Calc):
        below = window_columns(node.input)
        if below is None:
            return None
        spec, roles = below
        return spec, {i: roles[e.value] for i, e in enumerate(node.projections) if e.kind == "ref" and e.value in roles}
    return None


@dataclass(frozen=True, eq=False)
class WindowJoin(p.TwoInputNode):
    """A window join: rows of one window of ``left`` and ``right`` with equal ``left_keys`` /
    ``right_keys``; ``left_window``/``right_window``: each side's (window_start, window_end)
    columns; ``condition``: the rest of the condition over the joined row."""

    left_window: tuple[int, int] = (0, 0)
    right_window: tuple[int, int] = (0, 0)
    condition: Resolved | None = None
    join_type: str = "INNER"
    window: Any = None

    @property
    def updating(self) -> bool:
        return False

    def describe(self) -> str:
        ln, rn = self.left.names, self.right.names
        eqs = [f"=({ln[a]}, {rn[b]})" for a, b in zip(self.left_keys, self.right_keys)]
        where = " AND ".join(eqs + ([str(self.condition)] if self.condition is not None else [])) or "true"
        kind = {"INNER": "InnerJoin", "LEFT": "LeftOuterJoin", "RIGHT": "RightOuterJoin", "FULL": "FullOuterJoin",
                "SEMI": "LeftSemiJoin", "ANTI": "LeftAntiJoin"}[self.join_type]
        w = self.window.describe()
        return (f"WindowJoin(leftWindow=[{w}], rightWindow=[{w}], joinType=[{kind}], where=[{where}], "
                f"select=[{', '.join(self.names)}])")


def window_join_of(left: p.PlanNode, right: p.PlanNode, left_keys: Sequence[int], right_keys: Sequence[int],
                   rest: Resolved | None, join_type: str) -> WindowJoin | None:
    """The window join of an equi-join whose keys pair both sides' window_start and window_end;
    None when it is not one. A join of windowed tables that equates only one of them is an error,
    as in Flink."""
    # a window aggregation is one only once the planner's rule made it so
    left, right = planner.optimize(left), planner.optimize(right)
    lw, rw = window_columns(left), window_columns(right)
    if lw is None or rw is None:
        return None
    (lspec, lroles), (rspec, rroles) = lw, rw
    window: dict[str, tuple[int, int]] = {}
    keys = []
    for a, b in zip(left_keys, right_keys):
        role = lroles.get(a)
        if role in ("start", "end") and rroles.get(b) == role:
            window[role] = (a, b)
        else:
            keys.append((a, b))
    if not window:
        return None
    if set(window) != {"start", "end"}:
        raise TableException("A window join needs both window_start and window_end of the two sides in its equality "
                             "condition (Flink's rule); this one has only " + ", ".join(f"window_{r}" for r in window))
    if (lspec.kind, lspec.size, lspec.slide, lspec.offset) != (rspec.kind, rspec.size, rspec.slide, rspec.offset):
        raise TableException(f"A window join needs the same windows on both sides, got {lspec.describe()} and "
                             f"{rspec.describe()}")
    if not (lspec.event_time and rspec.event_time):
        raise TableException("Millstream's window join needs event-time (rowtime) windows on both sides")
    if lspec.kind == "session":
        raise TableException("A window join over SESSION windows is not supported (Flink's neither)")
    if join_type in ("SEMI", "ANTI"):
        columns = tuple(left.columns)
    else:
        columns = join_columns(left.columns, right.columns, join_type)
    columns = tuple((n, t.as_time_attr(None)) for n, t in columns)
    return WindowJoin(columns, left, right, tuple(a for a, _ in keys), tuple(b for _, b in keys),
                      (window["start"][0], window["end"][0]), (window["start"][1], window["end"][1]), rest, join_type,
                      lspec)


# -- runtime ------------------------------------------------------------------------------------


def join_window(lefts: list[tuple[Any, ...]], rights: list[tuple[Any, ...]], join_type: str,
                condition: Resolved | None, left_width: int, right_width: int) -> list[Row]:
    """The rows one window's join emits, as inserts, given both sides' rows in that window and key."""
    out: list[Row] = []
    right_joined = [False] * len(rights)
    for left in lefts:
        matched = False
        for j, right in enumerate(rights):
            values = list(left + right)
            if condition is None or condition.eval(values) is True:
                matched = True
                right_joined[j] = True
                if join_type not in ("SEMI", "ANTI"):
                    out.append(row_of(values))
                elif join_type == "SEMI":
                    break
        if join_type == "SEMI" and matched or join_type == "ANTI" and not matched:
            out.append(row_of(list(left)))
        elif not matched and join_type in ("LEFT", "FULL"):
            out.append(row_of(list(left) + [None] * right_width))
    if join_type in ("RIGHT", "FULL"):
        out += [row_of([None] * left_width + list(r)) for r, j in zip(rights, right_joined) if not j]
    return out


class WindowJoinFunction(KeyedCoProcessFunction):
    """Keyed by the equi keys and the window: each side's rows of the window in keyed state until
    a timer at the window's last millisecond joins them (:func:`join_window`) and clears it."""

    def __init__(self, join_type: str, condition: Resolved | None, left_end: int, right_end: int,
                 left_width: int, right_width: int) -> None:
        self.join_type, self.condition = join_type, condition
        self.left_end, self.right_end, self.left_width, self.right_width = left_end, right_end, left_width, right_width

    def open(self, runtime_context: Any) -> None:
        self.state = runtime_context.get_state(ValueStateDescriptor("window-join", Types.PICKLED_BYTE_ARRAY()))

    def _process(self, value: Row, ctx: Any, side: int) -> Iterable[Row]:
        if value.get_row_kind() not in (RowKind.INSERT, RowKind.UPDATE_AFTER):
            raise TableException("A window join needs insert-only inputs: got a retraction")
        row = tuple(value)
        end = row[self.left_end if side == 0 else self.right_end]
        if end is None:
            return []
        fire = epoch_millis(end) - 1
        timers = ctx.timer_service()
        if fire <= timers.current_watermark():
            return []  # late: the window has already been joined
        rows = self.state.value()
        if rows is None:
            rows = ([], [])
            timers.register_event_time_timer(fire)
        rows[side].append(row)
        self.state.update(rows)
        return []

    def process_element1(self, value: Row, ctx: Any) -> Iterable[Row]:
        return self._process(value, ctx, 0)

    def process_element2(self, value: Row, ctx: Any) -> Iterable[Row]:
        return self._process(value, ctx, 1)

    def on_timer(self, timestamp: int, ctx: Any) -> Iterable[Row]:
        rows = self.state.value()
        self.state.clear()
        if rows is None:
            return []
        return join_window(rows[0], rows[1], self.join_type, self.condition, self.left_width, self.right_width)


def _translate(node: WindowJoin, env: Any, batch: bool) -> Any:
    left = planner.translate(node.left, env, batch)
    right = planner.translate(node.right, env, batch)
    lk, rk = node.left_keys + node.left_window, node.right_keys + node.right_window
    connected = left.connect(right).key_by(planner.KeyOf(lk), planner.KeyOf(rk))
    f = WindowJoinFunction(node.join_type, node.condition, node.left_window[1], node.right_window[1],
                           len(node.left.columns), len(node.right.columns))
    return connected.process(f).name(node.describe())


planner.register_translation(WindowJoin, _translate)
