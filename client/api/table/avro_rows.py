"""The ``avro`` table format (Flink's ``'format' = 'avro'``): table rows as Avro records, on fastavro.

The Avro schema is derived from the table's columns as Flink's AvroSchemaConverter derives it: a
record named ``record`` in namespace ``org.apache.flink.avro.generated`` (a nested ROW column
``f`` is a record named ``record_f``), STRING -> string, INT (and TINYINT, SMALLINT) -> int,
BIGINT -> long, FLOAT, DOUBLE, BOOLEAN, BYTES -> bytes, DECIMAL(p, s) -> bytes with logical type
decimal, DATE -> int date, TIME(<=3) -> int time-millis, TIMESTAMP(<=3) -> long timestamp-millis
(``avro.timestamp_mapping.legacy`` = false: local-timestamp-millis/-micros), ARRAY -> array,
MAP<STRING, V> -> map, and a nullable type is a union with null (first) whose field default is null.

A Kafka message is one record in Avro's plain binary encoding (no container header, as Flink's
avro format writes it); a filesystem table's part file is an Avro object container file with the
``avro.codec`` compression (Flink's default ``snappy``).
"""
from __future__ import annotations

import datetime
import decimal
import io
from typing import Any, BinaryIO, Sequence

import fastavro
import fastavro.write

from millstream.common.serialization import BulkWriter, BulkWriterFactory
from millstream.table.expression import TableException
from millstream.table.runtime_functions import row_of
from millstream.table.types import DataType

__all__ = ["avro_schema", "AvroRowConverter", "AvroRowWriterFactory", "CODECS"]

RECORD_NAME = "org.apache.flink.avro.generated.record"
# Avro's codec names, as Flink's avro.codec takes them (fastavro's "zstandard" is Avro's "zstandard")
CODECS = ("null", "deflate", "snappy", "bzip2", "xz", "zstandard")


def _nullable(schema: Any, t: DataType) -> Any:
    return ["null", schema] if t.nullable else schema


def _type_schema(t: DataType, row_name: str, legacy: bool) -> Any:
    r = t.root
    if r == "BOOLEAN":
        s: Any = "boolean"
    elif r in ("TINYINT", "SMALLINT", "INT", "INTEGER"):
        s = "int"
    elif r == "BIGINT":
        s = "long"
    elif r in ("FLOAT", "DOUBLE"):
        s = r.lower()
    elif r in ("CHAR", "VARCHAR"):
        s = "string"
    elif r in ("BINARY", "VARBINARY"):
        s = "bytes"
    elif r == "TIMESTAMP":
        precision = 6 if t.length is None else t.length
        if legacy and precision > 3:
            raise TableException(f"Avro does not support TIMESTAMP type with precision: {precision}, it only "
                                 f"supports precision less than 3.")
        logical = "timestamp-millis" if legacy else ("local-timestamp-millis" if precision <= 3 else "local-timestamp-micros")
        s = {"type": "long", "logicalType": logical}
    elif r == "DATE":
        s = {"type": "int", "logicalType": "date"}
    elif r == "TIME":
        if (t.length or 0) > 3:
            raise TableException(f"Avro does not support TIME type with precision: {t.length}, it only supports "
                                 f"precision less than 3.")
        s = {"type": "int", "logicalType": "time-millis"}
    elif r == "DECIMAL":
        s = {"type": "bytes", "logicalType": "decimal", "precision": t.length or 10, "scale": t.scale or 0}
    elif r == "ROW":
        s = _record(row_name, [(f.name, f.data_type) for f in t.fields], legacy)
    elif r == "ARRAY":
        assert t.element is not None
        s = {"type": "array", "items": _type_schema(t.element, row_name, legacy)}
    elif r in ("MAP", "MULTISET"):
        key = t.element
        if key is None or key.root not in ("CHAR", "VARCHAR"):
            raise TableException(f"Avro format doesn't support non-string as key type of map. The key type is: {key}")
        values = _type_schema(t.value, row_name, legacy) if r == "MAP" and t.value is not None else "int"
        s = {"type": "map", "values": values}
    else:
        raise TableException(f"Unsupported to derive Schema for type: {t}")
    return _nullable(s, t)


def _record(name: str, columns: Sequence[tuple[str, DataType]], legacy: bool) -> dict[str, Any]:
    fields = []
    for n, t in columns:
        field: dict[str, Any] = {"name": n, "type": _type_schema(t, f"{name}_{n}", legacy)}
        if t.nullable:
            field["default"] = None
        fields.append(field)
    namespace, _, short = name.rpartition(".")
    return {"type": "record", "name": short, "namespace": namespace, "fields": fields}


def avro_schema(columns: Sequence[tuple[str, DataType]], legacy_timestamps: bool = True) -> dict[str, Any]:
    """The Avro record schema Flink derives for a table's (physical) columns (see the module doc)."""
    return _record(RECORD_NAME, columns, legacy_timestamps)


def _to_datum(v: Any, t: DataType) -> Any:
    if v is None:
        return None
    r = t.root
    if r == "ROW":
        return {f.name: _to_datum(x, f.data_type) for f, x in zip(t.fields, v)}
    if r == "ARRAY" and t.element is not None:
        return [_to_datum(x, t.element) for x in v]
    if r == "MAP" and t.value is not None:
        return {k: _to_datum(x, t.value) for k, x in v.items()}
    if r == "DECIMAL":  # fastavro needs the schema's scale exactly
        return decimal.Decimal(v).quantize(decimal.Decimal(1).scaleb(-(t.scale or 0)))
    if r in ("TINYINT", "SMALLINT", "INT", "INTEGER", "BIGINT"):
        return int(v)
    return v


def _from_datum(v: Any, t: DataType) -> Any:
    if v is None:
        return None
    r = t.root
    if r == "ROW":
        return row_of([_from_datum(v.get(f.name), f.data_type) for f in t.fields])
    if r == "ARRAY" and t.element is not None:
        return [_from_datum(x, t.element) for x in v]
    if r == "MAP" and t.value is not None:
        return {k: _from_datum(x, t.value) for k, x in v.items()}
    if isinstance(v, datetime.datetime) and v.tzinfo is not None:  # timestamp-millis: UTC instants
        return v.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    if r in ("BINARY", "VARBINARY") and isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    return v


class AvroRowConverter:
    """Some of a table row's columns (``fields``: position, name, type) <-> an Avro record of the
    schema derived from them. Picklable: the parsed schema is rebuilt on first use."""

    def __init__(self, fields: Sequence[tuple[int, str, DataType]], options: dict[str, str]) -> None:
        self.fields = tuple(fields)
        legacy = options.get("timestamp_mapping.legacy", "true").lower()
        if legacy not in ("true", "false"):
            raise TableException(f"avro.timestamp_mapping.legacy must be true or false, got {legacy!r}")
        self.schema = avro_schema([(n, t) for _, n, t in self.fields], legacy == "true")
        self.codec = options.get("codec", "snappy")
        if self.codec not in CODECS:
            raise TableException(f"Unsupported avro.codec {self.codec!r}: one of {', '.join(CODECS)}")
        self._parsed: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_parsed": None}

    @property
    def parsed(self) -> Any:
        if self._parsed is None:
            self._parsed = fastavro.parse_schema(self.schema)
        return self._parsed

    def datum(self, row: Any) -> dict[str, Any]:
        return {n: _to_datum(row[i], t) for i, n, t in self.fields}

    def values(self, record: dict[str, Any]) -> list[Any]:
        """The fields' values of a read record (by field name), in ``fields`` order."""
        return [_from_datum(record.get(n), t) for _, n, t in self.fields]

    def encode(self, row: Any) -> bytes:
        out = io.BytesIO()
        try:
            fastavro.schemaless_writer(out, self.parsed, self.datum(row))
        except (ValueError, TypeError, AttributeError, KeyError, OverflowError) as e:
            raise TableException(f"Failed to serialize row {row!r} to avro: {e}") from None
        return out.getvalue()

    def decode(self, data: bytes) -> list[Any]:
        buf = io.BytesIO(data)
        record = fastavro.schemaless_reader(buf, self.parsed, None)
        if buf.tell() != len(data):
            raise ValueError(f"{len(data) - buf.tell()} bytes left over after one record of the table's schema")
        return self.values(record)  # type: ignore[arg-type]

    def read_file(self, f: BinaryIO) -> Any:
        """The fields' values of every record of an Avro container file (matched by field name)."""
        for record in fastavro.reader(f):
            yield self.values(record)  # type: ignore[arg-type]


class _AvroRowWriter(BulkWriter):
    def __init__(self, stream: BinaryIO, converter: AvroRowConverter) -> None:
        self.converter = converter
        self._writer = fastavro.write.Writer(stream, converter.parsed, codec=converter.codec)

    def add_elements(self, elements: list) -> None:
        for row in elements:
            try:
                self._writer.write(self.converter.datum(row))
            except (ValueError, TypeError, AttributeError, KeyError, OverflowError) as e:
                raise TableException(f"Failed to serialize row {row!r} to avro: {e}") from None

    def finish(self) -> None:
        self._writer.flush()


class AvroRowWriterFactory(BulkWriterFactory):
    """Avro container part files of table rows (a filesystem table's ``'format' = 'avro'`` sink)."""

    def __init__(self, converter: AvroRowConverter) -> None:
        self.converter = converter

    def create(self, stream: BinaryIO) -> BulkWriter:
        return _AvroRowWriter(stream, self.converter)
