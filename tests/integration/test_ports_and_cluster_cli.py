"""Processes own their ports, a failed `cluster start` leaves nothing behind, `cluster stop` signals
only its own processes (real JobManager and TaskManager processes, the real CLI)."""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from millstream.client.session_cluster import process_identity

from .harness import poll_for

pytestmark = pytest.mark.timeout(240)


def _env(cluster_dir: Path) -> dict[str, str]:
    env = {**os.environ, "MILLSTREAM_CLUSTER_DIR": str(cluster_dir)}
    env.pop("MILLSTREAM_JOBMANAGER", None)
    return env


def _cli(*args: str, env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "millstream.client.cli", *args], env=env, capture_output=True, text=True, timeout=timeout)


def _process(module: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", module, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if " error: " in line]


def _listening(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture
def jobmanager(tmp_path):
    """A JobManager process on a free port; yields its address (host:port)."""
    ready = tmp_path / "jm.address"
    process = _process("millstream.jobmanager.jobmanager", "--ready-file", str(ready), "-Djobmanager.rpc.port=0")
    try:
        poll_for(lambda: ready.exists() and ready.read_text(), 60, what="the JobManager to serve")
        yield ready.read_text().strip()
    finally:
        process.terminate()
        process.communicate(timeout=30)


def test_a_second_jobmanager_on_a_taken_port_fails_with_one_line(jobmanager) -> None:
    port = jobmanager.rsplit(":", 1)[1]
    started = time.monotonic()
    second = _process("millstream.jobmanager.jobmanager", f"-Djobmanager.rpc.port={port}")
    _, stderr = second.communicate(timeout=60)
    assert second.returncode == 1
    assert time.monotonic() - started < 30
    assert _error_lines(stderr) == [f"millstream jobmanager: error: JobManager cannot listen on localhost:{port}: address already in use"]
    assert "Traceback" not in stderr


def test_a_taskmanager_on_a_taken_port_fails_before_starting_spark(jobmanager) -> None:
    port = jobmanager.rsplit(":", 1)[1]
    started = time.monotonic()
    tm = _process("millstream.taskmanager.taskmanager", "--jobmanager", jobmanager, f"-Dtaskmanager.rpc.port={port}")
    _, stderr = tm.communicate(timeout=60)
    assert tm.returncode == 1
    assert time.monotonic() - started < 10  # Spark alone takes longer to start
    [line] = _error_lines(stderr)
    assert line.startswith("millstream taskmanager: error: TaskManager ")
    assert line.endswith(f"cannot listen on 127.0.0.1:{port}: address already in use")


def _descendants(pid: int) -> list[int]:
    """``pid``'s processes below it: each thread's children (the JVM starts Python's from a thread of its own)."""
    children = []
    for thread in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children += [int(child) for child in (thread / "children").read_text().split()]
        except OSError:  # the thread ended meanwhile
            pass
    return [descendant for child in children for descendant in [child, *_descendants(child)]]


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:  # ended meanwhile
        return ""


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process tree from /proc")
def test_a_taskmanager_registers_its_slots_only_once_its_spark_python_workers_run(jobmanager, tmp_path) -> None:
    """A job deployed into a TaskManager's slots the moment it registers (a reactive-mode rescale
    onto a TaskManager that just joined) must not wait for Spark to start its Python daemon and
    workers: when the slots are registered (the ready file) the daemon runs and has forked a
    pooled worker, and the log says how long the warm-up took."""
    ready = tmp_path / "tm.address"
    tm = _process("millstream.taskmanager.taskmanager", "--jobmanager", jobmanager, "--ready-file", str(ready),
                  "-Dtaskmanager.numberOfTaskSlots=2", "-Dtaskmanager.rpc.port=0")
    try:
        poll_for(ready.exists, 180, interval=0.05, what="the TaskManager to register its slots")
        daemons = [pid for pid in _descendants(tm.pid) if "millstream.taskmanager.spark.daemon" in _command(pid)]
        # the daemon and the workers it forked carry its command line; each slot got a warm worker
        assert len(daemons) >= 1 + 2, f"Spark's Python processes at registration: {daemons}"
    finally:
        tm.terminate()
        _, stderr = tm.communicate(timeout=60)
    warmed = re.search(r"Spark's session started in [\d.]+ s and its workers warmed in ([\d.]+) s: registering", stderr)
    assert warmed and float(warmed.group(1)) > 0, stderr


def test_unknown_keys_given_to_a_process_warn_with_the_closest_key(tmp_path) -> None:
    ready = tmp_path / "jm.address"
    jm = _process("millstream.jobmanager.jobmanager", "--ready-file", str(ready), "-Djobmanager.rpc.port=0",
                  "-Dheartbeat.timout=5 s", "-Dtaskmanager.numberOfTaskSlot=2", "-Dcompletely.unrelated=1")
    try:
        poll_for(ready.exists, 60, what="the JobManager to serve")
    finally:
        jm.terminate()
        _, stderr = jm.communicate(timeout=30)
    assert "unknown configuration key 'heartbeat.timout' (from -D): did you mean 'heartbeat.timeout'?" in stderr
    assert "did you mean 'taskmanager.numberOfTaskSlots'?" in stderr
    assert "configuration key 'completely.unrelated' is not a Millstream option; this process ignores it" in stderr

    bad = _process("millstream.jobmanager.jobmanager", "-Djobmanager.rpc.port=-")
    _, stderr = bad.communicate(timeout=60)
    assert bad.returncode == 1
    assert stderr.strip() == "millstream jobmanager: error: jobmanager.rpc.port: expected an integer, got '-'"


def test_cluster_start_on_a_taken_port_fails_and_names_the_address(jobmanager, tmp_path) -> None:
    port = jobmanager.rsplit(":", 1)[1]
    result = _cli("cluster", "start", "--taskmanagers", "1", "--port", port, env=_env(tmp_path / "second"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Cluster started" not in result.stdout
    assert f"JobManager cannot listen on localhost:{port}: address already in use" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "second" / "cluster.json").exists()


def test_a_failed_cluster_start_stops_what_it_started_and_prints_the_reason(tmp_path) -> None:
    directory = tmp_path / "cluster"
    result = _cli("cluster", "start", "--taskmanagers", "1", "--slots", "0", "--port", "0", env=_env(directory))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "taskmanager.numberOfTaskSlots: expected at least 1, got 0" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    # The JobManager it had started is gone, and nothing is recorded as running.
    jobmanager_address = (directory / "jobmanager.address").read_text().strip()
    poll_for(lambda: not _listening(jobmanager_address), 20, what="the JobManager to stop")
    assert not (directory / "cluster.json").exists()
    assert "No cluster is running." in _cli("cluster", "stop", env=_env(directory)).stdout


def test_cluster_stop_does_not_kill_a_process_that_reuses_a_recorded_pid(tmp_path) -> None:
    env = _env(tmp_path / "cluster")
    state_file = tmp_path / "cluster" / "cluster.json"
    started = _cli("cluster", "start", "--taskmanagers", "0", "--port", "0", env=env)
    assert started.returncode == 0, started.stderr
    jm_pid = json.loads(state_file.read_text())["pids"][0]
    assert process_identity(jm_pid) is not None
    # Stop kills the cluster's own processes...
    assert _cli("cluster", "stop", env=env).stdout.strip() == "Cluster stopped."
    poll_for(lambda: process_identity(jm_pid) is None, 20, what="the JobManager to exit")

    # ...but not another program that got a recorded pid after the cluster's process died.
    started = _cli("cluster", "start", "--taskmanagers", "0", "--port", "0", env=env)
    assert started.returncode == 0, started.stderr
    state = json.loads(state_file.read_text())
    jm_pid = state["pids"][0]
    os.kill(jm_pid, 9)
    poll_for(lambda: process_identity(jm_pid) is None, 20, what="the JobManager to die")
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        # The OS reusing the pid is simulated by pointing the record at the bystander's pid.
        state["pids"] = [bystander.pid]
        for entry in state["processes"]:
            entry["pid"] = bystander.pid
        state_file.write_text(json.dumps(state))
        stopped = _cli("cluster", "stop", env=env)
        assert stopped.returncode == 0, stopped.stderr
        time.sleep(0.5)
        assert bystander.poll() is None, "cluster stop killed a process it did not start"
    finally:
        bystander.kill()
        bystander.wait()


def test_cluster_start_on_a_fixed_port_starts_its_taskmanagers_beside_the_jobmanager(tmp_path) -> None:
    """With the port known up front the TaskManagers start with the JobManager (their Spark boots
    meanwhile) and find it from the same configuration; start returns once they registered."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = _env(tmp_path / "cluster")
    started = _cli("cluster", "start", "--taskmanagers", "2", "--slots", "1", "--port", str(port), "-Drest.port=0", env=env)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        assert f"JobManager at localhost:{port}, 2 TaskManagers" in started.stdout, started.stdout
        url = re.search(rf"JobManager localhost:{port}: web UI and REST API at (http://localhost:\d+)\n", started.stdout)
        assert url, started.stdout  # its TaskManagers started first: the URL is still the JobManager's
        with urllib.request.urlopen(url.group(1) + "/overview", timeout=10) as overview:
            assert json.loads(overview.read())["taskmanagers"] == 2
        logs = tmp_path / "cluster" / "log"
        for i in range(2):  # each registered with the JobManager it was pointed at, not another
            assert f"registered at localhost:{port}" in (logs / f"taskmanager-{i}.log").read_text()
        # Their Spark JVMs boot on the C1 compiler and the serial collector (half the CPU of a default boot).
        taskmanagers = json.loads((tmp_path / "cluster" / "cluster.json").read_text())["pids"][1:]
        for command in _spark_jvm_commands(taskmanagers):
            assert "-XX:TieredStopAtLevel=1" in command and "-XX:+UseSerialGC" in command, command
    finally:
        assert "Cluster stopped." in _cli("cluster", "stop", env=env).stdout


def _spark_jvm_commands(pids: list[int]) -> list[str]:
    """The command line of each process's Spark JVM (its child running java)."""
    commands = []
    for pid in pids:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        java = [Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode() for child in children]
        java = [command for command in java if "java" in command.split(" ", 1)[0]]
        assert len(java) == 1, (pid, java)
        commands.append(java[0])
    return commands


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads process command lines from /proc")
def test_a_users_spark_driver_java_options_replace_the_default_ones(tmp_path) -> None:
    env = _env(tmp_path / "cluster")
    started = _cli("cluster", "start", "--taskmanagers", "1", "--slots", "1", "--port", "0", "-Drest.port=0",
                   "-Dmillstream.spark.conf=spark.driver.extraJavaOptions=-Dmillstream.test.option=1", env=env)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        [command] = _spark_jvm_commands(json.loads((tmp_path / "cluster" / "cluster.json").read_text())["pids"][1:])
        assert "-Dmillstream.test.option=1" in command and "TieredStopAtLevel" not in command, command
    finally:
        assert "Cluster stopped." in _cli("cluster", "stop", env=env).stdout
