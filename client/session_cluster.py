"""``millstream cluster start|stop``: a session cluster of local processes (JobManager + TaskManagers).

``cluster start --ha`` starts a ZooKeeper-backed cluster instead: a local ZooKeeper server (Debian's
``zookeeper`` package; data in ``<cluster dir>/zookeeper``), two JobManagers (the elected leader and
a standby; HA storage in ``<cluster dir>/ha``) and the TaskManagers, all with the
``high-availability.*`` options; ``cluster stop`` stops all of it (ZooKeeper last).

The processes' pids, addresses and logs live in a cluster directory (``MILLSTREAM_CLUSTER_DIR``,
default ``~/.millstream/cluster``), so ``stop`` and the job commands find them again. Each pid is
recorded with its process's identity (start time and command line), so ``stop`` never signals a
process that merely reuses the pid of one that is gone.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from millstream.client.cluster_client import ClusterClient
from millstream.runtime import config as cfg
from millstream.runtime.config import ConfigurationError, parse_host_port
from millstream.runtime.entrypoint.process import ERROR_PREFIX
from millstream.runtime.rpc.security import client_credentials

HA_JOBMANAGERS = 2  # the leader and one standby
# How often start checks its processes' ready files (a stat each): a start's last step, once
# Spark is up, is a TaskManager's registration of some 10 ms.
_READY_POLL_S = 0.01


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


def process_identity(pid: int) -> str | None:
    """What tells this process apart from a later one with the same pid: its start time and its
    command line (``None`` if no process has this pid)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").strip()
    except FileNotFoundError:
        return None
    except OSError:  # no /proc (macOS): ask ps
        result = subprocess.run(["ps", "-o", "lstart=,command=", "-p", str(pid)], capture_output=True, text=True)
        return result.stdout.strip() or None
    # Fields 3 (state) and 22 (start time, in clock ticks since boot) follow the command name.
    fields = stat[stat.rindex(b")") + 2:].split()
    if fields[0] == b"Z":  # exited, not yet reaped by its parent: gone for our purpose
        return None
    start_ticks = fields[19]
    return f"{start_ticks.decode()} {cmdline.decode(errors='replace')}"


def _is_ours(entry: dict[str, Any]) -> bool:
    """Whether the process recorded in ``entry`` still runs (and is the one we started)."""
    identity = process_identity(entry["pid"])
    return identity is not None and identity == entry["identity"]


def _recorded(state: dict[str, Any]) -> list[dict[str, Any]]:
    return list(state.get("processes", []))


def _spawn(args: list[str], log_path: str) -> tuple[subprocess.Popen, int]:
    """Starts a process logging to ``log_path``; returns it and the log's offset where it starts.
    Its own rotated log file (runtime/entrypoint/log_files.py) goes to the same folder unless env.log.dir or
    MILLSTREAM_LOG_DIR says otherwise."""
    env = {**os.environ, "MILLSTREAM_LOG_DIR": os.environ.get("MILLSTREAM_LOG_DIR") or os.path.dirname(log_path)}
    with open(log_path, "ab") as log:
        offset = log.tell()
        process = subprocess.Popen(
            [sys.executable, *args], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            env=env,
        )
    return process, offset


def _failure_reason(log_path: str, offset: int) -> str:
    """The one-line error a process printed before exiting (else the last line of its log)."""
    try:
        with open(log_path, "rb") as f:
            f.seek(offset)
            lines = [line.strip() for line in f.read().decode(errors="replace").splitlines() if line.strip()]
    except OSError:
        return f"no log at {log_path}"
    prefixes = tuple(ERROR_PREFIX.format(name=name) for name in ("jobmanager", "taskmanager"))
    errors = [line for line in lines if line.startswith(prefixes)]
    if errors:
        return errors[-1].split(": error: ", 1)[1]
    return lines[-1] if lines else "it printed nothing"


class _Starting:
    """The processes one ``start`` spawned so far: all are stopped if the start fails."""

    def __init__(self) -> None:
        self.processes: list[tuple[str, subprocess.Popen, str, int]] = []  # name, process, log, offset

    def spawn(self, name: str, args: list[str], log_path: str) -> subprocess.Popen:
        process, offset = _spawn(args, log_path)
        self.processes.append((name, process, log_path, offset))
        return process

    def check_alive(self) -> None:
        for name, process, log_path, offset in self.processes:
            if process.poll() is not None:
                reason = _failure_reason(log_path, offset)
                raise ClusterError(f"the {name} exited with code {process.returncode}: {reason} (log: {log_path})")

    def stop_all(self) -> None:
        for _, process, _, _ in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + 15.0
        for _, process, _, _ in reversed(self.processes):
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _start_zookeeper(directory: str) -> tuple[Any, list[str]]:
    """A local ZooKeeper server for an HA cluster, and the ``-D`` options that use it."""
    from millstream.runtime.ha.zookeeper_server import ZooKeeperServer, zookeeper_missing  # lazy: only for --ha

    missing = zookeeper_missing()
    if missing:
        raise ClusterError(f"--ha needs a ZooKeeper server: {missing}")
    server = ZooKeeperServer(Path(directory) / "zookeeper")
    try:
        server.start()
    except RuntimeError as exc:
        raise ClusterError(f"ZooKeeper did not start: {exc}") from None
    options = [
        "high-availability.type=zookeeper",
        f"high-availability.zookeeper.quorum={server.connect_string}",
        f"high-availability.storageDir={os.path.join(directory, 'ha')}",
    ]
    return server, options


def _ha_leader(dynamic: list[str], config_file: str | None, timeout_s: float) -> str:
    """The address the elected JobManager published in ZooKeeper."""
    from millstream.runtime.ha import HaError, create_ha_services  # lazy: kazoo (ZooKeeper), only for --ha

    conf = cfg.load_configuration(config_file, dynamic_properties=dynamic)
    try:
        with create_ha_services(conf, name="millstream-cluster-start") as services:
            retrieval = services.jobmanager_leader_retrieval()
            retrieval.start(None)
            return retrieval.current_leader(timeout_s).address
    except HaError as exc:
        raise ClusterError(f"no JobManager became leader within {timeout_s:.0f} s: {exc}") from None


def _credentials(dynamic: list[str], config_file: str | None) -> Any:
    """What this process presents to the cluster it started (its TLS files, the client token)."""
    return client_credentials(cfg.load_configuration(config_file, dynamic_properties=dynamic))


def start(taskmanagers: int, slots: int, port: int, dynamic: list[str], config_file: str | None, timeout_s: float = 180.0,
          ha: bool = False) -> dict[str, Any]:
    """Starts a JobManager and ``taskmanagers`` TaskManagers and waits until all registered; with
    ``ha``, a ZooKeeper server and two JobManagers (leader and standby, on ``port`` and ``port + 1``)
    first, and waits for a leader too.

    If any of them fails to start, every process started here is stopped and :class:`ClusterError`
    says which one failed and why (its one-line error, e.g. a taken port).
    """
    if taskmanagers < 0:
        raise ClusterError(f"--taskmanagers must be at least 0, got {taskmanagers}")
    state = read_state()
    if state and any(_is_ours(entry) for entry in _recorded(state)):
        raise ClusterError(f"a cluster is already running (JobManager {state['jobmanager']}); stop it first")
    directory = cluster_dir()
    logs = os.path.join(directory, "log")
    os.makedirs(logs, exist_ok=True)
    readies = [os.path.join(directory, "jobmanager.address" if i == 0 else f"jobmanager-{i}.address")
               for i in range(HA_JOBMANAGERS if ha else 1)]
    tm_readies = [os.path.join(directory, f"taskmanager-{i}.ready") for i in range(taskmanagers)]
    for ready in readies + tm_readies:
        if os.path.exists(ready):
            os.remove(ready)
    zookeeper = None
    if ha:
        zookeeper, ha_options = _start_zookeeper(directory)
        dynamic = [*ha_options, *dynamic]  # the user's -D come last: they win
    common = (["--config", config_file] if config_file else []) + [f"-D{d}" for d in dynamic]
    jm_only = _rest_bind_ports_for_ha(dynamic, config_file) if ha else []
    starting = _Starting()

    def spawn_taskmanagers(jobmanager: list[str]) -> None:
        for i in range(taskmanagers):
            starting.spawn(
                f"TaskManager {i}",
                ["-m", "millstream.taskmanager.launcher", *jobmanager, "--ready-file", tm_readies[i], *common,
                 f"-Dtaskmanager.numberOfTaskSlots={slots}"],
                os.path.join(logs, f"taskmanager-{i}.log"),
            )

    # The TaskManagers start with the JobManager, their Spark boot (seconds) overlapping its start,
    # and register once both are up, when they can find it: a fixed port names it before it runs,
    # and with HA they follow the leader ZooKeeper names.
    early = ha or port > 0
    try:
        deadline = time.monotonic() + timeout_s
        addresses, rest_urls = [], []
        for i, ready in enumerate(readies):
            name = "JobManager" if i == 0 else f"standby JobManager {i}"
            log_name = "jobmanager.log" if i == 0 else f"jobmanager-{i}.log"
            jm_port = port + i if port else 0
            starting.spawn(
                name,
                ["-m", "millstream.jobmanager.jobmanager", "--ready-file", ready, *common, *jm_only,
                 f"-Djobmanager.rpc.port={jm_port}"],
                os.path.join(logs, log_name),
            )
            _, _, jm_log, jm_offset = starting.processes[-1]
            if early and i == 0:  # they find it as it does: the same configuration, the same port (or ZooKeeper)
                spawn_taskmanagers([] if ha else [f"-Djobmanager.rpc.port={jm_port}"])
            while not os.path.exists(ready):
                starting.check_alive()
                if time.monotonic() > deadline:
                    raise ClusterError(f"the {name} did not start within {timeout_s:.0f} s (log: {logs}/{log_name})")
                time.sleep(_READY_POLL_S)
            with open(ready) as f:
                addresses.append(f.read().strip())
            rest_urls.append(_rest_url(jm_log, jm_offset))
        address = addresses[0]
        if ha:
            address = _ha_leader(dynamic, config_file, max(1.0, deadline - time.monotonic()))
        if not early:
            spawn_taskmanagers(["--jobmanager", address])
        # Each TaskManager writes its ready file once the JobManager has its slots: a stat per
        # poll here, where asking the JobManager would cost both processes CPU that Spark's boot
        # needs; the JobManager confirms once all are there.
        while not all(os.path.exists(ready) for ready in tm_readies):
            starting.check_alive()
            if time.monotonic() > deadline:
                registered = sum(os.path.exists(ready) for ready in tm_readies)
                raise ClusterError(f"only {registered} of {taskmanagers} TaskManagers registered within {timeout_s:.0f} s (logs: {logs})")
            time.sleep(_READY_POLL_S)
        with ClusterClient(address, credentials=_credentials(dynamic, config_file)) as client:
            while client.overview().taskmanagers < taskmanagers:
                starting.check_alive()
                if time.monotonic() > deadline:
                    raise ClusterError(
                        f"only {client.overview().taskmanagers} of {taskmanagers} TaskManagers registered within {timeout_s:.0f} s (logs: {logs})"
                    )
                time.sleep(_READY_POLL_S)
        starting.check_alive()
    except BaseException:
        starting.stop_all()
        if zookeeper is not None:
            zookeeper.stop()
        raise
    processes = [{"pid": p.pid, "identity": process_identity(p.pid)} for _, p, _, _ in starting.processes]
    if zookeeper is not None:  # first in the list: `stop` stops it last
        processes.insert(0, {"pid": zookeeper.proc.pid, "identity": process_identity(zookeeper.proc.pid)})
    state = {"jobmanager": ",".join(addresses) if ha else address, "processes": processes,
             "pids": [p["pid"] for p in processes], "log_dir": logs,
             "rest": dict(zip(addresses, rest_urls))}  # each JobManager's REST API / web UI ("" if none)
    if ha:
        state["ha"] = {"leader": address, "jobmanagers": addresses, "options": ha_options,
                       "zookeeper": zookeeper.connect_string if zookeeper is not None else ""}
    with open(_state_path(), "w") as f:
        json.dump(state, f)
    return state


def _rest_bind_ports_for_ha(dynamic: list[str], config_file: str | None) -> list[str]:
    """Two JobManagers on one host cannot share a REST port: unless ``rest.bind-port`` is set, each
    binds the first free port from ``rest.port`` on (Flink's ``rest.bind-port`` range)."""
    conf = cfg.load_configuration(config_file, dynamic_properties=dynamic)
    port = conf.get(cfg.REST_PORT)
    if cfg.REST_BIND_PORT in conf or port == 0:
        return []
    return [f"-D{cfg.REST_BIND_PORT.key}={port}-{min(port + 99, 65535)}"]


def _rest_url(log_path: str, offset: int) -> str:
    """The REST URL a JobManager printed on start (its ready file names its gRPC address only);
    "" when it runs without REST (the default port was taken)."""
    import re

    try:
        with open(log_path, "rb") as f:
            f.seek(offset)
            found = re.search(rb"REST API serving at (\S+)", f.read())
    except OSError:
        return ""
    return found.group(1).decode() if found else ""


_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "0.0.0.0", "ip6-localhost"}


def _same_address(a: str, b: str) -> bool:
    """Whether two ``host:port`` name the same local JobManager (``localhost`` and ``127.0.0.1`` do)."""
    import socket

    if "," in b:  # an HA cluster's JobManagers
        return any(_same_address(a, one.strip()) for one in b.split(","))
    try:
        (host_a, port_a), (host_b, port_b) = parse_host_port(a), parse_host_port(b)
    except ConfigurationError:
        return False
    local = _LOCAL_HOSTS | {socket.gethostname()}
    return port_a == port_b and (host_a == host_b or (host_a in local and host_b in local))


def register_added_taskmanager(jobmanager: str | None, pid: int | None = None) -> bool:
    """Records a TaskManager started by hand (``millstream taskmanager --jobmanager HOST:PORT``) in
    the cluster directory, when that cluster's JobManager is the one it joins: ``cluster stop``
    then stops it with the rest. Returns whether it was recorded."""
    import fcntl

    state = read_state()
    if not jobmanager or not state or not _same_address(jobmanager, state["jobmanager"]):
        return False
    pid = os.getpid() if pid is None else pid
    with open(os.path.join(cluster_dir(), "cluster.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # several TaskManagers may join at once
        state = read_state()
        if not state:
            return False
        state.setdefault("processes", []).append({"pid": pid, "identity": process_identity(pid)})
        state["pids"] = [p["pid"] for p in state["processes"]]
        tmp = _state_path() + f".{pid}"
        with open(tmp, "w") as f:
            json.dump(state, f)
        os.replace(tmp, _state_path())
    return True


def _kill(entries: list[dict[str, Any]], grace_s: float = 15.0) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``, to each recorded process that is still the one we started."""
    ours = [entry for entry in entries if _is_ours(entry)]
    for entry in ours:
        try:
            os.kill(entry["pid"], signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_is_ours(entry) for entry in ours):
        time.sleep(0.1)
    for entry in ours:
        if _is_ours(entry):
            try:
                os.kill(entry["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass


def stop() -> bool:
    """Stops the processes ``start`` recorded; False if no cluster was recorded."""
    state = read_state()
    if not state:
        return False
    _kill(list(reversed(_recorded(state))))
    os.remove(_state_path())
    return True
