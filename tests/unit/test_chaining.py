"""Operator chaining (StreamGraph -> JobGraph), from Flink's StreamingJobGraphGenerator rules.

An edge up -> down is chained only when ALL hold: `down` has a single input edge; same slot
sharing group; chaining strategies allow it (`start_new_chain` = HEAD on `down`, `disable_chaining`
= NEVER on either side); the partitioner is FORWARD; the exchange is not BATCH; equal parallelism;
chaining is enabled; no union on the same input. Each test below starts from a pipeline that
chains completely (`test_baseline_chains_map_filter_sink`) and breaks exactly one condition
between Map and Filter.

Chained names: `A -> B -> C`, and `A -> (B, C)` when a chain fans out (Flink's createChainedName).
"""
from __future__ import annotations

import pytest

from millstream.common import Types
from millstream.datastream import OutputTag, ProcessFunction, RuntimeExecutionMode

SRC = "Source: Collection Source"
SINK = "Sink: Print to Std. Out"


def identity(x):
    return x


def positive(x):
    return x > 0


def chains(env) -> list[list[str]]:
    """Each JobVertex's operator list, in the JobGraph's order."""
    return [v["operators"] for v in env.get_job_graph().to_dict()["vertices"]]


def vertex_of(jg_dict, op_name):
    found = [v for v in jg_dict["vertices"] if op_name in v["operators"]]
    assert len(found) == 1, f"{op_name!r} found in {len(found)} vertices"
    return found[0]


def build(env, between=lambda ds: ds, map_hook=lambda ds: ds, filter_hook=lambda ds: ds, sink_hook=lambda s: s):
    """Source(p=1) -> Map(p=3) -> [between] -> Filter(p=3) -> print(p=3)."""
    env.set_parallelism(3)
    m = map_hook(env.from_collection([1, 2, 3]).map(identity))
    f = filter_hook(between(m).filter(positive))
    sink_hook(f.print())
    return env


# --------------------------------------------------------------------------- baseline


def test_baseline_chains_map_filter_sink(env):
    build(env)
    assert sorted(chains(env)) == sorted([[SRC], ["Map", "Filter", SINK]])


def test_source_chains_with_downstream_at_equal_parallelism(env):
    env.set_parallelism(1)
    env.from_collection([1]).map(identity).filter(positive).print()
    jg = env.get_job_graph().to_dict()
    assert [v["operators"] for v in jg["vertices"]] == [[SRC, "Map", "Filter", SINK]]
    assert jg["vertices"][0]["name"] == f"{SRC} -> Map -> Filter -> {SINK}"
    assert jg["vertices"][0]["inputs"] == []


# --------------------------------------------------------------------------- each condition broken alone


def test_different_slot_sharing_group_breaks_chain(env):
    build(env, filter_hook=lambda f: f.slot_sharing_group("other"))
    assert sorted(chains(env)) == sorted([[SRC], ["Map"], ["Filter", SINK]])
    jg = env.get_job_graph().to_dict()
    assert vertex_of(jg, "Filter")["slot_sharing_group"] == "other"
    assert vertex_of(jg, "Map")["slot_sharing_group"] == "default"
    assert vertex_of(jg, "Filter")["inputs"][0]["ship_strategy"] == "FORWARD"


def test_start_new_chain_breaks_chain_before_the_operator_only(env):
    build(env, filter_hook=lambda f: f.start_new_chain())
    assert sorted(chains(env)) == sorted([[SRC], ["Map"], ["Filter", SINK]])


def test_disable_chaining_on_upstream_breaks_chain(env):
    build(env, map_hook=lambda m: m.disable_chaining())
    assert sorted(chains(env)) == sorted([[SRC], ["Map"], ["Filter", SINK]])


def test_disable_chaining_on_downstream_breaks_chain_on_both_sides(env):
    build(env, filter_hook=lambda f: f.disable_chaining())
    assert sorted(chains(env)) == sorted([[SRC], ["Map"], ["Filter"], [SINK]])


def test_disable_chaining_on_sink(env):
    build(env, sink_hook=lambda s: s.disable_chaining())
    assert sorted(chains(env)) == sorted([[SRC], ["Map", "Filter"], [SINK]])


@pytest.mark.parametrize(
    "partition, ship",
    [
        (lambda ds: ds.rebalance(), "REBALANCE"),
        (lambda ds: ds.shuffle(), "SHUFFLE"),
        (lambda ds: ds.rescale(), "RESCALE"),
        (lambda ds: ds.broadcast(), "BROADCAST"),
        (lambda ds: ds.global_(), "GLOBAL"),
        (lambda ds: ds.key_by(identity), "HASH"),
        (lambda ds: ds.partition_custom(lambda k, n: k % n, identity), "CUSTOM"),
    ],
    ids=["rebalance", "shuffle", "rescale", "broadcast", "global", "hash", "custom"],
)
def test_non_forward_partitioner_at_equal_parallelism_breaks_chain(env, partition, ship):
    build(env, between=partition)
    assert sorted(chains(env)) == sorted([[SRC], ["Map"], ["Filter", SINK]])
    inputs = vertex_of(env.get_job_graph().to_dict(), "Filter")["inputs"]
    assert [i["ship_strategy"] for i in inputs] == [ship]


def test_explicit_forward_keeps_chain(env):
    build(env, between=lambda m: m.forward())
    assert sorted(chains(env)) == sorted([[SRC], ["Map", "Filter", SINK]])


def test_different_parallelism_breaks_chain(env):
    build(env, filter_hook=lambda f: f.set_parallelism(2), sink_hook=lambda s: s.set_parallelism(2))
    assert sorted(chains(env)) == sorted([[SRC], ["Map"], ["Filter", SINK]])
    jg = env.get_job_graph().to_dict()
    assert vertex_of(jg, "Filter")["parallelism"] == 2
    assert vertex_of(jg, "Map")["parallelism"] == 3


def test_chaining_disabled_globally(env):
    env.disable_operator_chaining()
    build(env)
    assert sorted(chains(env)) == sorted([[SRC], ["Map"], ["Filter"], [SINK]])


def test_chaining_disabled_globally_even_at_parallelism_one(env):
    env.disable_operator_chaining()
    env.set_parallelism(1)
    env.from_collection([1]).map(identity).print()
    assert sorted(chains(env)) == sorted([[SRC], ["Map"], [SINK]])


def test_union_of_a_stream_with_itself_is_not_chained(env):
    build(env, between=lambda m: m.union(m))
    assert sorted(chains(env)) == sorted([[SRC], ["Map"], ["Filter", SINK]])
    jg = env.get_job_graph().to_dict()
    inputs = vertex_of(jg, "Filter")["inputs"]
    map_id = vertex_of(jg, "Map")["id"]
    assert [i["source_vertex"] for i in inputs] == [map_id, map_id]
    assert {i["ship_strategy"] for i in inputs} == {"FORWARD"}


def test_union_of_two_streams_is_not_chained(env):
    env.set_parallelism(3)
    a = env.from_collection([1]).map(identity).name("A")
    b = env.from_collection([2]).map(identity).name("B")
    a.union(b).filter(positive).print()
    assert sorted(chains(env)) == sorted([[SRC], [SRC], ["A"], ["B"], ["Filter", SINK]])
    jg = env.get_job_graph().to_dict()
    sources = sorted(i["source_vertex"] for i in vertex_of(jg, "Filter")["inputs"])
    assert sources == sorted([vertex_of(jg, "A")["id"], vertex_of(jg, "B")["id"]])


def test_forward_edges_still_chain_in_batch_mode(env):
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    build(env)
    assert sorted(chains(env)) == sorted([[SRC], ["Map", "Filter", SINK]])


def test_chained_side_output(env):
    class Split(ProcessFunction):
        def process_element(self, value, ctx):
            yield OutputTag("late", Types.INT()), value

    env.set_parallelism(2)
    tag = OutputTag("late", Types.INT())
    p = env.from_collection([1]).rebalance().process(Split()).name("Split")
    p.get_side_output(tag).print().name("side")
    p.print().name("main")
    assert sorted(chains(env)) == sorted([[SRC], ["Split", "Sink: side", "Sink: main"]]) or sorted(
        chains(env)
    ) == sorted([[SRC], ["Split", "Sink: main", "Sink: side"]])


# --------------------------------------------------------------------------- chained names


def test_chained_name_linear(env):
    build(env)
    jg = env.get_job_graph().to_dict()
    v = vertex_of(jg, "Map")
    assert v["name"] == f"Map -> Filter -> {SINK}"
    assert v["operators"] == ["Map", "Filter", SINK]  # chain order: head first


def test_chained_name_with_user_names(env):
    env.set_parallelism(1)
    env.from_collection([1]).name("A").map(identity).name("B").filter(positive).name("C").print().name("D")
    jg = env.get_job_graph().to_dict()
    assert [v["name"] for v in jg["vertices"]] == ["Source: A -> B -> C -> Sink: D"]


def test_chained_name_fan_out(env):
    env.set_parallelism(1)
    src = env.from_collection([1])
    src.print().name("b")
    src.print().name("c")
    jg = env.get_job_graph().to_dict()
    assert [v["name"] for v in jg["vertices"]] == [f"{SRC} -> (Sink: b, Sink: c)"]


def test_chained_name_nested_fan_out(env):
    env.set_parallelism(1)
    src = env.from_collection([1])
    src.map(identity).name("B").print().name("b")
    src.map(identity).name("C").print().name("c")
    jg = env.get_job_graph().to_dict()
    assert len(jg["vertices"]) == 1
    v = jg["vertices"][0]
    assert v["name"] == f"{SRC} -> (B -> Sink: b, C -> Sink: c)"
    ops = v["operators"]
    assert ops[0] == SRC
    assert sorted(ops) == sorted([SRC, "B", "Sink: b", "C", "Sink: c"])
    # depth-first: each operator after the one that feeds it
    assert ops.index("B") < ops.index("Sink: b")
    assert ops.index("C") < ops.index("Sink: c")


def test_fan_out_with_one_branch_unchained(env):
    env.set_parallelism(1)
    src = env.from_collection([1])
    src.map(identity).name("B").print().name("b")
    src.rebalance().map(identity).name("C").print().name("c")
    jg = env.get_job_graph().to_dict()
    assert sorted(v["name"] for v in jg["vertices"]) == sorted([f"{SRC} -> B -> Sink: b", "C -> Sink: c"])


def test_unchained_vertex_names_have_prefixes(env):
    env.disable_operator_chaining()
    env.from_collection([1]).name("in").map(identity).print().name("out")
    names = [v["name"] for v in env.get_job_graph().to_dict()["vertices"]]
    assert names == ["Source: in", "Map", "Sink: out"]


def test_chained_name_linear_then_fan_out(env):
    env.set_parallelism(1)
    b = env.from_collection([1]).map(identity).name("B")
    b.print().name("c")
    b.print().name("d")
    jg = env.get_job_graph().to_dict()
    assert [v["name"] for v in jg["vertices"]] == [f"{SRC} -> B -> (Sink: c, Sink: d)"]


def test_disable_chaining_on_source(env):
    env.set_parallelism(1)
    env.from_collection([1]).disable_chaining().map(identity).filter(positive).print()
    assert sorted(chains(env)) == sorted([[SRC], ["Map", "Filter", SINK]])


def test_start_new_chain_on_head_operator_keeps_its_own_chain(env):
    # start_new_chain only cuts the chain *before* the operator; what follows still chains to it
    env.set_parallelism(1)
    env.from_collection([1]).map(identity).start_new_chain().filter(positive).print()
    assert sorted(chains(env)) == sorted([[SRC], ["Map", "Filter", SINK]])
