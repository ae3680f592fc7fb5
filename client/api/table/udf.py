"""Python user-defined functions of the Table API: ``udf`` (scalar) and ``udtf`` (table), with the
base classes ``ScalarFunction`` and ``TableFunction`` (PyFlink's ``pyflink.table.udf``).

A wrapper is what a program calls in an expression (``my_udf(col('a'))``) and what the planner
pickles into the Calc/Correlate operator; tasks call :meth:`eval` on the values. A function class's
``open(FunctionContext)`` runs once per task before the first call.
"""
from __future__ import annotations

import abc
import functools
import inspect
from typing import Any, Callable, Iterable, Sequence

from millstream.common.row import Row
from millstream.table.expression import Expression, TableException, as_expression
from millstream.table.pandas_values import scalar_value, to_series
from millstream.table.types import DataType, DataTypes, parse_type

__all__ = ["FunctionContext", "UserDefinedFunction", "ScalarFunction", "AsyncScalarFunction", "TableFunction",
           "AggregateFunction", "TableAggregateFunction", "udf", "udtf", "udaf", "udtaf"]


class FunctionContext:
    """What ``open`` receives (PyFlink's ``FunctionContext``)."""

    def __init__(self, job_parameters: dict[str, str] | None = None) -> None:
        self._job_parameters = job_parameters or {}

    def get_job_parameter(self, key: str, default_value: str) -> str:
        return self._job_parameters.get(key, default_value)


class UserDefinedFunction:
    """Base of the user-defined function classes: ``open`` and ``close`` hooks."""

    def open(self, function_context: FunctionContext) -> None:
        pass

    def close(self) -> None:
        pass

    def is_deterministic(self) -> bool:
        return True


class ScalarFunction(UserDefinedFunction):
    """A function of one row's values to one value: implement ``eval(*args)``."""

    def eval(self, *args: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement eval(*args)")


class AsyncScalarFunction(UserDefinedFunction, abc.ABC):
    """A scalar function whose ``eval(*args)`` is a coroutine (``async def``): the task keeps
    several calls in flight and emits their results in input order (PyFlink 2.3's)."""

    @abc.abstractmethod
    async def eval(self, *args: Any) -> Any:
        """The function's value for one row's arguments, awaited by the async Calc."""


class TableFunction(UserDefinedFunction):
    """A function of one row's values to zero or more rows: implement ``eval(*args)`` as a generator."""

    def eval(self, *args: Any) -> Iterable[Any]:
        raise NotImplementedError(f"{type(self).__name__} must implement eval(*args)")


def _as_type(t: Any) -> DataType:
    if isinstance(t, DataType):
        return t
    if isinstance(t, str):
        return parse_type(t)
    raise TypeError(f"a UDF's result type must be a DataType or a type string, got {t!r}")


def _name_of(f: Any) -> str:
    target = f if inspect.isfunction(f) or inspect.ismethod(f) else type(f)
    return getattr(target, "__name__", type(f).__name__)


class _Wrapper:
    """What the ``udf``/``udtf`` decorators return: callable in expressions, evaluable in tasks."""

    def __init__(self, func: Any, name: str | None, deterministic: bool | None) -> None:
        if not (callable(func) or isinstance(func, UserDefinedFunction)):
            raise TypeError(f"a Python UDF needs a function or a UserDefinedFunction, got {func!r}")
        self._func = func
        self.name = name or _name_of(func)
        self._deterministic = deterministic if deterministic is not None else (
            func.is_deterministic() if isinstance(func, UserDefinedFunction) else True)
        self._opened = False
        self._alias: tuple[str, ...] = ()
        functools.update_wrapper(self, func if inspect.isfunction(func) else type(func), updated=())

    def _callable(self) -> Callable[..., Any]:
        f = self._func
        if isinstance(f, UserDefinedFunction):
            if not self._opened:
                f.open(FunctionContext())
                self._opened = True
            return f.eval  # type: ignore[attr-defined]  # ScalarFunction / TableFunction
        return f

    def _as_call(self, *args: Any) -> Expression:
        return Expression("udf", tuple(map(as_expression, args)), self)

    def __call__(self, *args: Any) -> Expression:
        return self._as_call(*args)

    def alias(self, *names: str) -> "_Wrapper":
        """The output columns' names when used in ``flat_map``/``join_lateral``/``aggregate``."""
        import copy
        w = copy.copy(self)
        w._alias = tuple(names)
        return w

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_opened"] = False  # a task opens its own copy
        return state

    def close(self) -> None:
        if self._opened and isinstance(self._func, UserDefinedFunction):
            self._func.close()
        self._opened = False


class UserDefinedScalarFunctionWrapper(_Wrapper):
    func_type = "general"  # "pandas": called once per batch with pandas.Series (millstream.table.vectorized)

    def __init__(self, func: Any, input_types: Any, result_type: Any, name: str | None = None,
                 deterministic: bool | None = None) -> None:
        super().__init__(func, name, deterministic)
        if result_type is None:
            raise TypeError(f"udf {self.name}: result_type is required")
        self._result_type = _as_type(result_type)

    def result_type(self) -> DataType:
        return self._result_type

    def eval(self, *values: Any) -> Any:
        return self._callable()(*values)

    def result_columns(self) -> list[tuple[str, DataType]]:
        """The columns ``Table.map`` makes of this function's result: a ROW's fields, else ``_c0``."""
        t = self._result_type
        if t.root == "ROW":
            names = list(self._alias) or t.field_names()
            return list(zip(names, t.field_types()))
        return [((self._alias or ("_c0",))[0], t)]


class UserDefinedTableFunctionWrapper(_Wrapper):
    def __init__(self, func: Any, input_types: Any, result_types: Any, name: str | None = None,
                 deterministic: bool | None = None) -> None:
        super().__init__(func, name, deterministic)
        if result_types is None:
            raise TypeError(f"udtf {self.name}: result_types is required")
        if isinstance(result_types, (DataType, str)):
            result_types = [result_types]
        types = [_as_type(t) for t in result_types]
        if len(types) == 1 and types[0].root == "ROW":  # a ROW result: its fields are the columns
            self._columns = [(f.name, f.data_type) for f in types[0].fields]
        else:
            self._columns = [(f"f{i}", t) for i, t in enumerate(types)]

    def result_type(self) -> DataType:
        return DataTypes.ROW([DataTypes.FIELD(n, t) for n, t in self._columns])

    def result_columns(self) -> list[tuple[str, DataType]]:
        if self._alias:
            if len(self._alias) != len(self._columns):
                raise ValueError(f"udtf {self.name} makes {len(self._columns)} columns, aliased as {list(self._alias)}")
            return [(a, t) for a, (_, t) in zip(self._alias, self._columns)]
        return list(self._columns)

    def eval_rows(self, *values: Any) -> Iterable[tuple[Any, ...]]:
        """The rows one call makes, each as a tuple of the result columns' values."""
        out = self._callable()(*values)
        if out is None:
            return
        width = len(self._columns)
        for item in out:
            if isinstance(item, Row):
                yield tuple(item)
            elif isinstance(item, (tuple, list)) and width > 1:
                yield tuple(item)
            elif width == 1:
                yield (item[0] if isinstance(item, (tuple, list)) and len(item) == 1 else item,)
            else:
                raise TypeError(f"udtf {self.name} yielded {item!r}, expected {width} values")


def _decorator(make: Callable[[Any], _Wrapper], f: Any) -> Any:
    return make(f) if f is not None else make


def _check_func_type(func_type: str) -> str:
    if func_type not in ("general", "pandas"):
        raise ValueError(f"The func_type must be one of 'general, pandas', got {func_type}.")
    return func_type


def udf(f: Any = None, input_types: Any = None, result_type: Any = None, deterministic: bool | None = None,
        name: str | None = None, func_type: str = "general", udf_type: str | None = None) -> Any:
    """A scalar Python UDF, as a decorator (``@udf(result_type='string')``) or a call. An ``async def``
    function or an :class:`AsyncScalarFunction` makes an async scalar function; ``func_type='pandas'``
    a vectorized one (one ``pandas.Series`` per argument in, a Series of the same length out)."""
    kind = _check_func_type(udf_type or func_type)

    def make(g: Any) -> _Wrapper:
        if isinstance(g, AsyncScalarFunction) or inspect.iscoroutinefunction(g):
            if kind == "pandas":
                raise ValueError("Async scalar functions do not support pandas func_type. "
                                 "Please use func_type='general' (default) for async functions.")
            return UserDefinedAsyncScalarFunctionWrapper(g, input_types, result_type, name, deterministic)
        w = UserDefinedScalarFunctionWrapper(g, input_types, result_type, name, deterministic)
        w.func_type = kind
        return w
    return _decorator(make, f)


class UserDefinedAsyncScalarFunctionWrapper(UserDefinedScalarFunctionWrapper):
    """An async scalar function: ``eval`` returns a coroutine the async Calc awaits."""

    func_type = "async"

    def _callable(self) -> Callable[..., Any]:
        f = self._func
        if isinstance(f, UserDefinedFunction):
            if not isinstance(f, AsyncScalarFunction) or not inspect.iscoroutinefunction(f.eval):
                raise TypeError(f"{type(f).__name__}.eval must be declared 'async def'")
        return super()._callable()


def udtf(f: Any = None, input_types: Any = None, result_types: Any = None, deterministic: bool | None = None,
         name: str | None = None) -> Any:
    """A Python table function, as a decorator (``@udtf(result_types=[DataTypes.STRING()])``) or a call."""
    return _decorator(lambda g: UserDefinedTableFunctionWrapper(g, input_types, result_types, name, deterministic), f)



class ImperativeAggregateFunction(UserDefinedFunction):
    """Base of Python aggregate functions: an accumulator that rows are added to and taken from."""

    def create_accumulator(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement create_accumulator()")

    def accumulate(self, accumulator: Any, *args: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement accumulate(accumulator, *args)")

    def retract(self, accumulator: Any, *args: Any) -> None:
        raise TableException(f"{type(self).__name__} has no retract(): it cannot aggregate an updating input")

    def merge(self, accumulator: Any, accumulators: Any) -> None:
        raise TableException(f"{type(self).__name__} has no merge()")

    def get_result_type(self) -> Any:
        raise TypeError(f"{type(self).__name__}: give result_type to udaf/udtaf or implement get_result_type()")

    def get_accumulator_type(self) -> Any:
        return None


class AggregateFunction(ImperativeAggregateFunction):
    """A Python aggregate function (``udaf``): ``get_value(accumulator)`` is the group's result."""

    def get_value(self, accumulator: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement get_value(accumulator)")


class TableAggregateFunction(ImperativeAggregateFunction):
    """A Python table aggregate function (``udtaf``): ``emit_value(accumulator)`` yields the group's rows."""

    def emit_value(self, accumulator: Any) -> Iterable[Any]:
        raise NotImplementedError(f"{type(self).__name__} must implement emit_value(accumulator)")


class UserDefinedAggregateFunctionWrapper(_Wrapper):
    """A ``udaf`` or ``udtaf``: the function object and its result columns."""

    def __init__(self, func: Any, result_type: Any, accumulator_type: Any, name: str | None,
                 deterministic: bool | None, table_aggregate: bool) -> None:
        base = TableAggregateFunction if table_aggregate else AggregateFunction
        if not isinstance(func, base):
            raise TypeError(f"{'udtaf' if table_aggregate else 'udaf'} takes a {base.__name__} instance, got {func!r}")
        super().__init__(func, name, deterministic)
        self.table_aggregate = table_aggregate
        self._result_type = _as_type(result_type if result_type is not None else func.get_result_type())

    def result_type(self) -> DataType:
        return self._result_type

    def result_columns(self) -> list[tuple[str, DataType]]:
        t = self._result_type
        cols = [(f.name, f.data_type) for f in t.fields] if t.root == "ROW" else [("f0", t)]
        if self._alias:
            if len(self._alias) != len(cols):
                raise ValueError(f"{self.name} makes {len(cols)} columns, aliased as {list(self._alias)}")
            cols = [(a, c[1]) for a, c in zip(self._alias, cols)]
        return cols

    def function(self) -> Any:
        f = self._func
        if not self._opened:
            f.open(FunctionContext())
            self._opened = True
        return f


def udaf(f: Any = None, input_types: Any = None, result_type: Any = None, accumulator_type: Any = None,
         deterministic: bool | None = None, name: str | None = None, func_type: str = "general") -> Any:
    """A Python aggregate function from an :class:`AggregateFunction` instance, or with
    ``func_type='pandas'`` from a function of one ``pandas.Series`` per argument to a scalar."""
    if _check_func_type(func_type) == "pandas":
        return _decorator(lambda g: PandasAggregateFunctionWrapper(g, result_type, name, deterministic), f)
    return _decorator(lambda g: UserDefinedAggregateFunctionWrapper(g, result_type, accumulator_type, name,
                                                                    deterministic, False), f)


def udtaf(f: Any = None, input_types: Any = None, result_type: Any = None, accumulator_type: Any = None,
          deterministic: bool | None = None, name: str | None = None, func_type: str = "general") -> Any:
    """A Python table aggregate function from a :class:`TableAggregateFunction` instance."""
    if func_type != "general":
        raise ValueError(f"The func_type must be 'general', got {func_type}.")
    return _decorator(lambda g: UserDefinedAggregateFunctionWrapper(g, result_type, accumulator_type, name,
                                                                    deterministic, True), f)


# -- pandas (vectorized) aggregate functions: run by millstream.table.vectorized --------------------


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
        import pandas as pd  # imported when a pandas UDAF first runs
        width = len(self.arg_types) if self.arg_types is not None else (len(accumulator[0]) if accumulator else 0)
        columns = [[a[i] for a in accumulator] for i in range(width)]
        if self.arg_types is not None:
            series = [to_series(c, t) for c, t in zip(columns, self.arg_types)]
        else:
            series = [pd.Series(c) for c in columns]
        if isinstance(self.func, AggregateFunction):  # a class: accumulate gets the Series once, as PyFlink's
            acc = self.func.create_accumulator()
            self.func.accumulate(acc, *series)
            result = self.func.get_value(acc)
        else:
            result = self.func(*series)
        if isinstance(result, (pd.Series, pd.DataFrame)):
            raise TypeError(f"The result of Pandas UDAF '{self.name}' must be a scalar, got {type(result)}")
        return scalar_value(result, self.result_type)


class PandasAggregateFunctionWrapper(UserDefinedAggregateFunctionWrapper):
    """What ``udaf(f, result_type=..., func_type='pandas')`` returns."""

    func_type = "pandas"
    aggregate_in_select = True  # select(f(col('x'))) after group_by / window / over, and in SQL

    def __init__(self, func: Any, result_type: Any, name: str | None, deterministic: bool | None) -> None:
        if isinstance(func, type) or not (callable(func) or isinstance(func, AggregateFunction)):
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
