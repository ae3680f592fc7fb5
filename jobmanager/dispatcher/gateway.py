"""The Dispatcher's gateway: what a client (through the gRPC servicer) and the REST API ask of it.

As Flink's ``DispatcherGateway``: submit a job, list and look up jobs, cancel one, take a
savepoint, follow a job to its result, pull its collected results. The asyncio shell
(:class:`~millstream.jobmanager.dispatcher.dispatcher.Dispatcher`) implements it; its refusals are
:class:`~millstream.jobmanager.dispatcher.dispatcher_core.DispatcherError`, each with an
:class:`~millstream.jobmanager.dispatcher.dispatcher_core.ErrorKind` that the gRPC servicer and the
REST server map to their own status codes.
"""
from __future__ import annotations

from typing import AsyncIterator, Awaitable, Protocol

from millstream.jobmanager.dispatcher.dispatcher_core import JobRecord
from millstream.proto import cluster_pb2 as cpb


class DispatcherGateway(Protocol):
    async def submit_job(self, request: cpb.SubmitJobRequest) -> cpb.SubmitJobResponse:
        """Accepts the job (idempotent by ``request.submission_id``); under HA, once it is stored."""
        ...

    def list_jobs(self) -> list[JobRecord]:
        """Every job this Dispatcher knows: running, and ended ones still in its job store."""
        ...

    def request_job(self, job_id: bytes) -> JobRecord | None:
        """The job's record (its summary, status times, plan, exception history); None if unknown."""
        ...

    def cancel_job(self, job_id: bytes) -> cpb.JobSummary:
        """Cancels the job; answers its summary (NOT_FOUND if unknown)."""
        ...

    def trigger_savepoint(self, job_id: bytes, target_directory: str, stop: bool, drain: bool = False) -> Awaitable[str]:
        """Checks the request at once (raises if refused) and returns the savepoint being taken,
        which resolves to its path."""
        ...

    def trigger_checkpoint(self, job_id: bytes, full: bool = False) -> Awaitable[int]:
        """Checks the request at once (raises if refused) and returns the checkpoint being taken,
        which resolves to its id."""
        ...

    async def dispose_savepoint(self, path: str) -> str:
        """Deletes the savepoint at ``path`` (raises if it is none); answers its directory."""
        ...

    def request_job_result(self, job_id: bytes) -> AsyncIterator[cpb.JobStatusUpdate]:
        """The job's updates until it ends (the last one is terminal)."""
        ...

    async def fetch_collected(self, request: cpb.FetchCollectRequest, wait_s: float) -> cpb.FetchCollectResponse:
        """The client's pull of the job's collected results, waiting up to ``wait_s`` for some."""
        ...
