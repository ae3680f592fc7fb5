"""``Row``: PyFlink's record type with positional and (optionally) named fields.

Semantics follow ``pyflink.common.Row``: ``Row(name="a", age=1)`` sorts its fields by name,
``Row("name", "age")`` is a row-class that builds named rows when called, fields are read as
attributes, by name or by position, ``in`` searches the values, and two rows are equal when their
kinds, values and field names (or the absence of names on both) are equal.
"""
from __future__ import annotations

from enum import Enum
from typing import Any, Iterable, Iterator, Sequence


class RowKind(Enum):
    INSERT = 0
    UPDATE_BEFORE = 1
    UPDATE_AFTER = 2
    DELETE = 3

    def short_string(self) -> str:
        """Flink's ``RowKind.shortString()``: the prefix of a printed row (``+I[a, 1]``)."""
        return _SHORT_STRINGS[self]


_SHORT_STRINGS = {RowKind.INSERT: "+I", RowKind.UPDATE_BEFORE: "-U", RowKind.UPDATE_AFTER: "+U", RowKind.DELETE: "-D"}


def _create_row(fields: Sequence[str] | None, values: Sequence[Any], row_kind: RowKind = RowKind.INSERT) -> "Row":
    row = Row(*values)
    row._fields = list(fields) if fields is not None else None
    row._row_kind = row_kind
    return row


def rows_of_names(field_names: Sequence[str], values: Iterable[Sequence[Any]]) -> list["Row"]:
    """Named rows, one per value sequence, sharing one list of names (never mutated in place: a
    row's names are only ever replaced), for readers that make many rows of one type at once."""
    names = list(field_names)
    width = len(names)
    new = Row.__new__
    insert = RowKind.INSERT
    out = []
    for vals in values:
        if len(vals) != width:
            raise ValueError(f"a row of {width} fields {names} got {len(vals)} values")
        row = new(Row)
        row._values = list(vals)
        row._fields = names
        row._row_kind = insert
        out.append(row)
    return out


def values_and_kinds(rows: Sequence["Row"]) -> tuple[list[list[Any]], list[RowKind]]:
    """Each row's values (its own list: read it, never change it) and row kind, for code that
    computes over a batch of rows at once (the Table API's vectorized Calc)."""
    return [r._values for r in rows], [r._row_kind for r in rows]


def positional_rows(values: Iterable[Sequence[Any]], kinds: Iterable[RowKind]) -> list["Row"]:
    """Unnamed rows of the given values and row kinds (what ``Row(*v)`` and ``set_row_kind`` give,
    without their per-row calls)."""
    new = Row.__new__
    out = []
    for vals, kind in zip(values, kinds):
        row = new(Row)
        row._values = list(vals)
        row._fields = None
        row._row_kind = kind
        out.append(row)
    return out


class Row:
    """A fixed-length record: ``Row(1, "a")`` or ``Row(name="a", count=1)``."""

    __slots__ = ("_values", "_fields", "_row_kind")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if args and kwargs:
            raise ValueError("Can not use both args and kwargs to create Row")
        if kwargs:
            names = sorted(kwargs)
            self._fields: list[str] | None = names
            self._values = [kwargs[n] for n in names]
        else:
            self._fields = None
            self._values = list(args)
        self._row_kind = RowKind.INSERT

    @staticmethod
    def of_names(field_names: Sequence[str], values: Sequence[Any]) -> "Row":
        """A named row keeping the given field order (what a ``Types.ROW_NAMED`` source produces)."""
        if len(field_names) != len(values):
            raise ValueError(f"a row of {len(field_names)} fields {list(field_names)} got {len(values)} values")
        return _create_row(field_names, values)

    def as_dict(self, recursive: bool = False) -> dict[str, Any]:
        if self._fields is None:
            raise TypeError("Cannot convert a Row without field names into a dict")
        if not recursive:
            return dict(zip(self._fields, self._values))

        def conv(obj: Any) -> Any:
            if isinstance(obj, Row):
                return obj.as_dict(True)
            if isinstance(obj, list):
                return [conv(o) for o in obj]
            if isinstance(obj, dict):
                return {k: conv(v) for k, v in obj.items()}
            return obj

        return {k: conv(v) for k, v in zip(self._fields, self._values)}

    def get_row_kind(self) -> RowKind:
        return self._row_kind

    def set_row_kind(self, row_kind: RowKind) -> None:
        self._row_kind = row_kind

    def get_fields_by_names(self, names: Sequence[str]) -> list[Any]:
        return [self[n] for n in names]

    def set_field_names(self, field_names: Sequence[str]) -> None:
        self._fields = list(field_names)

    def __contains__(self, item: Any) -> bool:
        return item in self._values

    def __call__(self, *values: Any) -> "Row":
        """``Row("name", "age")("a", 1)``: a row-class builds named rows, as in PyFlink."""
        if len(values) > len(self._values):
            raise ValueError(f"Can not create Row with fields {self}, expected {len(self)} values but got {values}")
        return _create_row([str(v) for v in self._values], values, self._row_kind)

    def _position(self, name: str) -> int:
        if self._fields is None or name not in self._fields:
            raise KeyError(f"Row has no field named {name!r}")
        return self._fields.index(name)

    def __getitem__(self, item: int | slice | str) -> Any:
        if isinstance(item, (int, slice)):
            return self._values[item]
        return self._values[self._position(item)]

    def __setitem__(self, key: int | slice | str, value: Any) -> None:
        if isinstance(key, (int, slice)):
            self._values[key] = value
        else:
            self._values[self._position(key)] = value

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        fields = self._fields
        if fields is not None and name in fields:
            return self._values[fields.index(name)]
        raise AttributeError(f"Row has no field named {name!r}")

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Row)
            and self._fields == other._fields
            and self._row_kind == other._row_kind
            and self._values == other._values
        )

    def __hash__(self) -> int:
        return hash(tuple(self._values))

    def __reduce__(self) -> tuple:
        return _create_row, (self._fields, tuple(self._values), self._row_kind)

    def __repr__(self) -> str:
        if self._fields is not None:
            return "Row(" + ", ".join(f"{k}={v!r}" for k, v in zip(self._fields, self._values)) + ")"
        return "<Row(" + ", ".join(repr(v) for v in self._values) + ")>"
