"""Records as text, the way PyFlink's print sink and simple string encoder show them.

In PyFlink a stream with a declared type is handed to the Java sink as Java objects, so the text
is Java's ``toString``: a ``Types.TUPLE`` prints ``(a,5)``, a ``Types.ROW`` prints ``+I[a, 5]``,
a boolean ``true``, a missing value ``null``, a double ``1.0E7``, a ``Types.SQL_TIMESTAMP``
``2018-03-11 03:00:00.123``, a byte array in a row ``[102, 108]``. An undeclared (pickled) record
prints its Python ``str``. :func:`record_formatter` builds the formatter for a type once, so the
per-record cost is a single call.
"""
from __future__ import annotations

import datetime
import math
import struct
from decimal import Decimal
from typing import Any, Callable

from millstream.common.row import Row
from millstream.common.typeinfo import TypeInformation

Formatter = Callable[[Any], str]

_float32 = struct.Struct("f")
_ARRAYS = {"LIST", "BASIC_ARRAY", "PRIMITIVE_ARRAY", "OBJECT_ARRAY"}


def java_double(value: float) -> str:
    """Java's ``Double.toString``: plain between 10^-3 and 10^7, ``d.dddEn`` outside."""
    return _java_decimal(value, repr(float(value)))


def java_float(value: float) -> str:
    """Java's ``Float.toString``: the shortest decimal that reads back as the same 32-bit float,
    laid out like ``Double.toString``. A ``Types.FLOAT`` value reaches Python as a float32 widened
    to a double (``1.1`` is ``1.100000023841858``); Java prints that float as ``1.1``."""
    if math.isnan(value) or math.isinf(value) or value == 0:
        return _java_decimal(value, repr(float(value)))
    try:
        single = _float32.unpack(_float32.pack(value))[0]
    except OverflowError:  # beyond float32's range: Java's (float) cast gives an infinity
        return "Infinity" if value > 0 else "-Infinity"
    # nine significant digits always round-trip a float32; find the fewest that do
    for digits in range(1, 10):
        text = f"{single:.{digits - 1}e}"
        if _float32.unpack(_float32.pack(float(text)))[0] == single:
            break
    return _java_decimal(single, repr(float(text)))


def _java_decimal(value: float, shortest: str) -> str:
    """Java's layout of a floating value whose shortest decimal is ``shortest`` (Python's repr)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return shortest if "e" not in shortest else format(Decimal(shortest), "f")
    sign, digits, exponent = Decimal(shortest).normalize().as_tuple()
    assert isinstance(exponent, int)
    mantissa = "".join(map(str, digits))
    power = len(digits) - 1 + exponent
    return f"{'-' if sign else ''}{mantissa[0]}.{mantissa[1:] or '0'}E{power}"


def java_sql_time(value: Any) -> str:
    """``java.sql.Time.toString``: ``HH:mm:ss``, whole seconds (the fraction is not shown)."""
    if isinstance(value, datetime.time):
        return f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}"
    return java_value(value)


def java_sql_timestamp(value: Any) -> str:
    """``java.sql.Timestamp.toString``: ``yyyy-mm-dd hh:mm:ss.f``, the fraction without trailing
    zeros but at least one digit (``.123``, ``.0``)."""
    if isinstance(value, datetime.datetime):
        fraction = f"{value.microsecond:06d}".rstrip("0") or "0"
        return value.strftime("%Y-%m-%d %H:%M:%S") + "." + fraction
    return java_value(value)


def java_value(value: Any) -> str:
    """Java's text of a value whose type was not declared in detail (a field of unknown type)."""
    if value is None:
        return "null"
    if isinstance(value, (bytes, bytearray)):
        # a byte[] inside a Row or collection: Flink's Row.toString shows its signed bytes
        return "[" + ", ".join(str(b - 256 if b > 127 else b) for b in value) + "]"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, float):
        return java_double(value)
    if isinstance(value, Row):
        return value.get_row_kind().short_string() + "[" + ", ".join(java_value(v) for v in value) + "]"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(java_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{java_value(k)}={java_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def record_formatter(type_info: TypeInformation | None) -> Formatter:
    """The text of each record of a stream of ``type_info`` (``None``: undeclared, Python's ``str``)."""
    if type_info is None or type_info.name == "PICKLED_BYTE_ARRAY":
        return str
    return _typed(type_info)


def _typed(t: TypeInformation) -> Formatter:
    name = t.name
    if name == "TUPLE":
        fields = [_typed(c) for c in t.components]

        def tuple_text(value: Any) -> str:
            if not isinstance(value, (tuple, list, Row)) or len(value) != len(fields):
                return java_value(value)
            return "(" + ",".join(f(v) for f, v in zip(fields, value)) + ")"

        return tuple_text
    if name == "ROW":
        fields = [_typed(c) for c in t.components]

        def row_text(value: Any) -> str:
            if not isinstance(value, (tuple, list, Row)) or len(value) != len(fields):
                return java_value(value)
            kind = value.get_row_kind().short_string() if isinstance(value, Row) else "+I"
            return kind + "[" + ", ".join(f(v) for f, v in zip(fields, value)) + "]"

        return row_text
    if name in _ARRAYS:
        element = _typed(t.components[0]) if t.components else java_value

        def array_text(value: Any) -> str:
            if value is None:
                return "null"
            if isinstance(value, (bytes, bytearray)):
                return java_value(value)  # Java's bytes are signed
            return "[" + ", ".join(element(v) for v in value) + "]"

        return array_text
    if name == "MAP":
        key, val = (_typed(t.components[0]), _typed(t.components[1])) if len(t.components) == 2 else (java_value, java_value)

        def map_text(value: Any) -> str:
            if not isinstance(value, dict):
                return java_value(value)
            return "{" + ", ".join(f"{key(k)}={val(v)}" for k, v in value.items()) + "}"

        return map_text
    if name == "SQL_TIME":
        return java_sql_time
    if name == "SQL_TIMESTAMP":
        return java_sql_timestamp
    if name == "DOUBLE":
        return lambda value: java_double(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else java_value(value)
    if name == "FLOAT":
        return lambda value: java_float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else java_value(value)
    return java_value
