"""INSERT INTO a ``filesystem`` table on a MiniCluster with real Spark: a streaming job writes
csv into Flink's ``k=v/`` partition directories exactly once across a kill -9 of the worker
running it (part files become visible only when their checkpoint completes); a batch job writes
json that a filesystem json table reads back."""
from __future__ import annotations

import json
import os
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.common import WatermarkStrategy
from millstream.common.restart_strategy import RestartStrategies
from millstream.common.typeinfo import Types
from millstream.datastream import StreamExecutionEnvironment
from millstream.datastream.connectors.number_seq import NumberSequenceSource
from millstream.runtime.execution_state import JobStatus
from millstream.table import EnvironmentSettings, StreamTableEnvironment, TableEnvironment

from .harness import ClusterSpec, poll_for
from .jobs import NotePid, Throttle, ended

pytestmark = pytest.mark.timeout(600)
CLUSTER = ClusterSpec(jobmanager_env=True, checkpoints=True, tasks_per_slot=4)


def part_files(out: Path) -> list[Path]:
    """The committed part files (hidden in-progress and pending ones start with a dot)."""
    return [p for p in out.rglob("*") if p.is_file() and not p.name.startswith(".")]


# 60 s of throttle at p=2: a barrier waits behind the records queued before it (10.7 s seen in CI),
# so with 15 s (3,000) the job could end before two checkpoints and the kill; the throttle is lifted
# after the kill, so a longer input costs no time
COUNT = 12_000


def _insert_killed_once(cluster: Any, tmp_path: Path, ddl: str, insert: str) -> Any:
    """Runs ``insert`` from a throttled stream ``numbers`` (column i: 0..COUNT-1, p=2, checkpoints
    every 200 ms) into the table ``ddl`` creates; after two checkpoints kills a worker running it
    with SIGKILL, lifts the throttle once the job restarted, and returns the ended job's summary."""
    slow, pids = tmp_path / "slow", tmp_path / "pids"
    slow.touch()
    pids.mkdir()
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(200)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 100))
    numbers = (env.from_source(NumberSequenceSource(0, COUNT - 1), WatermarkStrategy.no_watermarks(), "numbers")
               .map(Throttle(str(slow), 0.01)).map(NotePid(str(pids))).map(lambda i: i, output_type=Types.LONG()))
    t_env = StreamTableEnvironment.create(env)
    t_env.create_temporary_view("numbers", t_env.from_data_stream(numbers).alias("i"))
    t_env.execute_sql(ddl)
    job_id = t_env.execute_sql(insert).get_job_client().get_job_id().to_bytes()
    with ClusterClient(cluster.address) as client:
        poll_for(lambda: client.status(job_id).checkpoints.num_completed >= 2, 120, what="two completed checkpoints")
        victim = poll_for(lambda: sorted(pids.glob("pid-*")), 30, what="a worker's pid")[0]
        os.kill(int(victim.read_text()), signal.SIGKILL)
        poll_for(lambda: client.status(job_id).num_restarts >= 1 or ended(client, job_id), 120, interval=0.1,
                 what="the restart")
        slow.unlink()
        return poll_for(lambda: ended(client, job_id), 240, interval=0.2, what="the job to end")


def test_a_streaming_insert_into_a_partitioned_csv_table_is_exactly_once_across_a_kill_9(
        cluster: Any, tmp_path: Path) -> None:
    out, count = tmp_path / "out", COUNT
    summary = _insert_killed_once(cluster, tmp_path, f"""
        CREATE TABLE out_t (i BIGINT, label STRING, p INT) PARTITIONED BY (p) WITH (
          'connector' = 'filesystem', 'path' = '{out}', 'format' = 'csv',
          'sink.rolling-policy.rollover-interval' = '1 s', 'sink.rolling-policy.check-interval' = '1 s')""",
        "INSERT INTO out_t SELECT i, CONCAT('n', CAST(i AS STRING)), CAST(i % 3 AS INT) FROM numbers")
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
    assert summary.num_restarts == 1 and summary.checkpoints.latest_restored_id >= 2, summary
    files = part_files(out)
    # Flink's layout: one directory per partition value, the partition column in the path only
    assert sorted({f.parent.name for f in files}) == ["p=0", "p=1", "p=2"]
    rows = [(line, f.parent.name) for f in files for line in f.read_text().splitlines()]
    lines = Counter(rows)
    duplicated = [r for r, n in lines.items() if n > 1]
    assert not duplicated, f"{len(duplicated)} rows written twice, e.g. {duplicated[:5]}"
    assert sorted(lines) == sorted((f"{i},n{i}", f"p={i % 3}") for i in range(count))


def test_a_batch_insert_writes_json_that_a_json_table_reads_back(
        cluster: Any, tmp_path: Path) -> None:
    out = tmp_path / "json"
    t_env = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
    t_env.get_config().set("parallelism.default", "1")
    rows = [(i, f"w{i % 4}", i * 0.5) for i in range(200)]
    t_env.create_temporary_view("src", t_env.from_elements(rows, ["id", "word", "x"]))
    t_env.execute_sql(f"""
        CREATE TABLE out_t (id BIGINT, word STRING, x DOUBLE) WITH (
          'connector' = 'filesystem', 'path' = '{out}', 'format' = 'json')""")
    t_env.execute_sql("INSERT INTO out_t SELECT id, word, x FROM src").wait(300_000)
    files = part_files(out)
    docs = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    assert sorted(docs, key=lambda d: d["id"]) == [{"id": i, "word": w, "x": x} for i, w, x in rows]

    read = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
    read.get_config().set("parallelism.default", "1")
    read.execute_sql(f"CREATE TABLE back (id BIGINT, word STRING, x DOUBLE) WITH ("
                     f"'connector' = 'filesystem', 'path' = '{out}', 'format' = 'json')")
    got = [tuple(r) for r in read.execute_sql("SELECT word, COUNT(*), SUM(id) FROM back GROUP BY word").collect()]
    assert sorted(got) == sorted((f"w{k}", 50, sum(i for i in range(200) if i % 4 == k)) for k in range(4))


def test_partition_commit_after_a_kill_9_is_still_exactly_once_and_commits_every_partition(
        cluster: Any, tmp_path: Path) -> None:
    """The success-file partition commit across a failover: the restored writers commit the
    restored checkpoint's files and still owe their partitions' commits, so after the end every
    partition holds each row once and its ``_SUCCESS``."""
    out, count = tmp_path / "out", COUNT
    summary = _insert_killed_once(cluster, tmp_path, f"""
        CREATE TABLE out_t (i BIGINT, p INT) PARTITIONED BY (p) WITH (
          'connector' = 'filesystem', 'path' = '{out}', 'format' = 'csv',
          'sink.partition-commit.policy.kind' = 'success-file', 'sink.partition-commit.trigger' = 'process-time',
          'sink.partition-commit.delay' = '1 h')""", "INSERT INTO out_t SELECT i, CAST(i % 3 AS INT) FROM numbers")
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
    assert summary.num_restarts == 1 and summary.checkpoints.latest_restored_id >= 2, summary
    # a delay of an hour: every partition is done only by the end of the input
    assert sorted(p.parent.name for p in out.rglob("_SUCCESS")) == ["p=0", "p=1", "p=2"]
    rows = Counter((line, f.parent.name) for f in part_files(out) if f.name != "_SUCCESS"
                   for line in f.read_text().splitlines())
    assert [r for r, n in rows.items() if n > 1] == []
    assert sorted(rows) == sorted((str(i), f"p={i % 3}") for i in range(count))
