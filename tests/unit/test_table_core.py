"""The Table API's pure parts, from Flink's documented behaviour: the tableau format of
``TableResult.print()``, a streaming GROUP BY's changelog, aggregates with retraction, SQL's null
rules in expressions, column naming, the planner's Calc merge and the plan's validation errors."""
from __future__ import annotations

import pytest

from millstream.common.row import Row, RowKind
from millstream.table import DataTypes, EnvironmentSettings, TableEnvironment, ValidationException
from millstream.table import plan as p
from millstream.table.expression import TableException, cast_value, resolve
from millstream.table.expressions import col, concat, lit
from millstream.table.planner import optimize
from millstream.table.runtime_functions import AggCall, GroupState, RowToText, sort_rows
from millstream.table.table_result import tableau
from millstream.table.types import parse_type
from millstream.table.udf import udf, udtf


def kinded(kind: RowKind, *values: object) -> Row:
    r = Row(*values)
    r.set_row_kind(kind)
    return r


# -- tableau (Flink's TableauStyle; PyFlink's basic_operations.py shows the streaming form) --------


def test_streaming_tableau_has_an_op_column_and_widths_by_type() -> None:
    columns = [("id", DataTypes.BIGINT()), ("data", DataTypes.STRING())]
    rows = [Row(1, '{"name": "Flink", "tel": 123, "addr": {}}'), kinded(RowKind.UPDATE_BEFORE, 2, None)]
    assert list(tableau(columns, rows, streaming=True)) == [
        "+----+----------------------+--------------------------------+",
        "| op |                   id |                           data |",
        "+----+----------------------+--------------------------------+",
        '| +I |                    1 | {"name": "Flink", "tel": 12... |',  # 30 wide: cut with ...
        "| -U |                    2 |                         <NULL> |",
        "+----+----------------------+--------------------------------+",
        "2 rows in set",
    ]


def test_int_column_is_eleven_wide_and_a_long_name_widens_its_column() -> None:
    lines = list(tableau([("tel", DataTypes.INT()), ("a_very_long_column_name_here", DataTypes.BOOLEAN())],
                    [Row(32, True)], streaming=True))
    assert lines[1] == "| op |         tel | a_very_long_column_name_here |"
    assert lines[3] == "| +I |          32 |                         TRUE |"
    assert lines[-1] == "1 row in set"


def test_batch_tableau_has_no_op_column_and_widths_by_content() -> None:
    assert list(tableau([("word", DataTypes.STRING()), ("cnt", DataTypes.BIGINT())], [Row("to", 2), Row("be", 10)],
                        streaming=False)) == [
        "+------+-----+",
        "| word | cnt |",
        "+------+-----+",
        "|   to |   2 |",
        "|   be |  10 |",
        "+------+-----+",
        "2 rows in set",
    ]


def test_no_rows_print_empty_set() -> None:
    assert list(tableau([("a", DataTypes.INT())], [], streaming=True)) == ["Empty set"]


def test_a_streaming_tableau_writes_each_row_before_the_next_arrives() -> None:
    def rows():  # type: ignore[no-untyped-def]
        yield Row(1)
        raise AssertionError("read past the first row before printing it")

    lines = tableau([("a", DataTypes.INT())], rows(), streaming=True)
    assert [next(lines) for _ in range(4)][-1] == "| +I |           1 |"


def test_the_print_connector_writes_flinks_row_strings() -> None:
    assert RowToText().map(kinded(RowKind.UPDATE_AFTER, "to", 2)) == "+U[to, 2]"
    assert RowToText().map(Row(None, True, 1.5)) == "+I[null, true, 1.5]"


# -- GROUP BY changelog (Flink's GroupAggFunction) ------------------------------------------------


def test_a_group_emits_insert_then_update_pairs_and_nothing_when_unchanged() -> None:
    calls = [AggCall("count", None), AggCall("max", 1)]
    g = GroupState.new(calls)
    out = []
    for row in [("a", 5), ("a", 3), ("a", 5)]:
        g.apply(calls, row, accumulate=True)
        out.append(g.changelog(("a",), calls)[0])
    assert [[(r.get_row_kind(), tuple(r)) for r in rows] for rows in out] == [
        [(RowKind.INSERT, ("a", 1, 5))],
        [(RowKind.UPDATE_BEFORE, ("a", 1, 5)), (RowKind.UPDATE_AFTER, ("a", 2, 5))],
        [(RowKind.UPDATE_BEFORE, ("a", 2, 5)), (RowKind.UPDATE_AFTER, ("a", 3, 5))],
    ]
    only_max = [AggCall("max", 1)]
    h = GroupState.new(only_max)
    h.apply(only_max, ("a", 5), True)
    h.changelog(("a",), only_max)
    h.apply(only_max, ("a", 3), True)
    assert h.changelog(("a",), only_max) == ([], False)  # MAX stays 5: no -U/+U


def test_retracting_the_last_row_deletes_the_group() -> None:
    calls = [AggCall("sum", 1)]
    g = GroupState.new(calls)
    g.apply(calls, ("a", 4), True)
    g.changelog(("a",), calls)
    g.apply(calls, ("a", 4), False)
    rows, gone = g.changelog(("a",), calls)
    assert gone and [(r.get_row_kind(), tuple(r)) for r in rows] == [(RowKind.DELETE, ("a", 4))]


def test_min_and_max_survive_retraction_and_sum_of_no_values_is_null() -> None:
    mx = AggCall("max", 0)
    acc = mx.create()
    for v in (3, 9, 9):
        mx.accumulate(acc, (v,), 1)
    mx.accumulate(acc, (9,), -1)
    assert mx.value(acc) == 9
    mx.accumulate(acc, (9,), -1)
    assert mx.value(acc) == 3
    s = AggCall("sum", 0)
    acc = s.create()
    s.accumulate(acc, (None,), 1)
    assert s.value(acc) is None
    s0 = AggCall("sum0", 0)
    assert s0.value(s0.create()) == 0


def test_count_star_counts_nulls_count_column_does_not_and_int_avg_truncates() -> None:
    star, c = AggCall("count", None), AggCall("count", 0)
    a, b = star.create(), c.create()
    for v in (1, None, 2):
        star.accumulate(a, (v,), 1)
        c.accumulate(b, (v,), 1)
    assert (star.value(a), c.value(b)) == (3, 2)
    avg = AggCall("avg", 0, integral=True)
    acc = avg.create()
    for v in (-1, -2):
        avg.accumulate(acc, (v,), 1)
    assert avg.value(acc) == -1  # -1.5 truncated toward zero, as Java's integer division


def test_a_join_side_is_a_multiset() -> None:
    from millstream.table.regular_join import RegularJoinCore
    core = RegularJoinCore("INNER", None, 1, 1)
    core.process((1,), RowKind.INSERT, True)
    core.process((1,), RowKind.INSERT, True)
    core.process((1,), RowKind.DELETE, True)
    assert core.sides[0] == {(1,): [1, 0]}
    assert core.process((2,), RowKind.DELETE, True) == [] and core.sides[0] == {(1,): [1, 0]}


def test_sort_puts_nulls_first_ascending_and_last_descending() -> None:
    rows = [(2,), (None,), (1,)]
    assert sort_rows(rows, [(0, True)]) == [(None,), (1,), (2,)]
    assert sort_rows(rows, [(0, False)]) == [(2,), (1,), (None,)]


# -- expressions ----------------------------------------------------------------------------------

COLS = [("a", DataTypes.INT()), ("b", DataTypes.STRING()), ("c", DataTypes.BOOLEAN())]


def ev(expr: object, row: tuple[object, ...]) -> object:
    return resolve(expr, COLS).eval(list(row))  # type: ignore[arg-type]


def test_null_propagates_and_and_or_are_three_valued() -> None:
    assert ev(col("a") + 1, (None, "x", True)) is None
    assert ev(concat(col("b"), "_", col("a").cast(DataTypes.STRING())), (1, "x", True)) == "x_1"
    assert ev(concat(col("b"), lit("y")), (1, None, True)) is None
    assert ev(col("c") & (col("a") > 0), (None, "x", False)) is False  # FALSE AND NULL
    assert ev(col("c") | (col("a") > 0), (None, "x", True)) is True  # TRUE OR NULL
    assert ev(col("c") & (col("a") > 0), (None, "x", True)) is None
    assert ev(col("a").is_null, (None, "x", True)) is True


def test_integer_division_truncates_and_types_widen() -> None:
    assert ev(col("a") / 2, (-7, "", True)) == -3
    assert resolve(col("a") + lit(1, DataTypes.BIGINT()), COLS).dtype.root == "BIGINT"
    assert resolve(col("a") == 1, COLS).dtype.root == "BOOLEAN"


def test_json_value_reads_a_scalar_at_a_path_and_null_otherwise() -> None:
    doc = '{"name": "Flink", "tel": 123, "addr": {"country": "Germany"}}'
    cols = [("d", DataTypes.STRING())]
    assert resolve(col("d").json_value("$.tel", DataTypes.STRING()), cols).eval([doc]) == "123"
    assert resolve(col("d").json_value("$.addr.country"), cols).eval([doc]) == "Germany"
    assert resolve(col("d").json_value("$.addr"), cols).eval([doc]) is None
    assert resolve(col("d").json_value("$.nope"), cols).eval(["not json"]) is None


def test_cast_follows_sql_and_a_bad_cast_names_the_value() -> None:
    assert cast_value("123", DataTypes.BIGINT()) == 123
    assert cast_value(True, DataTypes.STRING()) == "TRUE"
    with pytest.raises(TableException, match="Cannot cast 'x1' to BIGINT"):
        cast_value("x1", DataTypes.BIGINT())


def test_type_strings_parse_as_flink_names_them() -> None:
    assert str(parse_type("string")) == "STRING"
    assert str(parse_type("BIGINT NOT NULL")) == "BIGINT NOT NULL"
    assert str(parse_type("ROW<a INT, `b c` VARCHAR(10)>")) == "ROW<`a` INT, `b c` VARCHAR(10)>"
    assert str(parse_type("DECIMAL(10, 2)")) == "DECIMAL(10, 2)"
    with pytest.raises(ValueError, match="unknown type 'STRNG'"):
        parse_type("STRNG")


# -- tables: names, validation, plans -----------------------------------------------------------


@pytest.fixture()
def t_env() -> TableEnvironment:
    return TableEnvironment.create(EnvironmentSettings.in_streaming_mode())


def test_from_elements_infers_bigint_and_string_and_unnamed_expressions_are_expr_n(t_env: TableEnvironment) -> None:
    t = t_env.from_elements([(1, "a")], ["id", "data"])
    assert str(t.get_schema()) == "(\n  `id` BIGINT,\n  `data` STRING\n)"
    g = t.group_by(col("data")).select(col("data"), col("id").count, col("id").max.alias("m"), col("id").sum)
    assert g.get_schema().get_field_names() == ["data", "EXPR$0", "m", "EXPR$1"]
    assert [str(x) for x in g.get_schema().get_field_data_types()] == ["STRING", "BIGINT NOT NULL", "BIGINT", "BIGINT"]
    assert t_env.from_elements([(1, "a")]).get_schema().get_field_names() == ["_1", "_2"]


def test_a_row_type_schema_names_and_types_the_columns(t_env: TableEnvironment) -> None:
    t = t_env.from_elements([("x",)], DataTypes.ROW([DataTypes.FIELD("line", DataTypes.STRING())]))
    assert t.get_schema().get_field_names() == ["line"]


def test_unknown_column_and_ungrouped_column_are_rejected_before_running(t_env: TableEnvironment) -> None:
    t = t_env.from_elements([(1, "a")], ["id", "data"])
    with pytest.raises(ValidationException, match=r"Cannot resolve field \[nope\], input field list:\[id, data\]"):
        t.select(col("nope"))
    with pytest.raises(ValidationException, match="Column id is neither grouped nor aggregated"):
        t.group_by(col("data")).select(col("id"))
    with pytest.raises(ValidationException, match="A filter condition must be of type BOOLEAN"):
        t.where(col("id") + 1)


def test_join_needs_distinct_column_names_and_an_equality(t_env: TableEnvironment) -> None:
    a = t_env.from_elements([(1, "a")], ["id", "data"])
    b = t_env.from_elements([(1, 18)], ["id", "age"])
    with pytest.raises(ValidationException, match=r"both tables have the column\(s\) \['id'\]"):
        a.join(b, col("id") == col("id"))
    r = b.rename_columns(col("id").alias("r_id"))
    with pytest.raises(ValidationException, match="no equality between a left and a right column"):
        a.join(r, col("id") > col("r_id"))
    j = a.join(r, (col("id") == col("r_id")) & (col("age") > 3))
    assert j.get_schema().get_field_names() == ["id", "data", "r_id", "age"]
    assert isinstance(j._node, p.Join) and (j._node.left_keys, j._node.right_keys) == ((0,), (0,))
    assert str(j._node.condition) == "age > 3"


def test_calcs_merge_into_one_and_a_python_udf_stops_the_merge(t_env: TableEnvironment) -> None:
    t = t_env.from_elements([(1, "a")], ["id", "data"])
    q = t.select(col("id") + 1, col("data")).alias("x", "d").where(col("x") > 2)
    plan = optimize(q._node)
    assert isinstance(plan, p.Calc) and isinstance(plan.input, p.Values)
    assert plan.describe() == "Calc(select=[id + 1 AS x, data AS d], where=[id + 1 > 2])"

    @udf(result_type="BIGINT")
    def inc(v: int) -> int:
        return v + 1

    u = optimize(t.select(inc(col("id")).alias("x")).where(col("x") > 2)._node)
    assert isinstance(u, p.Calc) and isinstance(u.input, p.Calc) and u.input.describe().startswith("PythonCalc(")


def test_udtf_columns_and_alias(t_env: TableEnvironment) -> None:
    @udtf(result_types=[DataTypes.STRING(), DataTypes.INT()])
    def split(line: str):  # type: ignore[no-untyped-def]
        yield line, 1

    t = t_env.from_elements([("a b",)], ["line"])
    assert t.flat_map(split).get_schema().get_field_names() == ["f0", "f1"]
    assert t.flat_map(split).alias("w", "n").get_schema().get_field_names() == ["w", "n"]
    assert t.join_lateral(split(col("line")).alias("w", "n")).get_schema().get_field_names() == ["line", "w", "n"]


def test_insert_into_a_sink_of_another_width_is_rejected(t_env: TableEnvironment) -> None:
    from millstream.table import Schema, TableDescriptor
    t_env.create_temporary_table("sink", TableDescriptor.for_connector("print").schema(
        Schema.new_builder().column("word", DataTypes.STRING()).build()).build())
    with pytest.raises(ValidationException, match="the query has 2 columns"):
        t_env.from_elements([(1, "a")], ["id", "data"]).execute_insert("sink")
    with pytest.raises(TableException, match="Could not find any factory for identifier 'kafkaa'"):
        t_env.create_temporary_table("k", TableDescriptor.for_connector("kafkaa").build())


# -- SQL ------------------------------------------------------------------------------------------


def test_sql_select_names_columns_as_calcite_and_groups(t_env: TableEnvironment) -> None:
    t_env.create_temporary_view("T", t_env.from_elements([(1, "a", 10)], ["id", "w", "v"]))
    q = t_env.sql_query("SELECT w, COUNT(*) AS c, SUM(v), MAX(id) FROM T WHERE v > 1 GROUP BY w")
    assert q.get_schema().get_field_names() == ["w", "c", "EXPR$2", "EXPR$3"]
    assert [str(t) for t in q.get_schema().get_field_data_types()] == ["STRING", "BIGINT NOT NULL", "BIGINT", "BIGINT"]
    assert "GroupAggregate(groupBy=[w]" in t_env.explain_sql("SELECT w, COUNT(*) FROM T GROUP BY w")


def test_sql_filters_and_projections_merge_into_one_calc(t_env: TableEnvironment) -> None:
    t = t_env.from_elements([(1, "a", 10)], ["id", "w", "v"])
    plan = t_env.explain_sql("SELECT UPPER(w) AS u, v * 2 FROM %s WHERE v > 5" % t)
    optimized = plan.split("== Optimized Physical Plan ==\n")[1]
    assert optimized.splitlines()[0] == "Calc(select=[UPPER(w) AS u, v * 2 AS EXPR$1], where=[v > 5])"


def test_a_sql_syntax_error_names_line_column_and_token(t_env: TableEnvironment) -> None:
    from millstream.table.sql import SqlParserException
    with pytest.raises(SqlParserException, match=r'Encountered "WHERE" at line 2, column 6\.'):
        t_env.sql_query("SELECT w\nFROM WHERE")
    with pytest.raises(ValidationException, match="Object 'nope' not found"):
        t_env.sql_query("SELECT * FROM nope")
    t_env.create_temporary_view("T", t_env.from_elements([(1,)], ["id"]))
    t_env.create_temporary_view("U", t_env.from_elements([(1,)], ["uid"]))
    with pytest.raises(TableException, match="Unsupported join form NATURAL JOIN"):
        t_env.sql_query("SELECT * FROM T NATURAL JOIN U")
    with pytest.raises(TableException, match=r"Unsupported join form JOIN \.\.\. USING"):
        t_env.sql_query("SELECT * FROM T JOIN U USING (id)")
    with pytest.raises(TableException, match="Unsupported join type LEFT SEMI JOIN"):
        t_env.sql_query("SELECT * FROM T LEFT SEMI JOIN U ON T.id = U.uid")
    with pytest.raises(ValidationException, match="no equality between a left and a right column"):
        t_env.sql_query("SELECT * FROM T FULL JOIN U ON T.id < U.uid")


def test_create_table_registers_a_connector_table(t_env: TableEnvironment) -> None:
    result = t_env.execute_sql("CREATE TABLE s (w STRING, `count` BIGINT) WITH ('connector' = 'blackhole')")
    assert [tuple(r) for r in result.collect()] == [("OK",)]
    assert t_env.from_path("s").get_schema().get_field_names() == ["w", "count"]
    with pytest.raises(ValidationException, match="option key 'connector'"):
        t_env.execute_sql("CREATE TABLE x (a INT) WITH ('format' = 'csv')")


def test_the_job_graph_shows_flinks_operator_names(t_env: TableEnvironment) -> None:
    import json
    t = t_env.from_elements([(1, "a")], ["id", "w"])
    counts = t.where(col("id") > 0).group_by(col("w")).select(col("w"), col("id").count.alias("n"))
    t_env.to_changelog_stream(counts)
    plan = json.loads(t_env._env.get_execution_plan())
    contents = [n["contents"] for n in plan["nodes"]]
    assert "Calc(select=[w, id AS $f1], where=[id > 0])" in contents
    assert "GroupAggregate(groupBy=[w], select=[w, COUNT($f1) AS $agg0])" in contents
    assert "Calc(select=[w, $agg0 AS n])" in contents
    assert any(c.startswith("Source: TableSourceScan(table=[[*anonymous_python-input-format$") for c in contents)


class _State:
    """A keyed ValueState of one key (the join function's state, without a runtime)."""

    def __init__(self) -> None:
        self.v: object = None

    def value(self) -> object:
        return self.v

    def update(self, v: object) -> None:
        self.v = v

    def clear(self) -> None:
        self.v = None


def test_an_inner_join_retracts_what_an_updated_row_had_joined() -> None:
    # Flink's StreamingJoinOperator forwards the input's row kind in an inner join (-U/+U stay -U/+U)
    from millstream.table.regular_join import RegularJoinFunction
    join = RegularJoinFunction("INNER", None, 2, 2, batch=False)
    join.state = _State()
    out = []
    out += list(join.process_element2(Row("a", "first"), None))  # the right side first: nothing to join yet
    out += list(join.process_element1(Row("a", 1), None))
    out += list(join.process_element1(kinded(RowKind.UPDATE_BEFORE, "a", 1), None))
    out += list(join.process_element1(kinded(RowKind.UPDATE_AFTER, "a", 2), None))
    out += list(join.process_element1(kinded(RowKind.DELETE, "zz", 9), None))  # retracts nothing it had
    assert [(r.get_row_kind(), tuple(r)) for r in out] == [
        (RowKind.INSERT, ("a", 1, "a", "first")),
        (RowKind.UPDATE_BEFORE, ("a", 1, "a", "first")),
        (RowKind.UPDATE_AFTER, ("a", 2, "a", "first")),
    ]
    assert join.state.v.sides[0] == {("a", 2): [1, 1]}


def test_a_left_outer_join_pads_then_retracts_the_padding_and_restores_it() -> None:
    from millstream.table.regular_join import RegularJoinFunction
    join = RegularJoinFunction("LEFT", None, 2, 2, batch=False)
    join.state = _State()
    out = []
    out += list(join.process_element1(Row("a", 1), None))  # no match yet: padded
    out += list(join.process_element2(Row("a", "x"), None))  # first match: padding retracted
    out += list(join.process_element2(Row("a", "y"), None))  # a second match: one more joined row
    out += list(join.process_element2(kinded(RowKind.DELETE, "a", "x"), None))
    out += list(join.process_element2(kinded(RowKind.DELETE, "a", "y"), None))  # last match gone: padded again
    assert [(r.get_row_kind(), tuple(r)) for r in out] == [
        (RowKind.INSERT, ("a", 1, None, None)),
        (RowKind.DELETE, ("a", 1, None, None)),
        (RowKind.INSERT, ("a", 1, "a", "x")),
        (RowKind.INSERT, ("a", 1, "a", "y")),
        (RowKind.DELETE, ("a", 1, "a", "x")),
        (RowKind.DELETE, ("a", 1, "a", "y")),
        (RowKind.INSERT, ("a", 1, None, None)),
    ]
