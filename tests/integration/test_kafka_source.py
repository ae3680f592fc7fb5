"""PyFlink's KafkaSource on a real Millstream cluster reading a real Kafka-protocol broker (tansu,
started by :mod:`tests.integration.kafka`), one broker and one cluster for the whole module.

What Flink documents and these tests check: a bounded source reads every record of every partition
exactly once, each partition by the subtask Flink's enumerator would assign it to; the starting
offsets initializers (earliest, latest, committed with a reset strategy, specific offsets); after a
task failure an unbounded job resumes from the offsets of its last checkpoint, so an exactly-once
FileSink behind it holds every record once; offsets are committed to Kafka for the group when a
checkpoint completes; a savepoint taken at parallelism 2 resumes at 3 with every record once; and
bad input fails the job naming the problem (unreachable broker, unknown topic, undecodable record).

Records are produced one per request (``batch.num.messages: 1``): tansu reports a wrong high
watermark after a multi-record batch (test_kafka_broker's xfail), and ``latest()`` reads it.
"""
from __future__ import annotations

import itertools
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.common import Configuration, Encoder, Row, SimpleStringSchema, Time, Types, WatermarkStrategy
from millstream.common.restart_strategy import RestartStrategies
from millstream.datastream import MapFunction, ProcessFunction, RuntimeContext, StreamExecutionEnvironment
from millstream.datastream.connectors.file_system import FileSink
from millstream.datastream.connectors.kafka import (
    FlinkKafkaConsumer, KafkaOffsetResetStrategy, KafkaOffsetsInitializer, KafkaRecordSerializationSchema, KafkaSink,
    KafkaSource, KafkaTopicPartition)
from millstream.datastream.connectors.base import DeliveryGuarantee
from millstream.datastream.formats.json import JsonRowDeserializationSchema, JsonRowSerializationSchema
from millstream.datastream.window import TumblingEventTimeWindows
from millstream.runtime.execution_state import JobStatus
from millstream.runtime.operators.kafka_splits import split_owner

from .harness import ClusterSpec, jobmanager_env, poll_for
from .jobs import KEYS, FailWhenMarked, assert_exactly_once, ended, visible_lines
from .kafka import KafkaBroker, kafka_broker  # noqa: F401  (the module-scoped fixture)

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed (`make install`)")

pytestmark = pytest.mark.timeout(300)
CLUSTER = ClusterSpec(slots=3, tasks_per_slot=3, checkpoints=True)


def new_topic(broker: KafkaBroker, partitions: int) -> str:
    name = f"src-{uuid.uuid4().hex[:10]}"
    broker.create_topic(name, partitions)
    return name


def produce(broker: KafkaBroker, topic: str, records: list[tuple[int, bytes]]) -> None:
    """``(partition, value)`` records, one per produce request."""
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0, "batch.num.messages": 1})
    for partition, value in records:
        producer.produce(topic, value=value, partition=partition)
        producer.poll(0)
    assert producer.flush(30) == 0, "records left undelivered after 30 s"


def trickle(broker: KafkaBroker, topic: str, records: list[tuple[int, bytes]], per_s: float) -> threading.Thread:
    """Produces ``records`` at about ``per_s`` a second in a thread (so a job reads small batches)."""
    def run() -> None:
        for i in range(0, len(records), 10):
            produce(broker, topic, records[i:i + 10])
            time.sleep(10 / per_s)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def spread(values: list[int], partitions: int) -> list[tuple[int, bytes]]:
    return [(v % partitions, str(v).encode()) for v in values]


def source(broker: KafkaBroker, topic: str, **settings: Any) -> Any:
    builder = (KafkaSource.builder().set_bootstrap_servers(broker.bootstrap_servers).set_topics(topic)
               .set_value_only_deserializer(settings.pop("deserializer", SimpleStringSchema())))
    for name, value in settings.items():
        getattr(builder, name)(*value) if isinstance(value, tuple) else getattr(builder, name)(value)
    return builder.build()


class TagSubtask(MapFunction):
    def open(self, runtime_context: RuntimeContext) -> None:
        self.index = runtime_context.get_index_of_this_subtask()

    def map(self, value):
        return value, self.index


def collect(cluster: Any, kafka_source: Any, parallelism: int, name: str) -> list[tuple[str, int]]:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    stream = env.from_source(kafka_source, WatermarkStrategy.no_watermarks(), "kafka")
    with jobmanager_env(cluster.address):
        with stream.map(TagSubtask(), output_type=Types.TUPLE([Types.STRING(), Types.INT()])).execute_and_collect(name) as rows:
            return list(rows)


def run_to_end(cluster: Any, env: StreamExecutionEnvironment, name: str, timeout_s: float = 120) -> Any:
    with ClusterClient(cluster.address) as client:
        job_id = client.submit(env.get_job_graph(name).proto)
        return poll_for(lambda: ended(client, job_id), timeout_s, interval=0.2, what=f"job {name!r} to end")


def committed(broker: KafkaBroker, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group})
    try:
        found = consumer.committed([ck.TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in found}
    finally:
        consumer.close()


# -- bounded reads and starting offsets ------------------------------------------------------------


def test_a_bounded_source_of_3_partitions_at_parallelism_2_reads_every_record_once(cluster, kafka_broker) -> None:
    topic = new_topic(kafka_broker, 3)
    produce(kafka_broker, topic, spread(list(range(300)), 3))
    rows = collect(cluster, source(kafka_broker, topic, set_bounded=KafkaOffsetsInitializer.latest()), 2, "bounded p2")
    assert sorted(int(v) for v, _ in rows) == list(range(300))
    for value, subtask in rows:  # each partition is read by the subtask Flink's getSplitOwner names
        assert subtask == split_owner(topic, int(value) % 3, 2), (value, subtask)


def test_json_rows_come_out_as_rows_of_the_deserializers_type(cluster, kafka_broker) -> None:
    """PyFlink's kafka_json_format example reads with JsonRowDeserializationSchema: each value is a
    Row of its type (the source produces the deserializer's type)."""
    topic = new_topic(kafka_broker, 1)
    produce(kafka_broker, topic, [(0, b'{"id": 1, "name": "a"}'), (0, b'{"id": 2, "name": "b"}')])
    schema = (JsonRowDeserializationSchema.Builder()
              .type_info(Types.ROW_NAMED(["id", "name"], [Types.INT(), Types.STRING()])).build())
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    stream = env.from_source(source(kafka_broker, topic, deserializer=schema, set_bounded=KafkaOffsetsInitializer.latest()),
                             WatermarkStrategy.no_watermarks(), "kafka")
    with jobmanager_env(cluster.address):
        with stream.execute_and_collect("json rows") as rows:
            got = list(rows)
    assert got == [Row(id=1, name="a"), Row(id=2, name="b")]
    assert [r.as_dict() for r in got] == [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]


def test_what_a_kafka_sink_wrote_as_json_a_kafka_source_reads_back_as_rows(cluster, kafka_broker) -> None:
    """PyFlink's kafka_json_format example, both halves on one topic: a KafkaSink writes Rows with
    JsonRowSerializationSchema, a bounded KafkaSource reads them back with the deserializer."""
    topic = new_topic(kafka_broker, 1)
    row_type = Types.ROW_NAMED(["id", "name"], [Types.INT(), Types.STRING()])
    rows = [Row(id=i, name=f"n{i}") for i in range(20)]
    serializer = JsonRowSerializationSchema.builder().with_type_info(row_type).build()
    sink = (KafkaSink.builder().set_bootstrap_servers(kafka_broker.bootstrap_servers)
            .set_record_serializer(KafkaRecordSerializationSchema.builder().set_topic(topic)
                                   .set_value_serialization_schema(serializer).build())
            .set_delivery_guarantee(DeliveryGuarantee.AT_LEAST_ONCE).build())
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.from_collection(rows, type_info=row_type).sink_to(sink)
    summary = run_to_end(cluster, env, "write json")
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
    deserializer = JsonRowDeserializationSchema.builder().type_info(row_type).build()
    stop = KafkaOffsetsInitializer.offsets({KafkaTopicPartition(topic, 0): len(rows)})  # AT_LEAST_ONCE: no markers
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    stream = env.from_source(source(kafka_broker, topic, deserializer=deserializer, set_bounded=stop),
                             WatermarkStrategy.no_watermarks(), "kafka")
    with jobmanager_env(cluster.address):
        with stream.execute_and_collect("read json") as got:
            assert list(got) == rows


def test_starting_offsets_latest_reads_only_what_comes_after_the_start(cluster, kafka_broker, tmp_path) -> None:
    topic = new_topic(kafka_broker, 2)
    produce(kafka_broker, topic, spread(list(range(10)), 2))  # offsets 0..4 in each partition
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(200)
    stop = {KafkaTopicPartition(topic, p): 8 for p in range(2)}
    out = tmp_path / "latest"
    (env.from_source(source(kafka_broker, topic, set_starting_offsets=KafkaOffsetsInitializer.latest(),
                            set_bounded=KafkaOffsetsInitializer.offsets(stop)), WatermarkStrategy.no_watermarks(), "kafka")
        .sink_to(FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build()))
    with ClusterClient(cluster.address) as client:
        job_id = client.submit(env.get_job_graph("latest").proto)
        # A completed checkpoint means every reader opened, so "latest" was resolved (offset 5).
        poll_for(lambda: client.status(job_id).checkpoints.num_completed >= 1, 60, what="a checkpoint")
        produce(kafka_broker, topic, spread(list(range(100, 106)), 2))  # offsets 5..7 in each partition
        summary = poll_for(lambda: ended(client, job_id), 60, interval=0.2, what="the job to end")
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
    assert sorted(int(v) for v in visible_lines(out)) == list(range(100, 106))


def test_starting_offsets_earliest_specific_and_committed(cluster, kafka_broker) -> None:
    topic = new_topic(kafka_broker, 3)
    produce(kafka_broker, topic, spread(list(range(30)), 3))  # partition p holds p, p+3, ... at offsets 0..9
    latest = KafkaOffsetsInitializer.latest()

    earliest = collect(cluster, source(kafka_broker, topic, set_bounded=latest), 2, "earliest (the default)")
    assert sorted(int(v) for v, _ in earliest) == list(range(30))

    # Specific offsets; a partition not given (2) has no committed offset, so the reset strategy
    # (EARLIEST by default) starts it at its beginning.
    specific = KafkaOffsetsInitializer.offsets({KafkaTopicPartition(topic, 0): 7, KafkaTopicPartition(topic, 1): 9})
    rows = collect(cluster, source(kafka_broker, topic, set_starting_offsets=specific, set_bounded=latest), 2, "specific")
    assert sorted(int(v) for v, _ in rows) == sorted([21, 24, 27, 28] + list(range(2, 30, 3)))

    # The group's committed offsets; partition 2 has none: LATEST skips it, NONE fails naming it.
    group = f"g-{uuid.uuid4().hex[:6]}"
    setter = ck.Consumer({"bootstrap.servers": kafka_broker.bootstrap_servers, "group.id": group})
    setter.commit(offsets=[ck.TopicPartition(topic, 0, 8), ck.TopicPartition(topic, 1, 5)], asynchronous=False)
    setter.close()
    start = KafkaOffsetsInitializer.committed_offsets(KafkaOffsetResetStrategy.LATEST)
    rows = collect(cluster, source(kafka_broker, topic, set_group_id=group, set_starting_offsets=start,
                                   set_bounded=latest), 2, "committed")
    assert sorted(int(v) for v, _ in rows) == [16, 19, 22, 24, 25, 27, 28]

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.from_source(source(kafka_broker, topic, set_group_id=group, set_bounded=latest,
                           set_starting_offsets=KafkaOffsetsInitializer.committed_offsets()),
                    WatermarkStrategy.no_watermarks(), "kafka").print()
    summary = run_to_end(cluster, env, "committed, NONE")
    assert JobStatus.from_proto(summary.status) is JobStatus.FAILED
    assert f"{topic}-2 have no committed offset and the offset reset strategy is NONE" in summary.failure.message


class WithTimestamp(ProcessFunction):
    def process_element(self, value, ctx):
        yield value, ctx.timestamp()


def test_records_carry_their_kafka_timestamps_when_the_strategy_assigns_none(cluster, kafka_broker) -> None:
    """Flink's KafkaSource emits each record with its Kafka timestamp; with no timestamp assigner
    in the WatermarkStrategy that is the record's event time downstream."""
    topic = new_topic(kafka_broker, 1)
    producer = ck.Producer({"bootstrap.servers": kafka_broker.bootstrap_servers, "batch.num.messages": 1})
    for i in range(5):
        producer.produce(topic, value=f"r{i}".encode(), partition=0, timestamp=1_700_000_000_000 + 1000 * i)
    assert producer.flush(30) == 0
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    stream = env.from_source(source(kafka_broker, topic, set_bounded=KafkaOffsetsInitializer.latest()),
                             WatermarkStrategy.for_monotonous_timestamps(), "kafka")
    with jobmanager_env(cluster.address):
        with stream.process(WithTimestamp()).execute_and_collect("kafka timestamps") as rows:
            got = list(rows)
    assert got == [(f"r{i}", 1_700_000_000_000 + 1000 * i) for i in range(5)]


def test_watermarks_are_per_partition_so_a_partition_behind_is_not_late(cluster, kafka_broker, tmp_path) -> None:
    """One subtask reads two partitions; partition 1's records (event time 100 s) are read first,
    partition 0's (event time 1 s) after them. Flink's KafkaSource generates watermarks per
    partition and emits their minimum, so partition 0's records are not late: both 10 s windows
    fire with all their records. A watermark per subtask would have passed 100 s and dropped them."""
    topic, out = new_topic(kafka_broker, 2), tmp_path / "out"
    producer = ck.Producer({"bootstrap.servers": kafka_broker.bootstrap_servers, "batch.num.messages": 1})

    def send(partition: int, first_ts: int, n: int) -> None:
        for i in range(n):
            producer.produce(topic, value=f"p{partition}".encode(), partition=partition, timestamp=first_ts + i)
        assert producer.flush(30) == 0

    stop = KafkaOffsetsInitializer.offsets({KafkaTopicPartition(topic, 0): 5, KafkaTopicPartition(topic, 1): 10})
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.enable_checkpointing(100)
    env.get_config().set_auto_watermark_interval(50)
    (env.from_source(source(kafka_broker, topic, set_bounded=stop), WatermarkStrategy.for_monotonous_timestamps(), "kafka")
        .map(lambda v: (v, 1))
        .key_by(lambda t: 0)
        .window(TumblingEventTimeWindows.of(Time.seconds(10)))
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .map(lambda t: f"{t[0]},{t[1]}")
        .sink_to(FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build()))
    with ClusterClient(cluster.address) as client:
        job_id = client.submit(env.get_job_graph("per-partition watermarks").proto)
        poll_for(lambda: client.status(job_id).checkpoints.num_completed >= 1, 60, what="the job running")
        send(1, 100_000, 5)
        poll_for(lambda: client.status(job_id).vertices[0].records_out >= 5, 60, what="partition 1's records read")
        time.sleep(0.3)  # periodic watermarks (every 50 ms) have had their chance to pass 100 s
        send(0, 1_000, 5)
        send(1, 100_005, 5)
        summary = poll_for(lambda: ended(client, job_id), 60, interval=0.2, what="the job to end")
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
    assert sorted(visible_lines(out)) == ["p0,5", "p1,10"]


def test_the_deprecated_flink_kafka_consumer_reads_through_add_source(cluster, kafka_broker) -> None:
    topic = new_topic(kafka_broker, 2)
    produce(kafka_broker, topic, spread(list(range(20)), 2))
    with pytest.warns(DeprecationWarning):
        consumer = FlinkKafkaConsumer(topic, SimpleStringSchema(), {"bootstrap.servers": kafka_broker.bootstrap_servers,
                                                                    "group.id": f"g-{uuid.uuid4().hex[:6]}"})
    consumer.set_start_from_earliest()
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    with jobmanager_env(cluster.address):
        with env.add_source(consumer).execute_and_collect("flink kafka consumer") as rows:
            got = list(itertools.islice(rows, 20))  # unbounded: take what was produced, then close (cancels)
    assert sorted(int(v) for v in got) == list(range(20))


def test_a_topic_pattern_picks_up_topics_created_later_at_the_discovery_interval(cluster, kafka_broker) -> None:
    """``set_topic_pattern`` with ``partition.discovery.interval.ms``: a matching topic created while
    the job runs is discovered and read from its earliest offset (Flink's rule for new partitions);
    a topic that does not match is not read."""
    prefix = f"pat-{uuid.uuid4().hex[:6]}"
    first = f"{prefix}-a"
    kafka_broker.create_topic(first, 2)
    produce(kafka_broker, first, spread(list(range(10)), 2))
    builder = (KafkaSource.builder().set_bootstrap_servers(kafka_broker.bootstrap_servers)
               .set_topic_pattern(prefix + "-[a-z]").set_value_only_deserializer(SimpleStringSchema())
               .set_property("partition.discovery.interval.ms", "300"))
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    stream = env.from_source(builder.build(), WatermarkStrategy.no_watermarks(), "kafka")
    with jobmanager_env(cluster.address):
        with stream.execute_and_collect("topic pattern") as rows:
            got = list(itertools.islice(rows, 10))
            # The topic that does not match gets its records first: a wrong match would show them.
            for name, values in ((f"{prefix}-bb", range(200, 206)), (f"{prefix}-b", range(100, 106))):
                kafka_broker.create_topic(name, 3)
                produce(kafka_broker, name, spread(list(values), 3))
            got += list(itertools.islice(rows, 6))
    assert sorted(int(v) for v in got) == list(range(10)) + list(range(100, 106))


class FailOnNewRecords(MapFunction):
    """Raises once (the subtask that removes ``marker``) on the first value from ``first`` on."""

    def __init__(self, marker: str, first: int) -> None:
        self.marker, self.first = marker, first

    def map(self, value):
        if value >= self.first and os.path.exists(self.marker):
            try:
                os.unlink(self.marker)
            except FileNotFoundError:
                return value
            raise RuntimeError(f"injected failure on {value}")
        return value


def checkpoint_now(client: ClusterClient, job_id: bytes) -> int:
    """A checkpoint by hand, once every task runs (after a restart: once they run again)."""
    def attempt() -> int | None:
        try:
            return client.checkpoint(job_id, timeout_s=60)
        except Exception as exc:  # the tasks are not all running yet
            if "not all running" not in str(exc) and "could not start" not in str(exc):
                raise
            return None
    return poll_for(attempt, 120, interval=0.3, what="a checkpoint by hand")


def test_partitions_discovered_while_the_job_runs_are_read_once_across_a_failover(
        cluster, kafka_broker, tmp_path) -> None:
    """The enumerator discovers the partitions of a topic created while an unbounded job runs
    (its pattern matches it; tansu cannot add partitions to a topic, so new partitions come as a
    new topic) and assigns each to one reader. The only checkpoints are taken by hand: the last one
    before the failure has not seen the new splits, and the first record of the new partitions
    fails a task. The readers restart from that checkpoint, the enumerator gives the new splits
    back to them (Flink's addSplitsBack), and the exactly-once FileSink holds every count once."""
    prefix = f"grow-{uuid.uuid4().hex[:6]}"
    out, fail = tmp_path / "out", tmp_path / "fail"
    kafka_broker.create_topic(f"{prefix}-a", 2)
    produce(kafka_broker, f"{prefix}-a", spread(list(range(600)), 2))
    kafka = (KafkaSource.builder().set_bootstrap_servers(kafka_broker.bootstrap_servers)
             .set_topic_pattern(prefix + "-[a-z]").set_value_only_deserializer(SimpleStringSchema())
             .set_property("partition.discovery.interval.ms", "300").build())
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(3_600_000)  # periodic ones practically never: this test takes them
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 100))
    counting_job(env, kafka, out, FailOnNewRecords(str(fail), 600))
    count = 1200
    with ClusterClient(cluster.address) as client:
        job_id = client.submit(env.get_job_graph("partitions discovered").proto)
        try:
            poll_for(lambda: sum(v.records_out for v in client.status(job_id).vertices[:1]) >= 600, 120,
                     interval=0.2, what="the first topic read")
            checkpoint_now(client, job_id)
            fail.touch()
            kafka_broker.create_topic(f"{prefix}-b", 3)
            produce(kafka_broker, f"{prefix}-b", spread(list(range(600, count)), 3))
            poll_for(lambda: client.status(job_id).num_restarts >= 1, 120, interval=0.1, what="the restart")
            expected = sum(len(range(k, count, KEYS)) for k in range(KEYS))
            poll_for(lambda: checkpoint_now(client, job_id) and len(visible_lines(out)) >= expected, 120, interval=0.5,
                     what="every record's count committed")
            checkpoint_now(client, job_id)  # a partition read twice would commit more lines now
            summary = client.status(job_id)
        finally:
            client.cancel(job_id)
    assert summary.num_restarts == 1 and not fail.exists()
    assert summary.checkpoints.latest_restored_id >= 1
    assert_exactly_once(out, count)


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_a_bounded_read_of_a_transactionally_written_topic_ends_at_the_commit_marker(
        cluster, kafka_broker, isolation) -> None:
    """A transaction's commit marker takes an offset of its own: ``latest()`` is past it, no record
    is there, and the bounded source still ends (the consumer's position passes the marker)."""
    topic = new_topic(kafka_broker, 1)
    producer = ck.Producer({"bootstrap.servers": kafka_broker.bootstrap_servers,
                            "transactional.id": f"tx-{uuid.uuid4().hex[:6]}", "batch.num.messages": 1})
    producer.init_transactions(10)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=str(i).encode(), partition=0)
    producer.commit_transaction(10)
    rows = collect(cluster, source(kafka_broker, topic, set_bounded=KafkaOffsetsInitializer.latest(),
                                   set_property=("isolation.level", isolation)), 1, f"transactional {isolation}")
    assert sorted(int(v) for v, _ in rows) == [0, 1, 2]


# -- checkpoints and failover ----------------------------------------------------------------------


def counting_job(env: StreamExecutionEnvironment, kafka_source: Any, out: Path, *functions: MapFunction) -> None:
    stream = env.from_source(kafka_source, WatermarkStrategy.no_watermarks(), "kafka").map(lambda s: int(s))
    for function in functions:
        stream = stream.map(function)
    (stream.map(lambda i: (i % KEYS, 1))
        .key_by(lambda t: t[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .map(lambda t: f"{t[0]},{t[1]}")
        .sink_to(FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build()))


def test_a_task_failure_resumes_from_the_checkpointed_offsets_exactly_once_and_offsets_are_committed(
        cluster, kafka_broker, tmp_path) -> None:
    """An unbounded source with checkpoints while records keep coming: a task fails after two
    checkpoints, the job restarts from the last one (the readers at its offsets, the keyed counts
    restored), and the exactly-once FileSink holds every record's count once. The group's
    committed offsets reach the partitions' ends once a checkpoint after the last record completed."""
    topic, group = new_topic(kafka_broker, 3), f"g-{uuid.uuid4().hex[:6]}"
    out, fail = tmp_path / "out", tmp_path / "fail"
    count = 1800
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(200)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 100))
    counting_job(env, source(kafka_broker, topic, set_group_id=group), out, FailWhenMarked(str(fail)))
    with ClusterClient(cluster.address) as client:
        job_id = client.submit(env.get_job_graph("kafka failover").proto)
        try:
            poll_for(lambda: client.status(job_id).checkpoints.num_completed >= 1, 120, what="a first checkpoint")
            producer = trickle(kafka_broker, topic, spread(list(range(count)), 3), per_s=200)
            done = client.status(job_id).checkpoints.num_completed
            poll_for(lambda: client.status(job_id).checkpoints.num_completed >= done + 2 and
                     client.status(job_id).vertices[0].records_out > 0, 60, what="two checkpoints with records")
            fail.touch()
            poll_for(lambda: client.status(job_id).num_restarts >= 1, 120, interval=0.1, what="the restart")
            producer.join(60)
            expected = sum(len(range(k, count, KEYS)) for k in range(KEYS))
            poll_for(lambda: len(visible_lines(out)) >= expected, 120, interval=0.2,
                     what="every record's count committed")
            ends = {p: count // 3 for p in range(3)}
            poll_for(lambda: committed(kafka_broker, group, topic, 3) == ends, 60, interval=0.3,
                     what="the group's committed offsets at the partitions' ends")
            summary = client.status(job_id)
        finally:
            client.cancel(job_id)
    assert summary.num_restarts == 1 and not fail.exists()
    assert summary.checkpoints.latest_restored_id >= 2  # resumed from a checkpoint, not from the start
    assert_exactly_once(out, count)


def test_a_savepoint_at_parallelism_2_resumes_at_3_then_at_2_with_every_record_once(
        cluster, kafka_broker, tmp_path) -> None:
    """Savepoints taken at parallelism 2, then 3, each resumed at the other: the checkpointed
    partitions go to the new subtasks by split id (a partition read by exactly one of them), the
    keyed counts with their key groups, and every record is counted once across the three runs."""
    topic = new_topic(kafka_broker, 5)
    out, savepoints = tmp_path / "out", tmp_path / "savepoints"
    batches = [range(0, 500), range(500, 1000), range(1000, 1500)]
    count = 1500

    def job(parallelism: int, savepoint: str | None) -> Any:
        conf = Configuration()
        if savepoint:
            conf.set_string("execution.savepoint.path", savepoint)
        env = StreamExecutionEnvironment.get_execution_environment(conf)
        env.set_parallelism(parallelism)
        env.enable_checkpointing(200)
        counting_job(env, source(kafka_broker, topic), out)
        return env.get_job_graph(f"kafka at parallelism {parallelism}").proto

    def counted(n: int) -> int:
        return sum(len(range(k, n, KEYS)) for k in range(KEYS))

    savepoint = None
    with ClusterClient(cluster.address) as client:
        for parallelism, batch in zip((2, 3, 2), batches):
            job_id = client.submit(job(parallelism, savepoint))
            try:
                produce(kafka_broker, topic, spread(list(batch), 5))
                poll_for(lambda: len(visible_lines(out)) >= counted(batch.stop), 120, interval=0.2,
                         what=f"the counts of records up to {batch.stop} committed at parallelism {parallelism}")
                savepoint = client.savepoint(job_id, str(savepoints), stop=True)
                poll_for(lambda: ended(client, job_id), 60, what="the stopped job to end")
            finally:
                if not ended(client, job_id):
                    client.cancel(job_id)
    assert_exactly_once(out, count)


# -- bad input ------------------------------------------------------------------------------------


def failed_job(cluster: Any, kafka_source: Any, name: str) -> str:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.from_source(kafka_source, WatermarkStrategy.no_watermarks(), "kafka").print()
    summary = run_to_end(cluster, env, name)
    assert JobStatus.from_proto(summary.status) is JobStatus.FAILED
    return summary.failure.message


def test_an_unreachable_broker_fails_the_start_naming_its_address(cluster) -> None:
    from .spark_standalone import free_port
    address = f"127.0.0.1:{free_port('127.0.0.1')}"  # nothing listens there
    bad = (KafkaSource.builder().set_bootstrap_servers(address).set_topics("t")
           .set_value_only_deserializer(SimpleStringSchema()).set_property("default.api.timeout.ms", "2000").build())
    message = failed_job(cluster, bad, "unreachable broker")
    assert f"Kafka brokers {address} unreachable" in message


def test_a_property_the_kafka_client_does_not_know_fails_naming_it(cluster, kafka_broker) -> None:
    bad = source(kafka_broker, "t", set_property=("no.such.property", "1"))
    message = failed_job(cluster, bad, "unknown property")
    assert 'No such configuration property: "no.such.property"' in message


def test_an_unknown_topic_is_an_error_naming_it(cluster, kafka_broker) -> None:
    message = failed_job(cluster, source(kafka_broker, "no-such-topic", set_bounded=KafkaOffsetsInitializer.latest()),
                         "unknown topic")
    assert "Kafka topic 'no-such-topic' does not exist" in message


def test_an_undecodable_record_fails_the_job_naming_topic_partition_and_offset(cluster, kafka_broker) -> None:
    topic = new_topic(kafka_broker, 1)
    produce(kafka_broker, topic, [(0, b'{"id": 1}'), (0, b'{"id": 2}'), (0, b"not json")])
    schema = JsonRowDeserializationSchema.builder().type_info(Types.ROW_NAMED(["id"], [Types.INT()])).build()
    message = failed_job(cluster, source(kafka_broker, topic, deserializer=schema,
                                         set_bounded=KafkaOffsetsInitializer.latest()), "bad record")
    assert f"Cannot deserialize the record of Kafka topic {topic} partition 0 at offset 2" in message
