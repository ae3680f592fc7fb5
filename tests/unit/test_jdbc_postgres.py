"""The JDBC sink's pure parts: PgJDBC's URL forms as libpq parameters, ``?`` placeholders as
PostgreSQL's ``$n`` (not inside literals, identifiers or comments; ``??`` is a literal ``?``), field
types and value checks, Flink's batching decisions (size, interval) and retry waits, and the user
API's builders and checks (PyFlink's names; Flink's defaults and preconditions)."""
from __future__ import annotations

import datetime
import decimal

import pytest

from millstream.common import Row, Types
from millstream.datastream.connectors.jdbc import (
    JdbcConnectionOptions,
    JdbcExactlyOnceOptions,
    JdbcExecutionOptions,
    JdbcSink,
)
from millstream.runtime import jdbc_postgres as pg


# -- URLs ------------------------------------------------------------------------------------------


def test_host_port_database_url() -> None:
    target = pg.parse_url("jdbc:postgresql://db.example:6543/shop")
    assert target.hosts == (("db.example", 6543),) and target.database == "shop"
    assert target.address == "db.example:6543"
    info = target.conninfo("alice", "pw")
    assert info["host"] == "db.example" and info["port"] == "6543" and info["dbname"] == "shop"
    assert info["user"] == "alice" and info["password"] == "pw"
    assert info["connect_timeout"] == "10"  # PgJDBC's default connectTimeout


@pytest.mark.parametrize("url, hosts, database", [
    ("jdbc:postgresql:shop", (("localhost", 5432),), "shop"),
    ("jdbc:postgresql:/", (("localhost", 5432),), None),
    ("jdbc:postgresql://db/", (("db", 5432),), None),
    ("jdbc:postgresql://db", (("db", 5432),), None),
    ("jdbc:postgresql://[::1]:5433/x", (("::1", 5433),), "x"),
    ("jdbc:postgresql://a:1,b:2/x", (("a", 1), ("b", 2)), "x"),
])
def test_pgjdbc_url_forms(url: str, hosts: tuple, database: str | None) -> None:
    target = pg.parse_url(url)
    assert target.hosts == hosts and target.database == database
    assert "dbname" not in target.conninfo() if database is None else target.conninfo()["dbname"] == database


def test_url_parameters_become_libpq_parameters() -> None:
    info = pg.parse_url("jdbc:postgresql://h/d?user=u&password=p%26q&connectTimeout=3&ApplicationName=app"
                        "&sslmode=require&currentSchema=s1").conninfo()
    assert info["user"] == "u" and info["password"] == "p&q" and info["connect_timeout"] == "3"
    assert info["application_name"] == "app" and info["sslmode"] == "require"
    assert info["options"] == "-c search_path=s1"
    assert pg.parse_url("jdbc:postgresql://h/d?ssl=true").conninfo()["sslmode"] == "verify-full"
    # the builder's credentials win over the URL's
    assert pg.parse_url("jdbc:postgresql://h/d?user=u").conninfo("v")["user"] == "v"


@pytest.mark.parametrize("url, says", [
    ("jdbc:mysql://h:3306/d", "not a PostgreSQL URL"),
    ("postgresql://h/d", "not a PostgreSQL URL"),
    ("jdbc:postgresql://h:port/d", "'port' of host 'h' is not a port number"),
    ("jdbc:postgresql://h:70000/d", "is not a port number"),
    ("jdbc:postgresql://h/d?socketFactory=x", "parameter 'socketFactory' is not supported"),
])
def test_bad_urls_say_what_is_wrong(url: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        pg.parse_url(url)


def test_only_the_postgresql_driver() -> None:
    pg.check_driver(None, "u")
    pg.check_driver("org.postgresql.Driver", "u")
    with pytest.raises(ValueError, match="'com.mysql.cj.jdbc.Driver' is not supported"):
        pg.check_driver("com.mysql.cj.jdbc.Driver", "jdbc:postgresql://h/d")


# -- placeholders ----------------------------------------------------------------------------------


@pytest.mark.parametrize("sql, expected, count", [
    ("INSERT INTO t (a, b) VALUES (?, ?)", "INSERT INTO t (a, b) VALUES ($1, $2)", 2),
    ("INSERT INTO t VALUES (?, '?', \"?\")", "INSERT INTO t VALUES ($1, '?', \"?\")", 1),
    ("SELECT 'it''s ?', ?", "SELECT 'it''s ?', $1", 1),
    ("SELECT E'a\\'?', ?", "SELECT E'a\\'?', $1", 1),
    ("SELECT ? -- a ? here\n, ?", "SELECT $1 -- a ? here\n, $2", 2),
    ("SELECT /* ? /* ? */ ? */ ?", "SELECT /* ? /* ? */ ? */ $1", 1),
    ("SELECT $$ ? $$, $tag$ ?$$? $tag$, ?", "SELECT $$ ? $$, $tag$ ?$$? $tag$, $1", 1),
    ("SELECT data ?? 'k', ?", "SELECT data ? 'k', $1", 1),
    ("SELECT 5 % 2, ?", "SELECT 5 % 2, $1", 1),
    ("UPDATE t SET v = ? WHERE k = ?", "UPDATE t SET v = $1 WHERE k = $2", 2),
])
def test_placeholders(sql: str, expected: str, count: int) -> None:
    assert pg.translate_placeholders(sql) == (expected, count)


@pytest.mark.parametrize("sql, says", [
    ("SELECT 'open", "unterminated string literal"),
    ('SELECT "open', "unterminated quoted identifier"),
    ("SELECT /* open", "unterminated comment"),
    ("SELECT $x$ open", r"unterminated dollar-quoted string \$x\$"),
])
def test_unterminated_sql_is_named(sql: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        pg.translate_placeholders(sql)


# -- field types and values -------------------------------------------------------------------------


def test_field_types_map_to_postgresql_parameter_types() -> None:
    types = [Types.INT(), Types.LONG(), Types.STRING(), Types.DOUBLE(), Types.BOOLEAN(), Types.SQL_TIMESTAMP(),
             Types.BIG_DEC(), Types.SQL_DATE(), Types.PRIMITIVE_ARRAY(Types.BYTE())]
    assert pg.field_kinds("s", types) == ("int4", "int8", "text", "float8", "bool", "timestamp", "numeric", "date", "bytea")
    with pytest.raises(ValueError, match=r"field 1 has type LIST<INT>, which a JDBC statement cannot bind"):
        pg.field_kinds("s", [Types.INT(), Types.LIST(Types.INT())])


def test_records_bind_positionally_with_checks() -> None:
    kinds = pg.field_kinds("s", [Types.INT(), Types.STRING(), Types.DOUBLE(), Types.BOOLEAN(), Types.SQL_TIMESTAMP()])
    ts = datetime.datetime(2026, 1, 2, 3, 4, 5)
    assert pg.bind_record(Row(1, "a", 2, True, ts), kinds) == (1, "a", 2.0, True, ts)
    assert pg.bind_record((1, None, 2.5, False, None), kinds) == (1, None, 2.5, False, None)
    assert pg.bind_record([7, "x", 1.0, True, ts], kinds)[0] == 7
    assert pg.bind_record((1,), pg.field_kinds("s", [Types.BIG_DEC()])) == (decimal.Decimal(1),)
    with pytest.raises(TypeError, match=r"field 0 \(int4\) of .*expected an int, got str 'x'"):
        pg.bind_record(("x", "a", 1.0, True, ts), kinds)
    with pytest.raises(TypeError, match="does not fit a 32-bit integer"):
        pg.bind_record((2**31, "a", 1.0, True, ts), kinds)
    with pytest.raises(TypeError, match=r"field 3 \(bool\).*expected bool, got int 1"):
        pg.bind_record((1, "a", 1.0, 1, ts), kinds)
    with pytest.raises(TypeError, match="expected 5 fields, got 2"):
        pg.bind_record((1, "a"), kinds)
    with pytest.raises(TypeError, match="expected a Row or tuple of 5 fields, got int"):
        pg.bind_record(5, kinds)


# -- batching and retries ------------------------------------------------------------------------------


def test_batch_policy_size_and_interval() -> None:
    policy = pg.BatchPolicy(size=3, interval_ms=200)
    assert not policy.full(2) and policy.full(3)
    assert policy.timed
    assert policy.next_due_ms(0, 1000) is None  # nothing buffered: no timer
    assert policy.next_due_ms(1, 1000) == 1200
    assert not pg.BatchPolicy(size=1, interval_ms=200).timed  # every record executes at once
    assert not pg.BatchPolicy(size=10, interval_ms=0).timed
    assert pg.BatchPolicy(size=10, interval_ms=0).next_due_ms(5, 0) is None
    assert not pg.BatchPolicy(size=0, interval_ms=0).full(10**6)  # size <= 0: never on size


def test_retry_waits_and_transient_errors() -> None:
    assert [pg.retry_delay_s(a) for a in (1, 2, 3)] == [0.0, 1.0, 2.0]  # Flink's 1000 * i ms
    assert pg.is_transient(None, connection_broken=True)
    assert pg.is_transient("08006", False) and pg.is_transient("40001", False) and pg.is_transient("57P01", False)
    assert not pg.is_transient("42P01", False)  # undefined table: the same again
    assert not pg.is_transient("23505", False)  # unique violation
    assert not pg.is_transient(None, False)


# -- the user API ------------------------------------------------------------------------------------------


def _connection(url: str = "jdbc:postgresql://localhost:5432/db") -> JdbcConnectionOptions:
    return (JdbcConnectionOptions.JdbcConnectionOptionsBuilder().with_url(url)
            .with_driver_name("org.postgresql.Driver").with_user_name("u").with_password("p").build())


def test_builders_keep_pyflinks_getters_and_flinks_defaults() -> None:
    c = _connection()
    assert (c.get_db_url(), c.get_driver_name(), c.get_user_name(), c.get_password()) == (
        "jdbc:postgresql://localhost:5432/db", "org.postgresql.Driver", "u", "p")
    d = JdbcExecutionOptions.defaults()
    assert (d.get_batch_interval_ms(), d.get_batch_size(), d.get_max_retries()) == (0, 5000, 3)
    e = JdbcExecutionOptions.builder().with_batch_interval_ms(200).with_batch_size(10).with_max_retries(1).build()
    assert (e.get_batch_interval_ms(), e.get_batch_size(), e.get_max_retries()) == (200, 10, 1)
    x = JdbcExactlyOnceOptions.defaults()
    assert x.is_discover_and_rollback_on_recovery() and x.get_max_commit_attempts() == 3
    assert not x.is_allow_out_of_order_commits() and x.get_timeout_sec() is None
    with pytest.raises(ValueError, match="max_commit_attempts should be > 0"):
        JdbcExactlyOnceOptions.builder().with_max_commit_attempts(0).build()
    with pytest.raises(ValueError, match="max_retries must be >= 0"):
        JdbcExecutionOptions.builder().with_max_retries(-1).build()


def test_connection_options_are_checked_when_built() -> None:
    with pytest.raises(ValueError, match="needs a URL"):
        JdbcConnectionOptions.JdbcConnectionOptionsBuilder().build()
    with pytest.raises(ValueError, match="not a PostgreSQL URL"):
        _connection("jdbc:mysql://h/d")
    with pytest.raises(ValueError, match="'org.h2.Driver' is not supported"):
        JdbcConnectionOptions.JdbcConnectionOptionsBuilder().with_url("jdbc:postgresql://h/d").with_driver_name(
            "org.h2.Driver").build()


def test_sink_checks_placeholders_against_the_row_type() -> None:
    row = Types.ROW([Types.INT(), Types.STRING()])
    sink = JdbcSink.sink("INSERT INTO t VALUES (?, ?)", row, _connection())
    factory = sink._sink_factory()
    assert factory.batch_size == 5000 and factory.max_retries == 3 and not factory.exactly_once
    with pytest.raises(ValueError, match=r"has 3 placeholders \(\?\) but the row type .* has 2 fields"):
        JdbcSink.sink("INSERT INTO t VALUES (?, ?, ?)", row, _connection())
    with pytest.raises(TypeError, match="needs a row type"):
        JdbcSink.sink("INSERT INTO t VALUES (?)", Types.INT(), _connection())


def test_exactly_once_sink_requires_no_retries_as_flinks() -> None:
    row = Types.ROW([Types.INT()])
    with pytest.raises(ValueError, match="requires maxRetries equal to 0"):
        JdbcSink.exactly_once_sink("INSERT INTO t VALUES (?)", row, JdbcExecutionOptions.defaults(),
                                   JdbcExactlyOnceOptions.defaults(), _connection())
    sink = JdbcSink.exactly_once_sink(
        "INSERT INTO t VALUES (?)", row, JdbcExecutionOptions.builder().with_max_retries(0).build(),
        JdbcExactlyOnceOptions.builder().with_max_commit_attempts(5).build(), _connection())
    factory = sink._sink_factory()
    assert factory.exactly_once and factory.max_commit_attempts == 5 and factory.recovered_and_rollback


# -- the exactly-once sink's prepared transactions ------------------------------------------------------


def test_gids_name_job_operator_subtask_writer_and_checkpoint() -> None:
    family, writer = "a" * 16, "b" * 16
    assert pg.make_gid(family, 3, writer, 42) == f"millstream-{family}-3-{writer}-42"
    with pytest.raises(ValueError, match="not a gid"):
        pg.make_gid("short", 0, writer, 1)


def test_a_writer_rolls_back_only_other_writers_transactions_of_the_subtasks_it_owns() -> None:
    mine, old, other_job = "f" * 16, "e" * 16, "0" * 16
    me, failed = "1" * 16, "2" * 16
    prepared = [
        pg.make_gid(mine, 0, me, 7),          # this writer's own: pending its checkpoint
        pg.make_gid(mine, 0, failed, 6),      # a failed attempt of this subtask: roll back
        pg.make_gid(mine, 1, failed, 6),      # another subtask's: it cleans up its own
        pg.make_gid(old, 2, failed, 5),       # a restored state's subtask (rescaled): owned, roll back
        pg.make_gid(other_job, 0, failed, 6),  # another job or operator
        "someone-elses-transaction",
    ]
    owned = {(mine, 0), (old, 2)}
    assert pg.gids_to_roll_back(prepared, owned, me) == [prepared[1], prepared[3]]
    assert pg.gids_to_roll_back(prepared, {(mine, 0)}, me) == [prepared[1]]
