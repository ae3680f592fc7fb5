"""Declared numeric types narrow values as Java (and so PyFlink) does.

PyFlink converts ``from_collection``'s elements to the Java values of ``type_info`` and a Python
function's results to those of its ``output_type``: ``(short) 43878 == -21658``,
``(int) 9147483648 == 557549056``, ``(byte) 200 == -56``, ``(long) 2**63 == -2**63``, and a FLOAT is
a 32-bit float; inside tuples, rows, lists and maps too. Types without such components are untouched.
"""
from __future__ import annotations

import struct

import pytest

from millstream.common import Row, Types
from millstream.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from millstream.datastream.state import ValueStateDescriptor
from millstream.runtime.narrowing import batch_narrower, value_narrower
from millstream.runtime.timestamps import stamped, timestamps_of
from millstream.runtime.task.environment import STREAMING

from .test_runtime_chain import collect, run_job


@pytest.fixture
def env() -> StreamExecutionEnvironment:
    return StreamExecutionEnvironment.get_execution_environment()


def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def test_the_issues_row_of_short_and_int_narrows_as_pyflink(env) -> None:
    ds = env.from_collection([(43878, 9147483648)], type_info=Types.ROW([Types.SHORT(), Types.INT()]))
    collect(ds)
    (row,) = run_job(env)["out"]
    assert isinstance(row, Row) and list(row) == [-21658, 557549056]


@pytest.mark.parametrize("type_info, given, expected", [
    (Types.BYTE(), [200, -129, 5, True], [-56, 127, 5, True]),
    (Types.SHORT(), [32768, -32769], [-32768, 32767]),
    (Types.INT(), [2**31, -(2**31) - 1, 7], [-(2**31), 2**31 - 1, 7]),
    (Types.LONG(), [2**63, 2**64 + 3], [-(2**63), 3]),
    (Types.FLOAT(), [0.1, 1e39], [_f32(0.1), float("inf")]),
    (Types.TUPLE([Types.STRING(), Types.SHORT()]), [("a", 40000)], [("a", -25536)]),
    (Types.LIST(Types.BYTE()), [[128, 1]], [[-128, 1]]),
    (Types.MAP(Types.STRING(), Types.INT()), [{"k": 2**32 + 1}], [{"k": 1}]),
    (Types.TUPLE([Types.ROW([Types.BYTE()]), Types.DOUBLE()]), [(Row(255), 0.1)], [(Row(-1), 0.1)]),
])
def test_from_collection_narrows_plain_values_tuples_lists_maps_and_nested_rows(env, type_info, given, expected) -> None:
    collect(env.from_collection(given, type_info=type_info))
    assert run_job(env)["out"] == expected


def test_a_map_with_an_output_type_narrows_its_results(env) -> None:
    ds = env.from_collection(["a", "b"]).map(lambda s: (s, 2**31 + ord(s)), output_type=Types.TUPLE([Types.STRING(), Types.INT()]))
    collect(ds)
    assert run_job(env, STREAMING)["out"] == [("a", -(2**31) + 97), ("b", -(2**31) + 98)]


def test_a_flat_map_and_a_keyed_reduce_narrow_to_their_types(env) -> None:
    ds = env.from_collection([1, 2]).flat_map(lambda x: [x * 2**32, x], output_type=Types.LONG())
    collect(ds.map(lambda x: x * 2**32, output_type=Types.INT()), "ints")
    pairs = env.from_collection([("k", 2**30), ("k", 2**30)], type_info=Types.TUPLE([Types.STRING(), Types.INT()]))
    collect(pairs.key_by(lambda p: p[0]).reduce(lambda a, b: (a[0], a[1] + b[1])), "sums")
    out = run_job(env, STREAMING)
    assert out["ints"] == [0, 0, 0, 0]  # x * 2**32 keeps no bit of an int
    assert out["sums"] == [("k", 2**30), ("k", -(2**31))]  # Java int overflow, as PyFlink's reduce


def test_types_without_narrow_numbers_get_no_converter() -> None:
    for t in (None, Types.STRING(), Types.DOUBLE(), Types.PICKLED_BYTE_ARRAY(), Types.TUPLE([Types.STRING(), Types.DOUBLE()]),
              Types.LIST(Types.STRING())):
        assert value_narrower(t) is None and batch_narrower(t) is None


def test_a_batch_in_range_is_handed_on_as_is_and_timestamps_survive_a_conversion() -> None:
    narrow = batch_narrower(Types.TUPLE([Types.STRING(), Types.INT()]))
    batch = [("a", 1), ("b", -5)]
    assert narrow(batch) is batch
    timed = stamped([("a", 2**31), ("b", 1)], [10, 20])
    out = narrow(timed)
    assert list(out) == [("a", -(2**31)), ("b", 1)] and timestamps_of(out) == [10, 20]
    assert batch_narrower(Types.INT())([1, 2**40, None]) == [1, 0, None]  # non-ints stay as they are


class CountPerKey(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("n", None))

    def process_element(self, value, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        yield ctx.get_current_key(), n


def test_a_declared_key_type_narrows_the_key_for_routing_and_state(env) -> None:
    env.set_parallelism(2)
    records = [43878, -21658, 1]  # (short) 43878 == -21658: one key
    collect(env.from_collection(records).key_by(lambda x: x, key_type=Types.SHORT()).process(CountPerKey()))
    assert sorted(run_job(env)["out"]) == [(-21658, 1), (-21658, 2), (1, 1)]


@pytest.mark.parametrize("type_info, bits", [(Types.BYTE(), 8), (Types.SHORT(), 16), (Types.INT(), 32), (Types.LONG(), 64)])
def test_the_batch_check_keeps_exactly_the_java_range_and_converts_just_past_it(type_info, bits) -> None:
    """A batch at the type's very bounds is handed on as is; one value past either bound wraps."""
    narrow = batch_narrower(type_info)
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    edge = [lo, hi, 0, True]
    assert narrow(edge) is edge
    assert narrow([hi + 1, 1]) == [lo, 1]
    assert narrow([lo - 1, 1]) == [hi, 1]
    pairs = batch_narrower(Types.TUPLE([Types.STRING(), type_info]))
    edge_pairs = [("a", lo), ("b", hi)]
    assert pairs(edge_pairs) is edge_pairs
    assert pairs([("a", hi + 1)]) == [("a", lo)]


def test_the_batch_check_leaves_values_that_are_not_ints_as_they_are() -> None:
    narrow = batch_narrower(Types.TUPLE([Types.STRING(), Types.SHORT()]))
    mixed = [("a", 1.5), ("b", "x"), ("c", None), ("d", 40000)]
    assert narrow(mixed) == [("a", 1.5), ("b", "x"), ("c", None), ("d", -25536)]
    assert narrow([]) == []
    short_record = [("a",), ("b", 70000)]  # a record of the wrong arity: the converter leaves it
    assert narrow(short_record) == [("a",), ("b", 4464)]


@pytest.mark.parametrize("type_info, bits", [(Types.SHORT(), 16), (Types.INT(), 32), (Types.LONG(), 64)])
def test_a_batch_of_keys_narrows_as_the_key_selector_does_record_by_record(type_info, bits) -> None:
    """NarrowedKey.keys_of (the keyed operators' and the key partitioner's batch path) gives the
    keys its per-record call gives: as they are when all are in range, wrapped when one is not."""
    from millstream.runtime.narrowing import NarrowedKey

    key = NarrowedKey(lambda r: r[0], value_narrower(type_info))
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    for batch in ([(lo,), (hi,), (0,)], [(hi + 1,), (1,)], [(lo - 1,), (5,)], [("a",), (hi + 1,), (None,), (2.5,)], []):
        assert key.keys_of(batch) == [key(r) for r in batch]
    assert key.keys_of([(hi + 1,)]) == [lo]
