"""Helpers for integration tests: a shared SparkHost, mini-clusters with fast heartbeats, polling."""
from __future__ import annotations

import collections
import contextlib
import os
import subprocess
import sys
import time
from typing import Any, Callable, Iterator, TypeVar

from millstream.runtime import config as cfg

T = TypeVar("T")

FAST = {
    "heartbeat.interval": "200 ms",
    "heartbeat.timeout": "3 s",
    "millstream.rpc.timeout": "5 s",
}


def fast_config(**overrides: str) -> cfg.Configuration:
    values = dict(FAST)
    values.update({k.replace("__", "."): v for k, v in overrides.items()})
    return cfg.Configuration.from_dict(values)


@contextlib.contextmanager
def mini_cluster(num_slots: int, tasks_per_slot: int, config: cfg.Configuration | None = None,
                 spark_slots: int | None = None) -> Iterator[Any]:
    """A module's MiniCluster (fast heartbeats unless ``config`` says otherwise) on its own
    SparkHost of ``spark_slots`` (default ``num_slots``) slots, stopped after it."""
    from millstream.client.minicluster import MiniCluster
    from millstream.taskmanager.spark.host import SparkHost

    host = SparkHost(slots=spark_slots or num_slots, tasks_per_slot=tasks_per_slot)
    host.start()
    try:
        with MiniCluster(config or fast_config(), num_slots=num_slots, spark=host) as mc:
            yield mc
    finally:
        host.stop()


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
