"""TaskExecutorCore, the TaskExecutor's decisions without I/O, from Flink's TaskExecutor rules:
slots are allocated on the registered ResourceManager's request and offered to the job's
JobMaster; a task runs only in a slot allocated to its job; its reports reach its JobMaster in
the worker's order; a lost JobMaster's tasks are cancelled and its slots freed; leaving the
JobManager leader cancels and frees everything. No sockets, threads or sleeps: time is a number."""
from __future__ import annotations

import pytest

from millstream.proto import cluster_pb2 as cpb
from millstream.proto import jobgraph_pb2 as pb
from millstream.runtime.task.worker_events import (
    CheckpointAcknowledged,
    CheckpointDeclined,
    CollectedBatch,
    Failing,
    LinesPrinted,
    MetricsReported,
    OutputCaptured,
    PartitionsServed,
    StateChanged,
)
from millstream.taskmanager.slot_table import SlotOccupiedError, SlotTableError
from millstream.taskmanager.spark.host import TaskExit
from millstream.taskmanager.task_executor_core import (
    COLLECT_REPORT_ATTEMPTS,
    AcknowledgeCheckpoint,
    CancelTask,
    CollectBudget,
    DeclineCheckpoint,
    FlushPrintedLines,
    ForgetJob,
    ForwardPrintedLines,
    KeepTaskOutput,
    OfferSlot,
    PrintLines,
    ReportCollected,
    ReportTaskState,
    SendSlotReport,
    StartTask,
    TaskAccepted,
    TaskExecutorCore,
    TaskOutputEnded,
)

JOB, OTHER_JOB = b"j" * 16, b"k" * 16
JM, OTHER_JM = "jm-a:6123", "jm-b:6123"
REG = "registration-1"
INTERVAL, TIMEOUT = 1_000, 5_000


def _core(slots: int = 2, forward: bool = True) -> TaskExecutorCore:
    core = TaskExecutorCore("tm-1", slots, forward_printed_lines=forward)
    core.registered(REG, INTERVAL, TIMEOUT, now_ms=0)
    return core


def _tdd(attempt: bytes, allocation: bytes, job: bytes = JOB) -> cpb.TaskDeploymentDescriptor:
    return cpb.TaskDeploymentDescriptor(job_id=job, execution_attempt_id=attempt, allocation_id=allocation,
                                        vertex=pb.JobVertex(name="Map", parallelism=2), subtask_index=1)


def _allocate(core: TaskExecutorCore, index: int, allocation: bytes, job: bytes = JOB, jm: str = JM) -> list:
    return core.request_slot(index, job, allocation, jm, REG, now_ms=0)


def _submit(core: TaskExecutorCore, attempt: bytes, allocation: bytes, job: bytes = JOB,
            cores: int = 8, running: int = 0, master: str = "local[8]") -> list:
    return core.submit_task(_tdd(attempt, allocation, job), cores, running, master)


def _running_task(core: TaskExecutorCore, attempt: bytes = b"attempt-1", allocation: bytes = b"alloc-1") -> None:
    _allocate(core, 0, allocation)
    core.offer_answered(allocation, accepted=True)
    assert _submit(core, attempt, allocation) == [TaskAccepted(attempt), StartTask(attempt)]
    assert core.may_start(attempt)
    core.start_done(attempt, submitted=True)


# -- slots -------------------------------------------------------------------------------------


def test_a_slot_is_offered_only_to_the_jobmaster_the_resource_manager_names_and_only_once() -> None:
    core = _core()
    assert _allocate(core, 1, b"alloc-1", jm=JM) == [OfferSlot(JOB, b"alloc-1", 1, JM)]
    assert _allocate(core, 1, b"alloc-1", jm=JM) == []  # a repeated RequestSlot offers nothing again
    # Another job's request for the same slot is refused, naming the occupant.
    with pytest.raises(SlotOccupiedError, match="already allocated"):
        _allocate(core, 1, b"alloc-2", job=OTHER_JOB, jm=OTHER_JM)


def test_a_slot_request_of_an_unknown_resource_manager_registration_is_refused() -> None:
    core = _core()
    with pytest.raises(SlotTableError, match="unknown ResourceManager registration 'stale'"):
        core.request_slot(0, JOB, b"alloc-1", JM, "stale", now_ms=0)
    assert core.slots.free_slots_count() == 2


def test_a_rejected_offer_frees_the_slot_and_an_accepted_one_activates_it() -> None:
    core = _core()
    _allocate(core, 0, b"alloc-1")
    _allocate(core, 1, b"alloc-2")
    assert core.offer_answered(b"alloc-1", accepted=True) == []
    assert core.slots.slot_of(b"alloc-1").state.value == "ACTIVE"  # type: ignore[union-attr]
    assert core.offer_answered(b"alloc-2", accepted=False) == [SendSlotReport()]
    assert core.slots.slot_of(b"alloc-2") is None and core.slots.free_slots_count() == 1


def test_freeing_a_jobs_last_slot_forgets_the_job_and_stops_watching_its_jobmaster() -> None:
    core = _core()
    _allocate(core, 0, b"alloc-1")
    _allocate(core, 1, b"alloc-2")
    assert core.free_slot(b"alloc-1", "") == [SendSlotReport()]
    assert JOB.hex() in core.heartbeats.targets()
    assert core.free_slot(b"alloc-2", "job done") == [ForgetJob(JOB), SendSlotReport()]
    assert JOB.hex() not in core.heartbeats.targets()
    assert core.free_slot(b"alloc-2", "again") == []  # freeing a free slot is a no-op


def test_an_unusable_task_manager_refuses_slots_and_tasks_naming_why() -> None:
    core = _core()
    _allocate(core, 0, b"alloc-1")
    core.unusable("Spark died: its JVM exited with code 137")
    with pytest.raises(SlotTableError, match="cannot run tasks: Spark died"):
        _allocate(core, 1, b"alloc-2")
    with pytest.raises(SlotTableError, match="cannot run tasks: Spark died"):
        _submit(core, b"attempt-1", b"alloc-1")


# -- task submission ---------------------------------------------------------------------------


def test_a_task_submitted_to_an_unallocated_slot_or_another_jobs_slot_is_refused() -> None:
    core = _core()
    with pytest.raises(SlotTableError, match="not a slot allocated to that job"):
        _submit(core, b"attempt-1", b"alloc-1")
    _allocate(core, 0, b"alloc-1", job=OTHER_JOB)
    with pytest.raises(SlotTableError, match=f"belongs to job {OTHER_JOB.hex()}"):
        _submit(core, b"attempt-1", b"alloc-1", job=JOB)
    assert core.tasks == {}


def test_an_accepted_task_activates_its_slot_and_reports_to_the_slots_jobmaster() -> None:
    core = _core()
    _allocate(core, 0, b"alloc-1", jm=OTHER_JM)
    assert _submit(core, b"attempt-1", b"alloc-1") == [TaskAccepted(b"attempt-1"), StartTask(b"attempt-1")]
    assert _submit(core, b"attempt-1", b"alloc-1") == []  # a repeated SubmitTask
    task = core.tasks[b"attempt-1"]
    assert (task.state, task.jobmaster_address, task.name) == ("DEPLOYING", OTHER_JM, "Map (2/2)")
    assert core.slots.slot_of(b"alloc-1").state.value == "ACTIVE"  # type: ignore[union-attr]


def test_a_task_without_a_free_spark_core_is_refused_counting_the_tasks_still_starting() -> None:
    core = _core(slots=3)
    for index in range(3):
        _allocate(core, index, b"alloc-%d" % index)
    _submit(core, b"attempt-0", b"alloc-0", cores=2)  # starting: holds no core yet, but will
    with pytest.raises(SlotTableError, match="runs at most 2 tasks at once"):
        _submit(core, b"attempt-1", b"alloc-1", cores=2, running=1)
    with pytest.raises(SlotTableError, match="the Spark cluster spark://m:7077 gives TaskManager tm-1 2 cores"):
        _submit(core, b"attempt-1", b"alloc-1", cores=2, running=1, master="spark://m:7077")
    core.start_done(b"attempt-0", submitted=True)  # now counted by Spark itself
    assert _submit(core, b"attempt-1", b"alloc-1", cores=2, running=1)[0] == TaskAccepted(b"attempt-1")


# -- cancellation ------------------------------------------------------------------------------


def test_a_cancel_of_an_unknown_task_is_remembered_and_the_task_never_starts() -> None:
    core = _core()
    _allocate(core, 0, b"alloc-1")
    assert core.cancel_task(b"late") == []  # not here (yet): nothing to do now
    assert _submit(core, b"late", b"alloc-1") == [TaskAccepted(b"late"), CancelTask(b"late", running=False)]
    assert not core.may_start(b"late")
    # Its end is reported CANCELED to its JobMaster, then it is gone.
    *_, report = core.worker_event(b"late", TaskExit("CANCELED"))
    assert isinstance(report, ReportTaskState) and (report.state, report.final, report.failure) == ("CANCELED", True, None)
    core.final_state_reported(b"late")
    assert core.tasks == {} and core.slots.tasks_of_job(JOB) == []


def test_a_cancel_of_a_task_that_ended_here_is_a_no_op() -> None:
    core = _core()
    _running_task(core)
    core.worker_event(b"attempt-1", TaskExit("FINISHED"))
    core.final_state_reported(b"attempt-1")
    assert core.cancel_task(b"attempt-1") == []
    _allocate(core, 1, b"alloc-2")
    # Not remembered as an early cancel: a (hypothetical) resubmission would start.
    assert _submit(core, b"attempt-1", b"alloc-2")[-1] == StartTask(b"attempt-1")


def test_cancelling_a_starting_task_ends_it_without_spark_and_a_running_one_through_spark() -> None:
    core = _core()
    _allocate(core, 0, b"alloc-1")
    _submit(core, b"starting", b"alloc-1")
    assert core.cancel_task(b"starting") == [CancelTask(b"starting", running=False)]
    assert core.cancel_task(b"starting") == []  # its CANCELED end is queued already
    assert not core.may_start(b"starting")  # the artifact fetch finishing now must not submit it
    _allocate(core, 1, b"alloc-2")
    _submit(core, b"running", b"alloc-2")
    core.start_done(b"running", submitted=True)
    assert core.runs_here(b"running") and not core.runs_here(b"starting")
    assert core.cancel_task(b"running") == [CancelTask(b"running", running=True)]


def test_a_cancelled_task_reports_no_start_only_its_end() -> None:
    """As Flink's Task: a cancel makes the task CANCELING here, so its body's INITIALIZING or
    RUNNING, sent before the cancel reached it (a slot's subtask starts on its thread whatever
    Spark is told), is not reported: the JobMaster has it CANCELING and would log an illegal move."""
    core = _core()
    _running_task(core)
    assert core.cancel_task(b"attempt-1") == [CancelTask(b"attempt-1", running=True)]
    assert core.worker_event(b"attempt-1", StateChanged("INITIALIZING")) == []
    assert core.worker_event(b"attempt-1", StateChanged("RUNNING")) == []
    *_, report = core.worker_event(b"attempt-1", TaskExit("CANCELED"))
    assert (report.state, report.final) == ("CANCELED", True)


# -- a task's events ---------------------------------------------------------------------------


def test_state_changes_metrics_and_checkpoints_are_reported_to_the_tasks_jobmaster_in_order() -> None:
    core = _core()
    _running_task(core)
    report = core.worker_event(b"attempt-1", StateChanged("INITIALIZING"))
    assert report == [ReportTaskState(b"attempt-1", JOB, JM, "INITIALIZING", None, 0, 0, {})]
    assert core.worker_event(b"attempt-1", PartitionsServed("10.0.0.5:4000")) == []
    assert core.lookup_partition(b"attempt-1") == ("READY", "10.0.0.5:4000")
    assert core.worker_event(b"attempt-1", MetricsReported(7, 5, {"numRecordsIn": 7.0}, {"Map.hits": ("hits", {})})) == []
    [running] = core.worker_event(b"attempt-1", StateChanged("RUNNING"))
    assert (running.state, running.records_in, running.records_out, running.metrics) == ("RUNNING", 7, 5, {"numRecordsIn": 7.0})
    assert core.tasks[b"attempt-1"].metric_descriptors == {"Map.hits": ("hits", {})}
    # Descriptors come only when they changed: None keeps the last ones.
    core.worker_event(b"attempt-1", MetricsReported(9, 6, {"numRecordsIn": 9.0}, None))
    assert core.tasks[b"attempt-1"].metric_descriptors == {"Map.hits": ("hits", {})}
    assert core.worker_event(b"attempt-1", CheckpointAcknowledged(3, "/chk/3/a", 120)) == [
        AcknowledgeCheckpoint(b"attempt-1", JOB, JM, 3, "/chk/3/a", 120)]
    assert core.worker_event(b"attempt-1", CheckpointDeclined(4, "CHECKPOINT_DECLINED_TASK_CLOSING", "finishing")) == [
        DeclineCheckpoint(b"attempt-1", JOB, JM, 4, "CHECKPOINT_DECLINED_TASK_CLOSING", "finishing")]
    batch = CollectedBatch("c1", 1, 0, b"records")
    assert core.worker_event(b"attempt-1", batch) == [ReportCollected(b"attempt-1", JOB, JM, batch)]
    assert core.running_tasks() == 1
    assert [t.attempt_id for t in core.heartbeat_from_job_master(JOB, now_ms=10)] == [b"attempt-1"]
    assert core.heartbeat_from_job_master(OTHER_JOB, now_ms=10) == []


def test_a_tasks_end_releases_its_partitions_flushes_its_printed_lines_and_comes_last() -> None:
    core = _core()
    _running_task(core)
    core.worker_event(b"attempt-1", PartitionsServed("10.0.0.5:4000"))
    core.worker_event(b"attempt-1", MetricsReported(10, 10, {}, None))
    commands = core.worker_event(b"attempt-1", TaskExit("FINISHED"))
    assert commands == [TaskOutputEnded(b"attempt-1"), FlushPrintedLines(JOB),
                        ReportTaskState(b"attempt-1", JOB, JM, "FINISHED", None, 10, 10, {}, final=True)]
    assert core.lookup_partition(b"attempt-1") == ("GONE", "")
    assert b"attempt-1" in core.tasks  # until its end was reported: heartbeats still show it
    core.final_state_reported(b"attempt-1")
    assert core.tasks == {} and core.lookup_partition(b"never-here") == ("PENDING", "")


def test_a_body_that_failed_before_the_cancel_reached_it_fails_with_its_own_traceback() -> None:
    core = _core()
    _running_task(core)
    trace = "Traceback (most recent call last):\n  ...\nValueError: bad record\n"
    core.worker_event(b"attempt-1", Failing(trace, caused_by_peer=True))
    *_, report = core.worker_event(b"attempt-1", TaskExit("CANCELED"))
    assert report.state == "FAILED" and report.failure is not None
    assert (report.failure.message, report.failure.traceback, report.failure.secondary) == (
        "ValueError: bad record", trace, True)
    assert report.failure.task_name == "Map (2/2)"


def test_printed_lines_go_to_stdout_and_to_the_jobmaster_unless_embedded() -> None:
    core = _core()
    _running_task(core)
    assert core.worker_event(b"attempt-1", LinesPrinted(["a", "b"], False)) == [
        PrintLines(["a", "b"], False), ForwardPrintedLines(JOB, JM, ["a", "b"])]
    assert core.worker_event(b"attempt-1", OutputCaptured(["log line"], 2)) == [
        KeepTaskOutput(b"attempt-1", ["log line"], 2, echo=True)]
    embedded = _core(forward=False)
    _running_task(embedded)
    assert embedded.worker_event(b"attempt-1", LinesPrinted(["a"], True)) == [PrintLines(["a"], True)]
    assert embedded.worker_event(b"attempt-1", OutputCaptured(["x"], 0)) == [KeepTaskOutput(b"attempt-1", ["x"], 0, echo=False)]
    assert FlushPrintedLines(JOB) not in embedded.worker_event(b"attempt-1", TaskExit("FINISHED"))


# -- collect backpressure ----------------------------------------------------------------------


def test_the_collect_budget_bounds_the_bytes_waiting_but_never_refuses_a_lone_batch() -> None:
    budget = CollectBudget(limit_bytes=10)
    assert budget.may_pass(100)  # nothing waits: a batch larger than the limit passes alone
    budget.taken(8)
    assert budget.may_pass(2) and not budget.may_pass(3)
    budget.released(8)
    assert budget.may_pass(10)
    budget.taken(10)
    assert not budget.may_pass(1)
    budget.open()  # the task is cancelled: its reader must not hold up its exit
    assert budget.may_pass(1_000)


def test_a_collected_batch_is_retried_on_transport_errors_then_fails_its_task() -> None:
    core = _core()
    _running_task(core)
    for failures in range(1, COLLECT_REPORT_ATTEMPTS):
        assert core.collect_report_failed(b"attempt-1", "UNAVAILABLE", "connection refused", failures, 300) == (True, [])
    again, commands = core.collect_report_failed(b"attempt-1", "UNAVAILABLE", "connection refused",
                                                 COLLECT_REPORT_ATTEMPTS, 300)
    assert (again, commands) == (False, [CancelTask(b"attempt-1", running=True)])
    assert core.collect_failed(b"attempt-1")
    # Its end is FAILED with the lost records as the root cause, whatever the runner said.
    *_, report = core.worker_event(b"attempt-1", TaskExit("CANCELED"))
    assert report.state == "FAILED" and "could not be delivered to the JobManager: UNAVAILABLE" in report.failure.message


def test_a_collected_batch_of_a_job_that_is_over_is_dropped_and_other_errors_fail_at_once() -> None:
    core = _core()
    _running_task(core)
    assert core.collect_report_failed(b"attempt-1", "NOT_FOUND", "no such job", 1, 10) == (False, [])
    assert not core.collect_failed(b"attempt-1")
    again, commands = core.collect_report_failed(b"attempt-1", "RESOURCE_EXHAUSTED", "too large", 1, 10)
    assert not again and commands == [CancelTask(b"attempt-1", running=True)]


# -- heartbeats and the JobManager's loss ------------------------------------------------------


def test_a_lost_jobmasters_tasks_are_cancelled_and_its_slots_freed_after_the_heartbeat_timeout() -> None:
    core = _core()
    _running_task(core)  # job JOB in slot 0
    _allocate(core, 1, b"alloc-9", job=OTHER_JOB, jm=OTHER_JM)
    core.heartbeat_from_resource_manager(REG, now_ms=TIMEOUT)
    core.heartbeat_from_job_master(OTHER_JOB, now_ms=TIMEOUT)
    assert core.check_heartbeats(now_ms=TIMEOUT) == (True, [])  # not yet: exactly the timeout
    rm_alive, commands = core.check_heartbeats(now_ms=TIMEOUT + 1)
    assert rm_alive
    assert commands == [CancelTask(b"attempt-1", running=True), ForgetJob(JOB), SendSlotReport()]
    assert core.slots.jobs() == [OTHER_JOB]  # the other job's JobMaster answered: its slot stays
    assert JOB.hex() not in core.heartbeats.targets()


def test_a_lost_resource_manager_means_registering_again_and_only_its_registration_counts() -> None:
    core = _core()
    core.heartbeat_from_resource_manager("some-old-registration", now_ms=TIMEOUT)
    rm_alive, _ = core.check_heartbeats(now_ms=TIMEOUT + 1)
    assert not rm_alive and core.heartbeats_received == 1
    # Registering again watches the ResourceManager and the JobMasters of the jobs still held.
    _allocate(core, 0, b"alloc-1")
    core.registered("registration-2", INTERVAL, TIMEOUT, now_ms=10_000)
    assert sorted(core.heartbeats.targets()) == sorted(["resourcemanager", JOB.hex()])


def test_leaving_the_leader_cancels_every_task_reports_nothing_more_and_frees_every_slot() -> None:
    core = _core()
    _running_task(core)
    _allocate(core, 1, b"alloc-2")
    core.cancel_task(b"early")  # remembered ...
    commands = core.disconnect_leader("JobManager leader changed")
    assert CancelTask(b"attempt-1", running=True) in commands and ForgetJob(JOB) in commands
    assert core.slots.free_slots_count() == 2 and core.registration_id == ""
    assert not core.reports_to_leader(b"attempt-1")
    # Its end goes nowhere: no flush of its printed lines to the old leader (the shell's report
    # sees reports_to_leader False and sends nothing).
    assert FlushPrintedLines(JOB) not in core.worker_event(b"attempt-1", TaskExit("CANCELED"))
    core.registered("registration-2", INTERVAL, TIMEOUT, now_ms=0)
    core.request_slot(0, JOB, b"alloc-3", JM, "registration-2", now_ms=0)
    # ... but forgotten with the old leader: a new leader's attempt of that id starts.
    assert core.submit_task(_tdd(b"early", b"alloc-3"), 8, 0, "local[8]")[-1] == StartTask(b"early")


def test_slot_placement_counts_slots_not_subtasks_against_the_spark_cores() -> None:
    """millstream.spark.task-placement=slot: a slot's subtasks share one Spark task, so 2 cores run
    any number of subtasks in 2 slots; a third slot with tasks has no core; a freed slot's ending
    Spark task does not count (the next job's slots take its core)."""
    core = _core(slots=3)
    for index, allocation in enumerate((b"alloc-1", b"alloc-2", b"alloc-3")):
        _allocate(core, index, allocation)
        core.offer_answered(allocation, accepted=True)

    def submit(attempt: bytes, allocation: bytes) -> list:
        return core.submit_task(_tdd(attempt, allocation), 2, 0, "local[2]", slot_placement=True)

    for n in range(4):  # four chains in each of two slots: 8 subtasks on 2 cores
        assert submit(b"a1-%d" % n, b"alloc-1")[-1] == StartTask(b"a1-%d" % n)
        assert submit(b"a2-%d" % n, b"alloc-2")[-1] == StartTask(b"a2-%d" % n)
    with pytest.raises(SlotTableError, match="Spark has 2 cores and 2 other slots hold them"):
        submit(b"a3-0", b"alloc-3")
    core.free_slot(b"alloc-1", "job finished")
    assert submit(b"a3-0", b"alloc-3")[-1] == StartTask(b"a3-0")
