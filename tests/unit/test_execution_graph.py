"""JobGraph -> ExecutionGraph: subtasks, wiring, subpartitions, key-group ranges, slots.

Reference behaviour is Flink's (EdgeManagerBuildUtil#connectPointwise, PointwisePatternTest,
KeyGroupRangeAssignment#computeKeyGroupRangeForOperatorIndex, SlotSharingGroup sizing):
- POINTWISE with p producers and c consumers:
  p == c: consumer i reads producer i;
  p >  c: consumer i reads producers [i*p//c, (i+1)*p//c);
  p <  c: producer j feeds consumers [(j*c+p-1)//p, ((j+1)*c+p-1)//p).
- ALL_TO_ALL: every consumer reads every producer, subpartition = consumer index.
- a slot sharing group needs as many slots as its largest vertex parallelism.
"""
from __future__ import annotations

import itertools

import pytest

from millstream.datastream import StreamExecutionEnvironment
from millstream.jobmanager.jobmaster.execution_graph import ExecutionGraph, pointwise_consumers

# --------------------------------------------------------------------------- reference


def flink_pointwise(p: int, c: int) -> list[list[int]]:
    """EdgeManagerBuildUtil.connectPointwise, transcribed: for each consumer, its producers."""
    if p == c:
        return [[i] for i in range(c)]
    if p > c:
        return [list(range(i * p // c, (i + 1) * p // c)) for i in range(c)]
    result: list[list[int]] = [[] for _ in range(c)]
    for j in range(p):
        start = (j * c + p - 1) // p
        end = ((j + 1) * c + p - 1) // p
        for i in range(start, end):
            result[i].append(j)
    return result


def identity(x):
    return x


# --------------------------------------------------------------------------- pointwise_consumers


@pytest.mark.parametrize(
    "p, c, expected",
    [
        (3, 2, [[0], [1, 2]]),
        (2, 3, [[0], [0], [1]]),
        (7, 3, [[0, 1], [2, 3], [4, 5, 6]]),
        (3, 7, [[0], [0], [0], [1], [1], [2], [2]]),
        (1, 1, [[0]]),
        (4, 4, [[0], [1], [2], [3]]),
        (4, 2, [[0, 1], [2, 3]]),
        (2, 4, [[0], [0], [1], [1]]),
        (1, 3, [[0], [0], [0]]),
        (3, 1, [[0, 1, 2]]),
        (5, 2, [[0, 1], [2, 3, 4]]),
        (2, 5, [[0], [0], [0], [1], [1]]),
    ],
)
def test_pointwise_literal_examples(p, c, expected):
    # first four are the examples; the rest were worked by hand from Flink's formulas
    assert pointwise_consumers(p, c) == expected


@pytest.mark.parametrize(
    "p, c",
    [(3, 2), (2, 3), (7, 3), (3, 7), (1, 5), (5, 1), (6, 4), (4, 6), (8, 3), (3, 8), (10, 4), (4, 10),
     (9, 6), (6, 9), (13, 5), (5, 13), (16, 16), (17, 16), (16, 17), (100, 7), (7, 100)],
)
def test_pointwise_matches_flink(p, c):
    got = pointwise_consumers(p, c)
    assert [sorted(x) for x in got] == flink_pointwise(p, c)


@pytest.mark.parametrize("p, c", list(itertools.product(range(1, 17), range(1, 17))))
def test_pointwise_properties(p, c):
    got = pointwise_consumers(p, c)
    assert len(got) == c
    # every consumer reads a non-empty, contiguous, ascending block
    for producers in got:
        assert producers, "a consumer without producers"
        assert producers == list(range(producers[0], producers[0] + len(producers)))
    # blocks move forward with the consumer index
    firsts = [x[0] for x in got]
    assert firsts == sorted(firsts)
    # every producer is consumed
    assert set(itertools.chain.from_iterable(got)) == set(range(p))
    if p >= c:
        # each producer read exactly once; consumers balanced
        assert sorted(itertools.chain.from_iterable(got)) == list(range(p))
        sizes = [len(x) for x in got]
        assert max(sizes) - min(sizes) <= 1
    else:
        # each consumer reads one producer; producers' fan-out balanced
        assert all(len(x) == 1 for x in got)
        fan_out = [sum(1 for x in got if x == [j]) for j in range(p)]
        assert max(fan_out) - min(fan_out) <= 1


# --------------------------------------------------------------------------- execution graph


def _two_vertex_graph(env, p, c, partition):
    env.set_parallelism(max(p, c))
    up = env.from_sequence(1, 100).map(identity).name("Up").set_parallelism(p)
    down = partition(up).map(identity).name("Down").set_parallelism(c).disable_chaining()
    down.print().set_parallelism(c)
    jg = env.get_job_graph()
    eg = ExecutionGraph(jg.proto)
    return eg, _ejv(eg, "Up"), _ejv(eg, "Down")


def _ejv(eg, op_name):
    """The ExecutionJobVertex whose chain holds the operator `op_name`."""
    found = [v for v in eg.job_vertices if op_name in [o.name for o in v.proto.operators]]
    assert len(found) == 1, [v.name for v in eg.job_vertices]
    return found[0]


def _producers_by_consumer(down):
    result = []
    for ev in down.task_vertices:
        assert len(ev.input_gates) == 1
        result.append(sorted(ch.producer.subtask_index for ch in ev.input_gates[0].channels))
    return result


def test_one_execution_vertex_per_subtask(env):
    eg, up, down = _two_vertex_graph(env, 3, 5, lambda ds: ds.rebalance())
    assert [ev.subtask_index for ev in up.task_vertices] == [0, 1, 2]
    assert [ev.subtask_index for ev in down.task_vertices] == [0, 1, 2, 3, 4]
    assert up.parallelism == 3 and down.parallelism == 5
    assert sum(len(v.task_vertices) for v in eg.job_vertices) == sum(v.parallelism for v in eg.job_vertices)


@pytest.mark.parametrize("p, c", [(3, 2), (2, 3), (7, 3), (3, 7), (1, 4), (4, 1), (6, 4), (4, 6), (5, 5)])
def test_rescale_wiring_follows_flink(env, p, c):
    eg, up, down = _two_vertex_graph(env, p, c, lambda ds: ds.rescale())
    assert _producers_by_consumer(down) == flink_pointwise(p, c)


def test_forward_wiring_is_one_to_one(env):
    eg, up, down = _two_vertex_graph(env, 4, 4, lambda ds: ds.forward())
    assert _producers_by_consumer(down) == [[0], [1], [2], [3]]
    for ev in down.task_vertices:
        assert [ch.subpartition_index for ch in ev.input_gates[0].channels] == [0]


@pytest.mark.parametrize("p, c", [(3, 4), (1, 3), (3, 1), (2, 2)])
def test_all_to_all_wiring(env, p, c):
    eg, up, down = _two_vertex_graph(env, p, c, lambda ds: ds.rebalance())
    for ev in down.task_vertices:
        channels = ev.input_gates[0].channels
        assert sorted(ch.producer.subtask_index for ch in channels) == list(range(p))
        # every producer writes one subpartition per consumer; consumer i reads subpartition i
        assert {ch.subpartition_index for ch in channels} == {ev.subtask_index}


@pytest.mark.parametrize("p, c", [(3, 2), (2, 3), (7, 3), (3, 7), (2, 5), (4, 4)])
def test_pointwise_subpartitions_are_a_bijection_per_partition(env, p, c):
    eg, up, down = _two_vertex_graph(env, p, c, lambda ds: ds.rescale())
    readers: dict[int, list[int]] = {}
    for ev in down.task_vertices:
        for ch in ev.input_gates[0].channels:
            readers.setdefault(ch.partition.partition_index, []).append(ch.subpartition_index)
    assert sorted(readers) == list(range(p))
    for partition_index, subs in readers.items():
        # the consumers of one partition read distinct subpartitions 0..k-1
        assert sorted(subs) == list(range(len(subs))), (partition_index, subs)
        if p >= c:
            assert subs == [0]


def test_partition_index_is_the_producer_subtask():
    for partition in (lambda ds: ds.rescale(), lambda ds: ds.rebalance()):
        eg, up, down = _two_vertex_graph(StreamExecutionEnvironment.get_execution_environment(), 3, 5, partition)
        for ev in down.task_vertices:
            for ch in ev.input_gates[0].channels:
                assert ch.partition.partition_index == ch.producer.subtask_index


def test_sources_have_no_gates_and_unions_one_gate_per_edge(env):
    env.set_parallelism(2)
    a = env.from_sequence(1, 10).name("a")
    b = env.from_sequence(1, 10).name("b")
    a.union(b).map(identity).name("U").print()
    eg = ExecutionGraph(env.get_job_graph().proto)
    for name in ("Source: a", "Source: b"):
        for ev in _ejv(eg, name).task_vertices:
            assert ev.input_gates == []
    for ev in _ejv(eg, "U").task_vertices:
        assert len(ev.input_gates) == 2


def test_task_vertices_reference_their_job_vertex_order(env):
    env.set_parallelism(3)
    env.from_collection([1]).map(identity).rebalance().filter(bool).print()
    jg = env.get_job_graph()
    eg = ExecutionGraph(jg.proto)
    assert [v.name for v in eg.job_vertices] == [v.name for v in jg.proto.vertices]


# --------------------------------------------------------------------------- key groups


@pytest.mark.parametrize("parallelism", range(1, 9))
def test_key_group_ranges_for_max_parallelism_128(env, parallelism):
    env.set_parallelism(parallelism)
    env.set_max_parallelism(128)
    env.from_sequence(1, 10).key_by(identity).map(identity).name("K").print()
    eg = ExecutionGraph(env.get_job_graph().proto)
    ranges = [(ev.key_group_range.start_key_group, ev.key_group_range.end_key_group) for ev in _ejv(eg, "K").task_vertices]
    expected = [
        ((i * 128 + parallelism - 1) // parallelism, ((i + 1) * 128 - 1) // parallelism) for i in range(parallelism)
    ]
    assert ranges == expected
    # contiguous cover of [0, 127]
    assert ranges[0][0] == 0 and ranges[-1][1] == 127
    for (_, end), (start, _) in zip(ranges, ranges[1:]):
        assert start == end + 1


def test_key_group_ranges_examples(env):
    env.set_parallelism(3)
    env.set_max_parallelism(128)
    env.from_sequence(1, 10).key_by(identity).map(identity).name("K").print()
    eg = ExecutionGraph(env.get_job_graph().proto)
    ranges = [(ev.key_group_range.start_key_group, ev.key_group_range.end_key_group) for ev in _ejv(eg, "K").task_vertices]
    assert ranges == [(0, 42), (43, 85), (86, 127)]


# --------------------------------------------------------------------------- slots


def test_required_slots_is_max_parallelism_per_group(env):
    env.set_parallelism(1)
    src = env.from_collection([1])  # default, p=1
    m = src.map(identity).name("M").set_parallelism(4)  # default, p=4
    m.print().set_parallelism(2)  # default, p=2 (separate vertex, different parallelism)
    m.map(identity).name("O").slot_sharing_group("other").set_parallelism(3).print().set_parallelism(3)
    eg = ExecutionGraph(env.get_job_graph().proto)
    assert eg.required_slots() == {"default": 4, "other": 3}
    assert eg.total_required_slots() == 7


def test_required_slots_single_group(env):
    env.set_parallelism(5)
    env.from_sequence(1, 10).map(identity).rebalance().filter(bool).set_parallelism(2).print()
    eg = ExecutionGraph(env.get_job_graph().proto)
    assert eg.required_slots() == {"default": 5}
    assert eg.total_required_slots() == 5


def test_required_slots_three_groups(env):
    env.set_parallelism(2)
    env.from_collection([1]).slot_sharing_group("a").map(identity).set_parallelism(6).slot_sharing_group(
        "b"
    ).rebalance().filter(bool).slot_sharing_group("c").print()
    eg = ExecutionGraph(env.get_job_graph().proto)
    assert eg.required_slots() == {"a": 1, "b": 6, "c": 2}
    assert eg.total_required_slots() == 9
