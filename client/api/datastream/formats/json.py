"""PyFlink's JSON row formats (``pyflink.datastream.formats.json``), in pure Python.

A message is one JSON object; a row's fields are its properties, by the names of the row type.
Per field type, as Flink's JsonRowDeserializationSchema/JsonRowSerializationSchema convert:
numbers may also arrive as JSON strings (``"42"`` for an INT), SQL_DATE is ``yyyy-MM-dd``,
SQL_TIME ``HH:mm:ss``, SQL_TIMESTAMP ISO-8601 ``yyyy-MM-ddTHH:mm:ss[.S]`` (a ``Z`` is accepted,
another zone is not), byte arrays base64, nested rows objects, arrays and lists JSON arrays, maps
objects. A STRING field given an object or array receives its JSON text.
"""
from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import json
from typing import Any, Callable

from millstream.common.row import Row
from millstream.common.serialization import DeserializationSchema, SerializationSchema
from millstream.common.typeinfo import TypeInformation
from millstream.datastream.formats import _values as v

__all__ = ["JsonRowDeserializationSchema", "JsonRowSerializationSchema"]

_Convert = Callable[[Any], Any]
_MISSING = object()


def _as_text(node: Any) -> str:
    """Jackson's ``asText`` of a scalar node: a JSON string's content, else the literal."""
    if isinstance(node, str):
        return node
    if isinstance(node, bool):
        return "true" if node else "false"
    if node is None:
        return "null"
    return str(node)


def _is_bytes(type_info: TypeInformation) -> bool:
    return type_info.name == "PICKLED_BYTE_ARRAY" or (
        type_info.name == "PRIMITIVE_ARRAY" and type_info.components[0].name == "BYTE")


class _Reader:
    """Builds a converter per field type, once, at ``build()``: an unsupported type fails there."""

    def __init__(self, fail_on_missing_field: bool, ignore_parse_errors: bool) -> None:
        self.fail_on_missing_field = fail_on_missing_field
        self.ignore_parse_errors = ignore_parse_errors

    def converter(self, t: TypeInformation, path: str) -> _Convert:
        base = self._base(t, path)

        def nullable(node: Any) -> Any:
            if node is None:
                return None
            try:
                return base(node)
            except v.FieldError:
                # Flink: with ignore_parse_errors a field that does not convert becomes null.
                if self.ignore_parse_errors:
                    return None
                raise
        return nullable

    def _base(self, t: TypeInformation, path: str) -> _Convert:
        name = t.name

        def fail(node: Any, what: str) -> v.FieldError:
            return v.FieldError(f"field {path!r}: cannot read {json.dumps(node, default=str)} as {what}")

        if name in ("STRING", "CHAR"):
            return lambda node: json.dumps(node, separators=(",", ":"), default=str) \
                if isinstance(node, (dict, list)) else _as_text(node)
        if name == "BOOLEAN":
            return lambda node: node if isinstance(node, bool) else v.parse_boolean(_as_text(node))
        if name in v.INT_RANGES or name == "BIG_INT":
            def integer(node: Any) -> int:
                if isinstance(node, int) and not isinstance(node, bool):
                    return v.check_int(node, name)
                if isinstance(node, decimal.Decimal) and node == node.to_integral_value():
                    return v.check_int(int(node), name)
                return self._scalar(path, lambda: v.parse_int(_as_text(node), name))
            return integer
        if name in ("FLOAT", "DOUBLE"):
            return lambda node: float(node) if isinstance(node, (int, decimal.Decimal)) and not isinstance(
                node, bool) else self._scalar(path, lambda: v.parse_float(_as_text(node), name))
        if name == "BIG_DEC":
            return lambda node: decimal.Decimal(node) if isinstance(node, (int, decimal.Decimal)) and not isinstance(
                node, bool) else self._scalar(path, lambda: v.parse_decimal(_as_text(node)))
        if name == "SQL_DATE":
            return lambda node: self._scalar(path, lambda: v.parse_date(_as_text(node)))
        if name == "SQL_TIME":
            return lambda node: self._scalar(path, lambda: v.parse_time(_as_text(node)))
        if name == "SQL_TIMESTAMP":
            return lambda node: self._scalar(path, lambda: v.parse_timestamp(_as_text(node), "T"))
        if _is_bytes(t):
            def binary(node: Any) -> bytes:
                if not isinstance(node, str):
                    raise fail(node, "base64 bytes")
                try:
                    return base64.b64decode(node, validate=True)
                except binascii.Error:
                    raise fail(node, "base64 bytes") from None
            return binary
        if name in v.ARRAYS:
            element = self.converter(t.components[0], path + "[]")

            def array(node: Any) -> list:
                if not isinstance(node, list):
                    raise fail(node, f"a JSON array ({t})")
                return [element(e) for e in node]
            return array
        if name == "MAP":
            key, value = (self.converter(c, path + "{}") for c in t.components)

            def mapping(node: Any) -> dict:
                if not isinstance(node, dict):
                    raise fail(node, f"a JSON object ({t})")
                return {key(k): value(e) for k, e in node.items()}
            return mapping
        if name in v.ROWS:
            return self.row(t, path)
        raise TypeError(f"JSON rows do not support the type {t} of field {path!r}")

    def _scalar(self, path: str, parse: Callable[[], Any]) -> Any:
        try:
            return parse()
        except v.FieldError as e:
            raise v.FieldError(f"field {path!r}: {e}") from None

    def row(self, t: TypeInformation, path: str) -> _Convert:
        names = v.field_names(t)
        fields = [(n, self.converter(c, f"{path}.{n}" if path else n)) for n, c in zip(names, t.components)]

        def row(node: Any) -> Row:
            if not isinstance(node, dict):
                where = f"field {path!r}: " if path else ""
                raise v.FieldError(f"{where}expected a JSON object, got {json.dumps(node, default=str)}")
            values: list[Any] = []
            for n, convert in fields:
                field = node.get(n, _MISSING)
                if field is _MISSING:
                    if self.fail_on_missing_field:
                        raise v.FieldError(f"Could not find field with name {n!r}" + (f" in {path!r}" if path else ""))
                    values.append(None)
                else:
                    values.append(convert(field))
            return Row.of_names(names, values)
        return row


class JsonRowDeserializationSchema(DeserializationSchema):
    """Deserializes one JSON object per message into a Row of the given row type.

    A property the row type does not name is ignored; a missing one is null, or fails with
    ``fail_on_missing_field()``. With ``ignore_parse_errors()`` a field that does not convert is
    null and a message that is not a JSON object gives None (a source skips it); without, a
    ValueError names the field and the message. The two options exclude each other, as in Flink.
    """

    def __init__(self, type_info: TypeInformation, fail_on_missing_field: bool = False,
                 ignore_parse_errors: bool = False) -> None:
        if fail_on_missing_field and ignore_parse_errors:
            raise ValueError("JSON format doesn't support fail_on_missing_field and ignore_parse_errors "
                             "both being set")
        v.field_names(type_info)
        self._type_info = type_info
        self._fail_on_missing_field = fail_on_missing_field
        self._ignore_parse_errors = ignore_parse_errors
        self._convert = _Reader(fail_on_missing_field, ignore_parse_errors).row(type_info, "")

    @staticmethod
    def builder() -> "JsonRowDeserializationSchema.Builder":
        return JsonRowDeserializationSchema.Builder()

    def get_produced_type(self) -> TypeInformation:
        return self._type_info

    def deserialize(self, message: bytes) -> Row | None:
        try:
            # Decimals keep a BIG_DEC's digits; DOUBLE fields turn them into floats.
            node = json.loads(message, parse_float=decimal.Decimal)
            return self._convert(node)
        except (ValueError, RecursionError) as e:
            if self._ignore_parse_errors:
                return None
            raw = message.decode("utf-8", "replace") if isinstance(message, (bytes, bytearray)) else message
            raise ValueError(f"Failed to deserialize JSON {raw!r}: {e}") from e

    def __reduce__(self) -> tuple:
        return (JsonRowDeserializationSchema,
                (self._type_info, self._fail_on_missing_field, self._ignore_parse_errors))

    class Builder:
        """PyFlink's builder: ``builder().type_info(t).fail_on_missing_field().build()``."""

        def __init__(self) -> None:
            self._type_info: TypeInformation | None = None
            self._fail_on_missing_field = False
            self._ignore_parse_errors = False

        def type_info(self, type_info: TypeInformation) -> "JsonRowDeserializationSchema.Builder":
            """The row type; its field names are the JSON properties read."""
            self._type_info = type_info
            return self

        def fail_on_missing_field(self) -> "JsonRowDeserializationSchema.Builder":
            """Fail on a message that lacks a field (by default the field is null)."""
            self._fail_on_missing_field = True
            return self

        def ignore_parse_errors(self) -> "JsonRowDeserializationSchema.Builder":
            """Null for a field that does not parse, None for a message that does not."""
            self._ignore_parse_errors = True
            return self

        def build(self) -> "JsonRowDeserializationSchema":
            if self._type_info is None:
                raise TypeError("JsonRowDeserializationSchema needs type_info(...) before build()")
            return JsonRowDeserializationSchema(self._type_info, self._fail_on_missing_field,
                                                self._ignore_parse_errors)


class _Number(str):
    """A number's JSON text as Java writes it (``3.0E38``), put into the output as it is."""


def _java_number(value: float, text: Callable[[float], str]) -> Any:
    # Jackson quotes the values JSON has no number for: "NaN", "Infinity", "-Infinity".
    return text(value) if value != value or value in (float("inf"), float("-inf")) else _Number(text(value))


def _dump(value: Any) -> str:
    """JSON text of a tree of dicts, lists and scalars; a Decimal keeps its digits as a number."""
    if isinstance(value, _Number):
        return str(value)
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise v.FieldError(f"{value} is not a JSON number")
        return str(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{_dump(e)}" for k, e in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_dump(e) for e in value) + "]"
    return json.dumps(value, ensure_ascii=False)


class _Writer:
    """Per field type, the JSON tree of a value (checked against the type)."""

    def converter(self, t: TypeInformation, path: str) -> _Convert:
        base = self._base(t, path)

        def nullable(value: Any) -> Any:
            return None if value is None else base(value)
        return nullable

    def _base(self, t: TypeInformation, path: str) -> _Convert:
        name = t.name

        def wrong(value: Any) -> v.FieldError:
            return v.FieldError(f"field {path!r}: {value!r} is not a {t} value")

        def check(ok: Callable[[Any], bool], then: _Convert) -> _Convert:
            def convert(value: Any) -> Any:
                if not ok(value):
                    raise wrong(value)
                return then(value)
            return convert

        def number(x: Any) -> bool:
            return isinstance(x, (int, float, decimal.Decimal)) and not isinstance(x, bool)

        if name in ("STRING", "CHAR"):
            return check(lambda x: isinstance(x, str), lambda x: x)
        if name == "BOOLEAN":
            return check(lambda x: isinstance(x, bool), lambda x: x)
        if name in v.INT_RANGES or name == "BIG_INT":
            return lambda x: self._scalar(path, lambda: v.check_int(x, name))
        if name in ("FLOAT", "DOUBLE"):
            java = v.java_float if name == "FLOAT" else v.java_double
            return check(number, lambda x: _java_number(float(x), java))
        if name == "BIG_DEC":
            return check(number, lambda x: x if isinstance(x, (int, decimal.Decimal)) else decimal.Decimal(repr(x)))
        if name == "SQL_DATE":
            return check(lambda x: isinstance(x, dt.date) and not isinstance(x, dt.datetime), v.format_date)
        if name == "SQL_TIME":
            return check(lambda x: isinstance(x, dt.time), v.format_time)
        if name == "SQL_TIMESTAMP":
            return check(lambda x: isinstance(x, dt.datetime), lambda x: v.format_timestamp(x, "T", 0))
        if _is_bytes(t):
            return check(lambda x: isinstance(x, (bytes, bytearray)), lambda x: base64.b64encode(x).decode("ascii"))
        if name in v.ARRAYS:
            element = self.converter(t.components[0], path + "[]")
            return check(lambda x: isinstance(x, (list, tuple)), lambda x: [element(e) for e in x])
        if name == "MAP":
            key, value = (self.converter(c, path + "{}") for c in t.components)
            return check(lambda x: isinstance(x, dict),
                         lambda x: {_as_text(key(k)): value(e) for k, e in x.items()})
        if name in v.ROWS:
            return self.row(t, path)
        raise TypeError(f"JSON rows do not support the type {t} of field {path!r}")

    def _scalar(self, path: str, convert: Callable[[], Any]) -> Any:
        try:
            return convert()
        except v.FieldError as e:
            raise v.FieldError(f"field {path!r}: {e}") from None

    def row(self, t: TypeInformation, path: str) -> _Convert:
        names = v.field_names(t)
        fields = [self.converter(c, f"{path}.{n}" if path else n) for n, c in zip(names, t.components)]

        def row(value: Any) -> dict:
            if not isinstance(value, (Row, tuple, list)):
                raise v.FieldError(f"{f'field {path!r}: ' if path else ''}{value!r} is not a Row of {t}")
            if len(value) != len(names):
                raise v.FieldError(
                    f"{f'field {path!r}: ' if path else ''}a row of {len(value)} fields does not match "
                    f"the {len(names)} fields {list(names)}")
            return {n: convert(e) for n, convert, e in zip(names, fields, value)}
        return row


class JsonRowSerializationSchema(SerializationSchema):
    """Serializes a Row into one JSON object (UTF-8), its fields by position under the type's names.

    A null field is written as ``null``; a value its field type cannot hold fails with a ValueError
    naming the field. What it writes, JsonRowDeserializationSchema reads back.
    """

    def __init__(self, type_info: TypeInformation) -> None:
        v.field_names(type_info)
        self._type_info = type_info
        self._convert = _Writer().row(type_info, "")

    @staticmethod
    def builder() -> "JsonRowSerializationSchema.Builder":
        return JsonRowSerializationSchema.Builder()

    def serialize(self, element: Any) -> bytes:
        try:
            return _dump(self._convert(element)).encode("utf-8")
        except v.FieldError as e:
            raise ValueError(f"Failed to serialize row {element!r} to JSON: {e}") from e

    def __reduce__(self) -> tuple:
        return (JsonRowSerializationSchema, (self._type_info,))

    class Builder:
        """PyFlink's builder: ``builder().with_type_info(t).build()``."""

        def __init__(self) -> None:
            self._type_info: TypeInformation | None = None

        def with_type_info(self, type_info: TypeInformation) -> "JsonRowSerializationSchema.Builder":
            """The row type; its field names are the JSON properties written."""
            self._type_info = type_info
            return self

        def build(self) -> "JsonRowSerializationSchema":
            if self._type_info is None:
                raise TypeError("Typeinfo should be set: JsonRowSerializationSchema needs with_type_info(...)")
            return JsonRowSerializationSchema(self._type_info)
