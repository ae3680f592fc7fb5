"""TLS and tokens on real connections over 127.0.0.1, in this process: gRPC servers and channels
(aio and sync), the data plane between tasks and the control channel between a TaskManager and its
workers (without Spark: the worker's end runs in a thread). Accepted and refused peers: a
certificate from another CA, no certificate, plaintext, no token, the wrong role's token."""
from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

from millstream.proto import cluster_pb2 as cpb
from millstream.proto import cluster_pb2_grpc as cpb_grpc
from millstream.runtime import config as cfg
from millstream.runtime.rpc import healthcheck
from millstream.runtime.rpc.fencing import FencingServerInterceptor
from millstream.runtime.rpc.service import RpcServer, aio_channel, sync_channel
from millstream.runtime.rpc.security import Credentials, client_credentials, cluster_credentials, server_security
from millstream.runtime.rpc.tls import TlsSettings, tls_problem
from millstream.runtime.partitioners import RebalancePartitioner
from millstream.runtime.network.environment import ChannelError, InputGate, PartitionServer, ResultPartition
from millstream.taskmanager.spark.host import SparkHost, TaskExit, TaskHandle, WorkerChannel, _WorkerSpec
from tests.certs import CertificateAuthority, Pem
from .network_helpers import ATTEMPT, RESULT, InThread, drain, emit_all, poll_for, records_of, spec

pytestmark = pytest.mark.timeout(60)

CLIENT, CLUSTER = "client-secret", "cluster-secret"


class Certs:
    def __init__(self, directory: Path) -> None:
        ca = CertificateAuthority(directory / "ca")
        rogue_ca = CertificateAuthority(directory / "rogue", "rogue-ca")
        self.node = ca.issue("node")
        self.other_node = ca.issue("other-node")
        self.rogue = rogue_ca.issue("rogue", truststore=ca.cert_path)  # trusts our CA, not trusted by it
        self.wrong_host = ca.issue("elsewhere", hosts=("10.1.2.3", "elsewhere.example"))

    @staticmethod
    def tls(pem: Pem) -> TlsSettings:
        return TlsSettings(pem.key, pem.cert, pem.truststore)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return Certs(tmp_path_factory.mktemp("certs"))


def secured(pem: Pem, **tokens: str) -> cfg.Configuration:
    return cfg.Configuration.from_dict({**pem.options(), **{f"security.auth.{k.replace('_', '-')}": v
                                                             for k, v in tokens.items()}})


# ---- gRPC ---------------------------------------------------------------------------------------


class Counting(cpb_grpc.DispatcherServicer, cpb_grpc.ResourceManagerServicer):
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def ListJobs(self, request, context):  # noqa: N802
        self.calls.append("ListJobs")
        return cpb.ListJobsResponse()

    async def RegisterTaskManager(self, request, context):  # noqa: N802
        self.calls.append("RegisterTaskManager")
        return cpb.RegisterTaskManagerResponse()


class JobManagerLike:
    """An RpcServer secured as a JobManager's (TLS, both tokens), serving a Dispatcher and a
    ResourceManager that count their calls, behind a fencing interceptor that lets all through."""

    def __init__(self, configuration: cfg.Configuration) -> None:
        self.servicer = Counting()
        self.server = RpcServer("test JobManager", interceptors=[FencingServerInterceptor(lambda m, t: None)],
                                security=server_security(configuration, jobmanager=True))
        self.server.add(cpb_grpc.add_DispatcherServicer_to_server, self.servicer, [])
        self.server.add(cpb_grpc.add_ResourceManagerServicer_to_server, self.servicer, [])
        self.address = ""

    async def __aenter__(self) -> "JobManagerLike":
        port = await self.server.start("127.0.0.1", 0)
        self.address = f"127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.stop(0)


async def list_jobs(address: str, credentials: Credentials | None) -> Any:
    channel = aio_channel(address, credentials=credentials)
    try:
        return await cpb_grpc.DispatcherStub(channel).ListJobs(cpb.Empty(), timeout=5)
    finally:
        await channel.close()


async def register(address: str, credentials: Credentials | None) -> Any:
    channel = aio_channel(address, credentials=credentials)
    try:
        return await cpb_grpc.ResourceManagerStub(channel).RegisterTaskManager(cpb.RegisterTaskManagerRequest(), timeout=5)
    finally:
        await channel.close()


async def refused(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await call
    return error.value


def test_grpc_with_tls_and_tokens_serves_each_role_its_services_only(certs: Certs) -> None:
    jm_conf = secured(certs.node, client_token=CLIENT, cluster_token=CLUSTER)
    client = client_credentials(secured(certs.other_node, client_token=CLIENT))
    cluster = cluster_credentials(secured(certs.other_node, cluster_token=CLUSTER))

    async def body() -> None:
        async with JobManagerLike(jm_conf) as jm:
            await list_jobs(jm.address, client)
            await register(jm.address, cluster)
            assert jm.servicer.calls == ["ListJobs", "RegisterTaskManager"]
            wrong_role = await refused(list_jobs(jm.address, cluster))
            assert wrong_role.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "Dispatcher/ListJobs needs the client token" in wrong_role.details()
            assert (await refused(register(jm.address, client))).code() == grpc.StatusCode.PERMISSION_DENIED
            no_token = await refused(list_jobs(jm.address, Credentials(client.tls)))
            assert no_token.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "carries no 'authorization: Bearer <token>'" in no_token.details()
            wrong = await refused(register(jm.address, Credentials(client.tls, "guess")))
            assert wrong.code() == grpc.StatusCode.UNAUTHENTICATED and "not valid here" in wrong.details()
            assert jm.servicer.calls == ["ListJobs", "RegisterTaskManager"]  # nothing refused ran

    asyncio.run(body())


def test_grpc_refuses_peers_without_a_trusted_certificate_before_any_call(certs: Certs) -> None:
    jm_conf = secured(certs.node, client_token=CLIENT, cluster_token=CLUSTER)

    async def body() -> None:
        async with JobManagerLike(jm_conf) as jm:
            rogue = await refused(list_jobs(jm.address, Credentials(Certs.tls(certs.rogue), CLIENT)))
            assert rogue.code() == grpc.StatusCode.UNAVAILABLE
            assert "does not accept this process's certificate" in tls_problem(rogue.details(), True)
            plaintext = await refused(list_jobs(jm.address, Credentials(None, CLIENT)))
            assert plaintext.code() == grpc.StatusCode.UNAVAILABLE
            assert "if the cluster uses TLS, set security.ssl.enabled" in tls_problem(plaintext.details(), False)
            # A server whose certificate names another host is refused by the client.
            elsewhere = JobManagerLike(secured(certs.wrong_host, client_token=CLIENT, cluster_token=CLUSTER))
            async with elsewhere:
                mismatch = await refused(list_jobs(elsewhere.address, Credentials(Certs.tls(certs.node), CLIENT)))
                assert mismatch.code() == grpc.StatusCode.UNAVAILABLE
                assert "certificate does not name the host it was dialled at" in tls_problem(mismatch.details(), True)
            assert jm.servicer.calls == []

    asyncio.run(body())


def test_sync_channels_carry_the_token_on_unary_and_streaming_calls(certs: Certs) -> None:
    jm_conf = secured(certs.node, client_token=CLIENT, cluster_token=CLUSTER)

    async def body() -> None:
        async with JobManagerLike(jm_conf) as jm:
            def calls() -> None:
                good = Credentials(Certs.tls(certs.other_node), CLIENT)
                with sync_channel(jm.address, credentials=good) as channel:
                    cpb_grpc.DispatcherStub(channel).ListJobs(cpb.Empty(), timeout=5)
                    stream = cpb_grpc.DispatcherStub(channel).WaitJobResult(cpb.JobIdRequest(job_id=b"x"), timeout=5)
                    with pytest.raises(grpc.RpcError) as error:
                        list(stream)
                    assert error.value.code() == grpc.StatusCode.UNIMPLEMENTED  # authenticated: reached the servicer
                with sync_channel(jm.address, credentials=Credentials(good.tls)) as channel:
                    stream = cpb_grpc.DispatcherStub(channel).WaitJobResult(cpb.JobIdRequest(job_id=b"x"), timeout=5)
                    with pytest.raises(grpc.RpcError) as error:
                        list(stream)
                    assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED

            await asyncio.to_thread(calls)
            assert jm.servicer.calls == ["ListJobs"]

    asyncio.run(body())


def test_the_health_check_needs_the_certificate_but_no_token(certs: Certs, capsys: pytest.CaptureFixture[str],
                                                            tmp_path: Path) -> None:
    jm_conf = secured(certs.node, client_token=CLIENT, cluster_token=CLUSTER)
    config_file = tmp_path / "tls.yaml"
    config_file.write_text("".join(f"{k}: {v}\n" for k, v in certs.other_node.options().items()))

    async def body() -> None:
        async with JobManagerLike(jm_conf) as jm:
            assert await asyncio.to_thread(healthcheck.check, jm.address, 5.0, Certs.tls(certs.other_node)) is None
            assert await asyncio.to_thread(healthcheck.main, [jm.address, "--config", str(config_file)]) == 0
            assert await asyncio.to_thread(healthcheck.main, [jm.address]) == 1
            problem = await asyncio.to_thread(healthcheck.check, jm.address, 5.0, Certs.tls(certs.rogue))
            assert problem is not None and "does not accept this process's certificate" in problem

    asyncio.run(body())
    assert "unhealthy" in capsys.readouterr().err


# ---- the data plane -----------------------------------------------------------------------------


def test_the_data_plane_moves_every_record_over_mutual_tls(certs: Certs) -> None:
    """Many small buffers both ways at once (credits back while buffers flow), two producers to
    three consumers, so a TLS connection is read and written by two threads throughout."""
    producer_tls, consumer_tls = Certs.tls(certs.node), Certs.tls(certs.other_node)
    servers = [PartitionServer(tls=producer_tls).start() for _ in range(2)]
    partitions = []
    for index, server in enumerate(servers):
        partition = ResultPartition(RESULT, index, 3, RebalancePartitioner(), ATTEMPT, records_per_buffer=16,
                                    max_backlog_per_subpartition=2)
        server.register(partition)
        partitions.append(partition)
    gates = [InputGate([spec(sub, p, location=f"tm-{p}") for p in range(2)],
                       lambda s: servers[s.partition_index].address, initial_credit=2, tls=consumer_tls)
             for sub in range(3)]
    try:
        for gate in gates:
            gate.start()
        producers = [InThread(emit_all, partition, list(range(p * 20_000, (p + 1) * 20_000)), 64)
                     for p, partition in enumerate(partitions)]
        consumers = [InThread(drain, gate, 40) for gate in gates]
        got = sorted(r for consumer in consumers for r in records_of(consumer.join(45)))
        for producer in producers:
            producer.join(10)
        assert got == list(range(40_000))
    finally:
        for gate in gates:
            gate.close()
        for server in servers:
            server.close()


def _one_channel(certs: Certs, consumer_tls: TlsSettings | None) -> tuple[PartitionServer, InputGate]:
    server = PartitionServer(tls=Certs.tls(certs.node)).start()
    server.register(ResultPartition(RESULT, 0, 1, RebalancePartitioner(), ATTEMPT))
    gate = InputGate([spec()], lambda s: server.address, connect_timeout_s=3, tls=consumer_tls)
    gate.start()
    return server, gate


@pytest.mark.parametrize("consumer", ["rogue", "plaintext"])
def test_the_data_plane_refuses_a_consumer_without_a_trusted_certificate(certs: Certs, consumer: str) -> None:
    server, gate = _one_channel(certs, Certs.tls(certs.rogue) if consumer == "rogue" else None)
    try:
        with pytest.raises(ChannelError):
            drain(gate, 10)
    finally:
        gate.close()
        server.close()


def test_a_consumer_refuses_a_producer_whose_certificate_it_cannot_verify(certs: Certs) -> None:
    server = PartitionServer(tls=Certs.tls(certs.rogue)).start()
    server.register(ResultPartition(RESULT, 0, 1, RebalancePartitioner(), ATTEMPT))
    gate = InputGate([spec()], lambda s: server.address, connect_timeout_s=30, tls=Certs.tls(certs.node))
    gate.start()
    started = time.monotonic()
    try:
        with pytest.raises(ChannelError, match="TLS handshake with 127.0.0.1:.* failed: .*certificate verify failed"):
            drain(gate, 20)
        assert time.monotonic() - started < 10  # at once, not after the connect timeout
    finally:
        gate.close()
        server.close()


# ---- the control channel ------------------------------------------------------------------------


class Events:
    def __init__(self) -> None:
        self.items: list[Any] = []

    def __call__(self, task_id: str, msg: Any) -> None:
        self.items.append(msg)


def _host_with_task(tls: TlsSettings, secrets: dict[str, str]) -> tuple[SparkHost, TaskHandle, Events]:
    host = SparkHost(1, tls=tls, worker_secrets=secrets)
    host._listen()  # the control listener alone: no Spark session is needed for the channel
    events = Events()
    handle = TaskHandle(host, "task-1", events, b"the pickled body")
    host._tasks[handle.task_id] = handle
    host._by_token[handle._token] = handle
    return host, handle, events


def _stop(host: SparkHost) -> None:
    host._tasks.clear()  # never started in Spark: nothing to cancel or wait for
    host.stop()


def test_the_control_channel_is_mutual_tls_and_hands_the_worker_its_secrets_and_body(certs: Certs) -> None:
    host, handle, events = _host_with_task(Certs.tls(certs.node), {"cluster-token": CLUSTER})
    assert host._listener is not None
    try:
        handle.send(("hello", 1))  # queued until the worker connects, delivered after the greeting
        address = host._listener.getsockname()[:2]
        channel = WorkerChannel._connect(_WorkerSpec("task-1", address, handle._token, Certs.tls(certs.other_node)))
        assert channel.secrets == {"cluster-token": CLUSTER}
        assert channel.payload == b"the pickled body"  # the body travels this channel, not the Spark task
        poll_for(lambda: channel.recv_nowait() == ("hello", 1), 5, "the queued control message")
        channel.send(("state", "RUNNING"))
        poll_for(lambda: events.items == [("state", "RUNNING")], 5, "the worker's event")
        channel._finish(TaskExit("FINISHED"))
        assert handle.wait(5) == TaskExit("FINISHED")
    finally:
        host.stop()


@pytest.mark.parametrize("worker", ["rogue", "plaintext"])
def test_the_control_channel_refuses_a_worker_without_a_trusted_certificate(certs: Certs, worker: str) -> None:
    host, handle, events = _host_with_task(Certs.tls(certs.node), {"cluster-token": CLUSTER})
    assert host._listener is not None
    try:
        address = host._listener.getsockname()[:2]
        tls = Certs.tls(certs.rogue) if worker == "rogue" else None
        with pytest.raises((OSError, EOFError)):  # the host hangs up before its greeting
            WorkerChannel._connect(_WorkerSpec("task-1", address, handle._token, tls))
        assert events.items == [] and not handle._attached.is_set()
    finally:
        _stop(host)


def test_a_worker_refuses_a_host_it_cannot_verify(certs: Certs) -> None:
    host, handle, events = _host_with_task(Certs.tls(certs.rogue), {"cluster-token": CLUSTER})
    assert host._listener is not None
    try:
        address = host._listener.getsockname()[:2]
        with pytest.raises(OSError, match="certificate verify failed"):
            WorkerChannel._connect(_WorkerSpec("task-1", address, handle._token, Certs.tls(certs.node)))
        assert not handle._attached.is_set()
    finally:
        _stop(host)


# ---- the README's openssl commands ----------------------------------------------------------------


README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl command on this machine")
def test_the_readmes_openssl_commands_make_files_a_cluster_accepts(tmp_path: Path) -> None:
    text = README.read_text(encoding="utf-8")
    block = text.split("<!-- security-certs:begin -->", 1)[1].split("<!-- security-certs:end -->", 1)[0]
    script = block.split("```sh\n", 1)[1].split("```", 1)[0]
    made = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    node = TlsSettings(str(tmp_path / "node.key"), str(tmp_path / "node.pem"), str(tmp_path / "ca.pem"))
    client = TlsSettings(str(tmp_path / "client.key"), str(tmp_path / "client.pem"), str(tmp_path / "ca.pem"))
    jm_conf = cfg.Configuration.from_dict({"security.ssl.enabled": "true", "security.ssl.key": node.key,
                                           "security.ssl.cert": node.cert, "security.ssl.truststore": node.truststore,
                                           "security.auth.client-token": CLIENT, "security.auth.cluster-token": CLUSTER})

    async def body() -> None:
        async with JobManagerLike(jm_conf) as jm:
            for host in ("127.0.0.1", "localhost"):
                port = jm.address.rsplit(":", 1)[1]
                await list_jobs(f"{host}:{port}", Credentials(client, CLIENT))
            assert jm.servicer.calls == ["ListJobs", "ListJobs"]

    asyncio.run(body())
