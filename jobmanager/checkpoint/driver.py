"""The JobMaster's checkpoint shell: runs one job's CheckpointCoordinator commands.

The coordinator (pure) decides; this carries its commands out: barriers are injected through the
TaskManagers' ``TriggerCheckpoint``, completions and aborts reach the tasks through
``NotifyCheckpoint``, ``_metadata`` is written and old checkpoints deleted off the event loop, and
the coordinator's deadline is kept as one timer. The JobMaster feeds it the job's events: the
tasks' acks and declines, tasks that finished or failed, and the job's status.

Periodic checkpoints run while the job is RUNNING with every task deployed and running (or
finished); they stop when it fails, restarts or ends. A completed checkpoint becomes the core's
``restore_point``, which every later restart resumes from. Checkpoints are deleted when the job
finishes or is cancelled and kept when it fails (Flink's DELETE_ON_CANCELLATION retention).
"""
from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Protocol

from millstream.jobmanager.checkpoint.coordinator import (
    CheckpointCoordinator,
    CheckpointFailureReason,
    CheckpointRecord,
    Command,
    DiscardCheckpoint,
    DiscardState,
    FailJob,
    FinalizeCheckpoint,
    NotifyCheckpointAborted,
    NotifyCheckpointComplete,
    PrefetchedCheckpointIDCounter,
    SubtaskAck,
    TriggerCheckpoint,
)
from millstream.jobmanager.checkpoint.settings import JobCheckpointing, deletes_checkpoints
from millstream.runtime.checkpoint_ids import CheckpointIDCounter, StandaloneCheckpointIDCounter
from millstream.runtime.clock import now_ms
from millstream.runtime.execution_state import ExecutionState, JobStatus
from millstream.jobmanager.jobmaster.job_master_core import JobMasterCore
from millstream.proto import cluster_pb2 as cpb
from millstream.runtime.checkpoint_storage import CompletedCheckpoint, CompletedCheckpointStore, FileStateHandle, discard_state

log = logging.getLogger(__name__)


class SavepointError(Exception):
    """A savepoint could not be taken (the message says why)."""


class BlockingCheckpointIDCounter(CheckpointIDCounter, Protocol):
    """An HA checkpoint id counter (ZooKeeper): every method blocks, call it from a thread."""

    def shutdown(self, globally_terminal: bool) -> None: ...


@dataclass
class CheckpointServices:
    """A job's checkpoint store and id counter from the HA services (both created off the loop,
    their calls block): the completed checkpoints a new leader restores from, and ids that are
    never handed out twice across leaders."""

    store: CompletedCheckpointStore
    counter: BlockingCheckpointIDCounter

    def shutdown(self, globally_terminal: bool) -> None:
        """Blocking. Globally terminal: remove the pointers and the counter; otherwise (suspended,
        leadership lost) release this JobManager's locks only."""
        shutdown = getattr(self.store, "shutdown", None)
        if shutdown is not None:
            shutdown(globally_terminal)
        self.counter.shutdown(globally_terminal)


def draw_checkpoint_id(counter: BlockingCheckpointIDCounter, min_next: Optional[int]) -> int:
    """Blocking: the next id of ``counter``, at least ``min_next`` (when not None)."""
    if min_next is not None and counter.get() < min_next:
        counter.set_count(min_next)
    return counter.get_and_increment()


@dataclass
class _SavepointRequest:
    """A savepoint being taken; ``target`` None: a checkpoint triggered by hand, whose future
    resolves to its id instead of a path (nothing is copied)."""

    target: Optional[Path]
    future: asyncio.Future[Any]
    stop: bool = False
    checkpoint_id: Optional[int] = None
    drain: bool = False
    full: bool = False  # a checkpoint by hand of Flink's FULL type

    @property
    def what(self) -> str:
        return "checkpoint" if self.target is None else "savepoint"


class CheckpointDriver:
    def __init__(self, core: JobMasterCore, checkpointing: JobCheckpointing, call: Callable[[str, str, Any], None],
                 fail_job: Callable[[str], None], spawn: Callable[[Any], None],
                 services: Optional[CheckpointServices] = None) -> None:
        """``call(tm_address, method, request)``: a TaskExecutorGateway call (``method``: its name);
        ``fail_job(message)``: a global failure (tolerable checkpoint failures exceeded); ``services``: the HA store and
        counter (None: the checkpoint directory on disk and an in-process counter)."""
        self.core = core
        self.checkpointing = checkpointing
        self._call = call
        self._fail_job = fail_job
        self._spawn = spawn
        self.services = services
        counter: Any
        if services is None:
            self.store = CompletedCheckpointStore(checkpointing.directory, core.job_id, checkpointing.num_retained)
            # An id is never reused: continue after every checkpoint directory of this job on disk.
            counter = StandaloneCheckpointIDCounter(self.store.highest_checkpoint_id() + 1)
        else:
            self.store = services.store
            # The HA counter blocks on ZooKeeper: ids are drawn one ahead, in a thread.
            counter = self._prefetched = PrefetchedCheckpointIDCounter(self._draw_id)
        self.coordinator = CheckpointCoordinator(checkpointing.settings, counter)
        self._timer: Optional[asyncio.TimerHandle] = None
        self._running = False
        self._finished_at_trigger: dict[int, frozenset[str]] = {}
        self._wall_minus_monotonic_ms = int(time.time() * 1000) - now_ms()
        self._savepoint: Optional[_SavepointRequest] = None
        # checkpoint id -> its directory (a savepoint's: its copy), for the history's external_path
        self._external_paths: dict[int, str] = {}
        # The job's OperatorCoordinators (source_coordinators.SourceCoordinators; None: it has none),
        # snapshotted as a checkpoint is triggered, before its barriers (Flink's order), their
        # states kept here until the checkpoint's metadata is written.
        self.coordinators: Any = None
        self.on_completed: Any = None  # called after a checkpoint became the restore point (the adaptive scheduler's rescale)
        self._coordinator_states: dict[int, dict[str, Any]] = {}

    @property
    def blocking(self) -> bool:
        """Whether recovery blocks on HA services (the JobMaster then runs it in a thread)."""
        return self.services is not None

    def recover(self) -> None:
        self.apply_restore_point(*self.load_restore_point())

    def load_restore_point(self) -> tuple[Optional[CompletedCheckpoint], Optional[int]]:
        """Blocking (files; ZooKeeper under HA), touches no state of the loop: at the JobMaster's
        start, the job's latest completed checkpoint (a JobManager failover) or else the savepoint
        it was submitted with, and under HA the first checkpoint id (after the restored one).
        A corrupt checkpoint raises; so does savepoint state of an operator the job does not have,
        unless ``execution.savepoint.ignore-unclaimed-state``."""
        point = self.store.recover()
        path = self.checkpointing.savepoint_path
        if point is None and path is not None:
            point = self.store.load(path)
            vertices = {v.id.hex() for v in self.core.graph.job_vertices}
            unclaimed = sorted(k for k in point.task_states if k.rpartition("_")[0] not in vertices)
            if unclaimed and not self.checkpointing.ignore_unclaimed_state:
                raise SavepointError(
                    f"savepoint {path} holds state of {len(unclaimed)} task(s) this job does not have "
                    f"(e.g. {unclaimed[0]}: an operator was removed, or its uid or the job's shape changed); resume anyway "
                    "with --allow-non-restored-state (execution.savepoint.ignore-unclaimed-state)")
            self.core.restore_missing_tasks_empty = True  # new operators start empty, as Flink's
        first_id = None
        if self.services is not None:
            first_id = draw_checkpoint_id(self.services.counter, point.checkpoint_id + 1 if point is not None else None)
        return point, first_id

    def apply_restore_point(self, point: Optional[CompletedCheckpoint], first_id: Optional[int]) -> None:
        """On the loop: what :meth:`load_restore_point` found becomes the job's restore point. A
        checkpoint of this very job (a JobManager failover; a savepoint is another job's) also
        brings back the checkpoint counts and history it kept."""
        if first_id is not None:
            self._prefetched.supply(first_id)
        self.core.restore_point = point
        if point is not None:
            if point.job_id == self.store.job_id and point.stats is not None:
                self._restore_stats(point.stats, point)
            self.coordinator.restored(point.checkpoint_id, now_ms(), str(point.directory))

    def _persisted_stats(self, checkpoint_id: int) -> Optional[dict[str, Any]]:
        """The statistics the finalizing checkpoint's metadata keeps (wall-clock times); None when
        it is no longer the one being finalized (aborted meanwhile: it will not complete anyway)."""
        try:
            completed, failed, history = self.coordinator.stats_at_completion(checkpoint_id, now_ms())
        except ValueError:
            return None
        wall = self._wall_minus_monotonic_ms
        return {"num_completed": completed, "num_failed": failed, "history": [
            {"id": r.checkpoint_id, "status": r.status, "savepoint": r.is_savepoint, "trigger_ms": r.trigger_ms + wall,
             "end_ms": r.end_ms + wall if r.end_ms is not None else None, "size": r.size_bytes,
             "failure": r.failure_message, "subtasks": r.num_subtasks, "acked": r.num_acknowledged,
             "path": self._external_paths.get(r.checkpoint_id, ""),
             # each ack: [task key, when (wall clock), state size, sync, async, alignment, start delay]
             "acks": [[a.task_key, a.ack_ms + wall if a.ack_ms is not None else None, a.state_size, a.sync_ms,
                       a.async_ms, a.alignment_ms, a.start_delay_ms] for a in r.subtasks]} for r in history]}

    def _restore_stats(self, stats: dict[str, Any], point: CompletedCheckpoint) -> None:
        wall = self._wall_minus_monotonic_ms
        try:
            history = [CheckpointRecord(int(r["id"]), str(r["status"]), bool(r["savepoint"]), float(r["trigger_ms"]) - wall,
                                        float(r["end_ms"]) - wall if r["end_ms"] is not None else None, int(r["size"]),
                                        str(r["failure"]), int(r.get("subtasks", 0)), int(r.get("acked", 0)),
                                        tuple(SubtaskAck(str(key), float(at) - wall if at is not None else None,
                                                         *(int(n) for n in figures))
                                              for key, at, *figures in r.get("acks", [])))
                       for r in stats.get("history", [])]
            self._external_paths.update({int(r["id"]): str(r["path"]) for r in stats.get("history", []) if r.get("path")})
            self.coordinator.restore_stats(int(stats["num_completed"]), int(stats["num_failed"]), history)
        except (KeyError, TypeError, ValueError) as exc:  # figures only: the job recovers all the same
            log.warning("job %s: the checkpoint statistics in %s are unreadable (%r); counting from zero",
                        self.core.job_id.hex(), point.metadata_path, exc)

    def _draw_id(self, min_next: Optional[int]) -> None:
        self._spawn(self._draw_id_off_loop(min_next))

    async def _draw_id_off_loop(self, min_next: Optional[int]) -> None:
        assert self.services is not None
        try:
            next_id = await asyncio.to_thread(draw_checkpoint_id, self.services.counter, min_next)
        except Exception as exc:  # ZooKeeper unreachable: the next trigger fails and asks again
            log.warning("job %s: drawing a checkpoint id failed: %s", self.core.job_id.hex(), exc)
            self._prefetched.refill_failed()
            return
        self._prefetched.supply(next_id)

    # -- the job's events ------------------------------------------------------------------------

    def job_status_changed(self, status: JobStatus) -> None:
        if status is JobStatus.RUNNING:
            self.maybe_start()
            return
        if self._running:
            self._running = False
            self._run(self.coordinator.stop())
        self._savepoint_failed(f"the job is {status.value}")
        if status not in (JobStatus.FINISHED, JobStatus.CANCELED, JobStatus.FAILED):
            return
        if deletes_checkpoints(self.checkpointing.retention, status.value):
            # Not a tracked task: stopping the JobMaster (right after this) must not cancel it.
            asyncio.get_running_loop().run_in_executor(None, shutil.rmtree, self.store.job_dir, True)
        elif self.store.latest() is not None:
            log.info("job %s is %s; its checkpoints are kept in %s (%s)", self.core.job_id.hex(), status.value,
                     self.store.job_dir, self.checkpointing.retention)

    def maybe_start(self) -> None:
        """Periodic checkpoints start once every task of the attempt runs (or finished)."""
        if self._running or self.core.status is not JobStatus.RUNNING:
            return
        counts = self.core.tasks_per_state()
        settled = counts.get(ExecutionState.RUNNING.value, 0) + counts.get(ExecutionState.FINISHED.value, 0)
        if settled == len(self.core.current):
            self._running = True
            self._run(self.coordinator.start(now_ms()))

    def task_state_changed(self, attempt_id: bytes, state: ExecutionState, message: str = "") -> None:
        if state is ExecutionState.FINISHED:
            self._run(self.coordinator.task_finished(attempt_id))
        elif state is ExecutionState.FAILED:
            self._run(self.coordinator.task_failed(attempt_id, message))
        self.maybe_start()

    def abort_pending(self) -> None:
        """Tasks of a running job are being redeployed (a region failover): Flink's
        ``abortPendingCheckpoints(JOB_FAILOVER_REGION)`` at ``restoreState``."""
        self._run(self.coordinator.abort_pending())

    def restored(self, checkpoint_id: int, path: str) -> None:
        self.coordinator.restored(checkpoint_id, now_ms(), path)

    def acknowledge(self, request: cpb.AcknowledgeCheckpointRequest) -> None:
        handle = FileStateHandle(request.state_path, request.state_size) if request.state_path else None
        self._run(self.coordinator.acknowledge(
            request.checkpoint_id, request.execution_attempt_id, handle, request.state_size, now_ms(),
            request.sync_duration_ms, request.async_duration_ms, request.alignment_duration_ms, request.start_delay_ms))

    def decline(self, request: cpb.DeclineCheckpointRequest) -> None:
        try:
            reason = CheckpointFailureReason(request.reason)
        except ValueError:
            reason = CheckpointFailureReason.CHECKPOINT_DECLINED
        self._run(self.coordinator.decline(request.checkpoint_id, request.execution_attempt_id, reason, request.message))

    # -- savepoints ------------------------------------------------------------------------------

    def trigger_savepoint(self, target: Path, stop: bool = False, drain: bool = False) -> asyncio.Future[str]:
        """A forced checkpoint, copied to ``target/savepoint-<job>-<n>-<random>`` once complete;
        the future resolves to that path (or fails with a SavepointError). ``stop``: a synchronous
        savepoint (the tasks process nothing after it and end once it completes; ``drain``: they
        end their input first) and no periodic checkpoint follows it."""
        if drain and not stop:
            raise SavepointError("drain needs stop: only stop-with-savepoint drains the job")
        if not self._running:
            raise SavepointError("the job's tasks are not all running yet; try again in a moment")
        if self._savepoint is not None:
            raise SavepointError("a savepoint of this job is in progress already")
        request = self._savepoint = _SavepointRequest(target, asyncio.get_running_loop().create_future(), stop,
                                                      drain=drain)
        if stop:
            self.coordinator.suspend_periodic()
        self._try_savepoint()
        return request.future

    def trigger_checkpoint(self, full: bool = False) -> asyncio.Future[int]:
        """A checkpoint now, besides the periodic ones (Flink's manually triggered checkpoint); the
        future resolves to its id once it completed (or fails with a SavepointError). ``full``:
        Flink's FULL type, keyed state written whole in the canonical format even by a job with
        incremental RocksDB checkpoints (whose next incremental checkpoint then uploads all its
        files again); CONFIGURED and INCREMENTAL take the job's configured kind.
        It waits for a checkpoint in flight, as a savepoint does."""
        if not self._running:
            raise SavepointError("the job's tasks are not all running yet; try again in a moment")
        if self._savepoint is not None:
            raise SavepointError(f"a {self._savepoint.what} of this job is in progress already")
        request = self._savepoint = _SavepointRequest(None, asyncio.get_running_loop().create_future(), full=full)
        self._try_savepoint()
        return request.future

    def _try_savepoint(self) -> None:
        request = self._savepoint
        if request is None or request.checkpoint_id is not None or self.coordinator.pending is not None:
            return
        commands = self.coordinator.trigger_now(now_ms(), self.core.checkpoint_tasks(), request.stop, request.drain,
                                                savepoint=request.target is not None, full=request.full)
        triggered = [c for c in commands if isinstance(c, TriggerCheckpoint)]
        if not triggered:
            self._savepoint_failed(self.coordinator.stats.last_failure_message or "the checkpoint could not start")
            return
        request.checkpoint_id = triggered[0].checkpoint_id
        log.info("job %s: %s as checkpoint %d", self.core.job_id.hex(), request.what, request.checkpoint_id)
        self._run(commands)

    def _savepoint_failed(self, message: str) -> None:
        request, self._savepoint = self._savepoint, None
        if request is not None:
            if request.stop and self._running:  # the job goes on: so do its periodic checkpoints
                self._run(self.coordinator.start(now_ms()))
            if not request.future.done():
                request.future.set_exception(SavepointError(f"the {request.what} failed: {message}"))

    def _copy_savepoint(self, source: Path, target: Path, checkpoint_id: int) -> str:
        """Copies a completed checkpoint out of the job's directory: its metadata names files
        relative to it, so the copy is self-contained and outlives the job."""
        destination = target / f"savepoint-{self.core.job_id.hex()[:6]}-{checkpoint_id}-{uuid.uuid4().hex[:8]}"
        tmp = target / f".{destination.name}.inprogress"
        target.mkdir(parents=True, exist_ok=True)
        shutil.copytree(source, tmp)
        os.replace(tmp, destination)
        return str(destination)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- commands --------------------------------------------------------------------------------

    def _run(self, commands: list[Command]) -> None:
        for command in commands:
            if isinstance(command, TriggerCheckpoint):
                self._finished_at_trigger[command.checkpoint_id] = self.core.finished_task_keys()
                if self.coordinators is not None:
                    self._coordinator_states[command.checkpoint_id] = self.coordinators.snapshot(command.checkpoint_id)
                for attempt_id in command.attempt_ids:
                    self._to_task(attempt_id, "trigger_checkpoint", cpb.TriggerCheckpointRequest(
                        execution_attempt_id=attempt_id, checkpoint_id=command.checkpoint_id,
                        timestamp_ms=int(command.timestamp_ms + self._wall_minus_monotonic_ms),
                        stop=command.stop, drain=command.drain, savepoint=command.savepoint or command.full))
            elif isinstance(command, FinalizeCheckpoint):
                self._spawn(self._finalize(command))
            elif isinstance(command, NotifyCheckpointComplete):
                self._to_task(command.attempt_id, "notify_checkpoint", cpb.CheckpointNotification(
                    execution_attempt_id=command.attempt_id, checkpoint_id=command.checkpoint_id))
            elif isinstance(command, NotifyCheckpointAborted):
                self._finished_at_trigger.pop(command.checkpoint_id, None)
                self._to_task(command.attempt_id, "notify_checkpoint", cpb.CheckpointNotification(
                    execution_attempt_id=command.attempt_id, checkpoint_id=command.checkpoint_id, aborted=True))
            elif isinstance(command, DiscardState):
                self._spawn(asyncio.to_thread(discard_state, command.handle))
            elif isinstance(command, DiscardCheckpoint):
                self._coordinator_states.pop(command.checkpoint_id, None)
                if self._savepoint is not None and self._savepoint.checkpoint_id == command.checkpoint_id:
                    self._savepoint_failed(self.coordinator.stats.last_failure_message or "aborted")
                self._spawn(asyncio.to_thread(self._discard, command.checkpoint_id))
            elif isinstance(command, FailJob):
                self._fail_job(command.message)
        self._schedule()
        if self._savepoint is not None and self._savepoint.checkpoint_id is None and self.coordinator.pending is None:
            if self._running:
                self._try_savepoint()
            else:
                self._savepoint_failed("the job is not running")

    def _discard(self, checkpoint_id: int) -> None:
        try:
            self.store.discard_checkpoint(checkpoint_id)
        except Exception as exc:  # a completed one is never discarded: log, keep it
            log.warning("checkpoint %d not discarded: %s", checkpoint_id, exc)

    def _to_task(self, attempt_id: bytes, method: str, request: Any) -> None:
        execution = self.core.executions.get(attempt_id)
        if execution is None or execution.slot is None:
            return  # gone meanwhile: the coordinator learns it from the task's state
        self._call(execution.slot.tm_address, method, request)

    async def _finalize(self, command: FinalizeCheckpoint) -> None:
        finished = self._finished_at_trigger.pop(command.checkpoint_id, frozenset())
        stats = self._persisted_stats(command.checkpoint_id)
        coordinator_states = self._coordinator_states.pop(command.checkpoint_id, None)
        try:
            # Not subsuming yet: a failover may abort this checkpoint while its metadata is written,
            # and the tasks then restore the previous one, which must survive until this is confirmed.
            checkpoint = await asyncio.to_thread(self.store.add_checkpoint, command.checkpoint_id, command.timestamp_ms,
                                                 command.task_states, finished, stats, coordinator_states, False)
        except Exception as exc:
            log.warning("checkpoint %d: writing its metadata failed: %s", command.checkpoint_id, exc)
            self._run(self.coordinator.checkpoint_finalize_failed(command.checkpoint_id, f"{type(exc).__name__}: {exc}"))
            return
        self._remember_path(command.checkpoint_id, str(checkpoint.directory))
        request = self._savepoint
        if request is not None and request.checkpoint_id == command.checkpoint_id and request.target is None:
            self._savepoint = None  # a checkpoint by hand: complete once its metadata is written
            if not request.future.done():
                request.future.set_result(command.checkpoint_id)
        elif request is not None and request.checkpoint_id == command.checkpoint_id and request.target is not None:
            try:  # before the checkpoint is reported complete: nothing deletes it meanwhile
                path = await asyncio.to_thread(self._copy_savepoint, checkpoint.directory, request.target, command.checkpoint_id)
            except Exception as exc:
                self._savepoint_failed(f"copying checkpoint {command.checkpoint_id} to {request.target}: {exc}")
            else:
                self._savepoint = None
                self._remember_path(command.checkpoint_id, path)
                if not request.future.done():
                    request.future.set_result(path)
        commands = self.coordinator.checkpoint_finalized(command.checkpoint_id, now_ms(), self.core.checkpoint_tasks())
        if any(isinstance(c, DiscardCheckpoint) for c in commands):
            self._run(commands)  # aborted while the metadata was written: not a restore point
            return
        self.core.restore_point = checkpoint  # from here on every restart restores this one...
        self._spawn(asyncio.to_thread(self.store.subsume, command.checkpoint_id))  # ...so older ones may go
        if self.coordinators is not None:
            self.coordinators.checkpoint_complete(command.checkpoint_id)
        self._run(commands)
        if self.on_completed is not None:
            self.on_completed()

    def _remember_path(self, checkpoint_id: int, path: str) -> None:
        """Keeps the paths of the checkpoints the figures still show (history, latest savepoint)."""
        self._external_paths[checkpoint_id] = path
        s = self.coordinator.stats
        shown = {r.checkpoint_id for r in s.history} | {checkpoint_id}
        if s.last_savepoint is not None:
            shown.add(s.last_savepoint.checkpoint_id)
        for old in [k for k in self._external_paths if k not in shown]:
            del self._external_paths[old]

    def _schedule(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        deadline = self.coordinator.next_deadline()
        if deadline is not None:
            self._timer = asyncio.get_running_loop().call_later(max(0.0, (deadline - now_ms()) / 1000), self._tick)

    def _tick(self) -> None:
        self._timer = None
        self._run(self.coordinator.tick(now_ms(), self.core.checkpoint_tasks() if self._running else ()))

    # -- figures ---------------------------------------------------------------------------------

    def summary(self) -> cpb.CheckpointSummary:
        s = self.coordinator.stats
        wall = self._wall_minus_monotonic_ms
        summary = cpb.CheckpointSummary(
            interval_ms=self.checkpointing.settings.interval_ms,
            directory=str(self.store.job_dir),
            num_completed=s.num_completed,
            num_failed=s.num_failed,
            num_in_progress=s.num_in_progress,
            last_completed_id=s.last_completed_id or 0,
            last_duration_ms=int(s.last_completed_duration_ms or 0),
            last_size_bytes=s.last_completed_size_bytes or 0,
            last_completed_at_ms=int(s.last_completed_at_ms + wall) if s.last_completed_at_ms is not None else 0,
            last_failure_reason=s.last_failure_reason or "",
            last_failure_message=s.last_failure_message or "",
            latest_restored_id=s.latest_restored_id or 0,
            latest_restored_at_ms=int(s.latest_restored_at_ms + wall) if s.latest_restored_at_ms is not None else 0,
            latest_restored_path=s.latest_restored_path or "",
            history=[self._entry(r) for r in reversed(s.history)],
        )
        if s.last_failed is not None:
            summary.latest_failed.CopyFrom(self._entry(s.last_failed))
        if s.last_savepoint is not None:
            summary.latest_savepoint.CopyFrom(self._entry(s.last_savepoint))
        return summary

    def _entry(self, r: CheckpointRecord) -> cpb.CheckpointHistoryEntry:
        wall = self._wall_minus_monotonic_ms
        return cpb.CheckpointHistoryEntry(
            id=r.checkpoint_id, status=r.status, is_savepoint=r.is_savepoint,
            trigger_timestamp_ms=int(r.trigger_ms + wall), end_timestamp_ms=int(r.end_ms + wall) if r.end_ms is not None else 0,
            size_bytes=r.size_bytes, failure_message=r.failure_message, num_subtasks=r.num_subtasks,
            num_acknowledged_subtasks=r.num_acknowledged, external_path=self._external_paths.get(r.checkpoint_id, ""),
            subtasks=[_subtask_stats(a, wall) for a in r.subtasks])


def _subtask_stats(ack: SubtaskAck, wall_minus_monotonic_ms: int) -> cpb.SubtaskCheckpointStats:
    """An ack's figures for the REST API; its task key is ``<job vertex id hex>_<subtask index>``."""
    vertex, _, index = ack.task_key.rpartition("_")
    return cpb.SubtaskCheckpointStats(
        vertex_id=bytes.fromhex(vertex), subtask_index=int(index),
        ack_timestamp_ms=int(ack.ack_ms + wall_minus_monotonic_ms) if ack.ack_ms is not None else 0,
        state_size=ack.state_size, sync_duration_ms=ack.sync_ms, async_duration_ms=ack.async_ms,
        alignment_duration_ms=ack.alignment_ms, start_delay_ms=ack.start_delay_ms)
