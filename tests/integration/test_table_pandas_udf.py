"""PyFlink's vectorized (pandas) functions, pandas conversion and async scalar functions on the
runtime (a MiniCluster with real Spark). Expected results are computed here from the documented
rules: a pandas UDF returns a Series as long as its input, whatever the batch cut; a pandas UDAF
gets each group's / window's / frame's rows as Series; ``to_pandas`` of ``from_pandas`` gives the
frame back; an async scalar function's results keep the input order, and a call that raises is made
again (``table.exec.async-scalar.max-attempts``)."""
from __future__ import annotations

import asyncio
import datetime
import random
import struct
from typing import Any, Iterable

import pandas as pd
import pytest

from millstream.common import Row, RowKind
from millstream.table import DataTypes, EnvironmentSettings, TableEnvironment
from millstream.table.expressions import col, lit
from millstream.table.udf import AsyncScalarFunction, udaf, udf
from millstream.table.window import Over, Session, Slide

from .harness import ClusterSpec

pytestmark = pytest.mark.timeout(600)
CLUSTER = ClusterSpec(jobmanager_env=True, tasks_per_slot=8)
I = RowKind.INSERT


def streaming(parallelism: int = 1) -> TableEnvironment:
    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    t_env.get_config().set("parallelism.default", str(parallelism))
    return t_env


def values(rows: Iterable[Row]) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in rows]


def f32(v: float) -> float:
    return struct.unpack("f", struct.pack("f", v))[0]


def test_a_pandas_udf_runs_over_batches_of_the_configured_size(cluster: Any) -> None:
    t_env = streaming()
    t_env.get_config().set("python.fn-execution.arrow.batch.size", "4")

    @udf(result_type=DataTypes.STRING(), func_type="pandas")
    def batch_info(i, s):
        # each row: its value plus the length of the batch it came in (at most 4)
        return s.str.upper() + "/" + pd.Series([str(len(i))] * len(i), index=s.index)

    data = [(n, f"w{n}") for n in range(10)]
    table = t_env.from_elements(data, ["i", "s"]).select(col("i"), batch_info(col("i"), col("s")).alias("info"))
    got = values(table.execute().collect())
    assert [r[0] for r in got] == list(range(10))  # the rows keep their order
    assert all(r[1].split("/")[0] == f"W{r[0]}" for r in got)
    sizes = [int(r[1].split("/")[1]) for r in got]
    assert max(sizes) <= 4 and len(got) == 10


def test_a_pandas_udf_of_the_wrong_length_fails_the_job_naming_it(cluster: Any) -> None:
    t_env = streaming()

    @udf(result_type=DataTypes.BIGINT(), func_type="pandas")
    def one_value(i):
        return pd.Series([1])

    table = t_env.from_elements([(1,), (2,), (3,)], ["i"]).select(one_value(col("i")))
    with pytest.raises(Exception, match="The result length '1' of Pandas UDF 'one_value' is not equal to the input "
                                        "length '3'"):
        list(table.execute().collect())


# (epoch ms, name, price) in an order no watermark (ts - 3 s) makes late
WINDOW_ROWS = [(1000, "a", 1.5), (2000, "b", 2.0), (3000, "a", 3.25), (4000, "b", 4.0), (9000, "a", 10.0)]


def events() -> Any:
    """WINDOW_ROWS as a table with the event-time attribute ``ts`` (TIMESTAMP_LTZ(3), watermark ts - 3 s)."""
    from millstream.common.time import Instant
    from millstream.common.typeinfo import Types
    from millstream.datastream import StreamExecutionEnvironment
    from millstream.table import Schema, StreamTableEnvironment
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    t_env = StreamTableEnvironment.create(stream_execution_environment=env)
    ds = env.from_collection([(Instant.of_epoch_milli(ms), n, p) for ms, n, p in WINDOW_ROWS],
                             type_info=Types.ROW([Types.INSTANT(), Types.STRING(), Types.DOUBLE()]))
    return t_env.from_data_stream(ds, Schema.new_builder()
                                  .column_by_expression("ts", "CAST(f0 AS TIMESTAMP_LTZ(3))")
                                  .column("f1", DataTypes.STRING()).column("f2", DataTypes.DOUBLE())
                                  .watermark("ts", "ts - INTERVAL '3' SECOND").build()).alias("ts", "name", "price")


def epoch_ms(t: datetime.datetime) -> int:
    epoch = datetime.datetime(1970, 1, 1, tzinfo=t.tzinfo)
    return round((t - epoch).total_seconds() * 1000)


@udaf(result_type=DataTypes.DOUBLE(), func_type="pandas")
def span(v):
    return float(v.max() - v.min())


def test_a_pandas_udaf_in_a_group_by_updates_per_row(cluster: Any) -> None:
    t_env = streaming()
    table = t_env.from_elements([(n, p) for _, n, p in WINDOW_ROWS], ["name", "price"])
    rows = list(table.group_by(col("name")).select(col("name"), span(col("price")).alias("s")).execute().collect())
    # a streaming GROUP BY: +I, then -U/+U per change; the last +I/+U per group is max - min of its prices
    final: dict[str, float] = {}
    for r in rows:
        if r.get_row_kind() in (RowKind.INSERT, RowKind.UPDATE_AFTER):
            final[r[0]] = r[1]
    assert final == {n: max(p for _, k, p in WINDOW_ROWS if k == n) - min(p for _, k, p in WINDOW_ROWS if k == n)
                     for n in ("a", "b")}
    assert sum(1 for r in rows if r.get_row_kind() is I) == 2


def slide_windows(ms: int) -> list[tuple[int, int]]:
    """4 s windows every 2 s containing ``ms`` (Flink's sliding windows, aligned to the epoch)."""
    last = ms - ms % 2000
    return [(s, s + 4000) for s in range(last, ms - 4000, -2000)]


def sessions(gap: int) -> dict[tuple[str, int], list[float]]:
    out: dict[tuple[str, int], list[float]] = {}
    for name in ("a", "b"):
        start, last, prices = None, None, []
        for ms, n, p in sorted(r for r in WINDOW_ROWS if r[1] == name):
            if last is not None and ms >= last + gap:
                out[(name, start)] = prices
                start, prices = None, []
            start = ms if start is None else start
            last = ms
            prices.append(p)
        out[(name, start)] = prices
    return out


@pytest.mark.parametrize("kind", ["slide", "session"])
def test_a_pandas_udaf_in_slide_and_session_windows(cluster: Any, kind: str) -> None:
    if kind == "slide":
        window = Slide.over(lit(4).seconds).every(lit(2).seconds)
        groups: dict[tuple[str, int], list[float]] = {}
        for ms, n, p in WINDOW_ROWS:
            for start, _ in slide_windows(ms):
                groups.setdefault((n, start), []).append(p)
    else:
        window = Session.with_gap(lit(3).seconds)
        groups = sessions(3000)
    result = events().window(window.on(col("ts")).alias("w")).group_by(col("name"), col("w")) \
        .select(col("name"), span(col("price")), col("w").start)
    got = {(r[0], epoch_ms(r[2])): r[1] for r in result.execute().collect()}
    assert got == {k: max(p) - min(p) for k, p in groups.items()}


def test_a_pandas_udaf_over_a_range_window(cluster: Any) -> None:
    over = events().over_window(Over.partition_by(col("name")).order_by(col("ts")).preceding(lit(1).seconds)
                                .alias("w"))
    # RANGE 1 s preceding: the rows of the same name within [ts - 1 s, ts]
    got = sorted(values(over.select(col("name"), col("price"), span(col("price")).over(col("w"))).execute().collect()))
    expected = []
    for ms, n, p in WINDOW_ROWS:
        frame = [q for m, k, q in WINDOW_ROWS if k == n and ms - 1000 <= m <= ms]
        expected.append((n, p, max(frame) - min(frame)))
    assert got == sorted(expected)


def test_to_pandas_of_from_pandas_gives_the_frame_back(cluster: Any) -> None:
    t_env = streaming()
    pdf = pd.DataFrame({"i": list(range(20)), "x": [n / 4 for n in range(20)], "s": [f"r{n}" for n in range(20)]})
    table = t_env.from_pandas(pdf, splits_num=2)  # the cluster has 2 slots
    out = table.to_pandas()
    assert list(out.columns) == ["i", "x", "s"] and [str(t) for t in out.dtypes] == ["int64", "float64", "object"]
    # two parallel source subtasks: the rows as a set
    assert sorted(out.itertuples(index=False, name=None)) == list(pdf.itertuples(index=False, name=None))
    single = t_env.from_pandas(pdf, ["a", "b", "c"]).filter(col("a") >= 15).to_pandas()
    assert single["a"].tolist() == [15, 16, 17, 18, 19] and single["c"].tolist() == [f"r{n}" for n in range(15, 20)]


class Flaky(AsyncScalarFunction):
    """Fails the first call of each key, then answers after a random delay (results finish out of order)."""

    def open(self, function_context: Any) -> None:
        self.failed: set[int] = set()

    async def eval(self, i: int) -> str:
        if i not in self.failed:
            self.failed.add(i)
            raise ConnectionError(f"transient failure for {i}")
        await asyncio.sleep(random.uniform(0, 0.05))
        return f"v{i}"


def test_async_scalar_results_keep_the_input_order_and_failed_calls_are_retried(cluster: Any) -> None:
    t_env = streaming()
    t_env.get_config().set("table.exec.async-scalar.max-concurrent-operations", "5")
    t_env.get_config().set("table.exec.async-scalar.retry-delay", "10 ms")
    t_env.get_config().set("table.exec.async-scalar.max-attempts", "2")
    t_env.create_temporary_function("flaky", udf(Flaky(), result_type=DataTypes.STRING()))
    t_env.create_temporary_view("nums", t_env.from_elements([(n,) for n in range(30)], ["i"]))
    got = values(t_env.sql_query("SELECT i, flaky(i) AS v FROM nums").execute().collect())
    assert got == [(n, f"v{n}") for n in range(30)]


def test_an_async_scalar_call_past_the_timeout_fails_the_job(cluster: Any) -> None:
    t_env = streaming()
    t_env.get_config().set("table.exec.async-scalar.timeout", "200 ms")
    t_env.get_config().set("table.exec.async-scalar.retry-strategy", "NO_RETRY")

    @udf(result_type=DataTypes.BIGINT())
    async def never(i):
        await asyncio.sleep(30)
        return i

    table = t_env.from_elements([(1,)], ["i"]).select(never(col("i")))
    with pytest.raises(Exception, match="did not complete within table.exec.async-scalar.timeout"):
        list(table.execute().collect())
