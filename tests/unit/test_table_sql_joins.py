"""The pure parts of interval joins, window joins, window offsets and retractable Top-N, from
Flink's documentation (its window TVF, join and Top-N pages) and its planner's rules: which windows
a row is in, which rows an interval join pairs and when an outer row is padded, what a window join
emits when its window ends, the changelog a Top-N over an updating input emits, and the errors a
wrong or unsupported query gets before it runs."""
from __future__ import annotations

import datetime

import pytest

from millstream.common.row import RowKind
from millstream.table import EnvironmentSettings, TableEnvironment
from millstream.table import plan as p
from millstream.table.expression import TableException
from millstream.table.planner import optimize
from millstream.table.time_functions import assign_windows, window_assigner
from millstream.table.window import WindowSpec

I, UB, UA, D = RowKind.INSERT, RowKind.UPDATE_BEFORE, RowKind.UPDATE_AFTER, RowKind.DELETE
MIN = 60_000


def at(hhmm: str, day: int = 30) -> int:
    """Epoch ms of 2021-06-<day> hh:mm (UTC)."""
    h, m = map(int, hhmm.split(":"))
    return int(datetime.datetime(2021, 6, day, h, m, tzinfo=datetime.timezone.utc).timestamp() * 1000)


# -- window offsets ----------------------------------------------------------------------------

@pytest.mark.parametrize("offset, window", [
    # Flink's window TVF page: a row at 2021-06-30 00:00:04 in a 10-minute TUMBLE with these offsets
    (-16, (at("23:54", 29), at("00:04"))), (-6, (at("23:54", 29), at("00:04"))),
    (-4, (at("23:56", 29), at("00:06"))), (4, (at("23:54", 29), at("00:04"))),
    (6, (at("23:56", 29), at("00:06"))), (16, (at("23:56", 29), at("00:06"))),
])
def test_a_tumble_offset_shifts_the_window_as_flinks_docs_show(offset: int, window: tuple[int, int]) -> None:
    spec = WindowSpec("tumble", 0, "ts", size=10 * MIN, offset=offset * MIN)
    t = at("00:00") + 4_000
    assert assign_windows(spec, t) == [window]
    # the DataStream assigner the window aggregation runs gets the same window
    assert [(w.start, w.end) for w in window_assigner(spec).assign_windows(None, t, None)] == [window]


def test_hop_and_cumulate_offsets() -> None:
    # HOP size 10 min, slide 5 min, offset 1 min: windows start at x1 and x6 minutes
    hop = WindowSpec("hop", 0, "ts", size=10 * MIN, slide=5 * MIN, offset=MIN)
    assert assign_windows(hop, at("08:07")) == [(at("08:06"), at("08:16")), (at("08:01"), at("08:11"))]
    assert sorted((w.start, w.end) for w in window_assigner(hop).assign_windows(None, at("08:07"), None)) == \
        sorted(assign_windows(hop, at("08:07")))
    # CUMULATE step 2 min, max 10 min, offset 1 min: windows [08:01, 08:03), [08:01, 08:05) ... [08:01, 08:11)
    cumulate = WindowSpec("cumulate", 0, "ts", size=10 * MIN, slide=2 * MIN, offset=MIN)
    assert assign_windows(cumulate, at("08:07")) == [(at("08:01"), at(e)) for e in ("08:09", "08:11")]
    assert assign_windows(cumulate, at("08:00")) == [(at("07:51"), at(e)) for e in ("07:53", "07:55", "07:57",
                                                                                     "07:59", "08:01")][-1:]


def events_env() -> TableEnvironment:
    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    t_env.execute_sql("CREATE TABLE Bid (bidtime TIMESTAMP(3), price INT, item STRING, pt AS PROCTIME(), "
                      "WATERMARK FOR bidtime AS bidtime - INTERVAL '1' SECOND) WITH ('connector' = 'datagen')")
    return t_env


def test_sql_window_tvfs_take_an_offset_positional_or_named() -> None:
    t_env = events_env()
    for sql in ["SELECT * FROM TABLE(TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES, "
                "INTERVAL '1' MINUTES))",
                "SELECT * FROM TABLE(TUMBLE(DATA => TABLE Bid, TIMECOL => DESCRIPTOR(bidtime), SIZE => INTERVAL "
                "'10' MINUTES, OFFSET => INTERVAL '1' MINUTES))"]:
        node = t_env.sql_query(sql)._node
        tvf = next(n for n in _walk(node) if isinstance(n, p.WindowTVF))
        assert (tvf.window.kind, tvf.window.size, tvf.window.offset) == ("tumble", 10 * MIN, MIN)
        assert "offset=[60 s]" in tvf.describe()
    hop = t_env.sql_query("SELECT * FROM TABLE(HOP(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '5' MINUTES, "
                          "INTERVAL '10' MINUTES, INTERVAL '-1' MINUTES))")._node
    assert next(n for n in _walk(hop) if isinstance(n, p.WindowTVF)).window.offset == -MIN
    with pytest.raises(TableException, match="SESSION takes no OFFSET"):
        t_env.sql_query("SELECT * FROM TABLE(SESSION(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '5' MINUTES, "
                        "INTERVAL '1' MINUTES))")


def _walk(node: p.PlanNode):  # type: ignore[no-untyped-def]
    yield node
    for i in node.inputs:
        yield from _walk(i)


# -- interval joins ------------------------------------------------------------------------------

HOUR = 3_600_000


def orders_env() -> TableEnvironment:
    """Flink's interval join page: Orders(id, order_time) and Shipments(order_id, ship_time)."""
    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    for ddl in ["CREATE TABLE Orders (id INT, amount INT, order_time TIMESTAMP(3), opt AS PROCTIME(), "
                "WATERMARK FOR order_time AS order_time) WITH ('connector' = 'datagen')",
                "CREATE TABLE Shipments (order_id INT, ship_time TIMESTAMP(3), spt AS PROCTIME(), "
                "WATERMARK FOR ship_time AS ship_time) WITH ('connector' = 'datagen')"]:
        t_env.execute_sql(ddl)
    return t_env


def interval_node(t_env: TableEnvironment, sql: str) -> p.PlanNode:
    from millstream.table.interval_join import IntervalJoin
    node = optimize(t_env.sql_query(sql)._node)
    found = [n for n in _walk(node) if isinstance(n, IntervalJoin)]
    return found[0] if found else node


def test_flinks_documented_interval_join_is_planned_as_one() -> None:
    from millstream.table.interval_join import IntervalJoin
    t_env = orders_env()
    node = interval_node(t_env, "SELECT * FROM Orders o, Shipments s WHERE o.id = s.order_id AND o.order_time "
                                "BETWEEN s.ship_time - INTERVAL '4' HOUR AND s.ship_time")
    assert isinstance(node, IntervalJoin)
    b = node.bounds
    assert (b.lower, b.upper, b.event_time, node.join_type) == (-4 * HOUR, 0, True, "INNER")
    assert (node.left.names[node.left_keys[0]], node.right.names[node.right_keys[0]]) == ("id", "order_id")
    assert node.condition is None and not node.updating
    assert "IntervalJoin(joinType=[InnerJoin], windowBounds=[isRowTime=true, leftLowerBound=-14400000, " \
        "leftUpperBound=0" in node.describe()


@pytest.mark.parametrize("predicate, lower, upper", [
    # the valid interval join predicates Flink's page lists
    ("o.order_time = s.ship_time", 0, 0),
    ("o.order_time >= s.ship_time AND o.order_time < s.ship_time + INTERVAL '10' MINUTE", 0, 10 * MIN - 1),
    ("o.order_time BETWEEN s.ship_time - INTERVAL '10' SECOND AND s.ship_time + INTERVAL '5' SECOND", -10_000, 5000),
    # the right side's time on the left of the comparison, strict bounds
    ("s.ship_time > o.order_time - INTERVAL '1' HOUR AND s.ship_time < o.order_time", 1, HOUR - 1),
])
def test_interval_bounds_of_flinks_predicates(predicate: str, lower: int, upper: int) -> None:
    node = interval_node(orders_env(), f"SELECT * FROM Orders o JOIN Shipments s ON o.id = s.order_id AND {predicate}")
    assert (node.bounds.lower, node.bounds.upper) == (lower, upper)  # type: ignore[attr-defined]


def test_proctime_interval_joins_and_what_is_no_interval_join() -> None:
    from millstream.table.interval_join import IntervalJoin
    t_env = orders_env()
    node = interval_node(t_env, "SELECT o.id, s.order_id FROM Orders o LEFT JOIN Shipments s ON o.id = s.order_id "
                                "AND o.opt BETWEEN s.spt - INTERVAL '1' MINUTE AND s.spt + INTERVAL '1' MINUTE")
    assert isinstance(node, IntervalJoin) and not node.bounds.event_time and node.join_type == "LEFT"
    # a rowtime bounded by a proctime, or one bound only: a regular join
    for predicate in ["o.order_time BETWEEN s.spt - INTERVAL '1' MINUTE AND s.spt",
                      "o.order_time >= s.ship_time"]:
        node = interval_node(t_env, f"SELECT o.id FROM Orders o JOIN Shipments s ON o.id = s.order_id AND {predicate}")
        assert not any(isinstance(n, IntervalJoin) for n in _walk(node))
    # empty bounds are an interval join too, as in Flink (nothing pairs; outer rows are padded)
    node = interval_node(t_env, "SELECT o.id FROM Orders o LEFT JOIN Shipments s ON o.id = s.order_id AND "
                                "o.order_time BETWEEN s.ship_time + INTERVAL '3' SECOND AND s.ship_time + INTERVAL '1' SECOND")
    assert isinstance(node, IntervalJoin) and (node.bounds.lower, node.bounds.upper) == (3000, 1000)
    # a FULL join without time bounds is a regular one, whose inputs' time attributes become plain
    # timestamps (Flink materializes them: a regular join holds no watermark back)
    node = interval_node(t_env, "SELECT * FROM Orders o FULL JOIN Shipments s ON o.id = s.order_id")
    joins = [n for n in _walk(node) if isinstance(n, p.Join)]
    assert [j.kind for j in joins] == ["FULL"] and "joinType=[FullOuterJoin]" in joins[0].describe()
    assert all(t.time_attr is None for _, t in joins[0].columns)


def core(join_type: str, lower: int = -4, upper: int = 0):  # type: ignore[no-untyped-def]
    from millstream.table.interval_join import IntervalJoinCore
    return IntervalJoinCore(lower, upper, join_type, None, left_width=1, right_width=1)


def changes(rows) -> list[tuple[RowKind, tuple]]:  # type: ignore[no-untyped-def]
    return [(r.get_row_kind(), tuple(r)) for r in rows]


def test_an_inner_interval_join_pairs_rows_within_the_bounds_in_either_arrival_order() -> None:
    c = core("INNER")  # left time - right time in [-4, 0]: an order up to 4 before its shipment
    assert changes(c.process(("o1",), 10, True, operator_time=0)) == []
    assert changes(c.process(("s1",), 12, False, operator_time=0)) == [(I, ("o1", "s1"))]
    assert changes(c.process(("s2",), 15, False, operator_time=0)) == []  # 10 - 15 = -5: out of bounds
    assert changes(c.process(("o2",), 11, True, operator_time=0)) == [(I, ("o2", "s1")), (I, ("o2", "s2"))]
    # the watermark at 15 (no more rows at 15 or before): the left row at 10 could meet right rows
    # up to 14 only and leaves the state; the one at 11 could still meet one at 15... no: 15 is
    # passed too, but Flink keeps a row until the watermark is past its last partner time + 1
    assert c.expire(True, 15) == [] and list(c.caches[0]) == [11]
    assert c.expire(True, 16) == [] and c.caches[0] == {}
    # right rows: a right row at t meets left rows up to t (upper 0); gone from watermark t + 1
    assert c.expire(False, 13) == [] and list(c.caches[1]) == [15]


def test_outer_interval_joins_pad_a_row_when_its_interval_expires() -> None:
    c = core("LEFT")
    assert changes(c.process(("o1",), 10, True, operator_time=0)) == []
    assert c.expiry(10, True) == 15  # the last right time it can meet is 14 (10 - lower)
    assert changes(c.expire(True, 14)) == []
    assert changes(c.expire(True, 15)) == [(I, ("o1", None))]
    # a left row arriving after its interval passed: padded at once, not cached
    assert changes(c.process(("o0",), 5, True, operator_time=20)) == [(I, ("o0", None))] and c.empty
    # a joined row is not padded
    c.process(("o2",), 30, True, operator_time=20)
    assert changes(c.process(("s2",), 31, False, operator_time=20)) == [(I, ("o2", "s2"))]
    assert c.expire(True, 100) == []

    r = core("RIGHT")
    r.process(("s1",), 12, False, operator_time=0)
    assert r.expiry(12, False) == 13  # the last left time it can meet is 12
    assert changes(r.expire(False, 13)) == [(I, (None, "s1"))]

    f = core("FULL")
    f.process(("o1",), 10, True, operator_time=0)
    f.process(("s1",), 20, False, operator_time=0)
    assert changes(f.expire(True, 15) + f.expire(False, 21)) == [(I, ("o1", None)), (I, (None, "s1"))]


# -- Top-N over an updating input ----------------------------------------------------------------


def retract_sequence(with_rank: bool) -> list[list[tuple[RowKind, tuple]]]:
    from millstream.table.rank_functions import RetractableTopN
    top = RetractableTopN([(1, False)], n=2, with_rank=with_rank)  # ORDER BY column 1 DESC, rn <= 2
    steps = [(("a", 5), True), (("b", 3), True), (("c", 4), True), (("a", 5), False), (("a", 1), True),
             (("b", 3), False), (("c", 4), False)]
    return [changes(top.apply(row, acc)) for row, acc in steps]


def test_a_retractable_top_n_with_row_numbers_moves_every_shifted_rank() -> None:
    """Flink's RetractableTopNFunction with the rank number: -U/+U for each rank whose row changes,
    +I for a rank filled the first time, -D for a rank left empty."""
    assert retract_sequence(with_rank=True) == [
        [(I, ("a", 5, 1))],
        [(I, ("b", 3, 2))],
        [(UB, ("b", 3, 2)), (UA, ("c", 4, 2))],
        [(UB, ("a", 5, 1)), (UA, ("c", 4, 1)), (UB, ("c", 4, 2)), (UA, ("b", 3, 2))],  # a leaves: all move up
        [],  # rank 3 is outside the top 2
        [(UB, ("b", 3, 2)), (UA, ("a", 1, 2))],  # a row below the top 2 moves into it
        [(UB, ("c", 4, 1)), (UA, ("a", 1, 1)), (D, ("a", 1, 2))],  # rank 2 left empty
    ]


def test_a_retractable_top_n_without_row_numbers_deletes_and_inserts() -> None:
    assert retract_sequence(with_rank=False) == [
        [(I, ("a", 5))], [(I, ("b", 3))],
        [(D, ("b", 3)), (I, ("c", 4))],  # c pushes b out: -D first, as Flink's function emits
        [(D, ("a", 5)), (I, ("b", 3))],  # a leaves, b moves back into the top 2
        [], [(D, ("b", 3)), (I, ("a", 1))], [(D, ("c", 4))],
    ]


def test_top_n_over_a_group_by_is_planned_with_the_retract_strategy() -> None:
    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    t_env.create_temporary_view("ShopSales", t_env.from_elements([(1, "c", 3)], ["product_id", "category", "sales"]))
    node = optimize(t_env.sql_query(
        "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY category ORDER BY total DESC) AS row_num FROM "
        "(SELECT category, product_id, SUM(sales) AS total FROM ShopSales GROUP BY category, product_id)) "
        "WHERE row_num <= 2")._node)
    rank = next(n for n in _walk(node) if isinstance(n, p.Rank))
    assert rank.describe().startswith("Rank(strategy=[RetractStrategy], rankType=[ROW_NUMBER]")
    assert rank.input.updating and rank.names[-1] == "row_num"


# -- window joins --------------------------------------------------------------------------------

WINDOW_JOIN = ("SELECT L.num AS L_Num, L.id AS L_Id, R.num AS R_Num, R.id AS R_Id, COALESCE(L.window_start, "
               "R.window_start) AS window_start, COALESCE(L.window_end, R.window_end) AS window_end FROM "
               "(SELECT * FROM TABLE(TUMBLE(TABLE LeftTable, DESCRIPTOR(row_time), INTERVAL '5' MINUTES))) L {} "
               "(SELECT * FROM TABLE(TUMBLE(TABLE RightTable, DESCRIPTOR(row_time), {}))) R ON L.num = R.num "
               "AND L.window_start = R.window_start AND L.window_end = R.window_end")


def window_tables() -> TableEnvironment:
    """Flink's window join page: LeftTable and RightTable (row_time, num, id)."""
    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    for name in ("LeftTable", "RightTable"):
        t_env.execute_sql(f"CREATE TABLE {name} (row_time TIMESTAMP(3), num INT, id STRING, WATERMARK FOR row_time "
                          "AS row_time - INTERVAL '1' SECOND) WITH ('connector' = 'datagen')")
    return t_env


def test_flinks_window_join_is_planned_on_the_window_and_the_keys() -> None:
    from millstream.table.window_join import WindowJoin
    t_env = window_tables()
    table = t_env.sql_query(WINDOW_JOIN.format("FULL JOIN", "INTERVAL '5' MINUTES"))
    assert table.get_schema().get_field_names() == ["L_Num", "L_Id", "R_Num", "R_Id", "window_start", "window_end"]
    node = next(n for n in _walk(optimize(table._node)) if isinstance(n, WindowJoin))
    ln, rn = node.left.names, node.right.names
    # both sides' columns kept; the right side's equal names renamed as Calcite does (num0, ...)
    assert [ln[k] for k in node.left_keys] == ["num"] and [rn[k] for k in node.right_keys] == ["num0"]
    assert [ln[k] for k in node.left_window] == ["window_start", "window_end"]
    assert [rn[k] for k in node.right_window] == ["window_start0", "window_end0"]
    assert node.join_type == "FULL" and not node.updating
    assert node.describe().startswith("WindowJoin(leftWindow=[TUMBLE(time_col=[row_time], size=[300 s])], "
                                      "rightWindow=[TUMBLE(time_col=[row_time], size=[300 s])], "
                                      "joinType=[FullOuterJoin], where=[=(num, num0)]")


def test_what_is_no_window_join_says_why() -> None:
    t_env = window_tables()
    with pytest.raises(TableException, match="same windows on both sides"):
        t_env.sql_query(WINDOW_JOIN.format("JOIN", "INTERVAL '10' MINUTES"))
    with pytest.raises(TableException, match="both window_start and window_end"):
        t_env.sql_query(WINDOW_JOIN.format("JOIN", "INTERVAL '5' MINUTES").split(" AND L.window_end")[0])
    with pytest.raises(TableException, match="Column 'num' is ambiguous"):
        t_env.sql_query(WINDOW_JOIN.format("JOIN", "INTERVAL '5' MINUTES").replace("L.num AS", "num AS"))


def test_a_window_joins_rows_per_join_type() -> None:
    """One window and key of Flink's example: left L1 (num 1) and L3 (num 3), right R2 and R3;
    here all four share a key, so the condition (equal ids' numbers) decides."""
    from millstream.table.expression import Resolved
    from millstream.table.types import DataTypes
    from millstream.table.window_join import join_window
    cond = Resolved("call", DataTypes.BOOLEAN(), (Resolved("ref", DataTypes.INT(), value=0, text="a"),
                    Resolved("ref", DataTypes.INT(), value=2, text="b")), "equals", "=(a, b)")
    lefts, rights = [(1, "L1"), (3, "L3")], [(2, "R2"), (3, "R3")]

    def run(kind: str) -> list[tuple]:
        rows = join_window(lefts, rights, kind, cond, 2, 2)
        assert all(r.get_row_kind() is I for r in rows)  # append-only
        return [tuple(r) for r in rows]

    assert run("INNER") == [(3, "L3", 3, "R3")]
    assert run("LEFT") == [(1, "L1", None, None), (3, "L3", 3, "R3")]
    assert run("RIGHT") == [(3, "L3", 3, "R3"), (None, None, 2, "R2")]
    assert run("FULL") == [(1, "L1", None, None), (3, "L3", 3, "R3"), (None, None, 2, "R2")]
    assert run("SEMI") == [(3, "L3")]
    assert run("ANTI") == [(1, "L1")]


# -- Window Top-N --------------------------------------------------------------------------------

WINDOW_TOP_N = ("SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY price "
                "DESC) AS rownum FROM (SELECT window_start, window_end, supplier_id, SUM(price) AS price, COUNT(*) AS "
                "cnt FROM TABLE(TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES)) GROUP BY "
                "window_start, window_end, supplier_id)) WHERE rownum <= 3")


def supplier_bids() -> TableEnvironment:
    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    t_env.execute_sql("CREATE TABLE Bid (bidtime TIMESTAMP(3), price INT, item STRING, supplier_id STRING, "
                      "WATERMARK FOR bidtime AS bidtime - INTERVAL '1' SECOND) WITH ('connector' = 'datagen')")
    return t_env


def test_flinks_window_top_n_is_a_window_rank() -> None:
    from millstream.table.window_rank import WindowRank
    t_env = supplier_bids()
    for sql in [WINDOW_TOP_N,  # over a window aggregation, and straight over the window TVF
                "SELECT * FROM (SELECT bidtime, price, item, supplier_id, window_start, window_end, ROW_NUMBER() "
                "OVER (PARTITION BY window_start, window_end ORDER BY price DESC) AS rownum FROM TABLE(TUMBLE(TABLE "
                "Bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))) WHERE rownum <= 3"]:
        table = t_env.sql_query(sql)
        node = optimize(table._node)
        rank = next(n for n in _walk(node) if isinstance(n, WindowRank))
        assert rank.n == 3 and rank.with_rank and not rank.updating
        assert rank.input.names[rank.end] == "window_end"
        assert rank.describe().startswith("WindowRank(window=[TUMBLE(time_col=[bidtime], size=[600 s])], "
                                          "rankType=[ROW_NUMBER], rankRange=[rankStart=1, rankEnd=3], "
                                          "partitionBy=[window_start, window_end], orderBy=[price DESC]")
    # partitioned by something else than the window: a regular Top-N
    node = optimize(t_env.sql_query(WINDOW_TOP_N.replace("PARTITION BY window_start, window_end",
                                                         "PARTITION BY supplier_id"))._node)
    assert any(isinstance(n, p.Rank) for n in _walk(node)) and not any(isinstance(n, WindowRank) for n in _walk(node))


def test_a_windows_top_rows_leave_once_as_inserts() -> None:
    from millstream.table.window_rank import top_rows
    rows = [("supplier1", 6), ("supplier2", 4), ("supplier3", 2), ("supplier4", 5)]
    assert changes(top_rows(rows, [(1, False)], 3, with_rank=True)) == [
        (I, ("supplier1", 6, 1)), (I, ("supplier4", 5, 2)), (I, ("supplier2", 4, 3))]
    assert changes(top_rows(rows, [(1, True)], 2, with_rank=False)) == [(I, ("supplier3", 2)), (I, ("supplier2", 4))]


SEMI = ("SELECT * FROM (SELECT * FROM TABLE(TUMBLE(TABLE LeftTable, DESCRIPTOR(row_time), INTERVAL '5' MINUTES))) L "
        "WHERE L.num {} (SELECT num FROM (SELECT * FROM TABLE(TUMBLE(TABLE RightTable, DESCRIPTOR(row_time), "
        "INTERVAL '5' MINUTES))) R WHERE L.window_start = R.window_start AND L.window_end = R.window_end)")
EXISTS = ("SELECT * FROM (SELECT * FROM TABLE(TUMBLE(TABLE LeftTable, DESCRIPTOR(row_time), INTERVAL '5' MINUTES))) L "
          "WHERE {} EXISTS (SELECT * FROM (SELECT * FROM TABLE(TUMBLE(TABLE RightTable, DESCRIPTOR(row_time), "
          "INTERVAL '5' MINUTES))) R WHERE L.num = R.num AND L.window_start = R.window_start AND "
          "L.window_end = R.window_end)")


@pytest.mark.parametrize("sql, kind", [(SEMI.format("IN"), "SEMI"), (SEMI.format("NOT IN"), "ANTI"),
                                       (EXISTS.format(""), "SEMI"), (EXISTS.format("NOT"), "ANTI")])
def test_in_and_exists_subqueries_of_windows_are_semi_and_anti_window_joins(sql: str, kind: str) -> None:
    """Flink's window join page: IN / EXISTS (and NOT) over the other side's windows."""
    from millstream.table.window_join import WindowJoin
    table = window_tables().sql_query(sql)
    assert table.get_schema().get_field_names() == ["row_time", "num", "id", "window_start", "window_end",
                                                    "window_time"]  # the left side's columns only
    node = next(n for n in _walk(optimize(table._node)) if isinstance(n, WindowJoin))
    assert node.join_type == kind
    assert [node.left.names[k] for k in node.left_keys] == ["num"]
    assert [node.right.names[k] for k in node.right_keys] == ["num0"]


def test_an_in_subquery_that_is_no_window_join_says_so() -> None:
    t_env = window_tables()
    with pytest.raises(TableException, match="SEMI join .* is supported as a window join"):
        t_env.sql_query("SELECT * FROM LeftTable L WHERE L.num IN (SELECT num FROM RightTable R)")


def test_an_interval_join_of_an_updating_table_fails_before_submission() -> None:
    t_env = orders_env()
    with pytest.raises(TableException, match="interval join needs insert-only inputs"):
        t_env.sql_query("SELECT o.id FROM (SELECT id, order_time, COUNT(*) AS n FROM Orders GROUP BY id, order_time) o "
                        "JOIN Shipments s ON o.id = s.order_id AND o.order_time BETWEEN s.ship_time - INTERVAL '4' "
                        "HOUR AND s.ship_time").execute()


class FakeTimers:
    def __init__(self, watermark: int) -> None:
        self.watermark, self.event_timers = watermark, []  # type: ignore[var-annotated]

    def current_watermark(self) -> int:
        return self.watermark

    def register_event_time_timer(self, t: int) -> None:
        self.event_timers.append(t)


class FakeCtx:
    def __init__(self, watermark: int) -> None:
        self.timers = FakeTimers(watermark)

    def timer_service(self) -> FakeTimers:
        return self.timers


class FakeState:
    def __init__(self) -> None:
        self.v = None

    def value(self):  # type: ignore[no-untyped-def]
        return self.v

    def update(self, v) -> None:  # type: ignore[no-untyped-def]
        self.v = v

    def clear(self) -> None:
        self.v = None


def test_the_window_join_function_joins_at_the_window_end_and_drops_late_rows() -> None:
    from millstream.common.row import Row
    from millstream.table.expression import from_epoch_millis
    from millstream.table.window_join import WindowJoinFunction
    f = WindowJoinFunction("LEFT", None, left_end=1, right_end=1, left_width=2, right_width=2)
    f.state = FakeState()
    end = from_epoch_millis(5 * MIN)
    ctx = FakeCtx(watermark=MIN)
    assert list(f.process_element1(Row("L1", end), ctx)) == []  # nothing before the window ends
    assert ctx.timers.event_timers == [5 * MIN - 1]
    assert list(f.process_element2(Row("R1", end), ctx)) == []
    assert changes(f.on_timer(5 * MIN - 1, ctx)) == [(I, ("L1", end, "R1", end))] and f.state.v is None
    late = FakeCtx(watermark=5 * MIN - 1)  # the window was joined: a row of it is dropped
    assert list(f.process_element1(Row("L2", end), late)) == [] and f.state.v is None


def test_the_table_api_makes_interval_joins_too() -> None:
    """PyFlink's Table API: ``join`` / ``right_outer_join`` / ``full_outer_join`` with a predicate
    bounding the time attributes (``lit(4).hours``)."""
    from millstream.table.expressions import col, lit
    from millstream.table.interval_join import IntervalJoin
    t_env = orders_env()
    orders, ships = t_env.from_path("Orders"), t_env.from_path("Shipments")
    bounded = (col("id") == col("order_id")) & col("order_time").between(col("ship_time") - lit(4).hours,
                                                                          col("ship_time"))
    for joined, kind in ((orders.join(ships, bounded), "INNER"), (orders.right_outer_join(ships, bounded), "RIGHT"),
                         (orders.full_outer_join(ships, bounded), "FULL")):
        node = joined._node
        assert isinstance(node, IntervalJoin) and node.join_type == kind
        assert (node.bounds.lower, node.bounds.upper) == (-4 * HOUR, 0)
        nullable = dict((n, t.nullable) for n, t in node.columns)  # opt, spt: PROCTIME() columns, NOT NULL
        assert (nullable["opt"], nullable["spt"]) == (kind in ("RIGHT", "FULL"), kind == "FULL")
    regular = orders.right_outer_join(ships, col("id") == col("order_id"))._node
    assert isinstance(regular, p.Join) and regular.kind == "RIGHT" and regular.updating


def test_the_window_rank_function_ranks_at_the_window_end_and_drops_late_rows() -> None:
    from millstream.common.row import Row
    from millstream.table.expression import from_epoch_millis
    from millstream.table.window_rank import WindowRankFunction
    f = WindowRankFunction([(0, False)], n=1, with_rank=False, end=1, event_time=True)
    f.state = FakeState()
    end = from_epoch_millis(10 * MIN)
    ctx = FakeCtx(watermark=MIN)
    assert list(f.process_element(Row(3, end), ctx)) == [] and list(f.process_element(Row(7, end), ctx)) == []
    assert ctx.timers.event_timers == [10 * MIN - 1]  # one timer per window
    assert changes(f.on_timer(10 * MIN - 1, ctx)) == [(I, (7, end))] and f.state.v is None
    assert list(f.process_element(Row(9, end), FakeCtx(watermark=10 * MIN - 1))) == [] and f.state.v is None


def test_window_deduplication_is_a_window_top_1() -> None:
    """Flink's window deduplication page: ROW_NUMBER() OVER (PARTITION BY window_start, window_end
    ORDER BY bidtime DESC) = 1 keeps each window's last row, emitted when the window ends."""
    from millstream.table.window_rank import WindowRank
    node = optimize(supplier_bids().sql_query(
        "SELECT * FROM (SELECT bidtime, price, item, supplier_id, window_start, window_end, ROW_NUMBER() OVER "
        "(PARTITION BY window_start, window_end ORDER BY bidtime DESC) AS rownum FROM TABLE(TUMBLE(TABLE Bid, "
        "DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))) WHERE rownum <= 1")._node)
    rank = next(n for n in _walk(node) if isinstance(n, WindowRank))
    assert rank.n == 1 and rank.order == ((0, False),) and not any(isinstance(n, p.Deduplicate) for n in _walk(node))


def by_repr(rows):  # type: ignore[no-untyped-def]
    return sorted(rows, key=repr)


def flink_interval_join(join_type: str, lower: int, upper: int, condition, lefts, rights):  # type: ignore[no-untyped-def]
    """Runs the rows of Flink's IntervalJoinITCase through one IntervalJoinCore per key: all left rows,
    then all right rows (the right input's watermark still at its start), then the final watermark."""
    from millstream.table.interval_join import IntervalJoinCore
    cores: dict = {}
    out = []
    for rows, left in ((lefts, True), (rights, False)):
        for key, rid, t in rows:
            c = cores.setdefault(key, IntervalJoinCore(lower, upper, join_type, condition, 3, 3))
            out += c.process((key, rid, t), t, left, operator_time=-2**63)
    for c in cores.values():
        out += c.expire(True, 2**63 - 1) + c.expire(False, 2**63 - 1)
    assert all(r.get_row_kind() is I for r in out)
    return sorted((((r[3], r[4], r[1]) if join_type == "RIGHT" else (r[0], r[4], r[1])) for r in out), key=repr)


def test_flinks_rowtime_outer_interval_join_cases() -> None:
    """Flink's IntervalJoinITCase: testRowTimeLeftOuterJoin, testRowTimeRightOuterJoin and the
    negative interval size case, their rows and expected (key, right id, left id) results."""
    from millstream.table.expression import Resolved
    from millstream.table.types import DataTypes

    def id_is_not(index: int, value: str) -> Resolved:
        return Resolved("call", DataTypes.BOOLEAN(), (Resolved("ref", DataTypes.STRING(), value=index, text="id"),
                        Resolved("lit", DataTypes.STRING(), value=value, text=repr(value))), "not_equals", "<>")

    lefts = [("A", "L-1", 1000), ("A", "L-2", 2000), ("B", "L-4", 4000), ("B", "L-5", 5000), ("A", "L-6", 6000),
             ("C", "L-7", 7000), ("A", "L-10", 10000), ("A", "L-12", 12000), ("A", "L-20", 20000)]
    rights = [("A", "R-6", 6000), ("B", "R-7", 7000), ("D", "R-8", 8000), ("A", "R-11", 11000)]
    # t1.rowtime BETWEEN t2.rowtime - INTERVAL '5' SECOND AND t2.rowtime + INTERVAL '6' SECOND AND t1.id <> 'L-5'
    assert flink_interval_join("LEFT", -5000, 6000, id_is_not(1, "L-5"), lefts, rights) == by_repr([
        ("A", "R-6", "L-1"), ("A", "R-6", "L-2"), ("A", "R-6", "L-6"), ("A", "R-6", "L-10"), ("A", "R-6", "L-12"),
        ("B", "R-7", "L-4"), ("A", "R-11", "L-6"), ("A", "R-11", "L-10"), ("A", "R-11", "L-12"), ("B", None, "L-5"),
        ("C", None, "L-7"), ("A", None, "L-20")])

    lefts = [("A", "L-1", 1000), ("A", "L-2", 2000), ("B", "L-4", 4000), ("A", "L-6", 6000), ("C", "L-7", 7000),
             ("A", "L-10", 10000), ("A", "L-12", 12000)]
    rights = [("A", "R-5", 5000), ("A", "R-6", 6000), ("B", "R-7", 7000), ("D", "R-8", 8000), ("A", "R-20", 20000)]
    # the same bounds, AND t2.id <> 'R-5'; the result as (t2.key, t2.id, t1.id)
    assert flink_interval_join("RIGHT", -5000, 6000, id_is_not(4, "R-5"), lefts, rights) == by_repr([
        ("A", "R-5", None), ("A", "R-6", "L-1"), ("A", "R-6", "L-2"), ("A", "R-6", "L-6"), ("A", "R-6", "L-10"),
        ("A", "R-6", "L-12"), ("A", "R-20", None), ("B", "R-7", "L-4"), ("D", "R-8", None)])

    # BETWEEN t2.rowtime + INTERVAL '3' SECOND AND t2.rowtime + INTERVAL '1' SECOND: an empty interval,
    # every left row padded (Flink's testRowTimeLeftOuterJoinNegativeIntervalSize)
    lefts = [("A", "L-1", 1000), ("B", "L-4", 4000), ("C", "L-7", 7000)]
    rights = [("A", "R-6", 6000), ("B", "R-7", 7000), ("D", "R-8", 8000)]
    assert [r[1:] for r in flink_interval_join("LEFT", 3000, 1000, None, lefts, rights)] == \
        [(None, "L-1"), (None, "L-4"), (None, "L-7")]


def test_flinks_retractable_top_n_test_case() -> None:
    """Flink's RetractableTopNFunctionTest (testProcessRetractMessageWithGenerateUpdateBefore):
    rows (category, id, price) ranked by price ascending, top 2, with the rank number."""
    from millstream.table.rank_functions import RetractableTopN
    tops: dict = {}
    out: list = []
    for row, acc in [(("book", 1, 12), True), (("book", 2, 19), True), (("book", 4, 11), True),
                     (("book", 1, 12), False), (("book", 5, 11), True), (("fruit", 4, 33), True),
                     (("fruit", 3, 44), True), (("fruit", 5, 22), True)]:
        top = tops.setdefault(row[0], RetractableTopN([(2, True)], n=2, with_rank=True))
        out += changes(top.apply(row, acc))
    assert out == [
        (I, ("book", 1, 12, 1)), (I, ("book", 2, 19, 2)),
        (UB, ("book", 1, 12, 1)), (UA, ("book", 4, 11, 1)), (UB, ("book", 2, 19, 2)), (UA, ("book", 1, 12, 2)),
        (UB, ("book", 1, 12, 2)), (UA, ("book", 2, 19, 2)),  # the retraction of (book, 1, 12)
        (UB, ("book", 2, 19, 2)), (UA, ("book", 5, 11, 2)),  # 11 ties with (book, 4, 11): it ranks after it
        (I, ("fruit", 4, 33, 1)), (I, ("fruit", 3, 44, 2)),
        (UB, ("fruit", 4, 33, 1)), (UA, ("fruit", 5, 22, 1)), (UB, ("fruit", 3, 44, 2)), (UA, ("fruit", 4, 33, 2)),
    ]


# -- time attributes after joins -------------------------------------------------------------------

JOINED = ("SELECT o.id, o.order_time, s.ship_time FROM Orders o JOIN Shipments s ON o.id = s.order_id AND "
          "o.order_time BETWEEN s.ship_time - INTERVAL '4' HOUR AND s.ship_time")
TUMBLED = ("SELECT window_start, window_end, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE joined, DESCRIPTOR({}), "
           "INTERVAL '1' HOUR)) GROUP BY window_start, window_end")


def test_an_interval_join_keeps_both_rowtimes_and_holds_its_watermark_back_by_its_bounds() -> None:
    from millstream.table.interval_join import Bounds, IntervalJoin, output_delay
    t_env = orders_env()
    node = interval_node(t_env, JOINED)
    assert isinstance(node, IntervalJoin)
    times = {n: t.time_attr for n, t in node.columns}
    assert (times["order_time"], times["ship_time"], times["opt"], times["spt"]) == ("ROWTIME", "ROWTIME", "PROCTIME",
                                                                                    "PROCTIME")
    # Flink's hold-back is max(-lower, upper): here the order may be 4 h before its shipment; one ms
    # more because Millstream keeps a row one ms past its reach (IntervalJoinCore.expiry)
    assert output_delay(node.bounds) == 4 * HOUR + 1
    assert output_delay(Bounds(0, 0, -10_000, 5_000, True)) == 10_001
    assert output_delay(Bounds(0, 0, 1_000, 3_000, True)) == 3_001
    # the job graph: the join's operator is told the delay; the window restamps from its rowtime
    t_env.create_temporary_view("joined", t_env.sql_query(JOINED))
    t_env.to_changelog_stream(t_env.sql_query(TUMBLED.format("order_time")))
    import json
    contents = [n["contents"] for n in json.loads(t_env._env.get_execution_plan())["nodes"]]
    assert "Restamp(rowtime=[order_time])" in contents, contents
    assert any(c.startswith("WindowAggregate(groupBy=[], window=[TUMBLE(time_col=[order_time], size=[3600 s])]")
               for c in contents), contents


def test_a_window_over_a_regular_joins_time_fails_with_flinks_message() -> None:
    t_env = orders_env()
    t_env.create_temporary_view("joined", t_env.sql_query(
        "SELECT o.id, o.order_time, s.ship_time FROM Orders o JOIN Shipments s ON o.id = s.order_id"))
    with pytest.raises(TableException, match=r"The window function requires the timecol is a time attribute type, "
                                             r"but is TIMESTAMP\(3\)\."):
        t_env.sql_query(TUMBLED.format("order_time"))
    # a regular LEFT join's too; the Table API group window says it needs a time attribute
    left = t_env.sql_query("SELECT o.id, o.order_time FROM Orders o LEFT JOIN Shipments s ON o.id = s.order_id")
    t_env.create_temporary_view("left_joined", left)
    with pytest.raises(TableException, match="requires the timecol is a time attribute type"):
        t_env.sql_query(TUMBLED.replace("joined", "left_joined").format("order_time"))
    from millstream.table.expressions import col, lit
    from millstream.table.window import Tumble
    with pytest.raises(TableException, match="time attribute"):
        left.window(Tumble.over(lit(1).hours).on(col("order_time")).alias("w")).group_by(col("w")) \
            .select(col("id").count)
