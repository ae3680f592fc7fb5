"""KafkaSink writers against a real broker (tansu), driven directly
as a task drives it (barrier -> snapshot_state, completion -> notify_checkpoint_complete, a new
attempt -> initialize_state + open), so that each ordering of checkpoint, commit and failure is
produced on purpose rather than by chance:

* a failure after the checkpoint's transaction committed: the restored batch is not written again;
* a failure between the barrier and the completion notification: the restore writes the batch;
* a restore that is itself restored again (a failure during recovery) still writes nothing twice;
* a rescaled restore commits other subtasks' batches under their own transactional ids;
* a zombie writer of the failed attempt is fenced by the restore and cannot commit;
* a commit that times out while the broker stalls is resumed, not aborted into a failover;
* a record the broker refuses fails AT_LEAST_ONCE's snapshot (the barrier waits for every
  acknowledgement), NONE's end of input, and EXACTLY_ONCE's commit, naming topic and broker.

The job on a real cluster, failing mid-job, is in test_kafka_sink.py.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import uuid
from typing import Any, Iterator

import pytest

from millstream.common.serialization import SimpleStringSchema
from millstream.datastream import StreamExecutionEnvironment
from millstream.datastream.connectors.kafka import DeliveryGuarantee, KafkaRecordSerializationSchema, KafkaSink
from millstream.runtime.operators.base import OperatorError
from millstream.runtime.operators.kafka_sink import KafkaSinkOperator
from tests.unit.test_runtime_chain import make_chain, vertex

from .kafka import KafkaBroker, kafka_broker  # noqa: F401  (the module-scoped fixture)
from .test_kafka_sink import new_topic, read_topic, values

pytestmark = pytest.mark.timeout(120)
JOB = "5f" * 16


class Writers:
    """EXACTLY_ONCE KafkaSink subtasks of one job graph, built as a task builds them."""

    def __init__(self, broker: KafkaBroker, topic: str, parallelism: int, prefix: str,
                 guarantee: DeliveryGuarantee = DeliveryGuarantee.EXACTLY_ONCE, **properties: str) -> None:
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(parallelism)
        builder = (KafkaSink.builder().set_bootstrap_servers(broker.bootstrap_servers)
                .set_record_serializer(KafkaRecordSerializationSchema.builder().set_topic(topic)
                                       .set_value_serialization_schema(SimpleStringSchema()).build())
                .set_delivery_guarantee(guarantee).set_transactional_id_prefix(prefix)
                .set_property("max.block.ms", "10000"))
        for key, value in properties.items():
            builder.set_property(key, value)
        sink = builder.build()
        env.from_sequence(1, 2).sink_to(sink)
        self.vertex = vertex(env, "Sequence")

    def new(self, subtask: int = 0, *states: Any, checkpointing: bool = True) -> KafkaSinkOperator:
        run = make_chain(self.vertex, subtask, checkpointing_enabled=checkpointing, job_id=JOB)
        writer = run.chain.operators[-1]
        assert isinstance(writer, KafkaSinkOperator)
        _MADE.append(run.chain)  # before open: a failed open's clients are closed too
        for state in states:
            writer.initialize_state(state)
        run.chain.open()
        return writer


# Every chain a test made: closed after it, as a task closes its chain. A writer left open keeps its
# transactional producer and its marker consumer (held by the test's traceback or frames), which
# went on reconnecting and logging "Connection refused" for the rest of the run once this module's
# broker had stopped (rdkafka#producer-102 and #consumer-103 in a CI log).
_MADE: list[Any] = []


@pytest.fixture(autouse=True)
def _close_writers() -> Any:
    yield
    while _MADE:
        chain = _MADE.pop()
        try:
            chain.close()
        except Exception:  # noqa: BLE001 - a writer the test failed on purpose may fail closing too
            pass


@pytest.fixture
def topic(kafka_broker: KafkaBroker) -> str:
    return new_topic(kafka_broker, 1)


def committed(broker: KafkaBroker, topic: str, count: int) -> list[str]:
    return sorted(values(read_topic(broker, topic, lambda got: len(got) >= count, timeout_s=15)))


def test_a_batch_committed_before_the_failure_is_not_written_again(kafka_broker, topic) -> None:
    writers = Writers(kafka_broker, topic, 1, f"p-{topic}")
    first = writers.new()
    first.process_batch(["a", "b"])
    state = first.snapshot_state(1)
    first.notify_checkpoint_complete(1)  # committed; then the task fails (no close)
    second = writers.new(0, state)  # restored from checkpoint 1, whose state still holds the batch
    second.process_batch(["c"])
    second.snapshot_state(2)
    second.notify_checkpoint_complete(2)
    assert committed(kafka_broker, topic, 3) == ["a", "b", "c"]


def test_a_batch_whose_checkpoint_completed_without_notification_is_written_by_the_restore(kafka_broker, topic) -> None:
    writers = Writers(kafka_broker, topic, 1, f"p-{topic}")
    first = writers.new()
    first.process_batch(["a", "b"])
    state = first.snapshot_state(1)
    assert read_topic(kafka_broker, topic, lambda got: False, timeout_s=1.0) == []  # nothing before completion
    writers.new(0, state)  # checkpoint 1 completed, the notification was lost in the failure
    assert committed(kafka_broker, topic, 2) == ["a", "b"]


def test_restoring_the_same_checkpoint_twice_writes_its_batches_once(kafka_broker, topic) -> None:
    writers = Writers(kafka_broker, topic, 1, f"p-{topic}")
    first = writers.new()
    first.process_batch(["a"])
    first.snapshot_state(1)
    first.process_batch(["b"])
    state = first.snapshot_state(2)  # batches of checkpoints 1 and 2, neither notified
    first.notify_checkpoint_complete(1)  # 1 committed, then the failure
    writers.new(0, state)  # commits batch 2, skips batch 1
    writers.new(0, state)  # the recovered attempt fails too: nothing is written again
    assert committed(kafka_broker, topic, 2) == ["a", "b"]


def test_a_rescaled_restore_commits_each_old_subtasks_batch_once(kafka_broker, topic) -> None:
    prefix = f"p-{topic}"
    old = Writers(kafka_broker, topic, 2, prefix)
    w0, w1 = old.new(0), old.new(1)
    w0.process_batch(["a0", "b0"])
    w1.process_batch(["a1"])
    s0, s1 = w0.snapshot_state(1), w1.snapshot_state(1)
    w0.notify_checkpoint_complete(1)  # subtask 0 committed, subtask 1 had not when the job failed
    assert [b["transactional_id"] for b in s1["pending"]] == [f"{prefix}-1"]
    Writers(kafka_broker, topic, 1, prefix).new(0, s0, s1)  # parallelism 1 takes both states
    assert committed(kafka_broker, topic, 3) == ["a0", "a1", "b0"]


def test_a_zombie_writer_of_the_failed_attempt_is_fenced_by_the_restore(kafka_broker, topic) -> None:
    writers = Writers(kafka_broker, topic, 1, f"p-{topic}")
    zombie = writers.new()
    zombie.process_batch(["a"])
    state = zombie.snapshot_state(1)
    zombie.notify_checkpoint_complete(1)  # its producer holds the transactional id now
    zombie.process_batch(["late"])
    zombie.snapshot_state(2)  # checkpoint 2 never completes: the job failed over to checkpoint 1
    writers.new(0, state)  # the new attempt initializes the transactional id
    with pytest.raises(OperatorError, match="committing the records of checkpoint 2"):
        zombie.notify_checkpoint_complete(2)  # a stale notification reaching the zombie
    assert committed(kafka_broker, topic, 1) == ["a"]


@contextlib.contextmanager
def stalled(broker: KafkaBroker, seconds: float) -> Iterator[None]:
    """The broker stops answering (SIGSTOP of its process group) for ``seconds``, from now."""
    assert broker.proc is not None
    pgid = broker.proc.pid
    resume = threading.Timer(seconds, os.killpg, args=(pgid, signal.SIGCONT))
    os.killpg(pgid, signal.SIGSTOP)
    resume.start()
    try:
        yield
    finally:
        resume.cancel()
        os.killpg(pgid, signal.SIGCONT)


def test_a_commit_that_times_out_while_the_broker_stalls_is_resumed_not_failed(kafka_broker, topic) -> None:
    """librdkafka's transactional calls time out with a retriable error ("retry call to resume").
    The writer resumes them (as Flink's committer retries a retriable commit) rather than aborting
    into a failover: an abort cannot even run while the commit is in flight (_CONFLICT), so the
    task failed with the transaction open, and the restore wrote the batch again behind it. On a
    broker that never aborts that transaction (tansu), read_committed consumers then saw nothing
    after it (the CI failure of test_kafka_sink's savepoint test had this signature)."""
    writers = Writers(kafka_broker, topic, 1, f"p-{topic}", **{"max.block.ms": "1000"})
    writer = writers.new()
    writer.process_batch(["a"])
    writer.snapshot_state(1)
    writer.notify_checkpoint_complete(1)  # the transactional producer is initialized now
    writer.process_batch(["b", "c"])
    writer.snapshot_state(2)
    with stalled(kafka_broker, 2.5):  # longer than max.block.ms: the commit's calls time out
        writer.notify_checkpoint_complete(2)
    assert committed(kafka_broker, topic, 3) == ["a", "b", "c"]
    assert not writer.has_uncommitted_output()


def test_without_checkpointing_the_records_are_committed_when_the_input_ends(kafka_broker, topic) -> None:
    writer = Writers(kafka_broker, topic, 1, f"p-{topic}").new(checkpointing=False)
    writer.process_batch(["a", "b"])
    assert not writer.has_uncommitted_output()  # no checkpoint will come: the task need not wait for one
    assert read_topic(kafka_broker, topic, lambda got: False, timeout_s=1.0) == []
    writer.end_input()
    assert committed(kafka_broker, topic, 2) == ["a", "b"]


def test_a_property_librdkafka_does_not_know_fails_the_opening_naming_it(kafka_broker, topic) -> None:
    writers = Writers(kafka_broker, topic, 1, f"p-{topic}", **{"no.such.property": "1"})
    with pytest.raises(OperatorError, match="no.such.property"):
        writers.new()


BAD_TOPIC = "bad/topic"  # a name the broker refuses: the delivery fails asynchronously


@pytest.mark.parametrize("guarantee", [DeliveryGuarantee.AT_LEAST_ONCE, DeliveryGuarantee.NONE,
                                       DeliveryGuarantee.EXACTLY_ONCE])
def test_a_record_the_broker_refuses_fails_the_writer_naming_topic_and_broker(kafka_broker, guarantee) -> None:
    writer = Writers(kafka_broker, BAD_TOPIC, 1, "p-bad", guarantee).new()
    writer.process_batch(["a"])
    with pytest.raises(OperatorError) as failure:
        if guarantee is DeliveryGuarantee.AT_LEAST_ONCE:
            writer.snapshot_state(1)
        elif guarantee is DeliveryGuarantee.NONE:
            writer.end_input()
        else:
            writer.snapshot_state(1)
            writer.notify_checkpoint_complete(1)
    message = str(failure.value)
    assert kafka_broker.bootstrap_servers in message, message
    if guarantee is not DeliveryGuarantee.EXACTLY_ONCE:  # the transaction's error names no topic
        assert BAD_TOPIC in message and "Invalid topic" in message, message
