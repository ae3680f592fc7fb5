"""The Dispatcher: accepts jobs, starts one JobMaster each, and keeps their results for a while.

This module is the asyncio shell around :class:`DispatcherCore` (``dispatcher_core``), which makes
every decision (acceptance, job records and their states, results, cancel and savepoint requests,
recovery) without I/O. The shell stores artifacts, builds ExecutionGraphs in a thread, starts and
stops JobMasters, writes to HA storage, waits (collect backpressure, ``WaitJobResult``) and serves
gRPC; it implements the :class:`DispatcherGateway` the REST API calls.

Submissions are idempotent by the client's submission id. A submission returns the job id as
soon as the JobGraph is validated and its artifacts stored (the job is INITIALIZING); building
the ExecutionGraph runs in a thread and the JobMaster starts when it is done, so a large job never
blocks the event loop nor outlives the client's deadline unknown to it. A job id cancelled before
its submission arrived is remembered, so a late submission cannot start it.

A finished job keeps only its summary (status, times, failure): its JobMaster and ExecutionGraph
are dropped when it ends, and the summary stays for ``jobstore.expiration-time``, at most
``jobstore.max-capacity`` of them (the oldest go first), as in Flink's job store.

Each summary carries the job's vertices (task states, record totals; a finished job keeps its
final ones) and, while the JobMaster waits for slots, how many it has and when it gives up.
The lines a job prints on a cluster reach every attached client: TaskManagers report them in
batches, a bounded :class:`PrintedLines` per job keeps the last ones, and ``WaitJobResult`` streams
them (at most every ``printed_lines_interval_s``) with the summary. In the embedded mode the
TaskManager prints to the user's console itself and reports nothing, so no line shows twice.

``execute_and_collect`` results pass through a bounded :class:`CollectBuffer` per job: the collect
sinks' reports wait while it is full, the client pulls it in bounded chunks by offset, and what the
client acknowledged is dropped at once. A job that restarts (its restart strategy, no checkpoints
yet) starts over from its sources, so its collect sinks would send the records of the failed attempt
again: the buffer of a job whose results are being collected is discarded when the job restarts,
and the client's next pull fails with a message that says so (FAILED_PRECONDITION); the client then
cancels the job. Records of a failed attempt never reach the client twice.

Each job's restart strategy is resolved at submission (its own setting, then the
``restart-strategy.*`` keys of its configuration, then the cluster's, then Flink's default); a bad
setting rejects the submission with the key and value.
"""
from __future__ import annotations

import asyncio
import logging
import time
import weakref
from typing import Any, AsyncIterator, Awaitable, Callable, Mapping, cast

import grpc

from millstream.jobmanager.blob_server import BlobStore
from millstream.jobmanager.checkpoint.driver import SavepointError
from millstream.jobmanager.dispatcher.dispatcher_core import (
    CancelJobMaster,
    CleanUpJob,
    Command,
    DispatcherCore,
    DispatcherError,
    ErrorKind,
    JobChanged,
    JobRecord,
    LaunchJob,
    StartJobMaster,
    StopJobMaster,
)
from millstream.jobmanager.dispatcher.gateway import DispatcherGateway
from millstream.jobmanager.dispatcher.job_persistence import JobPersistence, result_entry
from millstream.runtime.artifact_names import InvalidArtifactError, check_archive_target, check_artifact_name
from millstream.jobmanager.jobmaster.job_master import JobMaster
from millstream.jobmanager.jobmaster.job_master_core import JobMasterCore
from millstream.jobmanager.task_logs import SubtaskAttempt, TaskLogError, TaskLogs, attempts_of
from millstream.proto import cluster_pb2 as cpb
from millstream.proto import cluster_pb2_grpc as cpb_grpc
from millstream.jobmanager.checkpoint.settings import unaligned_checkpoints_warning
from millstream.runtime.checkpoint_storage import CheckpointStorageError, dispose_savepoint
from millstream.runtime.clock import wall_ms
from millstream.runtime.execution_state import JobStatus
from millstream.runtime.restart_strategy import NoRestart

__all__ = ["Dispatcher", "DispatcherError", "DispatcherServicer", "ErrorKind", "JobRecord", "grpc_status",
           "wait_within_deadline"]

log = logging.getLogger(__name__)


PRINTED_LINES_INTERVAL_S = 0.2  # a waiter gets printed lines at most this often
PROGRESS_INTERVAL_S = 1.0  # ... and a changed summary (task states, records) at most this often

# The Dispatcher's refusals as gRPC status codes (the core knows no gRPC).
GRPC_STATUS: dict[ErrorKind, grpc.StatusCode] = {
    ErrorKind.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorKind.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    ErrorKind.FAILED_PRECONDITION: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorKind.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorKind.OUT_OF_RANGE: grpc.StatusCode.OUT_OF_RANGE,
    ErrorKind.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
}


def grpc_status(error: DispatcherError) -> grpc.StatusCode:
    return GRPC_STATUS[error.kind]


class Dispatcher(DispatcherGateway):
    """Runs a :class:`DispatcherCore`'s commands on the event loop."""

    def __init__(
        self,
        blob_store: BlobStore,
        make_job_master: Callable[[JobMasterCore, Callable[[JobStatus, cpb.JobFailure | None], None]], JobMaster],
        total_slots: Callable[[], int],
        job_retention_ms: int,
        max_finished_jobs: int = 1000,
        collect_buffer_bytes: int = 8 << 20,
        slot_timeout_at_ms: Callable[[bytes], int | None] = lambda job_id: None,
        printed_lines_interval_s: float = PRINTED_LINES_INTERVAL_S,
        progress_interval_s: float = PROGRESS_INTERVAL_S,
        printed_lines: tuple[int, int] = (1000, 256 << 10),
        restart_options: Mapping[str, object] | None = None,
        checkpoint_options: Mapping[str, object] | None = None,
        persistence: JobPersistence | None = None,
        exception_history_size: int = 16,
    ) -> None:
        """``slot_timeout_at_ms(job_id)``: the wall-clock time a job waiting for slots fails (the
        ResourceManager's slot request timeout), None when it is not waiting; ``printed_lines``: the
        bound of a job's buffered printed lines (lines, characters); ``restart_options``: the cluster's
        ``restart-strategy.*`` values (``restart_strategy.options_of``); ``checkpoint_options``: its
        ``execution.checkpointing.*`` values (``checkpointing.checkpoint_options_of``);
        ``persistence``: HA storage of jobs and results (None without HA: nothing is stored);
        ``exception_history_size``: the failures kept per job (``web.exception-history-size``)."""
        self.core = DispatcherCore(
            job_retention_ms,
            max_finished_jobs=max_finished_jobs,
            collect_buffer_bytes=collect_buffer_bytes,
            slot_timeout_at_ms=slot_timeout_at_ms,
            printed_lines=printed_lines,
            restart_options=restart_options,
            checkpoint_options=checkpoint_options,
            exception_history_size=exception_history_size,
        )
        self._blobs = blob_store
        self._make_job_master = make_job_master
        self._total_slots = total_slots
        self._printed_lines_interval_s = printed_lines_interval_s
        self._progress_interval_s = progress_interval_s
        self._starting: set[asyncio.Task[None]] = set()
        self._cleanups: set[asyncio.Future[None]] = set()
        # Per record: the event its waiters wait on (set and dropped when the record changes).
        self._changed: weakref.WeakKeyDictionary[JobRecord, asyncio.Event] = weakref.WeakKeyDictionary()
        # HA: the job graph being stored, per record (its cleanup waits for it).
        self._persisting: weakref.WeakKeyDictionary[JobRecord, asyncio.Future[None]] = weakref.WeakKeyDictionary()
        self._persistence: JobPersistence | None = None
        self.persistence = persistence

    @property
    def persistence(self) -> JobPersistence | None:
        return self._persistence

    @persistence.setter
    def persistence(self, persistence: JobPersistence | None) -> None:
        """HA storage of jobs and results; set before the first job is accepted."""
        self._persistence = persistence
        self.core.highly_available = persistence is not None

    @property
    def jobs(self) -> dict[bytes, JobRecord]:
        return self.core.jobs

    # -- the core's commands -------------------------------------------------------------------

    def _run(self, commands: list[Command]) -> None:
        for command in commands:
            if isinstance(command, JobChanged):
                event = self._changed.pop(command.record, None)
                if event is not None:
                    event.set()
            elif isinstance(command, StartJobMaster):
                command.job_master.start()
            elif isinstance(command, CancelJobMaster):
                command.job_master.cancel()
            elif isinstance(command, StopJobMaster):
                command.record.final_attempts = attempts_of(command.job_master.core)
                asyncio.ensure_future(command.job_master.stop())
            elif isinstance(command, CleanUpJob):
                self._globally_terminated(command)
            else:  # pragma: no cover - every command is handled above
                raise AssertionError(f"unknown command {command!r}")

    async def _changed_since(self, record: JobRecord, version: int, timeout_s: float) -> bool:
        """Waits until the record changed after ``version`` or ``timeout_s`` passed; True if it changed."""
        if record.version != version:
            return True
        event = self._changed.get(record)
        if event is None:
            event = self._changed[record] = asyncio.Event()
        try:
            await asyncio.wait_for(event.wait(), timeout_s)
        except asyncio.TimeoutError:
            pass
        return record.version != version

    # -- submission ----------------------------------------------------------------------------

    def _accept(self, request: cpb.SubmitJobRequest) -> cpb.SubmitJobResponse | tuple[LaunchJob, list[cpb.ArtifactRef]]:
        """The core's answer to a submission, with the accepted job's artifacts in the BlobStore."""
        accepted = self.core.submit(request, wall_ms())
        if isinstance(accepted, cpb.SubmitJobResponse):
            return accepted
        artifacts: list[cpb.ArtifactRef] = []
        try:
            for artifact in accepted.artifacts:
                target = check_archive_target(artifact.archive_target) if artifact.archive_target else ""
                artifacts.append(cpb.ArtifactRef(name=check_artifact_name(artifact.name),
                                                 blob_key=self._blobs.put(artifact.content), archive_target=target))
        except InvalidArtifactError as exc:
            self.core.forget(accepted.record)
            raise DispatcherError(ErrorKind.INVALID_ARGUMENT, str(exc)) from exc
        except BaseException:
            self.core.forget(accepted.record)
            raise
        record = accepted.record
        log.info("job %s ('%s') accepted: %d tasks", record.job_id.hex(), record.job_name, record.num_tasks)
        if accepted.checkpointing is not None and accepted.checkpointing.unaligned_requested:
            log.warning(unaligned_checkpoints_warning(record.job_name, record.job_id.hex()))
        return accepted, artifacts

    def submit(self, request: cpb.SubmitJobRequest) -> cpb.SubmitJobResponse:
        accepted = self._accept(request)
        if isinstance(accepted, cpb.SubmitJobResponse):
            return accepted
        return self._launch(*accepted)

    async def submit_job(self, request: cpb.SubmitJobRequest) -> cpb.SubmitJobResponse:
        """:meth:`submit`; under HA the whole request is in HA storage before the client hears the
        job was accepted (a failover then recovers it)."""
        if self._persistence is None:
            return self.submit(request)
        accepted = self._accept(request)
        if isinstance(accepted, cpb.SubmitJobResponse):
            return accepted
        record = accepted[0].record
        persistence = self._persistence
        stored = cpb.SubmitJobRequest()
        stored.CopyFrom(request)
        stored.accepted_at_ms = record.start_time_ms  # a leader that recovers the job keeps its start time

        async def persist_then_launch() -> None:
            # One task, whatever happens to the caller's RPC: a stored job is started, a job that
            # could not be stored is forgotten.
            try:
                await asyncio.to_thread(persistence.put, stored, record.job_id)
            except Exception as exc:
                log.error("job %s: storing it in HA storage failed: %s", record.job_id.hex(), exc)
                self.core.forget(record)
                raise
            self._launch(*accepted)

        persisting = self._persisting[record] = asyncio.ensure_future(persist_then_launch())
        try:
            await asyncio.shield(persisting)
        except Exception as exc:
            raise DispatcherError(ErrorKind.UNAVAILABLE,
                                  f"Job {record.job_id.hex()} could not be stored in high-availability storage: {exc}") from exc
        return cpb.SubmitJobResponse(job_id=record.job_id)


    def recover(self, request: cpb.SubmitJobRequest) -> None:
        """A job a former leader accepted (read back from HA storage): it runs again, from its
        latest completed checkpoint."""
        accepted = self._accept(request)
        if isinstance(accepted, cpb.SubmitJobResponse):
            return  # already known here
        record = accepted[0].record
        log.info("job %s ('%s') recovered from HA storage", record.job_id.hex(), record.job_name)
        self._launch(*accepted)

    def unrecoverable(self, job_id: bytes, reason: str) -> None:
        """HA: a job a former leader accepted whose stored graph cannot be read (see the core)."""
        self.core.unrecoverable(job_id, reason, wall_ms())

    def _launch(self, launch: LaunchJob, artifacts: list[cpb.ArtifactRef]) -> cpb.SubmitJobResponse:
        starting = asyncio.ensure_future(self._start_job(launch, artifacts))
        self._starting.add(starting)
        starting.add_done_callback(self._starting.discard)
        return cpb.SubmitJobResponse(job_id=launch.record.job_id)

    async def _start_job(self, launch: LaunchJob, artifacts: list[cpb.ArtifactRef]) -> None:
        """Builds the ExecutionGraph off the event loop, then starts the job's JobMaster."""
        record, graph, checkpointing = launch.record, launch.graph, launch.checkpointing
        started = time.monotonic()
        persistence = self._persistence
        checkpoint_services = None
        try:
            spec = launch.restart_spec if launch.restart_spec is not None else NoRestart()
            history = self.core.exception_history_size
            core = await asyncio.to_thread(lambda: JobMasterCore(graph, artifacts, restart_spec=spec, checkpointing=checkpointing,
                                                                 exception_history_size=history))
            if persistence is not None and checkpointing is not None and not record.status.is_terminal():
                checkpoint_services = await asyncio.to_thread(persistence.checkpoint_services, graph.job_id, checkpointing)
        except Exception as exc:  # the job fails with the reason; the Dispatcher keeps serving
            log.exception("job %s: building its ExecutionGraph failed", graph.job_id.hex())
            self._run(self.core.initialization_failed(
                record, f"Could not build the ExecutionGraph: {type(exc).__name__}: {exc}", wall_ms()))
            return
        if record.status.is_terminal():
            return  # cancelled while initializing: no JobMaster
        on_status: Callable[[JobStatus, cpb.JobFailure | None], None] = lambda status, failure: self._on_status(record, status, failure)
        if checkpoint_services is not None:
            job_master = self._make_job_master(core, on_status, checkpoint_services=checkpoint_services)  # type: ignore[call-arg]
        else:
            job_master = self._make_job_master(core, on_status)
        commands = self.core.job_master_ready(record, job_master, wall_ms())
        log.info(
            "job %s ('%s') created in %.2f s: %d tasks, %d slots",
            graph.job_id.hex(), graph.job_name, time.monotonic() - started, record.num_tasks, core.required_slots,
        )
        self._run(commands)

    def _on_status(self, record: JobRecord, status: JobStatus, failure: cpb.JobFailure | None) -> None:
        self._run(self.core.job_status_changed(record, status, failure, wall_ms()))

    # -- HA cleanup ----------------------------------------------------------------------------

    def _globally_terminated(self, command: CleanUpJob) -> None:
        """HA: the job never runs again: its result first, then its HA data goes (in a thread)."""
        persistence = self._persistence
        assert persistence is not None
        record = command.record
        entry = result_entry(record.job_id, record.job_name, command.status, command.failure_message, command.end_time_ms)
        persisting = self._persisting.get(record)

        async def clean_up() -> None:
            if persisting is not None:
                await asyncio.wait([persisting])  # a job cancelled while being stored: stored first
            try:
                await asyncio.to_thread(persistence.globally_terminated, entry, command.checkpoint_services)
            except Exception as exc:  # the next leader finishes it (the dirty result says so)
                log.error("job %s: cleaning up its HA data failed: %s", record.job_id.hex(), exc)

        self._spawn_cleanup(clean_up())

    def clean_up_terminated(self, job_id: bytes) -> None:
        """HA: finish the cleanup of a globally terminal job a former leader left (a dirty result)."""
        persistence = self._persistence
        assert persistence is not None

        async def clean_up() -> None:
            try:
                await asyncio.to_thread(persistence.clean_up, job_id)
            except Exception as exc:
                log.error("job %s: cleaning up its HA data failed: %s", job_id.hex(), exc)

        self._spawn_cleanup(clean_up())

    def _spawn_cleanup(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)

    async def cleanups_done(self, timeout_s: float) -> None:
        """Waits (at most ``timeout_s``) for the HA cleanups under way: a JobManager about to stop
        for good (application mode) leaves its ended jobs' results clean, not dirty."""
        if self._cleanups:
            await asyncio.wait(list(self._cleanups), timeout=timeout_s)

    def suspend_all(self) -> list[object]:
        """Leadership lost (HA): every job's JobMaster stops (its job SUSPENDED) and this Dispatcher
        forgets every job. Returns the suspended jobs' HA checkpoint services, whose locks the
        caller releases."""
        for task in list(self._starting):
            task.cancel()
        released, commands = self.core.suspend_all(wall_ms())
        self._run(commands)
        return released

    def expire_finished(self) -> None:
        self.core.expire_finished(wall_ms())

    # -- collected results (execute_and_collect) ------------------------------------------------

    async def add_collected(self, job_id: bytes, attempt_id: bytes, batch: cpb.CollectBatch, wait_s: float) -> bool:
        """Takes a collect sink's batch. Waits up to ``wait_s`` while the job's buffer is full and
        returns False if it stayed full (the producer reports it again later: backpressure);
        True once the batch is stored, was stored before (a retry), or is not wanted any more."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            record = self.core.jobs.get(job_id)
            version = record.version if record is not None else 0
            delivered, commands = self.core.offer_collected(job_id, attempt_id, batch)
            self._run(commands)
            if delivered or record is None:
                return True
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            await self._changed_since(record, version, remaining)

    async def fetch_collected(self, request: cpb.FetchCollectRequest, wait_s: float) -> cpb.FetchCollectResponse:
        """The client's pull: acknowledges what precedes ``request.offset`` and returns up to
        ``max_bytes`` of batches from there; waits up to ``wait_s`` for some when there are none."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            response, commands = self.core.fetch_collected(request, give_up=loop.time() >= deadline)
            self._run(commands)
            if response is not None:
                return response
            record = self.core.record(request.job_id)
            await self._changed_since(record, record.version, max(0.0, deadline - loop.time()))

    # -- queries and requests (DispatcherGateway) ----------------------------------------------

    def record(self, job_id: bytes) -> JobRecord:
        return self.core.record(job_id)

    def list_jobs(self) -> list[JobRecord]:
        return list(self.core.jobs.values())

    def request_job(self, job_id: bytes) -> JobRecord | None:
        return self.core.jobs.get(job_id)

    def job_attempts(self, job_id: bytes) -> tuple[str, list[SubtaskAttempt]]:
        """A job's name and its subtasks' current (or, once it ended, last) attempts."""
        record = self.core.jobs.get(job_id)
        if record is None:
            raise TaskLogError(grpc.StatusCode.NOT_FOUND, f"No job with id {job_id.hex() or '<empty>'}.")
        if record.job_master is not None:
            return record.job_name, attempts_of(record.job_master.core)
        return record.job_name, list(record.final_attempts)

    def job_master(self, job_id: bytes) -> JobMaster:
        """The running job's JobMaster (TaskManagers' calls are routed to it): NOT_FOUND, or
        FAILED_PRECONDITION when the job has none (initializing or ended)."""
        return cast(JobMaster, self.core.job_master(job_id))  # the shell made every one of them

    def running_job_master(self, job_id: bytes) -> JobMaster | None:
        """The job's JobMaster, None when the job is unknown or has none."""
        record = self.core.jobs.get(job_id)
        return cast(JobMaster, record.job_master) if record is not None and record.job_master is not None else None

    def cancel_job(self, job_id: bytes) -> cpb.JobSummary:
        summary, commands = self.core.cancel(job_id, wall_ms())
        self._run(commands)
        return summary

    def trigger_savepoint(self, job_id: bytes, target_directory: str, stop: bool, drain: bool = False) -> Awaitable[str]:
        """Checks the request now (a DispatcherError: NOT_FOUND, FAILED_PRECONDITION for a job that
        is not RUNNING, INVALID_ARGUMENT without a directory) and returns the savepoint being taken:
        it resolves to its path or raises a DispatcherError (FAILED_PRECONDITION)."""
        take = self.core.savepoint(job_id, target_directory, stop, drain)

        async def run() -> str:
            try:
                return await take.job_master.savepoint(take.directory, take.stop, take.drain)
            except (SavepointError, CheckpointStorageError) as exc:
                raise DispatcherError(ErrorKind.FAILED_PRECONDITION, f"Savepoint of job {job_id.hex()}: {exc}") from exc

        return run()

    def trigger_checkpoint(self, job_id: bytes, full: bool = False) -> Awaitable[int]:
        """``full``: Flink's FULL checkpoint type (RocksDB: not incremental). Checks the request now (a DispatcherError: NOT_FOUND, FAILED_PRECONDITION) and returns
        the checkpoint being taken: it resolves to its id or raises a DispatcherError."""
        job_master = self.core.checkpoint(job_id)

        async def run() -> int:
            try:
                return await job_master.checkpoint(full)
            except (SavepointError, CheckpointStorageError) as exc:
                raise DispatcherError(ErrorKind.FAILED_PRECONDITION, f"Checkpoint of job {job_id.hex()}: {exc}") from exc

        return run()

    async def dispose_savepoint(self, path: str) -> str:
        """Deletes a savepoint (Flink's Dispatcher.disposeSavepoint), off the loop; answers its
        directory. A DispatcherError (INVALID_ARGUMENT) names why a path is no savepoint."""
        try:
            return str(await asyncio.to_thread(dispose_savepoint, path))
        except CheckpointStorageError as exc:
            raise DispatcherError(ErrorKind.INVALID_ARGUMENT, str(exc)) from exc
        except OSError as exc:
            raise DispatcherError(ErrorKind.INVALID_ARGUMENT, f"savepoint {path!r} not deleted: {exc}") from exc


    # -- printed lines and waiting for the result ----------------------------------------------

    def add_printed_lines(self, job_id: bytes, lines: list[str], dropped: int) -> None:
        """A TaskManager's batch of a job's printed lines; dropped if the job is unknown or over."""
        self._run(self.core.add_printed_lines(job_id, lines, dropped))

    async def request_job_result(self, job_id: bytes) -> AsyncIterator[cpb.JobStatusUpdate]:
        """The job's updates until it is terminal: at once on a status change; its printed lines at
        most every ``printed_lines_interval_s``; a changed summary at most every ``progress_interval_s``."""
        watch = self.core.watch(job_id, self._printed_lines_interval_s, self._progress_interval_s)
        loop = asyncio.get_running_loop()
        try:
            while True:
                version = watch.record.version
                update, wait_s = watch.poll(loop.time())
                if update is not None:
                    yield update
                if wait_s is None:
                    return
                await self._changed_since(watch.record, version, wait_s)
        finally:
            watch.close()


class DispatcherServicer(cpb_grpc.DispatcherServicer):
    """The Dispatcher's gRPC service: each RPC a :class:`DispatcherGateway` call, its refusals
    as the status codes of :data:`GRPC_STATUS`."""

    def __init__(self, dispatcher: DispatcherGateway, overview: Callable[[], cpb.ClusterOverview],
                 task_logs: TaskLogs | None = None) -> None:
        self.dispatcher = dispatcher
        self._overview = overview
        self._task_logs = task_logs

    async def SubmitJob(self, request, context):  # noqa: N802, ANN001, ANN201
        try:
            return await self.dispatcher.submit_job(request)
        except DispatcherError as exc:
            await context.abort(grpc_status(exc), str(exc))

    async def ListJobs(self, request, context):  # noqa: N802, ANN001, ANN201
        return cpb.ListJobsResponse(jobs=[r.summary() for r in self.dispatcher.list_jobs()])

    async def GetJobStatus(self, request, context):  # noqa: N802, ANN001, ANN201
        record = self.dispatcher.request_job(request.job_id)
        if record is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"No job with id {request.job_id.hex() or '<empty>'}.")
        assert record is not None  # abort raised
        return record.summary()

    async def CancelJob(self, request, context):  # noqa: N802, ANN001, ANN201
        try:
            return self.dispatcher.cancel_job(request.job_id)
        except DispatcherError as exc:
            await context.abort(grpc_status(exc), str(exc))

    async def WaitJobResult(self, request, context):  # noqa: N802, ANN001, ANN201
        if self.dispatcher.request_job(request.job_id) is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"No job with id {request.job_id.hex() or '<empty>'}.")
        async for update in self.dispatcher.request_job_result(request.job_id):
            yield update

    async def FetchCollectResults(self, request, context):  # noqa: N802, ANN001, ANN201
        try:
            return await self.dispatcher.fetch_collected(request, wait_within_deadline(context))
        except DispatcherError as exc:
            await context.abort(grpc_status(exc), str(exc))

    async def GetClusterOverview(self, request, context):  # noqa: N802, ANN001, ANN201
        return self._overview()

    async def TriggerSavepoint(self, request, context):  # noqa: N802, ANN001, ANN201
        try:
            path = await self.dispatcher.trigger_savepoint(request.job_id, request.target_directory, request.stop, request.drain)
        except DispatcherError as exc:
            await context.abort(grpc_status(exc), str(exc))
        return cpb.SavepointResponse(path=path)

    async def TriggerCheckpoint(self, request, context):  # noqa: N802, ANN001, ANN201
        try:
            checkpoint_id = await self.dispatcher.trigger_checkpoint(request.job_id, request.full)
        except DispatcherError as exc:
            await context.abort(grpc_status(exc), str(exc))
        return cpb.CheckpointResponse(checkpoint_id=checkpoint_id)

    async def DisposeSavepoint(self, request, context):  # noqa: N802, ANN001, ANN201
        try:
            path = await self.dispatcher.dispose_savepoint(request.path)
        except DispatcherError as exc:
            await context.abort(grpc_status(exc), str(exc))
        return cpb.DisposeSavepointResponse(path=path)

    async def GetTaskOutputs(self, request, context):  # noqa: N802, ANN001, ANN201
        if self._task_logs is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this JobManager does not read task output")
        try:
            return await self._task_logs.task_outputs(request)  # type: ignore[union-attr]
        except TaskLogError as exc:
            await context.abort(exc.code, str(exc))


def wait_within_deadline(context: grpc.aio.ServicerContext, at_most_s: float = 5.0) -> float:
    """How long a call may wait for something to happen and still answer before the caller's deadline."""
    remaining = context.time_remaining()
    if remaining is None:
        return at_most_s
    return max(0.0, min(at_most_s, remaining * 0.5, remaining - 1.0))
