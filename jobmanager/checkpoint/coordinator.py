"""The JobMaster's checkpoint coordinator: one job's checkpoint bookkeeping, without I/O.

Events go in (``start``, ``tick``, ``acknowledge``, ``decline``, ``task_finished``,
``task_failed``, ``checkpoint_finalized``, ``stop``, ``restored``); commands come out
(``TriggerCheckpoint``, ``FinalizeCheckpoint``, ``NotifyCheckpointComplete``...), carried out by
the JobMaster's shell. Time is passed in (milliseconds, any monotonic origin); the shell calls
``tick(now)`` at ``next_deadline()``. The rules are Flink's ``CheckpointCoordinator``,
``CheckpointRequestDecider`` and ``CheckpointFailureManager``:

* Periodic trigger every ``interval``; the first after a random delay in [min pause, interval].
* At most one checkpoint in flight (Flink's default ``max-concurrent-checkpoints``); a periodic
  trigger that comes due meanwhile is queued and runs when the checkpoint in flight ends.
* ``min pause``: a checkpoint never starts sooner than ``min_pause`` after the last *completed*
  one; a trigger that comes too early is dropped and the periodic timer restarts at that point.
* Ids come from a :class:`CheckpointIDCounter` (an input: the shell recovers it so that an id is
  never reused after a restart or a JobManager failover) and are drawn only once a checkpoint
  really starts.
* The plan: running tasks whose inputs all finished are triggered (sources, and the first running
  tasks below finished sources); every running task must acknowledge; finished tasks are left out.
  A task neither running nor finished (deploying, failed...) makes the trigger fail with
  ``NOT_ALL_REQUIRED_TASKS_RUNNING`` (no id drawn, not counted against tolerance).
* A checkpoint aborts on its timeout (``CHECKPOINT_EXPIRED``), a decline, a failed task
  (``TASK_FAILURE``), a task that finished before acknowledging (``..._INPUT_END_OF_STREAM``) or
  a stop. Only expired, declined, async and I/O failures count against
  ``tolerable_failed_checkpoints``, each checkpoint once, and only checkpoints newer than the last
  completed one; more than the tolerable number in a row fails the job. A completion resets it.
* Acknowledgements name an execution attempt; an ack from an attempt outside the checkpoint's plan
  (a stale or unknown attempt) or for a checkpoint no longer pending is ignored and its state is
  discarded; a duplicate ack is ignored. Declines from attempts outside the plan are ignored too
  (Flink trusts them; we fence zombie attempts).
* Failover: a stop (the job restarts) or ``abort_pending`` (a region is redeployed) aborts the
  checkpoint in flight even if every task acked and its metadata is being written (Flink's
  ``abortPendingCheckpoints`` in ``restoreState``): only a checkpoint acked by the new attempts may
  replace the one they restore. A finalizing checkpoint is discarded once its write reports back.

A pending checkpoint's states::

    PENDING --(every task acked)--> FINALIZING --(metadata written + stored)--> COMPLETED
       |                                 |
       +--(timeout, decline, task failed | finished, stop)--> ABORTED <--(timeout, write failed, stop)

On FINALIZING the coordinator emits ``FinalizeCheckpoint`` (write ``_metadata`` atomically, add
to the completed-checkpoint store); only once the shell reports ``checkpoint_finalized`` does it
emit ``NotifyCheckpointComplete`` to every task of the plan, so a task never commits side effects
(a sink's transaction) of a checkpoint that a restart could not restore.
"""
from __future__ import annotations

import dataclasses
import enum
from collections import deque
import logging
import random
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional, Union

from millstream.runtime.checkpoint_ids import INITIAL_CHECKPOINT_ID, CheckpointIDCounter
from millstream.runtime.execution_state import ExecutionState
from millstream.runtime.state_machine import StateMachine

log = logging.getLogger(__name__)

EXCEEDED_TOLERABLE_FAILURES = "Exceeded checkpoint tolerable failure threshold."


class CheckpointFailureReason(str, enum.Enum):
    """Why a checkpoint failed (Flink's names). ``counts_against_tolerance`` says which ones."""

    NOT_ALL_REQUIRED_TASKS_RUNNING = "NOT_ALL_REQUIRED_TASKS_RUNNING"
    CHECKPOINT_EXPIRED = "CHECKPOINT_EXPIRED"
    CHECKPOINT_DECLINED = "CHECKPOINT_DECLINED"
    CHECKPOINT_ASYNC_EXCEPTION = "CHECKPOINT_ASYNC_EXCEPTION"
    IO_EXCEPTION = "IO_EXCEPTION"
    CHECKPOINT_DECLINED_TASK_NOT_READY = "CHECKPOINT_DECLINED_TASK_NOT_READY"
    CHECKPOINT_DECLINED_TASK_CLOSING = "CHECKPOINT_DECLINED_TASK_CLOSING"
    CHECKPOINT_DECLINED_INPUT_END_OF_STREAM = "CHECKPOINT_DECLINED_INPUT_END_OF_STREAM"
    CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER = "CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER"
    CHECKPOINT_DECLINED_SUBSUMED = "CHECKPOINT_DECLINED_SUBSUMED"
    TASK_FAILURE = "TASK_FAILURE"
    FINALIZE_CHECKPOINT_FAILURE = "FINALIZE_CHECKPOINT_FAILURE"
    CHECKPOINT_COORDINATOR_SUSPEND = "CHECKPOINT_COORDINATOR_SUSPEND"
    CHECKPOINT_COORDINATOR_SHUTDOWN = "CHECKPOINT_COORDINATOR_SHUTDOWN"
    JOB_FAILOVER_REGION = "JOB_FAILOVER_REGION"
    TRIGGER_CHECKPOINT_FAILURE = "TRIGGER_CHECKPOINT_FAILURE"

    @property
    def counts_against_tolerance(self) -> bool:
        return self in _COUNTED


_R = CheckpointFailureReason
_COUNTED = frozenset({_R.CHECKPOINT_EXPIRED, _R.CHECKPOINT_DECLINED, _R.CHECKPOINT_ASYNC_EXCEPTION, _R.IO_EXCEPTION})


class PendingState(str, enum.Enum):
    PENDING = "PENDING"
    FINALIZING = "FINALIZING"
    COMPLETED = "COMPLETED"
    ABORTED = "ABORTED"

    def is_terminal(self) -> bool:
        return self in (PendingState.COMPLETED, PendingState.ABORTED)


PENDING_TRANSITIONS: dict[PendingState, frozenset[PendingState]] = {
    PendingState.PENDING: frozenset({PendingState.FINALIZING, PendingState.ABORTED}),
    PendingState.FINALIZING: frozenset({PendingState.COMPLETED, PendingState.ABORTED}),
    PendingState.COMPLETED: frozenset(),
    PendingState.ABORTED: frozenset(),
}
PENDING_STATES = StateMachine("checkpoint", PENDING_TRANSITIONS, log)


# -- the id counter (an input) --------------------------------------------------------------------


class CheckpointIDUnavailable(Exception):
    """No checkpoint id is ready (the HA counter's next id is still being drawn)."""


class PrefetchedCheckpointIDCounter:
    """A non-blocking face of a blocking counter (ZooKeeper's, under HA): it holds one id drawn
    ahead and hands it out; ``refill(min_next)`` asks the shell to draw the next one off the event
    loop (at least ``min_next`` when not None) and to hand it in with :meth:`supply` (or
    :meth:`refill_failed`). With no id ready a trigger fails (not counted against the tolerable
    failures) and the next one asks again. Ids drawn but never used are gaps, never reuses."""

    def __init__(self, refill: Callable[[Optional[int]], None], floor: int = INITIAL_CHECKPOINT_ID) -> None:
        self._refill = refill
        self._next: Optional[int] = None
        self._floor = floor  # no id below this is ever handed out again
        self._refilling = False

    @property
    def ready(self) -> bool:
        return self._next is not None

    def supply(self, next_id: int) -> None:
        self._refilling = False
        if next_id >= self._floor:
            self._next = next_id
        else:  # drawn before a set_count: not usable, draw again
            self._request(self._floor)

    def refill_failed(self) -> None:
        self._refilling = False

    def _request(self, min_next: Optional[int]) -> None:
        self._refilling = True
        self._refill(min_next)

    def get_and_increment(self) -> int:
        if self._next is None:
            if not self._refilling:
                self._request(self._floor)
            raise CheckpointIDUnavailable("no checkpoint id is ready yet (the HA checkpoint id counter is being read)")
        value, self._next = self._next, None
        self._floor = value + 1
        self._request(None)
        return value

    def get(self) -> int:
        return self._next if self._next is not None else self._floor

    def set_count(self, next_id: int) -> None:
        if next_id < INITIAL_CHECKPOINT_ID:
            raise ValueError(f"checkpoint ids start at {INITIAL_CHECKPOINT_ID}, got {next_id}")
        if self._next is not None and self._next >= next_id:
            return
        self._next = None
        self._floor = max(self._floor, next_id)
        self._request(self._floor)


# -- inputs --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckpointSettings:
    interval_ms: int
    timeout_ms: int = 600_000
    min_pause_ms: int = 0
    tolerable_failed_checkpoints: int = 0

    def __post_init__(self) -> None:
        if self.interval_ms < 10:
            raise ValueError(f"checkpoint interval must be at least 10 ms, got {self.interval_ms}")
        if self.timeout_ms < 1:
            raise ValueError(f"checkpoint timeout must be at least 1 ms, got {self.timeout_ms}")
        if self.min_pause_ms < 0:
            raise ValueError(f"min pause between checkpoints must not be negative, got {self.min_pause_ms}")
        if self.tolerable_failed_checkpoints < 0:
            raise ValueError(
                f"tolerable failed checkpoints must not be negative, got {self.tolerable_failed_checkpoints}")


@dataclass(frozen=True)
class TaskSnapshot:
    """One current task as the JobMaster sees it when a checkpoint is triggered.

    ``task_key`` is stable across attempts (job vertex and subtask): the checkpoint's state is
    stored under it. ``upstream`` holds the task keys of the tasks it reads from (empty: a source).
    """

    attempt_id: bytes
    task_key: str
    state: ExecutionState
    upstream: frozenset[str] = frozenset()


# -- commands ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TriggerCheckpoint:
    """Inject barrier ``checkpoint_id`` at these task attempts (sources, or tasks whose inputs all
    finished)."""

    checkpoint_id: int
    timestamp_ms: float
    attempt_ids: tuple[bytes, ...]
    stop: bool = False  # stop-with-savepoint's synchronous savepoint (the tasks end once it completes)
    drain: bool = False  # with stop: the tasks end their input first (MAX_WATERMARK)
    savepoint: bool = False  # keyed state in the canonical format (RocksDB: not incremental)
    full: bool = False  # a checkpoint of Flink's FULL type: canonical too, but kept as a checkpoint


@dataclass(frozen=True)
class FinalizeCheckpoint:
    """Every task acked: write ``_metadata`` atomically and add the checkpoint to the completed
    store, then report ``checkpoint_finalized`` (or ``checkpoint_finalize_failed``)."""

    checkpoint_id: int
    timestamp_ms: float
    task_states: dict[str, object]  # task key -> the state handle its ack carried (None: no state)


@dataclass(frozen=True)
class NotifyCheckpointComplete:
    attempt_id: bytes
    checkpoint_id: int


@dataclass(frozen=True)
class NotifyCheckpointAborted:
    attempt_id: bytes
    checkpoint_id: int


@dataclass(frozen=True)
class DiscardState:
    """Delete a state handle nobody will reference (a late, stale or aborted checkpoint's ack)."""

    checkpoint_id: int
    handle: object


@dataclass(frozen=True)
class DiscardCheckpoint:
    """Delete an aborted checkpoint's directory and whatever its tasks wrote there."""

    checkpoint_id: int


@dataclass(frozen=True)
class FailJob:
    message: str
    reason: CheckpointFailureReason


Command = Union[TriggerCheckpoint, FinalizeCheckpoint, NotifyCheckpointComplete, NotifyCheckpointAborted,
                DiscardState, DiscardCheckpoint, FailJob]


# -- statistics ----------------------------------------------------------------------------------


CHECKPOINT_HISTORY_SIZE = 10  # Flink's web.checkpoints.history default


@dataclass(frozen=True)
class SubtaskAck:
    """One subtask's acknowledgement as the statistics keep it (Flink's SubtaskStateStats): when
    it arrived (the coordinator's clock) and the figures the task sent with it."""

    task_key: str
    ack_ms: Optional[float]
    state_size: int = 0
    sync_ms: int = 0
    async_ms: int = 0
    alignment_ms: int = 0
    start_delay_ms: int = 0


@dataclass(frozen=True)
class CheckpointRecord:
    """A completed or failed checkpoint in the recent history (times on the coordinator's clock)."""

    checkpoint_id: int
    status: str  # COMPLETED or FAILED
    is_savepoint: bool
    trigger_ms: float
    end_ms: Optional[float]  # None: a failure reported without a time
    size_bytes: int = 0
    failure_message: str = ""
    num_subtasks: int = 0  # the tasks that had to acknowledge it
    num_acknowledged: int = 0  # those that did
    subtasks: tuple[SubtaskAck, ...] = ()  # the acknowledgements, in arrival order


@dataclass
class CheckpointStats:
    """The figures ``millstream status`` shows (Flink's CheckpointStatsSnapshot, trimmed)."""

    num_completed: int = 0
    num_failed: int = 0
    num_in_progress: int = 0
    last_completed_id: Optional[int] = None
    last_completed_duration_ms: Optional[float] = None
    last_completed_size_bytes: Optional[int] = None
    last_completed_at_ms: Optional[float] = None
    last_failed_id: Optional[int] = None  # None also for a trigger that failed before an id
    last_failure_reason: Optional[str] = None
    last_failure_message: Optional[str] = None
    latest_restored_id: Optional[int] = None
    latest_restored_at_ms: Optional[float] = None
    latest_restored_path: Optional[str] = None
    # The latest completed and failed checkpoints, oldest first (the REST API's history).
    history: deque[CheckpointRecord] = field(default_factory=lambda: deque(maxlen=CHECKPOINT_HISTORY_SIZE))
    # The latest failed checkpoint and completed savepoint, kept after they leave the history
    # (Flink's latest.failed and latest.savepoint).
    last_failed: Optional[CheckpointRecord] = None
    last_savepoint: Optional[CheckpointRecord] = None


# -- the pending checkpoint ----------------------------------------------------------------------


def _record(pending: "PendingCheckpoint", status: str, now_ms: Optional[float], message: str = "") -> CheckpointRecord:
    total = len(pending.to_wait_for)
    return CheckpointRecord(pending.checkpoint_id, status, pending.forced, pending.timestamp_ms, now_ms,
                            pending.size_bytes, message, total, total - len(pending.not_yet_acked),
                            tuple(pending.acks.values()))


@dataclass(eq=False)
class PendingCheckpoint:
    checkpoint_id: int
    timestamp_ms: float
    deadline_ms: float
    to_wait_for: dict[bytes, str]  # attempt id -> task key
    to_commit: tuple[bytes, ...]
    not_yet_acked: set[bytes] = field(default_factory=set)
    task_states: dict[str, object] = field(default_factory=dict)
    acks: dict[str, SubtaskAck] = field(default_factory=dict)  # task key -> its ack's figures
    size_bytes: int = 0
    state: PendingState = PendingState.PENDING
    forced: bool = False  # a savepoint

    def transition(self, target: PendingState, reason: str) -> None:
        self.state = PENDING_STATES.transition(self.state, target, str(self.checkpoint_id), reason)


# -- the coordinator -----------------------------------------------------------------------------


class CheckpointCoordinator:
    """Decides when checkpoints start, collects acks, completes or aborts them, counts failures."""

    def __init__(self, settings: CheckpointSettings, counter: CheckpointIDCounter,
                 rng: Optional[random.Random] = None) -> None:
        self.settings = settings
        self.counter = counter
        self.stats = CheckpointStats()
        self._rng = rng or random.Random()
        self._running = False
        self._next_trigger_ms: Optional[float] = None
        self._queued_periodic = False
        self._pending: Optional[PendingCheckpoint] = None
        self._last_completion_ms: Optional[float] = None
        self._aborted_recently: set[int] = set()
        # Aborted while their metadata was being written: discarded once the write reports back,
        # never while it runs (the two would race on the same directory).
        self._aborted_finalizing: set[int] = set()
        # CheckpointFailureManager's bookkeeping
        self._continuous_failures = 0
        self._counted_ids: set[int] = set()
        self._last_succeeded_id = 0

    # -- scheduling ------------------------------------------------------------------------------

    @property
    def pending(self) -> Optional[PendingCheckpoint]:
        return self._pending

    def start(self, now_ms: float) -> list[Command]:
        """Start periodic checkpoints (the job is RUNNING). The first comes after a random delay in
        [min pause, interval], as Flink spreads the checkpoints of many jobs."""
        self._running = True
        low = min(self.settings.min_pause_ms, self.settings.interval_ms)
        self._next_trigger_ms = now_ms + self._rng.randint(low, self.settings.interval_ms)
        return self.tick(now_ms)

    def stop(self, reason: CheckpointFailureReason = _R.CHECKPOINT_COORDINATOR_SUSPEND) -> list[Command]:
        """Stop periodic checkpoints and abort the one in flight (the job is failing, restarting,
        cancelled or finished). Suspension does not count against tolerance."""
        self._running = False
        self._next_trigger_ms = None
        self._queued_periodic = False
        if self._pending is None:
            return []
        return self._abort(self._pending, reason, "the job stopped running (failing, restarting, cancelled or finished)", None)

    def abort_pending(self, reason: CheckpointFailureReason = _R.JOB_FAILOVER_REGION) -> list[Command]:
        """Tasks are being restored (Flink's ``restoreState``: a region failover): the checkpoint in
        flight, pending or finalizing, aborts, since acks of the failed attempts must never make
        a checkpoint complete after the new attempts restored an older one (it would subsume the
        checkpoint they read). Periodic checkpoints go on; not counted against tolerance."""
        if self._pending is None:
            return []
        return self._abort(self._pending, reason, "tasks are being restored (a failover)", None)

    def next_deadline(self) -> Optional[float]:
        """When ``tick`` next has something to do (a trigger or a timeout), or None."""
        times = [t for t in (self._next_trigger_ms, self._pending.deadline_ms if self._pending else None)
                 if t is not None]
        return min(times) if times else None

    def tick(self, now_ms: float, tasks: Iterable[TaskSnapshot] = ()) -> list[Command]:
        """Expire an overdue checkpoint and run the periodic trigger if it is due. ``tasks`` are
        the job's current tasks, needed only if a checkpoint may start now."""
        out: list[Command] = []
        pending = self._pending
        if pending is not None and now_ms >= pending.deadline_ms:
            out += self._abort(pending, _R.CHECKPOINT_EXPIRED,
                               f"Checkpoint expired before completing ({self.settings.timeout_ms} ms)", None, now_ms)
        if self._running and self._next_trigger_ms is not None and now_ms >= self._next_trigger_ms:
            self._next_trigger_ms += self.settings.interval_ms * max(
                1, 1 + int((now_ms - self._next_trigger_ms) // self.settings.interval_ms))
            self._queued_periodic = True
        return out + self._run_queued(now_ms, tasks)

    def suspend_periodic(self) -> None:
        """No periodic checkpoint starts any more; the one in flight goes on (stop-with-savepoint:
        the savepoint must be the job's last checkpoint)."""
        self._running = False
        self._next_trigger_ms = None
        self._queued_periodic = False

    def trigger_now(self, now_ms: float, tasks: Iterable[TaskSnapshot], stop: bool = False,
                    drain: bool = False, savepoint: bool = True, full: bool = False) -> list[Command]:
        """A forced checkpoint (a savepoint): starts at once, ignoring the min pause, unless one is
        in flight (then nothing: ask again once it ended). The TriggerCheckpoint names its id.
        ``stop``/``drain``: stop-with-savepoint's synchronous savepoint, carried to the tasks.
        ``savepoint`` False: a checkpoint triggered by hand (Flink's ``POST /jobs/:id/checkpoints``),
        counted and kept as a periodic one is; ``full`` with it: Flink's FULL type (not incremental)."""
        if self._pending is not None:
            return []
        commands = self._trigger(now_ms, list(tasks), forced=savepoint)
        return [dataclasses.replace(c, stop=stop, drain=drain, savepoint=savepoint, full=full) if isinstance(c, TriggerCheckpoint) else c
                for c in commands]

    def _run_queued(self, now_ms: float, tasks: Iterable[TaskSnapshot]) -> list[Command]:
        """CheckpointRequestDecider: a queued request waits for the checkpoint in flight, and a
        periodic one that comes before the min pause is dropped and the timer restarted."""
        if not self._queued_periodic or self._pending is not None or not self._running:
            return []
        if self._last_completion_ms is not None:
            earliest = self._last_completion_ms + self.settings.min_pause_ms
            if now_ms < earliest:
                self._queued_periodic = False
                self._next_trigger_ms = earliest  # the periodic trigger continues from there
                log.debug("checkpoint trigger too early (min pause): next at %s", earliest)
                return []
        self._queued_periodic = False
        return self._trigger(now_ms, list(tasks))

    def _trigger(self, now_ms: float, tasks: list[TaskSnapshot], forced: bool = False) -> list[Command]:
        finished = {t.task_key for t in tasks if t.state is ExecutionState.FINISHED}
        running = [t for t in tasks if t.state is ExecutionState.RUNNING]
        not_ready = [t for t in tasks if t.state not in (ExecutionState.RUNNING, ExecutionState.FINISHED)]
        if not_ready or not running:
            what = (f"{len(not_ready)} task(s) not running, e.g. {not_ready[0].task_key} is "
                    f"{not_ready[0].state.value}") if not_ready else "no running tasks"
            return self._trigger_failed(now_ms, f"Not all required tasks are currently running: {what}")
        to_trigger = tuple(t.attempt_id for t in running if t.upstream <= finished)
        if not to_trigger:  # cannot happen in a DAG whose tasks are all running or finished
            return self._trigger_failed(now_ms, "no running task has all its inputs finished")
        try:
            checkpoint_id = self.counter.get_and_increment()
        except CheckpointIDUnavailable as exc:
            return self._trigger_failed(now_ms, str(exc), _R.TRIGGER_CHECKPOINT_FAILURE)
        to_wait_for = {t.attempt_id: t.task_key for t in running}
        self._pending = PendingCheckpoint(
            checkpoint_id, now_ms, now_ms + self.settings.timeout_ms, to_wait_for,
            tuple(to_wait_for), not_yet_acked=set(to_wait_for), forced=forced)
        self.stats.num_in_progress = 1
        log.info("Triggering checkpoint %d (%d tasks to trigger, %d to ack, %d finished)",
                 checkpoint_id, len(to_trigger), len(to_wait_for), len(finished))
        return [TriggerCheckpoint(checkpoint_id, now_ms, to_trigger)]

    def _trigger_failed(self, now_ms: float, message: str,
                        reason: CheckpointFailureReason = _R.NOT_ALL_REQUIRED_TASKS_RUNNING) -> list[Command]:
        log.info("Failed to trigger checkpoint: %s", message)
        self.stats.num_failed += 1
        self.stats.last_failed_id = None
        self.stats.last_failure_reason = reason.value
        self.stats.last_failure_message = message
        return []

    # -- task messages ---------------------------------------------------------------------------

    def acknowledge(self, checkpoint_id: int, attempt_id: bytes, handle: object = None,
                    state_size: int = 0, now_ms: Optional[float] = None, sync_ms: int = 0, async_ms: int = 0,
                    alignment_ms: int = 0, start_delay_ms: int = 0) -> list[Command]:
        """A task wrote its snapshot of ``checkpoint_id``; ``handle`` is opaque to the coordinator.
        ``now_ms`` (when the ack arrived) and the task's durations are kept for the statistics."""
        pending = self._pending
        if pending is None or pending.checkpoint_id != checkpoint_id or pending.state is not PendingState.PENDING:
            late = "late" if checkpoint_id in self._aborted_recently else "unknown"
            log.info("discarding the state of a %s ack for checkpoint %d from %s", late, checkpoint_id, attempt_id.hex())
            return [DiscardState(checkpoint_id, handle)] if handle is not None else []
        if attempt_id not in pending.to_wait_for:
            log.warning("ack for checkpoint %d from unknown or stale attempt %s: discarding its state",
                        checkpoint_id, attempt_id.hex())
            return [DiscardState(checkpoint_id, handle)] if handle is not None else []
        if attempt_id not in pending.not_yet_acked:
            log.debug("duplicate ack for checkpoint %d from %s", checkpoint_id, attempt_id.hex())
            return []
        pending.not_yet_acked.discard(attempt_id)
        task_key = pending.to_wait_for[attempt_id]
        pending.task_states[task_key] = handle
        pending.size_bytes += max(0, int(state_size))
        pending.acks[task_key] = SubtaskAck(task_key, now_ms, max(0, int(state_size)), max(0, sync_ms), max(0, async_ms),
                                            max(0, alignment_ms), max(0, start_delay_ms))
        if pending.not_yet_acked:
            return []
        pending.transition(PendingState.FINALIZING, "every task acknowledged")
        return [FinalizeCheckpoint(checkpoint_id, pending.timestamp_ms, dict(pending.task_states))]

    def decline(self, checkpoint_id: int, attempt_id: bytes, reason: CheckpointFailureReason = _R.CHECKPOINT_DECLINED,
                message: str = "") -> list[Command]:
        """A task could not take its snapshot: the checkpoint aborts."""
        pending = self._pending
        if pending is None or pending.checkpoint_id != checkpoint_id or pending.state is not PendingState.PENDING:
            log.debug("decline of checkpoint %d that is not pending, from %s", checkpoint_id, attempt_id.hex())
            return []
        if attempt_id not in pending.to_wait_for:
            log.warning("ignoring decline of checkpoint %d from unknown or stale attempt %s",
                        checkpoint_id, attempt_id.hex())
            return []
        task = pending.to_wait_for[attempt_id]
        return self._abort(pending, reason, f"Task {task} declined checkpoint {checkpoint_id}: {message or reason.value}",
                           attempt_id)

    def task_failed(self, attempt_id: bytes, message: str = "") -> list[Command]:
        """A task failed: the checkpoint in flight aborts unless that task had already acked."""
        pending = self._pending
        if pending is None or attempt_id not in pending.not_yet_acked:
            return []
        return self._abort(pending, _R.TASK_FAILURE,
                           f"Task {pending.to_wait_for[attempt_id]} failed: {message or 'no message'}", attempt_id)

    def task_finished(self, attempt_id: bytes) -> list[Command]:
        """A task finished (end of a bounded input) before acking the checkpoint in flight: that
        checkpoint can never complete, so it aborts without counting; the next one leaves the
        finished task out."""
        pending = self._pending
        if pending is None or pending.state is not PendingState.PENDING or attempt_id not in pending.not_yet_acked:
            return []
        return self._abort(pending, _R.CHECKPOINT_DECLINED_INPUT_END_OF_STREAM,
                           f"Task {pending.to_wait_for[attempt_id]} finished before acknowledging", attempt_id)

    # -- the shell's reports on finalization ------------------------------------------------------

    def checkpoint_finalized(self, checkpoint_id: int, now_ms: float, tasks: Iterable[TaskSnapshot] = ()) -> list[Command]:
        """The metadata is written and the checkpoint is in the completed store: notify every task."""
        pending = self._pending
        if pending is None or pending.checkpoint_id != checkpoint_id or pending.state is not PendingState.FINALIZING:
            # Expired or stopped while the metadata was written: it must not survive as completed.
            log.warning("checkpoint %d finalized after it was aborted: discarding it", checkpoint_id)
            self._aborted_finalizing.discard(checkpoint_id)
            return [DiscardCheckpoint(checkpoint_id)]
        pending.transition(PendingState.COMPLETED, "metadata written")
        self._pending = None
        self._last_completion_ms = now_ms
        s = self.stats
        s.num_completed += 1
        s.num_in_progress = 0
        s.last_completed_id = checkpoint_id
        s.last_completed_duration_ms = now_ms - pending.timestamp_ms
        s.last_completed_size_bytes = pending.size_bytes
        s.last_completed_at_ms = now_ms
        record = _record(pending, "COMPLETED", now_ms)
        s.history.append(record)
        if record.is_savepoint:
            s.last_savepoint = record
        if checkpoint_id > self._last_succeeded_id:
            self._last_succeeded_id = checkpoint_id
            self._continuous_failures = 0
            self._counted_ids.clear()
        log.info("Completed checkpoint %d (%d bytes in %.0f ms)", checkpoint_id, pending.size_bytes,
                 s.last_completed_duration_ms)
        out: list[Command] = [NotifyCheckpointComplete(a, checkpoint_id) for a in pending.to_commit]
        return out + self._run_queued(now_ms, tasks)

    def checkpoint_finalize_failed(self, checkpoint_id: int, message: str) -> list[Command]:
        pending = self._pending
        if pending is None or pending.checkpoint_id != checkpoint_id or pending.state is not PendingState.FINALIZING:
            if checkpoint_id in self._aborted_finalizing:  # aborted meanwhile: its discard waited for this
                self._aborted_finalizing.discard(checkpoint_id)
                return [DiscardCheckpoint(checkpoint_id)]
            return []
        return self._abort(pending, _R.FINALIZE_CHECKPOINT_FAILURE,
                           f"Could not complete checkpoint {checkpoint_id}: {message}", None, finalization_ended=True)

    def stats_at_completion(self, checkpoint_id: int, now_ms: float) -> tuple[int, int, list[CheckpointRecord]]:
        """(completed, failed, history oldest first) as they will be once the finalizing
        checkpoint ``checkpoint_id`` completes at ``now_ms``: what its metadata keeps for a
        JobManager that recovers the job."""
        pending, s = self._pending, self.stats
        if pending is None or pending.checkpoint_id != checkpoint_id:
            raise ValueError(f"checkpoint {checkpoint_id} is not the one being finalized")
        record = _record(pending, "COMPLETED", now_ms)
        history = [*s.history, record][-CHECKPOINT_HISTORY_SIZE:]
        return s.num_completed + 1, s.num_failed, history

    def restore_stats(self, num_completed: int, num_failed: int, history: Iterable[CheckpointRecord]) -> None:
        """A recovered job (JobManager failover) goes on from the counts and history its latest
        completed checkpoint kept, instead of starting from zero."""
        s = self.stats
        s.num_completed, s.num_failed = max(0, num_completed), max(0, num_failed)
        s.history.clear()
        s.history.extend(history)
        s.last_failed = next((r for r in reversed(s.history) if r.status == "FAILED"), None)
        s.last_savepoint = next((r for r in reversed(s.history) if r.status == "COMPLETED" and r.is_savepoint), None)
        completed = [r for r in s.history if r.status == "COMPLETED"]
        if completed:
            last = completed[-1]
            s.last_completed_id, s.last_completed_size_bytes = last.checkpoint_id, last.size_bytes
            s.last_completed_at_ms = last.end_ms
            s.last_completed_duration_ms = last.end_ms - last.trigger_ms if last.end_ms is not None else None
            self._last_succeeded_id = max(self._last_succeeded_id, last.checkpoint_id)

    def restored(self, checkpoint_id: int, now_ms: float, path: Optional[str] = None) -> None:
        """The job restarts from ``checkpoint_id``: record it, and never hand out its id (or an
        earlier one) again."""
        if self.counter.get() <= checkpoint_id:
            self.counter.set_count(checkpoint_id + 1)
        self.stats.latest_restored_id = checkpoint_id
        self.stats.latest_restored_at_ms = now_ms
        self.stats.latest_restored_path = path

    # -- aborting --------------------------------------------------------------------------------

    def _abort(self, pending: PendingCheckpoint, reason: CheckpointFailureReason, message: str,
               attempt_id: Optional[bytes], now_ms: Optional[float] = None,
               finalization_ended: bool = False) -> list[Command]:
        """``finalization_ended``: the metadata write of a FINALIZING checkpoint already reported
        (it failed); otherwise a FINALIZING checkpoint's directory is discarded only once it does."""
        writing = pending.state is PendingState.FINALIZING and not finalization_ended
        pending.transition(PendingState.ABORTED, reason.value)
        self._pending = None
        cid = pending.checkpoint_id
        self._aborted_recently.add(cid)
        if len(self._aborted_recently) > 16:
            self._aborted_recently.discard(min(self._aborted_recently))
        s = self.stats
        s.num_failed += 1
        s.num_in_progress = 0
        s.last_failed_id = cid
        s.last_failure_reason = reason.value
        s.last_failure_message = message
        s.last_failed = _record(pending, "FAILED", now_ms, message)
        s.history.append(s.last_failed)
        log.warning("Checkpoint %d aborted (%s): %s", cid, reason.value, message)
        out: list[Command] = [NotifyCheckpointAborted(a, cid) for a in pending.to_commit]
        if writing:
            self._aborted_finalizing.add(cid)
        else:
            out.append(DiscardCheckpoint(cid))
        out += self._count_failure(cid, reason)
        return out

    def _count_failure(self, checkpoint_id: int, reason: CheckpointFailureReason) -> list[Command]:
        """CheckpointFailureManager: consecutive counted failures beyond the tolerable number fail
        the job; a checkpoint older than the last completed one no longer matters."""
        if not reason.counts_against_tolerance or checkpoint_id <= self._last_succeeded_id:
            return []
        if checkpoint_id in self._counted_ids:
            return []
        self._counted_ids.add(checkpoint_id)
        self._continuous_failures += 1
        if self._continuous_failures <= self.settings.tolerable_failed_checkpoints:
            return []
        failures = self._continuous_failures
        self._continuous_failures = 0
        self._counted_ids.clear()
        return [FailJob(f"{EXCEEDED_TOLERABLE_FAILURES} {failures} consecutive checkpoint failure(s), "
                        f"tolerable: {self.settings.tolerable_failed_checkpoints}; last: checkpoint "
                        f"{checkpoint_id} {reason.value}: {self.stats.last_failure_message}", reason)]
