"""Kafka -> map -> Kafka (issue 25), one command: ``python bench/kafka_pipeline.py`` (also
``bench/run.py --only kafka``).

A Kafka-protocol broker (tansu, the test extra's binary, in memory on a free loopback port) holds an
input topic of ``--records`` small text records (2 partitions, written once before the runs). Each
engine reads all of them, upper-cases each value (decode UTF-8, ``str.upper``, encode) and writes
the results to a fresh output topic (2 partitions); the run ends when every result is in Kafka.
Engines, each in a fresh process, alternated over ``--rounds`` rounds (medians):

1. the floor, NONE: one Python process, a confluent-kafka consumer (assigned partitions, no group)
   feeding a producer, the loop a user writes by hand: ``consume(10_000)``, produce, ``poll(0)``,
   and a final flush;
2. the floor, EXACTLY_ONCE: Kafka's own consume-transform-produce loop: a transactional producer,
   one transaction per second carrying the consumer's offsets (``send_offsets_to_transaction``);
3. Millstream, NONE: KafkaSource (bounded at the input's end offsets) -> map -> KafkaSink,
   parallelism 2, on the embedded cluster;
4. Millstream, EXACTLY_ONCE: the same job with 1 s checkpoints and the exactly-once sink.

Times are job-only: a Millstream process starts its embedded cluster and runs a warm-up job first,
then times ``execute()``; a floor process times its loop. After every run a read_committed
consumer counts the output topic: each engine must have written every record exactly once
(asserted). Records/s is ``--records`` over the time.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

RECORDS, ROUNDS, PARTITIONS, CHECKPOINT_MS = 500_000, 3, 2, 1000
ENGINES = ("floor_none", "floor_exactly_once", "millstream_none", "millstream_exactly_once")


def _value(i: int) -> bytes:
    return f"record {i:09d} of the kafka pipeline benchmark".encode()


def fill_input(bootstrap: str, topic: str, records: int) -> list[int]:
    """Writes the input (record i to partition i % PARTITIONS); returns the end offset per partition."""
    import confluent_kafka as ck

    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10_000,
                            "queue.buffering.max.messages": 1_000_000})
    for i in range(records):
        while True:
            try:
                producer.produce(topic, _value(i), partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(60) != 0:
        raise RuntimeError("the input was not fully written within 60 s")
    return [len(range(p, records, PARTITIONS)) for p in range(PARTITIONS)]


def count_committed(bootstrap: str, topic: str, expected: int, timeout_s: float = 60.0) -> tuple[int, bool]:
    """(records a read_committed consumer reads from ``topic``, whether they are the expected values)."""
    import confluent_kafka as ck

    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"count-{uuid.uuid4().hex[:8]}",
                            "enable.auto.commit": False, "isolation.level": "read_committed"})
    seen: set[bytes] = set()
    total = 0
    try:
        consumer.assign([ck.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + timeout_s
        idle_since = time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - idle_since < 5:
            batch = consumer.consume(10_000, 0.5)
            for msg in batch:
                if msg.error() is None:
                    total += 1
                    seen.add(msg.value())
            if batch:
                idle_since = time.monotonic()
            if total >= expected and not batch:
                break
    finally:
        consumer.close()
    exact = total == expected and len(seen) == expected and _value(expected - 1).upper() in seen
    return total, exact


# -- the engines, each in its own process ---------------------------------------------------------


def measure_floor(bootstrap: str, source: str, sink: str, ends: list[int], exactly_once: bool) -> dict:
    import confluent_kafka as ck

    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"floor-{uuid.uuid4().hex[:8]}",
                            "enable.auto.commit": False, "isolation.level": "read_committed"})
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "linger.ms": 5, "queue.buffering.max.messages": 1_000_000}
    if exactly_once:
        conf["transactional.id"] = f"floor-{uuid.uuid4().hex[:8]}"
    producer = ck.Producer(conf)
    if exactly_once:
        producer.init_transactions(30)
    consumer.assign([ck.TopicPartition(source, p, 0) for p in range(PARTITIONS)])
    remaining = sum(ends)
    started = time.perf_counter()
    if exactly_once:
        producer.begin_transaction()
    last_commit = started
    while remaining > 0:
        for msg in consumer.consume(10_000, 0.5):
            if msg.error() is not None:
                continue
            value = msg.value().decode().upper().encode()
            while True:
                try:
                    producer.produce(sink, value, partition=msg.partition())
                    break
                except BufferError:
                    producer.poll(0.01)
            remaining -= 1
        producer.poll(0)
        if exactly_once and (remaining == 0 or time.perf_counter() - last_commit >= CHECKPOINT_MS / 1000):
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(60)
            last_commit = time.perf_counter()
            if remaining:
                producer.begin_transaction()
    if producer.flush(60) != 0:
        raise RuntimeError("the floor's output was not fully written within 60 s")
    wall = time.perf_counter() - started
    consumer.close()
    return {"wall_s": wall}


def measure_millstream(bootstrap: str, source: str, sink: str, ends: list[int], exactly_once: bool) -> dict:
    from millstream.client.execution import ENV_JOBMANAGER
    from millstream.client.minicluster import MiniCluster
    from millstream.common import Types, WatermarkStrategy
    from millstream.common.serialization import SimpleStringSchema
    from millstream.datastream import StreamExecutionEnvironment
    from millstream.datastream.connectors.base import DeliveryGuarantee
    from millstream.datastream.connectors.kafka import (KafkaOffsetsInitializer, KafkaRecordSerializationSchema,
                                                        KafkaSink, KafkaSource, KafkaTopicPartition)
    from millstream.runtime import config as cfg

    started = time.perf_counter()
    with MiniCluster(cfg.Configuration(), num_slots=2) as cluster:
        os.environ[ENV_JOBMANAGER] = cluster.address
        warm = StreamExecutionEnvironment.get_execution_environment()
        warm.set_parallelism(2)
        warm.from_collection(list(range(1000))).map(lambda x: x + 1).add_sink(_discard())
        warm.execute("warm-up")
        ready = time.perf_counter()

        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(2)
        if exactly_once:
            env.enable_checkpointing(CHECKPOINT_MS)
        kafka_source = (KafkaSource.builder()
                        .set_bootstrap_servers(bootstrap)
                        .set_topics(source)
                        .set_starting_offsets(KafkaOffsetsInitializer.earliest())
                        .set_bounded(KafkaOffsetsInitializer.offsets(
                            {KafkaTopicPartition(source, p): end for p, end in enumerate(ends)}))
                        .set_value_only_deserializer(SimpleStringSchema())
                        .build())
        sink_builder = (KafkaSink.builder()
                        .set_bootstrap_servers(bootstrap)
                        .set_record_serializer(KafkaRecordSerializationSchema.builder()
                                               .set_topic(sink)
                                               .set_value_serialization_schema(SimpleStringSchema())
                                               .build()))
        if exactly_once:
            sink_builder = (sink_builder.set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
                            .set_transactional_id_prefix(f"bench-{uuid.uuid4().hex[:8]}"))
        (env.from_source(kafka_source, WatermarkStrategy.no_watermarks(), "kafka")
            .map(str.upper, output_type=Types.STRING())
            .sink_to(sink_builder.build()))
        submitted = time.perf_counter()
        env.execute("kafka pipeline bench")
        done = time.perf_counter()
    return {"wall_s": done - submitted, "startup_s": ready - started}


def _discard() -> Any:
    from millstream.datastream.functions import SinkFunction

    class Discard(SinkFunction):
        def invoke(self, value: Any, context: Any = None) -> None:
            pass

    return Discard()


# -- the comparison -------------------------------------------------------------------------------


def _run(engine: str, bootstrap: str, source: str, sink: str, ends: list[int]) -> dict:
    args = [sys.executable, __file__, "--measure", engine, bootstrap, source, sink, json.dumps(ends)]
    out = subprocess.run(args, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"{engine} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def report(records: int = RECORDS, rounds: int = ROUNDS, engines: tuple[str, ...] = ENGINES) -> dict:
    """Prints the comparison and returns records/s per engine (medians) for headline()."""
    from tests.integration.kafka import KafkaBroker

    load = os.getloadavg()
    print(f"\nkafka: {records:,} records in {PARTITIONS} partitions, map(upper), into Kafka; load average at start "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="millstream-bench-kafka-") as work, KafkaBroker(Path(work)) as broker:
        source = "bench-input"
        broker.create_topic(source, PARTITIONS)
        t0 = time.perf_counter()
        ends = fill_input(broker.bootstrap_servers, source, records)
        print(f"  input written in {time.perf_counter() - t0:.1f} s")
        walls: dict[str, list[float]] = {e: [] for e in engines}
        for r in range(rounds):
            for engine in engines:
                sink = f"out-{engine}-{r}"
                broker.create_topic(sink, PARTITIONS)
                result = _run(engine, broker.bootstrap_servers, source, sink, ends)
                total, exact = count_committed(broker.bootstrap_servers, sink, records)
                if not exact:
                    raise AssertionError(f"{engine} wrote {total:,} records to {sink}, not each of {records:,} once")
                walls[engine].append(result["wall_s"])
                print(f"  round {r + 1} {engine:<24} {result['wall_s']:6.2f} s  {records / result['wall_s']:>10,.0f} rec/s")
    rates = {e: records / statistics.median(w) for e, w in walls.items()}
    for engine, rate in rates.items():
        print(f"  {engine:<24} median {rate:>10,.0f} records/s")
    return {"records": records, "rates": rates}


def headline(result: dict) -> list:
    from table import Figure

    rates = result["rates"]
    figures = []
    for engine, label in (("millstream_none", "Millstream, NONE"), ("millstream_exactly_once", "Millstream, EXACTLY_ONCE"),
                          ("floor_none", "confluent-kafka loop"), ("floor_exactly_once", "confluent-kafka transactional loop")):
        if engine in rates:
            figures.append(Figure(f"kafka.{engine}_rps", f"Kafka -> map -> Kafka, {label}", rates[engine], "rec/s", "higher"))
    if "millstream_none" in rates and "floor_none" in rates:
        figures.append(Figure("kafka.none_vs_floor", "Kafka -> map -> Kafka, NONE: Millstream / confluent-kafka loop",
                              rates["millstream_none"] / rates["floor_none"], "x", "higher"))
    if "millstream_none" in rates and "millstream_exactly_once" in rates:
        figures.append(Figure("kafka.exactly_once_cost_pct", "Kafka -> map -> Kafka: throughput lost to EXACTLY_ONCE, Millstream",
                              100 * (1 - rates["millstream_exactly_once"] / rates["millstream_none"]), "%", "lower",
                              signed=True))
    if "floor_none" in rates and "floor_exactly_once" in rates:
        figures.append(Figure("kafka.floor_exactly_once_cost_pct",
                              "Kafka -> map -> Kafka: throughput lost to transactions, confluent-kafka loop",
                              100 * (1 - rates["floor_exactly_once"] / rates["floor_none"]), "%", "lower", signed=True))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=RECORDS)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--engines", default=",".join(ENGINES), help="comma-separated: " + ", ".join(ENGINES))
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("args", nargs="*", help=argparse.SUPPRESS)
    a = parser.parse_args()
    if a.measure:
        bootstrap, source, sink, ends_json = a.args
        ends = json.loads(ends_json)
        measure = measure_floor if a.measure.startswith("floor") else measure_millstream
        print(json.dumps(measure(bootstrap, source, sink, ends, a.measure.endswith("exactly_once"))))
        return
    report(a.records, a.rounds, tuple(e for e in a.engines.split(",") if e))


if __name__ == "__main__":
    main()
