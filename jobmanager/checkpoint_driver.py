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
import shutil
import time
from typing import Any, Callable, Optional

from millstream.jobmanager.checkpoint_coordinator import (
    CheckpointCoordinator,
    CheckpointFailureReason,
    Command,
    DiscardCheckpoint,
    DiscardState,
    FailJob,
    FinalizeCheckpoint,
    NotifyCheckpointAborted,
    NotifyCheckpointComplete,
    StandaloneCheckpointIDCounter,
    TriggerCheckpoint,
)
from millstream.jobmanager.checkpointing import JobCheckpointing
from millstream.jobmanager.execution_state import ExecutionState, JobStatus
from millstream.jobmanager.job_master_core import JobMasterCore
from millstream.proto import cluster_pb2 as cpb
from millstream.runtime.checkpoint_storage import CompletedCheckpointStore, FileStateHandle, discard_state

log = logging.getLogger(__name__)


def now_ms() -> int:
    return int(time.monotonic() * 1000)


class CheckpointDriver:
    def __init__(self, core: JobMasterCore, checkpointing: JobCheckpointing, call: Callable[[str, str, Any], None],
                 fail_job: Callable[[str], None], spawn: Callable[[Any], None]) -> None:
        """``call(tm_address, method, request)``: a TaskExecutor RPC; ``fail_job(message)``: a
        global failure (tolerable checkpoint failures exceeded)."""
        self.core = core
        self.checkpointing = checkpointing
        self._call = call
        self._fail_job = fail_job
        self._spawn = spawn
        self.store = CompletedCheckpointStore(checkpointing.directory, core.job_id, checkpointing.num_retained)
        # An id is never reused: continue after every checkpoint directory of this job on disk.
        counter = StandaloneCheckpointIDCounter(self.store.highest_checkpoint_id() + 1)
        self.coordinator = CheckpointCoordinator(checkpointing.settings, counter)
        self._timer: Optional[asyncio.TimerHandle] = None
        self._running = False
        self._finished_at_trigger: dict[int, frozenset[str]] = {}
        self._wall_minus_monotonic_ms = int(time.time() * 1000) - now_ms()

    def recover(self) -> None:
        """At the JobMaster's start: the job's completed checkpoints on disk (a JobManager
        failover); the latest is where the job resumes. A corrupt one raises."""
        self.core.restore_point = self.store.recover()
        if self.core.restore_point is not None:
            self.coordinator.restored(self.core.restore_point.checkpoint_id, now_ms(), str(self.core.restore_point.directory))

    # -- the job's events ------------------------------------------------------------------------

    def job_status_changed(self, status: JobStatus) -> None:
        if status is JobStatus.RUNNING:
            self.maybe_start()
            return
        if self._running:
            self._running = False
            self._run(self.coordinator.stop())
        if status in (JobStatus.FINISHED, JobStatus.CANCELED):
            # Not a tracked task: stopping the JobMaster (right after this) must not cancel it.
            asyncio.get_running_loop().run_in_executor(None, shutil.rmtree, self.store.job_dir, True)
        elif status is JobStatus.FAILED and self.store.latest() is not None:
            log.info("job %s failed; its checkpoints are kept in %s", self.core.job_id.hex(), self.store.job_dir)

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

    def restored(self, checkpoint_id: int, path: str) -> None:
        self.coordinator.restored(checkpoint_id, now_ms(), path)

    def acknowledge(self, request: cpb.AcknowledgeCheckpointRequest) -> None:
        handle = FileStateHandle(request.state_path, request.state_size) if request.state_path else None
        self._run(self.coordinator.acknowledge(request.checkpoint_id, request.execution_attempt_id, handle,
                                               request.state_size))

    def decline(self, request: cpb.DeclineCheckpointRequest) -> None:
        try:
            reason = CheckpointFailureReason(request.reason)
        except ValueError:
            reason = CheckpointFailureReason.CHECKPOINT_DECLINED
        self._run(self.coordinator.decline(request.checkpoint_id, request.execution_attempt_id, reason, request.message))

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- commands --------------------------------------------------------------------------------

    def _run(self, commands: list[Command]) -> None:
        for command in commands:
            if isinstance(command, TriggerCheckpoint):
                self._finished_at_trigger[command.checkpoint_id] = self.core.finished_task_keys()
                for attempt_id in command.attempt_ids:
                    self._to_task(attempt_id, "TriggerCheckpoint", cpb.TriggerCheckpointRequest(
                        execution_attempt_id=attempt_id, checkpoint_id=command.checkpoint_id,
                        timestamp_ms=int(command.timestamp_ms + self._wall_minus_monotonic_ms)))
            elif isinstance(command, FinalizeCheckpoint):
                self._spawn(self._finalize(command))
            elif isinstance(command, NotifyCheckpointComplete):
                self._to_task(command.attempt_id, "NotifyCheckpoint", cpb.CheckpointNotification(
                    execution_attempt_id=command.attempt_id, checkpoint_id=command.checkpoint_id))
            elif isinstance(command, NotifyCheckpointAborted):
                self._finished_at_trigger.pop(command.checkpoint_id, None)
                self._to_task(command.attempt_id, "NotifyCheckpoint", cpb.CheckpointNotification(
                    execution_attempt_id=command.attempt_id, checkpoint_id=command.checkpoint_id, aborted=True))
            elif isinstance(command, DiscardState):
                self._spawn(asyncio.to_thread(discard_state, command.handle))
            elif isinstance(command, DiscardCheckpoint):
                self._spawn(asyncio.to_thread(self._discard, command.checkpoint_id))
            elif isinstance(command, FailJob):
                self._fail_job(command.message)
        self._schedule()

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
        try:
            checkpoint = await asyncio.to_thread(self.store.add_checkpoint, command.checkpoint_id, command.timestamp_ms,
                                                 command.task_states, finished)
        except Exception as exc:
            log.warning("checkpoint %d: writing its metadata failed: %s", command.checkpoint_id, exc)
            self._run(self.coordinator.checkpoint_finalize_failed(command.checkpoint_id, f"{type(exc).__name__}: {exc}"))
            return
        commands = self.coordinator.checkpoint_finalized(command.checkpoint_id, now_ms(), self.core.checkpoint_tasks())
        if any(isinstance(c, DiscardCheckpoint) for c in commands):
            self._run(commands)  # aborted while the metadata was written: not a restore point
            return
        self.core.restore_point = checkpoint
        self._run(commands)

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
        return cpb.CheckpointSummary(
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
        )

