"""SQL on the runtime (a MiniCluster with real Spark): a streaming GROUP BY's changelog, a batch
aggregate with HAVING and ORDER BY, a filesystem CSV table, datagen into print and blackhole tables
through INSERT INTO and a statement set. Expected results are computed here from SQL's rules."""
from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from millstream.common import RowKind
from millstream.table import EnvironmentSettings, TableEnvironment

from .harness import ClusterSpec

pytestmark = pytest.mark.timeout(600)
CLUSTER = ClusterSpec(jobmanager_env=True, tasks_per_slot=8)

I, UB, UA = RowKind.INSERT, RowKind.UPDATE_BEFORE, RowKind.UPDATE_AFTER
ORDERS = [(1, "apple", 3), (2, "pear", 1), (3, "apple", 4), (4, "fig", 10), (5, "pear", 2), (6, "apple", 1)]


def env(streaming: bool, parallelism: int = 2) -> TableEnvironment:
    settings = EnvironmentSettings.in_streaming_mode() if streaming else EnvironmentSettings.in_batch_mode()
    t_env = TableEnvironment.create(settings)
    t_env.get_config().set("parallelism.default", str(parallelism))
    t_env.create_temporary_view("orders", t_env.from_elements(ORDERS, ["id", "item", "qty"]))
    return t_env


def test_a_streaming_sql_group_by_updates_each_item(cluster: Any) -> None:
    t_env = env(streaming=True)
    result = t_env.execute_sql("SELECT item, SUM(qty) AS total, COUNT(*) AS n FROM orders WHERE qty > 1 GROUP BY item")
    per_item: dict[str, list[tuple[RowKind, tuple[Any, ...]]]] = defaultdict(list)
    for r in result.collect():
        per_item[r[0]].append((r.get_row_kind(), tuple(r)))
    expected: dict[str, list[tuple[RowKind, tuple[Any, ...]]]] = defaultdict(list)
    totals: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for _, item, qty in ORDERS:
        if qty <= 1:
            continue
        before = (item, totals[item], counts[item])
        totals[item] += qty
        counts[item] += 1
        after = (item, totals[item], counts[item])
        expected[item] += [(I, after)] if counts[item] == 1 else [(UB, before), (UA, after)]
    assert dict(per_item) == dict(expected)


def test_a_batch_sql_aggregate_with_having_and_order_by(cluster: Any) -> None:
    t_env = env(streaming=False)
    rows = list(t_env.execute_sql(
        "SELECT item, SUM(qty) AS total, AVG(qty) AS mean FROM orders GROUP BY item HAVING COUNT(*) > 1 "
        "ORDER BY total DESC").collect())
    by_item: dict[str, list[int]] = defaultdict(list)
    for _, item, qty in ORDERS:
        by_item[item].append(qty)
    expected = sorted(((i, sum(q), int(sum(q) / len(q))) for i, q in by_item.items() if len(q) > 1), key=lambda r: -r[1])
    assert [(r.get_row_kind(), tuple(r)) for r in rows] == [(I, e) for e in expected]


def test_a_filesystem_csv_table_joins_and_filters(cluster: Any, tmp_path: Path) -> None:
    t_env = env(streaming=False, parallelism=1)
    (tmp_path / "prices.csv").write_text("apple,2\npear,5\nkiwi,9\n")
    t_env.execute_sql(f"CREATE TABLE prices (name STRING, price INT) WITH ('connector' = 'filesystem', "
                      f"'path' = '{tmp_path / 'prices.csv'}', 'format' = 'csv')")
    rows = t_env.execute_sql("SELECT id, item, qty * price AS cost FROM orders JOIN prices ON item = name "
                             "WHERE qty * price > 4 ORDER BY id").collect()
    price = {"apple": 2, "pear": 5, "kiwi": 9}
    expected = [(i, item, q * price[item]) for i, item, q in ORDERS if item in price and q * price[item] > 4]
    assert [tuple(r) for r in rows] == expected


def test_insert_into_print_and_blackhole_tables_from_datagen(cluster: Any, capfd: pytest.CaptureFixture[str]) -> None:
    t_env = env(streaming=True, parallelism=1)
    t_env.execute_sql("CREATE TABLE gen (k INT, v BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '20', "
                      "'rows-per-second' = '1000', 'fields.k.kind' = 'sequence', 'fields.k.start' = '1', "
                      "'fields.k.end' = '20', 'fields.v.min' = '5', 'fields.v.max' = '5')")
    t_env.execute_sql("CREATE TABLE out (k INT, doubled BIGINT) WITH ('connector' = 'print')")
    t_env.execute_sql("CREATE TABLE nowhere (k INT) WITH ('connector' = 'blackhole')")
    statements = t_env.create_statement_set()
    statements.add_insert_sql("INSERT INTO out SELECT k, v * 2 FROM gen WHERE MOD(k, 5) = 0")
    statements.add_insert_sql("INSERT INTO nowhere SELECT k FROM gen")
    statements.execute().wait()
    printed = [line for line in capfd.readouterr().out.splitlines() if line.startswith("+I[")]
    assert printed == [f"+I[{k}, 10]" for k in range(1, 21) if k % 5 == 0]


def test_a_batch_left_join_keeps_unmatched_rows_with_nulls_and_retracts_nothing(cluster: Any) -> None:
    t_env = env(streaming=False)
    t_env.create_temporary_view("colors", t_env.from_elements([("apple", "red"), ("fig", "purple"), ("fig", "green")],
                                                              ["fruit", "color"]))
    rows = list(t_env.execute_sql("SELECT id, item, color FROM orders LEFT JOIN colors ON item = fruit").collect())
    colors = {"apple": ["red"], "fig": ["purple", "green"]}
    expected = Counter((i, item, c) for i, item, _ in ORDERS for c in colors.get(item, [None]))
    assert all(r.get_row_kind() is I for r in rows)
    assert Counter(tuple(r) for r in rows) == expected


def test_a_batch_full_join_emits_the_final_rows_once_and_right_join_keeps_unmatched_right_rows(cluster: Any) -> None:
    t_env = env(streaming=False)
    t_env.create_temporary_view("colors", t_env.from_elements([("apple", "red"), ("fig", "purple"), ("kiwi", "green")],
                                                              ["fruit", "color"]))
    colors = {"apple": ["red"], "fig": ["purple"], "kiwi": ["green"]}
    full = list(t_env.execute_sql("SELECT id, item, color FROM orders FULL OUTER JOIN colors ON item = fruit").collect())
    expected = Counter((i, item, c) for i, item, _ in ORDERS for c in colors.get(item, [None]))
    expected[(None, None, "green")] += 1  # kiwi: no order
    assert all(r.get_row_kind() is I for r in full)  # batch mode: final rows, no padded row retracted
    assert Counter(tuple(r) for r in full) == expected
    right = list(t_env.execute_sql("SELECT id, fruit FROM orders RIGHT JOIN colors ON item = fruit").collect())
    assert Counter(tuple(r) for r in right) == Counter(
        [(i, item) for i, item, _ in ORDERS if item in colors] + [(None, "kiwi")])


def _calc_rows(vectorized: bool, sql: str, streaming: bool, setup: Any) -> list[tuple[Any, ...]]:
    t_env = env(streaming=streaming)
    t_env.get_config().set("table.exec.millstream.vectorized-calc.enabled", str(vectorized).lower())
    setup(t_env)
    return sorted(((r.get_row_kind().value, *r) for r in t_env.execute_sql(sql).collect()), key=repr)


def test_the_vectorized_calc_gives_the_row_paths_rows_and_sqls_answer(cluster: Any, tmp_path: Path) -> None:
    """A projection and filter over a CSV table (nulls in it) with the vectorized Calc on and off,
    and a Calc over a streaming GROUP BY's changelog (its row kinds pass through)."""
    lines, expected = [], []
    for i in range(400):
        price = None if i % 9 == 0 else (i * 37 % 1000) / 10
        qty = None if i % 13 == 0 else i % 50 + 1
        name = f"item{i % 23}"
        lines.append(f"{i},{'' if price is None else price},{'' if qty is None else qty},{name}")
        if price is not None and price > 10.0 and not name.startswith("item1"):
            expected.append((0, i, None if qty is None else price * qty, None if qty is None else qty % 7, name.upper(),
                             None if qty is None else len(name) + qty))
    (tmp_path / "t.csv").write_text("\n".join(lines) + "\n")

    def csv_table(t_env: TableEnvironment) -> None:
        t_env.execute_sql(f"CREATE TABLE t (id BIGINT, price DOUBLE, qty INT, name STRING) WITH ("
                          f"'connector' = 'filesystem', 'path' = '{tmp_path / 't.csv'}', 'format' = 'csv')")
    sql = ("SELECT id, price * qty, MOD(qty, 7), UPPER(name), CHAR_LENGTH(name) + qty FROM t "
           "WHERE price > 10.0 AND name NOT LIKE 'item1%'")
    assert _calc_rows(True, sql, False, csv_table) == _calc_rows(False, sql, False, csv_table) == \
        sorted(expected, key=repr)
    grouped = "SELECT item, SUM(qty) * 2 + 1 AS d FROM orders GROUP BY item HAVING SUM(qty) > 2"
    changelog = _calc_rows(True, grouped, True, lambda t_env: None)
    assert changelog == _calc_rows(False, grouped, True, lambda t_env: None)
    assert {r[0] for r in changelog} == {RowKind.INSERT.value, RowKind.UPDATE_BEFORE.value, RowKind.UPDATE_AFTER.value}


def test_case_int_overflow_date_format_and_sum_of_int_on_the_runtime(cluster: Any, tmp_path: Path) -> None:
    """CASE, INT arithmetic past 32 bits (Java wraps: 2147483647 + 1 is -2147483648) and DATE_FORMAT
    over a CSV table, vectorized Calc on and off; SUM of an INT column is an INT and wraps."""
    import datetime
    lines, expected = [], []
    base = datetime.datetime(2024, 3, 5, 14, 7, 9)

    def int32(v: int) -> int:
        v %= 2 ** 32
        return v - 2 ** 32 if v >= 2 ** 31 else v
    for i in range(300):
        qty = None if i % 11 == 0 else [2147483647, -2147483648, 5, 150, -3][i % 5] + (0 if i % 5 < 2 else i)
        ts = base + datetime.timedelta(minutes=i * 7)
        lines.append(f"{i},{'' if qty is None else qty},{ts:%Y-%m-%d %H:%M:%S}")
        size = None if qty is None or qty <= 0 else "big" if qty > 100 else "small"
        expected.append((0, i, size, None if qty is None else int32(qty + 1), f"{ts:%Y-%m-%d %H:%M}"))
    (tmp_path / "q.csv").write_text("\n".join(lines) + "\n")

    def csv_table(t_env: TableEnvironment) -> None:
        t_env.execute_sql(f"CREATE TABLE q (id BIGINT, qty INT, ts TIMESTAMP(3)) WITH ("
                          f"'connector' = 'filesystem', 'path' = '{tmp_path / 'q.csv'}', 'format' = 'csv')")
    sql = ("SELECT id, CASE WHEN qty > 100 THEN 'big' WHEN qty > 0 THEN 'small' END, qty + 1, "
           "DATE_FORMAT(ts, 'yyyy-MM-dd HH:mm') FROM q")
    assert _calc_rows(True, sql, False, csv_table) == _calc_rows(False, sql, False, csv_table) == \
        sorted(expected, key=repr)
    t_env = env(streaming=False)
    csv_table(t_env)
    low = list(t_env.execute_sql("SELECT SUM(qty) FROM q WHERE id IN (1, 2, 6)").collect())  # MIN + 7 + MIN
    assert [tuple(r) for r in low] == [(7,)]  # -2**32 + 7 keeps its low 32 bits
    high = list(t_env.execute_sql("SELECT SUM(qty) FROM q WHERE id IN (5, 10)").collect())  # MAX + MAX
    assert [tuple(r) for r in high] == [(-2,)]


def _many_orders() -> list[tuple[Any, ...]]:
    """Enough rows for batches past the local aggregate's row minimum, with NULLs and negatives."""
    import random
    rng = random.Random(30)
    return [(i, rng.choice(["apple", "pear", "fig", None]), rng.choice([None, rng.randint(-1000, 1000)]))
            for i in range(3000)]


def _flink_aggregates(rows: list[tuple[Any, ...]]) -> dict[Any, tuple[Any, ...]]:
    """Flink's semantics: SUM of only NULLs is NULL, COUNT(qty) skips NULLs, AVG of an INT truncates."""
    groups: dict[Any, list[Any]] = defaultdict(list)
    for _, item, qty in rows:
        groups[item].append(qty)
    out = {}
    for item, qs in groups.items():
        vals = [q for q in qs if q is not None]
        avg = None if not vals else (abs(sum(vals)) // len(vals)) * (1 if sum(vals) >= 0 else -1)
        out[item] = (item, sum(vals) if vals else None, len(qs), len(vals), avg, min(vals, default=None),
                     max(vals, default=None))
    return out


GROUPED = ("SELECT item, SUM(qty) AS total, COUNT(*) AS n, COUNT(qty) AS m, AVG(qty) AS mean, MIN(qty) AS lo, "
           "MAX(qty) AS hi FROM big GROUP BY item")


@pytest.mark.parametrize("vectorized", ["true", "false"])
def test_a_batch_group_by_gives_the_same_results_in_two_phases_over_arrow_and_row_by_row(
        cluster: Any, vectorized: str) -> None:
    rows = _many_orders()
    t_env = env(streaming=False)
    t_env.get_config().set("table.exec.millstream.vectorized-agg.enabled", vectorized)
    t_env.create_temporary_view("big", t_env.from_elements(rows, ["id", "item", "qty"]))
    result = t_env.execute_sql(GROUPED)
    got = [(r.get_row_kind(), tuple(r)) for r in result.collect()]
    assert sorted(got, key=repr) == sorted(((I, v) for v in _flink_aggregates(rows).values()), key=repr)


def test_a_streaming_group_by_under_mini_batch_emits_a_valid_changelog_of_the_same_results(cluster: Any) -> None:
    rows = _many_orders()
    t_env = env(streaming=True)
    t_env.get_config().set("table.exec.mini-batch.enabled", "true")
    t_env.get_config().set("table.exec.millstream.vectorized-agg.enabled", "true")
    t_env.create_temporary_view("big", t_env.from_elements(rows, ["id", "item", "qty"]))
    shown: dict[Any, tuple[Any, ...]] = {}
    updates = 0
    for r in t_env.execute_sql(GROUPED).collect():
        kind, values = r.get_row_kind(), tuple(r)
        updates += 1
        if kind is UB:
            assert shown.pop(values[0]) == values  # -U takes back exactly what +I/+U showed
        else:
            assert values[0] not in shown and kind in (I, UA)
            shown[values[0]] = values
    assert shown == _flink_aggregates(rows)
    assert updates < len(rows)  # fewer intermediate results than one per row: mini-batch's semantics


def test_distinct_aggregates_streaming_over_an_updating_input_and_in_batch(cluster: Any) -> None:
    """COUNT(DISTINCT ...) per item in batch mode, and over an updating input (a GROUP BY's changelog)
    in streaming mode: the folded changelog ends at the set semantics' answer."""
    t_env = env(streaming=False)
    rows = {tuple(r) for r in t_env.execute_sql(
        "SELECT item, COUNT(DISTINCT qty) AS d, SUM(DISTINCT qty) AS s FROM orders GROUP BY item").collect()}
    by_item: dict[str, set[int]] = defaultdict(set)
    for _, item, qty in ORDERS:
        by_item[item].add(qty)
    assert rows == {(item, len(q), sum(q)) for item, q in by_item.items()}

    t_env = env(streaming=True)
    # per item the parity of its running total, then how many distinct parities there are (each
    # update retracts the item's old parity: two items share one, so d < n at the end)
    result = t_env.execute_sql("SELECT COUNT(DISTINCT parity) AS d, COUNT(*) AS n FROM "
                               "(SELECT item, MOD(SUM(qty), 2) AS parity FROM orders GROUP BY item)")
    final: Counter[tuple[Any, ...]] = Counter()
    for r in result.collect():
        final[tuple(r)] += 1 if r.get_row_kind() in (I, UA) else -1
    totals = {item: 0 for _, item, _ in ORDERS}
    for _, item, qty in ORDERS:
        totals[item] += qty
    assert +final == Counter({(len({t % 2 for t in totals.values()}), len(totals)): 1}) == Counter({(2, 3): 1})


def test_a_null_into_a_not_null_sink_column_fails_the_insert_naming_it_or_is_dropped(cluster: Any, tmp_path: Path) -> None:
    """Flink's sink NOT NULL enforcer: ERROR (the default) fails the INSERT job with the column's name,
    'table.exec.sink.not-null-enforcer' = 'DROP' writes every row but those."""
    rows = [(1, "a"), (2, None), (3, "c"), (4, None)]
    for mode in ("ERROR", "DROP"):
        t_env = env(streaming=False, parallelism=1)
        t_env.get_config().set("table.exec.sink.not-null-enforcer", mode)
        t_env.create_temporary_view("src", t_env.from_elements(rows, ["id", "name"]))
        out = tmp_path / mode
        t_env.execute_sql(f"CREATE TABLE out_{mode} (id INT, name STRING NOT NULL) WITH ("
                          f"'connector' = 'filesystem', 'path' = '{out}', 'format' = 'csv')")
        result = t_env.execute_sql(f"INSERT INTO out_{mode} SELECT id, name FROM src")
        if mode == "ERROR":
            with pytest.raises(Exception, match="Column 'name' is NOT NULL, however, a null value is being written"):
                result.wait()
        else:
            result.wait()
            written = sorted(line for f in out.rglob("part-*") for line in f.read_text().splitlines())
            assert written == ["1,a", "3,c"]
