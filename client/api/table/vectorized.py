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

Values go to pandas through Arrow, as PyFlink's Arrow serializer does: a FLOAT column is a float32
Series, an INT column int32 (float64 when it holds a null), NaN and None come back as NULL.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from millstream.common.row import Row
from millstream.datastream.functions import FlatMapFunction
from millstream.table.expression import Resolved, TableException, to_float32
from millstream.table.types import DataType
from millstream.table.udf import AggregateFunction, UserDefinedAggregateFunctionWrapper, _as_type, _name_of

__all__ = ["PandasAggregateFunctionWrapper", "PandasAggCall", "VectorizedCalc", "is_pandas_udf", "has_pandas_udf",
           "to_series", "from_series", "arrow_type", "DEFAULT_ARROW_BATCH_SIZE"]

DEFAULT_ARROW_BATCH_SIZE = 1000  # Flink's python.fn-execution.arrow.batch.size default


def arrow_type(t: DataType) -> Any:
    """The Arrow type PyFlink's serializer gives a column of Flink type ``t`` (None: let Arrow infer)."""
    import pyarrow as pa
    r = t.root
    simple = {"BOOLEAN": pa.bool_(), "TINYINT": pa.int8(), "SMALLINT": pa.int16(), "INT": pa.int32(),
              "BIGINT": pa.int64(), "FLOAT": pa.float32(), "DOUBLE": pa.float64(), "VARCHAR": pa.string(),
              "CHAR": pa.string(), "VARBINARY": pa.binary(), "BINARY": pa.binary(), "DATE": pa.date32()}
    if r in simple:
        return simple[r]
    if r == "DECIMAL":
        return pa.decimal128(t.length or 10, t.scale or 0)
    if r in ("TIMESTAMP", "TIMESTAMP_LTZ"):
        p = t.length if t.length is not None else 6
        return pa.timestamp("s" if p == 0 else "ms" if p <= 3 else "us" if p <= 6 else "ns")
    if r == "ARRAY" and t.element is not None:
        inner = arrow_type(t.element)
        return None if inner is None else pa.list_(inner)
    return None


def to_series(values: Sequence[Any], t: DataType) -> Any:
    """One column's values as the ``pandas.Series`` a pandas function receives."""
    import pandas as pd
    import pyarrow as pa
    at = arrow_type(t)
    if at is not None:
        try:
            return pa.array(list(values), type=at, from_pandas=True).to_pandas()
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
            pass  # a value Arrow cannot take as this type (a tz-aware timestamp): pandas infers
    return pd.Series(list(values), dtype=object if t.root in ("ROW", "MAP", "MULTISET") else None)


def from_series(result: Any, t: DataType) -> list[Any]:
    """A Series a pandas function returned as the column's Python values (NaN and None: NULL)."""
    import pandas as pd
    import pyarrow as pa
    if isinstance(result, pd.DataFrame):  # a ROW result: one column per field
        columns = [from_series(result.iloc[:, i], f.data_type) for i, f in enumerate(t.fields)]
        return [Row(*vals) for vals in zip(*columns)]
    at = arrow_type(t)
    if at is not None:
        values = pa.Array.from_pandas(result, mask=result.isnull(), type=at).to_pylist()
    else:
        values = [None if _is_null(v) else v for v in result.tolist()]
    if t.root == "FLOAT":
        return [to_float32(v) if v is not None else None for v in values]
    return values


def scalar_value(v: Any, t: DataType) -> Any:
    """A pandas aggregate function's result as a Python value of type ``t``."""
    if _is_null(v):
        return None
    if hasattr(v, "item") and not isinstance(v, (list, tuple, str, bytes)):  # a numpy scalar
        v = v.item()
    root = t.root
    if root in ("TINYINT", "SMALLINT", "INT", "BIGINT"):
        return int(v)
    if root == "DOUBLE":
        return float(v)
    if root == "FLOAT":
        return to_float32(float(v))
    if root == "BOOLEAN":
        return bool(v)
    if hasattr(v, "to_pydatetime"):
        return v.to_pydatetime()
    return v


def _is_null(v: Any) -> bool:
    if v is None:
        return True
    try:
        return bool(v != v)  # NaN, NaT
    except (TypeError, ValueError):
        return False


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


class VectorizedCalc(FlatMapFunction):
    """A Calc with pandas scalar functions: each call is computed for a whole batch into an extra
    column, and the Calc's expressions read those columns (a nested call reads its argument's).
    Calls in the filter see every row of the batch; calls in the projection only the rows the
    filter kept, as Flink's Calc evaluates its projection after its condition."""

    def __init__(self, projections: Sequence[Resolved], condition: Resolved | None, width: int,
                 batch_size: int = DEFAULT_ARROW_BATCH_SIZE) -> None:
        if batch_size <= 0:
            raise ValueError(f"python.fn-execution.arrow.batch.size must be positive, got {batch_size}")
        self.width, self.batch_size = width, batch_size
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

    def flat_map(self, value: Row) -> Any:
        return self.flat_map_batch([value])[0]

    def flat_map_batch(self, records: list[Row]) -> list[list[Row]]:
        """The output rows of each input record, for a list of records (one batch or several)."""
        out: list[list[Row]] = []
        for start in range(0, len(records), self.batch_size):
            out.extend(self._batch(records[start:start + self.batch_size]))
        return out

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


# -- pandas aggregate functions ---------------------------------------------------------------


class _PandasAggregate(AggregateFunction):
    """A pandas UDAF as an accumulator-based function: the accumulator is the list of argument
    tuples (retraction takes one out, merge concatenates); the value is the function of the
    arguments' Series."""

    def __init__(self, func: Callable[..., Any], name: str, result_type: DataType,
                 arg_types: Sequence[DataType] | None = None) -> None:
        self.func, self.name, self.result_type, self.arg_types = func, name, result_type, arg_types

    def open(self, function_context: Any) -> None:
        if hasattr(self.func, "open"):
            self.func.open(function_context)

    def close(self) -> None:
        if hasattr(self.func, "close"):
            self.func.close()

    def create_accumulator(self) -> list[tuple[Any, ...]]:
        return []

    def accumulate(self, accumulator: list[tuple[Any, ...]], *args: Any) -> None:
        accumulator.append(args)

    def retract(self, accumulator: list[tuple[Any, ...]], *args: Any) -> None:
        try:
            accumulator.remove(args)
        except ValueError:
            pass  # a retraction of a row this group never had: nothing to take back

    def merge(self, accumulator: list[tuple[Any, ...]], accumulators: Any) -> None:
        for other in accumulators:
            accumulator.extend(other)

    def get_value(self, accumulator: list[tuple[Any, ...]]) -> Any:
        import pandas as pd
        width = len(self.arg_types) if self.arg_types is not None else (len(accumulator[0]) if accumulator else 0)
        columns = [[a[i] for a in accumulator] for i in range(width)]
        if self.arg_types is not None:
            series = [to_series(c, t) for c, t in zip(columns, self.arg_types)]
        else:
            series = [pd.Series(c) for c in columns]
        call = getattr(self.func, "eval", self.func)
        result = call(*series)
        if isinstance(result, (pd.Series, pd.DataFrame)):
            raise TypeError(f"The result of Pandas UDAF '{self.name}' must be a scalar, got {type(result)}")
        return scalar_value(result, self.result_type)


class PandasAggregateFunctionWrapper(UserDefinedAggregateFunctionWrapper):
    """What ``udaf(f, result_type=..., func_type='pandas')`` returns."""

    func_type = "pandas"

    def __init__(self, func: Any, result_type: Any, name: str | None, deterministic: bool | None) -> None:
        if isinstance(func, type) or not callable(getattr(func, "eval", func)):
            raise TypeError(f"Invalid function: not a function or callable (__call__ is not defined): {type(func)}")
        if result_type is None:
            raise TypeError(f"udaf {name or _name_of(func)}: result_type is required for a Pandas UDAF")
        t = _as_type(result_type)
        if t.root == "MAP":
            raise TypeError(f"Invalid returnType: Pandas UDAF doesn't support DataType type {t} currently")
        own_name = name or _name_of(func)
        super().__init__(_PandasAggregate(func, own_name, t), t, None, own_name, deterministic, False)
        self.pandas_func = func

    def with_arg_types(self, types: Sequence[DataType]) -> _PandasAggregate:
        """A fresh function object whose Series have ``types`` (the arguments' Flink types)."""
        return _PandasAggregate(self.pandas_func, self.name, self._result_type, tuple(types))


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
