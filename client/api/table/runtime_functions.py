"""The functions a table program's operators run in the tasks: pure cores (a group's accumulators,
a join side's rows) and the DataStream functions that hold them in keyed state.

Records are :class:`~millstream.common.Row` values, positional, carrying their
:class:`~millstream.common.RowKind`: +I and +U add to a result, -U and -D take back. A streaming
GROUP BY emits +I for a new group, -U/+U when its aggregates change, -D when its last row is
retracted (Flink's GroupAggFunction); in batch mode it emits each group's final values once, at
the end of input (a timer at the final watermark).
"""
from __future__ import annotations

import datetime
import decimal
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from millstream.common.row import Row, RowKind
from millstream.common.typeinfo import Types
from millstream.datastream.functions import FlatMapFunction, KeyedProcessFunction, MapFunction
from millstream.datastream.state import ValueStateDescriptor
from millstream.table.expression import Resolved, to_float32
from millstream.table.types import wrap_int

__all__ = ["CalcFunction", "CorrelateFunction", "GroupAggregateFunction", "LimitFunction",
           "SortLimitFunction", "RowToText", "AggCall", "GroupState", "row_of", "is_accumulate", "END_OF_INPUT"]

END_OF_INPUT = 2**63 - 2  # fires at the final watermark (Long.MAX_VALUE) a bounded input ends with


def is_accumulate(kind: RowKind) -> bool:
    return kind in (RowKind.INSERT, RowKind.UPDATE_AFTER)


def row_of(values: Sequence[Any], kind: RowKind = RowKind.INSERT) -> Row:
    r = Row(*values)
    if kind is not RowKind.INSERT:
        r.set_row_kind(kind)
    return r


class CalcFunction(FlatMapFunction):
    """Flink's Calc: a filter and a projection in one pass; the row kind passes through."""

    def __init__(self, projections: Sequence[Resolved], condition: Resolved | None) -> None:
        self.projections = tuple(projections)
        self.condition = condition

    def flat_map(self, value: Row) -> Iterable[Row]:
        values = list(value)
        if self.condition is not None and self.condition.eval(values) is not True:
            return
        yield row_of([p.eval(values) for p in self.projections], value.get_row_kind())


class MapRowFunction(FlatMapFunction):
    """``Table.map(udf)``: the UDF takes the whole row (a named Row) and returns a row or a value."""

    def __init__(self, func: Any, input_names: Sequence[str], width: int) -> None:
        self.func, self.names, self.width = func, list(input_names), width

    def flat_map(self, value: Row) -> Iterable[Row]:
        out = self.func.eval(Row.of_names(self.names, list(value)))
        values = list(out) if isinstance(out, (Row, tuple, list)) and self.width > 1 else [out]
        if isinstance(out, Row) and self.width == 1 and len(out) == 1:
            values = list(out)
        yield row_of(values, value.get_row_kind())


class CorrelateFunction(FlatMapFunction):
    """A table function applied to each row (``flat_map``, ``join_lateral``, SQL ``LATERAL TABLE``):
    ``args`` None passes the whole row as a named Row; ``keep_input`` prefixes the input's columns."""

    def __init__(self, func: Any, args: Sequence[Resolved] | None, input_names: Sequence[str],
                 keep_input: bool, left_outer: bool = False, width: int = 0) -> None:
        self.func, self.args, self.names = func, None if args is None else tuple(args), list(input_names)
        self.keep_input, self.left_outer, self.width = keep_input, left_outer, width

    def flat_map(self, value: Row) -> Iterable[Row]:
        values = list(value)
        call_args = [Row.of_names(self.names, values)] if self.args is None else [a.eval(values) for a in self.args]
        kind = value.get_row_kind()
        produced = False
        for out in self.func.eval_rows(*call_args):
            produced = True
            yield row_of((values + list(out)) if self.keep_input else list(out), kind)
        if self.left_outer and not produced:
            yield row_of(values + [None] * self.width, kind)


# -- aggregation ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class AggCall:
    """One aggregate: ``COUNT``/``SUM``/``SUM0``/``MIN``/``MAX``/``AVG`` of input column ``arg``
    (None: ``COUNT(*)``); ``integral`` makes AVG truncate as Flink's AVG of an integer type."""

    func: str
    arg: int | None
    integral: bool = False
    single: bool = False  # a FLOAT argument: sums in single precision, as Flink's FLOAT arithmetic
    bits: int | None = None  # an integer argument's width: SUM / SUM0 wrap at it, as Flink's SUM(INT) is INT
    # COUNT(DISTINCT a) and the like: each non-NULL value counts once however many rows hold it; a
    # retraction takes it out when its last row goes (Flink's distinct aggregates keep a value ->
    # count map state per group, as here).
    distinct: bool = False

    def round(self, v: Any) -> Any:
        return to_float32(v) if self.single and v is not None else v

    def create(self) -> Any:
        if self.distinct:
            return [{}, self._create()]  # value -> rows holding it; the aggregate over the distinct values
        return self._create()

    def accumulate(self, acc: Any, row: Sequence[Any], sign: int) -> Any:
        if not self.distinct:
            return self._accumulate(acc, row, sign)
        v = row[self.arg] if self.arg is not None else None
        if v is None:
            return acc
        seen = acc[0]
        n = seen.get(v, 0) + sign
        if n > 0:
            seen[v] = n
        else:
            seen.pop(v, None)
        if (sign > 0 and n == 1) or (sign < 0 and n == 0):  # the value's first row came or its last went
            self._accumulate(acc[1], row, sign)
        return acc

    def value(self, acc: Any) -> Any:
        return self._value(acc[1] if self.distinct else acc)

    def _create(self) -> Any:
        if self.func in ("min", "max"):
            return {}  # value -> count: retractable
        if self.func == "avg":
            return [0, 0]
        return [0, 0]  # count: [n]; sum: [sum, non-null count]

    def _accumulate(self, acc: Any, row: Sequence[Any], sign: int) -> Any:
        v = None if self.arg is None else row[self.arg]
        if self.func == "count":
            if self.arg is None or v is not None:
                acc[0] += sign
            return acc
        if v is None:
            return acc
        if self.func in ("min", "max"):
            n = acc.get(v, 0) + sign
            if n:
                acc[v] = n
            else:
                acc.pop(v, None)
            return acc
        acc[0] = self.round(acc[0] + sign * v)
        acc[1] += sign
        return acc

    def _value(self, acc: Any) -> Any:
        f = self.func
        if f == "count":
            return acc[0]
        if f in ("min", "max"):
            return (min if f == "min" else max)(acc) if acc else None
        if f == "sum0":
            return acc[0] if self.bits is None else wrap_int(acc[0], self.bits)
        if acc[1] == 0:
            return None
        if f == "sum":  # wrapping the total equals wrapping each step (arithmetic modulo 2**bits)
            return acc[0] if self.bits is None else wrap_int(acc[0], self.bits)
        total, n = acc
        if self.integral:
            q = abs(total) // n
            return q if total >= 0 else -q
        return self.round(total / n)


@dataclass
class GroupState:
    """A group's accumulators, its count of rows (Flink's record counter) and its last output."""

    accs: list[Any]
    rows: int = 0
    emitted: tuple[Any, ...] | None = None

    @staticmethod
    def new(calls: Sequence[AggCall]) -> "GroupState":
        return GroupState([c.create() for c in calls])

    def apply(self, calls: Sequence[AggCall], row: Sequence[Any], accumulate: bool) -> None:
        sign = 1 if accumulate else -1
        self.rows += sign
        for c, acc in zip(calls, self.accs):
            c.accumulate(acc, row, sign)

    def values(self, calls: Sequence[AggCall]) -> tuple[Any, ...]:
        return tuple(c.value(a) for c, a in zip(calls, self.accs))

    def changelog(self, key: tuple[Any, ...], calls: Sequence[AggCall]) -> tuple[list[Row], bool]:
        """What a streaming GROUP BY emits after a row was applied, and whether the group is gone."""
        if self.rows <= 0:
            out = [row_of(key + self.emitted, RowKind.DELETE)] if self.emitted is not None else []
            return out, True
        new = self.values(calls)
        if self.emitted is None:
            self.emitted = new
            return [row_of(key + new)], False
        if new == self.emitted:
            return [], False
        old, self.emitted = self.emitted, new
        return [row_of(key + old, RowKind.UPDATE_BEFORE), row_of(key + new, RowKind.UPDATE_AFTER)], False


class GroupAggregateFunction(KeyedProcessFunction):
    """Flink's GroupAggregate on a keyed stream: state per group (see the module docstring)."""

    def __init__(self, keys: Sequence[int], calls: Sequence[AggCall], batch: bool) -> None:
        self.keys, self.calls, self.batch = tuple(keys), tuple(calls), batch

    def open(self, runtime_context: Any) -> None:
        self.state = runtime_context.get_state(ValueStateDescriptor("group", Types.PICKLED_BYTE_ARRAY()))

    def process_element(self, value: Row, ctx: Any) -> Iterable[Row]:
        values = list(value)
        group = self.state.value()
        if group is None:
            if not is_accumulate(value.get_row_kind()):
                return  # a retraction of a group this task never saw: Flink ignores it too
            group = GroupState.new(self.calls)
            if self.batch:
                ctx.timer_service().register_event_time_timer(END_OF_INPUT)
        self._fold(group, values, is_accumulate(value.get_row_kind()))
        if self.batch:
            self.state.update(group)
            return
        out, gone = group.changelog(tuple(values[k] for k in self.keys), self.calls)
        if gone:
            self.state.clear()
        else:
            self.state.update(group)
        yield from out

    def _fold(self, group: GroupState, values: list[Any], accumulate: bool) -> None:
        """Adds (or retracts) one input row to its group (the two-phase global phase folds partials)."""
        group.apply(self.calls, values, accumulate)

    def on_timer(self, timestamp: int, ctx: Any) -> Iterable[Row]:
        group = self.state.value()
        if group is not None and group.rows > 0:
            key = ctx.get_current_key()
            yield row_of(tuple(key) + group.values(self.calls))
        self.state.clear()


# -- limit and sort ---------------------------------------------------------------------------


class LimitFunction(KeyedProcessFunction):
    """``limit`` without an order on an insert-only stream: the first ``offset + fetch`` rows of
    the single (constant-keyed) stream pass, less the first ``offset``."""

    def __init__(self, offset: int, fetch: int | None) -> None:
        self.offset, self.fetch = offset, fetch

    def open(self, runtime_context: Any) -> None:
        self.seen = runtime_context.get_state(ValueStateDescriptor("seen", Types.PICKLED_BYTE_ARRAY()))

    def process_element(self, value: Row, ctx: Any) -> Iterable[Row]:
        n = self.seen.value() or 0
        self.seen.update(n + 1)
        if n >= self.offset and (self.fetch is None or n < self.offset + self.fetch):
            yield value


class SortLimitFunction(KeyedProcessFunction):
    """Batch ``order_by`` (with ``offset``/``fetch``): every row is kept until the end of input,
    then emitted in order. ``order`` holds (column, ascending); nulls sort first ascending."""

    def __init__(self, order: Sequence[tuple[int, bool]], offset: int, fetch: int | None) -> None:
        self.order, self.offset, self.fetch = tuple(order), offset, fetch

    def open(self, runtime_context: Any) -> None:
        self.rows = runtime_context.get_state(ValueStateDescriptor("rows", Types.PICKLED_BYTE_ARRAY()))

    def process_element(self, value: Row, ctx: Any) -> Iterable[Row]:
        rows = self.rows.value()
        if rows is None:
            rows = []
            ctx.timer_service().register_event_time_timer(END_OF_INPUT)
        rows.append(tuple(value))
        self.rows.update(rows)
        return ()

    def on_timer(self, timestamp: int, ctx: Any) -> Iterable[Row]:
        rows = sort_rows(self.rows.value() or [], self.order)
        self.rows.clear()
        end = None if self.fetch is None else self.offset + self.fetch
        for r in rows[self.offset:end]:
            yield row_of(r)


def sort_rows(rows: list[tuple[Any, ...]], order: Sequence[tuple[int, bool]]) -> list[tuple[Any, ...]]:
    out = list(rows)
    for column, ascending in reversed(order):  # stable sorts, last key first
        out.sort(key=lambda r: (r[column] is not None, r[column]) if r[column] is not None else (False, 0),
                 reverse=not ascending)
    return out


class RowToText(MapFunction):
    """The print connector's line: ``+I[a, 1]`` (Flink's Row.toString of the sink's Java values;
    null prints ``null``). ``types``: the sink's column types, which decide how a FLOAT, a DOUBLE
    or a timestamp prints (Java's Float/Double/LocalDateTime/Instant toString)."""

    def __init__(self, types: Sequence[Any] = ()) -> None:
        self.types = tuple(types)

    def map(self, value: Row) -> str:
        texts = [java_text(v, self.types[i]) if i < len(self.types) else format_value(v) for i, v in enumerate(value)]
        return value.get_row_kind().short_string() + "[" + ", ".join(texts) + "]"


def java_text(v: Any, t: Any) -> str:
    """How Java's toString prints a value of table type ``t`` (what Flink's print connector writes)."""
    if v is None:
        return "null"
    root = t.root
    if root in ("FLOAT", "DOUBLE") and isinstance(v, (int, float)):
        return java_float(float(v), single=root == "FLOAT")
    if root in ("TIMESTAMP", "TIMESTAMP_LTZ") and isinstance(v, datetime.datetime):
        text = v.strftime("%Y-%m-%dT%H:%M")
        if v.second or v.microsecond or root == "TIMESTAMP_LTZ":  # LocalDateTime drops :00; Instant keeps it
            text += f":{v.second:02d}"
        if v.microsecond:
            frac = f"{v.microsecond:06d}"
            text += "." + (frac[:3] if frac.endswith("000") else frac)
        return text + ("Z" if root == "TIMESTAMP_LTZ" else "")
    return format_value(v)


def java_float(v: float, single: bool) -> str:
    """Java's Float.toString / Double.toString: the shortest digits that read back, ``1.0`` for
    whole numbers, and ``1.0E10`` notation below 10^-3 and from 10^7 up."""
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "Infinity" if v > 0 else "-Infinity"
    if single:
        digits = _shortest_single(v)
    else:
        digits = repr(v)
    if v == 0:
        return "-0.0" if str(v).startswith("-") else "0.0"
    if 1e-3 <= abs(v) < 1e7:
        d = decimal.Decimal(digits)
        text = format(d, "f")
        return text if "." in text else text + ".0"
    mantissa, _, exponent = f"{decimal.Decimal(digits):E}".partition("E")
    mantissa = mantissa.rstrip("0").rstrip(".") if "." in mantissa else mantissa
    if "." not in mantissa:
        mantissa += ".0"
    return f"{mantissa}E{int(exponent)}"


def _shortest_single(v: float) -> str:
    """The shortest decimal that rounds to the same single-precision float."""
    target = to_float32(v)
    for digits in range(1, 10):
        text = f"{target:.{digits}g}"
        if to_float32(float(text)) == target:
            return text
    return repr(target)


def format_value(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, Row):
        return "+I[" + ", ".join(format_value(x) for x in v) + "]"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(format_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{format_value(k)}={format_value(x)}" for k, x in v.items()) + "}"
    return str(v)


# -- Python aggregate functions (udaf / udtaf) --------------------------------------------------

BUNDLE_MS = 1000  # PyFlink's python.fn-execution.bundle.time default: results leave once per bundle


class PythonGroupAggregateFunction(KeyedProcessFunction):
    """GROUP BY with a Python ``udaf`` or ``udtaf`` (PyFlink's PythonGroupAggregate /
    PythonGroupTableAggregate). As in PyFlink, the Python function runs in bundles: a group's
    changes within a bundle (at most :data:`BUNDLE_MS`, and the end of input) leave as one change —
    a udaf's ``-U``/``+U`` (or ``+I`` for a new group), a udtaf's ``-D`` of the rows it emitted last
    and ``+I`` of its new ones. ``args`` None passes the whole row (named) to ``accumulate``."""

    def __init__(self, keys: Sequence[int], func: Any, args: Sequence[Resolved] | None,
                 input_names: Sequence[str], table_aggregate: bool) -> None:
        self.keys, self.func, self.args = tuple(keys), func, None if args is None else tuple(args)
        self.names, self.table_aggregate = list(input_names), table_aggregate

    def open(self, runtime_context: Any) -> None:
        # [accumulator, row count, last emitted (values or rows) or None, dirty]
        self.state = runtime_context.get_state(ValueStateDescriptor("group", Types.PICKLED_BYTE_ARRAY()))
        self.f = self.func.function()

    def _call_args(self, values: list[Any]) -> list[Any]:
        return [Row.of_names(self.names, values)] if self.args is None else [a.eval(values) for a in self.args]

    def process_element(self, value: Row, ctx: Any) -> Iterable[Row]:
        values = list(value)
        group = self.state.value()
        accumulate = is_accumulate(value.get_row_kind())
        if group is None:
            if not accumulate:
                return ()
            group = [self.f.create_accumulator(), 0, None, False]
        if accumulate:
            self.f.accumulate(group[0], *self._call_args(values))
            group[1] += 1
        else:
            self.f.retract(group[0], *self._call_args(values))
            group[1] -= 1
        if not group[3]:
            group[3] = True
            ts = ctx.timer_service()
            ts.register_processing_time_timer(ts.current_processing_time() + BUNDLE_MS)
            ts.register_event_time_timer(END_OF_INPUT)
        self.state.update(group)
        return ()

    def on_timer(self, timestamp: int, ctx: Any) -> Iterable[Row]:
        group = self.state.value()
        if group is None or not group[3]:
            return
        key = tuple(ctx.get_current_key())
        old = group[2]
        new: Any
        if self.table_aggregate:
            for r in old or ():
                yield row_of(key + tuple(r), RowKind.DELETE)
            new = [tuple(r) if isinstance(r, (Row, tuple, list)) else (r,) for r in self.f.emit_value(group[0])] \
                if group[1] > 0 else []
            for r in new:
                yield row_of(key + tuple(r))
        else:
            v = self.f.get_value(group[0]) if group[1] > 0 else None
            new = None if group[1] <= 0 else (tuple(v) if isinstance(v, (Row, tuple, list)) else (v,))
            if old is not None and new is None:
                yield row_of(key + old, RowKind.DELETE)
            elif old is None and new is not None:
                yield row_of(key + new)
            elif old is not None and new != old:
                yield row_of(key + old, RowKind.UPDATE_BEFORE)
                yield row_of(key + new, RowKind.UPDATE_AFTER)
        if group[1] <= 0:
            self.state.clear()
            return
        group[2], group[3] = (new, False)
        self.state.update(group)
