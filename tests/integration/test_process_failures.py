"""Real JobManager and TaskManager processes: the job's failure names what really died.

kill -9 of a TaskManager fails the job with "TaskManager ... lost", not with a neighbour's broken
channel; kill -9 of a TaskManager's Spark JVM fails the job with "Spark died", and that TaskManager
leaves the cluster and exits non-zero instead of accepting tasks it cannot run.
"""
from __future__ import annotations

import os
import signal
import time

import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.datastream import StreamExecutionEnvironment

from millstream.runtime.execution_state import JobStatus

from .harness import poll_for, ProcessCluster
from .jobs import ParallelEndless

pytestmark = pytest.mark.timeout(300)

# Flink's defaults scaled as ours are: heartbeat.interval 10 s. The JobMaster must not need them to
# find a killed TaskManager whose tasks exchange data with others.
HEARTBEATS = ["-Dheartbeat.interval=10 s", "-Dheartbeat.timeout=50 s"]


@pytest.fixture(scope="module")
def processes(tmp_path_factory):
    """A JobManager and two TaskManagers with two slots each, as separate processes."""
    directory = tmp_path_factory.mktemp("processes")
    with ProcessCluster(directory, heartbeats=HEARTBEATS) as c:
        tms = c.add_taskmanagers(2)
        with ClusterClient(c.address) as client:
            poll_for(lambda: client.overview().taskmanagers == 2, 180, interval=0.5, what="two TaskManagers")
            yield client, tms, directory


def _keyed_endless_job(client: ClusterClient, parallelism: int, name: str) -> bytes:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.add_source(ParallelEndless(every=100, pause_s=0.001)).key_by(lambda x: x % 11).map(lambda x: x).add_sink(lambda x: None)
    job_id = client.submit(env.get_job_graph(name).proto)
    poll_for(lambda: client.status(job_id).tasks_per_state.get("RUNNING") == 2 * parallelism, 90, what="all tasks running")
    return job_id


def _failure_when_failed(client: ClusterClient, job_id: bytes, timeout: float) -> str:
    poll_for(lambda: JobStatus.from_proto(client.status(job_id).status) is JobStatus.FAILED, timeout, what="the job to fail")
    return client.status(job_id).failure.message


def _children(pid: int) -> list[tuple[int, str]]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            found.append((int(entry), cmdline))
    return found


def test_kill_9_of_a_task_manager_fails_the_job_with_task_manager_lost(processes) -> None:
    client, tms, _ = processes
    job_id = _keyed_endless_job(client, 4, "across two TaskManagers")  # all four slots: both hold tasks
    victim = tms.pop()
    victim.kill()
    victim.wait(10)
    killed = time.monotonic()
    message = _failure_when_failed(client, job_id, 30)
    # The neighbours' broken exchanges make the JobMaster probe at once: well before the 10-20 s
    # that two refused heartbeat rounds would take.
    assert time.monotonic() - killed < 6, time.monotonic() - killed
    assert "TaskManager" in message and "lost" in message, message
    assert "closed the connection" not in message, message
    poll_for(lambda: client.overview().taskmanagers == 1, 30, what="the lost TaskManager to leave")


def test_kill_9_of_a_task_managers_spark_fails_the_job_and_the_task_manager_leaves(processes) -> None:
    client, tms, directory = processes
    poll_for(lambda: client.overview().slots_available == 2, 30, what="the slots of the previous job to be free")
    tm = tms[0]
    job_id = _keyed_endless_job(client, 2, "on a Spark about to die")
    jvms = [pid for pid, cmdline in _children(tm.pid) if "java" in cmdline]
    assert len(jvms) == 1, _children(tm.pid)
    os.kill(jvms[0], signal.SIGKILL)
    message = _failure_when_failed(client, job_id, 60)
    assert "Spark died" in message, message
    # It leaves the cluster and exits non-zero, rather than taking tasks it cannot run.
    assert tm.wait(60) == 1, (directory / "taskmanager-0.log").read_text()[-3000:]
    assert client.overview().taskmanagers == 0
