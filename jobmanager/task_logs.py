"""Logs through the JobManager: a job's subtask output and the TaskManagers' log files.

``millstream logs`` and the REST API ask the JobManager; it knows, per subtask, the current
attempt and the TaskManager that ran it (kept with the job's summary once the job ended, see
``JobRecord.final_attempts``), and asks that TaskManager over gRPC, with a deadline, never
blocking its event loop. :func:`select_attempts` is the pure part: which subtasks a request
names, with an error naming what does not exist.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Callable

import grpc

from millstream.proto import cluster_pb2 as cpb
from millstream.runtime.rpc.task_executor_gateway import TaskExecutorGateway

log = logging.getLogger(__name__)

READ_TIMEOUT_S = 5.0  # a TaskManager that does not answer within this is reported, not waited for


class TaskLogError(LookupError):
    """A request names a job, vertex, subtask or TaskManager that does not exist; ``code`` is the
    gRPC status it maps to (REST: 404 or 400)."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class SubtaskAttempt:
    """One subtask's current attempt and where it ran ("" resource id: never deployed)."""

    vertex_id: bytes
    vertex_name: str
    subtask_index: int
    parallelism: int
    attempt_number: int
    attempt_id: bytes
    state: str
    resource_id: str


def attempts_of(core: Any) -> list[SubtaskAttempt]:
    """The current attempts of a JobMasterCore, in vertex order then subtask order."""
    order = {v.id: i for i, v in enumerate(core.graph.job_vertices)}
    attempts = [
        SubtaskAttempt(vertex_id, e.vertex.job_vertex.name, subtask, e.vertex.job_vertex.parallelism, e.attempt_number,
                       e.attempt_id, e.state.value, e.slot.resource_id if e.slot is not None else "")
        for (vertex_id, subtask), e in core.current.items()
    ]
    return sorted(attempts, key=lambda a: (order.get(a.vertex_id, 0), a.subtask_index))


def select_attempts(attempts: list[SubtaskAttempt], vertex: str, subtask: int | None) -> list[SubtaskAttempt]:
    """The attempts a request names: ``vertex`` "" (every vertex), a vertex id (hex) or a name (exact,
    else a unique part of one, case-insensitive); ``subtask`` None (every subtask) or an index."""
    chosen = attempts
    if vertex:
        vertices: dict[bytes, tuple[str, int]] = {}
        for a in attempts:
            vertices.setdefault(a.vertex_id, (a.vertex_name, a.parallelism))
        wanted = vertex.strip().lower()
        matches = [vid for vid in vertices if vid.hex() == wanted] or \
                  [vid for vid, (name, _) in vertices.items() if name.lower() == wanted] or \
                  [vid for vid, (name, _) in vertices.items() if wanted in name.lower()]
        listed = "; ".join(f"{name!r} ({vid.hex()})" for vid, (name, _) in vertices.items())
        if not matches:
            raise TaskLogError(grpc.StatusCode.NOT_FOUND, f"The job has no vertex {vertex!r}; its vertices: {listed}.")
        if len(matches) > 1:
            names = "; ".join(f"{vertices[vid][0]!r} ({vid.hex()})" for vid in matches)
            raise TaskLogError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"Vertex {vertex!r} matches several vertices: {names}; give its id or full name.")
        chosen = [a for a in attempts if a.vertex_id == matches[0]]
    if subtask is not None:
        in_range = [a for a in chosen if a.subtask_index == subtask]
        if not in_range:
            bounds = ", ".join(sorted({f"{a.vertex_name!r}: 0..{a.parallelism - 1}" for a in chosen}))
            raise TaskLogError(grpc.StatusCode.NOT_FOUND,
                               f"No subtask {subtask} (subtasks count from 0; {bounds}).")
        chosen = in_range
    return chosen


def _header(a: SubtaskAttempt) -> cpb.SubtaskOutput:
    return cpb.SubtaskOutput(vertex_id=a.vertex_id.hex(), vertex_name=a.vertex_name, subtask_index=a.subtask_index,
                             parallelism=a.parallelism, attempt_number=a.attempt_number, state=a.state,
                             taskmanager_id=a.resource_id)


class TaskLogs:
    """Reads task output and TaskManager log files for the Dispatcher's RPC and the REST API.

    ``job_attempts(job_id)``: (job name, current attempts) or a :class:`TaskLogError`;
    ``taskmanager_address(resource_id)``: where a registered TaskManager serves (None: gone);
    ``gateway(address)``: the TaskExecutorGateway of the TaskManager at ``address``.
    """

    def __init__(self, job_attempts: Callable[[bytes], tuple[str, list[SubtaskAttempt]]],
                 taskmanager_address: Callable[[str], str | None], gateway: Callable[[str], TaskExecutorGateway],
                 timeout_s: float = READ_TIMEOUT_S) -> None:
        self.job_attempts = job_attempts
        self._address = taskmanager_address
        self._gateway = gateway
        self.timeout_s = timeout_s

    async def task_outputs(self, request: cpb.TaskOutputsRequest) -> cpb.TaskOutputsResponse:
        job_name, attempts = self.job_attempts(request.job_id)
        chosen = select_attempts(attempts, request.vertex, request.subtask if request.HasField("subtask") else None)
        outputs = await asyncio.gather(*(self.output(a) for a in chosen))
        return cpb.TaskOutputsResponse(job_name=job_name, subtasks=outputs)

    async def output(self, a: SubtaskAttempt) -> cpb.SubtaskOutput:
        out = _header(a)
        if not a.resource_id:
            out.unavailable_reason = f"never deployed (state {a.state}): no output yet"
            return out
        address = self._address(a.resource_id)
        if address is None:
            out.unavailable_reason = f"TaskManager {a.resource_id} is gone (no longer registered): its output is lost"
            return out
        try:
            response = await self._gateway(address).get_task_output(
                cpb.TaskOutputRequest(execution_attempt_id=a.attempt_id), timeout=self.timeout_s)
        except grpc.aio.AioRpcError as exc:
            out.unavailable_reason = f"TaskManager {a.resource_id} at {address} did not answer: {exc.code().name} {exc.details()}"
            return out
        if not response.found:
            out.unavailable_reason = (f"TaskManager {a.resource_id} no longer keeps this attempt's output "
                                      "(taskmanager.task-output.retained-attempts)")
            return out
        out.available = True
        out.lines.extend(response.lines)
        out.dropped_lines = response.dropped_lines
        return out

    async def list_files(self, resource_id: str) -> cpb.LogFileList:
        address = self._registered(resource_id)
        return await self._call(resource_id, self._gateway(address).list_log_files(timeout=self.timeout_s))

    async def read_file(self, resource_id: str, name: str = "", stdout: bool = False, max_bytes: int = 0) -> cpb.ReadLogResponse:
        address = self._registered(resource_id)
        request = cpb.ReadLogRequest(name=name, stdout=stdout, max_bytes=max_bytes)
        return await self._call(resource_id, self._gateway(address).read_log_file(request, timeout=self.timeout_s))

    async def thread_dump(self, resource_id: str) -> cpb.ThreadDumpResponse:
        """The TaskManager's Python threads and stacks."""
        address = self._registered(resource_id)
        return await self._call(resource_id, self._gateway(address).thread_dump(timeout=self.timeout_s))

    def _registered(self, resource_id: str) -> str:
        address = self._address(resource_id)
        if address is None:
            raise TaskLogError(grpc.StatusCode.NOT_FOUND, f"TaskManager {resource_id} not found (not registered).")
        return address

    @staticmethod
    async def _call(resource_id: str, call: Any) -> Any:
        try:
            return await call
        except grpc.aio.AioRpcError as exc:
            raise TaskLogError(grpc.StatusCode.UNAVAILABLE,
                               f"TaskManager {resource_id} did not answer: {exc.code().name} {exc.details()}") from exc
