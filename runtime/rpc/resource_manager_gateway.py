"""What a TaskManager calls on the ResourceManager (Flink's ResourceManagerGateway, the TaskExecutor's
part), and its gRPC implementation.

A TaskManager registers with the leader's ResourceManager, reports its slots and says when it
leaves only through a :class:`ResourceManagerGateway`; :class:`GrpcResourceManagerGateway` carries
each call over the caller's gRPC channel (fencing token, TLS and limits are the channel's). Its calls
raise ``grpc.aio.AioRpcError`` as the stub does, and the callers decide (retry a registration while
the leader is unavailable, leave a failed goodbye to the heartbeats).
(A JobMaster declares its slot requirements to the ResourceManager in the same process:
``jobmaster.job_master.SlotRequirementsReceiver``.)
"""
from __future__ import annotations

from typing import Protocol

import grpc

from millstream.proto import cluster_pb2 as cpb
from millstream.proto import cluster_pb2_grpc as cpb_grpc


class ResourceManagerGateway(Protocol):
    """The leader's ResourceManager, as a TaskManager calls it. ``timeout``: seconds."""

    async def register_task_manager(self, request: cpb.RegisterTaskManagerRequest,
                                    timeout: float) -> cpb.RegisterTaskManagerResponse:
        """Offer this TaskManager's slots; the answer carries the registration id every later call
        names, and the heartbeat interval and timeout."""

    async def send_slot_report(self, request: cpb.SlotReportRequest, timeout: float) -> None:
        """The TaskManager's slots as they are now (the source of truth for the slot ledger)."""

    async def disconnect_task_manager(self, request: cpb.TaskManagerRef, timeout: float) -> None:
        """The TaskManager leaves: its slots leave the ledger at once, not at a heartbeat timeout."""


class GrpcResourceManagerGateway:
    """A :class:`ResourceManagerGateway` over a gRPC channel to the JobManager."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._stub = cpb_grpc.ResourceManagerStub(channel)

    async def register_task_manager(self, request: cpb.RegisterTaskManagerRequest,
                                    timeout: float) -> cpb.RegisterTaskManagerResponse:
        response: cpb.RegisterTaskManagerResponse = await self._stub.RegisterTaskManager(request, timeout=timeout)
        return response

    async def send_slot_report(self, request: cpb.SlotReportRequest, timeout: float) -> None:
        await self._stub.SendSlotReport(request, timeout=timeout)

    async def disconnect_task_manager(self, request: cpb.TaskManagerRef, timeout: float) -> None:
        await self._stub.DisconnectTaskManager(request, timeout=timeout)
