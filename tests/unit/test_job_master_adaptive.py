"""JobMasterCore under the adaptive scheduler (jobmanager.scheduler: adaptive, scheduler-mode:
reactive), as Flink documents it: a job starts with the slots there are, below its parallelism;
new slots rescale it after the stabilization timeout from its latest checkpoint (key groups
redistributed); in reactive mode a lost TaskManager scales it down through a restart the restart
strategy counts (as every failure under Flink's adaptive scheduler; only rescales are free)."""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from millstream.datastream import StreamExecutionEnvironment
from millstream.jobmanager.jobmaster.adaptive_scheduler import AdaptiveSettings, adaptive_settings
from millstream.jobmanager.jobmaster.job_master_core import (
    CancelTask, DeclareRequirements, DeployTask, JobMasterCore, StartAdaptiveTimer, StartRestartTimer,
    TriggerRescaleCheckpoint, task_key,
)
from millstream.proto import cluster_pb2 as cpb
from millstream.runtime import config as cfg
from millstream.runtime.checkpoint_storage import CompletedCheckpoint, FileStateHandle
from millstream.runtime.execution_state import ExecutionState, JobStatus
from millstream.runtime.restart_strategy import FixedDelay, NoRestart, RestartStrategySpec
from tests.unit.test_job_master import _built

S = ExecutionState


def _core(settings: AdaptiveSettings, parallelism: int = 4, restart_spec: RestartStrategySpec = NoRestart()) -> JobMasterCore:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.set_max_parallelism(8)
    env.from_sequence(1, 100).key_by(lambda x: x % 3).map(lambda x: x).print()
    counter = itertools.count()
    core = JobMasterCore(env.get_job_graph("job").proto, new_id=lambda: next(counter).to_bytes(16, "big"),
                         restart_spec=restart_spec)
    core.enable_adaptive(settings)
    return core


def _offer(core: JobMasterCore, tm: str, n: int, first: int) -> list:
    offers = [cpb.SlotOffer(allocation_id=bytes([100 + i]) * 16, slot_index=i - first) for i in range(first, first + n)]
    accepted, commands = core.offer_slots(tm, f"{tm}:1", f"{tm}:2", offers)
    assert len(accepted) == n
    return _built(core, commands)


def _fire(core: JobMasterCore, commands: list, kind: str = "stabilization") -> list:
    timer = [c for c in commands if isinstance(c, StartAdaptiveTimer) and c.kind == kind][-1]  # the latest
    return _built(core, core.adaptive_timer_elapsed(timer.kind, timer.epoch))


def _run_all(core: JobMasterCore) -> None:
    for execution in core.current_executions():
        core.update_task_state(execution.attempt_id, S.RUNNING)


def _cancelled(core: JobMasterCore, commands: list) -> list:
    out = []
    for c in commands:
        if isinstance(c, CancelTask):
            out += _built(core, core.update_task_state(c.attempt_id, S.CANCELED))
    return out


def _parallelism(core: JobMasterCore) -> set[int]:
    return {v.parallelism for v in core.vertex_summaries()}


def test_the_job_starts_below_its_parallelism_with_the_slots_there_are() -> None:
    core = _core(AdaptiveSettings(resource_stabilization_timeout_ms=500))
    started = core.start()
    assert DeclareRequirements(4) in started  # its wish, not a minimum
    deploys = _fire(core, _offer(core, "tm-1", 1, 0))
    assert core.status is JobStatus.RUNNING and _parallelism(core) == {1}
    assert len([c for c in deploys if isinstance(c, DeployTask)]) == 2  # one subtask of each of the two vertices
    assert len(core.current_executions()) == 2


def test_new_slots_rescale_a_running_job_from_its_latest_checkpoint_with_key_groups_redistributed(tmp_path: Path) -> None:
    core = _core(AdaptiveSettings(resource_stabilization_timeout_ms=500))
    core.start()
    _fire(core, _offer(core, "tm-1", 1, 0))
    _run_all(core)
    # a completed checkpoint of the parallelism-1 graph: every task's state in one file
    states = {task_key(e.vertex): FileStateHandle(str(tmp_path / f"{i}"), 1) for i, e in enumerate(core.current_executions())}
    core.restore_point = CompletedCheckpoint(core.job_id.hex(), 7, 0, tmp_path, states)
    commands = _offer(core, "tm-2", 1, 1)
    assert _parallelism(core) == {1}  # not before the stabilization timeout
    restart = _fire(core, commands)
    assert core.status is JobStatus.RESTARTING and core.num_restarts == 0
    deploys = [c for c in _cancelled(core, restart) if isinstance(c, DeployTask)]
    assert core.status is JobStatus.RUNNING and _parallelism(core) == {2}
    assert len(deploys) == 4
    keyed = [d.tdd for d in deploys if d.tdd.restore.is_rescaled and len(d.tdd.restore.rescaled)]
    assert {d.restore.checkpoint_id for d in keyed} == {7}
    assert {d.subtask_index for d in keyed} == {0, 1}  # both new subtasks read the old one's key groups
    assert {c.resource_id for c in deploys} == {"tm-1", "tm-2"}


def test_a_source_subtask_of_a_rescaled_graph_is_given_every_old_source_snapshot(tmp_path: Path) -> None:
    # so that a sequence or generator source can cut the unread indices anew and a subtask the
    # scale-up added reads too; operator state still goes round-robin (take_operator_state)
    core = _core(AdaptiveSettings(resource_stabilization_timeout_ms=500))
    core.start()
    _fire(core, _offer(core, "tm-1", 2, 0))
    _run_all(core)
    assert _parallelism(core) == {2}
    states = {task_key(e.vertex): FileStateHandle(str(tmp_path / f"{i}"), 1) for i, e in enumerate(core.current_executions())}
    core.restore_point = CompletedCheckpoint(core.job_id.hex(), 7, 0, tmp_path, states)
    deploys = [c.tdd for c in _cancelled(core, _fire(core, _offer(core, "tm-2", 1, 2))) if isinstance(c, DeployTask)]
    assert _parallelism(core) == {3}
    sources = sorted((d for d in deploys if d.vertex.is_source), key=lambda d: d.subtask_index)
    assert [[(r.old_subtask_index, r.take_operator_state) for r in d.restore.rescaled] for d in sources] == [
        [(0, True), (1, False)], [(0, False), (1, True)], [(0, False), (1, False)]]


def test_without_a_completed_checkpoint_the_rescale_takes_one_first() -> None:
    core = _core(AdaptiveSettings(resource_stabilization_timeout_ms=500))
    core.start()
    _fire(core, _offer(core, "tm-1", 1, 0))
    _run_all(core)
    assert _fire(core, _offer(core, "tm-2", 1, 1)) == [TriggerRescaleCheckpoint()]
    assert core.status is JobStatus.RUNNING
    restart = _built(core, core.checkpoint_completed())
    assert core.status is JobStatus.RESTARTING
    _cancelled(core, restart)
    assert _parallelism(core) == {2}


REACTIVE = AdaptiveSettings(resource_stabilization_timeout_ms=500, reactive=True, resource_wait_timeout_ms=-1)


def _restarted(core: JobMasterCore, commands: list) -> list:
    """The shell's part of a counted restart: the cancelled tasks report, the backoff fires."""
    out = _cancelled(core, commands)
    [timer] = [c for c in commands if isinstance(c, StartRestartTimer)]
    return out + _built(core, core.restart_backoff_elapsed(timer.restart))


def test_reactive_mode_uses_every_slot_and_scales_down_on_a_lost_task_manager_through_a_counted_restart() -> None:
    core = _core(REACTIVE, parallelism=1, restart_spec=FixedDelay(attempts=1, delay_ms=100))
    assert DeclareRequirements(8) in core.start()  # every slot up to the max parallelism
    _fire(core, _offer(core, "tm-1", 2, 0))
    _run_all(core)
    commands = _offer(core, "tm-2", 2, 2)
    assert _fire(core, commands) == [TriggerRescaleCheckpoint()]  # no checkpointing: the shell answers at once
    _cancelled(core, _built(core, core.checkpoint_completed()))
    assert _parallelism(core) == {4} and core.num_restarts == 1  # the rescale: the strategy was not asked
    assert [(r.old_parallelism, r.new_parallelism) for r in core.rescales] == [(2, 4)]
    _run_all(core)
    lost = core.task_manager_lost("tm-2", "killed")
    assert core.status is JobStatus.RESTARTING
    assert StartRestartTimer(100, 2) in lost  # a failure: the strategy's backoff
    _restarted(core, lost)
    assert core.status is JobStatus.RUNNING and _parallelism(core) == {2}
    assert {e.slot.resource_id for e in core.current_executions()} == {"tm-1"}
    assert [(r.old_parallelism, r.new_parallelism) for r in core.rescales] == [(2, 4), (4, 2)]
    assert "rescaling" in core.rescales[0].reason and "tm-2 was lost" in core.rescales[1].reason
    # Flink's rescale history: what started each rescale, when, and each vertex before and after
    assert [r.trigger_cause for r in core.rescales] == ["NEW_RESOURCE_AVAILABLE", "RECOVERABLE_FAILOVER"]
    assert all(0 < r.start_timestamp_ms <= r.timestamp_ms for r in core.rescales)
    assert len({r.rescale_id for r in core.rescales}) == 2 and all(len(r.rescale_id) == 16 for r in core.rescales)
    assert [[(v.pre_rescale_parallelism, v.post_rescale_parallelism) for v in r.vertices] for r in core.rescales] == [
        [(2, 4)] * len(core.rescales[0].vertices), [(4, 2)] * len(core.rescales[1].vertices)]
    assert {v.desired_parallelism for r in core.rescales for v in r.vertices} == {8}  # reactive: the max parallelism
    _run_all(core)
    boom = core.current_executions()[0]
    core.update_task_state(boom.attempt_id, S.FAILED, cpb.JobFailure(message="boom"))
    assert core.status is JobStatus.FAILING  # the one allowed restart was the scale-down's


def test_in_reactive_mode_a_lost_task_manager_fails_a_job_whose_strategy_allows_no_restart() -> None:
    core = _core(REACTIVE)
    core.start()
    _fire(core, _offer(core, "tm-1", 1, 0) + _offer(core, "tm-2", 1, 1))
    _run_all(core)
    _cancelled(core, core.task_manager_lost("tm-2", "killed"))
    assert core.status is JobStatus.FAILED
    assert "TaskManager tm-2 was lost" in core.failure.message


def test_the_settings_come_from_the_cluster_configuration() -> None:
    assert adaptive_settings(cfg.Configuration()) is None
    c = cfg.Configuration.from_dict({
        cfg.JOBMANAGER_SCHEDULER.key: "adaptive",
        cfg.ADAPTIVE_MIN_PARALLELISM_INCREASE.key: "3",
        cfg.ADAPTIVE_RESOURCE_STABILIZATION_TIMEOUT.key: "2 s",
        cfg.ADAPTIVE_RESOURCE_WAIT_TIMEOUT.key: "1 min"})
    assert adaptive_settings(c) == AdaptiveSettings(3, 2000, 60_000, reactive=False)
    # reactive mode: Flink's defaults there are "wait for ever" and "no stabilization wait"
    assert adaptive_settings(cfg.Configuration.from_dict({cfg.SCHEDULER_MODE.key: "reactive"})) == AdaptiveSettings(
        1, 0, -1, reactive=True)
    set_explicitly = cfg.Configuration.from_dict({cfg.SCHEDULER_MODE.key: "REACTIVE",
                                                  cfg.ADAPTIVE_RESOURCE_STABILIZATION_TIMEOUT.key: "3 s",
                                                  cfg.ADAPTIVE_RESOURCE_WAIT_TIMEOUT.key: "1 min"})
    assert adaptive_settings(set_explicitly) == AdaptiveSettings(1, 3000, 60_000, reactive=True)
    bad = cfg.Configuration.from_dict({cfg.JOBMANAGER_SCHEDULER.key: "adaptive",
                                       cfg.ADAPTIVE_MIN_PARALLELISM_INCREASE.key: "0"})
    with pytest.raises(ValueError, match="min-parallelism-increase must be at least 1"):
        adaptive_settings(bad)
    with pytest.raises(ValueError, match="jobmanager.scheduler"):
        cfg.Configuration.from_dict({cfg.JOBMANAGER_SCHEDULER.key: "fancy"})


def test_the_first_graph_runs_attempt_0_and_a_rescaled_one_the_next_attempt() -> None:
    core = _core(AdaptiveSettings(resource_stabilization_timeout_ms=500))
    core.start()
    _fire(core, _offer(core, "tm-1", 1, 0))
    assert {e.attempt_number for e in core.current_executions()} == {0}
    _run_all(core)
    _fire(core, _offer(core, "tm-2", 1, 1))
    _cancelled(core, _built(core, core.checkpoint_completed()))
    assert {e.attempt_number for e in core.current_executions()} == {1}


def test_in_reactive_mode_broken_exchanges_count_and_the_strategy_limit_ends_the_job_failed() -> None:
    # The bug: a broken exchange (a secondary failure) in reactive mode never asked the strategy,
    # so a job whose exchanges kept breaking restarted for ever. Now each is one failure.
    core = _core(REACTIVE, restart_spec=FixedDelay(attempts=2, delay_ms=10))
    core.start()
    _fire(core, _offer(core, "tm-1", 1, 0) + _offer(core, "tm-2", 1, 1))
    for restart in (1, 2):
        _run_all(core)
        survivor = next(e for e in core.current_executions() if e.slot.resource_id == "tm-1")
        commands = core.update_task_state(survivor.attempt_id, S.FAILED,
                                          cpb.JobFailure(message="exchange broke", secondary=True))
        assert core.status is JobStatus.RESTARTING and StartRestartTimer(10, restart) in commands
        _restarted(core, commands)
        assert core.status is JobStatus.RUNNING and core.num_restarts == restart
    _run_all(core)
    survivor = next(e for e in core.current_executions() if e.slot.resource_id == "tm-1")
    _cancelled(core, core.update_task_state(survivor.attempt_id, S.FAILED,
                                            cpb.JobFailure(message="exchange broke", secondary=True)))
    assert core.status is JobStatus.FAILED


def test_cancel_while_waiting_for_resources_cancels_the_job_and_its_timers() -> None:
    core = _core(AdaptiveSettings(resource_stabilization_timeout_ms=500))
    core.start()
    commands = _offer(core, "tm-1", 1, 0)
    core.cancel()
    assert core.status is JobStatus.CANCELED
    assert _fire(core, commands) == []
