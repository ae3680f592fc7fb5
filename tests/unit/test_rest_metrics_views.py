"""The REST API's vertex, metrics and backpressure views (Flink's shapes), over a real JobMasterCore."""
from __future__ import annotations

import pytest

from millstream.jobmanager.rest import metrics_views
from millstream.jobmanager.rest import views
from millstream.runtime.execution_state import ExecutionState
from millstream.jobmanager.rest.views import BadRequest, JobView, NotFound
from millstream.proto import cluster_pb2 as cpb

from .test_live_view import _core, _deployed


def _vertex(*metrics: dict[str, float], status: str = "RUNNING") -> metrics_views.VertexView:
    subtasks = tuple(metrics_views.SubtaskView(i, status, 0, "host-a:6122", "tm-1", 1_000, -1, m) for i, m in enumerate(metrics))
    return metrics_views.VertexView(b"v" * 16, "Map", len(metrics), 128, subtasks)


def test_vertex_views_read_the_current_attempts() -> None:
    core = _core(parallelism=2)
    _deployed(core)
    execution = core.current_executions()[0]
    core.update_task_state(execution.attempt_id, ExecutionState.INITIALIZING)
    core.update_task_state(execution.attempt_id, ExecutionState.RUNNING)
    core.update_records(execution.attempt_id, 0, 40, {"numRecordsOut": 40.0, "busyTimeMsPerSecond": 800.0})
    vertices = metrics_views.vertex_views(core)
    assert len(vertices) == 2
    vertex = vertices[execution.vertex.job_vertex.id]
    assert [s.subtask for s in vertex.subtasks] == [0, 1]
    mine = vertex.subtasks[execution.vertex.subtask_index]
    assert mine.status == "RUNNING" and mine.endpoint == "tm:1" and mine.taskmanager_id == "tm"
    assert mine.start_time > 0 and mine.end_time == -1 and mine.metrics["numRecordsOut"] == 40.0


def test_vertex_details_are_flinks_job_vertex_details_info() -> None:
    vertex = _vertex({"numRecordsIn": 10, "numBytesIn": 300, "numRecordsOut": 5, "numBytesOut": 100,
                      "accumulateBusyTimeMs": 70})
    body = metrics_views.vertex_details_view(vertex, now_ms=3_000)
    assert body["id"] == vertex.vertex_id.hex() and body["parallelism"] == 1 and body["now"] == 3_000
    (subtask,) = body["subtasks"]
    assert subtask["endpoint"] == "host-a:6122" and subtask["duration"] == 2_000
    assert subtask["metrics"]["read-bytes"] == 300 and subtask["metrics"]["write-records"] == 5
    # Flink's *-complete: true once the running subtask reported the figure (the dashboard shows
    # "loading..." while it is false), false while it has not.
    assert subtask["metrics"]["read-records-complete"] is True and subtask["metrics"]["accumulated-busy-time"] == 70
    (silent,) = metrics_views.vertex_details_view(_vertex({}), now_ms=3_000)["subtasks"]
    assert silent["metrics"]["read-records-complete"] is False and silent["metrics"]["write-bytes-complete"] is False


def test_status_duration_is_the_time_in_each_state_and_aggregated_over_the_subtasks() -> None:
    """Flink's status-duration: per attempt the ms from entering CREATED, SCHEDULED, DEPLOYING,
    INITIALIZING and RUNNING to entering the next state (the current one: to now; -1 never
    entered); the vertex's aggregated row has min/max/avg/sum/median/p25/p75/p95 of each."""
    times = {"CREATED": 100, "SCHEDULED": 150, "DEPLOYING": 400, "INITIALIZING": 1_000, "RUNNING": 1_600}
    running = metrics_views.SubtaskView(0, "RUNNING", 0, "a:1", "tm", 400, -1, {"numRecordsIn": 4}, times)
    finished = metrics_views.SubtaskView(1, "FINISHED", 0, "a:1", "tm", 400, 2_000, {"numRecordsIn": 8},
                                         {**times, "FINISHED": 2_000})
    deploying = metrics_views.SubtaskView(2, "DEPLOYING", 0, "a:1", "tm", 400, -1, {},
                                          {"CREATED": 100, "SCHEDULED": 150, "DEPLOYING": 400})
    vertex = metrics_views.VertexView(b"v" * 16, "Map", 3, 128, (running, finished, deploying))
    body = metrics_views.vertex_details_view(vertex, now_ms=3_000)
    first, second, third = (s["status-duration"] for s in body["subtasks"])
    assert first == {"CREATED": 50, "SCHEDULED": 250, "DEPLOYING": 600, "INITIALIZING": 600, "RUNNING": 1_400}
    assert second["RUNNING"] == 400  # until it finished
    assert third == {"CREATED": 50, "SCHEDULED": 250, "DEPLOYING": 2_600, "INITIALIZING": -1, "RUNNING": -1}
    assert body["subtasks"][0]["start_time"] == body["subtasks"][0]["start-time"] == 400
    aggregated = body["aggregated"]
    assert aggregated["status-duration"]["DEPLOYING"] == {"min": 600, "max": 2_600, "avg": 1_267, "sum": 3_800,
                                                           "median": 600, "p25": 600, "p75": 1_600, "p95": 2_400}
    assert aggregated["metrics"]["read-records"]["sum"] == 12 and aggregated["metrics"]["read-records"]["max"] == 8
    # the same per TaskManager (/vertices/:vid/taskmanagers: all three run on "tm")
    [tm] = metrics_views.vertex_taskmanagers_view(vertex, now_ms=3_000)["taskmanagers"]
    assert tm["aggregated"]["status-duration"]["DEPLOYING"] == aggregated["status-duration"]["DEPLOYING"]


def test_metric_ids_are_prefixed_with_the_subtask_and_values_are_strings() -> None:
    vertex = _vertex({"numRecordsIn": 10, "Map.hits": 3}, {"numRecordsIn": 12.5})
    assert metrics_views.vertex_metrics_view(vertex, None) == [
        {"id": "0.Map.hits"}, {"id": "0.numRecordsIn"}, {"id": "1.numRecordsIn"}]
    assert metrics_views.vertex_metrics_view(vertex, "1.numRecordsIn, 0.Map.hits,9.none") == [
        {"id": "1.numRecordsIn", "value": "12.5"}, {"id": "0.Map.hits", "value": "3"}]


def test_subtask_aggregation() -> None:
    vertex = _vertex({"numRecordsIn": 10}, {"numRecordsIn": 30}, {})
    assert metrics_views.subtasks_metrics_view(vertex, None, None) == [{"id": "numRecordsIn"}]
    assert metrics_views.subtasks_metrics_view(vertex, "numRecordsIn", None) == [
        {"id": "numRecordsIn", "min": 10, "max": 30, "avg": 20, "sum": 40}]
    assert metrics_views.subtasks_metrics_view(vertex, "numRecordsIn,x", "sum") == [{"id": "numRecordsIn", "sum": 40}]
    with pytest.raises(BadRequest, match="Unknown aggregation"):
        metrics_views.subtasks_metrics_view(vertex, "numRecordsIn", "p99")


@pytest.mark.parametrize("ratio, level", [(0.0, "ok"), (0.10, "ok"), (0.11, "low"), (0.5, "low"), (0.51, "high"), (1.0, "high")])
def test_backpressure_levels_use_flinks_thresholds(ratio: float, level: str) -> None:
    assert metrics_views.backpressure_level(ratio) == level


def test_backpressure_view() -> None:
    vertex = _vertex(
        {"backPressuredTimeMsPerSecond": 50, "idleTimeMsPerSecond": 900, "busyTimeMsPerSecond": 50},
        {"backPressuredTimeMsPerSecond": 700, "idleTimeMsPerSecond": 0, "busyTimeMsPerSecond": 300},
    )
    body = metrics_views.backpressure_view(vertex, now_ms=5)
    assert body["status"] == "ok" and body["backpressure-level"] == "high" and body["end-timestamp"] == 5
    assert body["subtasks"][0] == {"subtask": 0, "attempt-number": 0, "backpressure-level": "ok", "ratio": 0.05,
                                   "idleRatio": 0.9, "busyRatio": 0.05, "backpressureLevel": "ok"}
    assert body["subtasks"][1]["backpressure-level"] == "high"
    assert metrics_views.backpressure_view(_vertex({"numRecordsIn": 1}), now_ms=5) == {"status": "deprecated"}


def test_ids_and_unknown_vertices() -> None:
    assert metrics_views.parse_vertex_id("ab" * 16) == b"\xab" * 16
    for bad in ("ab", "zz" * 16):
        with pytest.raises(BadRequest, match="Invalid JobVertexID"):
            metrics_views.parse_vertex_id(bad)
    with pytest.raises(NotFound, match="has no vertex"):
        metrics_views.find_vertex({}, b"\x01" * 16, "job")


def test_job_details_vertices_carry_bytes_and_times_and_nothing_flink_does_not_know() -> None:
    vertex = _vertex(
        {"numBytesIn": 100, "numBytesOut": 10, "busyTimeMsPerSecond": 200, "backPressuredTimeMsPerSecond": 700,
         "accumulateBusyTimeMs": 5},
        {"numBytesIn": 50, "numBytesOut": 20, "busyTimeMsPerSecond": 900, "backPressuredTimeMsPerSecond": 0,
         "accumulateBusyTimeMs": 7},
    )
    io = metrics_views.vertex_io_summary(vertex)
    assert io["read-bytes"] == 150 and io["write-bytes"] == 30 and io["accumulated-busy-time"] == 12
    assert metrics_views.vertex_io_summary(_vertex({})) == {}
    summary = cpb.JobSummary(job_id=b"j" * 16, job_name="job", status=cpb.RUNNING, start_time_ms=1)
    summary.vertices.add(vertex_id=vertex.vertex_id, name="Map", parallelism=2, records_in=3).metrics.update(io)
    body = views.job_details_view(JobView(summary, {"RUNNING": 2}), now_ms=10)
    metrics = body["vertices"][0]["metrics"]
    # Both subtasks reported: the figures are complete (Flink's flag), though the vertex runs.
    assert metrics["read-records"] == 3 and metrics["read-bytes"] == 150 and metrics["read-bytes-complete"] is True
    assert metrics["read-records-complete"] is True and "reported-subtasks" not in metrics
    # Flink's IOMetricsInfo has these fields only (its client refuses others)
    assert set(metrics) == {"read-bytes", "read-bytes-complete", "write-bytes", "write-bytes-complete", "read-records",
                            "read-records-complete", "write-records", "write-records-complete",
                            "accumulated-backpressured-time", "accumulated-idle-time", "accumulated-busy-time"}
    # One of two subtasks reported: not complete yet.
    half = metrics_views.vertex_io_summary(_vertex({"numBytesIn": 100}, {}))
    summary.vertices[0].metrics.clear()
    summary.vertices[0].metrics.update(half)
    metrics = views.job_details_view(JobView(summary, {"RUNNING": 2}), now_ms=10)["vertices"][0]["metrics"]
    assert metrics["read-records-complete"] is False and metrics["read-bytes-complete"] is False


def test_watermarks_list_each_subtask_that_has_one() -> None:
    vertex = _vertex({"currentInputWatermark": 1_700_000_000_000}, {"numRecordsIn": 3})
    assert metrics_views.watermarks_view(vertex) == [{"id": "0.currentInputWatermark", "value": "1700000000000"}]


def test_vertex_taskmanagers_group_subtasks_by_taskmanager() -> None:
    subtasks = (
        metrics_views.SubtaskView(0, "RUNNING", 0, "host-a:6122", "tm-a", 1_000, -1, {"numRecordsIn": 10}),
        metrics_views.SubtaskView(1, "RUNNING", 0, "host-a:6122", "tm-a", 1_500, -1, {"numRecordsIn": 30}),
        metrics_views.SubtaskView(2, "FINISHED", 0, "host-b:6122", "tm-b", 1_200, 2_200, {"numRecordsIn": 5}),
    )
    body = metrics_views.vertex_taskmanagers_view(metrics_views.VertexView(b"v" * 16, "Map", 3, 128, subtasks), 4_000)
    a, b = body["taskmanagers"]
    assert (a["taskmanager-id"], a["status"], a["start-time"], a["end-time"], a["duration"]) == ("tm-a", "RUNNING", 1_000, -1, 3_000)
    assert a["metrics"]["read-records"] == 40 and a["metrics"]["read-records-complete"] is True
    assert a["status-counts"]["RUNNING"] == 2 and a["aggregated"]["metrics"]["read-records"]["max"] == 30
    assert (b["status"], b["end-time"], b["duration"]) == ("FINISHED", 2_200, 1_000)


def test_accumulators_flame_graph_and_named_metrics() -> None:
    vertex = _vertex({}, {})
    assert metrics_views.accumulators_view(vertex) == {"id": vertex.vertex_id.hex(), "user-accumulators": []}
    subtasks = metrics_views.subtasks_accumulators_view(vertex)
    assert subtasks["parallelism"] == 2 and [s["subtask"] for s in subtasks["subtasks"]] == [0, 1]
    assert metrics_views.flame_graph_view() == {"endTimestamp": -2}  # Flink's "disabled": no data
    values = {"Status.JVM.Memory.Heap.Used": 1024.0}
    assert metrics_views.named_metrics_view(values, None) == [{"id": "Status.JVM.Memory.Heap.Used"}]
    assert metrics_views.named_metrics_view(values, "Status.JVM.Memory.Heap.Used,nope") == [
        {"id": "Status.JVM.Memory.Heap.Used", "value": "1024"}]
