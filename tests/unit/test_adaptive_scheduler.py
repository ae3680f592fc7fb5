"""The adaptive scheduler's state machine and slot decision, from Flink's documented behaviour
(elastic scaling docs: adaptive scheduler, reactive mode; AdaptiveScheduler's states)."""
from __future__ import annotations

import pytest

from millstream.jobmanager.jobmaster.adaptive_scheduler import (
    RESOURCE_WAIT, STABILIZATION, AdaptiveScheduler, AdaptiveSettings, CancelTasks, CreateExecutionGraph,
    DeclareResources, JobTerminated, RestartTasks, StartTimer, State, TriggerCheckpoint, TriggerStopWithSavepoint,
    VertexRequirement, decide_parallelism, desired_slots,
)
from millstream.runtime.execution_state import JobStatus

SRC, MAP, SINK = b"s" * 16, b"m" * 16, b"k" * 16


def job(desired: int = 4, max_parallelism: int = 128, groups: tuple[str, str, str] = ("default",) * 3) -> list[VertexRequirement]:
    return [VertexRequirement(SRC, "source", desired, max_parallelism, groups[0]),
            VertexRequirement(MAP, "map", desired, max_parallelism, groups[1]),
            VertexRequirement(SINK, "sink", 1, 1, groups[2])]


def timer(commands, kind):
    return next(c for c in commands if isinstance(c, StartTimer) and c.kind == kind)


# -- the parallelism decision ---------------------------------------------------------------------

def test_one_slot_group_runs_every_vertex_at_the_slots_it_has_capped_by_its_wish():
    assert decide_parallelism(job(4), 2) == {SRC: 2, MAP: 2, SINK: 1}
    assert decide_parallelism(job(4), 10) == {SRC: 4, MAP: 4, SINK: 1}


def test_reactive_mode_wants_every_slot_up_to_each_vertex_max_parallelism():
    assert decide_parallelism(job(2, max_parallelism=8), 5, reactive=True) == {SRC: 5, MAP: 5, SINK: 1}
    assert decide_parallelism(job(2, max_parallelism=8), 20, reactive=True) == {SRC: 8, MAP: 8, SINK: 1}
    assert desired_slots(job(2, max_parallelism=8), reactive=True) == 8


def test_no_slot_or_fewer_slots_than_slot_sharing_groups_is_not_enough():
    assert decide_parallelism(job(), 0) is None
    assert decide_parallelism(job(groups=("a", "b", "c")), 2) is None


def test_slots_are_spread_evenly_over_slot_sharing_groups():
    split = decide_parallelism(job(4, groups=("a", "b", "b")), 5)
    assert split == {SRC: 3, MAP: 2, SINK: 1}
    assert decide_parallelism(job(4, groups=("a", "b", "b")), 3) == {SRC: 2, MAP: 1, SINK: 1}
    # a group that wants little leaves the rest to the others
    assert decide_parallelism(job(4, groups=("a", "b", "c")), 9) == {SRC: 4, MAP: 4, SINK: 1}


def test_bad_input_names_the_problem():
    with pytest.raises(ValueError, match="vertex 'map' has max parallelism 0"):
        decide_parallelism([VertexRequirement(MAP, "map", 1, 0)], 2)
    with pytest.raises(ValueError, match="min-parallelism-increase"):
        AdaptiveSettings(min_parallelism_increase=0)
    with pytest.raises(ValueError, match="resource-stabilization-timeout"):
        AdaptiveSettings(resource_stabilization_timeout_ms=-1)


# -- WaitingForResources -------------------------------------------------------------------------

def test_start_declares_the_wish_and_waits_with_the_resource_wait_timeout():
    s = AdaptiveScheduler(job(4), AdaptiveSettings(resource_wait_timeout_ms=5000))
    out = s.start()
    assert out[0] == DeclareResources(4) and timer(out, RESOURCE_WAIT).delay_ms == 5000
    assert s.state is State.WAITING_FOR_RESOURCES
    assert s.start() == []  # only once


def test_all_wished_slots_create_the_execution_graph_at_once():
    s = AdaptiveScheduler(job(2))
    s.start()
    assert s.resources_changed(2) == [CreateExecutionGraph({SRC: 2, MAP: 2, SINK: 1})]
    assert s.state is State.CREATING_EXECUTION_GRAPH
    s.execution_graph_created()
    assert s.state is State.EXECUTING


def test_fewer_slots_start_the_job_after_the_stabilization_timeout_and_new_slots_restart_it():
    s = AdaptiveScheduler(job(4), AdaptiveSettings(resource_stabilization_timeout_ms=1000))
    s.start()
    first = timer(s.resources_changed(1), STABILIZATION)
    assert first.delay_ms == 1000
    second = timer(s.resources_changed(2), STABILIZATION)  # a slot came: the window starts again
    assert s.stabilization_elapsed(first.epoch) == []  # stale
    assert s.stabilization_elapsed(second.epoch) == [CreateExecutionGraph({SRC: 2, MAP: 2, SINK: 1})]


def test_losing_the_slots_while_stabilizing_cancels_the_start():
    s = AdaptiveScheduler(job(4))
    s.start()
    t = timer(s.resources_changed(1), STABILIZATION)
    assert s.resources_changed(0) == []
    assert s.stabilization_elapsed(t.epoch) == []
    assert s.state is State.WAITING_FOR_RESOURCES


def test_resource_wait_timeout_fails_a_job_without_enough_slots_and_starts_one_with_some():
    s = AdaptiveScheduler(job(4), AdaptiveSettings(resource_wait_timeout_ms=100))
    wait = timer(s.start(), RESOURCE_WAIT)
    [end] = s.resource_wait_elapsed(wait.epoch)
    assert isinstance(end, JobTerminated) and end.status is JobStatus.FAILED
    assert "resource-wait-timeout" in end.message and s.state is State.FINISHED

    s = AdaptiveScheduler(job(4), AdaptiveSettings(resource_wait_timeout_ms=100, resource_stabilization_timeout_ms=10_000))
    wait = timer(s.start(), RESOURCE_WAIT)
    s.resources_changed(1)
    assert s.resource_wait_elapsed(wait.epoch) == [CreateExecutionGraph({SRC: 1, MAP: 1, SINK: 1})]


def test_a_negative_resource_wait_timeout_waits_for_ever():
    s = AdaptiveScheduler(job(4), AdaptiveSettings(resource_wait_timeout_ms=-1, reactive=True))
    assert not any(isinstance(c, StartTimer) for c in s.start())


# -- Executing: scaling up -----------------------------------------------------------------------

def executing(desired=4, slots=1, **settings) -> AdaptiveScheduler:
    s = AdaptiveScheduler(job(desired), AdaptiveSettings(**settings))
    s.start()
    t = s.resources_changed(slots)
    if slots < s.desired_slots:
        s.stabilization_elapsed(timer(t, STABILIZATION).epoch)
    s.execution_graph_created()
    assert s.state is State.EXECUTING
    return s


def test_new_slots_rescale_after_the_stabilization_timeout_from_a_new_checkpoint_if_none_completed():
    s = executing(slots=1, resource_stabilization_timeout_ms=500)
    t = timer(s.resources_changed(2), STABILIZATION)
    assert t.delay_ms == 500 and s.state is State.EXECUTING
    assert s.stabilization_elapsed(t.epoch) == [TriggerCheckpoint()]
    assert s.state is State.EXECUTING  # runs on until the checkpoint completed
    [restart] = s.checkpoint_completed()
    assert isinstance(restart, RestartTasks) and not restart.counted and s.state is State.RESTARTING
    assert s.tasks_stopped() == [CreateExecutionGraph({SRC: 2, MAP: 2, SINK: 1})]
    assert s.rescales == 1


def test_with_a_completed_checkpoint_the_rescale_restarts_at_once():
    s = executing(slots=1)
    s.checkpoint_completed()
    t = timer(s.resources_changed(3), STABILIZATION)
    [restart] = s.stabilization_elapsed(t.epoch)
    assert isinstance(restart, RestartTasks) and not restart.counted


def test_an_increase_below_min_parallelism_increase_does_not_rescale():
    # Flink's rule is per vertex: some vertex must grow by at least the minimum (1 -> 6 here)
    s = executing(desired=8, slots=1, min_parallelism_increase=5)
    s.checkpoint_completed()
    assert s.resources_changed(3) == []  # +2 for source and map
    assert s.resources_changed(5) == []  # +4 (the sink stays at its max parallelism 1)
    t = timer(s.resources_changed(6), STABILIZATION)
    assert isinstance(s.stabilization_elapsed(t.epoch)[0], RestartTasks)
    s.tasks_stopped()
    assert s.parallelism == {SRC: 6, MAP: 6, SINK: 1}


def test_slots_that_go_again_before_the_stabilization_timeout_do_not_rescale():
    s = executing(slots=1)
    s.checkpoint_completed()
    t = timer(s.resources_changed(2), STABILIZATION)
    assert s.resources_changed(1) == []
    assert s.stabilization_elapsed(t.epoch) == []
    assert s.state is State.EXECUTING


def test_a_job_at_its_wish_does_not_rescale_on_more_slots():
    s = executing(desired=2, slots=2)
    assert s.resources_changed(5) == []


# -- failures, scale down ------------------------------------------------------------------------

def test_a_failure_restarts_counted_when_the_strategy_allows_else_the_job_fails():
    s = executing(desired=2, slots=2)
    [restart] = s.task_failed(restart_allowed=True)
    assert restart.counted and s.state is State.RESTARTING
    assert s.tasks_stopped() == [CreateExecutionGraph({SRC: 2, MAP: 2, SINK: 1})]
    s.execution_graph_created()
    assert s.task_failed(restart_allowed=False) == [CancelTasks("the job fails")]
    assert s.state is State.FAILING
    assert s.tasks_stopped() == [JobTerminated(JobStatus.FAILED)]


def test_reactive_mode_scales_down_on_a_lost_task_manager_as_a_counted_restart():
    # Flink: the lost TaskManager's tasks fail; Executing asks the restart strategy like for any
    # failure, and the restart creates the graph at the slots that are left
    s = executing(desired=2, slots=4, reactive=True)  # reactive: all 4 slots (max parallelism 128)
    assert s.parallelism == {SRC: 4, MAP: 4, SINK: 1}
    s.resources_changed(2)
    [restart] = s.task_failed(restart_allowed=True)
    assert isinstance(restart, RestartTasks) and restart.counted
    assert s.tasks_stopped() == [CreateExecutionGraph({SRC: 2, MAP: 2, SINK: 1})]


def test_in_reactive_mode_the_restart_strategy_limit_fails_the_job_too():
    s = executing(desired=2, slots=4, reactive=True)
    s.resources_changed(2)
    assert s.task_failed(restart_allowed=False) == [CancelTasks("the job fails")]
    assert s.state is State.FAILING
    assert s.tasks_stopped() == [JobTerminated(JobStatus.FAILED)]


def test_a_rescale_is_not_counted_but_a_failure_after_it_is():
    s = executing(desired=4, slots=2)
    s.has_checkpoint = True
    [timer] = s.resources_changed(4)
    [rescale] = s.stabilization_elapsed(timer.epoch)
    assert isinstance(rescale, RestartTasks) and not rescale.counted
    s.tasks_stopped()
    s.execution_graph_created()
    [restart] = s.task_failed(restart_allowed=True)
    assert restart.counted


def test_a_restart_without_any_slot_waits_for_resources():
    s = executing(desired=2, slots=2, reactive=True)
    s.resources_changed(0)
    s.task_failed(restart_allowed=True)
    out = s.tasks_stopped()
    assert s.state is State.WAITING_FOR_RESOURCES and not any(isinstance(c, CreateExecutionGraph) for c in out)
    assert isinstance(s.resources_changed(1)[0], StartTimer)


def test_failures_while_restarting_are_consequences_and_change_nothing():
    s = executing(desired=2, slots=2, reactive=True)
    s.task_failed(restart_allowed=True)
    assert s.task_failed(restart_allowed=False) == [] and s.state is State.RESTARTING


# -- cancel, stop with savepoint, finish ---------------------------------------------------------

def test_cancel_while_waiting_ends_at_once_and_while_executing_cancels_the_tasks():
    s = AdaptiveScheduler(job())
    s.start()
    assert s.cancel() == [JobTerminated(JobStatus.CANCELED)]
    s = executing(desired=2, slots=2)
    assert s.cancel() == [CancelTasks("cancelled by the user")] and s.state is State.CANCELING
    assert s.tasks_stopped() == [JobTerminated(JobStatus.CANCELED)]
    assert s.cancel() == []


def test_stop_with_savepoint_finishes_or_returns_to_executing_when_the_savepoint_fails():
    s = executing(desired=2, slots=2)
    assert s.stop_with_savepoint() == [TriggerStopWithSavepoint()]
    assert s.resources_changed(8) == []  # no rescale while stopping
    assert s.savepoint_failed() == [] and s.state is State.EXECUTING
    s.stop_with_savepoint()
    assert s.job_finished() == [JobTerminated(JobStatus.FINISHED)] and s.state is State.FINISHED
    with pytest.raises(ValueError, match="stop-with-savepoint needs an executing job"):
        s.stop_with_savepoint()


def test_a_pending_rescale_is_dropped_by_a_failure():
    s = executing(slots=1)
    t = timer(s.resources_changed(2), STABILIZATION)
    s.stabilization_elapsed(t.epoch)  # TriggerCheckpoint
    s.task_failed(restart_allowed=True)
    s.tasks_stopped()
    s.execution_graph_created()
    assert s.checkpoint_completed() == []
