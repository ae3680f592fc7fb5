"""JobMasterCore restarts, from Flink's rules (DefaultScheduler, full failover, no checkpoints):
a failure the strategy may restart moves the job RUNNING -> RESTARTING, cancels every task, and
only once every task stopped *and* the backoff passed does every subtask get a new attempt (attempt
number + 1, new id); RESTARTING -> RUNNING. FAILING only when the strategy gives up."""
from __future__ import annotations

import itertools

import pytest

from millstream.datastream import StreamExecutionEnvironment
from millstream.runtime.execution_state import ExecutionState, JobStatus
from millstream.jobmanager.jobmaster.job_master_core import (
    BuildDeployments,
    CancelTask,
    DeclareRequirements,
    DeployTask,
    FreeSlot,
    JobMasterCore,
    JobStatusChanged,
    StartRestartTimer,
)
from millstream.proto import cluster_pb2 as cpb
from millstream.runtime.restart_strategy import ExponentialDelay, FailureRate, FixedDelay, NoRestart, RestartStrategySpec
from tests.unit.test_job_master import _built, _offers

S = ExecutionState


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def _core(spec: RestartStrategySpec, parallelism: int = 2, clock: Clock | None = None) -> JobMasterCore:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.from_sequence(1, 100).map(lambda x: x).rebalance().map(lambda x: x).print()
    counter = itertools.count()
    return JobMasterCore(env.get_job_graph("job").proto, new_id=lambda: next(counter).to_bytes(16, "big"),
                         restart_spec=spec, clock=clock or Clock())


def _running(core: JobMasterCore, tms: tuple[str, ...] = ("tm-1",)) -> None:
    core.start()
    per_tm = core.required_slots // len(tms)
    for i, tm in enumerate(tms):
        _, commands = core.offer_slots(tm, f"{tm}:1", f"{tm}:2", _offers(per_tm, start=i * per_tm))
        _built(core, commands)
    for execution in core.current_executions():
        core.update_task_state(execution.attempt_id, S.RUNNING)


def _fail_one(core: JobMasterCore, message: str = "boom") -> list:
    victim = core.current_executions()[0]
    return core.update_task_state(victim.attempt_id, S.FAILED, cpb.JobFailure(message=message))


def _confirm_cancels(core: JobMasterCore, commands: list) -> list:
    out = []
    for command in commands:
        if isinstance(command, CancelTask):
            out += core.update_task_state(command.attempt_id, S.CANCELED)
    return out


def _of(commands: list, kind: type) -> list:
    return [c for c in commands if isinstance(c, kind)]


def test_a_restartable_failure_goes_restarting_cancels_every_task_and_starts_the_backoff_timer() -> None:
    core = _core(FixedDelay(attempts=2, delay_ms=700))
    _running(core)
    commands = _fail_one(core)
    assert core.status is JobStatus.RESTARTING
    assert JobStatusChanged(JobStatus.RESTARTING) in commands
    assert not any(c == JobStatusChanged(JobStatus.FAILING) for c in commands)
    assert len(_of(commands, CancelTask)) == len(core.current_executions()) - 1  # all but the failed one
    assert _of(commands, StartRestartTimer) == [StartRestartTimer(700, 1)]
    assert not _of(commands, FreeSlot)  # the job keeps its slots


def test_the_restart_waits_for_both_the_cancellations_and_the_backoff() -> None:
    core = _core(FixedDelay(attempts=2, delay_ms=700))
    _running(core)
    old = {e.attempt_id: e.attempt_number for e in core.current_executions()}
    commands = _fail_one(core)
    # The timer fires first: some tasks are still cancelling, nothing restarts.
    assert core.restart_backoff_elapsed(1) == []
    cancels = _of(commands, CancelTask)
    core.update_task_state(cancels[0].attempt_id, S.CANCELED)
    assert core.status is JobStatus.RESTARTING and core.num_restarts == 0
    out = _confirm_cancels(core, cancels[1:])
    assert core.status is JobStatus.RUNNING and core.num_restarts == 1
    assert JobStatusChanged(JobStatus.RUNNING) in out
    deploys = [c for c in _built(core, out) if isinstance(c, DeployTask)]
    assert len(deploys) == len(old)
    new = core.current_executions()
    assert not {e.attempt_id for e in new} & set(old)  # new attempt ids
    assert {e.attempt_number for e in new} == {1}
    assert {d.tdd.attempt_number for d in deploys} == {1}


def test_cancellations_first_then_the_timer_restarts() -> None:
    core = _core(FixedDelay(attempts=1, delay_ms=50))
    _running(core)
    commands = _fail_one(core)
    assert not _confirm_cancels(core, _of(commands, CancelTask)) or core.status is JobStatus.RESTARTING
    assert core.status is JobStatus.RESTARTING
    out = core.restart_backoff_elapsed(1)
    assert core.status is JobStatus.RUNNING and _of(out, BuildDeployments)


def test_a_stale_timer_and_reports_of_old_attempts_are_ignored() -> None:
    core = _core(FixedDelay(attempts=3, delay_ms=10))
    _running(core)
    old = core.current_executions()
    _confirm_cancels(core, _fail_one(core))
    core.restart_backoff_elapsed(1)
    assert core.status is JobStatus.RUNNING
    # A late report of the failed attempt changes nothing; a timer of restart 1 fires twice: ignored.
    assert core.update_task_state(old[1].attempt_id, S.FAILED, cpb.JobFailure(message="zombie")) == []
    assert core.restart_backoff_elapsed(1) == []
    assert core.status is JobStatus.RUNNING and core.num_restarts == 1


def test_the_strategy_gives_up_after_its_attempts_with_the_last_cause_and_the_restart_count() -> None:
    core = _core(FixedDelay(attempts=2, delay_ms=0))
    _running(core)
    for n in (1, 2):
        cancelled = _confirm_cancels(core, _fail_one(core, f"failure {n}"))
        _built(core, cancelled + core.restart_backoff_elapsed(n))
        assert core.status is JobStatus.RUNNING and core.num_restarts == n
        for execution in core.current_executions():
            core.update_task_state(execution.attempt_id, S.RUNNING)
    commands = _fail_one(core, "failure 3")
    assert core.status is JobStatus.FAILING and not _of(commands, StartRestartTimer)
    commands = _confirm_cancels(core, commands)
    assert core.status is JobStatus.FAILED
    final = [c for c in commands if isinstance(c, JobStatusChanged) and c.status is JobStatus.FAILED][0]
    assert final.failure is not None and final.failure.message.startswith("failure 3")
    assert "restarts: 2" in final.failure.message and "fixed-delay" in final.failure.message
    assert [f.message for f in core.root_causes] == ["failure 1", "failure 2", "failure 3"]
    assert len(_of(commands, FreeSlot)) == core.graph.total_required_slots() and commands[-1] == DeclareRequirements(0)


def test_without_a_restart_strategy_the_job_fails_as_before_without_a_restart_count() -> None:
    core = _core(NoRestart())
    _running(core)
    _confirm_cancels(core, _fail_one(core, "boom"))
    assert core.status is JobStatus.FAILED and core.num_restarts == 0
    assert core.failure is not None and core.failure.message == "boom"


def test_failure_rate_and_exponential_delay_use_the_clock_and_the_backoff() -> None:
    clock = Clock()
    core = _core(FailureRate(max_failures_per_interval=1, failure_rate_interval_ms=10_000, delay_ms=5), clock=clock)
    _running(core)
    _built(core, _confirm_cancels(core, _fail_one(core)) + core.restart_backoff_elapsed(1))
    assert core.status is JobStatus.RUNNING
    clock.now += 5_000  # a second failure within the interval: too many
    _fail_one(core)
    assert core.status is JobStatus.FAILING

    exp = _core(ExponentialDelay(initial_backoff_ms=100, max_backoff_ms=1000, backoff_multiplier=2.0, jitter_factor=0.0))
    _running(exp)
    assert _of(_fail_one(exp), StartRestartTimer) == [StartRestartTimer(100, 1)]


def test_a_failure_of_a_task_being_cancelled_for_the_restart_does_not_count_again() -> None:
    core = _core(FixedDelay(attempts=1, delay_ms=0))
    _running(core)
    commands = _fail_one(core, "root")
    for cancel in _of(commands, CancelTask):  # the neighbours fail because the exchange broke
        core.update_task_state(cancel.attempt_id, S.FAILED, cpb.JobFailure(message="broken exchange", secondary=True))
    assert core.status is JobStatus.RESTARTING
    core.restart_backoff_elapsed(1)
    assert core.status is JobStatus.RUNNING and core.num_restarts == 1
    assert core.failure is not None and core.failure.message == "root"


def test_a_lost_task_manager_restarts_on_the_remaining_slots_plus_replacements() -> None:
    core = _core(FixedDelay(attempts=1, delay_ms=0), parallelism=2)
    _running(core, tms=("tm-1", "tm-2"))
    commands = core.task_manager_lost("tm-2", "heartbeat timed out")
    assert core.status is JobStatus.RESTARTING
    assert "tm-2" in core.failure.message
    assert all(c.resource_id == "tm-1" for c in _of(commands, CancelTask))  # nothing is sent to the lost one
    out = _confirm_cancels(core, commands) + core.restart_backoff_elapsed(1)
    assert core.status is JobStatus.RUNNING
    # Only tm-1's slot is left: no deployment yet, the job declares its needs again.
    assert DeclareRequirements(core.required_slots) in out and not _of(out, BuildDeployments)
    assert core.slot_wait() == (2, 1)
    accepted, commands = core.offer_slots("tm-3", "tm-3:1", "tm-3:2", [cpb.SlotOffer(allocation_id=b"\x07" * 16, slot_index=0)])
    deploys = [c for c in _built(core, commands) if isinstance(c, DeployTask)]
    assert accepted and len(deploys) == len(core.current_executions())
    assert {d.resource_id for d in deploys} == {"tm-1", "tm-3"}


def test_replacement_slots_offered_while_restarting_are_kept_for_the_restart() -> None:
    core = _core(FixedDelay(attempts=1, delay_ms=0), parallelism=2)
    _running(core, tms=("tm-1", "tm-2"))
    commands = core.task_manager_lost("tm-2", "killed")
    accepted, more = core.offer_slots("tm-3", "tm-3:1", "tm-3:2", [cpb.SlotOffer(allocation_id=b"\x07" * 16, slot_index=0)])
    assert accepted and not _of(more, BuildDeployments)  # not before the restart
    out = _confirm_cancels(core, commands) + core.restart_backoff_elapsed(1)
    assert core.status is JobStatus.RUNNING and _of(out, BuildDeployments)


def test_no_slots_within_the_timeout_while_restarting_fails_the_job_naming_the_restart() -> None:
    core = _core(FixedDelay(attempts=5, delay_ms=0), parallelism=2)
    _running(core, tms=("tm-1", "tm-2"))
    _confirm_cancels(core, core.task_manager_lost("tm-2", "killed"))
    core.restart_backoff_elapsed(1)
    commands = core.resources_unavailable("Could not acquire the minimum required resources (not enough slots): ...")
    assert core.status is JobStatus.FAILED  # not restarted again
    final = [c for c in commands if isinstance(c, JobStatusChanged) and c.status is JobStatus.FAILED][0]
    assert "not enough slots" in final.failure.message and "restart 1" in final.failure.message


def test_cancel_while_restarting_cancels_the_job_and_the_timer_is_then_ignored() -> None:
    core = _core(FixedDelay(attempts=1, delay_ms=1000))
    _running(core)
    commands = _fail_one(core)
    core.cancel()
    _confirm_cancels(core, commands)
    assert core.status is JobStatus.CANCELED
    assert core.restart_backoff_elapsed(1) == []
    assert core.status is JobStatus.CANCELED


# -- region failover ------------------------------------------------------------------------------

def _parallel_pipelines(spec: RestartStrategySpec) -> JobMasterCore:
    """source -> map -> print, forward and unchained at parallelism 2: two pipelined regions."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.disable_operator_chaining()
    env.from_sequence(1, 100).map(lambda x: x).print()
    counter = itertools.count()
    return JobMasterCore(env.get_job_graph("pipelines").proto, new_id=lambda: next(counter).to_bytes(16, "big"),
                         restart_spec=spec, clock=Clock())


def test_a_failure_restarts_only_its_pipelined_region_and_the_job_stays_running() -> None:
    core = _parallel_pipelines(FixedDelay(attempts=2, delay_ms=50))
    assert sorted(len(r) for r in core.regions) == [3, 3]
    _running(core)
    victim = next(e for e in core.current_executions() if e.vertex.subtask_index == 1 and "Map" in e.name)
    others = [e for e in core.current_executions() if e.vertex.subtask_index == 0]
    commands = core.update_task_state(victim.attempt_id, S.FAILED, cpb.JobFailure(message="boom"))
    assert core.status is JobStatus.RUNNING and not _of(commands, JobStatusChanged)
    cancelled = {c.attempt_id for c in _of(commands, CancelTask)}
    region = {e.attempt_id for e in core.current_executions() if e.vertex.subtask_index == 1} - {victim.attempt_id}
    assert cancelled == region  # the other pipeline keeps running untouched
    assert _of(commands, StartRestartTimer) == [StartRestartTimer(50, 1, core._region_of[victim.vertex.id])]
    timer = _of(commands, StartRestartTimer)[0]
    _confirm_cancels(core, commands)
    redeployed = _built(core, core.region_backoff_elapsed(timer.region, timer.restart))
    deployed = _of(redeployed, DeployTask)
    assert len(deployed) == 3 and {d.tdd.subtask_index for d in deployed} == {1}
    assert all(d.tdd.attempt_number == 1 for d in deployed)
    assert core.num_restarts == 1 and all(e.state is S.RUNNING for e in others)
    for d in deployed:
        core.update_task_state(d.attempt_id, S.RUNNING)
    for e in core.current_executions():
        core.update_task_state(e.attempt_id, S.FINISHED)
    assert core.status is JobStatus.FINISHED


def test_region_restarts_count_against_the_strategy_and_exhausting_it_fails_the_job() -> None:
    core = _parallel_pipelines(FixedDelay(attempts=1, delay_ms=10))
    _running(core)

    def fail(subtask: int) -> list:
        victim = next(e for e in core.current_executions() if e.vertex.subtask_index == subtask and "Map" in e.name)
        return core.update_task_state(victim.attempt_id, S.FAILED, cpb.JobFailure(message=f"boom {subtask}"))

    first = fail(0)
    timer = _of(first, StartRestartTimer)[0]
    _confirm_cancels(core, first)
    for d in _of(_built(core, core.region_backoff_elapsed(timer.region, timer.restart)), DeployTask):
        core.update_task_state(d.attempt_id, S.RUNNING)
    second = fail(1)
    assert core.status is JobStatus.FAILING and not _of(second, StartRestartTimer)
    _confirm_cancels(core, second)
    assert core.status is JobStatus.FAILED
    assert "boom 1" in core.failure.message and "restarts: 1" in core.failure.message


def test_a_lost_task_manager_restarts_the_whole_job() -> None:
    core = _parallel_pipelines(FixedDelay(attempts=2, delay_ms=10))
    _running(core, tms=("tm-1", "tm-2"))
    commands = core.task_manager_lost("tm-2", "heartbeat timed out")
    assert core.status is JobStatus.RESTARTING and _of(commands, StartRestartTimer)[0].region is None


def test_stop_after_a_savepoint_cancels_nothing_the_tasks_finish_and_then_the_job() -> None:
    """Flink's stop-with-savepoint: the tasks end by themselves once the synchronous savepoint is
    complete (their sinks commit on its notification), FINISHED, not CANCELED; the job FINISHES
    only when every task did."""
    core = _core(FixedDelay(attempts=2, delay_ms=10))
    _running(core)
    commands = core.stop()
    assert _of(commands, CancelTask) == [] and core.status is JobStatus.RUNNING
    executions = core.current_executions()
    for execution in executions[:-1]:
        core.update_task_state(execution.attempt_id, S.FINISHED)
    assert core.status is JobStatus.RUNNING  # one task is still committing
    core.update_task_state(executions[-1].attempt_id, S.FINISHED)
    assert core.status is JobStatus.FINISHED and core.num_restarts == 0
    assert core.tasks_per_state() == {"FINISHED": len(executions)}


def test_exception_history_records_each_root_cause_with_time_and_taskmanager_bounded() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.from_sequence(1, 100).map(lambda x: x).rebalance().map(lambda x: x).print()
    counter = itertools.count()
    wall = Clock()
    core = JobMasterCore(env.get_job_graph("job").proto, new_id=lambda: next(counter).to_bytes(16, "big"),
                         restart_spec=FixedDelay(attempts=3, delay_ms=0), clock=Clock(), wall_clock=wall,
                         exception_history_size=2)  # web.exception-history-size
    _running(core)
    for n in (1, 2, 3):
        wall.now = 5_000 + n
        cancelled = _confirm_cancels(core, _fail_one(core, f"ValueError: failure {n}"))
        _built(core, cancelled + core.restart_backoff_elapsed(n))
        for execution in core.current_executions():
            core.update_task_state(execution.attempt_id, S.RUNNING)
    assert [f.message for f in core.root_causes] == [f"ValueError: failure {n}" for n in (1, 2, 3)]
    # Bounded: the oldest is dropped; each entry says when and on which TaskManager.
    assert [(e.failure.message, e.timestamp_ms) for e in core.exception_history] == [
        ("ValueError: failure 2", 5_002), ("ValueError: failure 3", 5_003)]
    assert {(e.location, e.taskmanager_id) for e in core.exception_history} == {("tm-1:1", "tm-1")}
    assert all(e.failure.task_name for e in core.exception_history)
    # A failure of the job itself (no task): no TaskManager.
    core.global_failure("too many failed checkpoints")
    assert (core.exception_history[-1].failure.message, core.exception_history[-1].location) == (
        "too many failed checkpoints", "")


def test_exception_history_size_must_not_be_negative() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_sequence(1, 3).print()
    with pytest.raises(ValueError, match="web.exception-history-size"):
        JobMasterCore(env.get_job_graph("job").proto, exception_history_size=-1)
