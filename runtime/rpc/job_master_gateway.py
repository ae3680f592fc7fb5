"""What a TaskManager calls on a job's JobMaster (Flink's JobMasterGateway, the TaskExecutor's part),
and its gRPC implementation.

A TaskManager offers slots to a job, reports its tasks' states, hands in collected results and
printed lines, and acknowledges or declines checkpoints only through a :class:`JobMasterGateway`;
:class:`GrpcJobMasterGateway` carries each call over the caller's gRPC channel to the JobManager
(every message names its job, which the JobMasterService routes to that job's JobMaster). Its calls
raise ``grpc.aio.AioRpcError`` as the stub does; the callers decide what a failure means.
"""
from __future__ import annotations

from typing import Protocol

import grpc

from millstream.proto import cluster_pb2 as cpb
from millstream.proto import cluster_pb2_grpc as cpb_grpc


class JobMasterGateway(Protocol):
    """A job's JobMaster, as a TaskManager calls it. ``timeout``: seconds."""

    async def offer_slots(self, request: cpb.OfferSlotsRequest, timeout: float) -> cpb.OfferSlotsResponse:
        """Offer slots allocated for the job; the answer lists the allocations it accepted."""

    async def update_task_execution_state(self, request: cpb.TaskExecutionState, timeout: float) -> None:
        """A task's new state (and failure, metrics); reports of one task must arrive in order."""

    async def report_collect_batch(self, request: cpb.CollectRequest, timeout: float) -> bool:
        """A batch for ``execute_and_collect``: False when the job's collect buffer stayed full
        within the deadline (report it again later)."""

    async def report_printed_lines(self, request: cpb.PrintedLinesReport, timeout: float) -> None: ...

    async def acknowledge_checkpoint(self, request: cpb.AcknowledgeCheckpointRequest, timeout: float) -> None: ...

    async def decline_checkpoint(self, request: cpb.DeclineCheckpointRequest, timeout: float) -> None: ...

    async def send_operator_event(self, request: cpb.OperatorEventToCoordinator, timeout: float) -> None:
        """A source reader's event for its vertex's coordinator (Flink's sendOperatorEventToCoordinator)."""


class GrpcJobMasterGateway:
    """A :class:`JobMasterGateway` over a gRPC channel to the JobManager."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._stub = cpb_grpc.JobMasterServiceStub(channel)

    async def offer_slots(self, request: cpb.OfferSlotsRequest, timeout: float) -> cpb.OfferSlotsResponse:
        response: cpb.OfferSlotsResponse = await self._stub.OfferSlots(request, timeout=timeout)
        return response

    async def update_task_execution_state(self, request: cpb.TaskExecutionState, timeout: float) -> None:
        await self._stub.UpdateTaskExecutionState(request, timeout=timeout)

    async def report_collect_batch(self, request: cpb.CollectRequest, timeout: float) -> bool:
        response: cpb.CollectResponse = await self._stub.ReportCollectBatch(request, timeout=timeout)
        return response.accepted

    async def report_printed_lines(self, request: cpb.PrintedLinesReport, timeout: float) -> None:
        await self._stub.ReportPrintedLines(request, timeout=timeout)

    async def acknowledge_checkpoint(self, request: cpb.AcknowledgeCheckpointRequest, timeout: float) -> None:
        await self._stub.AcknowledgeCheckpoint(request, timeout=timeout)

    async def decline_checkpoint(self, request: cpb.DeclineCheckpointRequest, timeout: float) -> None:
        await self._stub.DeclineCheckpoint(request, timeout=timeout)

    async def send_operator_event(self, request: cpb.OperatorEventToCoordinator, timeout: float) -> None:
        await self._stub.SendOperatorEvent(request, timeout=timeout)
