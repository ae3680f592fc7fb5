"""Keys a key selector may return, checked against PyFlink.

PyFlink serializes each key (pickled when no key type is given) and compares the bytes, so a key
selector may return a list (its ``test_keyed_min_by_and_max`` keys by ``lambda x: [1]``), a dict or
a set; equal values are the same key. Key groups must not depend on Python's salted ``hash``.
A key that cannot be a key fails with an error that names it.
"""
from __future__ import annotations


import pytest

from millstream.datastream import KeyedProcessFunction, RuntimeExecutionMode, StreamExecutionEnvironment
from millstream.datastream.state import ValueStateDescriptor
from millstream.runtime.keygroups import assign_to_key_group
from millstream.runtime.keys import UnkeyableError, hashable_key, hashable_keys
from millstream.runtime.task.environment import BATCH, STREAMING

from .test_combiner import _combine, _dataset
from .test_runtime_chain import collect, run_job


@pytest.fixture
def env() -> StreamExecutionEnvironment:
    return StreamExecutionEnvironment.get_execution_environment()


def test_a_list_key_groups_all_records_into_one_key_as_pyflink(env) -> None:
    pairs = [(1, 9), (1, 5), (2, 6), (5, 5), (5, 3)]
    collect(env.from_collection(pairs).key_by(lambda x: [1]).min_by(1))
    assert run_job(env, STREAMING)["out"] == [(1, 9), (1, 5), (1, 5), (1, 5), (5, 3)]


def test_a_list_key_in_batch_mode_gives_one_final_record(env) -> None:
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    env.set_parallelism(2)
    collect(env.from_collection([(1, 9), (1, 5), (2, 6)]).key_by(lambda x: [x[0] % 2]).sum(1))
    assert sorted(run_job(env, BATCH)["out"]) == [(1, 14), (2, 6)]


class CountPerKey(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("n", None))

    def process_element(self, value, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        key = ctx.get_current_key()
        kind = next(t.__name__ for t in (dict, set, list) if isinstance(key, t))
        yield kind, key, n


def test_dict_set_and_nested_list_keys_keep_state_per_equal_value_and_their_type(env) -> None:
    records = [{"k": [1, 2]}, {"k": [1, 2]}, {"k": [3]}]
    collect(env.from_collection(records).key_by(lambda r: r).process(CountPerKey()))
    assert run_job(env)["out"] == [("dict", {"k": [1, 2]}, 1), ("dict", {"k": [1, 2]}, 2), ("dict", {"k": [3]}, 1)]
    env2 = StreamExecutionEnvironment.get_execution_environment()
    collect(env2.from_collection([1, 2, 3]).key_by(lambda r: {r % 2, "s"}).process(CountPerKey()))
    out = run_job(env2)["out"]
    assert [(t, n) for t, _, n in out] == [("set", 1), ("set", 1), ("set", 2)]
    assert out[2][1] == {1, "s"} and repr(out[2][1]) in ("{1, 's'}", "{'s', 1}")


def test_a_twin_equals_prints_and_routes_as_its_original() -> None:
    for key in ([1, [2, "x"]], {"a": [1]}, {1, 2}, bytearray(b"ab"), ([1], 2)):
        twin = hashable_key(key)
        assert twin == key and hash(twin) == hash(hashable_key(key))
        assert assign_to_key_group(twin, 128) == assign_to_key_group(key, 128)
        if not isinstance(key, (bytearray, tuple)):
            assert isinstance(twin, type(key)) and repr(twin) == repr(key)


def test_hashable_keys_returns_a_batch_of_hashable_keys_unchanged() -> None:
    keys = ["a", 1, (1, "b"), None, 2.5]
    assert hashable_keys(keys) is keys


class Point:
    """Compares by value but defines no ``__hash__``: Python makes it unhashable."""

    def __init__(self, x):
        self.x = x

    def __eq__(self, other):
        return isinstance(other, Point) and other.x == self.x

    def __repr__(self):
        return f"Point({self.x})"


def test_an_unhashable_object_key_fails_the_job_naming_the_key(env) -> None:
    with pytest.raises(UnkeyableError, match=r"The key Point\(1\) of type Point cannot be used as a key"):
        hashable_keys([Point(1)])
    collect(env.from_collection([1]).key_by(lambda r: Point(r)).map(lambda r: r))
    with pytest.raises(Exception, match=r"key selector: UnkeyableError: The key Point\(1\) of type Point"):
        run_job(env)


def test_a_key_that_cannot_be_serialized_fails_naming_the_key(env) -> None:
    class Local:
        def __repr__(self):
            return "Local()"

    collect(env.from_collection([1]).key_by(lambda r: Local()).map(lambda r: r))
    with pytest.raises(TypeError, match=r"The key Local\(\) of type Local has no stable hash"):
        run_job(env)


def test_list_keys_in_the_combiners_counting_fast_path_count_exactly() -> None:
    dataset = _dataset(RuntimeExecutionMode.BATCH, lambda k: k.sum(1))  # keyed by lambda t: t[0]
    records = [("a", 1), ("b", 1), (["x"], 1), ("a", 1), (["x"], 1), ({"d": 1}, 1)]
    (partial,) = _combine(dataset, [records])
    assert sorted(map(repr, partial)) == sorted(map(repr, [("a", 2), ("b", 1), (["x"], 2), ({"d": 1}, 1)]))
