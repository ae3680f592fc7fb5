"""``Row``: PyFlink's record type with positional and (optionally) named fields."""
from __future__ import annotations

from enum import Enum
from typing import Any, Iterator


class RowKind(Enum):
    INSERT = 0
    UPDATE_BEFORE = 1
    UPDATE_AFTER = 2
    DELETE = 3

    def short_string(self) -> str:
        return {0: "+I", 1: "-U", 2: "+U", 3: "-D"}[self.value]


class Row:
    """A fixed-length record: ``Row(1, "a")`` or ``Row(name="a", count=1)``.

    Equality and hashing follow the values (and kind), so rows work as keys and in results.
    """

    __slots__ = ("_values", "_fields", "_row_kind")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if args and kwargs:
            raise ValueError("Row takes positional values or named values, not both")
        if kwargs:
            self._fields: tuple[str, ...] | None = tuple(kwargs)
            self._values = list(kwargs.values())
        else:
            self._fields = None
            self._values = list(args)
        self._row_kind = RowKind.INSERT

    def as_dict(self, recursive: bool = False) -> dict[str, Any]:
        if self._fields is None:
            raise TypeError("Cannot convert a Row without field names to a dict")
        out = dict(zip(self._fields, self._values))
        if recursive:
            out = {k: v.as_dict(True) if isinstance(v, Row) and v._fields else v for k, v in out.items()}
        return out

    def get_row_kind(self) -> RowKind:
        return self._row_kind

    def set_row_kind(self, kind: RowKind) -> None:
        self._row_kind = kind

    def get_fields_by_names(self, names: list[str]) -> list[Any]:
        return [self[n] for n in names]

    def set_field_names(self, names: list[str]) -> None:
        if len(names) != len(self._values):
            raise ValueError(f"Row has {len(self._values)} fields, got {len(names)} names")
        self._fields = tuple(names)

    def _index(self, key: int | str) -> int:
        if isinstance(key, str):
            if not self._fields or key not in self._fields:
                raise KeyError(f"Row has no field named {key!r}")
            return self._fields.index(key)
        return key

    def __getitem__(self, key: int | str | slice) -> Any:
        if isinstance(key, slice):
            return Row(*self._values[key])
        return self._values[self._index(key)]

    def __setitem__(self, key: int | str, value: Any) -> None:
        self._values[self._index(key)] = value

    def __getattr__(self, name: str) -> Any:
        fields = object.__getattribute__(self, "_fields")
        if fields and name in fields:
            return self._values[fields.index(name)]
        raise AttributeError(f"Row has no field named {name!r}")

    def __call__(self, *values: Any) -> "Row":
        """``Row("name", "age")("a", 1)``: a named-row constructor, as in PyFlink."""
        names = [str(v) for v in self._values]
        if len(values) != len(names):
            raise ValueError(f"expected {len(names)} values, got {len(values)}")
        return Row(**dict(zip(names, values)))

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Row)
            and self._values == other._values
            and self._row_kind == other._row_kind
            and (self._fields is None or other._fields is None or self._fields == other._fields)
        )

    def __hash__(self) -> int:
        return hash((tuple(self._values), self._row_kind))

    def __getstate__(self) -> tuple:
        return (self._values, self._fields, self._row_kind)

    def __setstate__(self, state: tuple) -> None:
        self._values, self._fields, self._row_kind = state

    def __repr__(self) -> str:
        if self._fields:
            return "Row(" + ", ".join(f"{k}={v!r}" for k, v in zip(self._fields, self._values)) + ")"
        return "Row(" + ", ".join(repr(v) for v in self._values) + ")"
