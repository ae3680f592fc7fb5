"""The KafkaSource's pure logic: which subtask owns a partition, which partitions it subscribes to,
where a partition starts and stops, what the builder's properties mean to librdkafka, and the
source's settings as its split enumerator on the JobManager gets them. No I/O: offsets come from
an :class:`OffsetsClient` (the enumerator's consumer in production, a fake in unit tests).

A split is one topic-partition, id ``"topic-partition"`` (Flink's KafkaPartitionSplit id).
"""
from __future__ import annotations

import json
import logging
import re
from typing import Any, Iterable, Mapping, Protocol

from millstream.runtime.operator_factories import KafkaOffsetsSpec, KafkaSourceFactory

log = logging.getLogger(__name__)

__all__ = [
    "Partition", "OffsetsClient", "java_string_hash", "split_owner", "split_id", "parse_split_id",
    "resolve_offsets", "consumer_config", "SourceOptions", "source_options", "restored_splits",
    "coordinator_settings", "factory_from_settings", "subscribed_partitions",
]

Partition = tuple[str, int]  # (topic, partition)

# Flink's KafkaSourceOptions: read by the source, never given to the client.
_FLINK_OPTIONS = ("partition.discovery.interval.ms", "commit.offsets.on.checkpoint", "client.id.prefix",
                  "register.consumer.metrics")
# Java consumer properties librdkafka does not have (or sets from the source's own settings):
# ignored with one warning.
_JAVA_ONLY = frozenset({
    "key.deserializer", "value.deserializer", "max.poll.records", "default.api.timeout.ms",
    "request.timeout.ms", "sasl.jaas.config", "interceptor.classes", "partition.assignment.strategy",
    "metric.reporters", "metrics.num.samples", "metrics.recording.level", "metrics.sample.window.ms",
    "exclude.internal.topics", "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.type",
    "ssl.keystore.type", "ssl.protocol", "ssl.provider", "security.providers", "auto.offset.reset.strategy",
    "retry.backoff.max.ms",
})
# Java names whose librdkafka property has another name.
_RENAMED = {
    "fetch.max.wait.ms": "fetch.wait.max.ms",
    "send.buffer.bytes": "socket.send.buffer.bytes",
    "receive.buffer.bytes": "socket.receive.buffer.bytes",
}
# The source sets these itself (Flink's builder overrides them too).
_OWNED = frozenset({"enable.auto.commit", "auto.offset.reset", "client.id", "group.id"})
_DEFAULT_TIMEOUT_MS = 60_000  # Java's default.api.timeout.ms
_DEFAULT_DISCOVERY_MS = 5 * 60_000  # Flink's partition.discovery.interval.ms


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode()``: over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def split_owner(topic: str, partition: int, num_readers: int) -> int:
    """Flink's KafkaSourceEnumerator.getSplitOwner: the topic's partition 0 goes to a subtask chosen
    by the topic name's hash, the others follow it round-robin (ascending subtask indices)."""
    start = ((java_string_hash(topic) * 31) & 0x7FFFFFFF) % num_readers
    return (start + partition) % num_readers


def split_id(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_split_id(sid: str) -> Partition:
    topic, sep, partition = sid.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        raise ValueError(f"not a Kafka split id (topic-partition): {sid!r}")
    return topic, int(partition)


def restored_splits(start_positions: Mapping[str, Any]) -> dict[Partition, tuple[int, int | None]]:
    """A reader's restored ``position()``: ``partition -> (next offset, stopping offset or None)``."""
    return {parse_split_id(key): (int(value[0]), None if value[1] is None else int(value[1]))
            for key, value in start_positions.items()}


def coordinator_settings(factory: KafkaSourceFactory) -> bytes:
    """What the split enumerator on the JobManager needs of a KafkaSource, as JSON (the JobVertex's
    coordinator field): everything but the deserializer, which is user code the JobManager never loads."""
    def spec(s: KafkaOffsetsSpec | None) -> dict[str, Any] | None:
        return None if s is None else {"kind": s.kind, "reset": s.reset, "timestamp": s.timestamp,
                                       "offsets": [list(o) for o in s.offsets]}
    return json.dumps({"kind": "kafka", "properties": dict(factory.properties), "topics": list(factory.topics),
                       "topic_pattern": factory.topic_pattern, "partitions": [list(p) for p in factory.partitions],
                       "starting": spec(factory.starting), "stopping": spec(factory.stopping),
                       "bounded": factory.bounded_mode}).encode("utf-8")


def factory_from_settings(settings: bytes) -> KafkaSourceFactory:
    """The KafkaSource of :func:`coordinator_settings` (without its deserializer)."""
    doc = json.loads(settings.decode("utf-8"))
    if doc.get("kind") != "kafka":
        raise ValueError(f"not a KafkaSource coordinator's settings: {settings[:200]!r}")

    def spec(d: dict[str, Any] | None) -> KafkaOffsetsSpec | None:
        return None if d is None else KafkaOffsetsSpec(d["kind"], d["reset"], d["timestamp"],
                                                       tuple((str(t), int(p), int(o)) for t, p, o in d["offsets"]))
    return KafkaSourceFactory(properties={str(k): str(v) for k, v in doc["properties"].items()},
                              topics=tuple(doc["topics"]), topic_pattern=doc["topic_pattern"],
                              partitions=tuple((str(t), int(p)) for t, p in doc["partitions"]),
                              starting=spec(doc["starting"]) or KafkaOffsetsSpec(), stopping=spec(doc["stopping"]),
                              bounded_mode=bool(doc["bounded"]))


def subscribed_partitions(factory: KafkaSourceFactory, topics: Mapping[str, Iterable[int] | None],
                          servers: str) -> set[Partition]:
    """The partitions the source subscribes to among the broker's ``topics`` (name -> partition
    numbers, None for a topic in error): a topic of ``set_topics`` or a partition of
    ``set_partitions`` that does not exist is an error naming it; a pattern matches whole names."""
    found: set[Partition] = set()
    if factory.topic_pattern is not None:
        pattern = re.compile(factory.topic_pattern)
        for name, parts in topics.items():
            if parts is not None and pattern.fullmatch(name):
                found.update((name, p) for p in parts)
        return found
    for name in factory.topics or sorted({t for t, _ in factory.partitions}):
        parts = topics.get(name)
        if not parts:
            raise ValueError(f"Kafka topic '{name}' does not exist on {servers}")
        if factory.topics:
            found.update((name, p) for p in parts)
    for name, p in factory.partitions:
        if p not in set(topics[name] or ()):
            raise ValueError(f"Kafka partition '{split_id(name, p)}' does not exist on {servers}")
        found.add((name, p))
    return found


class OffsetsClient(Protocol):
    """What resolving offsets asks the broker (the Java PartitionOffsetsRetriever's questions)."""

    def beginning_offsets(self, partitions: list[Partition]) -> dict[Partition, int]: ...

    def end_offsets(self, partitions: list[Partition]) -> dict[Partition, int]: ...

    def committed_offsets(self, partitions: list[Partition]) -> dict[Partition, int]:
        """Only the partitions the group has an offset for."""

    def offsets_for_times(self, partitions: list[Partition], timestamp: int) -> dict[Partition, int]:
        """Only the partitions with a record at or after ``timestamp``."""


def _reset(spec: KafkaOffsetsSpec, partitions: list[Partition], client: OffsetsClient, why: str) -> dict[Partition, int]:
    if not partitions:
        return {}
    if spec.reset == "earliest":
        return client.beginning_offsets(partitions)
    if spec.reset == "latest":
        return client.end_offsets(partitions)
    names = ", ".join(split_id(t, p) for t, p in sorted(partitions))
    raise ValueError(f"Kafka partitions {names} have {why} and the offset reset strategy is NONE")


def resolve_offsets(spec: KafkaOffsetsSpec, partitions: Iterable[Partition], client: OffsetsClient) -> dict[Partition, int]:
    """Flink's OffsetsInitializer.getPartitionOffsets: an offset for every partition."""
    parts = sorted(set(partitions))
    if not parts:
        return {}
    kind = spec.kind
    if kind == "earliest":
        return client.beginning_offsets(parts)
    if kind == "latest":
        return client.end_offsets(parts)
    if kind == "committed":
        found = client.committed_offsets(parts)
        missing = [p for p in parts if p not in found]
        return {**found, **_reset(spec, missing, client, "no committed offset")}
    if kind == "timestamp":
        # The end offsets first (Flink's order): a partition with no record at or after the
        # timestamp starts at its end as it was before the lookup, so nothing written meanwhile is lost.
        ends = client.end_offsets(parts)
        by_time = client.offsets_for_times(parts, int(spec.timestamp or 0))
        return {p: by_time.get(p, ends[p]) for p in parts}
    if kind == "specific":
        given = {(t, p): o for t, p, o in spec.offsets}
        found = {p: given[p] for p in parts if p in given}
        rest = [p for p in parts if p not in given]
        if rest:  # Flink: the group's committed offsets, then the reset strategy
            committed = client.committed_offsets(rest)
            found.update(committed)
            found.update(_reset(spec, [p for p in rest if p not in committed], client, "no specified offset"))
        return found
    raise ValueError(f"unknown Kafka offsets initializer {kind!r}")


class SourceOptions:
    """The Flink-side options of one KafkaSource, read from its properties."""

    def __init__(self, group_id: str | None, client_id_prefix: str, discovery_interval_ms: int,
                 commit_on_checkpoint: bool, timeout_ms: int) -> None:
        self.group_id = group_id
        self.client_id_prefix = client_id_prefix
        self.discovery_interval_ms = discovery_interval_ms
        self.commit_on_checkpoint = commit_on_checkpoint
        self.timeout_ms = timeout_ms


def _flag(key: str, value: str) -> bool:
    v = str(value).strip().lower()
    if v not in ("true", "false"):
        raise ValueError(f"Kafka source property {key} must be true or false, got {value!r}")
    return v == "true"


def _long(key: str, value: str) -> int:
    try:
        return int(str(value).strip())
    except ValueError:
        raise ValueError(f"Kafka source property {key} must be a number, got {value!r}") from None


def source_options(properties: Mapping[str, str], bounded: bool) -> SourceOptions:
    """Flink's KafkaSourceBuilder rules: no group id, no commits; a bounded source never discovers
    partitions after its start; the client id prefix defaults to the group id."""
    group = properties.get("group.id") or None
    commit = _flag("commit.offsets.on.checkpoint", properties.get("commit.offsets.on.checkpoint", "true"))
    if group is None:
        commit = False
    discovery = _long("partition.discovery.interval.ms",
                      properties.get("partition.discovery.interval.ms", str(_DEFAULT_DISCOVERY_MS)))
    if bounded:
        discovery = -1
    prefix = properties.get("client.id.prefix") or group or "KafkaSource"
    timeout = _long("default.api.timeout.ms", properties.get("default.api.timeout.ms", str(_DEFAULT_TIMEOUT_MS)))
    return SourceOptions(group, prefix, discovery, commit, max(timeout, 1))


def consumer_config(properties: Mapping[str, str], reset: str, client_id: str, group_id: str) -> dict[str, str]:
    """librdkafka's configuration for the builder's properties: Flink's own options are taken out,
    Java-only ones dropped with one warning, a few renamed; the source sets group, client id,
    auto commit (off: offsets are committed on checkpoints) and the reset strategy. The isolation
    level defaults to the Java client's (read_uncommitted; librdkafka's own default is read_committed)."""
    conf: dict[str, str] = {"isolation.level": "read_uncommitted"}
    ignored = []
    for key, value in properties.items():
        if key in _FLINK_OPTIONS or key in _OWNED:
            continue
        if key in _RENAMED:
            conf[_RENAMED[key]] = str(value)
        elif key in _JAVA_ONLY:
            ignored.append(key)
        else:
            conf[key] = str(value)
    if ignored:
        log.warning("KafkaSource: Java client properties without a librdkafka equivalent are ignored: %s",
                    ", ".join(sorted(ignored)))
    conf.update({
        "group.id": group_id, "client.id": client_id, "enable.auto.commit": "false",
        "enable.auto.offset.store": "false",
        "auto.offset.reset": {"earliest": "earliest", "latest": "latest"}.get(reset, "error"),
    })
    return conf
