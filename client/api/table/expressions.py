"""PyFlink's expression functions (``pyflink.table.expressions``): ``col``, ``lit``, ``call``, ..."""
from __future__ import annotations

from typing import Any

from millstream.table.expression import Expression, as_expression, literal_type
from millstream.table.types import DataType

__all__ = ["col", "lit", "call", "concat", "and_", "or_", "not_", "coalesce", "date_format", "row_interval", "UNBOUNDED_ROW",
           "UNBOUNDED_RANGE", "CURRENT_ROW", "CURRENT_RANGE"]


def col(name: str) -> Expression:
    """The column ``name`` of the table an operation applies to."""
    if not isinstance(name, str):
        raise TypeError(f"col() takes a column name, got {name!r}")
    return Expression("col", value=name)


def lit(v: Any, data_type: DataType | None = None) -> Expression:
    """A literal: ``lit(1)`` is an INT NOT NULL, ``lit(1, DataTypes.BIGINT())`` a BIGINT."""
    return Expression("lit", value=v, dtype=data_type or literal_type(v))


def call(f: Any, *args: Any) -> Expression:
    """A call of a function: a Python UDF, or the name of a built-in or registered function."""
    if isinstance(f, str):
        return Expression("call_by_name", tuple(map(as_expression, args)), f)
    if callable(getattr(f, "_as_call", None)):
        return f._as_call(*args)
    raise TypeError(f"call() takes a function name or a Python UDF, got {f!r}")


def concat(first: Any, *others: Any) -> Expression:
    return Expression("call", tuple(map(as_expression, (first, *others))), "concat")


def and_(a: Any, b: Any, *more: Any) -> Expression:
    out = as_expression(a) & as_expression(b)
    for m in more:
        out = out & as_expression(m)
    return out


def or_(a: Any, b: Any, *more: Any) -> Expression:
    out = as_expression(a) | as_expression(b)
    for m in more:
        out = out | as_expression(m)
    return out


def not_(e: Any) -> Expression:
    return ~as_expression(e)


def coalesce(*args: Any) -> Expression:
    return Expression("call", tuple(map(as_expression, args)), "coalesce")


def date_format(timestamp: Any, format: Any) -> Expression:
    """Flink's DATE_FORMAT: ``timestamp`` as text by a Java SimpleDateFormat pattern."""
    return Expression("call", (as_expression(timestamp), as_expression(format)), "date_format")


def row_interval(rows: int) -> Expression:
    """An over window's extent in rows: ``preceding(row_interval(2))`` is 2 rows before the current."""
    return Expression("row_interval", value=int(rows))


# Over window bounds (PyFlink's constants of pyflink.table.expressions)
UNBOUNDED_ROW = Expression("bound", value="UNBOUNDED_ROW")
UNBOUNDED_RANGE = Expression("bound", value="UNBOUNDED_RANGE")
CURRENT_ROW = Expression("bound", value="CURRENT_ROW")
CURRENT_RANGE = Expression("bound", value="CURRENT_RANGE")
