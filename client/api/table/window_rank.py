"""Window Top-N (Flink's WindowRank): ``ROW_NUMBER() OVER (PARTITION BY window_start, window_end
[, ...] ORDER BY ...) ... WHERE rn <= N`` over a window TVF or a window aggregation. Unlike a
regular Top-N it emits nothing until the window ends, then the window's final top N rows once, as
inserts (an append-only result), and drops the window's state. A row of a window the watermark
has already passed is late and dropped.

:func:`window_rank_rule` is the planner rule (a Rank whose partition keys hold the window's start
and end becomes a :class:`WindowRank`); :func:`top_rows` the pure ranking;
:class:`WindowRankFunction` the keyed function with a timer at each window's end.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from millstream.common.row import Row, RowKind
from millstream.common.typeinfo import Types
from millstream.datastream.functions import KeyedProcessFunction
from millstream.datastream.state import ValueStateDescriptor
from millstream.table import plan as p
from millstream.table import planner
from millstream.table.expression import TableException, epoch_millis
from millstream.table.runtime_functions import row_of
from millstream.table.time_functions import _Asc, _Desc
from millstream.table.window_join import window_columns

__all__ = ["WindowRank", "window_rank_rule", "top_rows", "WindowRankFunction"]


@dataclass(frozen=True, eq=False)
class WindowRank(p.SingleInputNode):
    """Top-N per window (and further partition keys): ``end`` is the input's window_end column."""

    partition: tuple[int, ...] = ()
    order: tuple[tuple[int, bool], ...] = ()
    n: int = 1
    with_rank: bool = True
    end: int = 0
    window: Any = None

    @property
    def updating(self) -> bool:
        return False

    def describe(self) -> str:
        names = self.input.names
        order = ", ".join(f"{names[c]} {'ASC' if asc else 'DESC'}" for c, asc in self.order)
        return (f"WindowRank(window=[{self.window.describe()}], rankType=[ROW_NUMBER], rankRange=[rankStart=1, "
                f"rankEnd={self.n}], partitionBy=[{', '.join(names[k] for k in self.partition)}], orderBy=[{order}], "
                f"select=[{', '.join(self.names)}])")


def window_rank_rule(node: p.Rank) -> WindowRank | None:
    """*Window rank*: a Top-N partitioned by window_start and window_end of a windowed input is a
    Window Top-N. None: not such a plan."""
    found = window_columns(node.input)
    if found is None:
        return None
    spec, roles = found
    partition_roles = {roles.get(k) for k in node.partition}
    if not {"start", "end"} <= partition_roles:
        return None
    if spec.kind == "session":
        raise TableException("Window Top-N over SESSION windows is not supported")
    end = next(k for k in node.partition if roles.get(k) == "end")
    return WindowRank(node.columns, node.input, node.partition, node.order, node.n, node.with_rank, end, spec)


def top_rows(rows: list[tuple[Any, ...]], order: Sequence[tuple[int, bool]], n: int, with_rank: bool) -> list[Row]:
    """A window's final top ``n`` rows by ``order`` as inserts (ties keep arrival order)."""
    ranked = sorted(rows, key=lambda r: tuple(_Asc(r[c]) if asc else _Desc(r[c]) for c, asc in order))[:n]
    return [row_of(r + ((i + 1,) if with_rank else ()), RowKind.INSERT) for i, r in enumerate(ranked)]


class WindowRankFunction(KeyedProcessFunction):
    """Keyed by the partition (which holds the window): the window's rows until a timer at its
    last millisecond (event time, or processing time for a proctime window) emits the top N."""

    def __init__(self, order: Sequence[tuple[int, bool]], n: int, with_rank: bool, end: int, event_time: bool) -> None:
        self.order, self.n, self.with_rank, self.end, self.event_time = tuple(order), n, with_rank, end, event_time

    def open(self, runtime_context: Any) -> None:
        self.state = runtime_context.get_state(ValueStateDescriptor("window-rank", Types.PICKLED_BYTE_ARRAY()))

    def process_element(self, value: Row, ctx: Any) -> Iterable[Row]:
        if value.get_row_kind() not in (RowKind.INSERT, RowKind.UPDATE_AFTER):
            raise TableException("Window Top-N needs an insert-only input: got a retraction")
        row = tuple(value)
        if row[self.end] is None:
            return []
        fire = epoch_millis(row[self.end]) - 1
        timers = ctx.timer_service()
        if self.event_time and fire <= timers.current_watermark():
            return []  # late: the window's top N has been emitted
        rows = self.state.value()
        if rows is None:
            rows = []
            timers.register_event_time_timer(fire) if self.event_time else timers.register_processing_time_timer(fire)
        rows.append(row)
        self.state.update(rows)
        return []

    def on_timer(self, timestamp: int, ctx: Any) -> Iterable[Row]:
        rows = self.state.value() or []
        self.state.clear()
        return top_rows(rows, self.order, self.n, self.with_rank)


def _translate(node: WindowRank, env: Any, batch: bool) -> Any:
    stream = planner.translate(node.input, env, batch).key_by(planner.KeyOf(node.partition))
    f = WindowRankFunction(node.order, node.n, node.with_rank, node.end, node.window.event_time)
    return stream.process(f).name(node.describe())


planner.register_translation(WindowRank, _translate)
planner.register_rank_rule(window_rank_rule)
