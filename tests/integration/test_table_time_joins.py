"""Interval joins, window joins and Top-N over an updating input on the runtime (a MiniCluster with
real Spark). The data follow Flink's documentation pages (Orders and Shipments for the interval
join, two windowed tables for the window join); expected changelogs are computed here from the
rules those pages state, not read from Millstream."""
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


def ts(hhmm: str) -> datetime.datetime:
    h, m = map(int, hhmm.split(":"))
    return datetime.datetime(2021, 6, 30, h, m)


def csv_table(t_env: TableEnvironment, tmp_path: Path, name: str, columns: str, time_col: str,
              rows: list[tuple[Any, ...]]) -> None:
    """A filesystem CSV table whose rows are in time order, with a watermark equal to the time."""
    path = tmp_path / f"{name}.csv"
    path.write_text("".join(",".join(f"2021-06-30 {v}:00" if isinstance(v, str) and ":" in v else str(v)
                                     for v in r) + "\n" for r in rows))
    t_env.execute_sql(f"CREATE TABLE {name} ({columns}, WATERMARK FOR {time_col} AS {time_col}) WITH "
                      f"('connector' = 'filesystem', 'path' = '{path}', 'format' = 'csv')")


def changelog(t_env: TableEnvironment, sql: str) -> list[tuple[RowKind, tuple[Any, ...]]]:
    return sorted(((r.get_row_kind(), tuple(r)) for r in t_env.execute_sql(sql).collect()),
                  key=lambda c: (c[0].value, repr(c[1])))


def sort(changes: list[tuple[RowKind, tuple[Any, ...]]]) -> list[tuple[RowKind, tuple[Any, ...]]]:
    return sorted(changes, key=lambda c: (c[0].value, repr(c[1])))


# Flink's interval join page: orders shipped within four hours of being placed
ORDERS = [(1, "08:00"), (2, "09:00"), (3, "10:00"), (4, "11:00")]
SHIPMENTS = [(1, "09:00"), (3, "10:30"), (3, "13:00"), (2, "14:00"), (5, "15:00")]


def test_interval_joins_inner_and_outer_emit_flinks_append_only_changelog(cluster: Any, tmp_path: Path) -> None:
    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    t_env.get_config().set("parallelism.default", "2")
    csv_table(t_env, tmp_path, "Orders", "id INT, order_time TIMESTAMP(3)", "order_time", ORDERS)
    csv_table(t_env, tmp_path, "Shipments", "order_id INT, ship_time TIMESTAMP(3)", "ship_time", SHIPMENTS)
    pairs = [(o, ot, s, st) for o, ot in ORDERS for s, st in SHIPMENTS
             if o == s and ts(st) - datetime.timedelta(hours=4) <= ts(ot) <= ts(st)]
    inner = [(I, (o, ts(ot), s, ts(st))) for o, ot, s, st in pairs]
    unmatched_orders = [(I, (o, ts(ot), None, None)) for o, ot in ORDERS if not any(p[:2] == (o, ot) for p in pairs)]
    unmatched_ships = [(I, (None, None, s, ts(st))) for s, st in SHIPMENTS if not any(p[2:] == (s, st) for p in pairs)]
    assert inner and unmatched_orders and unmatched_ships  # the data exercise every case
    select = "SELECT o.id, o.order_time, s.order_id, s.ship_time FROM Orders o {} Shipments s ON o.id = s.order_id " \
             "AND o.order_time BETWEEN s.ship_time - INTERVAL '4' HOUR AND s.ship_time"
    # Flink's documented form: a comma join with the condition in WHERE
    assert changelog(t_env, "SELECT o.id, o.order_time, s.order_id, s.ship_time FROM Orders o, Shipments s WHERE "
                            "o.id = s.order_id AND o.order_time BETWEEN s.ship_time - INTERVAL '4' HOUR AND "
                            "s.ship_time") == sort(inner)
    # outer joins: a row that met no partner within its interval leaves padded, once, as +I
    assert changelog(t_env, select.format("LEFT JOIN")) == sort(inner + unmatched_orders)
    assert changelog(t_env, select.format("RIGHT JOIN")) == sort(inner + unmatched_ships)
    assert changelog(t_env, select.format("FULL OUTER JOIN")) == sort(inner + unmatched_orders + unmatched_ships)
    plan = next(iter(t_env.execute_sql("EXPLAIN " + select.format("LEFT JOIN")).collect()))[0]
    assert "IntervalJoin(joinType=[LeftOuterJoin], windowBounds=[isRowTime=true, leftLowerBound=-14400000, " \
        "leftUpperBound=0" in plan



def test_a_proctime_interval_join_pairs_rows_that_arrive_close_in_time(cluster: Any, tmp_path: Path) -> None:
    """Processing time: both sides arrive within seconds, so a one-hour interval pairs every order
    with its shipments (and only those of its id)."""
    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    t_env.get_config().set("parallelism.default", "2")
    for name, columns, rows in (("Orders", "id INT, order_time TIMESTAMP(3)", ORDERS),
                                ("Shipments", "order_id INT, ship_time TIMESTAMP(3)", SHIPMENTS)):
        path = tmp_path / f"{name}.csv"
        path.write_text("".join(f"{k},2021-06-30 {t}:00\n" for k, t in rows))
        t_env.execute_sql(f"CREATE TABLE {name} ({columns}, pt AS PROCTIME()) WITH ('connector' = 'filesystem', "
                          f"'path' = '{path}', 'format' = 'csv')")
    got = changelog(t_env, "SELECT o.id, s.order_id, s.ship_time FROM Orders o JOIN Shipments s ON o.id = s.order_id "
                           "AND o.pt BETWEEN s.pt - INTERVAL '1' HOUR AND s.pt + INTERVAL '1' HOUR")
    assert got == sort([(I, (o, s, ts(st))) for o, _ in ORDERS for s, st in SHIPMENTS if o == s])
    plan = next(iter(t_env.execute_sql("EXPLAIN SELECT o.id FROM Orders o JOIN Shipments s ON o.id = s.order_id AND "
                                       "o.pt BETWEEN s.pt - INTERVAL '1' HOUR AND s.pt").collect()))[0]
    assert "IntervalJoin(joinType=[InnerJoin], windowBounds=[isRowTime=false" in plan


# Flink's Top-N page: the top products per category by sales, here over a GROUP BY (an updating input)
SALES = [("c1", "p1", 3), ("c1", "p2", 5), ("c1", "p3", 4), ("c2", "p4", 1), ("c1", "p1", 4), ("c1", "p3", -3),
         ("c2", "p5", 2), ("c1", "p2", 1), ("c2", "p4", 5)]


def group_by_changelog() -> list[tuple[RowKind, tuple[str, str, int]]]:
    """A streaming GROUP BY category, product_id with SUM(sales): +I for a new group, -U/+U per change."""
    totals: dict[tuple[str, str], int] = {}
    out: list[tuple[RowKind, tuple[str, str, int]]] = []
    for c, prod, s in SALES:
        old = totals.get((c, prod))
        totals[(c, prod)] = (old or 0) + s
        if old is None:
            out.append((I, (c, prod, totals[(c, prod)])))
        else:
            out += [(UB, (c, prod, old)), (UA, (c, prod, totals[(c, prod)]))]
    return out


def top_n_changelog(changes: list[tuple[RowKind, tuple[str, str, int]]], n: int) -> list[tuple[RowKind, tuple]]:
    """Each change's effect on the ranking recomputed from scratch: per rank whose row differs,
    -U old/+U new; a rank filled +I, a rank emptied -D (Flink's RetractableTopNFunction's output)."""
    rows: list[tuple[str, str, int]] = []
    out: list[tuple[RowKind, tuple]] = []
    for kind, row in changes:
        before = {c: sorted((r for r in rows if r[0] == c), key=lambda r: -r[2])[:n] for c in {row[0]}}
        if kind in (I, UA):
            rows.append(row)
        else:
            rows.remove(row)
        after = sorted((r for r in rows if r[0] == row[0]), key=lambda r: -r[2])[:n]
        old = before[row[0]]
        for rank in range(max(len(old), len(after))):
            if rank < len(old) and rank < len(after):
                if old[rank] != after[rank]:
                    out += [(UB, (*old[rank], rank + 1)), (UA, (*after[rank], rank + 1))]
            elif rank < len(after):
                out.append((I, (*after[rank], rank + 1)))
            else:
                out.append((D, (*old[rank], rank + 1)))
    return out


def test_top_n_over_a_group_by_retracts_as_flinks_retract_strategy(cluster: Any) -> None:
    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    t_env.get_config().set("parallelism.default", "1")  # one input order: the exact changelog is known
    t_env.create_temporary_view("ShopSales", t_env.from_elements(SALES, ["category", "product_id", "sales"]))
    result = t_env.execute_sql(
        "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY category ORDER BY total DESC) AS row_num FROM "
        "(SELECT category, product_id, SUM(sales) AS total FROM ShopSales GROUP BY category, product_id)) "
        "WHERE row_num <= 2")
    got = [(r.get_row_kind(), tuple(r)) for r in result.collect()]
    expected = top_n_changelog(group_by_changelog(), 2)
    assert any(k is D for k, _ in expected) or any(k is UB for k, _ in expected)  # the data move ranks
    per_category = {c: [x for x in got if x[1][0] == c] for c in ("c1", "c2")}
    assert per_category == {c: [x for x in expected if x[1][0] == c] for c in ("c1", "c2")}
    assert len(got) == len(expected)


# Flink's window join page: LeftTable and RightTable (row_time, num, id), 5-minute tumbling windows
LEFT_ROWS = [("12:02", 1, "L1"), ("12:06", 2, "L2"), ("12:03", 3, "L3")]
RIGHT_ROWS = [("12:01", 2, "R2"), ("12:04", 3, "R3"), ("12:05", 4, "R4")]


def window_of(hhmm: str) -> tuple[datetime.datetime, datetime.datetime]:
    t = ts(hhmm)
    start = t - datetime.timedelta(minutes=t.minute % 5)
    return start, start + datetime.timedelta(minutes=5)


def test_window_joins_emit_each_windows_rows_once_at_its_end(cluster: Any, tmp_path: Path) -> None:
    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    t_env.get_config().set("parallelism.default", "2")
    for name, rows in (("LeftTable", LEFT_ROWS), ("RightTable", RIGHT_ROWS)):
        path = tmp_path / f"{name}.csv"
        path.write_text("".join(f"2021-06-30 {t}:00,{n},{i}\n" for t, n, i in rows))
        # the page's rows are out of order by up to 3 minutes: a watermark 5 minutes behind keeps them all
        t_env.execute_sql(f"CREATE TABLE {name} (row_time TIMESTAMP(3), num INT, id STRING, WATERMARK FOR row_time "
                          f"AS row_time - INTERVAL '5' MINUTE) WITH ('connector' = 'filesystem', 'path' = '{path}', "
                          "'format' = 'csv')")
    select = ("SELECT L.num AS L_Num, L.id AS L_Id, R.num AS R_Num, R.id AS R_Id, COALESCE(L.window_start, "
              "R.window_start) AS window_start, COALESCE(L.window_end, R.window_end) AS window_end FROM "
              "(SELECT * FROM TABLE(TUMBLE(TABLE LeftTable, DESCRIPTOR(row_time), INTERVAL '5' MINUTES))) L {} "
              "(SELECT * FROM TABLE(TUMBLE(TABLE RightTable, DESCRIPTOR(row_time), INTERVAL '5' MINUTES))) R "
              "ON L.num = R.num AND L.window_start = R.window_start AND L.window_end = R.window_end")
    pairs = [(ln, li, rn, ri, *window_of(lt)) for lt, ln, li in LEFT_ROWS for rt, rn, ri in RIGHT_ROWS
             if ln == rn and window_of(lt) == window_of(rt)]
    lone_left = [(n, i, None, None, *window_of(t)) for t, n, i in LEFT_ROWS if not any(p[1] == i for p in pairs)]
    lone_right = [(None, None, n, i, *window_of(t)) for t, n, i in RIGHT_ROWS if not any(p[3] == i for p in pairs)]
    assert pairs and lone_left and lone_right
    for kind, expected in (("JOIN", pairs), ("LEFT JOIN", pairs + lone_left), ("RIGHT JOIN", pairs + lone_right),
                           ("FULL JOIN", pairs + lone_left + lone_right)):
        assert changelog(t_env, select.format(kind)) == sort([(I, r) for r in expected]), kind
    # SEMI and ANTI window joins, as the page writes them: IN and NOT EXISTS subqueries; the left
    # side's rows (with their window columns) that have, or have not, a partner in their window
    def left_row(t: str, n: int, i: str) -> tuple[Any, ...]:
        start, end = window_of(t)
        return (ts(t), n, i, start, end, end - datetime.timedelta(milliseconds=1))

    windowed = "(SELECT * FROM TABLE(TUMBLE(TABLE {}, DESCRIPTOR(row_time), INTERVAL '5' MINUTES)))"
    semi = changelog(t_env, f"SELECT * FROM {windowed.format('LeftTable')} L WHERE L.num IN (SELECT num FROM "
                            f"{windowed.format('RightTable')} R WHERE L.window_start = R.window_start AND "
                            "L.window_end = R.window_end)")
    assert semi == sort([(I, left_row(*r)) for r in LEFT_ROWS if any(p[1] == r[2] for p in pairs)])
    anti = changelog(t_env, f"SELECT * FROM {windowed.format('LeftTable')} L WHERE NOT EXISTS (SELECT * FROM "
                            f"{windowed.format('RightTable')} R WHERE L.num = R.num AND L.window_start = "
                            "R.window_start AND L.window_end = R.window_end)")
    assert anti == sort([(I, left_row(*r)) for r in LEFT_ROWS if not any(p[1] == r[2] for p in pairs)])


# Flink's Window Top-N page: the top 3 suppliers by sales in each 10-minute window
SUPPLIER_BIDS = [("08:05", 4, "A", "supplier1"), ("08:06", 4, "C", "supplier2"), ("08:07", 2, "G", "supplier1"),
                 ("08:08", 2, "B", "supplier3"), ("08:09", 5, "D", "supplier4"), ("08:11", 2, "B", "supplier3"),
                 ("08:13", 1, "E", "supplier1"), ("08:15", 3, "H", "supplier2"), ("08:17", 6, "F", "supplier5")]


def test_window_top_n_emits_each_windows_final_top_rows_once(cluster: Any, tmp_path: Path) -> None:
    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    t_env.get_config().set("parallelism.default", "2")
    path = tmp_path / "bids.csv"
    path.write_text("".join(f"2021-06-30 {t}:00,{p},{i},{s}\n" for t, p, i, s in SUPPLIER_BIDS))
    t_env.execute_sql(f"CREATE TABLE Bid (bidtime TIMESTAMP(3), price INT, item STRING, supplier_id STRING, "
                      f"WATERMARK FOR bidtime AS bidtime - INTERVAL '1' SECOND) WITH ('connector' = 'filesystem', "
                      f"'path' = '{path}', 'format' = 'csv')")
    result = changelog(t_env, "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end "
                              "ORDER BY price DESC) AS rownum FROM (SELECT window_start, window_end, supplier_id, "
                              "SUM(price) AS price, COUNT(*) AS cnt FROM TABLE(TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), "
                              "INTERVAL '10' MINUTES)) GROUP BY window_start, window_end, supplier_id)) "
                              "WHERE rownum <= 3")
    sums: dict[tuple[datetime.datetime, str], list[int]] = {}
    for t, price, _, supplier in SUPPLIER_BIDS:
        start = ts(t) - datetime.timedelta(minutes=ts(t).minute % 10)
        sums.setdefault((start, supplier), []).append(price)
    expected = []
    for start in sorted({s for s, _ in sums}):
        ranked = sorted(((sup, sum(v), len(v)) for (s, sup), v in sums.items() if s == start), key=lambda r: -r[1])
        expected += [(I, (start, start + datetime.timedelta(minutes=10), sup, total, n, k + 1))
                     for k, (sup, total, n) in enumerate(ranked[:3])]
    assert result == sort(expected)  # insert-only: each window's final top 3, once


def test_a_tumble_with_an_offset_aggregates_the_shifted_windows(cluster: Any, tmp_path: Path) -> None:
    """Flink's window TVF page: TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES,
    INTERVAL '1' MINUTES) has windows [08:01, 08:11) and [08:11, 08:21)."""
    bids = [("08:07", 2, "A"), ("08:11", 3, "B"), ("08:05", 4, "C"), ("08:09", 5, "D"), ("08:13", 1, "E"),
            ("08:17", 6, "F")]
    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    t_env.get_config().set("parallelism.default", "2")
    path = tmp_path / "bid.csv"
    path.write_text("".join(f"2021-06-30 {t}:00,{p},{i}\n" for t, p, i in bids))
    t_env.execute_sql(f"CREATE TABLE Bid (bidtime TIMESTAMP(3), price INT, item STRING, WATERMARK FOR bidtime AS "
                      f"bidtime - INTERVAL '5' MINUTE) WITH ('connector' = 'filesystem', 'path' = '{path}', "
                      "'format' = 'csv')")
    got = changelog(t_env, "SELECT window_start, window_end, SUM(price) AS total_price FROM TABLE(TUMBLE(TABLE Bid, "
                           "DESCRIPTOR(bidtime), INTERVAL '10' MINUTES, INTERVAL '1' MINUTES)) "
                           "GROUP BY window_start, window_end")
    sums: dict[datetime.datetime, int] = {}
    for t, price, _ in bids:
        start = ts(t) - datetime.timedelta(minutes=(ts(t).minute - 1) % 10)
        sums[start] = sums.get(start, 0) + price
    assert got == sort([(I, (s, s + datetime.timedelta(minutes=10), v)) for s, v in sums.items()])
    assert sorted(sums) == [ts("08:01"), ts("08:11")]


def test_a_window_over_an_interval_join_counts_every_joined_row(cluster: Any, tmp_path: Path) -> None:
    """Flink keeps an interval join's time attributes and holds its output watermark back by the
    join's bounds, so a window TVF over the joined rows (on either side's rowtime) sees every row:
    none is late, though a joined row leaves when its later partner arrives, hours of event time on."""
    import random
    rng = random.Random(7)
    minutes = lambda n: sorted(rng.randrange(0, 12 * 60) for _ in range(n))  # noqa: E731
    hhmm = lambda m: f"{m // 60:02d}:{m % 60:02d}"  # noqa: E731
    orders = [(rng.randrange(8), hhmm(m)) for m in minutes(60)]
    shipments = [(rng.randrange(8), hhmm(m)) for m in minutes(60)]
    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    t_env.get_config().set("parallelism.default", "2")
    csv_table(t_env, tmp_path, "Orders", "id INT, order_time TIMESTAMP(3)", "order_time", orders)
    csv_table(t_env, tmp_path, "Shipments", "order_id INT, ship_time TIMESTAMP(3)", "ship_time", shipments)
    bound = "o.order_time BETWEEN s.ship_time - INTERVAL '4' HOUR AND s.ship_time"
    t_env.create_temporary_view("inner_joined", t_env.sql_query(
        f"SELECT o.id, o.order_time, s.ship_time FROM Orders o JOIN Shipments s ON o.id = s.order_id AND {bound}"))
    t_env.create_temporary_view("left_joined", t_env.sql_query(
        f"SELECT o.id, o.order_time, s.ship_time FROM Orders o LEFT JOIN Shipments s ON o.id = s.order_id AND {bound}"))

    pairs = [(o, ts(ot), ts(st)) for o, ot in orders for s, st in shipments
             if o == s and ts(st) - datetime.timedelta(hours=4) <= ts(ot) <= ts(st)]
    unmatched = [(o, ts(ot), None) for o, ot in orders if not any(p[0] == o and p[1] == ts(ot) for p in pairs)]
    assert pairs and unmatched  # the data exercise both joined and padded rows

    def hourly(rows: list[tuple[Any, ...]], column: int) -> list[tuple[RowKind, tuple[Any, ...]]]:
        counts: dict[datetime.datetime, int] = {}
        for r in rows:
            start = r[column].replace(minute=0)
            counts[start] = counts.get(start, 0) + 1
        return sort([(I, (s, s + datetime.timedelta(hours=1), n)) for s, n in counts.items()])

    window = ("SELECT window_start, window_end, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE {}, DESCRIPTOR({}), "
              "INTERVAL '1' HOUR)) GROUP BY window_start, window_end")
    # by the shipment's time (the row that completes each pair) and by the order's (hours earlier)
    assert changelog(t_env, window.format("inner_joined", "ship_time")) == hourly(pairs, 2)
    assert changelog(t_env, window.format("left_joined", "order_time")) == hourly(pairs + unmatched, 1)


class _PausingRows(SourceFunction):
    """Emits rows; a None is a pause (2 s, ten periodic watermark intervals), so the watermark of
    the rows before it gets downstream before the rows after it."""

    def __init__(self, rows: list[Any]) -> None:
        self.rows = rows

    def run(self, ctx: Any) -> None:
        for r in self.rows:
            if r is None:
                time.sleep(2)
            else:
                ctx.collect(Row(*r))

    def cancel(self) -> None:
        pass


def test_a_joined_row_that_completes_hours_later_is_not_late_for_the_window_of_its_first_rowtime(cluster: Any) -> None:
    """The pair (order 1 at 08:05, its shipment at 11:00) leaves the join only when the shipment
    arrives, after both inputs' watermarks passed 09:00. Held back by the join's 4 h bound, the
    watermark has not closed the order's [08:00, 09:00) window yet, so the pair counts there."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    t_env = StreamTableEnvironment.create(env)
    day = "2021-06-30 "
    orders = [(1, day + "08:05:00"), (2, day + "08:20:00"), None, (3, day + "12:00:00")]
    shipments = [(2, day + "08:30:00"), None, (7, day + "10:00:00"), None, (1, day + "11:00:00"),
                 (3, day + "12:30:00")]
    for name, rows, key, time_col in (("Orders", orders, "id", "order_time"),
                                      ("Shipments", shipments, "order_id", "ship_time")):
        row_type = Types.ROW_NAMED([key, "t"], [Types.INT(), Types.STRING()])
        stream = env.add_source(_PausingRows(rows), name, type_info=row_type)
        t_env.create_temporary_view(name, t_env.from_data_stream(stream, Schema.new_builder()
                                                                 .column(key, DataTypes.INT())
                                                                 .column("t", DataTypes.STRING())
                                                                 .column_by_expression(time_col, "CAST(t AS TIMESTAMP(3))")
                                                                 .watermark(time_col, time_col).build()))
    t_env.create_temporary_view("joined", t_env.sql_query(
        "SELECT o.id, o.order_time, s.ship_time FROM Orders o JOIN Shipments s ON o.id = s.order_id AND "
        "o.order_time BETWEEN s.ship_time - INTERVAL '4' HOUR AND s.ship_time"))
    result = t_env.execute_sql("SELECT window_start, COUNT(*) AS n, SUM(id) AS ids FROM TABLE(TUMBLE(TABLE joined, "
                               "DESCRIPTOR(order_time), INTERVAL '1' HOUR)) GROUP BY window_start, window_end").collect()
    assert sorted(tuple(r) for r in result) == [(ts("08:00"), 2, 1 + 2), (ts("12:00"), 1, 3)]
