"""Millstream's Table API and SQL: PyFlink's ``pyflink.table`` on Millstream's DataStream runtime.

Architecture (each layer a module):

- **API** — :class:`TableEnvironment` / :class:`StreamTableEnvironment` (``table_environment``)
  hold the catalog (temporary tables, views, functions) and one StreamExecutionEnvironment.
  :class:`Table` (``table``) is an immutable logical plan node with PyFlink's operations.
  Expressions (``expression``, ``expressions``: ``col``, ``lit``, ``call``, operators, ``.alias``,
  ``.cast``, aggregates as properties ``.count``/``.sum``/...), :class:`DataTypes` and
  :class:`Schema` (``types``), Python UDFs ``udf``/``udtf`` (``udf``), connector tables
  (``table_descriptor``, ``connectors``), :class:`TableResult` (``table_result``).
- **Planner** — the logical plan (``plan``: Values, Calc, Aggregate, Join, Correlate, Union,
  SortLimit, ...) is rewritten by rules (``planner.optimize``: adjacent Calcs merge, so filters
  and projections run in one pass) and translated to DataStream transformations named as Flink
  names its operators (``Calc(select=[...], where=[...])``, ``GroupAggregate(groupBy=[...])``,
  ``Join(joinType=[InnerJoin], ...)``), so the job graph and web UI show them.
- **Runtime** — ``runtime_functions``: the operators' pure cores in DataStream functions with
  keyed state, so checkpoints and failover apply. Records are ``Row`` values with a ``RowKind``.
- **Time joins and ranks** — ``interval_join``, ``window_join``, ``window_rank`` (Window Top-N) and
  ``rank_functions`` (Top-N over an updating input): each holds its plan node, the rule that finds
  it and the function that runs it; their nodes register their translations with the planner.

Changelog semantics: in streaming mode an unbounded GROUP BY emits ``+I`` for a new group,
``-U``/``+U`` when its result changes and ``-D`` when it empties; a join of updating inputs
retracts what it joined. In batch mode (``EnvironmentSettings.in_batch_mode()``) aggregates emit
their final values once at the end of input and ``order_by`` sorts. ``TableResult.print()`` writes
Flink's tableau format (an ``op`` column in streaming mode); ``collect()`` yields the rows with
their kinds.
"""
from millstream.common.row import Row, RowKind
from millstream.table.explain_detail import ExplainDetail
from millstream.table.expression import Expression, TableException, ValidationException
from millstream.table.table import (GroupedTable, GroupWindowedTable, OverWindowedTable, Table, TableSchema,
                                    WindowGroupedTable)
from millstream.table.table_descriptor import FormatDescriptor, TableDescriptor
from millstream.table.table_environment import (EnvironmentSettings, StatementSet, StreamTableEnvironment, TableConfig,
                                                TableEnvironment)
from millstream.table.table_result import ResultKind, TableResult
from millstream.table.types import DataType, DataTypes, Schema
from millstream.table.udf import (AggregateFunction, AsyncScalarFunction, FunctionContext, ScalarFunction,
                                  TableAggregateFunction, TableFunction)

__all__ = [
    "TableEnvironment", "StreamTableEnvironment", "EnvironmentSettings", "TableConfig", "Table", "GroupedTable",
    "TableSchema", "TableResult", "ResultKind", "StatementSet", "DataTypes", "DataType", "Schema", "TableDescriptor",
    "FormatDescriptor", "Row", "RowKind", "ScalarFunction", "AsyncScalarFunction", "TableFunction", "FunctionContext",
    "AggregateFunction", "TableAggregateFunction", "ExplainDetail", "Expression", "TableException", "ValidationException",
    "GroupWindowedTable", "OverWindowedTable", "WindowGroupedTable",
]
