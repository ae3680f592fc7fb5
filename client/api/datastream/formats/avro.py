"""PyFlink's Avro formats (``pyflink.datastream.formats.avro``), on fastavro.

* ``AvroRowSerializationSchema`` / ``AvroRowDeserializationSchema``: a Row to and from one Avro
  binary-encoded record of a record schema, as Flink's flink-avro writes it for a message: the plain
  Avro binary encoding, no container header and no schema-registry prefix. The Row's fields map to
  the schema's fields by position (Flink's ``convertRowToAvroRecord``), so ``Types.ROW([INT,
  STRING])`` writes into ``{id: int, name: string}``; a read record is a Row named by the schema.
* ``AvroSchema``: a parsed schema (``parse_string``, ``parse_file``).
* ``AvroInputFormat(path, schema)``: the generic records of Avro object container files, as dicts
  (what PyFlink hands a Python function for a GenericRecord). ``env.create_input(format)`` reads
  its path, or ``FileSource.for_record_stream_format(format, *paths)`` reads any paths.
* ``AvroBulkWriters.for_generic_record(schema)`` (Flink's ``AvroWriters``): a bulk writer factory
  for ``FileSink.for_bulk_format`` writing dicts into Avro container files.

Only ``avro_schema_string`` is taken by the row schemas: ``record_class`` names a generated Java
class, which a Python runtime has none of.
"""
from __future__ import annotations

import datetime as dt
import io
import json
from typing import Any, BinaryIO, Callable, Iterator

import fastavro
import fastavro.write

from millstream.common.row import Row
from millstream.common.serialization import BulkWriter, BulkWriterFactory, DeserializationSchema, SerializationSchema
from millstream.common.typeinfo import TypeInformation, Types
from millstream.datastream.connectors.file_system import StreamFormat, _local_path

__all__ = [
    "AvroSchema",
    "GenericRecordAvroTypeInfo",
    "AvroInputFormat",
    "AvroBulkWriters",
    "AvroWriters",
    "AvroRowDeserializationSchema",
    "AvroRowSerializationSchema",
]


class AvroSchema:
    """An Avro schema, parsed and checked (fastavro's ``parse_schema``); ``str()`` is its JSON."""

    def __init__(self, schema_json: str) -> None:
        try:
            raw = json.loads(schema_json)
        except json.JSONDecodeError as e:
            raise ValueError(f"not an Avro schema: the text is not JSON ({e})") from None
        try:
            self._parsed = fastavro.parse_schema(raw)
        except Exception as e:  # noqa: BLE001 - fastavro raises SchemaParseException, ValueError, KeyError...
            raise ValueError(f"not a valid Avro schema: {e}") from None
        self._json = json.dumps(raw)

    @staticmethod
    def parse_string(json_schema: str) -> "AvroSchema":
        """Parses a schema from its JSON text."""
        return AvroSchema(json_schema)

    @staticmethod
    def parse_file(file_path: str) -> "AvroSchema":
        """Parses a schema definition file (``.avsc``, JSON)."""
        with open(file_path, encoding="utf-8") as f:
            text = f.read()
        try:
            return AvroSchema(text)
        except ValueError as e:
            raise ValueError(f"{file_path}: {e}") from None

    def __str__(self) -> str:
        return self._json

    def __repr__(self) -> str:
        return f"AvroSchema({self._json})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AvroSchema) and json.loads(self._json) == json.loads(other._json)

    def __hash__(self) -> int:
        return hash(self._json)

    def __reduce__(self) -> tuple:
        return (AvroSchema, (self._json,))


def GenericRecordAvroTypeInfo(schema: AvroSchema) -> TypeInformation:  # noqa: N802 - PyFlink's class name
    """PyFlink's type of Avro generic records. Records here are plain dicts, which a task hands on
    as any Python object, so this is ``Types.PICKLED_BYTE_ARRAY()`` whatever the schema."""
    if not isinstance(schema, AvroSchema):
        raise TypeError(f"GenericRecordAvroTypeInfo needs an AvroSchema, got {type(schema).__name__}")
    return Types.PICKLED_BYTE_ARRAY()


# -- Row <-> Avro datum ---------------------------------------------------------------------------


def _branches(schema: Any) -> list[Any]:
    return schema if isinstance(schema, list) else [schema]


def _type_name(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return "union"
    return schema["type"] if isinstance(schema["type"], str) else _type_name(schema["type"])


def _to_avro(schema: Any, value: Any, path: str) -> Any:
    """A Python value (Rows for records) as the datum fastavro writes for ``schema``."""
    if isinstance(schema, list):  # a union: null, or the branch the value fits
        if value is None:
            if "null" not in schema:
                raise ValueError(f"field {path!r} is null, but its Avro type {json.dumps(schema)} has no null")
            return None
        branches = [b for b in schema if b != "null"]
        if len(branches) == 1:
            return _to_avro(branches[0], value, path)
        if isinstance(value, (Row, tuple)):
            records = [b for b in branches if _type_name(b) == "record"]
            if records:
                return _to_avro(records[0], value, path)
        return value  # fastavro picks the branch of a plain value
    kind = _type_name(schema)
    if value is None:
        if kind == "null":
            return None
        raise ValueError(f"field {path!r} is null, but its Avro type {kind!r} is not nullable")
    if kind == "record":
        fields = schema["fields"]
        if isinstance(value, dict):
            return {f["name"]: _to_avro(f["type"], value.get(f["name"]), f"{path}.{f['name']}" if path else f["name"])
                    for f in fields}
        if not isinstance(value, (Row, tuple, list)):
            raise ValueError(f"{'field ' + repr(path) if path else 'the record'}: {value!r} is not a Row of "
                             f"the Avro record {schema.get('name')!r}")
        if len(value) != len(fields):
            raise ValueError(f"{'field ' + repr(path) if path else 'the record'}: a row of {len(value)} fields "
                             f"does not match the {len(fields)} fields of the Avro record {schema.get('name')!r}")
        return {f["name"]: _to_avro(f["type"], v, f"{path}.{f['name']}" if path else f["name"])
                for f, v in zip(fields, value)}
    if kind == "array":
        return [_to_avro(schema["items"], x, f"{path}[]") for x in value]
    if kind == "map":
        return {k: _to_avro(schema["values"], x, f"{path}[{k!r}]") for k, x in value.items()}
    return value


def _from_avro(schema: Any, value: Any) -> Any:
    """A datum fastavro read, as Flink's AvroRowDeserializationSchema hands it to Python: records
    as Rows named by the schema, timestamps as naive datetimes (UTC), enums as strings."""
    if value is None:
        return None
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) == 1:
            return _from_avro(branches[0], value)
        if isinstance(value, dict):
            records = [b for b in branches if _type_name(b) == "record"]
            for b in records:
                if {f["name"] for f in b["fields"]} == set(value):
                    return _from_avro(b, value)
        return _plain(value)
    kind = _type_name(schema)
    if kind == "record":
        fields = schema["fields"]
        return Row.of_names([f["name"] for f in fields], [_from_avro(f["type"], value.get(f["name"])) for f in fields])
    if kind == "array":
        return [_from_avro(schema["items"], x) for x in value]
    if kind == "map":
        return {k: _from_avro(schema["values"], x) for k, x in value.items()}
    return _plain(value)


def _plain(value: Any) -> Any:
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return value


_PRIMITIVE_TYPES: dict[str, Callable[[], TypeInformation]] = {
    "boolean": Types.BOOLEAN, "int": Types.INT, "long": Types.LONG, "float": Types.FLOAT,
    "double": Types.DOUBLE, "string": Types.STRING, "enum": Types.STRING,
}
_LOGICAL_TYPES: dict[str, Callable[[], TypeInformation]] = {
    "date": Types.SQL_DATE, "time-millis": Types.SQL_TIME, "time-micros": Types.SQL_TIME,
    "timestamp-millis": Types.SQL_TIMESTAMP, "timestamp-micros": Types.SQL_TIMESTAMP, "decimal": Types.BIG_DEC,
    "uuid": Types.STRING,
}


def _type_info(schema: Any) -> TypeInformation:
    """The Flink type of an Avro schema (Flink's AvroSchemaConverter.convertToTypeInfo)."""
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        return _type_info(branches[0]) if len(branches) == 1 else Types.PICKLED_BYTE_ARRAY()
    if isinstance(schema, dict):
        logical = schema.get("logicalType")
        if logical in _LOGICAL_TYPES:
            return _LOGICAL_TYPES[logical]()
    kind = _type_name(schema)
    if kind == "record":
        return Types.ROW_NAMED([f["name"] for f in schema["fields"]], [_type_info(f["type"]) for f in schema["fields"]])
    if kind == "array":
        return Types.OBJECT_ARRAY(_type_info(schema["items"]))
    if kind == "map":
        return Types.MAP(Types.STRING(), _type_info(schema["values"]))
    if kind in ("bytes", "fixed"):
        return Types.PRIMITIVE_ARRAY(Types.BYTE())
    if kind in _PRIMITIVE_TYPES:
        return _PRIMITIVE_TYPES[kind]()
    return Types.PICKLED_BYTE_ARRAY()


def _record_schema(avro_schema_string: str | None, record_class: str | None, who: str) -> AvroSchema:
    if avro_schema_string is None and record_class is None:
        raise TypeError("record_class or avro_schema_string should be specified.")
    if avro_schema_string is None:
        raise ValueError(f"{who}: record_class ({record_class!r}) names a generated Java class, which Millstream "
                         "cannot load; pass avro_schema_string")
    schema = AvroSchema(avro_schema_string)
    if _type_name(schema._parsed) != "record":
        raise ValueError(f"{who} needs an Avro record schema, got type {_type_name(schema._parsed)!r}")
    return schema


class AvroRowSerializationSchema(SerializationSchema):
    """Serializes a Row into one Avro binary-encoded record of the given record schema.

    The row's fields are written to the schema's fields by position; nested Rows go to nested
    records, lists to arrays, dicts to maps, ``None`` to a nullable (union with null) field. A row
    that does not fit (field count, a null in a non-nullable field, a value of another type) fails
    with a ValueError naming the field.
    """

    def __init__(self, record_class: str | None = None, avro_schema_string: str | None = None) -> None:
        self._schema = _record_schema(avro_schema_string, record_class, "AvroRowSerializationSchema")

    def serialize(self, element: Any) -> bytes:
        parsed = self._schema._parsed
        try:
            datum = _to_avro(parsed, element, "")
            out = io.BytesIO()
            fastavro.schemaless_writer(out, parsed, datum)
        except (ValueError, TypeError, AttributeError, KeyError, OverflowError) as e:
            raise ValueError(f"Failed to serialize row {element!r} to Avro: {e}") from e
        return out.getvalue()

    def __reduce__(self) -> tuple:
        return (AvroRowSerializationSchema, (None, str(self._schema)))


class AvroRowDeserializationSchema(DeserializationSchema):
    """Deserializes one Avro binary-encoded record of the given record schema into a Row whose
    field names are the schema's. Bytes that are not such a record fail with a ValueError."""

    def __init__(self, record_class: str | None = None, avro_schema_string: str | None = None) -> None:
        self._schema = _record_schema(avro_schema_string, record_class, "AvroRowDeserializationSchema")

    def get_produced_type(self) -> TypeInformation:
        return _type_info(self._schema._parsed)

    def deserialize(self, message: bytes) -> Row:
        parsed = self._schema._parsed
        data = io.BytesIO(bytes(message))
        try:
            datum = fastavro.schemaless_reader(data, parsed, None)
        except Exception as e:  # noqa: BLE001 - truncated or garbled input raises EOFError, ValueError, ...
            raise ValueError(f"Failed to deserialize Avro record of {len(message)} bytes: "
                             f"{type(e).__name__}: {e}") from e
        if data.tell() != len(message):
            raise ValueError(f"Failed to deserialize Avro record: {len(message) - data.tell()} bytes left over "
                             f"after a record of {str(self._schema)[:80]} (not one record of this schema)")
        return _from_avro(parsed, datum)

    def __reduce__(self) -> tuple:
        return (AvroRowDeserializationSchema, (None, str(self._schema)))


# -- Avro container files -------------------------------------------------------------------------


class AvroInputFormat(StreamFormat):
    """The generic records (dicts) of Avro object container files, read with ``schema`` as the
    reader schema (a file written with a compatible schema is resolved to it, as Avro does).

    ``env.create_input(AvroInputFormat(path, schema))`` reads ``path`` (a file or a directory), as
    PyFlink; as a FileSource stream format it reads the FileSource's paths. A file is read whole by
    one subtask. A file that is not an Avro container fails naming the file.
    """

    def __init__(self, path: str, schema: AvroSchema) -> None:
        if not isinstance(schema, AvroSchema):
            raise TypeError(f"AvroInputFormat needs an AvroSchema, got {type(schema).__name__}")
        StreamFormat.__init__(self, "avro")
        self.path = _local_path(path)
        self.schema = schema

    def get_produced_type(self) -> TypeInformation:
        return GenericRecordAvroTypeInfo(self.schema)

    def _read_file(self, path: str, batch_size: int) -> Iterator[list[Any]]:
        with open(path, "rb") as f:
            try:
                records = fastavro.reader(f, reader_schema=self.schema._parsed)
            except Exception as e:  # noqa: BLE001 - fastavro raises ValueError or its own on a bad header
                raise ValueError(f"not an Avro container file: {e}") from None
            batch: list[Any] = []
            for record in records:
                batch.append(record)
                if len(batch) >= batch_size:
                    yield batch
                    batch = []
            if batch:
                yield batch

    def __reduce__(self) -> tuple:
        return (AvroInputFormat, (self.path, self.schema))

    def __repr__(self) -> str:
        return f"AvroInputFormat({self.path!r})"


class _AvroBulkWriter(BulkWriter):
    def __init__(self, stream: BinaryIO, schema: AvroSchema) -> None:
        self._writer = fastavro.write.Writer(stream, schema._parsed)

    def add_elements(self, elements: list) -> None:
        write = self._writer.write
        for e in elements:
            try:
                write(e)
            except (ValueError, TypeError, AttributeError, KeyError) as err:
                raise ValueError(f"record {e!r} does not fit the Avro schema: {err}") from err

    def finish(self) -> None:
        self._writer.flush()


class _AvroWriterFactory(BulkWriterFactory):
    def __init__(self, schema: AvroSchema) -> None:
        self.schema = schema

    def create(self, stream: BinaryIO) -> BulkWriter:
        return _AvroBulkWriter(stream, self.schema)


class AvroBulkWriters:
    """Bulk writer factories for Avro container files (Flink's ``AvroWriters``)."""

    @staticmethod
    def for_generic_record(schema: AvroSchema) -> BulkWriterFactory:
        """Writes generic records (dicts matching ``schema``) into Avro container files, one block
        per batch. A record that does not fit the schema fails the job naming the record."""
        if not isinstance(schema, AvroSchema):
            raise TypeError(f"for_generic_record needs an AvroSchema, got {type(schema).__name__}")
        return _AvroWriterFactory(schema)


AvroWriters = AvroBulkWriters  # Flink's Java name
