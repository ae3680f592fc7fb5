"""SQL type strings (``'STRING'``, ``'BIGINT NOT NULL'``, ``'ROW<a INT, b STRING>'``) as DataTypes:
what ``udf(result_type='string')``, ``Schema.column(name, 'INT')`` and SQL DDL accept."""
from __future__ import annotations

import re

from millstream.table.types import DataType, DataTypes

__all__ = ["parse_type"]

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
