"""A task's side of a checkpoint: flush, forward the barrier behind the records, snapshot, write
off the task thread, ack in order; restore puts keyed state and source positions back."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from millstream.datastream import StreamExecutionEnvironment
from millstream.runtime.checkpoint_storage import checkpoint_directory
from millstream.runtime.task.barrier_handler import CancelCheckpointMarker, CheckpointBarrier
from millstream.runtime.task.checkpointing import TaskCheckpointer
from millstream.runtime.task.environment import SimpleTaskEnvironment
from millstream.runtime.task.worker_events import CheckpointAcknowledged, CheckpointDeclined
from tests.unit.test_runtime_chain import make_chain, vertex

JOB = b"j" * 16


class Harness:
    def __init__(self, run: Any, directory: Path) -> None:
        self.run = run
        self.sent: list[Any] = []
        self.events: list[tuple[Any, int]] = []  # (event, records written before it)
        self.checkpointer = TaskCheckpointer(run.chain, self._broadcast, str(directory), JOB, self.sent.append)

    def _broadcast(self, event: Any) -> None:
        self.events.append((event, len(self.run.written())))

    def acks(self) -> list[Any]:
        self.checkpointer.close()
        return self.sent


def keyed_counts(env: StreamExecutionEnvironment) -> Any:
    env.set_parallelism(1)
    env.from_collection(["a"]).key_by(lambda w: w).map(lambda w: (w, 1)).key_by(lambda t: t[0]) \
        .reduce(lambda a, b: (a[0], a[1] + b[1])).map(lambda t: t).rebalance().print()
    return vertex(env, "Reduce")


def test_a_snapshot_forwards_the_barrier_behind_the_records_and_restores_the_keyed_state(tmp_path: Path) -> None:
    v = keyed_counts(StreamExecutionEnvironment.get_execution_environment())
    first = Harness(make_chain(v), tmp_path)
    first.run.chain.open()
    head = first.run.chain.head.ctx.node_id
    first.run.chain.process_batch([("a", 1), ("b", 1), ("a", 1)], head)
    first.checkpointer.checkpoint(CheckpointBarrier(3, 0))
    first.run.chain.process_batch([("a", 1)], head)  # after the barrier: not in checkpoint 3
    [ack] = first.acks()
    assert type(ack) is CheckpointAcknowledged and ack.checkpoint_id == 3 and ack.state_size > 0
    path, size = ack.state_path, ack.state_size
    assert Path(path).parent == checkpoint_directory(tmp_path, JOB, 3)
    assert first.events == [(CheckpointBarrier(3, 0), 3)]  # flushed first: three records, then the barrier

    second = Harness(make_chain(v), tmp_path)
    second.checkpointer.restore(3, path, size)
    second.run.chain.open()
    second.run.chain.process_batch([("a", 1), ("b", 1)], head)
    assert second.run.written() == [("a", 3), ("b", 2)]  # counting goes on from the snapshot


def test_a_task_without_state_acks_without_a_file_and_old_barriers_are_ignored(tmp_path: Path) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.from_collection([1]).rebalance().map(lambda x: x + 1).map(str)
    h = Harness(make_chain(vertex(env, "Map")), tmp_path)
    h.run.chain.open()
    h.checkpointer.checkpoint(CheckpointBarrier(5, 0))
    h.checkpointer.checkpoint(CheckpointBarrier(4, 0))  # older than the last one: never snapshotted
    h.checkpointer.checkpoint(CheckpointBarrier(5, 0))  # the same id again: once only
    [ack] = h.acks()
    assert type(ack) is CheckpointAcknowledged and (ack.checkpoint_id, ack.state_path, ack.state_size) == (5, "", 0)
    assert ack.async_ms == 0  # nothing written
    assert not any(tmp_path.iterdir())


def test_an_ack_carries_the_alignment_the_start_delay_and_the_written_size(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """Flink's CheckpointMetrics in the ack: alignment from the first barrier to the snapshot, the
    start delay from the trigger (the barrier's wall-clock timestamp) to the first barrier, and
    the size of the state file the task wrote."""
    from millstream.runtime.task import checkpointing

    clock = {"mono": 100.0, "wall": 50_000.0}
    monkeypatch.setattr(checkpointing.time, "monotonic", lambda: clock["mono"])
    monkeypatch.setattr(checkpointing.time, "time", lambda: clock["wall"])
    v = keyed_counts(StreamExecutionEnvironment.get_execution_environment())
    h = Harness(make_chain(v), tmp_path)
    h.run.chain.open()
    h.run.chain.process_batch([("a", 1), ("b", 1)], h.run.chain.head.ctx.node_id)
    barrier = CheckpointBarrier(7, 50_000_000 - 1_250)  # triggered 1.25 s before it arrives
    h.checkpointer.barrier_arrived(barrier)
    clock["mono"] += 0.4  # the other inputs' barriers come 400 ms later
    h.checkpointer.barrier_arrived(barrier)  # not the first: changes nothing
    h.checkpointer.checkpoint(barrier)
    [ack] = h.acks()
    assert (ack.alignment_ms, ack.start_delay_ms) == (400, 1_250)
    assert ack.state_size == Path(ack.state_path).stat().st_size > 0
    assert ack.sync_ms == ack.async_ms == 0  # the clock stood still while it snapshotted and wrote


def test_a_failing_write_declines_and_an_abort_sends_a_cancel_marker(tmp_path: Path) -> None:
    v = keyed_counts(StreamExecutionEnvironment.get_execution_environment())
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the checkpoint directory should be")
    h = Harness(make_chain(v), blocked)
    h.run.chain.open()
    h.run.chain.process_batch([("a", 1)], h.run.chain.head.ctx.node_id)
    h.checkpointer.checkpoint(CheckpointBarrier(1, 0))
    h.checkpointer.abort(2, "CHECKPOINT_DECLINED_SUBSUMED")
    sent = h.acks()
    assert [(type(m), m.checkpoint_id, m.reason) for m in sent] == [
        (CheckpointDeclined, 1, "CHECKPOINT_ASYNC_EXCEPTION"), (CheckpointDeclined, 2, "CHECKPOINT_DECLINED_SUBSUMED")]
    assert [e for e, _ in h.events] == [CheckpointBarrier(1, 0), CancelCheckpointMarker(2)]


def test_source_positions_are_restored(tmp_path: Path) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.from_sequence(1, 10_000).map(lambda x: x)
    v = vertex(env, "Sequence")
    first = Harness(make_chain(v, source_batch_size=100), tmp_path)
    first.run.chain.open()
    reader = first.run.chain.head.reader
    for _ in range(3):
        first.run.chain.head.output(reader.poll())
    first.checkpointer.checkpoint(CheckpointBarrier(1, 0))
    [ack] = first.acks()
    path, size = ack.state_path, ack.state_size
    second = Harness(make_chain(v, source_batch_size=100), tmp_path)
    second.checkpointer.restore(1, path, size)
    second.run.chain.open()
    assert second.run.chain.head.reader.poll()[0] == 301  # resumes after the 300 records before the barrier


def test_every_decline_reason_a_task_sends_is_one_the_coordinator_knows() -> None:
    import inspect

    from millstream.jobmanager.checkpoint.coordinator import CheckpointFailureReason
    from millstream.runtime.task import checkpointing
    from millstream.runtime.task.barrier_handler import AbortReason
    from millstream.taskmanager import task_body

    sent = {r.value for r in AbortReason}
    for module in (checkpointing, task_body):
        sent |= set(re.findall(r'"(CHECKPOINT_[A-Z_]+)"', inspect.getsource(module)))
    assert sent and sent <= {r.value for r in CheckpointFailureReason}
    assert not CheckpointFailureReason("CHECKPOINT_DECLINED_SUBSUMED").counts_against_tolerance
    assert not CheckpointFailureReason("CHECKPOINT_DECLINED_TASK_CLOSING").counts_against_tolerance


def test_a_stop_savepoint_is_awaited_until_its_outcome_completed_stops_aborted_goes_on(tmp_path: Path) -> None:
    """Flink's synchronous savepoint, a task's side: after snapshotting a stop barrier the task
    knows its outcome is pending; a completion means stop (no end of input), an abort go on."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.from_collection([1]).rebalance().map(lambda x: x + 1).map(str)
    h = Harness(make_chain(vertex(env, "Map")), tmp_path)
    h.run.chain.open()
    h.checkpointer.checkpoint(CheckpointBarrier(1, 0))
    assert h.checkpointer.stop_savepoint is None  # a checkpoint is not waited for
    h.checkpointer.checkpoint(CheckpointBarrier(2, 0, stop=True))
    assert h.checkpointer.stop_savepoint == 2 and not h.checkpointer.stopped
    h.checkpointer.notify(1, aborted=False)  # an older one: still waiting
    assert h.checkpointer.stop_savepoint == 2
    h.checkpointer.notify(2, aborted=True)
    assert h.checkpointer.stop_savepoint is None and not h.checkpointer.stopped  # the stop failed: go on
    h.checkpointer.checkpoint(CheckpointBarrier(3, 0, stop=True))
    h.checkpointer.notify(3, aborted=False)
    assert h.checkpointer.stopped and not h.checkpointer.input_ended  # no drain: no end of input
    assert [e for e, _ in h.events][-1] == CheckpointBarrier(3, 0, stop=True)  # forwarded as a stop


def test_a_drain_barrier_ends_the_input_before_the_snapshot_once(tmp_path: Path) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.from_collection([1]).rebalance().map(lambda x: x + 1).map(str)
    h = Harness(make_chain(vertex(env, "Map")), tmp_path)
    h.run.chain.open()
    ended: list[int] = []
    h.run.chain.end_input = lambda: ended.append(1)  # type: ignore[method-assign]
    h.checkpointer.checkpoint(CheckpointBarrier(1, 0, stop=True, drain=True))
    assert ended == [1] and h.checkpointer.input_ended and h.checkpointer.stop_savepoint == 1
    h.checkpointer.notify(1, aborted=True)
    h.checkpointer.checkpoint(CheckpointBarrier(2, 0, stop=True, drain=True))
    assert ended == [1]  # never twice


class Inbox:
    """A worker channel's control side: queued messages, then nothing (never cancelled)."""

    def __init__(self, *messages: Any) -> None:
        self.messages = list(messages)
        self.waits = 0

    def recv_nowait(self) -> Any:
        return self.messages.pop(0) if self.messages else None

    def wait_cancelled(self, timeout: float) -> bool:
        self.waits += 1
        assert self.waits < 1000, "waited for an outcome that was never sent"
        return False


def test_a_source_stops_emitting_at_a_stop_savepoint_until_its_outcome(tmp_path: Path) -> None:
    """The control's poll (a source's housekeeping between batches) returns only with the stop
    savepoint's outcome: completed ends the task loop (StoppedWithSavepoint), aborted lets it go on."""
    import pytest

    from millstream.runtime.task.worker_events import NotifyCheckpoint, TriggerCheckpoint
    from millstream.taskmanager.task_body import CheckpointControl, StoppedWithSavepoint

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.from_collection([1]).rebalance().map(lambda x: x + 1).map(str)
    h = Harness(make_chain(vertex(env, "Map")), tmp_path)
    h.run.chain.open()
    aborted = Inbox(TriggerCheckpoint(1, 0, True, False), NotifyCheckpoint(1, True))
    CheckpointControl(aborted, h.checkpointer, is_source=True).poll()  # returns: the job goes on
    assert not h.checkpointer.stopped and aborted.messages == []
    late = Inbox(TriggerCheckpoint(2, 0, True, False))
    control = CheckpointControl(late, h.checkpointer, is_source=True)
    late.wait_cancelled = lambda timeout: bool(late.messages.append(NotifyCheckpoint(2, False)))  # type: ignore[method-assign]
    with pytest.raises(StoppedWithSavepoint):
        control.poll()  # waited for the notification that came later
    assert h.checkpointer.stopped
    assert [e for e, _ in h.events] == [CheckpointBarrier(1, 0, stop=True), CheckpointBarrier(2, 0, stop=True)]


def test_operator_events_reach_the_reader_in_order_with_the_checkpoint_triggers(tmp_path: Path) -> None:
    """A split assigned before the coordinator's snapshot comes before the barrier: the control
    delivers the channel's messages in order, and events without checkpointing too."""
    from millstream.runtime.task.worker_events import OperatorEventDelivered, TriggerCheckpoint
    from millstream.taskmanager.task_body import CheckpointControl

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.from_collection([1]).rebalance().map(lambda x: x + 1).map(str)
    h = Harness(make_chain(vertex(env, "Map")), tmp_path)
    h.run.chain.open()
    seen: list[Any] = []
    task_env = SimpleTaskEnvironment(operator_event_handler=lambda p: seen.append((p, len(h.events))))
    inbox = Inbox(OperatorEventDelivered(b"before"), TriggerCheckpoint(1, 0, False, False), OperatorEventDelivered(b"after"))
    CheckpointControl(inbox, h.checkpointer, True, task_env).poll()
    assert seen == [(b"before", 0), (b"after", 1)]  # the barrier went out between the two
    no_checkpoints = Inbox(OperatorEventDelivered(b"x"))
    CheckpointControl(no_checkpoints, None, True, task_env).poll()
    assert seen[-1][0] == b"x"
