"""bench/nexmark's Kafka input (``kafka_input.py``) on a real tansu broker and the embedded cluster
(real Spark, two TaskManagers, parallelism 2): the generated events written to a topic are all
there, the broker's latest offsets match what was written (tansu gets them wrong after a batched
write unless each partition ends with a batch of one), and the Nexmark jobs reading the topic with
a KafkaSource bounded at ``latest()`` (Flink's ``setBounded(OffsetsInitializer.latest())``) give
the plain-Python answer over the same events."""
from __future__ import annotations

import os
import sys
import uuid

import confluent_kafka as ck
import pytest

from millstream.datastream import StreamExecutionEnvironment

from .harness import ClusterSpec
from .kafka import kafka_broker  # noqa: F401  (the module's broker)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))

from nexmark import check, generator, kafka_input, millstream_jobs, reference  # noqa: E402

pytestmark = pytest.mark.timeout(300)
CLUSTER = ClusterSpec(taskmanagers=2, jobmanager_env=True)
CONFIG = generator.Config(out_of_order_group_size=500)
EVENTS = 30_000  # as test_nexmark: windows close while the job runs and at its end


@pytest.fixture(scope="module")
def topic(kafka_broker, tmp_path_factory: pytest.TempPathFactory):  # noqa: F811
    paths = generator.generate(EVENTS, files=3, seed=29, config=CONFIG, directory=tmp_path_factory.mktemp("nexmark") / "events")
    kafka_broker.create_topic("nexmark", kafka_input.PARTITIONS)
    counts = kafka_input.write_topic(kafka_broker.bootstrap_servers, "nexmark", paths)
    return kafka_input.Topic(kafka_broker.bootstrap_servers, "nexmark"), paths, counts


def test_every_event_is_in_the_topic_in_stream_order_one_partition_in_two(topic) -> None:
    source, paths, counts = topic
    lines = [line.rstrip("\n") for path in paths for line in open(path, encoding="utf-8")]
    assert counts == [len(lines[p::2]) for p in range(2)]
    consumer = ck.Consumer({"bootstrap.servers": source.bootstrap, "group.id": f"t-{uuid.uuid4().hex[:8]}",
                            "enable.auto.commit": False})
    try:
        assert [consumer.get_watermark_offsets(ck.TopicPartition(source.name, p), timeout=10) for p in range(2)] == \
            [(0, c) for c in counts]
        consumer.assign([ck.TopicPartition(source.name, p, 0) for p in range(2)])
        read: dict[int, list[tuple[str, int]]] = {0: [], 1: []}
        while sum(map(len, read.values())) < len(lines):
            msg = consumer.poll(10)
            assert msg is not None, f"only {sum(map(len, read.values()))} of {len(lines)} events read"
            assert msg.error() is None, msg.error()
            read[msg.partition()].append((msg.value().decode(), msg.timestamp()[1]))
    finally:
        consumer.close()
    for p in range(2):
        assert [value for value, _ in read[p]] == lines[p::2]
        assert [t for _, t in read[p]] == [int(line.split(",")[1]) for line in lines[p::2]]  # the event's date_time


@pytest.mark.parametrize("query", ["q0", "q3", "q5", "q7"])
def test_query_over_the_topic_matches_the_plain_python_answer(cluster, topic, query) -> None:
    source, paths, _ = topic
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    with millstream_jobs.build(env, query, source, CONFIG.max_disorder_ms() + 1).execute_and_collect(f"nexmark {query} from kafka") as results:
        rows = list(results)
    check.check(query, reference.answer(query, reference.read(paths)), rows)
    assert rows, f"{query}: the input is big enough for a result"
