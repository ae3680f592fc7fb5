"""The DataStream API at PyFlink's ``pyflink.datastream`` path."""
from millstream.datastream.checkpoint_config import CheckpointConfig
from millstream.datastream.data_stream import CloseableIterator, DataStream, DataStreamSink, KeyedStream, OutputTag
from millstream.datastream.execution_mode import CheckpointingMode, RuntimeExecutionMode
from millstream.datastream.functions import (
    AggregateFunction,
    FilterFunction,
    FlatMapFunction,
    KeyedProcessFunction,
    KeySelector,
    MapFunction,
    Partitioner,
    ProcessFunction,
    ReduceFunction,
    RuntimeContext,
    SinkFunction,
    SourceFunction,
    TimerService,
)
from millstream.datastream.stream_execution_environment import StreamExecutionEnvironment
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

__all__ = [
    "AggregateFunction",
    "CheckpointConfig",
    "CheckpointingMode",
    "CloseableIterator",
    "CountWindow",
    "DataStream",
    "DataStreamSink",
    "FilterFunction",
    "FlatMapFunction",
    "GlobalWindow",
    "KeyedProcessFunction",
    "KeyedStream",
    "KeySelector",
    "MapFunction",
    "MergingWindowAssigner",
    "OutputTag",
    "Partitioner",
    "ProcessFunction",
    "ReduceFunction",
    "RuntimeContext",
    "RuntimeExecutionMode",
    "SinkFunction",
    "SourceFunction",
    "TimerService",
    "TimeWindow",
    "Trigger",
    "TriggerResult",
    "StreamExecutionEnvironment",
    "Window",
    "WindowAssigner",
]
