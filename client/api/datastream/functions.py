"""User function interfaces with PyFlink's names (``pyflink.datastream.functions``).

Every DataStream operation accepts either one of these classes or a plain callable; callables are
wrapped so the runtime sees one shape. ``open(runtime_context)`` runs once per subtask before the
first record and ``close()`` once after the last.
"""
from __future__ import annotations

import abc
import enum
from typing import TYPE_CHECKING, Any, Callable, Generic, Iterable, TypeVar

from millstream._java_code import JavaCodeNotSupported
from millstream.datastream.async_retry_strategies import AsyncRetryPredicate, AsyncRetryStrategy  # noqa: F401 (PyFlink's names here)

if TYPE_CHECKING:
    from millstream.datastream.state import (
        AggregatingState,
        BroadcastState,
        ReadOnlyBroadcastState,
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
W = TypeVar("W")
W2 = TypeVar("W2")  # a nested class cannot use its outer class's W (PyFlink names it W2 too)


class KeyedStateStore(abc.ABC):
    """Handles on keyed state: of the current key (a runtime context, a window's global state) or of
    the current key and window (a ProcessWindowFunction's ``window_state()``)."""

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


class RuntimeContext(KeyedStateStore):
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
    def get_metrics_group(self) -> Any:
        """The operator's MetricGroup (PyFlink's): ``counter``, ``meter``, ``gauge``,
        ``distribution`` and ``add_group(name, extra=None)``."""


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
        """Merges two accumulators (session windows call it when sessions merge)."""
        raise NotImplementedError(
            f"{type(self).__name__} does not implement merge(), which merging (session) windows need"
        )


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


class CoMapFunction(Function, Generic[IN, OUT]):
    """A map over two connected streams: ``map1`` for the first input's records, ``map2`` for the second's."""

    @abc.abstractmethod
    def map1(self, value: Any) -> OUT: ...

    @abc.abstractmethod
    def map2(self, value: Any) -> OUT: ...


class CoFlatMapFunction(Function, Generic[IN, OUT]):
    """A flat_map over two connected streams: ``flat_map1`` / ``flat_map2`` yield any number of records."""

    @abc.abstractmethod
    def flat_map1(self, value: Any) -> Iterable[OUT]: ...

    @abc.abstractmethod
    def flat_map2(self, value: Any) -> Iterable[OUT]: ...


class CoProcessFunction(Function, Generic[IN, OUT]):
    """Low-level processing of two connected streams; on keyed connected streams it may use keyed
    state and timers (Flink's keyed CoProcessFunction), otherwise neither."""

    class Context(abc.ABC):
        @abc.abstractmethod
        def timer_service(self) -> TimerService: ...

        @abc.abstractmethod
        def timestamp(self) -> int | None: ...

    @abc.abstractmethod
    def process_element1(self, value: Any, ctx: "CoProcessFunction.Context") -> Iterable[OUT] | None: ...

    class OnTimerContext(Context):
        @abc.abstractmethod
        def time_domain(self) -> str: ...

    @abc.abstractmethod
    def process_element2(self, value: Any, ctx: "CoProcessFunction.Context") -> Iterable[OUT] | None: ...

    def on_timer(self, timestamp: int, ctx: "CoProcessFunction.OnTimerContext") -> Iterable[OUT] | None:
        """A timer set on keyed connected streams fired (timers need keyed streams)."""
        return None


class KeyedCoProcessFunction(Function, Generic[KEY, IN, OUT]):
    """Processing of two connected keyed streams, with keyed state and timers of the current key
    (the first input's key for ``process_element1``, the second's for ``process_element2``)."""

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
    def process_element1(self, value: Any, ctx: "KeyedCoProcessFunction.Context") -> Iterable[OUT] | None: ...

    @abc.abstractmethod
    def process_element2(self, value: Any, ctx: "KeyedCoProcessFunction.Context") -> Iterable[OUT] | None: ...

    def on_timer(self, timestamp: int, ctx: "KeyedCoProcessFunction.OnTimerContext") -> Iterable[OUT] | None:
        return None


class BaseBroadcastProcessFunction(Function):
    """What the broadcast process functions share: the contexts through which they reach broadcast
    state, read-only on the non-broadcast side and writable on the broadcast side."""

    class BaseContext(abc.ABC):
        @abc.abstractmethod
        def timestamp(self) -> int | None: ...

        @abc.abstractmethod
        def current_processing_time(self) -> int: ...

        @abc.abstractmethod
        def current_watermark(self) -> int: ...

    class ReadOnlyContext(BaseContext):
        @abc.abstractmethod
        def get_broadcast_state(self, state_descriptor: "MapStateDescriptor") -> "ReadOnlyBroadcastState": ...

    class Context(BaseContext):
        @abc.abstractmethod
        def get_broadcast_state(self, state_descriptor: "MapStateDescriptor") -> "BroadcastState": ...


class BroadcastProcessFunction(BaseBroadcastProcessFunction, Generic[IN, OUT]):
    """A non-keyed stream connected to a broadcast stream: ``process_element`` sees the broadcast
    state read-only, ``process_broadcast_element`` (run on every parallel instance) may change it."""

    class ReadOnlyContext(BaseBroadcastProcessFunction.ReadOnlyContext):
        pass

    class Context(BaseBroadcastProcessFunction.Context):
        pass

    @abc.abstractmethod
    def process_element(self, value: Any, ctx: "BroadcastProcessFunction.ReadOnlyContext") -> Iterable[OUT] | None: ...

    @abc.abstractmethod
    def process_broadcast_element(self, value: Any, ctx: "BroadcastProcessFunction.Context") -> Iterable[OUT] | None: ...


class KeyedBroadcastProcessFunction(BaseBroadcastProcessFunction, Generic[KEY, IN, OUT]):
    """A keyed stream connected to a broadcast stream: the keyed side has keyed state, timers and
    read-only broadcast state; the broadcast side has no current key and may change broadcast state."""

    class ReadOnlyContext(BaseBroadcastProcessFunction.ReadOnlyContext):
        @abc.abstractmethod
        def timer_service(self) -> TimerService: ...

        @abc.abstractmethod
        def get_current_key(self) -> Any: ...

    class Context(BaseBroadcastProcessFunction.Context):
        pass

    class OnTimerContext(ReadOnlyContext):
        @abc.abstractmethod
        def time_domain(self) -> str: ...

    @abc.abstractmethod
    def process_element(self, value: Any, ctx: "KeyedBroadcastProcessFunction.ReadOnlyContext") -> Iterable[OUT] | None: ...

    @abc.abstractmethod
    def process_broadcast_element(self, value: Any, ctx: "KeyedBroadcastProcessFunction.Context") -> Iterable[OUT] | None: ...

    def on_timer(self, timestamp: int, ctx: "KeyedBroadcastProcessFunction.OnTimerContext") -> Iterable[OUT] | None:
        return None


def _refuse_java_function(cls: type, kind: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """PyFlink's ``SourceFunction(java_class_name)`` / ``SinkFunction(...)`` wrap a Java function;
    a Millstream job has no JVM to run it in."""
    given = args[0] if args else kwargs.get(f"{kind}_func")
    if given is None:
        return

    raise JavaCodeNotSupported(
        f"{cls.__name__}({given!r}): PyFlink runs this Java {kind} function in its JVM; Millstream runs no "
        f"JVM code (every operator is Python in its task), so a Java {kind} function cannot run on it. "
        f"Subclass {cls.__name__} in Python instead.")


class SourceFunction(Function, Generic[OUT]):
    """A Python source: ``run`` emits through ``ctx.collect`` until the input ends or ``cancel``.

    ``SourceFunction("org.example.MySource")`` (PyFlink's wrapper of a Java source function)
    raises :class:`millstream.JavaCodeNotSupported`."""

    def __new__(cls, *args: Any, **kwargs: Any) -> "SourceFunction[OUT]":
        if cls in (SourceFunction, ParallelSourceFunction):  # a subclass's own arguments are its own
            _refuse_java_function(cls, "source", args, kwargs)
        return super().__new__(cls)

    class SourceContext(abc.ABC):
        @abc.abstractmethod
        def collect(self, element: Any) -> None: ...

        @abc.abstractmethod
        def collect_with_timestamp(self, element: Any, timestamp: int) -> None:
            """Emits ``element`` with its event timestamp (milliseconds)."""

        @abc.abstractmethod
        def emit_watermark(self, watermark: int) -> None:
            """No element with a timestamp <= ``watermark`` follows (a source that makes its own watermarks)."""

    @abc.abstractmethod
    def run(self, ctx: "SourceFunction.SourceContext") -> None: ...

    def cancel(self) -> None:
        pass


class ParallelSourceFunction(SourceFunction[OUT]):
    """A SourceFunction that may run in parallel (Flink's ``ParallelSourceFunction``): ``add_source``
    gives it the environment's parallelism and every subtask runs its own copy of ``run`` (split
    the work with ``get_runtime_context().get_index_of_this_subtask()``). A plain SourceFunction
    is non-parallel: it runs once, at parallelism 1."""


class SinkFunction(Function, Generic[IN]):
    """A Python sink: ``invoke`` once per record. ``SinkFunction("org.example.MySink")`` (PyFlink's
    wrapper of a Java sink function) raises :class:`millstream.JavaCodeNotSupported`."""

    def __new__(cls, *args: Any, **kwargs: Any) -> "SinkFunction[IN]":
        if cls is SinkFunction:
            _refuse_java_function(cls, "sink", args, kwargs)
        return super().__new__(cls)

    @abc.abstractmethod
    def invoke(self, value: IN, context: Any = None) -> None: ...


# -- window functions (PyFlink's names; the window operator calls the Internal* shapes) ----------


class WindowFunction(Function, Generic[IN, OUT, KEY, W]):
    """Evaluates a keyed window: ``apply(key, window, inputs)`` yields the results."""

    @abc.abstractmethod
    def apply(self, key: KEY, window: W, inputs: Iterable[IN]) -> Iterable[OUT]: ...


class AllWindowFunction(Function, Generic[IN, OUT, W]):
    """Evaluates a window of a non-keyed stream (``window_all``): ``apply(window, inputs)``."""

    @abc.abstractmethod
    def apply(self, window: W, inputs: Iterable[IN]) -> Iterable[OUT]: ...


class _WindowContextBase(abc.ABC, Generic[W]):
    @abc.abstractmethod
    def window(self) -> W:
        """The window being evaluated."""

    @abc.abstractmethod
    def current_processing_time(self) -> int: ...

    @abc.abstractmethod
    def current_watermark(self) -> int: ...

    @abc.abstractmethod
    def window_state(self) -> KeyedStateStore:
        """State of the current key and window; clear it in ``clear(context)``."""

    @abc.abstractmethod
    def global_state(self) -> KeyedStateStore:
        """State of the current key, across its windows."""

    @abc.abstractmethod
    def output(self, output_tag: Any, value: Any) -> None:
        """Emit ``value`` to the side output of ``output_tag`` (like ``yield output_tag, value``)."""


class ProcessWindowFunction(Function, Generic[IN, OUT, KEY, W]):
    """Evaluates a keyed window with a context (window, time, per-window and global state)."""

    class Context(_WindowContextBase[W2]):
        """What ``process`` and ``clear`` see of the window being evaluated."""

    @abc.abstractmethod
    def process(self, key: KEY, context: "ProcessWindowFunction.Context", elements: Iterable[IN]) -> Iterable[OUT]: ...

    def clear(self, context: "ProcessWindowFunction.Context") -> None:
        """The window is dropped (the watermark passed its end plus the allowed lateness): clear
        the per-window state it used."""


class ProcessAllWindowFunction(Function, Generic[IN, OUT, W]):
    """Evaluates a window of a non-keyed stream with a context."""

    class Context(_WindowContextBase[W2]):
        """What ``process`` and ``clear`` see of the window being evaluated."""

    @abc.abstractmethod
    def process(self, context: "ProcessAllWindowFunction.Context", elements: Iterable[IN]) -> Iterable[OUT]: ...

    def clear(self, context: "ProcessAllWindowFunction.Context") -> None:
        """The window is dropped: clear the per-window state it used."""


class PassThroughWindowFunction(WindowFunction[IN, IN, KEY, W]):
    """Emits the window's contents as they are (reduce/aggregate without a window function)."""

    def apply(self, key: KEY, window: W, inputs: Iterable[IN]) -> Iterable[IN]:
        yield from inputs


class PassThroughAllWindowFunction(AllWindowFunction[IN, IN, W]):
    def apply(self, window: W, inputs: Iterable[IN]) -> Iterable[IN]:
        yield from inputs


class InternalWindowFunction(Function, Generic[IN, OUT, KEY, W]):
    """The one shape the window operator calls: ``process(key, window, context, input_data)``,
    where ``input_data`` is the pane (an iterable) or, for reduce/aggregate, its single value."""

    class InternalWindowContext(abc.ABC):
        @abc.abstractmethod
        def current_processing_time(self) -> int: ...

        @abc.abstractmethod
        def current_watermark(self) -> int: ...

        @abc.abstractmethod
        def window_state(self) -> KeyedStateStore: ...

        @abc.abstractmethod
        def global_state(self) -> KeyedStateStore: ...

        @abc.abstractmethod
        def output(self, output_tag: Any, value: Any) -> None: ...

    def __init__(self, wrapped_function: Any) -> None:
        self._wrapped_function = wrapped_function

    def open(self, runtime_context: RuntimeContext) -> None:
        self._wrapped_function.open(runtime_context)

    def close(self) -> None:
        self._wrapped_function.close()

    @abc.abstractmethod
    def process(self, key: KEY, window: W, context: "InternalWindowFunction.InternalWindowContext",
                input_data: Any) -> Iterable[OUT] | None: ...

    def clear(self, window: W, context: "InternalWindowFunction.InternalWindowContext") -> None:
        """The window is dropped; only process window functions have state to clear."""


class _InternalProcessContext(ProcessWindowFunction.Context, ProcessAllWindowFunction.Context):
    """The user's context: the window plus the operator's context."""

    def __init__(self) -> None:
        self._window: Any = None
        self._underlying: Any = None

    def window(self) -> Any:
        return self._window

    def current_processing_time(self) -> int:
        return int(self._underlying.current_processing_time())

    def current_watermark(self) -> int:
        return int(self._underlying.current_watermark())

    def window_state(self) -> KeyedStateStore:
        return self._underlying.window_state()

    def global_state(self) -> KeyedStateStore:
        return self._underlying.global_state()

    def output(self, output_tag: Any, value: Any) -> None:
        self._underlying.output(output_tag, value)


InternalProcessWindowContext = _InternalProcessContext
InternalProcessAllWindowContext = _InternalProcessContext


class InternalSingleValueWindowFunction(InternalWindowFunction[IN, OUT, KEY, W]):
    def process(self, key: Any, window: Any, context: Any, input_data: Any) -> Iterable[OUT] | None:
        return self._wrapped_function.apply(key, window, [input_data])


class InternalSingleValueAllWindowFunction(InternalWindowFunction[IN, OUT, KEY, W]):
    def process(self, key: Any, window: Any, context: Any, input_data: Any) -> Iterable[OUT] | None:
        return self._wrapped_function.apply(window, [input_data])


class InternalIterableWindowFunction(InternalWindowFunction[IN, OUT, KEY, W]):
    def process(self, key: Any, window: Any, context: Any, input_data: Any) -> Iterable[OUT] | None:
        return self._wrapped_function.apply(key, window, input_data)


class InternalIterableAllWindowFunction(InternalWindowFunction[IN, OUT, KEY, W]):
    def process(self, key: Any, window: Any, context: Any, input_data: Any) -> Iterable[OUT] | None:
        return self._wrapped_function.apply(window, input_data)


class _InternalProcessBase(InternalWindowFunction[IN, OUT, KEY, W]):
    def __init__(self, wrapped_function: Any) -> None:
        super().__init__(wrapped_function)
        self._internal_context = _InternalProcessContext()

    def _context(self, window: Any, context: Any) -> _InternalProcessContext:
        ctx = self._internal_context
        ctx._window, ctx._underlying = window, context
        return ctx

    def clear(self, window: Any, context: Any) -> None:
        self._wrapped_function.clear(self._context(window, context))


class InternalSingleValueProcessWindowFunction(_InternalProcessBase[IN, OUT, KEY, W]):
    def process(self, key: Any, window: Any, context: Any, input_data: Any) -> Iterable[OUT] | None:
        return self._wrapped_function.process(key, self._context(window, context), [input_data])


class InternalSingleValueProcessAllWindowFunction(_InternalProcessBase[IN, OUT, KEY, W]):
    def process(self, key: Any, window: Any, context: Any, input_data: Any) -> Iterable[OUT] | None:
        return self._wrapped_function.process(self._context(window, context), [input_data])


class InternalIterableProcessWindowFunction(_InternalProcessBase[IN, OUT, KEY, W]):
    def process(self, key: Any, window: Any, context: Any, input_data: Any) -> Iterable[OUT] | None:
        return self._wrapped_function.process(key, self._context(window, context), input_data)


class InternalIterableProcessAllWindowFunction(_InternalProcessBase[IN, OUT, KEY, W]):
    def process(self, key: Any, window: Any, context: Any, input_data: Any) -> Iterable[OUT] | None:
        return self._wrapped_function.process(self._context(window, context), input_data)


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


# -- async I/O (PyFlink's AsyncFunction; AsyncDataStream applies it) -------------------------------


class AsyncFunction(Function, Generic[IN, OUT]):
    """Calls an external service without blocking the stream: ``async_invoke`` is a coroutine run
    on an asyncio loop the operator owns (one per subtask), many records in flight at once.

    ``async_invoke(value)`` returns a list of results (an empty list: none for this input).
    ``timeout(value)`` is called when the call did not finish in the operator's timeout; by default
    it raises TimeoutError, which fails the job; override it to return a fallback list instead.
    """

    @abc.abstractmethod
    async def async_invoke(self, value: IN) -> list[OUT]: ...

    def timeout(self, value: IN) -> list[OUT]:
        raise TimeoutError(f"Async function call has timed out for input: {value!r}")


class AsyncFunctionDescriptor:
    """What ``AsyncDataStream`` hands the runtime: the function and how to run it."""

    class OutputMode(enum.Enum):
        ORDERED = 0
        UNORDERED = 1

    def __init__(self, async_function: AsyncFunction, timeout: Any, capacity: int,
                 async_retry_strategy: AsyncRetryStrategy, output_mode: "AsyncFunctionDescriptor.OutputMode") -> None:
        self.async_function = async_function
        self.timeout = timeout
        self.capacity = capacity
        self.async_retry_strategy = async_retry_strategy
        self.output_mode = output_mode
