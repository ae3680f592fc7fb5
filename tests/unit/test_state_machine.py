"""The one transition helper every state machine uses (execution, job, slots, pending checkpoints)."""
from __future__ import annotations

import enum
import logging

import pytest

from millstream.jobmanager.checkpoint.coordinator import PendingCheckpoint, PendingState
from millstream.jobmanager.resourcemanager.slot_manager import SLOT_STATES, SlotState
from millstream.runtime.execution_state import EXECUTION_STATES, JOB_STATES, ExecutionState, JobStatus
from millstream.runtime.state_machine import IllegalStateTransition, StateMachine
from millstream.taskmanager.slot_table import TASK_SLOT_STATES, TaskSlotState


class Light(str, enum.Enum):
    RED = "RED"
    GREEN = "GREEN"
    AMBER = "AMBER"


LIGHTS = StateMachine("light", {Light.RED: frozenset({Light.GREEN}), Light.GREEN: frozenset({Light.AMBER}),
                                Light.AMBER: frozenset({Light.RED})})


def test_allowed_moves_return_the_target_and_are_logged_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="millstream.runtime.state_machine"):
        assert LIGHTS.transition(Light.RED, Light.GREEN, "north", "timer") is Light.GREEN
    assert "light north: RED -> GREEN (timer)" in caplog.text
    assert LIGHTS.can_transition(Light.GREEN, Light.AMBER)
    assert not LIGHTS.can_transition(Light.GREEN, Light.RED)


def test_an_illegal_move_raises_one_error_naming_machine_subject_states_and_reason(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING), pytest.raises(IllegalStateTransition) as raised:
        LIGHTS.transition(Light.GREEN, Light.RED, "north", "skipped amber")
    error = raised.value
    assert str(error) == "light north: illegal transition GREEN -> RED (skipped amber)"
    assert (error.machine, error.subject, error.current, error.target, error.reason) == (
        "light", "north", Light.GREEN, Light.RED, "skipped amber")
    assert str(error) in caplog.text
    assert isinstance(error, RuntimeError)


def test_every_state_machine_of_the_runtime_uses_it() -> None:
    # Each machine's documented table, checked through the one helper.
    assert EXECUTION_STATES.can_transition(ExecutionState.RUNNING, ExecutionState.FINISHED)
    assert not EXECUTION_STATES.can_transition(ExecutionState.FINISHED, ExecutionState.RUNNING)
    assert JOB_STATES.can_transition(JobStatus.RUNNING, JobStatus.RESTARTING)
    assert not JOB_STATES.can_transition(JobStatus.CANCELED, JobStatus.RUNNING)
    assert SLOT_STATES.can_transition(SlotState.FREE, SlotState.PENDING)
    assert not SLOT_STATES.can_transition(SlotState.ALLOCATED, SlotState.PENDING)
    assert TASK_SLOT_STATES.can_transition(TaskSlotState.ALLOCATED, TaskSlotState.ACTIVE)
    assert not TASK_SLOT_STATES.can_transition(TaskSlotState.FREE, TaskSlotState.ACTIVE)
    for machine in (EXECUTION_STATES, JOB_STATES, SLOT_STATES, TASK_SLOT_STATES):
        assert isinstance(machine, StateMachine)
        assert set(machine.table) == set(type(next(iter(machine.table))))  # every state has a row


def test_a_pending_checkpoint_rejects_an_illegal_move_with_the_same_error() -> None:
    pending = PendingCheckpoint(checkpoint_id=7, timestamp_ms=0, deadline_ms=10, to_wait_for={}, to_commit=())
    pending.transition(PendingState.ABORTED, "declined")
    with pytest.raises(IllegalStateTransition, match=r"^checkpoint 7: illegal transition ABORTED -> COMPLETED"):
        pending.transition(PendingState.COMPLETED, "late ack")
    assert pending.state is PendingState.ABORTED
