"""What the JobManager calls on a TaskManager (Flink's TaskExecutorGateway), and its gRPC implementation.

The JobMasters (deploy, cancel, free slots, heartbeats, checkpoint triggers and notifications),
the ResourceManager (slot requests, frees, heartbeats) and the task logs (task output, log files
for the REST API and ``millstream logs``) talk to a TaskManager only through a
:class:`TaskExecutorGateway`; :class:`GrpcTaskExecutorGateway` carries each call over one gRPC
channel (the caller's: fencing token, TLS and limits are the channel's). Its calls raise
``grpc.aio.AioRpcError`` as the stub does, which the callers turn into their decisions (a refused
connection counts towards a heartbeat target's loss, a failed deployment fails the attempt).
"""
from __future__ import annotations

from typing import Any, Protocol

import grpc

from millstream.proto import cluster_pb2 as cpb
from millstream.proto import cluster_pb2_grpc as cpb_grpc

_SERVICE = cpb.DESCRIPTOR.services_by_name["TaskExecutor"].full_name
SUBMIT_TASK_METHOD = f"/{_SERVICE}/SubmitTask"


class TaskExecutorGateway(Protocol):
    """One TaskManager's TaskExecutor, as the JobManager's components call it. ``timeout``: seconds."""

    async def request_slot(self, request: cpb.RequestSlotRequest, timeout: float) -> None:
        """Allocate a slot for a job; the TaskManager then offers it to the job's JobMaster."""

    async def submit_task(self, request: bytes, timeout: float) -> None:
        """Deploy a task: ``request`` is a serialized SubmitTaskRequest (built off the event loop)."""

    async def cancel_task(self, request: cpb.CancelTaskRequest, timeout: float) -> None: ...

    async def free_slot(self, request: cpb.FreeSlotRequest, timeout: float) -> None: ...

    async def heartbeat(self, request: cpb.HeartbeatRequest, timeout: float) -> cpb.HeartbeatResponse:
        """The TaskManager's slot report, and the sender's job's task states (a JobMaster's)."""

    async def trigger_checkpoint(self, request: cpb.TriggerCheckpointRequest, timeout: float) -> None: ...

    async def notify_checkpoint(self, request: cpb.CheckpointNotification, timeout: float) -> None: ...

    async def send_operator_event(self, request: cpb.OperatorEventToTask, timeout: float) -> None:
        """A coordinator's event for a running task (Flink's sendOperatorEventToTask); NOT_FOUND if
        the task does not run there."""

    async def get_task_output(self, request: cpb.TaskOutputRequest, timeout: float) -> cpb.TaskOutputResponse:
        """What an attempt's user functions printed and logged, as far as the TaskManager keeps it."""

    async def list_log_files(self, timeout: float) -> cpb.LogFileList: ...

    async def read_log_file(self, request: cpb.ReadLogRequest, timeout: float) -> cpb.ReadLogResponse: ...

    async def thread_dump(self, timeout: float) -> cpb.ThreadDumpResponse: ...


class GrpcTaskExecutorGateway:
    """A :class:`TaskExecutorGateway` over a gRPC channel to the TaskManager."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._channel = channel
        self._stub = cpb_grpc.TaskExecutorStub(channel)

    async def request_slot(self, request: cpb.RequestSlotRequest, timeout: float) -> None:
        await self._stub.RequestSlot(request, timeout=timeout)

    async def submit_task(self, request: bytes, timeout: float) -> None:
        call: Any = self._channel.unary_unary(SUBMIT_TASK_METHOD, request_serializer=None,
                                              response_deserializer=cpb.Empty.FromString)
        await call(request, timeout=timeout)

    async def cancel_task(self, request: cpb.CancelTaskRequest, timeout: float) -> None:
        await self._stub.CancelTask(request, timeout=timeout)

    async def free_slot(self, request: cpb.FreeSlotRequest, timeout: float) -> None:
        await self._stub.FreeSlot(request, timeout=timeout)

    async def heartbeat(self, request: cpb.HeartbeatRequest, timeout: float) -> cpb.HeartbeatResponse:
        response: cpb.HeartbeatResponse = await self._stub.Heartbeat(request, timeout=timeout)
        return response

    async def trigger_checkpoint(self, request: cpb.TriggerCheckpointRequest, timeout: float) -> None:
        await self._stub.TriggerCheckpoint(request, timeout=timeout)

    async def notify_checkpoint(self, request: cpb.CheckpointNotification, timeout: float) -> None:
        await self._stub.NotifyCheckpoint(request, timeout=timeout)

    async def send_operator_event(self, request: cpb.OperatorEventToTask, timeout: float) -> None:
        await self._stub.SendOperatorEvent(request, timeout=timeout)

    async def get_task_output(self, request: cpb.TaskOutputRequest, timeout: float) -> cpb.TaskOutputResponse:
        response: cpb.TaskOutputResponse = await self._stub.GetTaskOutput(request, timeout=timeout)
        return response

    async def list_log_files(self, timeout: float) -> cpb.LogFileList:
        response: cpb.LogFileList = await self._stub.ListLogFiles(cpb.Empty(), timeout=timeout)
        return response

    async def read_log_file(self, request: cpb.ReadLogRequest, timeout: float) -> cpb.ReadLogResponse:
        response: cpb.ReadLogResponse = await self._stub.ReadLogFile(request, timeout=timeout)
        return response

    async def thread_dump(self, timeout: float) -> cpb.ThreadDumpResponse:
        response: cpb.ThreadDumpResponse = await self._stub.ThreadDump(cpb.Empty(), timeout=timeout)
        return response
