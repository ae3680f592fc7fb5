"""``resourcemanager.type: process`` (Flink's active ResourceManager) on a real CLI session cluster:
a cluster without TaskManagers starts them when a job needs slots, stops them once idle for
resourcemanager.taskmanager-timeout, and a TaskManager that cannot start is reported once and
retried with back-off, not in a tight loop."""
from __future__ import annotations

import os
import re
import socket
import time
from pathlib import Path

from millstream.client.cluster_client import ClusterClient

from .harness import cli, poll_for, session_cluster

ROOT = Path(__file__).resolve().parents[2]
ON_DEMAND = ["--taskmanagers", "0", "--slots", "1", "--port", "0", "-Drest.port=0",
             "-Dresourcemanager.type=process", "-Dheartbeat.interval=300 ms", "-Dheartbeat.timeout=3 s"]


def _workers_running() -> list[int]:
    """Processes of TaskManagers started on demand (their resource id is on their command line)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path("/proc", entry, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                state = Path("/proc", entry, "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if "taskmanager.resource-id=taskmanager-ondemand-" in cmdline and state != "Z":
                found.append(int(entry))
    return found


def test_taskmanagers_start_for_a_job_and_stop_when_idle(tmp_path: Path) -> None:
    data, out = tmp_path / "in.txt", tmp_path / "out"
    data.write_text("to be or not to be\nthat is the question\n")
    with session_cluster(tmp_path / "cluster", *ON_DEMAND, "-Dresourcemanager.taskmanager-timeout=4 s") as (env, started):
        state_address = re.search(r"JobManager at (\S+),", started).group(1)  # type: ignore[union-attr]
        with ClusterClient(state_address) as client:
            assert client.overview().taskmanagers == 0
        done = cli("run", str(ROOT / "examples" / "word_count.py"), "--input", str(data), "--output", str(out),
                   "--parallelism", "2", env=env, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        counts = sorted(line for p in out.rglob("*") if p.is_file() and not p.name.startswith(".")
                        for line in p.read_text().splitlines())
        assert counts == ["(be,2)", "(is,1)", "(not,1)", "(or,1)", "(question,1)", "(that,1)", "(the,1)", "(to,2)"]
        log = (tmp_path / "cluster" / "log" / "jobmanager.log").read_text(errors="replace")
        assert len(re.findall(r"started TaskManager taskmanager-ondemand-\S+", log)) == 2  # 2 slots of 1: two
        with ClusterClient(state_address) as client:
            poll_for(lambda: client.overview().taskmanagers == 0, 60, 0.3, "the idle TaskManagers to stop")
        log = (tmp_path / "cluster" / "log" / "jobmanager.log").read_text(errors="replace")
        assert len(re.findall(r"stopping TaskManager \S+: idle for 4000 ms", log)) == 2
        poll_for(lambda: not _workers_running(), 30, 0.3, "the TaskManager processes to end")


def test_a_taskmanager_that_cannot_start_is_reported_once_and_retried_with_back_off(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        with session_cluster(tmp_path / "cluster", *ON_DEMAND, f"-Dtaskmanager.rpc.port={port}",
                             "-Dresourcemanager.start-worker.retry-interval=1 s") as (env, _):
            started = time.monotonic()
            done = cli("run", "-Dslot.request.timeout=10 s", str(ROOT / "examples" / "word_count.py"),
                       "--parallelism", "1", env=env, timeout=300)
            elapsed = time.monotonic() - started
            assert done.returncode != 0
            assert "not enough slots" in done.stdout + done.stderr
            log = (tmp_path / "cluster" / "log" / "jobmanager.log").read_text(errors="replace")
            reports = re.findall(r"a TaskManager could not be started: (.*)", log)
            assert len(reports) == 1, reports
            assert f"cannot listen on 127.0.0.1:{port}" in reports[0]
            attempts = len(re.findall(r"started TaskManager taskmanager-ondemand-", log))
            # back-off 1, 2, 4, 8 s ...: some 5 attempts in the job's ~10 s wait, where a check every
            # 0.5 s without back-off would have made 20 or more
            assert 2 <= attempts <= 6, (attempts, elapsed)
    finally:
        taken.close()
