"""Top-N over an updating input (Flink's RetractableTopNFunction), e.g. ``ROW_NUMBER()`` over the
result of a GROUP BY: the input's -U/-D take a row out of the ranking, +I/+U put one in, and the
output retracts what each change moves.

:class:`RetractableTopN` is one partition's ranking (pure); :class:`RetractableRankFunction` keeps
it in keyed state. The changelog is Flink's: with the rank number, a row entering at rank r sends
-U/+U for each rank from r to N whose row changes (+I for a rank that was empty); a row leaving from
rank r sends -U of the old row and +U of the new one for each rank from r on, and -D of the last
rank left empty. Without the rank number, entering sends -D of the row pushed out of the top N
then +I of the new row; leaving sends -D of the row then +I of the row that moves up into rank N.
Rows with equal sort keys keep their arrival order; a retraction takes out the first equal row.
"""
from __future__ import annotations

import bisect
from typing import Any, Iterable, Sequence

from millstream.common.row import Row, RowKind
from millstream.common.typeinfo import Types
from millstream.datastream.functions import KeyedProcessFunction
from millstream.datastream.state import ValueStateDescriptor
from millstream.table.runtime_functions import is_accumulate, row_of
from millstream.table.time_functions import _Asc, _Desc

__all__ = ["RetractableTopN", "RetractableRankFunction"]


class RetractableTopN:
    """One partition's rows sorted by ``order`` ((column, ascending) pairs), all of them kept (a
    row below rank N can move up when one above leaves)."""

    def __init__(self, order: Sequence[tuple[int, bool]], n: int, with_rank: bool) -> None:
        self.order, self.n, self.with_rank = tuple(order), n, with_rank
        self.keys: list[tuple[Any, ...]] = []
        self.rows: list[tuple[Any, ...]] = []

    def _key(self, row: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(_Asc(row[c]) if asc else _Desc(row[c]) for c, asc in self.order)

    def _out(self, row: tuple[Any, ...], rank: int, kind: RowKind) -> Row:
        return row_of(row + ((rank,) if self.with_rank else ()), kind)

    def apply(self, row: tuple[Any, ...], accumulate: bool) -> list[Row]:
        return self.add(row) if accumulate else self.remove(row)

    def add(self, row: tuple[Any, ...]) -> list[Row]:
        key = self._key(row)
        pos = bisect.bisect_right(self.keys, key)
        old = list(self.rows)
        self.keys.insert(pos, key)
        self.rows.insert(pos, row)
        if pos >= self.n:
            return []
        if not self.with_rank:
            out = [row_of(old[self.n - 1], RowKind.DELETE)] if len(old) >= self.n else []
            return out + [row_of(row)]
        out = []
        for r in range(pos, min(len(self.rows), self.n)):
            if r < len(old):
                out += [self._out(old[r], r + 1, RowKind.UPDATE_BEFORE), self._out(self.rows[r], r + 1, RowKind.UPDATE_AFTER)]
            else:
                out.append(self._out(self.rows[r], r + 1, RowKind.INSERT))
        return out

    def remove(self, row: tuple[Any, ...]) -> list[Row]:
        key = self._key(row)
        lo, hi = bisect.bisect_left(self.keys, key), bisect.bisect_right(self.keys, key)
        pos = next((i for i in range(lo, hi) if self.rows[i] == row), None)
        if pos is None:
            return []  # a retraction of a row never ranked (Flink logs and ignores it)
        old = list(self.rows)
        del self.keys[pos], self.rows[pos]
        if pos >= self.n:
            return []
        if not self.with_rank:
            out = [row_of(row, RowKind.DELETE)]
            return out + ([row_of(self.rows[self.n - 1])] if len(self.rows) >= self.n else [])
        out = []
        for r in range(pos, min(len(old), self.n)):
            if r < len(self.rows):
                out += [self._out(old[r], r + 1, RowKind.UPDATE_BEFORE), self._out(self.rows[r], r + 1, RowKind.UPDATE_AFTER)]
            else:
                out.append(self._out(old[r], r + 1, RowKind.DELETE))
        return out

    @property
    def empty(self) -> bool:
        return not self.rows


class RetractableRankFunction(KeyedProcessFunction):
    """Top-N per partition key of an updating input: a :class:`RetractableTopN` in keyed state."""

    def __init__(self, order: Sequence[tuple[int, bool]], n: int, with_rank: bool) -> None:
        self.order, self.n, self.with_rank = tuple(order), n, with_rank

    def open(self, runtime_context: Any) -> None:
        self.state = runtime_context.get_state(ValueStateDescriptor("retractable-topn", Types.PICKLED_BYTE_ARRAY()))

    def process_element(self, value: Row, ctx: Any) -> Iterable[Row]:
        top = self.state.value() or RetractableTopN(self.order, self.n, self.with_rank)
        out = top.apply(tuple(value), is_accumulate(value.get_row_kind()))
        self.state.clear() if top.empty else self.state.update(top)
        return out
