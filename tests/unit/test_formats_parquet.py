"""PyFlink's Parquet (and ORC) formats, checked against pyarrow reading and writing on its own."""
from __future__ import annotations

import datetime as dt
import decimal
import json
import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.orc as orc
import pyarrow.parquet as pq
import pytest

from millstream.common.row import Row
from millstream.common.serialization import BulkWriterFactory
from millstream.common.typeinfo import Types
from millstream.datastream.connectors.file_system import BulkFormat, FileSource, StreamFormat
from millstream.datastream.formats.avro import AvroSchema
from millstream.datastream.formats.orc import OrcBulkWriters
from millstream.datastream.formats.parquet import (
    AvroParquetReaders,
    AvroParquetWriters,
    ParquetBulkWriters,
    ParquetColumnarRowInputFormat,
)

ROW_TYPE = Types.ROW_NAMED(
    ["id", "name", "score", "ok", "day", "at", "tags", "point", "price", "raw"],
    [Types.INT(), Types.STRING(), Types.DOUBLE(), Types.BOOLEAN(), Types.SQL_DATE(), Types.SQL_TIMESTAMP(),
     Types.LIST(Types.LONG()), Types.ROW_NAMED(["x", "y"], [Types.FLOAT(), Types.SHORT()]), Types.BIG_DEC(),
     Types.PRIMITIVE_ARRAY(Types.BYTE())])
ROWS = [
    Row(1, "a", 0.5, True, dt.date(2024, 2, 29), dt.datetime(2024, 1, 2, 3, 4, 5, 6000), [1, 2], Row(1.5, 3),
        decimal.Decimal("1.25"), b"\x00"),
    Row(2, None, None, None, None, None, None, None, None, None),
]


def write(factory: BulkWriterFactory, path: Path, *batches: list[Any]) -> None:
    factory = pickle.loads(pickle.dumps(factory))
    with open(path, "wb") as f:
        writer = factory.create(f)
        for batch in batches:
            writer.add_elements(batch)
        writer.finish()


def test_pyarrow_reads_what_the_bulk_writer_wrote_with_the_right_types(tmp_path: Path) -> None:
    write(ParquetBulkWriters.for_row_type(ROW_TYPE), tmp_path / "a.parquet", ROWS[:1], ROWS[1:])
    table = pq.read_table(tmp_path / "a.parquet")
    assert table.schema.types == [
        pa.int32(), pa.string(), pa.float64(), pa.bool_(), pa.date32(), pa.timestamp("us"), pa.list_(pa.int64()),
        pa.struct([("x", pa.float32()), ("y", pa.int16())]), pa.decimal128(38, 18), pa.binary()]
    first, second = table.to_pylist()
    assert first == {"id": 1, "name": "a", "score": 0.5, "ok": True, "day": dt.date(2024, 2, 29),
                     "at": dt.datetime(2024, 1, 2, 3, 4, 5, 6000), "tags": [1, 2], "point": {"x": 1.5, "y": 3},
                     "price": decimal.Decimal("1.25"), "raw": b"\x00"}
    assert second["id"] == 2 and all(v is None for k, v in second.items() if k != "id")


def test_the_input_format_reads_what_pyarrow_wrote_into_rows(tmp_path: Path) -> None:
    pq.write_table(pa.table({"b": ["x", "y", "z"], "a": pa.array([1, 2, 3], pa.int32()), "extra": [0, 0, 0]}),
                   tmp_path / "p.parquet")
    fmt = ParquetColumnarRowInputFormat(Types.ROW_NAMED(["a", "b"], [Types.INT(), Types.STRING()]), batch_size=2)
    assert isinstance(fmt, BulkFormat) and not isinstance(fmt, StreamFormat)
    batches = list(fmt._read_file(str(tmp_path / "p.parquet"), 100))
    assert [len(b) for b in batches] == [2, 1]  # the format's batch size
    assert [r for b in batches for r in b] == [Row.of_names(["a", "b"], [i, s]) for i, s in [(1, "x"), (2, "y"), (3, "z")]]
    FileSource.for_bulk_file_format(fmt, str(tmp_path)).build()
    with pytest.raises(TypeError, match="needs a BulkFormat"):
        FileSource.for_bulk_file_format(StreamFormat.text_line_format(), str(tmp_path))  # type: ignore[arg-type]


def test_round_trip_and_case_insensitive_columns(tmp_path: Path) -> None:
    write(ParquetBulkWriters.for_row_type(ROW_TYPE), tmp_path / "r.parquet", ROWS)
    back = [r for b in ParquetColumnarRowInputFormat(ROW_TYPE)._read_file(str(tmp_path / "r.parquet"), 100) for r in b]
    assert back[0].point == Row.of_names(["x", "y"], [1.5, 3]) and back[0].tags == [1, 2]
    assert list(back[0])[:7] == list(ROWS[0])[:7] and back[1].name is None
    upper = Types.ROW_NAMED(["ID", "NAME"], [Types.INT(), Types.STRING()])
    rows = [r for b in ParquetColumnarRowInputFormat(upper, is_case_sensitive=False)._read_file(
        str(tmp_path / "r.parquet"), 100) for r in b]
    assert [list(r) for r in rows] == [[1, "a"], [2, None]]


def test_a_missing_or_mistyped_column_and_a_file_that_is_not_parquet_fail(tmp_path: Path) -> None:
    pq.write_table(pa.table({"a": ["not a number"]}), tmp_path / "s.parquet")
    with pytest.raises(ValueError, match="has no column 'b'"):
        list(ParquetColumnarRowInputFormat(Types.ROW_NAMED(["b"], [Types.INT()]))._read_file(str(tmp_path / "s.parquet"), 9))
    with pytest.raises(ValueError, match="column 'a' of type string cannot be read as int32"):
        list(ParquetColumnarRowInputFormat(Types.ROW_NAMED(["a"], [Types.INT()]))._read_file(str(tmp_path / "s.parquet"), 9))
    (tmp_path / "t.parquet").write_text("id,name\n1,a\n")
    with pytest.raises(ValueError, match="not a Parquet file"):
        list(ParquetColumnarRowInputFormat(Types.ROW_NAMED(["a"], [Types.INT()]))._read_file(str(tmp_path / "t.parquet"), 9))


def test_a_row_that_does_not_fit_fails_naming_the_field(tmp_path: Path) -> None:
    factory = ParquetBulkWriters.for_row_type(Types.ROW_NAMED(["a", "b"], [Types.INT(), Types.STRING()]))
    with pytest.raises(ValueError, match="field 'a'"):
        write(factory, tmp_path / "x.parquet", [Row("one", "x")])
    with pytest.raises(ValueError, match="is not a Row of 2 fields"):
        write(factory, tmp_path / "y.parquet", [Row(1)])
    with pytest.raises(TypeError, match="needs a row type"):
        ParquetBulkWriters.for_row_type(Types.INT())


def test_an_empty_part_file_is_a_valid_parquet_file(tmp_path: Path) -> None:
    write(ParquetBulkWriters.for_row_type(Types.ROW_NAMED(["a"], [Types.INT()])), tmp_path / "e.parquet")
    table = pq.read_table(tmp_path / "e.parquet")
    assert table.num_rows == 0 and table.schema.names == ["a"]


AVRO = AvroSchema.parse_string(json.dumps({
    "type": "record", "name": "User", "fields": [
        {"name": "name", "type": "string"}, {"name": "age", "type": ["null", "int"]},
        {"name": "emails", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": "long"}}]}))


def test_avro_parquet_writers_and_readers_round_trip_generic_records(tmp_path: Path) -> None:
    records = [{"name": "ann", "age": 30, "emails": ["a@x"], "attrs": {"k": 1}},
               {"name": "bob", "age": None, "emails": [], "attrs": {}}]
    write(AvroParquetWriters.for_generic_record(AVRO), tmp_path / "u.parquet", records)
    table = pq.read_table(tmp_path / "u.parquet")
    assert table.schema.field("age").type == pa.int32() and table.schema.field("age").nullable
    assert not table.schema.field("name").nullable and table.schema.field("attrs").type == pa.map_(pa.string(), pa.int64())
    fmt = AvroParquetReaders.for_generic_record(AVRO)
    assert isinstance(fmt, StreamFormat)
    assert [r for b in pickle.loads(pickle.dumps(fmt))._read_file(str(tmp_path / "u.parquet"), 10) for r in b] == records
    with pytest.raises(ValueError, match="not a dict"):
        write(AvroParquetWriters.for_generic_record(AVRO), tmp_path / "v.parquet", [Row("ann", 1, [], {})])


def test_orc_bulk_writer_output_reads_back_with_pyarrow(tmp_path: Path) -> None:
    row_type = Types.ROW_NAMED(["a", "b"], [Types.LONG(), Types.STRING()])
    write(OrcBulkWriters.for_row_type(row_type), tmp_path / "o.orc", [Row(1, "x")], [Row(2, None)])
    table = orc.read_table(str(tmp_path / "o.orc"))
    assert table.schema.types == [pa.int64(), pa.string()] and table.to_pylist() == [{"a": 1, "b": "x"}, {"a": 2, "b": None}]


def test_rows_read_share_their_names_but_renaming_one_leaves_the_others() -> None:
    from millstream.common.row import rows_of_names

    a, b = rows_of_names(["x", "y"], [(1, 2), (3, 4)])
    assert a == Row.of_names(["x", "y"], [1, 2]) and b.y == 4
    a.set_field_names(["p", "q"])
    assert a.p == 1 and b.x == 3 and b.as_dict() == {"x": 3, "y": 4}
    with pytest.raises(ValueError, match="got 1 values"):
        rows_of_names(["x", "y"], [(1,)])
