"""Transformations -> StreamGraph, checked against Flink's rules (StreamGraphGenerator / StreamGraph).

Rules under test (DESIGN.md "Graph layers" 2, issue 2 "Graph layers" 1):
- partition calls, key_by and side outputs are virtual: they never become nodes, their
  information is folded into the edge (partitioner, output tag);
- the default partitioner is FORWARD between equal parallelisms and REBALANCE otherwise;
- an explicit forward() between unequal parallelisms fails with Flink's exact message;
- when partition calls are stacked, the one applied last (nearest the consumer) wins;
- a node without an explicit slot sharing group inherits its inputs' group when they all agree,
  else "default";
- a new operator takes the environment's parallelism at the moment it is created.
"""
from __future__ import annotations

import re

import pytest

from millstream.client.stream_graph import StreamGraphError
from millstream.common import Types
from millstream.datastream import KeySelector, OutputTag, ProcessFunction, SourceFunction


# --------------------------------------------------------------------------- helpers


def node_named(sg, name):
    matches = [n for n in sg.nodes.values() if n.operator_name == name]
    assert len(matches) == 1, f"expected one node named {name!r}, got {[str(n) for n in sg.nodes.values()]}"
    return matches[0]


def edges_between(sg, up, down):
    """All edges from the node named `up` to the node named `down`."""
    u, d = node_named(sg, up), node_named(sg, down)
    out = [e for e in d.in_edges if e.source_id == u.id]
    mirrored = [e for e in u.out_edges if e.target_id == d.id]
    assert sorted(str(e.partitioner) for e in mirrored) == sorted(str(e.partitioner) for e in out), (
        "the upstream's out_edges and the downstream's in_edges disagree"
    )
    return out


def the_edge(sg, up, down):
    es = edges_between(sg, up, down)
    assert len(es) == 1, f"expected one edge {up} -> {down}, got {len(es)}"
    return es[0]


def tag_id(tag) -> str | None:
    if tag is None or tag == "":
        return None
    return getattr(tag, "tag_id", tag)


def identity(x):
    return x


class Splitter(ProcessFunction):
    def __init__(self, tag):
        self.tag = tag

    def process_element(self, value, ctx):
        if value % 2:
            yield self.tag, value
        else:
            yield value


class Endless(SourceFunction):
    def run(self, ctx):
        while True:
            ctx.collect(1)


# --------------------------------------------------------------------------- default partitioner


def test_default_partitioner_is_rebalance_between_unequal_parallelism(env):
    env.set_parallelism(3)
    env.from_collection([1, 2, 3]).map(identity).print()  # collection source has parallelism 1
    sg = env.get_stream_graph()
    assert str(the_edge(sg, "Source: Collection Source", "Map").partitioner) == "REBALANCE"


def test_default_partitioner_is_forward_between_equal_parallelism(env):
    env.set_parallelism(3)
    env.from_collection([1, 2, 3]).map(identity).filter(bool).print()
    sg = env.get_stream_graph()
    assert str(the_edge(sg, "Map", "Filter").partitioner) == "FORWARD"
    assert str(the_edge(sg, "Filter", "Sink: Print to Std. Out").partitioner) == "FORWARD"


def test_default_partitioner_follows_explicit_operator_parallelism(env):
    env.set_parallelism(3)
    env.from_collection([1]).map(identity).filter(bool).set_parallelism(2).print().set_parallelism(2)
    sg = env.get_stream_graph()
    assert str(the_edge(sg, "Map", "Filter").partitioner) == "REBALANCE"
    assert str(the_edge(sg, "Filter", "Sink: Print to Std. Out").partitioner) == "FORWARD"


# --------------------------------------------------------------------------- explicit forward


def test_explicit_forward_between_equal_parallelism_is_allowed(env):
    env.set_parallelism(2)
    env.from_collection([1]).map(identity).forward().filter(bool).print()
    sg = env.get_stream_graph()
    assert str(the_edge(sg, "Map", "Filter").partitioner) == "FORWARD"


def test_explicit_forward_between_unequal_parallelism_fails_with_flinks_message(env):
    env.set_parallelism(2)
    with pytest.raises(StreamGraphError) as err:
        env.from_collection([1, 2]).forward().map(identity).print()
        env.get_job_graph()
    pattern = (
        re.escape("Forward partitioning does not allow change of parallelism. Upstream operation: Source: Collection Source-")
        + r"(\d+)"
        + re.escape(" parallelism: 1, downstream operation: Map-")
        + r"(\d+)"
        + re.escape(
            " parallelism: 2 You must use another partitioning strategy, such as broadcast, rebalance, shuffle or global."
        )
    )
    m = re.fullmatch(pattern, str(err.value))
    assert m, f"message was: {err.value!s}"
    assert m.group(1) != m.group(2), "upstream and downstream must be different nodes"


def test_forward_error_names_user_given_operator_names_and_parallelisms(env):
    env.set_parallelism(4)
    with pytest.raises(StreamGraphError) as err:
        up = env.from_collection([1]).map(identity).name("Wide").set_parallelism(5)
        up.forward().filter(bool).name("Narrow").set_parallelism(3).print()
        env.get_stream_graph()
    msg = str(err.value)
    assert re.search(r"Upstream operation: Wide-\d+ parallelism: 5, downstream operation: Narrow-\d+ parallelism: 3 ", msg), msg


def test_is_a_value_error():
    # Callers may catch ValueError without importing Millstream's internals.
    assert issubclass(StreamGraphError, ValueError)


# --------------------------------------------------------------------------- partitioners


@pytest.mark.parametrize(
    "partition, expected",
    [
        (lambda ds: ds.forward(), "FORWARD"),
        (lambda ds: ds.rebalance(), "REBALANCE"),
        (lambda ds: ds.rescale(), "RESCALE"),
        (lambda ds: ds.shuffle(), "SHUFFLE"),
        (lambda ds: ds.broadcast(), "BROADCAST"),
        (lambda ds: ds.global_(), "GLOBAL"),
        (lambda ds: ds.partition_custom(lambda key, n: key % n, lambda x: x), "CUSTOM"),
    ],
    ids=["forward", "rebalance", "rescale", "shuffle", "broadcast", "global", "custom"],
)
def test_partition_call_becomes_edge_partitioner(env, partition, expected):
    env.set_parallelism(2)
    up = env.from_collection([1, 2, 3]).map(identity).name("Up")
    partition(up).map(identity).name("Down").print()
    sg = env.get_stream_graph()
    assert str(the_edge(sg, "Up", "Down").partitioner) == expected


def test_key_by_gives_hash_edge_and_no_node(env):
    env.set_parallelism(2)
    env.from_collection([1, 2, 3]).map(identity).name("Up").key_by(lambda x: x % 2).reduce(lambda a, b: a + b).name(
        "Red"
    ).print()
    sg = env.get_stream_graph()
    assert str(the_edge(sg, "Up", "Red").partitioner) == "HASH"
    assert len(sg.nodes) == 4  # source, Up, Red, sink: key_by adds no node


def test_key_by_with_key_selector_class(env):
    class Mod(KeySelector):
        def get_key(self, value):
            return value % 3

    env.set_parallelism(2)
    env.from_collection([1]).key_by(Mod()).map(identity).name("K").print()
    sg = env.get_stream_graph()
    assert str(the_edge(sg, "Source: Collection Source", "K").partitioner) == "HASH"


@pytest.mark.parametrize(
    "stack, expected",
    [
        (lambda ds: ds.rebalance().shuffle(), "SHUFFLE"),
        (lambda ds: ds.shuffle().rebalance(), "REBALANCE"),
        (lambda ds: ds.broadcast().rescale().global_(), "GLOBAL"),
    ],
    ids=["rebalance-then-shuffle", "shuffle-then-rebalance", "three-stacked"],
)
def test_last_partitioner_wins(env, stack, expected):
    env.set_parallelism(2)
    up = env.from_collection([1]).map(identity).name("Up")
    stack(up).map(identity).name("Down").print()
    sg = env.get_stream_graph()
    assert str(the_edge(sg, "Up", "Down").partitioner) == expected


def test_partition_calls_are_virtual(env):
    env.set_parallelism(2)
    env.from_collection([1]).rebalance().shuffle().map(identity).rescale().filter(bool).broadcast().print()
    sg = env.get_stream_graph()
    names = sorted(n.operator_name for n in sg.nodes.values())
    assert names == sorted(["Source: Collection Source", "Map", "Filter", "Sink: Print to Std. Out"])
    # every edge joins two physical nodes
    for n in sg.nodes.values():
        for e in n.in_edges:
            assert e.source_id in sg.nodes and e.target_id == n.id


# --------------------------------------------------------------------------- side outputs


def test_side_output_is_folded_into_the_edge_with_its_tag(env):
    env.set_parallelism(2)
    tag = OutputTag("odd", Types.INT())
    main = env.from_collection([1, 2, 3]).process(Splitter(tag)).name("Split")
    main.print().name("main")
    main.get_side_output(tag).print().name("side")
    sg = env.get_stream_graph()

    side_edge = the_edge(sg, "Split", "Sink: side")
    main_edge = the_edge(sg, "Split", "Sink: main")
    assert tag_id(side_edge.output_tag) == "odd"
    assert tag_id(main_edge.output_tag) is None
    assert len(sg.nodes) == 4  # source, Split, two sinks: the side output adds no node


def test_side_output_keeps_tag_through_partition_call(env):
    env.set_parallelism(2)
    tag = OutputTag("odd", Types.INT())
    main = env.from_collection([1, 2, 3]).process(Splitter(tag)).name("Split")
    main.get_side_output(tag).rebalance().map(identity).name("Late").print()
    sg = env.get_stream_graph()
    edge = the_edge(sg, "Split", "Late")
    assert tag_id(edge.output_tag) == "odd"
    assert str(edge.partitioner) == "REBALANCE"


def test_side_output_default_partitioner_follows_parallelism(env):
    env.set_parallelism(2)
    tag = OutputTag("odd", Types.INT())
    main = env.from_collection([1, 2, 3]).process(Splitter(tag)).name("Split")
    main.get_side_output(tag).map(identity).name("Late").set_parallelism(3).print()
    sg = env.get_stream_graph()
    assert str(the_edge(sg, "Split", "Late").partitioner) == "REBALANCE"


# --------------------------------------------------------------------------- slot sharing groups


def test_slot_sharing_group_default(env):
    env.from_collection([1]).map(identity).print()
    sg = env.get_stream_graph()
    assert {n.slot_sharing_group for n in sg.nodes.values()} == {"default"}


def test_slot_sharing_group_is_inherited_from_single_input(env):
    env.from_collection([1]).slot_sharing_group("a").map(identity).filter(bool).print()
    sg = env.get_stream_graph()
    assert node_named(sg, "Source: Collection Source").slot_sharing_group == "a"
    assert node_named(sg, "Map").slot_sharing_group == "a"
    assert node_named(sg, "Filter").slot_sharing_group == "a"
    assert node_named(sg, "Sink: Print to Std. Out").slot_sharing_group == "a"


def test_explicit_slot_sharing_group_overrides_and_propagates(env):
    env.from_collection([1]).slot_sharing_group("a").map(identity).slot_sharing_group("b").filter(bool).print()
    sg = env.get_stream_graph()
    assert node_named(sg, "Map").slot_sharing_group == "b"
    assert node_named(sg, "Filter").slot_sharing_group == "b"


def test_slot_sharing_group_of_union_with_disagreeing_inputs_is_default(env):
    a = env.from_collection([1]).name("A").slot_sharing_group("a")
    b = env.from_collection([2]).name("B").slot_sharing_group("b")
    a.union(b).map(identity).name("U").print()
    sg = env.get_stream_graph()
    assert node_named(sg, "U").slot_sharing_group == "default"


def test_slot_sharing_group_of_union_with_agreeing_inputs_is_inherited(env):
    a = env.from_collection([1]).name("A").slot_sharing_group("g")
    b = env.from_collection([2]).name("B").slot_sharing_group("g")
    a.union(b).map(identity).name("U").print()
    sg = env.get_stream_graph()
    assert node_named(sg, "U").slot_sharing_group == "g"


def test_slot_sharing_group_inherited_through_key_by_and_partitions(env):
    env.set_parallelism(2)
    src = env.from_collection([1]).slot_sharing_group("s")
    src.rebalance().map(identity).name("R").key_by(identity).reduce(lambda a, b: a).name("K").print()
    sg = env.get_stream_graph()
    assert node_named(sg, "R").slot_sharing_group == "s"
    assert node_named(sg, "K").slot_sharing_group == "s"


# --------------------------------------------------------------------------- parallelism


def test_operators_take_env_parallelism_at_creation_time(env):
    env.set_parallelism(2)
    first = env.from_collection([1]).map(identity).name("First")
    env.set_parallelism(5)
    first.map(identity).name("Second").print()
    sg = env.get_stream_graph()
    assert node_named(sg, "First").parallelism == 2
    assert node_named(sg, "Second").parallelism == 5
    assert node_named(sg, "Sink: Print to Std. Out").parallelism == 5


def test_collection_source_is_non_parallel(env):
    env.set_parallelism(4)
    env.from_collection([1, 2, 3]).map(identity).print()
    sg = env.get_stream_graph()
    assert node_named(sg, "Source: Collection Source").parallelism == 1
    assert node_named(sg, "Map").parallelism == 4


def test_explicit_operator_parallelism(env):
    env.set_parallelism(4)
    env.from_collection([1]).map(identity).set_parallelism(7).print()
    sg = env.get_stream_graph()
    assert node_named(sg, "Map").parallelism == 7
    assert node_named(sg, "Sink: Print to Std. Out").parallelism == 4


# --------------------------------------------------------------------------- names


def test_default_operator_and_endpoint_names(env):
    env.from_collection([1]).map(identity).flat_map(lambda x: [x]).filter(bool).print()
    sg = env.get_stream_graph()
    assert sorted(n.operator_name for n in sg.nodes.values()) == sorted(
        ["Source: Collection Source", "Map", "FlatMap", "Filter", "Sink: Print to Std. Out"]
    )


def test_user_names_get_source_and_sink_prefixes(env):
    env.from_collection([1]).name("numbers").map(identity).name("double").print().name("out")
    sg = env.get_stream_graph()
    assert sorted(n.operator_name for n in sg.nodes.values()) == sorted(["Source: numbers", "double", "Sink: out"])


def test_add_source_names(env):
    env.add_source(Endless()).print()
    env.add_source(Endless(), "ticks").print()
    sg = env.get_stream_graph()
    sources = sorted(sg.nodes[i].operator_name for i in sg.source_ids)
    assert sources == ["Source: Custom Source", "Source: ticks"]


def test_stream_node_str_is_name_dash_id(env):
    env.from_collection([1]).map(identity).name("Named").print()
    sg = env.get_stream_graph()
    for node_id, node in sg.nodes.items():
        assert node.id == node_id
        assert str(node) == f"{node.operator_name}-{node_id}"


def test_source_and_sink_ids(env):
    env.from_collection([1]).map(identity).print()
    env.from_collection([2]).print()
    sg = env.get_stream_graph()
    assert {sg.nodes[i].operator_name for i in sg.source_ids} == {"Source: Collection Source"}
    assert len(sg.source_ids) == 2
    assert len(sg.sink_ids) == 2
    for i in sg.source_ids:
        assert sg.nodes[i].in_edges == []
    for i in sg.sink_ids:
        assert sg.nodes[i].out_edges == []


# --------------------------------------------------------------------------- unions


def test_union_adds_no_node_and_one_edge_per_input(env):
    env.set_parallelism(2)
    a = env.from_collection([1]).name("A")
    b = env.from_collection([2]).name("B")
    c = env.from_collection([3]).name("C")
    a.union(b, c).map(identity).name("U").print()
    sg = env.get_stream_graph()
    u = node_named(sg, "U")
    assert sorted(sg.nodes[e.source_id].operator_name for e in u.in_edges) == ["Source: A", "Source: B", "Source: C"]
    assert len(sg.nodes) == 5


def test_union_with_itself_gives_two_edges(env):
    env.set_parallelism(2)
    m = env.from_collection([1]).map(identity).name("M")
    m.union(m).filter(bool).name("F").print()
    sg = env.get_stream_graph()
    assert len(edges_between(sg, "M", "F")) == 2


def test_partition_over_union_applies_to_every_input(env):
    env.set_parallelism(2)
    a = env.from_collection([1]).name("A")
    b = env.from_collection([2]).name("B")
    a.union(b).shuffle().map(identity).name("U").print()
    sg = env.get_stream_graph()
    assert str(the_edge(sg, "Source: A", "U").partitioner) == "SHUFFLE"
    assert str(the_edge(sg, "Source: B", "U").partitioner) == "SHUFFLE"


def test_union_inputs_get_their_own_default_partitioner(env):
    env.set_parallelism(2)
    a = env.from_collection([1]).name("A")  # parallelism 1
    b = env.from_sequence(1, 5).name("B")  # parallelism 2
    a.union(b).map(identity).name("U").print()
    sg = env.get_stream_graph()
    assert str(the_edge(sg, "Source: A", "U").partitioner) == "REBALANCE"
    assert str(the_edge(sg, "Source: B", "U").partitioner) == "FORWARD"


class TwoSideOutputs(ProcessFunction):
    def __init__(self, odd, big):
        self.odd, self.big = odd, big

    def process_element(self, value, ctx):
        yield (self.odd if value % 2 else self.big), value


@pytest.mark.parametrize("padding", range(6))
def test_two_partitioned_side_outputs_each_reach_their_own_consumer(env, padding):
    """Virtual nodes (side outputs, partitions) get unique ids, whatever the transformation ids."""
    env.set_parallelism(2)
    odd, big = OutputTag("odd", Types.INT()), OutputTag("big", Types.INT())
    for _ in range(padding):  # shifts the transformation ids the virtual ids are derived from
        env.from_collection([0]).print()
    split = env.from_collection([1, 2, 3]).process(TwoSideOutputs(odd, big)).name("Split")
    odd_rebalanced = split.get_side_output(odd).rebalance()
    odd_rebalanced.map(identity).name("Odd").print()
    big_shuffled = split.get_side_output(big).shuffle()
    big_shuffled.map(identity).name("Big").print()
    split.get_side_output(odd).broadcast().map(identity).name("Odd2").print()
    # second consumers, translated after every virtual node above exists
    odd_rebalanced.map(identity).name("OddAgain").print()
    big_shuffled.map(identity).name("BigAgain").print()
    sg = env.get_stream_graph()
    assert tag_id(the_edge(sg, "Split", "OddAgain").output_tag) == "odd"
    assert str(the_edge(sg, "Split", "OddAgain").partitioner) == "REBALANCE"
    assert tag_id(the_edge(sg, "Split", "BigAgain").output_tag) == "big"
    assert str(the_edge(sg, "Split", "BigAgain").partitioner) == "SHUFFLE"
    assert tag_id(the_edge(sg, "Split", "Odd").output_tag) == "odd"
    assert str(the_edge(sg, "Split", "Odd").partitioner) == "REBALANCE"
    assert tag_id(the_edge(sg, "Split", "Big").output_tag) == "big"
    assert str(the_edge(sg, "Split", "Big").partitioner) == "SHUFFLE"
    assert tag_id(the_edge(sg, "Split", "Odd2").output_tag) == "odd"
    assert str(the_edge(sg, "Split", "Odd2").partitioner) == "BROADCAST"
