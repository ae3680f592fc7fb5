"""User function interfaces with PyFlink's names (``pyflink.datastream.functions``).

Every DataStream operation accepts either one of these classes or a plain callable; callables are
wrapped so the runtime sees one shape. ``open(runtime_context)`` runs once per subtask before the
first record and ``close()`` once after the last.
"""
from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, Callable, Generic, Iterable, TypeVar

if TYPE_CHECKING:
    from millstream.datastream.state import (
        AggregatingState,
        AggregatingStateDescriptor,
        ListState,
        ListStateDescriptor,
        MapState,
        MapStateDescriptor,
        ReducingState,
        ReducingStateDescriptor,
        ValueState,
        ValueStateDescriptor,
    )

IN = TypeVar("IN")
OUT = TypeVar("OUT")
KEY = TypeVar("KEY")


class RuntimeContext(abc.ABC):
    """What a function learns about the subtask running it, and its door to keyed state."""

    @abc.abstractmethod
    def get_task_name(self) -> str: ...

    @abc.abstractmethod
    def get_number_of_parallel_subtasks(self) -> int: ...

    @abc.abstractmethod
    def get_max_number_of_parallel_subtasks(self) -> int: ...

    @abc.abstractmethod
    def get_index_of_this_subtask(self) -> int: ...

    @abc.abstractmethod
    def get_attempt_number(self) -> int: ...

    @abc.abstractmethod
    def get_task_name_with_subtasks(self) -> str: ...

    @abc.abstractmethod
    def get_job_parameter(self, key: str, default_value: str) -> str: ...

    @abc.abstractmethod
    def get_state(self, state_descriptor: "ValueStateDescriptor") -> "ValueState": ...

    @abc.abstractmethod
    def get_list_state(self, state_descriptor: "ListStateDescriptor") -> "ListState": ...

    @abc.abstractmethod
    def get_map_state(self, state_descriptor: "MapStateDescriptor") -> "MapState": ...

    @abc.abstractmethod
    def get_reducing_state(self, state_descriptor: "ReducingStateDescriptor") -> "ReducingState": ...

    @abc.abstractmethod
    def get_aggregating_state(self, state_descriptor: "AggregatingStateDescriptor") -> "AggregatingState": ...


class Function:
    """Base of every user function: lifecycle hooks around the records."""

    def open(self, runtime_context: RuntimeContext) -> None:
        pass

    def close(self) -> None:
        pass


class MapFunction(Function, Generic[IN, OUT]):
    @abc.abstractmethod
    def map(self, value: IN) -> OUT: ...


class FlatMapFunction(Function, Generic[IN, OUT]):
    @abc.abstractmethod
    def flat_map(self, value: IN) -> Iterable[OUT]: ...


class FilterFunction(Function, Generic[IN]):
    @abc.abstractmethod
    def filter(self, value: IN) -> bool: ...


class ReduceFunction(Function, Generic[IN]):
    @abc.abstractmethod
    def reduce(self, value1: IN, value2: IN) -> IN: ...


class AggregateFunction(Function, Generic[IN, OUT]):
    """Incremental aggregation through an accumulator (AggregatingState, windows)."""

    @abc.abstractmethod
    def create_accumulator(self) -> Any: ...

    @abc.abstractmethod
    def add(self, value: IN, accumulator: Any) -> Any: ...

    @abc.abstractmethod
    def get_result(self, accumulator: Any) -> OUT: ...

    def merge(self, acc_a: Any, acc_b: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement merge()")


class KeySelector(Function, Generic[IN, KEY]):
    @abc.abstractmethod
    def get_key(self, value: IN) -> KEY: ...

    def _key_function(self) -> Callable[[IN], KEY]:
        """What the runtime calls per record: ``get_key``, or a wrapped plain function directly."""
        return self.get_key


class Partitioner(Function, Generic[KEY]):
    """Custom partitioning: the index of the target channel for a key."""

    @abc.abstractmethod
    def partition(self, key: KEY, num_partitions: int) -> int: ...


class TimerService(abc.ABC):
    @abc.abstractmethod
    def current_processing_time(self) -> int: ...

    @abc.abstractmethod
    def current_watermark(self) -> int: ...

    @abc.abstractmethod
    def register_processing_time_timer(self, timestamp: int) -> None: ...

    @abc.abstractmethod
    def register_event_time_timer(self, timestamp: int) -> None: ...

    @abc.abstractmethod
    def delete_processing_time_timer(self, timestamp: int) -> None: ...

    @abc.abstractmethod
    def delete_event_time_timer(self, timestamp: int) -> None: ...


class ProcessFunction(Function, Generic[IN, OUT]):
    """Low-level processing: yield results; ``yield output_tag, value`` emits to a side output."""

    class Context(abc.ABC):
        @abc.abstractmethod
        def timer_service(self) -> TimerService: ...

        @abc.abstractmethod
        def timestamp(self) -> int | None: ...

    @abc.abstractmethod
    def process_element(self, value: IN, ctx: "ProcessFunction.Context") -> Iterable[OUT] | None: ...


class KeyedProcessFunction(Function, Generic[KEY, IN, OUT]):
    """Processing on a keyed stream, with keyed state and timers scoped to the current key."""

    class Context(abc.ABC):
        @abc.abstractmethod
        def timer_service(self) -> TimerService: ...

        @abc.abstractmethod
        def timestamp(self) -> int | None: ...

        @abc.abstractmethod
        def get_current_key(self) -> Any: ...

    class OnTimerContext(Context):
        @abc.abstractmethod
        def time_domain(self) -> str: ...

    @abc.abstractmethod
    def process_element(self, value: IN, ctx: "KeyedProcessFunction.Context") -> Iterable[OUT] | None: ...

    def on_timer(self, timestamp: int, ctx: "KeyedProcessFunction.OnTimerContext") -> Iterable[OUT] | None:
        return None


class SourceFunction(Function, Generic[OUT]):
    """A Python source: ``run`` emits through ``ctx.collect`` until the input ends or ``cancel``."""

    class SourceContext(abc.ABC):
        @abc.abstractmethod
        def collect(self, element: Any) -> None: ...

        def collect_with_timestamp(self, element: Any, timestamp: int) -> None:
            self.collect(element)

    @abc.abstractmethod
    def run(self, ctx: "SourceFunction.SourceContext") -> None: ...

    def cancel(self) -> None:
        pass


class SinkFunction(Function, Generic[IN]):
    """A Python sink: ``invoke`` once per record."""

    @abc.abstractmethod
    def invoke(self, value: IN, context: Any = None) -> None: ...


# -- wrappers that give plain callables the class shape --------------------------------------


class _MapWrapper(MapFunction):
    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def map(self, value: Any) -> Any:
        return self.fn(value)


class _FlatMapWrapper(FlatMapFunction):
    def __init__(self, fn: Callable[[Any], Iterable[Any]]) -> None:
        self.fn = fn

    def flat_map(self, value: Any) -> Iterable[Any]:
        return self.fn(value)


class _FilterWrapper(FilterFunction):
    def __init__(self, fn: Callable[[Any], bool]) -> None:
        self.fn = fn

    def filter(self, value: Any) -> bool:
        return self.fn(value)


class _ReduceWrapper(ReduceFunction):
    def __init__(self, fn: Callable[[Any, Any], Any]) -> None:
        self.fn = fn

    def reduce(self, value1: Any, value2: Any) -> Any:
        return self.fn(value1, value2)


class _KeySelectorWrapper(KeySelector):
    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def get_key(self, value: Any) -> Any:
        return self.fn(value)

    def _key_function(self) -> Callable[[Any], Any]:
        return self.fn  # one call per record instead of two


class _PartitionerWrapper(Partitioner):
    def __init__(self, fn: Callable[[Any, int], int]) -> None:
        self.fn = fn

    def partition(self, key: Any, num_partitions: int) -> int:
        return self.fn(key, num_partitions)


class _SinkWrapper(SinkFunction):
    def __init__(self, fn: Callable[[Any], None]) -> None:
        self.fn = fn

    def invoke(self, value: Any, context: Any = None) -> None:
        self.fn(value)


def _wrap(fn: Any, cls: type, wrapper: type, what: str) -> Any:
    if isinstance(fn, cls):
        return fn
    if callable(fn):
        return wrapper(fn)
    raise TypeError(f"{what} must be a {cls.__name__} or a callable, got {type(fn).__name__}")


def as_map_function(fn: Any) -> MapFunction:
    return _wrap(fn, MapFunction, _MapWrapper, "The map function")


def as_flat_map_function(fn: Any) -> FlatMapFunction:
    return _wrap(fn, FlatMapFunction, _FlatMapWrapper, "The flat_map function")


def as_filter_function(fn: Any) -> FilterFunction:
    return _wrap(fn, FilterFunction, _FilterWrapper, "The filter function")


def as_reduce_function(fn: Any) -> ReduceFunction:
    return _wrap(fn, ReduceFunction, _ReduceWrapper, "The reduce function")


def as_key_selector(fn: Any) -> KeySelector:
    return _wrap(fn, KeySelector, _KeySelectorWrapper, "The key selector")


def as_partitioner(fn: Any) -> Partitioner:
    return _wrap(fn, Partitioner, _PartitionerWrapper, "The partitioner")


def as_sink_function(fn: Any) -> SinkFunction:
    return _wrap(fn, SinkFunction, _SinkWrapper, "The sink function")
