"""The two-phase GROUP BY with its local phase over Arrow arrays (millstream/table/arrow_agg.py):
random batches folded by the local phase and merged by the global one give what the row path's
GroupAggregate and plain Python give (Flink's semantics: SUM of only NULLs is NULL, COUNT skips
NULLs, AVG of an integer column truncates toward zero and returns an integer, COUNT(*) counts
rows); the streaming changelog stays valid; the planner uses it only where Flink allows."""
from __future__ import annotations

import random
from typing import Any

import pytest

from millstream.common.row import Row, RowKind
from millstream.table import arrow_agg
from millstream.table.arrow_agg import GlobalAggregateFunction, LocalAggregate
from millstream.table.runtime_functions import AggCall, GroupState
from millstream.table.types import DataTypes

# columns: 0 int key, 1 str key, 2 BIGINT value, 3 DOUBLE value, 4 bool key
TYPES = [DataTypes.INT(), DataTypes.STRING(), DataTypes.BIGINT(), DataTypes.DOUBLE(), DataTypes.BOOLEAN()]
CALLS = (AggCall("count", None), AggCall("count", 2), AggCall("sum", 2), AggCall("sum0", 2),
         AggCall("avg", 2, integral=True), AggCall("min", 2), AggCall("max", 2), AggCall("count", 3),
         AggCall("min", 3), AggCall("max", 3))


def _rows(rng: random.Random, n: int, hazards: bool) -> list[list[Any]]:
    out = []
    for _ in range(n):
        v: Any = rng.choice([None, rng.randint(-50, 50), rng.randint(-10**6, 10**6)])
        d: Any = rng.choice([None, rng.uniform(-100, 100), float(rng.randint(-5, 5)) + 0.5])
        if hazards:
            v = rng.choice([v, 2**62, -(2**62), 2**70]) if rng.random() < 0.1 else v
            d = rng.choice([d, 0.0, -0.0, float("nan")]) if rng.random() < 0.1 else d
        out.append([rng.choice([1, 2, 3, None]), rng.choice(["a", "b", "ü", None]), v, d, rng.choice([True, False])])
    return out


def _python(keys: tuple[int, ...], rows: list[list[Any]]) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """Plain Python, from Flink's documented semantics (not from the accumulators)."""
    groups: dict[tuple[Any, ...], list[list[Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    out = {}
    for key, rs in groups.items():
        ints = [r[2] for r in rs if r[2] is not None]
        dbls = [r[3] for r in rs if r[3] is not None]
        avg = None
        if ints:
            q = abs(sum(ints)) // len(ints)
            avg = q if sum(ints) >= 0 else -q
        out[key] = (len(rs), len(ints), sum(ints) if ints else None, sum(ints), avg, min(ints, default=None),
                    max(ints, default=None), len(dbls), min(dbls, default=None), max(dbls, default=None))
    return out


def _row_path(keys: tuple[int, ...], rows: list[list[Any]]) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    groups: dict[tuple[Any, ...], GroupState] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in keys), GroupState.new(CALLS)).apply(CALLS, r, True)
    return {k: g.values(CALLS) for k, g in groups.items()}


def _two_phase(keys: tuple[int, ...], batches: list[list[list[Any]]], min_rows: int,
               sample_rows: int = arrow_agg.SAMPLE_ROWS) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    local = LocalAggregate(keys, CALLS, TYPES, min_rows=min_rows, sample_rows=sample_rows)
    groups: dict[tuple[Any, ...], GroupState] = {}
    for b in batches:
        for part in local.flat_map_batch([Row(*r) for r in b]):
            for p in part:
                values = list(p)
                g = groups.setdefault(tuple(values[:len(keys)]), GroupState.new(CALLS))
                arrow_agg.merge(CALLS, g, values[len(keys):])
    return {k: g.values(CALLS) for k, g in groups.items()}


def _same(a: dict[Any, tuple[Any, ...]], b: dict[Any, tuple[Any, ...]]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        for x, y in zip(a[k], b[k]):
            if isinstance(x, float) and x != x:
                assert isinstance(y, float) and y != y, k
            else:
                assert x == y and type(x) is type(y) and repr(x) == repr(y), (k, a[k], b[k])


@pytest.mark.parametrize("keys", [(0,), (1,), (0, 1), (4,), ()])
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("hazards", [False, True])
def test_two_phase_equals_row_path_and_python(keys: tuple[int, ...], seed: int, hazards: bool) -> None:
    rng = random.Random(seed * 101 + len(keys))
    batches = [_rows(rng, rng.choice([0, 1, 5, 70, 300]), hazards) for _ in range(rng.randint(1, 6))]
    rows = [r for b in batches for r in b]
    expected = _row_path(keys, rows)
    for min_rows in (0, arrow_agg.MIN_ROWS):
        _same(_two_phase(keys, batches, min_rows), expected)
    _same(_two_phase(keys, batches, 0, sample_rows=1), expected)  # one-row partials after a first batch
    if not hazards:  # NaN and -0.0 make min/max order-dependent in plain Python too
        _same(_python(keys, rows), expected)


@pytest.mark.parametrize("seed", range(4))
def test_a_batch_without_hazards_is_folded_over_arrays(seed: int) -> None:
    rng = random.Random(seed)
    rows = _rows(rng, 200, hazards=False)
    parts = LocalAggregate((0, 1), CALLS, TYPES)._arrow(rows)  # raises _Fallback if not over arrays
    assert len(parts) == len({(r[0], r[1]) for r in rows})
    assert sum(p[2] for p in parts) == 200  # the row counts


@pytest.mark.parametrize("bad", [[1, "a", 2**63, 1.0, True], [1, "a", 2**62, 1.0, True], [1, "a", 1.5, 1.0, True],
                                 [1, "a", True, 1.0, True], [1, "a", 1, 1, True], [1, "a", 1, float("nan"), True],
                                 [1, "a", 1, -0.0, True], ["1", "a", 1, 1.0, True]])
def test_a_hazard_falls_back_to_python_with_the_row_paths_result(bad: list[Any]) -> None:
    rows = [[1, "a", 2**62, 2.5, True]] + [[1, "a", 3, 2.5, False]] * 100 + [bad]
    local = LocalAggregate((0,), CALLS, TYPES)
    with pytest.raises(arrow_agg._Fallback):
        local._arrow(rows)
    if bad[0] == "1":
        return  # a key of another type: the row path groups it apart, and so does the Python fold
    _same(_two_phase((0,), [rows], 0), _row_path((0,), rows))


def test_sum_of_only_nulls_is_null_and_count_skips_nulls() -> None:
    rows = [[1, "a", None, None, True]] * 100
    (out,) = _two_phase((0,), [rows], 0).values()
    assert out == (100, 0, None, 0, None, None, None, 0, None, None)


def test_avg_of_integers_truncates_toward_zero() -> None:
    rows = [[1, "a", -7, None, True], [1, "a", 0, None, True]] * 40
    assert _two_phase((0,), [rows], 0)[(1,)][4] == -3  # -280 / 80 = -3.5 -> -3, an int


def test_vectorizes_only_exact_aggregates() -> None:
    assert arrow_agg.vectorizes((0, 1), CALLS, TYPES)
    assert not arrow_agg.vectorizes((0,), (AggCall("sum", 3),), TYPES)  # a double sum's rounding depends on order
    assert not arrow_agg.vectorizes((3,), (AggCall("count", None),), TYPES)  # a double key (-0.0, NaN)
    assert not arrow_agg.vectorizes((0,), (AggCall("sum", 2, single=True),), TYPES)
    assert not arrow_agg.vectorizes((0,), (AggCall("min", 1),), TYPES)
    assert not arrow_agg.vectorizes((0,), (AggCall("count", 5),), TYPES + [DataTypes.DATE()])


class _State:
    def __init__(self) -> None:
        self.v: Any = None

    def value(self) -> Any:
        return self.v

    def update(self, v: Any) -> None:
        self.v = v

    def clear(self) -> None:
        self.v = None


class _Ctx:
    def get_state(self, _: Any) -> _State:
        return _State()


def test_streaming_global_phase_emits_a_valid_changelog_with_the_row_paths_final_values() -> None:
    rng = random.Random(5)
    batches = [_rows(rng, 100, hazards=False) for _ in range(5)]
    local = LocalAggregate((0,), CALLS, TYPES)
    states: dict[Any, GlobalAggregateFunction] = {}
    shown: dict[Any, tuple[Any, ...]] = {}
    for b in batches:
        for part in local.flat_map_batch([Row(*r) for r in b]):
            for p in part:
                key = p[0]
                f = states.get(key)
                if f is None:
                    f = states[key] = GlobalAggregateFunction(1, CALLS, batch=False)
                    f.open(_Ctx())
                for out in f.process_element(p, None):
                    kind, values = out.get_row_kind(), tuple(out)
                    if kind is RowKind.INSERT:
                        assert key not in shown
                        shown[key] = values
                    elif kind is RowKind.UPDATE_BEFORE:
                        assert shown.pop(key) == values  # -U takes back exactly what was shown
                    else:
                        assert kind is RowKind.UPDATE_AFTER and key not in shown
                        shown[key] = values
    rows = [r for b in batches for r in b]
    assert {k: v[1:] for k, v in shown.items()} == {k[0]: v for k, v in _row_path((0,), rows).items()}


def _aggregate_function(mode: str, options: dict[str, str], sql: str = "SELECT k, SUM(v), COUNT(*) FROM t GROUP BY k",
                        updating: bool = False) -> Any:
    from millstream.runtime import config as cfg
    from millstream.table import EnvironmentSettings, TableEnvironment
    from millstream.table import plan as p
    from millstream.table.planner import optimize, translate
    assert cfg.VECTORIZED_AGG_ENABLED in cfg.TABLE_OPTIONS and cfg.MINI_BATCH_ENABLED in cfg.TABLE_OPTIONS
    settings = EnvironmentSettings.in_batch_mode() if mode == "batch" else EnvironmentSettings.in_streaming_mode()
    t_env = TableEnvironment.create(settings)
    for k, v in options.items():
        t_env.get_config().set(k, v)
    t_env.create_temporary_view("t", t_env.from_elements([(1, 2), (1, 3), (2, None)], ["k", "v"]))
    if updating:
        t_env.create_temporary_view("u", t_env.sql_query("SELECT k, COUNT(*) AS v FROM t GROUP BY k"))
    node = optimize(t_env.sql_query(sql)._node)
    while not isinstance(node, p.Aggregate):
        node = node.inputs[0]
    stream = translate(node, t_env._env, batch=mode == "batch")
    return stream.get_transformation().factory.function


def test_the_planner_splits_the_aggregation_only_where_flink_allows_it() -> None:
    from millstream.table.runtime_functions import GroupAggregateFunction
    v = {"table.exec.millstream.vectorized-agg.enabled": "true"}
    on = {**v, "table.exec.mini-batch.enabled": "true"}
    assert isinstance(_aggregate_function("batch", {}), GroupAggregateFunction)  # off by default (bench/sql_agg.py)
    assert isinstance(_aggregate_function("batch", v), GlobalAggregateFunction)
    assert isinstance(_aggregate_function("stream", v), GroupAggregateFunction)  # per-row changelog without mini-batch
    assert isinstance(_aggregate_function("stream", on), GlobalAggregateFunction)
    off = {"table.exec.millstream.vectorized-agg.enabled": "false"}
    assert isinstance(_aggregate_function("batch", off), GroupAggregateFunction)
    assert isinstance(_aggregate_function("stream", {**on, **off}), GroupAggregateFunction)
    one = {**v, "table.optimizer.agg-phase-strategy": "ONE_PHASE"}
    assert isinstance(_aggregate_function("batch", one), GroupAggregateFunction)
    # a retracting input (an updating GROUP BY beneath) and a UDF-free but inexact aggregate stay on rows
    assert isinstance(_aggregate_function("stream", on, "SELECT v, COUNT(*) FROM u GROUP BY v", updating=True),
                      GroupAggregateFunction)
    assert isinstance(_aggregate_function("batch", v, "SELECT k, SUM(CAST(v AS DOUBLE)) FROM t GROUP BY k"),
                      GroupAggregateFunction)


def test_many_keys_with_few_rows_each_stop_the_fold_and_few_keys_do_not() -> None:
    rng = random.Random(9)
    many = [[i, "a", rng.randint(0, 9), rng.uniform(0, 1), True] for i in range(400)]  # a key per row
    local = LocalAggregate((0,), CALLS, TYPES, sample_rows=300)
    assert [len(p) for p in local.flat_map_batch([Row(*r) for r in many[:200]])][:2] == [200, 0]
    assert not local._skip
    local.flat_map_batch([Row(*r) for r in many[200:]])
    assert local._skip  # 400 partials of 400 rows
    assert [len(p) for p in local.flat_map_batch([Row(*r) for r in many[:100]])] == [1] * 100
    few = LocalAggregate((4,), CALLS, TYPES, sample_rows=300)
    for _ in range(3):
        few.flat_map_batch([Row(*r) for r in many[:200]])
    assert not few._skip
