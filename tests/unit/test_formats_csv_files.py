"""CSV files: CsvSchema's builder, CsvReaderFormat (FileSource) and CsvBulkWriters (FileSink), as
PyFlink's pyflink.datastream.formats.csv documents them; checked against Python's csv module."""
from __future__ import annotations

import csv
import decimal
import pickle
from pathlib import Path

import pytest

from millstream.common.row import Row
from millstream.common.typeinfo import Types
from millstream.datastream.connectors.file_system import FileSource, StreamFormat
from millstream.datastream.formats.csv import CsvBulkWriters, CsvReaderFormat, CsvSchema


def people() -> CsvSchema:
    return (CsvSchema.builder().add_number_column("id", number_type=Types.INT()).add_string_column("name")
            .add_array_column("list", ",", element_type=Types.STRING()).add_boolean_column("ok").build())


def read(schema: CsvSchema, path: Path, batch_size: int = 100) -> list[Row]:
    return [r for batch in CsvReaderFormat.for_schema(schema)._read_file(str(path), batch_size) for r in batch]


def write(schema: CsvSchema, path: Path, rows: list[Row]) -> None:
    factory = pickle.loads(pickle.dumps(CsvBulkWriters.for_schema(schema)))
    with open(path, "wb") as f:
        writer = factory.create(f)
        writer.add_elements(rows)
        writer.finish()


def test_the_builder_makes_a_row_type_of_the_columns() -> None:
    schema = people()
    assert len(schema) == 4 and schema.size() == 4
    assert schema.get_type_info() == Types.ROW_NAMED(
        ["id", "name", "list", "ok"], [Types.INT(), Types.STRING(), Types.LIST(Types.STRING()), Types.BOOLEAN()])
    assert CsvSchema.builder().add_number_column("n").build().get_type_info() == Types.ROW_NAMED(["n"], [Types.LONG()])
    combined = CsvSchema.builder().add_columns_from(schema).add_string_column("x").build()
    assert combined.get_type_info().field_names == ("id", "name", "list", "ok", "x")
    assert CsvSchema.builder().add_string_column("a").clear_columns().size() == 0


def test_the_builder_refuses_bad_settings() -> None:
    with pytest.raises(ValueError, match="single character"):
        CsvSchema.builder().set_column_separator("||")
    with pytest.raises(TypeError, match="not a number type"):
        CsvSchema.builder().add_number_column("n", Types.STRING())
    with pytest.raises(ValueError, match="twice"):
        CsvSchema.builder().add_string_column("a").add_string_column("a").build()
    with pytest.raises(TypeError, match="CsvSchema"):
        CsvReaderFormat.for_schema("id,name")  # type: ignore[arg-type]


def test_reader_reads_what_pythons_csv_module_wrote(tmp_path: Path) -> None:
    with open(tmp_path / "a.csv", "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerows([[1, "Ann, the first", "x,y", "true"], [2, 'say "hi"\nbye', "", "false"]])
    assert read(people(), tmp_path / "a.csv") == [
        Row.of_names(["id", "name", "list", "ok"], [1, "Ann, the first", ["x", "y"], True]),
        Row.of_names(["id", "name", "list", "ok"], [2, 'say "hi"\nbye', [], False]),
    ]
    fmt = CsvReaderFormat.for_schema(people())
    assert isinstance(fmt, StreamFormat) and fmt.get_produced_type() == people().get_type_info()
    FileSource.for_record_stream_format(fmt, str(tmp_path)).build()


def test_reader_dialect_header_comments_and_null_value(tmp_path: Path) -> None:
    schema = (CsvSchema.builder().add_number_column("id", Types.INT()).add_number_column("price", Types.BIG_DEC())
              .add_string_column("name").set_column_separator(";").set_null_value("NULL").set_use_header()
              .set_strict_headers().set_allow_comments().build())
    (tmp_path / "b.csv").write_text("id;price;name\n# a comment\n1;2.50;NULL\n\n2;NULL;'x'\r\n")
    assert [list(r) for r in read(schema, tmp_path / "b.csv")] == [[1, decimal.Decimal("2.50"), None], [2, None, "'x'"]]
    (tmp_path / "b2.csv").write_text("id;price;name\n# a comment\n1;x;a\n")
    with pytest.raises(ValueError, match=r"line 3: field 'price'"):  # the file's line, comments counted
        read(schema, tmp_path / "b2.csv")
    (tmp_path / "c.csv").write_text("id;cost;name\n1;2;a\n")
    with pytest.raises(ValueError, match=r"line 1: the header \['id', 'cost', 'name'\] does not match"):
        read(schema, tmp_path / "c.csv")


def test_skip_first_data_row(tmp_path: Path) -> None:
    schema = CsvSchema.builder().add_string_column("a").set_skip_first_data_row().build()
    (tmp_path / "d.csv").write_text("title\nx\ny\n")
    assert [r.a for r in read(schema, tmp_path / "d.csv")] == ["x", "y"]


def test_a_row_with_a_wrong_column_count_names_the_line(tmp_path: Path) -> None:
    (tmp_path / "e.csv").write_text("1,a,,true\n2,b,,false,extra\n")
    with pytest.raises(ValueError, match=r"line 2: Row length mismatch. 4 fields expected but was 5"):
        read(people(), tmp_path / "e.csv")
    (tmp_path / "f.csv").write_text("1,a,,true\n\n\nx,b,,false\n")
    with pytest.raises(ValueError, match=r"line 4: field 'id': cannot parse 'x' as INT"):
        read(people(), tmp_path / "f.csv")
    (tmp_path / "g.csv").write_text(",a,,true\n")  # only the null value is null: an empty number fails
    with pytest.raises(ValueError, match=r"line 1: field 'id'"):
        read(people(), tmp_path / "g.csv")


def test_reader_batches(tmp_path: Path) -> None:
    (tmp_path / "h.csv").write_text("".join(f"{i},n,,true\n" for i in range(25)))
    batches = list(CsvReaderFormat.for_schema(people())._read_file(str(tmp_path / "h.csv"), 10))
    assert [len(b) for b in batches] == [10, 10, 5] and [r.id for b in batches for r in b] == list(range(25))


def test_bulk_writer_output_reads_back_with_pythons_csv_and_the_reader(tmp_path: Path) -> None:
    rows = [Row(1, "a b", ["x", "y"], True), Row(2, 'q"uote', [], False), Row(3, None, ["z"], True)]
    write(people(), tmp_path / "out.csv", rows)
    with open(tmp_path / "out.csv", newline="") as f:
        assert list(csv.reader(f)) == [["1", "a b", "x,y", "true"], ["2", 'q"uote', "", "false"],
                                       ["3", "", "z", "true"]]
    # None is written as the (default: empty) null value, so only the null value reads it back
    schema = (CsvSchema.builder().add_columns_from(people()).set_null_value("\\N").set_column_separator("\t")
              .set_use_header().build())
    write(schema, tmp_path / "out.tsv", rows)
    assert (tmp_path / "out.tsv").read_text().splitlines()[0] == "id\tname\tlist\tok"
    assert [list(r) for r in read(schema, tmp_path / "out.tsv")] == [list(r) for r in rows]


def test_bulk_writer_fails_on_a_row_that_does_not_fit(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="field 'id'"):
        write(people(), tmp_path / "bad.csv", [Row("one", "a", [], True)])
