"""``TableResult``: what ``execute`` / ``execute_sql`` / ``execute_insert`` return, and Flink's
tableau format that ``print()`` writes.

Tableau format (Flink's ``TableauStyle``): ``+----+`` borders, values right-aligned, cells wider
than the column cut to fit with ``...``, null as ``<NULL>``, then ``N rows in set`` (``Empty set``
when none). In streaming mode there is an ``op`` column with each row's kind (+I/-U/+U/-D) and the
column widths come from the types (BIGINT 20, INT 11, strings 30, ...); in batch mode no ``op``
column and the widths come from the values (at most 30).
"""
from __future__ import annotations

import datetime
import itertools
import decimal
from enum import Enum
from typing import Any, Callable, Iterable, Iterator, Sequence

from millstream.common.row import Row
from millstream.table.table import TableSchema
from millstream.table.types import DataType, DataTypes

__all__ = ["TableResult", "ResultKind", "tableau", "MAX_COLUMN_WIDTH"]

MAX_COLUMN_WIDTH = 30
NULL = "<NULL>"
_TYPE_WIDTHS = {"TINYINT": 4, "SMALLINT": 6, "INT": 11, "BIGINT": 20, "BOOLEAN": 5, "DATE": 10}


class ResultKind(Enum):
    SUCCESS = 0
    SUCCESS_WITH_CONTENT = 1


def type_width(t: DataType) -> int:
    if t.root in _TYPE_WIDTHS:
        return _TYPE_WIDTHS[t.root]
    if t.root == "DECIMAL":
        return (t.length or 10) + 2
    if t.root == "TIME":
        return 8 if not t.length else t.length + 9
    if t.root in ("TIMESTAMP", "TIMESTAMP_LTZ"):
        pr = t.length or 0
        return 19 if pr == 0 else 23 if pr <= 3 else 26 if pr <= 6 else 29
    return MAX_COLUMN_WIDTH


def cell(v: Any) -> str:
    """A value as Flink's tableau prints it."""
    if v is None:
        return NULL
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, Row):
        return "(" + ", ".join(cell(x) for x in v) + ")"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(cell(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{cell(k)}={cell(x)}" for k, x in v.items()) + "}"
    if isinstance(v, datetime.datetime):
        return v.isoformat(sep=" ")
    if isinstance(v, decimal.Decimal):
        return format(v, "f")
    if isinstance(v, (bytes, bytearray)):
        return "x'" + bytes(v).hex() + "'"
    return str(v)


def typed_cell(v: Any, t: DataType) -> str:
    """A value of column type ``t``: a TIMESTAMP(p) shows p fraction digits (``08:00:00.000``)."""
    if isinstance(v, datetime.datetime) and t.root in ("TIMESTAMP", "TIMESTAMP_LTZ"):
        p = t.length if t.length is not None else 6
        text = v.strftime("%Y-%m-%d %H:%M:%S")
        return text + ("." + f"{v.microsecond:06d}".ljust(9, "0")[:p] if p else "")
    return cell(v)


def _fit(text: str, width: int) -> str:
    if len(text) <= width:
        return " " * (width - len(text)) + text
    return text[:width - 3] + "..."


def tableau(columns: Sequence[tuple[str, DataType]], rows: Iterable[Row], streaming: bool) -> Iterator[str]:
    """The lines ``TableResult.print()`` writes for ``rows``. In streaming mode the widths come
    from the types, so each row's line is ready as soon as the row is (an unbounded query prints
    as it runs); in batch mode every row is read first to size the columns."""
    names = (["op"] if streaming else []) + [n for n, _ in columns]

    types = [t for _, t in columns]

    def cells(r: Row) -> list[str]:
        return ([r.get_row_kind().short_string()] if streaming else []) + \
            [typed_cell(v, types[i]) if i < len(types) else cell(v) for i, v in enumerate(r)]

    it = iter(rows)
    first = next(it, None)
    if first is None:
        yield "Empty set"
        return
    if streaming:
        widths = [2] + [max(len(n), max(type_width(t), len(NULL))) for n, t in columns]
        content: Iterable[list[str]] = itertools.chain([cells(first)], map(cells, it))
    else:
        buffered = [cells(first)] + [cells(r) for r in it]
        widths = [min(max(len(x) for x in col), MAX_COLUMN_WIDTH) for col in zip(names, *buffered)]
        content = buffered
    border = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(values: Sequence[str]) -> str:
        return "|" + "|".join(f" {_fit(v, w)} " for v, w in zip(values, widths)) + "|"

    yield from (border, line(names), border)
    count = 0
    for c in content:
        count += 1
        yield line(c)
    yield border
    yield f"{count} {'rows' if count > 1 else 'row'} in set"


class TableResult:
    """The result of a statement: a job (``get_job_client``, ``wait``) and/or rows (``collect``, ``print``)."""

    def __init__(self, columns: Sequence[tuple[str, DataType]], result_kind: ResultKind,
                 rows: Callable[[], Iterator[Row]] | None = None, job_client: Any = None,
                 streaming: bool = True, raw: bool = False) -> None:
        self._raw = raw  # print() writes the values as they are (EXPLAIN's plan), not a table
        self._columns = list(columns)
        self._result_kind = result_kind
        self._rows = rows
        self._job_client = job_client
        self._streaming = streaming
        self._consumed = False

    def get_job_client(self) -> Any:
        return self._job_client

    def wait(self, timeout_ms: int | None = None) -> None:
        """Blocks until the job ends (raises what it failed with)."""
        if self._job_client is not None:
            future = self._job_client.get_job_execution_result()
            future.result() if timeout_ms is None else future.result(timeout_ms / 1000)
        elif self._rows is not None and not self._consumed:
            for _ in self.collect():
                pass

    def get_table_schema(self) -> Any:
        return TableSchema(self._columns)

    def get_resolved_schema(self) -> Any:
        return self.get_table_schema()

    def get_result_kind(self) -> ResultKind:
        return self._result_kind

    def collect(self) -> Iterator[Row]:
        """The result's rows, each with its row kind; once."""
        if self._consumed:
            raise RuntimeError("The result of a TableResult can be collected only once")
        self._consumed = True
        if self._rows is None:
            return iter([Row("OK")] if self._result_kind is ResultKind.SUCCESS else [])
        return self._rows()

    def print(self) -> None:
        if self._rows is None and self._result_kind is ResultKind.SUCCESS:
            print("\n".join(tableau([("result", DataTypes.STRING())], [Row("OK")], False)))
            return
        if self._raw:
            for row in self.collect():
                print(*row, flush=True)
            return
        for line in tableau(self._columns, self.collect(), self._streaming):
            print(line, flush=True)

