"""PyFlink's Parquet formats (``pyflink.datastream.formats.parquet``), on pyarrow.

* ``ParquetColumnarRowInputFormat(row_type, ...)``: a FileSource bulk format reading the row type's
  columns (by name) of Parquet files as Rows, a record batch of ``batch_size`` rows at a time.
  Parquet files are splittable: each row group is a split, read by one subtask.
* ``ParquetBulkWriters.for_row_type(row_type)``: a FileSink bulk writer factory writing Rows.
* ``AvroParquetReaders.for_generic_record(schema)`` / ``AvroParquetWriters.for_generic_record(schema)``:
  Parquet files of Avro generic records (dicts), with the Avro schema's columns.

A row type is Millstream's ``Types.ROW_NAMED(...)`` (PyFlink takes the Table API's
``DataTypes.ROW``, which Millstream does not have); ``hadoop_config`` is accepted and unused (files
are local). Types map to Parquet as Flink's ParquetRowDataWriter maps them: BOOLEAN, BYTE/SHORT/INT
(INT32), LONG (INT64), FLOAT, DOUBLE, STRING (UTF-8 binary), BIG_DEC (DECIMAL(38, 18)),
SQL_DATE (DATE), SQL_TIME (TIME millis), PRIMITIVE_ARRAY(BYTE) (binary), lists, maps and rows;
SQL_TIMESTAMP is written as a TIMESTAMP of microseconds (Flink writes the legacy INT96; readers
of either get the same instants). A writer buffers its rows and writes them as one row group per
``ROW_GROUP_ROWS`` rows or at the end of the part file (each checkpoint rolls part files).
"""
from __future__ import annotations

import json
from typing import Any, BinaryIO, Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from millstream.common.row import Row, rows_of_names
from millstream.common.serialization import BulkWriter, BulkWriterFactory
from millstream.common.typeinfo import TypeInformation
from millstream.datastream.connectors.file_system import BulkFormat, StreamFormat
from millstream.datastream.formats.avro import AvroSchema

__all__ = ["AvroParquetReaders", "AvroParquetWriters", "ParquetColumnarRowInputFormat", "ParquetBulkWriters"]

ROW_GROUP_ROWS = 1 << 16

_SCALARS: dict[str, Any] = {
    "BOOLEAN": pa.bool_(), "BYTE": pa.int8(), "SHORT": pa.int16(), "INT": pa.int32(), "LONG": pa.int64(),
    "FLOAT": pa.float32(), "DOUBLE": pa.float64(), "STRING": pa.string(), "CHAR": pa.string(),
    "BIG_DEC": pa.decimal128(38, 18), "SQL_DATE": pa.date32(), "SQL_TIME": pa.time32("ms"),
    "SQL_TIMESTAMP": pa.timestamp("us"), "INSTANT": pa.timestamp("us", tz="UTC"),
}


def arrow_type(t: TypeInformation, path: str = "") -> pa.DataType:
    """The Arrow (Parquet) type of a Millstream type."""
    name = t.name
    if name in _SCALARS:
        return _SCALARS[name]
    if name == "PRIMITIVE_ARRAY" and t.components[0].name == "BYTE":
        return pa.binary()
    if name in ("LIST", "BASIC_ARRAY", "OBJECT_ARRAY", "PRIMITIVE_ARRAY"):
        return pa.list_(arrow_type(t.components[0], f"{path}[]"))
    if name == "MAP":
        return pa.map_(arrow_type(t.components[0], f"{path}.key"), arrow_type(t.components[1], f"{path}.value"))
    if name in ("ROW", "TUPLE"):
        return pa.struct(_fields(t, path))
    raise TypeError(f"Parquet has no column type for {t}" + (f" (field {path!r})" if path else ""))


def _names(t: TypeInformation) -> list[str]:
    return list(t.field_names) if t.field_names else [f"f{i}" for i in range(len(t.components))]


def _fields(t: TypeInformation, path: str = "") -> list[pa.Field]:
    return [pa.field(n, arrow_type(c, f"{path}.{n}" if path else n)) for n, c in zip(_names(t), t.components)]


def _row_schema(row_type: TypeInformation, who: str) -> pa.Schema:
    if not isinstance(row_type, TypeInformation) or row_type.name != "ROW":
        raise TypeError(f"{who} needs a row type (Types.ROW_NAMED(...)), got {row_type!r}")
    return pa.schema(_fields(row_type))


def _plain(value: Any, t: pa.DataType) -> Any:
    """A Python value as pyarrow takes it for ``t``: Rows of struct columns as dicts."""
    if value is None:
        return None
    if pa.types.is_struct(t):
        if isinstance(value, dict):
            return {f.name: _plain(value.get(f.name), f.type) for f in t}
        return {f.name: _plain(v, f.type) for f, v in zip(t, value)}
    if pa.types.is_list(t):
        return [_plain(v, t.value_type) for v in value]
    if pa.types.is_map(t):
        return [(k, _plain(v, t.item_type)) for k, v in value.items()]
    return value


def _needs_conversion(t: pa.DataType) -> bool:
    return pa.types.is_struct(t) or pa.types.is_list(t) or pa.types.is_map(t)


def _open(path: str) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as e:
        raise ValueError(f"not a Parquet file: {e}") from None


def _row_group_splits(path: str) -> list[tuple[int, int]]:
    """A Parquet file's splits: one per row group (Flink splits a Parquet file by row groups too),
    each ``(first, end)``, read by one subtask."""
    return [(i, i + 1) for i in range(_open(path).num_row_groups)]


def _rows(schema: pa.Schema, columns: Iterable[Any], nested: list[bool]) -> list[Any]:
    """Rows of a batch's columns (in the schema's order), each cast to the row type's column type;
    ``nested[i]``: column i's values need converting from Arrow's Python values."""
    values = []
    for name, t, column, conv in zip(schema.names, schema.types, columns, nested):
        if column.type != t:
            try:
                column = column.cast(t)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise ValueError(f"column {name!r} of type {column.type} cannot be read as {t}: {e}") from None
        py = column.to_pylist()
        values.append([_from_arrow(v, t) for v in py] if conv else py)
    return rows_of_names(schema.names, zip(*values))


def _row_groups(pf: pq.ParquetFile, part: tuple[int, int] | None) -> list[int]:
    return list(range(pf.num_row_groups) if part is None else range(*part))


def _from_arrow(value: Any, t: pa.DataType) -> Any:
    """A value pyarrow read, as the Row-based API hands it on: structs as named Rows, maps as dicts."""
    if value is None:
        return None
    if pa.types.is_struct(t):
        return Row.of_names([f.name for f in t], [_from_arrow(value.get(f.name), f.type) for f in t])
    if pa.types.is_list(t):
        return [_from_arrow(v, t.value_type) for v in value]
    if pa.types.is_map(t):
        return {k: _from_arrow(v, t.item_type) for k, v in value}
    return value


class ParquetColumnarRowInputFormat(BulkFormat):
    """Reads the columns of ``row_type`` (by name) from Parquet files into Rows of that type.

    A column missing from a file, or of a type that cannot be cast to the row type's, fails the
    job naming the file and the column. ``batch_size`` rows are decoded at a time.
    """

    def __init__(self, row_type: TypeInformation, hadoop_config: Any = None, batch_size: int = 2048,
                 is_utc_timestamp: bool = False, is_case_sensitive: bool = True) -> None:
        self.schema = _row_schema(row_type, "ParquetColumnarRowInputFormat")
        if not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size must be a positive number, got {batch_size!r}")
        self.row_type = row_type
        self.batch_size = batch_size
        self.is_utc_timestamp = is_utc_timestamp
        self.is_case_sensitive = is_case_sensitive

    def get_produced_type(self) -> TypeInformation:
        return self.row_type

    def _columns(self, pf: pq.ParquetFile) -> list[str]:
        """The file's column names for the row type's fields (case-insensitive when asked)."""
        present = pf.schema_arrow.names
        wanted = self.schema.names
        if self.is_case_sensitive:
            by_name = {n: n for n in present}
            found = [by_name.get(n) for n in wanted]
        else:
            lower = {n.lower(): n for n in present}
            found = [lower.get(n.lower()) for n in wanted]
        missing = [w for w, f in zip(wanted, found) if f is None]
        if missing:
            raise ValueError(f"the file has no column {missing[0]!r} (its columns: {present})")
        return [f for f in found if f is not None]

    def _splits(self, path: str) -> list[tuple[int, int]]:
        return _row_group_splits(path)

    def _read_file(self, path: str, batch_size: int, part: tuple[int, int] | None = None) -> Iterator[list[Any]]:
        pf = _open(path)
        columns = self._columns(pf)
        nested = [_needs_conversion(t) for t in self.schema.types]
        for batch in pf.iter_batches(batch_size=self.batch_size, columns=columns, row_groups=_row_groups(pf, part)):
            yield _rows(self.schema, batch.columns, nested)

    def __repr__(self) -> str:
        return f"ParquetColumnarRowInputFormat({self.row_type})"


class _ParquetWriter(BulkWriter):
    """Buffers records and writes row groups of ``ROW_GROUP_ROWS`` (and the rest at ``finish``)."""

    def __init__(self, stream: BinaryIO, schema: pa.Schema, rows_as_dicts: bool) -> None:
        self._stream = stream
        self._schema = schema
        self._dicts = rows_as_dicts
        self._writer: pq.ParquetWriter | None = None
        self._buffer: list[Any] = []

    def add_elements(self, elements: list) -> None:
        self._buffer.extend(elements)
        if len(self._buffer) >= ROW_GROUP_ROWS:
            self._write()

    def _table(self, records: list[Any]) -> pa.Table:
        schema = self._schema
        if self._dicts:
            columns = [[r.get(f.name) if isinstance(r, dict) else _bad(r, "a dict (an Avro generic record)")
                        for r in records] for f in schema]
        else:
            width = len(schema)
            for r in records:
                if not isinstance(r, (Row, tuple, list)) or len(r) != width:
                    _bad(r, f"a Row of {width} fields {schema.names}")
            columns = [list(c) for c in zip(*records)] if records else [[] for _ in schema]
        arrays = []
        for f, column in zip(schema, columns):
            if _needs_conversion(f.type):
                column = [_plain(v, f.type) for v in column]
            try:
                arrays.append(pa.array(column, type=f.type))
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as e:
                raise ValueError(f"field {f.name!r}: a value does not fit the Parquet type {f.type}: {e}") from None
        return pa.Table.from_arrays(arrays, schema=schema)

    def _write(self) -> None:
        records, self._buffer = self._buffer, []
        table = self._table(records)
        if self._writer is None:
            self._writer = pq.ParquetWriter(self._stream, self._schema)
        self._writer.write_table(table, row_group_size=ROW_GROUP_ROWS)

    def finish(self) -> None:
        if self._buffer or self._writer is None:
            self._write()  # an empty part file is still a valid Parquet file
        assert self._writer is not None
        self._writer.close()  # writes the footer; the sink closes the stream


def _bad(record: Any, expected: str) -> Any:
    raise ValueError(f"record {record!r} is not {expected}")


class _ParquetWriterFactory(BulkWriterFactory):
    def __init__(self, schema: pa.Schema, rows_as_dicts: bool) -> None:
        self.schema = schema
        self.rows_as_dicts = rows_as_dicts

    def create(self, stream: BinaryIO) -> BulkWriter:
        return _ParquetWriter(stream, self.schema, self.rows_as_dicts)


class ParquetBulkWriters:
    """Bulk writer factories writing Rows into Parquet files (``FileSink.for_bulk_format``)."""

    @staticmethod
    def for_row_type(row_type: TypeInformation, hadoop_config: Any = None,
                     utc_timestamp: bool = False) -> BulkWriterFactory:
        """Rows of ``row_type`` (their fields by position) as Parquet columns named by the row
        type; a row that does not fit fails the job naming the field."""
        return _ParquetWriterFactory(_row_schema(row_type, "ParquetBulkWriters.for_row_type"), False)


# -- Avro generic records in Parquet ---------------------------------------------------------------


def _avro_arrow_type(schema: Any, path: str) -> tuple[pa.DataType, bool]:
    """The Arrow type of an Avro schema and whether it is nullable (a union with null)."""
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) != 1:
            raise TypeError(f"field {path!r}: Parquet has no column type for the Avro union {json.dumps(schema)}")
        return _avro_arrow_type(branches[0], path)[0], True
    if isinstance(schema, dict):
        logical = schema.get("logicalType")
        if logical == "date":
            return pa.date32(), False
        if logical == "timestamp-millis":
            return pa.timestamp("ms", tz="UTC"), False
        if logical == "timestamp-micros":
            return pa.timestamp("us", tz="UTC"), False
        if logical == "time-millis":
            return pa.time32("ms"), False
        if logical == "decimal":
            return pa.decimal128(schema["precision"], schema.get("scale", 0)), False
        kind = schema["type"]
        if kind == "record":
            return pa.struct([_avro_field(f, f"{path}.{f['name']}" if path else f["name"]) for f in schema["fields"]]), False
        if kind == "array":
            return pa.list_(_avro_arrow_type(schema["items"], f"{path}[]")[0]), False
        if kind == "map":
            return pa.map_(pa.string(), _avro_arrow_type(schema["values"], f"{path}[]")[0]), False
        if kind == "enum":
            return pa.string(), False
        if kind == "fixed":
            return pa.binary(schema["size"]), False
        return _avro_arrow_type(kind, path)
    primitives = {"boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(), "float": pa.float32(),
                  "double": pa.float64(), "string": pa.string(), "bytes": pa.binary(), "null": pa.null()}
    if schema in primitives:
        return primitives[schema], schema == "null"
    raise TypeError(f"field {path!r}: Parquet has no column type for the Avro type {schema!r}")


def _avro_field(field: dict[str, Any], path: str) -> pa.Field:
    t, nullable = _avro_arrow_type(field["type"], path)
    return pa.field(field["name"], t, nullable=nullable)


def _avro_arrow_schema(schema: AvroSchema) -> pa.Schema:
    parsed = schema._parsed
    if not isinstance(parsed, dict) or parsed.get("type") != "record":
        raise ValueError("Avro Parquet files need an Avro record schema")
    return pa.schema([_avro_field(f, f["name"]) for f in parsed["fields"]])


class _AvroParquetFormat(StreamFormat):
    """Reads Parquet files into Avro generic records (dicts) of the schema's fields."""

    def __init__(self, schema: AvroSchema) -> None:
        StreamFormat.__init__(self, "avro-parquet")
        self.schema = schema
        self._arrow = _avro_arrow_schema(schema)

    def _splits(self, path: str) -> list[tuple[int, int]]:
        return _row_group_splits(path)

    def _read_file(self, path: str, batch_size: int, part: tuple[int, int] | None = None) -> Iterator[list[Any]]:
        pf = _open(path)
        names = self._arrow.names
        missing = [n for n in names if n not in pf.schema_arrow.names]
        if missing:
            raise ValueError(f"the file has no column {missing[0]!r} (its columns: {pf.schema_arrow.names})")
        record = pa.struct(list(self._arrow))
        for batch in pf.iter_batches(batch_size=batch_size, columns=names, row_groups=_row_groups(pf, part)):
            yield [_avro_value(r, record) for r in batch.to_pylist()]

    def __reduce__(self) -> tuple:
        return (_AvroParquetFormat, (self.schema,))


def _avro_value(value: Any, t: pa.DataType) -> Any:
    """A value pyarrow read as a generic record holds it: structs as dicts, maps as dicts."""
    if value is None:
        return None
    if pa.types.is_struct(t):
        return {f.name: _avro_value(value.get(f.name), f.type) for f in t}
    if pa.types.is_list(t):
        return [_avro_value(v, t.value_type) for v in value]
    if pa.types.is_map(t):
        return {k: _avro_value(v, t.item_type) for k, v in value}
    return value


class AvroParquetReaders:
    """Stream formats reading Parquet files into Avro generic records."""

    @staticmethod
    def for_generic_record(schema: AvroSchema) -> StreamFormat:
        """Reads the schema's fields (by name) of Parquet files as dicts (generic records)."""
        if not isinstance(schema, AvroSchema):
            raise TypeError(f"for_generic_record needs an AvroSchema, got {type(schema).__name__}")
        return _AvroParquetFormat(schema)


class AvroParquetWriters:
    """Bulk writer factories writing Avro generic records (dicts) into Parquet files."""

    @staticmethod
    def for_generic_record(schema: AvroSchema) -> BulkWriterFactory:
        if not isinstance(schema, AvroSchema):
            raise TypeError(f"for_generic_record needs an AvroSchema, got {type(schema).__name__}")
        return _ParquetWriterFactory(_avro_arrow_schema(schema), True)
