"""The KafkaSource's reader: one subtask's Kafka partitions, read with confluent-kafka (librdkafka).

Splits are topic-partitions (split id ``topic-partition``), read with ``assign()`` from explicit
offsets; the consumer never joins a group (Flink's source does not either; it only commits offsets
for the group, see below).

**Splits come from the enumerator** on the JobManager (``jobmanager/jobmaster/source_coordinator``,
Flink's KafkaSourceEnumerator): the reader registers with it when it opens (naming the checkpoint
its state came from) and reads the splits it is sent (AddSplits, each with its starting and
stopping offsets); a bounded source's reader ends once it was told NoMoreSplits and every split
reached its stopping offset. Partition discovery and offsets initializers run there, not here.

**Checkpoints.** A reader's ``position()`` is, per split, ``[next offset, stopping offset or None]``.
A failover restores each subtask's own splits (exactly-once: reading resumes at the checkpointed
offsets); a rescaled restore hands the old splits out by id, round-robin over the new subtasks (as
Flink redistributes source splits); splits assigned after the restored checkpoint come again from
the enumerator.

**Offsets committed to Kafka** on checkpoint completion (``commit.offsets.on.checkpoint``, Flink's
default true when a group id is set), asynchronously, a failure logged (Flink: only for monitoring).
Never auto-committed.

**Bounded** (``set_bounded``): the reader ends when every split reached its stopping offset and
the enumerator sent NoMoreSplits. ``set_unbounded`` with stopping offsets stops reading each split
there but, as in Flink (CONTINUOUS_UNBOUNDED), never ends.

**Bad input.** The enumerator fails the job when the broker does not answer within
``default.api.timeout.ms`` (naming its address) or a topic of ``set_topics`` / a partition of
``set_partitions`` does not exist (naming it); a property librdkafka does not know fails naming it.

**Records and time.** The value only, through the deserializer's ``deserialize(bytes)`` (or key and
value through its ``deserialize_key_value(key, value)`` when it has one; a None result is dropped, as Flink's ``DeserializationSchema.deserialize(message, out)`` does); a failure
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
from collections import deque
from typing import TYPE_CHECKING, Any, Mapping

import confluent_kafka as ck

from millstream.runtime.operator_factories import KafkaSourceFactory
from millstream.runtime.operators.kafka_splits import Partition, consumer_config, restored_splits, source_options, split_id
from millstream.runtime.operators.source_events import AddSplits, NoMoreSplits, ReaderRegistration, decode, encode
from millstream.runtime.operators.source_reader import SourceReader
from millstream.runtime.timestamps import stamped

if TYPE_CHECKING:
    from millstream.runtime.task.environment import TaskEnvironment

__all__ = ["KafkaSourceReader"]

log = logging.getLogger(__name__)
_IDLE_WAIT_MS = 10  # librdkafka prefetches in the background; the task loop checks its queue this often


class KafkaSourceReader(SourceReader):
    """See the module docstring. ``start_positions``: a restored ``position()`` (own, or the splits a
    rescale assigned)."""

    def __init__(self, factory: KafkaSourceFactory, env: "TaskEnvironment", batch_size: int,
                 start_positions: Mapping[str, Any]) -> None:
        self._factory = factory
        self._env = env
        self._batch_size = batch_size
        self._options = source_options(factory.properties, factory.bounded_mode)
        self._servers = str(factory.properties.get("bootstrap.servers", ""))
        splits = restored_splits(start_positions)
        self._offsets: dict[Partition, int] = {tp: offset for tp, (offset, _) in splits.items()}  # next to read
        self._stops: dict[Partition, int | None] = {tp: stop for tp, (_, stop) in splits.items()}
        self._finished: set[Partition] = set()
        self._no_more_splits = False
        self._pending: deque[tuple[Partition, list[Any]]] = deque()  # consumed, not emitted yet
        self._released: list[str] = []  # finished since the last released_splits()
        self._added: list[str] = []  # assigned since the last added_splits()
        self._pending_commits: dict[int, dict[Partition, int]] = {}
        self._consumer: Any = None

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
        try:
            if self._offsets:
                log.info("KafkaSource subtask %d restored splits %s", env.subtask_index,
                         sorted(split_id(*p) for p in self._offsets))
            for tp, offset in self._offsets.items():
                stop = self._stops.get(tp)
                if stop is not None and offset >= stop:
                    self._finished.add(tp)
            self._assign(sorted(self._offsets))
            env.operator_event_handler = self.handle_operator_event
            env.send_operator_event(encode(ReaderRegistration(env.subtask_index, env.restored_checkpoint_id)))
        except BaseException:
            # The operator never gets this reader to close: a consumer left open here would go on
            # reconnecting (and logging each refused connection) for as long as the failure's
            # traceback keeps it, long after its broker is gone.
            self.close()
            raise

    def handle_operator_event(self, payload: bytes) -> None:
        """An event of the enumerator, on the task thread between two batches."""
        event = decode(payload)
        if isinstance(event, AddSplits):
            new = list(event.splits)
            twice = [split_id(*s.tp) for s in new if s.tp in self._offsets]
            if twice:  # the enumerator's bookkeeping broke: reading it again would duplicate records
                raise RuntimeError(f"KafkaSource subtask {self._env.subtask_index}: splits {twice} were assigned "
                                   "again while this reader has them")
            for split in new:
                self._offsets[split.tp], self._stops[split.tp] = split.start, split.stop
                if split.stop is not None and split.start >= split.stop:
                    self._finished.add(split.tp)
            log.info("KafkaSource subtask %d: assigned splits %s", self._env.subtask_index,
                     [split_id(*s.tp) for s in new])
            self._assign([s.tp for s in new])
        elif isinstance(event, NoMoreSplits):
            self._no_more_splits = True
        else:
            raise ValueError(f"KafkaSource reader: unexpected event {event!r}")

    def _assign(self, partitions: list[Partition]) -> None:
        todo = [ck.TopicPartition(t, p, self._offsets[(t, p)]) for t, p in partitions if (t, p) not in self._finished]
        if todo:
            self._consumer.incremental_assign(todo)
            self._added.extend(split_id(tp.topic, tp.partition) for tp in todo)

    # -- reading --------------------------------------------------------------------------------

    def poll(self) -> list[Any] | None:
        """One partition's records at a time (``batch_split`` names it): the source operator runs
        the WatermarkStrategy per partition."""
        if not self._pending:
            if self._no_more_splits and len(self._finished) == len(self._offsets):
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
        # A deserializer that reads the key too (the table connectors': key columns, upsert deletes)
        with_key = getattr(self._factory.deserializer, "deserialize_key_value", None)
        stop = self._stops.get(tp)
        for msg in messages:
            offset = msg.offset()
            if tp in self._finished or (stop is not None and offset >= stop):
                self._finish(tp)
                break
            try:
                value = with_key(msg.key(), msg.value()) if with_key is not None else deserialize(msg.value())
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

    def wait_hint_ms(self) -> int:
        return _IDLE_WAIT_MS

    # -- checkpoints ----------------------------------------------------------------------------

    def position(self) -> dict[str, Any]:
        return {split_id(t, p): [o, self._stops.get((t, p))] for (t, p), o in self._offsets.items()}

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
