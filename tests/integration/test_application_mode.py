"""``millstream run-application`` (Flink's application mode) with real processes: the command is the
JobManager, runs the program's main, and exits with the job's status; with HA a standby that takes
over after the leader's ``kill -9`` recovers the job and does not run the program again."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Optional

import grpc

from millstream.client.application_core import application_job_id
from millstream.client.cluster_client import ClusterClient, LeaderResolver
from millstream.runtime import config as cfg
from millstream.runtime.execution_state import JobStatus

from .harness import poll_for, spawn_module, stop_processes
from .jobs import assert_exactly_once
from .zookeeper import ha_config

CLI = [sys.executable, "-m", "millstream.client.cli"]
FAST = ["-Djobmanager.rpc.address=127.0.0.1", "-Djobmanager.rpc.port=0", "-Drest.port=0",
        "-Dheartbeat.interval=300 ms", "-Dheartbeat.timeout=3 s", "-Dmillstream.rpc.timeout=5 s"]

WORDS = textwrap.dedent("""\
    import sys
    from millstream.common import Encoder
    from millstream.datastream import StreamExecutionEnvironment
    from millstream.datastream.connectors.file_system import FileSink

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    (env.from_collection(["a b", "b c", "c a", "a a"])
        .flat_map(lambda line: line.split())
        .map(lambda w: (w, 1))
        .key_by(lambda t: t[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .map(lambda t: f"{t[0]},{t[1]}")
        .sink_to(FileSink.for_row_format(sys.argv[1], Encoder.simple_string_encoder()).build()))
    env.execute("application words")
    """)

FAILING = textwrap.dedent("""\
    from millstream.datastream import StreamExecutionEnvironment

    def check(x):
        if x == 3:
            raise ValueError(f"record {x} is not wanted here")
        return x

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.from_collection([1, 2, 3, 4]).map(check).print()
    env.execute("application failing")
    """)

# test_failover's keyed running count (tests/integration/jobs.py), as a program: the keys' exact
# output is known; slow while the marker exists; each run of main appends a line to the runs file.
COUNTING = textwrap.dedent("""\
    import os, sys, time
    from millstream.common import Encoder, WatermarkStrategy
    from millstream.common.restart_strategy import RestartStrategies
    from millstream.datastream import MapFunction, StreamExecutionEnvironment
    from millstream.datastream.connectors.datagen import DataGeneratorSource
    from millstream.datastream.connectors.file_system import FileSink

    out, count, slow, runs = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    with open(runs, "a") as f:
        f.write(f"{os.getpid()}\\n")
    KEYS = 7

    class Throttle(MapFunction):
        def open(self, runtime_context):
            self.seen, self.slow = 0, True

        def map(self, value):
            if self.seen % 256 == 0:
                self.slow = os.path.exists(slow)
            self.seen += 1
            if self.slow:
                time.sleep(0.005)
            return value

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(300)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(20, 200))
    (env.from_source(DataGeneratorSource(lambda i: i, count), WatermarkStrategy.no_watermarks(), "numbers")
        .map(Throttle())
        .map(lambda i: (i % KEYS, 1))
        .key_by(lambda t: t[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .map(lambda t: f"{t[0]},{t[1]}")
        .sink_to(FileSink.for_row_format(out, Encoder.simple_string_encoder()).build()))
    env.execute("application counting")
    """)


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MILLSTREAM_JOBMANAGER"}
    env["MILLSTREAM_LOG_DIR"] = str(tmp_path / "log")
    return env


def _lines(out: Path) -> list[str]:
    return sorted(line for p in out.rglob("*") if p.is_file() and not p.name.startswith(".")
                  for line in p.read_text().splitlines())


def _pids_with(fragment: str) -> list[int]:
    """Processes whose command line contains ``fragment``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path("/proc", entry, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                state = Path("/proc", entry, "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if fragment in cmdline and state != "Z":
                found.append(int(entry))
    return found


def test_application_runs_its_job_to_the_end_and_exits_0(tmp_path: Path) -> None:
    script, out = tmp_path / "words.py", tmp_path / "out"
    script.write_text(WORDS)
    done = subprocess.run([*CLI, "run-application", "--taskmanagers", "1", *FAST, str(script), str(out)],
                          env=_env(tmp_path), capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _lines(out) == ["a,1", "a,2", "a,3", "a,4", "b,1", "b,2", "c,1", "c,2"]
    assert "Started 1 local TaskManager" in done.stderr
    assert re.search(r"Job application words \([0-9a-f]{32}\) FINISHED", done.stderr), done.stderr


def test_a_failing_job_exits_non_zero_naming_the_cause(tmp_path: Path) -> None:
    script = tmp_path / "failing.py"
    script.write_text(FAILING)
    done = subprocess.run([*CLI, "run-application", "--taskmanagers", "1", *FAST, str(script)],
                          env=_env(tmp_path), capture_output=True, text=True, timeout=240)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the application did not finish (exit code 1)" in done.stderr
    assert re.search(r"Job application failing \([0-9a-f]{32}\) FAILED: .*ValueError: record 3 is not wanted here",
                     done.stderr), done.stderr


def test_a_program_that_runs_no_job_fails(tmp_path: Path) -> None:
    script = tmp_path / "nothing.py"
    script.write_text("print('no job here')\n")
    done = subprocess.run([*CLI, "run-application", *FAST, str(script)], env=_env(tmp_path), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "no job here" in done.stdout
    assert "never called execute()" in done.stderr


def test_local_taskmanagers_end_with_a_killed_application(tmp_path: Path) -> None:
    """``kill -9`` of the application process leaves no TaskManager of its own behind."""
    script, out = tmp_path / "counting.py", tmp_path / "out"
    script.write_text(COUNTING)
    slow, runs = tmp_path / "slow", tmp_path / "runs"
    slow.touch()
    log = open(tmp_path / "app.log", "ab")
    port = _free_port()
    app = subprocess.Popen([*CLI, "run-application", "--taskmanagers", "1", *FAST, f"-Djobmanager.rpc.port={port}",
                            str(script), str(out), "100000", str(slow), str(runs)],
                           env=_env(tmp_path), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        target = f"--jobmanager 127.0.0.1:{port}"
        poll_for(lambda: _pids_with(target), 60, 0.2, "the application's TaskManager")
        poll_for(lambda: runs.exists(), 60, 0.2, "the program's main")
        os.kill(app.pid, signal.SIGKILL)
        app.wait(10)
        poll_for(lambda: not _pids_with(target), 30, 0.2, "the TaskManager to end with its application")
    finally:
        if app.poll() is None:
            app.kill()
        for pid in _pids_with(f"127.0.0.1:{port}"):
            os.kill(pid, signal.SIGKILL)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _application(tmp_path: Path, name: str, options: list[str], args: list[str]) -> tuple["subprocess.Popen[bytes]", Path]:
    log = tmp_path / f"{name}.log"
    proc = subprocess.Popen([*CLI, "run-application", *FAST, *options, *args], env=_env(tmp_path),
                            stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)
    return proc, log


def test_ha_standby_recovers_the_job_without_running_the_program_again(tmp_path: Path, zookeeper_server) -> None:
    """Two application processes with ZooKeeper HA; the leader is killed with ``kill -9`` during
    the job: the standby recovers it from its checkpoint and finishes it (output exactly once, exit
    0), and the program's main ran once."""
    conf = ha_config(zookeeper_server, tmp_path / "ha", cluster_id="/application-test")
    options = [f"-D{k}={v}" for k, v in conf.to_dict(as_strings=True).items()]
    options.append(f"-Dexecution.checkpointing.dir={tmp_path / 'checkpoints'}")
    script, out, slow, runs = tmp_path / "counting.py", tmp_path / "out", tmp_path / "slow", tmp_path / "runs"
    script.write_text(COUNTING)
    slow.touch()
    count = 20000  # slow (~400 records/s) until the leader is killed, then fast
    args = [str(script), str(out), str(count), str(slow), str(runs)]
    taskmanager = spawn_module(["millstream.taskmanager.taskmanager", "-Dtaskmanager.numberOfTaskSlots=4",
                                "-Dmillstream.spark.tasks-per-slot=3", *FAST[3:], *options], tmp_path / "tm.log")
    first, first_log = _application(tmp_path, "first", options, args)
    second: Optional[subprocess.Popen[bytes]] = None
    job_id = application_job_id(None, True, "/application-test")
    assert job_id is not None
    try:
        poll_for(lambda: runs.exists(), 90, 0.2, "the first application's main")
        with ClusterClient(resolver=LeaderResolver.from_configuration(conf, None)) as client:
            def checkpointed() -> bool:
                try:
                    summary = client.status(job_id)
                except grpc.RpcError as exc:  # main runs, the job is not submitted yet
                    if exc.code() is grpc.StatusCode.NOT_FOUND:
                        return False
                    raise
                return JobStatus.from_proto(summary.status) is JobStatus.RUNNING and summary.checkpoints.num_completed >= 2
            poll_for(checkpointed, 180, 0.3, "two completed checkpoints of the application's job")
        second, second_log = _application(tmp_path, "second", options, args)
        poll_for(lambda: "waiting as a standby" in second_log.read_text(errors="replace"), 60, 0.2, "the standby")
        assert first.poll() is None and "FINISHED" not in first_log.read_text(errors="replace"), "the job ended too soon"
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(10)
        slow.unlink()  # the recovered job runs fast to its end
        assert second.wait(240) == 0, second_log.read_text(errors="replace")[-5000:]
        text = second_log.read_text(errors="replace")
        assert f"Job {job_id.hex()} of this application was recovered from high-availability storage" in text
        assert f"({job_id.hex()}) FINISHED" in text
        assert len(runs.read_text().splitlines()) == 1, "the program's main ran again after the failover"
        assert_exactly_once(out, count)
        # A third process of the same application finds the recorded result and runs nothing.
        third, third_log = _application(tmp_path, "third", options, args)
        assert third.wait(120) == 0, third_log.read_text(errors="replace")[-3000:]
        assert "already ended FINISHED" in third_log.read_text(errors="replace")
        assert len(runs.read_text().splitlines()) == 1
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        stop_processes([taskmanager])


def test_a_taken_port_is_one_line_and_exit_1(tmp_path: Path) -> None:
    import socket

    script = tmp_path / "words.py"
    script.write_text(WORDS)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([*CLI, "run-application", *FAST, f"-Djobmanager.rpc.port={port}", str(script), "out"],
                              env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        f"millstream run-application: error: JobManager cannot listen on 127.0.0.1:{port}: address already in use"]
