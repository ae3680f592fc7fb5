"""``TableEnvironment`` / ``StreamTableEnvironment``: a catalog of tables and functions over one
StreamExecutionEnvironment, and where a table's plan is optimized, translated and run."""
from __future__ import annotations

import itertools
import re
from typing import Any, Iterable, Sequence

from millstream.common.row import Row
from millstream.datastream.execution_mode import RuntimeExecutionMode
from millstream.datastream.stream_execution_environment import StreamExecutionEnvironment
from millstream.common.typeinfo import Types
from millstream.table import pandas_conversion as pc
from millstream.table import plan as p
from millstream.table import sql
from millstream.table.connectors import ConnectorTable
from millstream.table.explain_detail import ExplainDetail
from millstream.table.expression import Expression, TableException, ValidationException, builtin_names
from millstream.runtime import config as cfg
from millstream.table.planner import table_options, optimize, really_updating, translate
from millstream.table.table import Table
from millstream.table.table_descriptor import TableDescriptor
from millstream.table.table_result import ResultKind, TableResult
from millstream.table.types import DataType, DataTypes, Schema, infer_type, merge_inferred
from millstream.table.udf import (PandasAggregateFunctionWrapper, UserDefinedScalarFunctionWrapper,
                                  UserDefinedTableFunctionWrapper)

__all__ = ["EnvironmentSettings", "TableConfig", "TableEnvironment", "StreamTableEnvironment", "StatementSet"]

_anonymous = itertools.count(1)


class EnvironmentSettings:
    def __init__(self, streaming: bool = True) -> None:
        self._streaming = streaming

    @staticmethod
    def in_streaming_mode() -> "EnvironmentSettings":
        return EnvironmentSettings(True)

    @staticmethod
    def in_batch_mode() -> "EnvironmentSettings":
        return EnvironmentSettings(False)

    @staticmethod
    def new_instance() -> "EnvironmentSettings.Builder":
        return EnvironmentSettings.Builder()

    def is_streaming_mode(self) -> bool:
        return self._streaming

    class Builder:
        def __init__(self) -> None:
            self._streaming = True

        def in_streaming_mode(self) -> "EnvironmentSettings.Builder":
            self._streaming = True
            return self

        def in_batch_mode(self) -> "EnvironmentSettings.Builder":
            self._streaming = False
            return self

        def build(self) -> "EnvironmentSettings":
            return EnvironmentSettings(self._streaming)


class TableConfig:
    """Options of a TableEnvironment; ``parallelism.default`` sets the job's parallelism."""

    def __init__(self, env: StreamExecutionEnvironment) -> None:
        self._env = env
        self._options: dict[str, str] = {}

    def set(self, key: str, value: str) -> "TableConfig":
        self._options[key] = str(value)
        if key == "parallelism.default":
            self._env.set_parallelism(int(value))
        return self

    def get(self, key: str, default_value: Any = None) -> Any:
        return self._options.get(key, default_value)

    def get_configuration(self) -> dict[str, str]:
        return dict(self._options)


class TableEnvironment:
    """PyFlink's TableEnvironment: create with ``TableEnvironment.create(EnvironmentSettings...)``."""

    def __init__(self, env: StreamExecutionEnvironment, streaming: bool) -> None:
        self._env = env
        self._streaming = streaming
        if not streaming:
            env.set_runtime_mode(RuntimeExecutionMode.BATCH)
        self._config = TableConfig(env)
        env._table_config = self._config  # type: ignore[attr-defined]  # the planner reads table options
        self._tables: dict[str, Any] = {}  # name -> Table or ConnectorTable
        self._functions: dict[str, Any] = {}
        self._schemas: dict[str, Schema | None] = {}  # a connector table's schema: computed columns, watermark

    @staticmethod
    def create(environment_settings: EnvironmentSettings | Any = None) -> "TableEnvironment":
        settings = environment_settings or EnvironmentSettings.in_streaming_mode()
        if not isinstance(settings, EnvironmentSettings):
            raise TypeError(f"TableEnvironment.create takes EnvironmentSettings, got {settings!r}")
        return TableEnvironment(StreamExecutionEnvironment(), settings.is_streaming_mode())

    def get_config(self) -> TableConfig:
        return self._config

    # -- tables ---------------------------------------------------------------------------------
    def from_elements(self, elements: Iterable[Any], schema: Any = None, verify_schema: bool = True) -> Table:
        rows = [tuple(e) if isinstance(e, (tuple, list, Row)) else (e,) for e in elements]
        if isinstance(schema, DataType):
            if schema.root != "ROW":
                raise TypeError(f"from_elements: the schema must be a ROW type, got {schema}")
            columns = [(f.name, f.data_type) for f in schema.fields]
        else:
            width = len(rows[0]) if rows else len(schema or ())
            names = list(schema) if schema else [f"_{i + 1}" for i in range(width)]
            types = [DataTypes.NULL()] * len(names)
            for r in rows:
                if len(r) != len(names):
                    raise ValueError(f"from_elements: the row {r!r} has {len(r)} fields, the schema {names}")
                types = [merge_inferred(t, infer_type(v)) for t, v in zip(types, r)]
            columns = [(n, DataTypes.STRING() if t.root == "NULL" else t) for n, t in zip(names, types)]
        for r in rows:
            if len(r) != len(columns):
                raise ValueError(f"from_elements: the row {r!r} has {len(r)} fields, the schema {len(columns)}")
        name = f"*anonymous_python-input-format${next(_anonymous)}*"
        return Table(p.Values(tuple(columns), tuple(rows), name), self)

    def from_pandas(self, pdf: Any, schema: Any = None, splits_num: int = 1) -> Table:
        """A table of a pandas DataFrame (millstream.table.pandas_conversion says how)."""
        columns = pc.dataframe_columns(pdf, schema)
        rows = pc.dataframe_rows(pdf, columns)
        slices = pc.splits(rows, splits_num)
        name = f"*anonymous_python-input-format${next(_anonymous)}*"
        if len(slices) <= 1:
            return Table(p.Values(tuple(columns), tuple(rows), name), self)
        parts = self._env.from_collection(slices, type_info=Types.PICKLED_BYTE_ARRAY()).rebalance()
        stream = parts.flat_map(pc.SplitReader()).set_parallelism(len(slices)).name(f"Source: {name}")
        return Table(p.StreamScan(tuple(columns), stream, name), self)

    def from_path(self, path: str) -> Table:
        entry = self._tables.get(path)
        if entry is None:
            raise ValidationException(f"Object '{path}' not found")
        if isinstance(entry, ConnectorTable):
            scan = Table(p.ConnectorScan(tuple(entry.columns), entry.path, entry, entry.is_bounded()), self)
            schema = self._schemas.get(path)
            return self._apply_schema(scan, schema, declared_only=True) if schema is not None else scan
        return entry

    def create_temporary_table(self, path: str, descriptor: TableDescriptor) -> None:
        if path in self._tables:
            raise ValidationException(f"Temporary table '{path}' already exists")
        schema = descriptor.get_schema()
        columns = schema.physical() if schema is not None else []
        self._tables[path] = ConnectorTable(path, columns, descriptor.get_options(),
                                            schema.primary_key if schema is not None else (), descriptor.partition_keys)
        self._schemas[path] = schema

    def create_temporary_view(self, view_path: str, table_or_data_stream: Any, *fields: Any) -> None:
        table = table_or_data_stream if isinstance(table_or_data_stream, Table) else \
            self.from_data_stream(table_or_data_stream, *fields)
        if view_path in self._tables:
            raise ValidationException(f"Temporary table '{view_path}' already exists")
        self._tables[view_path] = table

    def drop_temporary_view(self, view_path: str) -> bool:
        return self._tables.pop(view_path, None) is not None

    drop_temporary_table = drop_temporary_view

    def list_tables(self) -> list[str]:
        return sorted(self._tables)

    list_temporary_tables = list_tables

    def _register_anonymous(self, table: Table) -> str:
        name = f"UnnamedTable${len([n for n in self._tables if n.startswith('UnnamedTable$')])}"
        self._tables[name] = table
        return name

    # -- functions ------------------------------------------------------------------------------
    def create_temporary_function(self, path: str, function: Any) -> None:
        if not isinstance(function, (UserDefinedScalarFunctionWrapper, UserDefinedTableFunctionWrapper,
                                     PandasAggregateFunctionWrapper)):
            raise TypeError(f"create_temporary_function takes a udf, a udtf or a pandas udaf, got {function!r}")
        self._functions[path.lower()] = function

    create_temporary_system_function = create_temporary_function

    def _bind(self, e: Expression) -> Expression:
        """Resolves ``call('name', ...)`` to a registered function or a built-in."""
        args = tuple(self._bind(a) for a in e.args)
        if e.kind == "call_by_name":
            name = e.value.lower()
            if name in self._functions:
                return Expression("udf", args, self._functions[name])
            if name in builtin_names():
                return Expression("call", args, name)
            raise ValidationException(f"No match found for function signature {e.value}()")
        return e if not e.args else Expression(e.kind, args, e.value, e.dtype)

    # -- DataStream interplay ---------------------------------------------------------------------
    def from_data_stream(self, data_stream: Any, *fields: Any) -> Table:
        """A table of a DataStream: its fields as columns (named by ``fields``), or as a ``Schema``
        says: declared physical columns (then only those, in the schema's order), computed columns
        (``column_by_expression``, SQL text) and a watermark, which makes its column the rowtime."""
        t = data_stream.get_type()
        schema = fields[0] if len(fields) == 1 and isinstance(fields[0], Schema) else None
        names = [] if schema is not None else [f.value if isinstance(f, Expression) else str(f) for f in fields]
        if t is not None and getattr(t, "name", None) == "ROW":
            field_names = list(t.field_names)
            types = [_type_of(ti) for ti in t.components]
            columns = list(zip(names or field_names, types))
        elif schema is not None and t is None and schema.physical():
            columns = schema.physical()  # an untyped stream: the schema says what its fields are
        else:
            columns = [((names or ["f0"])[0], _type_of(t))]
        table = Table(p.StreamScan(tuple(columns), data_stream, f"DataStream-{next(_anonymous)}"), self)
        return self._apply_schema(table, schema, declared_only=True) if schema is not None else table

    def _apply_schema(self, table: Table, schema: Schema, declared_only: bool) -> Table:
        """``table`` with ``schema``'s computed columns and watermark: a Calc computing the columns
        (the declared ones in the schema's order when ``declared_only`` and some are declared, else
        every column of ``table`` and the computed ones after them) and a WatermarkAssigner."""
        computed = [c for c in schema.columns if c.expression is not None]
        have = table._node.names
        declared = [c for c in schema.columns if c.data_type is not None]
        if not computed and not schema.watermarks and (not declared_only or not declared or
                                                       [c.name for c in declared] == have):
            return table
        items: list[Expression] = []
        if declared_only and declared:
            for c in schema.columns:
                if c.expression is None:
                    if c.name not in have:
                        raise ValidationException(f"Unable to find a field named '{c.name}' in the physical data "
                                                  f"type derived from the given type information: {have}")
                    items.append(Expression("col", value=c.name).cast(c.data_type)
                                 if c.data_type is not None and c.data_type != dict(table._node.columns)[c.name] else Expression("col", value=c.name))
                    if items[-1].kind == "cast":
                        items[-1] = items[-1].alias(c.name)
                else:
                    items.append(self._computed(c.expression).alias(c.name))
        else:
            items = [Expression("col", value=n) for n in have]
            items += [self._computed(c.expression).alias(c.name) for c in computed]
        out = table.select(*items)
        for column, text in schema.watermarks:
            out = self._with_watermark(out, column, text)
        return out

    def _computed(self, e: Any) -> Expression:
        return self._bind(e) if isinstance(e, Expression) else sql.parse_expression(str(e), self)

    def _with_watermark(self, table: Table, column: str, text: str) -> Table:
        names = table._node.names
        if column not in names:
            raise ValidationException(f"Invalid column name '{column}' for rowtime attribute in watermark declaration. "
                                      f"Available columns are: {names}")
        index = names.index(column)
        dtype = table._node.columns[index][1]
        if dtype.root not in ("TIMESTAMP", "TIMESTAMP_LTZ") or (dtype.length or 0) > 3:
            raise ValidationException(f"Invalid data type of time field for watermark definition. The field must be of "
                                      f"type TIMESTAMP(p) or TIMESTAMP_LTZ(p), the supported precision 'p' is from 0 to "
                                      f"3, but the time field type is {dtype}")
        delay = sql.watermark_delay(text, column, self)
        columns = tuple((n, t.as_time_attr("ROWTIME") if i == index else t)
                        for i, (n, t) in enumerate(table._node.columns))
        return Table(p.WatermarkAssigner(columns, table._node, index, delay), self)

    def to_data_stream(self, table: Table) -> Any:
        if table._node.updating and self._streaming and _really_updating(table._node):
            raise TableException("Table sink '*anonymous_datastream_sink*' doesn't support consuming update "
                                 "changes: use to_changelog_stream for an updating table")
        return self._stream_of(table, named=True)

    def to_changelog_stream(self, table: Table) -> Any:
        return self._stream_of(table, named=True)

    def _stream_of(self, table: Table, named: bool) -> Any:
        stream = translate(optimize(table._node), self._env, not self._streaming)
        return stream.map(_NamedRow(table._node.names)) if named else stream

    # -- running --------------------------------------------------------------------------------
    def _execute_query(self, table: Table) -> TableResult:
        stream = translate(optimize(table._node), self._env, not self._streaming)

        def rows() -> Any:
            return stream.execute_and_collect("collect")
        return TableResult(table._node.columns, ResultKind.SUCCESS_WITH_CONTENT, rows, streaming=self._streaming)

    def _execute_inserts(self, inserts: Sequence[tuple[Any, Table]]) -> TableResult:
        for target, table in inserts:
            sink = self._sink_table(target)
            if len(sink.columns) != len(table._node.columns):
                raise ValidationException(
                    f"Column types of query result and sink for '{sink.full_name}' do not match: the query has "
                    f"{len(table._node.columns)} columns {table._node.names}, the sink {len(sink.columns)} "
                    f"{[n for n, _ in sink.columns]}")
            if self._streaming and not sink.accepts_updates() and _really_updating(table._node):
                raise TableException(f"Table sink '{sink.full_name}' doesn't support consuming update changes which "
                                     f"is produced by node {_updating_node(table._node)}")
            stream = translate(optimize(table._node), self._env, not self._streaming)
            enforcer = _not_null_enforcer(sink, table._node.columns, self._env)
            sink.sink(stream if enforcer is None else stream.filter(enforcer).name(enforcer.describe()))
        client = self._env.execute_async("insert-into_" + ",".join(self._sink_table(t).full_name for t, _ in inserts))
        return TableResult([("default_catalog.default_database." + str(t), DataTypes.BIGINT()) for t, _ in inserts],
                           ResultKind.SUCCESS_WITH_CONTENT, None, client, self._streaming)

    def _sink_table(self, target: Any) -> ConnectorTable:
        if isinstance(target, TableDescriptor):
            schema = target.get_schema()
            return ConnectorTable(f"*anonymous_{target.get_options()['connector']}*",
                                  schema.physical() if schema else [], target.get_options(),
                                  schema.primary_key if schema else (), target.partition_keys)
        entry = self._tables.get(target)
        if not isinstance(entry, ConnectorTable):
            raise ValidationException(f"Table '{target}' not found or is not a connector table to insert into")
        return entry

    def _explain(self, table: Table, *extra_details: Any) -> str:
        """Flink's three sections: the plan as written, the optimized plan, the plan that runs
        (the same here: Millstream's physical plan is its execution plan)."""
        node = table._node
        optimized = optimize(node).explain()
        advice = ExplainDetail.PLAN_ADVICE in extra_details
        physical = ("== Optimized Physical Plan With Advice ==\n" + optimized + "\n\nNo available advice...\n"
                    if advice else "== Optimized Physical Plan ==\n" + optimized + "\n")
        return ("== Abstract Syntax Tree ==\n" + node.explain() + "\n\n" + physical
                + "\n== Optimized Execution Plan ==\n" + optimized + "\n")

    def create_statement_set(self) -> "StatementSet":
        return StatementSet(self)

    # -- SQL ------------------------------------------------------------------------------------
    def _parse(self, statement: str) -> Any:
        return sql.parse(statement, list(self._tables))

    def sql_query(self, query: str) -> Table:
        """The Table of a SELECT statement."""
        parsed = self._parse(query)
        if isinstance(parsed, (sql.exp.Select, sql.exp.Union)):
            return sql.query(parsed, self)
        raise ValidationException(f"sql_query takes a SELECT statement, got {type(parsed).__name__}; "
                                  "use execute_sql for DDL and INSERT")

    def execute_sql(self, stmt: str) -> TableResult:
        """Runs a SELECT (its rows), an INSERT INTO (a job) or a CREATE TABLE (OK)."""
        explain = re.match(r"^\s*EXPLAIN\b(.*)$", stmt, re.I | re.S)
        if explain is not None:  # read here: sqlglot would log that it falls back to a Command
            return self._explain_statement(explain.group(1))
        parsed = self._parse(stmt)
        if isinstance(parsed, (sql.exp.Select, sql.exp.Union)):
            return sql.query(parsed, self).execute()
        if isinstance(parsed, sql.exp.Create):
            sql.create_table(parsed, self)
            return TableResult([("result", DataTypes.STRING())], ResultKind.SUCCESS, streaming=self._streaming)
        if isinstance(parsed, sql.exp.Insert):
            return self._execute_inserts([(sql.insert_target(parsed), sql.query(parsed.expression, self))])
        raise TableException(f"Unsupported SQL statement {type(parsed).__name__.upper()}: {stmt.strip()[:80]}")

    def _explain_statement(self, text: str) -> TableResult:
        """``EXPLAIN [PLAN FOR] [ESTIMATED_COST, CHANGELOG_MODE, PLAN_ADVICE, ...] <query or INSERT>``:
        one row, the plan; ``print()`` writes it as it is (Flink's raw print style)."""
        words = r"ESTIMATED_COST|CHANGELOG_MODE|PLAN_ADVICE|JSON_EXECUTION_PLAN"
        m = re.match(rf"^\s*(?:PLAN\s+FOR\s+)?((?:(?:{words})\s*,?\s*)*)(.*)$", text, re.I | re.S)
        assert m is not None
        details = [ExplainDetail.PLAN_ADVICE] if "PLAN_ADVICE" in m.group(1).upper() else []
        body = m.group(2)
        parsed = self._parse(body)
        table = sql.query(parsed.expression if isinstance(parsed, sql.exp.Insert) else parsed, self)
        plan = self._explain(table, *details)
        return TableResult([("result", DataTypes.STRING())], ResultKind.SUCCESS_WITH_CONTENT, lambda: iter([Row(plan)]),
                           streaming=self._streaming, raw=True)

    def explain_sql(self, stmt: str, *extra_details: Any) -> str:
        return self._explain(self.sql_query(stmt), *extra_details)


class StatementSet:
    """Several INSERTs run as one job."""

    def __init__(self, t_env: TableEnvironment) -> None:
        self._t_env = t_env
        self._inserts: list[tuple[Any, Table]] = []

    def add_insert(self, target_path_or_descriptor: Any, table: Table, overwrite: bool = False) -> "StatementSet":
        self._inserts.append((target_path_or_descriptor, table))
        return self

    def add_insert_sql(self, stmt: str) -> "StatementSet":
        parsed = self._t_env._parse(stmt)
        if not isinstance(parsed, sql.exp.Insert):
            raise ValidationException(f"add_insert_sql takes an INSERT statement, got {type(parsed).__name__.upper()}")
        self._inserts.append((sql.insert_target(parsed), sql.query(parsed.expression, self._t_env)))
        return self

    def execute(self) -> TableResult:
        if not self._inserts:
            raise TableException("No operators to execute: the statement set has no INSERT")
        return self._t_env._execute_inserts(self._inserts)


class StreamTableEnvironment(TableEnvironment):
    """A TableEnvironment over a given StreamExecutionEnvironment (``StreamTableEnvironment.create(env)``)."""

    @staticmethod
    def create(stream_execution_environment: Any = None,  # type: ignore[override]
               environment_settings: EnvironmentSettings | None = None) -> "StreamTableEnvironment":
        if isinstance(stream_execution_environment, EnvironmentSettings):
            stream_execution_environment, environment_settings = None, stream_execution_environment
        env = stream_execution_environment or StreamExecutionEnvironment.get_execution_environment()
        streaming = environment_settings.is_streaming_mode() if environment_settings else \
            env.get_runtime_mode() is not RuntimeExecutionMode.BATCH
        return StreamTableEnvironment(env, streaming)


class NotNullEnforcer:
    """Flink's sink NOT NULL constraint (its ConstraintEnforcer): a row with NULL in a column the sink
    declares NOT NULL fails the job naming the column (ERROR) or is dropped (DROP)."""

    def __init__(self, columns: Sequence[tuple[int, str]], drop: bool) -> None:
        self.columns, self.drop = list(columns), drop

    def __call__(self, value: Row) -> bool:
        for index, name in self.columns:
            if value[index] is None:
                if self.drop:
                    return False
                raise TableException(
                    f"Column '{name}' is NOT NULL, however, a null value is being written into it. You can set job "
                    f"configuration '{cfg.SINK_NOT_NULL_ENFORCER.key}'='DROP' to suppress this exception and drop "
                    "such records silently.")
        return True

    def describe(self) -> str:
        return f"ConstraintEnforcer[NotNullEnforcer(fields=[{', '.join(n for _, n in self.columns)}])]"


def _not_null_enforcer(sink: ConnectorTable, query_columns: Sequence[tuple[str, DataType]],
                       env: Any) -> "NotNullEnforcer | None":
    """The enforcer of the sink's NOT NULL columns the query may fill with NULL (none: no operator)."""
    columns = [(i, name) for i, ((name, sink_type), (_, query_type)) in enumerate(zip(sink.columns, query_columns))
               if not sink_type.nullable and query_type.nullable]
    if not columns:
        return None
    mode = cfg.Configuration.from_dict(table_options(env)).get(cfg.SINK_NOT_NULL_ENFORCER)
    return NotNullEnforcer(columns, drop=mode == "DROP")


class _NamedRow:
    """Positional rows as named Rows, keeping the row kind (what to_data_stream hands a DataStream)."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)

    def __call__(self, value: Row) -> Row:
        r = Row.of_names(self.names, list(value))
        r.set_row_kind(value.get_row_kind())
        return r


def _really_updating(node: p.PlanNode) -> bool:
    return really_updating(node)


def _updating_node(node: p.PlanNode) -> str:
    """The first node (from the sink down) that makes ``node``'s result updating, as Flink names it."""
    for child in node.inputs:
        if really_updating(child):
            return _updating_node(child)
    return node.describe()


_TYPEINFO_TO_TYPE = {"STRING": DataTypes.STRING, "INT": DataTypes.INT, "LONG": DataTypes.BIGINT,
                     "BOOLEAN": DataTypes.BOOLEAN, "DOUBLE": DataTypes.DOUBLE, "FLOAT": DataTypes.FLOAT,
                     "SHORT": DataTypes.SMALLINT, "BYTE": DataTypes.TINYINT,
                     "INSTANT": lambda: DataTypes.TIMESTAMP_LTZ(9), "SQL_TIMESTAMP": lambda: DataTypes.TIMESTAMP(9)}


def _type_of(type_info: Any) -> DataType:
    if type_info is None:
        return DataTypes.STRING()  # an untyped stream (pickled objects): shown by str()
    name = getattr(type_info, "name", str(type_info)).upper()
    make = _TYPEINFO_TO_TYPE.get(name)
    if make is None:
        raise TableException(f"from_data_stream: Millstream cannot map the type {type_info} to a table type yet")
    return make()
