"""The user-facing API: PyFlink import paths, environment settings, sources/sinks, keyed streams,
and the execution plan JSON (Flink's JSONGenerator shape)."""
from __future__ import annotations

import json
import os

import pytest

from millstream.common import Configuration, Row, Types, WatermarkStrategy
from millstream.datastream import (
    KeyedProcessFunction,
    KeySelector,
    MapFunction,
    OutputTag,
    ProcessFunction,
    RuntimeExecutionMode,
    SinkFunction,
    StreamExecutionEnvironment,
)
from millstream.datastream.connectors.file_system import FileSink, FileSource, StreamFormat


def identity(x):
    return x


class Double(MapFunction):
    def map(self, value):
        return value * 2


class Count(KeyedProcessFunction):
    def process_element(self, value, ctx):
        yield value


class Discard(SinkFunction):
    def invoke(self, value, context=None):
        pass


def ops(env):
    return sorted(o for v in env.get_job_graph().to_dict()["vertices"] for o in v["operators"])


def vertex_of(env, op_name):
    found = [v for v in env.get_job_graph().to_dict()["vertices"] if op_name in v["operators"]]
    assert len(found) == 1
    return found[0]


# --------------------------------------------------------------------------- environment


def test_each_environment_is_independent():
    a = StreamExecutionEnvironment.get_execution_environment()
    b = StreamExecutionEnvironment.get_execution_environment()
    a.set_parallelism(3)
    a.from_collection([1]).print()
    b.from_collection([1]).map(identity).print()
    assert len(a.get_stream_graph().nodes) == 2
    assert len(b.get_stream_graph().nodes) == 3


def test_parallelism_getters(env):
    env.set_parallelism(6)
    assert env.get_parallelism() == 6


def test_set_runtime_mode(env):
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    env.from_collection([1]).print()
    assert env.get_job_graph().proto.execution_config.runtime_mode == 2  # BATCH


def test_get_job_graph_does_not_consume_the_pipeline(env):
    env.from_collection([1]).map(identity).print()
    first = env.get_job_graph().to_dict()
    second = env.get_job_graph().to_dict()
    assert first == second
    assert len(first["vertices"]) >= 1


# --------------------------------------------------------------------------- sources and sinks


def test_from_sequence_is_parallel(env):
    env.set_parallelism(4)
    env.from_sequence(1, 100).map(identity).print()
    v = vertex_of(env, "Map")
    assert v["parallelism"] == 4
    assert v["operators"][0].startswith("Source: ")  # source chained with the map


def test_read_text_file_is_parallel(env, tmp_path):
    f = tmp_path / "in.txt"
    f.write_text("a\nb\nc\n")
    env.set_parallelism(3)
    env.read_text_file(str(f)).map(identity).print()
    v = vertex_of(env, "Map")
    assert v["parallelism"] == 3
    assert v["operators"][0].startswith("Source: ")


def test_from_source_file_source_named(env, tmp_path):
    f = tmp_path / "in.txt"
    f.write_text("a\n")
    env.set_parallelism(2)
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(f)).build()
    env.from_source(source, WatermarkStrategy.no_watermarks(), "files").map(identity).print()
    sg = env.get_stream_graph()
    src = [sg.nodes[i] for i in sg.source_ids]
    assert [n.operator_name for n in src] == ["Source: files"]
    assert src[0].parallelism == 2


def test_add_sink_and_sink_to_are_sinks(env, tmp_path):
    ds = env.from_collection([1, 2])
    ds.add_sink(Discard()).name("discard")
    ds.sink_to(FileSink.for_row_format(str(tmp_path / "out")).build())
    sg = env.get_stream_graph()
    sinks = sorted(sg.nodes[i].operator_name for i in sg.sink_ids)
    assert len(sinks) == 2
    assert "Sink: discard" in sinks
    assert all(name.startswith("Sink: ") for name in sinks)


def test_print_sink_name(env):
    env.from_collection([1]).print()
    assert [v["name"] for v in env.get_job_graph().to_dict()["vertices"]] == [
        "Source: Collection Source -> Sink: Print to Std. Out"
    ]


def test_function_classes_and_callables_both_accepted(env):
    env.set_parallelism(1)
    env.from_collection([1]).map(Double()).name("cls").map(lambda x: x + 1).name("fn").print()
    assert ops(env) == sorted(["Source: Collection Source", "cls", "fn", "Sink: Print to Std. Out"])


def test_row_values_in_collection(env):
    env.from_collection([Row(1, "a"), Row(2, "b")], type_info=Types.ROW([Types.INT(), Types.STRING()])).print()
    env.get_job_graph()


# --------------------------------------------------------------------------- keyed streams


@pytest.mark.parametrize(
    "keyed_op",
    [
        lambda ks: ks.reduce(lambda a, b: a),
        lambda ks: ks.sum(1),
        lambda ks: ks.min(1),
        lambda ks: ks.max(1),
        lambda ks: ks.min_by(1),
        lambda ks: ks.max_by(1),
        lambda ks: ks.process(Count()),
        lambda ks: ks.map(identity),
        lambda ks: ks.flat_map(lambda x: [x]),
        lambda ks: ks.filter(lambda x: True),
    ],
    ids=["reduce", "sum", "min", "max", "min_by", "max_by", "process", "map", "flat_map", "filter"],
)
def test_keyed_operations_get_hash_input_and_key_selector(env, keyed_op):
    env.set_parallelism(2)
    src = env.from_collection([(1, 2), (1, 3)]).map(identity).name("Up")
    keyed_op(src.key_by(lambda t: t[0])).name("KeyedOp").print()
    jg = env.get_job_graph()
    d = jg.to_dict()
    v = [x for x in d["vertices"] if "KeyedOp" in x["operators"]][0]
    assert [i["ship_strategy"] for i in v["inputs"]] == ["HASH"]
    op = [o for pv in jg.proto.vertices for o in pv.operators if o.name == "KeyedOp"][0]
    assert op.state_key_selector, "a keyed operator must carry its key selector"


def test_key_by_with_key_selector_class(env):
    class First(KeySelector):
        def get_key(self, value):
            return value[0]

    env.set_parallelism(2)
    env.from_collection([(1, 2)]).key_by(First()).sum(1).name("S").print()
    assert [i["ship_strategy"] for i in vertex_of(env, "S")["inputs"]] == ["HASH"]


def test_process_function_on_non_keyed_stream(env):
    class P(ProcessFunction):
        def process_element(self, value, ctx):
            yield value

    env.from_collection([1]).process(P()).name("P").print()
    assert "P" in ops(env)


def test_get_side_output_returns_a_stream(env):
    class P(ProcessFunction):
        def process_element(self, value, ctx):
            yield OutputTag("s", Types.INT()), value

    p = env.from_collection([1]).process(P())
    side = p.get_side_output(OutputTag("s", Types.INT()))
    side.map(identity).name("OnSide").print()
    assert "OnSide" in ops(env)


# --------------------------------------------------------------------------- execution plan


def _plan(env):
    return json.loads(env.get_execution_plan())


def test_execution_plan_shape(env):
    env.set_parallelism(2)
    src = env.from_collection([1, 2]).name("nums")
    src.map(identity).name("M").rebalance().filter(bool).name("F").print().name("out")
    plan = _plan(env)
    assert set(plan) == {"nodes"}
    nodes = {n["id"]: n for n in plan["nodes"]}
    assert len(nodes) == 4  # rebalance is virtual: it is no node
    by_type = {n["type"]: n for n in plan["nodes"]}
    assert set(by_type) == {"Source: nums", "M", "F", "Sink: out"}
    for n in plan["nodes"]:
        assert isinstance(n["id"], int)
        assert {"id", "type", "pact", "contents", "parallelism"} <= set(n)
        assert n["contents"] == n["type"]
    assert by_type["Source: nums"]["pact"] == "Data Source"
    assert by_type["Sink: out"]["pact"] == "Data Sink"
    assert by_type["M"]["pact"] == "Operator"
    assert by_type["F"]["pact"] == "Operator"
    assert by_type["Source: nums"]["parallelism"] == 1
    assert by_type["M"]["parallelism"] == 2
    assert not by_type["Source: nums"].get("predecessors")

    def preds(t):
        return [(nodes[p["id"]]["type"], p["ship_strategy"]) for p in by_type[t]["predecessors"]]

    assert preds("M") == [("Source: nums", "REBALANCE")]
    assert preds("F") == [("M", "REBALANCE")]
    assert preds("Sink: out") == [("F", "FORWARD")]
    for n in plan["nodes"]:
        for p in n.get("predecessors", []):
            assert set(p) == {"id", "ship_strategy", "side"}
            assert p["side"] in ("first", "second")


def test_execution_plan_lists_sinks_last(env):
    # Flink's JSONGenerator orders nodes by (is sink, id): every sink comes after every operator.
    env.set_parallelism(2)
    a = env.from_collection([1]).name("a")
    a.print().name("early")
    a.map(identity).name("late-map").print().name("late")
    types = [n["type"] for n in _plan(env)["nodes"]]
    first_sink = min(i for i, t in enumerate(types) if t.startswith("Sink: "))
    assert all(t.startswith("Sink: ") for t in types[first_sink:])


def test_execution_plan_ship_strategies(env):
    env.set_parallelism(2)
    s = env.from_collection([1]).map(identity).name("S")
    s.shuffle().map(identity).name("sh").print()
    s.broadcast().map(identity).name("bc").print()
    s.key_by(identity).map(identity).name("kb").print()
    s.global_().map(identity).name("gl").print()
    s.rescale().map(identity).name("rs").print()
    s.partition_custom(lambda k, n: 0, identity).map(identity).name("cu").print()
    nodes = _plan(env)["nodes"]
    by_type = {n["type"]: n for n in nodes}
    got = {t: by_type[t]["predecessors"][0]["ship_strategy"] for t in ("sh", "bc", "kb", "gl", "rs", "cu")}
    assert got == {"sh": "SHUFFLE", "bc": "BROADCAST", "kb": "HASH", "gl": "GLOBAL", "rs": "RESCALE", "cu": "CUSTOM"}


def test_execution_plan_union_has_one_predecessor_per_input(env):
    a = env.from_collection([1]).name("a")
    b = env.from_collection([2]).name("b")
    a.union(b).map(identity).name("U").print()
    nodes = _plan(env)["nodes"]
    ids = {n["id"]: n["type"] for n in nodes}
    u = next(n for n in nodes if n["type"] == "U")
    assert sorted(ids[p["id"]] for p in u["predecessors"]) == ["Source: a", "Source: b"]


def test_execution_plan_shows_a_key_by_as_pyflinks_key_by_map_operator(env):
    # PyFlink 2.3: key_by adds `_stream_key_by_map_operator` (aligned with its input: same
    # parallelism, FORWARD) before the HASH exchange; every consumer of the keyed stream reads it
    env.set_parallelism(2)
    src = env.from_collection([("a", 1)]).name("src")
    keyed = src.key_by(lambda x: x[1])
    keyed.map(identity).name("m3").set_parallelism(3).print().set_parallelism(4)
    keyed.reduce(lambda a, b: a).name("r").print()
    nodes = _plan(env)["nodes"]
    types = [n["type"] for n in nodes]
    assert types[:2] == ["Source: src", "_stream_key_by_map_operator"] and types.count("_stream_key_by_map_operator") == 1
    key_by = nodes[1]
    assert key_by["pact"] == "Operator" and key_by["contents"] == "_stream_key_by_map_operator"
    assert key_by["parallelism"] == nodes[0]["parallelism"] == 1
    assert key_by["predecessors"] == [{"id": nodes[0]["id"], "ship_strategy": "FORWARD", "side": "second"}]
    by_type = {n["type"]: n for n in nodes}
    for consumer in ("m3", "r"):
        assert [(p["id"], p["ship_strategy"]) for p in by_type[consumer]["predecessors"]] == [(key_by["id"], "HASH")]
    assert by_type["m3"]["parallelism"] == 3
    # only the plan shows it: the StreamGraph's keyed edge still runs from the source, hashing there
    graph = env.get_stream_graph()
    m3 = next(n for n in graph.nodes.values() if n.operator_name == "m3")
    assert [graph.node(e.source_id).operator_name for e in m3.in_edges] == ["Source: src"]


def test_a_union_of_keyed_streams_goes_through_pyflinks_values_operators(env):
    # PyFlink 2.3: KeyedStream.union (and a keyed stream given to union) is `_values().union(...)`,
    # an operator named `_keyed_stream_values_operator` fed by the HASH exchange
    a = env.from_collection([1, 2, 3]).key_by(lambda x: x)
    b = env.from_collection([4, 5, 6]).key_by(lambda x: x)
    c = env.from_collection([7])
    a.union(b).print().name("u1")
    c.union(b).print().name("u2")
    nodes = _plan(env)["nodes"]
    values = {n["id"]: n for n in nodes if n["type"] == "_keyed_stream_values_operator"}
    assert len(values) == 3
    assert all([p["ship_strategy"] for p in v["predecessors"]] == ["HASH"] for v in values.values())
    sinks = {n["type"]: n for n in nodes if n["pact"] == "Data Sink"}
    assert sorted(p["id"] for p in sinks["Sink: u1"]["predecessors"]) == sorted(list(values)[:2])
    u2 = sorted(p["id"] for p in sinks["Sink: u2"]["predecessors"])
    assert u2[1] == list(values)[2] and next(n for n in nodes if n["id"] == u2[0])["type"] == "Source: Collection Source"
    assert a.union(b).get_type() == a.get_type()


def test_key_by_rejects_key_types_that_cannot_be_keys() -> None:
    from millstream.common import Types
    from millstream.datastream import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    words = env.from_collection([["a"]]).name("lists")
    with pytest.raises(ValueError, match=r"key_by on 'lists': type LIST<STRING> cannot be used as a key"):
        words.key_by(lambda x: x, key_type=Types.LIST(Types.STRING()))
    with pytest.raises(TypeError, match="key_by on 'lists' needs a KeySelector or a callable"):
        words.key_by("not callable")
    words.key_by(lambda x: tuple(x), key_type=Types.TUPLE([Types.STRING()]))  # fine


def test_local_default_parallelism_is_the_number_of_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    from millstream.datastream import stream_execution_environment as module

    monkeypatch.undo()  # the conftest pins 1; this test checks the real rule
    monkeypatch.delenv("MILLSTREAM_JOBMANAGER", raising=False)
    monkeypatch.setattr(module.os, "cpu_count", lambda: 7)
    assert StreamExecutionEnvironment.get_execution_environment().get_parallelism() == 7
    monkeypatch.setenv("MILLSTREAM_JOBMANAGER", "localhost:6123")  # a job for a cluster: 1, as Flink
    assert StreamExecutionEnvironment.get_execution_environment().get_parallelism() == 1
    conf = Configuration()
    conf.set_string("parallelism.default", "3")
    assert StreamExecutionEnvironment.get_execution_environment(conf).get_parallelism() == 3


def test_default_local_parallelism_applies_to_local_environments_created_later(monkeypatch: pytest.MonkeyPatch) -> None:
    # Flink's setDefaultLocalParallelism is static: it changes the parallelism of local
    # environments created afterwards, not of the environment it was called on
    monkeypatch.undo()  # the conftest pins 1; this test checks the real rule
    monkeypatch.setattr(StreamExecutionEnvironment, "_default_local_parallelism", None)
    monkeypatch.delenv("MILLSTREAM_JOBMANAGER", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 7)
    env = StreamExecutionEnvironment.get_execution_environment()
    assert env.get_default_local_parallelism() == 7
    env.set_default_local_parallelism(3)
    assert env.get_default_local_parallelism() == 3
    assert env.get_parallelism() == 7
    assert StreamExecutionEnvironment.get_execution_environment().get_parallelism() == 3
    monkeypatch.setenv("MILLSTREAM_JOBMANAGER", "localhost:6123")  # a job for a cluster is not local
    assert StreamExecutionEnvironment.get_execution_environment().get_parallelism() == 1
    with pytest.raises(ValueError, match="default local parallelism must be at least 1, got 0"):
        env.set_default_local_parallelism(0)
