"""``DataTypes`` and ``Schema``: the Table API's logical types, as PyFlink names and prints them.

A :class:`DataType` is a value: its SQL name (``BIGINT``, ``STRING``, ``ROW<...>``), nullability,
and for composite types their parts. ``str()`` gives Flink's summary string (``VARCHAR(2147483647)``
reads ``STRING``; a non-null type ends with ``NOT NULL``), which ``print_schema`` and ``EXPLAIN`` use.
Python values are not converted on the way in: a ``BIGINT`` column holds Python ints.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Sequence

__all__ = ["DataType", "DataTypes", "RowField", "Schema", "infer_type", "parse_type", "NUMERIC_RANK", "INT_BITS",
           "wrap_int"]

MAX_LENGTH = 2147483647


@dataclass(frozen=True)
class RowField:
    name: str
    data_type: "DataType"
    description: str | None = None

    def __str__(self) -> str:
        return f"`{self.name}` {self.data_type}"


@dataclass(frozen=True)
class DataType:
    """A logical type: ``root`` is Flink's type root name (``BIGINT``, ``VARCHAR``, ``ROW``, ...)."""

    root: str
    nullable: bool = True
    length: int | None = None  # CHAR/VARCHAR/BINARY/VARBINARY length, DECIMAL precision, TIME(STAMP) precision
    scale: int | None = None  # DECIMAL scale
    fields: tuple[RowField, ...] = ()  # ROW
    element: "DataType | None" = None  # ARRAY, MULTISET; MAP's key
    value: "DataType | None" = None  # MAP's value
    time_attr: str | None = None  # "ROWTIME" / "PROCTIME": a time attribute column (Flink prints *ROWTIME*)

    def not_null(self) -> "DataType":
        return replace(self, nullable=False)

    def nullable_(self) -> "DataType":
        return replace(self, nullable=True)

    def as_time_attr(self, kind: str | None) -> "DataType":
        """This type marked as a rowtime (``"ROWTIME"``) or proctime attribute, or unmarked (None)."""
        return replace(self, time_attr=kind)

    def field_names(self) -> list[str]:
        return [f.name for f in self.fields]

    def field_types(self) -> list["DataType"]:
        return [f.data_type for f in self.fields]

    def _summary(self) -> str:
        r = self.root
        if r == "VARCHAR":
            return "STRING" if self.length == MAX_LENGTH else f"VARCHAR({self.length})"
        if r == "VARBINARY":
            return "BYTES" if self.length == MAX_LENGTH else f"VARBINARY({self.length})"
        if r in ("CHAR", "BINARY"):
            return f"{r}({self.length})"
        if r == "DECIMAL":
            return f"DECIMAL({self.length}, {self.scale})"
        if r in ("TIMESTAMP", "TIME"):
            return f"{r}({self.length})"
        if r == "TIMESTAMP_LTZ":
            return f"TIMESTAMP_LTZ({self.length})"
        if r == "INTERVAL":
            return f"INTERVAL SECOND({self.length})"
        if r == "ROW":
            return "ROW<" + ", ".join(str(f) for f in self.fields) + ">"
        if r in ("ARRAY", "MULTISET"):
            return f"{r}<{self.element}>"
        if r == "MAP":
            return f"MAP<{self.element}, {self.value}>"
        return r

    def __str__(self) -> str:
        mark = f" *{self.time_attr}*" if self.time_attr else ""
        return self._summary() + ("" if self.nullable else " NOT NULL") + mark

    def __repr__(self) -> str:
        return f"DataType({self})"


class DataTypes:
    """PyFlink's factory of data types (``DataTypes.BIGINT()``, ``DataTypes.ROW([...])``)."""

    @staticmethod
    def NULL() -> DataType:
        return DataType("NULL")

    @staticmethod
    def CHAR(length: int, nullable: bool = True) -> DataType:
        return DataType("CHAR", nullable, length)

    @staticmethod
    def VARCHAR(length: int, nullable: bool = True) -> DataType:
        return DataType("VARCHAR", nullable, length)

    @staticmethod
    def STRING(nullable: bool = True) -> DataType:
        return DataType("VARCHAR", nullable, MAX_LENGTH)

    @staticmethod
    def BOOLEAN(nullable: bool = True) -> DataType:
        return DataType("BOOLEAN", nullable)

    @staticmethod
    def BINARY(length: int, nullable: bool = True) -> DataType:
        return DataType("BINARY", nullable, length)

    @staticmethod
    def VARBINARY(length: int, nullable: bool = True) -> DataType:
        return DataType("VARBINARY", nullable, length)

    @staticmethod
    def BYTES(nullable: bool = True) -> DataType:
        return DataType("VARBINARY", nullable, MAX_LENGTH)

    @staticmethod
    def DECIMAL(precision: int, scale: int, nullable: bool = True) -> DataType:
        return DataType("DECIMAL", nullable, precision, scale)

    @staticmethod
    def TINYINT(nullable: bool = True) -> DataType:
        return DataType("TINYINT", nullable)

    @staticmethod
    def SMALLINT(nullable: bool = True) -> DataType:
        return DataType("SMALLINT", nullable)

    @staticmethod
    def INT(nullable: bool = True) -> DataType:
        return DataType("INT", nullable)

    @staticmethod
    def BIGINT(nullable: bool = True) -> DataType:
        return DataType("BIGINT", nullable)

    @staticmethod
    def FLOAT(nullable: bool = True) -> DataType:
        return DataType("FLOAT", nullable)

    @staticmethod
    def DOUBLE(nullable: bool = True) -> DataType:
        return DataType("DOUBLE", nullable)

    @staticmethod
    def DATE(nullable: bool = True) -> DataType:
        return DataType("DATE", nullable)

    @staticmethod
    def TIME(precision: int = 0, nullable: bool = True) -> DataType:
        return DataType("TIME", nullable, precision)

    @staticmethod
    def TIMESTAMP(precision: int = 6, nullable: bool = True) -> DataType:
        return DataType("TIMESTAMP", nullable, precision)

    @staticmethod
    def TIMESTAMP_LTZ(precision: int = 6, nullable: bool = True) -> DataType:
        return DataType("TIMESTAMP_LTZ", nullable, precision)

    @staticmethod
    def INTERVAL_MILLIS(nullable: bool = True) -> DataType:
        """A day-time interval in milliseconds (``INTERVAL '5' SECOND``, ``lit(5).seconds``)."""
        return DataType("INTERVAL", nullable, 3)

    @staticmethod
    def ARRAY(element_type: DataType, nullable: bool = True) -> DataType:
        return DataType("ARRAY", nullable, element=element_type)

    @staticmethod
    def MAP(key_type: DataType, value_type: DataType, nullable: bool = True) -> DataType:
        return DataType("MAP", nullable, element=key_type, value=value_type)

    @staticmethod
    def MULTISET(element_type: DataType, nullable: bool = True) -> DataType:
        return DataType("MULTISET", nullable, element=element_type)

    @staticmethod
    def FIELD(name: str, data_type: DataType, description: str | None = None) -> RowField:
        return RowField(name, data_type, description)

    @staticmethod
    def ROW(row_fields: Sequence[RowField] = (), nullable: bool = True) -> DataType:
        fields = tuple(row_fields)
        for f in fields:
            if not isinstance(f, RowField):
                raise TypeError(f"DataTypes.ROW takes DataTypes.FIELD(name, type) entries, got {f!r}")
        return DataType("ROW", nullable, fields=fields)


_INTEGERS = ("TINYINT", "SMALLINT", "INT", "BIGINT")
NUMERIC_RANK = {"TINYINT": 0, "SMALLINT": 1, "INT": 2, "BIGINT": 3, "DECIMAL": 4, "FLOAT": 5, "DOUBLE": 6}


def is_integer(t: DataType) -> bool:
    return t.root in _INTEGERS


INT_BITS = {"TINYINT": 8, "SMALLINT": 16, "INT": 32, "BIGINT": 64}


def wrap_int(v: int, bits: int) -> int:
    """``v`` in a two's complement integer of ``bits`` bits, as Java's (and so Flink's) integer
    arithmetic and narrowing casts give it: INT's 2147483647 + 1 is -2147483648."""
    half = 1 << (bits - 1)
    return v if -half <= v < half else ((v + half) & ((1 << bits) - 1)) - half


def is_numeric(t: DataType) -> bool:
    return t.root in NUMERIC_RANK


def wider(a: DataType, b: DataType) -> DataType:
    """The result type of arithmetic on ``a`` and ``b``: the wider numeric type (Flink's rule,
    without DECIMAL precision arithmetic)."""
    if not (is_numeric(a) and is_numeric(b)):
        raise TypeError(f"arithmetic needs numeric operands, got {a} and {b}")
    t = a if NUMERIC_RANK[a.root] >= NUMERIC_RANK[b.root] else b
    return replace(t, nullable=a.nullable or b.nullable)


def infer_type(value: Any) -> DataType:
    """The type PyFlink infers for a Python value of ``from_elements`` (``int`` -> BIGINT)."""
    import datetime
    import decimal

    if value is None:
        return DataTypes.NULL()
    if isinstance(value, bool):
        return DataTypes.BOOLEAN()
    if isinstance(value, int):
        return DataTypes.BIGINT()
    if isinstance(value, float):
        return DataTypes.DOUBLE()
    if isinstance(value, str):
        return DataTypes.STRING()
    if isinstance(value, (bytes, bytearray)):
        return DataTypes.BYTES()
    if isinstance(value, decimal.Decimal):
        return DataTypes.DECIMAL(38, 18)
    if isinstance(value, datetime.datetime):
        return DataTypes.TIMESTAMP(6)
    if isinstance(value, datetime.date):
        return DataTypes.DATE()
    if isinstance(value, datetime.time):
        return DataTypes.TIME(0)
    if isinstance(value, (list, tuple)):
        element = next((infer_type(v) for v in value if v is not None), DataTypes.NULL())
        return DataTypes.ARRAY(element)
    if isinstance(value, dict):
        k = next((infer_type(x) for x in value), DataTypes.NULL())
        v = next((infer_type(x) for x in value.values() if x is not None), DataTypes.NULL())
        return DataTypes.MAP(k, v)
    raise TypeError(f"cannot infer a Table type for {value!r} of type {type(value).__name__}")


def merge_inferred(a: DataType, b: DataType) -> DataType:
    if a.root == "NULL":
        return b
    if b.root == "NULL" or a == b:
        return a
    if is_numeric(a) and is_numeric(b):
        return wider(a, b)
    raise TypeError(f"from_elements: a column holds values of two types, {a} and {b}")


@dataclass(frozen=True)
class _Column:
    name: str
    data_type: DataType | None
    expression: Any = None  # a computed column's SQL text or Table API expression

    def __str__(self) -> str:
        return f"`{self.name}` {self.data_type}" if self.expression is None else f"`{self.name}` AS {self.expression}"


@dataclass(frozen=True)
class Schema:
    """PyFlink's ``Schema``: the columns (physical or computed) and watermark of a table."""

    columns: tuple[_Column, ...] = ()
    watermarks: tuple[tuple[str, str], ...] = ()
    primary_key: tuple[str, ...] = ()

    @staticmethod
    def new_builder() -> "Schema.Builder":
        return Schema.Builder()

    def physical(self) -> list[tuple[str, DataType]]:
        return [(c.name, c.data_type) for c in self.columns if c.data_type is not None]

    def __str__(self) -> str:
        lines = [f"  {c}" for c in self.columns]
        lines += [f"  WATERMARK FOR `{c}` AS {e}" for c, e in self.watermarks]
        return "(\n" + ",\n".join(lines) + "\n)"

    class Builder:
        def __init__(self) -> None:
            self._columns: list[_Column] = []
            self._watermarks: list[tuple[str, str]] = []
            self._primary_key: tuple[str, ...] = ()

        def from_schema(self, schema: "Schema") -> "Schema.Builder":
            self._columns += list(schema.columns)
            self._watermarks += list(schema.watermarks)
            return self

        def from_row_data_type(self, data_type: DataType) -> "Schema.Builder":
            if data_type.root != "ROW":
                raise TypeError(f"from_row_data_type needs a ROW type, got {data_type}")
            self._columns += [_Column(f.name, f.data_type) for f in data_type.fields]
            return self

        def from_fields(self, field_names: Sequence[str], field_data_types: Sequence[DataType]) -> "Schema.Builder":
            self._columns += [_Column(n, t) for n, t in zip(field_names, field_data_types)]
            return self

        def column(self, column_name: str, data_type: DataType | str) -> "Schema.Builder":
            if isinstance(data_type, str):
                data_type = parse_type(data_type)
            self._columns.append(_Column(column_name, data_type))
            return self

        def column_by_expression(self, column_name: str, expr: Any) -> "Schema.Builder":
            self._columns.append(_Column(column_name, None, expr))
            return self

        def watermark(self, column_name: str, watermark_expr: Any) -> "Schema.Builder":
            self._watermarks.append((column_name, str(watermark_expr)))
            return self

        def primary_key(self, *column_names: str) -> "Schema.Builder":
            self._primary_key = tuple(column_names)
            return self

        def build(self) -> "Schema":
            return Schema(tuple(self._columns), tuple(self._watermarks), self._primary_key)



# -- SQL type strings ('STRING', 'BIGINT NOT NULL', 'ROW<a INT, b STRING>'): what udf(result_type='string'),
# Schema.column(name, 'INT') and SQL DDL accept.

_SIMPLE = {
    "STRING": DataTypes.STRING, "BOOLEAN": DataTypes.BOOLEAN, "BOOL": DataTypes.BOOLEAN,
    "TINYINT": DataTypes.TINYINT, "SMALLINT": DataTypes.SMALLINT, "INT": DataTypes.INT,
    "INTEGER": DataTypes.INT, "BIGINT": DataTypes.BIGINT, "FLOAT": DataTypes.FLOAT,
    "DOUBLE": DataTypes.DOUBLE, "DATE": DataTypes.DATE, "BYTES": DataTypes.BYTES, "NULL": DataTypes.NULL,
}
_TOKEN = re.compile(r"\s*(`[^`]*`|[A-Za-z_][A-Za-z_0-9]*|\d+|[<>(),])")


def parse_type(text: str) -> DataType:
    tokens = [m.group(1) for m in _TOKEN.finditer(text)]
    if "".join(tokens).replace(" ", "") != re.sub(r"\s+", "", text):
        raise ValueError(f"cannot parse the type {text!r}")
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take(expected: str | None = None) -> str:
        nonlocal pos
        tok = peek()
        if tok is None or (expected is not None and tok.upper() != expected):
            raise ValueError(f"cannot parse the type {text!r}: expected {expected or 'more'} at token {pos + 1}")
        pos += 1
        return tok

    def args() -> list[int]:
        out: list[int] = []
        if peek() == "(":
            take("(")
            out.append(int(take()))
            while peek() == ",":
                take(",")
                out.append(int(take()))
            take(")")
        return out

    def one() -> DataType:
        name = take().upper()
        if name == "DOUBLE" and peek() and peek().upper() == "PRECISION":  # type: ignore[union-attr]
            take()
        if name in ("VARCHAR", "CHAR", "BINARY", "VARBINARY"):
            a = args()
            t = getattr(DataTypes, name)(a[0] if a else (2147483647 if name.startswith("VAR") else 1))
        elif name in ("DECIMAL", "DEC", "NUMERIC"):
            a = args()
            t = DataTypes.DECIMAL(a[0] if a else 10, a[1] if len(a) > 1 else 0)
        elif name in ("TIMESTAMP", "TIME", "TIMESTAMP_LTZ"):
            a = args()
            default = 0 if name == "TIME" else 6
            if name == "TIMESTAMP" and peek() and peek().upper() == "WITH":  # type: ignore[union-attr]
                for w in ("WITH", "LOCAL", "TIME", "ZONE"):
                    take(w)
                name = "TIMESTAMP_LTZ"
            t = getattr(DataTypes, name)(a[0] if a else default)
        elif name in ("ARRAY", "MULTISET"):
            take("<")
            inner = one()
            take(">")
            t = getattr(DataTypes, name)(inner)
        elif name == "MAP":
            take("<")
            k = one()
            take(",")
            v = one()
            take(">")
            t = DataTypes.MAP(k, v)
        elif name == "ROW":
            fields = []
            close = ">" if peek() == "<" else ")"
            take("<" if close == ">" else "(")
            while True:
                fname = take().strip("`")
                fields.append(DataTypes.FIELD(fname, one()))
                if peek() == ",":
                    take(",")
                    continue
                take(close)
                break
            t = DataTypes.ROW(fields)
        elif name in _SIMPLE:
            t = _SIMPLE[name]()
        else:
            raise ValueError(f"unknown type {name!r} in {text!r}")
        if peek() and peek().upper() == "NOT":  # type: ignore[union-attr]
            take("NOT")
            take("NULL")
            t = t.not_null()
        elif peek() and peek().upper() == "NULL":  # type: ignore[union-attr]
            take("NULL")
        return t

    result = one()
    if pos != len(tokens):
        raise ValueError(f"cannot parse the type {text!r}: unexpected {tokens[pos]!r}")
    return result
