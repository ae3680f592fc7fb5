"""What a hostile or broken peer can send the JobManager and a TaskManager's data server: real
in-process servers over real sockets (no Spark: no task runs here)."""
from __future__ import annotations

import asyncio
import resource
import socket
import struct
import time

import grpc
import pytest

from millstream.jobmanager.jobmanager import JobManager
from millstream.proto import cluster_pb2 as cpb
from millstream.proto import cluster_pb2_grpc as cpb_grpc
from millstream.runtime import config as cfg
from millstream.runtime.rpc import RpcServer, aio_channel
from millstream.runtime.wire_bounds import MAX_SLOTS_PER_TASKMANAGER
from millstream.taskmanager.network_partition import PartitionServer
from millstream.taskmanager.network_protocol import FrameReader, Hello, decode_error

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
                    async for _ in cpb_grpc.BlobServerStub(channel).GetBlob(cpb.GetBlobRequest(blob_key="k" * 10_000),
                                                                             timeout=10):
                        pass
                assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
                assert "blob_key has 10000 characters" in refused.value.details()
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
