"""The KafkaSource's pure logic: Flink's split owner function, the offsets initializers' resolution
(against a fake offsets client: the broker's answers are the test's input), the mapping of the
builder's properties to librdkafka's, and the builder's checks (PyFlink's / Flink's rules)."""
from __future__ import annotations

import logging

import pytest

from millstream.common import SimpleStringSchema
from millstream.datastream.connectors.kafka import (
    FlinkKafkaConsumer, KafkaOffsetResetStrategy, KafkaOffsetsInitializer, KafkaSource, KafkaTopicPartition)
from millstream.runtime.operator_factories import KafkaOffsetsSpec
from millstream.runtime.operators.kafka_splits import (
    consumer_config, java_string_hash, parse_split_id, resolve_offsets, source_options, split_id, split_owner)

# -- the owner function ----------------------------------------------------------------------------


def test_java_string_hash_matches_javas_string_hashcode() -> None:
    # Facts about java.lang.String.hashCode(): "hello" is 99162322, "Aa" and "BB" collide (2112),
    # "polygenelubricants" overflows to Integer.MIN_VALUE, the empty string is 0, and a character
    # outside the BMP counts as its two UTF-16 code units (0xD83D, 0xDE00 for U+1F600).
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert java_string_hash("") == 0
    assert java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00


def test_split_owner_is_flinks_get_split_owner() -> None:
    # Flink: startIndex = ((topic.hashCode() * 31) & 0x7FFFFFFF) % numReaders, owner = (startIndex +
    # partition) % numReaders. "hello": 99162322 * 31 = 3074031982, an int of -1220935314, masked
    # 926548334, which is 2 mod 3 and 0 mod 2.
    assert [split_owner("hello", p, 3) for p in range(4)] == [2, 0, 1, 2]
    assert [split_owner("hello", p, 2) for p in range(3)] == [0, 1, 0]
    # Integer.MIN_VALUE * 31 overflows to Integer.MIN_VALUE; masked, 0: partition 0 on subtask 0.
    assert [split_owner("polygenelubricants", p, 4) for p in range(5)] == [0, 1, 2, 3, 0]
    assert all(split_owner("any", p, 1) == 0 for p in range(5))


def test_partitions_of_a_topic_spread_evenly_over_the_subtasks() -> None:
    owners = [split_owner("orders", p, 3) for p in range(9)]
    assert sorted(owners.count(i) for i in range(3)) == [3, 3, 3]


def test_split_ids_are_topic_dash_partition_and_parse_back() -> None:
    assert split_id("my-topic", 12) == "my-topic-12"
    assert parse_split_id("my-topic-12") == ("my-topic", 12)
    with pytest.raises(ValueError, match="not a Kafka split id"):
        parse_split_id("topic")


# -- offsets initializers ---------------------------------------------------------------------------


class FakeOffsets:
    """The broker's answers, given by the test."""

    def __init__(self, low: dict, high: dict, committed: dict | None = None, by_time: dict | None = None) -> None:
        self.low, self.high, self.committed, self.by_time = low, high, committed or {}, by_time or {}
        self.calls: list[str] = []

    def beginning_offsets(self, partitions):
        self.calls.append("beginning")
        return {p: self.low[p] for p in partitions}

    def end_offsets(self, partitions):
        self.calls.append("end")
        return {p: self.high[p] for p in partitions}

    def committed_offsets(self, partitions):
        self.calls.append("committed")
        return {p: self.committed[p] for p in partitions if p in self.committed}

    def offsets_for_times(self, partitions, timestamp):
        self.calls.append(f"times@{timestamp}")
        return {p: o for p, o in self.by_time.items() if p in partitions}


A0, A1, A2 = ("a", 0), ("a", 1), ("a", 2)
BROKER = dict(low={A0: 5, A1: 0, A2: 2}, high={A0: 50, A1: 10, A2: 2})


def spec(initializer: KafkaOffsetsInitializer) -> KafkaOffsetsSpec:
    return initializer._spec


def test_earliest_and_latest_are_the_partitions_first_and_end_offsets() -> None:
    fake = FakeOffsets(**BROKER)
    assert resolve_offsets(spec(KafkaOffsetsInitializer.earliest()), [A0, A1, A2], fake) == {A0: 5, A1: 0, A2: 2}
    assert resolve_offsets(spec(KafkaOffsetsInitializer.latest()), [A0, A1, A2], fake) == {A0: 50, A1: 10, A2: 2}


def test_committed_offsets_fall_back_to_the_reset_strategy() -> None:
    fake = FakeOffsets(**BROKER, committed={A0: 7})
    parts = [A0, A1]
    assert resolve_offsets(spec(KafkaOffsetsInitializer.committed_offsets(KafkaOffsetResetStrategy.EARLIEST)),
                           parts, fake) == {A0: 7, A1: 0}
    assert resolve_offsets(spec(KafkaOffsetsInitializer.committed_offsets(KafkaOffsetResetStrategy.LATEST)),
                           parts, fake) == {A0: 7, A1: 10}
    # The default strategy is NONE: a partition without a committed offset fails, named.
    with pytest.raises(ValueError, match=r"a-1 have no committed offset and the offset reset strategy is NONE"):
        resolve_offsets(spec(KafkaOffsetsInitializer.committed_offsets()), parts, fake)


def test_timestamp_takes_the_first_offset_at_or_after_it_else_the_end_read_before() -> None:
    fake = FakeOffsets(**BROKER, by_time={A0: 20})
    got = resolve_offsets(spec(KafkaOffsetsInitializer.timestamp(1_700_000_000_000)), [A0, A1], fake)
    assert got == {A0: 20, A1: 10}
    assert fake.calls == ["end", "times@1700000000000"]  # the end offsets first, as Flink reads them


def test_specific_offsets_then_committed_then_the_reset_strategy() -> None:
    given = {KafkaTopicPartition("a", 0): 9}
    fake = FakeOffsets(**BROKER, committed={A1: 3})
    got = resolve_offsets(spec(KafkaOffsetsInitializer.offsets(given)), [A0, A1, A2], fake)
    assert got == {A0: 9, A1: 3, A2: 2}  # default strategy EARLIEST for a2
    latest = KafkaOffsetsInitializer.offsets(given, KafkaOffsetResetStrategy.LATEST)
    assert resolve_offsets(spec(latest), [A2], fake) == {A2: 2}
    with pytest.raises(ValueError, match="a-2 have no specified offset"):
        resolve_offsets(spec(KafkaOffsetsInitializer.offsets(given, KafkaOffsetResetStrategy.NONE)), [A0, A2], fake)


# -- properties ------------------------------------------------------------------------------------


def test_flink_options_are_taken_out_java_only_properties_ignored_with_one_warning(caplog) -> None:
    props = {"bootstrap.servers": "h:1", "key.deserializer": "org.X", "value.deserializer": "org.Y",
             "partition.discovery.interval.ms": "1000", "fetch.max.wait.ms": "100", "enable.auto.commit": "true",
             "isolation.level": "read_committed", "session.timeout.ms": "6000"}
    with caplog.at_level(logging.WARNING):
        conf = consumer_config(props, "latest", "cid-0", "grp")
    warnings = [r for r in caplog.records if "ignored" in r.getMessage()]
    assert len(warnings) == 1 and "key.deserializer, value.deserializer" in warnings[0].getMessage()
    assert "key.deserializer" not in conf and "partition.discovery.interval.ms" not in conf
    assert conf["fetch.wait.max.ms"] == "100"  # renamed to librdkafka's
    assert conf["enable.auto.commit"] == "false"  # offsets are committed on checkpoints only
    assert conf["auto.offset.reset"] == "latest" and conf["group.id"] == "grp" and conf["client.id"] == "cid-0"
    assert conf["isolation.level"] == "read_committed" and conf["session.timeout.ms"] == "6000"
    assert consumer_config({}, "none", "c", "g")["auto.offset.reset"] == "error"
    assert consumer_config({}, "earliest", "c", "g")["isolation.level"] == "read_uncommitted"  # Java's default


def test_source_options_have_flinks_defaults() -> None:
    o = source_options({"group.id": "g"}, bounded=False)
    assert (o.commit_on_checkpoint, o.discovery_interval_ms, o.client_id_prefix) == (True, 300_000, "g")
    assert source_options({}, bounded=False).commit_on_checkpoint is False  # no group id: nothing to commit
    assert source_options({"partition.discovery.interval.ms": "10"}, bounded=True).discovery_interval_ms == -1
    o = source_options({"group.id": "g", "commit.offsets.on.checkpoint": "false", "client.id.prefix": "p",
                        "default.api.timeout.ms": "1500"}, bounded=False)
    assert (o.commit_on_checkpoint, o.client_id_prefix, o.timeout_ms) == (False, "p", 1500)
    with pytest.raises(ValueError, match="commit.offsets.on.checkpoint must be true or false"):
        source_options({"commit.offsets.on.checkpoint": "yes"}, bounded=False)


# -- the builder -----------------------------------------------------------------------------------


def builder():
    return KafkaSource.builder().set_bootstrap_servers("h:1").set_value_only_deserializer(SimpleStringSchema())


def test_builder_records_pyflinks_settings() -> None:
    source = (builder().set_topics("t1", "t2").set_group_id("g").set_client_id_prefix("p")
              .set_starting_offsets(KafkaOffsetsInitializer.latest())
              .set_bounded(KafkaOffsetsInitializer.offsets({KafkaTopicPartition("t1", 0): 4}))
              .set_properties({"fetch.min.bytes": 1}).build())
    f = source._source_factory()
    assert f.topics == ("t1", "t2") and f.bounded and f.starting.kind == "latest"
    assert f.stopping.offsets == (("t1", 0, 4),)
    assert f.properties == {"bootstrap.servers": "h:1", "group.id": "g", "client.id.prefix": "p", "fetch.min.bytes": "1"}
    unbounded = builder().set_topic_pattern("t.*").set_unbounded(KafkaOffsetsInitializer.latest()).build()
    assert not unbounded._source_factory().bounded and unbounded._source_factory().stopping.kind == "latest"


def test_builder_refuses_what_flink_refuses() -> None:
    with pytest.raises(ValueError, match="bootstrap.servers is required"):
        KafkaSource.builder().set_topics("t").set_value_only_deserializer(SimpleStringSchema()).build()
    with pytest.raises(ValueError, match="no subscribe mode"):
        builder().build()
    with pytest.raises(ValueError, match="deserialization schema is required"):
        KafkaSource.builder().set_bootstrap_servers("h:1").set_topics("t").build()
    with pytest.raises(ValueError, match="topic pattern is already set|topics is already set"):
        builder().set_topics("t").set_topic_pattern("x")
    with pytest.raises(ValueError, match="group.id is required when using committed offsets"):
        builder().set_topics("t").set_starting_offsets(KafkaOffsetsInitializer.committed_offsets()).build()
    with pytest.raises(ValueError, match="group.id is required when offset commit is enabled"):
        builder().set_topics("t").set_property("commit.offsets.on.checkpoint", "true").build()
    with pytest.raises(ValueError, match="earliest\\(\\) is not a stopping offset"):
        builder().set_bounded(KafkaOffsetsInitializer.earliest())
    with pytest.raises(TypeError, match="needs a DeserializationSchema"):
        KafkaSource.builder().set_value_only_deserializer("utf-8")


def test_topic_partition_equality_and_hash_as_pyflink() -> None:
    assert KafkaTopicPartition("t", 1) == KafkaTopicPartition("t", 1) != KafkaTopicPartition("t", 2)
    assert len({KafkaTopicPartition("t", 1), KafkaTopicPartition("t", 1)}) == 1


def test_flink_kafka_consumer_starts_from_group_offsets_with_kafkas_reset_default() -> None:
    with pytest.warns(DeprecationWarning, match="Use KafkaSource instead"):
        consumer = FlinkKafkaConsumer("t", SimpleStringSchema(), {"bootstrap.servers": "h:1", "group.id": "g"})
    f = consumer._source_factory()
    assert (f.starting.kind, f.starting.reset) == ("committed", "latest")
    assert f.properties["partition.discovery.interval.ms"] == "-1"  # FlinkKafkaConsumer: off unless set
    assert f.properties["commit.offsets.on.checkpoint"] == "true"
    with pytest.warns(DeprecationWarning):
        earliest = FlinkKafkaConsumer(["t"], SimpleStringSchema(), {"bootstrap.servers": "h:1",
                                                                     "auto.offset.reset": "earliest"})
    # no group: nothing committed, so auto.offset.reset decides
    assert earliest._source_factory().starting.kind == "earliest"
    assert earliest.set_start_from_latest()._source_factory().starting.kind == "latest"


# -- per-partition watermarks ----------------------------------------------------------------------


def test_an_assigned_split_holds_the_watermark_back_until_its_own_records_come() -> None:
    from millstream.common import WatermarkStrategy
    from millstream.runtime.watermarks import TimestampsAndWatermarks

    tw = TimestampsAndWatermarks(WatermarkStrategy.for_monotonous_timestamps(), auto_watermark_interval_ms=200,
                                 clock=lambda: 0)
    tw.add_split("t-0")
    tw.add_split("t-1")
    tw.process_batch(["b"], [100_000], split="t-1")
    assert tw.emit_periodic() == []  # t-0 has had no record: the subtask's watermark stays back
    tw.process_batch(["a"], [1_000], split="t-0")
    assert tw.emit_periodic() == [999]  # the minimum over the partitions (monotonous: ts - 1)
    assert tw.release_split("t-0") == [99_999]  # a finished partition no longer holds it back
