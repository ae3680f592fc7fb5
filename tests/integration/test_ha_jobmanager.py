"""JobManager high availability with a real ZooKeeper and two real JobManager processes, driven by
plain gRPC calls: the standby refuses clients until it leads, a submitted job's graph is in HA
storage, kill -9 of the leader hands the leadership and the job over within the session timeout,
a cancelled (globally terminal) job is not run again, and fenced calls with a wrong leader session
id are refused."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator, Optional

import grpc
import pytest

from millstream.datastream import StreamExecutionEnvironment
from millstream.proto import cluster_pb2 as cpb
from millstream.proto import cluster_pb2_grpc as cpb_grpc
from millstream.runtime.rpc.fencing import FENCING_METADATA_KEY
from millstream.runtime.ha import create_ha_services
from tests.integration.ha import SESSION_TIMEOUT_S, JobManagerProcess, current_leader
from tests.integration.harness import poll_for
from tests.integration.zookeeper import ZooKeeperServer, ha_config

JOB_STATUS = cpb.JobStatus


@pytest.fixture
def ha_cluster(zookeeper_server: ZooKeeperServer, tmp_path: Path) -> Iterator[tuple[dict[str, str], list[JobManagerProcess]]]:
    options = {k: str(v) for k, v in ha_config(zookeeper_server, tmp_path / "ha").to_dict().items()}
    options.update({
        "high-availability.zookeeper.client.session-timeout": f"{SESSION_TIMEOUT_S:.0f} s",
        "jobmanager.rpc.address": "127.0.0.1",
        "jobmanager.rpc.port": "0",
        "slot.request.timeout": "10 min",  # no TaskManagers here: jobs wait for slots
        "execution.checkpointing.dir": str(tmp_path / "checkpoints"),
        "heartbeat.interval": "200 ms",
    })
    jms: list[JobManagerProcess] = []
    try:
        for i in range(2):
            jms.append(JobManagerProcess(tmp_path, f"jm{i}", options))
        yield options, jms
    finally:
        for jm in jms:
            jm.stop()


def _leader_and_standby(jms: list[JobManagerProcess]) -> tuple[JobManagerProcess, JobManagerProcess]:
    poll_for(lambda: any(jm.leads() for jm in jms), 30, 0.1, "a leader")
    leader = next(jm for jm in jms if jm.leads())
    return leader, next(jm for jm in jms if jm is not leader)


def _job_graph(name: str, checkpoint_ms: int = 0) -> bytes:
    env = StreamExecutionEnvironment.get_execution_environment()
    if checkpoint_ms:
        env.enable_checkpointing(checkpoint_ms)
    env.from_sequence(1, 100).map(lambda x: x + 1).add_sink(lambda x: None)
    return env.get_job_graph(name).proto.SerializeToString()


def _fenced(token: Optional[str]) -> list[tuple[str, str]]:
    return [(FENCING_METADATA_KEY, token)] if token is not None else []


def _register(jm: JobManagerProcess, token: Optional[str]) -> cpb.RegisterTaskManagerResponse:
    return jm.rm.RegisterTaskManager(cpb.RegisterTaskManagerRequest(
        resource_id=f"tm-{uuid.uuid4().hex[:6]}", address="127.0.0.1:1", data_address="127.0.0.1:1", num_slots=1),
        timeout=5, metadata=_fenced(token))


def test_the_standby_refuses_clients_and_fenced_calls_until_it_leads(ha_cluster) -> None:  # noqa: ANN001
    options, jms = ha_cluster
    leader, standby = _leader_and_standby(jms)
    info = current_leader(options)
    assert info.address == leader.address
    with pytest.raises(grpc.RpcError) as refused:
        standby.list_jobs()
    assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
    assert refused.value.details() == f"JobManager {standby.address} is not the leader"
    with pytest.raises(grpc.RpcError) as fenced:  # even with the real leader's session id
        _register(standby, str(info.session_id))
    assert fenced.value.code() is grpc.StatusCode.FAILED_PRECONDITION and fenced.value.details().startswith("fenced: ")
    for token in (None, str(uuid.uuid4())):  # the leader: no token (HA mode) or a wrong one
        with pytest.raises(grpc.RpcError) as wrong:
            _register(leader, token)
        assert wrong.value.code() is grpc.StatusCode.FAILED_PRECONDITION, token
        assert str(info.session_id) in wrong.value.details()
    assert _register(leader, str(info.session_id)).registration_id
    with pytest.raises(grpc.RpcError) as offer:
        leader.jms.OfferSlots(cpb.OfferSlotsRequest(job_id=b"\x01" * 16), timeout=5, metadata=_fenced(str(uuid.uuid4())))
    assert offer.value.code() is grpc.StatusCode.FAILED_PRECONDITION


def test_kill_9_of_the_leader_hands_its_jobs_to_the_standby_and_a_cancelled_job_stays_ended(ha_cluster) -> None:  # noqa: ANN001
    options, jms = ha_cluster
    leader, standby = _leader_and_standby(jms)
    old = current_leader(options)
    running = leader.dispatcher.SubmitJob(cpb.SubmitJobRequest(
        submission_id="a", job_graph=_job_graph("waits for slots", checkpoint_ms=500),
        artifacts=[cpb.Artifact(name="helpers.py", content=b"X = 1\n")]), timeout=30).job_id
    ended = leader.dispatcher.SubmitJob(cpb.SubmitJobRequest(submission_id="b", job_graph=_job_graph("cancelled")),
                                        timeout=30).job_id

    from millstream.runtime import config as cfg
    with create_ha_services(cfg.Configuration.from_dict(options), name="test-stores") as services:
        graphs = services.job_graph_store()
        assert set(graphs.job_ids()) == {running, ended}  # stored before the submission was answered
        stored = cpb.SubmitJobRequest.FromString(graphs.recover_job_graph(running))
        graphs.release_job_graph(running)
        assert stored.artifacts[0].content == b"X = 1\n"
        leader.dispatcher.CancelJob(cpb.JobIdRequest(job_id=ended), timeout=10)
        results = services.job_result_store()
        poll_for(lambda: results.has_clean_job_result_entry(ended), 30, 0.1, "the cancelled job's clean result")
        assert graphs.job_ids() == [running]
        counter = services.checkpoint_id_counter(running)
        poll_for(lambda: counter.get() == 2, 30, 0.1, "the leader to draw checkpoint id 1 ahead")

    leader.kill()
    killed_at = time.monotonic()
    poll_for(standby.leads, 4 * SESSION_TIMEOUT_S + 20, 0.05, "the standby to lead")
    took = time.monotonic() - killed_at
    print(f"standby leads {took:.2f} s after kill -9 of the leader (session timeout {SESSION_TIMEOUT_S} s)")
    assert took < SESSION_TIMEOUT_S + 15  # a loaded machine: generous; measured ~5 s
    jobs = {j.job_id: j for j in standby.list_jobs().jobs}
    assert ended not in jobs  # globally terminal: never run again
    assert jobs[running].job_name == "waits for slots"
    # recovered, not ended: INITIALIZING while its JobMaster builds the ExecutionGraph (as Flink's)
    assert jobs[running].status in (JOB_STATUS.INITIALIZING, JOB_STATUS.CREATED, JOB_STATUS.RUNNING,
                                    JOB_STATUS.RESTARTING)

    new = current_leader(options)
    assert new.address == standby.address and new.session_id != old.session_id
    with pytest.raises(grpc.RpcError) as stale:  # the deposed leader's session is fenced off
        _register(standby, str(old.session_id))
    assert stale.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert _register(standby, str(new.session_id)).registration_id
    with create_ha_services(cfg.Configuration.from_dict(options), name="test-counter") as services:
        counter = services.checkpoint_id_counter(running)  # the new leader never reuses id 1
        poll_for(lambda: counter.get() == 3, 30, 0.1, "the new leader to draw checkpoint id 2")


def _cluster_cli(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess]:
    """`millstream ...` against a cluster directory of the test's own; skips without ZooKeeper."""
    from tests.integration.zookeeper import zookeeper_unavailable

    reason = zookeeper_unavailable()
    if reason:
        pytest.skip(reason)
    env = {**os.environ, "MILLSTREAM_CLUSTER_DIR": str(tmp_path / "cluster")}
    env.pop("MILLSTREAM_JOBMANAGER", None)

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "millstream.client.cli", *args], env=env, capture_output=True,
                              text=True, timeout=240)

    return cli


def test_cluster_start_ha_runs_zookeeper_a_leader_and_a_standby_and_stop_ends_them_all(tmp_path: Path) -> None:
    import json

    from millstream.client.session_cluster import process_identity

    cli = _cluster_cli(tmp_path)
    started = cli("cluster", "start", "--ha", "--taskmanagers", "0", "--port", "0",
                  "-D", "high-availability.zookeeper.client.session-timeout=5 s")
    assert started.returncode == 0, started.stdout + started.stderr
    assert "high availability" in started.stdout and "standby at" in started.stdout
    state = json.loads((tmp_path / "cluster" / "cluster.json").read_text())
    pids = state["pids"]
    try:
        assert len(pids) == 3 and all(process_identity(p) for p in pids)  # ZooKeeper and two JobManagers
        assert "zookeeper" in process_identity(pids[0]).lower()
        leader, standby = state["ha"]["leader"], [a for a in state["ha"]["jobmanagers"] if a != state["ha"]["leader"]][0]
        with grpc.insecure_channel(leader) as channel:
            cpb_grpc.DispatcherStub(channel).ListJobs(cpb.Empty(), timeout=10)
        with grpc.insecure_channel(standby) as channel, pytest.raises(grpc.RpcError) as refused:
            cpb_grpc.DispatcherStub(channel).ListJobs(cpb.Empty(), timeout=10)
        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
    finally:
        stopped = cli("cluster", "stop")
    assert stopped.stdout.strip() == "Cluster stopped."
    poll_for(lambda: all(process_identity(p) is None for p in pids), 30, 0.1, "every process of the cluster to exit")


def test_cluster_start_ha_starts_its_taskmanager_beside_the_jobmanagers_and_returns_once_it_registered(tmp_path: Path) -> None:
    import json

    from millstream.client.cluster_client import ClusterClient
    from millstream.client.session_cluster import process_identity

    cli = _cluster_cli(tmp_path)
    started = cli("cluster", "start", "--ha", "--taskmanagers", "1", "--slots", "2", "--port", "0",
                  "-D", "high-availability.zookeeper.client.session-timeout=5 s")
    assert started.returncode == 0, started.stdout + started.stderr
    state = json.loads((tmp_path / "cluster" / "cluster.json").read_text())
    pids = state["pids"]
    try:
        commands = [process_identity(p) or "" for p in pids]
        # ZooKeeper, the first JobManager, the TaskManager (spawned before any leader is known), the standby
        assert ["zookeeper" in commands[0].lower(), "jobmanager" in commands[1], "taskmanager" in commands[2],
                "jobmanager" in commands[3]] == [True] * 4, commands
        with ClusterClient(state["ha"]["leader"]) as client:  # it registered before start returned
            overview = client.overview()
        assert (overview.taskmanagers, overview.slots_total) == (1, 2)
    finally:
        stopped = cli("cluster", "stop")
    assert stopped.stdout.strip() == "Cluster stopped."
    poll_for(lambda: all(process_identity(p) is None for p in pids), 30, 0.1, "every process of the cluster to exit")


def test_cluster_start_ha_with_a_rest_port_gives_each_jobmanager_its_own_and_prints_every_web_ui(tmp_path: Path) -> None:
    """-D rest.port=P: the standby binding P too died at start; as with Flink's rest.bind-port range
    from P, each JobManager takes the first free port, and start prints each one's addresses."""
    import json
    import re
    import socket
    import urllib.error
    import urllib.request

    from millstream.client.session_cluster import process_identity

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cli = _cluster_cli(tmp_path)
    started = cli("cluster", "start", "--ha", "--taskmanagers", "0", "--port", "0", "-D", f"rest.port={port}",
                  "-D", "high-availability.zookeeper.client.session-timeout=5 s")
    assert started.returncode == 0, started.stdout + started.stderr
    state = json.loads((tmp_path / "cluster" / "cluster.json").read_text())
    pids = state["pids"]
    try:
        leader = state["ha"]["leader"]
        [standby] = [a for a in state["ha"]["jobmanagers"] if a != leader]
        shown = dict(re.findall(r"JobManager (\S+) \((?:leader|standby)\): web UI and REST API at (http://\S+)", started.stdout))
        assert set(shown) == {leader, standby}, started.stdout
        ports = sorted(int(url.rsplit(":", 1)[1]) for url in shown.values())
        assert ports[0] == port and ports[1] > port, shown
        assert all(process_identity(p) for p in pids)  # the standby is alive
        with urllib.request.urlopen(shown[leader] + "/overview", timeout=10) as response:
            assert response.status == 200
        with pytest.raises(urllib.error.HTTPError) as not_leader:  # a standby's REST API says where to go
            urllib.request.urlopen(shown[standby] + "/overview", timeout=10)
        assert not_leader.value.code == 503
    finally:
        stopped = cli("cluster", "stop")
    assert stopped.stdout.strip() == "Cluster stopped."
    poll_for(lambda: all(process_identity(p) is None for p in pids), 30, 0.1, "every process of the cluster to exit")
