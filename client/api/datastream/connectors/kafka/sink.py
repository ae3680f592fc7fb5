"""KafkaSink at PyFlink's path: ``KafkaSink.builder()...build()`` and ``ds.sink_to(sink)``, with
PyFlink's builders (``KafkaSinkBuilder``, ``KafkaRecordSerializationSchema.builder()``), topic
selectors, ``DeliveryGuarantee``, and the deprecated ``FlinkKafkaProducer``/``Semantic``.

The client is librdkafka (confluent-kafka), not Java's producer. The builder's properties are
Java producer names; :func:`librdkafka_config` maps the ones whose librdkafka name differs
(``delivery.timeout.ms`` -> ``message.timeout.ms``, ...), passes the shared ones as they are, and
drops the Java-only ones (JAAS, key stores, class names) with one warning per sink. How each
delivery guarantee is kept, and how EXACTLY_ONCE differs from Flink's, is said in
``millstream.runtime.operators.kafka_sink``.
"""
from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from enum import Enum
from typing import Any, Callable, Optional, Union

from millstream.common.serialization import SerializationSchema
from millstream.datastream.connectors.base import DeliveryGuarantee
from millstream.datastream.functions import SinkFunction
from millstream.runtime import operator_factories

__all__ = [
    "DeliveryGuarantee",
    "FlinkKafkaProducer",
    "KafkaRecordSerializationSchema",
    "KafkaRecordSerializationSchemaBuilder",
    "KafkaSink",
    "KafkaSinkBuilder",
    "KafkaTopicSelector",
    "Semantic",
]

# Java producer properties under another name in librdkafka (value converted when the unit differs).
_RENAMED: dict[str, tuple[str, Callable[[str], str]]] = {
    "delivery.timeout.ms": ("message.timeout.ms", str),
    "max.request.size": ("message.max.bytes", str),
    "buffer.memory": ("queue.buffering.max.kbytes", lambda v: str(max(1, int(v) // 1024))),
}
# Java-only: class names, JAAS, JKS key stores, the serializers Flink sets itself. Dropped, warned once.
_JAVA_ONLY = frozenset({
    "key.serializer", "value.serializer", "partitioner.class", "interceptor.classes", "metric.reporters",
    "sasl.jaas.config", "sasl.login.callback.handler.class", "sasl.client.callback.handler.class",
    "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.type", "ssl.keystore.location",
    "ssl.keystore.password", "ssl.keystore.type", "ssl.key.password", "ssl.provider",
    "ssl.trustmanager.algorithm", "ssl.keymanager.algorithm", "security.providers", "max.block.ms",
    "metrics.num.samples", "metrics.sample.window.ms", "metrics.recording.level", "auto.include.jmx.reporter",
    "transactional.id",  # the sink names its transactions itself (<prefix>-<subtask>), as Flink's
})
# Read by the sink itself: how long it waits for the cluster's metadata when it opens (Java's
# producer blocks up to max.block.ms for it in send(); the default is Java's).
DEFAULT_MAX_BLOCK_MS = 60_000


def librdkafka_config(properties: dict[str, str], sink: str = "KafkaSink") -> dict[str, str]:
    """The librdkafka producer configuration of Java producer ``properties`` (see the module doc).
    Keyed records go to the partition Java's default partitioner picks (murmur2 of the key) unless
    the user set ``partitioner`` (librdkafka's own property)."""
    config: dict[str, str] = {"partitioner": "murmur2_random"}
    ignored = []
    for key, value in properties.items():
        if key in _JAVA_ONLY:
            if key != "max.block.ms":
                ignored.append(key)
            continue
        if key in _RENAMED:
            name, convert = _RENAMED[key]
            try:
                config[name] = convert(value)
            except ValueError:
                raise ValueError(f"{sink}: property {key!r} must be a number, got {value!r}") from None
        else:
            config[key] = value
    if ignored:
        warnings.warn(f"{sink}: Java-only producer properties ignored (librdkafka has no such setting): "
                      f"{', '.join(sorted(ignored))}", UserWarning, stacklevel=3)
    return config


def _max_block_ms(properties: dict[str, str]) -> int:
    value = properties.get("max.block.ms", str(DEFAULT_MAX_BLOCK_MS))
    try:
        ms = int(value)
    except ValueError:
        raise ValueError(f"KafkaSink: property 'max.block.ms' must be a number of milliseconds, got {value!r}") from None
    if ms <= 0:
        raise ValueError(f"KafkaSink: property 'max.block.ms' must be positive, got {ms}")
    return ms


class KafkaTopicSelector(ABC):
    """Selects the topic of each record (PyFlink's ``KafkaTopicSelector``)."""

    @abstractmethod
    def apply(self, data: Any) -> str:
        pass


class _FunctionTopicSelector(KafkaTopicSelector):
    def __init__(self, f: Callable[[Any], str]) -> None:
        self._f = f

    def apply(self, data: Any) -> str:
        return self._f(data)


class _FixedTopic(KafkaTopicSelector):
    def __init__(self, topic: str) -> None:
        self.topic = topic

    def apply(self, data: Any) -> str:
        return self.topic


class KafkaRecordSerializationSchema(SerializationSchema):
    """Turns a record into a Kafka record: its topic, optional key and value (PyFlink's)."""

    def __init__(self, topic_selector: KafkaTopicSelector, value_serialization_schema: SerializationSchema,
                 key_serialization_schema: Optional[SerializationSchema] = None) -> None:
        self.topic_selector = topic_selector
        self.value_serialization_schema = value_serialization_schema
        self.key_serialization_schema = key_serialization_schema

    @staticmethod
    def builder() -> "KafkaRecordSerializationSchemaBuilder":
        return KafkaRecordSerializationSchemaBuilder()

    def serialize(self, element: Any) -> bytes:
        """The value's bytes (the whole Kafka record is :meth:`serialize_record`)."""
        return self.value_serialization_schema.serialize(element)

    def serialize_record(self, element: Any) -> tuple[str, Optional[bytes], Optional[bytes]]:
        """(topic, key or None, value) of ``element``; a None value is a tombstone (the table
        connector's upsert-kafka deletes)."""
        topic = self.topic_selector.apply(element)
        if not isinstance(topic, str) or not topic:
            raise TypeError(f"the topic selector must return a topic name (a non-empty str), got {topic!r} "
                            f"for record {element!r}")
        key = None if self.key_serialization_schema is None else self.key_serialization_schema.serialize(element)
        return topic, key, self.value_serialization_schema.serialize(element)


class KafkaRecordSerializationSchemaBuilder:
    """Builds a :class:`KafkaRecordSerializationSchema`: a topic (fixed or selected per record) and a
    value schema are required, a key schema is optional; each may be set once, as in Flink."""

    def __init__(self) -> None:
        self._topic_selector: Optional[KafkaTopicSelector] = None
        self._key: Optional[SerializationSchema] = None
        self._value: Optional[SerializationSchema] = None

    def _set_topic_selector(self, selector: KafkaTopicSelector) -> None:
        if self._topic_selector is not None:
            raise ValueError("KafkaRecordSerializationSchemaBuilder: the topic (set_topic or set_topic_selector) "
                             "is already set")
        self._topic_selector = selector

    def set_topic(self, topic: str) -> "KafkaRecordSerializationSchemaBuilder":
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"KafkaRecordSerializationSchemaBuilder.set_topic: a topic name is required, got {topic!r}")
        self._set_topic_selector(_FixedTopic(topic))
        return self

    def set_topic_selector(self, topic_selector: Union[Callable[[Any], str], KafkaTopicSelector]
                           ) -> "KafkaRecordSerializationSchemaBuilder":
        if not isinstance(topic_selector, KafkaTopicSelector) and not callable(topic_selector):
            raise TypeError("topic_selector must be KafkaTopicSelector or a callable")
        if not isinstance(topic_selector, KafkaTopicSelector):
            topic_selector = _FunctionTopicSelector(topic_selector)
        self._set_topic_selector(topic_selector)
        return self

    def set_key_serialization_schema(self, key_serialization_schema: SerializationSchema
                                     ) -> "KafkaRecordSerializationSchemaBuilder":
        _check_schema(key_serialization_schema, "set_key_serialization_schema")
        if self._key is not None:
            raise ValueError("KafkaRecordSerializationSchemaBuilder: the key serialization schema is already set")
        self._key = key_serialization_schema
        return self

    def set_value_serialization_schema(self, value_serialization_schema: SerializationSchema
                                       ) -> "KafkaRecordSerializationSchemaBuilder":
        _check_schema(value_serialization_schema, "set_value_serialization_schema")
        if self._value is not None:
            raise ValueError("KafkaRecordSerializationSchemaBuilder: the value serialization schema is already set")
        self._value = value_serialization_schema
        return self

    def build(self) -> KafkaRecordSerializationSchema:
        if self._value is None:
            raise ValueError("KafkaRecordSerializationSchemaBuilder: no value serialization schema is configured "
                             "(set_value_serialization_schema)")
        if self._topic_selector is None:
            raise ValueError("KafkaRecordSerializationSchemaBuilder: no topic is configured "
                             "(set_topic or set_topic_selector)")
        return KafkaRecordSerializationSchema(self._topic_selector, self._value, self._key)


def _check_schema(schema: Any, setter: str) -> None:
    if not callable(getattr(schema, "serialize", None)):
        raise TypeError(f"KafkaRecordSerializationSchemaBuilder.{setter}: a SerializationSchema is required, "
                        f"got {type(schema).__name__}")


class KafkaSink:
    """Writes a stream to Kafka topics with a :class:`DeliveryGuarantee` (PyFlink's ``KafkaSink``;
    ``NONE`` by default). Build it with :meth:`builder` and add it with ``ds.sink_to(sink)``."""

    name = "KafkaSink"

    def __init__(self, bootstrap_servers: str, delivery_guarantee: DeliveryGuarantee,
                 transactional_id_prefix: Optional[str], record_serializer: KafkaRecordSerializationSchema,
                 properties: dict[str, str]) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.delivery_guarantee = delivery_guarantee
        self.transactional_id_prefix = transactional_id_prefix
        self.record_serializer = record_serializer
        self.properties = dict(properties)
        self._config = librdkafka_config({**self.properties, "bootstrap.servers": bootstrap_servers})
        self._max_block_ms = _max_block_ms(self.properties)

    @staticmethod
    def builder() -> "KafkaSinkBuilder":
        return KafkaSinkBuilder()

    def _sink_factory(self) -> operator_factories.SinkFactory:
        return operator_factories.KafkaSinkFactory(
            producer_config=dict(self._config),
            delivery_guarantee=self.delivery_guarantee.name,
            transactional_id_prefix=self.transactional_id_prefix,
            record_serializer=self.record_serializer,
            max_block_ms=self._max_block_ms,
        )


class KafkaSinkBuilder:
    """Builds a :class:`KafkaSink`; checks what Flink's builder checks: bootstrap servers and a
    record serializer are required, and EXACTLY_ONCE requires a transactional id prefix."""

    def __init__(self) -> None:
        self._bootstrap_servers: Optional[str] = None
        self._guarantee = DeliveryGuarantee.NONE
        self._prefix: Optional[str] = None
        self._serializer: Optional[KafkaRecordSerializationSchema] = None
        self._properties: dict[str, str] = {}

    def set_bootstrap_servers(self, bootstrap_servers: str) -> "KafkaSinkBuilder":
        if not isinstance(bootstrap_servers, str) or not bootstrap_servers.strip():
            raise ValueError(f"KafkaSinkBuilder.set_bootstrap_servers: 'host:port[,host:port...]' is required, "
                             f"got {bootstrap_servers!r}")
        self._bootstrap_servers = bootstrap_servers
        return self

    def set_delivery_guarantee(self, delivery_guarantee: DeliveryGuarantee) -> "KafkaSinkBuilder":
        if not isinstance(delivery_guarantee, DeliveryGuarantee):
            raise TypeError(f"KafkaSinkBuilder.set_delivery_guarantee: a DeliveryGuarantee is required, "
                            f"got {delivery_guarantee!r}")
        self._guarantee = delivery_guarantee
        return self

    def set_transactional_id_prefix(self, transactional_id_prefix: str) -> "KafkaSinkBuilder":
        if not isinstance(transactional_id_prefix, str) or not transactional_id_prefix:
            raise ValueError(f"KafkaSinkBuilder.set_transactional_id_prefix: a non-empty prefix is required, "
                             f"got {transactional_id_prefix!r}")
        if len(transactional_id_prefix.encode()) > 6400:  # Flink's MAXIMUM_PREFIX_BYTES
            raise ValueError("KafkaSinkBuilder.set_transactional_id_prefix: the prefix exceeds 6400 bytes (UTF-8)")
        self._prefix = transactional_id_prefix
        return self

    def set_record_serializer(self, record_serializer: KafkaRecordSerializationSchema) -> "KafkaSinkBuilder":
        if not isinstance(record_serializer, KafkaRecordSerializationSchema):
            raise TypeError("KafkaSinkBuilder.set_record_serializer: a KafkaRecordSerializationSchema is required "
                            f"(KafkaRecordSerializationSchema.builder()...build()), got {type(record_serializer).__name__}")
        self._serializer = record_serializer
        return self

    def set_property(self, key: str, value: str) -> "KafkaSinkBuilder":
        """A Kafka producer property (Java's name; see the module doc for how it reaches librdkafka)."""
        self._properties[str(key)] = str(value)
        return self

    def build(self) -> KafkaSink:
        servers = self._bootstrap_servers or self._properties.get("bootstrap.servers")
        if not servers:
            raise ValueError("KafkaSinkBuilder: no bootstrap servers are configured (set_bootstrap_servers)")
        if self._serializer is None:
            raise ValueError("KafkaSinkBuilder: no record serializer is configured (set_record_serializer)")
        if self._guarantee is DeliveryGuarantee.EXACTLY_ONCE and self._prefix is None:
            raise ValueError("KafkaSinkBuilder: the EXACTLY_ONCE delivery guarantee requires a transactional id "
                             "prefix (set_transactional_id_prefix), unique among the sinks writing to one Kafka "
                             "cluster")
        properties = {k: v for k, v in self._properties.items() if k != "bootstrap.servers"}
        return KafkaSink(servers, self._guarantee, self._prefix, self._serializer, properties)


# -- the deprecated SinkFunction (Flink's FlinkKafkaProducer) ------------------------------------


class Semantic(Enum):
    """The deprecated FlinkKafkaProducer's guarantees (PyFlink's ``Semantic``)."""

    EXACTLY_ONCE = 0
    AT_LEAST_ONCE = 1
    NONE = 2


class FlinkKafkaProducer(SinkFunction):
    """Deprecated since Flink 1.15 (use :class:`KafkaSink`): ``add_sink`` runs it as the KafkaSink
    it describes (one topic, value-only records, AT_LEAST_ONCE by default, as PyFlink's).
    ``kafka_producer_pool_size`` is accepted and unused: this sink needs no producer pool; an
    EXACTLY_ONCE producer names its transactions ``<transactional.id or the topic>-<subtask>``."""

    name = "FlinkKafkaProducer"

    def __init__(self, topic: str, serialization_schema: SerializationSchema, producer_config: dict,
                 kafka_producer_pool_size: int = 5, semantic: Semantic = Semantic.AT_LEAST_ONCE) -> None:
        warnings.warn("Deprecated in 1.15. Use KafkaSink instead.", DeprecationWarning, stacklevel=2)
        if not isinstance(semantic, Semantic):
            raise TypeError(f"FlinkKafkaProducer: semantic must be a Semantic, got {semantic!r}")
        properties = {str(k): str(v) for k, v in dict(producer_config).items()}
        builder = (KafkaSink.builder()
                   .set_record_serializer(KafkaRecordSerializationSchema.builder().set_topic(topic)
                                          .set_value_serialization_schema(serialization_schema).build())
                   .set_delivery_guarantee(DeliveryGuarantee[semantic.name]))
        if "bootstrap.servers" in properties:
            builder.set_bootstrap_servers(properties.pop("bootstrap.servers"))
        transactional_id = properties.pop("transactional.id", None)
        if semantic is Semantic.EXACTLY_ONCE:
            builder.set_transactional_id_prefix(transactional_id or topic)
        for key, value in properties.items():
            builder.set_property(key, value)
        self._kafka_sink = builder.build()

    def _sink_factory(self) -> operator_factories.SinkFactory:
        return self._kafka_sink._sink_factory()

    def invoke(self, value: object, context: object = None) -> None:
        """Not called: ``add_sink`` runs this producer as its KafkaSink (``_sink_factory``)."""
        raise RuntimeError("FlinkKafkaProducer writes through its KafkaSink: add it with add_sink, not by calling invoke")
