"""SQL jobs on Kafka tables against a real broker (tansu) and a MiniCluster with real Spark:
a ``kafka`` source -> GROUP BY -> ``upsert-kafka`` sink whose records are read back (each count an
upsert of its word's key, in order); an ``upsert-kafka`` source read as Flink's normalized changelog
(+I/-U/+U/-D, a tombstone a delete) and copied to another upsert topic (the delete a tombstone
again); a DDL watermark on a Kafka source dropping a late row from a TUMBLE window, and tracked
per partition inside the source (Flink's watermark push-down); a ``kafka``
sink with ``sink.delivery-guarantee`` = ``exactly-once`` seen by a read_committed reader.
Expected results are computed here from Flink's documented semantics."""
from __future__ import annotations

import json
import time
import uuid
from collections import Counter, defaultdict
from typing import Any

import pytest

from millstream.common import RowKind
from millstream.datastream import StreamExecutionEnvironment
from millstream.table import EnvironmentSettings, StreamTableEnvironment, TableEnvironment

from .harness import ClusterSpec
from .kafka import KafkaBroker, kafka_broker  # noqa: F401  (the module-scoped fixture)
from .test_kafka_sink import read_topic

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed (`make install`)")

pytestmark = pytest.mark.timeout(600)
CLUSTER = ClusterSpec(jobmanager_env=True, tasks_per_slot=8, checkpoints=True)
WORDS = "to be or not to be that is the question to be is to do".split()


def topic(broker: KafkaBroker, partitions: int = 1) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    broker.create_topic(name, partitions)
    return name


def produce(broker: KafkaBroker, name: str, records: list[tuple[bytes | None, bytes | None]]) -> None:
    # one record a batch: tansu answers ListOffsets LATEST with the last batch's base offset + 1
    # (test_kafka_broker's xfail), which a bounded source's latest-offset stop would trust
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0, "batch.num.messages": 1})
    for key, value in records:
        producer.produce(name, value=value, key=key)
        producer.flush(10)
    assert producer.flush(30) == 0, "records left undelivered after 30 s"


def streaming(parallelism: int = 2) -> TableEnvironment:
    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    t_env.get_config().set("parallelism.default", str(parallelism))
    return t_env


def by_key(messages: list[Any]) -> dict[str, list[Any]]:
    """Each key's values in the order read (one key is in one partition, so in the order written)."""
    out: dict[str, list[Any]] = defaultdict(list)
    for m in messages:
        out[json.loads(m.key())["word"]].append(None if m.value() is None else json.loads(m.value()))
    return dict(out)


def test_a_kafka_group_by_writes_each_new_count_as_an_upsert_of_its_word(cluster: Any, kafka_broker: KafkaBroker) -> None:
    words, counts = topic(kafka_broker, 2), topic(kafka_broker, 2)
    produce(kafka_broker, words, [(None, json.dumps({"word": w}).encode()) for w in WORDS])
    t_env = streaming()
    servers = kafka_broker.bootstrap_servers
    t_env.execute_sql(f"""
        CREATE TABLE words (word STRING) WITH (
          'connector' = 'kafka', 'topic' = '{words}', 'properties.bootstrap.servers' = '{servers}',
          'properties.group.id' = 'g-{words}', 'scan.startup.mode' = 'earliest-offset',
          'scan.bounded.mode' = 'latest-offset', 'format' = 'json')""")
    t_env.execute_sql(f"""
        CREATE TABLE counts (word STRING, n BIGINT, PRIMARY KEY (word) NOT ENFORCED) WITH (
          'connector' = 'upsert-kafka', 'topic' = '{counts}', 'properties.bootstrap.servers' = '{servers}',
          'key.format' = 'json', 'value.format' = 'json')""")
    t_env.execute_sql("INSERT INTO counts SELECT word, COUNT(*) FROM words GROUP BY word").wait(300_000)
    expected = Counter(WORDS)
    got = by_key(read_topic(kafka_broker, counts, lambda m: len(m) >= len(WORDS), committed_only=False))
    # GROUP BY's changelog +I 1, -U 1 +U 2, ...: the sink drops -U, so each count is one upsert
    assert got == {w: [{"word": w, "n": i} for i in range(1, n + 1)] for w, n in expected.items()}


def test_an_upsert_kafka_source_is_a_normalized_changelog_and_a_delete_goes_out_as_a_tombstone(
        cluster: Any, kafka_broker: KafkaBroker) -> None:
    source, copy = topic(kafka_broker), topic(kafka_broker)

    def rec(word: str, n: int | None) -> tuple[bytes, bytes | None]:
        return json.dumps({"word": word}).encode(), None if n is None else json.dumps({"word": word, "n": n}).encode()

    # a: 1, then 2, then 2 again (no change), then deleted; b: 5; c deleted without ever existing
    produce(kafka_broker, source, [rec("a", 1), rec("b", 5), rec("a", 2), rec("a", 2), rec("c", None), rec("a", None)])
    servers = kafka_broker.bootstrap_servers
    ddl = ("CREATE TABLE {name} (word STRING, n BIGINT, PRIMARY KEY (word) NOT ENFORCED) WITH ("
           "'connector' = 'upsert-kafka', 'topic' = '{topic}', 'properties.bootstrap.servers' = '" + servers + "', "
           "'key.format' = 'json', 'value.format' = 'json'{extra})")
    t_env = streaming(parallelism=1)
    t_env.execute_sql(ddl.format(name="src", topic=source, extra=", 'scan.bounded.mode' = 'latest-offset'"))
    rows = [(r.get_row_kind(), tuple(r)) for r in t_env.execute_sql("SELECT * FROM src").collect()]
    assert [r for r in rows if r[1][0] == "a"] == [
        (RowKind.INSERT, ("a", 1)), (RowKind.UPDATE_BEFORE, ("a", 1)), (RowKind.UPDATE_AFTER, ("a", 2)),
        (RowKind.DELETE, ("a", 2))]
    assert [r for r in rows if r[1][0] != "a"] == [(RowKind.INSERT, ("b", 5))]

    t_env = streaming(parallelism=1)
    t_env.execute_sql(ddl.format(name="src", topic=source, extra=", 'scan.bounded.mode' = 'latest-offset'"))
    t_env.execute_sql(ddl.format(name="dst", topic=copy, extra=""))
    t_env.execute_sql("INSERT INTO dst SELECT * FROM src").wait(300_000)
    got = by_key(read_topic(kafka_broker, copy, lambda m: len(m) >= 4, committed_only=False))
    assert got == {"a": [{"word": "a", "n": 1}, {"word": "a", "n": 2}, None], "b": [{"word": "b", "n": 5}]}


def test_a_ddl_watermark_on_a_kafka_source_drops_a_late_row_from_its_tumble_window(
        cluster: Any, kafka_broker: KafkaBroker) -> None:
    events = topic(kafka_broker)

    def send(*seconds: float) -> None:
        produce(kafka_broker, events, [(None, f"u,2024-01-01 00:00:{int(s):02d}.{int(s * 10) % 10}".encode())
                                       for s in seconds])

    t_env = streaming(parallelism=1)
    t_env.execute_sql(f"""
        CREATE TABLE events (u STRING, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) WITH (
          'connector' = 'kafka', 'topic' = '{events}', 'properties.bootstrap.servers' = '{kafka_broker.bootstrap_servers}',
          'scan.startup.mode' = 'earliest-offset', 'format' = 'csv')""")
    # The watermark (max(ts) - 1 s) passes 10 s at the row of 11.5 s: window [0, 10) fires with 4 rows.
    send(1, 2, 4, 9, 11.5)
    result = t_env.execute_sql(
        "SELECT window_start, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts), INTERVAL '10' SECOND)) "
        "GROUP BY window_start, window_end")
    got = []
    with result.collect() as rows:
        got.append(next(rows))
        send(3, 12, 25)  # 3 s is late now: its window has fired; 25 s fires [10, 20)
        got.append(next(rows))
        send(41)  # fires [20, 30)
        got.append(next(rows))
    assert [(r[0].second, r[1]) for r in got] == [(0, 4), (10, 2), (20, 1)]


def test_a_ddl_watermark_is_pushed_into_the_kafka_source_per_partition(cluster: Any, kafka_broker: KafkaBroker) -> None:
    """Flink pushes a Kafka table's watermark into its source, which tracks it per partition (the
    watermark is the partitions' minimum): a partition that runs ahead does not make another's rows
    late. One source subtask reads both partitions. With one watermark for both, partition 0's row
    at 90 s would fire [60 s, 70 s) before partition 1's row at 65 s arrives, which would be late."""
    events = topic(kafka_broker, 2)
    producer = ck.Producer({"bootstrap.servers": kafka_broker.bootstrap_servers, "linger.ms": 0,
                            "batch.num.messages": 1})

    def send(partition: int, *seconds: int) -> None:
        for s in seconds:
            producer.produce(events, value=f"u,2024-01-01 00:{s // 60:02d}:{s % 60:02d}".encode(), partition=partition)
            producer.flush(10)
        assert producer.flush(30) == 0

    t_env = streaming(parallelism=1)
    t_env.execute_sql(f"""
        CREATE TABLE events (u STRING, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) WITH (
          'connector' = 'kafka', 'topic' = '{events}', 'properties.bootstrap.servers' = '{kafka_broker.bootstrap_servers}',
          'scan.startup.mode' = 'earliest-offset', 'format' = 'csv')""")
    result = t_env.execute_sql(
        "SELECT window_start, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts), INTERVAL '10' SECOND)) "
        "GROUP BY window_start, window_end")
    with result.collect() as rows:
        send(0, 40, 62)
        send(1, 41, 63)
        first = next(rows)  # both partitions past 50 s: [40 s, 50 s) fires; the job has read them all
        send(0, 90)  # partition 0 runs ahead; partition 1 still holds the watermark at 62 s
        time.sleep(2)  # ten watermark intervals: a single watermark would have fired [60 s, 70 s) now
        send(1, 65, 95)
        second = next(rows)
    assert [(r[0].minute * 60 + r[0].second, r[1]) for r in (first, second)] == [(40, 2), (60, 3)]


def test_an_exactly_once_kafka_sink_shows_each_row_once_to_a_read_committed_reader(
        cluster: Any, kafka_broker: KafkaBroker) -> None:
    out = topic(kafka_broker, 2)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(200)
    t_env = StreamTableEnvironment.create(env)
    t_env.execute_sql("CREATE TABLE nums (i BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '400', "
                      "'rows-per-second' = '400', 'fields.i.kind' = 'sequence', 'fields.i.start' = '0', "
                      "'fields.i.end' = '399')")
    t_env.execute_sql(f"""
        CREATE TABLE out_t (i BIGINT, sq BIGINT) WITH (
          'connector' = 'kafka', 'topic' = '{out}', 'properties.bootstrap.servers' = '{kafka_broker.bootstrap_servers}',
          'format' = 'csv', 'sink.delivery-guarantee' = 'exactly-once',
          'sink.transactional-id-prefix' = 'tx-{out}')""")
    t_env.execute_sql("INSERT INTO out_t SELECT i, i * i FROM nums").wait(300_000)
    got = [m.value().decode() for m in read_topic(kafka_broker, out, lambda m: len(m) >= 400)]
    assert sorted(got) == sorted(f"{i},{i * i}" for i in range(400))



def test_an_avro_kafka_table_reads_and_writes_records_in_flinks_avro_encoding(
        cluster: Any, kafka_broker: KafkaBroker) -> None:
    """Flink's ``'format' = 'avro'``: a message is one record in Avro's binary encoding (no
    container header) of the schema Flink derives from the columns: record ``record`` in namespace
    ``org.apache.flink.avro.generated``, nullable columns unions with null."""
    import io

    import fastavro

    source, sink = topic(kafka_broker), topic(kafka_broker)
    schema = fastavro.parse_schema({
        "type": "record", "name": "record", "namespace": "org.apache.flink.avro.generated", "fields": [
            {"name": "word", "type": ["null", "string"], "default": None},
            {"name": "n", "type": ["null", "long"], "default": None}]})

    def encode(doc: dict[str, Any]) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, schema, doc)
        return out.getvalue()

    produce(kafka_broker, source, [(None, encode({"word": w, "n": i})) for i, w in enumerate(WORDS)])
    servers = kafka_broker.bootstrap_servers
    ddl = ("CREATE TABLE {name} (word STRING, n BIGINT) WITH ('connector' = 'kafka', 'topic' = '{topic}', "
           "'properties.bootstrap.servers' = '" + servers + "', 'format' = 'avro'{extra})")
    t_env = streaming(parallelism=1)
    t_env.execute_sql(ddl.format(name="src", topic=source, extra=", 'properties.group.id' = 'g', "
                                 "'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset'"))
    t_env.execute_sql(ddl.format(name="dst", topic=sink, extra=""))
    t_env.execute_sql("INSERT INTO dst SELECT UPPER(word), n * 10 FROM src WHERE n % 2 = 0").wait(300_000)
    expected = [{"word": w.upper(), "n": i * 10} for i, w in enumerate(WORDS) if i % 2 == 0]
    messages = read_topic(kafka_broker, sink, lambda m: len(m) >= len(expected), committed_only=False)
    assert [fastavro.schemaless_reader(io.BytesIO(m.value()), schema, None) for m in messages] == expected
