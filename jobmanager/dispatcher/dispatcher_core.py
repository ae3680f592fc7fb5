"""The Dispatcher's core: which jobs it accepts, their records and results, without I/O.

Requests and events go in (a submission, a cancel, a savepoint request, a JobMaster's status
change, a collect sink's batch, the client's pull, a recovered job); answers and commands come out
(start, cancel or stop a JobMaster, clean up a job's HA data, wake whoever waits on a job), carried
out by the asyncio shell in ``dispatcher``. No asyncio, no gRPC, no clock: the shell passes the
time in (``now_ms``: wall clock, ms; ``now_s``: the loop's monotonic clock, s).

The rules, as Flink's Dispatcher keeps them:

- Submissions are idempotent by the client's submission id: a retry answers the job id it got
  before (``duplicate``). A second job with the id of a job that has not ended is refused
  (ALREADY_EXISTS); a job id cancelled before its submission arrived is never started
  (FAILED_PRECONDITION). A bad JobGraph or setting is refused naming it (INVALID_ARGUMENT).
- An accepted job is INITIALIZING until its JobMaster exists (its ExecutionGraph is built by the
  shell off the event loop), then CREATED, and follows its JobMaster's status from there. A job
  cancelled while it initializes ends CANCELED and its JobMaster never starts.
- A job that ended keeps its summary only (status, times, failure, final vertices, checkpoints,
  exception history) for ``jobstore.expiration-time``, at most ``jobstore.max-capacity`` of them,
  the oldest dropped first; its JobMaster and ExecutionGraph go at once. A cancel of a job that
  ended answers its summary and changes nothing; a cancel of an unknown job is NOT_FOUND.
- Only a RUNNING job that takes checkpoints takes a savepoint; its directory is the request's,
  else the job's default, else the cluster's.
- A job recovered from HA storage is accepted as a submission is; a stored job whose graph cannot
  be read is listed SUSPENDED with the reason and never runs.
- ``execute_and_collect`` batches pass through a bounded :class:`CollectBuffer` per job; a restart
  while results are collected discards them and the client's next pull is refused
  (FAILED_PRECONDITION): records of a failed attempt never reach the client twice.
"""
from __future__ import annotations

import collections
import enum
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Union

from google.protobuf.message import DecodeError

from millstream.jobmanager.checkpoint.settings import JobCheckpointing, checkpointing_for_job
from millstream.jobmanager.dispatcher.collect_buffer import CollectBuffer, CollectOffsetError, Offer
from millstream.jobmanager.jobmaster.job_graph_validation import InvalidJobGraphError, validate_job_graph
from millstream.jobmanager.jobmaster.job_master_core import ExceptionHistoryEntry, JobMasterCore, job_slot_request_timeout
from millstream.jobmanager.rest.metrics_views import vertex_views
from millstream.jobmanager.rest.views import checkpoint_config, job_config, job_plan
from millstream.proto import cluster_pb2 as cpb
from millstream.proto import jobgraph_pb2 as pb
from millstream.runtime import config as cfg
from millstream.runtime.bounded_lines import LineCursor, PrintedLines
from millstream.runtime.checkpoint_storage import CheckpointStorageError, parse_checkpoint_dir
from millstream.runtime.execution_state import JobStatus
from millstream.runtime.restart_strategy import RestartStrategySpec, describe, spec_for_job

log = logging.getLogger(__name__)

CANCELLED_IDS_KEPT = 10_000


# -- errors --------------------------------------------------------------------------------------


class ErrorKind(enum.Enum):
    """Why the Dispatcher refuses a request; the shells map it to their status codes (gRPC, HTTP)."""

    NOT_FOUND = "NOT_FOUND"  # no such job
    ALREADY_EXISTS = "ALREADY_EXISTS"  # a job with this id has not ended
    FAILED_PRECONDITION = "FAILED_PRECONDITION"  # the job's state does not allow it
    INVALID_ARGUMENT = "INVALID_ARGUMENT"  # the request itself is wrong
    OUT_OF_RANGE = "OUT_OF_RANGE"  # a collect offset the client already acknowledged
    UNAVAILABLE = "UNAVAILABLE"  # HA storage did not take the job: try again


class DispatcherError(Exception):
    """A refused request: its :class:`ErrorKind` and a message naming the problem."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _not_found(job_id: bytes) -> DispatcherError:
    return DispatcherError(ErrorKind.NOT_FOUND, f"No job with id {job_id.hex() or '<empty>'}.")


# -- records -------------------------------------------------------------------------------------


class RunningJob(Protocol):
    """A job's JobMaster as the Dispatcher sees it. The core only reads ``core`` and ``checkpoints``
    (its checkpoint driver: ``summary()``, ``services``; None when the job takes no checkpoints);
    the shell carries out the commands that start, cancel and stop it or take a savepoint."""

    core: JobMasterCore
    checkpoints: Any

    def start(self) -> None: ...
    def cancel(self) -> None: ...
    async def stop(self) -> None: ...
    async def savepoint(self, target: Any, stop: bool, drain: bool = False) -> str: ...
    async def checkpoint(self, full: bool = False) -> int: ...


@dataclass(eq=False)
class JobRecord:
    job_id: bytes
    job_name: str
    submission_id: str
    num_tasks: int
    start_time_ms: int
    status: JobStatus = JobStatus.INITIALIZING
    end_time_ms: int = 0
    failure: cpb.JobFailure | None = None
    collect: CollectBuffer[cpb.CollectBatch] | None = None  # created by the first report or fetch
    job_master: RunningJob | None = None  # dropped (with its ExecutionGraph) when the job ends
    final_tasks_per_state: dict[str, int] = field(default_factory=dict)
    final_vertices: list[cpb.VertexSummary] = field(default_factory=list)
    final_vertex_views: dict[bytes, Any] = field(default_factory=dict)  # subtasks and metrics for REST (rest_metrics_views)
    parallelism: int = 0
    printed: PrintedLines | None = None  # created by the first report; dropped once nobody can read it
    waiters: int = 0  # attached WaitJobResult streams
    slot_timeout_at_ms: Callable[[bytes], int | None] = lambda job_id: None
    final_num_restarts: int = 0
    final_rescales: list[cpb.RescaleEvent] = field(default_factory=list)
    final_checkpoints: cpb.CheckpointSummary | None = None
    final_exception_history: list[ExceptionHistoryEntry] = field(default_factory=list)
    collect_restarted: str | None = None  # the cause of a restart while its results were collected
    version: int = 0  # counts changes: a waiter waits for it to move
    # When the job entered each status (wall clock; Flink's job "timestamps", shown by the REST API).
    status_timestamps: dict[str, int] = field(default_factory=dict)
    plan: dict[str, object] = field(default_factory=dict)  # Flink's JSON plan (rest_views.job_plan)
    # The job's execution and checkpoint configuration as Flink's REST API shows them (rest_views.job_config,
    # checkpoint_config), kept from submission: a finished job still answers them.
    config: dict[str, object] = field(default_factory=dict)
    checkpoint_config: dict[str, object] | None = None
    # Each subtask's last attempt and its TaskManager, kept once the job ended (`millstream logs`; the shell fills it).
    final_attempts: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.status_timestamps.setdefault(self.status.value, self.start_time_ms)

    def set_status(self, status: JobStatus, now_ms: int) -> None:
        self.status = status
        self.status_timestamps[status.value] = now_ms

    def summary(self) -> cpb.JobSummary:
        summary = cpb.JobSummary(
            job_id=self.job_id,
            job_name=self.job_name,
            status=self.status.to_proto(),  # type: ignore[arg-type]  # an enum value is an int
            start_time_ms=self.start_time_ms,
            end_time_ms=self.end_time_ms,
            num_tasks=self.num_tasks,
            parallelism=self.parallelism,
        )
        if self.job_master is not None:
            core = self.job_master.core
            summary.tasks_per_state.update(core.tasks_per_state())
            summary.vertices.extend(core.vertex_summaries())
            summary.num_restarts = core.num_restarts
            summary.rescales.extend(core.rescales)
            if self.job_master.checkpoints is not None:
                summary.checkpoints.CopyFrom(self.job_master.checkpoints.summary())
            if core.status is JobStatus.RESTARTING and self.failure is None and core.failure is not None:
                summary.failure.CopyFrom(core.failure)  # why it restarts
            waiting = core.slot_wait()
            if waiting is not None:
                summary.slot_wait.slots_required, summary.slot_wait.slots_allocated = waiting
                summary.slot_wait.timeout_at_ms = self.slot_timeout_at_ms(self.job_id) or 0
        else:
            summary.tasks_per_state.update(self.final_tasks_per_state)
            summary.vertices.extend(self.final_vertices)
            summary.num_restarts = self.final_num_restarts
            summary.rescales.extend(self.final_rescales)
            if self.final_checkpoints is not None:
                summary.checkpoints.CopyFrom(self.final_checkpoints)
        if self.failure is not None:
            summary.failure.CopyFrom(self.failure)
        return summary

    def exception_history(self) -> list[ExceptionHistoryEntry]:
        """The root cause of each failed attempt, oldest first (bounded by web.exception-history-size)."""
        if self.job_master is not None:
            return list(self.job_master.core.exception_history)
        return list(self.final_exception_history)


# -- commands ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LaunchJob:
    """An accepted job: store its artifacts, build its JobMasterCore off the event loop, then hand
    the JobMaster to :meth:`DispatcherCore.job_master_ready` (or report
    :meth:`DispatcherCore.initialization_failed`)."""

    record: JobRecord
    graph: pb.JobGraph
    artifacts: list[cpb.Artifact]
    restart_spec: RestartStrategySpec | None
    checkpointing: JobCheckpointing | None


@dataclass(frozen=True)
class StartJobMaster:
    job_master: RunningJob


@dataclass(frozen=True)
class CancelJobMaster:
    job_master: RunningJob


@dataclass(frozen=True)
class StopJobMaster:
    """The job ended: stop its JobMaster (its final view is in the record already)."""

    record: JobRecord
    job_master: RunningJob


@dataclass(frozen=True)
class CleanUpJob:
    """HA: the job ended globally (it never runs again): store its result, then remove its HA data
    and ``checkpoint_services``' checkpoints."""

    record: JobRecord
    status: str
    failure_message: str
    end_time_ms: int
    checkpoint_services: Any


@dataclass(frozen=True)
class JobChanged:
    """The record changed (status, collected data, printed lines): wake whoever waits on it."""

    record: JobRecord


def _changed(record: JobRecord) -> JobChanged:
    record.version += 1
    return JobChanged(record)


@dataclass(frozen=True)
class TakeSavepoint:
    job_master: RunningJob
    directory: Path
    stop: bool
    drain: bool


Command = Union[StartJobMaster, CancelJobMaster, StopJobMaster, CleanUpJob, JobChanged]


# -- the core ------------------------------------------------------------------------------------


class DispatcherCore:
    """The Dispatcher's jobs and the rules above. Every method returns at once."""

    def __init__(
        self,
        job_retention_ms: int,
        max_finished_jobs: int = 1000,
        collect_buffer_bytes: int = 8 << 20,
        slot_timeout_at_ms: Callable[[bytes], int | None] = lambda job_id: None,
        printed_lines: tuple[int, int] = (1000, 256 << 10),
        restart_options: Mapping[str, object] | None = None,
        checkpoint_options: Mapping[str, object] | None = None,
        exception_history_size: int = 16,
    ) -> None:
        """See :class:`~millstream.jobmanager.dispatcher.dispatcher.Dispatcher` for the options."""
        if max_finished_jobs < 0:
            raise ValueError(f"jobstore.max-capacity must not be negative, got {max_finished_jobs}")
        if exception_history_size < 0:
            raise ValueError(f"web.exception-history-size must not be negative, got {exception_history_size}")
        self._retention_ms = job_retention_ms
        self._max_finished_jobs = max_finished_jobs
        self._collect_buffer_bytes = collect_buffer_bytes
        self._slot_timeout_at_ms = slot_timeout_at_ms
        self._printed_lines_bound = printed_lines
        self._restart_options = dict(restart_options or {})
        self._checkpoint_options = dict(checkpoint_options or {})
        self.exception_history_size = exception_history_size
        self.highly_available = False  # jobs and results are kept in HA storage (set by the shell)
        self.jobs: dict[bytes, JobRecord] = {}
        self._by_submission: dict[str, bytes] = {}
        # Job ids cancelled before any submission of them arrived (a client that gave up).
        self._cancelled_before_submission: collections.OrderedDict[bytes, None] = collections.OrderedDict()

    # -- submission and recovery ---------------------------------------------------------------

    def submit(self, request: cpb.SubmitJobRequest, now_ms: int) -> cpb.SubmitJobResponse | LaunchJob:
        """Validates a submission and registers its job (INITIALIZING, its start time
        ``request.accepted_at_ms`` when a former leader accepted it, else ``now_ms``), or answers a
        duplicate. Raises :class:`DispatcherError` naming what is wrong."""
        if request.submission_id and request.submission_id in self._by_submission:
            return cpb.SubmitJobResponse(job_id=self._by_submission[request.submission_id], duplicate=True)
        try:
            graph = pb.JobGraph.FromString(request.job_graph)
        except DecodeError as exc:
            raise DispatcherError(ErrorKind.INVALID_ARGUMENT, f"The JobGraph cannot be decoded: {exc}") from exc
        try:
            validate_job_graph(graph)
        except InvalidJobGraphError as exc:
            raise DispatcherError(ErrorKind.INVALID_ARGUMENT, f"Invalid JobGraph: {exc}") from exc
        try:
            checkpointing = checkpointing_for_job(graph, self._checkpoint_options)
        except ValueError as exc:
            raise DispatcherError(ErrorKind.INVALID_ARGUMENT, f"Invalid checkpoint configuration: {exc}") from exc
        try:
            timeout = job_slot_request_timeout(graph)
        except cfg.ConfigurationError as exc:
            raise DispatcherError(ErrorKind.INVALID_ARGUMENT, f"Invalid job configuration: {exc}") from exc
        if timeout is not None and timeout <= 0:
            raise DispatcherError(ErrorKind.INVALID_ARGUMENT,
                                  f"Invalid job configuration: slot.request.timeout must be positive, got {timeout} ms")
        try:
            restart_spec = spec_for_job(graph, self._restart_options, checkpointing is not None)
        except ValueError as exc:
            raise DispatcherError(ErrorKind.INVALID_ARGUMENT, f"Invalid restart strategy: {exc}") from exc
        existing = self.jobs.get(graph.job_id)
        if existing is not None and not existing.status.is_terminal():
            raise DispatcherError(ErrorKind.ALREADY_EXISTS,
                                  f"Job {graph.job_id.hex()} ('{existing.job_name}') is already running.")
        if graph.job_id in self._cancelled_before_submission:
            raise DispatcherError(
                ErrorKind.FAILED_PRECONDITION,
                f"Job {graph.job_id.hex()} was cancelled by its client before this submission arrived; it is not started.",
            )
        num_tasks = sum(v.parallelism for v in graph.vertices)
        record = JobRecord(graph.job_id, graph.job_name, request.submission_id, num_tasks,
                           start_time_ms=request.accepted_at_ms if request.accepted_at_ms > 0 else now_ms)
        record.plan = job_plan(graph)
        record.config = job_config(graph, describe(restart_spec))
        backend = graph.execution_config.configuration.get(cfg.STATE_BACKEND_TYPE.key, "hashmap").strip().lower()
        record.checkpoint_config = checkpoint_config(checkpointing, backend) if checkpointing is not None else None
        record.parallelism = max((v.parallelism for v in graph.vertices), default=0)
        record.slot_timeout_at_ms = self._slot_timeout_at_ms
        self.jobs[graph.job_id] = record
        if request.submission_id:
            self._by_submission[request.submission_id] = graph.job_id
        return LaunchJob(record, graph, list(request.artifacts), restart_spec, checkpointing)

    def unrecoverable(self, job_id: bytes, reason: str, now_ms: int) -> None:
        """HA: a job a former leader accepted whose stored graph cannot be read. It is listed
        SUSPENDED (not globally terminal: its HA data stays, a leader that can read it recovers it)
        with ``reason`` as its failure, and does not run: never started without its graph."""
        if job_id in self.jobs:
            return
        record = JobRecord(job_id, "", "", 0, start_time_ms=now_ms, status=JobStatus.SUSPENDED, end_time_ms=now_ms)
        record.failure = cpb.JobFailure(message=f"{reason}. The job does not run; it stays in high-availability "
                                                "storage for a JobManager leader that can read it.")
        self.jobs[job_id] = record

    def forget(self, record: JobRecord) -> None:
        """The job is gone from this Dispatcher (expired, evicted, or its submission failed to be stored)."""
        if self.jobs.get(record.job_id) is record:
            del self.jobs[record.job_id]
        if record.submission_id:
            self._by_submission.pop(record.submission_id, None)

    # -- the JobMaster's life ------------------------------------------------------------------

    def job_master_ready(self, record: JobRecord, job_master: RunningJob, now_ms: int) -> list[Command]:
        """The job's JobMaster exists (its ExecutionGraph is built): CREATED, and start it; nothing
        when the job ended meanwhile (cancelled while initializing)."""
        if record.status.is_terminal():
            return []
        record.job_master = job_master
        record.set_status(JobStatus.CREATED, now_ms)
        return [StartJobMaster(job_master)]

    def initialization_failed(self, record: JobRecord, message: str, now_ms: int) -> list[Command]:
        """Building the job's ExecutionGraph failed: the job FAILED with the reason."""
        if record.status.is_terminal():
            return []
        return self.job_status_changed(record, JobStatus.FAILED, cpb.JobFailure(message=message), now_ms)

    def job_status_changed(self, record: JobRecord, status: JobStatus, failure: cpb.JobFailure | None,
                           now_ms: int) -> list[Command]:
        """The job's JobMaster reports a new status (or the Dispatcher ended an initializing job)."""
        record.set_status(status, now_ms)
        if failure is not None:
            record.failure = failure
        commands: list[Command] = []
        if status is JobStatus.RESTARTING and record.collect is not None and not record.collect.discarded:
            log.warning("job %s restarts while its results are collected: they are discarded", record.job_id.hex())
            record.collect.discard()
            core = record.job_master.core if record.job_master is not None else None
            record.collect_restarted = core.failure.message if core is not None and core.failure is not None else "unknown cause"
        if status.is_terminal():
            record.end_time_ms = now_ms
            checkpoints = record.job_master.checkpoints if record.job_master is not None else None
            if status.is_globally_terminal() and self.highly_available:
                commands.append(CleanUpJob(record, status.value, record.failure.message if record.failure is not None else "",
                                           record.end_time_ms, checkpoints.services if checkpoints is not None else None))
            commands += self._retire(record)
        commands.append(_changed(record))
        return commands

    def _retire(self, record: JobRecord) -> list[Command]:
        """A job ended: keep its summary only, and its collected data until the client has it."""
        commands: list[Command] = []
        job_master, record.job_master = record.job_master, None
        if job_master is not None:
            core = job_master.core
            record.final_tasks_per_state = dict(core.tasks_per_state())
            record.final_vertices = core.vertex_summaries()  # one small message per vertex
            record.final_vertex_views = vertex_views(core)
            record.final_num_restarts = core.num_restarts
            record.final_rescales = list(core.rescales)
            record.final_exception_history = list(core.exception_history)
            if job_master.checkpoints is not None:
                record.final_checkpoints = job_master.checkpoints.summary()
            commands.append(StopJobMaster(record, job_master))
        if record.waiters == 0:
            record.printed = None  # nobody attached: the lines are not kept with the summary
        if record.collect is not None:
            if record.status is JobStatus.FINISHED:
                record.collect.finish()  # every sink reported before it finished
            else:
                record.collect.discard()
                record.collect = None
        finished = [r for r in self.jobs.values() if r.status.is_terminal()]
        for old in sorted(finished, key=lambda r: r.end_time_ms)[: max(0, len(finished) - self._max_finished_jobs)]:
            self.forget(old)
        return commands

    def suspend_all(self, now_ms: int) -> tuple[list[object], list[Command]]:
        """Leadership lost (HA): every job that has not ended is SUSPENDED (not globally terminal:
        its checkpoints and HA data stay for the next leader) and this Dispatcher forgets every job.
        Returns the suspended jobs' HA checkpoint services (their locks are released by the caller)
        and the commands (stop their JobMasters, wake their waiters)."""
        released: list[object] = []
        commands: list[Command] = []
        for record in list(self.jobs.values()):
            if record.status.is_terminal():
                continue
            job_master = record.job_master
            if job_master is not None and job_master.checkpoints is not None and job_master.checkpoints.services is not None:
                released.append(job_master.checkpoints.services)
            record.set_status(JobStatus.SUSPENDED, now_ms)
            record.end_time_ms = now_ms
            commands += self._retire(record)
            commands.append(_changed(record))
            log.info("job %s ('%s') suspended: this JobManager lost its leadership", record.job_id.hex(), record.job_name)
        self.jobs.clear()
        self._by_submission.clear()
        return released, commands

    def expire_finished(self, now_ms: int) -> None:
        """Forgets the jobs that ended more than ``jobstore.expiration-time`` ago."""
        cutoff = now_ms - self._retention_ms
        for record in list(self.jobs.values()):
            if record.status.is_terminal() and record.end_time_ms and record.end_time_ms < cutoff:
                self.forget(record)

    # -- client requests -----------------------------------------------------------------------

    def record(self, job_id: bytes) -> JobRecord:
        record = self.jobs.get(job_id)
        if record is None:
            raise _not_found(job_id)
        return record

    def job_master(self, job_id: bytes) -> RunningJob:
        """The running job's JobMaster (TaskManagers' calls are routed to it)."""
        record = self.record(job_id)
        if record.job_master is None:
            raise DispatcherError(ErrorKind.FAILED_PRECONDITION, f"Job {job_id.hex()} has no JobMaster.")
        return record.job_master

    def cancel(self, job_id: bytes, now_ms: int) -> tuple[cpb.JobSummary, list[Command]]:
        """Cancels the job; its summary is the answer. An unknown job id is NOT_FOUND, and
        remembered: a submission of it arriving later is refused. A job that ended stays as it was."""
        if job_id and job_id not in self.jobs:
            self._cancelled_before_submission[job_id] = None
            while len(self._cancelled_before_submission) > CANCELLED_IDS_KEPT:
                self._cancelled_before_submission.popitem(last=False)
        record = self.record(job_id)
        commands: list[Command] = []
        if not record.status.is_terminal():
            if record.job_master is not None:
                commands.append(CancelJobMaster(record.job_master))
            elif record.status is JobStatus.INITIALIZING:  # its ExecutionGraph is still being built
                commands += self.job_status_changed(record, JobStatus.CANCELED, None, now_ms)
        return record.summary(), commands

    def savepoint(self, job_id: bytes, target_directory: str, stop: bool, drain: bool = False) -> TakeSavepoint:
        """Checks a savepoint request: NOT_FOUND, FAILED_PRECONDITION for a job that is not RUNNING
        or takes no checkpoints, INVALID_ARGUMENT without a (valid) directory."""
        record = self.record(job_id)
        job_master = record.job_master
        if job_master is None or record.status is not JobStatus.RUNNING:
            raise DispatcherError(ErrorKind.FAILED_PRECONDITION,
                                  f"Job {job_id.hex()} is {record.status.value}: only a RUNNING job takes a savepoint")
        if job_master.core.checkpointing is None:  # the cause, whatever the directory: checked first
            raise DispatcherError(ErrorKind.FAILED_PRECONDITION,
                                  f"Job {job_id.hex()} takes no checkpoints: a savepoint needs checkpointing "
                                  "(env.enable_checkpointing(ms), or execution.checkpointing.interval on the cluster)")
        # As Flink: the request's directory, else the job's default (env.set_default_savepoint_directory),
        # else the cluster's
        job_default = job_master.core.job_graph.execution_config.configuration.get(cfg.CHECKPOINTING_SAVEPOINT_DIR.key)
        target = target_directory or job_default or self._checkpoint_options.get(cfg.CHECKPOINTING_SAVEPOINT_DIR.key)
        if not target:
            raise DispatcherError(ErrorKind.INVALID_ARGUMENT, "No savepoint directory: give one, or set "
                                  f"{cfg.CHECKPOINTING_SAVEPOINT_DIR.key} on the cluster or the job")
        try:
            directory = parse_checkpoint_dir(str(target))
        except CheckpointStorageError as exc:
            raise DispatcherError(ErrorKind.INVALID_ARGUMENT, f"Savepoint directory {target}: {exc}") from exc
        return TakeSavepoint(job_master, directory, stop, drain)

    def checkpoint(self, job_id: bytes) -> RunningJob:
        """Checks a request for a checkpoint by hand: NOT_FOUND, FAILED_PRECONDITION for a job that
        is not RUNNING or takes no checkpoints. Answers the JobMaster that takes it."""
        record = self.record(job_id)
        job_master = record.job_master
        if job_master is None or record.status is not JobStatus.RUNNING:
            raise DispatcherError(ErrorKind.FAILED_PRECONDITION,
                                  f"Job {job_id.hex()} is {record.status.value}: only a RUNNING job takes a checkpoint")
        if job_master.core.checkpointing is None:
            raise DispatcherError(ErrorKind.FAILED_PRECONDITION,
                                  f"Job {job_id.hex()} takes no checkpoints: enable checkpointing "
                                  "(env.enable_checkpointing(ms), or execution.checkpointing.interval on the cluster)")
        return job_master

    # -- printed lines and collected results ---------------------------------------------------

    def add_printed_lines(self, job_id: bytes, lines: list[str], dropped: int) -> list[Command]:
        """A TaskManager's batch of a job's printed lines; dropped if the job is unknown or over."""
        record = self.jobs.get(job_id)
        if record is None or record.status.is_terminal():
            return []
        if dropped < 0:
            raise DispatcherError(ErrorKind.INVALID_ARGUMENT, f"dropped must not be negative, got {dropped}")
        if record.printed is None:
            record.printed = PrintedLines(*self._printed_lines_bound)
        record.printed.add(lines, dropped)
        return [_changed(record)]

    def _collect_buffer(self, record: JobRecord) -> CollectBuffer[cpb.CollectBatch]:
        if record.collect is None:
            record.collect = CollectBuffer(self._collect_buffer_bytes)
        return record.collect

    def offer_collected(self, job_id: bytes, attempt_id: bytes, batch: cpb.CollectBatch) -> tuple[bool, list[Command]]:
        """A collect sink's batch. True: stored, stored before (a retry), or not wanted any more (the
        job is unknown or ended); False: the job's buffer is full (offer it again once the job changed)."""
        record = self.jobs.get(job_id)
        if record is None or record.status.is_terminal():
            return True, []  # nobody will read it
        result = self._collect_buffer(record).offer(attempt_id, batch.sequence, batch, len(batch.payload))
        return result.delivered, [_changed(record)] if result is Offer.ACCEPTED else []

    def fetch_collected(self, request: cpb.FetchCollectRequest,
                        give_up: bool) -> tuple[cpb.FetchCollectResponse | None, list[Command]]:
        """The client's pull: acknowledges what precedes ``request.offset`` and answers up to
        ``max_bytes`` of batches from there, or the end with the job's summary. None when there is
        nothing yet and ``give_up`` is False (pull again once the job changed); an empty answer when
        ``give_up`` (the caller's wait is over)."""
        if request.max_bytes <= 0:
            raise DispatcherError(ErrorKind.INVALID_ARGUMENT, f"max_bytes must be positive, got {request.max_bytes}")
        record = self.record(request.job_id)
        if record.collect_restarted is not None:
            checkpointed = record.job_master is not None and record.job_master.checkpoints is not None
            why = ("collected results do not outlive a restart, even with checkpoints (Flink's checkpointed "
                   "collect, which hands a result out only once a checkpoint covers it, is not built), so they end "
                   "here. Write the results to a sink that commits on checkpoints (FileSink, KafkaSink) instead"
                   if checkpointed else
                   "without checkpoints a restarted job starts over and its records would arrive twice, so the "
                   "collected results end here. Use RestartStrategies.no_restart() with execute_and_collect, or "
                   "write the results to a sink")
            raise DispatcherError(
                ErrorKind.FAILED_PRECONDITION,
                f"Job {request.job_id.hex()} restarted after a failure ({record.collect_restarted}) while execute_and_collect "
                f"was reading its results; {why}.",
            )
        if record.collect is None and record.status.is_terminal():
            # Every batch was acknowledged (or discarded with a failed job): the end.
            return cpb.FetchCollectResponse(next_offset=request.offset, end_of_data=True, summary=record.summary()), []
        buffer = self._collect_buffer(record)
        before = buffer.version
        try:
            fetched = buffer.fetch(request.offset, request.max_bytes)
        except CollectOffsetError as exc:
            raise DispatcherError(ErrorKind.OUT_OF_RANGE, f"Job {request.job_id.hex()}: {exc}") from exc
        # Acknowledged data was dropped: waiting producers may go on.
        commands: list[Command] = [_changed(record)] if buffer.version != before else []
        if fetched.end_of_data:
            record.collect = None
            return cpb.FetchCollectResponse(next_offset=fetched.next_offset, end_of_data=True, summary=record.summary()), commands
        if fetched.batches or give_up:
            return cpb.FetchCollectResponse(batches=fetched.batches, next_offset=fetched.next_offset), commands
        return None, commands

    def watch(self, job_id: bytes, printed_lines_interval_s: float, progress_interval_s: float) -> "JobWatch":
        """A client attaches to the job's updates (``WaitJobResult``); NOT_FOUND for an unknown job."""
        return JobWatch(self.record(job_id), printed_lines_interval_s, progress_interval_s)


class JobWatch:
    """One attached client's view of a job: an update at once on a status change; the job's printed
    lines at most every ``printed_lines_interval_s``; a changed summary at most every
    ``progress_interval_s``; the last update is terminal. :meth:`close` when the client leaves."""

    def __init__(self, record: JobRecord, printed_lines_interval_s: float, progress_interval_s: float) -> None:
        self.record = record
        self._lines_interval_s = printed_lines_interval_s
        self._progress_interval_s = progress_interval_s
        self._cursor = record.printed.reader() if record.printed is not None else LineCursor()
        self._last: cpb.JobSummary | None = None
        self._lines_due = self._progress_due = 0.0
        self._closed = False
        record.waiters += 1

    def poll(self, now_s: float) -> tuple[cpb.JobStatusUpdate | None, float | None]:
        """What to send now (None: nothing) and how long to wait for a change of the job before
        polling again (None: the job ended, the update was the last one)."""
        record = self.record
        terminal = record.status.is_terminal()
        lines: list[str] = []
        dropped = 0
        if record.printed is not None and (terminal or now_s >= self._lines_due):
            lines, dropped = record.printed.read(self._cursor)
        summary = record.summary()
        last = self._last
        update = None
        if (
            last is None
            or terminal
            or summary.status != last.status
            or lines
            or dropped
            or (now_s >= self._progress_due and summary != last)
        ):
            update = cpb.JobStatusUpdate(summary=summary, terminal=terminal, printed_lines=lines, printed_lines_dropped=dropped)
            self._last, self._progress_due = summary, now_s + self._progress_interval_s
            if lines or dropped:
                self._lines_due = now_s + self._lines_interval_s
        if terminal:
            return update, None
        timeout = max(0.0, self._progress_due - now_s) or self._progress_interval_s
        if record.printed is not None and record.printed.has_unread(self._cursor):
            timeout = min(timeout, max(0.0, self._lines_due - now_s))
        return update, max(timeout, 0.01)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.record.waiters -= 1
        if self.record.waiters == 0 and self.record.status.is_terminal():
            self.record.printed = None
