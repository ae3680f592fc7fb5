"""DataStream/KeyedStream calls checked against PyFlink's definitions (pyflink/datastream/data_stream.py).

- Collecting a KeyedStream: PyFlink's key_by pairs each record with its key, so a keyed stream's
  records, and what ``execute_and_collect`` returns for one, are ``Row(f0=key, f1=value)``.
- KeyedStream's partitioning calls (shuffle, rebalance, rescale, forward, broadcast,
  partition_custom) raise ``Exception('Cannot override partitioning for KeyedStream.')``.
- ``force_non_parallel()``: parallelism and max parallelism 1, and no other parallelism later.
- ``project(*field_indexes)``: the kept fields of a tuple stream, in the given order; a stream that
  is not a tuple stream raises ``Exception('Only Tuple DataStreams can be projected.')``.
"""
from __future__ import annotations

import pytest

from millstream.common import Row, Types
from millstream.datastream import StreamExecutionEnvironment

from .test_runtime_chain import collect, run_job


@pytest.fixture
def env() -> StreamExecutionEnvironment:
    return StreamExecutionEnvironment.get_execution_environment()


def _collect_in_process(env, monkeypatch):
    """execute_and_collect builds its pipeline as usual; the job then runs in this process."""
    monkeypatch.setattr(env, "_execute_and_collect", lambda stream, name, limit: collect(stream))


def test_collecting_a_keyed_stream_gives_rows_of_key_and_value(env, monkeypatch) -> None:
    _collect_in_process(env, monkeypatch)
    env.from_collection([(1, "a"), (2, "b"), (1, "c")]).key_by(lambda x: x[0]).execute_and_collect()
    out = run_job(env)["out"]
    assert out == [Row.of_names(["f0", "f1"], [k, v]) for k, v in [(1, (1, "a")), (2, (2, "b")), (1, (1, "c"))]]
    assert repr(out[0]) == "Row(f0=1, f1=(1, 'a'))"


def test_collecting_a_keyed_stream_with_a_list_key(env, monkeypatch) -> None:
    _collect_in_process(env, monkeypatch)
    env.from_collection(["x", "y"]).key_by(lambda s: [s]).execute_and_collect()
    assert [(list(r)[0], r.f1) for r in run_job(env)["out"]] == [(["x"], "x"), (["y"], "y")]


def test_a_keyed_streams_print_and_map_still_see_values(env) -> None:
    keyed = env.from_collection([(1, "a")]).key_by(lambda x: x[0])
    collect(keyed.map(lambda v: v))
    assert run_job(env)["out"] == [(1, "a")]


@pytest.mark.parametrize("call", [
    lambda k: k.shuffle(), lambda k: k.rebalance(), lambda k: k.rescale(), lambda k: k.forward(),
    lambda k: k.broadcast(), lambda k: k.global_(), lambda k: k.partition_custom(lambda key, n: 0, lambda x: x),
])
def test_partitioning_a_keyed_stream_raises_as_pyflink(env, call) -> None:
    keyed = env.from_collection([1, 2]).key_by(lambda x: x)
    with pytest.raises(Exception, match=r"^Cannot override partitioning for KeyedStream\.$"):
        call(keyed)


def test_force_non_parallel_pins_parallelism_and_max_parallelism_to_1(env) -> None:
    env.set_parallelism(4)
    mapped = env.from_sequence(1, 10).map(lambda x: x).force_non_parallel()
    mapped.print()
    t = mapped.get_transformation()
    assert (t.parallelism, t.max_parallelism) == (1, 1)
    with pytest.raises(ValueError, match="The parallelism of non parallel operator .*must be 1"):
        mapped.set_parallelism(2)
    mapped.set_parallelism(1)
    (vertex,) = [v for v in env.get_job_graph().vertices if "Map" in v.name]
    assert vertex.parallelism == 1


def test_project_keeps_the_given_tuple_fields_in_order_and_types_them(env) -> None:
    ds = env.from_collection([(1, "a", 2.5), (2, "b", 3.5)],
                             type_info=Types.TUPLE([Types.INT(), Types.STRING(), Types.DOUBLE()]))
    projected = ds.project(2, 0)
    assert projected.get_type() == Types.TUPLE([Types.DOUBLE(), Types.INT()])
    collect(projected)
    assert run_job(env)["out"] == [(2.5, 1), (3.5, 2)]


def test_project_on_rows_keeps_field_names(env) -> None:
    ds = env.from_collection([(1, "a")], type_info=Types.ROW_NAMED(["id", "name"], [Types.INT(), Types.STRING()]))
    collect(ds.project(1))
    (row,) = run_job(env)["out"]
    assert row.name == "a" and len(row) == 1


def test_project_needs_a_tuple_stream_and_valid_indexes(env) -> None:
    with pytest.raises(Exception, match=r"^Only Tuple DataStreams can be projected\.$"):
        env.from_collection([(1, 2)]).project(0)  # no type info: pickled objects
    typed = env.from_collection([(1, 2)], type_info=Types.TUPLE([Types.INT(), Types.INT()]))
    with pytest.raises(IndexError, match="field index 2 is out of range"):
        typed.project(2)


def test_project_on_a_keyed_stream_projects_its_values(env) -> None:
    ds = env.from_collection([(1, "a")], type_info=Types.TUPLE([Types.INT(), Types.STRING()]))
    collect(ds.key_by(lambda x: x[0]).project(1))
    assert run_job(env)["out"] == [("a",)]
