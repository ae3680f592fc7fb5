"""The KafkaSource's reader: one subtask's Kafka partitions, read with confluent-kafka (librdkafka).

Splits are topic-partitions (split id ``topic-partition``), read with ``assign()`` from explicit
offsets; the consumer never joins a group (Flink's source does not either; it only commits offsets
for the group, see below).

**Deviation from Flink: no split enumerator.** Flink's KafkaSourceEnumerator runs on the
JobManager, discovers partitions and assigns each to a reader. Millstream has no JobManager-side
enumerator (sources compute their splits per subtask, see :mod:`.sources`), so every reader
discovers the partitions itself, at open and then every ``partition.discovery.interval.ms`` (Flink's
default 5 min; never for a bounded source), and reads those Flink's enumerator would have given it:
:func:`~.kafka_splits.split_owner` is Flink's ``getSplitOwner`` (start index from the topic name's
hash, plus the partition number, modulo the parallelism). Each reader resolves the starting (and
stopping) offsets of its own partitions when it first owns them; a partition discovered after the
first discovery starts at its earliest offset, as in Flink.

**Checkpoints.** A reader's ``position()`` is, per owned split, ``[next offset, stopping offset or
None]``, plus one entry ``#known@<subtask>`` listing every partition it knew of (owned or not).
A failover restores each subtask's own entries (exactly-once: reading resumes at the checkpointed
offsets). A rescaled restore hands the old splits out by id (round-robin over the old subtasks, as
Flink redistributes source splits) and, to every new subtask, the known lists of the snapshots it
was shown (at least one: those of the old subtasks whose key-group ranges overlap its own, see
``TaskCheckpointer.restore_rescaled``): a checkpointed split is read by whoever got it, and a partition no snapshot knew goes by
the owner function at the new parallelism, so no partition is read twice and none is lost. Left
open, unlike Flink's central enumerator: a partition created within one discovery interval before a
rescale savepoint, known to some old readers but not to those whose snapshots a new subtask got.

**Offsets committed to Kafka** on checkpoint completion (``commit.offsets.on.checkpoint``, Flink's
default true when a group id is set), asynchronously, a failure logged (Flink: only for monitoring).
Never auto-committed.

**Bounded** (``set_bounded``, or ``set_unbounded`` with stopping offsets): the stopping offsets
(latest / specific / timestamp / committed) are resolved when a partition is first owned; the
reader ends once every owned partition reached them and no discovery can add partitions (so
``set_unbounded`` with discovery on, its default, keeps waiting for new partitions, as Flink's
reader waits for splits that may still come).

**Bad input.** An unreachable broker fails the start naming its address within
``default.api.timeout.ms`` (the Java client's option, default 60 s); a topic of ``set_topics`` or
a partition of ``set_partitions`` that does not exist fails naming it (the consumer never asks the
broker to create topics); a property librdkafka does not know fails naming it.

**Records and time.** The value only, through the deserializer's ``deserialize(bytes)`` (a None
result is dropped, as Flink's ``DeserializationSchema.deserialize(message, out)`` does); a failure
names topic, partition and offset. Every record carries its Kafka timestamp (Flink's source emits
it as the record's timestamp; a WatermarkStrategy's assigner may replace it). Watermarks are per
partition, as in Flink: ``poll()`` returns one partition's records at a time, the source operator
feeds them to that partition's watermark generator, and the subtask's watermark is the minimum over
its partitions that are not idle (``with_idleness``). A partition holds it back from its assignment
on, before its first record (as a Flink split's output does), and no longer once it reached its
stopping offset.
"""
from __future__ import annotations

import logging
import re
from collections import deque
from typing import TYPE_CHECKING, Any, Mapping

import confluent_kafka as ck

from millstream.runtime.operator_factories import KafkaOffsetsSpec, KafkaSourceFactory
from millstream.runtime.operators.kafka_splits import (
    KNOWN_KEY, Partition, consumer_config, partitions_to_adopt, resolve_offsets, restored_splits, source_options,
    split_id)
from millstream.runtime.operators.source_reader import SourceReader
from millstream.runtime.timestamps import stamped

if TYPE_CHECKING:
    from millstream.runtime.task.environment import TaskEnvironment

__all__ = ["KafkaSourceReader"]

log = logging.getLogger(__name__)
_IDLE_WAIT_MS = 10  # librdkafka prefetches in the background; the task loop checks its queue this often


class _ConsumerOffsets:
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


class KafkaSourceReader(SourceReader):
    """See the module docstring. ``start_positions``: a restored ``position()`` (own, or the splits a
    rescale assigned); ``seen_positions``: the other snapshots a rescaled restore showed this subtask."""

    def __init__(self, factory: KafkaSourceFactory, env: "TaskEnvironment", batch_size: int,
                 start_positions: Mapping[str, Any], seen_positions: Mapping[str, Any] | None = None) -> None:
        self._factory = factory
        self._env = env
        self._batch_size = batch_size
        self._options = source_options(factory.properties, factory.bounded_mode)
        self._servers = str(factory.properties.get("bootstrap.servers", ""))
        self._restored = bool(start_positions) or seen_positions is not None
        splits, self._known = restored_splits(start_positions, seen_positions or {})
        self._offsets: dict[Partition, int] = {tp: offset for tp, (offset, _) in splits.items()}  # next to read
        self._stops: dict[Partition, int | None] = {tp: stop for tp, (_, stop) in splits.items()}
        self._finished: set[Partition] = set()
        self._pending: deque[tuple[Partition, list[Any]]] = deque()  # consumed, not emitted yet
        self._released: list[str] = []  # finished since the last released_splits()
        self._added: list[str] = []  # assigned since the last added_splits()
        self._pending_commits: dict[int, dict[Partition, int]] = {}
        self._consumer: Any = None
        self._client: _ConsumerOffsets | None = None
        self._next_discovery_ms: int | None = None
        self._pattern = re.compile(factory.topic_pattern) if factory.topic_pattern is not None else None

    # -- start ----------------------------------------------------------------------------------

    def open(self) -> None:
        f, o, env = self._factory, self._options, self._env
        if not self._servers:
            raise ValueError("KafkaSource needs bootstrap servers (set_bootstrap_servers)")
        conf: dict[str, Any] = consumer_config(f.properties, f.starting.reset,
                                               f"{o.client_id_prefix}-{env.subtask_index}",
                                               o.group_id or f"{o.client_id_prefix}-millstream")
        conf["on_commit"] = self._on_commit
        try:
            self._consumer = ck.Consumer(conf)
        except ck.KafkaException as e:  # e.g. a property librdkafka does not know, named by it
            raise ValueError(f"KafkaSource: the Kafka client refuses its configuration: {e}") from None
        self._client = _ConsumerOffsets(self._consumer, o.timeout_ms / 1000, self._servers)
        discovered = self._discover()
        if self._restored:
            new = partitions_to_adopt(discovered, self._known, env.subtask_index, env.parallelism)
            self._known |= discovered
            self._adopt(new, initial=False)
            log.info("KafkaSource subtask %d restored partitions %s", env.subtask_index,
                     sorted(split_id(*p) for p in self._offsets))
        else:
            self._known = set(discovered)
            self._adopt(partitions_to_adopt(discovered, set(), env.subtask_index, env.parallelism), initial=True)
        for tp, offset in self._offsets.items():
            stop = self._stops.get(tp)
            if stop is not None and offset >= stop:
                self._finished.add(tp)
        self._assign(sorted(self._offsets))
        self._schedule_discovery()

    def _adopt(self, partitions: list[Partition], initial: bool) -> None:
        """Starts owning ``partitions``: their starting offsets (the initializer for the first
        discovery, the earliest offset for partitions found later, as Flink) and stopping offsets."""
        if not partitions:
            return
        assert self._client is not None
        f = self._factory
        starting = f.starting if initial else KafkaOffsetsSpec(kind="earliest")
        starts = resolve_offsets(starting, partitions, self._client)
        stops = resolve_offsets(f.stopping, partitions, self._client) if f.stopping is not None else {}
        for tp in partitions:
            self._offsets[tp] = starts[tp]
            self._stops[tp] = stops.get(tp)

    def _assign(self, partitions: list[Partition]) -> None:
        todo = [ck.TopicPartition(t, p, self._offsets[(t, p)]) for t, p in partitions if (t, p) not in self._finished]
        if todo:
            self._consumer.incremental_assign(todo)
            self._added.extend(split_id(tp.topic, tp.partition) for tp in todo)

    def _schedule_discovery(self) -> None:
        interval = self._options.discovery_interval_ms
        self._next_discovery_ms = self._env.now_ms() + interval if interval > 0 else None

    def _discover(self) -> set[Partition]:
        """The subscribed partitions that exist now; a missing topic or partition is an error, and a
        broker that does not answer within the timeout fails naming its address."""
        f, timeout_s = self._factory, self._options.timeout_ms / 1000
        try:
            metadata = self._consumer.list_topics(timeout=timeout_s)
        except ck.KafkaException as e:
            raise ConnectionError(f"Kafka brokers {self._servers} unreachable: no metadata within "
                                  f"{timeout_s:g} s ({e.args[0].str() if e.args else e})") from None
        topics = metadata.topics
        found: set[Partition] = set()
        if self._pattern is not None:
            for name, topic in topics.items():
                if self._pattern.fullmatch(name) and topic.error is None:
                    found.update((name, p) for p in topic.partitions)
            return found
        for name in f.topics or sorted({t for t, _ in f.partitions}):
            topic = topics.get(name)
            if topic is None or topic.error is not None or not topic.partitions:
                raise ValueError(f"Kafka topic '{name}' does not exist on {self._servers}")
            if f.topics:
                found.update((name, p) for p in topic.partitions)
        for name, p in f.partitions:
            if p not in topics[name].partitions:
                raise ValueError(f"Kafka partition '{split_id(name, p)}' does not exist on {self._servers}")
            found.add((name, p))
        return found

    # -- reading --------------------------------------------------------------------------------

    def poll(self) -> list[Any] | None:
        """One partition's records at a time (``batch_split`` names it): the source operator runs
        the WatermarkStrategy per partition."""
        if not self._pending:
            if self._next_discovery_ms is not None and self._env.now_ms() >= self._next_discovery_ms:
                self._rediscover()
            if len(self._finished) == len(self._offsets) and self._ends():
                return None
            messages = self._consumer.consume(num_messages=self._batch_size, timeout=0)
            if not messages:
                self._check_positions()
                return []
            self._pending = self._by_partition(messages)
        tp, messages = self._pending.popleft()
        self.batch_split = split_id(*tp)
        return self._records(tp, messages)

    @staticmethod
    def _by_partition(messages: list[Any]) -> deque[tuple[Partition, list[Any]]]:
        groups: dict[Partition, list[Any]] = {}
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.code() == ck.KafkaError._PARTITION_EOF:
                    continue
                raise RuntimeError(f"Kafka topic {msg.topic()} partition {msg.partition()}: {err.str()}")
            groups.setdefault((msg.topic(), msg.partition()), []).append(msg)
        return deque(groups.items())

    def _records(self, tp: Partition, messages: list[Any]) -> list[Any]:
        """The values of one partition's messages, stamped with their Kafka timestamps; the
        partition's offset moves past them (it is what a checkpoint then stores)."""
        records: list[Any] = []
        stamps: list[int | None] = []
        deserialize = self._factory.deserializer.deserialize
        stop = self._stops.get(tp)
        for msg in messages:
            offset = msg.offset()
            if tp in self._finished or (stop is not None and offset >= stop):
                self._finish(tp)
                break
            try:
                value = deserialize(msg.value())
            except Exception as e:
                raise ValueError(f"Cannot deserialize the record of Kafka topic {tp[0]} partition {tp[1]} at "
                                 f"offset {offset}: {type(e).__name__}: {e}") from e
            self._offsets[tp] = offset + 1
            if stop is not None and offset + 1 >= stop:
                self._finish(tp)
            if value is None:
                continue
            records.append(value)
            kind, ts = msg.timestamp()
            stamps.append(ts if kind != ck.TIMESTAMP_NOT_AVAILABLE else None)
        return stamped(records, stamps)

    def _ends(self) -> bool:
        """Every owned partition is done: the source ends unless discovery may still add some."""
        return self._factory.stopping is not None and self._next_discovery_ms is None

    def _finish(self, tp: Partition) -> None:
        if tp not in self._finished:
            self._finished.add(tp)
            self._consumer.pause([ck.TopicPartition(*tp)])
            self._released.append(split_id(*tp))

    def added_splits(self) -> list[str]:
        added, self._added = self._added, []
        return added

    def released_splits(self) -> list[str]:
        released, self._released = self._released, []
        return released

    def _check_positions(self) -> None:
        """Idle: a partition whose fetch position passed its stop without a record there (control
        records of transactions take offsets too) is done."""
        waiting = [tp for tp, stop in self._stops.items() if stop is not None and tp not in self._finished]
        if not waiting:
            return
        for tp in self._consumer.position([ck.TopicPartition(*p) for p in waiting]):
            key = (tp.topic, tp.partition)
            if tp.offset >= 0 and tp.offset >= (self._stops[key] or 0):
                self._offsets[key] = max(self._offsets[key], tp.offset)
                self._finish(key)

    def _rediscover(self) -> None:
        discovered = self._discover()
        env = self._env
        mine = partitions_to_adopt(discovered, self._known, env.subtask_index, env.parallelism)
        self._known |= discovered
        if mine:
            log.info("KafkaSource subtask %d: new partitions %s", self._env.subtask_index,
                     [split_id(*p) for p in mine])
            self._adopt(mine, initial=False)
            self._assign(mine)
        self._schedule_discovery()

    def wait_hint_ms(self) -> int:
        return _IDLE_WAIT_MS

    # -- checkpoints ----------------------------------------------------------------------------

    def position(self) -> dict[str, Any]:
        out: dict[str, Any] = {split_id(t, p): [o, self._stops.get((t, p))] for (t, p), o in self._offsets.items()}
        out[f"{KNOWN_KEY}@{self._env.subtask_index}"] = sorted(split_id(t, p) for t, p in self._known)
        return out

    def on_checkpoint(self, checkpoint_id: int) -> None:
        """The barrier: remember what to commit to Kafka once this checkpoint completes."""
        if self._options.commit_on_checkpoint:
            self._pending_commits[checkpoint_id] = dict(self._offsets)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        offsets = self._pending_commits.get(checkpoint_id)
        for cid in [c for c in self._pending_commits if c <= checkpoint_id]:
            del self._pending_commits[cid]
        if offsets and self._consumer is not None:
            self._consumer.commit(offsets=[ck.TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                                  asynchronous=True)

    def _on_commit(self, err: Any, partitions: Any) -> None:
        if err is not None:
            log.warning("KafkaSource: committing offsets to Kafka for group %s failed: %s", self._options.group_id, err)

    def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()
