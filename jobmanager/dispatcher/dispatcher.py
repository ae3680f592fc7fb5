"""The Dispatcher: accepts jobs, starts one JobMaster each, and keeps their results for a while.

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
import collections
import logging
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable, Mapping

import grpc
from google.protobuf.message import DecodeError

from millstream.jobmanager.blob_server import BlobStore
from millstream.runtime.artifact_names import InvalidArtifactError, check_archive_target, check_artifact_name
from millstream.jobmanager.dispatcher.collect_buffer import CollectBuffer, CollectOffsetError, Offer
from millstream.runtime.execution_state import JobStatus
from millstream.jobmanager.jobmaster.job_graph_validation import InvalidJobGraphError, validate_job_graph
from millstream.jobmanager.jobmaster.job_master_core import ExceptionHistoryEntry, JobMasterCore
from millstream.jobmanager.jobmaster.job_master import JobMaster, job_slot_request_timeout
from millstream.runtime.bounded_lines import LineCursor, PrintedLines
from millstream.jobmanager.rest.metrics_views import vertex_views
from millstream.jobmanager.rest.views import job_plan
from millstream.jobmanager.task_logs import SubtaskAttempt, TaskLogError, TaskLogs, attempts_of
from millstream.proto import cluster_pb2 as cpb
from millstream.proto import cluster_pb2_grpc as cpb_grpc
from millstream.proto import jobgraph_pb2 as pb
from millstream.jobmanager.checkpoint.driver import SavepointError
from millstream.jobmanager.checkpoint.settings import JobCheckpointing, checkpointing_for_job
from millstream.jobmanager.dispatcher.job_persistence import JobPersistence, result_entry
from millstream.runtime import config as cfg
from millstream.runtime.checkpoint_storage import CheckpointStorageError, parse_checkpoint_dir
from millstream.runtime.restart_strategy import NoRestart, RestartStrategySpec, spec_for_job

log = logging.getLogger(__name__)


CANCELLED_IDS_KEPT = 10_000
PRINTED_LINES_INTERVAL_S = 0.2  # a waiter gets printed lines at most this often
PROGRESS_INTERVAL_S = 1.0  # ... and a changed summary (task states, records) at most this often


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
    collect: CollectBuffer[cpb.CollectBatch] | None = None  # created by the first report or fetch
    job_master: JobMaster | None = None  # dropped (with its ExecutionGraph) when the job ends
    final_tasks_per_state: dict[str, int] = field(default_factory=dict)
    final_vertices: list[cpb.VertexSummary] = field(default_factory=list)
    final_vertex_views: dict[bytes, Any] = field(default_factory=dict)  # subtasks and metrics for REST (rest_metrics_views)
    parallelism: int = 0
    printed: PrintedLines | None = None  # created by the first report; dropped once nobody can read it
    waiters: int = 0  # attached WaitJobResult streams
    slot_timeout_at_ms: Callable[[bytes], int | None] = lambda job_id: None
    final_num_restarts: int = 0
    final_checkpoints: cpb.CheckpointSummary | None = None
    final_exception_history: list[ExceptionHistoryEntry] = field(default_factory=list)
    collect_restarted: str | None = None  # the cause of a restart while its results were collected
    persisting: asyncio.Future[None] | None = None  # HA: the job graph being stored
    version: int = 0
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    # When the job entered each status (wall clock; Flink's job "timestamps", shown by the REST API).
    status_timestamps: dict[str, int] = field(default_factory=dict)
    plan: dict[str, object] = field(default_factory=dict)  # Flink's JSON plan (rest_views.job_plan)
    # Each subtask's last attempt and its TaskManager, kept once the job ended (`millstream logs`).
    final_attempts: list[SubtaskAttempt] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.status_timestamps.setdefault(self.status.value, self.start_time_ms)

    def set_status(self, status: JobStatus) -> None:
        self.status = status
        self.status_timestamps[status.value] = wall_ms()

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

    def touch(self) -> None:
        """Something changed (status, collected data): wake whoever waits in :meth:`changed_since`."""
        self.version += 1
        self._changed.set()
        self._changed = asyncio.Event()

    async def changed_since(self, version: int, timeout_s: float) -> bool:
        """Waits until the record changed after ``version`` or ``timeout_s`` passed; True if it changed."""
        if self.version != version:
            return True
        try:
            await asyncio.wait_for(self._changed.wait(), timeout_s)
        except asyncio.TimeoutError:
            pass
        return self.version != version


class Dispatcher:
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
        if max_finished_jobs < 0:
            raise ValueError(f"jobstore.max-capacity must not be negative, got {max_finished_jobs}")
        self._blobs = blob_store
        self._make_job_master = make_job_master
        self._total_slots = total_slots
        self._retention_ms = job_retention_ms
        self._max_finished_jobs = max_finished_jobs
        self._collect_buffer_bytes = collect_buffer_bytes
        self._slot_timeout_at_ms = slot_timeout_at_ms
        self._printed_lines_interval_s = printed_lines_interval_s
        self._progress_interval_s = progress_interval_s
        self._printed_lines_bound = printed_lines
        self._restart_options = dict(restart_options or {})
        if exception_history_size < 0:
            raise ValueError(f"web.exception-history-size must not be negative, got {exception_history_size}")
        self._exception_history_size = exception_history_size
        self._checkpoint_options = dict(checkpoint_options or {})
        self.jobs: dict[bytes, JobRecord] = {}
        self._by_submission: dict[str, bytes] = {}
        # Job ids cancelled before any submission of them arrived (a client that gave up).
        self._cancelled_before_submission: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        self._starting: set[asyncio.Task[None]] = set()
        self._persistence = persistence
        self._cleanups: set[asyncio.Future[None]] = set()

    # -- submission ----------------------------------------------------------------------------

    def submit(self, request: cpb.SubmitJobRequest) -> cpb.SubmitJobResponse:
        accepted = self._accept(request)
        if isinstance(accepted, cpb.SubmitJobResponse):
            return accepted
        return self._launch(*accepted)

    async def submit_and_persist(self, request: cpb.SubmitJobRequest) -> cpb.SubmitJobResponse:
        """:meth:`submit`; under HA the whole request is in HA storage before the client hears the
        job was accepted (a failover then recovers it)."""
        if self._persistence is None:
            return self.submit(request)
        accepted = self._accept(request)
        if isinstance(accepted, cpb.SubmitJobResponse):
            return accepted
        record = accepted[0]
        persistence = self._persistence
        stored = cpb.SubmitJobRequest()
        stored.CopyFrom(request)
        stored.accepted_at_ms = record.start_time_ms  # a leader that recovers the job keeps its start time
        request = stored

        async def persist_then_launch() -> None:
            # One task, whatever happens to the caller's RPC: a stored job is started, a job that
            # could not be stored is forgotten.
            try:
                await asyncio.to_thread(persistence.put, request, record.job_id)
            except Exception as exc:
                log.error("job %s: storing it in HA storage failed: %s", record.job_id.hex(), exc)
                self._forget(record)
                raise
            self._launch(*accepted)

        record.persisting = asyncio.ensure_future(persist_then_launch())
        try:
            await asyncio.shield(record.persisting)
        except Exception as exc:
            raise DispatcherError(grpc.StatusCode.UNAVAILABLE,
                                  f"Job {record.job_id.hex()} could not be stored in high-availability storage: {exc}") from exc
        return cpb.SubmitJobResponse(job_id=record.job_id)

    def recover(self, request: cpb.SubmitJobRequest) -> None:
        """A job a former leader accepted (read back from HA storage): it runs again, from its
        latest completed checkpoint."""
        accepted = self._accept(request)
        if isinstance(accepted, cpb.SubmitJobResponse):
            return  # already known here
        log.info("job %s ('%s') recovered from HA storage", accepted[0].job_id.hex(), accepted[0].job_name)
        self._launch(*accepted)

    def unrecoverable(self, job_id: bytes, reason: str) -> None:
        """HA: a job a former leader accepted whose stored graph cannot be read. It is listed
        SUSPENDED (not globally terminal: its HA data stays, a leader that can read it recovers it)
        with ``reason`` as its failure, and does not run: never started without its graph."""
        if job_id in self.jobs:
            return
        record = JobRecord(job_id, "", "", 0, status=JobStatus.SUSPENDED)
        record.end_time_ms = record.start_time_ms
        record.failure = cpb.JobFailure(message=f"{reason}. The job does not run; it stays in high-availability "
                                                "storage for a JobManager leader that can read it.")
        self.jobs[job_id] = record

    def _accept(self, request: cpb.SubmitJobRequest) -> (
            cpb.SubmitJobResponse | tuple[JobRecord, pb.JobGraph, list[cpb.ArtifactRef], RestartStrategySpec | None,
                                          JobCheckpointing | None]):
        """Validates a submission and registers its job (INITIALIZING), or answers a duplicate."""
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
        try:
            checkpointing = checkpointing_for_job(graph, self._checkpoint_options)
        except ValueError as exc:
            raise DispatcherError(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid checkpoint configuration: {exc}") from exc
        try:
            timeout = job_slot_request_timeout(graph)
        except cfg.ConfigurationError as exc:
            raise DispatcherError(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid job configuration: {exc}") from exc
        if timeout is not None and timeout <= 0:
            raise DispatcherError(grpc.StatusCode.INVALID_ARGUMENT,
                                  f"Invalid job configuration: slot.request.timeout must be positive, got {timeout} ms")
        try:
            restart_spec = spec_for_job(graph, self._restart_options, checkpointing is not None)
        except ValueError as exc:
            raise DispatcherError(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid restart strategy: {exc}") from exc
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
                target = check_archive_target(artifact.archive_target) if artifact.archive_target else ""
                artifacts.append(cpb.ArtifactRef(name=check_artifact_name(artifact.name), blob_key=self._blobs.put(artifact.content),
                                                 archive_target=target))
        except InvalidArtifactError as exc:
            raise DispatcherError(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from exc
        num_tasks = sum(v.parallelism for v in graph.vertices)
        record = JobRecord(graph.job_id, graph.job_name, request.submission_id, num_tasks,
                           **({"start_time_ms": request.accepted_at_ms} if request.accepted_at_ms > 0 else {}))
        record.plan = job_plan(graph)
        record.parallelism = max((v.parallelism for v in graph.vertices), default=0)
        record.slot_timeout_at_ms = self._slot_timeout_at_ms
        self.jobs[graph.job_id] = record
        if request.submission_id:
            self._by_submission[request.submission_id] = graph.job_id
        log.info("job %s ('%s') accepted: %d tasks", graph.job_id.hex(), graph.job_name, num_tasks)
        return record, graph, artifacts, restart_spec, checkpointing

    def _launch(self, record: JobRecord, graph: pb.JobGraph, artifacts: list[cpb.ArtifactRef],
                restart_spec: RestartStrategySpec | None, checkpointing: JobCheckpointing | None) -> cpb.SubmitJobResponse:
        starting = asyncio.ensure_future(self._start_job(record, graph, artifacts, restart_spec, checkpointing))
        self._starting.add(starting)
        starting.add_done_callback(self._starting.discard)
        return cpb.SubmitJobResponse(job_id=graph.job_id)

    async def _start_job(self, record: JobRecord, graph: pb.JobGraph, artifacts: list[cpb.ArtifactRef],
                         restart_spec: RestartStrategySpec | None = None,
                         checkpointing: JobCheckpointing | None = None) -> None:
        """Builds the ExecutionGraph off the event loop, then starts the job's JobMaster."""
        started = time.monotonic()
        persistence = self._persistence
        checkpoint_services = None
        try:
            spec = restart_spec if restart_spec is not None else NoRestart()
            core = await asyncio.to_thread(lambda: JobMasterCore(graph, artifacts, restart_spec=spec,
                                                                     checkpointing=checkpointing,
                                                                     exception_history_size=self._exception_history_size))
            if persistence is not None and checkpointing is not None and not record.status.is_terminal():
                checkpoint_services = await asyncio.to_thread(persistence.checkpoint_services, graph.job_id, checkpointing)
        except Exception as exc:  # the job fails with the reason; the Dispatcher keeps serving
            log.exception("job %s: building its ExecutionGraph failed", graph.job_id.hex())
            if not record.status.is_terminal():
                failure = cpb.JobFailure(message=f"Could not build the ExecutionGraph: {type(exc).__name__}: {exc}")
                self._on_status(record, JobStatus.FAILED, failure)
            return
        if record.status.is_terminal():
            return  # cancelled while initializing
        on_status: Callable[[JobStatus, cpb.JobFailure | None], None] = lambda status, failure: self._on_status(record, status, failure)
        if checkpoint_services is not None:
            record.job_master = self._make_job_master(core, on_status, checkpoint_services=checkpoint_services)  # type: ignore[call-arg]
        else:
            record.job_master = self._make_job_master(core, on_status)
        record.set_status(JobStatus.CREATED)
        log.info(
            "job %s ('%s') created in %.2f s: %d tasks, %d slots",
            graph.job_id.hex(), graph.job_name, time.monotonic() - started, record.num_tasks, core.required_slots,
        )
        record.job_master.start()

    def _on_status(self, record: JobRecord, status: JobStatus, failure: cpb.JobFailure | None) -> None:
        record.set_status(status)
        if failure is not None:
            record.failure = failure
        if status is JobStatus.RESTARTING and record.collect is not None and not record.collect.discarded:
            log.warning("job %s restarts while its results are collected: they are discarded", record.job_id.hex())
            record.collect.discard()
            core = record.job_master.core if record.job_master is not None else None
            record.collect_restarted = core.failure.message if core is not None and core.failure is not None else "unknown cause"
        if status.is_terminal():
            record.end_time_ms = wall_ms()
            if status.is_globally_terminal() and self._persistence is not None:
                self._globally_terminated(record)
            self._retire(record)
        record.touch()

    def _globally_terminated(self, record: JobRecord) -> None:
        """HA: the job never runs again: its result first, then its HA data goes (in a thread)."""
        persistence = self._persistence
        assert persistence is not None
        job_master = record.job_master
        checkpoints = job_master.checkpoints.services if job_master is not None and job_master.checkpoints else None
        entry = result_entry(record.job_id, record.job_name, record.status.value,
                             record.failure.message if record.failure is not None else "", record.end_time_ms)
        persisting = record.persisting

        async def clean_up() -> None:
            if persisting is not None:
                await asyncio.wait([persisting])  # a job cancelled while being stored: stored first
            try:
                await asyncio.to_thread(persistence.globally_terminated, entry, checkpoints)
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

    def _spawn_cleanup(self, coro: object) -> None:
        task = asyncio.ensure_future(coro)  # type: ignore[arg-type]
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)

    def suspend_all(self) -> list[object]:
        """Leadership lost (HA): every job's JobMaster stops (its job SUSPENDED, not globally
        terminal: its checkpoints and HA data stay for the next leader) and this Dispatcher forgets
        every job. Returns the suspended jobs' HA checkpoint services, whose locks the caller
        releases."""
        released: list[object] = []
        for task in list(self._starting):
            task.cancel()
        for record in list(self.jobs.values()):
            if record.status.is_terminal():
                continue
            job_master = record.job_master
            if job_master is not None and job_master.checkpoints is not None and job_master.checkpoints.services is not None:
                released.append(job_master.checkpoints.services)
            record.set_status(JobStatus.SUSPENDED)
            record.end_time_ms = wall_ms()
            self._retire(record)
            record.touch()
            log.info("job %s ('%s') suspended: this JobManager lost its leadership", record.job_id.hex(), record.job_name)
        self.jobs.clear()
        self._by_submission.clear()
        return released

    def _retire(self, record: JobRecord) -> None:
        """A job ended: keep its summary only, and its collected data until the client has it."""
        job_master, record.job_master = record.job_master, None
        if job_master is not None:
            record.final_tasks_per_state = dict(job_master.core.tasks_per_state())
            record.final_vertices = job_master.core.vertex_summaries()  # one small message per vertex
            record.final_vertex_views = vertex_views(job_master.core)
            record.final_num_restarts = job_master.core.num_restarts
            record.final_exception_history = list(job_master.core.exception_history)
            record.final_attempts = attempts_of(job_master.core)
            if job_master.checkpoints is not None:
                record.final_checkpoints = job_master.checkpoints.summary()
            asyncio.ensure_future(job_master.stop())
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
            self._forget(old)

    def _forget(self, record: JobRecord) -> None:
        if self.jobs.get(record.job_id) is record:
            del self.jobs[record.job_id]
        if record.submission_id:
            self._by_submission.pop(record.submission_id, None)

    # -- collected results (execute_and_collect) ------------------------------------------------

    def _collect_buffer(self, record: JobRecord) -> CollectBuffer[cpb.CollectBatch]:
        if record.collect is None:
            record.collect = CollectBuffer(self._collect_buffer_bytes)
        return record.collect

    async def add_collected(self, job_id: bytes, attempt_id: bytes, batch: cpb.CollectBatch, wait_s: float) -> bool:
        """Takes a collect sink's batch. Waits up to ``wait_s`` while the job's buffer is full and
        returns False if it stayed full (the producer reports it again later: backpressure);
        True once the batch is stored, was stored before (a retry), or is not wanted any more."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            record = self.jobs.get(job_id)
            if record is None or record.status.is_terminal():
                return True  # nobody will read it
            version = record.version
            result = self._collect_buffer(record).offer(attempt_id, batch.sequence, batch, len(batch.payload))
            if result is Offer.ACCEPTED:
                record.touch()
            if result.delivered:
                return True
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            await record.changed_since(version, remaining)

    async def fetch_collected(self, request: cpb.FetchCollectRequest, wait_s: float) -> cpb.FetchCollectResponse:
        """The client's pull: acknowledges what precedes ``request.offset`` and returns up to
        ``max_bytes`` of batches from there; waits up to ``wait_s`` for some when there are none."""
        if request.max_bytes <= 0:
            raise DispatcherError(grpc.StatusCode.INVALID_ARGUMENT, f"max_bytes must be positive, got {request.max_bytes}")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            record = self.record(request.job_id)
            if record.collect_restarted is not None:
                cause = record.collect_restarted
                raise DispatcherError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"Job {request.job_id.hex()} restarted after a failure ({cause}) while execute_and_collect was "
                    "reading its results; without checkpoints a restarted job starts over and its records would "
                    "arrive twice, so the collected results end here. Use RestartStrategies.no_restart() with "
                    "execute_and_collect, or write the results to a sink.",
                )
            if record.collect is None and record.status.is_terminal():
                # Every batch was acknowledged (or discarded with a failed job): the end.
                return cpb.FetchCollectResponse(next_offset=request.offset, end_of_data=True, summary=record.summary())
            buffer = self._collect_buffer(record)
            before = buffer.version
            try:
                fetched = buffer.fetch(request.offset, request.max_bytes)
            except CollectOffsetError as exc:
                raise DispatcherError(grpc.StatusCode.OUT_OF_RANGE, f"Job {request.job_id.hex()}: {exc}") from exc
            if buffer.version != before:
                record.touch()  # acknowledged data was dropped: waiting producers may go on
            if fetched.end_of_data:
                record.collect = None
                return cpb.FetchCollectResponse(next_offset=fetched.next_offset, end_of_data=True, summary=record.summary())
            remaining = deadline - loop.time()
            if fetched.batches or remaining <= 0:
                return cpb.FetchCollectResponse(batches=fetched.batches, next_offset=fetched.next_offset)
            await record.changed_since(record.version, remaining)

    # -- queries -------------------------------------------------------------------------------

    def record(self, job_id: bytes) -> JobRecord:
        record = self.jobs.get(job_id)
        if record is None:
            raise DispatcherError(grpc.StatusCode.NOT_FOUND, f"No job with id {job_id.hex() or '<empty>'}.")
        return record

    def job_attempts(self, job_id: bytes) -> tuple[str, list[SubtaskAttempt]]:
        """A job's name and its subtasks' current (or, once it ended, last) attempts."""
        record = self.jobs.get(job_id)
        if record is None:
            raise TaskLogError(grpc.StatusCode.NOT_FOUND, f"No job with id {job_id.hex() or '<empty>'}.")
        if record.job_master is not None:
            return record.job_name, attempts_of(record.job_master.core)
        return record.job_name, list(record.final_attempts)

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

    async def savepoint(self, request: cpb.SavepointRequest) -> cpb.SavepointResponse:
        return cpb.SavepointResponse(path=await self.start_savepoint(request.job_id, request.target_directory, request.stop,
                                                                        request.drain))

    def start_savepoint(self, job_id: bytes, target_directory: str, stop: bool, drain: bool = False) -> Awaitable[str]:
        """Checks the request now (a DispatcherError: NOT_FOUND, FAILED_PRECONDITION for a job that
        is not RUNNING, INVALID_ARGUMENT without a directory) and returns the savepoint being taken:
        it resolves to its path or raises a DispatcherError (FAILED_PRECONDITION)."""
        record = self.record(job_id)
        job_master = record.job_master
        if job_master is None or record.status is not JobStatus.RUNNING:
            raise DispatcherError(grpc.StatusCode.FAILED_PRECONDITION,
                                  f"Job {job_id.hex()} is {record.status.value}: only a RUNNING job takes a savepoint")
        if job_master.core.checkpointing is None:  # the cause, whatever the directory: checked first
            raise DispatcherError(grpc.StatusCode.FAILED_PRECONDITION,
                                  f"Job {job_id.hex()} takes no checkpoints: a savepoint needs checkpointing "
                                  "(env.enable_checkpointing(ms), or execution.checkpointing.interval on the cluster)")
        # As Flink: the request's directory, else the job's default (env.set_default_savepoint_directory),
        # else the cluster's
        job_default = job_master.core.job_graph.execution_config.configuration.get(cfg.CHECKPOINTING_SAVEPOINT_DIR.key)
        target = target_directory or job_default or self._checkpoint_options.get(cfg.CHECKPOINTING_SAVEPOINT_DIR.key)
        if not target:
            raise DispatcherError(grpc.StatusCode.INVALID_ARGUMENT, "No savepoint directory: give one, or set "
                                  f"{cfg.CHECKPOINTING_SAVEPOINT_DIR.key} on the cluster or the job")
        try:
            directory = parse_checkpoint_dir(str(target))
        except CheckpointStorageError as exc:
            raise DispatcherError(grpc.StatusCode.INVALID_ARGUMENT, f"Savepoint directory {target}: {exc}") from exc

        async def take() -> str:
            try:
                return await job_master.savepoint(directory, stop, drain)
            except (SavepointError, CheckpointStorageError) as exc:
                raise DispatcherError(grpc.StatusCode.FAILED_PRECONDITION, f"Savepoint of job {job_id.hex()}: {exc}") from exc

        return take()

    # -- printed lines --------------------------------------------------------------------------

    def add_printed_lines(self, job_id: bytes, lines: list[str], dropped: int) -> None:
        """A TaskManager's batch of a job's printed lines; dropped if the job is unknown or over."""
        record = self.jobs.get(job_id)
        if record is None or record.status.is_terminal():
            return
        if dropped < 0:
            raise DispatcherError(grpc.StatusCode.INVALID_ARGUMENT, f"dropped must not be negative, got {dropped}")
        if record.printed is None:
            record.printed = PrintedLines(*self._printed_lines_bound)
        record.printed.add(lines, dropped)
        record.touch()

    async def wait(self, job_id: bytes) -> AsyncIterator[cpb.JobStatusUpdate]:
        """The job's updates until it is terminal: at once on a status change; its printed lines at
        most every ``printed_lines_interval_s``; a changed summary at most every ``progress_interval_s``."""
        record = self.record(job_id)
        loop = asyncio.get_running_loop()
        cursor = record.printed.reader() if record.printed is not None else LineCursor()
        last: cpb.JobSummary | None = None
        lines_due = progress_due = 0.0
        record.waiters += 1
        try:
            while True:
                version = record.version
                terminal = record.status.is_terminal()
                now = loop.time()
                lines: list[str] = []
                dropped = 0
                if record.printed is not None and (terminal or now >= lines_due):
                    lines, dropped = record.printed.read(cursor)
                summary = record.summary()
                if (
                    last is None
                    or terminal
                    or summary.status != last.status
                    or lines
                    or dropped
                    or (now >= progress_due and summary != last)
                ):
                    yield cpb.JobStatusUpdate(summary=summary, terminal=terminal, printed_lines=lines, printed_lines_dropped=dropped)
                    last, progress_due = summary, now + self._progress_interval_s
                    if lines or dropped:
                        lines_due = now + self._printed_lines_interval_s
                if terminal:
                    return
                timeout = max(0.0, progress_due - now) or self._progress_interval_s
                if record.printed is not None and record.printed.has_unread(cursor):
                    timeout = min(timeout, max(0.0, lines_due - now))
                await record.changed_since(version, max(timeout, 0.01))
        finally:
            record.waiters -= 1
            if record.waiters == 0 and record.status.is_terminal():
                record.printed = None

    def expire_finished(self) -> None:
        cutoff = wall_ms() - self._retention_ms
        for record in list(self.jobs.values()):
            if record.status.is_terminal() and record.end_time_ms and record.end_time_ms < cutoff:
                self._forget(record)


class DispatcherServicer(cpb_grpc.DispatcherServicer):
    def __init__(self, dispatcher: Dispatcher, overview: Callable[[], cpb.ClusterOverview],
                 task_logs: TaskLogs | None = None) -> None:
        self.dispatcher = dispatcher
        self._overview = overview
        self._task_logs = task_logs

    async def _guard(self, context: grpc.aio.ServicerContext, fn: Callable, *args):  # noqa: ANN202
        try:
            return fn(*args)
        except DispatcherError as exc:
            await context.abort(exc.code, str(exc))

    async def SubmitJob(self, request, context):  # noqa: N802, ANN001, ANN201
        try:
            return await self.dispatcher.submit_and_persist(request)
        except DispatcherError as exc:
            await context.abort(exc.code, str(exc))

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

    async def FetchCollectResults(self, request, context):  # noqa: N802, ANN001, ANN201
        try:
            return await self.dispatcher.fetch_collected(request, wait_within_deadline(context))
        except DispatcherError as exc:
            await context.abort(exc.code, str(exc))

    async def GetClusterOverview(self, request, context):  # noqa: N802, ANN001, ANN201
        return self._overview()

    async def TriggerSavepoint(self, request, context):  # noqa: N802, ANN001, ANN201
        try:
            return await self.dispatcher.savepoint(request)
        except DispatcherError as exc:
            await context.abort(exc.code, str(exc))

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
