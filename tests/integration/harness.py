"""Helpers for integration tests, one set for every module: the embedded cluster a module asks for
(:class:`ClusterSpec`, read by conftest.py's ``spark`` and ``cluster`` fixtures), clusters of
processes (:class:`ProcessCluster`, :func:`session_cluster`, :func:`rest_cluster`; HA ones are in
ha.py), polling and the checks every module makes. Jobs shared by modules are in jobs.py."""
from __future__ import annotations

import collections
import contextlib
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, TypeVar

from millstream.runtime import config as cfg

T = TypeVar("T")

FAST = {
    "heartbeat.interval": "200 ms",
    "heartbeat.timeout": "3 s",
    "millstream.rpc.timeout": "5 s",
}
# Heartbeats of JobManager and TaskManager processes started by a test (-D flags).
HEARTBEATS = ["-Dheartbeat.interval=1 s", "-Dheartbeat.timeout=5 s"]


def fast_config(**overrides: str) -> cfg.Configuration:
    values = dict(FAST)
    values.update({k.replace("__", "."): v for k, v in overrides.items()})
    return cfg.Configuration.from_dict(values)


def test_placement() -> str | None:
    """The task placement a test run asks for (MILLSTREAM_TEST_TASK_PLACEMENT), None: the default."""
    return os.environ.get("MILLSTREAM_TEST_TASK_PLACEMENT") or None


def effective_placement() -> str:
    """The task placement this test run's clusters use: the one asked for, else the option's default."""
    return test_placement() or cfg.SPARK_TASK_PLACEMENT.default


@dataclass(frozen=True)
class ClusterSpec:
    """The embedded cluster of a test module: ``CLUSTER = ClusterSpec(...)`` at module level (or an
    indirect parameter of the ``cluster_spec`` fixture); the default is what most modules need. The
    conftest starts one SparkHost and one MiniCluster per module from it, shared by its tests."""

    slots: int = 2  # per TaskManager
    taskmanagers: int = 1
    tasks_per_slot: int = 4  # the SparkHost's; with slot sharing a slot runs several tasks at once
    spark_slots: int | None = None  # the SparkHost's slots; default: every TaskManager's slots
    options: Mapping[str, str] = field(default_factory=dict)  # on top of FAST
    checkpoints: bool = False  # execution.checkpointing.dir: the module's ``checkpoint_dir``
    jobmanager_env: bool = False  # env.execute() in the module's tests runs on this cluster
    # millstream.spark.task-placement of the SparkHost; MILLSTREAM_TEST_TASK_PLACEMENT=slot runs a
    # module's tests with every slot in one Spark task
    placement: str = field(default_factory=lambda: effective_placement())

    @property
    def spark_host_slots(self) -> int:
        return self.spark_slots or self.slots * self.taskmanagers


@contextlib.contextmanager
def embedded_cluster(spec: ClusterSpec, spark: Any, **options: str) -> Iterator[Any]:
    """``spec``'s MiniCluster on the started SparkHost ``spark`` (``options`` added to its own),
    with ``spec.taskmanagers`` TaskManagers; stopped after the block."""
    from millstream.client.minicluster import MiniCluster

    config = cfg.Configuration.from_dict({**FAST, **spec.options, **options})
    with MiniCluster(config, num_slots=spec.slots, spark=spark) as mc:  # starts one TaskManager
        for _ in range(spec.taskmanagers - 1):
            mc.add_task_manager()
        if spec.jobmanager_env:
            with jobmanager_env(mc.address):
                yield mc
        else:
            yield mc


@contextlib.contextmanager
def refused_port(port: int = 0) -> Iterator[int]:
    """A loopback port that refuses connections for as long as the block runs: bound, never
    listening. A port number found free and then let go can be taken meanwhile by a parallel
    test's server, and a client then sees a protocol error instead of a refusal (a CI failure)."""
    with socket.socket() as held:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind(("127.0.0.1", port))
        yield held.getsockname()[1]


def poll_for(check: Callable[[], T], timeout: float = 30.0, interval: float = 0.05, what: str = "condition") -> T:
    """Returns the first truthy ``check()``; fails the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last value: {last!r})")


class jobmanager_env:
    """Points ``env.execute()`` at a cluster for the duration of a ``with`` block."""

    def __init__(self, address: str) -> None:
        self.address = address

    def __enter__(self) -> None:
        self.saved = os.environ.get("MILLSTREAM_JOBMANAGER")
        os.environ["MILLSTREAM_JOBMANAGER"] = self.address

    def __exit__(self, *exc: object) -> None:
        if self.saved is None:
            os.environ.pop("MILLSTREAM_JOBMANAGER", None)
        else:
            os.environ["MILLSTREAM_JOBMANAGER"] = self.saved


def job_status(client: Any, job_id: bytes) -> Any:
    """The job's JobStatus, as the cluster reports it now."""
    from millstream.runtime.execution_state import JobStatus

    return JobStatus.from_proto(client.status(job_id).status)


def all_slots_free(client: Any) -> bool:
    overview = client.overview()
    return bool(overview.slots_available == overview.slots_total)


def spawn_module(args: list[str], log_path: Any) -> "subprocess.Popen[bytes]":
    """``python -m args...`` in its own session, its output appended to ``log_path``."""
    return subprocess.Popen([sys.executable, "-m", *args], stdout=open(log_path, "ab"), stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)


def stop_processes(procs: list["subprocess.Popen[bytes]"]) -> None:
    """Terminates ``procs`` (last started first), killing any that does not stop within 30 s."""
    for p in reversed(procs):
        if p.poll() is None:
            p.terminate()
    for p in reversed(procs):
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()


def ancestors(pid: int) -> set[int]:
    """``pid`` and its parent processes (to find the TaskManager a task's Spark worker runs under)."""
    seen = set()
    while pid > 1:
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return seen


def final_counts(running_counts: Any, job_name: str) -> dict[Any, int]:
    """``execute_and_collect`` of a keyed running count of ``(key, count)``: each key's last count."""
    final: dict[Any, int] = {}
    with running_counts.execute_and_collect(job_name) as results:
        for key, n in results:
            final[key] = max(final.get(key, 0), n)
    return final


def word_counts(lines: list[str]) -> dict[str, int]:
    """What word count over ``lines`` must give."""
    return dict(collections.Counter(word for line in lines for word in line.split()))


def completed_checkpoints(client: Any, job_id: bytes, n: int) -> bool:
    """Whether the running job completed ``n`` checkpoints; fails the test if it already ended."""
    from millstream.runtime.execution_state import JobStatus

    summary = client.status(job_id)
    assert not JobStatus.from_proto(summary.status).is_terminal(), summary
    return bool(summary.checkpoints.num_completed >= n)


class ProcessCluster:
    """A JobManager process and TaskManager processes on this machine, as a test module starts them
    (``cluster start`` starts the same two; see :func:`session_cluster` for the CLI's way). The
    JobManager serves gRPC on a free port (and REST on one with ``rest``); every process gets
    ``options`` and ``heartbeats``, the JobManager ``jobmanager_options`` too, each TaskManager
    ``slots`` x ``tasks_per_slot`` and ``taskmanager_options``. Logs: ``directory/jobmanager.log``,
    ``directory/taskmanager-<n>.log``. As a context manager: started with ``taskmanagers`` TaskManagers
    registered, stopped (paused ones resumed) on exit."""

    def __init__(self, directory: Any, *, slots: int = 2, tasks_per_slot: int = 2, rest: bool = False,
                 options: Mapping[str, str] | None = None, jobmanager_options: Mapping[str, str] | None = None,
                 taskmanager_options: Mapping[str, str] | None = None, heartbeats: list[str] | None = None,
                 taskmanagers: int = 0) -> None:
        self.directory = directory
        self.slots, self.tasks_per_slot, self.rest = slots, tasks_per_slot, rest
        self.initial_taskmanagers = taskmanagers
        self.heartbeats = HEARTBEATS if heartbeats is None else heartbeats
        options = dict(options or {})
        if test_placement():
            options.setdefault("millstream.spark.task-placement", str(test_placement()))
        common = [f"-D{k}={v}" for k, v in options.items()]
        self.jobmanager_flags = [*common, *(f"-D{k}={v}" for k, v in (jobmanager_options or {}).items())]
        self.taskmanager_flags = [*common, *(f"-D{k}={v}" for k, v in (taskmanager_options or {}).items())]
        self.jobmanager_log = directory / "jobmanager.log"
        self.jobmanager: "subprocess.Popen[bytes] | None" = None
        self.taskmanagers: list["subprocess.Popen[bytes]"] = []
        self.address = ""
        self.rest_url = ""

    def __enter__(self) -> "ProcessCluster":
        try:
            self.start(self.initial_taskmanagers)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, taskmanagers: int = 0) -> "ProcessCluster":
        """Starts the JobManager, then ``taskmanagers`` TaskManagers, and waits until they registered."""
        import re

        ready = self.directory / "jm.address"
        rest = ["-Drest.port=0", "-Drest.bind-address=127.0.0.1"] if self.rest else []
        self.jobmanager = spawn_module(
            ["millstream.jobmanager.jobmanager", "--ready-file", str(ready), "-Djobmanager.rpc.port=0",
             "-Djobmanager.rpc.address=127.0.0.1", *rest, *self.jobmanager_flags, *self.heartbeats], self.jobmanager_log)
        self.address = poll_for(lambda: ready.exists() and ready.read_text().strip(), 60, what="the JobManager")
        if self.rest:
            self.rest_url = poll_for(lambda: re.search(r"REST API serving at (http://\S+)", self.jobmanager_log.read_text()),
                                     10, what="the REST URL").group(1)
        if taskmanagers:
            self.add_taskmanagers(taskmanagers)
            self.wait_registered()
        return self

    def add_taskmanagers(self, n: int) -> list["subprocess.Popen[bytes]"]:
        """Starts ``n`` more TaskManagers (not waiting for them)."""
        started = []
        for _ in range(n):
            log = self.directory / f"taskmanager-{len(self.taskmanagers)}.log"
            started.append(spawn_module(
                ["millstream.taskmanager.taskmanager", "--jobmanager", self.address,
                 f"-Dtaskmanager.numberOfTaskSlots={self.slots}", f"-Dmillstream.spark.tasks-per-slot={self.tasks_per_slot}",
                 *self.taskmanager_flags, *self.heartbeats], log))
            self.taskmanagers.append(started[-1])
        return started

    def alive(self) -> list["subprocess.Popen[bytes]"]:
        return [tm for tm in self.taskmanagers if tm.poll() is None]

    def wait_registered(self, timeout: float = 240) -> None:
        """Waits until exactly the live TaskManagers are registered, with every slot free."""
        from millstream.client.cluster_client import ClusterClient

        live = len(self.alive())
        with ClusterClient(self.address) as client:
            poll_for(lambda: client.overview().taskmanagers == live and all_slots_free(client), timeout, interval=0.5,
                     what=f"{live} registered TaskManagers with free slots")

    def ensure_taskmanagers(self, n: int) -> list["subprocess.Popen[bytes]"]:
        """Starts TaskManagers until ``n`` run, waits until exactly the live ones are registered
        with free slots, and returns them."""
        self.add_taskmanagers(n - len(self.alive()))
        self.wait_registered()
        return self.alive()

    def stop(self) -> None:
        import signal

        for tm in self.taskmanagers:  # a paused one would not stop
            if tm.poll() is None:
                os.kill(tm.pid, signal.SIGCONT)
        stop_processes([p for p in [self.jobmanager, *self.taskmanagers] if p is not None])


@contextlib.contextmanager
def session_cluster(directory: Any, *args: str, timeout: float = 180) -> Iterator[tuple[dict[str, str], str]]:
    """``millstream cluster start *args`` with its state in ``directory``; yields the environment
    that points the CLI at it and what ``cluster start`` printed; ``cluster stop`` after the block
    (its failure fails the test)."""
    env = {**os.environ, "MILLSTREAM_CLUSTER_DIR": str(directory)}
    env.pop("MILLSTREAM_JOBMANAGER", None)
    started = cli("cluster", "start", *args, env=env, timeout=timeout)
    assert started.returncode == 0, started.stderr + started.stdout
    try:
        yield env, started.stdout
    finally:
        stopped = cli("cluster", "stop", env=env, timeout=60)
        assert stopped.returncode == 0, stopped.stderr


def cli(*args: str, env: Mapping[str, str] | None = None, timeout: float = 180) -> "subprocess.CompletedProcess[str]":
    """``millstream *args`` (python -m millstream.client.cli), its output captured as text."""
    return subprocess.run([sys.executable, "-m", "millstream.client.cli", *args], env=env, capture_output=True,
                          text=True, timeout=timeout)




class Rest:
    """A JSON client of a JobManager's REST API at ``url``."""

    def __init__(self, url: str) -> None:
        self.url = url

    def call(self, path: str, method: str = "GET", body: Any = None) -> tuple[int, Any]:
        import json
        import urllib.error
        import urllib.request

        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"} if data else {})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def get(self, path: str) -> Any:
        status, body = self.call(path)
        assert status == 200, (path, status, body)
        return body


HISTORY_SIZE_KEY, HISTORY_SIZE = "web.exception-history-size", 3  # rest_cluster's WEB_EXCEPTION_HISTORY_SIZE


def rest_cluster(directory: Any) -> Iterator[tuple[Any, Rest]]:
    """A JobManager process with its REST API on a free port and one TaskManager (2 slots): a
    ClusterClient of it and a :class:`Rest` client, until the generator closes."""
    from millstream.client.cluster_client import ClusterClient

    options = {"execution.checkpointing.dir": str(directory / "checkpoints"), HISTORY_SIZE_KEY: str(HISTORY_SIZE)}
    with ProcessCluster(directory, rest=True, jobmanager_options=options, taskmanagers=1) as cluster, \
            ClusterClient(cluster.address) as client:
        yield client, Rest(cluster.rest_url)


ROOT = Path(__file__).resolve().parents[2]  # the repository
EXAMPLES = ROOT / "examples"



def run_example(name: str, *args: str, timeout: float = 240) -> list[str]:
    env = dict(os.environ)
    env.pop("MILLSTREAM_JOBMANAGER", None)
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.splitlines()
