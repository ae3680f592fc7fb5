"""High-availability clusters of processes for integration modules: ZooKeeper, JobManager processes
with the HA options (:class:`JobManagerProcess`), HA TaskManagers, and the plain-gRPC probes of who
leads and what a job's status is there (a client would follow the leader and hide both)."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import grpc

from millstream.datastream import MapFunction
from millstream.proto import cluster_pb2 as cpb
from millstream.proto import cluster_pb2_grpc as cpb_grpc
from millstream.runtime import config as cfg
from millstream.runtime.execution_state import JobStatus
from millstream.runtime.ha import LeaderInformation, create_ha_services
from millstream.runtime.rpc.fencing import FENCING_METADATA_KEY
from millstream.runtime.rpc.service import sync_channel

from .harness import cli, poll_for, spawn_module, stop_processes
from .jobs import throttled_failover_graph
from .zookeeper import ZooKeeperServer, ha_config

SESSION_TIMEOUT_S = 5.0  # the ZooKeeper session of every HA process here
# Heartbeats of the HA processes (-D flags): fast, so a lost TaskManager or leader shows quickly.
HA_HEARTBEATS = ["-Dheartbeat.interval=300 ms", "-Dheartbeat.timeout=3 s", "-Dmillstream.rpc.timeout=5 s"]
PAUSE_S = 0.005  # submit()'s pause per record and source subtask while the slow marker exists: ~400 records/s in all


class JobManagerProcess:
    """A JobManager process (``millstream.jobmanager.jobmanager``) with the HA options."""

    def __init__(self, workdir: Path, name: str, options: dict[str, str]) -> None:
        self.ready = workdir / f"{name}.address"
        self.log_path = workdir / f"{name}.log"
        args = [sys.executable, "-m", "millstream.jobmanager.jobmanager", "--ready-file", str(self.ready),
                *[f"-D{k}={v}" for k, v in options.items()]]
        self.proc = subprocess.Popen(args, stdout=open(self.log_path, "ab"), stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        self.address = poll_for(self._address, 60, 0.1, f"{name} to serve")
        self.channel = grpc.insecure_channel(self.address)
        self.dispatcher = cpb_grpc.DispatcherStub(self.channel)
        self.rm = cpb_grpc.ResourceManagerStub(self.channel)
        self.jms = cpb_grpc.JobMasterServiceStub(self.channel)

    def _address(self) -> Optional[str]:
        if self.proc.poll() is not None:
            raise AssertionError(f"the JobManager exited with {self.proc.returncode}: {self.log()}")
        return self.ready.read_text().strip() if self.ready.exists() and self.ready.read_text().strip() else None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def list_jobs(self) -> cpb.ListJobsResponse:
        return self.dispatcher.ListJobs(cpb.Empty(), timeout=5)

    def leads(self) -> bool:
        try:
            self.list_jobs()
            return True
        except grpc.RpcError as exc:
            if exc.code() is grpc.StatusCode.UNAVAILABLE:
                return False
            raise

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(20)

    def stop(self) -> None:
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


def current_leader(options: dict[str, str], timeout: float = 30.0) -> LeaderInformation:
    """The JobManager leader ZooKeeper names now, read as a client of ``options``' HA services."""
    with create_ha_services(cfg.Configuration.from_dict(options), name="test-retrieval") as services:
        retrieval = services.jobmanager_leader_retrieval()
        retrieval.start(None)
        return retrieval.current_leader(timeout)


def taskmanager_address(log: Path) -> str:
    """The address the TaskManager logging to ``log`` serves at, once it says so."""
    def found() -> Optional[str]:
        match = re.search(r"TaskManager \S+ serving at (\S+) with", log.read_text(errors="replace")) if log.exists() else None
        return match.group(1) if match else None
    return poll_for(found, 180, interval=0.5, what=f"the TaskManager's address in {log}")


def fenced_call(address: str, token: Optional[str], method: str = "CancelTask") -> Optional[grpc.RpcError]:
    """A TaskExecutor call to ``address`` with fencing ``token`` (None: none); its error, or None."""
    channel = sync_channel(address)
    try:
        stub = cpb_grpc.TaskExecutorStub(channel)
        metadata = [(FENCING_METADATA_KEY, token)] if token is not None else None
        if method == "CancelTask":
            stub.CancelTask(cpb.CancelTaskRequest(execution_attempt_id=b"x" * 16), timeout=5, metadata=metadata)
        else:
            stub.LookupPartition(cpb.LookupPartitionRequest(producer_attempt_id=b"x" * 16), timeout=5, metadata=metadata)
        return None
    except grpc.RpcError as exc:
        return exc
    finally:
        channel.close()


def timed_cli(*args: str, env: Optional[dict] = None, timeout: float = 60) -> tuple[subprocess.CompletedProcess, float]:
    """``millstream *args`` without MILLSTREAM_JOBMANAGER (``env`` may set it) and how long it took."""
    environment = {k: v for k, v in os.environ.items() if k != "MILLSTREAM_JOBMANAGER"}
    environment.update(env or {})
    started = time.monotonic()
    done = cli(*args, env=environment, timeout=timeout)
    return done, time.monotonic() - started


class HaCluster:
    """ZooKeeper, two HA JobManagers and HA TaskManagers (by default one with 4 slots) for the whole
    module: conftest.py's ``ha_cluster`` fixture, with the module's ``HA_CLUSTER`` keyword arguments."""

    def __init__(self, directory: Path, taskmanagers: int = 1, slots: int = 4) -> None:
        self.directory = directory
        self.slots_total = taskmanagers * slots
        self.zookeeper = ZooKeeperServer(directory / "zookeeper")
        self.zookeeper.start()
        self.options = {k: str(v) for k, v in ha_config(self.zookeeper, directory / "ha").to_dict().items()}
        self.options.update({
            "high-availability.zookeeper.client.session-timeout": f"{SESSION_TIMEOUT_S:.0f} s",
            "jobmanager.rpc.address": "127.0.0.1",
            "jobmanager.rpc.port": "0",
            "execution.checkpointing.dir": str(directory / "checkpoints"),
            **dict(flag[2:].split("=", 1) for flag in HA_HEARTBEATS),
        })
        self.conf = cfg.Configuration.from_dict(self.options)
        self.storage = Path(self.options[cfg.HA_STORAGE_DIR.key])
        self.jobmanagers: list[JobManagerProcess] = []
        self._started = 0
        self.ensure_jobmanagers()
        logs = [directory / ("taskmanager.log" if i == 0 else f"taskmanager-{i}.log") for i in range(taskmanagers)]
        self.taskmanagers = [spawn_module(["millstream.taskmanager.taskmanager", f"-Dtaskmanager.numberOfTaskSlots={slots}",
                                           "-Dmillstream.spark.tasks-per-slot=3", *HA_HEARTBEATS,
                                           *[f"-D{k}={v}" for k, v in self.options.items() if k.startswith("high-")]],
                                          log) for log in logs]
        self.taskmanager, self.tm_log = self.taskmanagers[0], logs[0]
        self.tm_addresses = [taskmanager_address(log) for log in logs]
        self.tm_address = self.tm_addresses[0]

    def ensure_jobmanagers(self, n: int = 2) -> None:
        """``n`` live JobManagers (a test may have killed some)."""
        self.jobmanagers = [jm for jm in self.jobmanagers if jm.proc.poll() is None]
        while len(self.jobmanagers) < n:
            self.jobmanagers.append(JobManagerProcess(self.directory, f"jm{self._started}", self.options))
            self._started += 1

    def leader_and_standby(self, timeout: float = 60) -> tuple[JobManagerProcess, JobManagerProcess]:
        leader = poll_for(lambda: next((jm for jm in self.jobmanagers if jm.leads()), None), timeout, 0.1, "a leader")
        return leader, next(jm for jm in self.jobmanagers if jm is not leader)

    def wait_for_slots(self, leader: JobManagerProcess, free: Optional[int] = None) -> None:
        """Every TaskManager registered at ``leader`` with ``free`` (default: all) slots free."""
        free = self.slots_total if free is None else free

        def ready() -> bool:
            overview = leader.dispatcher.GetClusterOverview(cpb.Empty(), timeout=5)
            return overview.slots_total == self.slots_total and overview.slots_available >= free
        poll_for(ready, 240, 0.5, f"the TaskManagers' {free} free slots at the leader {leader.address}")

    def zk(self) -> Any:
        """A ZooKeeper connection of the test's own, to look at what the JobManagers stored."""
        return create_ha_services(self.conf, name="test-observer")

    def stop(self) -> None:
        for jm in self.jobmanagers:
            if jm.proc.poll() is None:
                os.kill(jm.proc.pid, signal.SIGCONT)  # a paused one would not stop
            jm.stop()
        stop_processes(self.taskmanagers)
        self.zookeeper.kill()

    def __enter__(self) -> HaCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def submit(jm: JobManagerProcess, name: str, out: Path, count: int, slow: Optional[Path],
           pause_s: float = PAUSE_S, after: Sequence[MapFunction] = ()) -> bytes:
    """test_failover's job (``after``: functions after the keyed count), slow while ``slow`` exists."""
    graph = throttled_failover_graph(name, out, count, str(slow) if slow is not None else None, pause_s, after=after,
                                     delay_ms=200)
    request = cpb.SubmitJobRequest(submission_id=name, job_graph=graph.proto.SerializeToString())
    return bytes(jm.dispatcher.SubmitJob(request, timeout=30).job_id)


def summary_at(jm: JobManagerProcess, job_id: bytes) -> Optional[cpb.JobSummary]:
    """The job as ``jm`` sees it; None while ``jm`` does not answer as the leader."""
    try:
        return jm.dispatcher.GetJobStatus(cpb.JobIdRequest(job_id=job_id), timeout=5)
    except grpc.RpcError as exc:
        if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.DEADLINE_EXCEEDED):
            return None
        raise


def status_of(summary: cpb.JobSummary) -> JobStatus:
    return JobStatus.from_proto(summary.status)


def checkpointing_since_restore(jm: JobManagerProcess, job_id: bytes, restored: bool) -> Optional[cpb.JobSummary]:
    """The job runs at ``jm`` and completed a checkpoint there (after the one it restored, if ``restored``)."""
    summary = summary_at(jm, job_id)
    if summary is None or status_of(summary) is not JobStatus.RUNNING:
        return None
    c = summary.checkpoints
    if restored and c.latest_restored_id < 1:
        return None
    return summary if c.num_completed >= 1 and c.last_completed_id > max(c.latest_restored_id, 0) else None


def finished(jm: JobManagerProcess, job_id: bytes) -> Optional[cpb.JobSummary]:
    summary = summary_at(jm, job_id)
    return summary if summary is not None and status_of(summary).is_terminal() else None
