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
