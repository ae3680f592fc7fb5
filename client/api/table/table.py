"""``Table``: an immutable logical plan node with PyFlink's relational operations.

Every operation returns a new Table over a new plan node; nothing runs until ``execute()``,
``execute_insert()``, ``to_data_stream()`` or a statement set does. Columns are named as Flink
names them: a column keeps its name, an alias gives one, any other expression is ``EXPR$n``.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Sequence

from millstream.table import plan as p
from millstream.table.expression import (AGGREGATES, INTERVAL_UNITS_MS, Expression, Resolved, TableException,
                                         ValidationException, as_expression, contains_aggregate, is_udaf_call,
                                         output_name, resolve)
from millstream.table.pandas_conversion import to_dataframe
from millstream.table.runtime_functions import AggCall
from millstream.table.types import INT_BITS, DataType, DataTypes, is_integer
from millstream.table.vectorized import pandas_agg_call
from millstream.table.window import GroupWindow, OverWindow, WindowSpec
from millstream.table.interval_join import interval_join_of, join_columns
from millstream.table.window_join import window_join_of
from millstream.table import window_rank  # noqa: F401  registers Window Top-N with the planner
from millstream.table.udf import (UserDefinedAggregateFunctionWrapper, UserDefinedScalarFunctionWrapper,
                                  UserDefinedTableFunctionWrapper)

if TYPE_CHECKING:
    from millstream.table.table_environment import TableEnvironment
    from millstream.table.table_result import TableResult

__all__ = ["Table", "GroupedTable", "GroupWindowedTable", "WindowGroupedTable", "OverWindowedTable"]


class Table:
    """A table of a :class:`TableEnvironment`: a plan node and the environment it runs in."""

    def __init__(self, node: p.PlanNode, t_env: "TableEnvironment") -> None:
        self._node = node
        self._t_env = t_env
        self._registered: str | None = None

    # -- schema ---------------------------------------------------------------------------------
    def get_schema(self) -> "TableSchema":
        return TableSchema(list(self._node.columns))

    def get_resolved_schema(self) -> "TableSchema":
        return self.get_schema()

    def print_schema(self) -> None:
        print(self.get_schema())

    def __getattr__(self, name: str) -> Expression:
        """``table.data`` is ``col('data')`` (PyFlink's column access by attribute)."""
        if name.startswith("_") or name not in self._node.names:
            raise AttributeError(f"'Table' object has no attribute '{name}'")
        return Expression("col", value=name)

    def __str__(self) -> str:
        """PyFlink registers the table under a unique name, so ``"SELECT * FROM %s" % table`` works."""
        if self._registered is None:
            self._registered = self._t_env._register_anonymous(self)
        return self._registered

    # -- projections and filters ----------------------------------------------------------------
    def _resolve(self, e: Any, where: str) -> Resolved:
        return resolve(self._t_env._bind(as_expression(e)), self._node.columns, where)

    def _project(self, exprs: Sequence[Any], where: str, unnamed: frozenset[int] = frozenset()) -> "Table":
        exprs = [self._t_env._bind(as_expression(e)) for e in exprs]
        exprs = self._expand_star(exprs)
        if any(contains_aggregate(e) for e in exprs):
            return GroupedTable(self, ())._aggregate_select(exprs)
        projections, columns = [], []
        counter = 0
        for i, e in enumerate(exprs):
            name = None if i in unnamed else output_name(e)
            inner = e.args[0] if e.kind == "alias" else e
            if name is None:
                name, counter = f"EXPR${counter}", counter + 1
            r = resolve(inner, self._node.columns, where)
            projections.append(r)
            columns.append((name, r.dtype))
        _check_unique([c[0] for c in columns], where)
        return self._new(p.Calc(tuple(columns), self._node, tuple(projections), None))

    def _expand_star(self, exprs: list[Expression]) -> list[Expression]:
        out: list[Expression] = []
        for e in exprs:
            if e.kind == "col" and e.value == "*":
                out += [Expression("col", value=n) for n in self._node.names]
            else:
                out.append(e)
        return out

    def _new(self, node: p.PlanNode) -> "Table":
        return Table(node, self._t_env)

    def select(self, *fields: Any) -> "Table":
        return self._project(fields, "select")

    def where(self, predicate: Any) -> "Table":
        r = self._resolve(predicate, "where")
        if r.dtype.root != "BOOLEAN":
            raise ValidationException(f"A filter condition must be of type BOOLEAN, got {r.dtype}: {predicate}")
        refs = tuple(resolve(Expression("col", value=n), self._node.columns) for n in self._node.names)
        return self._new(p.Calc(self._node.columns, self._node, refs, r))

    filter = where

    def alias(self, field: str, *fields: str) -> "Table":
        names = [field, *fields]
        if len(names) > len(self._node.columns):
            raise ValidationException(f"Aliasing more fields than we actually have: {names} for "
                                      f"{self._node.names}")
        renamed = names + self._node.names[len(names):]
        return self.select(*[Expression("col", value=o).alias(n) for o, n in zip(self._node.names, renamed)])

    def add_columns(self, *fields: Any) -> "Table":
        return self.select(*[Expression("col", value=n) for n in self._node.names], *fields)

    def add_or_replace_columns(self, *fields: Any) -> "Table":
        added = {output_name(as_expression(f)): as_expression(f) for f in fields}
        keep = [added.pop(n) if n in added else Expression("col", value=n) for n in self._node.names]
        return self.select(*keep, *added.values())

    def drop_columns(self, *fields: Any) -> "Table":
        drop = set()
        for f in fields:
            e = as_expression(f)
            if e.kind != "col" or e.value not in self._node.names:
                raise ValidationException(f"drop_columns takes existing columns, got {f}")
            drop.add(e.value)
        return self.select(*[Expression("col", value=n) for n in self._node.names if n not in drop])

    def rename_columns(self, *fields: Any) -> "Table":
        renames = {}
        for f in fields:
            e = as_expression(f)
            if e.kind != "alias" or e.args[0].kind != "col" or e.args[0].value not in self._node.names:
                raise ValidationException(f"rename_columns takes col('existing').alias('new'), got {f}")
            renames[e.args[0].value] = e.value[0]
        return self.select(*[Expression("col", value=n).alias(renames.get(n, n)) for n in self._node.names])

    # -- grouping -------------------------------------------------------------------------------
    def group_by(self, *fields: Any) -> "GroupedTable":
        return GroupedTable(self, tuple(self._t_env._bind(as_expression(f)) for f in fields))

    def window(self, window: Any) -> "GroupWindowedTable":
        """A group window (``Tumble``/``Slide``/``Session``): ``group_by`` its alias next."""
        if not isinstance(window, GroupWindow):
            raise TypeError(f"window() takes a Tumble, Slide or Session window, got {window!r}")
        return GroupWindowedTable(self, window)

    def over_window(self, *over_windows: Any) -> "OverWindowedTable":
        """Over windows (``Over.partition_by(...).order_by(...)...alias('w')``) for ``select`` with
        ``agg.over(col('w'))``."""
        if len(over_windows) != 1 or not isinstance(over_windows[0], OverWindow):
            raise ValidationException("over_window takes one over window (Over.partition_by(...).order_by(...)"
                                      ".preceding(...).alias('w')); Millstream supports one per select")
        return OverWindowedTable(self, over_windows[0])

    def _time_attribute(self, e: Any, what: str) -> tuple[int, bool]:
        """The column of a time attribute expression and whether it is event time (rowtime)."""
        r = self._resolve(e, what)
        if r.kind != "ref" or r.dtype.time_attr not in ("ROWTIME", "PROCTIME"):
            raise ValidationException(f"{what} needs a time attribute (a rowtime column with a WATERMARK, or a "
                                      f"PROCTIME() column), got {e} of type {r.dtype}")
        return r.value, r.dtype.time_attr == "ROWTIME"

    def distinct(self) -> "Table":
        node = self._node
        return self._new(p.Aggregate(node.columns, node, tuple(range(len(node.columns))), ()))

    # -- combining ------------------------------------------------------------------------------
    def union_all(self, right: "Table") -> "Table":
        _same_env(self, right)
        a, b = self._node.columns, right._node.columns
        if [t.root for _, t in a] != [t.root for _, t in b]:
            raise ValidationException(f"union_all needs the same column types on both sides: "
                                      f"{[str(t) for _, t in a]} and {[str(t) for _, t in b]}")
        return self._new(p.Union(a, (self._node, right._node)))

    def join(self, right: "Table", join_predicate: Any = None) -> "Table":
        return self._join(right, join_predicate, left_outer=False)

    def left_outer_join(self, right: "Table", join_predicate: Any = None) -> "Table":
        """Every left row, joined with its matches or padded with nulls (an updating result)."""
        return self._join(right, join_predicate, left_outer=True)

    def right_outer_join(self, right: "Table", join_predicate: Any = None) -> "Table":
        """Every right row, joined with its matches or padded with nulls (an updating result)."""
        return self._join(right, join_predicate, left_outer=False, join_type="RIGHT")

    def full_outer_join(self, right: "Table", join_predicate: Any = None) -> "Table":
        """Every row of both sides, joined or padded with nulls (an updating result)."""
        return self._join(right, join_predicate, left_outer=False, join_type="FULL")

    def _join(self, right: "Table", join_predicate: Any, left_outer: bool, join_type: str | None = None) -> "Table":
        _same_env(self, right)
        join_type = join_type or ("LEFT" if left_outer else "INNER")
        left_cols, right_cols = self._node.columns, right._node.columns
        both = set(self._node.names) & set(right._node.names)
        if both:
            raise ValidationException(f"join: both tables have the column(s) {sorted(both)}; rename one side "
                                      "(rename_columns) first, as Flink requires")
        columns = join_columns(left_cols, right_cols, join_type)
        if join_predicate is None:
            raise ValidationException("join without a predicate (a cross join) is not supported; pass an equality "
                                      "of a left and a right column, or use where() after join with one")
        cond = resolve(self._t_env._bind(as_expression(join_predicate)), columns, "join")
        lk, rk, rest = _split_equi(cond, len(left_cols))
        special = window_join_of(self._node, right._node, lk, rk, rest, join_type) or \
            interval_join_of(self._node, right._node, lk, rk, rest, join_type)
        if special is not None:
            return self._new(special)
        if join_type in ("SEMI", "ANTI"):
            raise TableException(f"A {join_type} join (an IN / EXISTS subquery) is supported as a window join (both "
                                 "sides window TVFs, equal window_start and window_end); this one is not")
        if not lk:
            raise ValidationException(f"join: the predicate {join_predicate} has no equality between a left and a "
                                      "right column; Millstream supports equi-joins only")
        # a regular join materializes its inputs' time attributes (Flink's RelTimeIndicatorConverter):
        # it holds no watermark back, so its rows' times are plain timestamps afterwards
        columns = tuple((n, t.as_time_attr(None)) for n, t in columns)
        return self._new(p.Join(columns, self._node, right._node, tuple(lk), tuple(rk), rest, left_outer,
                                join_type if join_type in ("RIGHT", "FULL") else ""))

    # -- rows and functions ---------------------------------------------------------------------
    def map(self, func: Any) -> "Table":
        if isinstance(func, Expression) and func.kind == "udf":
            func = func.value
        if not isinstance(func, UserDefinedScalarFunctionWrapper):
            raise TypeError(f"map takes a scalar Python UDF (udf), got {func!r}")
        if func.func_type == "async":
            raise TypeError(f"map takes a general or pandas udf, got the async scalar function {func.name}: "
                            "call it in select instead")
        return self._new(p.MapRow(tuple(func.result_columns()), self._node, func))

    def flat_map(self, func: Any) -> "Table":
        wrapper, args = _table_function(func)
        cols = wrapper.result_columns()
        return self._new(p.Correlate(tuple(cols), self._node, wrapper, None if args is None else
                                     tuple(self._resolve(a, "flat_map") for a in args), keep_input=False))

    def join_lateral(self, table_function_call: Any, join_predicate: Any = None) -> "Table":
        return self._lateral(table_function_call, join_predicate, left_outer=False)

    def left_outer_join_lateral(self, table_function_call: Any, join_predicate: Any = None) -> "Table":
        return self._lateral(table_function_call, join_predicate, left_outer=True)

    def _lateral(self, call: Any, predicate: Any, left_outer: bool) -> "Table":
        wrapper, args = _table_function(call)
        cols = tuple(self._node.columns) + tuple(wrapper.result_columns())
        resolved = None if args is None else tuple(self._resolve(a, "join_lateral") for a in args)
        out = self._new(p.Correlate(cols, self._node, wrapper, resolved, keep_input=True, left_outer=left_outer))
        return out.where(predicate) if predicate is not None else out

    # -- order and limit ------------------------------------------------------------------------
    def order_by(self, *fields: Any) -> "Table":
        order = []
        for f in fields:
            e = as_expression(f)
            asc = True
            if e.kind == "order":
                asc, e = e.value == "asc", e.args[0]
            r = self._resolve(e, "order_by")
            if r.kind != "ref":
                raise ValidationException(f"order_by takes columns (col('a').desc), got {f}")
            order.append((r.value, asc))
        return self._new(p.SortLimit(self._node.columns, self._node, tuple(order)))

    def limit(self, fetch: int, offset: int = 0) -> "Table":
        if isinstance(self._node, p.SortLimit) and self._node.fetch is None:
            return self._new(replace_node(self._node, offset=self._node.offset + offset, fetch=fetch))
        return self._new(p.SortLimit(self._node.columns, self._node, (), offset, fetch))

    def fetch(self, fetch: int) -> "Table":
        return self.limit(fetch)

    def offset(self, offset: int) -> "Table":
        if isinstance(self._node, p.SortLimit):
            return self._new(replace_node(self._node, offset=offset))
        return self._new(p.SortLimit(self._node.columns, self._node, (), offset, None))

    # -- running --------------------------------------------------------------------------------
    def execute(self) -> "TableResult":
        return self._t_env._execute_query(self)

    def execute_insert(self, table_path_or_descriptor: Any, overwrite: bool = False) -> "TableResult":
        return self._t_env._execute_inserts([(table_path_or_descriptor, self)])

    def to_pandas(self) -> Any:
        """Runs the table and collects its (final) rows into a pandas DataFrame of its columns."""
        return to_dataframe(list(self.execute().collect()), list(self._node.columns))

    def explain(self, *extra_details: Any) -> str:
        return self._t_env._explain(self, *extra_details)


class GroupedTable:
    """The result of ``group_by``: ``select`` with aggregates makes a GROUP BY."""

    def __init__(self, table: Table, keys: tuple[Expression, ...]) -> None:
        self._table, self._keys = table, keys

    def select(self, *fields: Any) -> Table:
        return self._aggregate_select([self._table._t_env._bind(as_expression(f)) for f in fields])

    def _aggregate_select(self, exprs: list[Expression], window: "WindowSpec | None" = None,
                          window_alias: str | None = None) -> Table:
        """GROUP BY the keys computing the aggregates in ``exprs``; with ``window``, per window
        (``window_alias``'s properties ``start``/``end``/``rowtime``/``proctime`` usable in ``exprs``)."""
        t = self._table
        node = t._node
        pre_exprs: list[Resolved] = []
        pre_cols: list[tuple[str, DataType]] = []
        key_names: dict[str, str] = {}
        for i, k in enumerate(self._keys):
            inner = k.args[0] if k.kind == "alias" else k
            r = resolve(inner, node.columns, "group_by")
            name = output_name(k) or f"$f{i}"
            key_names[str(inner)] = name
            pre_exprs.append(r)
            pre_cols.append((name, r.dtype))
        calls: list[AggCall] = []
        agg_cols: list[tuple[str, DataType]] = []

        def extract(e: Expression) -> Expression:
            if e.kind == "agg":
                if e.value not in AGGREGATES:
                    raise ValidationException(f"unknown aggregate {e.value}")
                arg = e.args[0]
                distinct = arg.kind == "distinct"
                if distinct:
                    arg = arg.args[0]
                arg_index: int | None = None
                if distinct or not (e.value == "count" and arg.kind == "lit" and arg.value is not None):
                    r = resolve(arg, node.columns, "an aggregate")
                    arg_index = len(pre_exprs)
                    pre_exprs.append(r)
                    pre_cols.append((f"$f{arg_index}", r.dtype))
                    arg_type = r.dtype
                else:
                    arg_type = DataTypes.BIGINT()
                name = f"$agg{len(calls)}"
                calls.append(AggCall(e.value, arg_index, is_integer(arg_type), arg_type.root == "FLOAT",
                                     INT_BITS.get(arg_type.root) if arg_index is not None else None, distinct))
                agg_cols.append((name, DataTypes.BIGINT(False) if e.value == "count" else arg_type.nullable_()))
                return Expression("col", value=name)
            if is_udaf_call(e):  # a pandas UDAF (millstream.table.vectorized)
                name = f"$agg{len(calls)}"
                calls.append(pandas_call(e, node.columns, pre_exprs, pre_cols))
                agg_cols.append((name, e.value.result_type().nullable_()))
                return Expression("col", value=name)
            if e.kind == "window_property":
                target = e.args[0]
                if window is None or target.kind != "col" or target.value != window_alias:
                    raise ValidationException(f"{e}: {target} is not the alias of this group window")
                name = f"$w_{e.value}"
                if name not in properties:
                    properties.append(name)
                return Expression("col", value=name)
            if str(e) in key_names and e.kind != "lit":
                return Expression("col", value=key_names[str(e)])
            if e.kind == "col":
                raise ValidationException(f"Column {e.value} is neither grouped nor aggregated: group by it or "
                                          "aggregate it")
            return Expression(e.kind, tuple(extract(a) for a in e.args), e.value, e.dtype)

        properties: list[str] = []
        rewritten = []
        unnamed = frozenset(i for i, e in enumerate(exprs) if e.kind == "agg")
        for e in exprs:
            if e.kind == "alias":
                rewritten.append(Expression("alias", (extract(e.args[0]),), e.value))
            elif e.kind == "col" and e.value in key_names.values():
                rewritten.append(e)
            else:
                rewritten.append(extract(e))
        pre = p.Calc(tuple(pre_cols), node, tuple(pre_exprs), None)
        columns = tuple(pre_cols[:len(self._keys)]) + tuple(agg_cols)
        keys = tuple(range(len(self._keys)))
        if window is None:
            agg: p.PlanNode = p.Aggregate(columns, pre, keys, tuple(calls))
        else:
            time_type = node.columns[window.time_col][1]
            types = {"start": DataTypes.TIMESTAMP(3, False), "end": DataTypes.TIMESTAMP(3, False),
                     "rowtime": DataTypes.TIMESTAMP(3, False).as_time_attr("ROWTIME"),
                     "proctime": DataTypes.TIMESTAMP_LTZ(3, False).as_time_attr("PROCTIME")}
            if time_type.root == "TIMESTAMP_LTZ":
                types["rowtime"] = DataTypes.TIMESTAMP_LTZ(3, False).as_time_attr("ROWTIME")
            props = tuple(n[len("$w_"):] for n in properties)
            columns += tuple((n, types[r]) for n, r in zip(properties, props))
            agg = p.WindowAggregate(columns, pre, keys, window, tuple(calls), props)
        return Table(agg, t._t_env)._project(rewritten, "select", unnamed)

    def aggregate(self, func: Any) -> "AggregatedTable":
        """A Python udaf per group: the keys, then the function's result columns (select next)."""
        return AggregatedTable(self._python_aggregate(func, table_aggregate=False))

    def flat_aggregate(self, func: Any) -> "AggregatedTable":
        """A Python udtaf per group: the keys, then each row the function emits (select next)."""
        return AggregatedTable(self._python_aggregate(func, table_aggregate=True))

    def _python_aggregate(self, func: Any, table_aggregate: bool) -> Table:
        t = self._table
        args: tuple[Expression, ...] | None = None
        if isinstance(func, Expression) and func.kind == "alias" and func.args[0].kind == "udf":
            func, args = func.args[0].value.alias(*func.value), func.args[0].args
        elif isinstance(func, Expression) and func.kind == "udf":
            func, args = func.value, func.args
        if not isinstance(func, UserDefinedAggregateFunctionWrapper) or func.table_aggregate != table_aggregate:
            raise TypeError(f"{'flat_aggregate' if table_aggregate else 'aggregate'} takes a "
                            f"{'udtaf' if table_aggregate else 'udaf'}, got {func!r}")
        node = t._node
        key_cols = []
        for k in self._keys:
            r = resolve(k, node.columns, "group_by")
            if r.kind != "ref":
                raise ValidationException(f"aggregate/flat_aggregate group by columns, got {k}")
            key_cols.append(r.value)
        resolved = None if args is None else tuple(resolve(a, node.columns, "aggregate") for a in args)
        columns = tuple(node.columns[k] for k in key_cols) + tuple(func.result_columns())
        _check_unique([c[0] for c in columns], "aggregate")
        return Table(p.PythonAggregate(columns, node, tuple(key_cols), func, resolved), t._t_env)


class GroupWindowedTable:
    """``table.window(w)``: ``group_by`` the window's alias (and keys) next."""

    def __init__(self, table: Table, window: GroupWindow) -> None:
        self._table, self._window = table, window

    def group_by(self, *fields: Any) -> "WindowGroupedTable":
        w = self._window
        if w.alias_name is None or w.time_field is None:
            raise ValidationException("A group window needs .on(time attribute) and .alias(name)")
        keys, found = [], False
        for f in fields:
            e = as_expression(f)
            if e.kind == "col" and e.value == w.alias_name:
                found = True
            else:
                keys.append(self._table._t_env._bind(e))
        if not found:
            raise ValidationException(f"group_by of a windowed table must name the window alias '{w.alias_name}'")
        column, event_time = self._table._time_attribute(w.time_field, "A group window")
        spec = WindowSpec(w.kind, column, self._table._node.names[column], w.size, w.slide, w.gap, event_time)
        return WindowGroupedTable(self._table, tuple(keys), spec, w.alias_name)


class WindowGroupedTable(GroupedTable):
    """``table.window(w).group_by(col('w'), ...)``: ``select`` keys, aggregates and ``col('w').start`` etc."""

    def __init__(self, table: Table, keys: tuple[Expression, ...], spec: "WindowSpec", alias: str) -> None:
        super().__init__(table, keys)
        self._spec, self._alias = spec, alias

    def select(self, *fields: Any) -> Table:
        return self._aggregate_select([self._table._t_env._bind(as_expression(f)) for f in fields], self._spec,
                                      self._alias)


class OverWindowedTable:
    """``table.over_window(w)``: ``select`` columns and aggregates ``.over(col('w'))``."""

    def __init__(self, table: Table, window: OverWindow) -> None:
        self._table, self._window = table, window

    def select(self, *fields: Any) -> Table:
        t, w = self._table, self._window
        node = t._node
        if w.order_key is None:
            raise ValidationException("An over window needs order_by(a time attribute)")
        order, event_time = t._time_attribute(w.order_key, "An over window's order_by")
        partition = []
        for k in w.partition_keys:
            r = t._resolve(k, "Over.partition_by")
            if r.kind != "ref":
                raise ValidationException(f"Over.partition_by takes columns, got {k}")
            partition.append(r.value)
        rows, preceding = over_frame(w.preceding_bound)
        if w.following_bound is not None and not (w.following_bound.kind == "bound" and
                                                  w.following_bound.value in ("CURRENT_ROW", "CURRENT_RANGE")):
            raise ValidationException("An over window's following must be CURRENT_ROW or CURRENT_RANGE (Flink supports "
                                      "no other)")
        width = len(node.columns)
        pre_exprs = [resolve(Expression("col", value=n), node.columns) for n in node.names]
        pre_cols = list(node.columns)
        calls: list[AggCall] = []
        agg_cols: list[tuple[str, DataType]] = []

        def extract(e: Expression) -> Expression:
            if e.kind == "over":
                agg, alias = e.args
                if alias.kind != "col" or alias.value != w.alias_name:
                    raise ValidationException(f"{e}: {alias} is not the alias of the over window")
                if is_udaf_call(agg):  # a pandas UDAF over the window
                    name = f"w0$o{len(calls)}"
                    calls.append(pandas_call(agg, node.columns, pre_exprs, pre_cols))
                    agg_cols.append((name, agg.value.result_type().nullable_()))
                    return Expression("col", value=name)
                if agg.kind != "agg":
                    raise ValidationException(f"over() applies to an aggregate (col('a').sum.over(...)), got {agg}")
                r = resolve(agg.args[0], node.columns, "an over aggregate")
                pre_exprs.append(r)
                pre_cols.append((f"$f{len(pre_cols)}", r.dtype))
                name = f"w0$o{len(calls)}"
                calls.append(AggCall(agg.value, len(pre_cols) - 1, is_integer(r.dtype), r.dtype.root == "FLOAT",
                                     INT_BITS.get(r.dtype.root)))
                agg_cols.append((name, DataTypes.BIGINT(False) if agg.value == "count" else r.dtype.nullable_()))
                return Expression("col", value=name)
            return Expression(e.kind, tuple(extract(a) for a in e.args), e.value, e.dtype) if e.args else e

        exprs = [t._t_env._bind(as_expression(f)) for f in fields]
        rewritten = [Expression("alias", (extract(e.args[0]),), e.value) if e.kind == "alias" else extract(e)
                     for e in exprs]
        unnamed = frozenset(i for i, e in enumerate(exprs) if e.kind == "over")
        pre = p.Calc(tuple(pre_cols), node, tuple(pre_exprs), None) if len(pre_cols) > width else node
        over = p.OverAggregate(tuple(pre_cols) + tuple(agg_cols), pre, tuple(partition), order, event_time, rows,
                               preceding, tuple(calls))
        return Table(over, t._t_env)._project(rewritten, "select", unnamed)


def pandas_call(e: Expression, columns: Any, pre_exprs: list[Resolved], pre_cols: list[tuple[str, DataType]]) -> Any:
    """A pandas UDAF call's aggregate: its arguments become columns of the pre-projection."""
    args, types = [], []
    for a in e.args:
        r = resolve(a, columns, "a Pandas UDAF")
        args.append(len(pre_cols))
        types.append(r.dtype)
        pre_exprs.append(r)
        pre_cols.append((f"$f{len(pre_cols)}", r.dtype))
    return pandas_agg_call(e.value, args, types)


def over_frame(preceding: Expression | None) -> tuple[bool, int | None]:
    """(ROWS?, how far back) of an over window's ``preceding``: rows or milliseconds, None unbounded."""
    if preceding is None:
        return False, None  # Flink's default: RANGE UNBOUNDED PRECEDING
    if preceding.kind == "row_interval":
        return True, preceding.value
    if preceding.kind == "bound" and preceding.value in ("UNBOUNDED_ROW", "UNBOUNDED_RANGE"):
        return preceding.value == "UNBOUNDED_ROW", None
    if preceding.kind == "interval" and preceding.args[0].kind == "lit":
        return False, preceding.args[0].value * INTERVAL_UNITS_MS[preceding.value]
    raise ValidationException(f"An over window's preceding is row_interval(n), an interval (lit(1).hours), "
                              f"UNBOUNDED_ROW or UNBOUNDED_RANGE; got {preceding}")


class AggregatedTable:
    """The result of ``aggregate``/``flat_aggregate``: ``select`` its columns."""

    def __init__(self, table: Table) -> None:
        self._table = table

    def select(self, *fields: Any) -> Table:
        return self._table.select(*fields)


def replace_node(node: p.PlanNode, **changes: Any) -> p.PlanNode:
    return replace(node, **changes)


class TableSchema:
    """A table's columns; prints as Flink's schema ``(\\n  `a` BIGINT\\n)``."""

    def __init__(self, columns: list[tuple[str, DataType]]) -> None:
        self._columns = columns

    def get_field_names(self) -> list[str]:
        return [n for n, _ in self._columns]

    def get_field_data_types(self) -> list[DataType]:
        return [t for _, t in self._columns]

    def get_column_names(self) -> list[str]:
        return self.get_field_names()

    def get_field_count(self) -> int:
        return len(self._columns)

    def to_row_data_type(self) -> DataType:
        return DataTypes.ROW([DataTypes.FIELD(n, t) for n, t in self._columns])

    def __str__(self) -> str:
        return "(\n" + ",\n".join(f"  `{n}` {t}" for n, t in self._columns) + "\n)"


def _check_unique(names: list[str], where: str) -> None:
    seen = set()
    for n in names:
        if n in seen:
            raise ValidationException(f"Ambiguous column name: {n} (in {where})")
        seen.add(n)


def _same_env(a: Table, b: Table) -> None:
    if a._t_env is not b._t_env:
        raise ValidationException("Only tables from the same TableEnvironment can be combined")


def _split_equi(cond: Resolved, left_width: int) -> tuple[list[int], list[int], Resolved | None]:
    """A join condition's equalities of a left and a right column, and what else it says."""
    conj: list[Resolved] = []

    def flatten(c: Resolved) -> None:
        if c.kind == "call" and c.value == "and":
            for a in c.args:
                flatten(a)
        else:
            conj.append(c)

    flatten(cond)
    lk, rk, rest = [], [], []
    for c in conj:
        if c.kind == "call" and c.value == "equals" and all(a.kind == "ref" for a in c.args):
            a, b = c.args[0].value, c.args[1].value
            if a < left_width <= b:
                lk.append(a)
                rk.append(b - left_width)
                continue
            if b < left_width <= a:
                lk.append(b)
                rk.append(a - left_width)
                continue
        rest.append(c)
    remainder = None
    for c in rest:
        remainder = c if remainder is None else Resolved("call", DataTypes.BOOLEAN(), (remainder, c), "and",
                                                         f"AND({remainder}, {c})")
    return lk, rk, remainder


def _table_function(func: Any) -> tuple[Any, tuple[Expression, ...] | None]:
    """The table function wrapper and its arguments (None: called with the whole row)."""
    if isinstance(func, Expression) and func.kind == "udf":
        return func.value, func.args
    if isinstance(func, Expression) and func.kind == "alias" and func.args[0].kind == "udf":
        return func.args[0].value.alias(*func.value), func.args[0].args
    if isinstance(func, UserDefinedTableFunctionWrapper):
        return func, None
    raise TypeError(f"expected a Python table function (udtf) or a call of one, got {func!r}")
