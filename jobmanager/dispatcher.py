"""The Dispatcher: accepts jobs, starts one JobMaster each, and keeps their results for a while.

Submissions are idempotent by the client's submission id. A submission returns the job id as
soon as the JobGraph is validated and its artifacts stored (the job is INITIALIZING); building
the ExecutionGraph runs in a thread and the JobMaster starts when it is done, so a large job never
blocks the event loop nor outlives the client's deadline unknown to it. A job id cancelled before
its submission arrived is remembered, so a late submission cannot start it. A finished job's
record (status, failure, collected records) stays for ``jobstore.expiration-time`` so a client can
still fetch it.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import time
from dataclasses import dataclass, field
from typing import AsyncIterator, Callable

import grpc
from google.protobuf.message import DecodeError

from millstream.jobmanager.blob_server import BlobStore, InvalidArtifactError, check_artifact_name
from millstream.jobmanager.execution_state import JobStatus
from millstream.jobmanager.job_graph_validation import InvalidJobGraphError, validate_job_graph
from millstream.jobmanager.job_master_core import JobMasterCore
from millstream.jobmanager.job_master import JobMaster
from millstream.proto import cluster_pb2 as cpb
from millstream.proto import cluster_pb2_grpc as cpb_grpc
from millstream.proto import jobgraph_pb2 as pb

log = logging.getLogger(__name__)


CANCELLED_IDS_KEPT = 10_000


class DispatcherError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def wall_ms() -> int:
    return int(time.time() * 1000)


@dataclass(eq=False)
class JobRecord:
    job_id: bytes
    job_name: str
    submission_id: str
    num_tasks: int
    status: JobStatus = JobStatus.INITIALIZING
    start_time_ms: int = field(default_factory=wall_ms)
    end_time_ms: int = 0
    failure: cpb.JobFailure | None = None
    collected: list[cpb.CollectBatch] = field(default_factory=list)
    job_master: JobMaster | None = None
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    version: int = 0

    def summary(self) -> cpb.JobSummary:
        summary = cpb.JobSummary(
            job_id=self.job_id,
            job_name=self.job_name,
            status=self.status.to_proto(),  # type: ignore[arg-type]  # an enum value is an int
            start_time_ms=self.start_time_ms,
            end_time_ms=self.end_time_ms,
            num_tasks=self.num_tasks,
        )
        if self.job_master is not None:
            summary.tasks_per_state.update(self.job_master.core.tasks_per_state())
        if self.failure is not None:
            summary.failure.CopyFrom(self.failure)
        return summary

    async def notify(self) -> None:
        async with self.changed:
            self.version += 1
            self.changed.notify_all()


class Dispatcher:
    def __init__(
        self,
        blob_store: BlobStore,
        make_job_master: Callable[[JobMasterCore, Callable[[JobStatus, cpb.JobFailure | None], None]], JobMaster],
        total_slots: Callable[[], int],
        job_retention_ms: int,
    ) -> None:
        self._blobs = blob_store
        self._make_job_master = make_job_master
        self._total_slots = total_slots
        self._retention_ms = job_retention_ms
        self.jobs: dict[bytes, JobRecord] = {}
        self._by_submission: dict[str, bytes] = {}
        # Job ids cancelled before any submission of them arrived (a client that gave up).
        self._cancelled_before_submission: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        self._starting: set[asyncio.Task[None]] = set()

    # -- submission ----------------------------------------------------------------------------

    def submit(self, request: cpb.SubmitJobRequest) -> cpb.SubmitJobResponse:
        if request.submission_id and request.submission_id in self._by_submission:
            return cpb.SubmitJobResponse(job_id=self._by_submission[request.submission_id], duplicate=True)
        try:
            graph = pb.JobGraph.FromString(request.job_graph)
        except DecodeError as exc:
            raise DispatcherError(grpc.StatusCode.INVALID_ARGUMENT, f"The JobGraph cannot be decoded: {exc}") from exc
        try:
            validate_job_graph(graph)
        except InvalidJobGraphError as exc:
            raise DispatcherError(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid JobGraph: {exc}") from exc
        existing = self.jobs.get(graph.job_id)
        if existing is not None and not existing.status.is_terminal():
            raise DispatcherError(
                grpc.StatusCode.ALREADY_EXISTS, f"Job {graph.job_id.hex()} ('{existing.job_name}') is already running."
            )
        if graph.job_id in self._cancelled_before_submission:
            raise DispatcherError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"Job {graph.job_id.hex()} was cancelled by its client before this submission arrived; it is not started.",
            )
        artifacts: list[cpb.ArtifactRef] = []
        try:
            for artifact in request.artifacts:
                artifacts.append(cpb.ArtifactRef(name=check_artifact_name(artifact.name), blob_key=self._blobs.put(artifact.content)))
        except InvalidArtifactError as exc:
            raise DispatcherError(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from exc
        num_tasks = sum(v.parallelism for v in graph.vertices)
        record = JobRecord(graph.job_id, graph.job_name, request.submission_id, num_tasks)
        self.jobs[graph.job_id] = record
        if request.submission_id:
            self._by_submission[request.submission_id] = graph.job_id
        log.info("job %s ('%s') accepted: %d tasks", graph.job_id.hex(), graph.job_name, num_tasks)
        starting = asyncio.ensure_future(self._start_job(record, graph, artifacts))
        self._starting.add(starting)
        starting.add_done_callback(self._starting.discard)
        return cpb.SubmitJobResponse(job_id=graph.job_id)

    async def _start_job(self, record: JobRecord, graph: pb.JobGraph, artifacts: list[cpb.ArtifactRef]) -> None:
        """Builds the ExecutionGraph off the event loop, then starts the job's JobMaster."""
        started = time.monotonic()
        try:
            core = await asyncio.to_thread(JobMasterCore, graph, artifacts)
        except Exception as exc:  # the job fails with the reason; the Dispatcher keeps serving
            log.exception("job %s: building its ExecutionGraph failed", graph.job_id.hex())
            if not record.status.is_terminal():
                failure = cpb.JobFailure(message=f"Could not build the ExecutionGraph: {type(exc).__name__}: {exc}")
                self._on_status(record, JobStatus.FAILED, failure)
            return
        if record.status.is_terminal():
            return  # cancelled while initializing
        record.job_master = self._make_job_master(core, lambda status, failure: self._on_status(record, status, failure))
        record.status = JobStatus.CREATED
        log.info(
            "job %s ('%s') created in %.2f s: %d tasks, %d slots",
            graph.job_id.hex(), graph.job_name, time.monotonic() - started, record.num_tasks, core.required_slots,
        )
        record.job_master.start()

    def _on_status(self, record: JobRecord, status: JobStatus, failure: cpb.JobFailure | None) -> None:
        record.status = status
        if failure is not None:
            record.failure = failure
        if status.is_terminal():
            record.end_time_ms = wall_ms()
            if record.job_master is not None:
                asyncio.ensure_future(record.job_master.stop())
        asyncio.ensure_future(record.notify())

    def add_collected(self, job_id: bytes, batch: cpb.CollectBatch) -> None:
        record = self.jobs.get(job_id)
        if record is not None:
            record.collected.append(batch)
            asyncio.ensure_future(record.notify())

    # -- queries -------------------------------------------------------------------------------

    def record(self, job_id: bytes) -> JobRecord:
        record = self.jobs.get(job_id)
        if record is None:
            raise DispatcherError(grpc.StatusCode.NOT_FOUND, f"No job with id {job_id.hex() or '<empty>'}.")
        return record

    def job_master(self, job_id: bytes) -> JobMaster:
        record = self.record(job_id)
        if record.job_master is None:
            raise DispatcherError(grpc.StatusCode.FAILED_PRECONDITION, f"Job {job_id.hex()} has no JobMaster.")
        return record.job_master

    def cancel(self, job_id: bytes) -> cpb.JobSummary:
        if job_id and job_id not in self.jobs:
            self._cancelled_before_submission[job_id] = None
            while len(self._cancelled_before_submission) > CANCELLED_IDS_KEPT:
                self._cancelled_before_submission.popitem(last=False)
        record = self.record(job_id)
        if not record.status.is_terminal():
            if record.job_master is not None:
                record.job_master.cancel()
            elif record.status is JobStatus.INITIALIZING:  # its ExecutionGraph is still being built
                self._on_status(record, JobStatus.CANCELED, None)
        return record.summary()

    async def wait(self, job_id: bytes) -> AsyncIterator[cpb.JobStatusUpdate]:
        record = self.record(job_id)
        sent_batches = 0
        last_status: JobStatus | None = None
        while True:
            async with record.changed:
                version = record.version
            batches = record.collected[sent_batches:]
            sent_batches += len(batches)
            terminal = record.status.is_terminal()
            if batches or record.status is not last_status or terminal:
                last_status = record.status
                yield cpb.JobStatusUpdate(summary=record.summary(), collected=batches, terminal=terminal)
            if terminal:
                return
            async with record.changed:
                await record.changed.wait_for(lambda seen=version: record.version != seen)

    def expire_finished(self) -> None:
        cutoff = wall_ms() - self._retention_ms
        for job_id, record in list(self.jobs.items()):
            if record.status.is_terminal() and record.end_time_ms and record.end_time_ms < cutoff:
                del self.jobs[job_id]
                if record.submission_id:
                    self._by_submission.pop(record.submission_id, None)


class DispatcherServicer(cpb_grpc.DispatcherServicer):
    def __init__(self, dispatcher: Dispatcher, overview: Callable[[], cpb.ClusterOverview]) -> None:
        self.dispatcher = dispatcher
        self._overview = overview

    async def _guard(self, context: grpc.aio.ServicerContext, fn: Callable, *args):  # noqa: ANN202
        try:
            return fn(*args)
        except DispatcherError as exc:
            await context.abort(exc.code, str(exc))

    async def SubmitJob(self, request, context):  # noqa: N802, ANN001, ANN201
        return await self._guard(context, self.dispatcher.submit, request)

    async def ListJobs(self, request, context):  # noqa: N802, ANN001, ANN201
        return cpb.ListJobsResponse(jobs=[r.summary() for r in self.dispatcher.jobs.values()])

    async def GetJobStatus(self, request, context):  # noqa: N802, ANN001, ANN201
        record = await self._guard(context, self.dispatcher.record, request.job_id)
        return record.summary()

    async def CancelJob(self, request, context):  # noqa: N802, ANN001, ANN201
        return await self._guard(context, self.dispatcher.cancel, request.job_id)

    async def WaitJobResult(self, request, context):  # noqa: N802, ANN001, ANN201
        await self._guard(context, self.dispatcher.record, request.job_id)
        async for update in self.dispatcher.wait(request.job_id):
            yield update

    async def GetClusterOverview(self, request, context):  # noqa: N802, ANN001, ANN201
        return self._overview()
