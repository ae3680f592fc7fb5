"""Validation: client-side errors while building graphs, and JobManager-side validation of
submitted (possibly malformed) JobGraph protos.

Client rules (issue 2 "API" and "Graph layers" 6; Flink's OperatorValidationUtils and
SingleOutputStreamOperator#getSideOutput): bad parallelism is rejected at once with ValueError;
a non-parallel source cannot get parallelism > 1; parallelism above max parallelism, a side-output
tag reused with another type, two operators with one uid, and functions cloudpickle cannot
serialize are rejected while the graph is built, with a message that names the operator.
"""
from __future__ import annotations

import socket
import threading

import pytest

from millstream.client.stream_graph import StreamGraphError
from millstream.common import Types
from millstream.datastream import MapFunction, OutputTag, ProcessFunction
from millstream.jobmanager.jobmaster.job_graph_validation import InvalidJobGraphError, validate_job_graph
from millstream.proto import jobgraph_pb2 as pb


def identity(x):
    return x


class Tagger(ProcessFunction):
    def process_element(self, value, ctx):
        yield value


# =========================================================================== client side


@pytest.mark.parametrize("bad", [0, -1])
def test_operator_parallelism_below_one_rejected_immediately(env, bad):
    m = env.from_collection([1]).map(identity).name("M")
    with pytest.raises(ValueError):
        m.set_parallelism(bad)


@pytest.mark.parametrize("bad", [0, -3])
def test_env_parallelism_below_one_rejected_immediately(env, bad):
    with pytest.raises(ValueError):
        env.set_parallelism(bad)


def test_sink_parallelism_below_one_rejected_immediately(env):
    sink = env.from_collection([1]).print()
    with pytest.raises(ValueError):
        sink.set_parallelism(0)


def test_non_parallel_source_cannot_get_parallelism_above_one(env):
    src = env.from_collection([1, 2, 3])
    with pytest.raises(ValueError):
        src.set_parallelism(2)


def test_non_parallel_source_accepts_parallelism_one(env):
    env.from_collection([1, 2, 3]).set_parallelism(1).print()
    env.get_job_graph()


@pytest.mark.parametrize("bad", [0, -1, 32769])
def test_max_parallelism_out_of_range_rejected(env, bad):
    with pytest.raises(ValueError):
        env.set_max_parallelism(bad)
    m = env.from_collection([1]).map(identity)
    with pytest.raises(ValueError):
        m.set_max_parallelism(bad)


def test_max_parallelism_bounds_accepted(env):
    env.set_max_parallelism(32768)
    env.from_collection([1]).map(identity).set_max_parallelism(1).set_parallelism(1).print()
    env.get_job_graph()


def test_parallelism_above_max_parallelism_names_the_operator(env):
    env.set_parallelism(2)
    with pytest.raises(ValueError) as err:
        env.from_collection([1]).map(identity).name("Overfull").set_parallelism(10).set_max_parallelism(4).print()
        env.get_job_graph()
    assert "Overfull" in str(err.value)


def test_parallelism_above_env_max_parallelism_names_the_operator(env):
    env.set_max_parallelism(4)
    with pytest.raises(ValueError) as err:
        env.from_collection([1]).map(identity).name("TooWide").set_parallelism(8).print().set_parallelism(1)
        env.get_job_graph()
    assert "TooWide" in str(err.value)


def test_side_output_tag_reused_with_another_type(env):
    with pytest.raises(ValueError) as err:
        p = env.from_collection([1]).process(Tagger()).name("Splitter")
        p.get_side_output(OutputTag("late", Types.STRING())).print()
        p.get_side_output(OutputTag("late", Types.INT())).print()
        env.get_job_graph()
    assert "Splitter" in str(err.value)
    assert "late" in str(err.value)


def test_side_output_tag_reused_with_same_type_is_fine(env):
    p = env.from_collection([1]).process(Tagger()).name("Splitter")
    p.get_side_output(OutputTag("late", Types.INT())).print()
    p.get_side_output(OutputTag("late", Types.INT())).map(identity).print()
    env.get_job_graph()


def test_same_tag_id_on_different_operators_is_fine(env):
    src = env.from_collection([1])
    src.process(Tagger()).name("P1").get_side_output(OutputTag("late", Types.INT())).print()
    src.process(Tagger()).name("P2").get_side_output(OutputTag("late", Types.STRING())).print()
    env.get_job_graph()


def test_duplicate_uid_names_the_uid(env):
    src = env.from_collection([1])
    src.map(identity).uid("my-uid").print()
    src.map(identity).uid("my-uid").print()
    with pytest.raises(StreamGraphError, match="Hash collision on user-specified ID") as err:
        env.get_job_graph()
    assert "my-uid" in str(err.value)


def _mentions_serialization(msg: str) -> bool:
    low = msg.lower()
    return "pickl" in low or "serializ" in low


def test_unpicklable_lambda_rejected_at_get_job_graph(env):
    lock = threading.Lock()
    env.from_collection([1]).map(lambda x: (lock, x)[1]).name("Locky").print()
    with pytest.raises(StreamGraphError) as err:
        env.get_job_graph()
    assert "Locky" in str(err.value)
    assert _mentions_serialization(str(err.value)), str(err.value)


def test_unpicklable_socket_in_filter_rejected(env):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        env.from_collection([1]).filter(lambda x: sock is not None).name("Socky").print()
        with pytest.raises(StreamGraphError) as err:
            env.get_job_graph()
        assert "Socky" in str(err.value)
        assert _mentions_serialization(str(err.value)), str(err.value)
    finally:
        sock.close()


def test_unpicklable_function_object_rejected(env):
    class Holder(MapFunction):
        def __init__(self):
            self.lock = threading.Lock()

        def map(self, value):
            return value

    env.from_collection([1]).map(Holder()).name("Holding").print()
    with pytest.raises(StreamGraphError) as err:
        env.get_job_graph()
    assert "Holding" in str(err.value)


def test_unpicklable_key_selector_rejected_while_building(env):
    lock = threading.Lock()
    env.set_parallelism(2)
    env.from_collection([1]).key_by(lambda x: (lock, x)[1]).map(identity).name("Keyed").print()
    with pytest.raises(StreamGraphError) as err:
        env.get_job_graph()
    assert "Keyed" in str(err.value)  # the operator whose key selector it is
    assert _mentions_serialization(str(err.value)), str(err.value)


def test_unpicklable_error_only_for_the_bad_operator(env):
    # a picklable pipeline next to it builds fine on its own
    env.from_collection([1]).map(lambda x: x + 1).name("Fine").print()
    env.get_job_graph()


# =========================================================================== JobManager side


def _valid_graph(env):
    env.set_parallelism(2)
    env.from_collection([1]).name("src").map(identity).name("Mapper").rebalance().filter(bool).name(
        "Filterer"
    ).print().name("out")
    g = pb.JobGraph()
    g.CopyFrom(env.get_job_graph("valid").proto)
    assert [v.name for v in g.vertices] == ["Source: src", "Mapper", "Filterer -> Sink: out"]
    return g


def _by_name(g, prefix):
    return next(v for v in g.vertices if v.name.startswith(prefix))


def test_generated_graph_is_valid(env):
    validate_job_graph(_valid_graph(env))


def test_invalid_job_graph_error_is_value_error():
    assert issubclass(InvalidJobGraphError, ValueError)


def test_empty_graph_rejected():
    with pytest.raises(InvalidJobGraphError):
        validate_job_graph(pb.JobGraph(job_name="empty"))


def test_vertex_without_operators_rejected(env):
    g = _valid_graph(env)
    del _by_name(g, "Mapper").operators[:]
    with pytest.raises(InvalidJobGraphError, match="Mapper"):
        validate_job_graph(g)


def test_edge_from_unknown_vertex_rejected(env):
    g = _valid_graph(env)
    _by_name(g, "Filterer").inputs[0].source_vertex = b"\xab" * 16
    with pytest.raises(InvalidJobGraphError, match="Filterer"):
        validate_job_graph(g)


def test_cycle_rejected(env):
    g = _valid_graph(env)
    mapper, filterer = _by_name(g, "Mapper"), _by_name(g, "Filterer")
    back = mapper.inputs.add()
    back.CopyFrom(filterer.inputs[0])
    back.source_vertex = filterer.id  # Filterer -> Mapper closes Mapper -> Filterer
    with pytest.raises(InvalidJobGraphError) as err:
        validate_job_graph(g)
    msg = str(err.value)
    assert "cycle" in msg.lower()
    assert "Mapper" in msg or "Filterer" in msg


def test_self_loop_rejected(env):
    g = _valid_graph(env)
    mapper = _by_name(g, "Mapper")
    loop = mapper.inputs.add()
    loop.CopyFrom(mapper.inputs[0])
    loop.source_vertex = mapper.id
    with pytest.raises(InvalidJobGraphError):
        validate_job_graph(g)


@pytest.mark.parametrize("bad", [0, -2])
def test_parallelism_below_one_rejected(env, bad):
    g = _valid_graph(env)
    _by_name(g, "Mapper").parallelism = bad
    with pytest.raises(InvalidJobGraphError, match="Mapper"):
        validate_job_graph(g)


def test_max_parallelism_below_parallelism_rejected(env):
    g = _valid_graph(env)
    v = _by_name(g, "Mapper")
    v.parallelism = 8
    v.max_parallelism = 4
    with pytest.raises(InvalidJobGraphError, match="Mapper"):
        validate_job_graph(g)


def test_max_parallelism_equal_parallelism_accepted(env):
    g = _valid_graph(env)
    v = _by_name(g, "Mapper")
    v.max_parallelism = v.parallelism
    validate_job_graph(g)


def test_duplicate_vertex_ids_rejected(env):
    g = _valid_graph(env)
    dup = _by_name(g, "Mapper").id
    _by_name(g, "Filterer").id = dup
    with pytest.raises(InvalidJobGraphError) as err:
        validate_job_graph(g)
    msg = str(err.value)
    assert dup.hex() in msg or ("Mapper" in msg and "Filterer" in msg), msg


def test_validation_does_not_modify_the_graph(env):
    g = _valid_graph(env)
    before = g.SerializeToString(deterministic=True)
    validate_job_graph(g)
    assert g.SerializeToString(deterministic=True) == before


# =========================================================================== runtime mode / empty jobs


def _endless_source():
    from millstream.datastream import SourceFunction

    class Endless(SourceFunction):
        def run(self, ctx):
            while True:
                ctx.collect(1)

    return Endless()


def test_batch_mode_with_unbounded_source_rejected(env):
    # Flink: "Detected an UNBOUNDED source with the 'execution.runtime-mode' set to 'BATCH'..."
    from millstream.datastream import RuntimeExecutionMode

    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    env.add_source(_endless_source(), "forever").print()
    with pytest.raises(StreamGraphError, match="UNBOUNDED"):
        env.get_job_graph()


def test_job_without_operators_rejected(env):
    # Flink: "No operators defined in streaming topology. Cannot execute."
    with pytest.raises(ValueError, match="No operators defined in streaming topology"):
        env.get_job_graph()
