"""The JobGraph (client -> cluster contract): shape, edges, partition types, max parallelism, ids.

Rules (DESIGN.md "Graph layers" 3, issue 2 "Graph layers" 2-3, Flink's StreamingJobGraphGenerator
and StreamGraphHasherV2):
- forward and rescale edges are POINTWISE, every other partitioner ALL_TO_ALL;
- ship strategies FORWARD, REBALANCE, RESCALE, SHUFFLE, BROADCAST, GLOBAL, HASH, CUSTOM;
- STREAMING exchanges are PIPELINED_BOUNDED, BATCH runtime mode makes them BLOCKING;
- default max parallelism = roundUpToPowerOfTwo(p + p/2) clamped to [128, 32768];
- vertex ids: 16-byte deterministic hashes (identical across calls, environments and processes),
  independent of operator names (StreamGraphHasherV2Test#testChangedOperatorName), dependent on
  topology; a uid gives an id that does not depend on the rest of the graph; two operators with
  the same uid are a "Hash collision on user-specified ID";
- vertices are listed in topological order.
"""
from __future__ import annotations

import json
import re

import pytest

from millstream.client.stream_graph import StreamGraphError
from millstream.common import Types
from millstream.datastream import (
    KeyedProcessFunction,
    OutputTag,
    ProcessFunction,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
)
from millstream.proto import jobgraph_pb2 as pb

HEX32 = re.compile(r"[0-9a-f]{32}")


def identity(x):
    return x


def vertex_of(jg_dict, op_name):
    found = [v for v in jg_dict["vertices"] if op_name in v["operators"]]
    assert len(found) == 1, f"{op_name!r} found in {len(found)} vertices"
    return found[0]


def proto_vertex_of(proto, op_name):
    found = [v for v in proto.vertices if op_name in [o.name for o in v.operators]]
    assert len(found) == 1
    return found[0]


def proto_operator(proto, op_name):
    found = [o for v in proto.vertices for o in v.operators if o.name == op_name]
    assert len(found) == 1
    return found[0]


class Tagger(ProcessFunction):
    def process_element(self, value, ctx):
        yield OutputTag("late", Types.INT()), value
        yield value


class Counter(KeyedProcessFunction):
    def process_element(self, value, ctx):
        yield value


def small_job(env):
    env.set_parallelism(2)
    src = env.from_collection([1, 2, 3]).name("nums")
    keyed = src.map(identity).name("M").key_by(lambda x: x % 2).reduce(lambda a, b: a + b).name("R")
    keyed.print().name("out")
    return env


# --------------------------------------------------------------------------- JSON shape


def test_json_shape(env):
    small_job(env)
    jg = env.get_job_graph("shape-job")
    d = json.loads(jg.to_json())
    assert d == jg.to_dict()
    assert set(d) == {"job_name", "vertices"}
    assert d["job_name"] == "shape-job"
    assert [v["operators"] for v in d["vertices"]] == [["Source: nums"], ["M"], ["R", "Sink: out"]]
    for v in d["vertices"]:
        assert set(v) == {"id", "name", "parallelism", "max_parallelism", "operators", "slot_sharing_group", "inputs"}
        assert HEX32.fullmatch(v["id"]), v["id"]
        for i in v["inputs"]:
            assert set(i) == {"source_vertex", "ship_strategy", "distribution", "partition_type"}
    src, m, r = d["vertices"]
    assert (src["parallelism"], m["parallelism"], r["parallelism"]) == (1, 2, 2)
    assert src["inputs"] == []
    assert m["inputs"] == [
        {"source_vertex": src["id"], "ship_strategy": "REBALANCE", "distribution": "ALL_TO_ALL", "partition_type": "PIPELINED_BOUNDED"}
    ]
    assert r["inputs"] == [
        {"source_vertex": m["id"], "ship_strategy": "HASH", "distribution": "ALL_TO_ALL", "partition_type": "PIPELINED_BOUNDED"}
    ]
    assert r["name"] == "R -> Sink: out"


def test_json_ids_match_proto_bytes(env):
    small_job(env)
    jg = env.get_job_graph()
    for vd, vp in zip(jg.to_dict()["vertices"], jg.proto.vertices):
        assert len(vp.id) == 16
        assert vd["id"] == vp.id.hex()
        assert vd["name"] == vp.name
        assert vd["operators"] == [o.name for o in vp.operators]
    assert isinstance(jg.proto, pb.JobGraph)
    assert len(jg.vertices) == len(jg.proto.vertices)


def test_head_operator_id_is_vertex_id(env):
    small_job(env)
    for v in env.get_job_graph().proto.vertices:
        assert v.operators[0].operator_id == v.id
        ids = [o.operator_id for o in v.operators]
        assert all(len(i) == 16 for i in ids)


def test_operator_ids_unique_across_graph(env):
    small_job(env)
    ids = [o.operator_id for v in env.get_job_graph().proto.vertices for o in v.operators]
    assert len(ids) == len(set(ids))


def test_proto_round_trip(env):
    small_job(env)
    proto = env.get_job_graph().proto
    again = pb.JobGraph.FromString(proto.SerializeToString())
    assert again == proto


def test_to_dot_mentions_every_vertex(env):
    small_job(env)
    jg = env.get_job_graph()
    dot = jg.to_dot()
    assert dot.lstrip().startswith("digraph")
    for v in jg.to_dict()["vertices"]:
        assert v["name"] in dot


def test_default_job_name_is_used_when_none_given(env):
    small_job(env)
    assert env.get_job_graph().to_dict()["job_name"]  # non-empty, whatever the default is


def test_checkpoint_interval_and_runtime_mode_recorded(env):
    small_job(env)
    env.enable_checkpointing(5000)
    cfg = env.get_job_graph().proto.execution_config
    assert cfg.checkpoint_interval_ms == 5000
    assert cfg.runtime_mode == pb.STREAMING


def test_checkpointing_disabled_is_zero(env):
    small_job(env)
    assert env.get_job_graph().proto.execution_config.checkpoint_interval_ms == 0


# --------------------------------------------------------------------------- distribution & ship strategy


@pytest.mark.parametrize(
    "partition, ship, distribution",
    [
        (lambda ds: ds.forward(), "FORWARD", "POINTWISE"),
        (lambda ds: ds, "FORWARD", "POINTWISE"),  # default at equal parallelism
        (lambda ds: ds.rescale(), "RESCALE", "POINTWISE"),
        (lambda ds: ds.rebalance(), "REBALANCE", "ALL_TO_ALL"),
        (lambda ds: ds.shuffle(), "SHUFFLE", "ALL_TO_ALL"),
        (lambda ds: ds.broadcast(), "BROADCAST", "ALL_TO_ALL"),
        (lambda ds: ds.global_(), "GLOBAL", "ALL_TO_ALL"),
        (lambda ds: ds.key_by(identity), "HASH", "ALL_TO_ALL"),
        (lambda ds: ds.partition_custom(lambda k, n: k % n, identity), "CUSTOM", "ALL_TO_ALL"),
    ],
    ids=["forward", "default-equal", "rescale", "rebalance", "shuffle", "broadcast", "global", "hash", "custom"],
)
def test_ship_strategy_and_distribution(env, partition, ship, distribution):
    env.set_parallelism(3)
    up = env.from_collection([1]).map(identity).name("Up")
    # disable_chaining so that even a FORWARD edge stays a JobEdge
    partition(up).map(identity).name("Down").disable_chaining().print()
    jg = env.get_job_graph()
    inputs = vertex_of(jg.to_dict(), "Down")["inputs"]
    assert len(inputs) == 1
    assert inputs[0]["ship_strategy"] == ship
    assert inputs[0]["distribution"] == distribution
    assert inputs[0]["source_vertex"] == vertex_of(jg.to_dict(), "Up")["id"]
    # the proto agrees with the JSON, on both the consumer and the producer side
    edge = proto_vertex_of(jg.proto, "Down").inputs[0]
    assert edge.ship_strategy == ship
    assert edge.distribution == pb.DistributionPattern.Value(distribution)
    produced = [ds for ds in proto_vertex_of(jg.proto, "Up").produced]
    assert [p.partitioner.ship_strategy for p in produced] == [ship]
    assert produced[0].id == edge.result_id
    assert produced[0].consumer_vertex == proto_vertex_of(jg.proto, "Down").id


def test_default_between_unequal_parallelism_is_rebalance_all_to_all(env):
    env.set_parallelism(3)
    env.from_collection([1]).map(identity).name("Up").map(identity).name("Down").set_parallelism(2).print()
    inputs = vertex_of(env.get_job_graph().to_dict(), "Down")["inputs"]
    assert [(i["ship_strategy"], i["distribution"]) for i in inputs] == [("REBALANCE", "ALL_TO_ALL")]


# --------------------------------------------------------------------------- partition types


def _partition_heavy_job(env):
    env.set_parallelism(2)
    src = env.from_collection([1, 2, 3])
    a = src.map(identity).name("A")
    a.rebalance().map(identity).name("B").key_by(identity).reduce(lambda x, y: x).name("C").rescale().map(
        identity
    ).name("D").broadcast().print().name("out")


def test_streaming_exchanges_are_pipelined_bounded(env):
    _partition_heavy_job(env)
    jg = env.get_job_graph()
    inputs = [i for v in jg.to_dict()["vertices"] for i in v["inputs"]]
    assert len(inputs) >= 5
    assert {i["partition_type"] for i in inputs} == {"PIPELINED_BOUNDED"}
    for v in jg.proto.vertices:
        for p in v.produced:
            assert p.partition_type == pb.PIPELINED_BOUNDED


def test_batch_runtime_mode_makes_exchanges_blocking(env):
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    _partition_heavy_job(env)
    jg = env.get_job_graph()
    inputs = [i for v in jg.to_dict()["vertices"] for i in v["inputs"]]
    assert len(inputs) >= 5
    assert {i["partition_type"] for i in inputs} == {"BLOCKING"}
    for v in jg.proto.vertices:
        for p in v.produced:
            assert p.partition_type == pb.BLOCKING
    assert jg.proto.execution_config.runtime_mode == pb.BATCH


def test_batch_mode_forward_edge_that_cannot_chain_is_blocking(env):
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    env.set_parallelism(2)
    env.from_collection([1]).map(identity).name("Up").map(identity).name("Down").disable_chaining().print()
    inputs = vertex_of(env.get_job_graph().to_dict(), "Down")["inputs"]
    assert [(i["ship_strategy"], i["distribution"], i["partition_type"]) for i in inputs] == [
        ("FORWARD", "POINTWISE", "BLOCKING")
    ]


# --------------------------------------------------------------------------- max parallelism


@pytest.mark.parametrize(
    "parallelism, expected",
    [(1, 128), (2, 128), (8, 128), (85, 128), (86, 256), (100, 256), (200, 512), (1000, 2048), (30000, 32768)],
)
def test_default_max_parallelism(env, parallelism, expected):
    env.set_parallelism(parallelism)
    env.from_sequence(1, 10).map(identity).print()
    for v in env.get_job_graph().to_dict()["vertices"]:
        assert v["parallelism"] == parallelism
        assert v["max_parallelism"] == expected


def test_default_max_parallelism_is_per_vertex(env):
    env.set_parallelism(4)
    env.from_collection([1]).map(identity).name("Big").set_parallelism(200).print().set_parallelism(200)
    jg = env.get_job_graph().to_dict()
    assert vertex_of(jg, "Source: Collection Source")["max_parallelism"] == 128
    assert vertex_of(jg, "Big")["max_parallelism"] == 512


def test_env_max_parallelism_applies_to_all_vertices(env):
    env.set_parallelism(2)
    env.set_max_parallelism(64)
    small_job(env)
    assert {v["max_parallelism"] for v in env.get_job_graph().to_dict()["vertices"]} == {64}


def test_operator_max_parallelism_and_hash_partitioner_key_groups(env):
    env.set_parallelism(2)
    env.from_collection([1]).map(identity).name("M").key_by(identity).process(Counter()).name("P").set_max_parallelism(
        16
    ).print()
    jg = env.get_job_graph()
    d = jg.to_dict()
    assert vertex_of(d, "P")["max_parallelism"] == 16
    assert vertex_of(d, "M")["max_parallelism"] == 128
    # a HASH partitioner spreads over the consumer's key groups
    produced = proto_vertex_of(jg.proto, "M").produced
    assert [p.partitioner.ship_strategy for p in produced] == ["HASH"]
    assert produced[0].partitioner.max_parallelism == 16


def test_keyed_operator_carries_its_key_selector(env):
    env.set_parallelism(2)
    env.from_collection([1]).key_by(identity).process(Counter()).name("P").print()
    jg = env.get_job_graph()
    assert proto_operator(jg.proto, "P").state_key_selector != b""
    assert proto_operator(jg.proto, "Source: Collection Source").state_key_selector == b""


# --------------------------------------------------------------------------- side outputs


def test_side_output_tag_on_non_chained_dataset(env):
    env.set_parallelism(2)
    tag = OutputTag("late", Types.INT())
    p = env.from_collection([1]).process(Tagger()).name("T")
    p.get_side_output(tag).rebalance().map(identity).name("L").print()
    p.print().name("main")
    jg = env.get_job_graph()
    produced = proto_vertex_of(jg.proto, "T").produced
    assert [(x.output_tag, x.partitioner.ship_strategy) for x in produced] == [("late", "REBALANCE")]
    chained = proto_operator(jg.proto, "T").chained_outputs
    assert [(c.output_tag) for c in chained] == [""]  # the main output to Sink: main


def test_side_output_tag_on_chained_output(env):
    env.set_parallelism(2)
    tag = OutputTag("late", Types.INT())
    p = env.from_collection([1]).process(Tagger()).name("T")
    p.get_side_output(tag).print().name("side")
    jg = env.get_job_graph()
    t = proto_operator(jg.proto, "T")
    sink = proto_operator(jg.proto, "Sink: side")
    assert [(c.target_node_id, c.output_tag) for c in t.chained_outputs] == [(sink.node_id, "late")]


# --------------------------------------------------------------------------- topological order


def _assert_topological(d):
    seen = set()
    for v in d["vertices"]:
        for i in v["inputs"]:
            assert i["source_vertex"] in seen, f"{v['name']} listed before its input {i['source_vertex']}"
        seen.add(v["id"])


def test_vertices_in_topological_order(env):
    env.set_parallelism(2)
    tag = OutputTag("late", Types.INT())
    s1 = env.from_collection([1]).name("s1")
    s2 = env.from_collection([2]).name("s2")
    t = s2.process(Tagger()).name("T").set_parallelism(3)
    late = t.get_side_output(tag).map(identity).name("late").set_parallelism(4)
    joined = s1.map(identity).name("A").union(t.map(identity).name("B")).key_by(identity).reduce(lambda a, b: a)
    joined.name("R").union(late).map(identity).name("Z").set_parallelism(1).print().set_parallelism(1)
    d = env.get_job_graph().to_dict()
    assert len(d["vertices"]) >= 7
    _assert_topological(d)
    ids = [v["id"] for v in d["vertices"]]
    assert len(ids) == len(set(ids))


def test_topological_order_when_later_source_feeds_earlier_chain(env):
    # the sink's chain contains the earliest-created operators of the first branch
    env.set_parallelism(1)
    first = env.from_collection([1]).name("first").map(identity).name("F")
    second = env.from_collection([2]).name("second").map(identity).name("S").disable_chaining()
    first.union(second).map(identity).name("U").print()
    d = env.get_job_graph().to_dict()
    _assert_topological(d)


# --------------------------------------------------------------------------- deterministic ids


def _pipeline(env, source_name="numbers", extra_map=False):
    env.set_parallelism(2)
    src = env.from_collection(["a", "b", "c"]).name(source_name)
    if extra_map:
        src = src.map(identity).name("Extra")
    src.map(identity).name("M").key_by(lambda w: w).reduce(lambda a, b: a + b).name("R").print()
    env.from_sequence(1, 5).filter(lambda x: x > 2).rebalance().print().name("other")
    return env


def _ids(jg):
    return [(v["name"], v["id"]) for v in jg.to_dict()["vertices"]]


def _operator_ids(jg):
    return {o.name: o.operator_id.hex() for v in jg.proto.vertices for o in v.operators}


def test_ids_identical_across_calls(env):
    _pipeline(env)
    assert _ids(env.get_job_graph()) == _ids(env.get_job_graph())


def test_ids_identical_across_environments():
    a = _pipeline(StreamExecutionEnvironment.get_execution_environment()).get_job_graph()
    b = _pipeline(StreamExecutionEnvironment.get_execution_environment()).get_job_graph()
    assert _ids(a) == _ids(b)
    assert _operator_ids(a) == _operator_ids(b)


def test_operator_name_does_not_affect_ids():
    a = _pipeline(StreamExecutionEnvironment.get_execution_environment(), source_name="A").get_job_graph()
    b = _pipeline(StreamExecutionEnvironment.get_execution_environment(), source_name="B").get_job_graph()
    assert [i for _, i in _ids(a)] == [i for _, i in _ids(b)]


def test_ids_change_with_topology():
    a = _pipeline(StreamExecutionEnvironment.get_execution_environment()).get_job_graph()
    b = _pipeline(StreamExecutionEnvironment.get_execution_environment(), extra_map=True).get_job_graph()
    ops_a, ops_b = _operator_ids(a), _operator_ids(b)
    # M and R sit downstream of the inserted operator: their ids depend on their inputs
    assert ops_a["M"] != ops_b["M"]
    assert ops_a["R"] != ops_b["R"]


def test_identical_branches_get_distinct_ids(env):
    env.disable_operator_chaining()
    src = env.from_collection([1])
    src.map(identity).print()
    src.map(identity).print()
    ids = [v["id"] for v in env.get_job_graph().to_dict()["vertices"]]
    assert len(ids) == 5
    assert len(set(ids)) == 5


def _uid_pipeline(extra_upstream: bool, uid="stable-map"):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    src = env.from_collection([1, 2]).name("src")
    if extra_upstream:
        src = src.map(identity).name("Unrelated").filter(lambda x: True)
    src.rebalance().map(identity).name("U").uid(uid).print()
    return env.get_job_graph()


def test_uid_derived_id_stable_when_upstream_changes():
    a = _uid_pipeline(extra_upstream=False)
    b = _uid_pipeline(extra_upstream=True)
    assert proto_operator(a.proto, "U").operator_id == proto_operator(b.proto, "U").operator_id
    assert proto_vertex_of(a.proto, "U").id == proto_vertex_of(b.proto, "U").id
    assert proto_operator(a.proto, "U").uid == "stable-map"
    assert vertex_of(a.to_dict(), "U")["id"] == vertex_of(b.to_dict(), "U")["id"]


def test_without_uid_the_same_operator_id_changes_with_upstream():
    # control for the test above: the change upstream is one the hash does see
    def job(extra):
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(2)
        src = env.from_collection([1, 2]).name("src")
        if extra:
            src = src.map(identity).name("Unrelated").filter(lambda x: True)
        src.rebalance().map(identity).name("U").print()
        return env.get_job_graph()

    assert proto_operator(job(False).proto, "U").operator_id != proto_operator(job(True).proto, "U").operator_id


def test_different_uids_give_different_ids():
    a = _uid_pipeline(extra_upstream=False, uid="one")
    b = _uid_pipeline(extra_upstream=False, uid="two")
    assert proto_operator(a.proto, "U").operator_id != proto_operator(b.proto, "U").operator_id


def test_duplicate_uid_is_a_hash_collision(env):
    env.set_parallelism(2)
    src = env.from_collection([1])
    src.map(identity).name("First").uid("dup").print()
    src.filter(bool).name("Second").uid("dup").print()
    with pytest.raises(StreamGraphError, match="Hash collision on user-specified ID") as err:
        env.get_job_graph()
    assert "dup" in str(err.value)


def test_set_uid_hash_is_recorded(env):
    env.from_collection([1]).map(identity).name("M").set_uid_hash("2e588ce1c86a9d46e2e85186773ce4fd").print()
    assert proto_operator(env.get_job_graph().proto, "M").uid_hash == "2e588ce1c86a9d46e2e85186773ce4fd"


def _first_vertex_id(build):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(4)
    build(env)
    return env.get_job_graph().proto.vertices[0].id


def test_source_hash_changes_when_its_chain_changes():
    # StreamGraphHasherV2Test#testNodeHashAfterSourceUnchaining
    chained = _first_vertex_id(lambda env: env.from_sequence(1, 9).map(identity).filter(bool).print())
    unchained = _first_vertex_id(
        lambda env: env.from_sequence(1, 9).map(identity).start_new_chain().filter(bool).print()
    )
    assert chained != unchained


def test_intermediate_hash_changes_when_its_chain_changes():
    # StreamGraphHasherV2Test#testNodeHashAfterIntermediateUnchaining
    def map_vertex_id(cut_after_map):
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(4)
        f = env.from_sequence(1, 9).map(identity).name("map").start_new_chain().filter(bool)
        if cut_after_map:
            f = f.start_new_chain()
        f.print()
        return proto_vertex_of(env.get_job_graph().proto, "map").id

    assert map_vertex_id(False) != map_vertex_id(True)


def test_hashes_independent_of_virtual_transformations():
    # Partition calls are virtual: stacking more of them leaves the topology, and so every id, unchanged
    # (they still consume transformation ids, so this also shows ids do not come from those counters).
    def ids(stack):
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(2)
        stack(env.from_sequence(1, 9).map(identity).name("M")).filter(bool).name("F").print()
        return _operator_ids(env.get_job_graph())

    assert ids(lambda ds: ds.rebalance()) == ids(lambda ds: ds.shuffle().broadcast().rebalance())


def test_node_hash_depends_on_input_hashes():
    # Same position in the traversal, same chainable outputs; only the input's (uid-given) hash differs.
    def down_id(upstream_uid):
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(2)
        env.from_sequence(1, 9).map(identity).name("Up").uid(upstream_uid).rebalance().map(identity).name(
            "Down"
        ).print()
        return proto_operator(env.get_job_graph().proto, "Down").operator_id

    assert down_id("one") != down_id("two")


def test_uid_on_source_and_map_collide():
    # StreamGraphHasherV2Test#testManualHashAssignmentCollisionThrowsException
    env = StreamExecutionEnvironment.get_execution_environment()
    env.disable_operator_chaining()
    env.from_sequence(1, 9).uid("source").map(identity).uid("source").print()
    with pytest.raises(StreamGraphError, match="Hash collision on user-specified ID"):
        env.get_job_graph()


def test_manual_hash_assignment_survives_program_change():
    # StreamGraphHasherV2Test#testManualHashAssignment
    def ids(changed):
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(4)
        env.disable_operator_chaining()
        src = env.from_sequence(1, 9)
        if changed:
            src = src.map(identity)
        src = src.name("source").uid("source")
        for sink in ("sink0", "sink1"):
            branch = src.map(identity)
            if changed:
                branch = branch.key_by(identity).reduce(lambda a, b: a)
            branch.print().name(sink).uid(sink)
        return {v.name: v.id for v in env.get_job_graph().proto.vertices}

    before, after = ids(False), ids(True)
    assert len(set(before.values())) == len(before)
    for name in ("source", "Sink: sink0", "Sink: sink1"):
        got = [i for n, i in after.items() if n.endswith(name)]
        want = [i for n, i in before.items() if n.endswith(name)]
        assert got == want and got, name


def test_automatic_mode_with_bounded_sources_is_batch(env):
    env.set_runtime_mode(RuntimeExecutionMode.AUTOMATIC)
    _partition_heavy_job(env)
    jg = env.get_job_graph()
    assert jg.proto.execution_config.runtime_mode == pb.BATCH
    assert {i["partition_type"] for v in jg.to_dict()["vertices"] for i in v["inputs"]} == {"BLOCKING"}


def test_automatic_mode_with_unbounded_source_is_streaming(env):
    from millstream.datastream import SourceFunction

    class Endless(SourceFunction):
        def run(self, ctx):
            while True:
                ctx.collect(1)

    env.set_runtime_mode(RuntimeExecutionMode.AUTOMATIC)
    env.set_parallelism(2)
    env.add_source(Endless()).rebalance().map(identity).print()
    jg = env.get_job_graph()
    assert jg.proto.execution_config.runtime_mode == pb.STREAMING
    assert {i["partition_type"] for v in jg.to_dict()["vertices"] for i in v["inputs"]} == {"PIPELINED_BOUNDED"}
