"""Operator factories: what a transformation records and a task turns into a running operator.

A factory is cloudpickled into the JobGraph (Flink's StreamOperatorFactory in StreamConfig). It
holds the user's function and the operator's settings; the task builds the runtime operator from
it. ``kind`` is what plans and the JobGraph show.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

from millstream.datastream.functions import ParallelSourceFunction


@dataclass
class OperatorFactory:
    kind: ClassVar[str] = "operator"
    # The operator's declared output type (``output_type=``): its output is narrowed to it as
    # PyFlink's Java types narrow it (runtime.narrowing); None: nothing to narrow.
    output_type: Any = field(default=None, kw_only=True)

    def user_function(self) -> Any:
        """The user's function, for validation and error messages (None for built-ins)."""
        return getattr(self, "function", None)


# -- sources ---------------------------------------------------------------------------------


@dataclass
class SourceFactory(OperatorFactory):
    kind: ClassVar[str] = "source"
    bounded: ClassVar[bool] = True
    parallel: ClassVar[bool] = True
    # from_source's WatermarkStrategy: the source stamps its records and makes watermarks itself
    watermark_strategy: Any = field(default=None, kw_only=True)


@dataclass
class CollectionSourceFactory(SourceFactory):
    """A non-parallel source over an in-memory collection (``from_collection``)."""

    elements: Sequence[Any] = ()
    parallel: ClassVar[bool] = False


@dataclass
class SequenceSourceFactory(SourceFactory):
    """Numbers ``start..end`` inclusive, split into contiguous ranges across subtasks."""

    start: int = 0
    end: int = 0


@dataclass
class TextFileSourceFactory(SourceFactory):
    """Lines of text files, read in parallel over byte-range splits (a line is never split)."""

    paths: Sequence[str] = ()
    charset: str = "utf-8"


@dataclass
class FormatFileSourceFactory(SourceFactory):
    """Files read whole by one subtask each through a file format (its ``_read_file(path,
    batch_size)``): the files under ``paths`` now (bounded), or, with ``monitor_interval_ms``, also
    every file that appears later (unbounded: the paths are listed again every interval)."""

    paths: Sequence[str] = ()
    file_format: Any = None
    monitor_interval_ms: int | None = None

    @property  # per instance: a continuously monitored source never ends
    def bounded(self) -> bool:  # type: ignore[override]
        return self.monitor_interval_ms is None


@dataclass
class SourceFunctionFactory(SourceFactory):
    """A user ``SourceFunction`` (``add_source``); bounded when its ``run`` returns."""

    function: Any = None
    bounded: ClassVar[bool] = False  # like Flink's legacy sources: the runtime cannot know it ends

    @property  # per instance: Flink runs a SourceFunction wider only when it is a ParallelSourceFunction
    def parallel(self) -> bool:  # type: ignore[override]
        return isinstance(self.function, ParallelSourceFunction)


@dataclass
class GeneratorSourceFactory(SourceFactory):
    """``generator_fn(index)`` for index 0, 1, ... (Flink's DataGeneratorSource): ``count`` records in
    all (None: unbounded), split into contiguous index ranges across subtasks, at most
    ``records_per_second`` in total (None: as fast as possible)."""

    generator_fn: Any = None
    records_per_second: float | None = None
    count: int | None = None

    @property  # per instance: bounded exactly when a count is given
    def bounded(self) -> bool:  # type: ignore[override]
        return self.count is not None

    def user_function(self) -> Any:
        return self.generator_fn


@dataclass(frozen=True)
class KafkaOffsetsSpec:
    """A KafkaOffsetsInitializer as data (resolved by runtime.operators.kafka_offsets): ``kind`` is
    ``earliest``, ``latest``, ``committed``, ``timestamp`` or ``specific``; ``reset`` the
    KafkaOffsetResetStrategy for partitions without a committed / specified offset (``earliest``,
    ``latest`` or ``none``); ``offsets`` the specific ``(topic, partition, offset)``."""

    kind: str = "earliest"
    reset: str = "earliest"
    timestamp: int | None = None
    offsets: tuple[tuple[str, int, int], ...] = ()


@dataclass
class KafkaSourceFactory(SourceFactory):
    """Flink's KafkaSource (read by runtime.operators.kafka_source): the partitions of ``topics``,
    of the topics matching ``topic_pattern`` or exactly ``partitions``; ``properties`` are the
    builder's Kafka and Flink properties as given; ``stopping`` None reads forever."""

    properties: dict[str, str] = field(default_factory=dict)
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    partitions: tuple[tuple[str, int], ...] = ()
    starting: KafkaOffsetsSpec = field(default_factory=KafkaOffsetsSpec)
    stopping: KafkaOffsetsSpec | None = None
    deserializer: Any = None
    bounded_mode: bool = False  # set_bounded (BOUNDED) rather than set_unbounded (stops, yet CONTINUOUS_UNBOUNDED)

    @property  # per instance: Flink's Boundedness
    def bounded(self) -> bool:  # type: ignore[override]
        return self.bounded_mode

    def user_function(self) -> Any:
        return self.deserializer


# -- one-input operators ---------------------------------------------------------------------


@dataclass
class MapFactory(OperatorFactory):
    kind: ClassVar[str] = "map"
    function: Any = None


@dataclass
class FlatMapFactory(OperatorFactory):
    kind: ClassVar[str] = "flat_map"
    function: Any = None


@dataclass
class FilterFactory(OperatorFactory):
    kind: ClassVar[str] = "filter"
    function: Any = None


@dataclass
class ProcessFactory(OperatorFactory):
    kind: ClassVar[str] = "process"
    function: Any = None


@dataclass
class RestampFactory(OperatorFactory):
    """Gives each record the timestamp ``assigner`` (a TimestampAssigner) extracts from it and passes
    watermarks and idleness through unchanged: the table planner makes a rowtime column the record
    timestamp before a window operator where rows of one stream may carry another time (after an
    interval join), since Flink's SQL operators read the rowtime from the row itself."""

    kind: ClassVar[str] = "restamp"
    assigner: Any = None

    def user_function(self) -> Any:
        return None


@dataclass
class KeyedProcessFactory(OperatorFactory):
    kind: ClassVar[str] = "keyed_process"
    function: Any = None


@dataclass
class TimestampsAndWatermarksFactory(OperatorFactory):
    """``assign_timestamps_and_watermarks``: the strategy's assigner and watermark generator."""

    kind: ClassVar[str] = "timestamps_watermarks"
    watermark_strategy: Any = None

    def user_function(self) -> Any:
        return None


@dataclass
class ReduceFactory(OperatorFactory):
    """Rolling reduce per key (STREAMING) or one final value per key (BATCH)."""

    kind: ClassVar[str] = "reduce"
    function: Any = None


@dataclass
class AggregationFactory(OperatorFactory):
    """``sum/min/max/min_by/max_by`` on a field (index or name) of the records, per key."""

    kind: ClassVar[str] = "aggregation"
    aggregation: str = "sum"
    field: int | str = 0


@dataclass
class WindowFactory(OperatorFactory):
    """A keyed window (Flink's WindowOperator, or EvictingWindowOperator with an evictor).

    ``contents`` says what a pane keeps: ``"list"`` (the elements, for apply/process and whenever
    an evictor is set), ``"reduce"`` (one value, ``reduce_function``) or ``"aggregate"`` (one
    accumulator, ``aggregate_function``). ``window_function`` is an InternalWindowFunction;
    ``late_data_tag`` the side output id of late elements (None: dropped).
    """

    kind: ClassVar[str] = "window"
    assigner: Any = None
    trigger: Any = None
    window_function: Any = None
    contents: str = "list"
    reduce_function: Any = None
    aggregate_function: Any = None
    evictor: Any = None
    allowed_lateness: int = 0
    late_data_tag: str | None = None

    def user_function(self) -> Any:
        return self.window_function


# -- two-input operators ---------------------------------------------------------------------
# The first input's records go to the function's ``*1`` method, the second's to ``*2``; on keyed
# connected streams (both inputs keyed) the operator keys each record with its input's selector.


@dataclass
class CoMapFactory(OperatorFactory):
    kind: ClassVar[str] = "co_map"
    function: Any = None


@dataclass
class CoFlatMapFactory(OperatorFactory):
    kind: ClassVar[str] = "co_flat_map"
    function: Any = None


@dataclass
class CoProcessFactory(OperatorFactory):
    """A CoProcessFunction, or on keyed connected streams a (Keyed)CoProcessFunction with state and timers.
    ``watermark_delay`` (ms, keyed only): the output watermark trails the input one by it (Flink's
    KeyedCoProcessOperatorWithWatermarkDelay, which an interval join runs on so its rows are not late)."""

    kind: ClassVar[str] = "co_process"
    function: Any = None
    watermark_delay: int = 0


@dataclass
class BroadcastProcessFactory(OperatorFactory):
    """A (Keyed)BroadcastProcessFunction: input 0 is the data side, input 1 the broadcast side;
    ``descriptors`` are the MapStateDescriptors given to ``broadcast(...)``."""

    kind: ClassVar[str] = "broadcast_process"
    function: Any = None
    descriptors: Sequence[Any] = ()


# -- sinks -----------------------------------------------------------------------------------


@dataclass
class SinkFactory(OperatorFactory):
    kind: ClassVar[str] = "sink"


@dataclass
class PrintSinkFactory(SinkFactory):
    """Flink's print sink: ``N> record`` when the sink runs with parallelism > 1."""

    sink_identifier: str | None = None
    to_stderr: bool = False
    type_info: Any = None  # the printed stream's declared type: decides how a record reads (record_text)


@dataclass
class SinkFunctionFactory(SinkFactory):
    function: Any = None


@dataclass
class FileSinkFactory(SinkFactory):
    """Flink's row-format FileSink: rolling part files per bucket under ``base_path``."""

    base_path: str = ""
    encoder: Any = None
    part_prefix: str = "part"
    part_suffix: str = ""
    part_size: int | None = 128 * 1024 * 1024  # None: never roll on this condition
    rollover_interval_ms: int | None = 60_000
    inactivity_interval_ms: int | None = 60_000
    bucket_format: str | None = "yyyy-MM-dd--HH"  # a Java date pattern; None: the base path itself
    bucket_timezone: str | None = None
    bucket_check_interval_ms: int = 60_000
    type_info: Any = None  # the input's declared type: the simple string encoder writes its Java text
    bulk_writer_factory: Any = None  # a bulk format's BulkWriterFactory (then the encoder is unused)
    partition_bucket: Any = None  # record -> its directory under base_path (a table's k=v/ partitions)
    # partition commit (a table's sink.partition-commit.*): None, "process-time" or "partition-time"
    partition_commit_trigger: str | None = None
    partition_commit_delay_ms: int = 0
    partition_time_of: Any = None  # a partition's directory (relative to base_path) -> its time, epoch ms
    success_file_name: str = "_SUCCESS"


@dataclass
class KafkaSinkFactory(SinkFactory):
    """Flink's KafkaSink: records to Kafka topics through librdkafka with a delivery guarantee."""

    producer_config: dict[str, str] = field(default_factory=dict)  # librdkafka's names (mapped by the API)
    delivery_guarantee: str = "NONE"  # a DeliveryGuarantee's name: NONE, AT_LEAST_ONCE, EXACTLY_ONCE
    transactional_id_prefix: str | None = None  # required for EXACTLY_ONCE (checked by the builder)
    record_serializer: Any = None  # a KafkaRecordSerializationSchema: serialize_record(r) -> (topic, key, value)
    max_block_ms: int = 60_000  # how long opening waits for the cluster's metadata (Java's max.block.ms)


@dataclass
class JdbcSinkFactory(SinkFactory):
    """Flink's JdbcSink to PostgreSQL: ``sql`` (``?`` placeholders) executed in batches with each
    record's fields bound by ``field_types``; ``exactly_once``: one prepared transaction per
    checkpoint (two-phase commit), else at-least-once with retries."""

    sql: str = ""
    field_types: Sequence[Any] = ()  # the RowTypeInfo's field types (not ``type_info``: sink_to sets that)
    url: str = ""
    driver_name: str | None = None
    user_name: str | None = None
    password: str | None = None
    batch_size: int = 5000
    batch_interval_ms: int = 0
    max_retries: int = 3
    exactly_once: bool = False
    recovered_and_rollback: bool = True
    max_commit_attempts: int = 3
    allow_out_of_order_commits: bool = False
    timeout_sec: int | None = None


@dataclass
class CollectSinkFactory(SinkFactory):
    """Streams records back to the client for ``execute_and_collect``."""

    collect_id: str = ""
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class AsyncWaitFactory(OperatorFactory):
    """``AsyncDataStream.ordered_wait`` / ``unordered_wait`` (Flink's AsyncWaitOperator): the user's
    AsyncFunction with at most ``capacity`` calls in flight, each bounded by ``timeout_ms`` (0: none)
    and retried by ``retry_strategy``."""

    kind: ClassVar[str] = "async_wait"
    function: Any = None
    timeout_ms: int = 0
    capacity: int = 100
    retry_strategy: Any = None
    ordered: bool = True
