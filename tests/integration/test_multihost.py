"""Millstream over several hosts (issue 12): the JobManager and the Spark master, two Spark
workers and two TaskManagers each in a network namespace of its own with an address of this
test's choosing, joined by a switch; this process is the client on a fifth address. Nothing runs
on a shared loopback, and no host option is set on the TaskManagers: their defaults must be what
works across machines (they bind every interface and advertise their address towards the master;
the tasks in the workers' executors serve their partitions on the workers' addresses).

* word count submitted from the client gives the exact counts, its tasks in executors on the
  worker hosts;
* pulling the cable of the TaskManager host that runs a checkpointed job (link down) is detected
  like a kill (heartbeat timeout), the job restarts from its checkpoint on the other TaskManager,
  and its exactly-once output equals ground truth.
"""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.datastream import MapFunction, StreamExecutionEnvironment
from millstream.runtime.execution_state import JobStatus

from . import netns
from .harness import HEARTBEATS, ancestors, completed_checkpoints, final_counts, poll_for, stop_processes, word_counts
from .spark_standalone import SparkStandalone
from .jobs import assert_exactly_once, ended, throttled_failover_graph

pytestmark = pytest.mark.timeout(600)

JM_PORT = 6123


class Hosts:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.net = netns.Network(f"ms{uuid.uuid4().hex[:4]}")
        self.jm, self.w1, self.w2, self.tm1, self.tm2 = (self.net.add_host(n) for n in ("jm", "w1", "w2", "tm1", "tm2"))
        self.spark = SparkStandalone(workdir / "spark", self.jm, [self.w1, self.w2], cores=6, memory="2g")
        self.procs: list[subprocess.Popen[bytes]] = []
        self.address = f"{self.jm.address}:{JM_PORT}"

    def python(self, host: netns.Host, name: str, module: str, *args: str) -> subprocess.Popen[bytes]:
        proc = host.spawn([sys.executable, "-m", module, *args], self.workdir / f"{name}.log")
        self.procs.append(proc)
        return proc

    def start(self) -> None:
        self.spark.start()
        ready = self.workdir / "jm.address"
        self.python(self.jm, "jobmanager", "millstream.jobmanager.jobmanager", "--ready-file", str(ready),
                    f"-Djobmanager.rpc.address={self.jm.address}", f"-Djobmanager.rpc.port={JM_PORT}",
                    f"-Dexecution.checkpointing.dir={self.workdir / 'checkpoints'}", *HEARTBEATS)
        assert poll_for(lambda: ready.exists() and ready.read_text().strip(), 60, what="the JobManager") == self.address
        for host in (self.tm1, self.tm2):
            self.python(host, host.name, "millstream.taskmanager.taskmanager", "--jobmanager", self.address,
                        "-Dtaskmanager.numberOfTaskSlots=2", "-Dmillstream.spark.tasks-per-slot=3",
                        f"-Dmillstream.spark.master={self.spark.url}", "-Dmillstream.spark.conf=spark.executor.memory=512m",
                        *HEARTBEATS)

    def stop(self) -> None:
        stop_processes(self.procs)
        self.spark.stop()
        self.net.close()


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hosts]:
    reason = netns.unavailable()
    if reason is not None:
        pytest.skip(f"multi-host tests skipped: {reason}")
    h = Hosts(tmp_path_factory.mktemp("multihost"))
    try:
        h.start()
        with ClusterClient(h.address) as client:
            poll_for(lambda: client.overview().slots_available == 4, 180, interval=0.5,
                     what="two TaskManagers with 2 slots each")
        yield h
    finally:
        h.stop()


class Where(MapFunction):
    """Appends ``<this worker's address towards the JobManager> <its executor's driver host>`` to
    ``path`` when a task opens: which host runs the task and for which TaskManager."""

    def __init__(self, path: str, jobmanager_host: str) -> None:
        self.path, self.jobmanager_host = path, jobmanager_host

    def open(self, runtime_context) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((self.jobmanager_host, 9))
            here = probe.getsockname()[0]
        lines = [Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                 for pid in ancestors(os.getpid()) if Path(f"/proc/{pid}/cmdline").exists()]
        driver = next((m.group(1) for line in lines if (m := re.search(r"CoarseGrainedScheduler@([\d.]+):", line))), "?")
        with open(self.path, "a") as f:
            f.write(f"{here} {driver}\n")

    def map(self, value):
        return value


def test_word_count_from_a_client_host_runs_on_the_worker_hosts_with_exact_counts(hosts: Hosts) -> None:
    where = hosts.workdir / "where-wc.txt"
    lines = [f"w{i % 13} w{i % 5} w{i % 3}" for i in range(4000)]
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    counts = (env.from_collection(lines).map(Where(str(where), hosts.jm.address))
              .flat_map(lambda line: [(w, 1) for w in line.split()])
              .key_by(lambda t: t[0]).reduce(lambda a, b: (a[0], a[1] + b[1])))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MILLSTREAM_JOBMANAGER", hosts.address)
        final = final_counts(counts, "word count across hosts")
    assert final == word_counts(lines)
    placed = [line.split() for line in where.read_text().splitlines()]
    assert len(placed) == 2
    assert {here for here, _ in placed} <= {hosts.w1.address, hosts.w2.address}, placed
    assert {driver for _, driver in placed} <= {hosts.tm1.address, hosts.tm2.address}, placed


def test_a_taskmanager_hosts_link_cut_under_a_checkpointed_job_is_recovered_like_a_kill(hosts: Hosts) -> None:
    out, slow, count = hosts.workdir / "out", hosts.workdir / "slow", 12_000
    where = hosts.workdir / "where-failover.txt"
    slow.touch()
    graph = throttled_failover_graph("checkpointed count across hosts", out, count, str(slow), 0.002,
                                     before=[Where(str(where), hosts.jm.address)], restarts=30, delay_ms=1000)
    with ClusterClient(hosts.address) as client:
        job_id = client.submit(graph.proto)

        poll_for(lambda: completed_checkpoints(client, job_id, 2), 120, interval=0.2, what="two completed checkpoints")
        drivers = {line.split()[1] for line in where.read_text().splitlines()}
        victim = hosts.tm1 if hosts.tm1.address in drivers else hosts.tm2
        victim.link(up=False)
        poll_for(lambda: client.status(job_id).num_restarts >= 1, 60, interval=0.2, what="the lost TaskManager noticed")
        slow.unlink()
        summary = poll_for(lambda: ended(client, job_id), 240, interval=0.5, what="the job to end")
        assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary
        assert summary.checkpoints.latest_restored_id >= 1
        assert client.overview().taskmanagers == 1
    assert_exactly_once(out, count)
    restarted = {line.split()[1] for line in where.read_text().splitlines()[2:]}
    assert victim.address not in restarted, restarted
