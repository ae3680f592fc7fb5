"""The Kafka sink (Flink's KafkaSink), one subtask's writer, on librdkafka (confluent-kafka).

NONE: each record is produced as it comes; nothing is waited for, except that the end of a
bounded input flushes (as Flink's writer does), and a delivery error fails the task.

AT_LEAST_ONCE: as NONE, and at each checkpoint barrier the snapshot waits until every record
produced so far is acknowledged (a flush), so a completed checkpoint never covers an unwritten
record; a delivery error fails the task. A failover may write records again.

EXACTLY_ONCE: write-ahead, one Kafka transaction per checkpoint per subtask, committed when the
checkpoint completes. Flink keeps a transaction open per checkpoint interval and, on recovery,
commits a pre-committed one by setting the Java producer's producer id and epoch by reflection;
librdkafka has no way to resume another process's transaction, so this sink does not leave one
open across a checkpoint. Instead:

* records between two barriers are serialized and buffered in the task;
* at barrier ``n`` the buffer becomes checkpoint ``n``'s *pending batch*, which is part of the
  operator state: a completed checkpoint holds every record of it not yet known committed;
* when checkpoint ``n`` completes, the pending batches of checkpoints <= ``n`` are written, each
  in one transaction under transactional.id ``<prefix>-<subtask>`` (initializing it fences a
  zombie of an earlier attempt), and the same transaction commits a *marker*: the checkpoint id as
  the committed offset of partition 0 of each topic of the batch, for a consumer group named
  ``<transactional id>-<job id>`` (``send_offsets_to_transaction``, which tansu supports; the
  offsets become visible with the records, or not at all);
* a restore gets the pending batches of the restored checkpoint and, before the task runs,
  re-writes each one whose marker is below its checkpoint id (a batch whose transaction committed
  before the failure is skipped): no record is lost, none is written twice. Batches carry the
  transactional id and marker group they were written for, so a rescaled restore commits another
  subtask's batches under that subtask's id.

librdkafka's transactional calls (initializing, sending the marker, committing) time out with a
retriable error that says "retry call to resume": the writer resumes such a call (up to
``_RESUMES`` times, as Flink's committer retries a retriable commit, ``sink.committer.retries``)
while its task is not cancelled, rather than aborting and failing over. A broker that stalls for
longer than max.block.ms (a loaded machine) so costs a wait, not a failover that re-writes the batch
(an abort cannot even run while a commit is in flight: librdkafka refuses it, _CONFLICT). A commit
that fails for good is aborted; if the abort fails too, the failure says so: the transaction stays
open until the broker aborts it, and read_committed consumers of its partitions see nothing after it.

The job id is in the marker group because a new job with the same prefix starts its checkpoint
ids again at 1 and must not read an older job's markers as its own. Transactions are open only
while a commit runs: a kill -9 leaves a lingering transaction only if it lands inside a commit.
Kafka aborts such a transaction when the next producer with that id initializes; tansu (the
test broker) does not: it makes the lingering records readable instead
(tests/integration/test_kafka_broker.py), so on tansu that one batch would be seen twice.
Compared with Flink, records reach Kafka when their checkpoint completes, not as they come, and
the operator state holds one checkpoint interval's records. Without checkpointing, records are
held until the input ends and committed then (a bounded job's single transaction).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Optional

from millstream.runtime import operator_factories
from millstream.runtime.operators.base import OperatorContext, StreamOperator
from millstream.runtime.timestamps import timestamps_of

__all__ = ["KafkaSinkOperator", "PendingBatch", "PendingBatches", "already_committed"]

log = logging.getLogger(__name__)

_STATE_VERSION = 1
_RESUMES = 10  # a transactional call timed out (retriable): resumed this many times at most
KafkaRecord = tuple[str, Optional[bytes], bytes, Optional[int]]  # topic, key, value, timestamp (ms)
# Client properties a marker consumer shares with the producer (how to reach and log in to the cluster).
_CONNECTION_PREFIXES = ("bootstrap.servers", "security.", "sasl.", "ssl.", "client.id", "socket.", "broker.")


@dataclass(frozen=True)
class PendingBatch:
    """The records of one checkpoint interval of one writer, waiting for the checkpoint to complete."""

    checkpoint_id: int
    transactional_id: str
    marker_group: str
    records: tuple[KafkaRecord, ...]

    @property
    def topics(self) -> list[str]:
        return sorted({record[0] for record in self.records})

    def to_state(self) -> dict[str, Any]:
        return {"checkpoint_id": self.checkpoint_id, "transactional_id": self.transactional_id,
                "marker_group": self.marker_group, "records": list(self.records)}


class PendingBatches:
    """A writer's pending batches by (checkpoint id, transactional id); pure bookkeeping."""

    def __init__(self) -> None:
        self._batches: dict[tuple[int, str], PendingBatch] = {}

    def add(self, batch: PendingBatch) -> None:
        key = (batch.checkpoint_id, batch.transactional_id)
        if key in self._batches and self._batches[key] != batch:
            raise ValueError(f"two different pending batches of checkpoint {batch.checkpoint_id} for "
                             f"transactional id {batch.transactional_id!r}")
        self._batches[key] = batch

    def due(self, checkpoint_id: int) -> list[PendingBatch]:
        """The batches a completed checkpoint ``checkpoint_id`` makes committable, oldest first."""
        return [self._batches[k] for k in sorted(self._batches) if k[0] <= checkpoint_id]

    def remove(self, batch: PendingBatch) -> None:
        self._batches.pop((batch.checkpoint_id, batch.transactional_id), None)

    def __len__(self) -> int:
        return len(self._batches)

    def to_state(self) -> dict[str, Any]:
        return {"version": _STATE_VERSION, "pending": [self._batches[k].to_state() for k in sorted(self._batches)]}

    @staticmethod
    def from_state(state: Any) -> list[PendingBatch]:
        """The batches of a snapshot; ValueError naming what is wrong with an unreadable one."""
        if not isinstance(state, dict) or state.get("version") != _STATE_VERSION or not isinstance(state.get("pending"), list):
            raise ValueError(f"unreadable KafkaSink state: expected a dict with version {_STATE_VERSION} and a "
                             f"'pending' list, got {type(state).__name__}"
                             + (f" with version {state.get('version')!r}" if isinstance(state, dict) else ""))
        batches = []
        for entry in state["pending"]:
            try:
                records = tuple((str(t), None if k is None else bytes(k), bytes(v), None if ts is None else int(ts))
                                for t, k, v, ts in entry["records"])
                batches.append(PendingBatch(int(entry["checkpoint_id"]), str(entry["transactional_id"]),
                                            str(entry["marker_group"]), records))
            except (KeyError, TypeError, ValueError) as e:
                raise ValueError(f"unreadable KafkaSink pending batch {entry!r:.200}: {e}") from None
        return batches


def already_committed(checkpoint_id: int, markers: dict[str, Optional[int]]) -> bool:
    """Whether the transaction of a batch of ``checkpoint_id`` committed, from its marker group's
    committed offsets on its topics (None: no offset). Batches of one transactional id commit in
    checkpoint order, each setting the marker of every topic it wrote to its checkpoint id, so the
    batch committed exactly when a marker of one of its topics is at least its checkpoint id."""
    return any(m is not None and m >= checkpoint_id for m in markers.values())


class KafkaSinkOperator(StreamOperator):
    """One subtask of the KafkaSink (see the module doc for each delivery guarantee)."""

    def __init__(self, factory: operator_factories.KafkaSinkFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        self.f = factory
        self._config = dict(factory.producer_config)
        self._servers = self._config.get("bootstrap.servers", "")
        self._timeout_s = factory.max_block_ms / 1000
        self._serializer = factory.record_serializer
        self._guarantee = factory.delivery_guarantee
        self._exactly_once = self._guarantee == "EXACTLY_ONCE"
        self._checkpointing = bool(ctx.env.checkpointing_enabled)
        subtask = ctx.env.subtask_index
        self._transactional_id = f"{factory.transactional_id_prefix}-{subtask}"
        job = getattr(ctx.env, "job_id", "")
        self._marker_group = f"{self._transactional_id}-{job}" if job else self._transactional_id
        self._producer: Any = None  # NONE / AT_LEAST_ONCE: the one producer
        self._txn_producers: dict[str, Any] = {}  # EXACTLY_ONCE: transactional id -> initialized producer
        self._marker_consumers: dict[str, Any] = {}  # marker group -> consumer (offsets, group metadata)
        self._async_error: Optional[str] = None
        self._buffer: list[KafkaRecord] = []
        self._pending = PendingBatches()
        self._restored: list[PendingBatch] = []

    # -- opening ---------------------------------------------------------------------------------

    def open(self) -> None:
        import confluent_kafka  # lazy: only tasks that run a Kafka sink load the client library

        self._ck = confluent_kafka
        try:
            # EXACTLY_ONCE makes its transactional producers at commit time; this one checks the
            # configuration and the connection now, so a typo or a wrong address fails at the start.
            producer = confluent_kafka.Producer(self._config)
        except confluent_kafka.KafkaException as e:
            self.fail(ValueError(f"invalid Kafka producer configuration: {e}"), "opening its Kafka producer")
        self._check_reachable(producer)
        if not self._exactly_once:
            self._producer = producer
        if self._restored:
            self._commit_restored()
        super().open()

    def _check_reachable(self, client: Any) -> None:
        """Fails naming the bootstrap servers when no broker answers within max.block.ms (Java's
        producer waits that long for metadata before its first send fails)."""
        try:
            metadata = client.list_topics(timeout=self._timeout_s)
            if not metadata.brokers:
                raise RuntimeError("the cluster's metadata names no broker")
        except Exception as e:  # KafkaException(_TRANSPORT, _TIMED_OUT, ...)
            self.fail(ConnectionError(f"cannot reach the Kafka cluster at {self._servers} within "
                                      f"{self.f.max_block_ms} ms (max.block.ms): {e}"), "opening its Kafka producer")

    def _marker_consumer(self, group: str) -> Any:
        consumer = self._marker_consumers.get(group)
        if consumer is None:
            conf: dict[str, Any] = {k: v for k, v in self._config.items() if k.startswith(_CONNECTION_PREFIXES)}
            conf.update({"group.id": group, "enable.auto.commit": False})
            consumer = self._marker_consumers[group] = self._ck.Consumer(conf)
        return consumer

    # -- records ---------------------------------------------------------------------------------

    def process_batch(self, records: list[Any]) -> None:
        try:
            serialized = [self._serializer.serialize_record(r) for r in records]
        except Exception as e:
            self.fail(e, "serializing a record")
        # A record's event timestamp becomes the Kafka record's (none, or a negative one: the
        # broker's clock), as Flink's record serializer does.
        timestamps = timestamps_of(records) or [None] * len(records)
        batch = [(t, k, v, ts if ts is not None and ts >= 0 else None) for (t, k, v), ts in zip(serialized, timestamps)]
        if self._exactly_once:
            self._buffer.extend(batch)
            return
        for record in batch:
            self._produce(self._producer, record, self._on_delivery)
        self._producer.poll(0)
        self._raise_async_error()

    def _produce(self, producer: Any, record: KafkaRecord, callback: Any = None) -> None:
        topic, key, value, timestamp = record
        while True:
            try:
                if timestamp is None:
                    producer.produce(topic, value, key, on_delivery=callback)
                else:
                    producer.produce(topic, value, key, on_delivery=callback, timestamp=timestamp)
                return
            except BufferError:  # librdkafka's queue is full: serve deliveries, then try again
                producer.poll(0.05)
                self._raise_async_error()
            except Exception as e:
                self.fail(e, f"producing to topic {topic!r} at {self._servers}")

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None and self._async_error is None:
            self._async_error = f"delivering a record to topic {msg.topic()!r} at {self._servers}: {err.str()}"

    def _raise_async_error(self) -> None:
        if self._async_error is not None:
            self.fail(IOError(self._async_error), "writing to Kafka")

    def _flush_all(self) -> None:
        """Waits until every produced record is acknowledged (or failed: librdkafka fails a record
        after message.timeout.ms, so this ends); a failed one fails the task."""
        while self._producer.flush(1.0) > 0:
            self._raise_async_error()
        self._raise_async_error()

    def flush(self) -> None:
        if self._producer is not None:
            self._producer.poll(0)
            self._raise_async_error()

    def end_input(self) -> None:
        """Bounded input ended: every guarantee flushes (Flink's writer flushes at the end of input
        even with NONE). EXACTLY_ONCE keeps its buffer for the final checkpoint, or, without
        checkpointing, commits it now."""
        if self._exactly_once:
            if not self._checkpointing and self._buffer:
                batch = PendingBatch(0, self._transactional_id, self._marker_group, tuple(self._buffer))
                self._buffer = []
                self._commit(batch)
        else:
            self._flush_all()
        super().end_input()

    # -- checkpoints -----------------------------------------------------------------------------

    def snapshot_state(self, checkpoint_id: int) -> Any:
        if self._guarantee == "AT_LEAST_ONCE":
            self._flush_all()
        if not self._exactly_once:
            return None
        if self._buffer:
            self._pending.add(PendingBatch(checkpoint_id, self._transactional_id, self._marker_group,
                                           tuple(self._buffer)))
            self._buffer = []
        return self._pending.to_state()

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Commits the pending batches of checkpoints <= ``checkpoint_id`` (an earlier
        notification may have been lost), each in its own transaction."""
        if not self._exactly_once:
            return
        for batch in self._pending.due(checkpoint_id):
            self._commit(batch)
            self._pending.remove(batch)

    def has_uncommitted_output(self) -> bool:
        return self._exactly_once and self._checkpointing and bool(self._buffer or len(self._pending))

    def initialize_state(self, state: Any) -> None:
        """Takes the pending batches of a restored snapshot (called once per snapshot a rescaled
        restore assigns this subtask); ``open`` commits the ones not committed before."""
        if not self._exactly_once or state is None:
            return
        try:
            self._restored.extend(PendingBatches.from_state(state))
        except ValueError as e:
            self.fail(e, "restoring its state")

    def _commit_restored(self) -> None:
        """Re-writes each restored batch whose marker says its transaction did not commit. The
        transactional id is initialized first, so a zombie still holding it can no longer commit
        after the marker was read."""
        batches = sorted(self._restored, key=lambda b: (b.checkpoint_id, b.transactional_id))
        self._restored = []
        for batch in batches:
            self._transactional_producer(batch.transactional_id)
            if not already_committed(batch.checkpoint_id, self._markers(batch)):
                self._commit(batch)
        for tid in [t for t in self._txn_producers if t != self._transactional_id]:
            self._txn_producers.pop(tid).flush(self._timeout_s)  # another subtask's id: leave it to its owner

    def _markers(self, batch: PendingBatch) -> dict[str, Optional[int]]:
        consumer = self._marker_consumer(batch.marker_group)
        try:
            offsets = consumer.committed([self._ck.TopicPartition(t, 0) for t in batch.topics], timeout=self._timeout_s)
        except Exception as e:
            self.fail(e, f"reading the commit marker of checkpoint {batch.checkpoint_id} (group {batch.marker_group!r})")
        return {tp.topic: (tp.offset if tp.offset >= 0 else None) for tp in offsets}

    def _transactional_producer(self, transactional_id: str) -> Any:
        producer = self._txn_producers.get(transactional_id)
        if producer is None:
            try:
                producer = self._ck.Producer({**self._config, "transactional.id": transactional_id})
                self._resumed(producer.init_transactions, f"initializing transactional id {transactional_id!r}")
            except Exception as e:
                self.fail(e, f"initializing transactional id {transactional_id!r} at {self._servers}")
            self._txn_producers[transactional_id] = producer
        return producer

    def _commit(self, batch: PendingBatch) -> None:
        """One transaction: the batch's records and its marker, committed together."""
        if not batch.records:
            return
        producer = self._transactional_producer(batch.transactional_id)
        ck = self._ck
        what = f"checkpoint {batch.checkpoint_id}'s transaction (transactional id {batch.transactional_id!r})"
        try:
            producer.begin_transaction()
            for record in batch.records:
                self._produce(producer, record)
            marker = [ck.TopicPartition(t, 0, batch.checkpoint_id) for t in batch.topics]
            group = self._marker_consumer(batch.marker_group).consumer_group_metadata()
            self._resumed(lambda timeout: producer.send_offsets_to_transaction(marker, group, timeout),
                          f"sending the commit marker of {what}")
            self._resumed(producer.commit_transaction, f"committing {what}")
        except Exception as e:
            self._txn_producers.pop(batch.transactional_id, None)
            try:
                producer.abort_transaction(self._timeout_s)
                left = ""
            except Exception as abort_error:  # noqa: BLE001 - the commit's error is the one to report; say the abort's
                left = (f"; aborting it failed too ({abort_error}): the transaction stays open until the broker "
                        f"aborts it, and read_committed consumers of its partitions see nothing after it until then")
            self.fail(e, f"committing the records of checkpoint {batch.checkpoint_id} in a Kafka transaction "
                         f"(transactional id {batch.transactional_id!r}) at {self._servers}{left}")

    def _resumed(self, call: Callable[[float], Any], what: str) -> None:
        """``call(timeout_s)``, a transactional call of librdkafka, resumed after a retriable error
        (a timeout: "retry call to resume") up to ``_RESUMES`` times while the task is not cancelled;
        any other error (abortable, fatal, fenced), or the last retriable one, is raised."""
        for attempt in range(_RESUMES + 1):
            try:
                call(self._timeout_s)
                return
            except self._ck.KafkaException as e:
                error = e.args[0] if e.args else None
                retriable = (isinstance(error, self._ck.KafkaError) and error.retriable()
                             and not error.txn_requires_abort() and not error.fatal())
                if not retriable or attempt == _RESUMES or self.ctx.env.is_cancelled():
                    raise
                log.warning("%s at %s: %s; resuming it (%d/%d)", what, self._servers, error, attempt + 1, _RESUMES)

    def close(self) -> None:
        """Lets go of the clients; never commits. Records of NONE / AT_LEAST_ONCE not flushed yet
        (a cancelled task) are dropped, as a closed Java producer's."""
        for consumer in self._marker_consumers.values():
            try:
                consumer.close()
            except Exception:  # noqa: BLE001 - closing a consumer that never connected
                pass
        self._marker_consumers = {}
        self._txn_producers = {}
        self._producer = None
        super().close()
