"""FileSource with file formats (Flink's FileSource over a StreamFormat or BulkFormat) and its
continuous mode (``monitor_continuously``), one subtask's reader at a time; and the FileSink with a
bulk format, which rolls on every checkpoint (Flink's OnCheckpointRollingPolicy)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from millstream.common.row import Row
from millstream.common.time import Duration
from millstream.common.typeinfo import Types
from millstream.datastream import StreamExecutionEnvironment
from millstream.datastream.connectors.file_system import BucketAssigner, FileSink, FileSource, RollingPolicy, StreamFormat
from millstream.datastream.formats.avro import AvroInputFormat, AvroSchema
from millstream.datastream.formats.csv import CsvReaderFormat, CsvSchema
from millstream.datastream.formats.parquet import ParquetBulkWriters, ParquetColumnarRowInputFormat
from millstream.runtime import operator_factories
from millstream.runtime.operators.file_sink import FileSinkOperator
from millstream.runtime.operators.sources import DONE, LISTED, FormatFileReader, create_source_reader, subtask_of_path
from millstream.runtime.task.environment import ManualClock, SimpleTaskEnvironment, StreamingRuntimeContext
from tests.unit.test_runtime_chain import make_chain, vertex

SCHEMA = '{"type": "record", "name": "R", "fields": [{"name": "id", "type": "int"}]}'
CSV = CsvSchema.builder().add_number_column("id", Types.INT()).build()


def reader(source: FileSource, parallelism: int = 1, subtask: int = 0, positions: dict[str, Any] | None = None,
           clock: ManualClock | None = None, assigned: bool = False, batch: int = 4) -> FormatFileReader:
    env = SimpleTaskEnvironment(parallelism=parallelism, subtask_index=subtask, clock=clock or ManualClock(0),
                                source_batch_size=batch)
    r = create_source_reader(source._source_factory(), env, StreamingRuntimeContext(env, "source", None),
                             positions, assigned)
    assert isinstance(r, FormatFileReader)
    r.open()
    return r


def drain(r: FormatFileReader, limit: int | None = None) -> list[Any]:
    out: list[Any] = []
    while (limit is None or len(out) < limit) and (batch := r.poll()):
        out.extend(batch)
    return out


def csv_files(directory: Path, n: int, per_file: int = 10) -> None:
    directory.mkdir(exist_ok=True)
    for f in range(n):
        (directory / f"f{f}.csv").write_text("".join(f"{f * per_file + i}\n" for i in range(per_file)))


def test_every_file_is_read_whole_by_exactly_one_subtask(tmp_path: Path) -> None:
    csv_files(tmp_path / "in", 5)
    source = FileSource.for_record_stream_format(CsvReaderFormat.for_schema(CSV), str(tmp_path / "in")).build()
    assert source._source_factory().bounded
    per_subtask = [[r.id for r in drain(reader(source, 2, i))] for i in range(2)]
    assert sorted(per_subtask[0] + per_subtask[1]) == list(range(50))
    assert len(per_subtask[0]) == 30 and len(per_subtask[1]) == 20  # files round-robin, whole


def test_a_restore_skips_the_records_read_and_the_files_finished(tmp_path: Path) -> None:
    csv_files(tmp_path / "in", 2)
    source = FileSource.for_record_stream_format(CsvReaderFormat.for_schema(CSV), str(tmp_path / "in")).build()
    first = reader(source)
    head = drain(first, 14)  # file 0 whole, 4 of file 1
    positions = first.position()
    assert positions == {str(tmp_path / "in" / "f0.csv"): DONE, str(tmp_path / "in" / "f1.csv"): 4, LISTED: 0}
    rest = drain(reader(source, positions=positions))
    assert [r.id for r in head + rest] == list(range(20))
    # at another parallelism, a subtask handed the positions reads exactly those files
    again = drain(reader(source, 3, 2, positions=positions, assigned=True))
    assert [r.id for r in again] == list(range(14, 20))


def test_a_restore_does_not_list_a_static_file_set_again(tmp_path: Path) -> None:
    # Flink's static file set is the files there at the start; a file added before a restore must
    # not move the others to other subtasks (duplicating some, losing others)
    csv_files(tmp_path / "in", 3)  # f0, f2 -> subtask 0; f1 -> subtask 1
    source = FileSource.for_record_stream_format(CsvReaderFormat.for_schema(CSV), str(tmp_path / "in")).build()
    first = [reader(source, 2, i) for i in range(2)]
    heads = [drain(r, 12) for r in first]
    positions = [r.position() for r in first]
    (tmp_path / "in" / "f00.csv").write_text("999\n")  # sorts between f0 and f1
    rest = [drain(reader(source, 2, i, positions=positions[i])) for i in range(2)]
    assert sorted(r.id for part in heads + rest for r in part) == list(range(30))


def test_a_bad_file_fails_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "x.avro").write_text("1,2,3\n")
    source = FileSource.for_record_stream_format(
        AvroInputFormat(str(tmp_path), AvroSchema.parse_string(SCHEMA)), str(tmp_path / "x.avro")).build()
    with pytest.raises(ValueError, match=rf"cannot read {tmp_path / 'x.avro'}: not an Avro container file"):
        drain(reader(source))
    (tmp_path / "y.csv").write_text("1\n2,3\n")
    source = FileSource.for_record_stream_format(CsvReaderFormat.for_schema(CSV), str(tmp_path / "y.csv")).build()
    with pytest.raises(ValueError, match=rf"cannot read {tmp_path / 'y.csv'}: line 2: Row length mismatch"):
        drain(reader(source))


def test_a_file_that_is_not_parquet_fails_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "z.parquet").write_bytes(b"PAR1 but not really")
    fmt = ParquetColumnarRowInputFormat(Types.ROW_NAMED(["id"], [Types.INT()]))
    source = FileSource.for_bulk_file_format(fmt, str(tmp_path / "z.parquet")).build()
    with pytest.raises(ValueError, match=rf"cannot read {tmp_path / 'z.parquet'}: not a Parquet file"):
        drain(reader(source))


def test_bulk_format_source_reads_parquet(tmp_path: Path) -> None:
    pq.write_table(pa.table({"id": pa.array(range(9), pa.int32())}), tmp_path / "a.parquet")
    fmt = ParquetColumnarRowInputFormat(Types.ROW_NAMED(["id"], [Types.INT()]), batch_size=4)
    source = FileSource.for_bulk_file_format(fmt, str(tmp_path / "a.parquet")).build()
    assert [r.id for r in drain(reader(source))] == list(range(9))


def test_a_parquet_file_is_split_by_row_groups_among_the_subtasks(tmp_path: Path) -> None:
    pq.write_table(pa.table({"id": pa.array(range(100), pa.int32())}), tmp_path / "a.parquet", row_group_size=10)
    fmt = ParquetColumnarRowInputFormat(Types.ROW_NAMED(["id"], [Types.INT()]), batch_size=4)
    source = FileSource.for_bulk_file_format(fmt, str(tmp_path / "a.parquet")).build()
    parts = [reader(source, 2, i) for i in range(2)]
    ids = [[r.id for r in drain(p)] for p in parts]
    assert len(ids[0]) == len(ids[1]) == 50 and sorted(ids[0] + ids[1]) == list(range(100))
    assert sorted(parts[0].position()) == sorted([LISTED] + [f"{tmp_path / 'a.parquet'}@rg{i}-{i + 1}" for i in (0, 2, 4, 6, 8)])
    # a restore in the middle of a row group goes on there
    first = reader(source, 1, 0, batch=4)
    head = drain(first, 13)  # row group 0 and 3 rows of row group 1 (the format's batches of 4)
    assert first.position()[f"{tmp_path / 'a.parquet'}@rg1-2"] == 4
    rest = drain(reader(source, 1, 0, positions=first.position()))
    assert sorted(r.id for r in head + rest) == list(range(100)) and len(head + rest) == 100
    # at another parallelism, the parts go where the restore hands them
    again = drain(reader(source, 3, 1, positions=first.position(), assigned=True))
    assert sorted(r.id for r in again) == list(range(14, 100))


def test_a_continuous_source_shares_a_new_parquet_files_row_groups(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"id": pa.array(range(60), pa.int32())}), tmp_path / "in" / "a.parquet", row_group_size=5)
    fmt = ParquetColumnarRowInputFormat(Types.ROW_NAMED(["id"], [Types.INT()]))
    source = FileSource.for_bulk_file_format(fmt, str(tmp_path / "in")).monitor_continuously(Duration.of_seconds(1)).build()
    ids = [[r.id for r in drain(reader(source, 3, i))] for i in range(3)]
    # each row group read once; shared, not all read by one subtask (a split's owner is the CRC-32
    # of its id, which holds the random tmp path: one of 3 subtasks owning none of 12 splits is ~2 %)
    assert sorted(ids[0] + ids[1] + ids[2]) == list(range(60)) and sum(1 for part in ids if part) >= 2


def test_create_input_reads_the_formats_own_path(env: StreamExecutionEnvironment, tmp_path: Path) -> None:
    with open(tmp_path / "a.avro", "wb") as f:
        fastavro.writer(f, fastavro.parse_schema(json.loads(SCHEMA)), [{"id": 1}])
    fmt = AvroInputFormat(str(tmp_path / "a.avro"), AvroSchema.parse_string(SCHEMA))
    env.create_input(fmt).print()
    [node] = [n for n in env.get_stream_graph().nodes.values() if "Custom Source" in n.operator_name]
    factory = node.factory
    assert isinstance(factory, operator_factories.FormatFileSourceFactory)
    assert factory.paths == (str(tmp_path / "a.avro"),) and factory.file_format is fmt
    with pytest.raises(TypeError, match="create_input needs an input format"):
        env.create_input(StreamFormat.text_line_format())


def test_continuous_source_picks_up_new_files_at_the_discovery_interval(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("a1\na2\n")
    source = (FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(tmp_path / "in"))
              .monitor_continuously(Duration.of_seconds(5)).build())
    assert not source._source_factory().bounded
    clock = ManualClock(0)
    r = reader(source, clock=clock)
    assert drain(r) == ["a1", "a2"] and r.poll() == []  # never ends: nothing new yet
    (tmp_path / "in" / "b.txt").write_text("b1\n")
    (tmp_path / "in" / ".hidden").write_text("not listed\n")
    clock.advance(4_000)
    assert r.poll() == [] and r.wait_hint_ms() == 1_000  # not listed again before the interval
    clock.advance(1_000)
    assert drain(r) == ["b1"]
    positions = r.position()
    assert positions == {str(tmp_path / "in" / "a.txt"): DONE, str(tmp_path / "in" / "b.txt"): DONE}
    # a restored reader reads neither file again, and reads a file that appeared meanwhile
    (tmp_path / "in" / "c.txt").write_text("c1\n")
    assert drain(reader(source, positions=positions, clock=ManualClock(0))) == ["c1"]


def test_continuous_source_restore_goes_on_with_a_half_read_file(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("".join(f"a{i}\n" for i in range(10)))
    source = (FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(tmp_path / "in"))
              .monitor_continuously(Duration.of_seconds(5)).build())
    first = reader(source, batch=4)
    head = drain(first, 4)
    assert first.position() == {str(tmp_path / "in" / "a.txt"): 4}
    rest = drain(reader(source, positions=first.position(), batch=4))
    assert head + rest == [f"a{i}" for i in range(10)]


def test_continuous_source_shares_files_by_the_hash_of_their_path(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    for i in range(12):
        (tmp_path / "in" / f"{i}.txt").write_text(f"{i}\n")
    source = (FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(tmp_path / "in"))
              .monitor_continuously(Duration.of_millis(100)).build())
    read = [drain(reader(source, 3, i)) for i in range(3)]
    assert sorted(int(x) for part in read for x in part) == list(range(12))
    for i, part in enumerate(read):
        assert all(subtask_of_path(str(tmp_path / "in" / f"{x}.txt"), 3) == i for x in part)
    with pytest.raises(ValueError, match="cannot be restored at another parallelism"):
        reader(source, 2, 0, positions={str(tmp_path / "in" / "0.txt"): DONE}, assigned=True)
    with pytest.raises(ValueError, match="must be positive"):
        FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(tmp_path)).monitor_continuously(
            Duration.of_millis(0))


# -- FileSink with a bulk format ------------------------------------------------------------------


ROW = Types.ROW_NAMED(["id"], [Types.INT()])


def bulk_sink(env: StreamExecutionEnvironment, base: Path, checkpointing: bool) -> FileSinkOperator:
    sink = (FileSink.for_bulk_format(str(base), ParquetBulkWriters.for_row_type(ROW))
            .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner()).build())
    assert sink.rolling_policy == RollingPolicy.on_checkpoint_rolling_policy()
    env.from_sequence(1, 2).sink_to(sink)
    run = make_chain(vertex(env, "Sequence"), 0, clock=ManualClock(0), checkpointing_enabled=checkpointing)
    op = run.chain.operators[-1]
    assert isinstance(op, FileSinkOperator)
    run.chain.open()
    return op


def parquet_ids(base: Path) -> list[int]:
    names = sorted(n for n in os.listdir(base) if not n.startswith("."))
    assert all((base / n).is_file() for n in names)
    return [r["id"] for n in names for r in pq.read_table(base / n).to_pylist()]


def test_bulk_sink_rolls_and_commits_on_checkpoints_only(env: StreamExecutionEnvironment, tmp_path: Path) -> None:
    base = tmp_path / "out"
    op = bulk_sink(env, base, checkpointing=True)
    op.process_batch([Row(1), Row(2)])
    op.ctx.env.clock.advance(10 * 60_000)  # type: ignore[attr-defined]
    op.flush()  # no rolling on time or size: the bulk file stays open
    assert parquet_ids(base) == [] and len(os.listdir(base)) == 1
    op.snapshot_state(1)  # rolls: the file is finished (a valid Parquet file), pending, hidden
    [hidden] = os.listdir(base)
    assert hidden.startswith(".") and pq.read_table(base / hidden).num_rows == 2
    op.process_batch([Row(3)])
    op.snapshot_state(2)
    assert parquet_ids(base) == []
    op.notify_checkpoint_complete(1)
    assert parquet_ids(base) == [1, 2]
    op.notify_checkpoint_complete(2)
    assert parquet_ids(base) == [1, 2, 3]


def test_bulk_sink_without_checkpointing_finishes_at_the_end_of_input(env: StreamExecutionEnvironment,
                                                                        tmp_path: Path) -> None:
    base = tmp_path / "out"
    op = bulk_sink(env, base, checkpointing=False)
    op.process_batch([Row(1)])
    op.process_batch([Row(2)])
    op.end_input()
    assert parquet_ids(base) == [1, 2]


def test_bulk_builder_takes_only_the_on_checkpoint_rolling_policy(tmp_path: Path) -> None:
    builder = FileSink.for_bulk_format(str(tmp_path), ParquetBulkWriters.for_row_type(ROW))
    builder.with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy())
    with pytest.raises(ValueError, match="roll on every checkpoint only"):
        builder.with_rolling_policy(RollingPolicy.default_rolling_policy())
    with pytest.raises(TypeError, match="needs a BulkWriterFactory"):
        FileSink.for_bulk_format(str(tmp_path), "parquet")  # type: ignore[arg-type]


# -- ORC (Flink's OrcColumnarRowInputFormat) ---------------------------------------------------------


def orc_file(path: Path, n: int, stripe_rows: int | None = None) -> None:
    import pyarrow.orc as orc
    table = pa.table({"id": pa.array(range(n), pa.int64()), "name": pa.array([f"n{i}" for i in range(n)]),
                      "extra": pa.array([1.5] * n)})
    if stripe_rows is None:
        orc.write_table(table, path)
        return
    with orc.ORCWriter(path, stripe_size=1) as w:  # a tiny stripe size: each write_table ends a stripe
        for start in range(0, n, stripe_rows):
            w.write(table.slice(start, stripe_rows))


def test_bulk_format_source_reads_orc_columns_by_name_as_rows(tmp_path: Path) -> None:
    from millstream.datastream.formats.orc import OrcColumnarRowInputFormat
    orc_file(tmp_path / "a.orc", 9)
    fmt = OrcColumnarRowInputFormat(Types.ROW_NAMED(["name", "id"], [Types.STRING(), Types.INT()]), batch_size=4)
    rows = drain(reader(FileSource.for_bulk_file_format(fmt, str(tmp_path / "a.orc")).build()))
    assert [(r.name, r.id) for r in rows] == [(f"n{i}", i) for i in range(9)]  # LONG column read as INT
    assert fmt.get_produced_type() == Types.ROW_NAMED(["name", "id"], [Types.STRING(), Types.INT()])


def test_what_the_orc_bulk_writer_wrote_the_orc_format_reads_back(tmp_path: Path) -> None:
    from millstream.datastream.formats.orc import OrcBulkWriters, OrcColumnarRowInputFormat
    row = Types.ROW_NAMED(["id", "tags", "when"], [Types.LONG(), Types.LIST(Types.STRING()), Types.SQL_DATE()])
    import datetime
    records = [Row(id=i, tags=[f"t{i}"] * (i % 3), when=datetime.date(2024, 1, 1 + i)) for i in range(5)]
    with open(tmp_path / "w.orc", "wb") as stream:
        writer = OrcBulkWriters.for_row_type(row).create(stream)
        writer.add_elements(records)
        writer.finish()
    rows = drain(reader(FileSource.for_bulk_file_format(OrcColumnarRowInputFormat(row), str(tmp_path / "w.orc")).build()))
    assert [(r.id, r.tags, r.when) for r in rows] == [(r.id, r.tags, r.when) for r in records]


def test_an_orc_file_is_split_by_stripes_among_the_subtasks(tmp_path: Path) -> None:
    import pyarrow.orc as orc
    from millstream.datastream.formats.orc import OrcColumnarRowInputFormat
    orc_file(tmp_path / "s.orc", 100, stripe_rows=10)
    assert orc.ORCFile(tmp_path / "s.orc").nstripes > 1
    fmt = OrcColumnarRowInputFormat(Types.ROW_NAMED(["id"], [Types.LONG()]), batch_size=3)
    source = FileSource.for_bulk_file_format(fmt, str(tmp_path / "s.orc")).build()
    ids = [[r.id for r in drain(reader(source, 2, i))] for i in range(2)]
    assert ids[0] and ids[1] and sorted(ids[0] + ids[1]) == list(range(100))


def test_a_missing_orc_column_or_a_file_that_is_not_orc_fails_naming_the_file(tmp_path: Path) -> None:
    from millstream.datastream.formats.orc import OrcColumnarRowInputFormat
    orc_file(tmp_path / "a.orc", 3)
    fmt = OrcColumnarRowInputFormat(Types.ROW_NAMED(["nope"], [Types.INT()]))
    with pytest.raises(ValueError, match=rf"cannot read {tmp_path / 'a.orc'}: the file has no column 'nope'"):
        drain(reader(FileSource.for_bulk_file_format(fmt, str(tmp_path / "a.orc")).build()))
    insensitive = OrcColumnarRowInputFormat(Types.ROW_NAMED(["ID"], [Types.LONG()]), is_case_sensitive=False)
    assert [r.ID for r in drain(reader(FileSource.for_bulk_file_format(insensitive, str(tmp_path / "a.orc")).build()))] == [0, 1, 2]
    (tmp_path / "z.orc").write_bytes(b"ORC but not really")
    with pytest.raises(ValueError, match=rf"cannot read {tmp_path / 'z.orc'}: not an ORC file"):
        drain(reader(FileSource.for_bulk_file_format(OrcColumnarRowInputFormat(Types.ROW_NAMED(["id"], [Types.INT()])),
                                                     str(tmp_path / "z.orc")).build()))
    with pytest.raises(ValueError, match="batch_size must be a positive number"):
        OrcColumnarRowInputFormat(Types.ROW_NAMED(["id"], [Types.INT()]), batch_size=0)
