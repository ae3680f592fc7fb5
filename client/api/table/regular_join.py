"""Regular (unbounded, non-windowed) equi-joins of every type: INNER, LEFT, RIGHT and FULL OUTER,
with Flink's streaming semantics (StreamingJoinOperator without unique keys).

:class:`RegularJoinCore` is one join key's two sides: each a multiset of rows, and for each row the
number of other-side rows it is *associated* with (joined under the non-equi condition). That
count decides when an outer side's null-padded row appears and disappears, as Flink's
OuterJoinRecordStateView does:

- an accumulating row (+I/+U) of an outer side with no match leaves padded (+I); with matches it
  leaves joined (+I), and each matched row of an outer other side whose count was 0 first takes
  its padded row back (-D);
- a retracting row (-U/-D) takes back what it had joined (-D from an outer side, else with its own
  kind), or its padded row (-D) when it had no match; each matched row of an outer other side whose
  count drops from 1 to 0 leaves padded again (+I);
- an inner join forwards the input's row kind (+I/+U, -U/-D).

:class:`RegularJoinFunction` keeps the core in keyed state. In batch mode it keeps both sides to
the end of input and emits the final join once (no retractions).
"""
from __future__ import annotations

from typing import Any, Iterable

from millstream.common.row import Row, RowKind
from millstream.common.typeinfo import Types
from millstream.datastream.functions import KeyedCoProcessFunction
from millstream.datastream.state import ValueStateDescriptor
from millstream.table.expression import Resolved
from millstream.table.runtime_functions import END_OF_INPUT, is_accumulate, row_of

__all__ = ["RegularJoinCore", "RegularJoinFunction", "OUTER_SIDES"]

# join type -> (left side outer, right side outer)
OUTER_SIDES = {"INNER": (False, False), "LEFT": (True, False), "RIGHT": (False, True), "FULL": (True, True)}

Side = dict[tuple[Any, ...], list[int]]  # row -> [copies, associations (of one copy)]


class RegularJoinCore:
    """One join key's rows of both sides and Flink's rules for a new or retracted row."""

    def __init__(self, join_type: str, condition: Resolved | None, left_width: int, right_width: int) -> None:
        self.outer = OUTER_SIDES[join_type]
        self.condition, self.widths = condition, (left_width, right_width)
        self.sides: tuple[Side, Side] = ({}, {})

    def _joined(self, row: tuple[Any, ...], other: tuple[Any, ...], left: bool) -> tuple[Any, ...]:
        return row + other if left else other + row

    def _matches(self, row: tuple[Any, ...], left: bool) -> list[tuple[tuple[Any, ...], list[int]]]:
        """The other side's rows associated with ``row`` (the condition holds on the joined row)."""
        c = self.condition
        return [(o, entry) for o, entry in self.sides[1 if left else 0].items()
                if c is None or c.eval(list(self._joined(row, o, left))) is True]

    def padded(self, row: tuple[Any, ...], left: bool, kind: RowKind) -> Row:
        """``row`` of one side with the other side's columns null."""
        nulls = [None] * self.widths[1 if left else 0]
        return row_of(list(row) + nulls if left else nulls + list(row), kind)

    def process(self, row: tuple[Any, ...], kind: RowKind, left: bool) -> list[Row]:
        """A row of one side (``left``) with its row kind: the changes to the join's result. A
        retraction of a row the side does not hold changes nothing (Flink ignores it too)."""
        mine = self.sides[0 if left else 1]
        me_outer, other_outer = self.outer if left else self.outer[::-1]
        out: list[Row] = []
        matches = self._matches(row, left)
        copies = sum(entry[0] for _, entry in matches)  # associated rows, counting duplicates
        if is_accumulate(kind):
            entry = mine.setdefault(row, [0, copies])
            entry[0] += 1
            if not matches:
                if me_outer:
                    out.append(self.padded(row, left, RowKind.INSERT))
                return out
            joined_kind = RowKind.INSERT if me_outer or other_outer else kind
            for other, o in matches:
                for _ in range(o[0]):
                    if other_outer and o[1] == 0:
                        out.append(self.padded(other, not left, RowKind.DELETE))
                    out.append(row_of(list(self._joined(row, other, left)), joined_kind))
                o[1] += 1
            return out
        held = mine.get(row)
        if held is None:
            return out
        held[0] -= 1
        if held[0] == 0:
            del mine[row]
        if not matches:
            if me_outer:
                out.append(self.padded(row, left, RowKind.DELETE))
            return out
        joined_kind = RowKind.DELETE if me_outer else kind
        for other, o in matches:
            for _ in range(o[0]):
                out.append(row_of(list(self._joined(row, other, left)), joined_kind))
                if other_outer and o[1] == 1:
                    out.append(self.padded(other, not left, RowKind.INSERT))
            o[1] -= 1
        return out

    def final(self) -> list[Row]:
        """Batch mode: the join of everything held, as inserts (each left row with its matches or
        padded; then the right rows of a right-outer side that matched nothing, padded)."""
        out: list[Row] = []
        for row, (n, _) in self.sides[0].items():
            matches = self._matches(row, True)
            for _ in range(n):
                if not matches and self.outer[0]:
                    out.append(self.padded(row, True, RowKind.INSERT))
                for other, o in matches:
                    out.extend(row_of(list(row + other)) for _ in range(o[0]))
        if self.outer[1]:
            for row, (n, _) in self.sides[1].items():
                if not self._matches(row, False):
                    out.extend(self.padded(row, False, RowKind.INSERT) for _ in range(n))
        return out

    @property
    def empty(self) -> bool:
        return not self.sides[0] and not self.sides[1]


class RegularJoinFunction(KeyedCoProcessFunction):
    """Flink's StreamingJoinOperator: a :class:`RegularJoinCore` per join key in keyed state; in
    batch mode, one timer at the end of input emits the final join."""

    def __init__(self, join_type: str, condition: Resolved | None, left_width: int, right_width: int,
                 batch: bool) -> None:
        self.join_type, self.condition, self.batch = join_type, condition, batch
        self.left_width, self.right_width = left_width, right_width

    def open(self, runtime_context: Any) -> None:
        self.state = runtime_context.get_state(ValueStateDescriptor("join-records", Types.PICKLED_BYTE_ARRAY()))

    def _process(self, value: Row, ctx: Any, left: bool) -> Iterable[Row]:
        core = self.state.value()
        if core is None:
            core = RegularJoinCore(self.join_type, self.condition, self.left_width, self.right_width)
            if self.batch:
                ctx.timer_service().register_event_time_timer(END_OF_INPUT)
        out = core.process(tuple(value), value.get_row_kind(), left)
        self.state.clear() if core.empty and not self.batch else self.state.update(core)
        return () if self.batch else out

    def process_element1(self, value: Row, ctx: Any) -> Iterable[Row]:
        return self._process(value, ctx, True)

    def process_element2(self, value: Row, ctx: Any) -> Iterable[Row]:
        return self._process(value, ctx, False)

    def on_timer(self, timestamp: int, ctx: Any) -> Iterable[Row]:
        core = self.state.value()
        self.state.clear()
        return core.final() if core is not None else ()
