"""Full checkpoints of the RocksDB backend (Flink's RocksFullSnapshotStrategy): the task thread
takes a RocksDB snapshot and goes on; the writer thread reads the state as of that snapshot, however
the task changes it meanwhile; nothing is flushed or written on the task thread; a task closed
before its snapshot was read declines that checkpoint instead of reading a closed instance.

A real chain (a keyed reduce on RocksDB) and TaskCheckpointer; the writer thread is held with a task
queued ahead of the write where a test needs the gap between the two halves of a snapshot.
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from millstream.runtime.state.rocksdb_views import PinnedViews, ViewsReleased
from millstream.runtime.task.barrier_handler import CheckpointBarrier
from millstream.runtime.task.worker_events import CheckpointAcknowledged, CheckpointDeclined
from tests.unit.test_rocksdb_incremental import Task, reduce_vertex


def full_task(tmp: Path) -> Task:
    task = Task(reduce_vertex(), tmp, incremental=False)
    task.run.chain.open()
    return task


def hold_writer(task: Task) -> threading.Event:
    """Keeps the task's writer thread busy until the event is set: what the barrier queues waits."""
    release = threading.Event()
    task.checkpointer._writer.submit(release.wait, 30)
    return release


def local_files(task: Task) -> set[str]:
    """Every file of the task's RocksDB directory and anything next to it (a checkpoint's hard links)."""
    db = task.run.chain.backend_factory.db
    parent = os.path.dirname(db.path)
    return {os.path.relpath(os.path.join(d, f), parent) for d, _, files in os.walk(parent) for f in files} | set(os.listdir(parent))


def restored_state(tmp: Path, ack: CheckpointAcknowledged, backend: str = "rocksdb") -> dict[Any, Any]:
    other = Task(reduce_vertex(), tmp, backend=backend)
    other.checkpointer.restore(ack.checkpoint_id, ack.state_path, ack.state_size)
    other.run.chain.open()
    try:
        return other.state()
    finally:
        other.run.chain.close()


def test_the_task_thread_writes_no_file_and_flushes_no_memtable(tmp_path: Path) -> None:
    """Flink's full snapshot reads a RocksDB snapshot: no flush, no hard links. Before, each full
    checkpoint flushed the memtables into a new SST file and hard-linked a checkpoint directory."""
    task = full_task(tmp_path)
    task.feed([(f"k{i}", 1) for i in range(2_000)])
    before = local_files(task)
    release = hold_writer(task)
    task.checkpointer.checkpoint(CheckpointBarrier(1, 0))
    assert local_files(task) == before  # the synchronous part is done: no SST, no checkpoint directory
    release.set()
    task.checkpointer._writer.submit(lambda: None).result()
    (ack,) = task.sent
    assert type(ack) is CheckpointAcknowledged
    assert local_files(task) == before  # nor did the writer thread write anything locally
    assert restored_state(tmp_path, ack) == {f"k{i}": (f"k{i}", 1) for i in range(2_000)}
    task.run.chain.close()


def test_the_checkpoint_holds_the_state_of_its_barrier_whatever_the_task_does_before_it_is_read(tmp_path: Path) -> None:
    task = full_task(tmp_path)
    task.feed([(f"k{i}", 1) for i in range(3_000)])
    release = hold_writer(task)
    task.checkpointer.checkpoint(CheckpointBarrier(1, 0))
    # After the barrier: every key updated (written back past the loan cache), new keys, a flush and
    # a compaction that rewrite the files the snapshot's rows were in.
    task.feed([(f"k{i}", 1) for i in range(6_000)])
    (backend,) = task.run.chain.keyed_state_backends().values()
    backend.flush()
    db = task.run.chain.backend_factory.db
    db.flush()
    for cf in list(db._cfs.values()):
        cf.compact_range(None, None)
    release.set()
    task.checkpointer._writer.submit(lambda: None).result()
    (ack,) = task.sent
    after = task.state()
    task.run.chain.close()
    assert after == {f"k{i}": (f"k{i}", 2 if i < 3_000 else 1) for i in range(6_000)}
    expected = {f"k{i}": (f"k{i}", 1) for i in range(3_000)}
    assert restored_state(tmp_path, ack) == expected
    assert restored_state(tmp_path, ack, backend="hashmap") == expected


def test_a_task_closed_before_its_snapshot_is_read_declines_it(tmp_path: Path) -> None:
    """A failing or cancelled task closes its chain at once (a task that ends normally first waits
    for its snapshots in flight, task_body): the unread snapshot is declined, not read from a closed
    instance or its deleted files."""
    task = full_task(tmp_path)
    task.feed([(f"k{i}", 1) for i in range(500)])
    release = hold_writer(task)
    task.checkpointer.checkpoint(CheckpointBarrier(1, 0))
    db_path = task.run.chain.backend_factory.db.path
    task.run.chain.close()  # the instance closes (and its directory goes) with the snapshot unread
    assert not os.path.exists(db_path)
    release.set()
    task.checkpointer.close()
    (declined,) = task.sent
    assert type(declined) is CheckpointDeclined and declined.checkpoint_id == 1
    assert "closed before its snapshot was read" in declined.message


def test_closing_waits_for_a_read_in_progress_and_stops_later_ones() -> None:
    views = PinnedViews()
    first, second = views.pin({"cf": object()}), views.pin({"cf": object()})
    entered, leave, closed = threading.Event(), threading.Event(), threading.Event()

    def read() -> None:
        with views.reading(first):
            entered.set()
            leave.wait(10)

    reader = threading.Thread(target=read)
    reader.start()
    assert entered.wait(10)
    closer = threading.Thread(target=lambda: (views.close(), closed.set()))
    closer.start()
    time.sleep(0.2)
    assert not closed.is_set() and views.closed  # waiting for the read, which sees it should stop
    leave.set()
    assert closed.wait(10)
    reader.join()
    closer.join()
    try:
        with views.reading(second):
            raise AssertionError("a view dropped at close was read")
    except ViewsReleased as exc:
        assert "closed before its snapshot was read" in str(exc)
    assert views.held() == 0
