"""Checkpoints and failover on a real cluster (real processes, gRPC, Spark, files), as Flink's
promise states it: after a failure the job resumes from its last completed checkpoint, and its
FileSink output holds every input exactly once.

The job counts records per key (a keyed running count: keyed state) and writes every update as
"key,count" to a FileSink, so the exact expected output is known: for every key k the lines
"k,1" ... "k,n_k", each exactly once. A lost record leaves a count missing, a replayed one without
restored state or an uncommitted duplicate shows as a repeated line.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.client.minicluster import MiniCluster
from millstream.common import Configuration, Encoder, Time, WatermarkStrategy
from millstream.common.watermark_strategy import TimestampAssigner
from millstream.common.restart_strategy import RestartStrategies
from millstream.datastream import CheckpointingMode, MapFunction, StreamExecutionEnvironment
from millstream.datastream.connectors.datagen import DataGeneratorSource
from millstream.datastream.connectors.file_system import FileSink
from millstream.datastream.window import TumblingEventTimeWindows
from millstream.runtime.execution_state import JobStatus

from .harness import ancestors, ClusterSpec, fast_config, jobmanager_env, poll_for, ProcessCluster
from .jobs import assert_exactly_once, ended, fail_after_checkpoints, FailWhenMarked, KEYS, NotePid, visible_lines

pytestmark = pytest.mark.timeout(400)
CLUSTER = ClusterSpec(slots=4, tasks_per_slot=3, checkpoints=True)




def counting_job(env: StreamExecutionEnvironment, out: Path, count: int, rate: float, *functions: MapFunction) -> None:
    stream = env.from_source(DataGeneratorSource(lambda i: i, count, records_per_second=rate),
                             WatermarkStrategy.no_watermarks(), "numbers")
    for function in functions:
        stream = stream.map(function)
    (stream.map(lambda i: (i % KEYS, 1))
        .key_by(lambda t: t[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .map(lambda t: f"{t[0]},{t[1]}")
        .sink_to(FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build()))


def test_a_failing_function_restarts_from_the_last_checkpoint_and_the_file_sink_holds_every_record_once(cluster, checkpoint_dir, tmp_path) -> None:
    mc, checkpoints = cluster, checkpoint_dir
    out, marker = tmp_path / "out", tmp_path / "fail"
    count = 6000
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(200)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 100))
    counting_job(env, out, count, 1500, FailWhenMarked(str(marker)))
    summary = fail_after_checkpoints(mc.address, env, "fails after checkpoints", marker)
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
    assert not marker.exists() and summary.num_restarts == 1
    c = summary.checkpoints
    assert c.num_completed >= 2 and c.last_completed_id >= 2 and c.last_size_bytes > 0
    assert c.latest_restored_id >= 2, c  # resumed from a checkpoint, not from the start
    assert_exactly_once(out, count)
    assert not (checkpoints / summary.job_id.hex()).exists()  # a finished job's checkpoints are deleted


def test_a_missing_checkpoint_fails_the_job_loudly_instead_of_restarting_empty(cluster, checkpoint_dir, tmp_path) -> None:
    mc, checkpoints = cluster, checkpoint_dir
    out, marker = tmp_path / "out", tmp_path / "fail"
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.enable_checkpointing(200)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 100))
    counting_job(env, out, 100_000, 1000, FailWhenMarked(str(marker), once=False))
    with ClusterClient(mc.address) as client:
        job_id = client.submit(env.get_job_graph("loses its checkpoints").proto)
        poll_for(lambda: client.status(job_id).checkpoints.num_completed >= 1, 60, what="a completed checkpoint")
        job_dir = checkpoints / job_id.hex()
        stop = threading.Event()

        def keep_deleting() -> None:  # every checkpoint from now on loses its files
            while not stop.is_set():
                shutil.rmtree(job_dir, ignore_errors=True)
                time.sleep(0.02)

        deleter = threading.Thread(target=keep_deleting, daemon=True)
        deleter.start()
        try:
            time.sleep(0.1)
            marker.touch()
            poll_for(lambda: client.status(job_id).num_restarts >= 1, 60, what="a restart")
            marker.unlink()  # the restarted attempts would run fine: only their state is gone
            summary = poll_for(lambda: ended(client, job_id), 120, interval=0.2, what="the job to end")
        finally:
            stop.set()
            deleter.join()
    assert JobStatus.from_proto(summary.status) is JobStatus.FAILED
    assert "is missing" in summary.failure.message, summary.failure.message


def test_status_shows_the_checkpoint_figures(cluster, tmp_path) -> None:
    mc = cluster
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.enable_checkpointing(100)
    counting_job(env, tmp_path / "out", 100_000, 2000)
    with ClusterClient(mc.address) as client:
        job_id = client.submit(env.get_job_graph("shows checkpoints").proto)
        poll_for(lambda: client.status(job_id).checkpoints.num_completed >= 2, 60, what="two completed checkpoints")
        cli = [sys.executable, "-m", "millstream.client.cli", "status", "--jobmanager", mc.address, job_id.hex()]
        text = subprocess.run(cli, capture_output=True, text=True, timeout=60).stdout
        doc = json.loads(subprocess.run([*cli, "--json"], capture_output=True, text=True, timeout=60).stdout)
        client.cancel(job_id)
        poll_for(lambda: ended(client, job_id), 60, what="the job to end")
    assert "Checkpoints:" in text and "completed" in text and "last:" in text, text
    assert doc["checkpoints"]["num_completed"] >= 2 and doc["checkpoints"]["last_completed"]["id"] >= 2, doc


def test_a_task_with_two_inputs_aligns_barriers_and_the_output_stays_exactly_once(cluster, tmp_path) -> None:
    """Two sources at different rates feed one keyed count (4 input channels per subtask): a
    restart from a checkpoint taken with aligned barriers neither loses nor repeats a record."""
    mc = cluster
    out, marker = tmp_path / "out", tmp_path / "fail"
    fast, slow = 6000, 1500
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(200)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 100))
    one = env.from_source(DataGeneratorSource(lambda i: i, fast, records_per_second=2000), WatermarkStrategy.no_watermarks(), "fast")
    two = env.from_source(DataGeneratorSource(lambda i: fast + i, slow, records_per_second=500), WatermarkStrategy.no_watermarks(), "slow")
    (one.union(two).map(FailWhenMarked(str(marker), at=50))
        .map(lambda i: (i % KEYS, 1)).key_by(lambda t: t[0]).reduce(lambda a, b: (a[0], a[1] + b[1]))
        .map(lambda t: f"{t[0]},{t[1]}")
        .sink_to(FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build()))
    summary = fail_after_checkpoints(mc.address, env, "two inputs", marker)
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
    assert summary.num_restarts == 1 and summary.checkpoints.latest_restored_id >= 2
    assert_exactly_once(out, fast + slow)


def test_checkpoints_go_on_after_a_bounded_source_finished(cluster, tmp_path) -> None:
    """A finished task is left out of later checkpoints (and recorded as finished), so a job whose
    short source ended keeps completing checkpoints, and a restart after it does not replay it."""
    mc = cluster
    out, marker = tmp_path / "out", tmp_path / "fail"
    short, long = 200, 3000
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.enable_checkpointing(150)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 100))
    one = env.from_source(DataGeneratorSource(lambda i: i, short), WatermarkStrategy.no_watermarks(), "short")
    two = env.from_source(DataGeneratorSource(lambda i: short + i, long, records_per_second=600),
                          WatermarkStrategy.no_watermarks(), "long")
    (one.union(two).map(FailWhenMarked(str(marker), at=10))
        .map(lambda i: (i % KEYS, 1)).key_by(lambda t: t[0]).reduce(lambda a, b: (a[0], a[1] + b[1]))
        .map(lambda t: f"{t[0]},{t[1]}")
        .sink_to(FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build()))

    def short_finished(client: ClusterClient, job_id: bytes) -> bool:
        return any(v.name.endswith("short") and v.tasks_per_state.get("FINISHED") == 1 for v in client.status(job_id).vertices)

    with ClusterClient(mc.address) as client:
        job_id = client.submit(env.get_job_graph("a short source").proto)
        poll_for(lambda: short_finished(client, job_id), 60, what="the short source to finish")
        after = client.status(job_id).checkpoints.num_completed
        poll_for(lambda: client.status(job_id).checkpoints.num_completed >= after + 2, 60, what="checkpoints after it")
        marker.touch()
        summary = poll_for(lambda: ended(client, job_id), 120, interval=0.2, what="the job to end")
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
    assert summary.num_restarts == 1 and summary.checkpoints.latest_restored_id > after
    assert_exactly_once(out, short + long)


def test_at_least_once_mode_loses_nothing(cluster, tmp_path) -> None:
    mc = cluster
    out, marker = tmp_path / "out", tmp_path / "fail"
    count = 4000
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(200, CheckpointingMode.AT_LEAST_ONCE)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 100))
    counting_job(env, out, count, 1500, FailWhenMarked(str(marker)))
    summary = fail_after_checkpoints(mc.address, env, "at least once", marker)
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
    lines = set(visible_lines(out))
    assert {f"{k},{len(range(k, count, KEYS))}" for k in range(KEYS)} <= lines  # every key's final count


def test_stop_with_savepoint_then_resume_from_it_continues_exactly_once(cluster, tmp_path) -> None:
    """`millstream stop --savepoint-path`, then the same program submitted with the savepoint
    (`execution.savepoint.path`, what `millstream run -s` sets): keyed counts go on where they
    stopped and the FileSink output of both runs together holds every record once."""
    mc = cluster
    out, savepoints = tmp_path / "out", tmp_path / "savepoints"
    count = 8000

    def job(configuration: Configuration | None = None) -> StreamExecutionEnvironment:
        env = StreamExecutionEnvironment.get_execution_environment(configuration)
        env.set_parallelism(2)
        env.enable_checkpointing(300)
        counting_job(env, out, count, 2000)
        return env

    cli = [sys.executable, "-m", "millstream.client.cli"]
    with ClusterClient(mc.address) as client:
        first = client.submit(job().get_job_graph("before the savepoint").proto)
        poll_for(lambda: client.status(first).checkpoints.num_completed >= 1, 60, what="a completed checkpoint")
        stopped = subprocess.run([*cli, "stop", "--jobmanager", mc.address, first.hex(), "--savepoint-path", str(savepoints)],
                                 capture_output=True, text=True, timeout=120)
        assert stopped.returncode == 0, stopped.stderr
        path = stopped.stdout.split("Path: ", 1)[1].split()[0]
        assert Path(path).parent == savepoints and (Path(path) / "_metadata").is_file()
        assert JobStatus.from_proto(client.status(first).status) is JobStatus.FINISHED
        assert len(visible_lines(out)) < count  # it really stopped midway

        conf = Configuration()
        conf.set_string("execution.savepoint.path", path)
        second = client.submit(job(conf).get_job_graph("from the savepoint").proto)
        summary = poll_for(lambda: ended(client, second), 120, interval=0.2, what="the resumed job to end")
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
    assert summary.checkpoints.latest_restored_path == path
    assert_exactly_once(out, count)
    assert (Path(path) / "_metadata").is_file()  # a savepoint outlives its job


def bounded_keyed_job(out: Path, count: int, checkpoint_ms: int | None) -> StreamExecutionEnvironment:
    """``count`` lines "k,n" (a keyed running count per key) into a FileSink, at parallelism 2."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    if checkpoint_ms is not None:
        env.enable_checkpointing(checkpoint_ms)
    counting_job(env, out, count, 50_000)
    return env


@pytest.mark.parametrize("checkpoint_ms", [700, None], ids=["checkpointing", "no checkpointing"])
def test_a_bounded_job_is_finished_only_once_all_its_file_sink_output_is_committed(
        spark, tmp_path, checkpoint_ms) -> None:
    """FLIP-147: the tasks of a bounded job wait for the final checkpoint's completion, their
    FileSink commits on it, and only then are the tasks, and the job, FINISHED; without
    checkpointing the FileSink commits at the end of the input, before its task finishes. Seen
    from the client, both ways: when ``execute()`` returns, and the first time the status says
    FINISHED, every line is committed (three TaskManagers, two subtasks, as reported)."""
    count = 200_000
    config = fast_config(**{"execution.checkpointing.dir": str(tmp_path / "checkpoints")})
    mc = MiniCluster(config, num_slots=2, spark=spark).start(task_managers=3)
    try:
        executed = tmp_path / "executed"
        with jobmanager_env(mc.address):
            bounded_keyed_job(executed, count, checkpoint_ms).execute("bounded, execute()")
        lines = visible_lines(executed)  # at once: execute() returned
        assert len(lines) == count and hidden_files(executed) == []
        assert_exactly_once(executed, count)

        polled = tmp_path / "polled"
        with ClusterClient(mc.address) as client:
            job_id = client.submit(bounded_keyed_job(polled, count, checkpoint_ms).get_job_graph("bounded, polled").proto)
            summary = poll_for(lambda: ended(client, job_id), 120, interval=0.01, what="the job to end")
            lines = visible_lines(polled)  # at once: the first status that said FINISHED
        assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
        assert len(lines) == count and hidden_files(polled) == []
        assert_exactly_once(polled, count)
    finally:
        mc.close()


def hidden_files(out: Path) -> list[str]:
    """In-progress or pending part files: output not committed (yet)."""
    return sorted(path.name for path in out.rglob(".*") if path.is_file())


def test_stop_commits_what_was_written_before_it_its_tasks_finish_and_a_resume_elsewhere_writes_only_new_rows(
        cluster, tmp_path) -> None:
    """Flink's stop-with-savepoint: the sources emit nothing after the savepoint's barrier, the
    sinks commit when it completes, then every task ends FINISHED and so does the job; `stop`
    answers after that. No periodic checkpoint completes before the stop (a 10 min interval), so
    whatever is visible afterwards was committed by the stop's own savepoint. Resumed into another
    directory, the job writes only the rows after the savepoint there and nothing into the first."""
    mc = cluster
    first_out, second_out, savepoints = tmp_path / "out-1", tmp_path / "out-2", tmp_path / "savepoints"
    count = 40_000  # ~20 s at 2,000 records/s: it is stopped midway

    def job(out: Path, configuration: Configuration | None = None, interval_ms: int = 600_000) -> StreamExecutionEnvironment:
        env = StreamExecutionEnvironment.get_execution_environment(configuration)
        env.set_parallelism(2)
        env.enable_checkpointing(interval_ms)
        counting_job(env, out, count, 2000)
        return env

    cli = [sys.executable, "-m", "millstream.client.cli"]
    with ClusterClient(mc.address) as client:
        first = client.submit(job(first_out).get_job_graph("stopped").proto)
        poll_for(lambda: (lambda s: s.tasks_per_state.get("RUNNING") == s.num_tasks
                          and any(v.records_out >= 2000 for v in s.vertices))(client.status(first)),
                 90, what="every task running, records flowing")
        assert visible_lines(first_out) == []  # nothing committed yet: no checkpoint completed
        stopped = subprocess.run([*cli, "stop", "--jobmanager", mc.address, first.hex(), "-p", str(savepoints)],
                                 capture_output=True, text=True, timeout=120)
        assert stopped.returncode == 0, stopped.stderr
        path = stopped.stdout.split("Path: ", 1)[1].split()[0]
        # By the time stop answers: the job and every task FINISHED, every row written committed.
        summary = client.status(first)
        assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED
        assert {v.name: dict(v.tasks_per_state) for v in summary.vertices} == {
            v.name: {"FINISHED": v.parallelism} for v in summary.vertices}
        assert hidden_files(first_out) == []
        before = visible_lines(first_out)
        assert 0 < len(before) < count
        highest = {k: max(int(line.split(",")[1]) for line in before if line.startswith(f"{k},")) for k in range(KEYS)}
        assert sorted(before) == sorted(f"{k},{j}" for k in range(KEYS) for j in range(1, highest[k] + 1))
        first_files = sorted(p.name for p in first_out.rglob("*"))

        conf = Configuration()
        conf.set_string("execution.savepoint.path", path)
        # (checkpoints here: its end waits for a final checkpoint, the next periodic one)
        second = client.submit(job(second_out, conf, 300).get_job_graph("resumed elsewhere").proto)
        resumed = poll_for(lambda: ended(client, second), 180, interval=0.2, what="the resumed job to end")
    assert JobStatus.from_proto(resumed.status) is JobStatus.FINISHED, resumed.failure.message
    assert sorted(p.name for p in first_out.rglob("*")) == first_files  # nothing more committed there
    after = visible_lines(second_out)
    assert not set(after) & set(before)
    assert sorted(before + after) == sorted(f"{k},{j}" for k in range(KEYS) for j in range(1, len(range(k, count, KEYS)) + 1))


class NumberIsMillis(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):  # noqa: ANN001, ANN201
        return value


def test_stop_drain_from_the_cli_fires_every_window_and_commits_it(cluster, tmp_path) -> None:
    """`millstream stop --drain` (Flink's `stop -d`): MAX_WATERMARK and the end of input come before
    the savepoint, so hour-long event-time windows that would never fire otherwise fire, and their
    output is committed when `stop` returns; every record read is counted once."""
    mc = cluster
    out = tmp_path / "out"
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.enable_checkpointing(600_000)
    (env.from_source(DataGeneratorSource(lambda i: i, 10**7, records_per_second=2000),
                     WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(NumberIsMillis()), "numbers")
        .map(lambda i: (i % KEYS, 1)).key_by(lambda t: t[0])
        .window(TumblingEventTimeWindows.of(Time.hours(1)))
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .map(lambda t: f"{t[0]},{t[1]}")
        .sink_to(FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build()))
    with ClusterClient(mc.address) as client:
        job_id = client.submit(env.get_job_graph("drained").proto)
        poll_for(lambda: (lambda s: s.tasks_per_state.get("RUNNING") == s.num_tasks
                          and any(v.records_out >= 2000 for v in s.vertices))(client.status(job_id)),
                 90, what="every task running, records flowing")
        stopped = subprocess.run([sys.executable, "-m", "millstream.client.cli", "stop", "--jobmanager", mc.address,
                                  job_id.hex(), "--drain", "-p", str(tmp_path / "sp")], capture_output=True, text=True,
                                 timeout=120)
        assert stopped.returncode == 0, stopped.stderr
        summary = client.status(job_id)
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED
    assert dict(summary.tasks_per_state) == {"FINISHED": summary.num_tasks}
    assert hidden_files(out) == []
    counts = {int(k): int(n) for k, n in (line.split(",") for line in visible_lines(out))}
    read = next(v.records_out for v in summary.vertices if "numbers" in v.name)
    assert sorted(counts) == list(range(KEYS)) and sum(counts.values()) == read > 0


def test_a_savepoint_with_state_of_an_unknown_operator_is_refused_unless_allowed(cluster, tmp_path) -> None:
    mc = cluster
    out = tmp_path / "out"
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.enable_checkpointing(300)
    counting_job(env, out, 100_000, 1000)
    with ClusterClient(mc.address) as client:
        job_id = client.submit(env.get_job_graph("savepoint").proto)
        poll_for(lambda: client.status(job_id).checkpoints.num_completed >= 1, 60, what="a completed checkpoint")
        path = client.savepoint(job_id, str(tmp_path / "savepoints"), stop=True)

        def other(allow: bool) -> bytes:  # another program: a different operator holds the state
            conf = Configuration()
            conf.set_string("execution.savepoint.path", path)
            if allow:
                conf.set_string("execution.savepoint.ignore-unclaimed-state", "true")
            e = StreamExecutionEnvironment.get_execution_environment(conf)
            e.set_parallelism(1)
            e.enable_checkpointing(300)
            e.from_sequence(1, 10).filter(lambda x: x > 0).sink_to(FileSink.for_row_format(str(tmp_path / "other")).build())
            return client.submit(e.get_job_graph("other").proto)

        refused_id = other(False)
        refused = poll_for(lambda: ended(client, refused_id), 60, what="the refused job to end")
        allowed_id = other(True)
        allowed = poll_for(lambda: ended(client, allowed_id), 60, what="the allowed job to end")
    assert JobStatus.from_proto(refused.status) is JobStatus.FAILED
    assert "allow-non-restored-state" in refused.failure.message, refused.failure.message
    assert JobStatus.from_proto(allowed.status) is JobStatus.FINISHED, allowed.failure.message


def test_resuming_a_savepoint_at_parallelism_2_then_4_then_2_keeps_the_keyed_state(cluster, tmp_path) -> None:
    """Keyed state moves with its key groups, and the source's splits (with their positions) and
    the FileSink's pending files with their writer (round-robin), so the counts go on exactly
    across three runs at parallelism 2, 4 and 2."""
    mc = cluster
    out, savepoints = tmp_path / "out", tmp_path / "savepoints"
    count = 9000

    def job(parallelism: int, savepoint: str | None) -> Any:
        conf = Configuration()
        if savepoint:
            conf.set_string("execution.savepoint.path", savepoint)
        env = StreamExecutionEnvironment.get_execution_environment(conf)
        env.set_parallelism(parallelism)
        env.enable_checkpointing(300)
        counting_job(env, out, count, 1500)
        return env.get_job_graph(f"at parallelism {parallelism}").proto

    savepoint = None
    with ClusterClient(mc.address) as client:
        for parallelism, lines_before in ((2, 0), (4, None)):
            job_id = client.submit(job(parallelism, savepoint))
            done = len(visible_lines(out))
            poll_for(lambda: client.status(job_id).checkpoints.num_completed >= 1 and len(visible_lines(out)) > done,
                     60, what="a completed checkpoint with output")
            savepoint = client.savepoint(job_id, str(savepoints), stop=True)
            poll_for(lambda: ended(client, job_id), 60, what="the stopped job to end")
        assert len(visible_lines(out)) < count
        last = client.submit(job(2, savepoint))
        summary = poll_for(lambda: ended(client, last), 120, interval=0.2, what="the last run to end")
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
    assert_exactly_once(out, count)


# -- kill -9 of a TaskManager -----------------------------------------------------------------


def test_kill_9_of_a_task_manager_after_two_checkpoints_resumes_on_the_others_exactly_once(tmp_path) -> None:
    with ProcessCluster(tmp_path, tasks_per_slot=3, taskmanagers=3,
                        jobmanager_options={"execution.checkpointing.dir": str(tmp_path / "checkpoints")}) as cluster:
        tms = cluster.taskmanagers
        out, pids = tmp_path / "out", tmp_path / "pids"
        pids.mkdir()
        count = 16_000
        with ClusterClient(cluster.address) as client:
            env = StreamExecutionEnvironment.get_execution_environment()
            env.set_parallelism(2)
            env.enable_checkpointing(300)
            env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 200))
            counting_job(env, out, count, 2000, NotePid(str(pids)))
            job_id = client.submit(env.get_job_graph("survives kill -9").proto)
            poll_for(lambda: client.status(job_id).checkpoints.num_completed >= 2, 120, what="two completed checkpoints")
            pid = int((pids / "pid-0-0").read_text())
            victims = [tm for tm in tms if tm.pid in ancestors(pid)]
            assert len(victims) == 1, (pid, [tm.pid for tm in tms])
            victims[0].kill()
            victims[0].wait(10)
            summary = poll_for(lambda: ended(client, job_id), 240, interval=0.5, what="the job to end")
        assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
        assert summary.num_restarts >= 1 and summary.checkpoints.latest_restored_id >= 2, summary.checkpoints
        assert_exactly_once(out, count)


def test_streaming_file_sink_with_add_sink_is_exactly_once_across_a_restart(cluster, tmp_path) -> None:
    """PyFlink's deprecated StreamingFileSink, given to add_sink, commits as FileSink does."""
    from millstream.datastream.connectors.file_system import StreamingFileSink

    mc = cluster
    out, marker = tmp_path / "out", tmp_path / "fail"
    count = 4000
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(200)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 100))
    (env.from_source(DataGeneratorSource(lambda i: i, count, records_per_second=1200), WatermarkStrategy.no_watermarks(), "numbers")
        .map(FailWhenMarked(str(marker)))
        .map(lambda i: (i % KEYS, 1))
        .key_by(lambda t: t[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .map(lambda t: f"{t[0]},{t[1]}")
        .add_sink(StreamingFileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build()))
    summary = fail_after_checkpoints(mc.address, env, "streaming file sink", marker)
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
    assert summary.num_restarts == 1 and summary.checkpoints.latest_restored_id >= 2
    assert_exactly_once(out, count)


# Flink 2's CheckpointProperties per ExternalizedCheckpointRetention: every mode deletes a finished
# job's checkpoints; NO_EXTERNALIZED_CHECKPOINTS (the default) deletes them however the job ends;
# DELETE_ON_CANCELLATION keeps a failed job's only; RETAIN_ON_CANCELLATION keeps a failed or
# cancelled job's (to resume from).
@pytest.mark.parametrize("retention, end, kept", [
    (None, "cancel", False),
    (None, "fail", False),
    ("DELETE_ON_CANCELLATION", "cancel", False),
    ("DELETE_ON_CANCELLATION", "fail", True),
    ("RETAIN_ON_CANCELLATION", "cancel", True),
    ("RETAIN_ON_CANCELLATION", "finish", False),
])
def test_an_ended_jobs_checkpoints_follow_its_externalized_checkpoint_retention(
        cluster, checkpoint_dir, tmp_path, retention, end, kept) -> None:
    from millstream.datastream import ExternalizedCheckpointRetention

    mc, checkpoints = cluster, checkpoint_dir
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.enable_checkpointing(100)
    env.set_restart_strategy(RestartStrategies.no_restart())
    if retention is not None:
        env.get_checkpoint_config().set_externalized_checkpoint_retention(ExternalizedCheckpointRetention[retention])
    marker = tmp_path / "fail"
    count, rate = (3000, 1000) if end == "finish" else (100_000, 2000)
    counting_job(env, tmp_path / "out", count, rate, FailWhenMarked(str(marker)))
    with ClusterClient(mc.address) as client:
        job_id = client.submit(env.get_job_graph(f"{end}, {retention or 'default retention'}").proto)
        poll_for(lambda: client.status(job_id).checkpoints.num_completed >= 2, 60, what="two completed checkpoints")
        if end == "cancel":
            client.cancel(job_id)
        elif end == "fail":
            marker.touch()
        summary = poll_for(lambda: ended(client, job_id), 120, interval=0.2, what="the job to end")
    expected = {"cancel": JobStatus.CANCELED, "fail": JobStatus.FAILED, "finish": JobStatus.FINISHED}[end]
    assert JobStatus.from_proto(summary.status) is expected, summary.failure.message
    job_dir = checkpoints / job_id.hex()
    if kept:
        time.sleep(1.0)  # a deletion would start as the job ends: give it the time to show
        assert sorted(p.name for p in job_dir.glob("chk-*/_metadata")), list(job_dir.iterdir())
    else:
        poll_for(lambda: not job_dir.exists(), 30, what=f"the {expected.name} job's checkpoints to be deleted")


def test_a_job_asking_for_unaligned_checkpoints_gets_one_warning_and_aligned_exactly_once_checkpoints(
        cluster, tmp_path, caplog) -> None:
    # Millstream's barriers always align: the JobManager says so once, when it accepts the job
    mc = cluster
    ids = []
    for unaligned in (True, False):
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(2)
        env.enable_checkpointing(100)
        if unaligned:
            env.get_checkpoint_config().enable_unaligned_checkpoints()
        out = tmp_path / f"out-{unaligned}"
        counting_job(env, out, 3000, 1000)
        with caplog.at_level("WARNING", logger="millstream.jobmanager.dispatcher.dispatcher"):
            with ClusterClient(mc.address) as client:
                job_id = client.submit(env.get_job_graph(f"unaligned={unaligned}").proto)
                summary = poll_for(lambda: ended(client, job_id), 120, interval=0.2, what="the job to end")
        assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
        assert summary.checkpoints.num_completed >= 2
        assert_exactly_once(out, 3000)
        ids.append(job_id.hex())
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "unaligned" in r.getMessage()]
    assert len([w for w in warnings if ids[0] in w]) == 1, warnings
    assert not [w for w in warnings if ids[1] in w], warnings
    (text,) = [w for w in warnings if ids[0] in w]
    assert "execution.checkpointing.unaligned.enabled" in text and "stay aligned" in text
