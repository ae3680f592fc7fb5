"""Event time in SQL on the runtime (a MiniCluster with real Spark): window TVFs with window
aggregation (late rows dropped), OVER aggregation, Top-N, deduplication and EXPLAIN. Expected
results follow Flink's documentation: its window TVF page's Bid table, its OVER, Top-N and
deduplication pages' rules (computed here from the input, not read from Millstream)."""
from __future__ import annotations

import datetime
import time
from pathlib import Path
from typing import Any

import pytest

from millstream.common import Row, RowKind, Types
from millstream.datastream import StreamExecutionEnvironment
from millstream.datastream.functions import SourceFunction
from millstream.table import DataTypes, EnvironmentSettings, Schema, StreamTableEnvironment, TableEnvironment

from .harness import ClusterSpec

pytestmark = pytest.mark.timeout(600)
CLUSTER = ClusterSpec(jobmanager_env=True, tasks_per_slot=8)

I, UB, UA, D = RowKind.INSERT, RowKind.UPDATE_BEFORE, RowKind.UPDATE_AFTER, RowKind.DELETE
# Flink's window TVF documentation: the Bid table (bidtime, price, item)
BIDS = [("08:07", 2, "A"), ("08:11", 3, "B"), ("08:05", 4, "C"), ("08:09", 5, "D"), ("08:13", 1, "E"), ("08:17", 6, "F")]


def ts(hhmm: str) -> datetime.datetime:
    h, m = map(int, hhmm.split(":"))
    return datetime.datetime(2020, 4, 15, h, m)


def bid_table(tmp_path: Path, parallelism: int = 1) -> TableEnvironment:
    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    t_env.get_config().set("parallelism.default", str(parallelism))
    (tmp_path / "bids.csv").write_text("".join(f"2020-04-15 {t}:00,{p},{i}\n" for t, p, i in BIDS))
    t_env.execute_sql(f"CREATE TABLE Bid (bidtime TIMESTAMP(3), price INT, item STRING, "
                      f"WATERMARK FOR bidtime AS bidtime - INTERVAL '1' SECOND) WITH ('connector' = 'filesystem', "
                      f"'path' = '{tmp_path / 'bids.csv'}', 'format' = 'csv')")
    return t_env


def window_sums(windows: "callable[[datetime.datetime], list[tuple[datetime.datetime, datetime.datetime]]]") -> dict:  # type: ignore[valid-type]
    sums: dict[tuple[datetime.datetime, datetime.datetime], int] = {}
    for t, price, _ in BIDS:
        for w in windows(ts(t)):
            sums[w] = sums.get(w, 0) + price
    return sums


def minutes(n: int) -> datetime.timedelta:
    return datetime.timedelta(minutes=n)


def floor(t: datetime.datetime, size: int) -> datetime.datetime:
    return t - minutes(t.minute % size)


def test_window_tvfs_aggregate_once_per_window(cluster: Any, tmp_path: Path) -> None:
    t_env = bid_table(tmp_path, parallelism=2)
    tumble = t_env.execute_sql(
        "SELECT window_start, window_end, SUM(price) AS total_price FROM TABLE(TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), "
        "INTERVAL '10' MINUTES)) GROUP BY window_start, window_end").collect()
    got = [(r.get_row_kind(), tuple(r)) for r in tumble]
    expected = window_sums(lambda t: [(floor(t, 10), floor(t, 10) + minutes(10))])
    assert sorted(got) == sorted((I, (s, e, v)) for (s, e), v in expected.items())  # insert-only, once per window

    hop = t_env.execute_sql(
        "SELECT window_start, window_end, SUM(price) AS total_price FROM TABLE(HOP(TABLE Bid, DESCRIPTOR(bidtime), "
        "INTERVAL '5' MINUTES, INTERVAL '10' MINUTES)) GROUP BY window_start, window_end").collect()
    expected = window_sums(lambda t: [(floor(t, 5) - minutes(k), floor(t, 5) - minutes(k) + minutes(10)) for k in (0, 5)])
    assert sorted(tuple(r) for r in hop) == sorted((s, e, v) for (s, e), v in expected.items())

    cumulate = t_env.execute_sql(
        "SELECT window_start, window_end, SUM(price) AS total_price FROM TABLE(CUMULATE(TABLE Bid, DESCRIPTOR(bidtime), "
        "INTERVAL '2' MINUTES, INTERVAL '10' MINUTES)) GROUP BY window_start, window_end").collect()
    expected = window_sums(lambda t: [(floor(t, 10), floor(t, 10) + minutes(e)) for e in range(2, 11, 2)
                                      if floor(t, 10) + minutes(e) > t])
    assert sorted(tuple(r) for r in cumulate) == sorted((s, e, v) for (s, e), v in expected.items())

    # SESSION per item: a session closes 5 minutes after its last row (every item has one row here)
    session = t_env.execute_sql(
        "SELECT item, window_start, window_end, SUM(price) AS total FROM TABLE(SESSION(TABLE Bid PARTITION BY item, "
        "DESCRIPTOR(bidtime), INTERVAL '5' MINUTES)) GROUP BY item, window_start, window_end").collect()
    assert sorted(tuple(r) for r in session) == sorted((i, ts(t), ts(t) + minutes(5), p) for t, p, i in BIDS)

    # the same TUMBLE query per item: GROUP BY may name more keys than the window's
    per_item = t_env.execute_sql(
        "SELECT item, window_start, window_end, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), "
        "INTERVAL '10' MINUTES)) GROUP BY item, window_start, window_end").collect()
    assert sorted(tuple(r) for r in per_item) == sorted((i, floor(ts(t), 10), floor(ts(t), 10) + minutes(10), 1)
                                                        for t, _, i in BIDS)


class PausingRows(SourceFunction):
    """Emits (bidtime text, price) rows; a None row is a pause longer than the periodic watermark
    interval, so the next row carries a watermark out behind it."""

    def __init__(self, rows: list[Any]) -> None:
        self.rows = rows

    def run(self, ctx: Any) -> None:
        for r in self.rows:
            if r is None:
                time.sleep(1.5)
            else:
                ctx.collect(Row(*r))

    def cancel(self) -> None:
        pass


def test_a_late_row_of_a_fired_window_is_dropped(cluster: Any) -> None:
    """Flink's window aggregation drops a row whose window the watermark has passed: 08:13 brings
    the watermark (08:13 - 1 s) past [08:00, 08:10), so the 08:09 row after it counts nowhere."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    t_env = StreamTableEnvironment.create(env)
    rows = [("08:05", 4), ("08:07", 2), ("08:12", 3), None, ("08:13", 1), ("08:09", 100), ("08:17", 6)]
    data = [None if r is None else (f"2020-04-15 {r[0]}:00", r[1]) for r in rows]
    row_type = Types.ROW_NAMED(["bidtime", "price"], [Types.STRING(), Types.INT()])
    stream = env.add_source(PausingRows(data), "bids", type_info=row_type)
    t_env.create_temporary_view("Bid", t_env.from_data_stream(stream, Schema.new_builder()
                                                               .column("bidtime", DataTypes.STRING())
                                                               .column("price", DataTypes.INT())
                                                               .column_by_expression("ts", "CAST(bidtime AS TIMESTAMP(3))")
                                                               .watermark("ts", "ts - INTERVAL '1' SECOND").build()))
    result = t_env.execute_sql("SELECT window_start, SUM(price) AS total FROM TABLE(TUMBLE(TABLE Bid, DESCRIPTOR(ts), "
                               "INTERVAL '10' MINUTES)) GROUP BY window_start, window_end").collect()
    assert sorted(tuple(r) for r in result) == [(ts("08:00"), 4 + 2), (ts("08:10"), 3 + 1 + 6)]


def test_over_top_n_and_deduplication(cluster: Any, tmp_path: Path) -> None:
    t_env = bid_table(tmp_path)
    ordered = sorted(BIDS, key=lambda b: ts(b[0]))
    # OVER: rows in rowtime order (not arrival order), each with the sum of itself and the row before
    over = t_env.execute_sql("SELECT item, SUM(price) OVER (ORDER BY bidtime ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) "
                             "AS s FROM Bid").collect()
    assert [tuple(r) for r in over] == [(i, p + (ordered[k - 1][1] if k else 0)) for k, (_, p, i) in enumerate(ordered)]
    # RANGE: every row within 4 minutes before the current one
    ranged = t_env.execute_sql("SELECT item, SUM(price) OVER (ORDER BY bidtime RANGE BETWEEN INTERVAL '4' MINUTE "
                               "PRECEDING AND CURRENT ROW) AS s FROM Bid").collect()
    assert [tuple(r) for r in ranged] == [(i, sum(q for u, q, _ in BIDS if ts(t) - minutes(4) <= ts(u) <= ts(t)))
                                          for t, _, i in ordered]

    # Top-2 by price in arrival order; with the rank column each change of a rank is -U/+U of it
    # (+I for a rank filled the first time), as Flink's AppendOnlyTopNFunction emits
    top = [(r.get_row_kind(), tuple(r)) for r in t_env.execute_sql(
        "SELECT item, price, rn FROM (SELECT *, ROW_NUMBER() OVER (ORDER BY price DESC) AS rn FROM Bid) "
        "WHERE rn <= 2").collect()]
    expected, ranking = [], []
    for _, price, item in BIDS:
        pos = sum(1 for _, p in ranking if p >= price)
        if pos >= 2:
            continue
        ranking.insert(pos, (item, price))
        for rank in range(pos, min(len(ranking), 2)):
            if rank + 1 < len(ranking):
                expected += [(UB, (*ranking[rank + 1], rank + 1)), (UA, (*ranking[rank], rank + 1))]
            else:
                expected.append((I, (*ranking[rank], rank + 1)))
        del ranking[2:]
    assert top == expected
    # without the rank column: +I of an entering row, -D of the row it pushes out
    plain = [(r.get_row_kind(), tuple(r)) for r in t_env.execute_sql(
        "SELECT item FROM (SELECT *, ROW_NUMBER() OVER (ORDER BY price DESC) AS rn FROM Bid) WHERE rn <= 2").collect()]
    assert plain == [(I, ("A",)), (I, ("B",)), (I, ("C",)), (D, ("A",)), (I, ("D",)), (D, ("B",)), (I, ("F",)),
                     (D, ("C",))]

    # deduplication on rowtime, keep the last row: the latest bidtime wins, earlier winners are retracted
    last = [(r.get_row_kind(), tuple(r)) for r in t_env.execute_sql(
        "SELECT item, price FROM (SELECT *, ROW_NUMBER() OVER (ORDER BY bidtime DESC) AS rn FROM Bid) "
        "WHERE rn = 1").collect()]
    expected, kept = [], None
    for t, price, item in BIDS:
        if kept is None:
            expected.append((I, (item, price)))
        elif ts(t) >= ts(kept[0]):
            expected += [(UB, (kept[2], kept[1])), (UA, (item, price))]
        else:
            continue
        kept = (t, price, item)
    assert last == expected

    plan = t_env.execute_sql("EXPLAIN SELECT item FROM (SELECT *, ROW_NUMBER() OVER (ORDER BY price DESC) AS rn "
                             "FROM Bid) WHERE rn <= 2").collect()
    text = next(iter(plan))[0]
    assert "== Optimized Execution Plan ==" in text and "Rank(strategy=[AppendFastStrategy], rankType=[ROW_NUMBER], " \
        "rankRange=[rankStart=1, rankEnd=2]" in text and "WatermarkAssigner(rowtime=[bidtime]" in text
