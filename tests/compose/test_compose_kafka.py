"""The Kafka-protocol broker of the compose cluster (docker-compose.kafka.yml, issue 25): tansu in
its own container, healthy before the JobManager and TaskManagers start. From the host (through the
published port) a topic is created and records produced; inside a TaskManager's container, a
client that knows only the service name `kafka:9092` reads exactly those records and answers in a
transaction, which the host reads committed. Each side sees the broker at its own address in the
metadata: the compose network's name inside, localhost and the published port on the host.
"""
from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from .cluster import BASE_IMAGE, ComposeProject, free_port, kafka_broker_wheel, run
from .test_compose import FAST_HEARTBEATS

pytestmark = pytest.mark.timeout(600)

KAFKA_IMAGE = "millstream-kafka:compose-test"
RECORDS = 40

# Run by `python -c` inside a container: the metadata as the compose network sees it, then (given a
# topic) every record of its partitions read committed, answered by one transaction of their
# values, upper-cased, to `<topic>-answers`. Prints one JSON line.
IN_CONTAINER = r'''
import json, sys, time
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
servers, topic, expected = sys.argv[1], sys.argv[2], int(sys.argv[3])
metadata = AdminClient({"bootstrap.servers": servers}).list_topics(timeout=20)
out = {"brokers": sorted(f"{b.host}:{b.port}" for b in metadata.brokers.values())}
if topic:
    partitions = sorted(metadata.topics[topic].partitions)
    consumer = Consumer({"bootstrap.servers": servers, "group.id": "in-container", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    values, deadline = [], time.monotonic() + 30
    while len(values) < expected and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value().decode())
    consumer.close()
    producer = Producer({"bootstrap.servers": servers, "transactional.id": "in-container", "linger.ms": 0})
    producer.init_transactions(20)
    producer.begin_transaction()
    for value in values:
        producer.produce(topic + "-answers", value=value.upper().encode(), partition=0)
        producer.flush(10)
    producer.commit_transaction(20)
    out["read"] = values
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def kafka_cluster(image: str, tmp_path_factory: pytest.TempPathFactory,
                  request: pytest.FixtureRequest) -> Iterator[ComposeProject]:
    data = tmp_path_factory.mktemp("compose-kafka-data")
    data.chmod(0o777)  # the containers run as root
    kafka_broker_wheel()
    project = ComposeProject(["docker-compose.yml", "docker-compose.kafka.yml"], data,
                             {**FAST_HEARTBEATS, "KAFKA_PORT": str(free_port()), "KAFKA_IMAGE": KAFKA_IMAGE,
                              "BASE_IMAGE": BASE_IMAGE, "PIP_NO_INDEX": "1"})
    # one TaskManager is enough to show the compose network's side (and spares the CI machine one)
    yield from project.session(request, [("kafka", 1), ("jobmanager", 1), ("taskmanager", 1)], build=["kafka"],
                               up=["--scale", "taskmanager=1"])


def host_servers(project: ComposeProject) -> str:
    return f"localhost:{project.env['KAFKA_PORT']}"


def in_container(project: ComposeProject, service: str, topic: str = "", expected: int = 0) -> dict:
    container = project.containers(service)[0]
    done = run(["docker", "exec", container, "python", "-c", IN_CONTAINER, "kafka:9092", topic, str(expected)], timeout=120)
    return json.loads(done.stdout.strip().splitlines()[-1])


def started_at(container: str) -> datetime:
    stamp = run(["docker", "inspect", "--format", "{{.State.StartedAt}}", container]).stdout.strip()
    return datetime.fromisoformat(stamp[:26].rstrip("Z"))  # nanoseconds and the zone cut: microseconds, UTC


def test_the_broker_is_healthy_before_the_jobmanager_and_taskmanagers_start(kafka_cluster: ComposeProject) -> None:
    broker = kafka_cluster.containers("kafka")
    assert len(broker) == 1 and kafka_cluster.health(broker[0]) == "healthy"
    # Docker runs the first health check one interval (1 s) after the start; without depends_on on
    # the broker's health, compose starts the JobManager together with it
    broker_started = started_at(broker[0])
    for service in ("jobmanager", "taskmanager"):
        for container in kafka_cluster.containers(service):
            waited = (started_at(container) - broker_started).total_seconds()
            assert waited >= 0.9, f"{service} {container} started {waited:.2f} s after the broker"


def test_records_produced_on_the_host_are_read_by_name_on_the_compose_network_and_answered(
        kafka_cluster: ComposeProject) -> None:
    servers = host_servers(kafka_cluster)
    admin = AdminClient({"bootstrap.servers": servers})
    assert [f"{b.host}:{b.port}" for b in admin.list_topics(timeout=20).brokers.values()] == [servers]
    topic = "from-host"
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(timeout=20)
    admin.create_topics([NewTopic(f"{topic}-answers", num_partitions=1, replication_factor=1)])[f"{topic}-answers"].result(timeout=20)

    # one record per request: tansu's high watermark is wrong after a multi-record batch
    producer = Producer({"bootstrap.servers": servers, "linger.ms": 0})
    sent = [f"record-{i}" for i in range(RECORDS)]
    for i, value in enumerate(sent):
        producer.produce(topic, value=value.encode(), partition=i % 2)
        assert producer.flush(10) == 0

    # the JobManager (where a source's split enumerator runs) sees the same address
    assert in_container(kafka_cluster, "jobmanager")["brokers"] == ["kafka:9092"]
    seen = in_container(kafka_cluster, "taskmanager", topic, RECORDS)
    assert seen["brokers"] == ["kafka:9092"]
    assert sorted(seen["read"]) == sorted(sent)

    consumer = Consumer({"bootstrap.servers": servers, "group.id": "host", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(f"{topic}-answers", 0, 0)])
    answers: list[str] = []
    deadline = time.monotonic() + 30
    while len(answers) < RECORDS and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            answers.append(message.value().decode())
    consumer.close()
    assert sorted(answers) == sorted(value.upper() for value in sent)


# A job script submitted from the host with `millstream run`: its tasks run in the TaskManager's
# container, so the broker is `kafka:9092` there. Bounded at the offsets the host wrote (specific
# offsets: tansu's latest() is wrong after multi-record batches), exactly-once into Kafka.
JOB = r'''
import sys
from millstream.common import Types, WatermarkStrategy
from millstream.common.serialization import SimpleStringSchema
from millstream.datastream import StreamExecutionEnvironment
from millstream.datastream.connectors.base import DeliveryGuarantee
from millstream.datastream.connectors.kafka import (KafkaOffsetsInitializer, KafkaRecordSerializationSchema,
                                                    KafkaSink, KafkaSource, KafkaTopicPartition)

source_topic, sink_topic, per_partition = sys.argv[1], sys.argv[2], int(sys.argv[3])
env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
env.enable_checkpointing(500)
source = (KafkaSource.builder().set_bootstrap_servers("kafka:9092").set_topics(source_topic)
          .set_starting_offsets(KafkaOffsetsInitializer.earliest())
          .set_bounded(KafkaOffsetsInitializer.offsets({KafkaTopicPartition(source_topic, p): per_partition
                                                        for p in range(2)}))
          .set_value_only_deserializer(SimpleStringSchema()).build())
sink = (KafkaSink.builder().set_bootstrap_servers("kafka:9092")
        .set_record_serializer(KafkaRecordSerializationSchema.builder().set_topic(sink_topic)
                               .set_value_serialization_schema(SimpleStringSchema()).build())
        .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE).set_transactional_id_prefix("compose-job")
        .build())
env.from_source(source, WatermarkStrategy.no_watermarks(), "kafka").map(str.upper, output_type=Types.STRING()).sink_to(sink)
env.execute("kafka in compose")
'''


def test_a_job_submitted_from_the_host_reads_and_writes_kafka_by_its_service_name_exactly_once(
        kafka_cluster: ComposeProject, tmp_path) -> None:  # noqa: ANN001
    import os
    import subprocess
    import sys

    servers = host_servers(kafka_cluster)
    admin = AdminClient({"bootstrap.servers": servers})
    source_topic, sink_topic = "job-in", "job-out"
    for topic in (source_topic, sink_topic):
        admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(timeout=20)
    producer = Producer({"bootstrap.servers": servers, "linger.ms": 0})
    sent = [f"job-record-{i}" for i in range(RECORDS)]
    for i, value in enumerate(sent):
        producer.produce(source_topic, value=value.encode(), partition=i % 2)
        assert producer.flush(10) == 0

    script = tmp_path / "kafka_job.py"
    script.write_text(JOB)
    done = subprocess.run([sys.executable, "-m", "millstream.client.cli", "run", str(script),
                           source_topic, sink_topic, str(RECORDS // 2)],
                          env={**os.environ, "MILLSTREAM_JOBMANAGER": kafka_cluster.address},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "FINISHED" in done.stdout, done.stdout + done.stderr

    consumer = Consumer({"bootstrap.servers": servers, "group.id": "host-job", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(sink_topic, p, 0) for p in range(2)])
    got: list[str] = []
    deadline = time.monotonic() + 30
    while len(got) < RECORDS and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append(message.value().decode())
    got += [m.value().decode() for m in consumer.consume(100, 2.0) if m.error() is None]  # nothing more
    consumer.close()
    assert sorted(got) == sorted(value.upper() for value in sent)
