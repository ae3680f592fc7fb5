"""The logical plan: immutable nodes a :class:`~millstream.table.Table` is made of.

Each node knows its output ``columns`` (name, DataType) and whether it produces an *updating*
changelog (rows that are later retracted: -U/+U/-D). Expressions in nodes are already resolved
against their input's columns. :mod:`millstream.table.planner` rewrites a plan with a few rules
and translates it to DataStream transformations.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from millstream.table.expression import Resolved
from millstream.table.runtime_functions import AggCall
from millstream.table.types import DataType

__all__ = ["PlanNode", "Values", "StreamScan", "ConnectorScan", "Calc", "MapRow", "Correlate", "Aggregate",
           "Join", "Union", "SortLimit", "Columns", "PythonAggregate", "WatermarkAssigner", "WindowAggregate",
           "WindowTVF", "OverAggregate", "Rank", "Deduplicate"]

Columns = tuple[tuple[str, DataType], ...]


@dataclass(frozen=True, eq=False)
class PlanNode:
    columns: Columns

    @property
    def inputs(self) -> tuple["PlanNode", ...]:
        return ()

    @property
    def updating(self) -> bool:
        return any(i.updating for i in self.inputs)

    @property
    def names(self) -> list[str]:
        return [c[0] for c in self.columns]

    def explain(self, indent: int = 0) -> str:
        lines = [("   " * (indent - 1) + "+- " if indent else "") + self.describe()]
        for i in self.inputs:
            lines.append(i.explain(indent + 1))
        return "\n".join(lines)

    def describe(self) -> str:
        return type(self).__name__


@dataclass(frozen=True, eq=False)
class SingleInputNode(PlanNode):
    """A node over one input (its first field)."""

    input: PlanNode = None  # type: ignore[assignment]

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.input,)


@dataclass(frozen=True, eq=False)
class Values(PlanNode):
    """``from_elements``: rows known to the client."""

    rows: tuple[tuple[Any, ...], ...] = ()
    name: str = ""

    def describe(self) -> str:
        return f"TableSourceScan(table=[[{self.name}]], fields=[{', '.join(self.names)}])"


@dataclass(frozen=True, eq=False)
class StreamScan(PlanNode):
    """``from_data_stream``: a DataStream of the same environment."""

    stream: Any = None
    name: str = ""

    def describe(self) -> str:
        return f"DataStreamScan(table=[[{self.name}]], fields=[{', '.join(self.names)}])"


@dataclass(frozen=True, eq=False)
class ConnectorScan(PlanNode):
    """A table of a connector (``create_temporary_table`` / ``CREATE TABLE``)."""

    path: str = ""
    connector: Any = None  # millstream.table.connectors.ConnectorTable
    is_bounded: bool = True
    partition_filters: tuple[Resolved, ...] = ()  # WHERE conjuncts on partition columns pushed into the scan

    def describe(self, watermark: str | None = None) -> str:
        """As Flink names the scan; with the ``watermark`` pushed into it, in the table's name; with
        pruned partitions, the partitions it reads (``partitions=[{dt=1, hr=2}]``)."""
        table = self.path
        if self.partition_filters:
            from millstream.table.filesystem_source import pruned_partitions  # lazy: lists the directories
            c = self.connector
            parts = pruned_partitions(c.columns, c.options, c.partition_keys, self.partition_filters)
            table += ", partitions=[" + ", ".join(
                "{" + ", ".join(f"{k}={v}" for k, v in zip(c.partition_keys, vs)) + "}" for _, vs in parts) + "]"
        table = table if watermark is None else f"{table}, watermark=[{watermark}]"
        return f"TableSourceScan(table=[[{table}]], fields=[{', '.join(self.names)}])"

    @property
    def updating(self) -> bool:
        """An upsert-kafka table reads a changelog (+I/-U/+U/-D after its ChangelogNormalize)."""
        return getattr(self.connector, "connector", None) == "upsert-kafka"


@dataclass(frozen=True, eq=False)
class Calc(SingleInputNode):
    projections: tuple[Resolved, ...] = ()
    condition: Resolved | None = None

    @property
    def has_python(self) -> bool:
        exprs = [*self.projections, *([self.condition] if self.condition else [])]
        return any(_has_udf(e) for e in exprs)

    def describe(self) -> str:
        select = ", ".join(str(p) if str(p) == n else f"{p} AS {n}" for p, n in zip(self.projections, self.names))
        where = f", where=[{self.condition}]" if self.condition is not None else ""
        return f"{'PythonCalc' if self.has_python else 'Calc'}(select=[{select}]{where})"


def _has_udf(e: Resolved) -> bool:
    return e.kind == "udf" or any(_has_udf(a) for a in e.args)


@dataclass(frozen=True, eq=False)
class MapRow(SingleInputNode):
    """``Table.map(udf)``: a scalar function of the whole row."""

    func: Any = None

    def describe(self) -> str:
        return f"PythonCalc(select=[{self.func.name}({', '.join(self.input.names)})])"


@dataclass(frozen=True, eq=False)
class Correlate(SingleInputNode):
    func: Any = None
    args: tuple[Resolved, ...] | None = None  # None: the whole row
    keep_input: bool = True
    left_outer: bool = False

    def describe(self) -> str:
        args = ", ".join(map(str, self.args)) if self.args is not None else ", ".join(self.input.names)
        return (f"PythonCorrelate(invocation=[{self.func.name}({args})], select=[{','.join(self.names)}], "
                f"joinType=[{'LEFT' if self.left_outer else 'INNER'}])")


@dataclass(frozen=True, eq=False)
class Aggregate(SingleInputNode):
    """GROUP BY ``keys`` (input column indices) computing ``calls``; output: keys then aggregates."""

    keys: tuple[int, ...] = ()
    calls: tuple[AggCall, ...] = ()

    @property
    def updating(self) -> bool:
        return True  # in streaming mode; batch mode emits final values (the planner knows the mode)

    def describe(self) -> str:
        names = self.input.names
        select = [names[k] for k in self.keys]
        for call, name in zip(self.calls, self.names[len(self.keys):]):
            distinct = "DISTINCT " if getattr(call, "distinct", False) else ""  # a pandas UDAF has no DISTINCT
            arg = "*" if call.arg is None else distinct + names[call.arg]
            select.append(f"{call.func.upper()}({arg}) AS {name}")
        group = f"groupBy=[{', '.join(names[k] for k in self.keys)}], " if self.keys else ""
        return f"GroupAggregate({group}select=[{', '.join(select)}])"


@dataclass(frozen=True, eq=False)
class PythonAggregate(SingleInputNode):
    """GROUP BY ``keys`` with one Python udaf/udtaf (``aggregate`` / ``flat_aggregate``)."""

    keys: tuple[int, ...] = ()
    func: Any = None
    args: tuple[Resolved, ...] | None = None

    @property
    def updating(self) -> bool:
        return True

    def describe(self) -> str:
        names = self.input.names
        kind = "PythonGroupTableAggregate" if self.func.table_aggregate else "PythonGroupAggregate"
        args = ", ".join(map(str, self.args)) if self.args is not None else ", ".join(names)
        return f"{kind}(groupBy=[{', '.join(names[k] for k in self.keys)}], select=[{self.func.name}({args})])"


@dataclass(frozen=True, eq=False)
class TwoInputNode(PlanNode):
    """A join of ``left`` and ``right`` on equal ``left_keys`` / ``right_keys`` (the regular,
    interval and window joins)."""

    left: PlanNode = None  # type: ignore[assignment]
    right: PlanNode = None  # type: ignore[assignment]
    left_keys: tuple[int, ...] = ()
    right_keys: tuple[int, ...] = ()

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.left, self.right)


@dataclass(frozen=True, eq=False)
class Join(TwoInputNode):
    """A regular (unbounded) equi-join; ``join_type`` INNER, LEFT, RIGHT or FULL (``left_outer``:
    LEFT, for callers that predate the others). An outer join is updating: a padded row is
    retracted when its first match arrives."""

    condition: Resolved | None = None  # over the joined row: what is not an equality of keys
    left_outer: bool = False
    join_type: str = ""

    @property
    def kind(self) -> str:
        return self.join_type or ("LEFT" if self.left_outer else "INNER")

    @property
    def updating(self) -> bool:
        return self.kind != "INNER" or super().updating

    def describe(self) -> str:
        eqs = [f"{self.left.names[a]} = {self.right.names[b]}" for a, b in zip(self.left_keys, self.right_keys)]
        if self.condition is not None:
            eqs.append(str(self.condition))
        kind = {"INNER": "InnerJoin", "LEFT": "LeftOuterJoin", "RIGHT": "RightOuterJoin", "FULL": "FullOuterJoin"}
        return (f"Join(joinType=[{kind[self.kind]}], where=[{' AND '.join(eqs)}], select=[{', '.join(self.names)}], "
                "leftInputSpec=[NoUniqueKey], rightInputSpec=[NoUniqueKey])")


@dataclass(frozen=True, eq=False)
class Union(PlanNode):
    parts: tuple[PlanNode, ...] = ()

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return self.parts

    def describe(self) -> str:
        return f"Union(all=[true], union=[{', '.join(self.names)}])"


@dataclass(frozen=True, eq=False)
class SortLimit(SingleInputNode):
    order: tuple[tuple[int, bool], ...] = ()
    offset: int = 0
    fetch: int | None = None

    def describe(self) -> str:
        order = ", ".join(f"{self.names[c]} {'ASC' if asc else 'DESC'}" for c, asc in self.order)
        fetch = "unlimited" if self.fetch is None else self.fetch
        kind = "SortLimit" if self.order else "Limit"
        return f"{kind}(orderBy=[{order}], offset=[{self.offset}], fetch=[{fetch}])"


@dataclass(frozen=True, eq=False)
class WatermarkAssigner(SingleInputNode):
    """``WATERMARK FOR rowtime AS rowtime - INTERVAL ...``: rows get their rowtime as event time and
    the watermark trails the largest rowtime seen by ``delay`` ms."""

    rowtime: int = 0
    delay: int = 0

    @property
    def watermark(self) -> str:
        """The watermark expression as Flink's plans print it."""
        name = self.names[self.rowtime]
        return f"-({name}, {self.delay}:INTERVAL SECOND)" if self.delay else name

    def describe(self) -> str:
        return f"WatermarkAssigner(rowtime=[{self.names[self.rowtime]}], watermark=[{self.watermark}])"


@dataclass(frozen=True, eq=False)
class WindowAggregate(SingleInputNode):
    """A window aggregation (group window or window TVF + GROUP BY window_start, window_end):
    output: the group keys, the aggregates, then the window ``properties`` (start, end, rowtime,
    proctime). Insert-only: a window's row leaves once, when the window fires."""

    keys: tuple[int, ...] = ()
    window: Any = None  # millstream.table.window.WindowSpec
    calls: tuple[AggCall, ...] = ()
    properties: tuple[str, ...] = ()
    group_window: bool = True  # Table API group window (Flink's GroupWindowAggregate) or a window TVF's

    @property
    def updating(self) -> bool:
        return False

    def describe(self) -> str:
        names = self.input.names
        select = [names[k] for k in self.keys]
        for call, name in zip(self.calls, self.names[len(self.keys):]):
            select.append(f"{call.func.upper()}({'*' if call.arg is None else names[call.arg]}) AS {name}")
        select += self.names[len(self.keys) + len(self.calls):]
        group = ", ".join(names[k] for k in self.keys)
        kind = "GroupWindowAggregate" if self.group_window else "WindowAggregate"
        return f"{kind}(groupBy=[{group}], window=[{self.window.describe()}], select=[{', '.join(select)}])"


@dataclass(frozen=True, eq=False)
class WindowTVF(SingleInputNode):
    """``TABLE(TUMBLE|HOP|CUMULATE(TABLE t, DESCRIPTOR(ts), ...))``: the input's columns and
    window_start, window_end, window_time for each window a row is in."""

    window: Any = None

    def describe(self) -> str:
        return f"WindowTableFunction(window=[{self.window.describe()}])"


@dataclass(frozen=True, eq=False)
class OverAggregate(SingleInputNode):
    """OVER aggregation: the input's columns and one aggregate per call over each row's frame."""

    partition: tuple[int, ...] = ()
    order: int = 0  # the time attribute column
    event_time: bool = True
    rows: bool = True  # ROWS frame (else RANGE)
    preceding: int | None = None  # rows or ms; None: UNBOUNDED PRECEDING
    calls: tuple[AggCall, ...] = ()

    def describe(self) -> str:
        names = self.input.names
        if self.preceding is None:
            frame = "UNBOUNDED PRECEDING"
        else:
            frame = f"{self.preceding} PRECEDING" if self.rows else f"{self.preceding}:INTERVAL SECOND PRECEDING"
        aggs = ", ".join(f"{c.func.upper()}({'*' if c.arg is None else names[c.arg]}) AS w0$o{i}"
                         for i, c in enumerate(self.calls))
        return (f"OverAggregate(partitionBy=[{', '.join(names[k] for k in self.partition)}], "
                f"orderBy=[{names[self.order]} ASC], window=[{'ROWS' if self.rows else 'RANG'} BETWEEN {frame} AND "
                f"CURRENT ROW], select=[{', '.join(names)}, {aggs}])")


@dataclass(frozen=True, eq=False)
class Rank(SingleInputNode):
    """Top-N: the first ``n`` rows per partition by ``order``, with the rank number as the last
    column when ``with_rank``. An updating result."""

    partition: tuple[int, ...] = ()
    order: tuple[tuple[int, bool], ...] = ()
    n: int = 1
    with_rank: bool = True

    @property
    def updating(self) -> bool:
        return True

    def describe(self) -> str:
        names = self.input.names
        order = ", ".join(f"{names[c]} {'ASC' if asc else 'DESC'}" for c, asc in self.order)
        strategy = "RetractStrategy" if self.input.updating else "AppendFastStrategy"
        return (f"Rank(strategy=[{strategy}], rankType=[ROW_NUMBER], rankRange=[rankStart=1, "
                f"rankEnd={self.n}], partitionBy=[{', '.join(names[k] for k in self.partition)}], orderBy=[{order}], "
                f"select=[{', '.join(self.names)}])")


@dataclass(frozen=True, eq=False)
class Deduplicate(SingleInputNode):
    """Deduplication: one row per key, the first or the last by a time attribute."""

    keys: tuple[int, ...] = ()
    keep_last: bool = False
    order: int = 0
    rowtime: bool = False
    with_rank: bool = False

    @property
    def updating(self) -> bool:
        return self.keep_last or self.rowtime

    def describe(self) -> str:
        names = self.input.names
        return (f"Deduplicate(keep=[{'LastRow' if self.keep_last else 'FirstRow'}], "
                f"key=[{', '.join(names[k] for k in self.keys)}], order=[{'ROWTIME' if self.rowtime else 'PROCTIME'}])")
