"""Type information, shaped like PyFlink's ``Types``.

Records travel between tasks as pickled Python objects, so type information does not pick a
serializer here; it documents a stream's element type, checks side-output tags and resolves named
fields of rows for ``sum("field")``-style aggregations.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class TypeInformation:
    """A named type, optionally with component types (tuple, row, list, map)."""

    name: str
    components: tuple["TypeInformation", ...] = ()
    field_names: tuple[str, ...] = ()

    def __str__(self) -> str:
        if self.field_names:
            inner = ", ".join(f"{n}: {t}" for n, t in zip(self.field_names, self.components))
            return f"{self.name}({inner})"
        if self.components:
            return f"{self.name}<{', '.join(str(c) for c in self.components)}>"
        return self.name

    def field_index(self, name: str) -> int:
        """Position of a named field of a ROW type; raises KeyError naming the field."""
        if name not in self.field_names:
            raise KeyError(f"{self} has no field named {name!r}")
        return self.field_names.index(name)


def _basic(name: str) -> "staticmethod":
    info = TypeInformation(name)
    return staticmethod(lambda: info)


class Types:
    """Factory of type information, with PyFlink's method names."""

    STRING = _basic("STRING")
    BYTE = _basic("BYTE")
    BOOLEAN = _basic("BOOLEAN")
    SHORT = _basic("SHORT")
    INT = _basic("INT")
    LONG = _basic("LONG")
    FLOAT = _basic("FLOAT")
    DOUBLE = _basic("DOUBLE")
    CHAR = _basic("CHAR")
    BIG_INT = _basic("BIG_INT")
    BIG_DEC = _basic("BIG_DEC")
    SQL_DATE = _basic("SQL_DATE")
    SQL_TIME = _basic("SQL_TIME")
    SQL_TIMESTAMP = _basic("SQL_TIMESTAMP")
    INSTANT = _basic("INSTANT")
    PICKLED_BYTE_ARRAY = _basic("PICKLED_BYTE_ARRAY")
    PRIMITIVE_ARRAY = staticmethod(lambda element: TypeInformation("PRIMITIVE_ARRAY", (element,)))
    BASIC_ARRAY = staticmethod(lambda element: TypeInformation("BASIC_ARRAY", (element,)))
    OBJECT_ARRAY = staticmethod(lambda element: TypeInformation("OBJECT_ARRAY", (element,)))
    LIST = staticmethod(lambda element: TypeInformation("LIST", (element,)))
    MAP = staticmethod(lambda key, value: TypeInformation("MAP", (key, value)))

    @staticmethod
    def TUPLE(field_types: Sequence[TypeInformation]) -> TypeInformation:
        return TypeInformation("TUPLE", tuple(field_types))

    @staticmethod
    def ROW(field_types: Sequence[TypeInformation]) -> TypeInformation:
        names = tuple(f"f{i}" for i in range(len(field_types)))
        return TypeInformation("ROW", tuple(field_types), names)

    @staticmethod
    def ROW_NAMED(field_names: Sequence[str], field_types: Sequence[TypeInformation]) -> TypeInformation:
        if len(field_names) != len(field_types):
            raise ValueError(
                f"ROW_NAMED needs as many names as types, got {len(field_names)} names "
                f"and {len(field_types)} types"
            )
        return TypeInformation("ROW", tuple(field_types), tuple(field_names))
