"""Filesystem tables on a MiniCluster with real Spark, from Flink's filesystem connector docs:
a ``PARTITIONED BY`` table reads every ``k=v/`` directory back with the partition columns from the
names, a WHERE on partition columns never opens the pruned directories, the ``avro`` format
writes container files fastavro reads with the schema Flink derives, and the ``success-file``
partition commit writes ``_SUCCESS`` only after the watermark passed the partition's time plus the
delay, and never before the partition's data is committed."""
from __future__ import annotations

import datetime
import time
from pathlib import Path
from typing import Any

import fastavro
import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.common import Row, Types
from millstream.datastream import StreamExecutionEnvironment
from millstream.datastream.functions import SourceFunction
from millstream.runtime.execution_state import JobStatus
from millstream.table import DataTypes, EnvironmentSettings, Schema, StreamTableEnvironment, TableEnvironment

from .harness import ClusterSpec, poll_for
from .jobs import ended

pytestmark = pytest.mark.timeout(600)
CLUSTER = ClusterSpec(jobmanager_env=True, checkpoints=True, tasks_per_slot=8)

ROWS = [(i, f"w{i}", f"2024-01-0{1 + i % 2}", i % 3) for i in range(30)]
DDL = ("CREATE TABLE {name} (id BIGINT, word STRING, dt STRING, hr INT) PARTITIONED BY (dt, hr) WITH ("
       "'connector' = 'filesystem', 'path' = '{path}', 'format' = '{fmt}'{extra})")


def batch_env() -> TableEnvironment:
    t_env = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
    t_env.get_config().set("parallelism.default", "1")
    return t_env


def write_partitioned(path: Path, fmt: str, extra: str = "") -> None:
    t_env = batch_env()
    t_env.create_temporary_view("src", t_env.from_elements(ROWS, ["id", "word", "dt", "hr"]))
    t_env.execute_sql(DDL.format(name="out_t", path=path, fmt=fmt, extra=extra))
    t_env.execute_sql("INSERT INTO out_t SELECT id, word, dt, hr FROM src").wait(300_000)


@pytest.mark.parametrize("fmt", ["csv", "json", "avro"])
def test_a_partitioned_table_written_by_the_sink_reads_back_equal_and_prunes_partitions(
        cluster: Any, tmp_path: Path, fmt: str) -> None:
    out = tmp_path / "t"
    write_partitioned(out, fmt)
    assert sorted(p.name for p in out.iterdir()) == ["dt=2024-01-01", "dt=2024-01-02"]
    # a corrupt file in partitions the WHERE below excludes: reading it would fail the job
    (out / "dt=2024-01-01" / "hr=0" / "part-corrupt").write_bytes(b"\x00\xffnot a row\n")
    (out / "dt=2024-01-02" / "hr=2" / "part-corrupt").write_bytes(b"\x00\xffnot a row\n")
    read = batch_env()
    read.execute_sql(DDL.format(name="back", path=out, fmt=fmt, extra=""))
    got = [tuple(r) for r in read.execute_sql("SELECT * FROM back WHERE hr = 1 OR dt = '2024-01-02' AND hr < 2").collect()]
    assert sorted(got) == sorted(r for r in ROWS if r[3] == 1 or (r[2] == "2024-01-02" and r[3] < 2))
    plan = read.explain_sql("SELECT id FROM back WHERE hr = 1")
    assert "partitions=[{dt=2024-01-01, hr=1}, {dt=2024-01-02, hr=1}]" in plan
    # unpruned, the corrupt files are read and fail the query
    with pytest.raises(Exception, match="part-corrupt|deserialize|avro"):
        list(read.execute_sql("SELECT * FROM back").collect())
    for p in out.rglob("part-corrupt"):
        p.unlink()
    everything = [tuple(r) for r in read.execute_sql("SELECT * FROM back").collect()]
    assert sorted(everything) == sorted(ROWS)


def test_partition_values_are_typed_and_the_default_partition_name_is_null(cluster: Any, tmp_path: Path) -> None:
    out = tmp_path / "typed"
    t_env = batch_env()
    rows = [(1, datetime.date(2024, 3, 1), None), (2, datetime.date(2024, 3, 2), "a b/c")]
    t_env.create_temporary_view("src", t_env.from_elements(rows, DataTypes.ROW([
        DataTypes.FIELD("id", DataTypes.BIGINT()), DataTypes.FIELD("d", DataTypes.DATE()),
        DataTypes.FIELD("s", DataTypes.STRING())])))
    ddl = (f"CREATE TABLE {{}} (id BIGINT, d DATE, s STRING) PARTITIONED BY (d, s) WITH ("
           f"'connector' = 'filesystem', 'path' = '{out}', 'format' = 'json')")
    t_env.execute_sql(ddl.format("o"))
    t_env.execute_sql("INSERT INTO o SELECT * FROM src").wait(300_000)
    assert (out / "d=2024-03-01" / "s=__DEFAULT_PARTITION__").is_dir()
    assert (out / "d=2024-03-02" / "s=a b%2Fc").is_dir()  # Hive's escaping of '/'
    read = batch_env()
    read.execute_sql(ddl.format("b"))
    assert sorted(tuple(r) for r in read.execute_sql("SELECT * FROM b").collect()) == rows
    assert [tuple(r) for r in read.execute_sql("SELECT id FROM b WHERE s IS NULL").collect()] == [(1,)]


def test_avro_part_files_are_readable_by_fastavro_with_flinks_derived_schema(cluster: Any, tmp_path: Path) -> None:
    out = tmp_path / "avro"
    t_env = batch_env()
    rows = [(1, "a", 1.5, True, b"\x01", datetime.date(2024, 1, 2), datetime.datetime(2024, 1, 2, 3, 4, 5, 678000)),
            (2, None, None, None, None, None, None)]
    t_env.create_temporary_view("src", t_env.from_elements(rows, DataTypes.ROW([
        DataTypes.FIELD("id", DataTypes.INT()), DataTypes.FIELD("s", DataTypes.STRING()),
        DataTypes.FIELD("x", DataTypes.DOUBLE()), DataTypes.FIELD("b", DataTypes.BOOLEAN()),
        DataTypes.FIELD("raw", DataTypes.BYTES()), DataTypes.FIELD("d", DataTypes.DATE()),
        DataTypes.FIELD("ts", DataTypes.TIMESTAMP(3))])))
    ddl = ("CREATE TABLE {} (id INT NOT NULL, s STRING, x DOUBLE, b BOOLEAN, raw VARBINARY, d DATE, ts TIMESTAMP(3)) "
           f"WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'avro', 'avro.codec' = 'deflate')")
    t_env.execute_sql(ddl.format("o"))
    t_env.execute_sql("INSERT INTO o SELECT * FROM src").wait(300_000)
    files = [p for p in out.iterdir() if not p.name.startswith(".")]
    assert files
    flink_schema = {"type": "record", "name": "record", "namespace": "org.apache.flink.avro.generated", "fields": [
        {"name": "id", "type": "int"},
        {"name": "s", "type": ["null", "string"], "default": None},
        {"name": "x", "type": ["null", "double"], "default": None},
        {"name": "b", "type": ["null", "boolean"], "default": None},
        {"name": "raw", "type": ["null", "bytes"], "default": None},
        {"name": "d", "type": ["null", {"type": "int", "logicalType": "date"}], "default": None},
        {"name": "ts", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}], "default": None}]}
    records = []
    for f in files:
        with open(f, "rb") as fh:
            reader = fastavro.reader(fh, reader_schema=fastavro.parse_schema(flink_schema))
            assert reader.codec == "deflate"
            records += list(reader)
    utc = datetime.timezone.utc
    assert sorted(records, key=lambda r: r["id"]) == [
        {"id": 1, "s": "a", "x": 1.5, "b": True, "raw": b"\x01", "d": datetime.date(2024, 1, 2),
         "ts": datetime.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=utc)},
        {"id": 2, "s": None, "x": None, "b": None, "raw": None, "d": None, "ts": None}]
    read = batch_env()
    read.execute_sql(ddl.format("b"))
    assert sorted((tuple(r) for r in read.execute_sql("SELECT * FROM b").collect()), key=lambda r: r[0]) == rows


def test_unknown_filesystem_options_fail_naming_them(cluster: Any, tmp_path: Path) -> None:
    t_env = batch_env()
    t_env.execute_sql(DDL.format(name="bad", path=tmp_path, fmt="avro", extra=", 'avro.compression' = 'x'"))
    with pytest.raises(Exception, match=r"Unsupported options found for 'filesystem'[\s\S]*avro\.compression"):
        list(t_env.execute_sql("SELECT * FROM bad").collect())


class HourlyRows(SourceFunction):
    """Six hours of 2024-01-01, ``per_hour`` rows an hour in time order, ``pause_s`` apart."""

    def __init__(self, per_hour: int, pause_s: float) -> None:
        self.per_hour, self.pause_s = per_hour, pause_s

    def run(self, ctx: Any) -> None:
        for h in range(6):
            for k in range(self.per_hour):
                ts = datetime.datetime(2024, 1, 1, h) + datetime.timedelta(minutes=k * 60 // self.per_hour)
                ctx.collect(Row(h * self.per_hour + k, ts.strftime("%Y-%m-%d %H:%M:%S")))
                time.sleep(self.pause_s)

    def cancel(self) -> None:
        pass


def committed_rows(directory: Path) -> list[str]:
    return [line for f in directory.iterdir() if f.is_file() and not f.name.startswith((".", "_"))
            for line in f.read_text().splitlines()]


def test_success_files_appear_only_after_the_watermark_passes_partition_time_plus_delay(
        cluster: Any, tmp_path: Path) -> None:
    """Flink's example: hourly partitions ``dt``/``hr``, trigger partition-time with pattern
    '$dt $hr:00:00' and delay 1 h; here delay 2 h, so hour h is done only when the watermark passes
    h+2:00, i.e. once hour h+2's rows are being written."""
    out, per_hour = tmp_path / "hourly", 20
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(300)
    t_env = StreamTableEnvironment.create(env)
    row_type = Types.ROW_NAMED(["id", "t"], [Types.LONG(), Types.STRING()])
    stream = env.add_source(HourlyRows(per_hour, 0.05), "hourly", type_info=row_type)
    t_env.create_temporary_view("src", t_env.from_data_stream(stream, Schema.new_builder()
                                                              .column("id", DataTypes.BIGINT())
                                                              .column("t", DataTypes.STRING())
                                                              .column_by_expression("ts", "CAST(t AS TIMESTAMP(3))")
                                                              .watermark("ts", "ts").build()))
    t_env.execute_sql(f"""
        CREATE TABLE out_t (id BIGINT, dt STRING, hr STRING) PARTITIONED BY (dt, hr) WITH (
          'connector' = 'filesystem', 'path' = '{out}', 'format' = 'csv',
          'partition.time-extractor.timestamp-pattern' = '$dt $hr:00:00',
          'sink.partition-commit.trigger' = 'partition-time', 'sink.partition-commit.delay' = '2 h',
          'sink.partition-commit.watermark-time-zone' = 'UTC',
          'sink.partition-commit.policy.kind' = 'success-file')""")
    result = t_env.execute_sql("INSERT INTO out_t SELECT id, SUBSTRING(t, 1, 10), SUBSTRING(t, 12, 2) FROM src")
    job_id = result.get_job_client().get_job_id().to_bytes()
    seen: dict[int, tuple[int, bool]] = {}  # hour -> (committed rows then, hour + 2 being written then)
    with ClusterClient(cluster.address) as client:
        deadline = time.monotonic() + 300
        while not ended(client, job_id) and time.monotonic() < deadline:
            for h in range(6):
                part = out / "dt=2024-01-01" / f"hr={h:02d}"
                if h not in seen and (part / "_SUCCESS").exists():
                    later = out / "dt=2024-01-01" / f"hr={h + 2:02d}"
                    seen[h] = (len(committed_rows(part)), later.is_dir() and any(later.iterdir()))
            time.sleep(0.02)
        summary = poll_for(lambda: ended(client, job_id), 60, what="the job to end")
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
    # while running: hours 0..3 committed once hour h+2 was being written, all their rows visible by then
    for h in range(4):
        assert h in seen, f"hour {h} got no _SUCCESS while the job ran: {seen}"
        assert seen[h] == (per_hour, True), f"hour {h}: (committed rows, hour {h + 2} written) = {seen[h]}"
    for h in range(6):  # the end of the input ends every hour
        part = out / "dt=2024-01-01" / f"hr={h:02d}"
        assert (part / "_SUCCESS").exists(), f"hour {h} has no _SUCCESS after the job"
        assert sorted(int(x) for x in committed_rows(part)) == list(range(h * per_hour, (h + 1) * per_hour))
