"""Checkpoint barrier handling for a task with N input channels: a sans-I/O state machine.

Events in (``handler.on_event(channel, event)``), actions out (a list, in the order to carry them
out). An event is a :class:`CheckpointBarrier`, a :class:`CancelCheckpointMarker`,
:data:`END_OF_PARTITION`, or anything else, which is a record buffer (records, watermarks, ...)
and is handed back untouched as :class:`Deliver`.

Actions: :class:`Deliver` (process this buffer now), :class:`BlockChannel` /
:class:`UnblockChannel` (stop / resume reading that channel; ``blocked_channels`` says the same),
:class:`ForwardBarrier` + :class:`Snapshot` (broadcast the barrier downstream, then take the
synchronous part of the snapshot; nothing is processed between the two), :class:`AbortCheckpoint`
(decline the checkpoint to the coordinator and broadcast a cancel marker downstream, as Flink's
``abortCheckpointOnBarrier``), :class:`ChannelEnded` and :class:`EndOfInput`.

Exactly-once, aligned (Flink's ``SingleCheckpointBarrierHandler.aligned``):

- The first barrier n starts checkpoint n; its target is the channels open at that moment.
- A channel that delivered barrier n is blocked: anything that still arrives on it (buffers,
  barriers, cancel markers, end-of-partition) is held back in arrival order. The other channels
  are read as usual.
- When every target channel delivered barrier n, or ended (end-of-partition counts as aligned, as
  Flink with ``execution.checkpointing.checkpoints-after-tasks-finish`` on, its default), the
  handler forwards barrier n, snapshots n, unblocks every channel, and then replays the held
  events of each channel in order (a held barrier may block its channel again).
- The barrier that completes the alignment does not block its channel, so a task with a single
  open input channel snapshots at once, with no blocking.
- A barrier n+1 arriving before n completed aborts n (``CHECKPOINT_DECLINED_SUBSUMED``), unblocks
  everything and starts n+1 with that channel.
- A cancel marker for the pending checkpoint, or for a newer one, aborts it
  (``CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER``) and unblocks everything; a pending older
  checkpoint is aborted as subsumed first. Markers for checkpoints already completed or aborted
  are ignored.
- Barriers (and markers) of a checkpoint that is already completed or aborted, or older than the
  current one, are ignored and never block: each id is snapshotted at most once, ids only grow.
- With ``checkpoints_after_tasks_finish=False`` an end-of-partition aborts the pending checkpoint
  (``CHECKPOINT_DECLINED_INPUT_END_OF_STREAM``).

At-least-once (Flink's ``CheckpointBarrierTracker``): nothing is ever blocked, buffers flow
throughout. Several checkpoints may be pending; each counts the channels that delivered its
barrier (or ended) and is snapshotted when the count reaches the open channels at its start.
Completing n drops the older pending ones (aborted as subsumed; Flink drops them silently, the
coordinator does not count subsumed declines as failures). At most 50 are tracked, as Flink.
Cancel markers abort the marked checkpoint and every older pending one.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Union

from millstream.runtime.checkpointing_mode import CheckpointingMode


class AbortReason(str, Enum):
    """Flink's ``CheckpointFailureReason`` names for the declines a barrier handler makes."""

    SUBSUMED = "CHECKPOINT_DECLINED_SUBSUMED"
    CANCELLATION_BARRIER = "CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER"
    INPUT_END_OF_STREAM = "CHECKPOINT_DECLINED_INPUT_END_OF_STREAM"


# ---- events -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CheckpointBarrier:
    checkpoint_id: int
    timestamp: int
    options: Any = None  # carried through untouched (checkpoint or savepoint, storage location)
    # Stop-with-savepoint's synchronous savepoint (Flink's SavepointType suspend/terminate): a task
    # that snapshots it processes nothing more until it is complete (then it ends FINISHED without
    # an end of input) or aborted (then it goes on). ``drain``: the input ends first (MAX_WATERMARK,
    # every operator's end of input), so what that emits is in the savepoint.
    stop: bool = False
    drain: bool = False
    savepoint: bool = False  # a savepoint: keyed state in the canonical format, never incremental


@dataclass(frozen=True)
class CancelCheckpointMarker:
    checkpoint_id: int


class _EndOfPartition:
    _instance: _EndOfPartition | None = None

    def __new__(cls) -> _EndOfPartition:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "END_OF_PARTITION"


END_OF_PARTITION = _EndOfPartition()


# ---- actions ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Deliver:
    channel: int
    item: Any


@dataclass(frozen=True)
class BlockChannel:
    channel: int


@dataclass(frozen=True)
class UnblockChannel:
    channel: int


@dataclass(frozen=True)
class ForwardBarrier:
    barrier: CheckpointBarrier


@dataclass(frozen=True)
class Snapshot:
    barrier: CheckpointBarrier

    @property
    def checkpoint_id(self) -> int:
        return self.barrier.checkpoint_id


@dataclass(frozen=True)
class AbortCheckpoint:
    checkpoint_id: int
    reason: AbortReason


@dataclass(frozen=True)
class ChannelEnded:
    channel: int


@dataclass(frozen=True)
class EndOfInput:
    """Every input channel delivered end-of-partition."""


Action = Union[Deliver, BlockChannel, UnblockChannel, ForwardBarrier, Snapshot, AbortCheckpoint,
               ChannelEnded, EndOfInput]


# ---- handlers -----------------------------------------------------------------------------------
class BarrierHandler:
    """What both modes share: channel checks, held-back events and their in-order replay."""

    def __init__(self, num_channels: int, *, checkpoints_after_tasks_finish: bool = True) -> None:
        if isinstance(num_channels, bool) or not isinstance(num_channels, int) or num_channels < 1:
            raise ValueError(f"a barrier handler needs at least one input channel, got {num_channels!r}")
        self.num_channels = num_channels
        self._after_finish = checkpoints_after_tasks_finish
        self._open: set[int] = set(range(num_channels))
        self._eop_seen: set[int] = set()  # end-of-partition arrived (possibly still held back)
        self._blocked: set[int] = set()
        self._held: dict[int, deque[Any]] = {}
        self._out: list[Action] = []

    @property
    def blocked_channels(self) -> frozenset[int]:
        return frozenset(self._blocked)

    @property
    def open_channels(self) -> frozenset[int]:
        return frozenset(self._open)

    def held_count(self, channel: int) -> int:
        return len(self._held.get(channel, ()))

    def on_event(self, channel: int, event: Any) -> list[Action]:
        if isinstance(channel, bool) or not isinstance(channel, int) or not 0 <= channel < self.num_channels:
            raise ValueError(f"no input channel {channel!r}: this task has channels 0..{self.num_channels - 1}")
        if channel in self._eop_seen:
            raise ValueError(f"channel {channel} already delivered end-of-partition, then {event!r}")
        if event is END_OF_PARTITION:
            self._eop_seen.add(channel)
        out: list[Action] = []
        self._out = out
        if channel in self._blocked or channel in self._held:
            self._held.setdefault(channel, deque()).append(event)
        else:
            self._dispatch(channel, event)
        self._replay_held()
        return out

    def _dispatch(self, channel: int, event: Any) -> None:
        if isinstance(event, CheckpointBarrier):
            self._on_barrier(channel, event)
        elif isinstance(event, CancelCheckpointMarker):
            self._on_cancel(channel, event.checkpoint_id)
        elif event is END_OF_PARTITION:
            self._open.discard(channel)
            self._out.append(ChannelEnded(channel))
            self._on_end_of_partition(channel)
            if not self._open:
                self._out.append(EndOfInput())
        else:
            self._out.append(Deliver(channel, event))

    def _replay_held(self) -> None:
        progress = True
        while progress:
            progress = False
            for channel in sorted(self._held):
                queue = self._held[channel]
                while queue and channel not in self._blocked:
                    self._dispatch(channel, queue.popleft())
                    progress = True
                if not queue:
                    del self._held[channel]

    def _block(self, channel: int) -> None:
        if channel not in self._blocked:
            self._blocked.add(channel)
            self._out.append(BlockChannel(channel))

    def _unblock_all(self) -> None:
        for channel in sorted(self._blocked):
            self._out.append(UnblockChannel(channel))
        self._blocked.clear()

    def _trigger(self, barrier: CheckpointBarrier) -> None:
        self._out += [ForwardBarrier(barrier), Snapshot(barrier)]

    def _abort(self, checkpoint_id: int, reason: AbortReason) -> None:
        self._out.append(AbortCheckpoint(checkpoint_id, reason))

    def _on_barrier(self, channel: int, barrier: CheckpointBarrier) -> None:
        raise NotImplementedError

    def _on_cancel(self, channel: int, checkpoint_id: int) -> None:
        raise NotImplementedError

    def _on_end_of_partition(self, channel: int) -> None:
        raise NotImplementedError


class AlignedBarrierHandler(BarrierHandler):
    """Exactly-once: one checkpoint at a time, aligned by blocking (module docstring)."""

    def __init__(self, num_channels: int, *, checkpoints_after_tasks_finish: bool = True) -> None:
        super().__init__(num_channels, checkpoints_after_tasks_finish=checkpoints_after_tasks_finish)
        self._current_id = -1
        self._last_done_id = -1  # completed or aborted
        self._pending: CheckpointBarrier | None = None
        self._aligned: set[int] = set()
        self._target = 0

    def _is_pending(self) -> bool:
        return self._current_id >= 0 and self._current_id != self._last_done_id

    def _on_barrier(self, channel: int, barrier: CheckpointBarrier) -> None:
        barrier_id = barrier.checkpoint_id
        if barrier_id < self._current_id or (barrier_id == self._current_id and not self._is_pending()):
            return  # a checkpoint already completed, aborted or subsumed
        if barrier_id > self._current_id:
            if self._is_pending():
                self._abort_current(self._current_id, AbortReason.SUBSUMED)
            self._current_id = barrier_id
            self._pending = barrier
            self._aligned.clear()
            self._target = len(self._open)
        self._mark_aligned(channel, block=True)

    def _mark_aligned(self, channel: int, *, block: bool) -> None:
        self._aligned.add(channel)
        if len(self._aligned) >= self._target:
            assert self._pending is not None
            barrier, self._pending = self._pending, None
            self._last_done_id = self._current_id
            self._aligned.clear()
            self._trigger(barrier)
            self._unblock_all()
        elif block:
            self._block(channel)

    def _abort_current(self, checkpoint_id: int, reason: AbortReason) -> None:
        self._current_id = max(self._current_id, checkpoint_id)
        self._last_done_id = max(self._last_done_id, checkpoint_id)
        self._pending = None
        self._aligned.clear()
        self._target = 0
        self._unblock_all()
        self._abort(checkpoint_id, reason)

    def _on_cancel(self, channel: int, checkpoint_id: int) -> None:
        if checkpoint_id > self._current_id or (checkpoint_id == self._current_id and self._is_pending()):
            if checkpoint_id > self._current_id and self._is_pending():
                self._abort_current(self._current_id, AbortReason.SUBSUMED)
            self._abort_current(checkpoint_id, AbortReason.CANCELLATION_BARRIER)

    def _on_end_of_partition(self, channel: int) -> None:
        if not self._is_pending():
            return
        if self._after_finish:
            self._mark_aligned(channel, block=False)
        else:
            self._abort_current(self._current_id, AbortReason.INPUT_END_OF_STREAM)


@dataclass
class _BarrierCount:
    checkpoint_id: int
    barrier: CheckpointBarrier | None  # None: created by a cancel marker, never snapshotted
    target: int
    channels: set[int] = field(default_factory=set)
    aborted: bool = False


class BarrierTracker(BarrierHandler):
    """At-least-once: counts barriers per checkpoint, never blocks (module docstring)."""

    MAX_CHECKPOINTS_TO_TRACK = 50

    def __init__(self, num_channels: int, *, checkpoints_after_tasks_finish: bool = True) -> None:
        super().__init__(num_channels, checkpoints_after_tasks_finish=checkpoints_after_tasks_finish)
        self._pending: deque[_BarrierCount] = deque()
        self._latest_id = -1

    @property
    def pending_checkpoint_ids(self) -> list[int]:
        return [count.checkpoint_id for count in self._pending]

    def _on_barrier(self, channel: int, barrier: CheckpointBarrier) -> None:
        barrier_id = barrier.checkpoint_id
        position = next((i for i, c in enumerate(self._pending) if c.checkpoint_id == barrier_id), None)
        if position is not None:
            count = self._pending[position]
            count.channels.add(channel)
            if len(count.channels) >= count.target:
                self._complete(position)
        elif barrier_id > self._latest_id:
            self._latest_id = barrier_id
            count = _BarrierCount(barrier_id, barrier, len(self._open), {channel})
            self._pending.append(count)
            if len(count.channels) >= count.target:  # a single open channel: at once
                self._complete(len(self._pending) - 1)
            elif len(self._pending) > self.MAX_CHECKPOINTS_TO_TRACK:
                dropped = self._pending.popleft()
                if not dropped.aborted:
                    self._abort(dropped.checkpoint_id, AbortReason.SUBSUMED)
        # else: older than the newest checkpoint seen and not pending: it can no longer complete

    def _complete(self, position: int) -> None:
        """Pops the pending counts up to ``position``; snapshots that one, aborts older ones."""
        for _ in range(position):
            older = self._pending.popleft()
            if not older.aborted:
                self._abort(older.checkpoint_id, AbortReason.SUBSUMED)
        count = self._pending.popleft()
        if not count.aborted:
            assert count.barrier is not None
            self._trigger(count.barrier)

    def _on_cancel(self, channel: int, checkpoint_id: int) -> None:
        while self._pending and self._pending[0].checkpoint_id < checkpoint_id:
            older = self._pending.popleft()
            if not older.aborted:
                self._abort(older.checkpoint_id, AbortReason.CANCELLATION_BARRIER)
        if self._pending and self._pending[0].checkpoint_id == checkpoint_id:
            count = self._pending[0]
            if not count.aborted:
                count.aborted = True
                self._abort(checkpoint_id, AbortReason.CANCELLATION_BARRIER)
            count.channels.add(channel)  # still counted, to forget it once every channel spoke
            if len(count.channels) >= count.target:
                self._pending.popleft()
        elif checkpoint_id > self._latest_id:
            self._latest_id = checkpoint_id
            self._abort(checkpoint_id, AbortReason.CANCELLATION_BARRIER)
            if len(self._open) > 1:
                self._pending.appendleft(
                    _BarrierCount(checkpoint_id, None, len(self._open), {channel}, aborted=True))
        # else: a trailing marker of a checkpoint already aborted

    def _on_end_of_partition(self, channel: int) -> None:
        if not self._after_finish:
            while self._pending:
                count = self._pending.popleft()
                if not count.aborted:
                    self._abort(count.checkpoint_id, AbortReason.INPUT_END_OF_STREAM)
            return
        # the newest pending checkpoint that only waited for this channel completes
        for position in range(len(self._pending) - 1, -1, -1):
            count = self._pending[position]
            count.channels.add(channel)
            if len(count.channels) >= count.target:
                self._complete(position)
                return


def create_barrier_handler(num_channels: int, mode: CheckpointingMode | str = CheckpointingMode.EXACTLY_ONCE,
                           *, checkpoints_after_tasks_finish: bool = True) -> BarrierHandler:
    """The handler for ``execution.checkpointing.mode`` (EXACTLY_ONCE or AT_LEAST_ONCE)."""
    try:
        checked = CheckpointingMode[mode.upper()] if isinstance(mode, str) else CheckpointingMode(mode)
    except (KeyError, ValueError):
        raise ValueError(f"unknown checkpointing mode {mode!r}: expected EXACTLY_ONCE or AT_LEAST_ONCE") from None
    handler_type = AlignedBarrierHandler if checked is CheckpointingMode.EXACTLY_ONCE else BarrierTracker
    return handler_type(num_channels, checkpoints_after_tasks_finish=checkpoints_after_tasks_finish)
