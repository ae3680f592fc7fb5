"""KafkaSink on a real cluster writing to a real Kafka-protocol broker (tansu), read back with
confluent-kafka consumers, as PyFlink documents the sink:

* NONE and AT_LEAST_ONCE deliver every record of a bounded job;
* EXACTLY_ONCE: a read_committed consumer sees nothing of a checkpoint before it completes, the
  records of each completed checkpoint once it has, and every record exactly once after the job,
  also when a task failed mid-job and the job resumed from its last checkpoint;
* a key serialization schema makes each record's key, a topic selector routes each record, a
  record's event timestamp becomes the Kafka record's; RowFieldExtractorSchema takes key and
  value from a Row's bytes fields (PyFlink 2.3's example);
* an unreachable broker fails the job naming the address within max.block.ms; a record the
  broker refuses fails it naming the topic.

One MiniCluster and one broker for the module; each test writes to its own topics.
"""
from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.common import Configuration, Row, Types, WatermarkStrategy
from millstream.common.restart_strategy import RestartStrategies
from millstream.common.serialization import RowFieldExtractorSchema, SerializationSchema, SimpleStringSchema
from millstream.common.watermark_strategy import TimestampAssigner
from millstream.datastream import MapFunction, StreamExecutionEnvironment
from millstream.datastream.connectors.datagen import DataGeneratorSource
from millstream.datastream.connectors.kafka import DeliveryGuarantee, KafkaRecordSerializationSchema, KafkaSink
from millstream.runtime.execution_state import JobStatus

from .harness import ClusterSpec, poll_for
from .jobs import FailWhenMarked, Throttle, ended
from .kafka import KafkaBroker, kafka_broker  # noqa: F401  (the module-scoped fixture)
from .spark_standalone import free_port

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed (`make install`)")

pytestmark = pytest.mark.timeout(300)
CLUSTER = ClusterSpec(checkpoints=True)  # one TaskManager, two slots


# -- reading back ------------------------------------------------------------------------------

def new_topic(broker: KafkaBroker, partitions: int = 2) -> str:
    name = f"sink-{uuid.uuid4().hex[:10]}"
    broker.create_topic(name, partitions)
    return name


def read_topic(broker: KafkaBroker, topic: str, until: Callable[[list[Any]], bool], timeout_s: float = 30.0,
               committed_only: bool = True, linger_s: float = 1.0) -> list[Any]:
    """Every message of ``topic`` from its start, until ``until(messages)`` holds (then ``linger_s``
    more, so a duplicate after the expected ones shows) or ``timeout_s`` passes."""
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": f"r-{uuid.uuid4().hex[:8]}",
                            "enable.auto.commit": False,
                            "isolation.level": "read_committed" if committed_only else "read_uncommitted"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([ck.TopicPartition(topic, p, 0) for p in partitions])
        got: list[Any] = []
        deadline = time.monotonic() + timeout_s
        stop_at = None
        while time.monotonic() < (stop_at or deadline):
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                got.append(msg)
            if stop_at is None and until(got):
                stop_at = time.monotonic() + linger_s
        return got
    finally:
        consumer.close()


def values(messages: list[Any]) -> list[str]:
    return [m.value().decode() for m in messages]


def assert_each_once(messages: list[Any], expected: list[str], context: str = "") -> None:
    got = values(messages)
    duplicated = sorted({v for v in got if got.count(v) > 1}) if len(got) != len(set(got)) else []
    assert not duplicated, f"{len(duplicated)} records written twice, e.g. {duplicated[:5]}{context}"
    missing = sorted(set(expected) - set(got))
    assert not missing, f"{len(missing)} records missing, e.g. {missing[:5]}{context}"
    assert sorted(got) == sorted(expected)


def string_sink(broker: KafkaBroker, topic: str, guarantee: DeliveryGuarantee, prefix: str | None = None,
                bootstrap: str | None = None, **properties: str) -> KafkaSink:
    builder = (KafkaSink.builder()
               .set_bootstrap_servers(bootstrap or broker.bootstrap_servers)
               .set_record_serializer(KafkaRecordSerializationSchema.builder().set_topic(topic)
                                      .set_value_serialization_schema(SimpleStringSchema()).build())
               .set_delivery_guarantee(guarantee))
    if prefix is not None:
        builder.set_transactional_id_prefix(prefix)
    for key, value in properties.items():
        builder.set_property(key.replace("_", "."), value)
    return builder.build()


def run(cluster: Any, env: StreamExecutionEnvironment, name: str, timeout: float = 180) -> Any:
    with ClusterClient(cluster.address) as client:
        job_id = client.submit(env.get_job_graph(name).proto)
        return poll_for(lambda: ended(client, job_id), timeout, interval=0.2, what=f"job {name!r} to end")


def finished(summary: Any, context: str = "") -> None:
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message + context


def run_report(cluster: Any, client: ClusterClient, job_id: bytes) -> str:
    """One line per job for a failure message: its status, restarts, checkpoints and the root
    cause of each failed attempt (the JobManager's exception history, what Flink's REST API shows
    at /jobs/:jobid/exceptions), each cut to its first line and the traceback's last line."""
    summary = client.status(job_id)
    cp = summary.checkpoints
    checkpoints = ", ".join(f"{h.id}{'s' if h.is_savepoint else ''} {h.status}" for h in reversed(cp.history))
    line = (f"{summary.job_name} ({job_id.hex()[:8]}): {JobStatus.from_proto(summary.status).name}, "
            f"{summary.num_restarts} restarts, restored checkpoint {cp.latest_restored_id}, checkpoints {checkpoints}")
    try:
        exceptions = cluster.job_manager.dispatcher.record(job_id).exception_history()
    except Exception as e:  # noqa: BLE001 - a diagnostic: say why there is none
        return f"{line}; no exception history ({e})"
    for entry in exceptions:
        failure = entry.failure
        message = (failure.message.strip().splitlines() or [""])[0]
        last = (failure.traceback.strip().splitlines() or [""])[-1]
        line += f"\n    {failure.task_name or 'job'}: {message[:300]}" + (f" | {last[:300]}" if last != message else "")
    return line


# -- NONE and AT_LEAST_ONCE ----------------------------------------------------------------------

@pytest.mark.parametrize("guarantee", [DeliveryGuarantee.NONE, DeliveryGuarantee.AT_LEAST_ONCE])
def test_a_bounded_job_delivers_every_record(cluster, kafka_broker, guarantee) -> None:
    topic = new_topic(kafka_broker)
    expected = [f"r{i}" for i in range(2000)]
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    if guarantee is DeliveryGuarantee.AT_LEAST_ONCE:
        env.enable_checkpointing(200)  # the snapshot flushes at every barrier
    env.from_collection(expected).sink_to(string_sink(kafka_broker, topic, guarantee))
    finished(run(cluster, env, f"kafka {guarantee.name}"))
    assert_each_once(read_topic(kafka_broker, topic, lambda got: len(got) >= len(expected), committed_only=False),
                     expected)


# -- EXACTLY_ONCE --------------------------------------------------------------------------------

class Seen(MapFunction):
    """Writes ``<marker>-<subtask>`` once it has passed ``after`` records on."""

    def __init__(self, marker: str, after: int) -> None:
        self.marker, self.after = marker, after

    def open(self, runtime_context) -> None:
        self.path = Path(f"{self.marker}-{runtime_context.get_index_of_this_subtask()}")
        self.seen = 0

    def map(self, value):
        self.seen += 1
        if self.seen == self.after:
            self.path.write_text("")
        return value


def test_exactly_once_shows_a_checkpoints_records_only_once_it_completed_and_every_record_once(
        cluster, kafka_broker, tmp_path) -> None:
    topic = new_topic(kafka_broker)
    count = 6000  # 15 s per subtask while throttled: the source is mid-way at the first checkpoint
    slow, seen = tmp_path / "slow", tmp_path / "seen"
    slow.touch()
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    # The first checkpoint comes after a random delay in [min pause, interval]: at least 6 s, long
    # enough to look at Kafka while records reached the sink and no checkpoint completed yet.
    env.enable_checkpointing(8000)
    env.get_checkpoint_config().set_min_pause_between_checkpoints(6000)
    (env.from_source(DataGeneratorSource(lambda i: f"r{i}", count), WatermarkStrategy.no_watermarks(), "records")
        .map(Throttle(str(slow), 0.005))
        .map(Seen(str(seen), 20))
        .sink_to(string_sink(kafka_broker, topic, DeliveryGuarantee.EXACTLY_ONCE, prefix=f"eo-{topic}")))
    with ClusterClient(cluster.address) as client:
        job_id = client.submit(env.get_job_graph("kafka exactly once").proto)
        poll_for(lambda: all(Path(f"{seen}-{i}").exists() for i in (0, 1)), 120, what="records reaching the sink")
        assert client.status(job_id).checkpoints.num_completed == 0, "looked too late"
        before = read_topic(kafka_broker, topic, lambda got: False, timeout_s=1.0)
        checkpoints = client.status(job_id).checkpoints.num_completed
        assert checkpoints == 0, "the first checkpoint completed before the test looked: nothing shown"
        assert before == [], f"{len(before)} records visible before any checkpoint completed"
        poll_for(lambda: client.status(job_id).checkpoints.num_completed >= 1, 120, what="the first checkpoint")
        mid = read_topic(kafka_broker, topic, lambda got: len(got) > 0, timeout_s=15, linger_s=0.5)
        assert client.status(job_id).checkpoints.num_completed == 1, "looked too late: a second checkpoint completed"
        slow.unlink()
        summary = poll_for(lambda: ended(client, job_id), 180, interval=0.2, what="the job to end")
    finished(summary)
    assert 0 < len(mid) < count, f"{len(mid)} records visible after the first checkpoint: expected a part"
    expected = [f"r{i}" for i in range(count)]
    assert_each_once(read_topic(kafka_broker, topic, lambda got: len(got) >= count), expected)


def test_exactly_once_after_a_task_failure_mid_job(cluster, kafka_broker, tmp_path) -> None:
    topic = new_topic(kafka_broker)
    count = 12000  # 12 s per subtask while throttled: the failure comes mid-job
    slow, fail = tmp_path / "slow", tmp_path / "fail"
    slow.touch()
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(300)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 100))
    (env.from_source(DataGeneratorSource(lambda i: f"r{i}", count), WatermarkStrategy.no_watermarks(), "records")
        .map(Throttle(str(slow), 0.002))
        .map(FailWhenMarked(str(fail)))
        .sink_to(string_sink(kafka_broker, topic, DeliveryGuarantee.EXACTLY_ONCE, prefix=f"eo-{topic}")))
    with ClusterClient(cluster.address) as client:
        job_id = client.submit(env.get_job_graph("kafka exactly once failover").proto)
        poll_for(lambda: client.status(job_id).checkpoints.num_completed >= 2, 120, what="two completed checkpoints")
        committed_before = len(read_topic(kafka_broker, topic, lambda got: len(got) > 0, timeout_s=15, linger_s=0))
        fail.touch()
        poll_for(lambda: client.status(job_id).num_restarts >= 1, 120, interval=0.1, what="the restart")
        slow.unlink()
        summary = poll_for(lambda: ended(client, job_id), 180, interval=0.2, what="the job to end")
    finished(summary)
    assert not fail.exists() and summary.num_restarts == 1
    assert summary.checkpoints.latest_restored_id >= 2  # resumed from a checkpoint: records after it replayed
    assert 0 < committed_before < count, committed_before
    assert_each_once(read_topic(kafka_broker, topic, lambda got: len(got) >= count), [f"r{i}" for i in range(count)])


def test_exactly_once_across_savepoints_resumed_at_parallelism_2_then_1_then_2(cluster, kafka_broker, tmp_path) -> None:
    """Stop-with-savepoint and resume at another parallelism: each new subtask gets old subtasks'
    pending batches (round-robin) with the transactional id and marker group (of the old job) they
    were written for, commits the ones not committed yet, and every record is in Kafka once.

    Failed once in 3 CI runs (the whole suite on 2 loaded cores): 6,144 records committed, 10,428
    written; every record of the last run invisible to read_committed and one split's tail written
    twice. That is the mark of a transaction left open by an attempt of the last run that failed
    (or was cancelled) mid-commit, whose restore wrote the batch again: Kafka aborts such a
    transaction when the restore initializes the transactional id; tansu never does
    (test_kafka_broker.py's xfail tests), so it hides everything after it for good. Why that run
    failed over is not known: not reproduced in 34 runs here (25 of them pinned to one core beside a
    busy loop), none of which restarted. A commit that timed out under load did fail over then (now
    resumed instead: test_kafka_sink_recovery.py). A failure now names each run's restarts, their
    root causes and checkpoints. In about half of those runs the parallelism-1 run had read its
    input to the end before its stop, so the last run had nothing to write (no checkpoint)."""
    topic = new_topic(kafka_broker)
    count = 9000
    slow, savepoints = tmp_path / "slow", tmp_path / "savepoints"
    slow.touch()

    def job(parallelism: int, savepoint: str | None) -> Any:
        conf = Configuration()
        if savepoint:
            conf.set_string("execution.savepoint.path", savepoint)
        env = StreamExecutionEnvironment.get_execution_environment(conf)
        env.set_parallelism(parallelism)
        env.enable_checkpointing(300)
        (env.from_source(DataGeneratorSource(lambda i: f"r{i}", count), WatermarkStrategy.no_watermarks(), "records")
            .map(Throttle(str(slow), 0.002)).uid("throttle")
            .sink_to(string_sink(kafka_broker, topic, DeliveryGuarantee.EXACTLY_ONCE, prefix=f"eo-{topic}")).uid("kafka"))
        return env.get_job_graph(f"kafka at parallelism {parallelism}").proto

    savepoint = None
    seen = 0
    runs: list[bytes] = []
    with ClusterClient(cluster.address) as client:
        for parallelism in (2, 1):
            job_id = client.submit(job(parallelism, savepoint))
            runs.append(job_id)
            before = seen
            poll_for(lambda: client.status(job_id).checkpoints.num_completed >= 1, 120, what="a completed checkpoint")
            seen = len(read_topic(kafka_broker, topic, lambda got: len(got) > before, timeout_s=30, linger_s=0))
            savepoint = client.savepoint(job_id, str(savepoints), stop=True)
            poll_for(lambda: ended(client, job_id), 60, what="the stopped job to end")
        assert 0 < seen < count, seen
        slow.unlink()
        last = client.submit(job(2, savepoint))
        runs.append(last)
        summary = poll_for(lambda: ended(client, last), 180, interval=0.2, what="the last run to end")
        context = "\nthe three runs:\n" + "\n".join(run_report(cluster, client, job_id) for job_id in runs)
    finished(summary, context)
    got = read_topic(kafka_broker, topic, lambda got: len(got) >= count)
    if len(got) < count:  # seen under load (2,856 missing, each split's tail): say whether they were written
        written = read_topic(kafka_broker, topic, lambda got: len(got) >= count, committed_only=False)
        context = f"\n{len(got)} records committed, {len(written)} written (read uncommitted){context}"
    assert_each_once(got, [f"r{i}" for i in range(count)], context)


# -- keys, topic selection, RowFieldExtractorSchema ----------------------------------------------

class KeyOf(SerializationSchema):
    def serialize(self, element) -> bytes:
        return element.split(":")[0].encode()


def test_keys_come_from_the_key_schema_and_a_topic_selector_routes_each_record(cluster, kafka_broker) -> None:
    topic_a, topic_b = new_topic(kafka_broker, 3), new_topic(kafka_broker, 3)
    records = [f"{'ab'[i % 2]}{i % 5}:{i}" for i in range(300)]  # keys a0..b4, topic by the first letter
    serializer = (KafkaRecordSerializationSchema.builder()
                  .set_topic_selector(lambda r: topic_a if r.startswith("a") else topic_b)
                  .set_key_serialization_schema(KeyOf())
                  .set_value_serialization_schema(SimpleStringSchema()).build())
    sink = (KafkaSink.builder().set_bootstrap_servers(kafka_broker.bootstrap_servers).set_record_serializer(serializer)
            .set_delivery_guarantee(DeliveryGuarantee.AT_LEAST_ONCE).build())
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.from_collection(records).sink_to(sink)
    finished(run(cluster, env, "kafka keys and topics"))
    in_a = read_topic(kafka_broker, topic_a, lambda got: len(got) >= 150, committed_only=False)
    in_b = read_topic(kafka_broker, topic_b, lambda got: len(got) >= 150, committed_only=False)
    assert_each_once(in_a, [r for r in records if r.startswith("a")])
    assert_each_once(in_b, [r for r in records if r.startswith("b")])
    for message in in_a + in_b:
        assert message.key() == message.value().split(b":")[0]
    partitions: dict[bytes, set[int]] = {}
    for message in in_a + in_b:
        partitions.setdefault(message.key(), set()).add(message.partition())
    assert all(len(p) == 1 for p in partitions.values()), partitions  # one key, one partition


def test_row_field_extractor_schema_writes_a_rows_bytes_fields_as_key_and_value(cluster, kafka_broker) -> None:
    topic = new_topic(kafka_broker, 1)
    rows = [Row(f"user-{i % 3}".encode(), f'{{"n": {i}}}'.encode()) for i in range(30)]
    row_type = Types.ROW([Types.PRIMITIVE_ARRAY(Types.BYTE()), Types.PRIMITIVE_ARRAY(Types.BYTE())])
    serializer = (KafkaRecordSerializationSchema.builder().set_topic(topic)
                  .set_key_serialization_schema(RowFieldExtractorSchema(0))
                  .set_value_serialization_schema(RowFieldExtractorSchema(1)).build())
    sink = (KafkaSink.builder().set_bootstrap_servers(kafka_broker.bootstrap_servers).set_record_serializer(serializer)
            .set_delivery_guarantee(DeliveryGuarantee.AT_LEAST_ONCE).build())
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.from_collection(rows, type_info=row_type).sink_to(sink)
    finished(run(cluster, env, "kafka row field extractor"))
    got = read_topic(kafka_broker, topic, lambda got: len(got) >= len(rows), committed_only=False)
    assert sorted((m.key(), m.value()) for m in got) == sorted((r[0], r[1]) for r in rows)


class EventTime(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return EPOCH_MS + int(value[1:])


EPOCH_MS = 1_700_000_000_000


def test_a_records_event_timestamp_becomes_the_kafka_records_timestamp(cluster, kafka_broker) -> None:
    topic = new_topic(kafka_broker, 1)
    records = [f"r{i}" for i in range(50)]
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.enable_checkpointing(200)
    (env.from_collection(records)
        .assign_timestamps_and_watermarks(WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(EventTime()))
        .sink_to(string_sink(kafka_broker, topic, DeliveryGuarantee.EXACTLY_ONCE, prefix=f"eo-{topic}")))
    finished(run(cluster, env, "kafka timestamps"))
    got = read_topic(kafka_broker, topic, lambda got: len(got) >= len(records))
    assert sorted((m.value().decode(), m.timestamp()) for m in got) == sorted(
        (r, (ck.TIMESTAMP_CREATE_TIME, EPOCH_MS + int(r[1:]))) for r in records)


# -- bad input -----------------------------------------------------------------------------------

def test_an_unreachable_broker_fails_the_job_naming_its_address_within_max_block_ms(cluster, kafka_broker) -> None:
    address = f"127.0.0.1:{free_port('127.0.0.1')}"  # nothing listens there
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.set_restart_strategy(RestartStrategies.no_restart())
    env.from_collection(["a", "b"]).sink_to(
        string_sink(kafka_broker, "t", DeliveryGuarantee.AT_LEAST_ONCE, bootstrap=address, max_block_ms="3000"))
    started = time.monotonic()
    summary = run(cluster, env, "kafka unreachable", timeout=90)
    assert JobStatus.from_proto(summary.status) is JobStatus.FAILED
    assert address in summary.failure.message and "max.block.ms" in summary.failure.message, summary.failure.message
    assert time.monotonic() - started < 60


def test_a_delivery_error_fails_the_job_naming_the_topic(cluster, kafka_broker) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.set_restart_strategy(RestartStrategies.no_restart())
    env.enable_checkpointing(200)
    env.from_collection(["a", "b"]).sink_to(string_sink(kafka_broker, "bad/topic", DeliveryGuarantee.AT_LEAST_ONCE))
    summary = run(cluster, env, "kafka delivery error", timeout=90)
    assert JobStatus.from_proto(summary.status) is JobStatus.FAILED
    assert "'bad/topic'" in summary.failure.message and "Invalid topic" in summary.failure.message, summary.failure.message
