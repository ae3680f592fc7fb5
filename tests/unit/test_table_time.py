"""Event time in the Table API, its pure parts, from Flink's documentation: window assignment of
TUMBLE/HOP/CUMULATE, the window-aggregate planner rule, watermark declarations, OVER frames,
Top-N's and deduplication's changelogs, Java's printing of FLOAT and timestamps, and the errors a
wrong program gets before it runs."""
from __future__ import annotations

import datetime

import pytest

from millstream.common.row import RowKind
from millstream.common.time import Instant
from millstream.table import DataTypes, EnvironmentSettings, Schema, TableEnvironment, ValidationException
from millstream.table import plan as p
from millstream.table.expression import TableException, cast_value
from millstream.table.expressions import col, lit
from millstream.table.planner import optimize
from millstream.table.runtime_functions import AggCall, java_float, java_text
from millstream.table.time_functions import TopN, assign_windows, frame_values
from millstream.table.window import Over, Tumble, WindowSpec

I, UB, UA, D = RowKind.INSERT, RowKind.UPDATE_BEFORE, RowKind.UPDATE_AFTER, RowKind.DELETE


def test_instant_is_pyflinks() -> None:
    i = Instant.of_epoch_milli(1500)
    assert (i.seconds, i.nanos, i.to_epoch_milli(), repr(i)) == (1, 500_000_000, 1500, "Instant<1, 500000000>")
    assert cast_value(i, DataTypes.TIMESTAMP(3)) == datetime.datetime(1970, 1, 1, 0, 0, 1, 500000)


@pytest.mark.parametrize("spec, t, windows", [
    # TUMBLE 10 min: the one aligned window containing t
    (WindowSpec("tumble", 0, "ts", size=600_000), 480_000, [(0, 600_000)]),
    # HOP size 10 min, slide 5 min: every window starting at a multiple of 5 min that contains t
    (WindowSpec("hop", 0, "ts", size=600_000, slide=300_000), 420_000, [(300_000, 900_000), (0, 600_000)]),
    # CUMULATE step 2 min, max 10 min: windows from the 10-min start ending every 2 min after t
    (WindowSpec("cumulate", 0, "ts", size=600_000, slide=120_000), 300_000,
     [(0, 360_000), (0, 480_000), (0, 600_000)]),
    (WindowSpec("cumulate", 0, "ts", size=600_000, slide=120_000), 360_000, [(0, 480_000), (0, 600_000)]),
])
def test_window_tvfs_assign_flinks_windows(spec: WindowSpec, t: int, windows: list[tuple[int, int]]) -> None:
    assert assign_windows(spec, t) == windows


def t_env_with_events() -> TableEnvironment:
    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    t_env.execute_sql("CREATE TABLE bids (bidtime TIMESTAMP(3), price INT, pt AS PROCTIME(), WATERMARK FOR bidtime AS "
                      "bidtime - INTERVAL '5' SECOND) WITH ('connector' = 'datagen')")
    return t_env


def test_a_watermark_declaration_makes_the_rowtime_attribute() -> None:
    t_env = t_env_with_events()
    table = t_env.from_path("bids")
    assert [str(t) for t in table.get_schema().get_field_data_types()] == [
        "TIMESTAMP(3) *ROWTIME*", "INT", "TIMESTAMP_LTZ(3) NOT NULL *PROCTIME*"]
    assert isinstance(table._node, p.WatermarkAssigner) and table._node.delay == 5000
    with pytest.raises(TableException, match="Unsupported watermark expression"):
        t_env.execute_sql("CREATE TABLE w (ts TIMESTAMP(3), WATERMARK FOR ts AS ts + INTERVAL '1' SECOND) "
                          "WITH ('connector' = 'datagen')")
        t_env.from_path("w")
    with pytest.raises(ValidationException, match="TIMESTAMP"):
        t_env.execute_sql("CREATE TABLE v (n INT, WATERMARK FOR n AS n) WITH ('connector' = 'datagen')")
        t_env.from_path("v")


def test_group_by_window_start_and_end_of_a_window_tvf_is_a_window_aggregate() -> None:
    t_env = t_env_with_events()
    tvf = ("SELECT window_start, window_end, SUM(price) AS total FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(bidtime), "
           "INTERVAL '10' MINUTES)) GROUP BY window_start, window_end")
    node = optimize(t_env.sql_query(tvf)._node)
    assert isinstance(node, p.Calc) and isinstance(node.input, p.WindowAggregate)
    assert node.input.window == WindowSpec("tumble", 0, "bidtime", size=600_000)
    assert node.names == ["window_start", "window_end", "total"]
    # without window_end it stays an (updating) group aggregation of the TVF's rows
    other = optimize(t_env.sql_query(tvf.replace("GROUP BY window_start, window_end", "GROUP BY window_start")
                                     .replace("window_end, ", ""))._node)
    assert not any(isinstance(n, p.WindowAggregate) for n in _nodes(other))


def _nodes(node: p.PlanNode) -> list[p.PlanNode]:
    return [node] + [n for i in node.inputs for n in _nodes(i)]


def test_windows_need_a_time_attribute() -> None:
    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    table = t_env.from_elements([(1, "a")], ["n", "s"])
    with pytest.raises(ValidationException, match="time attribute"):
        table.window(Tumble.over(lit(5).seconds).on(col("n")).alias("w")).group_by(col("w")).select(col("s").count)
    with pytest.raises(ValidationException, match="time attribute"):
        table.over_window(Over.partition_by(col("s")).order_by(col("n")).alias("w")).select(col("n").sum.over(col("w")))
    with pytest.raises(TableException, match="The window function requires the timecol is a time attribute type, "
                                             "but is BIGINT"):
        t_env.create_temporary_view("t", table)
        t_env.execute_sql("SELECT * FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(n), INTERVAL '1' SECOND))")


def test_over_frames() -> None:
    calls = (AggCall("sum", 0), AggCall("count", 0), AggCall("max", 0))
    assert frame_values(calls, [(1,), (5,), (2,)]) == (8, 3, 5)
    assert frame_values(calls, []) == (None, 0, None)


def test_top_n_with_rank_numbers_updates_every_shifted_rank() -> None:
    """Flink's AppendOnlyTopNFunction: a row entering at rank r updates ranks r..N (-U old, +U new)
    and inserts a rank that was empty."""
    top = TopN([(0, False)], 2, with_rank=True)
    assert [(r.get_row_kind(), tuple(r)) for r in top.add((10,))] == [(I, (10, 1))]
    assert [(r.get_row_kind(), tuple(r)) for r in top.add((30,))] == [(UB, (10, 1)), (UA, (30, 1)), (I, (10, 2))]
    assert [(r.get_row_kind(), tuple(r)) for r in top.add((20,))] == [(UB, (10, 2)), (UA, (20, 2))]
    assert top.add((5,)) == []
    # ties keep arrival order: an equal row ranks after the one already there
    assert [(r.get_row_kind(), tuple(r)) for r in top.add((20,))] == []


def test_top_n_without_rank_numbers_inserts_and_deletes() -> None:
    top = TopN([(0, True)], 2, with_rank=False)
    out = [top.add((v,)) for v in (3, 1, 2, 0)]
    assert [[(r.get_row_kind(), tuple(r)) for r in o] for o in out] == [
        [(I, (3,))], [(I, (1,))], [(I, (2,)), (D, (3,))], [(I, (0,)), (D, (2,))]]


def test_java_prints_floats_and_timestamps() -> None:
    assert [java_float(v, True) for v in (130.1, 1.0, 1e7, 1.5e-5)] == ["130.1", "1.0", "1.0E7", "1.5E-5"]
    assert java_float(0.1 + 0.2, False) == "0.30000000000000004"
    ts = datetime.datetime(1970, 1, 1, 0, 0, 5)
    assert java_text(ts, DataTypes.TIMESTAMP_LTZ(3)) == "1970-01-01T00:00:05Z"  # Instant.toString
    assert java_text(datetime.datetime(1970, 1, 1), DataTypes.TIMESTAMP(3)) == "1970-01-01T00:00"  # LocalDateTime


def test_a_schema_with_computed_columns_and_a_watermark_prints_them() -> None:
    schema = Schema.new_builder().column_by_expression("ts", "CAST(f0 AS TIMESTAMP(3))").column("f1", "STRING") \
        .watermark("ts", "ts - INTERVAL '3' SECOND").build()
    assert str(schema) == ("(\n  `ts` AS CAST(f0 AS TIMESTAMP(3)),\n  `f1` STRING,\n"
                           "  WATERMARK FOR `ts` AS ts - INTERVAL '3' SECOND\n)")
