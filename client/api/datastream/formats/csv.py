"""PyFlink's CSV row formats (``pyflink.datastream.formats.csv``), in pure Python.

A message is one CSV line; its columns are the row type's fields in order. As Flink's
CsvRowSerializationSchema/CsvRowDeserializationSchema (Jackson's CSV underneath): fields separated
by ``,``, strings quoted with ``"`` by Jackson's loose check (see ``_quoted``; a quote inside
doubled), no escape character unless set, array and nested row elements separated by ``;``, no
null literal unless set (then that text is null, in any column). Numbers are written as Java
writes them (``3.0E38``), SQL_DATE as ``yyyy-MM-dd``, SQL_TIME ``HH:mm:ss``, SQL_TIMESTAMP as
java.sql.Timestamp's ``yyyy-MM-dd HH:mm:ss.S``. Numbers are trimmed before parsing; an empty
numeric column is a parse error (only the null literal means null).

PyFlink's ``CsvSchema``, ``CsvReaderFormat`` and ``CsvBulkWriter`` (built on the Table API's
DataTypes) are not provided.
"""
from __future__ import annotations

import copy
import csv
import datetime as dt
import decimal
import io
from typing import Any, Callable

from millstream.common.row import Row
from millstream.common.serialization import DeserializationSchema, SerializationSchema
from millstream.common.typeinfo import TypeInformation
from millstream.datastream.formats import _values as v

__all__ = ["CsvRowDeserializationSchema", "CsvRowSerializationSchema"]

_LINE_DELIMITERS = ("\n", "\r", "\r\n", "")


def _single_char(what: str, c: str) -> str:
    if not isinstance(c, str) or len(c) != 1:
        raise ValueError(f"the {what} must be a single character, got {c!r}")
    return c


def _check_type(t: TypeInformation, path: str, nested: bool) -> None:
    """A column is a scalar, an array of scalars or a row of scalars: one level, as Flink's CSV."""
    if t.name in v.SCALARS:
        return
    if not nested and (t.name in v.ARRAYS or t.name in v.ROWS):
        for i, c in enumerate(t.components):
            _check_type(c, f"{path}[{i}]", nested=True)
        return
    raise TypeError(f"CSV rows do not support the type {t} of field {path!r}"
                    + (" (arrays and rows nest one level only)" if nested else ""))


class _Options:
    """What both schemas share: the dialect, the null literal, the array element delimiter."""

    def __init__(self, type_info: TypeInformation) -> None:
        if type_info is None:
            raise TypeError("Type information must not be None")
        self.names = v.field_names(type_info)
        for n, t in zip(self.names, type_info.components):
            _check_type(t, n, nested=False)
        self.type_info = type_info
        self.field_delimiter = ","
        self.array_element_delimiter = ";"
        self.quote_character: str | None = '"'
        self.escape_character: str | None = None
        self.null_literal: str | None = None

    def dialect(self) -> dict[str, Any]:
        quoting = csv.QUOTE_MINIMAL if self.quote_character else csv.QUOTE_NONE
        return dict(delimiter=self.field_delimiter, quotechar=self.quote_character, escapechar=self.escape_character,
                    doublequote=True, quoting=quoting, strict=True, skipinitialspace=False)


def _parser(t: TypeInformation, path: str) -> Callable[[str], Any]:
    name = t.name
    if name in ("STRING", "CHAR"):
        return lambda text: text
    if name == "BOOLEAN":
        return v.parse_boolean
    if name in v.INT_RANGES or name == "BIG_INT":
        return lambda text: v.parse_int(text, name)
    if name in ("FLOAT", "DOUBLE"):
        return lambda text: v.parse_float(text, name)
    if name == "BIG_DEC":
        return v.parse_decimal
    if name == "SQL_DATE":
        return lambda text: v.parse_date(text.strip())
    if name == "SQL_TIME":
        return lambda text: v.parse_time(text.strip())
    return lambda text: v.parse_timestamp(text.strip(), " ")


def _formatter(t: TypeInformation, path: str) -> Callable[[Any], tuple[str, bool]]:
    """A column's text and whether it is a string (checked for quoting) or a number or boolean (not)."""
    name = t.name

    def checked(ok: Callable[[Any], bool], text: Callable[[Any], str], is_string: bool = True
                ) -> Callable[[Any], tuple[str, bool]]:
        def convert(value: Any) -> tuple[str, bool]:
            if not ok(value):
                raise v.FieldError(f"field {path!r}: {value!r} is not a {t} value")
            return text(value), is_string
        return convert

    def number(x: Any) -> bool:
        return isinstance(x, (int, float, decimal.Decimal)) and not isinstance(x, bool)

    if name in ("STRING", "CHAR"):
        return checked(lambda x: isinstance(x, str), str)
    if name == "BOOLEAN":
        return checked(lambda x: isinstance(x, bool), lambda x: "true" if x else "false", is_string=False)
    if name in v.INT_RANGES or name == "BIG_INT":
        def integer(x: Any) -> tuple[str, bool]:
            try:
                return str(v.check_int(x, name)), False
            except v.FieldError as e:
                raise v.FieldError(f"field {path!r}: {e}") from None
        return integer
    if name in ("FLOAT", "DOUBLE"):
        java = v.java_float if name == "FLOAT" else v.java_double
        return checked(number, lambda x: java(float(x)), is_string=False)
    if name == "BIG_DEC":
        return checked(number, lambda x: str(x if isinstance(x, (int, decimal.Decimal)) else decimal.Decimal(repr(x))),
                       is_string=False)
    if name == "SQL_DATE":
        return checked(lambda x: isinstance(x, dt.date) and not isinstance(x, dt.datetime), v.format_date)
    if name == "SQL_TIME":
        return checked(lambda x: isinstance(x, dt.time), v.format_time)
    return checked(lambda x: isinstance(x, dt.datetime), lambda x: v.format_timestamp(x, " ", 1))


class CsvRowDeserializationSchema(DeserializationSchema):
    """Deserializes one CSV line per message into a Row of the given row type.

    A line with more or fewer columns than the row type fails; so does a column that does not
    parse. With ``set_ignore_parse_errors(True)`` such a column is null (missing columns too, extra
    ones are dropped) and a line that is not CSV gives None, as in Flink. With
    ``set_allow_comments(True)`` a line starting with ``#`` is a comment and gives None.
    """

    def __init__(self, options: _Options, allow_comments: bool, ignore_parse_errors: bool) -> None:
        self._options = options
        self._allow_comments = allow_comments
        self._ignore_parse_errors = ignore_parse_errors
        self._columns = [self._column(t, n) for n, t in zip(options.names, options.type_info.components)]

    def get_produced_type(self) -> TypeInformation:
        return self._options.type_info

    def _column(self, t: TypeInformation, path: str) -> Callable[[str], Any]:
        if t.name in v.ARRAYS or t.name in v.ROWS:
            elements = [_parser(c, f"{path}[]") for c in t.components]
            names = v.field_names(t) if t.name in v.ROWS else ()

            def nested(text: str) -> Any:
                parts = text.split(self._options.array_element_delimiter) if text else []
                if names:
                    if len(parts) != len(names):
                        raise v.FieldError(f"{len(parts)} elements do not match the {len(names)} fields {list(names)}")
                    return Row.of_names(names, [self._value(p, e) for p, e in zip(elements, parts)])
                return [self._value(elements[0], e) for e in parts]
            return nested
        return _parser(t, path)

    def _value(self, parse: Callable[[str], Any], text: str) -> Any:
        if self._options.null_literal is not None and text == self._options.null_literal:
            return None
        try:
            return parse(text)
        except v.FieldError:
            if self._ignore_parse_errors:
                return None
            raise

    def deserialize(self, message: bytes) -> Row | None:
        shown = message.decode("utf-8", "replace") if isinstance(message, (bytes, bytearray)) else str(message)
        try:
            raw = message.decode("utf-8") if isinstance(message, (bytes, bytearray)) else str(message)
            # One trailing line break ends the record; it is not part of the last column.
            line = raw[:-2] if raw.endswith("\r\n") else raw[:-1] if raw[-1:] in ("\n", "\r") else raw
            if self._allow_comments and line.startswith("#"):
                return None
            rows = list(csv.reader(io.StringIO(line, newline=""), **self._options.dialect()))
            if len(rows) > 1:
                raise v.FieldError("the message holds more than one CSV line")
            columns = rows[0] if rows else []
            names = self._options.names
            if len(columns) != len(names) and not self._ignore_parse_errors:
                raise v.FieldError(f"Row length mismatch. {len(names)} fields expected but was {len(columns)}")
            values: list[Any] = []
            for i, (name, convert) in enumerate(zip(names, self._columns)):
                if i >= len(columns):
                    values.append(None)
                    continue
                try:
                    values.append(self._value(convert, columns[i]))
                except v.FieldError as e:
                    raise v.FieldError(f"field {name!r}: {e}") from None
            return Row.of_names(names, values)
        except (v.FieldError, csv.Error, UnicodeDecodeError) as e:
            if self._ignore_parse_errors:
                return None
            raise ValueError(f"Failed to deserialize CSV row {shown!r}: {e}") from e

    def __reduce__(self) -> tuple:
        return (CsvRowDeserializationSchema, (self._options, self._allow_comments, self._ignore_parse_errors))

    class Builder:
        """PyFlink's builder: ``CsvRowDeserializationSchema.Builder(type_info).set_...(...).build()``."""

        def __init__(self, type_info: TypeInformation) -> None:
            self._options = _Options(type_info)
            self._allow_comments = False
            self._ignore_parse_errors = False

        def set_field_delimiter(self, delimiter: str) -> "CsvRowDeserializationSchema.Builder":
            self._options.field_delimiter = _single_char("field delimiter", delimiter)
            return self

        def set_allow_comments(self, allow_comments: bool) -> "CsvRowDeserializationSchema.Builder":
            self._allow_comments = allow_comments
            return self

        def set_array_element_delimiter(self, delimiter: str) -> "CsvRowDeserializationSchema.Builder":
            if not delimiter:
                raise ValueError("the array element delimiter must not be empty")
            self._options.array_element_delimiter = delimiter
            return self

        def set_quote_character(self, c: str) -> "CsvRowDeserializationSchema.Builder":
            self._options.quote_character = _single_char("quote character", c)
            return self

        def set_escape_character(self, c: str) -> "CsvRowDeserializationSchema.Builder":
            self._options.escape_character = _single_char("escape character", c)
            return self

        def set_null_literal(self, null_literal: str) -> "CsvRowDeserializationSchema.Builder":
            if null_literal is None:
                raise TypeError("the null literal must not be None")
            self._options.null_literal = null_literal
            return self

        def set_ignore_parse_errors(self, ignore_parse_errors: bool) -> "CsvRowDeserializationSchema.Builder":
            self._ignore_parse_errors = ignore_parse_errors
            return self

        def build(self) -> "CsvRowDeserializationSchema":
            # A copy: setting the builder again must not change a schema it built.
            return CsvRowDeserializationSchema(
                copy.copy(self._options), self._allow_comments, self._ignore_parse_errors)


class CsvRowSerializationSchema(SerializationSchema):
    """Serializes a Row into one CSV line (UTF-8), its fields in the row type's order.

    A null field is written as the null literal (empty by default); a value its column type cannot
    hold fails with a ValueError naming the field. Lines end with the line delimiter (``\\n``).
    """

    def __init__(self, options: _Options, line_delimiter: str) -> None:
        self._options = options
        self._line_delimiter = line_delimiter
        self._columns = [self._column(t, n) for n, t in zip(options.names, options.type_info.components)]
        specials = [options.field_delimiter, options.quote_character or "\0", *line_delimiter]
        self._min_safe = max(map(ord, specials)) + 1

    def _column(self, t: TypeInformation, path: str) -> Callable[[Any], tuple[str, bool]]:
        if t.name in v.ARRAYS or t.name in v.ROWS:
            elements = [_formatter(c, f"{path}[]") for c in t.components]
            is_row = t.name in v.ROWS

            def nested(value: Any) -> tuple[str, bool]:
                if not isinstance(value, (list, tuple, Row)):
                    raise v.FieldError(f"field {path!r}: {value!r} is not a {t} value")
                if is_row and len(value) != len(elements):
                    raise v.FieldError(f"field {path!r}: {len(value)} elements do not match {t}")
                texts = [self._text(elements[i] if is_row else elements[0], e)[0] for i, e in enumerate(value)]
                # The elements joined are one string column, quoted as any string.
                return self._options.array_element_delimiter.join(texts), True
            return nested
        return _formatter(t, path)

    def _text(self, convert: Callable[[Any], tuple[str, bool]], value: Any) -> tuple[str, bool]:
        if value is None:
            return self._options.null_literal or "", False
        return convert(value)

    def _quoted(self, text: str) -> str:
        """A string column as Jackson's CSV writer (Flink's) writes it.

        Jackson's loose check: a string is quoted when it is longer than 24 characters or holds a
        character at or below the highest of the field delimiter, the quote character and the line
        delimiter (so with ``,`` and ``"`` a space or ``+`` quotes it, with ``;`` digits do too), or
        the escape character. Inside quotes a quote is doubled and the escape character doubled.
        Without a quote character Jackson writes the text raw, which breaks the line when it holds
        the delimiter; here the escape character escapes it then, and without one it is an error.
        """
        o = self._options
        q, esc = o.quote_character, o.escape_character
        if q is None:
            specials = {o.field_delimiter, "\r", "\n"}
            if not any(c in specials for c in text):
                return text
            if esc is None:
                raise v.FieldError(f"{text!r} holds the field delimiter or a line break, and quoting is "
                                   "disabled without an escape character")
            return "".join(esc + c if c in specials or c == esc else c for c in text)
        if not (len(text) > 24 or any(ord(c) < self._min_safe for c in text) or (esc is not None and esc in text)):
            return text
        return q + "".join(c + c if c == q or c == esc else c for c in text) + q

    def serialize(self, element: Any) -> bytes:
        names = self._options.names
        try:
            if not isinstance(element, (Row, tuple, list)):
                raise v.FieldError(f"{element!r} is not a Row of {self._options.type_info}")
            if len(element) != len(names):
                raise v.FieldError(
                    f"a row of {len(element)} fields does not match the {len(names)} fields {list(names)}")
            columns = []
            for convert, value in zip(self._columns, element):
                text, is_string = self._text(convert, value)
                columns.append(self._quoted(text) if is_string else text)
            return (self._options.field_delimiter.join(columns) + self._line_delimiter).encode("utf-8")
        except v.FieldError as e:
            raise ValueError(f"Failed to serialize row {element!r} to CSV: {e}") from e

    def __reduce__(self) -> tuple:
        return (CsvRowSerializationSchema, (self._options, self._line_delimiter))

    class Builder:
        """PyFlink's builder: ``CsvRowSerializationSchema.Builder(type_info).set_...(...).build()``."""

        def __init__(self, type_info: TypeInformation) -> None:
            self._options = _Options(type_info)
            self._line_delimiter = "\n"

        def set_field_delimiter(self, c: str) -> "CsvRowSerializationSchema.Builder":
            self._options.field_delimiter = _single_char("field delimiter", c)
            return self

        def set_line_delimiter(self, delimiter: str) -> "CsvRowSerializationSchema.Builder":
            if delimiter not in _LINE_DELIMITERS:
                raise ValueError(f"the line delimiter must be one of {list(_LINE_DELIMITERS)}, got {delimiter!r}")
            self._line_delimiter = delimiter
            return self

        def set_array_element_delimiter(self, delimiter: str) -> "CsvRowSerializationSchema.Builder":
            if not delimiter:
                raise ValueError("the array element delimiter must not be empty")
            self._options.array_element_delimiter = delimiter
            return self

        def disable_quote_character(self) -> "CsvRowSerializationSchema.Builder":
            self._options.quote_character = None
            return self

        def set_quote_character(self, c: str) -> "CsvRowSerializationSchema.Builder":
            self._options.quote_character = _single_char("quote character", c)
            return self

        def set_escape_character(self, c: str) -> "CsvRowSerializationSchema.Builder":
            self._options.escape_character = _single_char("escape character", c)
            return self

        def set_null_literal(self, s: str) -> "CsvRowSerializationSchema.Builder":
            if s is None:
                raise TypeError("the null literal must not be None")
            self._options.null_literal = s
            return self

        def build(self) -> "CsvRowSerializationSchema":
            return CsvRowSerializationSchema(copy.copy(self._options), self._line_delimiter)
