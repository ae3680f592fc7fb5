"""Tasks in real Spark workers: capacity, thread hygiene in reused workers, and the root cause of failures."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from millstream.client.execution import JobExecutionException
from millstream.datastream import MapFunction, RuntimeContext, StreamExecutionEnvironment
from millstream.datastream.functions import ParallelSourceFunction
from millstream.runtime.execution_state import JobStatus
from millstream.proto import cluster_pb2 as cpb

from .harness import ClusterSpec, all_slots_free, job_status, jobmanager_env, poll_for

pytestmark = pytest.mark.timeout(180)

SLOTS, TASKS_PER_SLOT = 2, 2  # placement task: Spark runs at most 4 tasks at once
CLUSTER = ClusterSpec(slots=SLOTS, tasks_per_slot=TASKS_PER_SLOT)


def _worker_threads(_: object) -> tuple[int, list[str]]:
    return os.getpid(), sorted(t.name for t in threading.enumerate())


def test_a_finished_task_leaves_no_cancel_relay_thread_in_its_reused_worker(cluster, client) -> None:
    seen = []
    for i in range(4):
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(1)
        with jobmanager_env(cluster.address):
            seen += list(env.from_collection([i]).map(_worker_threads).execute_and_collect(f"threads {i}"))
        poll_for(lambda: all_slots_free(client), 30, what="slots to be freed")
    pids = [pid for pid, _ in seen]
    assert len(set(pids)) < len(pids), f"no Spark worker was reused ({pids}): the check below proves nothing"
    for pid, names in seen:
        # Exactly one relay: the running task's own. One per earlier task in this worker means they leak.
        assert names.count("millstream-cancel-relay") == 1, (pid, names)


def test_a_burst_of_tasks_beyond_sparks_capacity_is_refused_not_overcommitted(client) -> None:
    """Placement task: five tasks in one slot want five of Spark's four cores, and the fifth is
    refused. Placement slot: they share the slot's one Spark task, and the job runs."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.disable_operator_chaining()  # five tasks in one slot, deployed together: one burst of SubmitTask
    stream = env.from_sequence(1, 50_000)
    for _ in range(3):
        stream = stream.map(lambda x: x)
    stream.add_sink(lambda x: None)
    # Its tasks fetch this artifact before they start in Spark: they all arrive while none runs yet.
    artifact = cpb.Artifact(name="padding.py", content=b"# " + b"x" * (30 << 20) + b"\n")
    job_id = client.submit(env.get_job_graph("five tasks in one slot").proto, [artifact])
    poll_for(lambda: job_status(client, job_id).is_terminal(), 60, what="the job to end (not hang on a busy Spark)")
    summary = client.status(job_id)
    if CLUSTER.placement == "slot":
        assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
    else:
        assert JobStatus.from_proto(summary.status) is JobStatus.FAILED
        assert f"runs at most {SLOTS * TASKS_PER_SLOT} tasks at once" in summary.failure.message
    poll_for(lambda: all_slots_free(client), 30, what="slots to be freed")


class FailOn(MapFunction):
    """Fails in one producer subtask, after its consumers have connected and read some records."""

    def __init__(self, bad: int) -> None:
        self.bad = bad

    def open(self, runtime_context: RuntimeContext) -> None:
        self.index = runtime_context.get_index_of_this_subtask()

    def map(self, value):
        if value == self.bad:
            raise ValueError(f"cannot handle {value} in subtask {self.index}")
        return value


def test_a_user_exception_in_a_producer_is_the_jobs_cause_not_its_consumers_broken_channel(cluster, client) -> None:
    for attempt in range(3):  # the failure races its consumers' reports: try it more than once
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(2)
        (env.from_sequence(1, 200_000).map(FailOn(150_000)).name("fail on")
            .key_by(lambda x: x % 7).map(lambda x: x + 1).name("after keyBy").add_sink(lambda x: None))
        with jobmanager_env(cluster.address), pytest.raises(JobExecutionException) as info:
            env.execute(f"root cause {attempt}")
        failure = info.value.summary.failure
        assert "ValueError: cannot handle 150000" in failure.message, failure.message
        assert failure.task_name.startswith("Source: Sequence Source -> fail on"), failure.task_name
        assert not failure.secondary
        poll_for(lambda: all_slots_free(client), 30, what="slots to be freed")


class PidSource(ParallelSourceFunction):  # one per subtask: the tests fill every slot
    """Writes its worker's pid to a file, then emits until cancelled."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.running = True

    def run(self, ctx) -> None:
        with open(os.path.join(self.directory, f"{os.getpid()}.pid"), "w") as f:
            f.write(str(os.getpid()))
        i = 0
        while self.running:
            ctx.collect(i)
            i += 1
            time.sleep(0.001)

    def cancel(self) -> None:
        self.running = False


def test_kill_9_of_a_python_worker_fails_the_job_with_python_worker_crashed(cluster, client, tmp_path) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.add_source(PidSource(str(tmp_path))).key_by(lambda x: x % 5).map(lambda x: x).add_sink(lambda x: None)
    job_id = client.submit(env.get_job_graph("worker victim").proto)
    pid_files = poll_for(lambda: sorted(tmp_path.glob("*.pid")), 60, what="the sources to start")
    poll_for(lambda: client.status(job_id).tasks_per_state.get("RUNNING") == 4, 60, what="all tasks running")
    os.kill(int(pid_files[0].read_text()), signal.SIGKILL)
    poll_for(lambda: job_status(client, job_id) is JobStatus.FAILED, 60, what="the job to fail")
    failure = client.status(job_id).failure
    assert "Python worker crashed" in failure.message, failure.message
    assert failure.task_name.startswith("Source: Custom Source"), failure.task_name
    poll_for(lambda: all_slots_free(client), 30, what="slots to be freed")
