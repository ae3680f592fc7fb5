"""Restart strategies on a real cluster (real gRPC, real Spark, real processes), as Flink restarts
without checkpoints: the failed pipelined region (the whole job when its subtasks connect) starts
over (sources from their start, empty state) as new attempts, until it finishes or the strategy
gives up.

Each map subtask writes what it sees to a file named by its subtask and attempt number, so the test
checks exactly what the last attempt produced: every input once."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.client.execution import JobExecutionException
from millstream.common.restart_strategy import RestartStrategies
from millstream.datastream import MapFunction, SourceFunction, StreamExecutionEnvironment
from millstream.runtime.execution_state import JobStatus

from .harness import ancestors, ClusterSpec, jobmanager_env, poll_for, ProcessCluster

pytestmark = pytest.mark.timeout(300)
CLUSTER = ClusterSpec(tasks_per_slot=2)


class FailOnce(MapFunction):
    """Raises on ``at`` while the marker file does not exist (the first attempt), creating it."""

    def __init__(self, marker: str, at: int) -> None:
        self.marker, self.at = marker, at

    def map(self, value):
        if value == self.at and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            raise RuntimeError(f"injected failure at {value}")
        return value


class AlwaysFails(MapFunction):
    def map(self, value):
        if value == 5:
            raise ValueError("always broken at 5")
        return value


class WritePerAttempt(MapFunction):
    """Appends every record to ``<dir>/out-<subtask>-<attempt>`` and notes its pid in ``pid-...``."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def open(self, runtime_context) -> None:
        name = f"{runtime_context.get_index_of_this_subtask()}-{runtime_context.get_attempt_number()}"
        with open(os.path.join(self.directory, f"pid-{name}"), "w") as f:
            f.write(str(os.getpid()))
        self.out = open(os.path.join(self.directory, f"out-{name}"), "a", buffering=1)

    def map(self, value):
        self.out.write(f"{value}\n")
        return value

    def close(self) -> None:
        self.out.close()


def _outputs(directory: Path) -> dict[int, list[int]]:
    """Records written per attempt number."""
    by_attempt: dict[int, list[int]] = {}
    for path in directory.glob("out-*"):
        attempt = int(path.name.rsplit("-", 1)[1])
        by_attempt.setdefault(attempt, []).extend(int(line) for line in path.read_text().split())
    return by_attempt


def _last_attempts(directory: Path) -> dict[int, tuple[int, list[int]]]:
    """Per subtask: its last attempt number and the records that attempt wrote."""
    last: dict[int, tuple[int, list[int]]] = {}
    for path in directory.glob("out-*"):
        subtask, attempt = (int(x) for x in path.name.split("-")[1:])
        if attempt >= last.get(subtask, (-1, []))[0]:
            last[subtask] = (attempt, [int(line) for line in path.read_text().split()])
    return last


def test_a_failing_task_restarts_its_pipelined_region_with_fixed_delay_and_the_job_finishes_exactly(cluster, tmp_path) -> None:
    """Two independent pipelines (forward edges only): the failed one restarts from its start, the
    other runs on untouched (Flink's region failover)."""
    out = tmp_path / "out"
    out.mkdir()
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 300))
    env.from_sequence(1, 2000).map(FailOnce(str(tmp_path / "failed-once"), 700)).map(WritePerAttempt(str(out))).add_sink(lambda x: None)
    with jobmanager_env(cluster.address):
        result = env.execute("fails once")
    assert (tmp_path / "failed-once").exists()
    last = _last_attempts(out)
    assert sorted(attempt for attempt, _ in last.values()) == [0, 1]  # one region restarted once
    assert sorted(r for _, records in last.values() for r in records) == list(range(1, 2001))
    with ClusterClient(cluster.address) as client:
        summary = client.status(bytes.fromhex(result.get_job_id()))
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED and summary.num_restarts == 1


def test_a_failure_in_a_connected_job_restarts_every_task_with_exact_output(cluster, tmp_path) -> None:
    """A rebalance connects every subtask: one region, the whole job restarts from the beginning."""
    out = tmp_path / "out"
    out.mkdir()
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 300))
    (env.from_sequence(1, 2000).map(FailOnce(str(tmp_path / "failed-once"), 700)).rebalance()
        .map(WritePerAttempt(str(out))).add_sink(lambda x: None))
    with jobmanager_env(cluster.address):
        result = env.execute("fails once, connected")
    outputs = _outputs(out)
    # Every writer subtask ran a second attempt (the first may have been cancelled before it opened).
    assert max(outputs) == 1 and all(attempt == 1 for attempt, _ in _last_attempts(out).values())
    assert sorted(outputs[1]) == list(range(1, 2001))  # the restart started over: every record once
    with ClusterClient(cluster.address) as client:
        summary = client.status(bytes.fromhex(result.get_job_id()))
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED and summary.num_restarts == 1


def test_fixed_delay_gives_up_after_its_attempts_with_the_cause_and_the_restart_count(cluster, tmp_path) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 100))
    env.from_sequence(1, 10).map(AlwaysFails()).map(WritePerAttempt(str(tmp_path))).add_sink(lambda x: None)
    with jobmanager_env(cluster.address), pytest.raises(JobExecutionException) as info:
        env.execute("always fails")
    message = str(info.value)
    assert "always broken at 5" in message and "restarts: 2" in message, message
    assert info.value.summary is not None and info.value.summary.num_restarts == 2
    assert sorted(_outputs(tmp_path)) == [0, 1, 2]  # three attempts ran


def test_execute_and_collect_of_a_job_that_restarts_raises_instead_of_repeating_records(cluster, tmp_path) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 100))
    stream = env.from_sequence(1, 2000).map(FailOnce(str(tmp_path / "failed-once"), 1500))
    seen: list[int] = []
    with jobmanager_env(cluster.address), pytest.raises(JobExecutionException) as info:
        with stream.execute_and_collect("collect and restart") as results:
            seen.extend(results)
    assert "restarted" in str(info.value) and "injected failure at 1500" in str(info.value), str(info.value)
    assert len(seen) == len(set(seen)) and set(seen) <= set(range(1, 1500))  # nothing twice, nothing after the failure
    with ClusterClient(cluster.address) as client:
        job = next(j for j in client.list_jobs() if j.job_name == "collect and restart")
        poll_for(lambda: JobStatus.from_proto(client.status(job.job_id).status) is JobStatus.CANCELED, 60,
                 what="closing the results to cancel the restarted job")


# -- kill -9 of a TaskManager: the job restarts on the other one -------------------------------

class SlowSource(SourceFunction):
    def __init__(self, count: int, pause_s: float) -> None:
        self.count, self.pause_s, self.running = count, pause_s, True

    def run(self, ctx) -> None:
        for i in range(self.count):
            if not self.running:
                return
            ctx.collect(i)
            time.sleep(self.pause_s)

    def cancel(self) -> None:
        self.running = False


def test_kill_9_of_a_task_manager_restarts_the_job_on_the_other_and_it_finishes(tmp_path) -> None:
    with ProcessCluster(tmp_path, taskmanagers=2) as cluster:
        tms = cluster.taskmanagers
        out = tmp_path / "out"
        out.mkdir()
        with ClusterClient(cluster.address) as client:
            env = StreamExecutionEnvironment.get_execution_environment()
            env.set_parallelism(2)
            env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 200))
            count = 600
            env.add_source(SlowSource(count, 0.01)).set_parallelism(1).rebalance().map(WritePerAttempt(str(out))).add_sink(lambda x: None)
            job_id = client.submit(env.get_job_graph("survives a TaskManager").proto)
            poll_for(lambda: len(_outputs(out).get(0, [])) >= 50, 120, what="the first attempt to produce")
            pid = int((out / "pid-0-0").read_text())
            victims = [tm for tm in tms if tm.pid in ancestors(pid)]
            assert len(victims) == 1, (pid, [tm.pid for tm in tms])
            victims[0].kill()
            victims[0].wait(10)
            def ended():
                s = client.status(job_id)
                return s if JobStatus.from_proto(s.status).is_terminal() else None

            summary = poll_for(ended, 180, interval=0.5, what="the job to end")
            assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
            assert summary.num_restarts >= 1
            outputs = _outputs(out)
            last = max(outputs)
            assert sorted(outputs[last]) == list(range(count))  # the last attempt: every record once
            survivor = next(tm for tm in tms if tm is not victims[0])
            assert survivor.pid in ancestors(int((out / f"pid-0-{last}").read_text()))  # ran on the survivor
