"""One task's side of checkpointing: snapshot on barrier n, forward n, write the snapshot off the
task thread, acknowledge (Flink's SubtaskCheckpointCoordinator, trimmed).

On barrier n (injected at a source, or aligned from the inputs) the task thread:

1. flushes the chain, so every record before the barrier is handed on;
2. forwards barrier n on every result partition, behind those records;
3. takes the synchronous part of the snapshot: source positions, each keyed operator's key groups
   (serialized now, so later records cannot change them) and each operator's ``snapshot_state``,
   all serialized into one blob;

and goes on processing. A single writer thread writes the blob into the checkpoint directory and
sends the acknowledgement, in checkpoint order; a task with nothing to store acks without a file.
``close()`` waits for the writes in flight, so a task's last ack is sent before its end is
reported. A snapshot or write that fails declines the checkpoint (the checkpoint aborts, the task
goes on).

With incremental checkpoints of the RocksDB backend (``execution.checkpointing.incremental``) the
task thread takes a RocksDB checkpoint (hard links) instead of serializing the keyed state; the
writer thread uploads the files new since the last completed checkpoint, and the state file holds
the snapshot followed by the RocksDB handle (a second pickle), with the shared files it references
listed next to it (``<state file>.shared.json``) for the JobManager's reference counting.
Full RocksDB snapshots and savepoints pin a point-in-time view of the instance on the task thread
(no flush, no files); the writer thread reads the live instance through it into the canonical key
groups (a second pickle after the snapshot).
"""
from __future__ import annotations

import concurrent.futures
import io
import json
import logging
import pickle
import time
from pathlib import Path
from typing import Any, Callable, Optional

from millstream.runtime.checkpoint_storage import FileStateHandle, checkpoint_directory, write_task_state
from millstream.runtime.durable_files import write_atomically
from millstream.runtime.state.rocksdb_backend import RocksDBKeyedStateBackend
from millstream.runtime.state.rocksdb_snapshot import SHARED_LIST_SUFFIX, restore_native
from millstream.runtime.serialization import RecordSerializer, deserialize
from millstream.runtime.task.barrier_handler import CancelCheckpointMarker, CheckpointBarrier
from millstream.runtime.task.chain import OperatorChain
from millstream.runtime.task.worker_events import CheckpointAcknowledged, CheckpointDeclined

log = logging.getLogger(__name__)

SNAPSHOT_VERSION = 1


class TaskCheckpointer:
    def __init__(self, chain: OperatorChain, broadcast: Callable[[Any], None], checkpoint_dir: str,
                 job_id: bytes, send: Callable[[CheckpointAcknowledged | CheckpointDeclined], None]) -> None:
        """``broadcast(event)``: put an in-band event on every result partition of the task;
        ``send(event)``: an ack or decline to the TaskManager (a worker event)."""
        self.chain = chain
        self._broadcast = broadcast
        self._dir = Path(checkpoint_dir) if checkpoint_dir else None
        self._job_id = job_id
        self._send = send
        self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="millstream-checkpoint-writer")
        self._serializer = RecordSerializer()
        self.last_checkpoint_id = 0
        self.last_completed_id = 0
        # Stop-with-savepoint: the id of the stop savepoint snapshotted whose outcome is not known
        # yet (the task processes nothing meanwhile), whether it completed (the task then ends
        # without an end of input), and whether a drain (or a stop deferred to the end of the
        # inputs) already ended the chain's input.
        self.stop_savepoint: Optional[int] = None
        self.stopped = False
        self.input_ended = False
        # checkpoint id -> (monotonic s, wall ms) its first barrier reached the task (alignment
        # and start delay in the ack's figures)
        self._first_barrier: dict[int, tuple[float, float]] = {}

    # -- restore ---------------------------------------------------------------------------------

    def restore(self, checkpoint_id: int, state_path: str, state_size: int) -> None:
        """Before the chain opens: load this task's snapshot of ``checkpoint_id``."""
        self.last_checkpoint_id = self.last_completed_id = checkpoint_id
        if not state_path:
            return
        snapshot = self._read(state_path, state_size)
        self.chain.restore_positions(snapshot["positions"])
        self._restore_keyed(snapshot, state_path)
        self._initialize_operators(snapshot, state_path)

    def restore_rescaled(self, checkpoint_id: int, states: list[tuple[int, str, int, bool]]) -> None:
        """Restore at another parallelism from old subtasks' snapshots ``(old subtask, path, size,
        take operator state)``: the keyed state of this subtask's key groups from each (the backend
        keeps only its own range); operator state, and a source's splits with their positions, from
        those assigned to it (round-robin, as Flink's list state). A source subtask assigned none
        reads nothing: its old splits went to others, or were read to their end. Broadcast state
        is the same in every old subtask: each new subtask takes one copy, from the first snapshot
        it is given (every subtask is given at least the snapshots of its key groups' old owners)."""
        self.last_checkpoint_id = self.last_completed_id = checkpoint_id
        splits: dict[str, Any] = {}
        every: dict[str, Any] = {}  # a source subtask is given every old one's positions
        broadcast_restored: set[str] = set()
        for old_subtask, path, size, take_operator_state in states:
            snapshot = self._read(path, size)
            self._restore_keyed(snapshot, path)
            every.update(snapshot["positions"])
            if take_operator_state:
                splits.update(snapshot["positions"])
            self._initialize_operators(snapshot, path, take_operator_state, broadcast_restored)
        self.chain.restore_positions(splits, assigned=True, every=every)

    def _restore_keyed(self, snapshot: dict[str, Any], path: str) -> None:
        """Canonical key groups, or a RocksDB handle read as key groups of this subtask's range."""
        self.chain.restore_keyed_state(snapshot["keyed"])
        rocks = snapshot.get("rocksdb")
        if rocks is not None:
            env = self.chain.env
            work = self.chain.backend_factory.local_dir()
            backends = self.chain.keyed_state_backends()
            if backends and all(isinstance(b, RocksDBKeyedStateBackend) for b in backends.values()):
                restore_native(rocks, path, env.key_group_range, work, into=backends)  # type: ignore[arg-type]
            else:
                self.chain.restore_keyed_state(restore_native(rocks, path, env.key_group_range, work))

    def _read(self, path: str, size: int) -> dict[str, Any]:
        data = FileStateHandle(path, size).read()
        stream = io.BytesIO(data)
        snapshot = deserialize(data)
        if isinstance(snapshot, dict):
            pickle.load(stream)  # skip the snapshot: RocksDB's keyed state may follow (written off the task thread)
            if stream.tell() < len(data):
                rest = pickle.load(stream)
                if isinstance(rest, dict) and "keyed" in rest:  # a full snapshot: canonical key groups
                    snapshot["keyed"] = {**snapshot["keyed"], **rest["keyed"]}
                else:
                    snapshot["rocksdb"] = rest
        if not isinstance(snapshot, dict) or snapshot.get("version") != SNAPSHOT_VERSION:
            raise ValueError(f"{path}: not a task snapshot this Millstream reads")
        max_parallelism = self.chain.env.max_parallelism
        if snapshot.get("max_parallelism", max_parallelism) != max_parallelism:
            raise ValueError(f"{path}: keyed state of {snapshot['max_parallelism']} key groups (max parallelism), "
                             f"but '{self.chain.vertex.name}' has {max_parallelism}; the max parallelism must not "
                             "change (set_max_parallelism)")
        return snapshot

    def _initialize_operators(self, snapshot: dict[str, Any], path: str, take_operator_state: bool = True,
                              broadcast_restored: set[str] | None = None) -> None:
        for op_id, state in snapshot["operators"].items():
            operator = self.chain.operator_by_id(op_id)
            if operator is None:
                raise ValueError(f"{path}: state of operator {op_id}, which is not in task '{self.chain.vertex.name}'")
            if operator.broadcast_operator_state and broadcast_restored is not None:
                if op_id in broadcast_restored:
                    continue  # one copy is enough: they are all equal
                broadcast_restored.add(op_id)
            elif not take_operator_state:
                continue
            operator.initialize_state(state)

    # -- barriers ---------------------------------------------------------------------------------

    def barrier_arrived(self, barrier: CheckpointBarrier) -> None:
        """A barrier reached one of the task's input channels: the first of each checkpoint
        starts its alignment (the snapshot ends it)."""
        if barrier.checkpoint_id > self.last_checkpoint_id and barrier.checkpoint_id not in self._first_barrier:
            self._first_barrier[barrier.checkpoint_id] = (time.monotonic(), time.time() * 1000)

    def checkpoint(self, barrier: CheckpointBarrier, forward: bool = True, end_input_first: bool = False) -> None:
        """Barrier ``barrier.checkpoint_id`` reached this task (aligned, or injected at a source).
        A drain barrier (or ``end_input_first``: a stop savepoint deferred until the inputs ended)
        ends the chain's input before the snapshot, so what that emits is in the savepoint."""
        checkpoint_id = barrier.checkpoint_id
        if checkpoint_id <= self.last_checkpoint_id:
            return  # an old barrier (restored past it): never snapshot an id twice
        self.last_checkpoint_id = checkpoint_id
        started = time.monotonic()
        first_mono, first_wall = self._first_barrier.pop(checkpoint_id, (started, time.time() * 1000))
        for older in [c for c in self._first_barrier if c < checkpoint_id]:  # aborted during alignment
            del self._first_barrier[older]
        timing = [round((started - first_mono) * 1000), max(0, round(first_wall - barrier.timestamp))]
        native: Any = None
        try:
            if (barrier.drain or end_input_first) and not self.input_ended:
                self.input_ended = True
                self.chain.end_input()
            self.chain.flush()
            if forward:
                self._broadcast(barrier)
            snapshot_started = time.monotonic()
            factory = self.chain.backend_factory
            incremental = factory.incremental and not barrier.savepoint
            native = factory.native_snapshot(checkpoint_id, incremental)  # RocksDB: the rest off this thread
            blob = self._snapshot(checkpoint_id, keyed=native is None)
            sync_ms = round((time.monotonic() - snapshot_started) * 1000)
        except Exception as exc:
            log.warning("checkpoint %d: snapshot of %r failed", checkpoint_id, self.chain, exc_info=True)
            if native is not None:
                native.discard()
            self.decline(checkpoint_id, "CHECKPOINT_DECLINED", f"snapshot failed: {type(exc).__name__}: {exc}")
            return
        if barrier.stop:
            self.stop_savepoint = checkpoint_id
        self._writer.submit(self._write_and_ack, checkpoint_id, blob, native, incremental, sync_ms, *timing)

    def _snapshot(self, checkpoint_id: int, keyed: bool = True) -> Optional[bytes]:
        chain = self.chain
        operators = {}
        for operator in chain.operators:
            state = operator.snapshot_state(checkpoint_id)
            if state is not None:
                operators[operator.ctx.operator_id] = state
        keyed_groups = {op_id: groups for op_id, groups in chain.snapshot_keyed_state().items() if groups} if keyed else {}
        positions = chain.snapshot_positions()
        if keyed and not (operators or keyed_groups or positions):
            return None
        return self._serializer.serialize(
            {"version": SNAPSHOT_VERSION, "max_parallelism": chain.env.max_parallelism, "positions": positions,
             "keyed": keyed_groups, "operators": operators})

    def _write_and_ack(self, checkpoint_id: int, blob: Optional[bytes], native: Any = None, incremental: bool = False,
                       sync_ms: int = 0, alignment_ms: int = 0, start_delay_ms: int = 0) -> None:
        started = time.monotonic()
        try:
            if blob is None:
                self._send(CheckpointAcknowledged(checkpoint_id, "", 0, sync_ms, 0, alignment_ms, start_delay_ms))
                return
            if self._dir is None:
                raise RuntimeError("the task has no checkpoint directory")
            shared: list[str] = []
            if native is not None and not incremental:  # full: canonical key groups, read here
                blob = blob + self._serializer.serialize({"keyed": native.canonical()})
                native = None
            if native is not None:
                factory = self.chain.backend_factory
                chk_dir = checkpoint_directory(self._dir, self._job_id, checkpoint_id)
                rocks, _ = native.upload(str(chk_dir.parent), str(chk_dir), factory.reusable)
                factory.uploaded(checkpoint_id, rocks["shared"])
                shared = sorted(rocks["shared"].values())
                blob = blob + self._serializer.serialize(rocks)
            handle = write_task_state(self._dir, self._job_id, checkpoint_id, blob)
            if native is not None:
                write_atomically(Path(handle.path + SHARED_LIST_SUFFIX), json.dumps(shared).encode("utf-8"))
        except Exception as exc:
            if native is not None:
                native.discard()
            log.warning("checkpoint %d: writing the snapshot of %r failed: %s", checkpoint_id, self.chain, exc)
            self._send(CheckpointDeclined(checkpoint_id, "CHECKPOINT_ASYNC_EXCEPTION", f"{type(exc).__name__}: {exc}"))
            return
        async_ms = round((time.monotonic() - started) * 1000)
        self._send(CheckpointAcknowledged(checkpoint_id, handle.path, handle.size, sync_ms, async_ms, alignment_ms,
                                          start_delay_ms))

    def abort(self, checkpoint_id: int, reason: str, forward: bool = True) -> None:
        """Alignment gave up on ``checkpoint_id``: decline it and tell the tasks downstream."""
        if forward:
            try:
                self._broadcast(CancelCheckpointMarker(checkpoint_id))
            except Exception:  # the partition failed: the task fails through it anyway
                log.debug("cancel marker for checkpoint %d not sent", checkpoint_id, exc_info=True)
        self.decline(checkpoint_id, reason, "")

    def decline(self, checkpoint_id: int, reason: str, message: str) -> None:
        self.last_checkpoint_id = max(self.last_checkpoint_id, checkpoint_id)
        self._writer.submit(self._send, CheckpointDeclined(checkpoint_id, reason, message))  # in order with the acks

    # -- notifications ---------------------------------------------------------------------------

    def notify(self, checkpoint_id: int, aborted: bool) -> None:
        for operator in self.chain.operators:
            if aborted:
                operator.notify_checkpoint_aborted(checkpoint_id)
            else:
                operator.notify_checkpoint_complete(checkpoint_id)
        if not aborted:
            self.last_completed_id = max(self.last_completed_id, checkpoint_id)
            self.chain.backend_factory.checkpoint_completed(checkpoint_id)
        stop = self.stop_savepoint
        if stop is not None and (checkpoint_id == stop or (checkpoint_id > stop and not aborted)):
            self.stopped = not aborted  # aborted: the stop failed, the task goes on
            self.stop_savepoint = None

    def has_uncommitted_output(self) -> bool:
        return any(operator.has_uncommitted_output() for operator in self.chain.operators)

    def close(self, wait: bool = True) -> None:
        """Waits for the snapshots being written (their acks go out first), unless failing."""
        self._writer.shutdown(wait=wait, cancel_futures=not wait)

