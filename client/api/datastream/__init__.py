"""The DataStream API at PyFlink's ``pyflink.datastream`` path.

Its names load when first used (PEP 562): the engine imports the API's value modules it runs
(``functions``, ``state``, ``window``...) and must not load ``DataStream`` or
``StreamExecutionEnvironment`` with them. Type checkers read the imports below.
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from millstream.datastream.async_data_stream import AsyncDataStream
    from millstream.datastream.checkpoint_config import CheckpointConfig
    from millstream.datastream.checkpoint_storage import (
        CheckpointStorage,
        FileSystemCheckpointStorage,
        JobManagerCheckpointStorage,
    )
    from millstream.datastream.data_stream import (
        BroadcastConnectedStream,
        BroadcastStream,
        CloseableIterator,
        ConnectedStreams,
        DataStream,
        DataStreamSink,
        KeyedStream,
        OutputTag,
        WindowedStream,
    )
    from millstream.datastream.execution_mode import CheckpointingMode, RuntimeExecutionMode
    from millstream.datastream.externalized_checkpoint_retention import ExternalizedCheckpointRetention
    from millstream.datastream.functions import (
        AggregateFunction,
        AsyncFunction,
        AsyncRetryPredicate,
        AsyncRetryStrategy,
        BroadcastProcessFunction,
        CoFlatMapFunction,
        CoMapFunction,
        CoProcessFunction,
        FilterFunction,
        FlatMapFunction,
        KeyedBroadcastProcessFunction,
        KeyedCoProcessFunction,
        KeyedProcessFunction,
        KeySelector,
        MapFunction,
        Partitioner,
        ProcessFunction,
        ProcessWindowFunction,
        ReduceFunction,
        RuntimeContext,
        SinkFunction,
        SourceFunction,
        TimerService,
        WindowFunction,
    )
    from millstream.datastream.slot_sharing_group import MemorySize, SlotSharingGroup
    from millstream.datastream.state_backend import (EmbeddedRocksDBStateBackend, HashMapStateBackend, PredefinedOptions,
                                                     StateBackend)
    from millstream.datastream.stream_execution_environment import StreamExecutionEnvironment
    from millstream.datastream.time_domain import TimeDomain
    from millstream.datastream.window import (
        CountWindow,
        GlobalWindow,
        MergingWindowAssigner,
        TimeWindow,
        Trigger,
        TriggerResult,
        Window,
        WindowAssigner,
    )

_MODULE_OF = {
    "AsyncDataStream": "async_data_stream",
    "CheckpointConfig": "checkpoint_config",
    "CheckpointStorage": "checkpoint_storage",
    "FileSystemCheckpointStorage": "checkpoint_storage",
    "JobManagerCheckpointStorage": "checkpoint_storage",
    "BroadcastConnectedStream": "data_stream",
    "BroadcastStream": "data_stream",
    "CloseableIterator": "data_stream",
    "ConnectedStreams": "data_stream",
    "DataStream": "data_stream",
    "DataStreamSink": "data_stream",
    "KeyedStream": "data_stream",
    "OutputTag": "data_stream",
    "WindowedStream": "data_stream",
    "CheckpointingMode": "execution_mode",
    "RuntimeExecutionMode": "execution_mode",
    "ExternalizedCheckpointRetention": "externalized_checkpoint_retention",
    "AggregateFunction": "functions",
    "AsyncFunction": "functions",
    "AsyncRetryPredicate": "functions",
    "AsyncRetryStrategy": "functions",
    "BroadcastProcessFunction": "functions",
    "CoFlatMapFunction": "functions",
    "CoMapFunction": "functions",
    "CoProcessFunction": "functions",
    "FilterFunction": "functions",
    "FlatMapFunction": "functions",
    "KeyedBroadcastProcessFunction": "functions",
    "KeyedCoProcessFunction": "functions",
    "KeyedProcessFunction": "functions",
    "KeySelector": "functions",
    "MapFunction": "functions",
    "Partitioner": "functions",
    "ProcessFunction": "functions",
    "ProcessWindowFunction": "functions",
    "ReduceFunction": "functions",
    "RuntimeContext": "functions",
    "SinkFunction": "functions",
    "SourceFunction": "functions",
    "TimerService": "functions",
    "WindowFunction": "functions",
    "MemorySize": "slot_sharing_group",
    "SlotSharingGroup": "slot_sharing_group",
    "HashMapStateBackend": "state_backend",
    "EmbeddedRocksDBStateBackend": "state_backend",
    "PredefinedOptions": "state_backend",
    "StateBackend": "state_backend",
    "StreamExecutionEnvironment": "stream_execution_environment",
    "TimeDomain": "time_domain",
    "CountWindow": "window",
    "GlobalWindow": "window",
    "MergingWindowAssigner": "window",
    "TimeWindow": "window",
    "Trigger": "window",
    "TriggerResult": "window",
    "Window": "window",
    "WindowAssigner": "window",
}

__all__ = [
    "AggregateFunction",
    "AsyncDataStream",
    "AsyncFunction",
    "AsyncRetryPredicate",
    "AsyncRetryStrategy",
    "BroadcastConnectedStream",
    "BroadcastProcessFunction",
    "BroadcastStream",
    "CheckpointConfig",
    "CheckpointStorage",
    "CheckpointingMode",
    "CloseableIterator",
    "CountWindow",
    "TimeDomain",
    "CoFlatMapFunction",
    "CoMapFunction",
    "CoProcessFunction",
    "ConnectedStreams",
    "DataStream",
    "DataStreamSink",
    "ExternalizedCheckpointRetention",
    "FileSystemCheckpointStorage",
    "HashMapStateBackend",
    "EmbeddedRocksDBStateBackend",
    "PredefinedOptions",
    "JobManagerCheckpointStorage",
    "StateBackend",
    "FilterFunction",
    "FlatMapFunction",
    "GlobalWindow",
    "KeyedBroadcastProcessFunction",
    "KeyedCoProcessFunction",
    "KeyedProcessFunction",
    "KeyedStream",
    "KeySelector",
    "MemorySize",
    "MapFunction",
    "MergingWindowAssigner",
    "OutputTag",
    "Partitioner",
    "ProcessFunction",
    "ReduceFunction",
    "RuntimeContext",
    "RuntimeExecutionMode",
    "SinkFunction",
    "SlotSharingGroup",
    "SourceFunction",
    "TimerService",
    "TimeWindow",
    "Trigger",
    "TriggerResult",
    "StreamExecutionEnvironment",
    "Window",
    "WindowAssigner",
    "WindowedStream",
    "WindowFunction",
    "ProcessWindowFunction",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        # a submodule: PyFlink's package has them all loaded
        if name in {m.name for m in pkgutil.iter_modules(__path__)}:
            return importlib.import_module(f"{__name__}.{name}")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
