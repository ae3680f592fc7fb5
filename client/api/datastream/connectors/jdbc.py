"""``JdbcSink`` to PostgreSQL, with PyFlink's names (``pyflink.datastream.connectors.jdbc``).

    ds.add_sink(JdbcSink.sink(
        "INSERT INTO books (id, title) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET title = EXCLUDED.title",
        Types.ROW([Types.INT(), Types.STRING()]),
        JdbcConnectionOptions.JdbcConnectionOptionsBuilder()
            .with_url("jdbc:postgresql://localhost:5432/library")
            .with_driver_name("org.postgresql.Driver")
            .with_user_name("flink").with_password("secret").build(),
        JdbcExecutionOptions.builder().with_batch_size(1000).with_batch_interval_ms(200).build()))

The database is PostgreSQL, reached through psycopg 3 (no Java driver): the JDBC URL becomes libpq
connection parameters and each ``?`` of the SQL a PostgreSQL placeholder bound from the record's
fields by the RowTypeInfo's types. ``JdbcSink.sink`` is at-least-once (batches executed on size,
interval, checkpoints and the end of input; transient failures retried). ``exactly_once_sink``
takes Flink's arguments, with the connection options in place of Java's XADataSource supplier:
one prepared transaction per checkpoint and subtask, committed when the checkpoint completes
(the server needs ``max_prepared_transactions > 0``).
"""
from __future__ import annotations

from typing import Any

from millstream.common.typeinfo import TypeInformation
from millstream.datastream.functions import SinkFunction
from millstream.runtime import jdbc_postgres, operator_factories

__all__ = ["JdbcSink", "JdbcConnectionOptions", "JdbcExecutionOptions", "JdbcExactlyOnceOptions"]


class JdbcConnectionOptions:
    """Where the sink connects: a ``jdbc:postgresql:`` URL, the driver name and credentials."""

    def __init__(self, url: str, driver_name: str | None, user_name: str | None, password: str | None) -> None:
        self._url, self._driver_name, self._user_name, self._password = url, driver_name, user_name, password

    def get_db_url(self) -> str:
        return self._url

    def get_driver_name(self) -> str | None:
        return self._driver_name

    def get_user_name(self) -> str | None:
        return self._user_name

    def get_password(self) -> str | None:
        return self._password

    class JdbcConnectionOptionsBuilder:
        def __init__(self) -> None:
            self._url: str | None = None
            self._driver_name: str | None = None
            self._user_name: str | None = None
            self._password: str | None = None

        def with_url(self, url: str) -> "JdbcConnectionOptions.JdbcConnectionOptionsBuilder":
            self._url = url
            return self

        def with_driver_name(self, driver_name: str) -> "JdbcConnectionOptions.JdbcConnectionOptionsBuilder":
            self._driver_name = driver_name
            return self

        def with_user_name(self, user_name: str) -> "JdbcConnectionOptions.JdbcConnectionOptionsBuilder":
            self._user_name = user_name
            return self

        def with_password(self, password: str) -> "JdbcConnectionOptions.JdbcConnectionOptionsBuilder":
            self._password = password
            return self

        def build(self) -> "JdbcConnectionOptions":
            """Checks the URL and driver now (Flink's builder requires a URL), so a typo fails
            where the job is written, not on the cluster."""
            if not self._url:
                raise ValueError("JdbcConnectionOptions needs a URL (with_url('jdbc:postgresql://host:port/db'))")
            jdbc_postgres.parse_url(self._url)
            jdbc_postgres.check_driver(self._driver_name, self._url)
            return JdbcConnectionOptions(self._url, self._driver_name, self._user_name, self._password)


class JdbcExecutionOptions:
    """Batching and retries: Flink's defaults are a batch of 5000, no interval, 3 retries."""

    def __init__(self, batch_interval_ms: int = 0, batch_size: int = 5000, max_retries: int = 3) -> None:
        for name, value in (("batch_interval_ms", batch_interval_ms), ("batch_size", batch_size),
                            ("max_retries", max_retries)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"JdbcExecutionOptions' {name} must be an int, got {type(value).__name__} {value!r}")
        if max_retries < 0:
            raise ValueError(f"JdbcExecutionOptions' max_retries must be >= 0, got {max_retries}")
        if batch_interval_ms < 0:
            raise ValueError(f"JdbcExecutionOptions' batch_interval_ms must be >= 0, got {batch_interval_ms}")
        self._batch_interval_ms, self._batch_size, self._max_retries = batch_interval_ms, batch_size, max_retries

    def get_batch_interval_ms(self) -> int:
        return self._batch_interval_ms

    def get_batch_size(self) -> int:
        return self._batch_size

    def get_max_retries(self) -> int:
        return self._max_retries

    @staticmethod
    def defaults() -> "JdbcExecutionOptions":
        return JdbcExecutionOptions()

    @staticmethod
    def builder() -> "JdbcExecutionOptions.Builder":
        return JdbcExecutionOptions.Builder()

    class Builder:
        def __init__(self) -> None:
            self._interval_ms, self._size, self._max_retries = 0, 5000, 3

        def with_batch_size(self, size: int) -> "JdbcExecutionOptions.Builder":
            self._size = size
            return self

        def with_batch_interval_ms(self, interval_ms: int) -> "JdbcExecutionOptions.Builder":
            self._interval_ms = interval_ms
            return self

        def with_max_retries(self, max_retries: int) -> "JdbcExecutionOptions.Builder":
            self._max_retries = max_retries
            return self

        def build(self) -> "JdbcExecutionOptions":
            return JdbcExecutionOptions(self._interval_ms, self._size, self._max_retries)


class JdbcExactlyOnceOptions:
    """Flink's exactly-once options: roll back this subtask's unknown prepared transactions on
    recovery (default true), commit attempts per transaction (3), go on past a failed commit (false),
    a transaction timeout in seconds (PostgreSQL 17's ``transaction_timeout``; unset by default),
    and a connection per transaction (PostgreSQL's prepared transactions outlive their session,
    so one writer connection serves every checkpoint either way)."""

    def __init__(self, recovered_and_rollback: bool = True, max_commit_attempts: int = 3,
                 allow_out_of_order_commits: bool = False, timeout_sec: int | None = None,
                 transaction_per_connection: bool = False) -> None:
        if isinstance(max_commit_attempts, bool) or not isinstance(max_commit_attempts, int) or max_commit_attempts <= 0:
            raise ValueError(f"max_commit_attempts should be > 0, got {max_commit_attempts!r}")
        if timeout_sec is not None and (not isinstance(timeout_sec, int) or timeout_sec <= 0):
            raise ValueError(f"timeout_sec must be a positive int or None, got {timeout_sec!r}")
        self._recovered_and_rollback = bool(recovered_and_rollback)
        self._max_commit_attempts = max_commit_attempts
        self._allow_out_of_order_commits = bool(allow_out_of_order_commits)
        self._timeout_sec = timeout_sec
        self._transaction_per_connection = bool(transaction_per_connection)

    def is_discover_and_rollback_on_recovery(self) -> bool:
        return self._recovered_and_rollback

    def get_max_commit_attempts(self) -> int:
        return self._max_commit_attempts

    def is_allow_out_of_order_commits(self) -> bool:
        return self._allow_out_of_order_commits

    def get_timeout_sec(self) -> int | None:
        return self._timeout_sec

    def is_transaction_per_connection(self) -> bool:
        return self._transaction_per_connection

    @staticmethod
    def defaults() -> "JdbcExactlyOnceOptions":
        return JdbcExactlyOnceOptions()

    @staticmethod
    def builder() -> "JdbcExactlyOnceOptions.Builder":
        return JdbcExactlyOnceOptions.Builder()

    class Builder:
        def __init__(self) -> None:
            self._values: dict[str, Any] = {}

        def with_recovered_and_rollback(self, recovered_and_rollback: bool) -> "JdbcExactlyOnceOptions.Builder":
            self._values["recovered_and_rollback"] = recovered_and_rollback
            return self

        def with_max_commit_attempts(self, max_commit_attempts: int) -> "JdbcExactlyOnceOptions.Builder":
            self._values["max_commit_attempts"] = max_commit_attempts
            return self

        def with_allow_out_of_order_commits(self, allow: bool) -> "JdbcExactlyOnceOptions.Builder":
            self._values["allow_out_of_order_commits"] = allow
            return self

        def with_timeout_sec(self, timeout_sec: int | None) -> "JdbcExactlyOnceOptions.Builder":
            self._values["timeout_sec"] = timeout_sec
            return self

        def with_transaction_per_connection(self, transaction_per_connection: bool) -> "JdbcExactlyOnceOptions.Builder":
            self._values["transaction_per_connection"] = transaction_per_connection
            return self

        def build(self) -> "JdbcExactlyOnceOptions":
            return JdbcExactlyOnceOptions(**self._values)


def _field_types(sql: str, type_info: Any) -> tuple[TypeInformation, ...]:
    """The row type's fields, checked against the SQL's placeholders and the bindable types."""
    if not isinstance(type_info, TypeInformation) or type_info.name not in ("ROW", "TUPLE"):
        raise TypeError(f"JdbcSink for {sql!r} needs a row type (Types.ROW([...])) for its fields, got {type_info!r}")
    _, placeholders = jdbc_postgres.translate_placeholders(sql)
    fields = tuple(type_info.components)
    if placeholders != len(fields):
        raise ValueError(f"JdbcSink: {sql!r} has {placeholders} placeholders (?) but the row type {type_info} "
                         f"has {len(fields)} fields")
    jdbc_postgres.field_kinds(sql, fields)
    return fields


class JdbcSink(SinkFunction):
    """A JDBC sink (use with ``add_sink``). Built by :meth:`sink` or :meth:`exactly_once_sink`."""

    def __init__(self, factory: operator_factories.JdbcSinkFactory) -> None:
        self._factory = factory

    @staticmethod
    def sink(sql: str, type_info: TypeInformation, jdbc_connection_options: JdbcConnectionOptions,
             jdbc_execution_options: JdbcExecutionOptions | None = None) -> "JdbcSink":
        """An at-least-once sink executing ``sql`` (any DML, e.g. an upsert) per record, in batches."""
        options = jdbc_execution_options or JdbcExecutionOptions.defaults()
        return JdbcSink(JdbcSink._factory_for(sql, type_info, jdbc_connection_options, options))

    @staticmethod
    def exactly_once_sink(sql: str, type_info: TypeInformation, jdbc_execution_options: JdbcExecutionOptions,
                          jdbc_exactly_once_options: JdbcExactlyOnceOptions,
                          jdbc_connection_options: JdbcConnectionOptions) -> "JdbcSink":
        """Flink's ``JdbcSink.exactlyOnceSink(sql, statementBuilder, executionOptions,
        exactlyOnceOptions, dataSourceSupplier)``: the row type in place of the statement builder,
        the connection options in place of the XADataSource supplier. As Flink's, it requires
        ``max_retries`` 0: a retried batch could write its records twice (FLINK-22311)."""
        if jdbc_execution_options.get_max_retries() != 0:
            raise ValueError("JDBC exactly-once sink requires maxRetries equal to 0, otherwise it could cause "
                             "duplicates: build the JdbcExecutionOptions with with_max_retries(0)")
        if not isinstance(jdbc_exactly_once_options, JdbcExactlyOnceOptions):
            raise TypeError(f"exactly_once_sink needs JdbcExactlyOnceOptions, got {type(jdbc_exactly_once_options).__name__}")
        factory = JdbcSink._factory_for(sql, type_info, jdbc_connection_options, jdbc_execution_options)
        o = jdbc_exactly_once_options
        factory.exactly_once = True
        factory.recovered_and_rollback = o.is_discover_and_rollback_on_recovery()
        factory.max_commit_attempts = o.get_max_commit_attempts()
        factory.allow_out_of_order_commits = o.is_allow_out_of_order_commits()
        factory.timeout_sec = o.get_timeout_sec()
        return JdbcSink(factory)

    @staticmethod
    def _factory_for(sql: str, type_info: TypeInformation, connection: JdbcConnectionOptions,
                     execution: JdbcExecutionOptions) -> operator_factories.JdbcSinkFactory:
        if not isinstance(sql, str) or not sql.strip():
            raise ValueError(f"JdbcSink needs an SQL statement, got {sql!r}")
        if not isinstance(connection, JdbcConnectionOptions):
            raise TypeError(f"JdbcSink needs JdbcConnectionOptions, got {type(connection).__name__}")
        if not isinstance(execution, JdbcExecutionOptions):
            raise TypeError(f"JdbcSink needs JdbcExecutionOptions, got {type(execution).__name__}")
        return operator_factories.JdbcSinkFactory(
            sql=sql, field_types=_field_types(sql, type_info), url=connection.get_db_url(),
            driver_name=connection.get_driver_name(), user_name=connection.get_user_name(),
            password=connection.get_password(), batch_size=execution.get_batch_size(),
            batch_interval_ms=execution.get_batch_interval_ms(), max_retries=execution.get_max_retries())

    def _sink_factory(self) -> operator_factories.SinkFactory:
        return self._factory

    def invoke(self, value: Any, context: Any = None) -> None:
        """Not called: ``add_sink`` runs this sink as its own operator (``_sink_factory``), which
        batches and commits as Flink's JdbcSink does."""
        raise RuntimeError("JdbcSink writes through its batching operator: add it with add_sink, not by calling invoke")
