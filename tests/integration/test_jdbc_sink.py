"""Flink's JdbcSink on a real cluster writing to a real PostgreSQL server (tests/integration/postgres.py,
one server and one embedded cluster for the module), as Flink documents it:

- ``JdbcSink.sink`` (at-least-once): a bounded job writes every row, its fields bound by the row
  type; batches are executed when ``batch_size`` records are buffered and every
  ``batch_interval_ms``; an idempotent upsert survives a task failure with the right final rows.
- ``JdbcSink.exactly_once_sink``: rows become visible only when a checkpoint completes; after a
  task failure and a ``kill -9`` of the sink's worker every row is in the table exactly once and no
  prepared transaction is left; a server with ``max_prepared_transactions = 0`` fails the job's start
  saying so.
- Restore, one exactly-once subtask driven by hand against the server: the restored checkpoint's
  prepared transactions are committed (already committed is fine), later ones rolled back; a stale
  attempt's is rolled back at the next commit, another job's left alone; no checkpointing: an error.
- Bad input: an unreachable database fails the job's start naming host:port within the connect
  timeout; an SQL error fails the job naming the statement; a cut connection is retried.

Each test writes its own table. A table's ``tx`` column defaults to ``txid_current()``: the
transaction that wrote the row, so the tests see how rows were batched into transactions.
"""
from __future__ import annotations

import datetime
import os
import signal
import socket
import time
from typing import Any

import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.common import Row, Types, WatermarkStrategy
from millstream.common.restart_strategy import RestartStrategies
from millstream.datastream import StreamExecutionEnvironment
from millstream.datastream.connectors.datagen import DataGeneratorSource
from millstream.datastream.connectors.jdbc import (
    JdbcConnectionOptions,
    JdbcExactlyOnceOptions,
    JdbcExecutionOptions,
    JdbcSink,
)
from millstream.datastream.connectors.number_seq import NumberSequenceSource
from millstream.runtime.execution_state import JobStatus
from millstream.runtime.ha.zookeeper_server import free_port

from .harness import ClusterSpec, poll_for
from .jobs import KEYS, FailWhenMarked, NotePid, Throttle, ended
from .postgres import PASSWORD, USER, PostgresServer, postgres, postgres_unavailable  # noqa: F401 (fixture)

pytestmark = pytest.mark.timeout(300)
CLUSTER = ClusterSpec(checkpoints=True)  # one TaskManager, two slots


def connection(url: str) -> JdbcConnectionOptions:
    return (JdbcConnectionOptions.JdbcConnectionOptionsBuilder().with_url(url)
            .with_driver_name("org.postgresql.Driver").with_user_name(USER).with_password(PASSWORD).build())


def execution(batch_size: int = 5000, interval_ms: int = 0, max_retries: int = 3) -> JdbcExecutionOptions:
    return (JdbcExecutionOptions.builder().with_batch_size(batch_size).with_batch_interval_ms(interval_ms)
            .with_max_retries(max_retries).build())


def run(cluster: Any, env: StreamExecutionEnvironment, name: str, timeout: float = 120) -> Any:
    """Submits the job and returns its summary once it ended."""
    with ClusterClient(cluster.address) as client:
        job_id = client.submit(env.get_job_graph(name).proto)
        return poll_for(lambda: ended(client, job_id), timeout, interval=0.1, what=f"job {name!r} to end")


def status(summary: Any) -> JobStatus:
    return JobStatus.from_proto(summary.status)


def batch_sizes(postgres: PostgresServer, table: str) -> list[int]:
    return sorted(n for (n,) in postgres.query(f"SELECT count(*) FROM {table} GROUP BY tx"))




# -- at-least-once ----------------------------------------------------------------------------------


ALL_TYPES = Types.ROW_NAMED(["id", "big", "name", "score", "ok", "at"],
                            [Types.INT(), Types.LONG(), Types.STRING(), Types.DOUBLE(), Types.BOOLEAN(), Types.SQL_TIMESTAMP()])


def test_a_bounded_job_writes_every_row_with_its_fields_bound_by_the_row_type(cluster, postgres) -> None:
    postgres.query("CREATE TABLE people (id int PRIMARY KEY, big bigint, name text, score double precision, "
                   "ok boolean, at timestamp)")
    start = datetime.datetime(2026, 1, 1, 12, 0, 0)
    rows = [Row(i, i * 10**10, f"name '{i}' ?", i / 4, i % 2 == 0, start + datetime.timedelta(seconds=i))
            for i in range(500)]
    rows.append(Row(500, None, None, None, None, None))  # NULLs
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.from_collection(rows, type_info=ALL_TYPES).rebalance().add_sink(JdbcSink.sink(
        "INSERT INTO people (id, big, name, score, ok, at) VALUES (?, ?, ?, ?, ?, ?)",
        ALL_TYPES, connection(postgres.jdbc_url), execution(batch_size=64)))
    summary = run(cluster, env, "jdbc bounded")
    assert status(summary) is JobStatus.FINISHED, summary.failure.message
    written = postgres.query("SELECT id, big, name, score, ok, at FROM people ORDER BY id")
    assert written == [tuple(r) for r in rows]


def test_batches_are_executed_when_batch_size_records_are_buffered(cluster, postgres) -> None:
    postgres.query("CREATE TABLE sized (v int, tx bigint DEFAULT txid_current())")
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.from_collection([(i,) for i in range(12)], type_info=Types.ROW([Types.INT()])).add_sink(JdbcSink.sink(
        "INSERT INTO sized (v) VALUES (?)", Types.ROW([Types.INT()]), connection(postgres.jdbc_url),
        execution(batch_size=5)))
    summary = run(cluster, env, "jdbc batch size")
    assert status(summary) is JobStatus.FINISHED, summary.failure.message
    assert batch_sizes(postgres, "sized") == [2, 5, 5]  # two full batches, the rest at the end of input
    assert [v for (v,) in postgres.query("SELECT v FROM sized ORDER BY v")] == list(range(12))


def test_batches_are_executed_every_batch_interval_while_the_job_runs(cluster, postgres) -> None:
    postgres.query("CREATE TABLE timed (v int, tx bigint DEFAULT txid_current())")
    count = 40
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    (env.from_source(DataGeneratorSource(lambda i: (i,), count, records_per_second=10),
                     WatermarkStrategy.no_watermarks(), "slow numbers")
        .map(lambda t: t, output_type=Types.ROW([Types.INT()]))
        .add_sink(JdbcSink.sink("INSERT INTO timed (v) VALUES (?)", Types.ROW([Types.INT()]),
                                connection(postgres.jdbc_url), execution(batch_size=1000, interval_ms=300))))
    with ClusterClient(cluster.address) as client:
        job_id = client.submit(env.get_job_graph("jdbc batch interval").proto)
        # rows arrive while the job runs (4 s), far below the batch size: the interval executes them
        seen = poll_for(lambda: postgres.query("SELECT count(*) FROM timed")[0][0], 60, interval=0.05,
                        what="rows before the end of the job")
        running = status(client.status(job_id)) is JobStatus.RUNNING
        summary = poll_for(lambda: ended(client, job_id), 120, interval=0.1, what="the job to end")
    assert status(summary) is JobStatus.FINISHED, summary.failure.message
    assert running and 0 < seen < count
    sizes = batch_sizes(postgres, "timed")
    assert sum(sizes) == count and len(sizes) >= 5, sizes  # ~3 records per 300 ms, not one batch at the end
    assert max(sizes) < count // 2, sizes


def test_an_upsert_sink_survives_a_task_failure_with_the_right_final_rows(cluster, postgres, tmp_path) -> None:
    postgres.query("CREATE TABLE counts (k int PRIMARY KEY, c bigint NOT NULL)")
    slow, fail = tmp_path / "slow", tmp_path / "fail"
    slow.touch()
    count = 6000
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(200)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 100))
    row = Types.ROW([Types.INT(), Types.LONG()])
    (env.from_source(NumberSequenceSource(0, count - 1), WatermarkStrategy.no_watermarks(), "numbers")
        .map(Throttle(str(slow), 0.01))  # 30 s while slow: the job cannot end before the failure
        .map(FailWhenMarked(str(fail)))
        .map(lambda i: (i % KEYS, 1))
        .key_by(lambda t: t[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .map(lambda t: Row(t[0], t[1]), output_type=row)
        .add_sink(JdbcSink.sink("INSERT INTO counts (k, c) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET c = EXCLUDED.c",
                                row, connection(postgres.jdbc_url), execution(batch_size=50, interval_ms=100))))
    with ClusterClient(cluster.address) as client:
        job_id = client.submit(env.get_job_graph("jdbc upsert failover").proto)
        poll_for(lambda: client.status(job_id).checkpoints.num_completed >= 2, 120, what="two completed checkpoints")
        fail.touch()
        poll_for(lambda: client.status(job_id).num_restarts >= 1, 120, interval=0.1, what="the restart")
        slow.unlink()
        summary = poll_for(lambda: ended(client, job_id), 120, interval=0.2, what="the job to end")
    assert status(summary) is JobStatus.FINISHED, summary.failure.message
    assert summary.num_restarts == 1 and summary.checkpoints.latest_restored_id >= 2
    expected = {k: len(range(k, count, KEYS)) for k in range(KEYS)}
    assert dict(postgres.query("SELECT k, c FROM counts")) == expected


def test_a_lost_connection_is_retried_on_a_new_one_without_failing_the_job(cluster, postgres) -> None:
    postgres.query("CREATE TABLE retried (v int PRIMARY KEY)")
    count = 60
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.set_restart_strategy(RestartStrategies.no_restart())  # only the sink's own retry can save the job
    (env.from_source(DataGeneratorSource(lambda i: (i,), count, records_per_second=20),
                     WatermarkStrategy.no_watermarks(), "slow numbers")
        .map(lambda t: t, output_type=Types.ROW([Types.INT()]))
        .add_sink(JdbcSink.sink("INSERT INTO retried (v) VALUES (?) ON CONFLICT (v) DO NOTHING", Types.ROW([Types.INT()]),
                                connection(postgres.jdbc_url + "?ApplicationName=jdbc-retry"),
                                execution(batch_size=1, max_retries=2))))
    terminate = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'jdbc-retry'"
    with ClusterClient(cluster.address) as client:
        job_id = client.submit(env.get_job_graph("jdbc lost connection").proto)
        poll_for(lambda: postgres.query("SELECT count(*) FROM retried")[0][0] >= 10, 60, what="the first rows")
        killed = postgres.query(terminate)
        before = postgres.query("SELECT count(*) FROM retried")[0][0]
        summary = poll_for(lambda: ended(client, job_id), 120, interval=0.1, what="the job to end")
    assert killed == [(True,)]  # the sink's one connection was cut while the job ran
    assert before < count
    assert status(summary) is JobStatus.FINISHED, summary.failure.message
    assert summary.num_restarts == 0
    assert [v for (v,) in postgres.query("SELECT v FROM retried ORDER BY v")] == list(range(count))


# -- exactly-once -------------------------------------------------------------------------------------


def exactly_once(table: str, postgres: PostgresServer, batch_size: int = 1,
                 options: JdbcExactlyOnceOptions | None = None) -> JdbcSink:
    return JdbcSink.exactly_once_sink(
        f"INSERT INTO {table} (v) VALUES (?)", Types.ROW([Types.LONG()]), execution(batch_size, max_retries=0),
        options or JdbcExactlyOnceOptions.defaults(), connection(postgres.jdbc_url))


def test_exactly_once_rows_become_visible_only_when_a_checkpoint_completes(cluster, postgres) -> None:
    postgres.query("CREATE TABLE eo_visible (v bigint, tx bigint DEFAULT txid_current())")
    count = 60
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.enable_checkpointing(1500)
    # the first checkpoint comes after a random delay of at least the min pause: records are written first
    env.get_checkpoint_config().set_min_pause_between_checkpoints(1500)
    env.set_restart_strategy(RestartStrategies.no_restart())
    (env.from_source(DataGeneratorSource(lambda i: i, count, records_per_second=20), WatermarkStrategy.no_watermarks(), "slow")
        .map(lambda i: (i,), output_type=Types.ROW([Types.LONG()]))
        .add_sink(exactly_once("eo_visible", postgres)))
    samples = []  # (checkpoints completed before, visible rows, checkpoints completed after, writing)
    with ClusterClient(cluster.address) as client:
        job_id = client.submit(env.get_job_graph("jdbc exactly-once visibility").proto)
        deadline = time.monotonic() + 120
        while ended(client, job_id) is None and time.monotonic() < deadline:
            before = client.status(job_id).checkpoints.num_completed
            visible = postgres.query("SELECT count(*) FROM eo_visible")[0][0]
            writing = postgres.query("SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction'")[0][0]
            samples.append((before, visible, client.status(job_id).checkpoints.num_completed, writing))
            time.sleep(0.05)
        summary = poll_for(lambda: ended(client, job_id), 10, what="the job to end")
    assert status(summary) is JobStatus.FINISHED, summary.failure.message
    # records were written into the open transaction before any checkpoint completed, and invisible
    assert any(after == 0 and writing for _, _, after, writing in samples), samples[:20]
    assert all(visible == 0 for _, visible, after, _ in samples if after == 0), samples[:40]
    # then they appeared as checkpoints completed, before the end
    assert any(0 < visible < count for _, visible, _, _ in samples), samples
    assert sorted(v for (v,) in postgres.query("SELECT v FROM eo_visible")) == list(range(count))
    # one transaction per checkpoint, not one per record (batch size 1)
    assert len(batch_sizes(postgres, "eo_visible")) <= summary.checkpoints.num_completed
    assert postgres.prepared() == []


def test_exactly_once_after_a_task_failure_and_a_kill_9_every_row_once_and_no_prepared_transaction_left(
        cluster, postgres, tmp_path) -> None:
    postgres.query("CREATE TABLE eo_failover (v bigint)")  # no key: a duplicate would stay
    slow, fail, pids = tmp_path / "slow", tmp_path / "fail", tmp_path / "pids"
    slow.touch()
    pids.mkdir()
    count = 18_000
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(200)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(4, 100))
    (env.from_source(NumberSequenceSource(0, count - 1), WatermarkStrategy.no_watermarks(), "numbers")
        # 90 s while slow, so the job cannot end before the kill (30 s could, in CI); a longer pause
        # per record would not do: a checkpoint's barrier waits behind a batch of slow records
        .map(Throttle(str(slow), 0.01))
        .map(FailWhenMarked(str(fail)))
        .map(NotePid(str(pids)))
        .map(lambda i: (i,), output_type=Types.ROW([Types.LONG()]))
        .add_sink(exactly_once("eo_failover", postgres, batch_size=100)))
    with ClusterClient(cluster.address) as client:
        job_id = client.submit(env.get_job_graph("jdbc exactly-once failover").proto)
        poll_for(lambda: client.status(job_id).checkpoints.num_completed >= 2, 120, what="two completed checkpoints")
        fail.touch()
        poll_for(lambda: client.status(job_id).num_restarts >= 1, 120, interval=0.1, what="the restart")
        # the restarted attempt commits a checkpoint, then its worker is killed without a goodbye
        restored = client.status(job_id).checkpoints.num_completed
        poll_for(lambda: client.status(job_id).checkpoints.num_completed >= restored + 2, 120, what="checkpoints after the restart")
        restarted = lambda: [p for p in pids.glob("pid-*") if int(p.name.rsplit("-", 1)[1]) > 0]  # noqa: E731
        victim = poll_for(restarted, 30, what=f"the restarted worker's pid (have {sorted(os.listdir(pids))})")[0]
        os.kill(int(victim.read_text()), signal.SIGKILL)
        poll_for(lambda: client.status(job_id).num_restarts >= 2 or ended(client, job_id), 120, interval=0.1,
                 what="the second restart")
        assert client.status(job_id).num_restarts == 2, client.status(job_id)
        slow.unlink()
        summary = poll_for(lambda: ended(client, job_id), 180, interval=0.2, what="the job to end")
    assert status(summary) is JobStatus.FINISHED, summary.failure.message
    assert summary.num_restarts == 2 and summary.checkpoints.latest_restored_id >= 2
    values = [v for (v,) in postgres.query("SELECT v FROM eo_failover ORDER BY v")]
    duplicated = sorted({v for v in values if values.count(v) > 1}) if len(values) != len(set(values)) else []
    assert not duplicated, f"{len(duplicated)} duplicated rows, e.g. {duplicated[:5]}"
    assert values == list(range(count)), f"{count - len(values)} rows missing"
    assert postgres.prepared() == []


def test_exactly_once_on_a_server_without_prepared_transactions_fails_the_job_start_saying_so(cluster) -> None:
    server = PostgresServer(max_prepared_transactions=0).start()
    try:
        server.query("CREATE TABLE eo_none (v bigint)")
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(1)
        env.enable_checkpointing(500)
        env.set_restart_strategy(RestartStrategies.no_restart())
        (env.from_collection([(1,), (2,)], type_info=Types.ROW([Types.LONG()]))
            .add_sink(exactly_once("eo_none", server)))
        summary = run(cluster, env, "jdbc exactly-once without 2PC")
    finally:
        server.kill()
    assert status(summary) is JobStatus.FAILED
    message = summary.failure.message
    assert f"PostgreSQL at 127.0.0.1:{server.port} has max_prepared_transactions = 0" in message, message
    assert "max_prepared_transactions > 0" in message, message


# -- bad input ----------------------------------------------------------------------------------------


def failing_job(url: str, sql: str = "INSERT INTO nowhere (v) VALUES (?)") -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.set_restart_strategy(RestartStrategies.no_restart())
    (env.from_collection([(1,), (2,)], type_info=Types.ROW([Types.INT()]))
        .add_sink(JdbcSink.sink(sql, Types.ROW([Types.INT()]), connection(url), execution(max_retries=1))))
    return env


def test_a_refused_connection_fails_the_job_start_naming_host_and_port(cluster) -> None:
    port = free_port()  # nothing listens there
    started = time.monotonic()
    summary = run(cluster, failing_job(f"jdbc:postgresql://127.0.0.1:{port}/db"), "jdbc refused")
    assert status(summary) is JobStatus.FAILED
    message = summary.failure.message
    assert f"cannot connect to PostgreSQL at 127.0.0.1:{port}" in message and "opening its connection" in message, message
    assert time.monotonic() - started < 60


def test_a_server_that_never_answers_fails_the_job_start_within_the_connect_timeout(cluster) -> None:
    silent = socket.socket()  # accepts connections (the kernel's backlog) and never says a word
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    port = silent.getsockname()[1]
    try:
        started = time.monotonic()
        summary = run(cluster, failing_job(f"jdbc:postgresql://127.0.0.1:{port}/db?connectTimeout=2"), "jdbc silent")
        elapsed = time.monotonic() - started
    finally:
        silent.close()
    assert status(summary) is JobStatus.FAILED
    message = summary.failure.message
    assert f"cannot connect to PostgreSQL at 127.0.0.1:{port}" in message and "timeout" in message.lower(), message
    assert elapsed < 60


def test_an_sql_error_fails_the_job_naming_the_statement_without_retrying_it(cluster, postgres) -> None:
    sql = "INSERT INTO no_such_table (v) VALUES (?)"
    started = time.monotonic()
    summary = run(cluster, failing_job(postgres.jdbc_url, sql), "jdbc sql error")
    assert status(summary) is JobStatus.FAILED
    message = summary.failure.message
    assert repr(sql) in message and 'relation "no_such_table" does not exist' in message, message
    assert f"PostgreSQL at 127.0.0.1:{postgres.port}" in message and "retries" not in message, message
    assert time.monotonic() - started < 60


# -- the exactly-once writer's restore, one subtask driven by hand (no cluster) -------------------------


def sink_subtask(table: str, postgres: PostgresServer, state: Any = None, job_id: str = "ab" * 16,
                 checkpointing: bool = True, options: JdbcExactlyOnceOptions | None = None) -> Any:
    """A fresh exactly-once sink subtask (a new attempt) of one job graph, restored from ``state``."""
    from millstream.runtime.operators.jdbc_sink import JdbcSinkOperator
    from tests.unit.test_runtime_chain import make_chain, vertex

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.from_sequence(1, 2).map(lambda i: (i,), output_type=Types.ROW([Types.LONG()])).add_sink(
        exactly_once(table, postgres, batch_size=2, options=options))
    run = make_chain(vertex(env, "Sequence"), 0, checkpointing_enabled=checkpointing, job_id=job_id)
    sink = run.chain.operators[-1]
    assert isinstance(sink, JdbcSinkOperator)
    if state is not None:
        sink.initialize_state(state)
    run.chain.open()
    return sink


def rows(postgres: PostgresServer, table: str) -> list[int]:
    return [v for (v,) in postgres.query(f"SELECT v FROM {table} ORDER BY v")]


def test_a_restore_commits_the_restored_transactions_and_rolls_back_those_prepared_after(postgres) -> None:
    postgres.query("CREATE TABLE eo_restore (v bigint)")
    failed = sink_subtask("eo_restore", postgres)
    failed.process_batch([(1,), (2,), (3,)])
    state = failed.snapshot_state(1)  # checkpoint 1 completes, its notification never arrives
    failed.process_batch([(4,)])
    failed.snapshot_state(2)  # checkpoint 2 never completes
    failed.process_batch([(5,), (6,)])  # executed in the open transaction of checkpoint 3
    assert rows(postgres, "eo_restore") == [] and len(postgres.prepared()) == 2
    failed.close()  # the attempt dies: its open transaction ends with its connection
    restored = sink_subtask("eo_restore", postgres, state)
    assert rows(postgres, "eo_restore") == [1, 2, 3]  # checkpoint 1's records, once
    assert postgres.prepared() == []  # checkpoint 2's transaction: rolled back (the sources replay 4)
    restored.process_batch([(4,), (5,)])
    restored.snapshot_state(2)
    restored.notify_checkpoint_complete(2)
    assert rows(postgres, "eo_restore") == [1, 2, 3, 4, 5]
    restored.close()


def test_a_restored_transaction_committed_before_the_failure_is_not_an_error(postgres) -> None:
    postgres.query("CREATE TABLE eo_recommit (v bigint)")
    failed = sink_subtask("eo_recommit", postgres)
    failed.process_batch([(1,), (2,)])
    state = failed.snapshot_state(1)
    failed.notify_checkpoint_complete(1)
    failed.close()
    sink_subtask("eo_recommit", postgres, state).close()
    assert rows(postgres, "eo_recommit") == [1, 2] and postgres.prepared() == []


def test_a_stale_attempts_transaction_is_rolled_back_at_the_next_commit_and_other_jobs_are_left_alone(postgres) -> None:
    postgres.query("CREATE TABLE eo_stale (v bigint)")
    stale = sink_subtask("eo_stale", postgres)
    stale.process_batch([(1,), (2,)])
    state = stale.snapshot_state(1)
    stale.notify_checkpoint_complete(1)
    other_job = sink_subtask("eo_stale", postgres, job_id="cd" * 16)
    other_job.process_batch([(100,), (101,)])
    other_job.snapshot_state(1)  # another job's prepared transaction: not this sink's to touch
    new = sink_subtask("eo_stale", postgres, state)  # the restart; the old attempt is still running
    stale.process_batch([(3,), (4,)])
    stale.snapshot_state(2)  # prepared after the new attempt's restore
    assert len(postgres.prepared()) == 2
    new.process_batch([(3,), (4,)])
    new.snapshot_state(2)
    new.notify_checkpoint_complete(2)
    assert rows(postgres, "eo_stale") == [1, 2, 3, 4]
    [left] = postgres.prepared()
    assert left.startswith("millstream-") and left != stale._pending.get(2)
    other_job.notify_checkpoint_complete(1)
    assert rows(postgres, "eo_stale") == [1, 2, 3, 4, 100, 101] and postgres.prepared() == []
    for sink in (stale, new, other_job):
        sink.close()


def test_exactly_once_without_checkpointing_fails_at_open_saying_so(postgres) -> None:
    from millstream.runtime.operators.base import OperatorError

    with pytest.raises(OperatorError, match=r"commits on completed checkpoints: enable checkpointing"):
        sink_subtask("eo_restore", postgres, checkpointing=False)


def test_a_transaction_timeout_on_a_server_without_one_fails_at_open_naming_the_version(postgres) -> None:
    from millstream.runtime.operators.base import OperatorError

    if postgres.query("SHOW server_version_num")[0][0] >= "170000":
        pytest.skip("PostgreSQL 17 has transaction_timeout")
    with pytest.raises(OperatorError, match=r"has no transaction timeout \(transaction_timeout needs PostgreSQL 17\)"):
        sink_subtask("eo_restore", postgres, options=JdbcExactlyOnceOptions.builder().with_timeout_sec(5).build())
