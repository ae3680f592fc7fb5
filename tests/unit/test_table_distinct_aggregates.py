"""Distinct aggregates (SQL's ``COUNT(DISTINCT a)``, PyFlink's ``col('a').count.distinct``), from
SQL's rules: the aggregate runs over the set of distinct non-NULL values of the group's rows, and a
retraction removes a value only with the last row holding it. Checked against a plain-Python
recomputation from the group's current multiset after every step of random accumulate/retract runs."""
from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from millstream.table.expression import ValidationException
from millstream.table.expressions import col
from millstream.table.runtime_functions import AggCall


def _expected(func: str, rows: Counter) -> Any:
    values = {v for v, n in rows.items() if n > 0 and v is not None}
    if func == "count":
        return len(values)
    if func == "sum0":
        return sum(values)
    if not values:
        return None
    if func == "sum":
        return sum(values)
    if func == "min":
        return min(values)
    if func == "max":
        return max(values)
    total = sum(values)  # avg of an integer column truncates towards zero, as Flink's
    q = abs(total) // len(values)
    return q if total >= 0 else -q


@pytest.mark.parametrize("func", ["count", "sum", "sum0", "min", "max", "avg"])
@pytest.mark.parametrize("seed", range(4))
def test_a_distinct_aggregate_follows_the_set_of_values_through_accumulates_and_retracts(func: str, seed: int) -> None:
    rng = random.Random(seed)
    call = AggCall(func, 0, integral=True, distinct=True)
    acc = call.create()
    held: Counter = Counter()
    for _ in range(400):
        retract = any(n > 0 for n in held.values()) and rng.random() < 0.4
        if retract:
            v = rng.choice([v for v, n in held.items() if n > 0])
            held[v] -= 1
        else:
            v = rng.choice([None, -3, 0, 1, 2, 2, 5, 8])
            held[v] += 1
        acc = call.accumulate(acc, (v,), -1 if retract else 1)
        assert call.value(acc) == _expected(func, held), (func, held)


def test_without_distinct_every_row_counts() -> None:
    call = AggCall("count", 0)
    acc = call.create()
    for v in (1, 1, 2, None):
        acc = call.accumulate(acc, (v,), 1)
    assert call.value(acc) == 3


def test_distinct_applies_only_to_an_aggregate_once() -> None:
    assert str(col("a").count.distinct) == "COUNT(DISTINCT a)"
    with pytest.raises(ValidationException, match="distinct applies to an aggregate"):
        col("a").distinct
    with pytest.raises(ValidationException, match="distinct applies to an aggregate"):
        col("a").count.distinct.distinct
