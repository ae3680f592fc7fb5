"""SQL's CASE / IF and the Table API's if_then_else, evaluated on rows (the row path), with
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


def test_table_api_if_then_else_is_pyflinks_ternary() -> None:
    e = resolve((col("a") > 0).if_then_else(col("b"), lit(-1)), COLS)
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
