"""The ResourceManager's slot ledger and matcher (Flink's DeclarativeSlotManager, simplified).

Pure core: events in, commands out, no I/O. Time is the caller's `now` in milliseconds. The shell
(the ResourceManager's gRPC servicer) runs the commands: `AllocateSlot` becomes a `RequestSlot`
RPC to the TaskManager (success → `allocation_confirmed`, failure → `allocation_failed`),
`FreeSlots` becomes `FreeSlot` RPCs, `RequirementsTimedOut` fails the job at its JobMaster.

Jobs declare how many slots they need in total; the manager keeps allocating free slots until each
job holds that many (pending or allocated), serving jobs in declaration order and slots by
TaskManager registration order, then slot index. Slot reports from the TaskManagers are the source
of truth, with Flink's one exception: a slot reported free while an allocation to it is in flight
(PENDING) stays pending, because the report may predate the `RequestSlot` RPC.

Slot states: FREE -> PENDING (RequestSlot sent) -> ALLOCATED (confirmed or reported);
PENDING -> FREE (allocation failed); ALLOCATED -> FREE (freed or reported free); FREE -> ALLOCATED
(reported allocated, e.g. after a ResourceManager restart). A TaskManager's slots leave the ledger
with it; its jobs are then re-served from other free slots.
"""
from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum

from millstream.runtime.state_machine import StateMachine

log = logging.getLogger(__name__)

# One slot report entry, as the TaskManager's TaskSlotTable.slot_report() gives it:
# (slot_index, allocation_id or None when free, job_id or None when free).
SlotReportEntry = tuple[int, bytes | None, bytes | None]
SlotReport = Sequence[SlotReportEntry]


class SlotState(str, Enum):
    FREE = "FREE"
    PENDING = "PENDING"      # RequestSlot sent, not yet confirmed by the TaskManager
    ALLOCATED = "ALLOCATED"  # the TaskManager holds the slot for the job


_TRANSITIONS: dict[SlotState, frozenset[SlotState]] = {
    SlotState.FREE: frozenset({SlotState.PENDING, SlotState.ALLOCATED}),
    SlotState.PENDING: frozenset({SlotState.FREE, SlotState.ALLOCATED}),
    SlotState.ALLOCATED: frozenset({SlotState.FREE}),
}
# An illegal move is a bug in the manager, never input: the error propagates.
SLOT_STATES = StateMachine("slot", _TRANSITIONS, log)


# ---- commands ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class AllocateSlot:
    """Ask a TaskManager to allocate one of its slots for a job and offer it to the JobMaster."""

    resource_id: str
    tm_address: str
    registration_id: str
    slot_index: int
    job_id: bytes
    allocation_id: bytes
    jobmaster_address: str


@dataclass(frozen=True)
class FreeSlots:
    """Tell a TaskManager to free these allocations (their job ended)."""

    resource_id: str
    tm_address: str
    allocation_ids: tuple[bytes, ...]
    job_id: bytes
    cause: str


@dataclass(frozen=True)
class RequirementsTimedOut:
    """A job's slot needs stayed unmet past `slot.request.timeout`: fail it with this message."""

    job_id: bytes
    message: str


Command = AllocateSlot | FreeSlots | RequirementsTimedOut


# ---- query results ----------------------------------------------------------------------------
@dataclass(frozen=True)
class TaskManagerSlotInformation:
    """One slot as the ResourceManager's ledger sees it (Flink's TaskManagerSlotInformation)."""

    resource_id: str
    slot_index: int
    state: SlotState
    job_id: bytes | None
    allocation_id: bytes | None


@dataclass(frozen=True)
class TaskManagerInfo:
    resource_id: str
    address: str
    data_address: str
    registration_id: str
    num_slots: int
    free_slots: int
    registered_at_ms: int
    slots: tuple[TaskManagerSlotInformation, ...]


@dataclass(frozen=True)
class ClusterOverview:
    task_managers: int
    total_slots: int
    free_slots: int


@dataclass(frozen=True)
class PendingJob:
    """A job still waiting for free slots: it holds `acquired` of the `required` slots."""

    job_id: bytes
    required_slots: int
    acquired_slots: int
    unmet_since_ms: int | None


# ---- internal ledger --------------------------------------------------------------------------
@dataclass(eq=False)
class _Slot:
    index: int
    state: SlotState = SlotState.FREE
    job_id: bytes | None = None
    allocation_id: bytes | None = None

    def move(self, to: SlotState, reason: str, job_id: bytes | None = None,
             allocation_id: bytes | None = None) -> None:
        self.state = SLOT_STATES.transition(self.state, to, str(self.index), reason)
        if to is SlotState.FREE:
            self.job_id, self.allocation_id = None, None
        elif job_id is not None:
            self.job_id, self.allocation_id = job_id, allocation_id


@dataclass(eq=False)
class _TaskManager:
    resource_id: str
    address: str
    data_address: str
    registration_id: str
    registered_at_ms: int
    slots: list[_Slot] = field(default_factory=list)


@dataclass(eq=False)
class _Requirement:
    job_id: bytes
    jobmaster_address: str
    required: int
    unmet_since_ms: int | None  # timeout clock: runs while fewer slots are ALLOCATED than needed
    timeout_ms: int  # the job's slot.request.timeout (its own configuration's, else the cluster's)


def _random_id() -> bytes:
    return secrets.token_bytes(16)


class SlotManager:
    """Keeps the cluster's slot ledger and matches jobs' declared slot needs to free slots."""

    def __init__(self, slot_request_timeout_ms: int,
                 id_factory: Callable[[], bytes] = _random_id) -> None:
        if slot_request_timeout_ms <= 0:
            raise ValueError(f"slot_request_timeout_ms must be > 0, got {slot_request_timeout_ms}")
        self._timeout_ms = slot_request_timeout_ms
        self._new_id = id_factory
        self._tms: dict[str, _TaskManager] = {}  # insertion order = registration order
        self._requirements: dict[bytes, _Requirement] = {}  # insertion order = serving order

    # ---- TaskManager events -------------------------------------------------------------------
    def register_task_manager(self, resource_id: str, address: str, data_address: str,
                              num_slots: int, slot_report: SlotReport,
                              now: int) -> tuple[str, list[Command]]:
        """Add a TaskManager (replacing an earlier registration of the same resource id)."""
        if num_slots < 1:
            raise ValueError(f"TaskManager {resource_id} registers {num_slots} slots; needs >= 1")
        if self._tms.pop(resource_id, None) is not None:
            log.info("TaskManager %s re-registered; its old registration is dropped", resource_id)
        tm = _TaskManager(resource_id, address, data_address, self._new_id().hex(), now,
                          [_Slot(i) for i in range(num_slots)])
        self._tms[resource_id] = tm
        self._apply_report(tm, slot_report)
        log.info("TaskManager %s registered at %s with %d slots", resource_id, address, num_slots)
        return tm.registration_id, self._check_requirements(now)

    def unregister_task_manager(self, resource_id: str, reason: str, now: int) -> list[Command]:
        """Drop a lost or stopped TaskManager; jobs that held its slots are re-served."""
        if self._tms.pop(resource_id, None) is None:
            return []
        log.info("TaskManager %s unregistered: %s", resource_id, reason)
        return self._check_requirements(now)

    def report_slots(self, resource_id: str, registration_id: str, slot_report: SlotReport,
                     now: int) -> list[Command]:
        """Reconcile the ledger with a TaskManager's slot report; stale registrations ignored."""
        tm = self._tms.get(resource_id)
        if tm is None or tm.registration_id != registration_id:
            log.info("ignoring slot report from %s with stale registration %s",
                     resource_id, registration_id)
            return []
        self._apply_report(tm, slot_report)
        return self._check_requirements(now)

    def slot_freed(self, resource_id: str, slot_index: int, allocation_id: bytes,
                   now: int) -> list[Command]:
        """A TaskManager freed a slot; ignored unless the slot still holds that allocation."""
        tm = self._tms.get(resource_id)
        if tm is None or not 0 <= slot_index < len(tm.slots):
            return []
        slot = tm.slots[slot_index]
        if slot.state is SlotState.FREE or slot.allocation_id != allocation_id:
            return []
        slot.move(SlotState.FREE, f"freed on {resource_id}")
        return self._check_requirements(now)

    # ---- allocation outcomes ------------------------------------------------------------------
    def allocation_confirmed(self, allocation_id: bytes, now: int) -> list[Command]:
        """The TaskManager accepted the RequestSlot: PENDING -> ALLOCATED."""
        found = self._find(allocation_id)
        if found is not None and found[1].state is SlotState.PENDING:
            found[1].move(SlotState.ALLOCATED, "allocation confirmed")
            self._refresh_clocks(now)
        return []

    def allocation_failed(self, allocation_id: bytes, reason: str, now: int) -> list[Command]:
        """The TaskManager rejected the allocation or could not be reached: free it, re-match."""
        found = self._find(allocation_id)
        if found is None:  # unknown, already freed, or its TaskManager is gone (re-served then)
            return []
        tm, slot = found
        slot.move(SlotState.FREE,
                  f"allocation {allocation_id.hex()} on {tm.resource_id} failed: {reason}")
        return self._check_requirements(now)

    # ---- job events ---------------------------------------------------------------------------
    def declare_requirements(self, job_id: bytes, jobmaster_address: str, required_slots: int,
                             now: int, timeout_ms: int | None = None) -> list[Command]:
        """Declare the total number of slots a job needs (0 clears its requirements);
        ``timeout_ms``: the job's own slot request timeout (None: the cluster's)."""
        if required_slots < 0:
            raise ValueError(f"required_slots must be >= 0, got {required_slots}")
        if timeout_ms is not None and timeout_ms <= 0:
            raise ValueError(f"timeout_ms must be > 0, got {timeout_ms}")
        old = self._requirements.get(job_id)
        if required_slots == 0:
            self._requirements.pop(job_id, None)
            return []
        if old is None:
            self._requirements[job_id] = _Requirement(job_id, jobmaster_address, required_slots,
                                                      unmet_since_ms=now, timeout_ms=timeout_ms or self._timeout_ms)
        else:
            if required_slots > old.required:  # raising the needs restarts the timeout clock
                old.unmet_since_ms = now
            old.required, old.jobmaster_address = required_slots, jobmaster_address
        return self._check_requirements(now)

    def job_finished(self, job_id: bytes, now: int) -> list[Command]:
        """Clear a job's requirements and ask its TaskManagers to free its slots.

        The slots stay in the ledger until the TaskManager reports them free (`slot_freed` or a
        slot report), exactly as in Flink: the TaskManager is the source of truth.
        """
        self._requirements.pop(job_id, None)
        by_tm: dict[str, list[bytes]] = {}
        for tm, s in self._slots():
            if s.job_id == job_id and s.allocation_id is not None:
                by_tm.setdefault(tm.resource_id, []).append(s.allocation_id)
        return [FreeSlots(rid, self._tms[rid].address, tuple(ids), job_id, "job finished")
                for rid, ids in by_tm.items()]

    def check_timeouts(self, now: int) -> list[Command]:
        """Fail (once) every job whose needs stayed unmet longer than the slot request timeout."""
        commands: list[Command] = []
        for req in list(self._requirements.values()):
            if req.unmet_since_ms is not None and now - req.unmet_since_ms > req.timeout_ms:
                del self._requirements[req.job_id]
                message = self._timeout_message(req)
                log.warning("job %s: %s", req.job_id.hex(), message)
                commands.append(RequirementsTimedOut(req.job_id, message))
        return commands

    # ---- queries ------------------------------------------------------------------------------
    def requirements_deadline(self, job_id: bytes) -> int | None:
        """When (on the ``now`` clock) the job fails for lack of slots, while its needs are unmet."""
        req = self._requirements.get(job_id)
        if req is None or req.unmet_since_ms is None:
            return None
        return req.unmet_since_ms + req.timeout_ms

    def overview(self) -> ClusterOverview:
        slots = [s for _, s in self._slots()]
        free = sum(1 for s in slots if s.state is SlotState.FREE)
        return ClusterOverview(len(self._tms), len(slots), free)

    def slots_of_job(self, job_id: bytes) -> list[TaskManagerSlotInformation]:
        return [_info(tm, s) for tm, s in self._slots() if s.job_id == job_id]

    def task_manager(self, resource_id: str) -> TaskManagerInfo | None:
        tm = self._tms.get(resource_id)
        if tm is None:
            return None
        free = sum(1 for s in tm.slots if s.state is SlotState.FREE)
        return TaskManagerInfo(tm.resource_id, tm.address, tm.data_address, tm.registration_id,
                               len(tm.slots), free, tm.registered_at_ms,
                               tuple(_info(tm, s) for s in tm.slots))

    def task_managers(self) -> list[TaskManagerInfo]:
        """Every registered TaskManager, in registration order."""
        return [info for rid in self._tms if (info := self.task_manager(rid)) is not None]

    def pending_jobs(self) -> list[PendingJob]:
        """Jobs still waiting for free slots, in the order they are served."""
        result = []
        for req in self._requirements.values():
            acquired = self._acquired(req.job_id)
            if acquired < req.required:
                result.append(PendingJob(req.job_id, req.required, acquired, req.unmet_since_ms))
        return result

    # ---- internals ----------------------------------------------------------------------------
    def _apply_report(self, tm: _TaskManager, report: SlotReport) -> None:
        for index, allocation_id, job_id in report:
            if not 0 <= index < len(tm.slots):
                log.warning("TaskManager %s reports unknown slot %d", tm.resource_id, index)
                continue
            slot = tm.slots[index]
            if allocation_id is None or job_id is None:
                if slot.state is SlotState.ALLOCATED:
                    slot.move(SlotState.FREE, "reported free")
                # PENDING stays: the report may predate our RequestSlot
            elif slot.allocation_id != allocation_id:
                if slot.state is not SlotState.FREE:
                    slot.move(SlotState.FREE, f"reported holding allocation {allocation_id.hex()}")
                slot.move(SlotState.ALLOCATED, "reported allocated", job_id, allocation_id)
            elif slot.state is SlotState.PENDING:
                slot.move(SlotState.ALLOCATED, "allocation reported")

    def _check_requirements(self, now: int) -> list[Command]:
        """Allocate free slots to jobs that hold fewer than they need, in declaration order."""
        commands: list[Command] = []
        free = ((tm, s) for tm, s in self._slots() if s.state is SlotState.FREE)
        for req in self._requirements.values():
            for _ in range(req.required - self._acquired(req.job_id)):
                nxt = next(free, None)
                if nxt is None:
                    break
                tm, slot = nxt
                allocation_id = self._new_id()
                slot.move(SlotState.PENDING, f"allocating to job {req.job_id.hex()}",
                          req.job_id, allocation_id)
                commands.append(AllocateSlot(tm.resource_id, tm.address, tm.registration_id,
                                             slot.index, req.job_id, allocation_id,
                                             req.jobmaster_address))
        self._refresh_clocks(now)
        return commands

    def _refresh_clocks(self, now: int) -> None:
        for req in self._requirements.values():
            if self._acquired(req.job_id, SlotState.ALLOCATED) >= req.required:
                req.unmet_since_ms = None
            elif req.unmet_since_ms is None:
                req.unmet_since_ms = now

    def _slots(self) -> Iterator[tuple[_TaskManager, _Slot]]:
        """Every slot in matching order: TaskManager registration order, then slot index."""
        return ((tm, slot) for tm in self._tms.values() for slot in tm.slots)

    def _acquired(self, job_id: bytes, state: SlotState | None = None) -> int:
        return sum(1 for _, s in self._slots()
                   if s.job_id == job_id and (state is None or s.state is state))

    def _find(self, allocation_id: bytes) -> tuple[_TaskManager, _Slot] | None:
        return next(((tm, s) for tm, s in self._slots() if s.allocation_id == allocation_id), None)

    def _timeout_message(self, req: _Requirement) -> str:
        o = self.overview()
        got = self._acquired(req.job_id, SlotState.ALLOCATED)
        cluster = (f"{o.total_slots} slots in total ({o.free_slots} free, "
                   f"{o.task_managers} TaskManagers)")
        if o.total_slots < req.required:
            why = f"the cluster has {cluster}"
        else:
            why = (f"it got only {got} within {req.timeout_ms} ms; the cluster has {cluster} "
                   f"and the others are in use")
        return (f"Could not acquire the minimum required resources (not enough slots): job needs "
                f"{req.required} slots but {why}. Add TaskManagers or lower the parallelism.")

def _info(tm: _TaskManager, slot: _Slot) -> TaskManagerSlotInformation:
    return TaskManagerSlotInformation(tm.resource_id, slot.index, slot.state, slot.job_id, slot.allocation_id)
