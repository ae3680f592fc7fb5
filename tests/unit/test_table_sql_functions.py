"""SQL's CASE / IF and the Table API's Expression.then, evaluated on rows (the row path), with
Flink's typing: the result type is the branches' common type, nullable when a branch is NULL or
there is no ELSE (then the value is NULL); a null condition is not true; text branches of
different lengths are VARCHAR, not blank-padded CHAR (FLINK-9559)."""
from __future__ import annotations

from typing import Any

import pytest

from millstream.table import DataTypes, EnvironmentSettings, TableEnvironment, ValidationException
from millstream.table.expression import Expression, resolve
from millstream.table.expressions import col, lit
from millstream.table.sql import parse_expression

COLS = [("a", DataTypes.INT()), ("b", DataTypes.BIGINT()), ("s", DataTypes.STRING()), ("x", DataTypes.DOUBLE())]


@pytest.fixture(scope="module")
def t_env() -> TableEnvironment:
    return TableEnvironment.create(EnvironmentSettings.in_streaming_mode())


def sql(text: str, t_env: TableEnvironment) -> Any:
    return resolve(parse_expression(text, t_env), COLS)


def test_searched_case_takes_the_first_true_branch_and_a_null_condition_is_not_true(t_env: TableEnvironment) -> None:
    e = sql("CASE WHEN a > 10 THEN 'big' WHEN a > 0 THEN 'small' ELSE 'none' END", t_env)
    assert [e.eval([a, 0, "", 0.0]) for a in (11, 5, 0, -3, None)] == ["big", "small", "none", "none", "none"]
    assert str(e.dtype) == "VARCHAR(5) NOT NULL"  # CHAR(3), CHAR(5), CHAR(4): VARCHAR of the longest


def test_case_without_else_is_null_and_nullable(t_env: TableEnvironment) -> None:
    e = sql("CASE WHEN a = 1 THEN 100 END", t_env)
    assert e.eval([1, 0, "", 0.0]) == 100
    assert e.eval([2, 0, "", 0.0]) is None
    assert str(e.dtype) == "INT"


def test_simple_case_compares_the_subject_with_each_when(t_env: TableEnvironment) -> None:
    e = sql("CASE a WHEN 1 THEN 'one' WHEN 2 THEN 'two' ELSE 'many' END", t_env)
    assert [e.eval([a, 0, "", 0.0]) for a in (1, 2, 3, None)] == ["one", "two", "many", "many"]
    same = sql("CASE s WHEN 'x' THEN 'yes' ELSE 'no!' END", t_env)  # CHAR(3) both: stays CHAR(3)
    assert str(same.dtype) == "CHAR(3) NOT NULL" and same.eval([0, 0, "x", 0.0]) == "yes"


def test_branches_widen_to_their_common_numeric_type(t_env: TableEnvironment) -> None:
    e = sql("CASE WHEN a > 0 THEN a ELSE b END", t_env)
    assert str(e.dtype) == "BIGINT"
    d = sql("CASE WHEN a > 0 THEN a ELSE x END", t_env)
    assert str(d.dtype) == "DOUBLE"
    v = d.eval([3, 0, "", 1.5])
    assert v == 3.0 and type(v) is float  # the INT branch's value in the DOUBLE result type


def test_only_the_chosen_branch_is_evaluated(t_env: TableEnvironment) -> None:
    e = sql("CASE WHEN a = 0 THEN NULL ELSE 10 / a END", t_env)
    assert e.eval([0, 0, "", 0.0]) is None
    assert e.eval([3, 0, "", 0.0]) == 3


def test_if_is_a_two_branch_case(t_env: TableEnvironment) -> None:
    e = sql("IF(a > 0, 'pos', 'neg')", t_env)
    assert [e.eval([a, 0, "", 0.0]) for a in (1, -1, None)] == ["pos", "neg", "neg"]


def test_table_api_then_is_pyflinks_ternary() -> None:
    e = resolve((col("a") > 0).then(col("b"), lit(-1)), COLS)
    assert str(e.dtype) == "BIGINT"
    assert [e.eval([a, 7, "", 0.0]) for a in (1, 0, None)] == [7, -1, -1]


def test_branches_without_a_common_type_and_a_non_boolean_condition_are_rejected(t_env: TableEnvironment) -> None:
    with pytest.raises(ValidationException, match="no common type"):
        sql("CASE WHEN a > 0 THEN 1 ELSE 'x' END", t_env)
    with pytest.raises(ValidationException, match="must be BOOLEAN"):
        resolve(Expression("call", (col("a"), lit(1), lit(2)), "case"), COLS)


def test_sql_case_runs_in_a_query_and_names_its_column(t_env: TableEnvironment) -> None:
    t_env.create_temporary_view("CaseT", t_env.from_elements([(1, "a"), (20, "b")], ["v", "w"]))
    q = t_env.sql_query("SELECT w, CASE WHEN v > 10 THEN 'high' ELSE 'low' END AS level FROM CaseT")
    assert q.get_schema().get_field_names() == ["w", "level"]
    assert [str(t) for t in q.get_schema().get_field_data_types()] == ["STRING", "VARCHAR(4) NOT NULL"]


# -- integer arithmetic: Java's fixed widths (INT 32 bits, BIGINT 64 bits, two's complement) --------


def test_int_arithmetic_wraps_at_32_bits(t_env: TableEnvironment) -> None:
    assert sql("2147483647 + 1", t_env).eval([]) == -2147483648
    assert sql("CAST(-2147483648 AS INT) - 1", t_env).eval([]) == 2147483647
    assert sql("a * a", t_env).eval([65536, 0, "", 0.0]) == 0  # 2**32 keeps no low bits
    assert sql("a * 3", t_env).eval([1_000_000_000, 0, "", 0.0]) == -1294967296
    assert sql("-a", t_env).eval([-2147483648, 0, "", 0.0]) == -2147483648
    assert sql("ABS(a)", t_env).eval([-2147483648, 0, "", 0.0]) == -2147483648  # Java's Math.abs
    assert sql("a / -1", t_env).eval([-2147483648, 0, "", 0.0]) == -2147483648


def test_bigint_arithmetic_wraps_at_64_bits_and_int_with_bigint_is_bigint(t_env: TableEnvironment) -> None:
    assert sql("b + 1", t_env).eval([0, 9223372036854775807, "", 0.0]) == -9223372036854775808
    assert sql("a + b", t_env).eval([2147483647, 1, "", 0.0]) == 2147483648  # BIGINT: no 32-bit wrap
    assert sql("b * b", t_env).eval([0, 4294967296, "", 0.0]) == 0


def test_cast_narrows_integers_as_java_and_saturates_doubles(t_env: TableEnvironment) -> None:
    assert sql("CAST(b AS INT)", t_env).eval([0, 2147483648, "", 0.0]) == -2147483648
    assert sql("CAST(b AS INT)", t_env).eval([0, 4294967297, "", 0.0]) == 1
    assert sql("CAST(b AS SMALLINT)", t_env).eval([0, 32768, "", 0.0]) == -32768
    assert sql("CAST(b AS TINYINT)", t_env).eval([0, 255, "", 0.0]) == -1
    assert sql("CAST(x AS INT)", t_env).eval([0, 0, "", 1e10]) == 2147483647  # Java's (int) of a double
    assert sql("CAST(x AS INT)", t_env).eval([0, 0, "", -2.9]) == -2
    assert sql("CAST(x AS BIGINT)", t_env).eval([0, 0, "", float("nan")]) == 0


def test_sum_of_int_is_int_and_wraps() -> None:
    from millstream.table.runtime_functions import AggCall, GroupState
    calls = [AggCall("sum", 0, True, False, 32), AggCall("sum0", 0, True, False, 32), AggCall("sum", 1, True, False, 64)]
    state = GroupState.new(calls)
    for row in [(2147483647, 9223372036854775807), (1, 1)]:
        state.apply(calls, row, True)
    assert state.values(calls) == (-2147483648, -2147483648, -9223372036854775808)
    state.apply(calls, (1, 1), False)  # retracting undoes the wrap
    assert state.values(calls) == (2147483647, 2147483647, 9223372036854775807)


def test_the_planner_gives_sum_its_arguments_width(t_env: TableEnvironment) -> None:
    t = t_env.from_elements([(1, 2)], DataTypes.ROW([DataTypes.FIELD("i", DataTypes.INT()),
                                                       DataTypes.FIELD("l", DataTypes.BIGINT())]))
    q = t.group_by(col("i")).select(col("i"), col("i").sum.alias("si"), col("l").sum.alias("sl"))
    assert [str(x) for x in q.get_schema().get_field_data_types()] == ["INT", "INT", "BIGINT"]
    node = q._node
    while not hasattr(node, "calls") or not node.calls:
        node = node.input
    assert [c.bits for c in node.calls] == [32, 64]


# -- BYTES in DDL, DATE_FORMAT with Java SimpleDateFormat patterns ----------------------------------


def test_ddl_reads_bytes_as_varbinary_of_max_length(t_env: TableEnvironment) -> None:
    t_env.execute_sql("CREATE TABLE bin_t (b BYTES, v VARBINARY(3), f BINARY(2)) "
                      "WITH ('connector' = 'blackhole')")
    types = t_env.from_path("bin_t").get_schema().get_field_data_types()
    assert types[0] == DataTypes.BYTES() == DataTypes.VARBINARY(2147483647)
    assert [str(t) for t in types] == ["BYTES", "VARBINARY(3)", "BINARY(2)"]
    q = t_env.sql_query("SELECT CAST(v AS BYTES) AS c FROM bin_t")
    assert [str(t) for t in q.get_schema().get_field_data_types()] == ["BYTES"]


TS = [("ts", DataTypes.TIMESTAMP(3)), ("txt", DataTypes.STRING())]
WHEN = __import__("datetime").datetime(2024, 3, 5, 14, 7, 9, 45000)  # a Tuesday, day 65 of 2024


@pytest.mark.parametrize("pattern, text", [
    ("yyyy-MM-dd HH:mm", "2024-03-05 14:07"),
    ("yyyy-MM-dd HH:mm:ss.SSS", "2024-03-05 14:07:09.045"),
    ("yy/M/d h:mm a", "24/3/5 2:07 PM"),
    ("EEE, d MMM yyyy", "Tue, 5 Mar 2024"),
    ("EEEE d MMMM", "Tuesday 5 March"),
    ("yyyy-MM-dd'T'HH:mm:ss", "2024-03-05T14:07:09"),
    ("h 'o''clock'", "2 o'clock"),
    ("D", "65"),
    ("yyyyMMdd", "20240305"),
])
def test_date_format_follows_simple_date_format(pattern: str, text: str, t_env: TableEnvironment) -> None:
    e = resolve(parse_expression(f"DATE_FORMAT(ts, '{pattern.replace(chr(39), chr(39) * 2)}')", t_env), TS)
    assert str(e.dtype) == "STRING"
    assert e.eval([WHEN, None]) == text


def test_date_format_of_timestamp_text_null_and_the_table_api(t_env: TableEnvironment) -> None:
    from millstream.table.expressions import date_format
    assert resolve(parse_expression("DATE_FORMAT(txt, 'HH:mm')", t_env), TS).eval([None, "2024-03-05 14:07:09"]) == "14:07"
    assert resolve(parse_expression("DATE_FORMAT(ts, 'yyyy')", t_env), TS).eval([None, None]) is None
    assert resolve(date_format(col("ts"), "dd.MM.yyyy"), TS).eval([WHEN, None]) == "05.03.2024"


def test_date_format_refuses_an_unknown_letter_and_a_non_timestamp(t_env: TableEnvironment) -> None:
    with pytest.raises(ValidationException, match="pattern letter 'q'"):
        resolve(parse_expression("DATE_FORMAT(ts, 'yyyy-qq')", t_env), TS)
    with pytest.raises(ValidationException, match="DATE_FORMAT takes"):
        resolve(parse_expression("DATE_FORMAT(1, 'yyyy')", t_env), TS)


def test_invert_is_pyflinks_is_not_true_while_sql_not_is_three_valued(t_env: TableEnvironment) -> None:
    """PyFlink maps ``~expr`` to isNotTrue (NULL gives TRUE); SQL's NOT NULL is NULL."""
    cols = [("f", DataTypes.BOOLEAN())]
    rows = [[True], [False], [None]]
    invert = resolve(~col("f"), cols)
    assert [invert.eval(r) for r in rows] == [False, True, True]
    assert str(invert.dtype) == "BOOLEAN NOT NULL"
    assert [resolve(col("f").is_not_false, cols).eval(r) for r in rows] == [True, False, True]
    assert [resolve(parse_expression("NOT f", t_env), cols).eval(r) for r in rows] == [False, True, None]
    assert [resolve(parse_expression("f IS TRUE", t_env), cols).eval(r) for r in rows] == [True, False, False]
    assert [resolve(parse_expression("f IS NOT TRUE", t_env), cols).eval(r) for r in rows] == [False, True, True]
    assert [resolve(parse_expression("f IS FALSE", t_env), cols).eval(r) for r in rows] == [False, True, False]
    assert [resolve(parse_expression("f IS NOT FALSE", t_env), cols).eval(r) for r in rows] == [True, False, True]
