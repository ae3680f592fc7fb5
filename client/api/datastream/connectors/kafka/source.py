"""KafkaSource and its builder, offsets initializers and topic partitions (PyFlink's names and
builder signatures, ``pyflink.datastream.connectors.kafka``), and the deprecated
``FlinkKafkaConsumer`` as a thin adapter over the same source.

    source = KafkaSource.builder() \\
        .set_bootstrap_servers("localhost:9092") \\
        .set_topics("input") \\
        .set_group_id("my-group") \\
        .set_starting_offsets(KafkaOffsetsInitializer.earliest()) \\
        .set_value_only_deserializer(SimpleStringSchema()) \\
        .build()
    env.from_source(source, WatermarkStrategy.no_watermarks(), "Kafka Source")

The reader runs in the tasks with confluent-kafka (librdkafka), its split enumerator in the
JobMaster as Flink's (it discovers the partitions and assigns each to a reader): see
``millstream.runtime.operators.kafka_source`` and ``millstream.jobmanager.jobmaster.source_coordinator``
for the design, checkpointed offsets, commits on checkpoint completion and rescaling.
Properties are Kafka's (Java) consumer names and Flink's KafkaSourceOptions; Java-only ones
(``key.deserializer``, ...) are ignored with one warning, a few are renamed to librdkafka's.
"""
from __future__ import annotations

import re
import warnings
from enum import Enum
from typing import Any, Dict, List, Optional, Set, Union

from millstream.common.serialization import DeserializationSchema
from millstream.runtime import operator_factories

__all__ = [
    "FlinkKafkaConsumer",
    "KafkaOffsetResetStrategy",
    "KafkaOffsetsInitializer",
    "KafkaSource",
    "KafkaSourceBuilder",
    "KafkaTopicPartition",
]


class KafkaTopicPartition:
    """A topic's partition (Java's ``TopicPartition``): ``KafkaTopicPartition('TOPIC1', 0)``."""

    def __init__(self, topic: str, partition: int) -> None:
        if not isinstance(topic, str) or not topic:
            raise TypeError(f"KafkaTopicPartition needs a topic name, got {topic!r}")
        if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
            raise ValueError(f"KafkaTopicPartition needs a partition number >= 0, got {partition!r}")
        self._topic = topic
        self._partition = partition

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KafkaTopicPartition):
            return False
        return self._topic == other._topic and self._partition == other._partition

    def __hash__(self) -> int:
        return 31 * (31 + self._partition) + hash(self._topic)

    def __repr__(self) -> str:
        return f"{self._topic}-{self._partition}"


class KafkaOffsetResetStrategy(Enum):
    """Where a partition starts when it has no committed / specified offset (Java's OffsetResetStrategy)."""

    LATEST = 0
    EARLIEST = 1
    NONE = 2


def _reset(strategy: KafkaOffsetResetStrategy) -> str:
    if not isinstance(strategy, KafkaOffsetResetStrategy):
        raise TypeError(f"expected a KafkaOffsetResetStrategy, got {type(strategy).__name__}")
    return strategy.name.lower()


class KafkaOffsetsInitializer:
    """Where each partition starts (or stops): build one with the static methods."""

    def __init__(self, spec: operator_factories.KafkaOffsetsSpec) -> None:
        self._spec = spec

    @staticmethod
    def committed_offsets(offset_reset_strategy: KafkaOffsetResetStrategy = KafkaOffsetResetStrategy.NONE
                          ) -> "KafkaOffsetsInitializer":
        """The group's committed offsets; a partition without one starts as the strategy says
        (NONE: the job fails naming it). Needs a group id."""
        return KafkaOffsetsInitializer(operator_factories.KafkaOffsetsSpec("committed", _reset(offset_reset_strategy)))

    @staticmethod
    def timestamp(timestamp: int) -> "KafkaOffsetsInitializer":
        """The first record whose timestamp is >= ``timestamp`` (epoch ms); the end of a partition
        that has none."""
        if isinstance(timestamp, bool) or not isinstance(timestamp, int):
            raise TypeError(f"KafkaOffsetsInitializer.timestamp needs an int (epoch ms), got {timestamp!r}")
        return KafkaOffsetsInitializer(operator_factories.KafkaOffsetsSpec("timestamp", "latest", timestamp=timestamp))

    @staticmethod
    def earliest() -> "KafkaOffsetsInitializer":
        return KafkaOffsetsInitializer(operator_factories.KafkaOffsetsSpec("earliest", "earliest"))

    @staticmethod
    def latest() -> "KafkaOffsetsInitializer":
        return KafkaOffsetsInitializer(operator_factories.KafkaOffsetsSpec("latest", "latest"))

    @staticmethod
    def offsets(offsets: Dict[KafkaTopicPartition, int],
                offset_reset_strategy: KafkaOffsetResetStrategy = KafkaOffsetResetStrategy.EARLIEST
                ) -> "KafkaOffsetsInitializer":
        """The given offset per partition; a partition not given starts at the group's committed
        offset, else as the strategy says."""
        entries = []
        for tp, offset in offsets.items():
            if not isinstance(tp, KafkaTopicPartition):
                raise TypeError(f"KafkaOffsetsInitializer.offsets needs KafkaTopicPartition keys, got {tp!r}")
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                raise ValueError(f"KafkaOffsetsInitializer.offsets: offset of {tp!r} must be an int >= 0, got {offset!r}")
            entries.append((tp._topic, tp._partition, offset))
        return KafkaOffsetsInitializer(
            operator_factories.KafkaOffsetsSpec("specific", _reset(offset_reset_strategy), offsets=tuple(sorted(entries))))

    def __repr__(self) -> str:
        return f"KafkaOffsetsInitializer({self._spec.kind})"


def _initializer(value: Any, what: str) -> operator_factories.KafkaOffsetsSpec:
    if not isinstance(value, KafkaOffsetsInitializer):
        raise TypeError(f"{what} needs a KafkaOffsetsInitializer, got {type(value).__name__}")
    return value._spec


class KafkaSource:
    """Flink's KafkaSource: build it with :meth:`builder`, read it with ``env.from_source``."""

    def __init__(self, factory: operator_factories.KafkaSourceFactory) -> None:
        self._factory = factory

    @staticmethod
    def builder() -> "KafkaSourceBuilder":
        return KafkaSourceBuilder()

    def _source_factory(self) -> operator_factories.SourceFactory:
        f = self._factory
        return operator_factories.KafkaSourceFactory(
            properties=dict(f.properties), topics=f.topics, topic_pattern=f.topic_pattern, partitions=f.partitions,
            starting=f.starting, stopping=f.stopping, deserializer=f.deserializer, bounded_mode=f.bounded_mode)

    def _produced_type(self) -> Any:
        """The deserializer's type (PyFlink's KafkaSource produces it), for ``from_source``."""
        get = getattr(self._factory.deserializer, "get_produced_type", None)
        return get() if callable(get) else None


class KafkaSourceBuilder:
    """PyFlink's KafkaSourceBuilder: bootstrap servers, what to read (topics, a topic pattern or
    partitions) and the value deserializer are required; the rest have Flink's defaults."""

    def __init__(self) -> None:
        self._props: dict[str, str] = {}
        self._topics: tuple[str, ...] = ()
        self._pattern: Optional[str] = None
        self._partitions: tuple[tuple[str, int], ...] = ()
        self._subscribed: Optional[str] = None
        self._starting = operator_factories.KafkaOffsetsSpec("earliest", "earliest")
        self._stopping: Optional[operator_factories.KafkaOffsetsSpec] = None
        self._bounded = False
        self._deserializer: Any = None

    def build(self) -> KafkaSource:
        if not self._props.get("bootstrap.servers"):
            raise ValueError("KafkaSource: Property bootstrap.servers is required but not provided "
                             "(set_bootstrap_servers)")
        if self._subscribed is None:
            raise ValueError("KafkaSource: no subscribe mode is specified, should be one of topics, topic pattern "
                             "and partition set")
        if self._deserializer is None:
            raise ValueError("KafkaSource: the deserialization schema is required but not provided "
                             "(set_value_only_deserializer)")
        group = self._props.get("group.id")
        commit = self._props.get("commit.offsets.on.checkpoint", "").strip().lower() == "true"
        auto = self._props.get("enable.auto.commit", "").strip().lower() == "true"
        if not group and (commit or auto):
            raise ValueError("KafkaSource: Property group.id is required when offset commit is enabled")
        for spec, what in ((self._starting, "starting"), (self._stopping, "stopping")):
            if spec is not None and not group and spec.kind == "committed":
                raise ValueError(f"KafkaSource: Property group.id is required when using committed offsets "
                                 f"for the {what} offsets")
        return KafkaSource(operator_factories.KafkaSourceFactory(
            properties=dict(self._props), topics=self._topics, topic_pattern=self._pattern,
            partitions=self._partitions, starting=self._starting, stopping=self._stopping,
            deserializer=self._deserializer, bounded_mode=self._bounded))

    def set_bootstrap_servers(self, bootstrap_servers: str) -> "KafkaSourceBuilder":
        return self.set_property("bootstrap.servers", bootstrap_servers)

    def set_group_id(self, group_id: str) -> "KafkaSourceBuilder":
        return self.set_property("group.id", group_id)

    def _subscribe(self, mode: str) -> None:
        if self._subscribed is not None:
            raise ValueError(f"KafkaSource: cannot use {mode} for consumption because {self._subscribed} "
                             "is already set for consumption")
        self._subscribed = mode

    def set_topics(self, *topics: str) -> "KafkaSourceBuilder":
        """Topics that must exist when the job starts (else it fails naming the topic)."""
        names = tuple(topics[0]) if len(topics) == 1 and isinstance(topics[0], (list, tuple)) else topics
        if not names or not all(isinstance(t, str) and t for t in names):
            raise ValueError(f"KafkaSource.set_topics needs topic names, got {topics!r}")
        self._subscribe("topics")
        self._topics = tuple(names)
        return self

    def set_topic_pattern(self, topic_pattern: str) -> "KafkaSourceBuilder":
        """Every topic whose whole name matches (Java's ``Pattern.matcher(topic).matches()``)."""
        try:
            re.compile(topic_pattern)
        except (re.error, TypeError) as e:
            raise ValueError(f"KafkaSource.set_topic_pattern: invalid pattern {topic_pattern!r}: {e}") from None
        self._subscribe("topic pattern")
        self._pattern = topic_pattern
        return self

    def set_partitions(self, partitions: Set[KafkaTopicPartition]) -> "KafkaSourceBuilder":
        parts = []
        for tp in partitions:
            if not isinstance(tp, KafkaTopicPartition):
                raise TypeError(f"KafkaSource.set_partitions needs KafkaTopicPartition values, got {tp!r}")
            parts.append((tp._topic, tp._partition))
        if not parts:
            raise ValueError("KafkaSource.set_partitions needs at least one partition")
        self._subscribe("partitions")
        self._partitions = tuple(sorted(set(parts)))
        return self

    def set_starting_offsets(self, starting_offsets_initializer: KafkaOffsetsInitializer) -> "KafkaSourceBuilder":
        self._starting = _initializer(starting_offsets_initializer, "set_starting_offsets")
        return self

    def _stop_at(self, initializer: KafkaOffsetsInitializer, what: str) -> operator_factories.KafkaOffsetsSpec:
        spec = _initializer(initializer, what)
        if spec.kind == "earliest":  # Flink's reader refuses it too: only latest, committed or offsets stop
            raise ValueError(f"KafkaSource.{what}: earliest() is not a stopping offset")
        return spec

    def set_unbounded(self, stopping_offsets_initializer: KafkaOffsetsInitializer) -> "KafkaSourceBuilder":
        """Stops at these offsets, yet stays a CONTINUOUS_UNBOUNDED source (and keeps discovering
        partitions when discovery is on)."""
        self._stopping = self._stop_at(stopping_offsets_initializer, "set_unbounded")
        self._bounded = False
        return self

    def set_bounded(self, stopping_offsets_initializer: KafkaOffsetsInitializer) -> "KafkaSourceBuilder":
        """A BOUNDED source: ends when every partition reached its stopping offset (no discovery)."""
        self._stopping = self._stop_at(stopping_offsets_initializer, "set_bounded")
        self._bounded = True
        return self

    def set_value_only_deserializer(self, deserialization_schema: DeserializationSchema) -> "KafkaSourceBuilder":
        """Any object with ``deserialize(bytes)``: SimpleStringSchema, ByteArraySchema, the JSON,
        CSV and Avro row schemas."""
        if not callable(getattr(deserialization_schema, "deserialize", None)):
            raise TypeError(f"set_value_only_deserializer needs a DeserializationSchema, "
                            f"got {type(deserialization_schema).__name__}")
        self._deserializer = deserialization_schema
        return self

    def set_client_id_prefix(self, prefix: str) -> "KafkaSourceBuilder":
        return self.set_property("client.id.prefix", prefix)

    def set_property(self, key: str, value: str) -> "KafkaSourceBuilder":
        if not isinstance(key, str) or not key:
            raise TypeError(f"KafkaSource property names are strings, got {key!r}")
        self._props[key] = str(value)
        return self

    def set_properties(self, props: Dict) -> "KafkaSourceBuilder":
        for key, value in props.items():
            self.set_property(key, value)
        return self


class FlinkKafkaConsumer:
    """Deprecated (PyFlink: since 1.16, use KafkaSource): ``env.add_source(FlinkKafkaConsumer(topics,
    schema, properties))``. The same source as KafkaSource with FlinkKafkaConsumer's defaults: it
    starts from the group's committed offsets (``auto.offset.reset``, Kafka's default ``latest``, for
    partitions without one), commits offsets on checkpoints, and discovers partitions only when
    ``flink.partition-discovery.interval-millis`` is set."""

    def __init__(self, topics: Union[str, List[str]], deserialization_schema: DeserializationSchema,
                 properties: Dict) -> None:
        warnings.warn("Deprecated in 1.16. Use KafkaSource instead.", DeprecationWarning, stacklevel=2)
        names = [topics] if isinstance(topics, str) else list(topics)
        props = {str(k): str(v) for k, v in properties.items()}
        self._builder = KafkaSource.builder().set_topics(*names).set_value_only_deserializer(deserialization_schema)
        discovery = props.pop("flink.partition-discovery.interval-millis", "-1")
        self._builder.set_properties(props).set_property("partition.discovery.interval.ms", discovery)
        reset = {"earliest": KafkaOffsetResetStrategy.EARLIEST, "none": KafkaOffsetResetStrategy.NONE}.get(
            props.get("auto.offset.reset", "latest").lower(), KafkaOffsetResetStrategy.LATEST)
        self._group_start = KafkaOffsetsInitializer.committed_offsets(reset)
        # Without a group there is nothing committed: the consumer starts where auto.offset.reset says.
        no_group = KafkaOffsetsInitializer.earliest() if reset is KafkaOffsetResetStrategy.EARLIEST \
            else KafkaOffsetsInitializer.latest()
        self._group_start = self._group_start if props.get("group.id") else no_group
        self._start = self._group_start
        self._commit = True
        self._deserializer = deserialization_schema

    def set_commit_offsets_on_checkpoints(self, commit_on_checkpoints: bool) -> "FlinkKafkaConsumer":
        self._commit = bool(commit_on_checkpoints)
        return self

    def set_start_from_earliest(self) -> "FlinkKafkaConsumer":
        self._start = KafkaOffsetsInitializer.earliest()
        return self

    def set_start_from_latest(self) -> "FlinkKafkaConsumer":
        self._start = KafkaOffsetsInitializer.latest()
        return self

    def set_start_from_timestamp(self, startup_offsets_timestamp: int) -> "FlinkKafkaConsumer":
        self._start = KafkaOffsetsInitializer.timestamp(startup_offsets_timestamp)
        return self

    def set_start_from_group_offsets(self) -> "FlinkKafkaConsumer":
        self._start = self._group_start
        return self

    def disable_filter_restored_partitions_with_subscribed_topics(self) -> "FlinkKafkaConsumer":
        """Restored partitions are always the checkpointed ones here: nothing to filter."""
        return self

    def get_produced_type(self) -> Any:
        get = getattr(self._deserializer, "get_produced_type", None)
        return get() if callable(get) else None

    def _source_factory(self) -> operator_factories.SourceFactory:
        builder = self._builder.set_starting_offsets(self._start)
        builder.set_property("commit.offsets.on.checkpoint", "true" if self._commit else "false")
        if not self._builder._props.get("group.id"):
            builder._props.pop("commit.offsets.on.checkpoint")
        return builder.build()._source_factory()
