"""Two-phase ("local-global") GROUP BY with the local phase over Arrow arrays (pyarrow).

The row path (:class:`~millstream.table.runtime_functions.GroupAggregateFunction`) keys every row
and applies it to its group's accumulators in keyed state, one row at a time. Flink's planner can
split an aggregation in two (``LocalGroupAggregate`` before the keyed exchange, ``GlobalGroupAggregate``
after it): the local phase folds each batch of input rows into one *partial* accumulator per key,
the global phase merges the partials into the keyed accumulators. Here the local phase
(:class:`LocalAggregate`) aggregates a batch with ``pa.Table.group_by(keys).aggregate(...)``, so
the per-row work is Arrow's and the exchange carries one record per key and batch.

When: insert-only input (a retraction cannot be folded without changing what is retracted; such
input stays on the row path), the built-in COUNT, COUNT(*), SUM, SUM0, AVG of integer columns and
MIN, MAX of integer or DOUBLE columns, integer, text or boolean keys (:func:`vectorizes`). Fewer
intermediate results: a streaming GROUP BY emits one -U/+U per key and batch instead of per row,
which Flink allows only under mini-batch, so in streaming mode this runs only with
``table.exec.mini-batch.enabled`` (batch mode emits final values either way).

Exactness: the global phase keeps the row path's accumulators (:class:`AggCall`) and their
``value``, so NULL handling (SUM of only NULLs is NULL, COUNT skips NULLs) and AVG of integers
(truncated, as Flink's AVG of an INT returns an INT) are the row path's. Where Arrow would answer
differently the batch is folded in Python instead (same partials): a SUM that might leave 64
bits (Arrow's hash_sum wraps; the row path's Python integers do not), an integer beyond 64 bits, a
value of another Python type than its column's, NaN or a zero among DOUBLE MIN/MAX values (Python's
min keeps the first of 0.0 and -0.0 and is order-dependent with NaN). Floating-point SUM/AVG stay
on the row path entirely: a different order of additions rounds differently.
"""
from __future__ import annotations

from typing import Any, Sequence

from millstream.common.row import Row, values_and_kinds
from millstream.datastream.functions import FlatMapFunction
from millstream.table.arrow_calc import column_kind
from millstream.table.runtime_functions import AggCall, GroupAggregateFunction, GroupState, row_of
from millstream.table.types import DataType

__all__ = ["LocalAggregate", "GlobalAggregateFunction", "vectorizes", "partial_width"]

_INT64_MAX = 2**63 - 1
MIN_ROWS = 64  # fewer rows in a batch: folded in Python (Arrow's per-call cost outweighs the rows')
# Adaptive local phase (as Flink's adaptive local hash aggregation): after SAMPLE_ROWS rows, a subtask whose
# batches folded to more than DISTINCT_RATE partials per row (many keys, few rows each) stops folding and
# hands each row on as a one-row partial: the fold then only cost time (bench/sql_agg.py --keys name).
SAMPLE_ROWS, DISTINCT_RATE = 20_000, 0.5


class _Fallback(Exception):
    """This batch cannot be folded over arrays with the row path's exact results."""


def vectorizes(keys: Sequence[int], calls: Sequence[AggCall], input_types: Sequence[DataType]) -> bool:
    """Whether every part of the aggregation folds exactly over Arrow arrays (module docstring)."""
    if any(column_kind(input_types[k]) not in ("int", "str", "bool") for k in keys):
        return False
    for c in calls:
        if c.func not in ("count", "sum", "sum0", "avg", "min", "max") or c.single or c.distinct:
            return False
        if c.arg is None:
            if c.func != "count":
                return False
            continue
        kind = column_kind(input_types[c.arg])
        if c.func == "count" and kind is None:
            return False
        if c.func in ("sum", "sum0", "avg") and kind != "int":
            return False
        if c.func in ("min", "max") and kind not in ("int", "float"):
            return False
    return True


def _partial_width(call: AggCall) -> int:
    return 2 if call.func in ("sum", "sum0", "avg") else 1


def partial_width(calls: Sequence[AggCall]) -> int:
    """Columns of a partial record after its keys: the row count, then each call's partial."""
    return 1 + sum(_partial_width(c) for c in calls)


def _fold_rows(keys: Sequence[int], calls: Sequence[AggCall], values: list[list[Any]],
               doubles: frozenset[int] = frozenset()) -> list[Row]:
    """The partials of a batch computed in Python with the row path's accumulators; a MIN/MAX of a
    DOUBLE column (``doubles``) carries all its distinct values (see merge), of others the result."""
    groups: dict[tuple[Any, ...], GroupState] = {}
    for v in values:
        key = tuple(v[k] for k in keys)
        g = groups.get(key)
        if g is None:
            g = groups[key] = GroupState.new(calls)
        g.apply(calls, v, True)
    out = []
    for key, g in groups.items():
        parts: list[Any] = [g.rows]
        for c, acc in zip(calls, g.accs):
            if c.func == "count":
                parts.append(acc[0])
            elif c.func in ("min", "max"):
                if c.arg in doubles:
                    parts.append(tuple(acc))  # every distinct value, in order: see merge
                else:
                    v = c.value(acc)
                    parts.append(() if v is None else (v,))
            else:
                parts.extend(acc)
        out.append(row_of(key + tuple(parts)))
    return out


def _column(values: list[list[Any]], i: int, kind: str) -> Any:
    """Column ``i`` as an Arrow array whose values are exactly the Python ones, or _Fallback."""
    import pyarrow as pa
    want = {"int": pa.int64(), "float": pa.float64(), "str": pa.string(), "bool": pa.bool_()}[kind]
    try:
        arr = pa.array([v[i] for v in values])  # inferred: a stray Python type shows as another type
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        raise _Fallback() from None
    if arr.type == pa.null():
        return pa.nulls(len(arr), want)
    if arr.type != want:
        raise _Fallback()
    return arr


class LocalAggregate(FlatMapFunction):
    """Flink's LocalGroupAggregate: each batch of rows -> one partial record per key (keys, row
    count, per call: COUNT n | SUM/SUM0/AVG (sum, non-null n) | MIN/MAX a tuple of values, see
    :func:`merge`). The task's FlatMap
    operator hands it a slice of records at a time (``flat_map_batch``)."""

    def __init__(self, keys: Sequence[int], calls: Sequence[AggCall], input_types: Sequence[DataType],
                 min_rows: int = MIN_ROWS, sample_rows: int = SAMPLE_ROWS) -> None:
        self.keys, self.calls, self.input_types, self.min_rows = tuple(keys), tuple(calls), tuple(input_types), min_rows
        self.sample_rows = sample_rows
        self._rows_seen = self._partials_seen = 0
        self._skip = False  # folding does not pay here: one partial per row (see SAMPLE_ROWS)

    def flat_map(self, value: Row) -> Any:
        return self.flat_map_batch([value])[0]

    def flat_map_batch(self, records: list[Row]) -> list[list[Row]]:
        values, _ = values_and_kinds(records)  # insert-only input: the planner checks
        if self._skip:
            return [[p] for p in self._one_row_partials(values)]
        out: list[list[Row]] = [[] for _ in records]
        if not records:
            return out
        partials = None
        if len(records) >= self.min_rows:
            try:
                partials = self._arrow(values)
            except _Fallback:
                pass
        if partials is None:
            doubles = frozenset(i for i, t in enumerate(self.input_types) if t.root == "DOUBLE")
            partials = _fold_rows(self.keys, self.calls, values, doubles)
        out[0] = partials
        if self._rows_seen < self.sample_rows:
            self._rows_seen += len(records)
            self._partials_seen += len(partials)
            self._skip = self._rows_seen >= self.sample_rows and self._partials_seen > DISTINCT_RATE * self._rows_seen
        return out

    def _one_row_partials(self, values: list[list[Any]]) -> list[Row]:
        """Each row as the partial of a batch of itself (what merge adds is what the row path's apply adds)."""
        out = []
        keys, calls = self.keys, self.calls
        for v in values:
            parts: list[Any] = [v[k] for k in keys]
            parts.append(1)
            for c in calls:
                if c.arg is None:
                    parts.append(1)
                    continue
                x = v[c.arg]
                if c.func == "count":
                    parts.append(0 if x is None else 1)
                elif c.func in ("min", "max"):
                    parts.append(() if x is None else (x,))
                elif x is None:
                    parts += (0, 0)
                else:
                    parts += (x, 1)
            out.append(row_of(parts))
        return out

    def _arrow(self, values: list[list[Any]]) -> list[Row]:
        import pyarrow as pa
        import pyarrow.compute as pc
        n = len(values)
        cols: dict[int, Any] = {}

        def col(i: int) -> Any:
            if i not in cols:
                cols[i] = _column(values, i, column_kind(self.input_types[i]) or "")
            return cols[i]

        data: dict[str, Any] = {}
        for k in self.keys:
            data[f"k{k}"] = col(k)
        data["one"] = pa.nulls(n, pa.int8()).fill_null(1)  # COUNT(*) and the row count
        aggs: list[tuple[str, str, Any]] = [("one", "count", pc.CountOptions(mode="all"))]
        for c in self.calls:
            if c.arg is None:
                continue
            name = f"c{c.arg}"
            arr = col(c.arg)
            data[name] = arr
            if c.func in ("sum", "sum0", "avg"):
                lo_hi = pc.min_max(arr).as_py()
                if lo_hi["min"] is not None and max(abs(lo_hi["min"]), abs(lo_hi["max"])) * n > _INT64_MAX:
                    raise _Fallback()  # the sum might leave 64 bits
                aggs += [(name, "sum", pc.ScalarAggregateOptions(min_count=0)), (name, "count", pc.CountOptions())]
            elif c.func == "count":
                aggs.append((name, "count", pc.CountOptions()))
            else:
                if arr.type == pa.float64() and (pc.any(pc.is_nan(arr)).as_py() or pc.any(pc.equal(arr, 0.0)).as_py()):
                    raise _Fallback()
                aggs.append((name, c.func, pc.ScalarAggregateOptions(min_count=1)))
        table = pa.table(data)
        key_names = [f"k{k}" for k in self.keys]
        unique = list({(a[0], a[1]): a for a in aggs}.values())  # SUM(x) and AVG(x) share x's sum and count
        grouped = table.group_by(key_names, use_threads=False).aggregate(unique)
        result = {name: grouped.column(name).to_pylist() for name in grouped.column_names}
        columns: list[list[Any]] = [result[f"k{k}"] for k in self.keys] + [result["one_count"]]
        for c in self.calls:
            if c.arg is None:
                columns.append(result["one_count"])
            elif c.func in ("sum", "sum0", "avg"):
                columns += [result[f"c{c.arg}_sum"], result[f"c{c.arg}_count"]]
            elif c.func == "count":
                columns.append(result[f"c{c.arg}_count"])
            else:
                columns.append([() if v is None else (v,) for v in result[f"c{c.arg}_{c.func}"]])
        return [row_of(r) for r in zip(*columns)]


def merge(calls: Sequence[AggCall], group: GroupState, parts: Sequence[Any]) -> None:
    """Adds one partial record's values (after its keys) to a group's row-path accumulators."""
    group.rows += parts[0]
    i = 1
    for c, acc in zip(calls, group.accs):
        if c.func == "count":
            acc[0] += parts[i]
        elif c.func in ("min", "max"):
            # The values to add, in order: over arrays the batch's MIN/MAX (no NaN, no zero there), folded
            # in Python all its distinct values, so the group's dict holds its first value and first zero
            # as the row path's does (Python's min of doubles depends on them: NaN first, 0.0 vs -0.0).
            for v in parts[i]:
                acc[v] = acc.get(v, 0) + 1  # insert-only: the count is never retracted
        else:
            acc[0] += parts[i]
            acc[1] += parts[i + 1]
        i += _partial_width(c)


class GlobalAggregateFunction(GroupAggregateFunction):
    """Flink's GlobalGroupAggregate: the row path's GroupAggregate (its state, changelog and batch
    end) over partial records keyed by their first ``n_keys`` columns, each merged into the group's
    accumulators instead of applied as one row."""

    def __init__(self, n_keys: int, calls: Sequence[AggCall], batch: bool) -> None:
        super().__init__(range(n_keys), calls, batch)
        self.n_keys = n_keys

    def _fold(self, group: GroupState, values: list[Any], accumulate: bool) -> None:
        merge(self.calls, group, values[self.n_keys:])  # partials of insert-only input: always accumulate
