"""Pandas (vectorized) Python functions of the Table API, as PyFlink runs them.

* A pandas scalar function (``udf(..., func_type='pandas')``) is called once per batch of rows
  with one ``pandas.Series`` per argument and returns a ``pandas.Series`` (or DataFrame) of the same
  length. :class:`VectorizedCalc` evaluates a Calc holding such calls: the task's FlatMap operator
  hands it the records it received as one list (``flat_map_batch``), cut into batches of at most
  ``python.fn-execution.arrow.batch.size`` rows. The rest of the Calc (other expressions, the filter)
  stays row by row on the same batch.
* A pandas aggregate function (``udaf(..., func_type='pandas')``) is called once per group, window
  or over-window frame with one Series per argument holding all of its rows, and returns a scalar.
  Its accumulator is the list of its argument tuples (what PyFlink buffers too), so it serves
  GROUP BY (with retraction), group windows (session panes merge their lists) and over windows.

Values go to pandas through Arrow (millstream.table.pandas_values); the function wrappers are in
millstream.table.udf.
"""
from __future__ import annotations

import abc

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from millstream.common.row import Row
from millstream.datastream.functions import FlatMapFunction
from millstream.table.expression import Resolved, TableException
from millstream.table.pandas_values import from_series, to_series
from millstream.table.types import DataType
from millstream.table.udf import PandasAggregateFunctionWrapper, _PandasAggregate

__all__ = ["PandasAggCall", "VectorizedCalc", "VectorizedMap", "is_pandas_udf", "has_pandas_udf", "pandas_agg_call",
           "DEFAULT_ARROW_BATCH_SIZE"]

DEFAULT_ARROW_BATCH_SIZE = 1000  # Flink's python.fn-execution.arrow.batch.size default


# -- pandas scalar functions ------------------------------------------------------------------


def is_pandas_udf(e: Resolved) -> bool:
    return e.kind == "udf" and getattr(e.value, "func_type", "general") == "pandas"


def has_pandas_udf(e: Resolved | None) -> bool:
    return e is not None and (is_pandas_udf(e) or any(has_pandas_udf(a) for a in e.args))


def call_pandas_udf(wrapper: Any, series: list[Any], n: int) -> list[Any]:
    """One batch through a pandas scalar function, its result checked as PyFlink checks it."""
    import pandas as pd
    out = wrapper.eval(*series)
    if type(out) is not pd.Series and type(out) is not pd.DataFrame:
        raise TypeError(f"The result type of Pandas UDF '{wrapper.name}' must be pandas.Series or pandas.DataFrame, "
                        f"got {type(out)}")
    if len(out) != n:
        raise ValueError(f"The result length '{len(out)}' of Pandas UDF '{wrapper.name}' is not equal to the input "
                         f"length '{n}'")
    return from_series(out, wrapper.result_type())


class _ArrowBatched(FlatMapFunction):
    """A FlatMap that computes slices of at most ``python.fn-execution.arrow.batch.size`` records at
    once (the task hands it each batch it reads as one list: ``flat_map_batch``)."""

    def __init__(self, batch_size: int) -> None:
        if batch_size <= 0:
            raise ValueError(f"python.fn-execution.arrow.batch.size must be positive, got {batch_size}")
        self.batch_size = batch_size

    def flat_map(self, value: Row) -> Any:
        return self.flat_map_batch([value])[0]

    def flat_map_batch(self, records: list[Row]) -> list[list[Row]]:
        """The output rows of each input record, for a list of records (one batch or several)."""
        out: list[list[Row]] = []
        for start in range(0, len(records), self.batch_size):
            out.extend(self._batch(records[start:start + self.batch_size]))
        return out

    @abc.abstractmethod
    def _batch(self, records: list[Row]) -> list[list[Row]]:
        """The output rows of each of ``records`` (at most ``batch_size`` of them)."""


class VectorizedCalc(_ArrowBatched):
    """A Calc with pandas scalar functions: each call is computed for a whole batch into an extra
    column, and the Calc's expressions read those columns (a nested call reads its argument's).
    Calls in the filter see every row of the batch; calls in the projection only the rows the
    filter kept, as Flink's Calc evaluates its projection after its condition."""

    def __init__(self, projections: Sequence[Resolved], condition: Resolved | None, width: int,
                 batch_size: int = DEFAULT_ARROW_BATCH_SIZE) -> None:
        super().__init__(batch_size)
        self.width = width
        self.calls: list[tuple[Any, tuple[Resolved, ...]]] = []  # (wrapper, args over the widened row)
        self.condition = self._lift(condition) if condition is not None else None
        self.condition_calls = len(self.calls)
        self.projections = tuple(self._lift(p) for p in projections)

    def _lift(self, e: Resolved) -> Resolved:
        """``e`` with each pandas call replaced by a reference to the column its batch result fills."""
        args = tuple(self._lift(a) for a in e.args)
        if is_pandas_udf(e):
            self.calls.append((e.value, args))
            return Resolved("ref", e.dtype, value=self.width + len(self.calls) - 1, text=e.text)
        return Resolved(e.kind, e.dtype, args, e.value, e.text) if args != e.args else e

    def _fill(self, rows: list[list[Any]], calls: range) -> None:
        for i in calls:
            wrapper, args = self.calls[i]
            series = [to_series([a.eval(r) for r in rows], a.dtype) for a in args]
            for r, v in zip(rows, call_pandas_udf(wrapper, series, len(rows))):
                r[self.width + i] = v

    def _batch(self, records: list[Row]) -> list[list[Row]]:
        extra = [None] * len(self.calls)
        rows = [list(r) + extra for r in records]
        if self.condition is not None:
            self._fill(rows, range(self.condition_calls))
            kept = [self.condition.eval(r) is True for r in rows]
        else:
            kept = [True] * len(rows)
        passing = [r for r, k in zip(rows, kept) if k]
        if passing:
            self._fill(passing, range(self.condition_calls, len(self.calls)))
        out: list[list[Row]] = []
        for record, r, k in zip(records, rows, kept):
            if not k:
                out.append([])
                continue
            row = Row(*[p.eval(r) for p in self.projections])
            row.set_row_kind(record.get_row_kind())
            out.append([row])
        return out

    def close(self) -> None:
        for wrapper, _ in self.calls:
            wrapper.close()


class VectorizedMap(_ArrowBatched):
    """``Table.map`` of a pandas scalar function: one ``pandas.DataFrame`` of the input columns
    (named as the table's) per batch in, a DataFrame (a ROW result, one column per field) or a
    Series of the same length out."""

    def __init__(self, func: Any, columns: Sequence[tuple[str, DataType]], width: int,
                 batch_size: int = DEFAULT_ARROW_BATCH_SIZE) -> None:
        super().__init__(batch_size)
        self.func, self.columns, self.width = func, list(columns), width

    def _batch(self, records: list[Row]) -> list[list[Row]]:
        import pandas as pd  # imported when a pandas function first runs
        frame = pd.DataFrame({name: to_series([r[i] for r in records], t)
                              for i, (name, t) in enumerate(self.columns)})
        result = self.func.eval(frame)
        if type(result) is not pd.Series and type(result) is not pd.DataFrame:
            raise TypeError(f"The result type of Pandas UDF '{self.func.name}' must be pandas.Series or "
                            f"pandas.DataFrame, got {type(result)}")
        if len(result) != len(records):
            raise ValueError(f"The result length '{len(result)}' of Pandas UDF '{self.func.name}' is not equal to "
                             f"the input length '{len(records)}'")
        t = self.func.result_type()
        if isinstance(result, pd.DataFrame) and t.root == "ROW":
            if result.shape[1] != self.width:
                raise ValueError(f"Pandas UDF '{self.func.name}' returned {result.shape[1]} columns, its result "
                                 f"type {t} has {self.width}")
            columns = [from_series(result.iloc[:, i], f.data_type) for i, f in enumerate(t.fields)]
            values = [list(v) for v in zip(*columns)]
        else:
            series = result.iloc[:, 0] if isinstance(result, pd.DataFrame) else result
            values = [[v] for v in from_series(series, t)]
        out = []
        for record, v in zip(records, values):
            row = Row(*v)
            row.set_row_kind(record.get_row_kind())
            out.append([row])
        return out

    def close(self) -> None:
        self.func.close()


# -- pandas aggregate functions ---------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class PandasAggCall:
    """A pandas UDAF among a GROUP BY's, group window's or over window's aggregate calls: the same
    interface as :class:`~millstream.table.runtime_functions.AggCall` (create / accumulate / value /
    merge), over the input columns ``args``."""

    func: str  # the function's name (plans print it)
    arg: int | None
    args: tuple[int, ...]
    function: _PandasAggregate

    integral = False
    single = False

    def round(self, v: Any) -> Any:
        return v

    def create(self) -> list[tuple[Any, ...]]:
        return []

    def accumulate(self, acc: list[tuple[Any, ...]], row: Sequence[Any], sign: int) -> list[tuple[Any, ...]]:
        values = tuple(row[i] for i in self.args)
        if sign > 0:
            acc.append(values)
        else:
            self.function.retract(acc, *values)
        return acc

    def value(self, acc: list[tuple[Any, ...]]) -> Any:
        return self.function.get_value(acc)

    def merge(self, a: list[tuple[Any, ...]], b: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        return list(a) + list(b)


def pandas_agg_call(wrapper: PandasAggregateFunctionWrapper, args: Sequence[int],
                    types: Sequence[DataType]) -> PandasAggCall:
    if not args:
        raise TableException(f"Pandas UDAF {wrapper.name} needs at least one argument column")
    return PandasAggCall(wrapper.name, args[0], tuple(args), wrapper.with_arg_types(types))
