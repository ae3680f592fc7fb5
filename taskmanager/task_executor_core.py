"""The TaskExecutor's core: a TaskManager's slots, tasks and heartbeats, without I/O.

Events go in (a slot request from the ResourceManager, the JobMaster's answer to a slot offer, a
task submission or cancel, a worker event, a heartbeat, the JobManager leader leaving); commands
come out (offer a slot, start or cancel a task, report a task's state or a checkpoint's ack to its
JobMaster, send a slot report...) and are carried out, in order, by the gRPC shell in
``task_executor``. No asyncio, gRPC, threads or clock reads here: the shell passes ``now_ms``.

The rules, Flink's TaskExecutor's:

- A slot is allocated only on a request of the ResourceManager this TaskManager is registered with
  (its registration id), and offered to the JobMaster the request names, the job's leader; an
  offer the JobMaster rejects, or cannot answer, frees the slot.
- A task is accepted only into a slot allocated to its job (``SlotTableError`` otherwise), only
  while Spark has a core for it (each task holds one for its life), and only while this
  TaskManager is usable. A repeated submission of an accepted task is a no-op.
- A task's state changes go to its JobMaster in the order the worker sent them, its end last; its
  final state follows the worker's report of a failure and of records that could not be delivered.
- A cancel of a task that is not here yet is remembered (the CancelTask RPC may overtake its
  SubmitTask): the task is reported CANCELED when it arrives and never starts. A cancel of a task
  that ended here is a no-op.
- A JobMaster not heard from within the heartbeat timeout is lost: its job's tasks are cancelled
  and its slots freed. Without the ResourceManager the TaskManager registers again. Leaving the
  JobManager leader cancels every task (nothing more is reported to that leader) and frees every
  slot.
"""
from __future__ import annotations

import collections
import logging
from dataclasses import dataclass, field
from typing import Union

from millstream.proto import cluster_pb2 as cpb
from millstream.runtime.heartbeat import HeartbeatMonitor
from millstream.runtime.task.worker_events import (
    CheckpointAcknowledged,
    CheckpointDeclined,
    CollectedBatch,
    Failing,
    LinesPrinted,
    MetricsReported,
    OperatorEventSent,
    OutputCaptured,
    PartitionsServed,
    StateChanged,
    WorkerEvent,
)
from millstream.taskmanager.slot_table import SlotStatus, SlotTableError, TaskSlotTable
from millstream.taskmanager.spark.host import TaskExit

log = logging.getLogger(__name__)

RESOURCE_MANAGER = "resourcemanager"  # the heartbeat target of the ResourceManager (JobMasters: job id hex)
# Collected bytes a task may have handed to this TaskManager that the JobManager has not taken yet.
COLLECT_IN_FLIGHT_BYTES = 4 << 20
COLLECT_REPORT_ATTEMPTS = 5  # transport failures in a row before a collected batch fails its task
REMEMBERED_ATTEMPTS = 10_000  # ended attempts (partition look-ups) and early cancels kept


# -- commands ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OfferSlot:
    """Offer the allocated slot to the job's JobMaster; its answer goes to ``offer_answered``."""

    job_id: bytes
    allocation_id: bytes
    slot_index: int
    jobmaster_address: str


@dataclass(frozen=True)
class SendSlotReport:
    """Tell the ResourceManager the slots changed (the next heartbeat carries them otherwise)."""


@dataclass(frozen=True)
class ForgetJob:
    """The job holds no slot here any more: drop its artifacts and printed-lines buffers."""

    job_id: bytes


@dataclass(frozen=True)
class TaskAccepted:
    """A task was accepted: give it an event queue, start forwarding its events in order, keep its output."""

    attempt_id: bytes


@dataclass(frozen=True)
class StartTask:
    """Fetch the job's artifacts and submit the task to Spark; then call ``start_done``."""

    attempt_id: bytes


@dataclass(frozen=True)
class CancelTask:
    """Let its collected batches through, then: ``running``, cancel its Spark task; else put a
    ``TaskExit("CANCELED")`` on its event queue (it never started and never will)."""

    attempt_id: bytes
    running: bool


@dataclass(frozen=True)
class TaskFailure:
    message: str  # the traceback's last line
    task_name: str
    traceback: str
    secondary: bool  # caused by a neighbour's failure (a broken exchange)


@dataclass(frozen=True)
class ReportTaskState:
    """UpdateTaskExecutionState to the task's JobMaster; ``final``: then call ``final_state_reported``."""

    attempt_id: bytes
    job_id: bytes
    jobmaster_address: str
    state: str
    failure: TaskFailure | None
    records_in: int
    records_out: int
    metrics: dict[str, float]
    final: bool = False


@dataclass(frozen=True)
class AcknowledgeCheckpoint:
    attempt_id: bytes
    job_id: bytes
    jobmaster_address: str
    checkpoint_id: int
    state_path: str
    state_size: int
    sync_ms: int = 0
    async_ms: int = 0
    alignment_ms: int = 0
    start_delay_ms: int = 0


@dataclass(frozen=True)
class ForwardOperatorEvent:
    """A source reader's event for its coordinator on the JobMaster, in order with the task's reports."""

    attempt_id: bytes
    job_id: bytes
    jobmaster_address: str
    payload: bytes


@dataclass(frozen=True)
class DeclineCheckpoint:
    attempt_id: bytes
    job_id: bytes
    jobmaster_address: str
    checkpoint_id: int
    reason: str
    message: str


@dataclass(frozen=True)
class PrintLines:
    """Write a print sink's lines to this process's stdout (or stderr)."""

    lines: list[str]
    to_stderr: bool


@dataclass(frozen=True)
class ForwardPrintedLines:
    """Send a print sink's lines to the job's JobMaster, for its clients."""

    job_id: bytes
    jobmaster_address: str
    lines: list[str]


@dataclass(frozen=True)
class FlushPrintedLines:
    """Send the job's buffered printed lines now (a task ends: its last lines before its end)."""

    job_id: bytes


@dataclass(frozen=True)
class KeepTaskOutput:
    """Keep what the attempt's user functions printed and logged; ``echo`` it to stdout too."""

    attempt_id: bytes
    lines: list[str]
    dropped: int
    echo: bool


@dataclass(frozen=True)
class TaskOutputEnded:
    attempt_id: bytes


@dataclass(frozen=True)
class ReportCollected:
    """Report a collected batch to the JobMaster until it is taken (see ``collect_report_failed``),
    then release its bytes from the task's collect budget."""

    attempt_id: bytes
    job_id: bytes
    jobmaster_address: str
    batch: CollectedBatch


Command = Union[OfferSlot, SendSlotReport, ForgetJob, TaskAccepted, StartTask, CancelTask, ReportTaskState,
                AcknowledgeCheckpoint, DeclineCheckpoint, PrintLines, ForwardPrintedLines, FlushPrintedLines,
                KeepTaskOutput, TaskOutputEnded, ReportCollected, ForwardOperatorEvent]


# -- state ---------------------------------------------------------------------------------------


@dataclass(eq=False)
class TaskRecord:
    """What the TaskExecutor knows of one accepted task attempt."""

    tdd: cpb.TaskDeploymentDescriptor
    jobmaster_address: str  # its JobMaster: where every report of the task goes
    state: str = "DEPLOYING"
    starting: bool = True  # accepted, its Spark task not submitted yet (e.g. fetching artifacts)
    running: bool = False  # its Spark task was submitted: a cancel goes to Spark
    cancelled: bool = False  # cancelled before its Spark task started: it must never start
    canceling: bool = False  # cancelled (Flink's CANCELING): a start its body reports now is not passed on
    collect_failure: str | None = None  # collected records could not be delivered: the task fails
    failing: tuple[str, bool] | None = None  # (traceback, caused by a neighbour) once the body failed
    orphaned: bool = False  # its JobManager leader is gone: nothing more is reported to it
    records_in: int = 0  # the body's running totals (Flink's numRecordsIn / numRecordsOut)
    records_out: int = 0
    metrics: dict[str, float] = field(default_factory=dict)  # the body's latest metric snapshot
    # Each user metric's Prometheus name (below the task scope) and extra labels, by identifier.
    metric_descriptors: dict[str, tuple[str, dict[str, str]]] = field(default_factory=dict)

    @property
    def attempt_id(self) -> bytes:
        return self.tdd.execution_attempt_id

    @property
    def name(self) -> str:
        return f"{self.tdd.vertex.name} ({self.tdd.subtask_index + 1}/{self.tdd.vertex.parallelism})"


class CollectBudget:
    """The collected bytes of one task waiting in this TaskManager for the JobManager, bounded.

    A batch passes when nothing waits (however large it is), or when it fits under the limit;
    once ``opened`` (the task is cancelled, the TaskManager stops) everything passes. The shell's
    gate blocks the task's control-channel reader while :meth:`may_pass` is False: the worker's
    sends block and the collect sink waits, so a full collect buffer in the JobManager
    backpressures the producing task, not this process's memory.
    """

    def __init__(self, limit_bytes: int = COLLECT_IN_FLIGHT_BYTES) -> None:
        self.limit = limit_bytes
        self.pending = 0
        self.opened = False

    def may_pass(self, size: int) -> bool:
        return self.opened or self.pending == 0 or self.pending + size <= self.limit

    def taken(self, size: int) -> None:
        self.pending += size

    def released(self, size: int) -> None:
        self.pending -= size

    def open(self) -> None:
        self.opened = True


class TaskExecutorCore:
    """The decisions of one TaskManager's TaskExecutor (see the module docstring)."""

    def __init__(self, resource_id: str, num_slots: int, forward_printed_lines: bool = True) -> None:
        """``forward_printed_lines``: print sinks' lines go to their JobMaster as well as to this
        process's stdout, and user output is echoed there (off in the embedded mode, where stdout
        is the user's console already)."""
        self.resource_id = resource_id
        self.forward_printed_lines = forward_printed_lines
        self.slots = TaskSlotTable(num_slots)
        self.tasks: dict[bytes, TaskRecord] = {}
        self.registration_id = ""
        self.heartbeats = HeartbeatMonitor[str](10_000, 50_000)
        self.heartbeats_received = 0  # heartbeat requests answered (a Prometheus metric)
        self.unusable_reason: str | None = None
        # Where each running task serves its result partitions, and the attempts that ended here.
        self.partition_servers: dict[bytes, str] = {}
        self._ended_attempts: collections.deque[bytes] = collections.deque(maxlen=REMEMBERED_ATTEMPTS)
        # Attempts cancelled before their SubmitTask arrived (the two RPCs may overtake each other).
        self._cancelled_early: collections.OrderedDict[bytes, None] = collections.OrderedDict()

    # -- registration and heartbeats -------------------------------------------------------------

    def registered(self, registration_id: str, interval_ms: int, timeout_ms: int, now_ms: int) -> None:
        """Registered with the ResourceManager: watch it and the JobMasters of the jobs held here."""
        self.registration_id = registration_id
        self.heartbeats = HeartbeatMonitor[str](interval_ms, timeout_ms)
        self.heartbeats.monitor_target(RESOURCE_MANAGER, now_ms)
        for job_id in self.slots.jobs():
            self.heartbeats.monitor_target(job_id.hex(), now_ms)

    def check_heartbeats(self, now_ms: int) -> tuple[bool, list[Command]]:
        """Acts on lost JobMasters; the bool is False when the ResourceManager is lost (the shell
        registers again)."""
        out: list[Command] = []
        rm_alive = True
        for target in self.heartbeats.timed_out(now_ms):
            if target == RESOURCE_MANAGER:
                log.warning("TaskManager %s: ResourceManager heartbeat timed out", self.resource_id)
                rm_alive = False
            else:
                self._job_master_lost(bytes.fromhex(target), "JobMaster heartbeat timed out", out)
        return rm_alive, out

    def heartbeat_from_resource_manager(self, registration_id: str, now_ms: int) -> list[SlotStatus]:
        """The ResourceManager's heartbeat (counted only from the registration it made): the slot report."""
        self.heartbeats_received += 1
        if registration_id == self.registration_id:
            self.heartbeats.record_heartbeat(RESOURCE_MANAGER, now_ms)
        return self.slots.slot_report()

    def heartbeat_from_job_master(self, job_id: bytes, now_ms: int) -> list[TaskRecord]:
        """A JobMaster's heartbeat: the job's tasks here (their states and record totals)."""
        self.heartbeats_received += 1
        self.heartbeats.record_heartbeat(job_id.hex(), now_ms)
        return [t for t in self.tasks.values() if t.tdd.job_id == job_id]

    def _job_master_lost(self, job_id: bytes, reason: str, out: list[Command]) -> None:
        log.warning("TaskManager %s: %s for job %s; freeing its slots", self.resource_id, reason, job_id.hex())
        self.heartbeats.unmonitor_target(job_id.hex())
        for allocation_id in self.slots.allocations_of_job(job_id):
            self._free_slot(allocation_id, reason, out)

    def disconnect_leader(self, reason: str) -> list[Command]:
        """The JobManager leader is gone (or another leads): every task is cancelled and reports
        nothing more (a new leader recovers the jobs from their checkpoints; an old task must not
        commit output), every slot is freed, the registration and the heartbeats are forgotten."""
        out: list[Command] = []
        self.registration_id = ""
        for task in self.tasks.values():
            task.orphaned = True
        in_slots = {t.attempt_id for job_id in self.slots.jobs() for t in self.slots.tasks_of_job(job_id)}
        for job_id in self.slots.jobs():
            for allocation_id in self.slots.allocations_of_job(job_id):
                self._free_slot(allocation_id, reason, out)  # cancels the slot's tasks
        for attempt_id in [a for a in self.tasks if a not in in_slots]:  # a task whose slot was freed already
            self._cancel(attempt_id, out)
        self._cancelled_early.clear()
        self.heartbeats = HeartbeatMonitor[str](self.heartbeats.interval_ms, self.heartbeats.timeout_ms)
        return out

    def unusable(self, reason: str) -> None:
        """From now on every slot request and task is refused with ``reason`` (e.g. Spark died)."""
        self.unusable_reason = reason

    def check_usable(self) -> None:
        """Raises SlotTableError naming why this TaskManager runs no tasks any more, if it does not."""
        if self.unusable_reason is not None:
            raise SlotTableError(f"TaskManager {self.resource_id} cannot run tasks: {self.unusable_reason}")

    # -- slots -------------------------------------------------------------------------------

    def request_slot(self, slot_index: int, job_id: bytes, allocation_id: bytes, jobmaster_address: str,
                     registration_id: str, now_ms: int) -> list[Command]:
        """The ResourceManager allocates a slot for a job: offer it to the job's JobMaster (once: a
        repeated request of the same allocation is a no-op). Raises SlotTableError to refuse."""
        self.check_usable()
        if registration_id != self.registration_id:
            raise SlotTableError(f"RequestSlot from an unknown ResourceManager registration {registration_id!r}")
        if not self.slots.allocate_slot(slot_index, job_id, allocation_id, jobmaster_address):
            return []
        self.heartbeats.monitor_target(job_id.hex(), now_ms)
        return [OfferSlot(job_id, allocation_id, slot_index, jobmaster_address)]

    def offer_answered(self, allocation_id: bytes, accepted: bool) -> list[Command]:
        """The JobMaster accepted the offer (the slot becomes active) or not (it is freed)."""
        out: list[Command] = []
        if accepted:
            self.slots.mark_active(allocation_id)
        else:
            self._free_slot(allocation_id, "offer rejected by the JobMaster", out)
        return out

    def free_slot(self, allocation_id: bytes, cause: str) -> list[Command]:
        """The JobManager frees a slot: its tasks are cancelled. Freeing a free slot is a no-op."""
        out: list[Command] = []
        self._free_slot(allocation_id, cause or "freed by the JobManager", out)
        return out

    def _free_slot(self, allocation_id: bytes, cause: str, out: list[Command]) -> None:
        slot = self.slots.slot_of(allocation_id)
        for attempt_id in self.slots.free_slot(allocation_id):
            self._cancel(attempt_id, out)
        if slot is not None:
            if not self.slots.allocations_of_job(slot.job_id):
                self.heartbeats.unmonitor_target(slot.job_id.hex())
                out.append(ForgetJob(slot.job_id))
            log.info("slot %d freed: %s", slot.slot_index, cause)
            out.append(SendSlotReport())

    # -- tasks -------------------------------------------------------------------------------

    def is_known(self, attempt_id: bytes) -> bool:
        return attempt_id in self.tasks

    def submit_task(self, tdd: cpb.TaskDeploymentDescriptor, spark_cores: int, spark_running: int,
                    spark_master: str, slot_placement: bool = False) -> list[Command]:
        """Accept a task into its job's slot, or raise SlotTableError naming why not.

        Every task holds a Spark core for its whole life: one more than Spark runs at once would
        wait for a core forever. ``spark_running``: the tasks Spark runs for this TaskManager;
        accepted tasks still fetching their artifacts hold none yet but will, so they count too
        (else a burst of submissions is accepted whole and its last tasks never start).
        ``slot_placement``: a slot's subtasks share one Spark task, so what holds cores is the
        slots: those allocated here with tasks, other than this task's (which needs no new core if
        it runs already); a freed slot's Spark task is ending and its core comes free (Spark queues
        the new one meanwhile). ``spark_running`` is then ignored."""
        if tdd.execution_attempt_id in self.tasks:
            return []  # a repeated SubmitTask
        self.check_usable()
        record = TaskRecord(tdd, "")
        local = spark_master.startswith("local")
        if slot_placement:
            busy = len({t.tdd.allocation_id for t in self.tasks.values()
                        if self.slots.slot_of(t.tdd.allocation_id) is not None} - {tdd.allocation_id})
        else:
            busy = spark_running + sum(1 for t in self.tasks.values() if t.starting and not t.cancelled)
        if busy >= spark_cores and local and slot_placement:
            raise SlotTableError(
                f"this TaskManager's Spark has {spark_cores} cores and {busy} other slots hold them "
                "(millstream.spark.task-placement=slot: a slot holds one core while it has tasks)")
        if busy >= spark_cores and local:
            raise SlotTableError(
                f"this TaskManager's Spark runs at most {spark_cores} tasks at once and all are busy; "
                "raise millstream.spark.tasks-per-slot (a slot runs one task per vertex of its slot sharing group)")
        if busy >= spark_cores:  # the JobMaster's failure names the task
            raise SlotTableError(
                f"cannot get a Spark core: the Spark cluster {spark_master} gives TaskManager "
                f"{self.resource_id} {spark_cores} cores and running tasks hold {busy} of them (each task holds a core "
                "for its whole life); give the Spark workers more cores (SPARK_WORKER_CORES may exceed the physical "
                "cores), add workers, or lower the job's parallelism")
        if not self.slots.add_task(tdd.allocation_id, tdd.job_id, tdd.execution_attempt_id, record.name):
            return []
        slot = self.slots.slot_of(tdd.allocation_id)
        assert slot is not None  # add_task found it
        record.jobmaster_address = slot.jobmaster_address
        self.tasks[record.attempt_id] = record
        out: list[Command] = [TaskAccepted(record.attempt_id)]
        if record.attempt_id in self._cancelled_early:
            del self._cancelled_early[record.attempt_id]
            log.info("task %s was cancelled before it arrived: not started", record.name)
            record.cancelled, record.starting = True, False
            out.append(CancelTask(record.attempt_id, running=False))
        else:
            out.append(StartTask(record.attempt_id))
        return out

    def may_start(self, attempt_id: bytes) -> bool:
        """Whether the task may still be submitted to Spark (it was not cancelled meanwhile)."""
        task = self.tasks.get(attempt_id)
        return task is not None and not task.cancelled

    def start_done(self, attempt_id: bytes, submitted: bool) -> None:
        """The shell's start of the task ended: ``submitted`` to Spark (cancels go there now), or not."""
        task = self.tasks.get(attempt_id)
        if task is not None:
            task.starting = False
            task.running = task.running or submitted

    def cancel_task(self, attempt_id: bytes) -> list[Command]:
        """The JobMaster cancels a task (see the module docstring for one not here)."""
        out: list[Command] = []
        self._cancel(attempt_id, out)
        return out

    def _cancel(self, attempt_id: bytes, out: list[Command]) -> None:
        task = self.tasks.get(attempt_id)
        if task is None:
            if attempt_id not in self._ended_attempts:  # not here yet: its SubmitTask may still come
                self._cancelled_early[attempt_id] = None
                while len(self._cancelled_early) > REMEMBERED_ATTEMPTS:
                    self._cancelled_early.popitem(last=False)
            return
        task.canceling = True
        if task.running:
            out.append(CancelTask(attempt_id, running=True))
        elif not task.cancelled:
            task.cancelled = True
            out.append(CancelTask(attempt_id, running=False))

    def runs_here(self, attempt_id: bytes) -> bool:
        """Whether a checkpoint control message can reach the task (its Spark task was submitted)."""
        task = self.tasks.get(attempt_id)
        return task is not None and task.running

    def reports_to_leader(self, attempt_id: bytes) -> bool:
        """Whether the task's reports still go to its JobMaster (its leader was not left)."""
        task = self.tasks.get(attempt_id)
        return task is not None and not task.orphaned

    # -- the task's events, in the worker's order ----------------------------------------------

    def worker_event(self, attempt_id: bytes, event: WorkerEvent | TaskExit) -> list[Command]:
        """One event of the task's worker (or its runner's TaskExit), in the order sent."""
        task = self.tasks.get(attempt_id)
        if task is None:
            return []
        kind = type(event)
        if kind is CollectedBatch:
            return [ReportCollected(attempt_id, task.tdd.job_id, task.jobmaster_address, event)]  # type: ignore[arg-type]
        if kind is MetricsReported:
            task.records_in, task.records_out, task.metrics = event.records_in, event.records_out, event.metrics  # type: ignore[union-attr]
            if event.descriptors is not None:  # type: ignore[union-attr]
                task.metric_descriptors = event.descriptors  # type: ignore[union-attr]
            return []
        if kind is LinesPrinted:
            out: list[Command] = [PrintLines(event.lines, event.to_stderr)]  # type: ignore[union-attr]
            if self.forward_printed_lines and not task.orphaned:
                out.append(ForwardPrintedLines(task.tdd.job_id, task.jobmaster_address, event.lines))  # type: ignore[union-attr]
            return out
        if kind is OutputCaptured:
            return [KeepTaskOutput(attempt_id, event.lines, event.dropped, echo=self.forward_printed_lines)]  # type: ignore[union-attr]
        if kind is StateChanged:
            if task.canceling:  # the body started before the cancel reached it: only its end is news
                return []
            return [self._report(task, event.state, None)]  # type: ignore[union-attr]
        if kind is PartitionsServed:
            self.partition_servers[attempt_id] = event.address  # type: ignore[union-attr]
            return []
        if kind is Failing:
            task.failing = (event.traceback, event.caused_by_peer)  # type: ignore[union-attr]
            return []
        if kind is CheckpointAcknowledged:  # in order: a task's ack reaches its JobMaster before its end
            return [AcknowledgeCheckpoint(attempt_id, task.tdd.job_id, task.jobmaster_address, event.checkpoint_id,  # type: ignore[union-attr]
                                          event.state_path, event.state_size, event.sync_ms, event.async_ms,  # type: ignore[union-attr]
                                          event.alignment_ms, event.start_delay_ms)]  # type: ignore[union-attr]
        if kind is OperatorEventSent:
            return [ForwardOperatorEvent(attempt_id, task.tdd.job_id, task.jobmaster_address, event.payload)]  # type: ignore[union-attr]
        if kind is CheckpointDeclined:
            return [DeclineCheckpoint(attempt_id, task.tdd.job_id, task.jobmaster_address, event.checkpoint_id,  # type: ignore[union-attr]
                                      event.reason, event.message)]  # type: ignore[union-attr]
        if kind is TaskExit:
            return self._ended(task, event)  # type: ignore[arg-type]
        raise TypeError(f"unknown worker event of task {task.name}: {event!r}")

    def _report(self, task: TaskRecord, state: str, failure: TaskFailure | None, final: bool = False) -> ReportTaskState:
        task.state = state
        return ReportTaskState(task.attempt_id, task.tdd.job_id, task.jobmaster_address, state, failure,
                               task.records_in, task.records_out, task.metrics, final)

    def _ended(self, task: TaskRecord, exit: TaskExit) -> list[Command]:
        if task.collect_failure is not None:  # its own root cause: results were lost
            exit = TaskExit("FAILED", task.collect_failure)
        exit, secondary = with_reported_failure(exit, task.failing)
        failure = (TaskFailure(first_line(exit.error), task.name, exit.error, secondary) if exit.error else None)
        self.partition_servers.pop(task.attempt_id, None)
        self._ended_attempts.append(task.attempt_id)
        out: list[Command] = [TaskOutputEnded(task.attempt_id)]
        if self.forward_printed_lines and not task.orphaned:  # its last lines reach the clients first
            out.append(FlushPrintedLines(task.tdd.job_id))
        out.append(self._report(task, exit.status, failure, final=True))
        return out

    def final_state_reported(self, attempt_id: bytes) -> None:
        """The task's end went to its JobMaster (or could not): it is gone from here."""
        self.tasks.pop(attempt_id, None)
        self.slots.remove_task(attempt_id)

    def collect_report_failed(self, attempt_id: bytes, code: str, details: str, failures: int,
                              size: int) -> tuple[bool, list[Command]]:
        """A report of a collected batch failed with the gRPC status ``code``, the ``failures``-th
        time in a row: (report it again, commands). NOT_FOUND or FAILED_PRECONDITION: the job is
        over, nobody reads it (dropped). UNAVAILABLE or DEADLINE_EXCEEDED: again, up to
        COLLECT_REPORT_ATTEMPTS times (its sequence number makes a repeat harmless); then, or on
        any other error, the task fails rather than lose records silently."""
        task = self.tasks.get(attempt_id)
        if task is None:
            return False, []
        if code in ("NOT_FOUND", "FAILED_PRECONDITION"):
            log.info("collected batch of %s not taken: %s %s", task.name, code, details)
            return False, []
        if failures < COLLECT_REPORT_ATTEMPTS and code in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
            return True, []
        task.collect_failure = (f"collected records of {task.name} ({size:,} bytes in one batch) could not be "
                                f"delivered to the JobManager: {code} {details}")
        log.warning("%s; cancelling the task", task.collect_failure)
        out: list[Command] = []
        self._cancel(attempt_id, out)
        return False, out

    def collect_failed(self, attempt_id: bytes) -> bool:
        """Whether the task's collected records could not be delivered (report no more of them)."""
        task = self.tasks.get(attempt_id)
        return task is None or task.collect_failure is not None

    # -- queries -----------------------------------------------------------------------------

    def lookup_partition(self, attempt_id: bytes) -> tuple[str, str]:
        """Where a producer attempt serves its partitions: ("READY", address), ("GONE", "") once it
        ended here, else ("PENDING", "") (not started yet, or not here yet)."""
        address = self.partition_servers.get(attempt_id)
        if address:
            return "READY", address
        if attempt_id in self._ended_attempts:
            return "GONE", ""
        return "PENDING", ""

    def running_tasks(self) -> int:
        return sum(1 for t in self.tasks.values() if t.state == "RUNNING")


def with_reported_failure(exit: TaskExit, failing: tuple[str, bool] | None) -> tuple[TaskExit, bool]:
    """The task's outcome given the failure its body reported while it cleaned up.

    A body that failed before any cancel reached it failed, even if the cancel (sent because of its
    own failure, say) arrived during its clean-up and turned its exit into CANCELED."""
    if failing is None or exit.status == "FINISHED":
        return exit, False
    traceback_text, secondary = failing
    if exit.status == "CANCELED" or not exit.error:
        return TaskExit("FAILED", traceback_text), secondary
    return exit, secondary


def first_line(text: str | None) -> str:
    """The line a failure is named by: a traceback's last non-blank line."""
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "task failed"
