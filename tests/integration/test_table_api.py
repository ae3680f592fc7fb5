"""The Table API on the runtime (a MiniCluster with real Spark): Flink's changelog semantics of a
streaming GROUP BY (+I, then -U/+U pairs per change), batch mode's final values and sort, an inner
join of an updating input (state per side: a retraction takes back what it joined), Python
UDF/UDTF, column operations, and the DataStream interplay. Expected results are computed here
from the rules, not read from Millstream."""
from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Iterable

import pytest

from millstream.common import Row, RowKind
from millstream.common.typeinfo import Types
from millstream.datastream import StreamExecutionEnvironment
from millstream.table import DataTypes, EnvironmentSettings, StreamTableEnvironment, TableEnvironment
from millstream.table.expressions import col, concat, lit
from millstream.table.udf import udf, udtf

from .harness import ClusterSpec

pytestmark = pytest.mark.timeout(600)
CLUSTER = ClusterSpec(jobmanager_env=True, tasks_per_slot=8)  # a join job runs ~10 tasks at once

WORDS = ["a", "b", "a", "c", "a", "b"]
I, UB, UA, D = RowKind.INSERT, RowKind.UPDATE_BEFORE, RowKind.UPDATE_AFTER, RowKind.DELETE


def streaming(parallelism: int = 2) -> TableEnvironment:
    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    t_env.get_config().set("parallelism.default", str(parallelism))
    return t_env


def batch(parallelism: int = 2) -> TableEnvironment:
    t_env = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
    t_env.get_config().set("parallelism.default", str(parallelism))
    return t_env


def kinds_and_values(rows: Iterable[Row]) -> list[tuple[RowKind, tuple[Any, ...]]]:
    return [(r.get_row_kind(), tuple(r)) for r in rows]


def expected_count_changelog(words: list[str]) -> dict[str, list[tuple[RowKind, tuple[Any, ...]]]]:
    """Flink's GroupAggFunction per key: +I for the first row, then -U old / +U new."""
    out: dict[str, list[tuple[RowKind, tuple[Any, ...]]]] = defaultdict(list)
    counts: Counter[str] = Counter()
    for w in words:
        counts[w] += 1
        n = counts[w]
        out[w] += [(I, (w, 1))] if n == 1 else [(UB, (w, n - 1)), (UA, (w, n))]
    return out


def materialize(changelog: Iterable[tuple[RowKind, tuple[Any, ...]]]) -> Counter[tuple[Any, ...]]:
    """The table a changelog describes: +I/+U add a row, -U/-D take one back."""
    table: Counter[tuple[Any, ...]] = Counter()
    for kind, values in changelog:
        table[values] += 1 if kind in (I, UA) else -1
        assert table[values] >= 0, f"{kind} of {values} retracts a row that is not there"
    return +table


def test_a_streaming_group_by_emits_insert_and_update_pairs_per_key(cluster: Any) -> None:
    t_env = streaming()
    words = t_env.from_elements([(w,) for w in WORDS], ["word"])
    result = words.group_by(col("word")).select(col("word"), lit(1).count.alias("cnt")).execute()
    got: dict[str, list[tuple[RowKind, tuple[Any, ...]]]] = defaultdict(list)
    for kind, values in kinds_and_values(result.collect()):
        got[values[0]].append((kind, values))
    assert dict(got) == dict(expected_count_changelog(WORDS))


def test_batch_mode_emits_final_values_and_sorts(cluster: Any) -> None:
    t_env = batch()
    t = t_env.from_elements([(w, i) for i, w in enumerate(WORDS)], ["word", "pos"])
    result = (t.group_by(col("word"))
              .select(col("word"), col("pos").sum.alias("s"), col("pos").max.alias("m"), col("pos").count.alias("n"))
              .order_by(col("s").desc).limit(2).execute())
    sums: Counter[str] = Counter()
    for i, w in enumerate(WORDS):
        sums[w] += i
    rows = kinds_and_values(result.collect())
    # the two largest sums, in descending order; words whose sums tie may come in either order
    assert [values[1] for _, values in rows] == sorted(sums.values(), reverse=True)[:2]
    assert all(kind is I and values == (values[0], sums[values[0]], max(i for i, x in enumerate(WORDS) if x == values[0]),
                                        WORDS.count(values[0])) for kind, values in rows), rows


def test_a_join_of_an_updating_table_retracts_what_it_joined(cluster: Any) -> None:
    t_env = streaming()
    counts = t_env.from_elements([(w,) for w in WORDS], ["word"]).group_by(col("word")) \
        .select(col("word"), lit(1).count.alias("cnt"))
    labels = t_env.from_elements([("a", "first"), ("b", "second"), ("z", "none")], ["w", "label"])
    joined = counts.join(labels, col("word") == col("w")).select(col("word"), col("cnt"), col("label"))
    changelog = kinds_and_values(joined.execute().collect())
    # the final table: each word with a label, at its final count
    assert materialize(changelog) == Counter({("a", 3, "first"): 1, ("b", 2, "second"): 1})
    # 'a' joins once per count it had when its label was there; an inner join forwards the counts'
    # -U/+U (Flink's StreamingJoinOperator). How many depends on which source's rows arrive first, in
    # Flink too (the unit test fixes the order).
    kinds = Counter(k for k, v in changelog if v[0] == "a")
    assert set(kinds) <= {I, UB, UA} and kinds[I] + kinds[UA] - kinds[UB] == 1


def test_udf_udtf_filter_and_column_operations(cluster: Any) -> None:
    t_env = streaming()

    @udf(result_type=DataTypes.STRING())
    def shout(s: str) -> str:
        return s.upper() + "!"

    @udtf(result_types=[DataTypes.STRING(), DataTypes.INT()])
    def split(line: str):  # type: ignore[no-untyped-def]
        for w in line.split():
            yield w, len(w)

    lines = t_env.from_elements([(1, "to be or"), (2, "not to be")], ["id", "line"])
    words = lines.join_lateral(split(col("line")).alias("word", "length")).drop_columns(col("line"))
    shaped = (words.where(col("length") > 2)
              .add_columns(shout(col("word")).alias("loud"), concat(col("word"), "_", col("id").cast(DataTypes.STRING())).alias("tag"))
              .rename_columns(col("id").alias("line_id")))
    assert shaped.get_schema().get_field_names() == ["line_id", "word", "length", "loud", "tag"]
    rows = kinds_and_values(shaped.execute().collect())
    assert sorted(rows) == [(I, (2, "not", 3, "NOT!", "not_2"))]


def test_union_all_distinct_and_streaming_limit(cluster: Any) -> None:
    t_env = streaming()
    a = t_env.from_elements([(1,), (2,), (2,)], ["x"])
    b = t_env.from_elements([(2,), (3,)], ["x"])
    assert sorted(v for _, v in kinds_and_values(a.union_all(b).execute().collect())) == [(1,), (2,), (2,), (2,), (3,)]
    distinct = kinds_and_values(a.union_all(b).distinct().execute().collect())
    assert sorted(distinct) == [(I, (1,)), (I, (2,)), (I, (3,))]  # a duplicate changes nothing: no -U/+U
    limited = kinds_and_values(t_env.from_elements([(i,) for i in range(10)], ["x"]).limit(3).execute().collect())
    assert len(limited) == 3 and all(k is I for k, _ in limited)


def test_tables_and_data_streams_convert_both_ways(cluster: Any) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    t_env = StreamTableEnvironment.create(env)
    ds = env.from_collection([("a", 1), ("b", 2), ("a", 3)],
                             type_info=Types.ROW_NAMED(["k", "v"], [Types.STRING(), Types.INT()]))
    t_env.create_temporary_view("input", ds)
    t = t_env.from_path("input")
    assert t.get_schema().get_field_names() == ["k", "v"]
    sums = t.group_by(col("k")).select(col("k"), col("v").sum.alias("total"))
    changes = list(t_env.to_changelog_stream(sums).execute_and_collect())
    assert [(r.get_row_kind(), r.k, r.total) for r in changes] == [(I, "a", 1), (I, "b", 2), (UB, "a", 1), (UA, "a", 4)]
    plain = list(t_env.to_data_stream(t.where(col("v") > 1)).execute_and_collect())
    assert [(r.k, r.v) for r in plain] == [("b", 2), ("a", 3)]


def test_a_streaming_left_outer_join_ends_as_the_left_join_of_the_final_tables(cluster: Any) -> None:
    t_env = streaming()
    left = t_env.from_elements([("a", 1), ("b", 2), ("c", 3)], ["k", "v"])
    right = t_env.from_elements([("a", "x"), ("a", "y"), ("c", "z")], ["rk", "label"])
    changelog = kinds_and_values(left.left_outer_join(right, col("k") == col("rk")).execute().collect())
    assert set(k for k, _ in changelog) <= {I, D}
    assert materialize(changelog) == Counter({("a", 1, "a", "x"): 1, ("a", 1, "a", "y"): 1,
                                              ("b", 2, None, None): 1, ("c", 3, "c", "z"): 1})


def test_streaming_right_and_full_outer_joins_of_an_updating_table_end_as_the_final_join(cluster: Any) -> None:
    t_env = streaming()
    # an updating left side (counts per word: -U/+U) and labels, some of which match no word
    counts = t_env.from_elements([(w,) for w in WORDS], ["word"]).group_by(col("word")) \
        .select(col("word"), lit(1).count.alias("cnt"))
    labels = t_env.from_elements([("a", "first"), ("c", "third"), ("z", "none")], ["w", "label"])
    final_counts = Counter(WORDS)
    for join_type, joined in (("RIGHT", counts.right_outer_join(labels, col("word") == col("w"))),
                              ("FULL", counts.full_outer_join(labels, col("word") == col("w")))):
        changelog = kinds_and_values(joined.execute().collect())
        expected: Counter[tuple[Any, ...]] = Counter()
        for w, label in (("a", "first"), ("c", "third"), ("z", "none")):
            expected[(w, final_counts[w], w, label) if w in final_counts else (None, None, w, label)] += 1
        if join_type == "FULL":
            expected.update((w, n, None, None) for w, n in final_counts.items() if w not in ("a", "c", "z"))
        assert materialize(changelog) == expected, join_type
        # the 'z' label never matches: padded once, never retracted
        assert [k for k, v in changelog if v[2] == "z"] == [I]
