"""PyFlink's file formats on a real cluster (one shared MiniCluster with checkpoints): a FileSource
with each format at parallelism 2 reads every record once; FileSink.for_bulk_format is
exactly-once after a failover (files committed only when their checkpoint completes, rolled on
every checkpoint); a continuously monitored FileSource picks up a file added while the job runs."""
from __future__ import annotations

import json
import os
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pyarrow.orc as orc
import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.client.execution import JobExecutionException
from millstream.common import WatermarkStrategy
from millstream.common.restart_strategy import RestartStrategies
from millstream.common.row import Row
from millstream.common.time import Duration
from millstream.common.typeinfo import Types
from millstream.datastream import MapFunction, RuntimeContext, StreamExecutionEnvironment
from millstream.datastream.connectors.file_system import BucketAssigner, FileSink, FileSource
from millstream.datastream.connectors.number_seq import NumberSequenceSource
from millstream.datastream.formats.avro import AvroBulkWriters, AvroInputFormat, AvroSchema
from millstream.datastream.formats.csv import CsvBulkWriters, CsvReaderFormat, CsvSchema
from millstream.datastream.formats.orc import OrcColumnarRowInputFormat
from millstream.datastream.formats.parquet import (
    AvroParquetReaders,
    ParquetBulkWriters,
    ParquetColumnarRowInputFormat,
)
from millstream.runtime.execution_state import JobStatus

from .harness import ClusterSpec, jobmanager_env, poll_for
from .jobs import FailWhenMarked, Throttle, ended

pytestmark = pytest.mark.timeout(300)
CLUSTER = ClusterSpec(checkpoints=True)  # one TaskManager, two slots

AVRO = AvroSchema.parse_string(json.dumps(
    {"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}]}))
ROW = Types.ROW_NAMED(["id", "name"], [Types.LONG(), Types.STRING()])
CSV = CsvSchema.builder().add_number_column("id").add_string_column("name").build()
FILES, PER_FILE = 4, 250  # per format: 4 files, so each of the 2 subtasks reads some


class Tag(MapFunction):
    """(format, id, subtask): which subtask read each record (the map chains to its source)."""

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt

    def open(self, runtime_context: RuntimeContext) -> None:
        self.index = runtime_context.get_index_of_this_subtask()

    def map(self, value):
        record_id = value["id"] if isinstance(value, dict) else value[0]
        return self.fmt, int(record_id), self.index


def write_inputs(root: Path) -> dict[str, Path]:
    dirs = {name: root / name for name in ("csv", "avro", "parquet", "avro_parquet", "orc")}
    for d in dirs.values():
        d.mkdir()
    parsed = fastavro.parse_schema(json.loads(str(AVRO)))
    for f in range(FILES):
        ids = range(f * PER_FILE, (f + 1) * PER_FILE)
        (dirs["csv"] / f"{f}.csv").write_text("".join(f"{i},name {i}\n" for i in ids))
        with open(dirs["avro"] / f"{f}.avro", "wb") as out:
            fastavro.writer(out, parsed, [{"id": i, "name": f"n{i}"} for i in ids])
        table = pa.table({"id": pa.array(ids, pa.int64()), "name": [f"n{i}" for i in ids]})
        pq.write_table(table, dirs["parquet"] / f"{f}.parquet", row_group_size=100)
        pq.write_table(table, dirs["avro_parquet"] / f"{f}.parquet")
        with orc.ORCWriter(dirs["orc"] / f"{f}.orc", stripe_size=1) as w:  # a stripe per write: splits
            for start in range(0, PER_FILE, 100):
                w.write(table.slice(start, 100))
    return dirs


# two formats per job: a TaskManager's Spark runs 8 tasks at once (two sources at parallelism 2 and
# the collect sink fit; four sources do not)
@pytest.mark.parametrize("formats", [("csv", "avro"), ("parquet", "avro_parquet"), ("orc",)])
def test_a_file_source_with_each_format_at_parallelism_2_reads_every_record_once(cluster, tmp_path, formats) -> None:
    dirs = write_inputs(tmp_path)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    sources = {
        "csv": FileSource.for_record_stream_format(CsvReaderFormat.for_schema(CSV), str(dirs["csv"])),
        "avro": FileSource.for_record_stream_format(AvroInputFormat(str(dirs["avro"]), AVRO), str(dirs["avro"])),
        "parquet": FileSource.for_bulk_file_format(ParquetColumnarRowInputFormat(ROW, batch_size=64),
                                                   str(dirs["parquet"])),
        "avro_parquet": FileSource.for_record_stream_format(AvroParquetReaders.for_generic_record(AVRO),
                                                            str(dirs["avro_parquet"])),
        "orc": FileSource.for_bulk_file_format(OrcColumnarRowInputFormat(ROW, batch_size=64), str(dirs["orc"])),
    }
    sources = {name: sources[name] for name in formats}
    streams = [env.from_source(s.build(), WatermarkStrategy.no_watermarks(), name).map(Tag(name))
               for name, s in sources.items()]
    with jobmanager_env(cluster.address):
        with streams[0].union(*streams[1:]).execute_and_collect(f"file formats {formats} p2") as results:
            rows = list(results)
    for name in sources:
        ids = sorted(i for fmt, i, _ in rows if fmt == name)
        assert ids == list(range(FILES * PER_FILE)), f"{name}: {len(ids)} records, {len(set(ids))} distinct"
        assert {s for fmt, _, s in rows if fmt == name} == {0, 1}, f"{name}: both subtasks read files"


def visible(base: Path) -> list[Path]:
    return sorted(p for p in base.iterdir() if not p.name.startswith("."))


@pytest.mark.parametrize("fmt", ["parquet", "avro", "csv"])
def test_bulk_file_sink_is_exactly_once_after_a_failover(cluster, tmp_path, fmt) -> None:
    out, slow, fail = tmp_path / "out", tmp_path / "slow", tmp_path / "fail"
    count = 6000
    slow.touch()  # the Throttle keeps the bounded job running until the failure was injected
    writers = {"parquet": ParquetBulkWriters.for_row_type(ROW), "avro": AvroBulkWriters.for_generic_record(AVRO),
               "csv": CsvBulkWriters.for_schema(CSV)}
    to_record = (lambda i: {"id": i, "name": f"n{i}"}) if fmt == "avro" else (lambda i: Row(i, f"n{i}"))
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(200)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 100))
    (env.from_source(NumberSequenceSource(0, count - 1), WatermarkStrategy.no_watermarks(), "numbers")
        .map(Throttle(str(slow), 0.004))
        .map(FailWhenMarked(str(fail)))
        .map(to_record)
        .sink_to(FileSink.for_bulk_format(str(out), writers[fmt])
                 .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner()).build()))
    with ClusterClient(cluster.address) as client:
        job_id = client.submit(env.get_job_graph(f"bulk {fmt} failover").proto)
        poll_for(lambda: client.status(job_id).checkpoints.num_completed >= 2, 120, what="two completed checkpoints")
        committed = visible(out)
        assert committed, "a completed checkpoint committed part files while the job runs"
        fail.touch()
        restarted = poll_for(lambda: client.status(job_id).num_restarts >= 1 or ended(client, job_id), 120,
                             interval=0.1, what="the restart")
        assert restarted is True, f"the job ended before the failure: {restarted}"
        slow.unlink()
        summary = poll_for(lambda: ended(client, job_id), 120, interval=0.2, what="the job to end")
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
    assert summary.num_restarts == 1 and summary.checkpoints.latest_restored_id >= 2
    files = visible(out)
    assert set(committed) <= set(files)  # committed files are never taken back
    # one part file per subtask per checkpoint: files rolled on checkpoints, not only at the end
    assert len(files) > 2
    ids: list[int] = []
    for path in files:
        if fmt == "parquet":
            table = pq.read_table(path)
            assert table.schema.types == [pa.int64(), pa.string()]
            ids += table.column("id").to_pylist()
        elif fmt == "avro":
            with open(path, "rb") as f:
                ids += [r["id"] for r in fastavro.reader(f)]
        else:
            ids += [int(line.split(",")[0]) for line in path.read_text().splitlines()]
    duplicated = sorted({i for i in ids if ids.count(i) > 1}) if len(ids) != len(set(ids)) else []
    assert not duplicated, f"{len(duplicated)} records written twice, e.g. {duplicated[:5]}"
    assert sorted(ids) == list(range(count))


def test_a_continuous_file_source_reads_a_file_added_while_the_job_runs(cluster, tmp_path) -> None:
    watched = tmp_path / "in"
    watched.mkdir()
    (watched / "first.csv").write_text("".join(f"{i},a\n" for i in range(50)))
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(200)
    source = (FileSource.for_record_stream_format(CsvReaderFormat.for_schema(CSV), str(watched))
              .monitor_continuously(Duration.of_millis(200)).build())
    stream = env.from_source(source, WatermarkStrategy.no_watermarks(), "watched").map(lambda r: r.id)
    with jobmanager_env(cluster.address):
        with stream.execute_and_collect("continuous file source") as results:
            first = sorted(next(results) for _ in range(50))
            # written hidden, then renamed: the listing sees the file whole (as Flink expects)
            (watched / ".second.csv").write_text("".join(f"{i},b\n" for i in range(50, 80)))
            os.replace(watched / ".second.csv", watched / "second.csv")
            second = sorted(next(results) for _ in range(30))
    assert first == list(range(50)) and second == list(range(50, 80))


def test_a_continuous_file_source_neither_rereads_nor_skips_a_file_after_a_failover(cluster, tmp_path) -> None:
    watched, out, slow, fail = tmp_path / "in", tmp_path / "out", tmp_path / "slow", tmp_path / "fail"
    watched.mkdir()

    def add(name: str, ids: range) -> None:
        (watched / f".{name}").write_text("".join(f"{i},x\n" for i in ids))
        os.replace(watched / f".{name}", watched / name)

    add("a.csv", range(0, 1500))
    add("b.csv", range(1500, 3000))
    slow.touch()
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(200)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 100))
    source = (FileSource.for_record_stream_format(CsvReaderFormat.for_schema(CSV), str(watched))
              .monitor_continuously(Duration.of_millis(100)).build())
    (env.from_source(source, WatermarkStrategy.no_watermarks(), "watched")
        .map(Throttle(str(slow), 0.002))
        .map(FailWhenMarked(str(fail)))
        .map(lambda r: str(r.id))
        .sink_to(FileSink.for_row_format(str(out)).with_bucket_assigner(
            BucketAssigner.base_path_bucket_assigner()).build()))

    def lines() -> list[int]:
        return [int(x) for p in visible(out) for x in p.read_text().splitlines()] if out.exists() else []

    with ClusterClient(cluster.address) as client:
        job_id = client.submit(env.get_job_graph("continuous failover").proto)
        poll_for(lambda: client.status(job_id).checkpoints.num_completed >= 2, 120, what="two completed checkpoints")
        add("c.csv", range(3000, 3500))  # appears before the failure: read once, by one attempt or the other
        fail.touch()
        restarted = poll_for(lambda: client.status(job_id).num_restarts >= 1 or ended(client, job_id), 120,
                             interval=0.1, what="the restart")
        assert restarted is True, f"the job ended: {restarted}"
        slow.unlink()
        add("d.csv", range(3500, 4000))  # appears after the restore
        poll_for(lambda: len(lines()) >= 4000, 120, interval=0.2, what="every record committed")
        # a further checkpoint commits nothing more: no file was read twice
        done = client.status(job_id).checkpoints.num_completed
        poll_for(lambda: client.status(job_id).checkpoints.num_completed >= done + 2, 60, what="two more checkpoints")
        summary = client.status(job_id)
        client.cancel(job_id)
    assert summary.num_restarts == 1 and summary.checkpoints.latest_restored_id >= 2
    ids = lines()
    duplicated = sorted({i for i in ids if ids.count(i) > 1}) if len(ids) != len(set(ids)) else []
    assert not duplicated, f"{len(duplicated)} records read twice, e.g. {duplicated[:5]}"
    assert sorted(ids) == list(range(4000))


def test_a_bad_input_file_fails_the_job_naming_the_file_and_the_line(cluster, tmp_path) -> None:
    (tmp_path / "good.csv").write_text("1,a\n")
    (tmp_path / "bad.csv").write_text("1,a\n2,b\n3,c,extra\n")
    (tmp_path / "x.avro").write_text("id,name\n")
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    source = FileSource.for_record_stream_format(CsvReaderFormat.for_schema(CSV), str(tmp_path / "good.csv"),
                                                 str(tmp_path / "bad.csv")).build()
    env.from_source(source, WatermarkStrategy.no_watermarks(), "csv").add_sink(lambda r: None)
    with jobmanager_env(cluster.address), pytest.raises(JobExecutionException) as info:
        env.execute("bad csv")
    assert f"cannot read {tmp_path / 'bad.csv'}: line 3: Row length mismatch. 2 fields expected but was 3" in str(info.value)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.create_input(AvroInputFormat(str(tmp_path / "x.avro"), AVRO)).add_sink(lambda r: None)
    with jobmanager_env(cluster.address), pytest.raises(JobExecutionException) as info:
        env.execute("not avro")
    assert f"cannot read {tmp_path / 'x.avro'}: not an Avro container file" in str(info.value)
