"""The JobManager's components (JobMasters, checkpoint driver, ResourceManager, task logs) call
TaskManagers through TaskExecutorGateway (Flink's gateway per component); its gRPC implementation
maps each method onto its TaskExecutor RPC. No sockets: a recording channel stands for the gRPC
channel."""
from __future__ import annotations

import asyncio
import inspect
import re
from typing import Any

from millstream.jobmanager.checkpoint import driver
from millstream.jobmanager.jobmaster import job_master
from millstream.proto import cluster_pb2 as cpb
from millstream.runtime.rpc.task_executor_gateway import GrpcTaskExecutorGateway, TaskExecutorGateway


class RecordingChannel:
    """Records (RPC name, request, timeout) of every call; answers with an empty response."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any, float | None]] = []

    def unary_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        async def call(request: Any, timeout: float | None = None) -> Any:
            self.calls.append((method.rsplit("/", 1)[1], request, timeout))
            return cpb.HeartbeatResponse() if method.endswith("/Heartbeat") else cpb.Empty()  # enough for the test
        return call

    unary_stream = stream_unary = stream_stream = unary_unary


def test_each_gateway_method_is_its_task_executor_rpc_with_the_callers_timeout() -> None:
    channel = RecordingChannel()
    gateway: TaskExecutorGateway = GrpcTaskExecutorGateway(channel)  # type: ignore[arg-type]
    submit = cpb.SubmitTaskRequest(tdd=cpb.TaskDeploymentDescriptor(execution_attempt_id=b"a" * 16)).SerializeToString()
    calls = [
        (gateway.request_slot, cpb.RequestSlotRequest(slot_index=1), "RequestSlot"),
        (gateway.submit_task, submit, "SubmitTask"),
        (gateway.cancel_task, cpb.CancelTaskRequest(execution_attempt_id=b"a" * 16), "CancelTask"),
        (gateway.free_slot, cpb.FreeSlotRequest(allocation_id=b"s" * 16, cause="done"), "FreeSlot"),
        (gateway.heartbeat, cpb.HeartbeatRequest(sender="jobmaster"), "Heartbeat"),
        (gateway.trigger_checkpoint, cpb.TriggerCheckpointRequest(checkpoint_id=3), "TriggerCheckpoint"),
        (gateway.notify_checkpoint, cpb.CheckpointNotification(checkpoint_id=3), "NotifyCheckpoint"),
        (gateway.get_task_output, cpb.TaskOutputRequest(execution_attempt_id=b"a" * 16), "GetTaskOutput"),
        (gateway.read_log_file, cpb.ReadLogRequest(name="tm.log"), "ReadLogFile"),
    ]

    async def body() -> None:
        for method, request, _ in calls:
            await method(request, timeout=2.5)  # type: ignore[operator]
        await gateway.list_log_files(timeout=2.5)

    asyncio.run(body())
    assert channel.calls == [(rpc, request, 2.5) for _, request, rpc in calls] + [("ListLogFiles", cpb.Empty(), 2.5)]
    # SubmitTask goes out as the bytes the JobMaster built off its event loop, not re-serialized.
    assert channel.calls[1][1] is submit


def test_every_method_the_jobmaster_and_checkpoint_driver_call_by_name_is_a_gateway_method() -> None:
    source = inspect.getsource(job_master) + inspect.getsource(driver)
    named = set(re.findall(r'self\._(?:call|to_task)\([^,]+, "(\w+)"', source))
    assert named == {"cancel_task", "free_slot", "trigger_checkpoint", "notify_checkpoint"}
    assert all(inspect.iscoroutinefunction(getattr(TaskExecutorGateway, name)) for name in named)
