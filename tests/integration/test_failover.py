"""Failover on a real cluster (a JobManager and TaskManagers as real processes, real gRPC, real
Spark, files), as Flink promises it: whatever fails, task or TaskManager, and however often, the
job resumes from its last completed checkpoint and its exactly-once FileSink holds every input
exactly once; a TaskManager that was paused past the heartbeat timeout and comes back is fenced:
its stale attempts are cancelled and commit nothing; a restart strategy that gives up fails the
job with the last cause, the strategy and the restart count.

The job is test_checkpoints' keyed running count ("key,count" lines, ground truth known). While a
``slow`` marker file exists a Throttle slows its sources, so the job cannot finish before the test
injected everything; the test removes the marker and the job runs to its end at full speed.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.common import Duration, Encoder, Time, WatermarkStrategy
from millstream.common.restart_strategy import RestartStrategies
from millstream.common.watermark_strategy import TimestampAssigner
from millstream.datastream import MapFunction, ProcessWindowFunction, StreamExecutionEnvironment
from millstream.datastream.connectors.datagen import DataGeneratorSource
from millstream.datastream.connectors.file_system import FileSink
from millstream.datastream.window import TumblingEventTimeWindows
from millstream.runtime.execution_state import JobStatus

from .harness import all_slots_free, ancestors, poll_for, ProcessCluster
from .jobs import KEYS, FailWhenMarked, Throttle, assert_exactly_once, ended, failover_job, visible_lines

pytestmark = pytest.mark.timeout(400)


class Witness(MapFunction):
    """Notes its worker's pid in ``<directory>/open-<tag>-<subtask>-<attempt>`` when it opens and
    writes ``closed-...`` when it closes (the task ended: finished, failed or cancelled)."""

    def __init__(self, directory: str, tag: str) -> None:
        self.directory, self.tag = directory, tag

    def _path(self, event: str) -> Path:
        return Path(self.directory, f"{event}-{self.tag}-{self.index}-{self.attempt}")

    def open(self, runtime_context) -> None:
        self.index = runtime_context.get_index_of_this_subtask()
        self.attempt = runtime_context.get_attempt_number()
        self._path("open").write_text(str(os.getpid()))

    def map(self, value):
        return value

    def close(self) -> None:
        self._path("closed").write_text(str(os.getpid()))


# -- the cluster: one JobManager for the module, TaskManagers started as the tests need them ----

@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[ProcessCluster]:
    """One JobManager for the module; TaskManagers (2 slots each) started as the tests need them."""
    directory = tmp_path_factory.mktemp("failover-cluster")
    with ProcessCluster(directory, tasks_per_slot=3,
                        jobmanager_options={"execution.checkpointing.dir": str(directory / "checkpoints")}) as c:
        yield c


def host_of(pid: int, taskmanagers: list[Any]) -> Any:
    hosts = [tm for tm in taskmanagers if tm.pid in ancestors(pid)]
    assert len(hosts) == 1, (pid, [tm.pid for tm in taskmanagers])
    return hosts[0]


def checkpointed_since_last_restore(client: ClusterClient, job_id: bytes, restarts: int) -> bool:
    """The job runs its attempt number ``restarts`` and completed a checkpoint in it."""
    summary = client.status(job_id)
    c = summary.checkpoints
    return (JobStatus.from_proto(summary.status) is JobStatus.RUNNING and summary.num_restarts == restarts
            and c.last_completed_id > max(c.latest_restored_id, 0))


def restarted(client: ClusterClient, job_id: bytes, restarts: int) -> Any:
    summary = client.status(job_id)
    return summary if summary.num_restarts >= restarts else None


# -- five failures in one run ----------------------------------------------------------------

FAILURES = ["exception", "kill", "exception", "kill", "exception"]


def test_five_failures_in_one_run_task_exceptions_and_kill_9_of_task_managers_leave_the_output_exactly_once(cluster, tmp_path) -> None:
    out, marks = tmp_path / "out", tmp_path / "marks"
    marks.mkdir()
    slow = tmp_path / "slow"
    slow.touch()
    markers = [tmp_path / f"fail-{i}" for i, kind in enumerate(FAILURES) if kind == "exception"]
    count = 120_000
    with ClusterClient(cluster.address) as client:
        taskmanagers = cluster.ensure_taskmanagers(3)  # 3 x 2 slots: the job (2 slots) survives two kills
        started = time.monotonic()
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(2)
        env.enable_checkpointing(300)
        env.set_restart_strategy(RestartStrategies.fixed_delay_restart(10, 200))
        failover_job(env, out, count, [Throttle(str(slow), 0.0005), Witness(str(marks), "source"),
                                       *(FailWhenMarked(str(m)) for m in markers)], [])
        job_id = client.submit(env.get_job_graph("five failures").proto)
        exceptions = iter(markers)
        restored: list[int] = []
        for restarts, kind in enumerate(FAILURES):
            poll_for(lambda: checkpointed_since_last_restore(client, job_id, restarts), 120, interval=0.1,
                     what=f"a checkpoint completed in attempt {restarts}")
            if kind == "exception":
                next(exceptions).touch()
            else:
                victim = host_of(int((marks / f"open-source-0-{restarts}").read_text()), taskmanagers)
                victim.kill()
                victim.wait(10)
                taskmanagers.remove(victim)
            summary = poll_for(lambda: restarted(client, job_id, restarts + 1), 120, interval=0.1,
                               what=f"restart {restarts + 1} after a {kind}")
            restored.append(summary.checkpoints.latest_restored_id)
        failures_done = time.monotonic()
        slow.unlink()  # everything injected: the job may run to its end
        summary = poll_for(lambda: ended(client, job_id), 240, interval=0.5, what="the job to end")
    print(f"five failures injected in {failures_done - started:.1f} s, job ended {time.monotonic() - failures_done:.1f} s later")
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
    assert summary.num_restarts == len(FAILURES), summary.num_restarts  # one restart per failure, no more
    assert not any(m.exists() for m in markers)  # every injected exception was raised
    # every restart resumed from a checkpoint completed after the previous restart's
    assert restored[0] >= 1 and all(b > a for a, b in zip(restored, restored[1:])), restored
    assert_exactly_once(out, count)


# -- a paused TaskManager comes back -----------------------------------------------------------

def _descendants(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != pid and pid in ancestors(int(entry)):
            found.append(int(entry))
    return found


def _state(pid: int) -> str:
    """The process's state letter (R, S, T stopped, Z zombie...); X when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "X"


def _open_files(pid: int) -> list[str]:
    fds = f"/proc/{pid}/fd"
    targets = []
    for fd in os.listdir(fds):
        try:
            targets.append(os.readlink(f"{fds}/{fd}"))
        except OSError:
            continue  # closed meanwhile
    return targets


def task_ended(marks: Path, tag: str, attempt: int) -> bool:
    """The task closed its functions, or its worker is gone (Spark kills a worker that does not
    stop within spark.python.task.killTimeout of a cancel)."""
    if (marks / f"closed-{tag}-0-{attempt}").exists():
        return True
    return _state(int((marks / f"open-{tag}-0-{attempt}").read_text())) in ("X", "Z")


@pytest.mark.parametrize("paused", ["taskmanager", "machine"])
def test_a_task_manager_paused_past_the_heartbeat_timeout_comes_back_fenced_its_stale_attempts_cancelled_and_invisible(
        cluster, tmp_path, paused) -> None:
    """``taskmanager``: SIGSTOP of the TaskManager process only, so its Spark workers run on and the
    stale attempt goes on writing part files all through the pause; ``machine``: the TaskManager
    and every process under it (its JVM and workers), as a paused host or VM."""
    out, marks = tmp_path / "out", tmp_path / "marks"
    marks.mkdir()
    slow = tmp_path / "slow"
    slow.touch()
    count = 60_000
    with ClusterClient(cluster.address) as client:
        taskmanagers = cluster.ensure_taskmanagers(2)  # the job takes one slot: it fits on either
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(1)
        env.enable_checkpointing(300)
        env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 200))
        failover_job(env, out, count, [Throttle(str(slow), 0.001), Witness(str(marks), "source")],
                     [Witness(str(marks), "sink")])
        job_id = client.submit(env.get_job_graph(f"paused {paused}").proto)
        poll_for(lambda: client.status(job_id).checkpoints.num_completed >= 2, 120, what="two completed checkpoints")
        stale_pid = int((marks / "open-sink-0-0").read_text())
        victim = host_of(stale_pid, taskmanagers)
        paused_pids = [victim.pid] + (_descendants(victim.pid) if paused == "machine" else [])
        for pid in paused_pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            paused_at = time.monotonic()
            # The job restarts without it, from its last checkpoint, and checkpoints on the other TaskManager.
            poll_for(lambda: checkpointed_since_last_restore(client, job_id, 1), 120, interval=0.2,
                     what="the job to restart on the other TaskManager and complete a checkpoint")
            assert host_of(int((marks / "open-sink-0-1").read_text()), taskmanagers) is not victim
            assert not task_ended(marks, "sink", 0)  # the stale attempt still exists, paused or running
            if paused == "taskmanager":  # its worker was never paused: it runs on, unfenced, writing a part file
                assert _state(stale_pid) in ("R", "S"), _state(stale_pid)
                assert any(".inprogress." in target for target in _open_files(stale_pid)), _open_files(stale_pid)
            committed_before = {p.name for p in out.iterdir() if not p.name.startswith(".")}
        finally:
            for pid in paused_pids:
                os.kill(pid, signal.SIGCONT)
        resumed_at = time.monotonic()
        # The TaskManager finds its JobMaster's heartbeats timed out and cancels the job's stale tasks.
        poll_for(lambda: task_ended(marks, "sink", 0) and task_ended(marks, "source", 0), 60,
                 interval=0.1, what="the stale attempt's tasks to end after SIGCONT")
        stale_ended = time.monotonic()
        assert victim.poll() is None  # it survived, and it registers again
        summary = client.status(job_id)
        assert JobStatus.from_proto(summary.status) is JobStatus.RUNNING and summary.num_restarts == 1, summary
        slow.unlink()
        summary = poll_for(lambda: ended(client, job_id), 240, interval=0.5, what="the job to end")
        poll_for(lambda: client.overview().taskmanagers == 2 and all_slots_free(client), 60, interval=0.5,
                 what="both TaskManagers registered, every slot free")
    print(f"paused {resumed_at - paused_at:.1f} s; the stale tasks ended {stale_ended - resumed_at:.1f} s after SIGCONT")
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
    assert summary.num_restarts == 1, summary.num_restarts  # the stale attempt's end failed nothing
    assert not (marks / "open-sink-0-2").exists()
    assert_exactly_once(out, count)
    committed = {p.name for p in out.iterdir() if not p.name.startswith(".")}
    assert committed_before <= committed


# -- restart-strategy limits -----------------------------------------------------------------

class FailEveryAttempt(MapFunction):
    """Raises on the ``at``-th record of every attempt, naming the attempt."""

    def __init__(self, at: int) -> None:
        self.at = at

    def open(self, runtime_context) -> None:
        self.seen, self.attempt = 0, runtime_context.get_attempt_number()

    def map(self, value):
        self.seen += 1
        if self.seen == self.at:
            raise RuntimeError(f"broken in attempt {self.attempt}")
        return value


def test_fixed_delay_with_checkpoints_gives_up_after_its_attempts_failed_with_the_last_cause_the_strategy_and_the_count(cluster, tmp_path) -> None:
    slow = tmp_path / "slow"
    slow.touch()  # kept: each attempt runs about 1.5 s before it fails, time for checkpoints
    with ClusterClient(cluster.address) as client:
        cluster.ensure_taskmanagers(1)
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(1)
        env.enable_checkpointing(100)
        env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 100))
        failover_job(env, tmp_path / "out", 1_000_000, [Throttle(str(slow), 0.0005), FailEveryAttempt(3000)], [])
        job_id = client.submit(env.get_job_graph("keeps failing").proto)
        summary = poll_for(lambda: ended(client, job_id), 180, interval=0.2, what="the job to end")
    message = summary.failure.message
    assert JobStatus.from_proto(summary.status) is JobStatus.FAILED, message
    assert summary.num_restarts == 2
    assert "broken in attempt 2" in message and "attempt 0" not in message, message  # the last cause
    assert "fixed-delay (attempts 2, delay 100 ms)" in message and "restarts: 2" in message, message
    c = summary.checkpoints
    assert c.num_completed >= 1 and c.latest_restored_id >= 1, c  # the restarts resumed from checkpoints
    # Flink 2's default retention (NO_EXTERNALIZED_CHECKPOINTS) deletes a failed job's checkpoints too
    poll_for(lambda: not Path(c.directory).exists(), 30, what="the failed job's checkpoints to be deleted")


# -- a window job survives kill -9 -------------------------------------------------------------

WINDOW_MS, BOUND_MS = 500, 60


def window_event(i: int) -> tuple[int, int, int]:
    """(key, timestamp, value): timestamps 2 ms apart, each up to 49 ms early (within the bound)."""
    return i % KEYS, 2 * i - (i * 7919) % 50, i


class EventTimestamp(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[1]


class WindowLine(ProcessWindowFunction):
    def process(self, key, context, elements):
        for k, _, total, n in elements:
            yield f"{k},{context.window().start},{context.window().end},{total},{n}"


def test_kill_9_of_a_task_manager_under_an_event_time_window_job_leaves_exactly_the_windowed_sums(cluster, tmp_path) -> None:
    """Tumbling event-time windows summing per key, checkpointed, an exactly-once FileSink; the
    TaskManager of a source subtask is killed after two checkpoints. Panes, trigger timers and the
    sink's pending files come back from the checkpoint, the sources rewind, the watermark starts
    again from below everything (as in Flink, watermarks are not checkpointed; the input is within
    the bound, so nothing is late): every window's sum is written exactly once."""
    out, marks = tmp_path / "out", tmp_path / "marks"
    marks.mkdir()
    slow = tmp_path / "slow"
    slow.touch()
    count = 40_000
    with ClusterClient(cluster.address) as client:
        taskmanagers = cluster.ensure_taskmanagers(2)  # the job takes two slots: one TaskManager can host it
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(2)
        env.enable_checkpointing(300)
        env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 200))
        strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(BOUND_MS)).with_timestamp_assigner(
            EventTimestamp())
        events = env.from_source(DataGeneratorSource(window_event, count), strategy, "events")
        (events.map(Throttle(str(slow), 0.0005)).map(Witness(str(marks), "source"))
            .map(lambda e: (e[0], e[1], e[2], 1))
            .key_by(lambda e: e[0])
            .window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW_MS)))
            .reduce(lambda a, b: (a[0], max(a[1], b[1]), a[2] + b[2], a[3] + b[3]), WindowLine())
            .sink_to(FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build()))
        job_id = client.submit(env.get_job_graph("windows survive kill -9").proto)
        # mid-run: windows fired and were committed, more are in the panes
        committed_before_kill = poll_for(
            lambda: client.status(job_id).checkpoints.num_completed >= 2 and out.exists() and len(visible_lines(out)),
            120, interval=0.1, what="two completed checkpoints and committed windows")
        victim = host_of(int((marks / "open-source-0-0").read_text()), taskmanagers)
        victim.kill()
        victim.wait(10)
        poll_for(lambda: checkpointed_since_last_restore(client, job_id, 1), 120, interval=0.1,
                 what="the restarted job to complete a checkpoint")
        slow.unlink()
        summary = poll_for(lambda: ended(client, job_id), 240, interval=0.5, what="the job to end")
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
    assert summary.num_restarts == 1 and summary.checkpoints.latest_restored_id >= 2, summary
    panes: dict[tuple[int, int], list[int]] = {}
    for i in range(count):
        key, ts, value = window_event(i)
        start = ts - ts % WINDOW_MS  # timestamps are >= -49: floor alignment is Flink's for these
        panes.setdefault((key, start), []).append(value)
    expected = [f"{k},{s},{s + WINDOW_MS},{sum(vs)},{len(vs)}" for (k, s), vs in panes.items()]
    print(f"{committed_before_kill} of {len(expected)} windows committed before the kill")
    assert committed_before_kill < len(expected)  # the kill came mid-run
    lines = visible_lines(out)
    duplicated = sorted({line for line in lines if lines.count(line) > 1}) if len(lines) != len(set(lines)) else []
    assert not duplicated, f"{len(duplicated)} duplicated windows, e.g. {duplicated[:5]}"
    assert sorted(lines) == sorted(expected)
