"""KafkaSink's pure parts: PyFlink's builders and the checks Flink's builders make, topic selectors,
the mapping of Java producer properties to librdkafka's, RowFieldExtractorSchema (Flink's rules),
and the EXACTLY_ONCE bookkeeping: pending batches per checkpoint and the commit-marker decision.
The operator itself runs against a real broker in tests/integration/test_kafka_sink.py."""
from __future__ import annotations

import warnings

import pytest

from millstream.common import Row
from millstream.common.serialization import RowFieldExtractorSchema, SimpleStringSchema
from millstream.datastream import StreamExecutionEnvironment
from millstream.datastream.connectors.base import DeliveryGuarantee as BaseDeliveryGuarantee
from millstream.datastream.connectors.kafka import (
    DeliveryGuarantee,
    FlinkKafkaProducer,
    KafkaRecordSerializationSchema,
    KafkaSink,
    KafkaTopicSelector,
    Semantic,
)
from millstream.datastream.connectors.kafka.sink import librdkafka_config
from millstream.runtime import operator_factories
from millstream.runtime.operators.kafka_sink import PendingBatch, PendingBatches, already_committed


def value_only(topic: str = "t") -> KafkaRecordSerializationSchema:
    return KafkaRecordSerializationSchema.builder().set_topic(topic).set_value_serialization_schema(
        SimpleStringSchema()).build()


# -- the record serialization schema -----------------------------------------------------------

def test_a_fixed_topic_and_value_schema_make_value_only_records() -> None:
    assert value_only("orders").serialize_record("a") == ("orders", None, b"a")


def test_a_key_schema_serializes_the_key_from_the_same_record() -> None:
    schema = (KafkaRecordSerializationSchema.builder().set_topic("t")
              .set_key_serialization_schema(RowFieldExtractorSchema(0))
              .set_value_serialization_schema(RowFieldExtractorSchema(1)).build())
    assert schema.serialize_record(Row(b"k1", b"v1")) == ("t", b"k1", b"v1")


class ByCategory(KafkaTopicSelector):
    def apply(self, data):
        return "topic-" + data.split(":")[0]


@pytest.mark.parametrize("selector", [ByCategory(), lambda s: "topic-" + s.split(":")[0]],
                         ids=["KafkaTopicSelector", "callable"])
def test_a_topic_selector_picks_each_records_topic(selector) -> None:
    schema = (KafkaRecordSerializationSchema.builder().set_topic_selector(selector)
              .set_value_serialization_schema(SimpleStringSchema()).build())
    assert [schema.serialize_record(r)[0] for r in ["a:1", "b:2", "a:3"]] == ["topic-a", "topic-b", "topic-a"]


def test_a_topic_selector_that_returns_no_name_fails_naming_the_record() -> None:
    schema = (KafkaRecordSerializationSchema.builder().set_topic_selector(lambda r: None)
              .set_value_serialization_schema(SimpleStringSchema()).build())
    with pytest.raises(TypeError, match="topic name.*'x'"):
        schema.serialize_record("x")


def test_the_schema_builder_requires_a_value_schema_and_a_topic() -> None:
    with pytest.raises(ValueError, match="set_value_serialization_schema"):
        KafkaRecordSerializationSchema.builder().set_topic("t").build()
    with pytest.raises(ValueError, match="set_topic or set_topic_selector"):
        KafkaRecordSerializationSchema.builder().set_value_serialization_schema(SimpleStringSchema()).build()


def test_the_schema_builder_sets_each_part_once_as_flinks() -> None:
    with pytest.raises(ValueError, match="already set"):
        KafkaRecordSerializationSchema.builder().set_topic("a").set_topic_selector(lambda r: "b")
    with pytest.raises(ValueError, match="value serialization schema is already set"):
        (KafkaRecordSerializationSchema.builder().set_value_serialization_schema(SimpleStringSchema())
         .set_value_serialization_schema(SimpleStringSchema()))
    with pytest.raises(TypeError, match="KafkaTopicSelector or a callable"):
        KafkaRecordSerializationSchema.builder().set_topic_selector("topic")
    with pytest.raises(TypeError, match="SerializationSchema is required"):
        KafkaRecordSerializationSchema.builder().set_value_serialization_schema(str)


# -- the sink builder ---------------------------------------------------------------------------

def test_exactly_once_without_a_transactional_id_prefix_fails_at_build_naming_the_setter() -> None:
    builder = (KafkaSink.builder().set_bootstrap_servers("localhost:9092").set_record_serializer(value_only())
               .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE))
    with pytest.raises(ValueError, match=r"EXACTLY_ONCE.*set_transactional_id_prefix"):
        builder.build()
    assert builder.set_transactional_id_prefix("app").build().transactional_id_prefix == "app"


def test_the_sink_builder_requires_bootstrap_servers_and_a_record_serializer() -> None:
    with pytest.raises(ValueError, match="set_bootstrap_servers"):
        KafkaSink.builder().set_record_serializer(value_only()).build()
    with pytest.raises(ValueError, match="set_record_serializer"):
        KafkaSink.builder().set_bootstrap_servers("h:1").build()
    with pytest.raises(TypeError, match="DeliveryGuarantee"):
        KafkaSink.builder().set_delivery_guarantee("EXACTLY_ONCE")


def test_the_default_guarantee_is_none_and_the_factory_carries_the_sinks_settings() -> None:
    sink = (KafkaSink.builder().set_bootstrap_servers("h:1").set_record_serializer(value_only())
            .set_property("linger.ms", "5").build())
    assert sink.delivery_guarantee is DeliveryGuarantee.NONE
    factory = sink._sink_factory()
    assert isinstance(factory, operator_factories.KafkaSinkFactory)
    assert factory.delivery_guarantee == "NONE" and factory.max_block_ms == 60_000
    assert factory.producer_config["bootstrap.servers"] == "h:1" and factory.producer_config["linger.ms"] == "5"


def test_delivery_guarantee_is_the_one_of_connectors_base() -> None:
    assert DeliveryGuarantee is BaseDeliveryGuarantee
    assert [g.name for g in DeliveryGuarantee] == ["EXACTLY_ONCE", "AT_LEAST_ONCE", "NONE"]


def test_sink_to_adds_the_kafka_sink_to_the_job_graph() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    sink = KafkaSink.builder().set_bootstrap_servers("h:1").set_record_serializer(value_only()).build()
    env.from_collection(["a"]).sink_to(sink)
    graph = env.get_stream_graph()
    assert any(isinstance(node.factory, operator_factories.KafkaSinkFactory) and node.operator_name == "Sink: KafkaSink"
               for node in graph.nodes.values())


# -- producer properties ------------------------------------------------------------------------

def test_java_property_names_are_mapped_to_librdkafkas_and_shared_ones_pass() -> None:
    config = librdkafka_config({"delivery.timeout.ms": "5000", "max.request.size": "2048",
                                "buffer.memory": "33554432", "linger.ms": "7", "acks": "all"})
    assert config["message.timeout.ms"] == "5000" and config["message.max.bytes"] == "2048"
    assert config["queue.buffering.max.kbytes"] == "32768"
    assert config["linger.ms"] == "7" and config["acks"] == "all"
    assert config["partitioner"] == "murmur2_random"  # Java's default partitioner for keyed records
    assert "delivery.timeout.ms" not in config


def test_java_only_properties_are_dropped_with_one_warning_naming_them() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = librdkafka_config({"sasl.jaas.config": "x", "ssl.truststore.location": "/t.jks",
                                    "key.serializer": "k", "acks": "1"})
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "sasl.jaas.config" in message and "ssl.truststore.location" in message and "key.serializer" in message
    assert set(config) == {"partitioner", "acks"}


def test_max_block_ms_bounds_the_metadata_wait_and_must_be_a_positive_number() -> None:
    builder = KafkaSink.builder().set_bootstrap_servers("h:1").set_record_serializer(value_only())
    assert builder.set_property("max.block.ms", "2500").build()._sink_factory().max_block_ms == 2500
    with pytest.raises(ValueError, match="max.block.ms"):
        builder.set_property("max.block.ms", "soon").build()


# -- the deprecated FlinkKafkaProducer ----------------------------------------------------------

def test_flink_kafka_producer_is_a_kafka_sink_with_the_semantic_as_guarantee() -> None:
    with pytest.warns(DeprecationWarning):
        producer = FlinkKafkaProducer("t", SimpleStringSchema(), {"bootstrap.servers": "h:1", "transactional.id": "p"},
                                      semantic=Semantic.EXACTLY_ONCE)
    factory = producer._sink_factory()
    assert factory.delivery_guarantee == "EXACTLY_ONCE" and factory.transactional_id_prefix == "p"
    assert factory.record_serializer.serialize_record("x") == ("t", None, b"x")
    with pytest.warns(DeprecationWarning):
        assert FlinkKafkaProducer("t", SimpleStringSchema(), {"bootstrap.servers": "h:1"})._sink_factory(
        ).delivery_guarantee == "AT_LEAST_ONCE"


def test_add_sink_runs_a_flink_kafka_producer_as_its_kafka_sink() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.warns(DeprecationWarning):
        producer = FlinkKafkaProducer("t", SimpleStringSchema(), {"bootstrap.servers": "h:1"})
    env.from_collection(["a"]).add_sink(producer)
    factories = [node.factory for node in env.get_stream_graph().nodes.values()]
    assert any(isinstance(f, operator_factories.KafkaSinkFactory) for f in factories)


# -- RowFieldExtractorSchema (Flink's rules) ----------------------------------------------------

def test_row_field_extractor_returns_the_fields_bytes_and_empty_bytes_for_none() -> None:
    assert RowFieldExtractorSchema(1).serialize(Row(b"k", b"v")) == b"v"
    assert RowFieldExtractorSchema(0).serialize(Row(None, b"v")) == b""
    assert RowFieldExtractorSchema(0).serialize(None) == b""
    assert RowFieldExtractorSchema(2) == RowFieldExtractorSchema(2) and RowFieldExtractorSchema(2).get_field_index() == 2


def test_row_field_extractor_rejects_a_negative_index_a_missing_field_and_a_non_bytes_field() -> None:
    with pytest.raises(ValueError, match="non-negative, got: -1"):
        RowFieldExtractorSchema(-1)
    with pytest.raises(ValueError, match="field 2 in Row with arity 2"):
        RowFieldExtractorSchema(2).serialize(Row(b"a", b"b"))
    with pytest.raises(TypeError, match="index 0 must be of type bytes, but was str"):
        RowFieldExtractorSchema(0).serialize(Row("a", b"b"))


# -- EXACTLY_ONCE bookkeeping -------------------------------------------------------------------

def batch(cid: int, tid: str = "p-0", *values: bytes) -> PendingBatch:
    return PendingBatch(cid, tid, f"{tid}-job", tuple(("t", None, v, None) for v in values or (b"x",)))


def test_due_batches_are_those_of_checkpoints_up_to_the_completed_one_oldest_first() -> None:
    pending = PendingBatches()
    for b in (batch(7), batch(5), batch(9), batch(5, "p-3")):
        pending.add(b)
    assert [(b.checkpoint_id, b.transactional_id) for b in pending.due(7)] == [(5, "p-0"), (5, "p-3"), (7, "p-0")]
    for b in pending.due(7):
        pending.remove(b)
    assert [b.checkpoint_id for b in pending.due(100)] == [9]


def test_pending_batches_round_trip_through_the_state_with_their_transactional_ids() -> None:
    pending = PendingBatches()
    pending.add(batch(3, "p-1", b"a", b"b"))
    pending.add(PendingBatch(4, "p-1", "p-1-job", (("u", b"k", b"c", 1700000000000),)))
    restored = PendingBatches.from_state(pending.to_state())
    assert restored == [batch(3, "p-1", b"a", b"b"), PendingBatch(4, "p-1", "p-1-job", (("u", b"k", b"c", 1700000000000),))]


def test_an_unreadable_state_is_an_error_naming_the_problem() -> None:
    with pytest.raises(ValueError, match="version 1"):
        PendingBatches.from_state({"version": 0, "pending": []})
    with pytest.raises(ValueError, match="pending batch"):
        PendingBatches.from_state({"version": 1, "pending": [{"checkpoint_id": 1}]})


def test_two_different_batches_for_one_checkpoint_and_transactional_id_are_refused() -> None:
    pending = PendingBatches()
    pending.add(batch(3, "p-0", b"a"))
    pending.add(batch(3, "p-0", b"a"))  # the same batch again (restored twice) is fine
    with pytest.raises(ValueError, match="checkpoint 3"):
        pending.add(batch(3, "p-0", b"b"))


@pytest.mark.parametrize("markers, committed", [
    ({}, False),                                  # nothing ever committed for this group
    ({"t": None}, False),
    ({"t": 4}, False),                            # the last commit was an earlier checkpoint's
    ({"t": 5}, True),                             # this checkpoint's transaction committed
    ({"t": 8}, True),                             # a later one committed, so this one did before it
    ({"a": 3, "b": 5}, True),
])
def test_a_batch_is_committed_when_a_marker_of_its_topics_reached_its_checkpoint(markers, committed) -> None:
    assert already_committed(5, markers) is committed
