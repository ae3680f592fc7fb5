"""What the KafkaSource's split enumerator asks the broker, with confluent-kafka: the subscribed
partitions and the offsets a new split starts and stops at (Flink's enumerator does this with an
AdminClient). Blocking: the JobMaster calls it in a thread. The rules are in :mod:`.kafka_splits`.
"""
from __future__ import annotations

import logging
from typing import Any

import confluent_kafka as ck

from millstream.runtime.operator_factories import KafkaOffsetsSpec, KafkaSourceFactory
from millstream.runtime.operators.kafka_splits import (
    Partition, consumer_config, resolve_offsets, source_options, split_id, subscribed_partitions)
from millstream.runtime.operators.source_events import KafkaSplit

__all__ = ["ConsumerOffsets", "KafkaMetadataClient"]

log = logging.getLogger(__name__)


class ConsumerOffsets:
    """The OffsetsClient over a consumer: each question bounded by the source's timeout."""

    def __init__(self, consumer: Any, timeout_s: float, servers: str) -> None:
        self._c = consumer
        self._t = timeout_s
        self._servers = servers

    def _call(self, what: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args, timeout=self._t)
        except ck.KafkaException as e:
            raise RuntimeError(f"Kafka brokers {self._servers}: {what} failed within {self._t:g} s: {e}") from None

    def _watermarks(self, partitions: list[Partition], index: int) -> dict[Partition, int]:
        return {(t, p): self._call(f"offsets of {split_id(t, p)}", self._c.get_watermark_offsets,
                                   ck.TopicPartition(t, p))[index] for t, p in partitions}

    def beginning_offsets(self, partitions: list[Partition]) -> dict[Partition, int]:
        return self._watermarks(partitions, 0)

    def end_offsets(self, partitions: list[Partition]) -> dict[Partition, int]:
        return self._watermarks(partitions, 1)

    def committed_offsets(self, partitions: list[Partition]) -> dict[Partition, int]:
        found = self._call("reading the group's committed offsets", self._c.committed,
                           [ck.TopicPartition(t, p) for t, p in partitions])
        return {(tp.topic, tp.partition): tp.offset for tp in found if tp.offset >= 0}

    def offsets_for_times(self, partitions: list[Partition], timestamp: int) -> dict[Partition, int]:
        found = self._call("looking offsets up by time", self._c.offsets_for_times,
                           [ck.TopicPartition(t, p, timestamp) for t, p in partitions])
        return {(tp.topic, tp.partition): tp.offset for tp in found if tp.offset >= 0}


class KafkaMetadataClient:
    """One KafkaSource's connection for its enumerator: a consumer that never subscribes nor
    commits, only asks for metadata and offsets (with the group id, for committed offsets)."""

    def __init__(self, factory: KafkaSourceFactory) -> None:
        self._factory = factory
        self._options = source_options(factory.properties, factory.bounded_mode)
        self._servers = str(factory.properties.get("bootstrap.servers", ""))
        self._consumer: Any = None
        self._offsets: ConsumerOffsets | None = None

    def _open(self) -> ConsumerOffsets:
        if self._offsets is None:
            if not self._servers:
                raise ValueError("KafkaSource needs bootstrap servers (set_bootstrap_servers)")
            o = self._options
            conf = consumer_config(self._factory.properties, self._factory.starting.reset,
                                   f"{o.client_id_prefix}-enumerator", o.group_id or f"{o.client_id_prefix}-millstream")
            try:
                self._consumer = ck.Consumer(conf)
            except ck.KafkaException as e:  # e.g. a property librdkafka does not know, named by it
                raise ValueError(f"KafkaSource: the Kafka client refuses its configuration: {e}") from None
            self._offsets = ConsumerOffsets(self._consumer, o.timeout_ms / 1000, self._servers)
        return self._offsets

    def new_splits(self, known: frozenset[Partition], initial: bool) -> list[KafkaSplit]:
        """The subscribed partitions not in ``known`` as splits: starting at the builder's starting
        offsets on the first discovery, at the earliest offset later (Flink's rule), stopping at
        the stopping offsets if any. An unreachable broker fails naming its address."""
        offsets = self._open()
        timeout_s = self._options.timeout_ms / 1000
        try:
            metadata = self._consumer.list_topics(timeout=timeout_s)
        except ck.KafkaException as e:
            raise ConnectionError(f"Kafka brokers {self._servers} unreachable: no metadata within "
                                  f"{timeout_s:g} s ({e.args[0].str() if e.args else e})") from None
        topics = {name: (list(t.partitions) if t.error is None else None) for name, t in metadata.topics.items()}
        new = sorted(subscribed_partitions(self._factory, topics, self._servers) - known)
        if not new:
            return []
        f = self._factory
        starts = resolve_offsets(f.starting if initial else KafkaOffsetsSpec(kind="earliest"), new, offsets)
        stops = resolve_offsets(f.stopping, new, offsets) if f.stopping is not None else {}
        return [KafkaSplit(t, p, starts[(t, p)], stops.get((t, p))) for t, p in new]

    def close(self) -> None:
        consumer, self._consumer, self._offsets = self._consumer, None, None
        if consumer is not None:
            consumer.close()
