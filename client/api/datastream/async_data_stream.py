"""``AsyncDataStream``: applies an :class:`AsyncFunction` to a stream (PyFlink's async I/O)."""
from __future__ import annotations

import inspect
from typing import Any

from millstream.common.time import Duration
from millstream.common.typeinfo import TypeInformation
from millstream.datastream import async_retry_strategies
from millstream.datastream.data_stream import DataStream
from millstream.datastream.functions import AsyncFunction, AsyncFunctionDescriptor, AsyncRetryStrategy
from millstream.runtime import operator_factories

__all__ = ["AsyncDataStream"]


class AsyncDataStream:
    """``unordered_wait``: results leave as their calls finish (watermarks still never overtake
    the records before them); ``ordered_wait``: in the order of the inputs. Either way at most
    ``capacity`` calls are in flight, a full operator holds its input back (backpressure), and the
    inputs in flight are part of each checkpoint and called again after a restore."""

    @staticmethod
    def unordered_wait(data_stream: DataStream, async_function: AsyncFunction, timeout: Duration,
                       capacity: int = 100, output_type: TypeInformation | None = None) -> DataStream:
        return AsyncDataStream.unordered_wait_with_retry(
            data_stream, async_function, timeout, async_retry_strategies.NO_RETRY_STRATEGY, capacity, output_type)

    @staticmethod
    def unordered_wait_with_retry(data_stream: DataStream, async_function: AsyncFunction, timeout: Duration,
                                  async_retry_strategy: AsyncRetryStrategy, capacity: int = 100,
                                  output_type: TypeInformation | None = None) -> DataStream:
        return AsyncDataStream._apply(data_stream, AsyncFunctionDescriptor(
            async_function, timeout, capacity, async_retry_strategy, AsyncFunctionDescriptor.OutputMode.UNORDERED),
            output_type)

    @staticmethod
    def ordered_wait(data_stream: DataStream, async_function: AsyncFunction, timeout: Duration,
                     capacity: int = 100, output_type: TypeInformation | None = None) -> DataStream:
        return AsyncDataStream.ordered_wait_with_retry(
            data_stream, async_function, timeout, async_retry_strategies.NO_RETRY_STRATEGY, capacity, output_type)

    @staticmethod
    def ordered_wait_with_retry(data_stream: DataStream, async_function: AsyncFunction, timeout: Duration,
                                async_retry_strategy: AsyncRetryStrategy, capacity: int = 100,
                                output_type: TypeInformation | None = None) -> DataStream:
        return AsyncDataStream._apply(data_stream, AsyncFunctionDescriptor(
            async_function, timeout, capacity, async_retry_strategy, AsyncFunctionDescriptor.OutputMode.ORDERED),
            output_type)

    @staticmethod
    def _apply(data_stream: DataStream, descriptor: AsyncFunctionDescriptor, output_type: Any) -> DataStream:
        function, strategy = descriptor.async_function, descriptor.async_retry_strategy
        if not isinstance(data_stream, DataStream):
            raise TypeError(f"AsyncDataStream needs a DataStream, got {type(data_stream).__name__}")
        if not isinstance(function, AsyncFunction):
            raise TypeError(f"AsyncDataStream needs an AsyncFunction, got {type(function).__name__}")
        if not inspect.iscoroutinefunction(function.async_invoke):
            raise TypeError(f"Method 'async_invoke' of class '{type(function).__name__}' should be declared as 'async def'.")
        timeout_ms = _milliseconds(descriptor.timeout)
        if timeout_ms < 0:
            raise ValueError(f"The async timeout must be >= 0 ms, got {timeout_ms}")
        if isinstance(descriptor.capacity, bool) or not isinstance(descriptor.capacity, int) or descriptor.capacity <= 0:
            raise ValueError(f"The async capacity must be a positive int, got {descriptor.capacity!r}")
        if strategy is None:
            raise ValueError("Async retry strategy should not be None.")
        if not isinstance(strategy, AsyncRetryStrategy):
            raise TypeError(f"async_retry_strategy must be an AsyncRetryStrategy, got {type(strategy).__name__}")
        if strategy is not async_retry_strategies.NO_RETRY_STRATEGY and timeout_ms <= 0:
            raise ValueError("Timeout should be configured when do async with retry.")
        if strategy.get_retry_predicate() is None:
            raise ValueError(f"Retry predicate of the async retry strategy '{type(strategy).__name__}' is None.")
        factory = operator_factories.AsyncWaitFactory(
            function=function, timeout_ms=timeout_ms, capacity=descriptor.capacity, retry_strategy=strategy,
            ordered=descriptor.output_mode is AsyncFunctionDescriptor.OutputMode.ORDERED)
        return data_stream._one_input("async wait operator", factory, output_type)


def _milliseconds(timeout: Any) -> int:
    if isinstance(timeout, Duration):
        return timeout.to_milliseconds()
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        return int(timeout)
    raise TypeError(f"The async timeout must be a Duration (Time.seconds(10)) or milliseconds, got {timeout!r}")
