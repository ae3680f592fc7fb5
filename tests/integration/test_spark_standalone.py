"""TaskManagers on an existing Spark cluster (issue 12): a real standalone Master and two Workers
from the installed pyspark, a JobManager and TaskManagers with millstream.spark.master pointing at
it, all on this machine's network address (not loopback) and with no host option set, so the
defaults are what crosses machines: the TaskManagers bind every interface and advertise their
address towards the master, the tasks run in the cluster's executors and serve their partitions
on their own addresses.

What a user relies on:
* word count and a keyed stateful job give exact results, their tasks inside executors;
* a TaskManager offers only the slots Spark gives it cores for; with the task placement ``task`` a
  deployment that cannot get a core fails the job with a message that says so (never a silent
  wait), with ``slot`` the slot's subtasks share its one core and the job runs; a TaskManager that
  gets no core at all fails its start naming the master;
* kill -9 of a Spark worker (with its executors) under a checkpointed job: the job restarts from
  its checkpoint once the worker is back, and its exactly-once output equals ground truth.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.datastream import MapFunction, StreamExecutionEnvironment
from millstream.runtime.execution_state import JobStatus

from .harness import (HEARTBEATS, ancestors, completed_checkpoints, effective_placement, final_counts, poll_for,
                      spawn_module, stop_processes, word_counts)
from .spark_standalone import LocalHost, SparkStandalone, machine_address
from .jobs import assert_exactly_once, ended, throttled_failover_graph

pytestmark = pytest.mark.timeout(600)

SLOTS, TASKS_PER_SLOT = 2, 3
PLACEMENT = effective_placement()
# What a TaskManager asks Spark for (spark.cores.max): 6 cores with the placement task, 2 with slot;
# each worker has that many, so two TaskManagers (an executor of each on each worker) take them all.
TM_CORES = SLOTS * TASKS_PER_SLOT if PLACEMENT == "task" else SLOTS


class Cluster:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.host = machine_address()
        # each TaskManager is a Spark application with an executor on each worker
        self.spark = SparkStandalone(workdir / "spark", LocalHost(self.host), [LocalHost(self.host)] * 2, cores=TM_CORES,
                                     memory="2g")
        self.jobmanager: subprocess.Popen[bytes] | None = None
        self.taskmanagers: list[subprocess.Popen[bytes]] = []
        self.address = ""

    def start(self) -> None:
        self.spark.start()
        ready = self.workdir / "jm.address"
        self.jobmanager = spawn_module(
            ["millstream.jobmanager.jobmanager", "--ready-file", str(ready), "-Djobmanager.rpc.port=0",
             f"-Djobmanager.rpc.address={self.host}", f"-Dexecution.checkpointing.dir={self.workdir / 'checkpoints'}",
             *HEARTBEATS], self.workdir / "jobmanager.log")
        self.address = poll_for(lambda: ready.exists() and ready.read_text().strip(), 60, what="the JobManager")

    def taskmanager(self, name: str, *options: str) -> subprocess.Popen[bytes]:
        tm = spawn_module(["millstream.taskmanager.taskmanager", "--jobmanager", self.address,
                           f"-Dtaskmanager.numberOfTaskSlots={SLOTS}", f"-Dmillstream.spark.tasks-per-slot={TASKS_PER_SLOT}",
                           f"-Dmillstream.spark.master={self.spark.url}", *HEARTBEATS,
                           "-Dmillstream.spark.conf=spark.executor.memory=512m", *options],
                          self.workdir / f"{name}.log")
        self.taskmanagers.append(tm)
        return tm

    def log(self, name: str) -> str:
        return (self.workdir / f"{name}.log").read_text(errors="replace")

    def stop(self) -> None:
        stop_processes([p for p in [self.jobmanager, *self.taskmanagers] if p is not None])
        self.spark.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("spark-standalone"))
    try:
        c.start()
        yield c
    finally:
        c.stop()


def registered(client: ClusterClient, taskmanagers: int, slots: int) -> bool:
    o = client.overview()
    return o.taskmanagers == taskmanagers and o.slots_total == slots and o.slots_available == slots


class Where(MapFunction):
    """Appends the command lines of the worker's ancestors, then ``@@`` and the file the job's
    helper module was imported from, to ``path`` once per task."""

    def __init__(self, path: str) -> None:
        self.path = path

    def open(self, runtime_context) -> None:
        chain = [Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                 for pid in sorted(ancestors(os.getpid())) if Path(f"/proc/{pid}/cmdline").exists()]
        helper = getattr(sys.modules.get("ms_helper_words"), "__file__", "-")
        with open(self.path, "a") as f:
            f.write(" | ".join(chain).replace("\n", " ") + f" @@ {helper}\n")

    def map(self, value):
        return value


def test_a_taskmanager_offers_only_the_slots_spark_gives_cores_for_and_a_deployment_without_a_core_fails_clearly(
        cluster: Cluster) -> None:
    tm = cluster.taskmanager("tm-small", "-Dmillstream.spark.conf=spark.executor.memory=512m;spark.cores.max=1")
    try:
        with ClusterClient(cluster.address) as client:
            poll_for(lambda: registered(client, 1, 1), 120, interval=0.5, what="a TaskManager offering 1 of its 2 slots")
            assert "gives it 1 cores: offering 1 of its 2 slots" in cluster.log("tm-small")
            env = StreamExecutionEnvironment.get_execution_environment()
            env.set_parallelism(1)
            env.from_collection(list(range(100))).map(lambda x: (x % 3, x)).key_by(lambda t: t[0]).sum(1).print()
            job_id = client.submit(env.get_job_graph("two tasks on one core").proto)
            summary = poll_for(lambda: ended(client, job_id), 120, interval=0.5, what="the job to end")
            if PLACEMENT == "slot":  # the slot's two subtasks share its Spark task: one core runs them
                assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary
                return
            assert JobStatus.from_proto(summary.status) is JobStatus.FAILED
            assert "cannot get a Spark core" in summary.failure.message and cluster.spark.url in summary.failure.message, \
                summary.failure.message
    finally:  # the next tests count the TaskManagers
        tm.terminate()
        tm.wait(30)
        cluster.taskmanagers.remove(tm)


def test_word_count_and_a_keyed_job_run_in_the_clusters_executors_with_exact_results(cluster: Cluster) -> None:
    for i in range(2):
        cluster.taskmanager(f"tm-{i}")
    with ClusterClient(cluster.address) as client:
        poll_for(lambda: registered(client, 2, 2 * SLOTS), 180, interval=0.5, what="two TaskManagers on Spark")
    where = cluster.workdir / "where.txt"
    helper = cluster.workdir / "helpers" / "ms_helper_words.py"  # shipped with the job, imported by reference
    helper.parent.mkdir()
    helper.write_text("def split(line):\n    return [(w, 1) for w in line.split()]\n")
    lines = [f"w{i % 11} w{i % 7} w{i % 5}" for i in range(3000)]
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.add_python_file(str(helper))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MILLSTREAM_JOBMANAGER", cluster.address)
        mp.syspath_prepend(str(helper.parent))
        import ms_helper_words
        counts = (env.from_collection(lines).map(Where(str(where)))
                  .flat_map(ms_helper_words.split)
                  .key_by(lambda t: t[0]).reduce(lambda a, b: (a[0], a[1] + b[1])))
        final = final_counts(counts, "word count on Spark")
    assert final == word_counts(lines)
    chains = where.read_text().splitlines()
    assert len(chains) == 2 and all("CoarseGrainedExecutorBackend" in chain for chain in chains), chains
    # the module came with the task (the TaskManager's download directory is not on the workers)
    shipped = os.path.join(tempfile.gettempdir(), "millstream-artifacts")
    assert all(chain.split(" @@ ")[1].startswith(shipped) for chain in chains), chains


def test_a_taskmanager_that_gets_no_spark_core_fails_its_start_naming_the_master(cluster: Cluster) -> None:
    # the two TaskManagers of the previous test hold every core of the workers
    tm = cluster.taskmanager("tm-none", "-Dmillstream.spark.executor-wait=3 s")
    assert tm.wait(120) != 0
    cluster.taskmanagers.remove(tm)
    log = cluster.log("tm-none")
    assert f"the Spark cluster {cluster.spark.url} gave it no executor core within 3 s" in log, log[-3000:]
    assert "millstream.spark.executor-wait" in log


def test_kill_9_of_a_spark_worker_under_a_checkpointed_job_recovers_exactly_once(cluster: Cluster) -> None:
    out, slow, count = cluster.workdir / "out", cluster.workdir / "slow", 12_000
    slow.touch()
    graph = throttled_failover_graph("checkpointed count on Spark", out, count, str(slow), 0.002, restarts=60,
                                     delay_ms=1000)
    with ClusterClient(cluster.address) as client:
        poll_for(lambda: registered(client, 2, 2 * SLOTS), 60, interval=0.5, what="two TaskManagers with free slots")
        job_id = client.submit(graph.proto)

        poll_for(lambda: completed_checkpoints(client, job_id, 2), 120, interval=0.2, what="two completed checkpoints")
        cluster.spark.kill_worker(0)
        poll_for(lambda: client.status(job_id).num_restarts >= 1, 60, interval=0.2, what="the job to restart")
        slow.unlink()
        cluster.spark.restart_worker(0)  # a supervisor brings the machine's worker back
        summary = poll_for(lambda: ended(client, job_id), 240, interval=0.5, what="the job to end")
        assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary
        assert summary.checkpoints.latest_restored_id >= 1
    assert_exactly_once(out, count)
