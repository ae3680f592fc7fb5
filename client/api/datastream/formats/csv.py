"""PyFlink's CSV row formats (``pyflink.datastream.formats.csv``), in pure Python.

A message is one CSV line; its columns are the row type's fields in order. As Flink's
CsvRowSerializationSchema/CsvRowDeserializationSchema (Jackson's CSV underneath): fields separated
by ``,``, strings quoted with ``"`` by Jackson's loose check (see ``_quoted``; a quote inside
doubled), no escape character unless set, array and nested row elements separated by ``;``, no
null literal unless set (then that text is null, in any column). Numbers are written as Java
writes them (``3.0E38``), SQL_DATE as ``yyyy-MM-dd``, SQL_TIME ``HH:mm:ss``, SQL_TIMESTAMP as
java.sql.Timestamp's ``yyyy-MM-dd HH:mm:ss.S``. Numbers are trimmed before parsing; an empty
numeric column is a parse error (only the null literal means null).

CSV files: ``CsvSchema`` (with PyFlink's builder; column types are ``Types``, as Millstream has no
Table API ``DataTypes``), ``CsvReaderFormat.for_schema`` for a FileSource and
``CsvBulkWriters.for_schema`` for ``FileSink.for_bulk_format``. Reading follows Flink's CSV row
converters: columns by position, a line with another column count fails (naming the file and line),
only the null value (if set) reads as null, an empty number column is a parse error.
"""
from __future__ import annotations

import copy
import csv
import datetime as dt
import decimal
import io
from typing import Any, BinaryIO, Callable, Iterator

from millstream.common.row import Row
from millstream.common.serialization import BulkWriter, BulkWriterFactory, DeserializationSchema, SerializationSchema
from millstream.common.typeinfo import TypeInformation, Types
from millstream.datastream.connectors.file_system import StreamFormat
from millstream.datastream.formats import _values as v

__all__ = [
    "CsvSchema", "CsvSchemaBuilder", "CsvReaderFormat", "CsvBulkWriters",
    "CsvRowDeserializationSchema", "CsvRowSerializationSchema",
]

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

    def _row(self, columns: list[str]) -> Row:
        """The Row of one CSV line's column texts; a FieldError names what does not fit."""
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
            return self._row(rows[0] if rows else [])
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


# -- CSV files: CsvSchema, CsvReaderFormat, CsvBulkWriters ----------------------------------------


class _Column:
    """One column of a CsvSchema: its name, its type, and for an array its element separator."""

    def __init__(self, name: str, type_info: TypeInformation, separator: str | None = None) -> None:
        self.name = name
        self.type_info = type_info
        self.separator = separator  # arrays only; "" or None: not split

    def __repr__(self) -> str:
        return f"{self.name}: {self.type_info}"


class CsvSchema:
    """The columns of a CSV file and its dialect (Jackson's CsvSchema, which Flink's CSV files use).

    Build one with ``CsvSchema.builder()``. Column types are Millstream's ``Types`` (PyFlink takes
    the Table API's ``DataTypes``, which Millstream does not have): ``add_number_column(name,
    Types.INT())``; the records are Rows named by the columns.
    """

    def __init__(self, columns: list[_Column], settings: dict[str, Any]) -> None:
        self._columns = list(columns)
        self._settings = dict(settings)
        self._row_type = Types.ROW_NAMED([c.name for c in columns], [c.type_info for c in columns])

    @staticmethod
    def builder() -> "CsvSchemaBuilder":
        return CsvSchemaBuilder()

    def size(self) -> int:
        return len(self._columns)

    def __len__(self) -> int:
        return self.size()

    def get_type_info(self) -> TypeInformation:
        """The Row type of the records (``Types.ROW_NAMED`` of the columns)."""
        return self._row_type

    def __str__(self) -> str:
        return f"CsvSchema({', '.join(map(repr, self._columns))}; {self._settings})"

    __repr__ = __str__


_DEFAULT_SETTINGS: dict[str, Any] = dict(
    column_separator=",", quote_char='"', escape_char=None, line_separator="\n", null_value=None,
    array_element_separator=";", allow_comments=False, use_header=False, skip_first_data_row=False,
    strict_headers=False, any_property_name=None,
)


class CsvSchemaBuilder:
    """Builds a :class:`CsvSchema`, with PyFlink's (Jackson's) builder methods."""

    def __init__(self) -> None:
        self._columns: list[_Column] = []
        self._settings = dict(_DEFAULT_SETTINGS)

    def build(self) -> CsvSchema:
        if not self._columns:
            raise ValueError("a CsvSchema needs at least one column")
        names = [c.name for c in self._columns]
        duplicate = next((n for n in names if names.count(n) > 1), None)
        if duplicate is not None:
            raise ValueError(f"the CsvSchema has the column {duplicate!r} twice")
        return CsvSchema([_Column(c.name, c.type_info, c.separator) for c in self._columns], self._settings)

    def _add(self, name: str, type_info: TypeInformation, separator: str | None = None) -> "CsvSchemaBuilder":
        if not isinstance(name, str) or not name:
            raise ValueError(f"a column name must be a non-empty string, got {name!r}")
        if not isinstance(type_info, TypeInformation):
            raise TypeError(f"column {name!r}: the type must be a Types.* type information, got {type_info!r}")
        _check_type(type_info, name, nested=False)
        self._columns.append(_Column(name, type_info, separator))
        return self

    def add_array_column(self, name: str, separator: str = ";",
                         element_type: TypeInformation | None = None) -> "CsvSchemaBuilder":
        """An array column (a list of ``element_type``, STRING by default) whose elements are
        separated by ``separator`` inside the column."""
        return self._add(name, Types.LIST(element_type or Types.STRING()), separator)

    def add_boolean_column(self, name: str) -> "CsvSchemaBuilder":
        return self._add(name, Types.BOOLEAN())

    def add_number_column(self, name: str, number_type: TypeInformation | None = None) -> "CsvSchemaBuilder":
        """A number column, ``Types.LONG()`` (BIGINT) by default."""
        number_type = number_type or Types.LONG()
        if number_type.name not in (*v.INT_RANGES, "BIG_INT", "FLOAT", "DOUBLE", "BIG_DEC"):
            raise TypeError(f"column {name!r}: {number_type} is not a number type")
        return self._add(name, number_type)

    def add_string_column(self, name: str) -> "CsvSchemaBuilder":
        return self._add(name, Types.STRING())

    def add_columns_from(self, schema: CsvSchema) -> "CsvSchemaBuilder":
        for c in schema._columns:
            self._add(c.name, c.type_info, c.separator)
        return self

    def clear_columns(self) -> "CsvSchemaBuilder":
        self._columns.clear()
        return self

    def set_allow_comments(self, allow: bool = True) -> "CsvSchemaBuilder":
        """Lines starting with ``#`` are comments (skipped when reading)."""
        self._settings["allow_comments"] = bool(allow)
        return self

    def set_any_property_name(self, name: str) -> "CsvSchemaBuilder":
        """Jackson's name for extra columns; kept, but extra columns still fail the row here."""
        self._settings["any_property_name"] = name
        return self

    def disable_array_element_separator(self) -> "CsvSchemaBuilder":
        self._settings["array_element_separator"] = ""
        return self

    def remove_array_element_separator(self, index: int) -> "CsvSchemaBuilder":
        self._columns[index].separator = ""
        return self

    def set_array_element_separator(self, separator: str) -> "CsvSchemaBuilder":
        """The separator of array columns added without one of their own (``;`` by default)."""
        self._settings["array_element_separator"] = separator
        return self

    def set_column_separator(self, char: str) -> "CsvSchemaBuilder":
        self._settings["column_separator"] = _single_char("column separator", char)
        return self

    def disable_escape_char(self) -> "CsvSchemaBuilder":
        self._settings["escape_char"] = None
        return self

    def set_escape_char(self, char: str) -> "CsvSchemaBuilder":
        self._settings["escape_char"] = _single_char("escape char", char)
        return self

    def set_line_separator(self, separator: str) -> "CsvSchemaBuilder":
        """For writing (``\\n`` by default); reading recognizes ``\\n``, ``\\r`` and ``\\r\\n``."""
        self._settings["line_separator"] = separator
        return self

    def set_null_value(self, null_value: str) -> "CsvSchemaBuilder":
        """The text of a null: read as None, and written for None (empty by default)."""
        self._settings["null_value"] = null_value
        return self

    def disable_quote_char(self) -> "CsvSchemaBuilder":
        self._settings["quote_char"] = None
        return self

    def set_quote_char(self, char: str) -> "CsvSchemaBuilder":
        self._settings["quote_char"] = _single_char("quote char", char)
        return self

    def set_skip_first_data_row(self, skip: bool = True) -> "CsvSchemaBuilder":
        self._settings["skip_first_data_row"] = bool(skip)
        return self

    def set_strict_headers(self, strict: bool = True) -> "CsvSchemaBuilder":
        """With a header: its column names must be the schema's, in order."""
        self._settings["strict_headers"] = bool(strict)
        return self

    def set_use_header(self, use: bool = True) -> "CsvSchemaBuilder":
        """The first line is a header of column names (read past; written first)."""
        self._settings["use_header"] = bool(use)
        return self

    def size(self) -> int:
        return len(self._columns)

    def __len__(self) -> int:
        return self.size()


def _separator(schema: CsvSchema, column: _Column) -> str:
    return schema._settings["array_element_separator"] if column.separator is None else column.separator


def _deserializer_of(schema: CsvSchema) -> CsvRowDeserializationSchema:
    """The row deserializer with the schema's dialect (its column converters are reused)."""
    s = schema._settings
    builder = CsvRowDeserializationSchema.Builder(schema._row_type).set_field_delimiter(s["column_separator"])
    if s["quote_char"] is not None:
        builder.set_quote_character(s["quote_char"])
    if s["escape_char"] is not None:
        builder.set_escape_character(s["escape_char"])
    if s["null_value"] is not None:
        builder.set_null_literal(s["null_value"])
    deserializer = builder.build()
    if s["quote_char"] is None:
        deserializer._options.quote_character = None
    # array columns split by their own separators
    for i, column in enumerate(schema._columns):
        if column.type_info.name in v.ARRAYS:
            deserializer._columns[i] = _array_parser(deserializer, column, _separator(schema, column))
    return deserializer


def _array_parser(deserializer: CsvRowDeserializationSchema, column: _Column, sep: str) -> Callable[[str], Any]:
    element = _parser(column.type_info.components[0], f"{column.name}[]")

    def parse(text: str) -> list[Any]:
        parts = (text.split(sep) if sep else [text]) if text else []
        return [deserializer._value(element, p) for p in parts]
    return parse


class CsvReaderFormat(StreamFormat):
    """Reads CSV files as Rows of a :class:`CsvSchema` (a FileSource record stream format).

    Columns map to the schema's in order; a line with another column count, or a column its type
    cannot parse, fails the job naming the file and the line. A file is read whole by one subtask.
    """

    def __init__(self, schema: CsvSchema) -> None:
        StreamFormat.__init__(self, "csv")
        self.schema = schema

    @staticmethod
    def for_schema(schema: CsvSchema) -> "CsvReaderFormat":
        if not isinstance(schema, CsvSchema):
            raise TypeError(f"CsvReaderFormat.for_schema needs a CsvSchema, got {type(schema).__name__}")
        return CsvReaderFormat(schema)

    def get_produced_type(self) -> TypeInformation:
        return self.schema._row_type

    def _read_file(self, path: str, batch_size: int) -> Iterator[list[Any]]:
        s = self.schema._settings
        deserializer = _deserializer_of(self.schema)
        names = [c.name for c in self.schema._columns]
        with open(path, encoding="utf-8", newline="") as f:
            lines: Iterator[str] = f
            if s["allow_comments"]:  # a comment reads as an empty line, so line numbers stay the file's
                lines = ("\n" if ln.startswith("#") else ln for ln in f)
            reader = csv.reader(lines, **deserializer._options.dialect())
            header, skip_row = s["use_header"], s["skip_first_data_row"]
            batch: list[Any] = []
            try:
                for columns in reader:
                    if not columns:
                        continue  # an empty line holds no record (Flink's row converter: null)
                    if header:
                        header = False
                        if s["strict_headers"] and columns != names:
                            raise v.FieldError(f"the header {columns} does not match the schema's columns {names}")
                        continue
                    if skip_row:
                        skip_row = False
                        continue
                    batch.append(deserializer._row(columns))
                    if len(batch) >= batch_size:
                        yield batch
                        batch = []
            except (v.FieldError, csv.Error) as e:
                raise ValueError(f"line {reader.line_num}: {e}") from None
            except UnicodeDecodeError as e:
                raise ValueError(f"not UTF-8 text near line {reader.line_num + 1}: {e.reason}") from None
        if batch:
            yield batch

    def __repr__(self) -> str:
        return f"CsvReaderFormat({self.schema})"


class _CsvBulkWriter(BulkWriter):
    def __init__(self, stream: BinaryIO, schema: CsvSchema) -> None:
        self._stream = stream
        s = schema._settings
        builder = CsvRowSerializationSchema.Builder(schema._row_type).set_field_delimiter(s["column_separator"])
        if s["quote_char"] is None:
            builder.disable_quote_character()
        else:
            builder.set_quote_character(s["quote_char"])
        if s["escape_char"] is not None:
            builder.set_escape_character(s["escape_char"])
        if s["null_value"] is not None:
            builder.set_null_literal(s["null_value"])
        serializer = self._serializer = builder.build()
        serializer._line_delimiter = s["line_separator"]
        for i, column in enumerate(schema._columns):
            if column.type_info.name in v.ARRAYS:
                serializer._columns[i] = _array_formatter(serializer, column, _separator(schema, column))
        if s["use_header"]:
            header = s["column_separator"].join(serializer._quoted(c.name) for c in schema._columns)
            stream.write((header + s["line_separator"]).encode("utf-8"))

    def add_elements(self, elements: list) -> None:
        self._stream.write(b"".join(map(self._serializer.serialize, elements)))

    def finish(self) -> None:
        self._stream.flush()


def _array_formatter(serializer: CsvRowSerializationSchema, column: _Column, sep: str
                     ) -> Callable[[Any], tuple[str, bool]]:
    element = _formatter(column.type_info.components[0], f"{column.name}[]")

    def convert(value: Any) -> tuple[str, bool]:
        if not isinstance(value, (list, tuple)):
            raise v.FieldError(f"field {column.name!r}: {value!r} is not a list")
        return sep.join(serializer._text(element, e)[0] for e in value), True
    return convert


class _CsvWriterFactory(BulkWriterFactory):
    def __init__(self, schema: CsvSchema) -> None:
        self.schema = schema

    def create(self, stream: BinaryIO) -> BulkWriter:
        return _CsvBulkWriter(stream, self.schema)


class CsvBulkWriters:
    """Bulk writer factories for CSV part files (``FileSink.for_bulk_format``)."""

    @staticmethod
    def for_schema(schema: CsvSchema) -> BulkWriterFactory:
        """Writes Rows as CSV lines with the schema's dialect (a header first when it uses one); a
        row that does not fit the schema fails the job naming the field."""
        if not isinstance(schema, CsvSchema):
            raise TypeError(f"CsvBulkWriters.for_schema needs a CsvSchema, got {type(schema).__name__}")
        return _CsvWriterFactory(schema)
