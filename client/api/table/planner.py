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

from dataclasses import dataclass, replace
from typing import Any, Sequence

from millstream.common.row import Row
from millstream.common.time import Duration
from millstream.common.watermark_strategy import WatermarkStrategy
from millstream.datastream.async_data_stream import AsyncDataStream
from millstream.runtime import config as cfg
from millstream.runtime import operator_factories
from millstream.table import arrow_agg, arrow_calc, async_calc, vectorized
from millstream.table import plan as p
from millstream.table.types import DataTypes
from millstream.table.expression import Resolved, TableException, cast_value, text_of
from millstream.table.rank_functions import RetractableRankFunction
from millstream.table.regular_join import RegularJoinFunction
from millstream.table.runtime_functions import (CalcFunction, CorrelateFunction, GroupAggregateFunction, LimitFunction,
                                                MapRowFunction, PythonGroupAggregateFunction, SortLimitFunction, row_of)
from millstream.table.time_functions import (DeduplicateFunction, OverAggregateFunction, RankFunction, RowtimeAssigner,
                                             WindowAccumulate, WindowEmit, WindowTVFFunction, window_assigner)

__all__ = ["optimize", "translate", "KeyOf", "really_updating", "register_translation", "register_rank_rule"]


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
            source = child.input
            if isinstance(source, p.ConnectorScan) and condition is not None:
                source = partition_pruning_rule(source, condition)
            return p.Calc(node.columns, source, projections, condition)
        if isinstance(child, p.ConnectorScan) and node.condition is not None:
            child = partition_pruning_rule(child, node.condition)
        return replace(node, input=child)
    if isinstance(node, p.Aggregate):
        node = replace(node, input=optimize(node.input))
        return window_aggregate_rule(node) or node
    if isinstance(node, p.Rank):
        node = replace(node, input=optimize(node.input))
        for rule in _RANK_RULES:
            rewritten = rule(node)
            if rewritten is not None:
                return rewritten
        return node
    fields = {"input", "left", "right"}
    changes: dict[str, Any] = {f: optimize(getattr(node, f)) for f in fields if isinstance(getattr(node, f, None), p.PlanNode)}
    if isinstance(node, p.Union):
        changes["parts"] = tuple(optimize(x) for x in node.parts)
    return replace(node, **changes) if changes else node


def partition_pruning_rule(scan: p.ConnectorScan, condition: Resolved) -> p.ConnectorScan:
    """*Partition pruning*: the conjuncts of a filter over a partitioned filesystem table that use
    only its partition columns go into the scan, which then reads only the partitions satisfying
    them (Flink's PushPartitionIntoTableSourceScanRule); the Calc keeps its whole condition."""
    c = scan.connector
    keys = getattr(c, "partition_keys", ())
    if getattr(c, "connector", None) != "filesystem" or not keys:
        return scan
    from millstream.table.filesystem_source import partition_conjuncts  # lazy: only for partitioned tables
    names = [n for n, _ in scan.columns]
    seen = {f.text for f in scan.partition_filters}
    pushed = [f for f in partition_conjuncts(condition, {names.index(k) for k in keys if k in names}) if f.text not in seen]
    return replace(scan, partition_filters=scan.partition_filters + tuple(pushed)) if pushed else scan


def window_aggregate_rule(node: p.Aggregate) -> p.PlanNode | None:
    """*Window aggregate*: a GROUP BY of ``window_start`` and ``window_end`` over a window TVF is a
    window aggregation (one insert-only row per window, when it fires, late rows dropped) instead of
    an updating group aggregation of the TVF's rows. The Aggregate's input is the Calc that computes
    its keys and arguments over the TVF; the window columns leave the keys and come back as window
    properties, and a Calc puts the columns back in the Aggregate's order. None: not such a plan."""
    calc = node.input
    if not (isinstance(calc, p.Calc) and isinstance(calc.input, p.WindowTVF) and not calc.has_python):
        return None
    tvf = calc.input
    width = len(tvf.input.columns)
    roles: dict[int, str] = {}  # key position -> window property
    for pos, k in enumerate(node.keys):
        e = calc.projections[k]
        if e.kind == "ref" and e.value >= width:
            roles[pos] = ("start", "end", "rowtime")[e.value - width]
    if not {"start", "end"} <= set(roles.values()):
        return None
    window_cols = {node.keys[pos] for pos in roles}
    kept = [j for j in range(len(calc.projections)) if j not in window_cols]
    refs_window = [_refs_at_least(calc.projections[j], width) for j in kept]
    if any(refs_window) or (calc.condition is not None and _refs_at_least(calc.condition, width)):
        return None
    pre = p.Calc(tuple(calc.columns[j] for j in kept), tvf.input, tuple(calc.projections[j] for j in kept), calc.condition)
    position = {j: i for i, j in enumerate(kept)}
    keys = tuple(position[k] for pos, k in enumerate(node.keys) if pos not in roles)
    calls = tuple(replace(c, arg=None if c.arg is None else position[c.arg]) for c in node.calls)
    props = tuple(dict.fromkeys(roles[pos] for pos in sorted(roles)))
    names = [node.names[pos] for pos in range(len(node.keys)) if pos not in roles]
    agg_cols = tuple(node.columns[len(node.keys):])
    prop_cols = tuple((f"window_{'time' if r == 'rowtime' else r}", _property_type(r, tvf)) for r in props)
    columns = tuple((n, pre.columns[k][1]) for n, k in zip(names, keys)) + agg_cols + prop_cols
    agg = p.WindowAggregate(columns, pre, keys, tvf.window, calls, props, group_window=False)
    # back to the Aggregate's column order: keys (window ones from the properties), then aggregates
    out: list[Resolved] = []
    plain = iter(range(len(keys)))
    for pos in range(len(node.keys)):
        i = len(keys) + len(calls) + props.index(roles[pos]) if pos in roles else next(plain)
        out.append(Resolved("ref", columns[i][1], value=i, text=columns[i][0]))
    out += [Resolved("ref", columns[len(keys) + j][1], value=len(keys) + j, text=columns[len(keys) + j][0])
            for j in range(len(calls))]
    return p.Calc(node.columns, agg, tuple(out), None)


def _refs_at_least(e: Resolved, width: int) -> bool:
    return (e.kind == "ref" and e.value >= width) or any(_refs_at_least(a, width) for a in e.args)


def _property_type(role: str, tvf: p.WindowTVF) -> Any:
    return dict(zip(("start", "end", "rowtime"), (c[1] for c in tvf.columns[-3:])))[role]


def translate(node: p.PlanNode, env: Any, batch: bool) -> Any:
    """The DataStream of Rows (with row kinds) that ``node`` produces in ``env``."""
    t = _TRANSLATIONS[type(node)]
    return t(node, env, batch)


def _values(node: p.Values, env: Any, batch: bool) -> Any:
    return env.from_collection([row_of(r) for r in node.rows]).name(node.describe())


def _stream_scan(node: p.StreamScan, env: Any, batch: bool) -> Any:
    converted = tuple(i for i, (_, t) in enumerate(node.columns) if t.root in _CONVERTED)
    f = _ToRow(len(node.columns), converted, tuple(t for _, t in node.columns))
    return node.stream.map(f).name(node.describe())


_CONVERTED = ("TIMESTAMP", "TIMESTAMP_LTZ", "FLOAT")  # Instant -> datetime, float -> single precision


class _ToRow:
    """A DataStream's records as positional Rows (an atomic value is a one-column row), with the
    values of timestamp and FLOAT columns as the table holds them (an Instant as a datetime)."""

    def __init__(self, width: int, converted: tuple[int, ...] = (), types: tuple[Any, ...] = ()) -> None:
        self.width, self.converted, self.types = width, converted, types

    def __call__(self, value: Any) -> Row:
        if isinstance(value, Row):
            r = row_of(self._convert(list(value)))
            r.set_row_kind(value.get_row_kind())
            return r
        if isinstance(value, (tuple, list)) and self.width > 1:
            return row_of(self._convert(list(value)))
        return row_of(self._convert([value]))

    def _convert(self, values: list[Any]) -> list[Any]:
        for i in self.converted:
            values[i] = cast_value(values[i], self.types[i])
        return values


def _connector_scan(node: p.ConnectorScan, env: Any, batch: bool) -> Any:
    if node.partition_filters:
        return node.connector.source(env, node.partition_filters).name(node.describe())
    return node.connector.source(env).name(node.describe())


def _forward(node: p.PlanNode, env: Any, batch: bool, f: Any) -> Any:
    """A row-wise operator runs at its input's parallelism, forward-connected (as Flink's planner
    places Calc and Correlate): no shuffle, so rows keep their order (a later limit sees the
    source's order)."""
    stream = translate(node.inputs[0], env, batch)
    return stream.flat_map(f).name(node.describe()).set_parallelism(stream.get_transformation().parallelism)


def _calc(node: p.Calc, env: Any, batch: bool) -> Any:
    exprs = (*node.projections, node.condition)
    if any(async_calc.has_async_udf(e) for e in exprs):
        return _async_calc(node, env, batch)
    if any(vectorized.has_pandas_udf(e) for e in exprs):  # called per batch of rows (millstream.table.vectorized)
        size = cfg.Configuration.from_dict(table_options(env)).get(cfg.ARROW_BATCH_SIZE)
        f = vectorized.VectorizedCalc(node.projections, node.condition, len(node.input.columns), size)
        return _forward(node, env, batch, f)
    types = [t for _, t in node.input.columns]
    if (cfg.Configuration.from_dict(table_options(env)).get(cfg.VECTORIZED_CALC_ENABLED)
            and arrow_calc.vectorizes(node.projections, node.condition, types)):  # over Arrow arrays, exactly
        return _forward(node, env, batch, arrow_calc.ArrowCalc(node.projections, node.condition, types))
    return _forward(node, env, batch, CalcFunction(node.projections, node.condition))


def table_options(env: Any) -> dict[str, Any]:
    """The job's options as Flink's TableConfig reads them: set on the TableConfig, else in the
    environment's Configuration, else in the configuration file and MILLSTREAM_CONF_* variables."""
    options = cfg.load_configuration().to_dict()
    own = getattr(env, "_configuration", None)
    options.update(own.to_dict() if own is not None else {})
    config = getattr(env, "_table_config", None)
    options.update(config.get_configuration() if config is not None else {})
    return options


def _async_calc(node: p.Calc, env: Any, batch: bool) -> Any:
    """Flink's AsyncCalc: the async wait operator, ordered, configured by table.exec.async-scalar.*."""
    options = async_calc.async_options(table_options(env))
    f = async_calc.AsyncCalc(node.projections, node.condition, len(node.input.columns))
    stream = translate(node.input, env, batch)
    out = AsyncDataStream.ordered_wait_with_retry(stream, f, options["timeout_ms"], async_calc.retry_strategy(options),
                                                  options["capacity"])
    return out.name(node.describe()).set_parallelism(stream.get_transformation().parallelism)


def _map_row(node: p.MapRow, env: Any, batch: bool) -> Any:
    if getattr(node.func, "func_type", "general") == "pandas":  # one DataFrame per batch
        size = cfg.Configuration.from_dict(table_options(env)).get(cfg.ARROW_BATCH_SIZE)
        f = vectorized.VectorizedMap(node.func, node.input.columns, len(node.columns), size)
        return _forward(node, env, batch, f)
    return _forward(node, env, batch, MapRowFunction(node.func, node.input.names, len(node.columns)))


def _correlate(node: p.Correlate, env: Any, batch: bool) -> Any:
    width = len(node.columns) - (len(node.input.columns) if node.keep_input else 0)
    f = CorrelateFunction(node.func, node.args, node.input.names, node.keep_input, node.left_outer, width)
    return _forward(node, env, batch, f)


def _aggregate(node: p.Aggregate, env: Any, batch: bool) -> Any:
    if _two_phase(node, env, batch):
        return _local_global_aggregate(node, env, batch)
    stream = translate(node.input, env, batch)
    keys = node.keys
    f = GroupAggregateFunction(keys, node.calls, batch)
    keyed = stream.key_by(KeyOf(keys))
    return keyed.process(f).name(node.describe())


def _two_phase(node: p.Aggregate, env: Any, batch: bool) -> bool:
    """Whether the GROUP BY splits into a local phase over Arrow arrays and a global one
    (millstream.table.arrow_agg): insert-only input, exactly vectorizable aggregates, and in streaming
    mode mini-batch on (fewer intermediate updates are mini-batch's semantics in Flink)."""
    conf = cfg.Configuration.from_dict(table_options(env))
    if not conf.get(cfg.VECTORIZED_AGG_ENABLED) or conf.get(cfg.AGG_PHASE_STRATEGY) == "ONE_PHASE":
        return False
    if not batch and not conf.get(cfg.MINI_BATCH_ENABLED):
        return False
    return not really_updating(node.input) and \
        arrow_agg.vectorizes(node.keys, node.calls, [t for _, t in node.input.columns])


def _local_global_aggregate(node: p.Aggregate, env: Any, batch: bool) -> Any:
    stream = translate(node.input, env, batch)
    types = [t for _, t in node.input.columns]
    names = node.describe().replace("GroupAggregate(", "", 1)
    local = stream.flat_map(arrow_agg.LocalAggregate(node.keys, node.calls, types)) \
        .name("LocalGroupAggregate(" + names).set_parallelism(stream.get_transformation().parallelism)
    keys = range(len(node.keys))
    f = arrow_agg.GlobalAggregateFunction(len(node.keys), node.calls, batch)
    return local.key_by(KeyOf(keys)).process(f).name("GlobalGroupAggregate(" + names)


def _python_aggregate(node: p.PythonAggregate, env: Any, batch: bool) -> Any:
    f = PythonGroupAggregateFunction(node.keys, node.func, node.args, node.input.names, node.func.table_aggregate)
    return translate(node.input, env, batch).key_by(KeyOf(node.keys)).process(f).name(node.describe())


def _join(node: p.Join, env: Any, batch: bool) -> Any:
    left = translate(node.left, env, batch)
    right = translate(node.right, env, batch)
    connected = left.connect(right).key_by(KeyOf(node.left_keys), KeyOf(node.right_keys))
    # an inner join's output is final as it goes; an outer one's only at the end of a batch input
    f = RegularJoinFunction(node.kind, node.condition, len(node.left.columns), len(node.right.columns),
                            batch and node.kind != "INNER")
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


def _watermark_assigner(node: p.WatermarkAssigner, env: Any, batch: bool) -> Any:
    pushed = _watermarks_pushed_into_the_source(node, env)
    if pushed is not None:
        return pushed
    stream = translate(node.input, env, batch)
    return stream.assign_timestamps_and_watermarks(_sql_watermarks(node.delay, node.rowtime)).name(node.describe()) \
        .set_parallelism(stream.get_transformation().parallelism)


def _sql_watermarks(delay: int, rowtime: int) -> WatermarkStrategy:
    # Flink's SQL watermark is max(rowtime) - delay; Millstream's bounded-out-of-orderness one is
    # max - bound - 1, so the bound is delay - 1 (a delay of 0 has no exact equivalent: ascending
    # timestamps, watermark max - 1).
    kind = WatermarkStrategy.for_monotonous_timestamps() if delay == 0 else \
        WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(delay - 1))
    return kind.with_timestamp_assigner(RowtimeAssigner(rowtime))


def _watermarks_pushed_into_the_source(node: p.WatermarkAssigner, env: Any) -> Any:
    """Flink's watermark push-down (also across a projection of columns): a source that can
    (``ConnectorTable.source_with_watermarks``: Kafka) applies the watermark per split, so one partition ahead of
    another does not make the other's rows late. None when the input is not such a scan."""
    calc, scan = None, node.input
    if isinstance(scan, p.Calc) and scan.condition is None and not scan.has_python \
            and all(e.kind == "ref" for e in scan.projections):
        calc, scan = scan, scan.input
    if not isinstance(scan, p.ConnectorScan) or scan.updating:
        return None
    rowtime = node.rowtime if calc is None else calc.projections[node.rowtime].value
    stream = scan.connector.source_with_watermarks(env, _sql_watermarks(node.delay, rowtime))
    if stream is None:
        return None
    stream = stream.name(scan.describe(node.watermark))
    if calc is None:
        return stream
    return stream.flat_map(CalcFunction(calc.projections, None)).name(calc.describe()) \
        .set_parallelism(stream.get_transformation().parallelism)


def _window_aggregate(node: p.WindowAggregate, env: Any, batch: bool) -> Any:
    pre = node.input  # a Calc over the windowed table, whose column ``window.time_col`` is the time
    if node.window.event_time and isinstance(pre, p.Calc) and _times_may_differ(pre.input):
        pre = replace(pre, input=Restamp(pre.input.columns, pre.input, node.window.time_col))
    stream = translate(pre, env, batch)
    windowed = stream.key_by(KeyOf(node.keys)).window(window_assigner(node.window))
    out = windowed.aggregate(WindowAccumulate(node.calls), WindowEmit(node.properties)).name(node.describe())
    return out.set_parallelism(1) if not node.keys else out


@dataclass(frozen=True, eq=False)
class Restamp(p.SingleInputNode):
    """The rows as they are, their record timestamp from the rowtime column ``column``. Millstream's
    window operators read a row's event time from its record timestamp, Flink's SQL operators from
    the row: the two differ after an interval join (a joined row has two rowtimes, and carries the
    timestamp of whichever input row came second), so the planner puts this before such a window."""

    column: int = 0

    def describe(self) -> str:
        return f"Restamp(rowtime=[{self.names[self.column]}])"


def _times_may_differ(node: p.PlanNode) -> bool:
    """Whether ``node``'s rows may carry record timestamps that are not their rowtime column's
    value: there is an interval join below it that no watermark assigner re-stamps."""
    if isinstance(node, p.WatermarkAssigner):
        return False
    # by name: interval_join (which registers its node's translation here) imports this module
    return type(node).__name__ == "IntervalJoin" or any(_times_may_differ(i) for i in node.inputs)


def _restamp(node: Restamp, env: Any, batch: bool) -> Any:
    stream = translate(node.input, env, batch)
    factory = operator_factories.RestampFactory(RowtimeAssigner(node.column))
    return stream._one_input(node.describe(), factory).set_parallelism(stream.get_transformation().parallelism)


def _window_tvf(node: p.WindowTVF, env: Any, batch: bool) -> Any:
    if node.window.kind == "session":
        raise p_unsupported("SESSION windows are supported in a window aggregation (GROUP BY window_start, "
                            "window_end), not as a table of their own")
    return _forward(node, env, batch, WindowTVFFunction(node.window))


def _over_aggregate(node: p.OverAggregate, env: Any, batch: bool) -> Any:
    if node.input.updating and really_updating(node.input):
        raise p_unsupported("OVER aggregation needs an insert-only input; this one is updating")
    stream = translate(node.input, env, batch).key_by(KeyOf(node.partition))
    f = OverAggregateFunction(node.order, node.event_time, node.rows, node.preceding, node.calls)
    out = stream.process(f).name(node.describe())
    return out.set_parallelism(1) if not node.partition else out


def _rank(node: p.Rank, env: Any, batch: bool) -> Any:
    stream = translate(node.input, env, batch).key_by(KeyOf(node.partition))
    if really_updating(node.input):  # Flink's RetractStrategy: the input's retractions move ranks
        f: Any = RetractableRankFunction(node.order, node.n, node.with_rank)
    else:
        f = RankFunction(node.order, node.n, node.with_rank)
    out = stream.process(f).name(node.describe())
    return out.set_parallelism(1) if not node.partition else out


def _deduplicate(node: p.Deduplicate, env: Any, batch: bool) -> Any:
    if really_updating(node.input):
        raise p_unsupported("deduplication needs an insert-only input; this one is updating")
    stream = translate(node.input, env, batch).key_by(KeyOf(node.keys))
    f = DeduplicateFunction(node.keep_last, node.order if node.rowtime else None, node.with_rank)
    return stream.process(f).name(node.describe())


def really_updating(node: p.PlanNode) -> bool:
    """Whether ``node`` produces retractions (an Aggregate in batch mode does not, but is marked updating)."""
    if isinstance(node, (p.Aggregate, p.Rank)) or (isinstance(node, p.Join) and node.kind != "INNER"):
        return True
    if isinstance(node, p.ConnectorScan):
        return node.updating
    if isinstance(node, p.WindowAggregate):
        return False
    if isinstance(node, p.Deduplicate) and node.updating:
        return True
    return any(really_updating(i) for i in node.inputs)


def register_translation(node_type: type, translation: Any) -> None:
    """Adds the translation of a plan node defined in its own module (interval and window joins)."""
    _TRANSLATIONS[node_type] = translation


def register_rank_rule(rule: Any) -> None:
    """Adds a rewrite of a Top-N (``p.Rank``) defined in its own module (Window Top-N); a rule
    returns the rewritten plan, or None when it does not apply."""
    _RANK_RULES.append(rule)


_RANK_RULES: list[Any] = []


def p_unsupported(message: str) -> Exception:
    return TableException(message)


_TRANSLATIONS: dict[type, Any] = {
    p.Values: _values, p.StreamScan: _stream_scan, p.ConnectorScan: _connector_scan, p.Calc: _calc,
    p.MapRow: _map_row, p.Correlate: _correlate, p.Aggregate: _aggregate, p.Join: _join, p.Union: _union,
    p.SortLimit: _sort_limit, p.PythonAggregate: _python_aggregate, p.WatermarkAssigner: _watermark_assigner,
    p.WindowAggregate: _window_aggregate, p.WindowTVF: _window_tvf, p.OverAggregate: _over_aggregate, p.Rank: _rank,
    p.Deduplicate: _deduplicate, Restamp: _restamp,
}
