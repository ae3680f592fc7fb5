"""The REST API's vertex, metrics and backpressure answers (pure, no I/O), with Flink's paths,
shapes and field names:

* ``/jobs/:jobid/vertices/:vertexid``: JobVertexDetailsInfo (subtasks with state, attempt,
  TaskManager, times and I/O metrics);
* ``/jobs/:jobid/vertices/:vertexid/metrics[?get=a,b]``: the metric ids ``<subtask>.<metric>``
  (user metrics ``<subtask>.<operator>.<group>.<name>``), or their values as strings;
* ``/jobs/:jobid/vertices/:vertexid/subtasks/metrics[?get=a,b&agg=max]``: a metric aggregated
  over the subtasks (min, max, avg, sum);
* ``/jobs/:jobid/vertices/:vertexid/backpressure``: JobVertexBackPressureInfo, from each
  subtask's backPressuredTimeMsPerSecond (Flink's levels: ok up to 10 %, low up to 50 %, high);
* the I/O figures of a vertex entry of ``/jobs/:jobid``.

The figures come from each current execution attempt's latest metric snapshot (a heartbeat
behind, as in Flink); :func:`vertex_views` reads them from a JobMaster's core.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from millstream.runtime.execution_state import ExecutionState
from millstream.jobmanager.rest.views import BadRequest, NotFound, vertex_status

__all__ = [
    "SubtaskView", "VertexView", "vertex_views", "parse_vertex_id", "vertex_details_view", "vertex_metrics_view",
    "subtasks_metrics_view", "backpressure_view", "backpressure_level", "vertex_io_summary",
    "find_vertex",
]

VERTEX_ID_HEX_LENGTH = 32
BACKPRESSURE_LOW = 0.10   # Flink's thresholds on the backpressured-time ratio
BACKPRESSURE_HIGH = 0.50
AGGREGATIONS = ("min", "max", "avg", "sum")


@dataclass(frozen=True)
class SubtaskView:
    subtask: int
    status: str
    attempt: int
    endpoint: str         # the TaskManager's address ("" before deployment)
    taskmanager_id: str
    start_time: int       # wall-clock ms it was deployed; -1: not yet
    end_time: int         # wall-clock ms it reached a terminal state; -1: not yet
    metrics: Mapping[str, float]
    state_times: Mapping[str, int] = field(default_factory=dict)  # wall-clock ms it entered each state


@dataclass(frozen=True)
class VertexView:
    vertex_id: bytes
    name: str
    parallelism: int
    max_parallelism: int
    subtasks: tuple[SubtaskView, ...]


def vertex_views(core: Any) -> dict[bytes, VertexView]:
    """Every job vertex of a JobMaster's core (``JobMasterCore``) with its current attempts."""
    per_vertex: dict[bytes, list[SubtaskView]] = {v.id: [] for v in core.graph.job_vertices}
    for (vertex_id, index), execution in core.current.items():
        times = execution.state_times
        slot = execution.slot
        per_vertex[vertex_id].append(SubtaskView(
            subtask=index,
            status=execution.state.value,
            attempt=execution.attempt_number,
            endpoint=slot.tm_address if slot is not None else "",
            taskmanager_id=slot.resource_id if slot is not None else "",
            start_time=times.get("DEPLOYING", -1),
            end_time=times.get(execution.state.value, -1) if execution.state.is_terminal() else -1,
            metrics=dict(execution.metrics),
            state_times=dict(times),
        ))
    return {
        v.id: VertexView(v.id, v.name, v.parallelism, v.max_parallelism,
                         tuple(sorted(per_vertex[v.id], key=lambda s: s.subtask)))
        for v in core.graph.job_vertices
    }


def parse_vertex_id(text: str) -> bytes:
    """A vertex id from a path: 32 hex digits, as Flink's JobVertexID prints."""
    try:
        if len(text) != VERTEX_ID_HEX_LENGTH:
            raise ValueError
        return bytes.fromhex(text)
    except ValueError:
        raise BadRequest(f"Invalid JobVertexID '{text}': a vertex id is {VERTEX_ID_HEX_LENGTH} hexadecimal digits.") from None


def find_vertex(vertices: Mapping[bytes, VertexView], vertex_id: bytes, job_id_hex: str) -> VertexView:
    vertex = vertices.get(vertex_id)
    if vertex is None:
        raise NotFound(f"Job {job_id_hex} has no vertex {vertex_id.hex()}.")
    return vertex


def _duration(start: int, end: int, now_ms: int) -> int:
    return -1 if start < 0 else max(0, (end if end >= 0 else now_ms) - start)


def _io_metrics(metrics: Mapping[str, float], complete: bool) -> dict[str, Any]:
    """Flink's IOMetricsInfo of one subtask (or a vertex's sums). A ``*-complete`` flag is true
    when the figure exists, as in Flink (false only while a subtask has not reported it yet); a
    terminal subtask's figures are final (``complete``)."""
    def known(name: str) -> bool:
        return complete or name in metrics

    return {
        "read-bytes": int(metrics.get("numBytesIn", 0)),
        "read-bytes-complete": known("numBytesIn"),
        "write-bytes": int(metrics.get("numBytesOut", 0)),
        "write-bytes-complete": known("numBytesOut"),
        "read-records": int(metrics.get("numRecordsIn", 0)),
        "read-records-complete": known("numRecordsIn"),
        "write-records": int(metrics.get("numRecordsOut", 0)),
        "write-records-complete": known("numRecordsOut"),
        "accumulated-backpressured-time": int(metrics.get("accumulateBackPressuredTimeMs", 0)),
        "accumulated-idle-time": int(metrics.get("accumulateIdleTimeMs", 0)),
        "accumulated-busy-time": int(metrics.get("accumulateBusyTimeMs", 0)),
    }


# The states whose durations Flink reports per attempt (its status-duration), in their order.
DURATION_STATES = ("CREATED", "SCHEDULED", "DEPLOYING", "INITIALIZING", "RUNNING")


def status_duration(subtask: SubtaskView, now_ms: int) -> dict[str, int]:
    """How long the attempt spent in each of Flink's early states (ms): from entering it to
    entering the next state it reached (the current one: to now); -1 for a state it never
    entered."""
    entered = sorted((t, state) for state, t in subtask.state_times.items() if t > 0)
    durations = {}
    for state in DURATION_STATES:
        start = subtask.state_times.get(state, 0)
        if start <= 0:
            durations[state] = -1
            continue
        later = [t for t, other in entered if t >= start and other != state]
        end = min(later) if later else now_ms
        durations[state] = max(0, end - start)
    return durations


def _aggregate(values: list[float]) -> dict[str, int]:
    """Flink's AggregatedTaskDetailsInfo statistics of one figure over subtasks (its dashboard's
    "aggregated" rows): min, max, average, sum, median and the 25th, 75th and 95th percentiles,
    as whole numbers (Flink's are longs)."""
    ordered = sorted(values) or [0.0]

    def percentile(p: float) -> int:
        position = p * (len(ordered) - 1)
        low = int(position)
        high = min(low + 1, len(ordered) - 1)
        return round(ordered[low] + (ordered[high] - ordered[low]) * (position - low))

    return {"min": round(ordered[0]), "max": round(ordered[-1]), "avg": round(sum(ordered) / len(ordered)),
            "sum": round(sum(ordered)), "median": percentile(0.5), "p25": percentile(0.25), "p75": percentile(0.75),
            "p95": percentile(0.95)}


def vertex_details_view(vertex: VertexView, now_ms: int) -> dict[str, Any]:
    """``GET /jobs/:jobid/vertices/:vertexid``: Flink's JobVertexDetailsInfo, each current attempt
    with its times, I/O figures and time per state, and their aggregates over the subtasks."""
    subtasks: list[dict[str, Any]] = []
    for s in vertex.subtasks:
        subtasks.append({
            "subtask": s.subtask,
            "status": s.status,
            "attempt": s.attempt,
            "endpoint": s.endpoint,
            "start-time": s.start_time,
            "start_time": s.start_time,  # Flink writes it under both names (the older one kept)
            "end-time": s.end_time,
            "duration": _duration(s.start_time, s.end_time, now_ms),
            "metrics": _io_metrics(s.metrics, ExecutionState(s.status).is_terminal()),
            "taskmanager-id": s.taskmanager_id or "(unassigned)",
            "status-duration": status_duration(s, now_ms),
        })
    return {
        "id": vertex.vertex_id.hex(),
        "name": vertex.name,
        "parallelism": vertex.parallelism,
        "maxParallelism": vertex.max_parallelism,
        "now": now_ms,
        "subtasks": subtasks,
        "aggregated": {
            "metrics": {name: _aggregate([s["metrics"][name] for s in subtasks]) for name in IO_FIELDS},
            "status-duration": {state: _aggregate([s["status-duration"][state] for s in subtasks])
                                for state in DURATION_STATES},
        },
    }


def _format(value: float) -> str:
    """A metric value as Flink's REST API writes it: a string, integral values without '.0'."""
    return str(int(value)) if value == int(value) and abs(value) < 2**63 else repr(value)


def _requested(get: str | None) -> list[str] | None:
    if get is None:
        return None
    return [name for name in (part.strip() for part in get.split(",")) if name]


def vertex_metrics_view(vertex: VertexView, get: str | None) -> list[dict[str, str]]:
    """``GET /jobs/:jobid/vertices/:vertexid/metrics``: without ``get`` the available ids
    (``<subtask>.<metric>``), with ``get=a,b`` those that exist with their values (as strings)."""
    values = {f"{s.subtask}.{name}": value for s in vertex.subtasks for name, value in s.metrics.items()}
    wanted = _requested(get)
    if wanted is None:
        return [{"id": metric_id} for metric_id in sorted(values)]
    return [{"id": metric_id, "value": _format(values[metric_id])} for metric_id in wanted if metric_id in values]


def subtasks_metrics_view(vertex: VertexView, get: str | None, agg: str | None) -> list[dict[str, Any]]:
    """``GET /jobs/:jobid/vertices/:vertexid/subtasks/metrics``: a metric over every subtask that
    reports it, aggregated (``agg=min,max,avg,sum``; all four by default)."""
    names = sorted({name for s in vertex.subtasks for name in s.metrics})
    wanted = _requested(get)
    if wanted is None:
        return [{"id": name} for name in names]
    aggregations = _requested(agg) or list(AGGREGATIONS)
    unknown = [a for a in aggregations if a not in AGGREGATIONS]
    if unknown:
        raise BadRequest(f"Unknown aggregation {unknown[0]!r}: use {', '.join(AGGREGATIONS)}.")
    result = []
    for name in wanted:
        values = [s.metrics[name] for s in vertex.subtasks if name in s.metrics]
        if not values:
            continue
        stats = {"min": min(values), "max": max(values), "avg": sum(values) / len(values), "sum": sum(values)}
        result.append({"id": name, **{a: stats[a] for a in aggregations}})
    return result


def backpressure_level(ratio: float) -> str:
    """Flink's level of a backpressured-time ratio (0..1)."""
    if ratio <= BACKPRESSURE_LOW:
        return "ok"
    return "low" if ratio <= BACKPRESSURE_HIGH else "high"


def backpressure_view(vertex: VertexView, now_ms: int) -> dict[str, Any]:
    """``GET /jobs/:jobid/vertices/:vertexid/backpressure``: Flink's JobVertexBackPressureInfo from
    each running subtask's latest busy / idle / backpressured time per second. Without those
    figures (no subtask reports them: not running yet, or ``metrics.task.io-timing: false``) the
    status is ``deprecated``, as Flink answers when it has no statistics."""
    subtasks: list[dict[str, Any]] = []
    for s in vertex.subtasks:
        if "backPressuredTimeMsPerSecond" not in s.metrics:
            continue
        ratio = s.metrics["backPressuredTimeMsPerSecond"] / 1000
        subtasks.append({
            "subtask": s.subtask,
            "attempt-number": s.attempt,
            "backpressure-level": backpressure_level(ratio),
            "backpressureLevel": backpressure_level(ratio),  # Flink 2 writes the level under both names
            "ratio": round(ratio, 3),
            "idleRatio": round(s.metrics.get("idleTimeMsPerSecond", 0.0) / 1000, 3),
            "busyRatio": round(s.metrics.get("busyTimeMsPerSecond", 0.0) / 1000, 3),
        })
    if not subtasks:
        return {"status": "deprecated"}
    worst = max(entry["ratio"] for entry in subtasks)
    level = backpressure_level(worst)
    return {"status": "ok", "backpressure-level": level, "backpressureLevel": level, "end-timestamp": now_ms,
            "subtasks": subtasks}


def vertex_io_summary(vertex: VertexView) -> dict[str, float]:
    """A vertex's figures for its ``/jobs/:jobid`` entry, with the entry's field names (kept in
    VertexSummary.metrics): Flink's byte counts and accumulated times summed over its current
    attempts (Flink's IOMetricsInfo has no other: its busiest subtask's busy and backpressured
    time are asked of ``subtasks/metrics?agg=max``, as Flink's dashboard asks). Empty while no
    attempt reported metrics."""
    reported = [s.metrics for s in vertex.subtasks if s.metrics]
    if not reported:
        return {}

    def total(name: str) -> float:
        return sum(m.get(name, 0.0) for m in reported)

    return {
        # how many of its subtasks reported figures: the entry's *-complete flags (views._io_fields)
        "reported-subtasks": float(len(reported)),
        "read-bytes": total("numBytesIn"),
        "write-bytes": total("numBytesOut"),
        "accumulated-backpressured-time": total("accumulateBackPressuredTimeMs"),
        "accumulated-idle-time": total("accumulateIdleTimeMs"),
        "accumulated-busy-time": total("accumulateBusyTimeMs"),
    }


# ---- the dashboard's other vertex tabs -------------------------------------------------------

def watermarks_view(vertex: VertexView) -> list[dict[str, str]]:
    """``GET /jobs/:jobid/vertices/:vertexid/watermarks``: each subtask's current input watermark
    (``<subtask>.currentInputWatermark``), for subtasks that have seen one, as Flink lists them."""
    return [{"id": f"{s.subtask}.currentInputWatermark", "value": _format(s.metrics["currentInputWatermark"])}
            for s in vertex.subtasks if "currentInputWatermark" in s.metrics]


IO_FIELDS = ("read-bytes", "write-bytes", "read-records", "write-records", "accumulated-backpressured-time",
             "accumulated-idle-time", "accumulated-busy-time")


def vertex_taskmanagers_view(vertex: VertexView, now_ms: int) -> dict[str, Any]:
    """``GET /jobs/:jobid/vertices/:vertexid/taskmanagers``: Flink's JobVertexTaskManagersInfo,
    the vertex's subtasks grouped by the TaskManager running them: its aggregate state, times,
    summed I/O metrics, subtasks per state and each figure's statistics over them."""
    groups: dict[str, list[SubtaskView]] = {}
    for s in vertex.subtasks:
        groups.setdefault(s.taskmanager_id, []).append(s)
    taskmanagers = []
    for tm_id, subtasks in groups.items():
        counts: dict[str, int] = {state.value: 0 for state in ExecutionState}
        for s in subtasks:
            counts[s.status] = counts.get(s.status, 0) + 1
        starts = [s.start_time for s in subtasks if s.start_time >= 0]
        start = min(starts) if starts else -1
        ended = all(ExecutionState(s.status).is_terminal() for s in subtasks)
        end = max((s.end_time for s in subtasks), default=-1) if ended else -1
        per_subtask = [_io_metrics(s.metrics, ExecutionState(s.status).is_terminal()) for s in subtasks]
        metrics = {**per_subtask[0], **{name: all(m[name] for m in per_subtask)
                                        for name in per_subtask[0] if name.endswith("-complete")}}
        for field in IO_FIELDS:
            metrics[field] = sum(m[field] for m in per_subtask)
        taskmanagers.append({
            "endpoint": subtasks[0].endpoint or "(unassigned)",
            "status": vertex_status({k: v for k, v in counts.items() if v}, len(subtasks)),
            "start-time": start, "end-time": end, "duration": _duration(start, end, now_ms),
            "metrics": metrics,
            "status-counts": {**counts, "RECONCILING": 0},
            "taskmanager-id": tm_id or "(unassigned)",
            "aggregated": {"metrics": {field: _aggregate([m[field] for m in per_subtask]) for field in IO_FIELDS},
                           "status-duration": {state: _aggregate([status_duration(s, now_ms)[state] for s in subtasks])
                                               for state in DURATION_STATES}},
        })
    return {"id": vertex.vertex_id.hex(), "name": vertex.name, "now": now_ms, "taskmanagers": taskmanagers}


def accumulators_view(vertex: VertexView) -> dict[str, Any]:
    """``GET /jobs/:jobid/vertices/:vertexid/accumulators``: Flink's JobVertexAccumulatorsInfo.
    PyFlink's DataStream API has no user accumulators, so the list is empty."""
    return {"id": vertex.vertex_id.hex(), "user-accumulators": []}


def subtasks_accumulators_view(vertex: VertexView) -> dict[str, Any]:
    """``GET /jobs/:jobid/vertices/:vertexid/subtasks/accumulators``: Flink's
    SubtasksAllAccumulatorsInfo, each subtask's attempt and endpoint with no user accumulators."""
    return {"id": vertex.vertex_id.hex(), "parallelism": vertex.parallelism, "subtasks": [
        {"subtask": s.subtask, "attempt": s.attempt, "endpoint": s.endpoint or "(unassigned)", "user-accumulators": []}
        for s in vertex.subtasks]}


FLAME_GRAPH_DISABLED = -2  # Flink's VertexFlameGraph.disabled(): what the dashboard reads as "disabled"


def flame_graph_view() -> dict[str, Any]:
    """``GET /jobs/:jobid/vertices/:vertexid/flamegraph``: Flink's answer when
    ``rest.flamegraph.enabled`` is false. Flame graphs sample JVM thread stacks; a Millstream task
    runs Python, so they are always disabled here. Flink leaves out the graph it does not have
    (``data``), as it leaves out every null field of a VertexFlameGraph."""
    return {"endTimestamp": FLAME_GRAPH_DISABLED}


def named_metrics_view(values: Mapping[str, float], get: str | None) -> list[dict[str, str]]:
    """A component's metrics (``/jobmanager/metrics``, ``/taskmanagers/:id/metrics``): without
    ``get`` the ids, with ``get=a,b`` those that exist with their values (strings)."""
    wanted = _requested(get)
    if wanted is None:
        return [{"id": name} for name in sorted(values)]
    return [{"id": name, "value": _format(values[name])} for name in wanted if name in values]
