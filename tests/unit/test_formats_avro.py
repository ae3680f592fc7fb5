"""PyFlink's Avro formats (millstream.datastream.formats.avro), checked against the Avro
specification's binary encoding and against fastavro reading and writing on its own."""
from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import pickle
from pathlib import Path

import fastavro
import pytest

from millstream.common.row import Row
from millstream.common.serialization import BulkWriterFactory
from millstream.common.typeinfo import Types
from millstream.datastream.connectors.file_system import FileSource, StreamFormat
from millstream.datastream.formats.avro import (
    AvroBulkWriters,
    AvroInputFormat,
    AvroRowDeserializationSchema,
    AvroRowSerializationSchema,
    AvroSchema,
    AvroWriters,
)

# The schema of PyFlink's kafka_avro_format.py example.
TEST_RECORD = """
    {
        "type": "record",
        "name": "TestRecord",
        "fields": [
            {"name": "id", "type": "int"},
            {"name": "name", "type": "string"}
        ]
    }"""

RICH = json.dumps({
    "type": "record", "name": "Rich", "fields": [
        {"name": "id", "type": "long"},
        {"name": "score", "type": "double"},
        {"name": "ok", "type": "boolean"},
        {"name": "note", "type": ["null", "string"]},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": "int"}},
        {"name": "raw", "type": "bytes"},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
        {"name": "inner", "type": {"type": "record", "name": "Inner", "fields": [
            {"name": "a", "type": "int"}, {"name": "b", "type": ["null", "string"]}]}},
    ]})

RICH_ROW = Row(7, 2.5, True, None, ["x", "y"], {"k": 1}, b"\x00\x01", dt.date(2024, 2, 29),
               dt.datetime(2024, 1, 2, 3, 4, 5, 678000), decimal.Decimal("12.34"), "GREEN", Row(1, "z"))


def test_serialized_bytes_are_the_avro_binary_encoding_of_the_record() -> None:
    # Avro spec: int 1 is the zig-zag varint 0x02; a string is its zig-zag length (2 -> 0x04) then
    # its UTF-8 bytes; a record is its fields in order, with no header (Flink's flink-avro message).
    schema = AvroRowSerializationSchema(avro_schema_string=TEST_RECORD)
    assert schema.serialize(Row(1, "hi")) == b"\x02\x04hi"
    assert schema.serialize(Row(-3, "")) == b"\x05\x00"


def test_the_row_maps_to_the_schema_by_position_whatever_its_field_names() -> None:
    # the example's rows are Types.ROW([INT, STRING]) (f0, f1) written into {id, name}
    schema = AvroRowSerializationSchema(avro_schema_string=TEST_RECORD)
    parsed = fastavro.parse_schema(json.loads(TEST_RECORD))
    data = schema.serialize(Row.of_names(["f0", "f1"], [6, "hello"]))
    assert fastavro.schemaless_reader(io.BytesIO(data), parsed, None) == {"id": 6, "name": "hello"}


def test_fastavro_reads_back_what_the_serialization_schema_wrote() -> None:
    data = AvroRowSerializationSchema(avro_schema_string=RICH).serialize(RICH_ROW)
    back = fastavro.schemaless_reader(io.BytesIO(data), fastavro.parse_schema(json.loads(RICH)), None)
    assert back["id"] == 7 and back["score"] == 2.5 and back["ok"] is True and back["note"] is None
    assert back["tags"] == ["x", "y"] and back["attrs"] == {"k": 1} and back["raw"] == b"\x00\x01"
    assert back["day"] == dt.date(2024, 2, 29) and back["price"] == decimal.Decimal("12.34")
    assert back["at"] == dt.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=dt.timezone.utc)
    assert back["color"] == "GREEN" and back["inner"] == {"a": 1, "b": "z"}


def test_the_deserialization_schema_reads_what_fastavro_wrote_into_named_rows() -> None:
    parsed = fastavro.parse_schema(json.loads(RICH))
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, {
        "id": 1, "score": 0.5, "ok": False, "note": "n", "tags": [], "attrs": {}, "raw": b"",
        "day": dt.date(1970, 1, 2), "at": dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.timezone.utc),
        "price": decimal.Decimal("0.01"), "color": "RED", "inner": {"a": 2, "b": None}})
    row = AvroRowDeserializationSchema(avro_schema_string=RICH).deserialize(out.getvalue())
    assert isinstance(row, Row) and row.id == 1 and row.note == "n" and row.color == "RED"
    assert row.at == dt.datetime(1970, 1, 1, 0, 0, 1)  # naive, UTC, as PyFlink hands a Timestamp
    assert row.inner == Row.of_names(["a", "b"], [2, None]) and row.inner.a == 2


def test_round_trip_and_pickled_schemas() -> None:
    ser = pickle.loads(pickle.dumps(AvroRowSerializationSchema(avro_schema_string=RICH)))
    de = pickle.loads(pickle.dumps(AvroRowDeserializationSchema(avro_schema_string=RICH)))
    back = de.deserialize(ser.serialize(RICH_ROW))
    assert list(back)[:11] == list(RICH_ROW)[:11] and list(back.inner) == [1, "z"]


def test_the_produced_type_is_the_row_type_of_the_schema() -> None:
    produced = AvroRowDeserializationSchema(avro_schema_string=TEST_RECORD).get_produced_type()
    assert produced == Types.ROW_NAMED(["id", "name"], [Types.INT(), Types.STRING()])


@pytest.mark.parametrize("row, problem", [
    (Row(1), "a row of 1 fields does not match the 2 fields"),
    (Row(None, "x"), "field 'id' is null"),
    (Row("one", "x"), "Failed to serialize row"),
])
def test_a_row_that_does_not_fit_the_schema_fails_naming_the_problem(row: Row, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        AvroRowSerializationSchema(avro_schema_string=TEST_RECORD).serialize(row)


@pytest.mark.parametrize("message", [b"", b"\x02", b"\x02\x04hi!"])
def test_bytes_that_are_not_one_record_fail(message: bytes) -> None:
    with pytest.raises(ValueError, match="Failed to deserialize Avro record"):
        AvroRowDeserializationSchema(avro_schema_string=TEST_RECORD).deserialize(message)


def test_the_schemas_need_an_avro_record_schema_string() -> None:
    with pytest.raises(TypeError, match="record_class or avro_schema_string"):
        AvroRowSerializationSchema()
    with pytest.raises(ValueError, match="generated Java class"):
        AvroRowDeserializationSchema(record_class="com.example.User")
    with pytest.raises(ValueError, match="needs an Avro record schema"):
        AvroRowDeserializationSchema(avro_schema_string='"int"')
    with pytest.raises(ValueError, match="not JSON"):
        AvroSchema.parse_string("{nope")
    with pytest.raises(ValueError, match="not a valid Avro schema"):
        AvroSchema.parse_string('{"type": "no_such_type"}')


def test_avro_schema_parses_a_string_and_a_file(tmp_path: Path) -> None:
    path = tmp_path / "r.avsc"
    path.write_text(TEST_RECORD)
    assert AvroSchema.parse_file(str(path)) == AvroSchema.parse_string(TEST_RECORD)
    assert json.loads(str(AvroSchema.parse_string(TEST_RECORD)))["name"] == "TestRecord"
    (tmp_path / "bad.avsc").write_text("[")
    with pytest.raises(ValueError, match="bad.avsc"):
        AvroSchema.parse_file(str(tmp_path / "bad.avsc"))


def test_avro_input_format_reads_a_container_file_fastavro_wrote(tmp_path: Path) -> None:
    schema = AvroSchema.parse_string(TEST_RECORD)
    records = [{"id": i, "name": f"n{i}"} for i in range(25)]
    with open(tmp_path / "data.avro", "wb") as f:
        fastavro.writer(f, fastavro.parse_schema(json.loads(TEST_RECORD)), records)
    fmt = AvroInputFormat(str(tmp_path / "data.avro"), schema)
    assert isinstance(fmt, StreamFormat)
    batches = list(fmt._read_file(str(tmp_path / "data.avro"), 10))
    assert [len(b) for b in batches] == [10, 10, 5] and sum(batches, []) == records
    FileSource.for_record_stream_format(fmt, str(tmp_path)).build()  # a FileSource stream format


def test_avro_input_format_fails_on_a_file_that_is_not_avro(tmp_path: Path) -> None:
    (tmp_path / "x.avro").write_text("id,name\n1,a\n")
    fmt = AvroInputFormat(str(tmp_path / "x.avro"), AvroSchema.parse_string(TEST_RECORD))
    with pytest.raises(ValueError, match="not an Avro container file"):
        list(fmt._read_file(str(tmp_path / "x.avro"), 10))


def test_avro_bulk_writer_writes_a_container_fastavro_reads(tmp_path: Path) -> None:
    factory = AvroBulkWriters.for_generic_record(AvroSchema.parse_string(TEST_RECORD))
    assert isinstance(factory, BulkWriterFactory) and AvroWriters is AvroBulkWriters
    factory = pickle.loads(pickle.dumps(factory))
    with open(tmp_path / "out.avro", "wb") as f:
        writer = factory.create(f)
        writer.add_elements([{"id": 1, "name": "a"}, {"id": 2, "name": "b"}])
        writer.add_elements([{"id": 3, "name": "c"}])
        writer.finish()
    with open(tmp_path / "out.avro", "rb") as f:
        assert list(fastavro.reader(f)) == [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}, {"id": 3, "name": "c"}]
    with open(tmp_path / "bad.avro", "wb") as f:
        with pytest.raises(ValueError, match="does not fit the Avro schema"):
            factory.create(f).add_elements([{"id": "x", "name": "a"}])
