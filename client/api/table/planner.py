"""The planner: a logical plan -> rules -> DataStream transformations named as Flink names them.

Rules (cheap ones, applied bottom-up):

- *Calc merge*: a Calc over a Calc becomes one Calc (the outer expressions over the inner ones),
  so a projection and a filter run in one pass and a filter moves below the projection above it;
  not when the inner Calc calls a Python UDF (merging would call it twice).

Translation: ``Values`` -> a collection source; ``Calc`` -> ``flat_map`` named ``Calc(...)``;
``Aggregate`` -> ``key_by`` the group keys + ``GroupAggregate``; ``Join`` -> both sides ``key_by``
their join keys + ``Join``; ``SortLimit`` -> everything to one constant key. Operator names are
the plan's ``describe()`` strings, so the job graph and the web UI show Flink's operator names.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from millstream.common.row import Row
from millstream.table import plan as p
from millstream.table.types import DataTypes
from millstream.table.expression import Resolved, TableException, text_of
from millstream.table.runtime_functions import (CalcFunction, CorrelateFunction, GroupAggregateFunction, JoinFunction,
                                                LeftOuterJoinFunction, LimitFunction, MapRowFunction, PythonGroupAggregateFunction,
                                                SortLimitFunction, row_of)

__all__ = ["optimize", "translate", "KeyOf"]


class KeyOf:
    """A key selector of positional columns (picklable, a tuple key)."""

    def __init__(self, columns: Sequence[int]) -> None:
        self.columns = tuple(columns)

    def __call__(self, row: Row) -> tuple[Any, ...]:
        return tuple(row[c] for c in self.columns)


def _substitute(e: Resolved, inner: Sequence[Resolved]) -> Resolved:
    if e.kind == "ref":
        return inner[e.value]
    if not e.args:
        return e
    args = tuple(_substitute(a, inner) for a in e.args)
    return replace(e, args=args, text=text_of(e.kind, e.value, args, e.dtype))


def _and(a: Resolved | None, b: Resolved | None) -> Resolved | None:
    if a is None or b is None:
        return a or b
    return Resolved("call", DataTypes.BOOLEAN(), (a, b), "and", text_of("call", "and", (a, b), None))


def optimize(node: p.PlanNode) -> p.PlanNode:
    """Applies the rules bottom-up; returns an equivalent plan."""
    if isinstance(node, p.Calc):
        child = optimize(node.input)
        if isinstance(child, p.Calc) and not child.has_python:
            projections = tuple(_substitute(e, child.projections) for e in node.projections)
            condition = _and(child.condition, _substitute(node.condition, child.projections) if node.condition else None)
            return p.Calc(node.columns, child.input, projections, condition)
        return replace(node, input=child)
    fields = {"input", "left", "right"}
    changes: dict[str, Any] = {f: optimize(getattr(node, f)) for f in fields if isinstance(getattr(node, f, None), p.PlanNode)}
    if isinstance(node, p.Union):
        changes["parts"] = tuple(optimize(x) for x in node.parts)
    return replace(node, **changes) if changes else node


def translate(node: p.PlanNode, env: Any, batch: bool) -> Any:
    """The DataStream of Rows (with row kinds) that ``node`` produces in ``env``."""
    t = _TRANSLATIONS[type(node)]
    return t(node, env, batch)


def _values(node: p.Values, env: Any, batch: bool) -> Any:
    return env.from_collection([row_of(r) for r in node.rows]).name(node.describe())


def _stream_scan(node: p.StreamScan, env: Any, batch: bool) -> Any:
    return node.stream.map(_ToRow(len(node.columns))).name(node.describe())


class _ToRow:
    """A DataStream's records as positional Rows (an atomic value is a one-column row)."""

    def __init__(self, width: int) -> None:
        self.width = width

    def __call__(self, value: Any) -> Row:
        if isinstance(value, Row):
            r = row_of(list(value))
            r.set_row_kind(value.get_row_kind())
            return r
        if isinstance(value, (tuple, list)) and self.width > 1:
            return row_of(list(value))
        return row_of([value])


def _connector_scan(node: p.ConnectorScan, env: Any, batch: bool) -> Any:
    return node.connector.source(env).name(node.describe())


def _forward(node: p.PlanNode, env: Any, batch: bool, f: Any) -> Any:
    """A row-wise operator runs at its input's parallelism, forward-connected (as Flink's planner
    places Calc and Correlate): no shuffle, so rows keep their order (a later limit sees the
    source's order)."""
    stream = translate(node.inputs[0], env, batch)
    return stream.flat_map(f).name(node.describe()).set_parallelism(stream.get_transformation().parallelism)


def _calc(node: p.Calc, env: Any, batch: bool) -> Any:
    return _forward(node, env, batch, CalcFunction(node.projections, node.condition))


def _map_row(node: p.MapRow, env: Any, batch: bool) -> Any:
    return _forward(node, env, batch, MapRowFunction(node.func, node.input.names, len(node.columns)))


def _correlate(node: p.Correlate, env: Any, batch: bool) -> Any:
    width = len(node.columns) - (len(node.input.columns) if node.keep_input else 0)
    f = CorrelateFunction(node.func, node.args, node.input.names, node.keep_input, node.left_outer, width)
    return _forward(node, env, batch, f)


def _aggregate(node: p.Aggregate, env: Any, batch: bool) -> Any:
    stream = translate(node.input, env, batch)
    keys = node.keys
    f = GroupAggregateFunction(keys, node.calls, batch)
    keyed = stream.key_by(KeyOf(keys))
    return keyed.process(f).name(node.describe())


def _python_aggregate(node: p.PythonAggregate, env: Any, batch: bool) -> Any:
    f = PythonGroupAggregateFunction(node.keys, node.func, node.args, node.input.names, node.func.table_aggregate)
    return translate(node.input, env, batch).key_by(KeyOf(node.keys)).process(f).name(node.describe())


def _join(node: p.Join, env: Any, batch: bool) -> Any:
    left = translate(node.left, env, batch)
    right = translate(node.right, env, batch)
    connected = left.connect(right).key_by(KeyOf(node.left_keys), KeyOf(node.right_keys))
    f = LeftOuterJoinFunction(node.condition, len(node.right.columns), batch) if node.left_outer else \
        JoinFunction(node.condition)
    return connected.process(f).name(node.describe())


def _union(node: p.Union, env: Any, batch: bool) -> Any:
    first, *rest = [translate(x, env, batch) for x in node.parts]
    return first.union(*rest)


def _sort_limit(node: p.SortLimit, env: Any, batch: bool) -> Any:
    stream = translate(node.input, env, batch).key_by(KeyOf(()))
    if node.order:
        if not batch:
            raise p_unsupported("order_by on an unbounded (streaming) table needs a time attribute as its first "
                                "sort key; Millstream supports order_by in batch mode")
        f: Any = SortLimitFunction(node.order, node.offset, node.fetch)
    else:
        if node.input.updating and not batch:
            raise p_unsupported("limit on an updating table is not supported yet")
        f = LimitFunction(node.offset, node.fetch)
    return stream.process(f).name(node.describe()).set_parallelism(1)


def p_unsupported(message: str) -> Exception:
    return TableException(message)


_TRANSLATIONS: dict[type, Any] = {
    p.Values: _values, p.StreamScan: _stream_scan, p.ConnectorScan: _connector_scan, p.Calc: _calc,
    p.MapRow: _map_row, p.Correlate: _correlate, p.Aggregate: _aggregate, p.Join: _join, p.Union: _union,
    p.SortLimit: _sort_limit, p.PythonAggregate: _python_aggregate,
}
