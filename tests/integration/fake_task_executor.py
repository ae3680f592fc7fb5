"""TaskManagers without Spark, for measuring the JobManager alone at high parallelism.

A ``FakeTaskExecutor`` is a real gRPC TaskExecutor server: it registers with the ResourceManager,
answers heartbeats with a true slot report, offers requested slots to the JobMaster and accepts
``SubmitTask`` by reporting INITIALIZING and RUNNING (and CANCELED on ``CancelTask``) as a real
TaskManager does, without running anything. Used by the scale benchmark and its integration test.
"""
from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import grpc

from millstream.proto import cluster_pb2 as cpb
from millstream.proto import cluster_pb2_grpc as cpb_grpc
from millstream.runtime.rpc.job_master_gateway import GrpcJobMasterGateway, JobMasterGateway
from millstream.runtime.rpc.resource_manager_gateway import GrpcResourceManagerGateway
from millstream.runtime.rpc.service import aio_channel, server_options

RPC_TIMEOUT_S = 60.0
MAX_MESSAGE_BYTES = 256 * 1024 * 1024


class FakeTaskExecutor(cpb_grpc.TaskExecutorServicer):
    def __init__(self, jobmanager_address: str, num_slots: int) -> None:
        self.jobmanager_address = jobmanager_address
        self.num_slots = num_slots
        self.resource_id = f"fake-tm-{uuid.uuid4().hex[:8]}"
        self.address = ""
        self.registration_id = ""
        self.slots: dict[int, tuple[bytes, bytes]] = {}  # slot index -> (allocation id, job id)
        self.tasks: dict[bytes, cpb.TaskDeploymentDescriptor] = {}
        self.submitted = 0
        self.submit_bytes = 0
        self.last_submit_at = 0.0
        self.failed_reports = 0
        self.last_report_error = ""
        self._background: set[asyncio.Task[Any]] = set()
        self._server: grpc.aio.Server | None = None
        self._channel: grpc.aio.Channel | None = None

    async def start(self) -> "FakeTaskExecutor":
        self._server = grpc.aio.server(options=server_options(MAX_MESSAGE_BYTES))
        cpb_grpc.add_TaskExecutorServicer_to_server(self, self._server)
        port = self._server.add_insecure_port("127.0.0.1:0")
        await self._server.start()
        self.address = f"127.0.0.1:{port}"
        self._channel = aio_channel(self.jobmanager_address, MAX_MESSAGE_BYTES)
        response = await GrpcResourceManagerGateway(self._channel).register_task_manager(
            cpb.RegisterTaskManagerRequest(
                resource_id=self.resource_id,
                address=self.address,
                data_address=self.address,
                num_slots=self.num_slots,
                slot_report=self._slot_report(),
            ),
            timeout=RPC_TIMEOUT_S,
        )
        self.registration_id = response.registration_id
        return self

    async def stop(self) -> None:
        for task in list(self._background):
            task.cancel()
        if self._server is not None:
            await self._server.stop(0.5)
        if self._channel is not None:
            await self._channel.close()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _slot_report(self) -> cpb.SlotReport:
        return cpb.SlotReport(
            slots=[
                cpb.SlotStatus(slot_index=i, allocation_id=self.slots.get(i, (b"", b""))[0], job_id=self.slots.get(i, (b"", b""))[1])
                for i in range(self.num_slots)
            ]
        )

    def _jobmaster(self) -> JobMasterGateway:
        assert self._channel is not None
        return GrpcJobMasterGateway(self._channel)

    async def _offer(self, request: cpb.RequestSlotRequest) -> None:
        response = await self._jobmaster().offer_slots(
            cpb.OfferSlotsRequest(
                job_id=request.job_id,
                resource_id=self.resource_id,
                taskmanager_address=self.address,
                data_address=self.address,
                offers=[cpb.SlotOffer(allocation_id=request.allocation_id, slot_index=request.slot_index)],
            ),
            timeout=RPC_TIMEOUT_S,
        )
        if request.allocation_id not in response.accepted:
            self.slots.pop(request.slot_index, None)

    async def _report(self, job_id: bytes, attempt_id: bytes, *states: str) -> None:
        """Reports in order; a failed report is counted and retried (the measurement must end)."""
        for state in states:
            request = cpb.TaskExecutionState(job_id=job_id, execution_attempt_id=attempt_id, state=cpb.ExecutionState.Value(f"EXEC_{state}"))
            for attempt in range(20):
                try:
                    await self._jobmaster().update_task_execution_state(request, timeout=RPC_TIMEOUT_S)
                    break
                except grpc.aio.AioRpcError as exc:
                    self.failed_reports += 1
                    self.last_report_error = f"{exc.code().name}: {exc.details()}"
                    await asyncio.sleep(min(0.05 * 2**attempt, 2.0))

    # -- the TaskExecutor service ----------------------------------------------------------------

    async def RequestSlot(self, request, context):  # noqa: N802, ANN001, ANN201
        self.slots[request.slot_index] = (request.allocation_id, request.job_id)
        self._spawn(self._offer(request))
        return cpb.Empty()

    async def SubmitTask(self, request, context):  # noqa: N802, ANN001, ANN201
        tdd = request.tdd
        self.submitted += 1
        self.submit_bytes += request.ByteSize()
        self.last_submit_at = time.monotonic()
        self.tasks[tdd.execution_attempt_id] = tdd
        self._spawn(self._report(tdd.job_id, tdd.execution_attempt_id, "INITIALIZING", "RUNNING"))
        return cpb.Empty()

    async def CancelTask(self, request, context):  # noqa: N802, ANN001, ANN201
        tdd = self.tasks.pop(request.execution_attempt_id, None)
        if tdd is not None:
            self._spawn(self._report(tdd.job_id, tdd.execution_attempt_id, "CANCELED"))
        return cpb.Empty()

    async def FreeSlot(self, request, context):  # noqa: N802, ANN001, ANN201
        for index, (allocation_id, _) in list(self.slots.items()):
            if allocation_id == request.allocation_id:
                del self.slots[index]
        return cpb.Empty()

    async def Heartbeat(self, request, context):  # noqa: N802, ANN001, ANN201
        return cpb.HeartbeatResponse(slot_report=self._slot_report())

    async def LookupPartition(self, request, context):  # noqa: N802, ANN001, ANN201
        return cpb.LookupPartitionResponse(state=cpb.LookupPartitionResponse.PENDING)


async def start_fake_task_executors(jobmanager_address: str, count: int, slots_each: int) -> list[FakeTaskExecutor]:
    return list(await asyncio.gather(*(FakeTaskExecutor(jobmanager_address, slots_each).start() for _ in range(count))))
