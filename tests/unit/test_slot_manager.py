"""SlotManager: Flink's declarative slot protocol as a pure state machine (no sockets, no clock)."""
from __future__ import annotations

import itertools
import logging

import pytest

from millstream.runtime.state_machine import IllegalStateTransition
from millstream.jobmanager.resourcemanager.slot_manager import (
    AllocateSlot,
    ClusterOverview,
    Command,
    FreeSlots,
    SLOT_STATES,
    RequirementsTimedOut,
    SlotManager,
    SlotState,
    TaskManagerInfo,
)

TIMEOUT = 1_000
JOB_A = b"A" * 16
JOB_B = b"B" * 16
JM_A = "jm-a:1"
JM_B = "jm-b:1"
FREE2 = [(0, None, None), (1, None, None)]


def counter_ids() -> itertools.count[int]:
    return itertools.count(1)


@pytest.fixture
def sm() -> SlotManager:
    ids = counter_ids()
    return SlotManager(TIMEOUT, id_factory=lambda: next(ids).to_bytes(16, "big"))


def allocs(commands: list[Command]) -> list[AllocateSlot]:
    assert all(isinstance(c, AllocateSlot) for c in commands), commands
    return [c for c in commands if isinstance(c, AllocateSlot)]


def register(sm: SlotManager, rid: str, slots: int = 2, now: int = 0,
             report: list[tuple[int, bytes | None, bytes | None]] | None = None
             ) -> tuple[str, list[Command]]:
    report = report if report is not None else [(i, None, None) for i in range(slots)]
    return sm.register_task_manager(rid, f"{rid}:1", f"{rid}:2", slots, report, now)


def tm_info(sm: SlotManager, rid: str) -> TaskManagerInfo:
    info = sm.task_manager(rid)
    assert info is not None
    return info


def placement(commands: list[Command]) -> list[tuple[str, int, bytes]]:
    return [(c.resource_id, c.slot_index, c.job_id) for c in allocs(commands)]


# ---- matching ---------------------------------------------------------------------------------


def test_declared_requirements_match_free_slots_by_registration_order_then_index(
        sm: SlotManager) -> None:
    register(sm, "tm-2")  # registered first although its name sorts second
    register(sm, "tm-1")
    cmds = sm.declare_requirements(JOB_A, JM_A, 3, now=10)
    assert placement(cmds) == [("tm-2", 0, JOB_A), ("tm-2", 1, JOB_A), ("tm-1", 0, JOB_A)]
    first = allocs(cmds)[0]
    assert first.tm_address == "tm-2:1" and first.jobmaster_address == JM_A
    assert first.registration_id == tm_info(sm, "tm-2").registration_id
    assert len({c.allocation_id for c in allocs(cmds)}) == 3
    assert all(len(c.allocation_id) == 16 for c in allocs(cmds))
    assert sm.overview() == ClusterOverview(task_managers=2, total_slots=4, free_slots=1)
    assert [s.state for s in sm.slots_of_job(JOB_A)] == [SlotState.PENDING] * 3
    assert sm.pending_jobs() == []


def test_declarations_are_totals_not_increments(sm: SlotManager) -> None:
    register(sm, "tm", slots=4)
    assert len(allocs(sm.declare_requirements(JOB_A, JM_A, 2, now=0))) == 2
    assert sm.declare_requirements(JOB_A, JM_A, 2, now=1) == []  # same total again: nothing new
    assert placement(sm.declare_requirements(JOB_A, JM_A, 3, now=2)) == [("tm", 2, JOB_A)]
    assert sm.declare_requirements(JOB_A, JM_A, 1, now=3) == []  # lowering frees nothing
    assert len(sm.slots_of_job(JOB_A)) == 3


def test_zero_clears_requirements_and_negative_is_rejected(sm: SlotManager) -> None:
    assert sm.declare_requirements(JOB_A, JM_A, 2, now=0) == []
    assert [p.job_id for p in sm.pending_jobs()] == [JOB_A]
    assert sm.declare_requirements(JOB_A, JM_A, 0, now=1) == []
    assert sm.pending_jobs() == []
    assert register(sm, "tm")[1] == []  # nobody waits any more
    with pytest.raises(ValueError):
        sm.declare_requirements(JOB_A, JM_A, -1, now=2)


# ---- the pending queue ------------------------------------------------------------------------


def test_pending_requirements_are_served_when_a_task_manager_registers(sm: SlotManager) -> None:
    assert sm.declare_requirements(JOB_A, JM_A, 3, now=0) == []
    assert sm.declare_requirements(JOB_B, JM_B, 1, now=0) == []
    (pending_a, pending_b) = sm.pending_jobs()
    assert (pending_a.job_id, pending_a.required_slots, pending_a.acquired_slots) == (JOB_A, 3, 0)
    _, cmds = register(sm, "tm-1")
    assert placement(cmds) == [("tm-1", 0, JOB_A), ("tm-1", 1, JOB_A)]  # declaration order
    assert [(p.job_id, p.acquired_slots) for p in sm.pending_jobs()] == [(JOB_A, 2), (JOB_B, 0)]
    _, cmds = register(sm, "tm-2")
    assert placement(cmds) == [("tm-2", 0, JOB_A), ("tm-2", 1, JOB_B)]
    assert sm.pending_jobs() == []


def test_pending_requirements_are_served_by_freed_slots(sm: SlotManager) -> None:
    register(sm, "tm")
    a = allocs(sm.declare_requirements(JOB_A, JM_A, 2, now=0))
    assert sm.declare_requirements(JOB_B, JM_B, 1, now=0) == []
    for c in a:
        sm.allocation_confirmed(c.allocation_id, now=1)
    # While A still needs both, a slot its TaskManager frees goes straight back to A...
    (again,) = allocs(sm.slot_freed("tm", a[1].slot_index, a[1].allocation_id, now=2))
    assert (again.job_id, again.slot_index) == (JOB_A, 1)
    sm.allocation_confirmed(again.allocation_id, now=2)
    # ...once A needs only one (scaled down), the next freed slot serves the waiting job B.
    assert sm.declare_requirements(JOB_A, JM_A, 1, now=2) == []
    cmds = sm.slot_freed("tm", 1, again.allocation_id, now=2)
    assert placement(cmds) == [("tm", 1, JOB_B)]
    # A slot report showing A's slot free (A lost it) frees it, and A still needs one.
    reg = tm_info(sm, "tm").registration_id
    b_alloc = allocs(cmds)[0].allocation_id
    cmds = sm.report_slots("tm", reg, [(0, None, None), (1, b_alloc, JOB_B)], now=3)
    assert placement(cmds) == [("tm", 0, JOB_A)]


def test_slot_freed_for_another_allocation_is_ignored(sm: SlotManager) -> None:
    register(sm, "tm", slots=1)
    (a,) = allocs(sm.declare_requirements(JOB_A, JM_A, 1, now=0))
    sm.allocation_confirmed(a.allocation_id, now=1)
    assert sm.slot_freed("tm", 0, b"x" * 16, now=2) == []
    assert sm.slot_freed("tm", 7, a.allocation_id, now=2) == []
    assert sm.slot_freed("gone", 0, a.allocation_id, now=2) == []
    assert sm.overview().free_slots == 0
    sm.declare_requirements(JOB_A, JM_A, 0, now=3)
    sm.slot_freed("tm", 0, a.allocation_id, now=3)
    assert sm.slot_freed("tm", 0, a.allocation_id, now=4) == []  # a retried notification
    assert sm.overview().free_slots == 1


# ---- timeouts ---------------------------------------------------------------------------------


def test_unmet_requirements_time_out_once_with_a_clear_not_enough_slots_message(
        sm: SlotManager) -> None:
    register(sm, "tm-1")
    register(sm, "tm-2")
    for c in allocs(sm.declare_requirements(JOB_A, JM_A, 6, now=100)):
        sm.allocation_confirmed(c.allocation_id, now=100)
    assert sm.check_timeouts(now=100 + TIMEOUT) == []  # not *longer* than the timeout yet
    (timed_out,) = sm.check_timeouts(now=101 + TIMEOUT)
    assert isinstance(timed_out, RequirementsTimedOut) and timed_out.job_id == JOB_A
    assert timed_out.message == (
        "Could not acquire the minimum required resources (not enough slots): job needs 6 slots "
        "but the cluster has 4 slots in total (0 free, 2 TaskManagers). Add TaskManagers or "
        "lower the parallelism.")
    assert sm.check_timeouts(now=10 * TIMEOUT) == []  # reported once, requirement cleared
    assert sm.pending_jobs() == []
    assert register(sm, "tm-3")[1] == []


def test_timeout_message_when_slots_exist_but_are_busy(sm: SlotManager) -> None:
    register(sm, "tm")
    for c in allocs(sm.declare_requirements(JOB_A, JM_A, 2, now=0)):
        sm.allocation_confirmed(c.allocation_id, now=0)
    sm.declare_requirements(JOB_B, JM_B, 1, now=0)
    (timed_out,) = sm.check_timeouts(now=TIMEOUT + 1)
    assert timed_out == RequirementsTimedOut(JOB_B, (
        "Could not acquire the minimum required resources (not enough slots): job needs 1 slots "
        f"but it got only 0 within {TIMEOUT} ms; the cluster has 2 slots in total (0 free, "
        "1 TaskManagers) and the others are in use. Add TaskManagers or lower the parallelism."))


def test_pending_allocations_do_not_stop_the_clock(sm: SlotManager) -> None:
    register(sm, "tm")
    allocs(sm.declare_requirements(JOB_A, JM_A, 1, now=0))  # never confirmed by the TaskManager
    assert [t.job_id for t in sm.check_timeouts(now=TIMEOUT + 1)] == [JOB_A]


def test_met_requirements_never_time_out_and_raising_restarts_the_clock(sm: SlotManager) -> None:
    register(sm, "tm", slots=4)
    (a,) = allocs(sm.declare_requirements(JOB_A, JM_A, 1, now=0))
    sm.allocation_confirmed(a.allocation_id, now=1)
    assert sm.check_timeouts(now=10 * TIMEOUT) == []
    sm.declare_requirements(JOB_A, JM_A, 3, now=10 * TIMEOUT)  # raised: the clock starts now
    assert sm.check_timeouts(now=11 * TIMEOUT) == []
    assert [t.job_id for t in sm.check_timeouts(now=11 * TIMEOUT + 1)] == [JOB_A]


def test_requirements_met_after_waiting_stop_the_clock(sm: SlotManager) -> None:
    sm.declare_requirements(JOB_A, JM_A, 2, now=0)
    _, cmds = register(sm, "tm", now=TIMEOUT - 1)
    for c in allocs(cmds):
        sm.allocation_confirmed(c.allocation_id, now=TIMEOUT)
    assert sm.check_timeouts(now=5 * TIMEOUT) == []


# ---- TaskManager loss, re-registration, stale events ------------------------------------------


def test_task_manager_loss_removes_its_slots_and_requests_replacements(sm: SlotManager) -> None:
    register(sm, "tm-1")
    register(sm, "tm-2")
    for c in allocs(sm.declare_requirements(JOB_A, JM_A, 2, now=0)):
        sm.allocation_confirmed(c.allocation_id, now=0)
    assert {s.resource_id for s in sm.slots_of_job(JOB_A)} == {"tm-1"}
    cmds = sm.unregister_task_manager("tm-1", "heartbeat timed out", now=5)
    assert placement(cmds) == [("tm-2", 0, JOB_A), ("tm-2", 1, JOB_A)]
    assert sm.overview() == ClusterOverview(task_managers=1, total_slots=2, free_slots=0)
    assert sm.task_manager("tm-1") is None
    assert sm.unregister_task_manager("tm-1", "again", now=6) == []  # idempotent


def test_task_manager_loss_without_spare_slots_leaves_the_job_pending(sm: SlotManager) -> None:
    register(sm, "tm")
    for c in allocs(sm.declare_requirements(JOB_A, JM_A, 2, now=0)):
        sm.allocation_confirmed(c.allocation_id, now=0)
    assert sm.unregister_task_manager("tm", "connection lost", now=10) == []
    (pending,) = sm.pending_jobs()
    assert (pending.acquired_slots, pending.unmet_since_ms) == (0, 10)
    assert [t.job_id for t in sm.check_timeouts(now=11 + TIMEOUT)] == [JOB_A]


def test_reregistration_replaces_the_old_one_and_keeps_reported_allocations(
        sm: SlotManager) -> None:
    old_reg, _ = register(sm, "tm")
    a0, a1 = allocs(sm.declare_requirements(JOB_A, JM_A, 2, now=0))
    # The TaskManager restarted its connection: it holds a0 but never got a1.
    report = [(0, a0.allocation_id, JOB_A), (1, None, None)]
    new_reg, cmds = register(sm, "tm", now=5, report=report)
    assert new_reg != old_reg
    assert placement(cmds) == [("tm", 1, JOB_A)]
    assert allocs(cmds)[0].registration_id == new_reg
    states = {(s.slot_index, s.state, s.allocation_id) for s in sm.slots_of_job(JOB_A)}
    assert (0, SlotState.ALLOCATED, a0.allocation_id) in states
    assert sm.overview().task_managers == 1
    # Reports fenced by the old registration id are stale and ignored.
    assert sm.report_slots("tm", old_reg, [(0, None, None), (1, None, None)], now=6) == []
    assert tm_info(sm, "tm").slots[0].state is SlotState.ALLOCATED
    assert sm.report_slots("nobody", old_reg, FREE2, now=6) == []


def test_report_is_the_source_of_truth_except_for_allocations_in_flight(sm: SlotManager) -> None:
    reg, _ = register(sm, "tm")
    (a,) = allocs(sm.declare_requirements(JOB_A, JM_A, 1, now=0))
    # The report predates the RequestSlot: the pending slot stays pending, nothing re-allocated.
    assert sm.report_slots("tm", reg, FREE2, now=1) == []
    assert sm.slots_of_job(JOB_A)[0].state is SlotState.PENDING
    # The TaskManager reports the allocation: confirmed.
    sm.report_slots("tm", reg, [(0, a.allocation_id, JOB_A), (1, None, None)], now=2)
    assert sm.slots_of_job(JOB_A)[0].state is SlotState.ALLOCATED
    # It reports a slot allocated that we thought free (e.g. a ResourceManager restart).
    sm.report_slots("tm", reg, [(0, a.allocation_id, JOB_A), (1, b"z" * 16, JOB_B)], now=3)
    assert [(s.slot_index, s.state) for s in sm.slots_of_job(JOB_B)] == [(1, SlotState.ALLOCATED)]
    # Reported free now: B's slot is free; A's is freed and, A still needing a slot, re-served
    # by that very report. Unknown slot indexes are ignored.
    cmds = sm.report_slots("tm", reg, FREE2 + [(9, b"q" * 16, JOB_B)], now=4)
    assert placement(cmds) == [("tm", 0, JOB_A)]
    assert sm.overview().free_slots == 1
    assert sm.slots_of_job(JOB_B) == []


def test_report_with_another_allocation_replaces_a_pending_one_and_reserves(
        sm: SlotManager) -> None:
    reg, _ = register(sm, "tm", slots=1)
    (a,) = allocs(sm.declare_requirements(JOB_A, JM_A, 1, now=0))
    register(sm, "tm-2", slots=1)
    cmds = sm.report_slots("tm", reg, [(0, b"o" * 16, JOB_B)], now=1)
    assert placement(cmds) == [("tm-2", 0, JOB_A)]
    assert sm.slots_of_job(JOB_B)[0].allocation_id == b"o" * 16


def test_allocation_failure_frees_the_slot_and_rematches(sm: SlotManager) -> None:
    register(sm, "tm-1", slots=1)
    (a,) = allocs(sm.declare_requirements(JOB_A, JM_A, 1, now=0))
    cmds = sm.allocation_failed(a.allocation_id, "TaskManager unreachable", now=1)
    (retry,) = allocs(cmds)
    assert (retry.resource_id, retry.slot_index) == ("tm-1", 0)
    assert retry.allocation_id != a.allocation_id  # fresh id: late answers to the old are stale
    assert sm.allocation_failed(a.allocation_id, "late duplicate", now=2) == []
    sm.allocation_confirmed(a.allocation_id, now=2)  # stale confirmation: ignored
    assert sm.slots_of_job(JOB_A)[0].state is SlotState.PENDING


def test_allocation_failure_after_task_manager_loss_is_ignored(sm: SlotManager) -> None:
    register(sm, "tm-1", slots=1)
    (a,) = allocs(sm.declare_requirements(JOB_A, JM_A, 1, now=0))
    assert sm.unregister_task_manager("tm-1", "lost", now=1) == []
    assert sm.allocation_failed(a.allocation_id, "unreachable", now=2) == []
    _, cmds = register(sm, "tm-2", slots=1, now=3)
    assert placement(cmds) == [("tm-2", 0, JOB_A)]


# ---- job end ----------------------------------------------------------------------------------


def test_job_finished_clears_requirements_and_asks_task_managers_to_free_slots(
        sm: SlotManager) -> None:
    register(sm, "tm-1")
    register(sm, "tm-2")
    cmds = allocs(sm.declare_requirements(JOB_A, JM_A, 3, now=0))
    sm.declare_requirements(JOB_B, JM_B, 2, now=0)
    frees = sm.job_finished(JOB_A, now=1)
    assert frees == [
        FreeSlots("tm-1", "tm-1:1", (cmds[0].allocation_id, cmds[1].allocation_id), JOB_A,
                  "job finished"),
        FreeSlots("tm-2", "tm-2:1", (cmds[2].allocation_id,), JOB_A, "job finished"),
    ]
    # The slots are free only once the TaskManagers say so; then the waiting job gets them.
    assert sm.overview().free_slots == 0
    (b,) = allocs(sm.slot_freed("tm-1", 0, cmds[0].allocation_id, now=2))
    assert (b.job_id, b.resource_id, b.slot_index) == (JOB_B, "tm-1", 0)
    assert sm.job_finished(JOB_A, now=3) == [
        FreeSlots("tm-1", "tm-1:1", (cmds[1].allocation_id,), JOB_A, "job finished"),
        FreeSlots("tm-2", "tm-2:1", (cmds[2].allocation_id,), JOB_A, "job finished")]
    assert sm.job_finished(b"unknown-job-id!!", now=3) == []


# ---- validation and the transition table ------------------------------------------------------


def test_invalid_arguments_are_rejected() -> None:
    with pytest.raises(ValueError):
        SlotManager(0)
    with pytest.raises(ValueError, match="needs >= 1"):
        SlotManager(TIMEOUT).register_task_manager("tm", "a", "b", 0, [], 0)


def test_default_ids_are_16_random_bytes() -> None:
    sm = SlotManager(TIMEOUT)
    reg, _ = sm.register_task_manager("tm", "a", "b", 2, FREE2, 0)
    c1, c2 = allocs(sm.declare_requirements(JOB_A, JM_A, 2, now=0))
    assert len(c1.allocation_id) == 16 and c1.allocation_id != c2.allocation_id
    assert len(reg) == 32


def test_slot_transitions_follow_the_table_and_illegal_ones_are_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    assert SLOT_STATES.transition(SlotState.FREE, SlotState.PENDING, "0", "test") is SlotState.PENDING
    assert SLOT_STATES.transition(SlotState.PENDING, SlotState.ALLOCATED, "0", "test") is SlotState.ALLOCATED
    with caplog.at_level(logging.WARNING, logger="millstream.jobmanager.resourcemanager.slot_manager"), \
            pytest.raises(IllegalStateTransition):
        SLOT_STATES.transition(SlotState.ALLOCATED, SlotState.PENDING, "0", "double allocation")
    assert "ALLOCATED -> PENDING (double allocation)" in caplog.text
