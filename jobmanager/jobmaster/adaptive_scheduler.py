"""The adaptive scheduler's state machine (Flink's AdaptiveScheduler), without I/O.

A job under ``jobmanager.scheduler: adaptive`` does not ask for a fixed number of slots and wait
or fail: it declares what it would like (each vertex's parallelism; in reactive mode each vertex's
max parallelism) and runs with what the cluster has. The states are Flink's:

    Created -> WaitingForResources -> CreatingExecutionGraph -> Executing
    Executing -> Restarting (a failure the restart strategy allows, a rescale)
    Restarting -> CreatingExecutionGraph (enough slots) | WaitingForResources
    Executing -> StopWithSavepoint -> Finished | Executing (the savepoint failed)
    Executing | Restarting -> Failing -> Finished;  any -> Canceling -> Finished

Inputs (``resources_changed``, the two timers, ``checkpoint_completed``, ``task_failed``,
``tasks_stopped``, ``cancel``, ``stop_with_savepoint``...) return commands; the JobMasterCore carries
them out. Timers carry an epoch: a timer of an older wait is stale and ignored.

The parallelism decision (Flink's SlotSharingSlotAllocator) is :func:`decide_parallelism`: every
slot sharing group needs at least one slot, the free slots are spread over the groups (no group
beyond its largest vertex's wish), and a vertex runs at min(its wish, its group's slots). A running
job rescales up only when some vertex's parallelism grows by at least
``jobmanager.adaptive-scheduler.min-parallelism-increase``, and only after the slots were stable
for ``resource-stabilization-timeout`` (so a TaskManager starting up slot by slot, or several
joining together, cost one restart, not several).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Mapping, Sequence, Union

from millstream.runtime import config as cfg
from millstream.runtime.execution_state import JobStatus


class State(str, Enum):
    CREATED = "Created"
    WAITING_FOR_RESOURCES = "WaitingForResources"
    CREATING_EXECUTION_GRAPH = "CreatingExecutionGraph"
    EXECUTING = "Executing"
    RESTARTING = "Restarting"
    STOP_WITH_SAVEPOINT = "StopWithSavepoint"
    FAILING = "Failing"
    CANCELING = "Canceling"
    FINISHED = "Finished"


@dataclass(frozen=True)
class VertexRequirement:
    """One job vertex as the scheduler sizes it: its parallelism wish, its cap, its group."""

    vertex_id: bytes
    name: str
    desired: int
    max_parallelism: int
    slot_sharing_group: str = "default"


@dataclass(frozen=True)
class AdaptiveSettings:
    min_parallelism_increase: int = 1
    resource_stabilization_timeout_ms: int = 10_000
    resource_wait_timeout_ms: int = 300_000  # negative: wait for ever (reactive mode's default)
    reactive: bool = False

    def __post_init__(self) -> None:
        if self.min_parallelism_increase < 1:
            raise ValueError("jobmanager.adaptive-scheduler.min-parallelism-increase must be at least 1, "
                             f"got {self.min_parallelism_increase}")
        if self.resource_stabilization_timeout_ms < 0:
            raise ValueError("jobmanager.adaptive-scheduler.resource-stabilization-timeout must not be negative, "
                             f"got {self.resource_stabilization_timeout_ms} ms")


# -- commands ------------------------------------------------------------------------------------

STABILIZATION = "stabilization"
RESOURCE_WAIT = "resource-wait"


@dataclass(frozen=True)
class DeclareResources:
    """Ask the ResourceManager for this many slots (the job's wish, not its minimum)."""

    slots: int


@dataclass(frozen=True)
class StartTimer:
    """Call ``stabilization_elapsed(epoch)`` / ``resource_wait_elapsed(epoch)`` after ``delay_ms``."""

    kind: str
    delay_ms: int
    epoch: int


@dataclass(frozen=True)
class CreateExecutionGraph:
    """Build the execution graph at these parallelisms (vertex id -> parallelism) and deploy it
    into the slots the job holds, from the latest completed checkpoint if any."""

    parallelism: Mapping[bytes, int]


@dataclass(frozen=True)
class TriggerCheckpoint:
    """A rescale is due but no checkpoint completed yet: take one, then ``checkpoint_completed``."""


@dataclass(frozen=True)
class RestartTasks:
    """Cancel every task; once all stopped, call ``tasks_stopped``. ``counted``: the restart
    strategy allowed it (a failure, a lost TaskManager's too); a rescale is not one."""

    reason: str
    counted: bool


@dataclass(frozen=True)
class CancelTasks:
    reason: str


@dataclass(frozen=True)
class TriggerStopWithSavepoint:
    pass


@dataclass(frozen=True)
class JobTerminated:
    """The job reached its globally terminal status."""

    status: JobStatus
    message: str = ""


Command = Union[DeclareResources, StartTimer, CreateExecutionGraph, TriggerCheckpoint, RestartTasks, CancelTasks,
                TriggerStopWithSavepoint, JobTerminated]


# -- the parallelism decision --------------------------------------------------------------------


def desired_parallelism(vertex: VertexRequirement, reactive: bool) -> int:
    """A vertex's wish: reactive mode wants all it may use (its max parallelism)."""
    return vertex.max_parallelism if reactive else min(vertex.desired, vertex.max_parallelism)


def desired_slots(vertices: Sequence[VertexRequirement], reactive: bool) -> int:
    """Slots the job would like: per slot sharing group its largest wish."""
    groups: dict[str, int] = {}
    for v in vertices:
        groups[v.slot_sharing_group] = max(groups.get(v.slot_sharing_group, 0), desired_parallelism(v, reactive))
    return sum(groups.values())


def decide_parallelism(vertices: Sequence[VertexRequirement], slots: int, reactive: bool = False) -> dict[bytes, int] | None:
    """Each vertex's parallelism with ``slots`` free slots, or None if they are not enough to run
    the job at all (a slot sharing group would get none)."""
    if slots < 0:
        raise ValueError(f"slots must not be negative, got {slots}")
    caps: dict[str, int] = {}
    for v in vertices:
        if v.max_parallelism < 1:
            raise ValueError(f"vertex '{v.name}' has max parallelism {v.max_parallelism}; it must be at least 1")
        caps[v.slot_sharing_group] = max(caps.get(v.slot_sharing_group, 0), desired_parallelism(v, reactive))
    groups = sorted(caps)
    if slots < len(groups):
        return None
    share = dict.fromkeys(groups, 1)
    left = slots - len(groups)
    while left > 0:  # round robin over the groups that still want more, so the groups grow evenly
        grew = False
        for group in groups:
            if left and share[group] < caps[group]:
                share[group] += 1
                left -= 1
                grew = True
        if not grew:
            break
    return {v.vertex_id: min(desired_parallelism(v, reactive), share[v.slot_sharing_group]) for v in vertices}


# -- the state machine ---------------------------------------------------------------------------


@dataclass
class AdaptiveScheduler:
    vertices: Sequence[VertexRequirement]
    settings: AdaptiveSettings = field(default_factory=AdaptiveSettings)

    def __post_init__(self) -> None:
        if not self.vertices:
            raise ValueError("a job needs at least one vertex")
        self.state = State.CREATED
        self.slots = 0
        self.parallelism: dict[bytes, int] = {}  # the running (or being created) execution graph's
        self.has_checkpoint = False
        self.rescales = 0  # restarts that changed the parallelism
        self._epoch = {STABILIZATION: 0, RESOURCE_WAIT: 0}
        self._stabilizing = False  # a stabilization timer is pending
        self._rescale_pending = False  # a rescale waits for its checkpoint

    @property
    def desired_slots(self) -> int:
        return desired_slots(self.vertices, self.settings.reactive)

    def _decide(self) -> dict[bytes, int] | None:
        return decide_parallelism(self.vertices, self.slots, self.settings.reactive)

    def _timer(self, kind: str, delay_ms: int) -> StartTimer:
        self._epoch[kind] += 1
        return StartTimer(kind, delay_ms, self._epoch[kind])

    def _cancel_timer(self, kind: str) -> None:
        self._epoch[kind] += 1  # an elapsed timer of the old epoch is ignored
        if kind == STABILIZATION:
            self._stabilizing = False

    def _create(self, parallelism: dict[bytes, int]) -> list[Command]:
        self._cancel_timer(STABILIZATION)
        self._cancel_timer(RESOURCE_WAIT)
        if self.parallelism and parallelism != self.parallelism:
            self.rescales += 1
        self.parallelism = parallelism
        self.state = State.CREATING_EXECUTION_GRAPH
        return [CreateExecutionGraph(dict(parallelism))]

    def _wait_for_resources(self) -> list[Command]:
        self.state = State.WAITING_FOR_RESOURCES
        out: list[Command] = []
        if self.settings.resource_wait_timeout_ms >= 0:
            out.append(self._timer(RESOURCE_WAIT, self.settings.resource_wait_timeout_ms))
        return out + self._check_waiting()

    def _check_waiting(self) -> list[Command]:
        """WaitingForResources: go on at once with every wished slot; with enough for a start, go on
        once the slots were stable for the stabilization timeout; with too few, keep waiting."""
        decided = self._decide()
        if decided is None:
            self._cancel_timer(STABILIZATION)
            return []
        if self.slots >= self.desired_slots:
            return self._create(decided)
        if not self._stabilizing:
            self._stabilizing = True
            return [self._timer(STABILIZATION, self.settings.resource_stabilization_timeout_ms)]
        return []

    def _can_scale_up(self) -> dict[bytes, int] | None:
        decided = self._decide()
        if decided is None:
            return None
        # Flink's EnforceMinimalIncreaseRescalingController: some vertex grows by at least the minimum
        grows = any(p - self.parallelism.get(v, 0) >= self.settings.min_parallelism_increase for v, p in decided.items())
        return decided if grows else None

    # -- inputs --------------------------------------------------------------------------------

    def start(self) -> list[Command]:
        if self.state is not State.CREATED:
            return []
        return [DeclareResources(self.desired_slots)] + self._wait_for_resources()

    def resources_changed(self, slots: int) -> list[Command]:
        """The job now holds ``slots`` slots (offered, or gone with a TaskManager)."""
        if slots < 0:
            raise ValueError(f"slots must not be negative, got {slots}")
        grew = slots > self.slots
        self.slots = slots
        if self.state is State.WAITING_FOR_RESOURCES:
            if grew:  # new slots restart the stabilization window
                self._cancel_timer(STABILIZATION)
            return self._check_waiting()
        if self.state is State.EXECUTING:
            if self._can_scale_up() is None:
                self._cancel_timer(STABILIZATION)
                return []
            if grew or not self._stabilizing:
                self._stabilizing = True
                return [self._timer(STABILIZATION, self.settings.resource_stabilization_timeout_ms)]
        return []  # lost slots of running tasks arrive as task failures

    def stabilization_elapsed(self, epoch: int) -> list[Command]:
        if epoch != self._epoch[STABILIZATION] or not self._stabilizing:
            return []
        self._stabilizing = False
        if self.state is State.WAITING_FOR_RESOURCES:
            decided = self._decide()
            return self._create(decided) if decided is not None else []
        if self.state is State.EXECUTING and self._can_scale_up() is not None:
            if not self.has_checkpoint:
                self._rescale_pending = True
                return [TriggerCheckpoint()]
            return self._rescale()
        return []

    def _rescale(self) -> list[Command]:
        self._rescale_pending = False
        self.state = State.RESTARTING
        return [RestartTasks(f"rescaling: {self.slots} slots available", counted=False)]

    def resource_wait_elapsed(self, epoch: int) -> list[Command]:
        if epoch != self._epoch[RESOURCE_WAIT] or self.state is not State.WAITING_FOR_RESOURCES:
            return []
        decided = self._decide()
        if decided is not None:
            return self._create(decided)
        self.state = State.FINISHED
        return [JobTerminated(JobStatus.FAILED,
                              f"Could not acquire the minimum required resources within "
                              f"jobmanager.adaptive-scheduler.resource-wait-timeout "
                              f"({self.settings.resource_wait_timeout_ms} ms): the job holds {self.slots} "
                              f"slot(s) and needs at least one per slot sharing group.")]

    def execution_graph_created(self) -> list[Command]:
        """The graph is built and deploying: the job is Executing."""
        if self.state is State.CREATING_EXECUTION_GRAPH:
            self.state = State.EXECUTING
            return self.resources_changed(self.slots)  # slots that came meanwhile
        return []

    def checkpoint_completed(self) -> list[Command]:
        self.has_checkpoint = True
        if self.state is State.EXECUTING and self._rescale_pending:
            if self._can_scale_up() is None:  # the new slots went again meanwhile
                self._rescale_pending = False
                return []
            return self._rescale()
        return []

    def task_failed(self, restart_allowed: bool) -> list[Command]:
        """A task failed while the graph ran: ``restart_allowed`` is the restart strategy's answer,
        which every such failure asks, as Flink's Executing state does, whatever its cause: a
        task's own error, a TaskManager that went (in reactive mode too: a scale-down forced by a
        lost TaskManager is a failure; only a restart this scheduler decides, a rescale onto new
        slots, is not one) or an exchange broken by either. Failures while already restarting
        or failing are consequences of the first and are not seen here (Restarting ignores them)."""
        if self.state in (State.EXECUTING, State.STOP_WITH_SAVEPOINT, State.CREATING_EXECUTION_GRAPH):
            self._rescale_pending = False
            self._cancel_timer(STABILIZATION)
            if restart_allowed:
                self.state = State.RESTARTING
                return [RestartTasks("a task failed", counted=True)]
            self.state = State.FAILING
            return [CancelTasks("the job fails")]
        return []

    def tasks_stopped(self) -> list[Command]:
        """Every task of the current graph is terminal (after RestartTasks or CancelTasks)."""
        if self.state is State.RESTARTING:
            decided = self._decide()
            if decided is not None:  # Flink goes straight to CreatingExecutionGraph
                return self._create(decided)
            return self._wait_for_resources()
        if self.state is State.FAILING:
            self.state = State.FINISHED
            return [JobTerminated(JobStatus.FAILED)]
        if self.state is State.CANCELING:
            self.state = State.FINISHED
            return [JobTerminated(JobStatus.CANCELED)]
        return []

    def job_finished(self) -> list[Command]:
        """Every task finished (a bounded job's end, or a stop-with-savepoint's)."""
        if self.state in (State.EXECUTING, State.STOP_WITH_SAVEPOINT):
            self.state = State.FINISHED
            return [JobTerminated(JobStatus.FINISHED)]
        return []

    def cancel(self) -> list[Command]:
        if self.state in (State.CREATED, State.WAITING_FOR_RESOURCES):
            self._cancel_timer(STABILIZATION)
            self._cancel_timer(RESOURCE_WAIT)
            self.state = State.FINISHED
            return [JobTerminated(JobStatus.CANCELED)]
        if self.state in (State.CREATING_EXECUTION_GRAPH, State.EXECUTING, State.RESTARTING,
                          State.STOP_WITH_SAVEPOINT, State.FAILING):
            self._cancel_timer(STABILIZATION)
            self.state = State.CANCELING
            return [CancelTasks("cancelled by the user")]
        return []

    def stop_with_savepoint(self) -> list[Command]:
        if self.state is not State.EXECUTING:
            raise ValueError(f"stop-with-savepoint needs an executing job; it is {self.state.value}")
        self._cancel_timer(STABILIZATION)  # no rescale while stopping
        self._rescale_pending = False
        self.state = State.STOP_WITH_SAVEPOINT
        return [TriggerStopWithSavepoint()]

    def savepoint_failed(self) -> list[Command]:
        """The stop's savepoint failed: the job goes on executing (and may rescale again)."""
        if self.state is State.STOP_WITH_SAVEPOINT:
            self.state = State.EXECUTING
            return self.resources_changed(self.slots)
        return []


def adaptive_settings(config: Any) -> AdaptiveSettings | None:
    """The cluster's adaptive scheduler settings from its Configuration, or None for the default
    scheduler. ``scheduler-mode: reactive`` implies the adaptive scheduler; as in Flink its
    resource wait timeout then defaults to waiting for ever and its stabilization timeout to 0 (a
    value set explicitly still counts)."""
    reactive = config.get(cfg.SCHEDULER_MODE) == "reactive"
    if config.get(cfg.JOBMANAGER_SCHEDULER) != "adaptive" and not reactive:
        return None
    stabilization = config.get(cfg.ADAPTIVE_RESOURCE_STABILIZATION_TIMEOUT)
    wait = config.get(cfg.ADAPTIVE_RESOURCE_WAIT_TIMEOUT)
    if reactive and cfg.ADAPTIVE_RESOURCE_STABILIZATION_TIMEOUT not in config:
        stabilization = 0
    if reactive and cfg.ADAPTIVE_RESOURCE_WAIT_TIMEOUT not in config:
        wait = -1
    return AdaptiveSettings(config.get(cfg.ADAPTIVE_MIN_PARALLELISM_INCREASE), stabilization, wait, reactive)
