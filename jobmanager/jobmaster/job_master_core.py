"""The JobMaster's core: one job's scheduling and execution bookkeeping, without I/O.

Events (``start``, ``offer_slots``, ``update_task_state``, ``task_manager_lost``, ``cancel``...)
go in; commands (declare slot needs, deploy, cancel, free slots, job status changes) come out and
are carried out by the gRPC shell in ``job_master``. Every task deployment is an Execution
attempt with its own id; reports for any other attempt are stale and ignored.

Scheduling is all-at-once, as Flink schedules a streaming job: the job declares the slots it needs
(per slot sharing group, its largest parallelism), accepts offers until it has them, puts subtask
``k`` of every vertex of a group into the group's slot ``k``, and deploys every task.

Restarts (Flink's full failover, without checkpoints): a task failure or a lost TaskManager is
reported to the job's restart backoff time strategy. If it allows a restart the job goes RUNNING ->
RESTARTING, every task is cancelled and the backoff timer starts (``StartRestartTimer``, run by the
shell); once every task is terminal *and* the timer fired, every subtask gets a new attempt
(attempt number + 1, new id) and the job is RUNNING again, deployed into the slots it still holds
(slots of a lost TaskManager are gone; the ResourceManager offers replacements, within
``slot.request.timeout``). Without a completed checkpoint sources start over and state is empty;
with one (``restore_point``, kept current by the shell's checkpoint coordinator) every new attempt
resumes from its task's snapshot in it (``TaskRestore`` in its descriptor), and tasks that had
finished when it was taken end at once. If the strategy gives up the job goes FAILING -> FAILED
with the attempt's root cause and the number of restarts. The first root cause of each attempt is
kept in ``root_causes``, and, with when and where it happened, in the bounded ``exception_history``
(Flink's exception history, ``web.exception-history-size``) the REST API shows newest first.
"""
from __future__ import annotations

import logging
import os
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Mapping, Union

from millstream.jobmanager.jobmaster.deployment import (
    BuiltDeployment,
    PlannedTask,
    ProducerLocation,
    TaskDeploymentDescriptorFactory,
    VertexKey,
)
from millstream.jobmanager.checkpoint.coordinator import TaskSnapshot
from millstream.jobmanager.jobmaster import adaptive_scheduler
from millstream.jobmanager.jobmaster.adaptive_scheduler import AdaptiveScheduler, AdaptiveSettings, VertexRequirement
from millstream.jobmanager.jobmaster.adaptive_scheduler import State as AdaptiveState
from millstream.jobmanager.checkpoint.settings import JobCheckpointing
from millstream.jobmanager.jobmaster.execution_graph import ExecutionGraph, ExecutionVertex, ExecutionVertexID, pipelined_regions
from millstream.runtime.execution_state import (
    EXECUTION_STATES,
    JOB_STATES,
    ExecutionState,
    JobStatus,
)
from millstream.runtime.state_machine import IllegalStateTransition
from millstream.proto import cluster_pb2 as cpb
from millstream.proto import jobgraph_pb2 as pb
from millstream.runtime import config as cfg
from millstream.runtime.checkpoint_storage import CompletedCheckpoint
from millstream.runtime.keygroups import compute_key_group_range_for_operator_index
from millstream.runtime.restart_strategy import NoRestart, RestartStrategySpec, describe

log = logging.getLogger(__name__)


# -- commands ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeclareRequirements:
    slots: int


@dataclass(frozen=True)
class BuildDeployments:
    """Build the round's deployment descriptors off the event loop: ``build()`` only reads a
    snapshot, so it may run in a thread; its result goes back through ``deployments_built``."""

    build: Callable[[], list[BuiltDeployment]]
    num_tasks: int


@dataclass(frozen=True)
class DeployTask:
    resource_id: str
    tm_address: str
    attempt_id: bytes
    request: bytes  # a serialized SubmitTaskRequest

    @property
    def tdd(self) -> cpb.TaskDeploymentDescriptor:
        return cpb.SubmitTaskRequest.FromString(self.request).tdd


@dataclass(frozen=True)
class CancelTask:
    resource_id: str
    tm_address: str
    attempt_id: bytes


@dataclass(frozen=True)
class FreeSlot:
    resource_id: str
    tm_address: str
    allocation_id: bytes
    cause: str


@dataclass(frozen=True)
class JobStatusChanged:
    status: JobStatus
    failure: cpb.JobFailure | None = None


@dataclass(frozen=True)
class StartRestartTimer:
    """Call ``restart_backoff_elapsed(restart)`` after ``delay_ms`` (a timer, never a sleep), or
    ``region_backoff_elapsed(region, restart)`` for the restart of one pipelined region."""

    delay_ms: int
    restart: int  # the number the coming restart will have: a timer of an older one is ignored
    region: int | None = None


@dataclass(frozen=True)
class CheckpointRestored:
    """The new attempts resume from this checkpoint (the coordinator records it)."""

    checkpoint_id: int
    path: str


@dataclass(frozen=True)
class AbortPendingCheckpoints:
    """Tasks of the running job are about to be redeployed from the restore point (a region
    failover): the checkpoint in flight must not complete with its failed attempts' acks."""


@dataclass(frozen=True)
class StartAdaptiveTimer:
    """Adaptive scheduler: call ``adaptive_timer_elapsed(kind, epoch)`` after ``delay_ms``."""

    kind: str
    delay_ms: int
    epoch: int


@dataclass(frozen=True)
class TriggerRescaleCheckpoint:
    """Adaptive scheduler: a rescale waits for a completed checkpoint; take one now."""


Command = Union[DeclareRequirements, BuildDeployments, DeployTask, CancelTask, FreeSlot, JobStatusChanged,
                StartRestartTimer, CheckpointRestored, StartAdaptiveTimer, TriggerRescaleCheckpoint,
                AbortPendingCheckpoints]


def job_slot_request_timeout(graph: pb.JobGraph) -> int | None:
    """The job's own ``slot.request.timeout`` (``millstream run -D``, its Configuration), in ms;
    None: the cluster's. The Dispatcher checked the value at submission."""
    raw = graph.execution_config.configuration.get(cfg.SLOT_REQUEST_TIMEOUT.key)
    return None if raw is None else cfg.SLOT_REQUEST_TIMEOUT.parse(raw)


def task_key(vertex: ExecutionVertex) -> str:
    """A subtask's name in checkpoints: the same for all its attempts."""
    return str(vertex.id)


# -- state ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AllocatedSlot:
    """A slot a TaskManager offered to this job and the JobMaster accepted (Flink's AllocatedSlot)."""

    allocation_id: bytes
    resource_id: str
    tm_address: str
    data_address: str
    slot_index: int


@dataclass(frozen=True)
class ExceptionHistoryEntry:
    """One root cause of a failed attempt of the job: what failed, when (wall clock, ms), and on
    which TaskManager (empty for a failure of the job rather than of a task)."""

    failure: cpb.JobFailure
    timestamp_ms: int
    location: str = ""  # the TaskManager's address
    taskmanager_id: str = ""


@dataclass(eq=False)
class Execution:
    """One attempt to run one subtask."""

    vertex: ExecutionVertex
    attempt_id: bytes
    attempt_number: int
    state: ExecutionState = ExecutionState.CREATED
    slot: AllocatedSlot | None = None
    failure: cpb.JobFailure | None = None
    records_in: int = 0  # running totals reported by its TaskManager
    records_out: int = 0
    metrics: dict[str, float] = field(default_factory=dict)  # its latest metric snapshot (Flink's ids below the subtask)
    state_times: dict[str, int] = field(default_factory=dict)  # wall-clock ms it entered each state

    @property
    def name(self) -> str:
        return self.vertex.task_name_with_subtasks


@dataclass
class JobMasterCore:
    job_graph: pb.JobGraph
    artifacts: list[cpb.ArtifactRef] = field(default_factory=list)
    new_id: Callable[[], bytes] = lambda: os.urandom(16)
    restart_spec: RestartStrategySpec = field(default_factory=NoRestart)
    clock: Callable[[], int] = lambda: int(time.monotonic() * 1000)  # ms, for the strategy
    checkpointing: JobCheckpointing | None = None
    wall_clock: Callable[[], int] = lambda: int(time.time() * 1000)  # ms: the exception history, the REST API's times
    exception_history_size: int = 16  # web.exception-history-size

    def __post_init__(self) -> None:
        # The checkpoint the next deployment round resumes from (None: start empty).
        self.restore_point: CompletedCheckpoint | None = None
        self.restore_missing_tasks_empty = False  # a savepoint: tasks it has no state for start empty
        self._upstream: dict[ExecutionVertexID, frozenset[str]] = {}  # per subtask: the task keys it reads from
        self._group_producers: dict[int, frozenset[str]] = {}  # per consumed partition group: its producers' task keys
        self._old_parallelisms: dict[int, dict[str, int]] = {}  # per checkpoint: vertex hex -> its parallelism there
        self.restart_strategy = self.restart_spec.create()
        self.num_restarts = 0
        self.root_causes: list[cpb.JobFailure] = []  # the first root cause of each failed attempt
        if self.exception_history_size < 0:
            raise ValueError(f"web.exception-history-size must not be negative, got {self.exception_history_size}")
        # The same root causes with time and place, the oldest dropped beyond the bound.
        self.exception_history: deque[ExceptionHistoryEntry] = deque(maxlen=self.exception_history_size)
        self._backoff_elapsed = True
        self.graph = ExecutionGraph(self.job_graph)
        self.status = JobStatus.CREATED
        self.failure: cpb.JobFailure | None = None
        self.executions: dict[bytes, Execution] = {}
        self.current: dict[tuple[bytes, int], Execution] = {}
        self._state_counts: dict[ExecutionState, int] = {}  # of the current executions
        # Per job vertex, kept as the counts above (O(changes), never a scan of all tasks):
        # its current executions' states and the sums of their record totals [in, out].
        self._vertex_state_counts: dict[bytes, dict[ExecutionState, int]] = {v.id: {} for v in self.graph.job_vertices}
        self._vertex_records: dict[bytes, list[int]] = {v.id: [0, 0] for v in self.graph.job_vertices}
        self._deployment_started = False
        self._stopping = False  # stop-with-savepoint: the savepoint is taken, the tasks end, the job FINISHES
        for ev in self.graph.all_execution_vertices():
            self._new_attempt(ev, 0)
        self.slots: dict[bytes, AllocatedSlot] = {}
        self.required_slots = self.graph.total_required_slots()
        # Pipelined regions (Flink's region failover): a failed task restarts its region only,
        # unless the regions connect (one region: the whole job restarts, as above).
        self.regions = pipelined_regions(self.graph)
        self._region_of = {ev.id: i for i, region in enumerate(self.regions) for ev in region}
        self._restarting_regions: dict[int, tuple[int, bool]] = {}  # region -> (restart number, backoff elapsed)
        self.adaptive: AdaptiveScheduler | None = None  # jobmanager.scheduler: adaptive (enable_adaptive)
        self._adaptive_deployed = False  # the adaptive scheduler created an execution graph already
        self.rescales: list[cpb.RescaleEvent] = []  # each graph at another parallelism (the REST timeline)
        self._restart_reason = ""  # why the current graph stops: a rescale's reason or a failure's message
        # When the current graph began to stop and why, in Flink's TriggerCause terms (the rescale history).
        self._restart_started_ms = 0
        self._restart_cause = ""

    # -- the adaptive scheduler ----------------------------------------------------------------

    def enable_adaptive(self, settings: AdaptiveSettings) -> None:
        """Schedules this job with the adaptive scheduler: it runs with the slots there are (its
        JobGraph's parallelism is the wish, each vertex's max parallelism the cap) and rescales
        from its latest completed checkpoint when slots come or go."""
        if self.status is not JobStatus.CREATED:
            raise ValueError("the adaptive scheduler is chosen before the job starts")
        self.adaptive = AdaptiveScheduler(
            [VertexRequirement(v.id, v.name, v.parallelism, v.max_parallelism, v.slot_sharing_group)
             for v in self.job_graph.vertices], settings)
        self.required_slots = self.adaptive.desired_slots

    def _run_adaptive(self, commands: list[adaptive_scheduler.Command]) -> list[Command]:
        """Carries out the adaptive scheduler's commands on this core."""
        out: list[Command] = []
        for c in commands:
            if isinstance(c, adaptive_scheduler.DeclareResources):
                out.append(DeclareRequirements(c.slots))
            elif isinstance(c, adaptive_scheduler.StartTimer):
                out.append(StartAdaptiveTimer(c.kind, c.delay_ms, c.epoch))
            elif isinstance(c, adaptive_scheduler.TriggerCheckpoint):
                out.append(TriggerRescaleCheckpoint())
            elif isinstance(c, adaptive_scheduler.CreateExecutionGraph):
                out += self._create_execution_graph(c.parallelism)
            elif isinstance(c, adaptive_scheduler.RestartTasks) and self.status is JobStatus.RUNNING:
                # a rescale (a failure's restart goes through _fail_job)
                log.info("job %s: %s", self.job_id.hex(), c.reason)
                self._restart_reason = c.reason
                self._restart_started_ms, self._restart_cause = self.wall_clock(), "NEW_RESOURCE_AVAILABLE"
                self._set_job_status(JobStatus.RESTARTING, c.reason, out)
                self._backoff_elapsed = True
                self._deployment_started = False
                out += self._cancel_executions()
                out += self._check_job_done()
            elif isinstance(c, adaptive_scheduler.JobTerminated) and c.status is JobStatus.FAILED:
                out += self._fail_job(cpb.JobFailure(message=c.message), restartable=False)
                out += self._check_job_done()
        return out

    def _rescale_event(self, before: int, parallelism: Mapping[bytes, int]) -> cpb.RescaleEvent:
        """The rescale the new graph at ``parallelism`` ends: from the restart that began it to now,
        with each vertex's wish (in reactive mode its max parallelism), its least parallelism (1:
        the scheduler runs a vertex with any slot) and its parallelism before and after."""
        assert self.adaptive is not None
        reactive = self.adaptive.settings.reactive
        now = self.wall_clock()
        vertices = [cpb.VertexRescale(
            vertex_id=v.vertex_id, name=v.name, slot_sharing_group=v.slot_sharing_group,
            desired_parallelism=adaptive_scheduler.desired_parallelism(v, reactive), sufficient_parallelism=1,
            pre_rescale_parallelism=self.graph.job_vertex(v.vertex_id).parallelism,
            post_rescale_parallelism=parallelism[v.vertex_id])
            for v in self.adaptive.vertices]
        return cpb.RescaleEvent(timestamp_ms=now, old_parallelism=before, new_parallelism=max(parallelism.values()),
                                reason=self._restart_reason, rescale_id=os.urandom(16),
                                start_timestamp_ms=self._restart_started_ms or now,
                                trigger_cause=self._restart_cause or "NEW_RESOURCE_AVAILABLE", vertices=vertices)

    def _create_execution_graph(self, parallelism: Mapping[bytes, int]) -> list[Command]:
        """A new ExecutionGraph at these parallelisms, deployed into the slots the job holds, from
        the latest completed checkpoint (its key groups and operator state redistributed)."""
        out: list[Command] = []
        graph = pb.JobGraph()
        graph.CopyFrom(self.job_graph)
        for vertex in graph.vertices:
            vertex.parallelism = parallelism[vertex.id]
        old = self.current
        before = max((v.parallelism for v in self.graph.job_vertices), default=0)
        if self._adaptive_deployed and before != max(parallelism.values()):
            self.rescales.append(self._rescale_event(before, parallelism))
        self.graph = ExecutionGraph(graph)
        self.current = {}
        self._state_counts = {}
        self._vertex_state_counts = {v.id: {} for v in self.graph.job_vertices}
        self._vertex_records = {v.id: [0, 0] for v in self.graph.job_vertices}
        self._upstream, self._group_producers = {}, {}
        self.regions = pipelined_regions(self.graph)
        self._region_of = {ev.id: i for i, region in enumerate(self.regions) for ev in region}
        # the first graph's attempts are number 0; every later graph's come after the last ones
        attempt = 1 + max((e.attempt_number for e in old.values()), default=-1) if self._adaptive_deployed else 0
        self._adaptive_deployed = True
        for ev in self.graph.all_execution_vertices():
            self._new_attempt(ev, attempt)
        if self.status is not JobStatus.RUNNING:
            self._set_job_status(JobStatus.RUNNING, f"deploying at parallelism {max(parallelism.values())}", out)
        log.info("job %s: execution graph at parallelism %s", self.job_id.hex(),
                 {v.name: v.parallelism for v in self.graph.job_vertices})
        if self.restore_point is not None:
            out.append(CheckpointRestored(self.restore_point.checkpoint_id, str(self.restore_point.directory)))
        for execution in self.current.values():
            self._set_state(execution, ExecutionState.SCHEDULED, "slots assigned")
        out.append(self._plan_deployment())
        assert self.adaptive is not None
        return out + self._run_adaptive(self.adaptive.execution_graph_created())

    def adaptive_timer_elapsed(self, kind: str, epoch: int) -> list[Command]:
        if self.adaptive is None or self.status.is_terminal() or self.status is JobStatus.CANCELLING:
            return []
        # a restore point may predate this JobMaster (recovered, or the savepoint the job started from)
        self.adaptive.has_checkpoint = self.restore_point is not None
        if kind == adaptive_scheduler.STABILIZATION:
            return self._run_adaptive(self.adaptive.stabilization_elapsed(epoch))
        return self._run_adaptive(self.adaptive.resource_wait_elapsed(epoch))

    def checkpoint_completed(self) -> list[Command]:
        """A checkpoint completed (the restore point moved): a rescale waiting for it goes on."""
        if self.adaptive is None or self.status is not JobStatus.RUNNING:
            return []
        return self._run_adaptive(self.adaptive.checkpoint_completed())

    @property
    def job_id(self) -> bytes:
        return self.graph.job_id

    def _new_attempt(self, ev: ExecutionVertex, attempt_number: int) -> Execution:
        execution = Execution(ev, self.new_id(), attempt_number)
        execution.state_times[execution.state.value] = self.wall_clock()
        self.executions[execution.attempt_id] = execution
        vertex_id = ev.job_vertex.id
        replaced = self.current.get((vertex_id, ev.subtask_index))
        if replaced is not None:
            self._count_state(vertex_id, replaced.state, -1)
            records = self._vertex_records[vertex_id]
            records[0] -= replaced.records_in  # a vertex shows its current attempts' records, as Flink's UI
            records[1] -= replaced.records_out
        self.current[(vertex_id, ev.subtask_index)] = execution
        self._count_state(vertex_id, execution.state, 1)
        return execution

    def _count_state(self, vertex_id: bytes, state: ExecutionState, delta: int) -> None:
        self._state_counts[state] = self._state_counts.get(state, 0) + delta
        per_vertex = self._vertex_state_counts[vertex_id]
        per_vertex[state] = per_vertex.get(state, 0) + delta

    def current_executions(self) -> list[Execution]:
        return list(self.current.values())

    def tasks_per_state(self) -> dict[str, int]:
        return {state.value: n for state, n in self._state_counts.items() if n}

    @property
    def parallelism(self) -> int:
        """The job's largest vertex parallelism."""
        return max((v.parallelism for v in self.graph.job_vertices), default=0)

    def vertex_summaries(self) -> list[cpb.VertexSummary]:
        """Each job vertex's task states and record totals, in topological order: O(vertices)."""
        summaries = []
        for ejv in self.graph.job_vertices:
            records_in, records_out = self._vertex_records[ejv.id]
            summaries.append(
                cpb.VertexSummary(
                    vertex_id=ejv.id,
                    name=ejv.name,
                    parallelism=ejv.parallelism,
                    max_parallelism=ejv.max_parallelism,
                    slot_sharing_group=ejv.slot_sharing_group,
                    tasks_per_state={s.value: n for s, n in self._vertex_state_counts[ejv.id].items() if n},
                    records_in=records_in,
                    records_out=records_out,
                )
            )
        return summaries

    def slot_wait(self) -> tuple[int, int] | None:
        """(slots required, slots allocated) while a running job still waits for slots, else None."""
        if self.status is not JobStatus.RUNNING or self._deployment_started:
            return None
        return self.required_slots, len(self.slots)

    def update_records(self, attempt_id: bytes, records_in: int, records_out: int,
                       metrics: Mapping[str, float] | None = None) -> None:
        """A current attempt's running totals and metric snapshot (heartbeat or final report).
        Totals never go down, so a report that overtook a newer one (a heartbeat answered before the
        final update) is harmless; a snapshot with fewer records than the attempt's totals is such a
        stale one and is not kept."""
        execution = self.executions.get(attempt_id)
        if execution is None or self.current.get((execution.vertex.job_vertex.id, execution.vertex.subtask_index)) is not execution:
            return
        if metrics and records_in >= execution.records_in and records_out >= execution.records_out:
            execution.metrics = dict(metrics)
        if records_in < 0 or records_out < 0:
            log.warning("ignoring negative record totals (%d, %d) reported for %s", records_in, records_out, execution.name)
            return
        records = self._vertex_records[execution.vertex.job_vertex.id]
        if records_in > execution.records_in:
            records[0] += records_in - execution.records_in
            execution.records_in = records_in
        if records_out > execution.records_out:
            records[1] += records_out - execution.records_out
            execution.records_out = records_out

    # -- transitions ---------------------------------------------------------------------------

    def _set_job_status(self, target: JobStatus, reason: str, out: list[Command]) -> bool:
        try:  # an illegal move is a late or duplicate event: logged and ignored
            JOB_STATES.transition(self.status, target, self.job_id.hex(), reason)
        except IllegalStateTransition:
            return False
        log.info("job %s (%s): %s -> %s (%s)", self.graph.job_name, self.job_id.hex(), self.status.value, target.value, reason)
        self.status = target
        out.append(JobStatusChanged(target, self.failure if target is JobStatus.FAILED else None))
        return True

    def _set_state(self, execution: Execution, target: ExecutionState, reason: str = "") -> bool:
        try:  # an illegal move is a late or duplicate report: logged and ignored
            EXECUTION_STATES.transition(execution.state, target, execution.name, reason)
        except IllegalStateTransition:
            return False
        vertex_id = execution.vertex.job_vertex.id
        if self.current.get((vertex_id, execution.vertex.subtask_index)) is execution:
            self._count_state(vertex_id, execution.state, -1)
            self._count_state(vertex_id, target, 1)
        execution.state = target
        execution.state_times[target.value] = self.wall_clock()
        return True

    # -- events --------------------------------------------------------------------------------

    def start(self) -> list[Command]:
        out: list[Command] = []
        self._set_job_status(JobStatus.RUNNING, "scheduling started", out)
        for execution in self.current.values():
            self._set_state(execution, ExecutionState.SCHEDULED, "waiting for slots")
        if self.adaptive is not None:
            return out + self._run_adaptive(self.adaptive.start())
        out.append(DeclareRequirements(self.required_slots))
        return out

    def offer_slots(self, resource_id: str, tm_address: str, data_address: str, offers: list[cpb.SlotOffer]) -> tuple[list[bytes], list[Command]]:
        """Accepts offered slots up to the job's needs; returns (accepted allocation ids, commands)."""
        accepted: list[bytes] = []
        out: list[Command] = []
        if self.status not in (JobStatus.RUNNING, JobStatus.RESTARTING):
            return accepted, out
        for offer in offers:
            if offer.allocation_id in self.slots:
                accepted.append(offer.allocation_id)  # a retried offer
            elif len(self.slots) < self.required_slots and (not self._deployment_started or self.adaptive is not None):
                self.slots[offer.allocation_id] = AllocatedSlot(
                    offer.allocation_id, resource_id, tm_address, data_address, offer.slot_index
                )
                accepted.append(offer.allocation_id)
        if self.adaptive is not None:
            return accepted, self._run_adaptive(self.adaptive.resources_changed(len(self.slots)))
        if len(self.slots) == self.required_slots and not self._deployment_started and self.status is JobStatus.RUNNING:
            out.append(self._plan_deployment())
        return accepted, out

    def _plan_deployment(self) -> BuildDeployments:
        """Assigns slots (subtask k of every vertex of a group to the group's slot k) and returns the
        command that builds the descriptors from a snapshot; executions stay SCHEDULED until then."""
        self._deployment_started = True
        slots = sorted(self.slots.values(), key=lambda s: (s.resource_id, s.slot_index))
        groups: dict[str, list[AllocatedSlot]] = {}
        cursor = 0
        for group, count in self.graph.required_slots().items():
            groups[group] = slots[cursor : cursor + count]
            cursor += count
        tasks: list[PlannedTask] = []
        producers: dict[VertexKey, ProducerLocation] = {}
        for ejv in self.graph.job_vertices:  # topological: producers first
            for ev in ejv.task_vertices:
                execution = self.current[(ejv.id, ev.subtask_index)]
                slot = execution.slot = groups[ejv.slot_sharing_group][ev.subtask_index]
                producers[(ejv.id, ev.subtask_index)] = ProducerLocation(slot.data_address, execution.attempt_id)
                tasks.append(
                    PlannedTask(ev, execution.attempt_id, execution.attempt_number, slot.allocation_id, slot.resource_id,
                                slot.tm_address, self._task_restore(ev))
                )
        return self._build_deployments(producers, tasks)

    def _build_deployments(self, producers: dict[VertexKey, ProducerLocation], tasks: list[PlannedTask]) -> BuildDeployments:
        c = self.checkpointing
        factory = TaskDeploymentDescriptorFactory(self.graph, self.artifacts, producers,
                                                  str(c.directory) if c else "", c.mode if c else "")
        return BuildDeployments(lambda: factory.build(tasks), len(tasks))

    def _task_restore(self, ev: ExecutionVertex) -> cpb.TaskRestore | None:
        point = self.restore_point
        if point is None:
            return None
        old_parallelism = self._old_parallelism(point, ev.job_vertex.id.hex())
        if old_parallelism and old_parallelism != ev.job_vertex.parallelism:
            return self._rescaled_restore(point, ev, old_parallelism)
        key = task_key(ev)
        if key in point.finished_tasks:
            return cpb.TaskRestore(checkpoint_id=point.checkpoint_id, finished=True)
        handle = point.task_states.get(key)
        if key not in point.task_states and self.restore_missing_tasks_empty:
            return None
        if handle is None and key not in point.task_states:
            # Cannot happen for a checkpoint of this job graph: refusing beats restarting it empty.
            raise ValueError(f"checkpoint {point.checkpoint_id} has no state for task {ev.task_name_with_subtasks} ({key})")
        restore = cpb.TaskRestore(checkpoint_id=point.checkpoint_id)
        if handle is not None:
            restore.state_path, restore.state_size = handle.path, handle.size
        return restore

    def _old_parallelism(self, point: CompletedCheckpoint, vertex_hex: str) -> int:
        """How many subtasks the vertex had in the checkpoint (0: none of its tasks is in it)."""
        cache = self._old_parallelisms.get(point.checkpoint_id)
        if cache is None:
            cache = self._old_parallelisms[point.checkpoint_id] = {}
            for key in (*point.task_states, *point.finished_tasks):
                vertex, _, subtask = key.rpartition("_")
                cache[vertex] = max(cache.get(vertex, 0), int(subtask) + 1)
        return cache.get(vertex_hex, 0)

    def _rescaled_restore(self, point: CompletedCheckpoint, ev: ExecutionVertex, old_parallelism: int) -> cpb.TaskRestore:
        """Another parallelism than in the checkpoint (a savepoint resumed with a new -p): keyed
        state moves with its key groups, operator state of old subtask j goes to j mod the new
        parallelism (Flink's round-robin redistribution of list state). A source subtask is given
        every old subtask's snapshot (only its round-robin ones with their operator state): a
        sequence or generator source cuts the indices all of them left unread into new shares, so
        the subtasks a scale-up adds read too (see sources.rescaled_positions)."""
        vertex_hex, new_parallelism = ev.job_vertex.id.hex(), ev.job_vertex.parallelism
        keys = [f"{vertex_hex}_{j}" for j in range(old_parallelism)]
        restore = cpb.TaskRestore(checkpoint_id=point.checkpoint_id, is_rescaled=True)
        if all(k in point.finished_tasks for k in keys):
            restore.finished = True
            return restore
        mine = ev.key_group_range
        for j, key in enumerate(keys):
            handle = point.task_states.get(key)
            if handle is None:
                continue
            theirs = compute_key_group_range_for_operator_index(ev.job_vertex.max_parallelism, old_parallelism, j)
            takes_operator_state = j % new_parallelism == ev.subtask_index
            overlaps = theirs.start_key_group <= mine.end_key_group and mine.start_key_group <= theirs.end_key_group
            if overlaps or takes_operator_state or ev.job_vertex.proto.is_source:
                restore.rescaled.add(old_subtask_index=j, state_path=handle.path, state_size=handle.size,
                                     take_operator_state=takes_operator_state)
        return restore

    def checkpoint_tasks(self) -> list[TaskSnapshot]:
        """The current attempts as the checkpoint coordinator plans a checkpoint with them."""
        return [TaskSnapshot(e.attempt_id, task_key(e.vertex), e.state, self._upstream_of(e.vertex))
                for e in self.current.values()]

    def _upstream_of(self, ev: ExecutionVertex) -> frozenset[str]:
        """The task keys a subtask reads from: fixed by the graph, so computed once per subtask (and
        once per consumed partition group, which all-to-all consumers share)."""
        upstream = self._upstream.get(ev.id)
        if upstream is None:
            upstream = frozenset()
            for gate in ev.input_gates:
                group = self._group_producers.get(id(gate.consumed))
                if group is None:
                    group = self._group_producers[id(gate.consumed)] = frozenset(
                        task_key(p.producer) for p in gate.consumed.partitions)
                upstream = group if not upstream else upstream | group
            self._upstream[ev.id] = upstream
        return upstream

    def finished_task_keys(self) -> frozenset[str]:
        return frozenset(task_key(e.vertex) for e in self.current.values() if e.state is ExecutionState.FINISHED)

    def deployments_built(self, built: list[BuiltDeployment]) -> list[Command]:
        """Deploys the built descriptors whose executions are still waiting for them (a cancel or a
        lost TaskManager while they were being built already ended the others)."""
        out: list[Command] = []
        for deployment in built:
            execution = self.executions.get(deployment.task.attempt_id)
            if execution is None or execution.state is not ExecutionState.SCHEDULED or execution.slot is None:
                continue
            if self._set_state(execution, ExecutionState.DEPLOYING, "slot assigned"):
                task = deployment.task
                out.append(DeployTask(task.resource_id, task.tm_address, task.attempt_id, deployment.request))
        return out

    def update_task_state(self, attempt_id: bytes, state: ExecutionState, failure: cpb.JobFailure | None = None) -> list[Command]:
        execution = self.executions.get(attempt_id)
        if execution is None or self.current.get((execution.vertex.job_vertex.id, execution.vertex.subtask_index)) is not execution:
            log.info("ignoring %s from stale or unknown attempt %s", state.value, attempt_id.hex())
            return []
        out: list[Command] = []
        if execution.state is state:
            return out  # a retried report
        if execution.state is ExecutionState.CANCELING and state in (ExecutionState.INITIALIZING, ExecutionState.RUNNING):
            # The task started while its cancellation was on the way (Flink's Execution: a concurrent
            # cancel, not an illegal report); its end follows.
            log.debug("%s reported %s while being cancelled", execution.name, state.value)
            return out
        if execution.state is ExecutionState.CANCELING and state in (ExecutionState.FINISHED, ExecutionState.FAILED):
            # Finished, or failed because its peers were cancelled, while its cancellation was on the way.
            if state is ExecutionState.FAILED and failure is not None:
                self._offer_root_cause(failure, execution)  # it may have failed first, its report arriving late
            state = ExecutionState.CANCELED
        if not self._set_state(execution, state, "reported by TaskManager"):
            return out
        if state is ExecutionState.FAILED:
            execution.failure = failure or cpb.JobFailure(message="task failed", task_name=execution.name)
            if not execution.failure.task_name:
                execution.failure.task_name = execution.name
            region = self._failover_region(execution)
            if region is None:
                out += self._fail_job(execution.failure, source=execution)
            elif region not in self._restarting_regions:  # else a consequence of that region's restart
                out += self._restart_region(region, execution.failure, execution)
        out += self._check_job_done()
        out += self._check_regions()
        return out

    # -- region failover -------------------------------------------------------------------------

    def _failover_region(self, execution: Execution) -> int | None:
        """The region to restart for this task's failure, or None for a whole-job failover: one
        region only, not deployed yet, or a slot of the region gone (a lost TaskManager)."""
        if self.adaptive is not None:
            return None  # the adaptive scheduler restarts the whole job, as Flink's
        if len(self.regions) < 2 or self._stopping or self.status is not JobStatus.RUNNING or not self._deployment_started:
            return None
        region = self._region_of[execution.vertex.id]
        members = [self.current[(ev.job_vertex.id, ev.subtask_index)] for ev in self.regions[region]]
        if any(e.slot is None or e.slot.allocation_id not in self.slots for e in members):
            return None
        return region

    def _restart_region(self, region: int, failure: cpb.JobFailure, source: Execution) -> list[Command]:
        out: list[Command] = []
        self._record_root_cause(failure, source)
        if not self._restart_allowed():
            return self._fail_job(failure, restartable=False, counted=True)
        log.info("job %s: restarting region %d (%d tasks) after: %s", self.job_id.hex(), region,
                 len(self.regions[region]), failure.message)
        number = self.num_restarts + len(self._restarting_regions) + 1
        self._restarting_regions[region] = (number, False)
        for ev in self.regions[region]:
            execution = self.current[(ev.job_vertex.id, ev.subtask_index)]
            if not execution.state.is_terminal() and self._set_state(execution, ExecutionState.CANCELING, "region restarts"):
                out.append(CancelTask(execution.slot.resource_id, execution.slot.tm_address, execution.attempt_id))  # type: ignore[union-attr]
        out.append(StartRestartTimer(self.restart_strategy.backoff_ms(), number, region))
        return out

    def region_backoff_elapsed(self, region: int, restart: int) -> list[Command]:
        entry = self._restarting_regions.get(region)
        if entry is None or entry[0] != restart:
            return []
        self._restarting_regions[region] = (restart, True)
        return self._check_regions()

    def _check_regions(self) -> list[Command]:
        """Redeploys each restarting region whose tasks all stopped and whose backoff passed, into
        the slots it held, from the latest completed checkpoint."""
        out: list[Command] = []
        if self.status is not JobStatus.RUNNING:
            self._restarting_regions.clear()
            return out
        for region, (number, elapsed) in list(self._restarting_regions.items()):
            members = self.regions[region]
            old = [self.current[(ev.job_vertex.id, ev.subtask_index)] for ev in members]
            if not elapsed or not all(e.state.is_terminal() for e in old):
                continue
            del self._restarting_regions[region]
            self.num_restarts += 1
            out.append(AbortPendingCheckpoints())
            tasks: list[PlannedTask] = []
            producers: dict[VertexKey, ProducerLocation] = {}
            for ev, previous in zip(members, old):
                execution = self._new_attempt(ev, previous.attempt_number + 1)
                execution.slot = previous.slot
                self._set_state(execution, ExecutionState.SCHEDULED, "region restart")
                slot = execution.slot
                assert slot is not None
                producers[(ev.job_vertex.id, ev.subtask_index)] = ProducerLocation(slot.data_address, execution.attempt_id)
                tasks.append(PlannedTask(ev, execution.attempt_id, execution.attempt_number, slot.allocation_id,
                                         slot.resource_id, slot.tm_address, self._task_restore(ev)))
            if self.restore_point is not None:
                out.append(CheckpointRestored(self.restore_point.checkpoint_id, str(self.restore_point.directory)))
            out.append(self._build_deployments(producers, tasks))
            log.info("job %s: region %d redeployed (restart %d)", self.job_id.hex(), region, self.num_restarts)
        return out

    def deploy_failed(self, attempt_id: bytes, message: str) -> list[Command]:
        execution = self.executions.get(attempt_id)
        name = execution.name if execution else attempt_id.hex()
        return self.update_task_state(
            attempt_id, ExecutionState.FAILED, cpb.JobFailure(message=f"Could not deploy task {name}: {message}", task_name=name)
        )

    def task_manager_lost(self, resource_id: str, reason: str) -> list[Command]:
        out: list[Command] = []
        for allocation_id in [a for a, s in self.slots.items() if s.resource_id == resource_id]:
            del self.slots[allocation_id]
        lost = [e for e in self.current.values()
                if e.slot and e.slot.resource_id == resource_id and not e.state.is_terminal()]
        for execution in lost:
            execution.slot = None  # nothing to cancel or free on a lost TaskManager
        if self.adaptive is not None:
            out += self._run_adaptive(self.adaptive.resources_changed(len(self.slots)))
        for execution in lost:
            if execution.state.is_terminal():
                continue  # cancelled by the failure (or restart) of a task lost before it
            failure = cpb.JobFailure(
                message=f"TaskManager {resource_id} was lost ({reason}); task {execution.name} failed with it.",
                task_name=execution.name,
            )
            out += self.update_task_state(execution.attempt_id, ExecutionState.FAILED, failure)
        return out

    def resources_unavailable(self, message: str) -> list[Command]:
        """The slots did not come within slot.request.timeout: the job fails, restarts or not."""
        needs = self.graph.required_slots()
        if len(needs) > 1 or "default" not in needs:  # say where the slot count comes from
            groups = ", ".join(f"'{group}' {count}" for group, count in sorted(needs.items()))
            message += (f" The job's slot sharing groups do not share slots; each needs its largest "
                        f"parallelism: {groups}.")
        if self.num_restarts:
            message += f" (while restarting the job: restart {self.num_restarts})"
        return self._fail_job(cpb.JobFailure(message=message), restartable=False) + self._check_job_done()

    def global_failure(self, message: str) -> list[Command]:
        """A failure of the job rather than of a task (e.g. too many failed checkpoints): a full
        restart if the strategy allows, else FAILED."""
        return self._fail_job(cpb.JobFailure(message=message)) + self._check_job_done()

    def restart_backoff_elapsed(self, restart: int) -> list[Command]:
        """The backoff timer of restart number ``restart`` fired: restart once every task stopped."""
        if self.status is not JobStatus.RESTARTING or restart != self.num_restarts + 1:
            return []  # the job was cancelled meanwhile, or a stale timer
        self._backoff_elapsed = True
        return self._check_job_done()

    def stop(self) -> list[Command]:
        """Stop-with-savepoint's synchronous savepoint is complete: every task commits on its
        notification and ends FINISHED by itself (nothing is cancelled, so no sink's output is
        dropped), and the job FINISHES, as Flink's ``stop``. Meanwhile no region restarts alone: a
        failure now is the job's."""
        if self.status is not JobStatus.RUNNING or self._stopping:
            return []
        self._stopping = True
        if self.adaptive is not None and self.adaptive.state is AdaptiveState.EXECUTING:
            self.adaptive.stop_with_savepoint()  # no rescale while the tasks end
        log.info("job %s: stopping after its savepoint", self.job_id.hex())
        return self._check_job_done()

    def cancel(self) -> list[Command]:
        out: list[Command] = []
        if self.status.is_terminal() or self.status is JobStatus.CANCELLING:
            return out
        if not self._set_job_status(JobStatus.CANCELLING, "cancelled by the user", out):
            return out
        if self.adaptive is not None:
            self.adaptive.cancel()  # its timers are void now; the tasks are cancelled below
        out += self._cancel_executions()
        out += self._check_job_done()
        return out

    def _fail_job(self, failure: cpb.JobFailure, restartable: bool = True, counted: bool = False,
                  source: Execution | None = None) -> list[Command]:
        """``counted``: the failure was already recorded (and told to the restart strategy);
        ``source``: the failed task's attempt (None: a failure of the job)."""
        out: list[Command] = []
        if self.status in (JobStatus.RUNNING, JobStatus.CREATED):
            self.failure = failure  # the first failure is the root cause ...
            if not counted:
                self._record_root_cause(failure, source)
            self._restarting_regions.clear()  # a whole-job restart or failure covers them
            self._stopping = False  # a failure while stopping: the stop failed, the job restarts or fails
            if self.adaptive is not None:
                # Every failure of the running graph asks the restart strategy, as in Flink's
                # adaptive scheduler: a lost TaskManager's and a broken exchange's too, in reactive
                # mode as well (else a job whose exchanges keep breaking restarts for ever); only
                # the scheduler's own rescales are free (see _run_adaptive). The strategy's backoff
                # applies; its limit fails the job.
                self._restart_reason = failure.message
                self._restart_started_ms, self._restart_cause = self.wall_clock(), "RECOVERABLE_FAILOVER"
                allowed = restartable and self.status is JobStatus.RUNNING and self._restart_allowed()
                decision = self.adaptive.task_failed(allowed)
                restartable = allowed and any(isinstance(c, adaptive_scheduler.RestartTasks) for c in decision)
            if restartable and self.status is JobStatus.RUNNING and (self.adaptive is not None or self._restart_allowed()):
                self._set_job_status(JobStatus.RESTARTING, failure.message, out)
                self._backoff_elapsed = False
                self._deployment_started = False  # the next attempt is planned anew
                out += self._cancel_executions()
                out.append(StartRestartTimer(self.restart_strategy.backoff_ms(), self.num_restarts + 1))
            else:
                self._set_job_status(JobStatus.FAILING, failure.message, out)
                out += self._cancel_executions()
        else:
            self._offer_root_cause(failure, source)
        return out

    def _restart_allowed(self) -> bool:
        self.restart_strategy.notify_failure(self.clock())
        return self.restart_strategy.can_restart()

    def _restart(self, out: list[Command]) -> None:
        """Every task stopped and the backoff passed: new attempts of every subtask, RUNNING again."""
        self.num_restarts += 1
        if self.adaptive is not None:  # the adaptive scheduler sizes the new graph to the slots held
            self._deployment_started = False
            out += self._run_adaptive(self.adaptive.tasks_stopped())
            if self.adaptive.state is AdaptiveState.WAITING_FOR_RESOURCES:
                self._set_job_status(JobStatus.RUNNING, "waiting for resources", out)
            return
        for ejv in self.graph.job_vertices:
            for ev in ejv.task_vertices:
                previous = self.current[(ejv.id, ev.subtask_index)]
                self._new_attempt(ev, previous.attempt_number + 1)
        self._set_job_status(JobStatus.RUNNING, f"restart {self.num_restarts}", out)
        if self.restore_point is not None:
            out.append(CheckpointRestored(self.restore_point.checkpoint_id, str(self.restore_point.directory)))
        for execution in self.current.values():
            self._set_state(execution, ExecutionState.SCHEDULED, "waiting for slots")
        if len(self.slots) == self.required_slots:
            out.append(self._plan_deployment())
        else:  # a lost TaskManager's slots: the ResourceManager offers others (slot.request.timeout)
            out.append(DeclareRequirements(self.required_slots))

    def _final_failure(self) -> cpb.JobFailure | None:
        if self.failure is None or not self.num_restarts:
            return self.failure
        final = cpb.JobFailure()
        final.CopyFrom(self.failure)
        final.message += (f"\n(the restart strategy {describe(self.restart_spec)} gave up; "
                          f"restarts: {self.num_restarts})")
        return final

    def _history_entry(self, failure: cpb.JobFailure, source: Execution | None) -> ExceptionHistoryEntry:
        slot = source.slot if source is not None else None
        return ExceptionHistoryEntry(failure, self.wall_clock(), slot.tm_address if slot else "",
                                     slot.resource_id if slot else "")

    def _record_root_cause(self, failure: cpb.JobFailure, source: Execution | None) -> None:
        self.root_causes.append(failure)
        self.exception_history.append(self._history_entry(failure, source))

    def _offer_root_cause(self, failure: cpb.JobFailure, source: Execution | None = None) -> None:
        """... unless it was secondary (a task whose exchange broke because a neighbour failed) and
        the neighbour's own failure, or its TaskManager's loss, arrives while the job is failing."""
        if (self.status in (JobStatus.FAILING, JobStatus.RESTARTING) and self.failure is not None
                and self.failure.secondary and not failure.secondary):
            log.info("job %s: root cause %r replaces the secondary failure %r", self.job_id.hex(), failure.message, self.failure.message)
            self.failure = failure
            if self.root_causes:
                self.root_causes[-1] = failure
            if self.exception_history:
                self.exception_history[-1] = self._history_entry(failure, source)

    def _cancel_executions(self) -> list[Command]:
        out: list[Command] = []
        for execution in self.current.values():
            if execution.state.is_terminal():
                continue
            if execution.state in (ExecutionState.CREATED, ExecutionState.SCHEDULED) or execution.slot is None:
                self._set_state(execution, ExecutionState.CANCELED, "job is stopping before deployment")
            elif self._set_state(execution, ExecutionState.CANCELING, "job is stopping"):
                out.append(CancelTask(execution.slot.resource_id, execution.slot.tm_address, execution.attempt_id))
        return out

    def _check_job_done(self) -> list[Command]:
        out: list[Command] = []
        counts = self._state_counts
        finished = counts.get(ExecutionState.FINISHED, 0)
        if finished + counts.get(ExecutionState.CANCELED, 0) + counts.get(ExecutionState.FAILED, 0) < len(self.current):
            return out
        if self.status is JobStatus.RUNNING and finished == len(self.current):
            if self.adaptive is not None:
                self.adaptive.job_finished()
            self._set_job_status(JobStatus.FINISHED, "all tasks finished", out)
        elif self.status is JobStatus.RUNNING and self._stopping:
            self._set_job_status(JobStatus.FINISHED, "stopped with a savepoint", out)
        elif self.status is JobStatus.FAILING:
            self.failure = self._final_failure()
            self._set_job_status(JobStatus.FAILED, "all tasks stopped after a failure", out)
        elif self.status is JobStatus.RESTARTING:
            if self._backoff_elapsed:
                self._restart(out)
            return out
        elif self.status is JobStatus.CANCELLING:
            self._set_job_status(JobStatus.CANCELED, "all tasks cancelled", out)
        if self.status.is_terminal():
            out += self._release_slots()
        return out

    def _release_slots(self) -> list[Command]:
        out: list[Command] = [
            FreeSlot(s.resource_id, s.tm_address, s.allocation_id, f"job {self.status.value.lower()}")
            for s in self.slots.values()
        ]
        self.slots.clear()
        out.append(DeclareRequirements(0))
        return out
