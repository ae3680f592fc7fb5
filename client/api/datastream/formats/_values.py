"""Field values to and from text, per PyFlink type, as Flink's legacy row formats convert them.

Shared by the JSON and CSV schemas: the type names are those of ``millstream.common.typeinfo``;
integers are range-checked as Java's parsers check them (``Integer.parseInt`` rejects 2**31), and
booleans parse as Java's ``Boolean.parseBoolean`` does: ``true`` in any case is true, anything else
false (Flink's own behaviour, kept so a program reads the same rows under both).
"""
from __future__ import annotations

import datetime as dt
import decimal
import re
import struct

from millstream.common.typeinfo import TypeInformation

# Java's integral ranges: Flink parses into byte, short, int and long and fails outside them.
INT_RANGES = {
    "BYTE": (-(2**7), 2**7 - 1),
    "SHORT": (-(2**15), 2**15 - 1),
    "INT": (-(2**31), 2**31 - 1),
    "LONG": (-(2**63), 2**63 - 1),
}
SCALARS = frozenset({
    "STRING", "CHAR", "BOOLEAN", *INT_RANGES, "BIG_INT", "FLOAT", "DOUBLE", "BIG_DEC",
    "SQL_DATE", "SQL_TIME", "SQL_TIMESTAMP",
})
ARRAYS = frozenset({"LIST", "BASIC_ARRAY", "OBJECT_ARRAY", "PRIMITIVE_ARRAY"})
ROWS = frozenset({"ROW", "TUPLE"})

_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
_TIME = r"(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"


class FieldError(ValueError):
    """A field's text or value that its declared type cannot hold."""


def field_names(type_info: TypeInformation) -> tuple[str, ...]:
    """A row type's field names (``f0, f1...`` for ``Types.ROW`` and tuples)."""
    if type_info.name not in ROWS:
        raise TypeError(f"a row schema needs Types.ROW_NAMED(...) or Types.ROW(...), got {type_info}")
    if type_info.field_names:
        return type_info.field_names
    return tuple(f"f{i}" for i in range(len(type_info.components)))


def parse_int(text: str, type_name: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise FieldError(f"cannot parse {text!r} as {type_name}") from None
    if type_name in INT_RANGES:
        low, high = INT_RANGES[type_name]
        if not low <= value <= high:
            raise FieldError(f"{text!r} is out of range for {type_name} [{low}, {high}]")
    return value


def parse_float(text: str, type_name: str) -> float:
    try:
        return float(text.strip())
    except ValueError:
        raise FieldError(f"cannot parse {text!r} as {type_name}") from None


def parse_decimal(text: str) -> decimal.Decimal:
    try:
        return decimal.Decimal(text.strip())
    except decimal.InvalidOperation:
        raise FieldError(f"cannot parse {text!r} as BIG_DEC") from None


def parse_boolean(text: str) -> bool:
    return text.strip().lower() == "true"


def parse_date(text: str) -> dt.date:
    match = _DATE.fullmatch(text)
    try:
        if match is None:
            raise ValueError
        return dt.date(*(int(g) for g in match.groups()))
    except ValueError:
        raise FieldError(f"cannot parse {text!r} as SQL_DATE (yyyy-MM-dd)") from None


def _micros(fraction: str | None) -> int:
    # Python keeps microseconds: nanosecond digits beyond the sixth are dropped.
    return int((fraction or "0").ljust(6, "0")[:6])


def parse_time(text: str) -> dt.time:
    """``HH:mm:ss``; Flink's SQL_TIME holds no fraction of a second, so one that is not zero fails."""
    match = re.fullmatch(_TIME + "(Z)?", text)
    try:
        if match is None:
            raise ValueError
        hour, minute, second, fraction, _ = match.groups()
        if fraction and int(fraction):
            raise FieldError(f"cannot parse {text!r} as SQL_TIME: fractions of a second are not supported")
        return dt.time(int(hour), int(minute), int(second))
    except ValueError as e:
        if isinstance(e, FieldError):
            raise
        raise FieldError(f"cannot parse {text!r} as SQL_TIME (HH:mm:ss)") from None


def parse_timestamp(text: str, separator: str) -> dt.datetime:
    """``yyyy-MM-dd<sep>HH:mm:ss[.fraction]``; JSON also takes a ``Z`` or ``+00:00`` (UTC only)."""
    zone = "(Z|[+-]\\d{2}:\\d{2})?" if separator == "T" else "()"
    match = re.fullmatch(_DATE.pattern + separator + _TIME + zone, text)
    try:
        if match is None:
            raise ValueError
        y, mo, d, h, mi, s, fraction, offset = match.groups()
        if offset and offset not in ("Z", "+00:00", "-00:00"):
            raise FieldError(f"cannot parse {text!r} as SQL_TIMESTAMP: only UTC ('Z') timestamps are supported")
        return dt.datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), _micros(fraction))
    except ValueError as e:
        if isinstance(e, FieldError):
            raise
        raise FieldError(f"cannot parse {text!r} as SQL_TIMESTAMP (yyyy-MM-dd{separator}HH:mm:ss[.S])") from None


def format_date(value: dt.date) -> str:
    return value.isoformat()


def format_time(value: dt.time) -> str:
    # java.sql.Time holds whole seconds: Flink writes HH:mm:ss.
    return f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}"


def format_timestamp(value: dt.datetime, separator: str, min_fraction: int) -> str:
    """Seconds always; the fraction without trailing zeros (``min_fraction`` digits at least).

    JSON writes ISO_LOCAL_DATE_TIME (``2024-01-02T03:04:05.12``, no fraction when zero); CSV writes
    java.sql.Timestamp's text (``2024-01-02 03:04:05.0``, at least one digit).
    """
    fraction = f"{value.microsecond:06d}".rstrip("0")
    fraction = fraction.ljust(min_fraction, "0")
    text = f"{value.date().isoformat()}{separator}{format_time(value.time())}"
    return text + (f".{fraction}" if fraction else "")


def check_int(value: object, type_name: str) -> int:
    """An integral value to serialize: an int (not a bool) within its Java range."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise FieldError(f"{value!r} is not an integer ({type_name})")
    if type_name in INT_RANGES:
        low, high = INT_RANGES[type_name]
        if not low <= value <= high:
            raise FieldError(f"{value!r} is out of range for {type_name} [{low}, {high}]")
    return value


def java_double(value: float) -> str:
    """Java's ``Double.toString``, the text Flink writes: ``2.5``, ``3.0E38``, ``1.0E-5``, ``NaN``."""
    return _java_decimal_text(value, repr(value))


def java_float(value: float) -> str:
    """Java's ``Float.toString``: the shortest digits that read back as the same 32-bit float."""
    if value != value or value in (float("inf"), float("-inf")):
        return _java_decimal_text(value, repr(value))
    single = struct.unpack("f", struct.pack("f", value))[0]
    for digits in range(1, 10):
        text = f"{single:.{digits}g}"
        if struct.unpack("f", struct.pack("f", float(text)))[0] == single:
            return _java_decimal_text(single, text)
    return _java_decimal_text(single, repr(single))


def _java_decimal_text(value: float, shortest: str) -> str:
    # Java prints plain decimals for 1e-3 <= |x| < 1e7 and d.dddE<n> otherwise, always with a '.'.
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if str(value).startswith("-") else "0.0"
    sign, digits, exponent = decimal.Decimal(shortest).normalize().as_tuple()
    text = "".join(map(str, digits))
    assert isinstance(exponent, int)
    point = len(text) + exponent  # where the decimal point falls in the digit string
    minus = "-" if sign else ""
    if 1e-3 <= abs(value) < 1e7:
        if point <= 0:
            return f"{minus}0.{'0' * -point}{text}"
        if point >= len(text):
            return f"{minus}{text}{'0' * (point - len(text))}.0"
        return f"{minus}{text[:point]}.{text[point:]}"
    return f"{minus}{text[0]}.{text[1:] or '0'}E{point - 1}"
