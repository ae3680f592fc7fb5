"""What a hostile or broken peer can send the JobManager and a TaskManager's data server: real
in-process servers over real sockets (no Spark: no task runs here)."""
from __future__ import annotations

import asyncio
import resource
import socket
import struct
import time
from typing import Any

import grpc
import pytest

from millstream.jobmanager.jobmanager import JobManager
from millstream.proto import cluster_pb2 as cpb
from millstream.proto import cluster_pb2_grpc as cpb_grpc
from millstream.runtime import config as cfg
from millstream.runtime.rpc.service import RpcServer, aio_channel
from millstream.runtime.rpc.wire_bounds import MAX_SLOTS_PER_TASKMANAGER
from millstream.runtime.network.partition import PartitionServer
from millstream.runtime.network.protocol import FrameReader, Hello, decode_error

pytestmark = pytest.mark.timeout(120)

BASE = {"jobmanager.rpc.address": "127.0.0.1", "jobmanager.rpc.port": "0"}


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_a_taskmanager_registering_two_billion_slots_is_refused_and_the_jobmanager_serves_on() -> None:
    async def main() -> None:
        async with JobManager(cfg.Configuration.from_dict(BASE)) as jm:
            async with aio_channel(jm.address) as channel:
                rm = cpb_grpc.ResourceManagerStub(channel)
                dispatcher = cpb_grpc.DispatcherStub(channel)
                rss_before = _rss_mb()
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await rm.RegisterTaskManager(cpb.RegisterTaskManagerRequest(
                        resource_id="evil", address="127.0.0.1:1", data_address="127.0.0.1:2", num_slots=2**31 - 1),
                        timeout=10)
                assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
                assert refused.value.details() == (
                    f"ResourceManager/RegisterTaskManager: num_slots is {2**31 - 1}; "
                    f"it must be within 1..{MAX_SLOTS_PER_TASKMANAGER}")
                started = time.monotonic()
                overview = await dispatcher.GetClusterOverview(cpb.Empty(), timeout=5)
                assert time.monotonic() - started < 2
                assert overview.taskmanagers == 0 and overview.slots_total == 0
                assert _rss_mb() - rss_before < 200  # no slot objects were built
                # a slot report with a slot index far beyond any TaskManager, and an oversized id
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await rm.SendSlotReport(cpb.SlotReportRequest(resource_id="evil", slot_report=cpb.SlotReport(
                        slots=[cpb.SlotStatus(slot_index=2**31 - 1)])), timeout=10)
                assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
                assert "slot_report.slots[0].slot_index is 2147483647" in refused.value.details()
                jobmaster = cpb_grpc.JobMasterServiceStub(channel)
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await jobmaster.AcknowledgeCheckpoint(cpb.AcknowledgeCheckpointRequest(
                        job_id=b"j" * (1 << 20), checkpoint_id=1), timeout=10)
                assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
                assert "job_id is an id of 1048576 bytes; at most 16" in refused.value.details()
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await dispatcher.FetchCollectResults(cpb.FetchCollectRequest(job_id=b"j" * 16, max_bytes=1 << 40),
                                                         timeout=10)
                assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
                assert "max_bytes" in refused.value.details()
                # streaming calls are checked as well, and sane calls still work
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    async for _ in cpb_grpc.BlobServerStub(channel).GetBlob(cpb.GetBlobRequest(blob_key="k" * 100_000),
                                                                             timeout=10):
                        pass
                assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
                assert "blob_key has 100000 characters" in refused.value.details()
                assert (await dispatcher.ListJobs(cpb.Empty(), timeout=5)).jobs == []

    asyncio.run(main())


class _RecordingTaskExecutor(cpb_grpc.TaskExecutorServicer):
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def SubmitTask(self, request, context):  # noqa: N802 (gRPC's name)
        self.calls.append("SubmitTask")
        return cpb.Empty()

    async def RequestSlot(self, request, context):  # noqa: N802
        self.calls.append("RequestSlot")
        return cpb.Empty()


def test_every_rpc_server_checks_bounds_before_its_servicer_runs() -> None:
    """A TaskManager's server is an RpcServer like the JobManager's: a deployment with a huge
    subpartition count never reaches the TaskExecutor."""
    async def main() -> None:
        servicer = _RecordingTaskExecutor()
        server = RpcServer("TaskManager")
        server.add(cpb_grpc.add_TaskExecutorServicer_to_server, servicer, [])
        port = await server.start("127.0.0.1", 0)
        try:
            async with aio_channel(f"127.0.0.1:{port}") as channel:
                stub = cpb_grpc.TaskExecutorStub(channel)
                tdd = cpb.TaskDeploymentDescriptor(produced_partitions=[
                    cpb.ResultPartitionDescriptor(num_subpartitions=2**31 - 1)])
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await stub.SubmitTask(cpb.SubmitTaskRequest(tdd=tdd), timeout=10)
                assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
                assert refused.value.details().startswith(
                    "TaskExecutor/SubmitTask: tdd.produced_partitions[0].num_subpartitions is 2147483647")
                with pytest.raises(grpc.aio.AioRpcError):
                    await stub.RequestSlot(cpb.RequestSlotRequest(slot_index=-1), timeout=10)
                assert servicer.calls == []
                await stub.RequestSlot(cpb.RequestSlotRequest(slot_index=1, job_id=b"j" * 16), timeout=10)
                assert servicer.calls == ["RequestSlot"]
        finally:
            await server.stop(0)

    asyncio.run(main())


def test_the_data_server_refuses_a_huge_frame_or_hello_without_reading_it() -> None:
    with PartitionServer().start() as server:
        for frame in (
            struct.pack("!BI", 4, 0xFFFFFFF0),  # HELLO announcing 4 GB: never buffered
            Hello(b"r" * 16, 0, 0, b"a" * 16, 2**31).encode(),  # two billion credits
            Hello(b"r" * 16, -7, 0, b"a" * 16, 4).encode(),  # a negative partition
        ):
            with socket.create_connection(server.address, timeout=10) as sock:
                sock.sendall(frame)
                kind, payload = FrameReader(sock).read()
                code, message = decode_error(payload)
                assert code.name == "PROTOCOL", message
                assert "at most" in message or "within" in message, message


def _open_fds() -> int:
    import os
    return len(os.listdir("/proc/self/fd"))


def _idle_sockets(port: int, n: int) -> list[socket.socket]:
    sockets = []
    for _ in range(n):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.setblocking(False)
        sockets.append(sock)
    return sockets


def _closed_by_peer(sockets: list[socket.socket], seen: dict[int, bytes]) -> int:
    """How many of ``sockets`` the server closed; what each sent before is kept in ``seen``."""
    for i, sock in enumerate(sockets):
        if i in seen and seen[i].endswith(b"<closed>"):
            continue
        try:
            while True:
                data = sock.recv(65536)
                if not data:
                    seen[i] = seen.get(i, b"") + b"<closed>"
                    break
                seen[i] = seen.get(i, b"") + data
        except BlockingIOError:
            pass
        except OSError as exc:
            seen[i] = seen.get(i, b"") + f"<{exc.__class__.__name__}>".encode() + b"<closed>"
    return sum(1 for v in seen.values() if v.endswith(b"<closed>"))


def _get(url: str, host: str | None = None) -> tuple[int, str]:
    import urllib.error
    import urllib.request
    request = urllib.request.Request(url, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_silent_connections_to_rest_and_grpc_are_bounded_and_closed() -> None:
    """A few hundred connections that never send a byte, against low configured limits: those over
    the limit are closed at once (REST answers them 503), the rest when the header / handshake
    timeout passes; the descriptors come back and both APIs answer again."""
    conf = {**BASE, "rest.port": "0", "rest.max-connections": "50", "rest.header-timeout": "5 s",
            "millstream.rpc.max-connections": "50", "millstream.rpc.handshake-timeout": "5 s"}

    async def main() -> None:
        async with JobManager(cfg.Configuration.from_dict(conf)) as jm:
            rest_port = jm.rest.port
            grpc_port = int(jm.address.rsplit(":", 1)[1])
            fds_before = _open_fds()
            for port in (rest_port, grpc_port):
                started = time.monotonic()
                sockets = await asyncio.to_thread(_idle_sockets, port, 300)
                try:
                    seen: dict[int, bytes] = {}
                    assert await _poll_async(lambda: _closed_by_peer(sockets, seen) >= 250, 5), \
                        f"port {port}: only {_closed_by_peer(sockets, seen)} of the 250 over the limit closed"
                    # the 50 within the limit are closed by the header / handshake timeout
                    assert await _poll_async(lambda: _closed_by_peer(sockets, seen) == 300, 20), \
                        f"port {port}: {300 - _closed_by_peer(sockets, seen)} silent connections still open"
                    assert time.monotonic() - started < 20
                    if port == rest_port:  # only those over the limit were told why
                        busy = [v for v in seen.values() if v.startswith(b"HTTP/1.1 503")]
                        assert len(busy) == 250 and b"rest.max-connections" in busy[0]
                finally:
                    for sock in sockets:
                        sock.close()
            assert await _poll_async(lambda: _open_fds() <= fds_before + 5, 10), (_open_fds(), fds_before)
            # both answer again
            status, _ = await asyncio.to_thread(_get, f"http://127.0.0.1:{rest_port}/overview")
            assert status == 200
            async with aio_channel(jm.address) as channel:
                await cpb_grpc.DispatcherStub(channel).GetClusterOverview(cpb.Empty(), timeout=5)

    asyncio.run(main())


def test_rest_and_grpc_close_connections_left_idle() -> None:
    conf = {**BASE, "rest.port": "0", "rest.idle-timeout": "2 s", "millstream.rpc.max-connection-idle": "2 s"}

    async def main() -> None:
        async with JobManager(cfg.Configuration.from_dict(conf)) as jm:
            def request_then_idle() -> tuple[bytes, float]:
                with socket.create_connection(("127.0.0.1", jm.rest.port), timeout=15) as sock:
                    sock.sendall(b"GET /overview HTTP/1.1\r\nHost: localhost\r\n\r\n")
                    started, received = time.monotonic(), b""
                    while chunk := sock.recv(65536):
                        received += chunk
                    return received, time.monotonic() - started

            received, open_s = await asyncio.to_thread(request_then_idle)
            assert received.startswith(b"HTTP/1.1 200")
            assert 1.5 < open_s < 10  # closed by rest.idle-timeout, not kept for aiohttp's default hour
            channel = aio_channel(jm.address)
            try:
                await cpb_grpc.DispatcherStub(channel).GetClusterOverview(cpb.Empty(), timeout=5)
                assert channel.get_state() is grpc.ChannelConnectivity.READY
                # no call for millstream.rpc.max-connection-idle: the server ends the connection
                for _ in range(100):
                    if channel.get_state() is not grpc.ChannelConnectivity.READY:
                        break
                    await asyncio.sleep(0.1)
                assert channel.get_state() is not grpc.ChannelConnectivity.READY
                await cpb_grpc.DispatcherStub(channel).GetClusterOverview(cpb.Empty(), timeout=5)  # reconnects
            finally:
                await channel.close()

    asyncio.run(main())


async def _poll_async(check: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        await asyncio.sleep(0.1)
    return bool(check())


def test_rest_answers_only_its_own_host_names() -> None:
    """DNS rebinding: a page of evil.example made to resolve to the JobManager sends Host: evil.example."""
    conf = {**BASE, "jobmanager.rpc.address": "127.0.0.1", "jobmanager.bind-host": "127.0.0.1", "rest.port": "0",
            "rest.bind-address": "127.0.0.1"}

    async def main() -> None:
        async with JobManager(cfg.Configuration.from_dict({**conf, "jobmanager.rpc.address": "jm.internal"})) as jm:
            url = f"http://127.0.0.1:{jm.rest.port}/overview"
            for host in ("localhost", f"localhost:{jm.rest.port}", "127.0.0.1", "[::1]:8081", "jm.internal:8081",
                         "JM.Internal"):
                status, _ = await asyncio.to_thread(_get, url, host)
                assert status == 200, host
            for host in ("evil.example", f"evil.example:{jm.rest.port}", "localhost.evil.example"):
                status, body = await asyncio.to_thread(_get, url, host)
                assert status == 421, host
                assert "is not a name of this REST API" in body and "rest.allowed-hosts" in body
            status, _ = await asyncio.to_thread(_get, f"http://127.0.0.1:{jm.rest.port}/", "evil.example")
            assert status == 421  # the web UI too
        async with JobManager(cfg.Configuration.from_dict({**conf, "rest.allowed-hosts": "evil.example;other"})) as jm:
            url = f"http://127.0.0.1:{jm.rest.port}/overview"
            assert (await asyncio.to_thread(_get, url, "evil.example"))[0] == 200
            assert (await asyncio.to_thread(_get, url, "third.example"))[0] == 421
        async with JobManager(cfg.Configuration.from_dict({**conf, "rest.allowed-hosts": "*"})) as jm:
            assert (await asyncio.to_thread(_get, f"http://127.0.0.1:{jm.rest.port}/overview", "any.example"))[0] == 200

    asyncio.run(main())


def test_a_tasks_credential_cannot_report_slots_or_register_at_a_real_jobmanager() -> None:
    """What a user function could read in its worker (its attempt's credential) is refused by the
    JobManager's ResourceManager and JobMaster, before anything runs."""
    from millstream.runtime.rpc.auth import task_credential
    from millstream.runtime.rpc.security import Credentials

    cluster_token = "the-cluster-token"
    conf = {**BASE, "security.auth.client-token": "the-client-token", "security.auth.cluster-token": cluster_token}

    async def main() -> None:
        async with JobManager(cfg.Configuration.from_dict(conf)) as jm:
            credential = task_credential(cluster_token, b"a" * 16)
            async with aio_channel(jm.address, credentials=Credentials(None, credential)) as channel:
                rm = cpb_grpc.ResourceManagerStub(channel)
                for call in (rm.SendSlotReport(cpb.SlotReportRequest(resource_id="tm"), timeout=10),
                             rm.RegisterTaskManager(cpb.RegisterTaskManagerRequest(
                                 resource_id="tm", address="127.0.0.1:1", num_slots=1), timeout=10),
                             cpb_grpc.JobMasterServiceStub(channel).AcknowledgeCheckpoint(
                                 cpb.AcknowledgeCheckpointRequest(checkpoint_id=1), timeout=10)):
                    with pytest.raises(grpc.aio.AioRpcError) as refused:
                        await call
                    assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED
                    assert "a task's credential, which may only look up partitions" in refused.value.details()
            async with aio_channel(jm.address, credentials=Credentials(None, "the-client-token")) as client:
                overview = await cpb_grpc.DispatcherStub(client).GetClusterOverview(cpb.Empty(), timeout=10)
                assert overview.taskmanagers == 0  # nothing registered, and the JobManager serves on

    asyncio.run(main())
