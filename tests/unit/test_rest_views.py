"""The REST API's pure views: JobManager summaries in, Flink's JSON shapes out (no server)."""
from __future__ import annotations

import pytest

from millstream.jobmanager.rest import views
from millstream.jobmanager.rest.views import BadRequest, JobView, NotFound, TaskManagerView
from millstream.jobmanager.resourcemanager.slot_manager import TaskManagerSlotInformation, SlotState, TaskManagerInfo
from millstream.proto import cluster_pb2 as cpb
from millstream.proto import jobgraph_pb2 as pb

JOB = bytes(range(16))
SOURCE, SINK = b"\x01" * 16, b"\x02" * 16


def graph() -> pb.JobGraph:
    g = pb.JobGraph(job_id=JOB, job_name="word count")
    g.vertices.add(id=SOURCE, name="Source: words -> Map", parallelism=2)
    sink = g.vertices.add(id=SINK, name="Reduce -> Sink: print", parallelism=1)
    sink.inputs.add(source_vertex=SOURCE, ship_strategy="HASH", partition_type=pb.ResultPartitionType.PIPELINED_BOUNDED)
    return g


def running_job() -> JobView:
    summary = cpb.JobSummary(job_id=JOB, job_name="word count", status=cpb.RUNNING, start_time_ms=1_000,
                             num_tasks=3, parallelism=2, tasks_per_state={"RUNNING": 2, "DEPLOYING": 1})
    summary.vertices.add(vertex_id=SOURCE, name="Source: words -> Map", parallelism=2,
                         tasks_per_state={"RUNNING": 2}, records_in=0, records_out=40)
    summary.vertices.add(vertex_id=SINK, name="Reduce -> Sink: print", parallelism=1,
                         tasks_per_state={"DEPLOYING": 1})
    return JobView(summary, {"INITIALIZING": 1_000, "CREATED": 1_100, "RUNNING": 1_200}, views.job_plan(graph()))


def finished_job() -> JobView:
    summary = cpb.JobSummary(job_id=JOB, job_name="word count", status=cpb.FINISHED, start_time_ms=1_000,
                             end_time_ms=5_000, num_tasks=1, tasks_per_state={"FINISHED": 1})
    summary.vertices.add(vertex_id=SINK, name="Sink", parallelism=1, tasks_per_state={"FINISHED": 1},
                         records_in=7, records_out=0)
    return JobView(summary, {"INITIALIZING": 1_000, "RUNNING": 1_200, "FINISHED": 5_000})


def test_overview_has_flinks_fields_and_millstreams_version() -> None:
    o = cpb.ClusterOverview(taskmanagers=2, slots_total=4, slots_available=1, jobs_running=1, jobs_finished=3,
                            jobs_cancelled=1, jobs_failed=2)
    assert views.overview_view(o, "0.1.0") == {
        "taskmanagers": 2, "slots-total": 4, "slots-available": 1, "jobs-running": 1, "jobs-finished": 3,
        "jobs-cancelled": 1, "jobs-failed": 2, "flink-version": "0.1.0", "flink-commit": "millstream 0.1.0",
        "taskmanagers-blocked": 0, "slots-free-and-blocked": 0}
    assert views.config_view("0.1.0", 3000)["flink-version"] == "0.1.0"


def test_jobs_and_jobs_overview() -> None:
    assert views.jobs_view([running_job()]) == {"jobs": [{"id": JOB.hex(), "status": "RUNNING"}]}
    [job] = views.jobs_overview_view([running_job()], now_ms=3_000)["jobs"]
    assert (job["jid"], job["name"], job["state"]) == (JOB.hex(), "word count", "RUNNING")
    assert (job["start-time"], job["end-time"], job["duration"]) == (1_000, -1, 2_000)
    assert job["tasks"]["total"] == 3 and job["tasks"]["running"] == 2 and job["tasks"]["deploying"] == 1
    assert job["tasks"]["finished"] == 0  # every state is listed, lower case as in Flink


def test_job_details_vertices_states_and_records() -> None:
    details = views.job_details_view(running_job(), now_ms=3_000)
    assert (details["jid"], details["state"], details["now"], details["duration"]) == (JOB.hex(), "RUNNING", 3_000, 2_000)
    assert details["timestamps"]["RUNNING"] == 1_200 and details["timestamps"]["FINISHED"] == 0
    source, sink = details["vertices"]
    assert (source["id"], source["parallelism"], source["status"]) == (SOURCE.hex(), 2, "RUNNING")
    assert source["tasks"]["RUNNING"] == 2 and source["metrics"]["write-records"] == 40
    assert source["start-time"] == 1_200 and source["duration"] == 1_800
    assert sink["status"] == "DEPLOYING"
    assert details["status-counts"]["RUNNING"] == 2 and details["status-counts"]["FAILED"] == 0
    assert [n["id"] for n in details["plan"]["nodes"]] == [SOURCE.hex(), SINK.hex()]


def test_finished_job_details() -> None:
    details = views.job_details_view(finished_job(), now_ms=9_000)
    assert (details["state"], details["end-time"], details["duration"]) == ("FINISHED", 5_000, 4_000)
    [vertex] = details["vertices"]
    assert vertex["status"] == "FINISHED" and vertex["metrics"]["read-records"] == 7
    assert vertex["metrics"]["read-records-complete"] is True


@pytest.mark.parametrize("counts, parallelism, status", [
    ({}, 2, "CREATED"),
    ({"FINISHED": 2}, 2, "FINISHED"),
    ({"FINISHED": 1, "RUNNING": 1}, 2, "RUNNING"),
    ({"FAILED": 1, "RUNNING": 1}, 2, "FAILED"),
    ({"CANCELING": 1, "CANCELED": 1}, 2, "CANCELING"),
    ({"CANCELED": 2}, 2, "CANCELED"),
    ({"SCHEDULED": 2}, 2, "SCHEDULED"),
])
def test_vertex_status_aggregates_as_flink(counts: dict[str, int], parallelism: int, status: str) -> None:
    assert views.vertex_status(counts, parallelism) == status


def test_plan_has_nodes_with_inputs_and_ship_strategies() -> None:
    plan = views.plan_view(JobView(cpb.JobSummary(job_id=JOB), plan=views.job_plan(graph())))["plan"]
    assert (plan["jid"], plan["name"], plan["type"]) == (JOB.hex(), "word count", "STREAMING")
    source, sink = plan["nodes"]
    assert "inputs" not in source and source["description"] == "Source: words -> Map"
    assert sink["inputs"] == [{"num": 0, "id": SOURCE.hex(), "ship_strategy": "HASH", "exchange": "pipelined_bounded"}]


def test_exceptions_root_cause_and_history() -> None:
    none = views.exceptions_view(running_job(), now_ms=3_000)
    assert none == {"exceptionHistory": {"entries": [], "truncated": False}}  # Flink 2's fields only
    job = finished_job()
    job.summary.status = cpb.FAILED
    job.summary.failure.CopyFrom(cpb.JobFailure(message="ValueError: bad record", task_name="Map (1/2)",
                                                traceback="Traceback ...\nValueError: bad record"))
    view = views.exceptions_view(job, now_ms=9_000)
    [entry] = view["exceptionHistory"]["entries"]
    assert entry["stacktrace"].endswith("ValueError: bad record")
    assert (entry["exceptionName"], entry["taskName"], entry["timestamp"]) == ("ValueError", "Map (1/2)", 5_000)


def test_checkpoints_counts_and_latest() -> None:
    with pytest.raises(NotFound, match="Checkpointing has not been enabled"):
        views.checkpoints_view(running_job())
    job = running_job()
    job.summary.checkpoints.CopyFrom(cpb.CheckpointSummary(
        interval_ms=100, directory="/tmp/cp", num_completed=3, num_failed=1, num_in_progress=1, last_completed_id=4,
        last_duration_ms=50, last_size_bytes=1234, last_completed_at_ms=2_000, last_failure_reason="CHECKPOINT_DECLINED",
        latest_restored_id=2, latest_restored_at_ms=1_500, latest_restored_path="/tmp/cp/chk-2"))
    view = views.checkpoints_view(job)
    assert view["counts"] == {"restored": 1, "total": 5, "in_progress": 1, "completed": 3, "failed": 1}
    completed = view["latest"]["completed"]
    assert (completed["id"], completed["state_size"], completed["end_to_end_duration"]) == (4, 1234, 50)
    assert view["latest"]["restored"]["id"] == 2
    # its one failure drew no id (a trigger that could not start): counted, but no latest failed
    # checkpoint, as Flink's CheckpointStatsTracker keeps it
    assert view["latest"]["failed"] is None


def test_a_trigger_that_fails_before_an_id_leaves_the_latest_failed_checkpoint_one_with_details() -> None:
    """The dashboard asks /checkpoints/details/<latest.failed.id>: it must name a checkpoint the
    details path answers, never one without an id (CI once got a 404 for details/-1)."""
    job = running_job()
    job.summary.checkpoints.CopyFrom(cpb.CheckpointSummary(
        num_completed=1, num_failed=2, last_completed_id=5, last_completed_at_ms=7_000, last_duration_ms=100,
        last_failure_reason="NOT_ALL_REQUIRED_TASKS_RUNNING", last_failure_message="not all tasks are running",
        history=[cpb.CheckpointHistoryEntry(id=5, status="COMPLETED", trigger_timestamp_ms=6_900, end_timestamp_ms=7_000),
                 cpb.CheckpointHistoryEntry(id=4, status="FAILED", trigger_timestamp_ms=5_000, end_timestamp_ms=6_000,
                                            failure_message="expired")]))
    view = views.checkpoints_view(job)
    assert view["counts"]["failed"] == 2
    failed = view["latest"]["failed"]
    assert (failed["id"], failed["failure_message"]) == (4, "expired")
    assert views.checkpoint_details_view(job, str(failed["id"]))["status"] == "FAILED"


def taskmanager(slot_tasks: dict[int, int] | None = None) -> TaskManagerView:
    slots = (TaskManagerSlotInformation("tm-1", 0, SlotState.ALLOCATED, JOB, b"a" * 16), TaskManagerSlotInformation("tm-1", 1, SlotState.FREE, None, None))
    return TaskManagerView(TaskManagerInfo("tm-1", "10.0.0.5:41000", "10.0.0.5:41001", "reg", 2, 1, 0, slots), 7_000,
                           slot_tasks=slot_tasks or {})


def test_taskmanagers() -> None:
    [tm] = views.taskmanagers_view([taskmanager()])["taskmanagers"]
    total, free, memory = tm.pop("totalResource"), tm.pop("freeResource"), tm.pop("memoryConfiguration")
    assert tm == {"id": "tm-1", "path": "10.0.0.5:41000", "dataPort": 41001, "jmxPort": -1,
                  "timeSinceLastHeartbeat": 7_000, "slotsNumber": 2, "freeSlots": 1, "assignedTasks": 0,
                  "hardware": {"cpuCores": 0, "physicalMemory": 0, "freeMemory": 0, "managedMemory": 0},
                  "blocked": False}
    assert total["cpuCores"] == free["cpuCores"] == 0.0 and total["extendedResources"] == {}  # no heartbeat yet
    assert memory["totalProcessMemory"] == 0
    details = views.taskmanager_details_view(taskmanager())
    [slot] = details["allocatedSlots"]
    assert slot == {"jobId": JOB.hex(), "resource": slot["resource"], "assignedTasks": 0}  # Flink's SlotInfo
    assert slot["resource"]["cpuCores"] == 0.0
    # no heartbeat answered yet: nothing known about its memory, Flink's figures all 0
    assert details["metrics"]["heapUsed"] == 0 and details["metrics"]["garbageCollectors"] == []


def test_assigned_tasks_count_the_tasks_deployed_in_each_slot() -> None:
    """Flink's assignedTasks: with slot sharing a slot runs a task of each vertex."""
    tm = taskmanager({0: 3})
    assert views.taskmanagers_view([tm])["taskmanagers"][0]["assignedTasks"] == 3
    details = views.taskmanager_details_view(tm)
    assert details["assignedTasks"] == 3 and [s["assignedTasks"] for s in details["allocatedSlots"]] == [3]


def test_a_taskmanager_shows_the_hardware_and_memory_its_heartbeat_reported() -> None:
    resources = cpb.TaskManagerResources(cpu_cores=2, physical_memory_bytes=24 << 30, available_memory_bytes=20 << 30,
                                         process_rss_bytes=90 << 20, process_tree_rss_bytes=700 << 20,
                                         heartbeats_received=42, running_tasks=3)
    tm = views.TaskManagerView(taskmanager().info, 7_000, resources)
    [listed] = views.taskmanagers_view([tm])["taskmanagers"]
    assert listed["hardware"] == {"cpuCores": 2, "physicalMemory": 24 << 30, "freeMemory": 20 << 30, "managedMemory": 0}
    details = views.taskmanager_details_view(tm)
    assert details["hardware"] == listed["hardware"]
    # Flink's TaskManagerMetricsInfo and TaskExecutorMemoryConfiguration, which its dashboard reads.
    assert (details["metrics"]["heapUsed"], details["metrics"]["heapMax"]) == (90 << 20, 24 << 30)
    assert details["metrics"]["garbageCollectors"] == [] and details["metrics"]["directUsed"] == 0
    assert details["memoryConfiguration"]["totalProcessMemory"] == 24 << 30
    assert details["memoryConfiguration"]["managedMemory"] == 0 and details["blocked"] is False
    # Flink's ResourceProfileInfo: the cores, shared by the slots (one of two is free).
    assert (details["totalResource"]["cpuCores"], details["freeResource"]["cpuCores"]) == (2.0, 1.0)


@pytest.mark.parametrize("text", ["xyz", "00" * 15, "zz" * 16, ""])
def test_malformed_job_ids_are_bad_requests(text: str) -> None:
    with pytest.raises(BadRequest, match="Invalid JobID"):
        views.parse_job_id(text)
    assert views.parse_job_id(JOB.hex()) == JOB


def test_exception_history_is_every_recorded_failure_newest_first_and_max_exceptions_truncates() -> None:
    from millstream.jobmanager.jobmaster.job_master_core import ExceptionHistoryEntry
    first = ExceptionHistoryEntry(cpb.JobFailure(message="ValueError: one", task_name="Map (1/2)",
                                                 traceback="Traceback ...\nValueError: one"), 2_000, "10.0.0.1:6121", "tm-1")
    second = ExceptionHistoryEntry(cpb.JobFailure(message="KeyError: 'x'", task_name="Map (2/2)"), 3_000, "10.0.0.2:6121", "tm-2")
    job = running_job()
    job = JobView(job.summary, job.timestamps, job.plan, (first, second))
    view = views.exceptions_view(job, now_ms=9_000)
    newest, oldest = view["exceptionHistory"]["entries"]
    assert (newest["exceptionName"], newest["timestamp"], newest["taskManagerId"], newest["endpoint"]) == (
        "KeyError", 3_000, "tm-2", "10.0.0.2:6121")
    assert oldest["stacktrace"] == "Traceback ...\nValueError: one" and oldest["taskName"] == "Map (1/2)"
    assert view["exceptionHistory"]["truncated"] is False
    [only] = views.exceptions_view(job, 9_000, max_exceptions=1)["exceptionHistory"]["entries"]
    assert only["exceptionName"] == "KeyError"
    assert views.exceptions_view(job, 9_000, max_exceptions=1)["exceptionHistory"]["truncated"] is True


@pytest.mark.parametrize("text,expected", [(None, 20), ("", 20), ("5", 5), ("3,7", 3), ("0", 0)])
def test_max_exceptions_parameter(text: str | None, expected: int) -> None:
    assert views.parse_max_exceptions(text) == expected


@pytest.mark.parametrize("text", ["-1", "ten", "1.5"])
def test_max_exceptions_rejects_what_is_not_a_count(text: str) -> None:
    with pytest.raises(BadRequest, match="maxExceptions"):
        views.parse_max_exceptions(text)


def test_savepoint_requests_read_flinks_bodies() -> None:
    trigger = "ab" * 16
    assert views.savepoint_trigger_request({"target-directory": "/sp", "cancel-job": True, "triggerId": trigger}) == (
        "/sp", True, trigger)
    assert views.savepoint_trigger_request({}) == ("", False, None)
    assert views.stop_request({"targetDirectory": "/sp", "drain": False}) == ("/sp", False, None)
    assert views.stop_request({"drain": True}) == ("", True, None)  # Flink's drain: MAX_WATERMARK first
    with pytest.raises(BadRequest, match="'drain' must be a bool"):
        views.stop_request({"drain": "yes"})
    with pytest.raises(BadRequest, match="'cancel-job' must be a bool"):
        views.savepoint_trigger_request({"cancel-job": "yes"})
    with pytest.raises(BadRequest, match="JSON object"):
        views.savepoint_trigger_request([1])
    with pytest.raises(BadRequest, match="trigger id"):
        views.savepoint_trigger_request({"triggerId": "nope"})
    with pytest.raises(BadRequest, match="formatType"):
        views.savepoint_trigger_request({"formatType": "NATIVE"})


def test_savepoint_status_in_progress_completed_and_failed() -> None:
    op = views.SavepointOperation(JOB, "ab" * 16, stop=False)
    assert views.savepoint_status_view(op) == {"status": {"id": "IN_PROGRESS"}, "operation": None}
    op.location = "/sp/savepoint-1"
    assert views.savepoint_status_view(op) == {"status": {"id": "COMPLETED"}, "operation": {"location": "/sp/savepoint-1"}}
    failed = views.SavepointOperation(JOB, "cd" * 16, stop=True, failure="the job takes no checkpoints")
    body = views.savepoint_status_view(failed)
    assert body["status"]["id"] == "COMPLETED" and "no checkpoints" in body["operation"]["failure-cause"]["stack-trace"]


def test_checkpoint_history_newest_first_with_flinks_fields() -> None:
    job = running_job()
    job.summary.checkpoints.CopyFrom(cpb.CheckpointSummary(num_completed=1, num_failed=1, last_completed_id=3, history=[
        cpb.CheckpointHistoryEntry(id=4, status="FAILED", trigger_timestamp_ms=5_000, end_timestamp_ms=5_600,
                                   failure_message="Checkpoint expired"),
        cpb.CheckpointHistoryEntry(id=3, status="COMPLETED", is_savepoint=True, trigger_timestamp_ms=4_000,
                                   end_timestamp_ms=4_250, size_bytes=99)]))
    failed, completed = views.checkpoints_view(job)["history"]
    assert (failed["id"], failed["status"], failed["failure_timestamp"], failed["failure_message"]) == (
        4, "FAILED", 5_600, "Checkpoint expired")
    assert (completed["id"], completed["end_to_end_duration"], completed["state_size"], completed["is_savepoint"],
            completed["checkpoint_type"], completed["latest_ack_timestamp"]) == (3, 250, 99, True, "SAVEPOINT", 4_250)


def test_latest_checkpoints_take_what_the_history_knows() -> None:
    job = running_job()
    job.summary.checkpoints.CopyFrom(cpb.CheckpointSummary(
        num_completed=2, num_failed=1, last_completed_id=5, last_completed_at_ms=7_000, last_duration_ms=100,
        last_failure_reason="CHECKPOINT_EXPIRED", last_failure_message="expired", history=[
            cpb.CheckpointHistoryEntry(id=5, status="COMPLETED", is_savepoint=True, trigger_timestamp_ms=6_900, end_timestamp_ms=7_000),
            cpb.CheckpointHistoryEntry(id=4, status="FAILED", trigger_timestamp_ms=5_000, end_timestamp_ms=6_000,
                                       failure_message="expired")]))
    latest = views.checkpoints_view(job)["latest"]
    assert latest["completed"]["is_savepoint"] and latest["completed"]["checkpoint_type"] == "SAVEPOINT"
    assert latest["savepoint"]["id"] == 5
    assert (latest["failed"]["id"], latest["failed"]["failure_timestamp"], latest["failed"]["trigger_timestamp"]) == (4, 6_000, 5_000)


def test_checkpoint_trigger_requests_read_flinks_body() -> None:
    """Flink's CheckpointTriggerRequestBody: checkpointType (CONFIGURED when left out) and triggerId."""
    assert views.checkpoint_trigger_request({}) == ("CONFIGURED", None)
    assert views.checkpoint_trigger_request({"checkpointType": "FULL", "triggerId": "AB" * 16}) == ("FULL", "ab" * 16)
    with pytest.raises(BadRequest, match="checkpointType 'SAVEPOINT' is not one of CONFIGURED, FULL, INCREMENTAL"):
        views.checkpoint_trigger_request({"checkpointType": "SAVEPOINT"})
    with pytest.raises(BadRequest, match="must be a JSON object"):
        views.checkpoint_trigger_request([])


def test_checkpoint_and_disposal_status_have_flinks_shapes() -> None:
    op = views.TriggeredOperation("ab" * 16)
    assert views.checkpoint_status_view(op) == {"status": {"id": "IN_PROGRESS"}, "operation": None}
    op.done, op.result = True, 7
    assert views.checkpoint_status_view(op) == {"status": {"id": "COMPLETED"}, "operation": {"checkpointId": 7}}
    op.failure = "the job is CANCELED"
    assert "the job is CANCELED" in views.checkpoint_status_view(op)["operation"]["failureCause"]["stack-trace"]
    disposal = views.TriggeredOperation("cd" * 16, done=True)
    assert views.disposal_status_view(disposal) == {"status": {"id": "COMPLETED"}, "operation": {}}
    disposal.failure = "no _metadata"
    assert "no _metadata" in views.disposal_status_view(disposal)["operation"]["failure-cause"]["stack-trace"]
    assert views.disposal_request({"savepoint-path": "/sp"}) == "/sp"
    with pytest.raises(BadRequest, match="names no 'savepoint-path'"):
        views.disposal_request({})


def test_jobs_overview_entries_carry_pending_operators() -> None:
    """Flink 2's JobDetails needs `pending-operators` (an int): its CLI cannot parse an entry without it."""
    summary = cpb.JobSummary(job_id=b"\x01" * 16, job_name="j", status=cpb.JobStatus.RUNNING, num_tasks=2)
    [entry] = views.jobs_overview_view([JobView(summary)], 0)["jobs"]
    assert entry["pending-operators"] == 0


def test_latest_failed_and_savepoint_outlive_the_history() -> None:
    """Flink keeps latest.failed and latest.savepoint whole once they left the 10-entry history."""
    job = running_job()
    job.summary.checkpoints.CopyFrom(cpb.CheckpointSummary(
        num_completed=12, num_failed=1, last_completed_id=20, last_completed_at_ms=9_000, last_duration_ms=10,
        last_failure_reason="CHECKPOINT_DECLINED", last_failure_message="declined",
        history=[cpb.CheckpointHistoryEntry(id=20, status="COMPLETED", trigger_timestamp_ms=8_990, end_timestamp_ms=9_000,
                                            num_subtasks=4, num_acknowledged_subtasks=4, external_path="/c/chk-20")],
        latest_failed=cpb.CheckpointHistoryEntry(id=3, status="FAILED", trigger_timestamp_ms=1_000, end_timestamp_ms=1_500,
                                                 failure_message="declined", num_subtasks=4, num_acknowledged_subtasks=1),
        latest_savepoint=cpb.CheckpointHistoryEntry(id=2, status="COMPLETED", is_savepoint=True, trigger_timestamp_ms=500,
                                                    end_timestamp_ms=700, external_path="/sp/savepoint-1")))
    stats = views.checkpoints_view(job)
    failed, savepoint = stats["latest"]["failed"], stats["latest"]["savepoint"]
    assert (failed["id"], failed["trigger_timestamp"], failed["failure_timestamp"]) == (3, 1_000, 1_500)
    assert (failed["num_subtasks"], failed["num_acknowledged_subtasks"]) == (4, 1)
    assert (savepoint["id"], savepoint["external_path"], savepoint["is_savepoint"]) == (2, "/sp/savepoint-1", True)
    [entry] = stats["history"]
    assert (entry["num_subtasks"], entry["num_acknowledged_subtasks"], entry["external_path"]) == (4, 4, "/c/chk-20")
    assert entry["processed_data"] == entry["persisted_data"] == 0
    assert stats["latest"]["completed"]["external_path"] == "/c/chk-20"
    assert views.checkpoint_details_view(job, "2")["external_path"] == "/sp/savepoint-1"
    assert views.checkpoint_details_view(job, "20")["num_acknowledged_subtasks"] == 4
    with pytest.raises(NotFound, match="Could not find checkpointing statistics for checkpoint 7"):
        views.checkpoint_details_view(job, "7")
    with pytest.raises(BadRequest, match="is a number"):
        views.checkpoint_details_view(job, "x")


def _acked_checkpoint() -> JobView:
    """A completed checkpoint whose source's two subtasks and the sink acknowledged, and a failed
    one only one source subtask acknowledged before it expired."""
    job = running_job()
    acks = [cpb.SubtaskCheckpointStats(vertex_id=SOURCE, subtask_index=1, ack_timestamp_ms=4_120, state_size=30,
                                       sync_duration_ms=2, async_duration_ms=8, start_delay_ms=5),
            cpb.SubtaskCheckpointStats(vertex_id=SOURCE, subtask_index=0, ack_timestamp_ms=4_100, state_size=20,
                                       sync_duration_ms=1, async_duration_ms=4, start_delay_ms=3),
            cpb.SubtaskCheckpointStats(vertex_id=SINK, subtask_index=0, ack_timestamp_ms=4_200, state_size=50,
                                       alignment_duration_ms=70, sync_duration_ms=3, async_duration_ms=6)]
    job.summary.checkpoints.CopyFrom(cpb.CheckpointSummary(num_completed=1, num_failed=1, last_completed_id=3, history=[
        cpb.CheckpointHistoryEntry(id=4, status="FAILED", trigger_timestamp_ms=5_000, end_timestamp_ms=5_600,
                                   num_subtasks=3, num_acknowledged_subtasks=1, subtasks=[
                                       cpb.SubtaskCheckpointStats(vertex_id=SOURCE, subtask_index=0,
                                                                  ack_timestamp_ms=5_050, state_size=20)]),
        cpb.CheckpointHistoryEntry(id=3, status="COMPLETED", trigger_timestamp_ms=4_000, end_timestamp_ms=4_250,
                                   size_bytes=100, num_subtasks=3, num_acknowledged_subtasks=3, subtasks=acks)]))
    return job


def test_a_checkpoints_vertices_have_the_sizes_their_subtasks_acknowledged() -> None:
    job = _acked_checkpoint()
    completed = views.checkpoint_details_view(job, "3")
    source, sink = completed["tasks"][SOURCE.hex()], completed["tasks"][SINK.hex()]
    assert (source["state_size"], source["checkpointed_size"], source["num_acknowledged_subtasks"]) == (50, 50, 2)
    assert (source["latest_ack_timestamp"], source["end_to_end_duration"]) == (4_120, 120)
    assert (sink["state_size"], sink["num_subtasks"], sink["latest_ack_timestamp"]) == (50, 1, 4_200)
    assert completed["latest_ack_timestamp"] == 4_200 and completed["end_to_end_duration"] == 200
    assert completed["className"] == "completed"  # Flink's type property of CheckpointStatistics
    failed = views.checkpoint_details_view(job, "4")
    assert failed["tasks"][SOURCE.hex()]["num_acknowledged_subtasks"] == 1
    unacked = failed["tasks"][SINK.hex()]  # Flink's -1 for "no acknowledgement"
    assert (unacked["latest_ack_timestamp"], unacked["end_to_end_duration"], unacked["state_size"]) == (-1, -1, 0)
    assert (failed["end_to_end_duration"], failed["failure_timestamp"]) == (600, 5_600)


def test_a_vertexs_subtasks_in_a_checkpoint() -> None:
    job = _acked_checkpoint()
    body = views.checkpoint_subtasks_view(job, "3", SOURCE)
    assert (body["id"], body["state_size"], body["num_acknowledged_subtasks"]) == (3, 50, 2)
    first, second = body["subtasks"]
    assert first == {"className": "completed", "index": 0, "status": "completed", "ack_timestamp": 4_100,
                     "end_to_end_duration": 100, "checkpointed_size": 20, "state_size": 20,
                     "checkpoint": {"sync": 1, "async": 4},
                     "alignment": {"buffered": 0, "processed": 0, "persisted": 0, "duration": 0},
                     "start_delay": 3, "unaligned_checkpoint": False, "aborted": False}
    assert second["index"] == 1 and second["state_size"] == 30
    summary = body["summary"]
    assert (summary["state_size"]["min"], summary["state_size"]["max"], summary["state_size"]["avg"]) == (20, 30, 25)
    assert summary["checkpoint_duration"]["async"]["max"] == 8 and summary["start_delay"]["p50"] == 4.0
    # the failed checkpoint: subtask 1 never acknowledged
    pending = views.checkpoint_subtasks_view(job, "4", SOURCE)["subtasks"][1]
    assert pending == {"className": "pending", "index": 1, "status": "pending_or_failed"}
    assert views.checkpoint_subtasks_view(job, "3", SINK)["summary"]["alignment"]["duration"]["max"] == 70
    with pytest.raises(NotFound):
        views.checkpoint_subtasks_view(job, "3", b"x" * 16)
    with pytest.raises(NotFound):
        views.checkpoint_subtasks_view(job, "9", SOURCE)


def test_job_details_plan_shows_each_vertex_current_parallelism_after_a_rescale() -> None:
    """The adaptive scheduler rescaled the job: the vertices and the plan follow (Flink's too)."""
    job = running_job()
    submitted = {n["id"]: n["parallelism"] for n in job.plan["nodes"]}
    del job.summary.vertices[:]
    job.summary.vertices.add(vertex_id=SOURCE, name="Source: words -> Map", parallelism=5, tasks_per_state={"RUNNING": 5})
    details = views.job_details_view(job, now_ms=3_000)
    assert details["vertices"][0]["parallelism"] == 5
    nodes = {n["id"]: n["parallelism"] for n in details["plan"]["nodes"]}
    assert nodes[SOURCE.hex()] == 5 and submitted[SOURCE.hex()] != 5
    assert nodes[SINK.hex()] == submitted[SINK.hex()]  # not in the summary: as submitted


def test_job_details_scheduler_type_says_adaptive_for_an_adaptive_job() -> None:
    assert views.job_details_view(running_job(), now_ms=3_000)["schedulerType"] == "Default"
    job = running_job()
    adaptive = views.JobView(job.summary, job.timestamps, job.plan, scheduler_type="Adaptive")
    assert views.job_details_view(adaptive, now_ms=3_000)["schedulerType"] == "Adaptive"


def test_rescale_events_list_each_rescale_with_its_time_and_old_and_new_parallelism() -> None:
    job = running_job()
    assert views.rescale_events_view(job) == {"schedulerType": "Default", "rescales": []}
    job.summary.rescales.add(timestamp_ms=2_000, old_parallelism=1, new_parallelism=2, reason="rescaling: 2 slots available")
    job.summary.rescales.add(timestamp_ms=2_500, old_parallelism=2, new_parallelism=1, reason="TaskManager tm-2 was lost")
    assert views.rescale_events_view(job)["rescales"] == [
        {"timestamp": 2_000, "from": 1, "to": 2, "reason": "rescaling: 2 slots available"},
        {"timestamp": 2_500, "from": 2, "to": 1, "reason": "TaskManager tm-2 was lost"}]
    assert "rescales" not in views.job_details_view(job, now_ms=3_000)  # Flink's JobDetailsInfo has no such field
