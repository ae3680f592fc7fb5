"""JobMasterCore: scheduling, execution state tracking and job status, from Flink's rules."""
from __future__ import annotations

import itertools
import logging

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
)
from millstream.proto import cluster_pb2 as cpb


def _core(parallelism: int = 2, rebalance: bool = False, group: str | None = None) -> JobMasterCore:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    ds = env.from_sequence(1, 100).map(lambda x: x)
    if rebalance:
        ds = ds.rebalance().map(lambda x: x)
        if group:
            ds.slot_sharing_group(group)
    ds.print()
    counter = itertools.count()
    return JobMasterCore(env.get_job_graph("job").proto, new_id=lambda: next(counter).to_bytes(16, "big"))


def _offers(n: int, start: int = 0) -> list[cpb.SlotOffer]:
    return [cpb.SlotOffer(allocation_id=bytes([100 + i]) * 16, slot_index=i) for i in range(start, start + n)]


def _built(core: JobMasterCore, commands: list) -> list:
    """What the shell does with a BuildDeployments command: build (in a thread there), hand back."""
    out = []
    for command in commands:
        out += core.deployments_built(command.build()) if isinstance(command, BuildDeployments) else [command]
    return out


def _deploy(core: JobMasterCore, tm: str = "tm-1") -> list[DeployTask]:
    core.start()
    _, commands = core.offer_slots(tm, f"{tm}:1", f"{tm}:2", _offers(core.required_slots))
    return [c for c in _built(core, commands) if isinstance(c, DeployTask)]


def _channels(gate: cpb.InputGateDescriptor) -> list[tuple[int, int, str]]:
    """(partition index, subpartition index, producer data address) of each channel of a gate."""
    group = cpb.ConsumedPartitionGroupDescriptor.FromString(gate.consumed_partition_group)
    return [(p.partition_index, gate.subpartition_index, p.producer_data_address) for p in group.partitions]


def _report_all(core: JobMasterCore, *states: ExecutionState) -> list:
    out = []
    for execution in core.current_executions():
        for state in states:
            out += core.update_task_state(execution.attempt_id, state)
    return out


def test_start_schedules_every_task_and_declares_one_slot_per_parallel_subtask() -> None:
    core = _core(parallelism=3)
    commands = core.start()
    assert core.status is JobStatus.RUNNING
    assert {e.state for e in core.current_executions()} == {ExecutionState.SCHEDULED}
    assert DeclareRequirements(3) in commands
    assert JobStatusChanged(JobStatus.RUNNING) in commands


def test_slot_sharing_groups_add_up_their_largest_parallelism() -> None:
    assert _core(parallelism=2, rebalance=True).required_slots == 2
    assert _core(parallelism=2, rebalance=True, group="other").required_slots == 4


def test_nothing_deploys_until_every_needed_slot_is_offered() -> None:
    core = _core(parallelism=2)
    core.start()
    accepted, commands = core.offer_slots("tm-1", "tm-1:1", "tm-1:2", _offers(1))
    assert len(accepted) == 1 and not _built(core, commands)
    accepted, commands = core.offer_slots("tm-2", "tm-2:1", "tm-2:2", _offers(1, start=1))
    deploys = [c for c in _built(core, commands) if isinstance(c, DeployTask)]
    assert len(accepted) == 1 and len(deploys) == 2
    assert {d.tm_address for d in deploys} == {"tm-1:1", "tm-2:1"}
    assert {e.state for e in core.current_executions()} == {ExecutionState.DEPLOYING}


def test_offers_beyond_the_needs_are_rejected_and_retried_offers_accepted_again() -> None:
    core = _core(parallelism=1)
    core.start()
    accepted, _ = core.offer_slots("tm", "tm:1", "tm:2", _offers(3))
    assert accepted == [_offers(1)[0].allocation_id]
    again, commands = core.offer_slots("tm", "tm:1", "tm:2", _offers(1))
    assert again == [_offers(1)[0].allocation_id] and not commands


def test_subtask_k_of_every_vertex_in_a_group_shares_slot_k() -> None:
    core = _core(parallelism=2, rebalance=True)
    deploys = _deploy(core)
    by_slot: dict[bytes, set[int]] = {}
    for d in deploys:
        by_slot.setdefault(d.tdd.allocation_id, set()).add(d.tdd.subtask_index)
    assert len(by_slot) == 2 and all(len(subtasks) == 1 for subtasks in by_slot.values())
    assert len(deploys) == 4


def test_deployment_descriptors_carry_subtask_key_groups_and_wiring() -> None:
    core = _core(parallelism=2, rebalance=True)
    deploys = _deploy(core)
    consumers = [d.tdd for d in deploys if d.tdd.input_gates]
    assert len(consumers) == 2
    for tdd in consumers:
        assert tdd.vertex.parallelism == 2 and tdd.vertex.max_parallelism == 128
        assert (tdd.key_group_start, tdd.key_group_end) == ((0, 63) if tdd.subtask_index == 0 else (64, 127))
        channels = _channels(tdd.input_gates[0])
        assert sorted(partition for partition, _, _ in channels) == [0, 1]  # REBALANCE is all-to-all
        assert {sub for _, sub, _ in channels} == {tdd.subtask_index}
        assert all(address == "tm-1:2" for _, _, address in channels)
    producers = [d.tdd for d in deploys if d.tdd.produced_partitions]
    assert all(p.produced_partitions[0].num_subpartitions == 2 for p in producers)
    # Producers are deployed before their consumers.
    assert [bool(d.tdd.input_gates) for d in deploys] == [False, False, True, True]


def test_all_tasks_finishing_finishes_the_job_and_releases_its_slots() -> None:
    core = _core(parallelism=2)
    _deploy(core)
    commands = _report_all(core, ExecutionState.INITIALIZING, ExecutionState.RUNNING, ExecutionState.FINISHED)
    assert core.status is JobStatus.FINISHED
    assert JobStatusChanged(JobStatus.FINISHED) in commands
    assert len([c for c in commands if isinstance(c, FreeSlot)]) == 2
    assert commands[-1] == DeclareRequirements(0)


def test_a_failed_task_fails_the_job_with_its_cause_after_the_others_are_cancelled() -> None:
    core = _core(parallelism=3)
    _deploy(core)
    _report_all(core, ExecutionState.INITIALIZING, ExecutionState.RUNNING)
    first, *others = core.current_executions()
    failure = cpb.JobFailure(message="ValueError: boom", traceback="Traceback ...")
    commands = core.update_task_state(first.attempt_id, ExecutionState.FAILED, failure)
    assert core.status is JobStatus.FAILING
    assert {c.attempt_id for c in commands if isinstance(c, CancelTask)} == {e.attempt_id for e in others}
    assert all(e.state is ExecutionState.CANCELING for e in others)
    for e in others:
        commands = core.update_task_state(e.attempt_id, ExecutionState.CANCELED)
    assert core.status is JobStatus.FAILED
    assert core.failure.message == "ValueError: boom" and core.failure.task_name == first.name
    changed = [c for c in commands if isinstance(c, JobStatusChanged)]
    assert changed[0].status is JobStatus.FAILED and changed[0].failure.message == "ValueError: boom"


def test_reports_from_stale_or_unknown_attempts_are_ignored() -> None:
    core = _core(parallelism=1)
    _deploy(core)
    assert core.update_task_state(b"\xff" * 16, ExecutionState.FAILED) == []
    assert core.status is JobStatus.RUNNING


def test_an_illegal_transition_is_rejected_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    core = _core(parallelism=1)
    _deploy(core)
    (execution,) = core.current_executions()
    core.update_task_state(execution.attempt_id, ExecutionState.FINISHED)
    with caplog.at_level(logging.WARNING):
        assert core.update_task_state(execution.attempt_id, ExecutionState.RUNNING) == []
    assert execution.state is ExecutionState.FINISHED
    assert "FINISHED -> RUNNING" in caplog.text


def test_a_start_reported_while_the_cancel_is_on_its_way_is_ignored_quietly(caplog: pytest.LogCaptureFixture) -> None:
    """Flink's Execution: INITIALIZING or RUNNING of a CANCELING attempt is a cancel that crossed
    the task's start (not an illegal report): the attempt stays CANCELING, nothing is warned."""
    core = _core(parallelism=1)
    _deploy(core)
    core.cancel()
    (execution,) = core.current_executions()
    assert execution.state is ExecutionState.CANCELING
    with caplog.at_level(logging.WARNING):
        assert core.update_task_state(execution.attempt_id, ExecutionState.INITIALIZING) == []
        assert core.update_task_state(execution.attempt_id, ExecutionState.RUNNING) == []
    assert execution.state is ExecutionState.CANCELING and caplog.text == ""
    core.update_task_state(execution.attempt_id, ExecutionState.CANCELED)
    assert core.status is JobStatus.CANCELED


def test_cancel_reaches_canceled_once_every_task_confirms() -> None:
    core = _core(parallelism=2)
    _deploy(core)
    _report_all(core, ExecutionState.RUNNING)
    commands = core.cancel()
    assert core.status is JobStatus.CANCELLING
    assert len([c for c in commands if isinstance(c, CancelTask)]) == 2
    a, b = core.current_executions()
    core.update_task_state(a.attempt_id, ExecutionState.CANCELED)
    assert core.status is JobStatus.CANCELLING
    core.update_task_state(b.attempt_id, ExecutionState.FINISHED)  # finished while cancelling
    assert b.state is ExecutionState.CANCELED and core.status is JobStatus.CANCELED


def test_cancel_before_deployment_needs_no_task_manager() -> None:
    core = _core(parallelism=2)
    core.start()
    commands = core.cancel()
    assert core.status is JobStatus.CANCELED
    assert not any(isinstance(c, CancelTask) for c in commands)
    assert DeclareRequirements(0) in commands


def test_losing_a_task_manager_fails_its_tasks_and_the_job() -> None:
    core = _core(parallelism=2)
    core.start()
    _built(core, core.offer_slots("tm-a", "a:1", "a:2", _offers(1))[1])
    _built(core, core.offer_slots("tm-b", "b:1", "b:2", _offers(1, start=1))[1])
    _report_all(core, ExecutionState.RUNNING)
    commands = core.task_manager_lost("tm-b", "heartbeat timed out")
    assert core.status is JobStatus.FAILING
    assert "tm-b" in core.failure.message and "heartbeat timed out" in core.failure.message
    cancels = [c for c in commands if isinstance(c, CancelTask)]
    assert [c.resource_id for c in cancels] == ["tm-a"]
    core.update_task_state(cancels[0].attempt_id, ExecutionState.CANCELED)
    assert core.status is JobStatus.FAILED


def test_missing_resources_fail_the_job_with_the_slot_managers_message() -> None:
    core = _core(parallelism=2)
    core.start()
    commands = core.resources_unavailable("Could not acquire the minimum required resources: not enough slots")
    assert core.status is JobStatus.FAILED
    assert "not enough slots" in core.failure.message
    assert DeclareRequirements(0) in commands


def test_a_failed_deployment_fails_the_task() -> None:
    core = _core(parallelism=1)
    (deploy,) = _deploy(core)
    core.deploy_failed(deploy.tdd.execution_attempt_id, "UNAVAILABLE: connection refused")
    assert core.status is JobStatus.FAILED
    assert "Could not deploy" in core.failure.message and "connection refused" in core.failure.message


def test_a_failure_while_cancelling_counts_as_cancelled_and_retried_reports_are_idempotent(caplog) -> None:
    core = _core(parallelism=2)
    _deploy(core)
    _report_all(core, ExecutionState.RUNNING)
    core.cancel()
    a, b = core.current_executions()
    core.update_task_state(a.attempt_id, ExecutionState.FAILED, cpb.JobFailure(message="consumer closed its connection"))
    with caplog.at_level(logging.WARNING):
        assert core.update_task_state(a.attempt_id, ExecutionState.CANCELED) == []  # retried report
    assert a.state is ExecutionState.CANCELED and "illegal" not in caplog.text
    core.update_task_state(b.attempt_id, ExecutionState.CANCELED)
    assert core.status is JobStatus.CANCELED and core.failure is None


def _failed_job_cause(core: JobMasterCore, commands: list) -> cpb.JobFailure:
    assert core.status is JobStatus.FAILED
    return [c for c in commands if isinstance(c, JobStatusChanged) and c.status is JobStatus.FAILED][0].failure


def test_a_neighbours_broken_exchange_reported_first_does_not_hide_the_root_cause() -> None:
    core = _core(parallelism=1, rebalance=True)  # producer -> rebalance -> consumer
    _deploy(core)
    _report_all(core, ExecutionState.INITIALIZING, ExecutionState.RUNNING)
    producer, consumer = sorted(core.current_executions(), key=lambda e: e.name)[::-1]  # "Source..." sorts after "Map"
    assert producer.name.startswith("Source")
    broken = cpb.JobFailure(message="ChannelError: the producer closed the connection", secondary=True)
    out = core.update_task_state(consumer.attempt_id, ExecutionState.FAILED, broken)
    assert core.status is JobStatus.FAILING and producer.state is ExecutionState.CANCELING
    # The producer failed first; its report arrives after the cancel that the consumer's failure sent.
    root = cpb.JobFailure(message="ValueError: bad record", traceback="Traceback ...")
    out += core.update_task_state(producer.attempt_id, ExecutionState.FAILED, root)
    assert producer.state is ExecutionState.CANCELED
    assert _failed_job_cause(core, out).message == "ValueError: bad record"


def test_a_lost_task_manager_replaces_a_secondary_failure_but_the_first_root_cause_stays() -> None:
    core = _core(parallelism=1, rebalance=True)
    _deploy(core)
    _report_all(core, ExecutionState.INITIALIZING, ExecutionState.RUNNING)
    producer, consumer = sorted(core.current_executions(), key=lambda e: e.name)[::-1]
    core.update_task_state(consumer.attempt_id, ExecutionState.FAILED, cpb.JobFailure(message="broken exchange", secondary=True))
    out = core.task_manager_lost("tm-1", "heartbeat timed out")
    cause = _failed_job_cause(core, out)
    assert "TaskManager tm-1 was lost (heartbeat timed out)" in cause.message

    core = _core(parallelism=1, rebalance=True)
    _deploy(core)
    _report_all(core, ExecutionState.INITIALIZING, ExecutionState.RUNNING)
    producer, consumer = sorted(core.current_executions(), key=lambda e: e.name)[::-1]
    core.update_task_state(consumer.attempt_id, ExecutionState.FAILED, cpb.JobFailure(message="first root cause"))
    out = core.update_task_state(producer.attempt_id, ExecutionState.FAILED, cpb.JobFailure(message="a later one"))
    assert _failed_job_cause(core, out).message == "first root cause"
