"""The REST API's answers: the JobManager's summaries turned into Flink's JSON (pure, no I/O).

Every function takes what the Dispatcher, the SlotManager and the JobMasters already keep (a
:class:`~millstream.proto.cluster_pb2.JobSummary`, a job's status timestamps and plan, a
:class:`~millstream.jobmanager.resourcemanager.slot_manager.TaskManagerInfo`) and returns the dict Flink's REST
handler of the same path returns, with Flink's field names, so scripts and dashboards written for
Flink read it. Fields Millstream has no figure for (bytes, backpressure, memory) are left out
rather than invented, except where Flink's shape needs a value (they are then 0 or -1 as in Flink
for "unknown"). The aiohttp shell (:mod:`millstream.jobmanager.rest.server`) only routes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from millstream.runtime.execution_state import ExecutionState, JobStatus
from millstream.jobmanager.jobmaster.job_master_core import ExceptionHistoryEntry
from millstream.jobmanager.resourcemanager.slot_manager import SlotState, TaskManagerInfo
from millstream.jobmanager.rest.java_throwable import failure_cause
from millstream.proto import cluster_pb2 as cpb
from millstream.proto import jobgraph_pb2 as pb

__all__ = [
    "JobView", "TaskManagerView", "NotFound", "BadRequest", "parse_job_id", "config_view", "overview_view",
    "jobs_view", "jobs_overview_view", "job_details_view", "plan_view", "job_plan", "exceptions_view",
    "checkpoints_view", "taskmanagers_view", "taskmanager_details_view", "error_body", "vertex_status",
    "Conflict", "parse_max_exceptions", "SavepointOperation", "savepoint_trigger_request", "stop_request",
    "savepoint_status_view", "parse_trigger_id", "TriggeredOperation", "checkpoint_trigger_request",
    "checkpoint_status_view", "disposal_request", "disposal_status_view",
]

JOB_ID_HEX_LENGTH = 32  # Flink's JobID: 16 bytes, 32 hex digits


class NotFound(LookupError):
    """A path or id that names nothing: 404 with Flink's ``{"errors": [...]}``."""


class BadRequest(ValueError):
    """A malformed id or parameter: 400 with Flink's ``{"errors": [...]}``."""


class Conflict(RuntimeError):
    """A request the job's state does not allow now (a savepoint of a job that is not running):
    409 with Flink's ``{"errors": [...]}``."""


def error_body(message: str) -> dict[str, list[str]]:
    return {"errors": [message]}


@dataclass(frozen=True)
class JobView:
    """What the REST API shows of one job: its summary, when it entered each status (wall-clock
    ms, Flink's ``timestamps``) and its plan (:func:`job_plan`, kept from the submitted JobGraph)."""

    summary: cpb.JobSummary
    timestamps: Mapping[str, int] = field(default_factory=dict)
    plan: Mapping[str, Any] = field(default_factory=dict)
    exceptions: tuple[ExceptionHistoryEntry, ...] = ()  # root causes of failed attempts, oldest first
    config: Mapping[str, Any] = field(default_factory=dict)  # job_config's, kept from submission
    checkpoint_config: Mapping[str, Any] | None = None  # checkpoint_config's; None without checkpointing
    scheduler_type: str = "Default"  # Flink's SchedulerType: Adaptive under jobmanager.scheduler adaptive


@dataclass(frozen=True)
class TaskManagerView:
    info: TaskManagerInfo
    last_heartbeat_ms: int  # wall clock
    resources: cpb.TaskManagerResources | None = None  # from its latest heartbeat
    slot_tasks: Mapping[int, int] = field(default_factory=dict)  # slot index -> the tasks deployed in it

    @property
    def assigned_tasks(self) -> int:
        return sum(self.slot_tasks.values())


def parse_job_id(text: str) -> bytes:
    """A job id from a path: 32 hex digits, as Flink's JobID prints."""
    if len(text) != JOB_ID_HEX_LENGTH:
        raise BadRequest(f"Invalid JobID '{text}': a job id is {JOB_ID_HEX_LENGTH} hexadecimal digits.")
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise BadRequest(f"Invalid JobID '{text}': a job id is {JOB_ID_HEX_LENGTH} hexadecimal digits.") from None


def _status(summary: cpb.JobSummary) -> JobStatus:
    return JobStatus.from_proto(summary.status)


def _end_time(summary: cpb.JobSummary) -> int:
    return summary.end_time_ms if summary.end_time_ms else -1


def _duration(start_ms: int, end_ms: int, now_ms: int) -> int:
    if start_ms <= 0:
        return -1
    return max(0, (end_ms if end_ms > 0 else now_ms) - start_ms)


def _all_states(counts: Mapping[str, int]) -> dict[str, int]:
    """Every ExecutionState, upper case, as in a job's ``status-counts`` and a vertex's ``tasks``."""
    result = {state.value: 0 for state in ExecutionState}
    result["RECONCILING"] = 0  # Flink's state; Millstream has no reconciliation
    for state, n in counts.items():
        result[state] = result.get(state, 0) + n
    return result


def vertex_status(counts: Mapping[str, int], parallelism: int) -> str:
    """A vertex's aggregate state, as Flink's ExecutionJobVertex.getAggregateJobVertexState."""
    total = sum(counts.values())
    if total == 0:
        return ExecutionState.CREATED.value
    for state in (ExecutionState.FAILED, ExecutionState.CANCELING, ExecutionState.CANCELED):
        if counts.get(state.value, 0):
            return state.value
    if counts.get(ExecutionState.FINISHED.value, 0) == max(total, parallelism):
        return ExecutionState.FINISHED.value
    for state in (ExecutionState.RUNNING, ExecutionState.INITIALIZING, ExecutionState.DEPLOYING,
                  ExecutionState.SCHEDULED, ExecutionState.FINISHED):
        if counts.get(state.value, 0):
            return ExecutionState.RUNNING.value if state is ExecutionState.FINISHED else state.value
    return ExecutionState.CREATED.value


# ---- cluster ----------------------------------------------------------------------------------

def config_view(version: str, refresh_interval_ms: int) -> dict[str, Any]:
    """``GET /config``: the dashboard's configuration (Flink's DashboardConfiguration)."""
    return {
        "refresh-interval": refresh_interval_ms,
        "timezone-name": "UTC",
        "timezone-offset": 0,
        "flink-version": version,
        "flink-revision": f"millstream {version}",
        "features": {"web-submit": False, "web-cancel": True, "web-rescale": False, "web-history": False},
    }


def overview_view(overview: cpb.ClusterOverview, version: str) -> dict[str, Any]:
    """``GET /overview``: Flink's ClusterOverviewWithVersion."""
    return {
        "taskmanagers": overview.taskmanagers,
        "slots-total": overview.slots_total,
        "slots-available": overview.slots_available,
        "jobs-running": overview.jobs_running,
        "jobs-finished": overview.jobs_finished,
        "jobs-cancelled": overview.jobs_cancelled,
        "jobs-failed": overview.jobs_failed,
        # Flink's blocklist: Millstream never blocks a TaskManager, so none is blocked.
        "taskmanagers-blocked": 0,
        "slots-free-and-blocked": 0,
        "flink-version": version,
        "flink-commit": f"millstream {version}",
    }


# ---- jobs -------------------------------------------------------------------------------------

def jobs_view(jobs: Iterable[JobView]) -> dict[str, Any]:
    """``GET /jobs``: ids and statuses."""
    return {"jobs": [{"id": j.summary.job_id.hex(), "status": _status(j.summary).value} for j in jobs]}


def _job_overview(job: JobView, now_ms: int) -> dict[str, Any]:
    s = job.summary
    counts = _all_states(s.tasks_per_state)
    tasks = {state.lower(): n for state, n in counts.items()}
    tasks["total"] = s.num_tasks
    return {
        "jid": s.job_id.hex(),
        "name": s.job_name,
        "state": _status(s).value,
        "start-time": s.start_time_ms,
        "end-time": _end_time(s),
        "duration": _duration(s.start_time_ms, s.end_time_ms, now_ms),
        "last-modification": max([s.start_time_ms, s.end_time_ms, *job.timestamps.values()]),
        "tasks": tasks,
        # Flink 2's count of operators not yet scheduled (adaptive batch jobs); its CLI needs it.
        # Millstream schedules every operator at once.
        "pending-operators": 0,
        "jobType": job.plan.get("type", "STREAMING"),
        "schedulerType": SCHEDULER_TYPE,
    }


# Flink's SchedulerType of every Millstream job: its default (pipelined region) scheduler's behaviour.
SCHEDULER_TYPE = "Default"


def slot_sharing_group_id(job_id: bytes, group: str) -> str:
    """Flink's SlotSharingGroupId (32 hex digits) of a job's slot sharing group, which Millstream
    names instead: the same name in the same job gives the same id."""
    import hashlib

    return hashlib.md5(job_id + b"/" + (group or "default").encode()).hexdigest()


def jobs_overview_view(jobs: Iterable[JobView], now_ms: int) -> dict[str, Any]:
    """``GET /jobs/overview``: Flink's MultipleJobsDetails."""
    return {"jobs": [_job_overview(j, now_ms) for j in jobs]}


def _vertex(v: cpb.VertexSummary, job: JobView, now_ms: int) -> dict[str, Any]:
    status = vertex_status(v.tasks_per_state, v.parallelism)
    started = job.timestamps.get(JobStatus.RUNNING.value, -1) if status != ExecutionState.CREATED.value else -1
    # Flink's *-complete: every subtask's figure is there (false only while some has not reported
    # yet); once the vertex ended its figures are final.
    reported = int(v.metrics.get("reported-subtasks", 0))
    complete = ExecutionState(status).is_terminal() or reported >= v.parallelism > 0
    ended = job.summary.end_time_ms if complete and job.summary.end_time_ms else -1
    return {
        "id": v.vertex_id.hex(),
        "slotSharingGroupId": slot_sharing_group_id(job.summary.job_id, v.slot_sharing_group),
        "name": v.name,
        "parallelism": v.parallelism,
        "maxParallelism": v.max_parallelism or -1,
        "status": status,
        "start-time": started,
        "end-time": ended,
        "duration": _duration(started, ended, now_ms),
        "tasks": _all_states(v.tasks_per_state),
        "metrics": {
            "read-records": v.records_in,
            "read-records-complete": complete,
            "write-records": v.records_out,
            "write-records-complete": complete,
            **_io_fields(v.metrics, complete),
        },
    }


def _io_fields(metrics: Mapping[str, float], complete: bool) -> dict[str, Any]:
    """A vertex's bytes, accumulated times (ms) and busy / backpressured ratios, when the REST
    source filled them in (rest_metrics_views.vertex_io_summary)."""
    fields: dict[str, Any] = {name: round(value, 3) if name.endswith("-ratio") else int(value)
                              for name, value in metrics.items() if name != "reported-subtasks"}
    if "read-bytes" in fields:
        fields["read-bytes-complete"] = fields["write-bytes-complete"] = complete
    return fields


def job_details_view(job: JobView, now_ms: int) -> dict[str, Any]:
    """``GET /jobs/:jobid``: Flink's JobDetailsInfo."""
    s = job.summary
    status = _status(s)
    return {
        "jid": s.job_id.hex(),
        # Flink 2.3's application: each Millstream job is submitted on its own (see
        # applications_overview_view), its application id the job's.
        "application-id": s.job_id.hex(),
        "name": s.job_name,
        "isStoppable": False,
        "state": status.value,
        "job-type": job.plan.get("type", "STREAMING"),
        "schedulerType": job.scheduler_type,
        "start-time": s.start_time_ms,
        "end-time": _end_time(s),
        "duration": _duration(s.start_time_ms, s.end_time_ms, now_ms),
        "maxParallelism": s.parallelism,
        "now": now_ms,
        "timestamps": {state.value: job.timestamps.get(state.value, 0) for state in JobStatus},
        "vertices": [_vertex(v, job, now_ms) for v in s.vertices],
        "status-counts": _all_states(s.tasks_per_state),
        "plan": _current_plan(job.plan, s.vertices),
        "pending-operators": 0,  # every operator is scheduled at once
    }


def rescale_events_view(job: JobView) -> dict[str, Any]:
    """``GET /jobs/:jobid/rescale-events`` (Millstream's own path): each rescale of the adaptive
    scheduler, oldest first, with its time, the job's parallelism before and after, and why (the
    web UI's timeline marks). Kept off ``/jobs/:jobid``, whose body is Flink's JobDetailsInfo
    exactly (Flink's strict REST mapper refuses a field it does not know)."""
    return {"schedulerType": job.scheduler_type,
            "rescales": [{"timestamp": r.timestamp_ms, "from": r.old_parallelism, "to": r.new_parallelism,
                          "reason": r.reason} for r in job.summary.rescales]}


def _current_plan(plan: Mapping[str, Any], vertices: Iterable[cpb.VertexSummary]) -> dict[str, Any]:
    """The submitted plan with each node's current parallelism: the adaptive scheduler rescales a
    running job, and Flink's plan follows (a node the summary does not list keeps its own)."""
    current = {v.vertex_id.hex(): v.parallelism for v in vertices}
    out = dict(plan)
    if "nodes" in plan:
        out["nodes"] = [{**node, "parallelism": current.get(node.get("id", ""), node.get("parallelism"))}
                        for node in plan["nodes"]]
    return out


def job_plan(graph: pb.JobGraph) -> dict[str, Any]:
    """A JobGraph's plan as Flink's JSON plan (``/jobs/:jobid/plan``'s ``plan``): a node per job
    vertex (an operator chain), each input naming its producer and ship strategy. Computed once at
    submission and kept with the job's summary, since a finished job drops its JobGraph."""
    batch = graph.execution_config.runtime_mode == pb.RuntimeMode.BATCH
    nodes = []
    for v in graph.vertices:
        inputs = [{
            "num": n,
            "id": edge.source_vertex.hex(),
            "ship_strategy": edge.ship_strategy or "FORWARD",
            "exchange": "blocking" if edge.partition_type == pb.ResultPartitionType.BLOCKING else "pipelined_bounded",
        } for n, edge in enumerate(v.inputs)]
        node: dict[str, Any] = {
            "id": v.id.hex(),
            "parallelism": v.parallelism,
            "operator": "",
            "operator_strategy": "",
            "description": v.name,
            "optimizer_properties": {},
        }
        if inputs:
            node["inputs"] = inputs
        nodes.append(node)
    return {"jid": graph.job_id.hex(), "name": graph.job_name, "type": "BATCH" if batch else "STREAMING", "nodes": nodes}


def job_config(graph: pb.JobGraph, restart_strategy: str) -> dict[str, Any]:
    """A submitted job's ExecutionConfigInfo (``/jobs/:jobid/config``'s ``execution-config``):
    its restart strategy as the Dispatcher resolved it, its parallelism, no object reuse (records
    are Python objects handed on as they are) and no global job parameters (PyFlink's DataStream
    API has none to set)."""
    return {"restart-strategy": restart_strategy, "job-parallelism": graph.execution_config.parallelism or
            max((v.parallelism for v in graph.vertices), default=1),
            "object-reuse-mode": False, "user-config": {}}


def checkpoint_config(checkpointing: Any, state_backend: str = "hashmap") -> dict[str, Any]:
    """A job's CheckpointConfigInfo (``/jobs/:jobid/checkpoints/config``) from its
    JobCheckpointing: one checkpoint at a time, aligned barriers (unaligned ones are taken
    aligned), state on the heap in Python dicts, written as files, no changelog."""
    settings = checkpointing.settings
    retention = str(checkpointing.retention)
    return {
        "mode": str(checkpointing.mode).lower(),  # Flink writes exactly_once / at_least_once
        "interval": settings.interval_ms,
        "timeout": settings.timeout_ms,
        "min_pause": settings.min_pause_ms,
        "max_concurrent": 1,
        "externalization": {"enabled": retention != "NO_EXTERNALIZED_CHECKPOINTS",
                            "delete_on_cancellation": retention == "DELETE_ON_CANCELLATION"},
        "state_backend": "EmbeddedRocksDBStateBackend" if state_backend == "rocksdb" else "HashMapStateBackend",
        "checkpoint_storage": "FileSystemCheckpointStorage",
        "unaligned_checkpoints": False,
        "tolerable_failed_checkpoints": settings.tolerable_failed_checkpoints,
        "aligned_checkpoint_timeout": 0,
        "checkpoints_after_tasks_finish": True,
        "state_changelog_enabled": False,
        "changelog_periodic_materialization_interval": 0,
        "changelog_storage": "memory",
    }


def job_config_view(job: JobView) -> dict[str, Any]:
    """``GET /jobs/:jobid/config``: Flink's JobConfigInfo."""
    return {"jid": job.summary.job_id.hex(), "name": job.summary.job_name, "execution-config": dict(job.config)}


def checkpoint_config_view(job: JobView) -> dict[str, Any]:
    """``GET /jobs/:jobid/checkpoints/config``; 404 without checkpointing, as Flink answers."""
    if job.checkpoint_config is None:
        raise NotFound(f"Checkpointing is not enabled for job {job.summary.job_id.hex()}.")
    return dict(job.checkpoint_config)


def plan_view(job: JobView) -> dict[str, Any]:
    """``GET /jobs/:jobid/plan``."""
    return {"plan": dict(job.plan)}


DEFAULT_MAX_EXCEPTIONS = 20  # Flink's JobExceptionsHandler without ?maxExceptions=


def parse_max_exceptions(text: str | None) -> int:
    """``?maxExceptions=``: how many history entries to return (Flink takes the first of a list)."""
    if text is None or text == "":
        return DEFAULT_MAX_EXCEPTIONS
    first = text.split(",", 1)[0].strip()
    try:
        value = int(first)
    except ValueError:
        raise BadRequest(f"maxExceptions must be a non-negative integer, got '{text}'.") from None
    if value < 0:
        raise BadRequest(f"maxExceptions must be a non-negative integer, got '{text}'.")
    return value


def _exception_name(failure: cpb.JobFailure) -> str:
    """``ValueError: boom`` -> ``ValueError``; a message with no exception class: ``Exception``."""
    head = failure.message.split(":", 1)[0].strip()
    return head if ":" in failure.message and head and " " not in head else "Exception"


def _exception_entry(failure: cpb.JobFailure, timestamp: int, location: str, taskmanager_id: str) -> dict[str, Any]:
    return {
        "exceptionName": _exception_name(failure),
        "stacktrace": failure.traceback or failure.message,
        "timestamp": timestamp,
        "taskName": failure.task_name or None,
        "endpoint": location or None,
        "taskManagerId": taskmanager_id or None,
        "failureLabels": {},
        "concurrentExceptions": [],
    }


def exceptions_view(job: JobView, now_ms: int, max_exceptions: int = DEFAULT_MAX_EXCEPTIONS) -> dict[str, Any]:
    """``GET /jobs/:jobid/exceptions``: Flink's JobExceptionsInfoWithHistory. The history holds the
    root cause of every failed attempt the JobMaster recorded (each restart's cause and the final
    failure; ``web.exception-history-size`` of them), newest first, at most ``max_exceptions``
    (``truncated`` when more were left out). A job that failed before its JobMaster ran (its graph
    could not be built) has its failure as the only entry. Flink 2 dropped the deprecated
    first-level fields (``root-exception``, ``timestamp``, ``all-exceptions``): its client
    refuses them."""
    s = job.summary
    entries = [_exception_entry(e.failure, e.timestamp_ms, e.location, e.taskmanager_id) for e in reversed(job.exceptions)]
    has_failure = s.HasField("failure") and bool(s.failure.message or s.failure.traceback)
    if has_failure and not entries:
        timestamp = s.end_time_ms or job.timestamps.get(JobStatus.RESTARTING.value) or now_ms
        entries = [_exception_entry(s.failure, timestamp, "", "")]
    return {"exceptionHistory": {"entries": entries[:max_exceptions], "truncated": len(entries) > max_exceptions}}


def _stat(value: int) -> dict[str, int]:
    return {"min": value, "max": value, "avg": value, "p50": value, "p90": value, "p95": value,
            "p99": value, "p999": value}


def stats_summary(values: Iterable[float]) -> dict[str, Any]:
    """Flink's StatsSummaryDto of ``values``: min, max and average (integers) and quantiles
    (linear interpolation between the nearest ranks); all 0 without values."""
    ordered = sorted(values)
    if not ordered:
        return _stat(0)

    def quantile(q: float) -> float:
        position = q * (len(ordered) - 1)
        low = int(position)
        high = min(low + 1, len(ordered) - 1)
        return float(ordered[low] + (ordered[high] - ordered[low]) * (position - low))

    return {"min": int(ordered[0]), "max": int(ordered[-1]), "avg": int(sum(ordered) / len(ordered)),
            "p50": quantile(0.5), "p90": quantile(0.9), "p95": quantile(0.95), "p99": quantile(0.99),
            "p999": quantile(0.999)}


def checkpoints_view(job: JobView) -> dict[str, Any]:
    """``GET /jobs/:jobid/checkpoints``: Flink's CheckpointingStatistics, from the figures the
    JobMaster keeps (counts, the latest completed / failed / restored checkpoint, the recent
    history, over whose completed checkpoints ``summary`` is taken). A job without
    checkpointing: NotFound, as Flink answers."""
    s = job.summary
    if not s.HasField("checkpoints"):
        raise NotFound(f"Checkpointing has not been enabled for job {s.job_id.hex()}.")
    c = s.checkpoints
    restored = 1 if c.latest_restored_id else 0
    history = list(c.history)
    completed = None
    if c.last_completed_id:
        kept = next((h for h in history if h.id == c.last_completed_id and h.status == "COMPLETED"), None)
        if kept is None:  # out of the history (a recovered job): what the summary keeps of it
            kept = cpb.CheckpointHistoryEntry(
                id=c.last_completed_id, status="COMPLETED", trigger_timestamp_ms=c.last_completed_at_ms - c.last_duration_ms,
                end_timestamp_ms=c.last_completed_at_ms, size_bytes=c.last_size_bytes, external_path=c.directory)
        completed = _checkpoint_history_entry(kept, s.vertices)
    # latest.savepoint and latest.failed: kept by the JobMaster also once they left the history.
    savepoint = c.latest_savepoint if c.HasField("latest_savepoint") else next(
        (h for h in history if h.status == "COMPLETED" and h.is_savepoint), None)
    # latest.failed: the last failed checkpoint that drew an id. A trigger that failed before it
    # drew one counts in ``counts.failed`` only, as in Flink's CheckpointStatsTracker; an entry
    # without an id would send the dashboard to /checkpoints/details/-1, which has no answer.
    last_failed = c.latest_failed if c.HasField("latest_failed") else next(
        (h for h in history if h.status == "FAILED"), None)
    failed = _checkpoint_history_entry(last_failed, s.vertices) if last_failed is not None and last_failed.id > 0 else None
    restored_view = None
    if c.latest_restored_id:
        restored_view = {"id": c.latest_restored_id, "restore_timestamp": c.latest_restored_at_ms,
                         "is_savepoint": False, "external_path": c.latest_restored_path}
    done = [h for h in history if h.status == "COMPLETED"]
    return {
        "counts": {
            "restored": restored,
            "total": c.num_completed + c.num_failed + c.num_in_progress,
            "in_progress": c.num_in_progress,
            "completed": c.num_completed,
            "failed": c.num_failed,
        },
        "summary": {
            "checkpointed_size": stats_summary(h.size_bytes for h in done),
            "state_size": stats_summary(h.size_bytes for h in done),
            "end_to_end_duration": stats_summary(_end_to_end(h) for h in done),
            # aligned barriers, nothing in flight persisted (see _checkpoint_history_entry)
            "alignment_buffered": stats_summary(0 for _ in done),
            "processed_data": stats_summary(0 for _ in done),
            "persisted_data": stats_summary(0 for _ in done),
        },
        "latest": {"completed": completed, "failed": failed, "restored": restored_view,
                   "savepoint": _checkpoint_history_entry(savepoint, s.vertices) if savepoint is not None else None},
        "history": [_checkpoint_history_entry(h, s.vertices) for h in c.history],
    }


def _latest_ack(h: cpb.CheckpointHistoryEntry, acks: Iterable[cpb.SubtaskCheckpointStats] | None = None) -> int:
    """When the last of ``acks`` (default: all of the checkpoint's) arrived; -1 with none (Flink's
    value for "no acknowledgement"). A completed checkpoint from before acks were kept: its end."""
    times = [a.ack_timestamp_ms for a in (h.subtasks if acks is None else acks) if a.ack_timestamp_ms]
    if times:
        return max(times)
    return h.end_timestamp_ms if acks is None and h.status == "COMPLETED" and h.end_timestamp_ms else -1


def _end_to_end(h: cpb.CheckpointHistoryEntry) -> int:
    """Flink's end-to-end duration: to the last acknowledgement (a failed checkpoint: to its
    failure); -1 when there is neither."""
    if h.status == "FAILED":
        return max(0, h.end_timestamp_ms - h.trigger_timestamp_ms) if h.end_timestamp_ms else -1
    latest = _latest_ack(h)
    return max(0, latest - h.trigger_timestamp_ms) if latest > 0 else -1


def _vertex_acks(h: cpb.CheckpointHistoryEntry, vertex_id: bytes) -> list[cpb.SubtaskCheckpointStats]:
    return [a for a in h.subtasks if a.vertex_id == vertex_id]


def _task_statistics(h: cpb.CheckpointHistoryEntry, v: cpb.VertexSummary) -> dict[str, Any]:
    """One vertex's part of a checkpoint (Flink's TaskCheckpointStatistics): the sizes its
    subtasks acknowledged, summed, and its latest acknowledgement."""
    acks = _vertex_acks(h, v.vertex_id)
    latest = _latest_ack(h, acks)
    size = sum(a.state_size for a in acks)
    return {
        "id": h.id, "status": h.status, "latest_ack_timestamp": latest,
        "checkpointed_size": size, "state_size": size,
        "end_to_end_duration": max(0, latest - h.trigger_timestamp_ms) if latest > 0 else -1,
        "alignment_buffered": 0, "processed_data": 0, "persisted_data": 0,
        "num_subtasks": v.parallelism, "num_acknowledged_subtasks": len(acks),
    }


def _checkpoint_history_entry(h: cpb.CheckpointHistoryEntry,
                              vertices: Iterable[cpb.VertexSummary] = ()) -> dict[str, Any]:
    """One of Flink's CheckpointStatistics (in ``history``, newest first, ``latest`` and the
    details path), with ``className`` naming its kind as Flink's polymorphic JSON does. Barriers
    are aligned and no in-flight data is persisted, so ``processed_data``, ``persisted_data`` and
    ``alignment_buffered`` are 0; the state of a task is stored whole each time (no incremental
    checkpoints), so its checkpointed size is its state size. ``tasks`` has an entry per job
    vertex (Flink's TaskCheckpointStatistics) from its subtasks' acknowledgements."""
    completed = h.status == "COMPLETED"
    entry: dict[str, Any] = {
        "className": "completed" if completed else "failed",
        "id": h.id,
        "status": h.status,
        "is_savepoint": h.is_savepoint,
        "savepointFormat": "CANONICAL" if h.is_savepoint else None,
        "checkpoint_type": "SAVEPOINT" if h.is_savepoint else "CHECKPOINT",
        "trigger_timestamp": h.trigger_timestamp_ms,
        "latest_ack_timestamp": _latest_ack(h),
        "state_size": h.size_bytes,
        "checkpointed_size": h.size_bytes,
        "end_to_end_duration": _end_to_end(h),
        "alignment_buffered": 0,
        "processed_data": 0,
        "persisted_data": 0,
        "num_subtasks": h.num_subtasks,
        "num_acknowledged_subtasks": h.num_acknowledged_subtasks,
        "tasks": {v.vertex_id.hex(): _task_statistics(h, v) for v in vertices},
    }
    if completed:
        entry["external_path"] = h.external_path or None
        entry["discarded"] = False
    else:
        entry["failure_timestamp"] = h.end_timestamp_ms or -1
        entry["failure_message"] = h.failure_message
    return entry


def _find_checkpoint(job: JobView, text: str) -> cpb.CheckpointHistoryEntry:
    try:
        checkpoint_id = int(text)
    except ValueError:
        raise BadRequest(f"Invalid checkpoint id '{text}': a checkpoint id is a number.") from None
    s = job.summary
    if not s.HasField("checkpoints"):
        raise NotFound(f"Checkpointing has not been enabled for job {s.job_id.hex()}.")
    c = s.checkpoints
    kept = [*c.history, *(e for e in (c.latest_failed, c.latest_savepoint) if e.id)]
    entry = next((h for h in kept if h.id == checkpoint_id), None)
    if entry is None:
        raise NotFound(f"Could not find checkpointing statistics for checkpoint {checkpoint_id}.")
    return entry


def checkpoint_details_view(job: JobView, text: str) -> dict[str, Any]:
    """``GET /jobs/:jobid/checkpoints/details/:checkpointid``: that checkpoint's CheckpointStatistics,
    while it is in the history or is the latest failed checkpoint or savepoint (Flink: 404 once
    it left its statistics)."""
    return _checkpoint_history_entry(_find_checkpoint(job, text), job.summary.vertices)


def checkpoint_subtasks_view(job: JobView, text: str, vertex_id: bytes) -> dict[str, Any]:
    """``GET /jobs/:jobid/checkpoints/details/:checkpointid/subtasks/:vertexid``: Flink's
    TaskCheckpointStatisticsWithSubtaskDetails, each subtask's acknowledgement (when it arrived,
    the state it wrote, how long its snapshot, write, alignment and start took) or, for one that
    did not acknowledge, its index only; the summary is over the acknowledged ones."""
    h = _find_checkpoint(job, text)
    vertex = next((v for v in job.summary.vertices if v.vertex_id == vertex_id), None)
    if vertex is None:
        raise NotFound(f"There is no vertex {vertex_id.hex()} in job {job.summary.job_id.hex()}.")
    acks = {a.subtask_index: a for a in _vertex_acks(h, vertex_id)}
    subtasks: list[dict[str, Any]] = []
    for index in range(vertex.parallelism):
        a = acks.get(index)
        if a is None:
            subtasks.append({"className": "pending", "index": index, "status": "pending_or_failed"})
            continue
        subtasks.append({
            "className": "completed", "index": index, "status": "completed", "ack_timestamp": a.ack_timestamp_ms,
            "end_to_end_duration": max(0, a.ack_timestamp_ms - h.trigger_timestamp_ms),
            "checkpointed_size": a.state_size, "state_size": a.state_size,
            "checkpoint": {"sync": a.sync_duration_ms, "async": a.async_duration_ms},
            "alignment": {"buffered": 0, "processed": 0, "persisted": 0, "duration": a.alignment_duration_ms},
            "start_delay": a.start_delay_ms, "unaligned_checkpoint": False, "aborted": False,
        })
    done = list(acks.values())
    zeros = stats_summary(0 for _ in done)
    return {
        **_task_statistics(h, vertex),
        "summary": {
            "checkpointed_size": stats_summary(a.state_size for a in done),
            "state_size": stats_summary(a.state_size for a in done),
            "end_to_end_duration": stats_summary(max(0, a.ack_timestamp_ms - h.trigger_timestamp_ms) for a in done),
            "checkpoint_duration": {"sync": stats_summary(a.sync_duration_ms for a in done),
                                    "async": stats_summary(a.async_duration_ms for a in done)},
            "alignment": {"buffered": zeros, "processed": zeros, "persisted": zeros,
                          "duration": stats_summary(a.alignment_duration_ms for a in done)},
            "start_delay": stats_summary(a.start_delay_ms for a in done),
        },
        "subtasks": subtasks,
    }


# ---- TaskManagers -----------------------------------------------------------------------------

def _taskmanager(tm: TaskManagerView) -> dict[str, Any]:
    info = tm.info
    host, _, port = info.address.rpartition(":")
    data_port = info.data_address.rpartition(":")[2]
    return {
        "id": info.resource_id,
        "path": info.address,
        "dataPort": int(data_port) if data_port.isdigit() else -1,
        "jmxPort": -1,
        # Flink's field holds the wall-clock time of the last heartbeat, despite its name.
        "timeSinceLastHeartbeat": tm.last_heartbeat_ms,
        "slotsNumber": info.num_slots,
        "freeSlots": info.free_slots,
        "assignedTasks": tm.assigned_tasks,  # Flink's: the tasks its slots run (slot sharing: several a slot)
        "hardware": _hardware(tm.resources),
        # Flink's ResourceProfileInfo: the TaskManager's cores (after its first heartbeat), shared
        # evenly by its slots (free: those of its free slots); no memory is budgeted per slot.
        "totalResource": _resource_profile(tm.resources.cpu_cores if tm.resources is not None else 0),
        "freeResource": _resource_profile((tm.resources.cpu_cores if tm.resources is not None else 0)
                                          * info.free_slots / max(1, info.num_slots)),
        "memoryConfiguration": memory_configuration(tm.resources),
        "blocked": False,
    }


def _resource_profile(cpu_cores: float) -> dict[str, Any]:
    return {"cpuCores": float(cpu_cores), "taskHeapMemory": 0, "taskOffHeapMemory": 0, "managedMemory": 0,
            "networkMemory": 0, "extendedResources": {}}


def _hardware(r: cpb.TaskManagerResources | None) -> dict[str, int]:
    """Flink's HardwareDescription. There ``freeMemory`` is the JVM's; here it is the host's
    available memory. No memory is managed apart from the process's own. Before the first
    heartbeat the figures are unknown: 0."""
    if r is None:
        return {"cpuCores": 0, "physicalMemory": 0, "freeMemory": 0, "managedMemory": 0}
    return {"cpuCores": r.cpu_cores, "physicalMemory": r.physical_memory_bytes,
            "freeMemory": r.available_memory_bytes, "managedMemory": 0}


def taskmanagers_view(tms: Iterable[TaskManagerView]) -> dict[str, Any]:
    """``GET /taskmanagers``: Flink's TaskManagersInfo."""
    return {"taskmanagers": [_taskmanager(tm) for tm in tms]}


def taskmanager_details_view(tm: TaskManagerView) -> dict[str, Any]:
    """``GET /taskmanagers/:taskmanagerid``: the summary plus each slot's job."""
    details = _taskmanager(tm)
    per_slot = _resource_profile((tm.resources.cpu_cores if tm.resources is not None else 0)
                                 / max(1, tm.info.num_slots))
    # Flink's SlotInfo: the slot's job, resources and the tasks deployed in it.
    details["allocatedSlots"] = [
        {"jobId": s.job_id.hex() if s.job_id else None, "resource": per_slot,
         "assignedTasks": tm.slot_tasks.get(s.slot_index, 0)}
        for s in tm.info.slots if s.state is not SlotState.FREE
    ]
    r = tm.resources
    # Flink's TaskManagerMetricsInfo describes a JVM (heap, non-heap, direct buffers); a Python
    # TaskManager reports its process memory instead, the Spark JVM and Python workers included.
    # Flink's TaskManagerMetricsInfo, whose fields the dashboard reads: the "heap" is the
    # process's resident memory (bounded by the host's); no JVM pools, buffers or collectors.
    # Before the first heartbeat nothing is known: 0. (The process tree's memory, Spark's JVM and
    # workers included, is the metric Status.ProcessTree.Memory.RSS of /taskmanagers/:id/metrics.)
    rss, host = (r.process_rss_bytes, r.physical_memory_bytes) if r is not None else (0, 0)
    details["metrics"] = {"heapUsed": rss, "heapCommitted": rss, "heapMax": host,
                          **{name: 0 for name in _NO_JVM_FIGURES}, "garbageCollectors": []}
    return details


_NO_JVM_FIGURES = (
    "nonHeapUsed", "nonHeapCommitted", "nonHeapMax", "directCount", "directUsed", "directMax", "mappedCount",
    "mappedUsed", "mappedMax", "nettyShuffleMemorySegmentsAvailable", "nettyShuffleMemorySegmentsUsed",
    "nettyShuffleMemorySegmentsTotal", "nettyShuffleMemoryAvailable", "nettyShuffleMemoryUsed",
    "nettyShuffleMemoryTotal")
_MEMORY_COMPONENTS = ("frameworkHeap", "taskHeap", "frameworkOffHeap", "taskOffHeap", "networkMemory",
                      "managedMemory", "jvmMetaspace", "jvmOverhead")


def memory_configuration(r: cpb.TaskManagerResources | None) -> dict[str, int]:
    """Flink's TaskExecutorMemoryConfiguration. A Millstream TaskManager budgets no memory
    pools: each component is 0 and both totals are the host's physical memory, the only bound
    it has (0 before its first heartbeat)."""
    total = r.physical_memory_bytes if r is not None else 0
    return {**{name: 0 for name in _MEMORY_COMPONENTS}, "totalFlinkMemory": total, "totalProcessMemory": total}


def process_metrics(rss: int, tree_rss: int, physical: int) -> dict[str, float]:
    """A process's figures under Flink's metric names (``/jobmanager/metrics``,
    ``/taskmanagers/:id/metrics``): the JVM heap's names for the resident memory (max: the host's
    memory), and Millstream's own for the process tree (a TaskManager's Spark JVM and workers)."""
    return {"Status.JVM.Memory.Heap.Used": rss, "Status.JVM.Memory.Heap.Committed": rss,
            "Status.JVM.Memory.Heap.Max": physical, "Status.Process.Memory.RSS": rss,
            "Status.ProcessTree.Memory.RSS": tree_rss}


# Flink hides the values of these keys in /jobmanager/config (GlobalConfiguration.isSensitive).
_SENSITIVE = ("password", "secret", "token", "apikey", "auth-params", "service-key", "basic-auth",
              "jaas.config", "http-headers", "account.key")


def cluster_config_view(values: Mapping[str, str]) -> list[dict[str, str]]:
    """``GET /jobmanager/config``: Flink's ClusterConfigurationInfo, every key set with its value,
    secrets hidden as Flink hides them."""
    return [{"key": key, "value": "******" if any(word in key.lower() for word in _SENSITIVE) else value}
            for key, value in sorted(values.items())]


def environment_view(version: str, arch: str, options: list[str], path: list[str]) -> dict[str, Any]:
    """``GET /jobmanager/environment``: Flink's EnvironmentInfo, of the Python interpreter (the
    ``jvm`` field names Python's version, its command line and its import path)."""
    return {"jvm": {"version": version, "arch": arch, "options": list(options)}, "classpath": list(path)}


_APPLICATION_STATE = {"INITIALIZING": "CREATED", "CREATED": "CREATED", "RUNNING": "RUNNING", "RESTARTING": "RUNNING",
                      "RECONCILING": "RUNNING", "FAILING": "FAILING", "FAILED": "FAILED", "CANCELLING": "CANCELING",
                      "CANCELED": "CANCELED", "FINISHED": "FINISHED", "SUSPENDED": "CANCELED"}


def applications_overview_view(jobs: Iterable[JobView], now_ms: int) -> dict[str, Any]:
    """``GET /applications/overview``: Flink 2.3's MultipleApplicationsDetails. Every job is
    submitted on its own (a session cluster's single-job applications): one application per job,
    with the job's id, name, times and state, and its job counted under that state."""
    applications = []
    for j in jobs:
        s = j.summary
        state = _status(s).value
        applications.append({
            "id": s.job_id.hex(), "name": s.job_name, "start-time": s.start_time_ms, "end-time": _end_time(s),
            "duration": _duration(s.start_time_ms, s.end_time_ms, now_ms),
            "status": _APPLICATION_STATE.get(state, "RUNNING"), "jobs": {state: 1},
        })
    return {"applications": applications}


# ---- savepoints (Flink's asynchronous operations) ---------------------------------------------

TRIGGER_ID_HEX_LENGTH = 32  # Flink's TriggerId, as a JobID


@dataclass
class SavepointOperation:
    """One savepoint triggered through the REST API: in progress until ``location`` or ``failure``
    is set (by the shell, when the savepoint task ends)."""

    job_id: bytes
    trigger_id: str
    stop: bool
    location: str | None = None
    failure: str | None = None
    failure_class: str = "SavepointException"

    @property
    def done(self) -> bool:
        return self.location is not None or self.failure is not None


def parse_trigger_id(text: str) -> str:
    """A trigger id from a path or a body: 32 hex digits, lower case."""
    if len(text) != TRIGGER_ID_HEX_LENGTH or any(c not in "0123456789abcdefABCDEF" for c in text):
        raise BadRequest(f"Invalid trigger id '{text}': a trigger id is {TRIGGER_ID_HEX_LENGTH} hexadecimal digits.")
    return text.lower()


def _body_field(body: Mapping[str, Any], key: str, kind: type, default: Any) -> Any:
    value = body.get(key, default)
    if value is None:
        return default
    if not isinstance(value, kind) or (kind is str and isinstance(value, bool)):
        raise BadRequest(f"'{key}' must be a {kind.__name__}, got {json_type(value)}.")
    return value


def json_type(value: Any) -> str:
    return {bool: "boolean", int: "number", float: "number", str: "string", list: "array", dict: "object"}.get(
        type(value), "null" if value is None else type(value).__name__)


def _trigger_request(body: Any, directory_key: str) -> tuple[str, str | None]:
    if not isinstance(body, dict):
        raise BadRequest(f"The request body must be a JSON object, got {json_type(body)}.")
    if body.get("formatType") not in (None, "CANONICAL"):
        raise BadRequest(f"formatType {body['formatType']!r} is not supported: Millstream writes CANONICAL savepoints.")
    directory = _body_field(body, directory_key, str, "")
    trigger = _body_field(body, "triggerId", str, None)
    return directory, parse_trigger_id(trigger) if trigger is not None else None


def savepoint_trigger_request(body: Any) -> tuple[str, bool, str | None]:
    """``POST /jobs/:jobid/savepoints``' body (Flink's SavepointTriggerRequestBody):
    (target directory, "" for the cluster's default; cancel the job afterwards; trigger id or None)."""
    directory, trigger = _trigger_request(body, "target-directory")
    return directory, bool(_body_field(body, "cancel-job", bool, False)), trigger


def stop_request(body: Any) -> tuple[str, bool, str | None]:
    """``POST /jobs/:jobid/stop``' body (Flink's StopWithSavepointRequestBody): (target directory,
    drain: MAX_WATERMARK and the end of input before the savepoint, trigger id or None)."""
    directory, trigger = _trigger_request(body, "targetDirectory")
    return directory, bool(_body_field(body, "drain", bool, False)), trigger


def savepoint_status_view(op: SavepointOperation) -> dict[str, Any]:
    """``GET /jobs/:jobid/savepoints/:triggerid``: Flink's AsynchronousOperationResult of a
    SavepointInfo (``location`` once COMPLETED, or ``failure-cause`` if it failed)."""
    if not op.done:
        return {"status": {"id": "IN_PROGRESS"}, "operation": None}
    if op.failure is not None:
        cause = failure_cause(op.failure_class, op.failure)
        return {"status": {"id": "COMPLETED"}, "operation": {"failure-cause": cause}}
    return {"status": {"id": "COMPLETED"}, "operation": {"location": op.location}}


# ---- checkpoints by hand and savepoint disposal (asynchronous operations too) ----------------

CHECKPOINT_TYPES = ("CONFIGURED", "FULL", "INCREMENTAL")  # Flink's CheckpointType


@dataclass
class TriggeredOperation:
    """A checkpoint triggered by hand or a savepoint disposal: in progress until ``done``, then
    ``result`` (a checkpoint's id) or ``failure``."""

    trigger_id: str
    done: bool = False
    result: Any = None
    failure: str | None = None
    failure_class: str = "CheckpointException"


def _failure_cause(op: TriggeredOperation) -> dict[str, str]:
    return failure_cause(op.failure_class, op.failure or "")


def checkpoint_trigger_request(body: Any) -> tuple[str, str | None]:
    """``POST /jobs/:jobid/checkpoints``' body (Flink's CheckpointTriggerRequestBody): (checkpoint
    type, CONFIGURED when left out; trigger id or None)."""
    if not isinstance(body, dict):
        raise BadRequest(f"The request body must be a JSON object, got {json_type(body)}.")
    kind = _body_field(body, "checkpointType", str, "CONFIGURED")
    if kind not in CHECKPOINT_TYPES:
        raise BadRequest(f"checkpointType {kind!r} is not one of {', '.join(CHECKPOINT_TYPES)}.")
    trigger = _body_field(body, "triggerId", str, None)
    return kind, parse_trigger_id(trigger) if trigger is not None else None


def checkpoint_status_view(op: TriggeredOperation) -> dict[str, Any]:
    """``GET /jobs/:jobid/checkpoints/:triggerid``: Flink's AsynchronousOperationResult of a
    CheckpointInfo (``checkpointId`` once COMPLETED, or ``failureCause``)."""
    if not op.done:
        return {"status": {"id": "IN_PROGRESS"}, "operation": None}
    if op.failure is not None:
        return {"status": {"id": "COMPLETED"}, "operation": {"failureCause": _failure_cause(op)}}
    return {"status": {"id": "COMPLETED"}, "operation": {"checkpointId": op.result}}


def disposal_request(body: Any) -> str:
    """``POST /savepoint-disposal``' body (Flink's SavepointDisposalRequest): the savepoint's path."""
    if not isinstance(body, dict):
        raise BadRequest(f"The request body must be a JSON object, got {json_type(body)}.")
    path = _body_field(body, "savepoint-path", str, "")
    if not path:
        raise BadRequest("The request body names no 'savepoint-path'.")
    return str(path)


def disposal_status_view(op: TriggeredOperation) -> dict[str, Any]:
    """``GET /savepoint-disposal/:triggerid``: Flink's AsynchronousOperationResult of an
    AsynchronousOperationInfo (empty once COMPLETED, or its ``failure-cause``)."""
    if not op.done:
        return {"status": {"id": "IN_PROGRESS"}, "operation": None}
    return {"status": {"id": "COMPLETED"},
            "operation": {"failure-cause": _failure_cause(op)} if op.failure is not None else {}}


def thread_dump_view(threads: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """``GET /jobmanager/thread-dump``: Flink's ThreadDumpInfo, here a process's Python threads:
    (name, its stack as text) each."""
    return {"threadInfos": [{"threadName": name, "stringifiedThreadInfo": stack} for name, stack in threads]}

