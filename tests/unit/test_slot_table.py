"""TaskSlotTable: the TaskManager's slots, their FREE/ALLOCATED/ACTIVE lifecycle and their tasks."""
from __future__ import annotations

import logging

import pytest

from millstream.runtime.state_machine import IllegalStateTransition
from millstream.taskmanager.slot_table import (
    TASK_SLOT_STATES,
    SlotOccupiedError,
    SlotStatus,
    SlotTableError,
    TaskSlotState,
    TaskSlotTable,
)

JOB_A = b"A" * 16
JOB_B = b"B" * 16
ALLOC_1 = b"\x01" * 16
ALLOC_2 = b"\x02" * 16
ALLOC_3 = b"\x03" * 16
JM = "jm:1"
LOGGER = "millstream.taskmanager.slot_table"


@pytest.fixture
def table() -> TaskSlotTable:
    return TaskSlotTable(2)


def test_a_new_table_reports_every_slot_free(table: TaskSlotTable) -> None:
    assert table.num_slots == 2 and table.free_slots_count() == 2
    assert table.slot_report() == [SlotStatus(0, None, None), SlotStatus(1, None, None)]
    assert table.slot_report()[0] == (0, None, None)  # a plain tuple for the ResourceManager
    assert table.jobs() == [] and table.tasks_of_job(JOB_A) == []
    with pytest.raises(ValueError):
        TaskSlotTable(0)


def test_allocate_offer_run_free_lifecycle(table: TaskSlotTable,
                                           caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        assert table.allocate_slot(1, JOB_A, ALLOC_1, JM) is True
        info = table.slot_of(ALLOC_1)
        assert info is not None and (info.slot_index, info.state) == (1, TaskSlotState.ALLOCATED)
        assert info.jobmaster_address == JM
        assert table.slot_report() == [SlotStatus(0, None, None), SlotStatus(1, ALLOC_1, JOB_A)]
        assert table.mark_active(ALLOC_1) is True
        assert table.add_task(ALLOC_1, JOB_A, b"t1", "Source -> Map (1/2)") is True
        assert [t.attempt_id for t in table.tasks_of_job(JOB_A)] == [b"t1"]
        assert table.allocations_of_job(JOB_A) == [ALLOC_1] and table.jobs() == [JOB_A]
        assert table.free_slot(ALLOC_1) == [b"t1"]  # the shell cancels these tasks
    assert table.free_slots_count() == 2 and table.tasks_of_job(JOB_A) == []
    assert table.slot_of(ALLOC_1) is None
    moves = [r.getMessage() for r in caplog.records]
    assert any("FREE -> ALLOCATED" in m for m in moves)
    assert any(m.startswith("task slot 1 ") and "ALLOCATED -> ACTIVE (offer accepted)" in m for m in moves)
    assert any("ACTIVE -> FREE" in m for m in moves)


def test_allocation_is_idempotent_for_the_same_allocation_id(table: TaskSlotTable) -> None:
    assert table.allocate_slot(0, JOB_A, ALLOC_1, JM) is True
    assert table.allocate_slot(0, JOB_A, ALLOC_1, JM) is False  # a retried RequestSlot
    assert table.free_slots_count() == 1


def test_an_occupied_slot_is_refused_with_the_occupant(table: TaskSlotTable) -> None:
    table.allocate_slot(0, JOB_A, ALLOC_1, JM)
    with pytest.raises(SlotOccupiedError, match="slot 0 is already allocated to allocation 0101") \
            as err:
        table.allocate_slot(0, JOB_B, ALLOC_2, JM)
    assert (err.value.allocation_id, err.value.job_id) == (ALLOC_1, JOB_A)
    with pytest.raises(SlotOccupiedError):
        table.allocate_slot(0, JOB_A, ALLOC_2, JM)  # same job, other allocation: still occupied
    with pytest.raises(SlotTableError, match="already holds slot 0"):
        table.allocate_slot(1, JOB_A, ALLOC_1, JM)  # one allocation, one slot


@pytest.mark.parametrize("index", [-1, 2, 99])
def test_out_of_range_slot_index_is_refused(table: TaskSlotTable, index: int) -> None:
    with pytest.raises(SlotTableError, match=f"slot index {index} out of range: .* 2 slots"):
        table.allocate_slot(index, JOB_A, ALLOC_1, JM)
    assert table.free_slots_count() == 2


def test_mark_active_is_idempotent_and_needs_a_known_allocation(table: TaskSlotTable) -> None:
    table.allocate_slot(0, JOB_A, ALLOC_1, JM)
    assert table.mark_active(ALLOC_1) is True
    assert table.mark_active(ALLOC_1) is False
    with pytest.raises(SlotTableError, match="no slot holds allocation 0202"):
        table.mark_active(ALLOC_2)


def test_mark_inactive_keeps_the_reservation(table: TaskSlotTable) -> None:
    table.allocate_slot(0, JOB_A, ALLOC_1, JM)
    assert table.mark_inactive(ALLOC_1) is False  # already only allocated
    table.mark_active(ALLOC_1)
    assert table.mark_inactive(ALLOC_1) is True
    info = table.slot_of(ALLOC_1)
    assert info is not None and info.state is TaskSlotState.ALLOCATED
    assert table.slot_report()[0] == SlotStatus(0, ALLOC_1, JOB_A)


def test_add_task_rejects_slots_not_allocated_to_that_job(table: TaskSlotTable) -> None:
    table.allocate_slot(0, JOB_A, ALLOC_1, JM)
    with pytest.raises(SlotTableError, match="belongs to job 4141"):
        table.add_task(ALLOC_1, JOB_B, b"t1", "Map (1/1)")
    with pytest.raises(SlotTableError, match="belongs to no job"):
        table.add_task(ALLOC_2, JOB_A, b"t1", "Map (1/1)")
    assert table.tasks_of_job(JOB_A) == [] and table.tasks_of_job(JOB_B) == []


def test_add_task_activates_an_allocated_slot_and_is_idempotent(table: TaskSlotTable) -> None:
    table.allocate_slot(0, JOB_A, ALLOC_1, JM)
    table.allocate_slot(1, JOB_A, ALLOC_2, JM)
    assert table.add_task(ALLOC_1, JOB_A, b"t1", "Map (1/2)") is True  # like tryMarkSlotActive
    info = table.slot_of(ALLOC_1)
    assert info is not None and info.state is TaskSlotState.ACTIVE
    assert table.add_task(ALLOC_1, JOB_A, b"t1", "Map (1/2)") is False  # retried SubmitTask
    assert table.add_task(ALLOC_1, JOB_A, b"t2", "Sink (1/2)") is True  # slot sharing
    with pytest.raises(SlotTableError, match="already runs in slot 0"):
        table.add_task(ALLOC_2, JOB_A, b"t1", "Map (1/2)")
    assert sorted(t.attempt_id for t in table.tasks_of_job(JOB_A)) == [b"t1", b"t2"]


def test_remove_task_and_free_slot_are_idempotent(table: TaskSlotTable) -> None:
    table.allocate_slot(0, JOB_A, ALLOC_1, JM)
    table.add_task(ALLOC_1, JOB_A, b"t1", "Map (1/1)")
    table.add_task(ALLOC_1, JOB_A, b"t2", "Sink (1/1)")
    removed = table.remove_task(b"t1")
    assert removed is not None and removed.task_name == "Map (1/1)" and removed.slot_index == 0
    assert table.remove_task(b"t1") is None
    assert table.free_slot(ALLOC_1) == [b"t2"]
    assert table.free_slot(ALLOC_1) == []  # a retried FreeSlot
    assert table.free_slot(ALLOC_3) == []
    assert table.remove_task(b"t2") is None  # the cancelled task ends later: nothing to do


def test_freed_slot_can_be_allocated_again(table: TaskSlotTable) -> None:
    table.allocate_slot(0, JOB_A, ALLOC_1, JM)
    table.free_slot(ALLOC_1)
    assert table.allocate_slot(0, JOB_B, ALLOC_2, "jm-b:1") is True
    assert table.jobs() == [JOB_B] and table.allocations_of_job(JOB_A) == []


def test_queries_by_job(table: TaskSlotTable) -> None:
    three = TaskSlotTable(3)
    three.allocate_slot(0, JOB_B, ALLOC_1, JM)
    three.allocate_slot(1, JOB_A, ALLOC_2, JM)
    three.allocate_slot(2, JOB_B, ALLOC_3, JM)
    assert three.jobs() == [JOB_B, JOB_A]
    assert three.allocations_of_job(JOB_B) == [ALLOC_1, ALLOC_3]
    assert three.free_slots_count() == 0


@pytest.mark.parametrize("frm,to", [
    (TaskSlotState.FREE, TaskSlotState.ACTIVE),
    (TaskSlotState.FREE, TaskSlotState.FREE),
    (TaskSlotState.ALLOCATED, TaskSlotState.ALLOCATED),
    (TaskSlotState.ACTIVE, TaskSlotState.ACTIVE),
])
def test_illegal_transitions_are_rejected_and_logged(frm: TaskSlotState, to: TaskSlotState,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER), \
            pytest.raises(IllegalStateTransition, match=f"{frm.value} -> {to.value}"):
        TASK_SLOT_STATES.transition(frm, to, "0", "test")
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert f"task slot 0: illegal transition {frm.value} -> {to.value} (test)" \
        == record.getMessage()


@pytest.mark.parametrize("frm,to", [
    (TaskSlotState.FREE, TaskSlotState.ALLOCATED),
    (TaskSlotState.ALLOCATED, TaskSlotState.ACTIVE),
    (TaskSlotState.ALLOCATED, TaskSlotState.FREE),
    (TaskSlotState.ACTIVE, TaskSlotState.ALLOCATED),
    (TaskSlotState.ACTIVE, TaskSlotState.FREE),
])
def test_legal_transitions(frm: TaskSlotState, to: TaskSlotState) -> None:
    assert TASK_SLOT_STATES.transition(frm, to, "0", "test") is to
    assert to == to.value  # str enum: serialises as its name
