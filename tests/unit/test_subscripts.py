"""User functions that only subscript an argument by a constant run as operator.itemgetter: which
functions qualify, and that keys and timestamps (values and errors) are the ones the function gives."""
from __future__ import annotations

from operator import itemgetter

import cloudpickle
import pytest

from millstream.common import Duration, WatermarkStrategy
from millstream.common.watermark_strategy import TimestampAssigner
from millstream.datastream import KeySelector
from millstream.runtime.partitioners import key_function
from millstream.runtime.subscripts import field_getter, subscript_of
from millstream.runtime.watermarks import LONG_MIN, TimestampsAndWatermarks

OFFSET = 0


def _with_default(r, i=0):  # noqa: ANN001, ANN202
    return r[i]


def _field_zero(row):  # noqa: ANN001, ANN202
    return row[0]


def _documented(row):  # noqa: ANN001, ANN202
    """The user's field."""
    return row["user"]


def test_only_a_plain_subscript_by_an_int_or_str_constant_qualifies() -> None:
    assert subscript_of(lambda pair: pair[0]) == 0 and subscript_of(lambda x: x[0]) == 0
    assert subscript_of(_field_zero) == 0 and subscript_of(_documented) == "user"
    assert subscript_of(cloudpickle.loads(cloudpickle.dumps(lambda w: w[0]))) == 0
    assert subscript_of(lambda e: e[1]) == 1 and subscript_of(lambda e: e[-1]) == -1 and subscript_of(itemgetter(2)) == 2
    offset = 0
    for other in (lambda p: p[0].lower(), lambda p: p[offset], lambda p: p[OFFSET], lambda p, q=0: p[0], _with_default,
                  lambda p: p[True], lambda p: p[1.0], lambda p: p[(0, 1)], lambda p: p[0:1], itemgetter(0, 1),
                  lambda p: p, str.lower, len, lambda p, q: p[0]):
        assert subscript_of(other) is None, other


def test_a_later_argument_and_a_bound_method() -> None:
    class First(TimestampAssigner):
        def extract_timestamp(self, value, record_timestamp):  # noqa: ANN001, ANN201
            return value[0]

    class Carried(TimestampAssigner):
        def extract_timestamp(self, value, record_timestamp):  # noqa: ANN001, ANN201
            return record_timestamp

    assert subscript_of(First().extract_timestamp, position=0, arity=2) == 0
    assert subscript_of(lambda value, ts: value[2], position=0, arity=2) == 2
    assert subscript_of(lambda value, ts: ts[2], position=0, arity=2) is None
    assert subscript_of(lambda value, ts: ts[2], position=1, arity=2) == 2
    assert subscript_of(Carried().extract_timestamp, position=0, arity=2) is None
    assert subscript_of(itemgetter(0), arity=2) is None


def test_key_functions_give_the_same_keys_and_errors() -> None:
    class ByUser(KeySelector):
        def get_key(self, value):  # noqa: ANN001, ANN201
            return value[1]

    for selector in (lambda e: e[1], ByUser()):
        get_key = key_function(selector)
        assert type(get_key) is itemgetter, selector
        assert get_key((7, "k", 3)) == "k" and get_key({1: "v"}) == "v"
        with pytest.raises(IndexError, match="tuple index out of range"):
            get_key((7,))
        with pytest.raises(TypeError, match="not subscriptable"):
            get_key(7)
    assert key_function(_with_default) is _with_default and field_getter(len) is len


@pytest.mark.parametrize("assigner", [
    pytest.param(lambda value, record_timestamp: value[0], id="function"),
    pytest.param(type("First", (TimestampAssigner,), {"extract_timestamp": lambda self, value, ts: value[0]})(), id="method"),
])
def test_timestamps_from_a_field_are_checked_as_the_assigners_own(assigner) -> None:  # noqa: ANN001
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_seconds(1)).with_timestamp_assigner(assigner)
    stage = TimestampsAndWatermarks(strategy)
    assert stage._timestamp_field is not None  # the C path is taken
    assert stage.process_batch([(5, "a"), (3, "b")], [None, 9]).timestamps == [5, 3]
    with pytest.raises(TypeError, match="a timestamp is integer milliseconds"):
        stage.process_batch([("5", "a")])
    with pytest.raises(ValueError, match="outside 64 bits"):
        stage.process_batch([(LONG_MIN - 1, "a")])
    with pytest.raises(IndexError):
        stage.process_batch([()])
