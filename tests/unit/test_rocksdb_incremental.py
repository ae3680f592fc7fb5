"""Incremental checkpoints of the RocksDB backend (Flink's RocksIncrementalSnapshotStrategy and
SharedStateRegistry): a checkpoint uploads only the SST files new since the last completed one,
shared files are counted across the retained checkpoints and deleted once none references them,
savepoints stay canonical, and a restore (also rescaled, also onto the heap) reads the files back.

A real chain, TaskCheckpointer and CompletedCheckpointStore on the local disk; the JobManager's part
(complete, notify) is played by the test in the coordinator's order.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from millstream.datastream import StreamExecutionEnvironment
from millstream.runtime.checkpoint_storage import (SHARED_DIR, CheckpointStorageError, CompletedCheckpointStore,
                                                   FileStateHandle)
from millstream.runtime.keygroups import compute_key_group_range_for_operator_index
from millstream.runtime.task.barrier_handler import CheckpointBarrier
from millstream.runtime.task.checkpointing import TaskCheckpointer
from millstream.runtime.task.worker_events import CheckpointAcknowledged
from tests.unit.test_runtime_chain import make_chain, vertex

JOB = b"r" * 16


def reduce_vertex(parallelism: int = 1) -> Any:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.from_collection([("a", 1)]).key_by(lambda t: t[0]).reduce(lambda a, b: (a[0], a[1] + b[1])).print()
    return vertex(env, "Reduce")


class Task:
    """One subtask of the keyed reduce on RocksDB, with its checkpointer."""

    def __init__(self, v: Any, tmp: Path, incremental: bool = True, backend: str = "rocksdb", subtask: int = 0,
                 parallelism: int = 1) -> None:
        params = {"state.backend.type": backend, "state.backend.rocksdb.localdir": str(tmp / "local"),
                  "execution.checkpointing.incremental": "true" if incremental else "false"}
        self.run = make_chain(v, subtask, parallelism=parallelism, job_parameters=params,
                              key_group_range=compute_key_group_range_for_operator_index(
                                  v.max_parallelism, parallelism, subtask))
        self.sent: list[Any] = []
        self.checkpointer = TaskCheckpointer(self.run.chain, lambda e: None, str(tmp / "checkpoints"), JOB,
                                             self.sent.append)
        self.head = self.run.chain.head.ctx.node_id

    def feed(self, records: list[Any]) -> None:
        self.run.chain.process_batch(records, self.head)

    def checkpoint(self, n: int, savepoint: bool = False) -> CheckpointAcknowledged:
        self.checkpointer.checkpoint(CheckpointBarrier(n, 0, savepoint=savepoint))
        self.checkpointer._writer.submit(lambda: None).result()  # the upload is done
        ack = self.sent[-1]
        assert type(ack) is CheckpointAcknowledged and ack.checkpoint_id == n, ack
        return ack

    def state(self) -> dict[Any, Any]:
        (backend,) = self.run.chain.keyed_state_backends().values()
        return backend.entries("_op_state")


def complete(store: CompletedCheckpointStore, task: Task, ack: CheckpointAcknowledged) -> None:
    store.add_checkpoint(ack.checkpoint_id, 0.0, {"t": FileStateHandle(ack.state_path, ack.state_size)})
    task.checkpointer.notify(ack.checkpoint_id, aborted=False)


def shared_files(tmp: Path) -> set[str]:
    d = tmp / "checkpoints" / JOB.hex() / SHARED_DIR
    return {p.name for p in d.iterdir()} if d.is_dir() else set()


def test_fifty_checkpoints_upload_only_new_files_and_leave_no_orphans(tmp_path: Path) -> None:
    task = Task(reduce_vertex(), tmp_path)
    task.run.chain.open()
    store = CompletedCheckpointStore(tmp_path / "checkpoints", JOB, num_retained=3)
    uploads, new_ssts, previous, referenced_total = [], [], {}, 0
    references: dict[int, set[str]] = {}  # checkpoint id -> the shared files it references, seen while retained
    for n in range(1, 51):
        before = shared_files(tmp_path)
        if n % 10 != 5:  # some checkpoints come after no writes at all
            task.feed([(f"k{i}", 1) for i in range(n * 40, n * 40 + 200)])
        complete(store, task, task.checkpoint(n))
        current = task.run.chain.backend_factory.reusable  # local SST -> shared file, of checkpoint n
        uploads.append(len(shared_files(tmp_path) - before))
        new_ssts.append(len(set(current) - set(previous)))
        referenced_total += len(current)
        assert all(current[sst] == previous[sst] for sst in set(current) & set(previous))  # referenced, not copied
        previous = current
        for c in store.checkpoints:
            references[c.checkpoint_id] = store.shared_references(c.directory)
        retained = [c.checkpoint_id for c in store.checkpoints]
        referenced = set().union(*(references[i] for i in retained))
        # the checkpoint subsumed last keeps its files one subsumption longer: a task may still base
        # an incremental checkpoint on it until it hears of the newer one
        subsumed = max((i for i in references if i < retained[0]), default=None)
        if subsumed is not None:
            referenced |= references[subsumed]
        assert shared_files(tmp_path) == referenced, f"checkpoint {n}: orphans or missing shared files"
    assert [c.checkpoint_id for c in store.checkpoints] == [48, 49, 50]
    assert uploads == new_ssts  # exactly the SST files new since the last completed checkpoint
    assert sum(uploads) < referenced_total / 2  # most files of a checkpoint were uploaded before
    expected = task.state()
    task.run.chain.close()

    ack = task.sent[-1]
    restored = Task(reduce_vertex(), tmp_path)
    restored.checkpointer.restore(50, ack.state_path, ack.state_size)
    restored.run.chain.open()
    assert restored.state() == expected and len(expected) == 50 * 40 + 160


def test_a_savepoint_is_canonical_and_restores_on_the_heap(tmp_path: Path) -> None:
    task = Task(reduce_vertex(), tmp_path)
    task.run.chain.open()
    task.feed([("a", 1), ("b", 1), ("a", 1)])
    ack = task.checkpoint(1, savepoint=True)
    assert not os.path.exists(ack.state_path + ".shared.json") and not shared_files(tmp_path)
    heap = Task(reduce_vertex(), tmp_path, backend="hashmap")
    heap.checkpointer.restore(1, ack.state_path, ack.state_size)
    heap.run.chain.open()
    assert heap.state() == {"a": ("a", 2), "b": ("b", 1)}


def test_an_incremental_checkpoint_restores_rescaled_onto_either_backend(tmp_path: Path) -> None:
    task = Task(reduce_vertex(), tmp_path)
    task.run.chain.open()
    task.feed([(f"k{i}", 1) for i in range(500)])
    store = CompletedCheckpointStore(tmp_path / "checkpoints", JOB, num_retained=1)
    complete(store, task, task.checkpoint(1))
    task.feed([(f"k{i}", 1) for i in range(250)])
    ack = task.checkpoint(2)
    complete(store, task, ack)
    seen: dict[Any, Any] = {}
    for subtask, backend in ((0, "hashmap"), (1, "rocksdb")):
        part = Task(reduce_vertex(2), tmp_path, backend=backend, subtask=subtask, parallelism=2)
        part.checkpointer.restore_rescaled(2, [(0, ack.state_path, ack.state_size, subtask == 0)])
        part.run.chain.open()
        state = part.state()
        (b,) = part.run.chain.keyed_state_backends().values()
        assert state and all(b.key_group_range.contains(b.key_group_of(k)) for k in state)
        seen.update(state)
    assert seen == {f"k{i}": (f"k{i}", 2 if i < 250 else 1) for i in range(500)}


def test_a_missing_shared_file_is_named_on_restore_and_at_completion(tmp_path: Path) -> None:
    task = Task(reduce_vertex(), tmp_path)
    task.run.chain.open()
    task.feed([("a", 1)])
    ack = task.checkpoint(1)
    (name,) = shared_files(tmp_path)
    victim = tmp_path / "checkpoints" / JOB.hex() / SHARED_DIR / name
    victim.unlink()
    store = CompletedCheckpointStore(tmp_path / "checkpoints", JOB, num_retained=1)
    with pytest.raises(CheckpointStorageError, match=f"shared state file .*{name}.* is missing"):
        store.add_checkpoint(1, 0.0, {"t": FileStateHandle(ack.state_path, ack.state_size)})
    other = Task(reduce_vertex(), tmp_path)
    with pytest.raises(FileNotFoundError, match=f"shared RocksDB file .*{name} is missing"):
        other.checkpointer.restore(1, ack.state_path, ack.state_size)


def test_full_checkpoints_of_rocksdb_are_canonical_and_read_off_the_task_thread(tmp_path: Path) -> None:
    task = Task(reduce_vertex(), tmp_path, incremental=False)
    task.run.chain.open()
    task.feed([("a", 1)])
    ack = task.checkpoint(1)
    assert not shared_files(tmp_path) and not os.path.exists(ack.state_path + ".shared.json")
    import io
    import pickle

    stream = io.BytesIO(Path(ack.state_path).read_bytes())
    first, second = pickle.load(stream), pickle.load(stream)
    assert first["keyed"] == {} and list(second["keyed"].values())  # read off the task thread, canonical
    heap = Task(reduce_vertex(), tmp_path, backend="hashmap")
    heap.checkpointer.restore(1, ack.state_path, ack.state_size)
    heap.run.chain.open()
    assert heap.state() == {"a": ("a", 1)}


def test_the_task_thread_only_hard_links_and_the_upload_runs_off_it(tmp_path: Path, monkeypatch: Any) -> None:
    """Flink's asynchronous snapshot: the RocksDB checkpoint is taken on the task thread (hard
    links of the same inodes as the live files), the copy into shared/ on the writer thread."""
    import threading

    from millstream.runtime.state import rocksdb_snapshot as rocksdb_backend

    seen: dict[str, Any] = {}
    real_upload = rocksdb_backend.NativeSnapshot.upload

    def upload(self: Any, *args: Any) -> Any:
        seen["upload_thread"] = threading.current_thread().name
        ssts = [n for n in os.listdir(self.local_dir) if n.endswith(".sst")]
        live = Path(task.run.chain.backend_factory.db.path)
        seen["hard_links"] = all(os.stat(Path(self.local_dir) / n).st_ino == os.stat(live / n).st_ino
                                 for n in ssts if (live / n).exists())
        seen["ssts"] = len(ssts)
        return real_upload(self, *args)

    monkeypatch.setattr(rocksdb_backend.NativeSnapshot, "upload", upload)
    task = Task(reduce_vertex(), tmp_path)
    task.run.chain.open()
    task.feed([(f"k{i}", 1) for i in range(100)])
    task.checkpoint(1)
    assert seen["upload_thread"].startswith("millstream-checkpoint-writer")
    assert seen["upload_thread"] != threading.current_thread().name
    assert seen["ssts"] >= 1 and seen["hard_links"]
