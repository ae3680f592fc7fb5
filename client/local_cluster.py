"""``millstream cluster start|stop``: a session cluster of local processes (JobManager + TaskManagers).

The processes' pids, addresses and logs live in a cluster directory (``MILLSTREAM_CLUSTER_DIR``,
default ``~/.millstream/cluster``), so ``stop`` and the job commands find them again.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

from millstream.client.cluster_client import ClusterClient


class ClusterError(RuntimeError):
    pass


def cluster_dir() -> str:
    return os.environ.get("MILLSTREAM_CLUSTER_DIR") or os.path.join(os.path.expanduser("~"), ".millstream", "cluster")


def _state_path() -> str:
    return os.path.join(cluster_dir(), "cluster.json")


def read_state() -> dict[str, Any] | None:
    try:
        with open(_state_path()) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _spawn(args: list[str], log_path: str) -> subprocess.Popen:
    log = open(log_path, "ab")
    return subprocess.Popen(
        [sys.executable, *args], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
    )


def start(taskmanagers: int, slots: int, port: int, dynamic: list[str], config_file: str | None, timeout_s: float = 180.0) -> dict[str, Any]:
    state = read_state()
    if state and any(_alive(p) for p in state.get("pids", [])):
        raise ClusterError(f"a cluster is already running (JobManager {state['jobmanager']}); stop it first")
    directory = cluster_dir()
    logs = os.path.join(directory, "log")
    os.makedirs(logs, exist_ok=True)
    ready = os.path.join(directory, "jobmanager.address")
    if os.path.exists(ready):
        os.remove(ready)
    common = (["--config", config_file] if config_file else []) + [f"-D{d}" for d in dynamic]
    jm = _spawn(
        ["-m", "millstream.jobmanager.jobmanager", "--ready-file", ready, *common, f"-Djobmanager.rpc.port={port}"],
        os.path.join(logs, "jobmanager.log"),
    )
    pids = [jm.pid]
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(ready):
        if jm.poll() is not None:
            raise ClusterError(f"the JobManager exited with code {jm.returncode}; see {logs}/jobmanager.log")
        if time.monotonic() > deadline:
            _kill(pids)
            raise ClusterError("the JobManager did not start in time")
        time.sleep(0.1)
    with open(ready) as f:
        address = f.read().strip()
    tms = []
    for i in range(taskmanagers):
        tm = _spawn(
            ["-m", "millstream.taskmanager.taskmanager", "--jobmanager", address, *common, f"-Dtaskmanager.numberOfTaskSlots={slots}"],
            os.path.join(logs, f"taskmanager-{i}.log"),
        )
        tms.append(tm)
        pids.append(tm.pid)
    state = {"jobmanager": address, "pids": pids, "log_dir": logs}
    with open(_state_path(), "w") as f:
        json.dump(state, f)
    with ClusterClient(address) as client:
        while client.overview().taskmanagers < taskmanagers:
            dead = [t for t in tms if t.poll() is not None]
            if dead:
                raise ClusterError(f"a TaskManager exited with code {dead[0].returncode}; see {logs}")
            if time.monotonic() > deadline:
                raise ClusterError(f"only {client.overview().taskmanagers} of {taskmanagers} TaskManagers registered in time; see {logs}")
            time.sleep(0.2)
    return state


def _kill(pids: list[int], grace_s: float = 15.0) -> None:
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
        for pid in pids:  # reap our own children so they do not linger as zombies
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def stop() -> bool:
    state = read_state()
    if not state:
        return False
    _kill(list(reversed(state.get("pids", []))))
    os.remove(_state_path())
    return True
