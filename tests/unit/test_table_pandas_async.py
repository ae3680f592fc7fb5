"""PyFlink's vectorized (pandas) functions, pandas conversion and async scalar functions, their pure
parts, from PyFlink's documentation ("Vectorized User-defined Functions", ``from_pandas``,
``AsyncScalarFunction``) and its checks:

* a pandas scalar function receives one ``pandas.Series`` per argument, at most
  ``python.fn-execution.arrow.batch.size`` rows at a time, and must return a Series (or DataFrame)
  of the same length: "The result length '%d' of Pandas UDF '%s' is not equal to the input length";
* a pandas aggregate function receives one Series per argument holding the group's (window's,
  frame's) rows and returns a scalar; a MAP result type is refused;
* ``from_pandas`` infers Flink types from Arrow's, renames with a list of names, retypes with a
  list of DataTypes, and refuses anything else;
* an async scalar function's coroutine results are the Calc's values; the
  ``table.exec.async-scalar.*`` options configure capacity, timeout and retry.
"""
from __future__ import annotations

import asyncio
import datetime
import struct

import pandas as pd
import pytest

from millstream.common.row import Row, RowKind
from millstream.table import DataTypes, EnvironmentSettings, TableEnvironment
from millstream.table import plan as p
from millstream.table.async_calc import AsyncCalc, async_options, retry_strategy
from millstream.table.expression import Resolved
from millstream.table.expressions import col, lit
from millstream.table.pandas_conversion import dataframe_columns, dataframe_rows, splits, to_dataframe
from millstream.table.runtime_functions import GroupState
from millstream.table.time_functions import WindowAccumulate, frame_values
from millstream.table.udf import AsyncScalarFunction, udaf, udf
from millstream.table.vectorized import PandasAggCall, VectorizedCalc, pandas_agg_call
from millstream.table.window import Over, Session, Slide, Tumble


def f32(v: float) -> float:
    return struct.unpack("f", struct.pack("f", v))[0]


def ref(i: int, t=DataTypes.BIGINT()) -> Resolved:
    return Resolved("ref", t, value=i, text=f"$f{i}")


def call(wrapper, *args: Resolved) -> Resolved:
    return Resolved("udf", wrapper.result_type(), tuple(args), value=wrapper, text=wrapper.name)


def rows(*values: tuple) -> list[Row]:
    return [Row(*v) for v in values]


# -- pandas scalar functions ----------------------------------------------------------------------


def test_a_pandas_udf_gets_series_of_at_most_the_arrow_batch_size() -> None:
    seen: list[tuple[int, str, str]] = []

    @udf(result_type=DataTypes.DOUBLE(), func_type="pandas")
    def scaled(i, x):
        seen.append((len(i), str(i.dtype), str(x.dtype)))
        return i * x

    calc = VectorizedCalc([ref(0), call(scaled, ref(0), ref(1, DataTypes.FLOAT()))], None, 2, batch_size=3)
    out = calc.flat_map_batch(rows(*[(n, 0.5) for n in range(7)]))
    assert [[tuple(r) for r in part] for part in out] == [[(n, n * 0.5)] for n in range(7)]
    assert seen == [(3, "int64", "float32"), (3, "int64", "float32"), (1, "int64", "float32")]


def test_a_pandas_udf_in_the_projection_sees_only_the_rows_the_filter_kept() -> None:
    seen: list[list[int]] = []

    @udf(result_type=DataTypes.BIGINT(), func_type="pandas")
    def plus_one(i):
        seen.append(i.tolist())
        return i + 1

    keep = Resolved("call", DataTypes.BOOLEAN(), (ref(0), Resolved("lit", DataTypes.INT(), value=2, text="2")),
                    "greater_than", "$f0 > 2")
    calc = VectorizedCalc([call(plus_one, ref(0))], keep, 1)
    records = rows((1,), (3,), (2,), (5,))
    records[1].set_row_kind(RowKind.UPDATE_AFTER)
    out = calc.flat_map_batch(records)
    assert [[tuple(r) for r in part] for part in out] == [[], [(4,)], [], [(6,)]]
    assert out[1][0].get_row_kind() is RowKind.UPDATE_AFTER  # the row kind passes through
    assert seen == [[3, 5]]


def test_a_pandas_udf_in_the_filter_and_nested_calls() -> None:
    @udf(result_type=DataTypes.BOOLEAN(), func_type="pandas")
    def even(i):
        return i % 2 == 0

    @udf(result_type=DataTypes.BIGINT(), func_type="pandas")
    def double(i):
        return i * 2

    calc = VectorizedCalc([call(double, call(double, ref(0)))], call(even, ref(0)), 1)
    out = calc.flat_map_batch(rows((1,), (2,), (4,)))
    assert [[tuple(r) for r in part] for part in out] == [[], [(8,)], [(16,)]]


def test_a_pandas_udf_result_of_another_length_is_a_clear_error() -> None:
    @udf(result_type=DataTypes.BIGINT(), func_type="pandas")
    def first_two(i):
        return i.head(2)

    calc = VectorizedCalc([call(first_two, ref(0))], None, 1)
    with pytest.raises(ValueError, match="The result length '2' of Pandas UDF 'first_two' is not equal to the "
                                         "input length '3'"):
        calc.flat_map_batch(rows((1,), (2,), (3,)))


def test_a_pandas_udf_must_return_a_series() -> None:
    @udf(result_type=DataTypes.BIGINT(), func_type="pandas")
    def as_list(i):
        return list(i)

    with pytest.raises(TypeError, match="The result type of Pandas UDF 'as_list' must be pandas.Series or "
                                        "pandas.DataFrame"):
        VectorizedCalc([call(as_list, ref(0))], None, 1).flat_map_batch(rows((1,)))


def test_nan_and_nulls_of_a_pandas_udf_are_null_and_float_results_single_precision() -> None:
    @udf(result_type=DataTypes.FLOAT(), func_type="pandas")
    def third(x):
        return x / 3

    calc = VectorizedCalc([call(third, ref(0, DataTypes.DOUBLE()))], None, 1)
    out = calc.flat_map_batch(rows((1.0,), (None,), (float("nan"),)))
    assert [tuple(part[0]) for part in out] == [(f32(1 / 3),), (None,), (None,)]


def test_a_nullable_int_column_arrives_as_float64_with_nan() -> None:
    """Arrow's to_pandas of an int column with a null: float64 (PyFlink's Arrow serializer too)."""
    got = []

    @udf(result_type=DataTypes.BIGINT(), func_type="pandas")
    def f(i):
        got.append((str(i.dtype), i.isnull().tolist()))
        return i.fillna(0).astype("int64")

    out = VectorizedCalc([call(f, ref(0, DataTypes.INT()))], None, 1).flat_map_batch(rows((1,), (None,)))
    assert got == [("float64", [False, True])] and [tuple(x[0]) for x in out] == [(1,), (0,)]


def test_udf_func_type_is_checked() -> None:
    with pytest.raises(ValueError, match="The func_type must be one of 'general, pandas', got vector"):
        udf(lambda x: x, result_type=DataTypes.BIGINT(), func_type="vector")

    async def f(x):
        return x

    with pytest.raises(ValueError, match="Async scalar functions do not support pandas func_type"):
        udf(f, result_type=DataTypes.BIGINT(), func_type="pandas")
    with pytest.raises(ValueError, match="The func_type must be 'general'"):
        from millstream.table.udf import udtaf
        udtaf(lambda x: x, result_type=DataTypes.BIGINT(), func_type="pandas")


def test_the_planner_batches_a_calc_with_a_pandas_udf_by_the_configured_size() -> None:
    from millstream.table.planner import optimize, translate

    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    t_env.get_config().set("python.fn-execution.arrow.batch.size", "7")
    plus = udf(lambda i: i + 1, result_type=DataTypes.BIGINT(), func_type="pandas")
    t = t_env.from_elements([(1,), (2,)], ["a"]).select(plus(col("a")))
    node = optimize(t._node)
    assert isinstance(node, p.Calc)
    stream = translate(node, t_env._env, False)
    function = stream.get_transformation().factory.function
    assert isinstance(function, VectorizedCalc) and function.batch_size == 7
    t_env.get_config().set("python.fn-execution.arrow.batch.size", "0")
    with pytest.raises(ValueError, match="python.fn-execution.arrow.batch.size must be positive, got 0"):
        translate(node, t_env._env, False)


# -- pandas aggregate functions -------------------------------------------------------------------


@udaf(result_type=DataTypes.FLOAT(), func_type="pandas")
def mean_udaf(v):
    return v.mean()


def test_a_pandas_udaf_gets_the_groups_rows_as_series_and_retracts() -> None:
    c = pandas_agg_call(mean_udaf, [1], [DataTypes.FLOAT()])
    state = GroupState.new([c])
    for r in [("a", 110.1), ("a", 20.0), ("a", 3.0)]:
        state.apply([c], r, True)
    state.apply([c], ("a", 3.0), False)  # a retraction takes one row back
    assert state.values([c]) == (f32((f32(110.1) + f32(20.0)) / 2),)


def test_a_pandas_udaf_over_session_panes_and_over_frames() -> None:
    c = pandas_agg_call(mean_udaf, [0], [DataTypes.FLOAT()])
    w = WindowAccumulate([c])
    a, b = w.create_accumulator(), w.create_accumulator()
    w.add(Row(1.0), a)
    w.add(Row(2.0), b)
    w.add(Row(6.0), b)
    assert w.get_result(w.merge(a, b)) == (3.0,)  # session windows merge their panes' rows
    assert frame_values([c], [(2.0,), (4.0,)]) == (3.0,)


def test_a_pandas_udaf_must_return_a_scalar_and_not_a_map() -> None:
    series_udaf = udaf(lambda v: v, result_type=DataTypes.BIGINT(), func_type="pandas")
    c = pandas_agg_call(series_udaf, [0], [DataTypes.BIGINT()])
    state = GroupState.new([c])
    state.apply([c], (1,), True)
    with pytest.raises(TypeError, match="must be a scalar"):
        state.values([c])
    with pytest.raises(TypeError, match="Pandas UDAF doesn't support DataType type MAP"):
        udaf(lambda v: v, result_type=DataTypes.MAP(DataTypes.STRING(), DataTypes.INT()), func_type="pandas")


def _windowed() -> "object":
    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    t_env.execute_sql("CREATE TABLE bids (ts TIMESTAMP(3), name STRING, price FLOAT, "
                      "WATERMARK FOR ts AS ts - INTERVAL '3' SECOND) WITH ('connector' = 'datagen')")
    return t_env.from_path("bids")


def _calls(node: p.PlanNode) -> list:
    found = []
    while True:
        found += list(getattr(node, "calls", ()))
        if not node.inputs:
            return found
        node = node.inputs[0]


@pytest.mark.parametrize("window", [Tumble.over(lit(5).seconds), Slide.over(lit(5).seconds).every(lit(2).seconds),
                                    Session.with_gap(lit(5).seconds)])
def test_a_pandas_udaf_in_a_group_window_is_one_of_its_aggregates(window) -> None:
    t = _windowed().window(window.on(col("ts")).alias("w")).group_by(col("name"), col("w")) \
        .select(col("name"), mean_udaf(col("price")), col("price").max, col("w").end)
    calls = _calls(t._node)
    assert [type(c).__name__ for c in calls] == ["PandasAggCall", "AggCall"]
    assert [n for n, _ in t.get_schema()._columns][0] == "name"
    assert str(t.get_schema().get_field_data_types()[1]) == "FLOAT"


def test_a_pandas_udaf_in_a_group_by_and_an_over_window() -> None:
    table = _windowed()
    grouped = table.group_by(col("name")).select(col("name"), mean_udaf(col("price")).alias("m"))
    assert any(isinstance(c, PandasAggCall) for c in _calls(grouped._node))
    over = table.over_window(Over.partition_by(col("name")).order_by(col("ts")).preceding(lit(2).seconds).alias("w")) \
        .select(col("name"), mean_udaf(col("price")).over(col("w")))
    assert any(isinstance(c, PandasAggCall) for c in _calls(over._node))


# -- from_pandas / to_pandas ------------------------------------------------------------------------


PDF = pd.DataFrame({"i": [1, 2, 3], "x": [0.5, None, 2.5], "s": ["a", "b", None], "b": [True, False, True]})


def test_from_pandas_infers_flink_types_from_arrows() -> None:
    cols = dataframe_columns(PDF, None)
    assert [(n, str(t)) for n, t in cols] == [("i", "BIGINT"), ("x", "DOUBLE"), ("s", "STRING"), ("b", "BOOLEAN")]
    assert dataframe_rows(PDF, cols) == [(1, 0.5, "a", True), (2, None, "b", False), (3, 2.5, None, True)]


def test_from_pandas_timestamps_and_dates_become_python_values() -> None:
    pdf = pd.DataFrame({"t": pd.to_datetime(["2024-01-01 00:00:01", None])})
    cols = dataframe_columns(pdf, None)
    assert [str(t) for _, t in cols] == ["TIMESTAMP(9)"]
    assert dataframe_rows(pdf, cols) == [(datetime.datetime(2024, 1, 1, 0, 0, 1),), (None,)]
    assert type(dataframe_rows(pdf, cols)[0][0]) is datetime.datetime


def test_from_pandas_schema_as_names_types_or_a_row() -> None:
    assert [n for n, _ in dataframe_columns(PDF, ["a", "b", "c", "d"])] == ["a", "b", "c", "d"]
    typed = dataframe_columns(PDF, [DataTypes.INT(), DataTypes.FLOAT(), DataTypes.STRING(), DataTypes.BOOLEAN()])
    assert [(n, str(t)) for n, t in typed] == [("i", "INT"), ("x", "FLOAT"), ("s", "STRING"), ("b", "BOOLEAN")]
    pdf = pd.DataFrame([[0.1, 0.2]])  # integer column labels, as np.random.rand's frame
    row = dataframe_columns(pdf, DataTypes.ROW([DataTypes.FIELD("a", DataTypes.DOUBLE()),
                                                DataTypes.FIELD("b", DataTypes.FLOAT())]))
    assert [(n, str(t)) for n, t in row] == [("a", "DOUBLE"), ("b", "FLOAT")]
    assert dataframe_rows(pdf, row) == [(0.1, f32(0.2))]


def test_from_pandas_refuses_what_pyflink_refuses() -> None:
    with pytest.raises(TypeError, match="Unsupported type, expected pandas.DataFrame"):
        dataframe_columns([[1, 2]], None)
    with pytest.raises(TypeError, match="Unsupported schema type"):
        dataframe_columns(PDF, 5)
    with pytest.raises(ValueError, match="splits_num must be a positive int"):
        splits([(1,)], 0)


def test_from_pandas_splits_are_pyflinks_slices() -> None:
    data = [(i,) for i in range(10)]
    assert [len(s) for s in splits(data, 3)] == [4, 4, 2]  # ceil(10 / 3) rows each
    assert [len(s) for s in splits(data, 1)] == [10]
    assert sum(splits(data, 4), []) == data


def test_to_pandas_applies_the_changelog_and_types_columns() -> None:
    changelog = [Row("a", 1), Row("a", 1), Row("a", 2), Row("b", None)]
    changelog[1].set_row_kind(RowKind.UPDATE_BEFORE)
    changelog[2].set_row_kind(RowKind.UPDATE_AFTER)
    pdf = to_dataframe(changelog, [("k", DataTypes.STRING()), ("v", DataTypes.FLOAT())])
    assert list(pdf.columns) == ["k", "v"] and str(pdf["v"].dtype) == "float32"
    assert pdf["k"].tolist() == ["a", "b"] and pdf["v"].tolist()[0] == 2.0 and pd.isna(pdf["v"].tolist()[1])
    empty = to_dataframe([], [("k", DataTypes.STRING())])
    assert list(empty.columns) == ["k"] and len(empty) == 0


def test_from_pandas_builds_a_table_of_the_rows() -> None:
    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    t = t_env.from_pandas(PDF, ["a", "b", "c", "d"])
    assert isinstance(t._node, p.Values) and t._node.rows[0] == (1, 0.5, "a", True)
    split = t_env.from_pandas(PDF, splits_num=2)
    assert isinstance(split._node, p.StreamScan)


# -- async scalar functions ----------------------------------------------------------------------


class Lookup(AsyncScalarFunction):
    async def eval(self, key):
        await asyncio.sleep(0)
        return f"v_{key}"


def test_an_async_calc_awaits_its_calls_innermost_first() -> None:
    lookup = udf(Lookup(), result_type=DataTypes.STRING())

    @udf(result_type=DataTypes.STRING())
    async def upper(s):
        return s.upper()

    assert lookup.func_type == "async" and upper.func_type == "async"
    calc = AsyncCalc([ref(0), call(upper, call(lookup, ref(0, DataTypes.STRING())))], None, 1)
    out = asyncio.run(calc.async_invoke(Row("k")))
    assert [tuple(r) for r in out] == [("k", "V_K")]


def test_an_async_calc_filters_before_projecting() -> None:
    called = []

    @udf(result_type=DataTypes.STRING())
    async def tag(s):
        called.append(s)
        return s + "!"

    keep = Resolved("call", DataTypes.BOOLEAN(), (ref(0, DataTypes.STRING()),
                                                   Resolved("lit", DataTypes.STRING(), value="a", text="'a'")),
                    "equals", "$f0 = 'a'")
    calc = AsyncCalc([call(tag, ref(0, DataTypes.STRING()))], keep, 1)
    assert asyncio.run(calc.async_invoke(Row("b"))) == []
    assert [tuple(r) for r in asyncio.run(calc.async_invoke(Row("a")))] == [("a!",)] and called == ["a"]


def test_the_async_scalar_options_are_flinks() -> None:
    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    assert async_options(t_env.get_config().get_configuration()) == {"capacity": 10, "timeout_ms": 180_000, "strategy": "FIXED_DELAY",
                                                 "delay_ms": 100, "max_attempts": 3}
    config = t_env.get_config()
    config.set("table.exec.async-scalar.max-concurrent-operations", "4")
    config.set("table.exec.async-scalar.timeout", "5 s")
    config.set("table.exec.async-scalar.retry-delay", "20 ms")
    config.set("table.exec.async-scalar.max-attempts", "2")
    options = async_options(config.get_configuration())
    assert options == {"capacity": 4, "timeout_ms": 5000, "strategy": "FIXED_DELAY", "delay_ms": 20, "max_attempts": 2}
    strategy = retry_strategy(options)
    assert strategy.can_retry(2) and not strategy.can_retry(3) and strategy.get_backoff_time_millis(1) == 20
    config.set("table.exec.async-scalar.retry-strategy", "NO_RETRY")
    assert not retry_strategy(async_options(config.get_configuration())).can_retry(1)
    config.set("table.exec.async-scalar.retry-strategy", "SOMETIMES")
    with pytest.raises(ValueError, match="retry-strategy"):
        async_options(config.get_configuration())


def test_a_calc_with_an_async_udf_is_an_ordered_async_wait_operator() -> None:
    from millstream.table.planner import optimize, translate

    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    t_env.get_config().set("table.exec.async-scalar.max-concurrent-operations", "3")

    @udf(result_type=DataTypes.BIGINT())
    async def slow(i):
        return i

    node = optimize(t_env.from_elements([(1,)], ["a"]).select(slow(col("a")))._node)
    factory = translate(node, t_env._env, False).get_transformation().factory
    assert isinstance(factory.function, AsyncCalc) and factory.ordered and factory.capacity == 3
    assert factory.timeout_ms == 180_000


def test_an_async_scalar_function_needs_async_eval() -> None:
    class NotAsync(AsyncScalarFunction):
        def eval(self, key):  # type: ignore[override]
            return key

    w = udf(NotAsync(), result_type=DataTypes.STRING())
    with pytest.raises(TypeError, match="must be declared 'async def'"):
        w.eval("k")


def test_datetime_columns_reach_pandas_as_datetimes() -> None:
    got = []

    @udf(result_type=DataTypes.TIMESTAMP(3), func_type="pandas")
    def shift(ts):
        got.append(str(ts.dtype))
        return ts + pd.Timedelta(seconds=1)

    t0 = datetime.datetime(2024, 1, 1, 0, 0, 0)
    out = VectorizedCalc([call(shift, ref(0, DataTypes.TIMESTAMP(3)))], None, 1).flat_map_batch(rows((t0,)))
    assert got == ["datetime64[ms]"] and tuple(out[0][0]) == (t0 + datetime.timedelta(seconds=1),)


def test_a_registered_pandas_udaf_in_sql_and_a_global_aggregate() -> None:
    table = _windowed()
    t_env = table._t_env
    t_env.create_temporary_function("mean_udaf", mean_udaf)
    grouped = t_env.sql_query("SELECT name, mean_udaf(price) AS m FROM bids GROUP BY name")
    assert any(isinstance(c, PandasAggCall) for c in _calls(grouped._node))
    assert grouped.get_schema().get_field_names() == ["name", "m"]
    windowed = t_env.sql_query("SELECT window_start, mean_udaf(price) AS m FROM TABLE(TUMBLE(TABLE bids, "
                               "DESCRIPTOR(ts), INTERVAL '5' SECOND)) GROUP BY window_start, window_end")
    assert any(isinstance(c, PandasAggCall) for c in _calls(windowed._node))
    overall = table.select(mean_udaf(col("price")).alias("m"))
    assert any(isinstance(c, PandasAggCall) for c in _calls(overall._node))


def test_map_of_a_pandas_udf_gets_a_dataframe_of_the_columns() -> None:
    from millstream.table.planner import optimize, translate
    from millstream.table.vectorized import VectorizedMap

    seen = []

    @udf(result_type=DataTypes.ROW([DataTypes.FIELD("a", DataTypes.BIGINT()), DataTypes.FIELD("s", DataTypes.STRING())]),
         func_type="pandas")
    def shift(df):
        seen.append((list(df.columns), len(df)))
        return pd.DataFrame({"a": df["a"] + 1, "s": df["s"].str.upper()})

    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    t_env.get_config().set("python.fn-execution.arrow.batch.size", "2")
    t = t_env.from_elements([(1, "x"), (2, "y"), (3, "z")], ["a", "s"]).map(shift)
    assert t.get_schema().get_field_names() == ["a", "s"]
    f = translate(optimize(t._node), t_env._env, False).get_transformation().factory.function
    assert isinstance(f, VectorizedMap) and f.batch_size == 2
    out = f.flat_map_batch(rows((1, "x"), (2, "y"), (3, "z")))
    assert [tuple(part[0]) for part in out] == [(2, "X"), (3, "Y"), (4, "Z")]
    assert seen == [(["a", "s"], 2), (["a", "s"], 1)]

    @udf(result_type=DataTypes.BIGINT(), func_type="pandas")
    def short(df):
        return df["a"].head(1)

    g = VectorizedMap(short, [("a", DataTypes.BIGINT())], 1)
    with pytest.raises(ValueError, match="The result length '1' of Pandas UDF 'short' is not equal to the input length '2'"):
        g.flat_map_batch(rows((1,), (2,)))

    @udf(result_type=DataTypes.BIGINT())
    async def later(r):
        return 1

    with pytest.raises(TypeError, match="map takes a general or pandas udf"):
        t_env.from_elements([(1,)], ["a"]).map(later)


def test_pyflinks_group_aggregate_example_row_results_and_a_class_based_pandas_udaf() -> None:
    """PyFlink's test_group_aggregate_function: per a, mean(b + 1) and (max, min) of c - 1 as a ROW;
    and its MaxAdd, an AggregateFunction whose accumulate gets the Series once."""
    from millstream.table.udf import AggregateFunction

    data = [(1, 2, 3), (3, 2, 3), (2, 1, 3), (1, 5, 4), (1, 8, 6), (2, 3, 4)]
    max_min = udaf(lambda a: (a.max(), a.min()), result_type=DataTypes.ROW(
        [DataTypes.FIELD("a", DataTypes.INT()), DataTypes.FIELD("b", DataTypes.INT())]), func_type="pandas")

    class MaxAdd(AggregateFunction):
        def create_accumulator(self):
            return []

        def accumulate(self, accumulator, *args):
            accumulator.append(sum(arg.max() for arg in args))

        def get_value(self, accumulator):
            return accumulator[0]

    max_add = udaf(MaxAdd(), result_type=DataTypes.INT(), func_type="pandas")
    calls = [pandas_agg_call(mean_udaf, [1], [DataTypes.INT()]), pandas_agg_call(max_min, [2], [DataTypes.INT()]),
             pandas_agg_call(max_add, [1, 2, 3], [DataTypes.INT()] * 3)]
    groups: dict[int, GroupState] = {}
    for a, b, c in data:
        groups.setdefault(a, GroupState.new(calls)).apply(calls, (a, b + 1, c - 1, 1), True)
    got = {a: tuple(tuple(v) if isinstance(v, Row) else v for v in g.values(calls)) for a, g in groups.items()}
    assert got == {1: (6.0, (5, 2), 9 + 5 + 1), 2: (3.0, (3, 2), 4 + 3 + 1), 3: (3.0, (2, 2), 3 + 2 + 1)}


def test_a_registered_pandas_udaf_over_a_sql_window_and_in_having() -> None:
    """PyFlink's test_over_rows_window: ``mean_udaf(b) OVER (PARTITION BY a ORDER BY t ROWS BETWEEN
    1 PRECEDING AND CURRENT ROW)``; and a pandas UDAF in HAVING."""
    table = _windowed()
    t_env = table._t_env
    t_env.create_temporary_function("mean_udaf", mean_udaf)
    over = t_env.sql_query("SELECT name, mean_udaf(price) OVER (PARTITION BY name ORDER BY ts ROWS BETWEEN 1 "
                           "PRECEDING AND CURRENT ROW) AS m FROM bids")
    over_node = next(n for n in _nodes(over._node) if isinstance(n, p.OverAggregate))
    assert over_node.rows and over_node.preceding == 1 and isinstance(over_node.calls[0], PandasAggCall)
    having = t_env.sql_query("SELECT name, mean_udaf(price) AS m FROM bids GROUP BY name HAVING mean_udaf(price) > 1")
    assert sum(isinstance(c, PandasAggCall) for c in _calls(having._node)) == 2
    assert having.get_schema().get_field_names() == ["name", "m"]


def _nodes(node: p.PlanNode) -> list:
    return [node] + [n for i in node.inputs for n in _nodes(i)]


@pytest.mark.parametrize("key", ["python.fn-execution.arrow.batch.size", "table.exec.async-scalar.timeout",
                                 "table.exec.async-scalar.max-concurrent-operations"])
def test_the_python_function_options_are_a_jobs(key: str) -> None:
    from millstream.runtime import config as cfg
    assert cfg.option_scope(cfg.find_option(key)) == "job"  # `millstream run -D` takes them


def test_table_options_fall_back_to_the_environments_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    """As Flink's TableConfig: its own value, else the execution environment's configuration, else
    the configuration file and MILLSTREAM_CONF_* variables."""
    from millstream.common import Configuration
    from millstream.datastream import StreamExecutionEnvironment
    from millstream.table import StreamTableEnvironment
    from millstream.table.planner import optimize, translate

    def batch_size(t_env: TableEnvironment) -> int:
        plus = udf(lambda i: i + 1, result_type=DataTypes.BIGINT(), func_type="pandas")
        node = optimize(t_env.from_elements([(1,)], ["a"]).select(plus(col("a")))._node)
        return translate(node, t_env._env, False).get_transformation().factory.function.batch_size

    monkeypatch.setenv("MILLSTREAM_CONF_PYTHON_FN_EXECUTION_ARROW_BATCH_SIZE", "9")
    assert batch_size(TableEnvironment.create(EnvironmentSettings.in_streaming_mode())) == 9
    conf = Configuration()
    conf.set_string("python.fn-execution.arrow.batch.size", "5")
    t_env = StreamTableEnvironment.create(StreamExecutionEnvironment.get_execution_environment(conf))
    assert batch_size(t_env) == 5
    t_env.get_config().set("python.fn-execution.arrow.batch.size", "3")
    assert batch_size(t_env) == 3
