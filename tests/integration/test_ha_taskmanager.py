"""TaskManagers and clients follow the JobManager leader through a real ZooKeeper (HA.md).

Real ZooKeeper server, real JobManager and TaskManager processes, real gRPC. The leader is
elected among JobManager processes that run with the same HA options; the test watches the
election with its own leader retrieval.
"""
from __future__ import annotations

import contextlib
import re
import subprocess
import time
from pathlib import Path
from typing import Iterator

import grpc
import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.proto import cluster_pb2 as cpb
from millstream.runtime import config as cfg
from millstream.runtime.ha import create_ha_services

from .ha import HA_HEARTBEATS, fenced_call, taskmanager_address, timed_cli
from .harness import poll_for, refused_port, spawn_module, stop_processes
from .zookeeper import ZooKeeperServer, ha_config

pytestmark = pytest.mark.timeout(300)


def ha_flags(conf: cfg.Configuration) -> list[str]:
    return [f"-D{key}={value}" for key, value in conf.to_dict().items()]


def start_jobmanager(directory: Path, name: str, *flags: str) -> tuple[subprocess.Popen, str]:
    ready = directory / f"{name}.ready"
    proc = spawn_module(["millstream.jobmanager.jobmanager", "--ready-file", str(ready), "-Djobmanager.rpc.port=0",
                         *HA_HEARTBEATS, *flags], directory / f"{name}.log")
    address = poll_for(lambda: ready.exists() and ready.read_text().strip(), 60, what=f"JobManager {name}")
    return proc, address


def overview(address: str) -> cpb.ClusterOverview:
    with ClusterClient(address) as client:
        return client.overview()


def graceful_stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(30)


@pytest.fixture
def ha_cluster(zookeeper_server: ZooKeeperServer, tmp_path: Path) -> Iterator[dict]:
    """One HA TaskManager process, the HA configuration, a leader retrieval to watch the election,
    and ``start_jobmanager(name)`` for JobManager processes that take part in the election."""
    conf = ha_config(zookeeper_server, tmp_path / "ha")
    procs: list[subprocess.Popen] = []
    services = create_ha_services(conf, name="observer")
    retrieval = services.jobmanager_leader_retrieval()

    def start(name: str) -> tuple[subprocess.Popen, str]:
        proc, address = start_jobmanager(tmp_path, name, *ha_flags(conf))
        procs.insert(0, proc)  # stopped after the TaskManager
        return proc, address

    try:
        tm_log = tmp_path / "taskmanager.log"
        tm = spawn_module(["millstream.taskmanager.taskmanager", "-Dtaskmanager.numberOfTaskSlots=2",
                           *HA_HEARTBEATS, *ha_flags(conf)], tm_log)
        procs.append(tm)
        yield {"conf": conf, "tm": tm, "tm_log": tm_log, "retrieval": retrieval, "start_jobmanager": start}
    finally:
        services.close()
        stop_processes(procs)


def test_the_taskmanager_follows_the_elected_leader_and_fences_off_the_old_one(ha_cluster: dict) -> None:
    retrieval = ha_cluster["retrieval"]
    procs = dict([ha_cluster["start_jobmanager"]("jobmanager-a"), ha_cluster["start_jobmanager"]("jobmanager-b")])
    first = retrieval.current_leader(30)
    # It registers with the leader the election published.
    poll_for(lambda: overview(first.address).slots_total == 2, 180, interval=0.5, what="the TaskManager's slots at the leader")
    tm = taskmanager_address(ha_cluster["tm_log"])
    old_session = str(first.session_id)
    assert fenced_call(tm, old_session) is None  # the leader's calls are served

    # The leader stops (leaving the election): the standby takes over, the TaskManager moves to it.
    started = time.monotonic()
    graceful_stop(next(p for p, address in procs.items() if address == first.address))
    new = poll_for(lambda: (lambda l: l if l is not None and l.address != first.address else None)(retrieval.leader),
                   60, interval=0.2, what="a new leader")
    poll_for(lambda: overview(new.address).slots_total == 2 and overview(new.address).slots_available == 2, 60,
             interval=0.2, what="the TaskManager's free slots at the new leader")
    registered_after = time.monotonic() - started

    refused = fenced_call(tm, old_session)
    assert refused is not None and refused.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert refused.details().startswith("fenced: ") and old_session in refused.details()
    assert str(new.session_id) in refused.details()
    missing = fenced_call(tm, None)
    assert missing is not None and missing.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert fenced_call(tm, str(new.session_id)) is None
    assert fenced_call(tm, old_session, "LookupPartition") is None  # between TaskManagers: not fenced
    print(f"re-registered with the new leader {registered_after:.1f} s after the old one stopped")


def test_without_a_leader_the_taskmanager_leaves_the_old_one_and_waits(ha_cluster: dict) -> None:
    retrieval = ha_cluster["retrieval"]
    proc, _ = ha_cluster["start_jobmanager"]("jobmanager-a")
    first = retrieval.current_leader(30)
    poll_for(lambda: overview(first.address).slots_total == 2, 180, interval=0.5, what="the TaskManager's slots at a")
    tm = taskmanager_address(ha_cluster["tm_log"])
    session = str(first.session_id)
    graceful_stop(proc)  # nobody leads now
    poll_for(lambda: fenced_call(tm, session) is not None, 30, what="the old leader's calls refused")
    refused = fenced_call(tm, session)
    assert refused is not None and "follows no JobManager leader" in refused.details()
    assert ha_cluster["tm"].poll() is None  # it waits for a leader
    # A JobManager elected later (a new session): the TaskManager registers with it.
    _, address = ha_cluster["start_jobmanager"]("jobmanager-b")
    again = poll_for(lambda: (lambda l: l if l is not None and l.session_id != first.session_id else None)(retrieval.leader),
                     60, interval=0.2, what="a new leader")
    assert again.address == address
    poll_for(lambda: overview(address).slots_total == 2, 60, interval=0.5, what="the TaskManager at the new leader")
    assert fenced_call(tm, str(again.session_id)) is None and fenced_call(tm, session) is not None


# -- the CLI ------------------------------------------------------------------------------------


def test_the_cli_finds_the_leader_in_zookeeper_and_says_quickly_when_none_leads(
        zookeeper_server: ZooKeeperServer, tmp_path: Path) -> None:
    conf = ha_config(zookeeper_server, tmp_path / "ha")
    flags = [arg for key, value in conf.to_dict().items() for arg in ("-D", f"{key}={value}")]
    # No leader elected: a clear error within seconds, naming ZooKeeper.
    done, took = timed_cli("list", *flags)
    assert done.returncode == 1 and took < 20, (done.stderr, took)
    assert done.stderr.startswith("No JobManager leads") and done.stderr.count("\n") == 1  # one line
    assert zookeeper_server.connect_string in done.stderr
    print(f"no leader: exit {done.returncode} after {took:.1f} s: {done.stderr.strip()}")

    procs: list[subprocess.Popen] = []
    try:
        jm, _ = start_jobmanager(tmp_path, "jobmanager", *ha_flags(conf))  # elects itself
        procs.append(jm)
        done, _ = poll_for(lambda: (lambda r: r if r[0].returncode == 0 else None)(timed_cli("list", *flags)), 30,
                           interval=0.5, what="the CLI reaching the elected JobManager")
        assert "No jobs." in done.stdout, done.stderr
        # The same through a configuration file.
        config_file = tmp_path / "conf.yaml"
        config_file.write_text("".join(f"{key}: {value}\n" for key, value in conf.to_dict().items()))
        done, _ = timed_cli("list", "--config", str(config_file))
        assert done.returncode == 0 and "No jobs." in done.stdout, done.stderr
    finally:
        stop_processes(procs)

    # A dead quorum: a clear error within seconds (not the 15 s connection timeout).
    zookeeper_server.kill()
    done, took = timed_cli("status", "0" * 32, *flags)
    assert done.returncode == 1 and took < 20, (done.stderr, took)
    assert done.stderr.startswith("Cannot look up the JobManager leader: could not connect to ZooKeeper")
    assert done.stderr.count("\n") == 1 and zookeeper_server.connect_string in done.stderr
    print(f"dead quorum: exit {done.returncode} after {took:.1f} s: {done.stderr.strip()}")


def test_the_cli_uses_the_jobmanager_that_answers_among_several(tmp_path: Path) -> None:
    procs: list[subprocess.Popen] = []
    with contextlib.ExitStack() as held:
        try:
            jm, address = start_jobmanager(tmp_path, "jobmanager")
            procs.append(jm)
            dead = f"127.0.0.1:{held.enter_context(refused_port())}"
            done, _ = timed_cli("list", env={"MILLSTREAM_JOBMANAGER": f"{dead},{address}"})
            assert done.returncode == 0 and "No jobs." in done.stdout, done.stderr
            stop_processes(procs)
            held.enter_context(refused_port(int(address.rsplit(":", 1)[1])))  # nobody else takes it now
            done, took = timed_cli("list", "--jobmanager", f"{dead},{address}")
            assert done.returncode == 1 and took < 20, (done.stderr, took)
            assert f"{dead}: connection refused" in done.stderr and f"{address}: connection refused" in done.stderr
        finally:
            stop_processes(procs)


# -- with JobManagers that take part in the election ------------------------------------------------

ENDLESS_JOB = """
import time
from millstream.datastream import StreamExecutionEnvironment

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
env.from_sequence(1, 10**9).map(lambda x: (time.sleep(0.01), x)[1]).print()
env.execute("endless")
"""


def test_a_leader_kill_cancels_the_old_leaders_tasks_and_the_taskmanager_serves_the_new_leader(
        zookeeper_server: ZooKeeperServer, tmp_path: Path) -> None:
    conf = ha_config(zookeeper_server, tmp_path / "ha")
    flags = ha_flags(conf)
    procs: dict[str, subprocess.Popen] = {}
    services = create_ha_services(conf, name="observer")
    try:
        for name in ("jobmanager-a", "jobmanager-b"):
            ready = tmp_path / f"{name}.ready"
            procs[name] = spawn_module(["millstream.jobmanager.jobmanager", "--ready-file", str(ready),
                                        "-Djobmanager.rpc.port=0", *HA_HEARTBEATS, *flags], tmp_path / f"{name}.log")
            procs[name].address = poll_for(lambda: ready.exists() and ready.read_text().strip(), 60, what=name)  # type: ignore[attr-defined]
        retrieval = services.jobmanager_leader_retrieval()
        first = retrieval.current_leader(20)
        tm_log = tmp_path / "taskmanager.log"
        procs["tm"] = spawn_module(["millstream.taskmanager.taskmanager", "-Dtaskmanager.numberOfTaskSlots=2",
                                    *HA_HEARTBEATS, *flags], tm_log)
        poll_for(lambda: overview(first.address).slots_total == 2, 180, interval=0.5, what="the TaskManager at the leader")
        job = tmp_path / "endless.py"
        job.write_text(ENDLESS_JOB)
        done, _ = timed_cli("run", "-d", *[a for f in flags for a in ("-D", f[2:])], str(job), timeout=120)
        assert done.returncode == 0, done.stderr
        job_id = re.search(r"submitted: ([0-9a-f]{32})", done.stdout).group(1)  # type: ignore[union-attr]
        with ClusterClient(first.address) as client:
            # every task running on the TaskManager, not only the job (RUNNING while it deploys)
            poll_for(lambda: (lambda s: s.tasks_per_state.get("RUNNING") == s.num_tasks > 0)(
                client.status(bytes.fromhex(job_id))), 120, interval=0.5, what="the job's tasks running")
        leader_proc = next(p for p in procs.values() if getattr(p, "address", None) == first.address)
        leader_proc.kill()
        new = poll_for(lambda: (lambda l: l if l is not None and l.address != first.address else None)(retrieval.leader),
                       60, interval=0.2, what="a new leader")
        poll_for(lambda: overview(new.address).slots_total == 2, 60, interval=0.5, what="the TaskManager at the new leader")
        text = tm_log.read_text(errors="replace")
        assert re.search(rf"leaves the JobManager leader {re.escape(first.address)} .*cancelling [12] tasks", text), text[-3000:]
    finally:
        services.close()
        stop_processes(list(procs.values()))
