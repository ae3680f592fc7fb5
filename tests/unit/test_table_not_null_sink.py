"""A sink column declared NOT NULL (Flink's ConstraintEnforcer, `table.exec.sink.not-null-enforcer`):
DDL keeps the constraint in the column's type, an INSERT whose query may write NULL there gets the
enforcer, ERROR fails with Flink's message naming the column, DROP drops the row."""
from __future__ import annotations

import pytest

from millstream.common.row import Row
from millstream.table import DataTypes, EnvironmentSettings, TableEnvironment
from millstream.table.expression import TableException
from millstream.table.table_environment import NotNullEnforcer, _not_null_enforcer


def _env() -> TableEnvironment:
    t_env = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
    t_env.execute_sql("CREATE TABLE s (id INT NOT NULL, name STRING NOT NULL, note STRING NULL, x BIGINT) "
                      "WITH ('connector' = 'blackhole')")
    return t_env


def test_ddl_not_null_is_the_columns_type() -> None:
    columns = dict(_env()._sink_table("s").columns)
    assert [columns[c].nullable for c in ("id", "name", "note", "x")] == [False, False, True, True]
    assert str(columns["id"]) == "INT NOT NULL"


def test_only_not_null_columns_a_nullable_query_column_feeds_are_enforced() -> None:
    t_env = _env()
    query = [("a", DataTypes.INT(False)), ("b", DataTypes.STRING()), ("c", DataTypes.STRING()), ("d", DataTypes.BIGINT())]
    enforcer = _not_null_enforcer(t_env._sink_table("s"), query, t_env._env)
    assert enforcer is not None and enforcer.columns == [(1, "name")] and not enforcer.drop
    assert enforcer.describe() == "ConstraintEnforcer[NotNullEnforcer(fields=[name])]"
    query[1] = ("b", DataTypes.STRING(False))
    assert _not_null_enforcer(t_env._sink_table("s"), query, t_env._env) is None  # nothing can be NULL there
    query[1] = ("b", DataTypes.STRING())
    t_env.get_config().set("table.exec.sink.not-null-enforcer", "drop")
    assert _not_null_enforcer(t_env._sink_table("s"), query, t_env._env).drop


def test_error_names_the_column_and_drop_drops_the_row() -> None:
    error, drop = NotNullEnforcer([(0, "id"), (1, "name")], False), NotNullEnforcer([(1, "name")], True)
    assert error(Row(1, "a")) and drop(Row(1, "a"))
    assert not drop(Row(1, None))
    with pytest.raises(TableException) as raised:
        error(Row(1, None))
    assert str(raised.value) == (
        "Column 'name' is NOT NULL, however, a null value is being written into it. You can set job configuration "
        "'table.exec.sink.not-null-enforcer'='DROP' to suppress this exception and drop such records silently.")
