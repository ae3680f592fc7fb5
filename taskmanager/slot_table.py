"""The TaskManager's slots and the tasks running in them (Flink's TaskSlotTable, simplified).

Pure core: no I/O, no clock. The TaskExecutor servicer calls it when the ResourceManager asks for a
slot (`allocate_slot`), when the JobMaster accepts an offer (`mark_active`), when a task is
submitted or ends (`add_task`, `remove_task`) and when a slot is freed (`free_slot`, which names the
tasks the shell must cancel). `slot_report()` is what the TaskManager sends to the ResourceManager.

Slot states: FREE -> ALLOCATED (allocate_slot) -> ACTIVE (offer accepted, or a task submitted);
ACTIVE -> ALLOCATED (mark_inactive: JobMaster lost); ALLOCATED or ACTIVE -> FREE (free_slot).
Allocation ids make every call safe to retry: allocating the same allocation again, activating an
active slot or freeing an unknown allocation are no-ops.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

from millstream.runtime.state_machine import StateMachine

log = logging.getLogger(__name__)


class TaskSlotState(str, Enum):
    FREE = "FREE"
    ALLOCATED = "ALLOCATED"  # reserved for a job, offered to its JobMaster
    ACTIVE = "ACTIVE"        # the JobMaster accepted the offer; tasks may run here


_TRANSITIONS: dict[TaskSlotState, frozenset[TaskSlotState]] = {
    TaskSlotState.FREE: frozenset({TaskSlotState.ALLOCATED}),
    TaskSlotState.ALLOCATED: frozenset({TaskSlotState.ACTIVE, TaskSlotState.FREE}),
    TaskSlotState.ACTIVE: frozenset({TaskSlotState.ALLOCATED, TaskSlotState.FREE}),
}
# The table's methods check their input first, so an illegal move is a bug: the error propagates.
TASK_SLOT_STATES = StateMachine("task slot", _TRANSITIONS, log)


class SlotTableError(Exception):
    """A request the slot table must refuse; the message names the slot, job and allocation."""


class SlotOccupiedError(SlotTableError):
    """The slot already holds another allocation (Flink's SlotOccupiedException)."""

    def __init__(self, message: str, allocation_id: bytes, job_id: bytes) -> None:
        super().__init__(message)
        self.allocation_id = allocation_id
        self.job_id = job_id


class SlotStatus(NamedTuple):
    """One slot report entry: allocation and job are None when the slot is free."""

    slot_index: int
    allocation_id: bytes | None
    job_id: bytes | None


@dataclass(frozen=True)
class TaskInSlot:
    attempt_id: bytes
    job_id: bytes
    allocation_id: bytes
    slot_index: int
    task_name: str


@dataclass(frozen=True)
class TaskSlotInfo:
    """A TaskManager's view of one of its allocated slots (a copy of its TaskSlot's fields)."""

    slot_index: int
    state: TaskSlotState
    allocation_id: bytes
    job_id: bytes
    jobmaster_address: str


@dataclass(eq=False)
class _TaskSlot:
    index: int
    state: TaskSlotState = TaskSlotState.FREE
    allocation_id: bytes | None = None
    job_id: bytes | None = None
    jobmaster_address: str = ""
    tasks: dict[bytes, TaskInSlot] = field(default_factory=dict)

    def move(self, to: TaskSlotState, reason: str) -> None:
        alloc = self.allocation_id.hex() if self.allocation_id else "-"
        self.state = TASK_SLOT_STATES.transition(self.state, to, f"{self.index} (allocation {alloc})", reason)


class TaskSlotTable:
    """Owns a TaskManager's slots: which allocation and job each holds, and the tasks in it."""

    def __init__(self, num_slots: int) -> None:
        if num_slots < 1:
            raise ValueError(f"a TaskManager needs at least one slot, got {num_slots}")
        self._slots = [_TaskSlot(i) for i in range(num_slots)]

    @property
    def num_slots(self) -> int:
        return len(self._slots)

    # ---- slots --------------------------------------------------------------------------------
    def allocate_slot(self, slot_index: int, job_id: bytes, allocation_id: bytes,
                      jobmaster_address: str) -> bool:
        """Reserve a slot for a job. Returns False when this allocation already holds it."""
        if not 0 <= slot_index < len(self._slots):
            raise SlotTableError(f"slot index {slot_index} out of range: this TaskManager has "
                                 f"{len(self._slots)} slots (0..{len(self._slots) - 1})")
        slot = self._slots[slot_index]
        if slot.allocation_id == allocation_id and slot.job_id == job_id:
            return False  # a retried RequestSlot
        if slot.state is not TaskSlotState.FREE:
            assert slot.allocation_id is not None and slot.job_id is not None
            raise SlotOccupiedError(
                f"slot {slot_index} is already allocated to allocation {slot.allocation_id.hex()} "
                f"of job {slot.job_id.hex()}; cannot allocate it to {allocation_id.hex()} of job "
                f"{job_id.hex()}", slot.allocation_id, slot.job_id)
        other = self._find(allocation_id)
        if other is not None:
            raise SlotTableError(f"allocation {allocation_id.hex()} already holds slot "
                                 f"{other.index}; cannot also take slot {slot_index}")
        slot.move(TaskSlotState.ALLOCATED, f"allocated to job {job_id.hex()}")
        slot.allocation_id, slot.job_id, slot.jobmaster_address = (
            allocation_id, job_id, jobmaster_address)
        return True

    def mark_active(self, allocation_id: bytes) -> bool:
        """The JobMaster accepted the slot offer. False if already active."""
        slot = self._require(allocation_id)
        if slot.state is TaskSlotState.ACTIVE:
            return False
        slot.move(TaskSlotState.ACTIVE, "offer accepted")
        return True

    def mark_inactive(self, allocation_id: bytes) -> bool:
        """The JobMaster connection was lost: the slot stays reserved but runs no new tasks."""
        slot = self._require(allocation_id)
        if slot.state is TaskSlotState.ALLOCATED:
            return False
        slot.move(TaskSlotState.ALLOCATED, "job master connection lost")
        return True

    def free_slot(self, allocation_id: bytes) -> list[bytes]:
        """Free the slot of an allocation; returns the attempt ids of the tasks to cancel.

        An unknown allocation is already free: the call is idempotent and returns [].
        """
        slot = self._find(allocation_id)
        if slot is None:
            return []
        attempts = list(slot.tasks)
        slot.move(TaskSlotState.FREE, f"freed ({len(attempts)} tasks to cancel)")
        slot.allocation_id, slot.job_id, slot.jobmaster_address = None, None, ""
        slot.tasks.clear()
        return attempts

    # ---- tasks --------------------------------------------------------------------------------
    def add_task(self, allocation_id: bytes, job_id: bytes, attempt_id: bytes,
                 task_name: str) -> bool:
        """Place a task in the job's slot (marking it active, like Flink's tryMarkSlotActive).

        Returns False for a retried submission of a task already in that slot.
        """
        slot = self._find(allocation_id)
        if slot is None or slot.job_id != job_id:
            owner = f"job {slot.job_id.hex()}" if slot is not None and slot.job_id else "no job"
            raise SlotTableError(f"cannot run task {task_name} ({attempt_id.hex()}) of job "
                                 f"{job_id.hex()}: allocation {allocation_id.hex()} is not a slot "
                                 f"allocated to that job here (it belongs to {owner})")
        existing = self._task(attempt_id)
        if existing is not None:
            if existing.allocation_id == allocation_id:
                return False
            raise SlotTableError(f"task {attempt_id.hex()} already runs in slot "
                                 f"{existing.slot_index}")
        if slot.state is TaskSlotState.ALLOCATED:
            slot.move(TaskSlotState.ACTIVE, f"task {task_name} submitted")
        slot.tasks[attempt_id] = TaskInSlot(attempt_id, job_id, allocation_id, slot.index,
                                            task_name)
        return True

    def remove_task(self, attempt_id: bytes) -> TaskInSlot | None:
        """Forget a task that reached a terminal state (None when it is not here)."""
        for slot in self._slots:
            if attempt_id in slot.tasks:
                return slot.tasks.pop(attempt_id)
        return None

    # ---- queries ------------------------------------------------------------------------------
    def tasks_of_job(self, job_id: bytes) -> list[TaskInSlot]:
        return [t for s in self._slots if s.job_id == job_id for t in s.tasks.values()]

    def allocations_of_job(self, job_id: bytes) -> list[bytes]:
        return [s.allocation_id for s in self._slots
                if s.job_id == job_id and s.allocation_id is not None]

    def jobs(self) -> list[bytes]:
        """Jobs holding at least one slot, in slot order, without duplicates."""
        return list(dict.fromkeys(s.job_id for s in self._slots if s.job_id is not None))

    def slot_of(self, allocation_id: bytes) -> TaskSlotInfo | None:
        slot = self._find(allocation_id)
        if slot is None or slot.job_id is None:
            return None
        return TaskSlotInfo(slot.index, slot.state, allocation_id, slot.job_id, slot.jobmaster_address)

    def slot_report(self) -> list[SlotStatus]:
        return [SlotStatus(s.index, s.allocation_id, s.job_id) for s in self._slots]

    def free_slots_count(self) -> int:
        return sum(1 for s in self._slots if s.state is TaskSlotState.FREE)

    # ---- internals ----------------------------------------------------------------------------
    def _find(self, allocation_id: bytes) -> _TaskSlot | None:
        return next((s for s in self._slots if s.allocation_id == allocation_id), None)

    def _require(self, allocation_id: bytes) -> _TaskSlot:
        slot = self._find(allocation_id)
        if slot is None:
            raise SlotTableError(f"no slot holds allocation {allocation_id.hex()} "
                                 f"(never allocated here, or already freed)")
        return slot

    def _task(self, attempt_id: bytes) -> TaskInSlot | None:
        return next((s.tasks[attempt_id] for s in self._slots if attempt_id in s.tasks), None)
