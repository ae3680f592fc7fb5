"""Consumed partition groups and deployment descriptors at high parallelism (Flink's FLINK-21110).

Flink's rules: an ALL_TO_ALL edge connects every consumer to ONE ConsumedPartitionGroup holding all
the producer's partitions, and every partition to ONE ConsumerVertexGroup holding all consumers, so
the ExecutionGraph holds O(p + c) objects per edge instead of p·c ExecutionEdges; the serialized
shuffle descriptors of a group are computed once and shared by every consumer's descriptor.
POINTWISE groups are per consumer (p ≥ c) or per producer (p < c).
"""
from __future__ import annotations

import gc
import itertools

import pytest

from millstream.datastream import StreamExecutionEnvironment
from millstream.jobmanager.jobmaster.deployment import PlannedTask, ProducerLocation, TaskDeploymentDescriptorFactory
from millstream.jobmanager.jobmaster.execution_graph import (
    ConsumedPartitionGroup,
    ConsumerVertexGroup,
    ExecutionGraph,
    InputChannel,
    InputGate,
)
from millstream.runtime.execution_state import ExecutionState, JobStatus
from millstream.jobmanager.jobmaster.job_master_core import BuildDeployments, DeployTask, JobMasterCore
from millstream.proto import cluster_pb2 as cpb
from millstream.taskmanager.task_body import _channel_specs


def identity(x):
    return x


def _graph(p: int, c: int, partition=lambda ds: ds.rebalance()) -> ExecutionGraph:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(max(p, c))
    up = env.from_sequence(1, 10).set_parallelism(p)
    partition(up).map(identity).set_parallelism(c).add_sink(identity).set_parallelism(c)
    return ExecutionGraph(env.get_job_graph().proto)


def _live(*types: type) -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, types))


# --------------------------------------------------------------------------- grouping


def test_all_to_all_shares_one_group_per_edge_in_both_directions():
    eg = _graph(50, 40)
    down = eg.job_vertices[1]
    gates = [ev.input_gates[0] for ev in down.task_vertices]
    assert len({id(g.consumed) for g in gates}) == 1
    assert len(gates[0].consumed.partitions) == 50 and gates[0].consumed.num_consumers == 40
    partitions = gates[0].consumed.partitions
    assert len({id(group) for p in partitions for group in p.consumer_groups}) == 1
    assert [g.subpartition_index for g in gates] == list(range(40))
    assert len(eg.consumed_partition_groups()) == 1


@pytest.mark.parametrize("n", [100, 400])
def test_an_all_to_all_graph_holds_objects_linear_in_parallelism(n):
    """The wiring objects of an n→n all-to-all edge grow like n, not n² (n² would be 160,000)."""
    before = _live(InputChannel, InputGate, ConsumedPartitionGroup, ConsumerVertexGroup)
    eg = _graph(n, n)
    wiring = _live(InputChannel, InputGate, ConsumedPartitionGroup, ConsumerVertexGroup) - before
    assert wiring <= 2 * n + 4, wiring  # one gate per consumer, one group each way
    references = sum(len(g.partitions) for g in eg.consumed_partition_groups())
    assert references == n  # the partitions are listed once for the whole edge
    del eg


def test_channels_are_computed_not_stored():
    eg = _graph(30, 30)
    before = _live(InputChannel)
    channels = [ch for ev in eg.job_vertices[1].task_vertices for ch in ev.input_gates[0].channels]
    assert len(channels) == 900
    del channels
    assert _live(InputChannel) == before


@pytest.mark.parametrize("p, c", [(3, 7), (7, 3), (4, 4), (2, 5)])
def test_pointwise_groups_follow_flink(p, c):
    eg = _graph(p, c, lambda ds: ds.rescale())
    groups = eg.consumed_partition_groups()
    # Flink: p >= c one group per consumer; p < c one group per producer partition.
    assert len(groups) == (c if p >= c else p)
    for ev in eg.job_vertices[1].task_vertices:
        gate = ev.input_gates[0]
        if p < c:
            consumers = gate.consumed.partitions[0].consumers
            assert gate.subpartition_index == consumers.index(ev)
        else:
            assert gate.subpartition_index == 0


# --------------------------------------------------------------------------- descriptors


def _plan(eg: ExecutionGraph) -> tuple[list[PlannedTask], dict]:
    ids = itertools.count()
    tasks, producers = [], {}
    for ejv in eg.job_vertices:
        for ev in ejv.task_vertices:
            attempt = next(ids).to_bytes(16, "big")
            producers[(ejv.id, ev.subtask_index)] = ProducerLocation(f"tm-{ev.subtask_index % 3}:2", attempt)
            tasks.append(PlannedTask(ev, attempt, 0, bytes(16), f"tm-{ev.subtask_index % 3}", "tm:1"))
    return tasks, producers


@pytest.mark.parametrize("partition", [lambda ds: ds.rebalance(), lambda ds: ds.rescale()], ids=["all-to-all", "pointwise"])
def test_the_task_reads_exactly_the_channels_of_the_execution_graph(partition):
    eg = _graph(5, 3, partition)
    tasks, producers = _plan(eg)
    built = TaskDeploymentDescriptorFactory(eg, [cpb.ArtifactRef(name="job.py", blob_key="k")], producers).build(tasks)
    for task, deployment in zip(tasks, built):
        tdd = cpb.SubmitTaskRequest.FromString(deployment.request).tdd
        ev = task.vertex
        assert tdd.execution_attempt_id == task.attempt_id and tdd.subtask_index == ev.subtask_index
        assert tdd.vertex == ev.job_vertex.proto and tdd.job_id == eg.job_id and tdd.artifacts[0].name == "job.py"
        expected = [
            (ch.partition.partition_index, ch.subpartition_index, producers[(ch.producer.job_vertex_id, ch.producer.subtask_index)])
            for gate in ev.input_gates
            for ch in gate.channels
        ]
        got = [(s.partition_index, s.subpartition_index, ProducerLocation(s.producer_location, s.producer_attempt_id)) for s in _channel_specs(tdd)]
        assert got == expected
        assert [p.num_subpartitions for p in tdd.produced_partitions] == [p.num_subpartitions for p in ev.produced.values()]


def test_a_group_is_serialized_once_for_all_its_consumers():
    eg = _graph(200, 200)
    tasks, producers = _plan(eg)
    factory = TaskDeploymentDescriptorFactory(eg, [], producers)
    built = factory.build(tasks)
    assert factory.groups_serialized == 1
    consumers = [cpb.SubmitTaskRequest.FromString(b.request).tdd for b in built[200:]]
    assert len({tdd.input_gates[0].consumed_partition_group for tdd in consumers}) == 1
    assert len(cpb.ConsumedPartitionGroupDescriptor.FromString(consumers[0].input_gates[0].consumed_partition_group).partitions) == 200


# --------------------------------------------------------------------------- the core's deployment round


def _core(p: int) -> JobMasterCore:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(p)
    env.from_sequence(1, 10).rebalance().map(identity).add_sink(identity)
    counter = itertools.count()
    return JobMasterCore(env.get_job_graph("job").proto, new_id=lambda: next(counter).to_bytes(16, "big"))


def _all_offered(core: JobMasterCore) -> BuildDeployments:
    core.start()
    offers = [cpb.SlotOffer(allocation_id=i.to_bytes(16, "big"), slot_index=i) for i in range(core.required_slots)]
    _, commands = core.offer_slots("tm", "tm:1", "tm:2", offers)
    (build,) = [c for c in commands if isinstance(c, BuildDeployments)]
    return build


def test_executions_stay_scheduled_until_their_descriptors_are_built():
    core = _core(3)
    build = _all_offered(core)
    assert core.tasks_per_state() == {"SCHEDULED": 6} and build.num_tasks == 6
    deploys = [c for c in core.deployments_built(build.build()) if isinstance(c, DeployTask)]
    assert len(deploys) == 6 and core.tasks_per_state() == {"DEPLOYING": 6}


def test_a_cancel_while_descriptors_are_built_deploys_nothing():
    core = _core(3)
    build = _all_offered(core)
    core.cancel()
    assert core.status is JobStatus.CANCELED
    assert core.deployments_built(build.build()) == []
    assert core.tasks_per_state() == {"CANCELED": 6}


def test_a_task_manager_lost_while_descriptors_are_built_deploys_nothing_of_the_job():
    core = _core(2)
    build = _all_offered(core)
    core.task_manager_lost("tm", "heartbeat timed out")
    assert core.status is JobStatus.FAILED
    assert not [c for c in core.deployments_built(build.build()) if isinstance(c, DeployTask)]


def test_task_counts_follow_every_transition():
    core = _core(2)
    build = _all_offered(core)
    core.deployments_built(build.build())
    first, *rest = core.current_executions()
    core.update_task_state(first.attempt_id, ExecutionState.RUNNING)
    assert core.tasks_per_state() == {"DEPLOYING": 3, "RUNNING": 1}
    for execution in [first, *rest]:
        core.update_task_state(execution.attempt_id, ExecutionState.FINISHED)
    assert core.tasks_per_state() == {"FINISHED": 4} and core.status is JobStatus.FINISHED
