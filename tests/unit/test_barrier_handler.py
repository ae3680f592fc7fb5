"""Barrier handling, from Flink's rules: aligned exactly-once (SingleCheckpointBarrierHandler) and
at-least-once (CheckpointBarrierTracker), including the interleavings that break naive versions."""
from __future__ import annotations

import random
from typing import Any

import pytest

from millstream.runtime.task.barrier_handler import (
    END_OF_PARTITION, AbortCheckpoint, AbortReason, Action, AlignedBarrierHandler, BarrierHandler,
    BarrierTracker, BlockChannel, CancelCheckpointMarker, ChannelEnded, CheckpointBarrier, Deliver,
    EndOfInput, ForwardBarrier, Snapshot, UnblockChannel, create_barrier_handler)

EXACTLY_ONCE, AT_LEAST_ONCE = "EXACTLY_ONCE", "AT_LEAST_ONCE"


def b(n: int) -> CheckpointBarrier:
    return CheckpointBarrier(n, 1_000 + n, options="checkpoint")


def feed(handler: BarrierHandler, events: list[tuple[int, Any]]) -> list[Action]:
    actions: list[Action] = []
    for channel, event in events:
        actions += handler.on_event(channel, event)
    return actions


def snapshots(actions: list[Action]) -> list[int]:
    return [a.checkpoint_id for a in actions if isinstance(a, Snapshot)]


def aborts(actions: list[Action]) -> list[tuple[int, AbortReason]]:
    return [(a.checkpoint_id, a.reason) for a in actions if isinstance(a, AbortCheckpoint)]


def delivered(actions: list[Action]) -> list[Any]:
    return [a.item for a in actions if isinstance(a, Deliver)]


# ---- exactly-once, aligned --------------------------------------------------------------------
def test_channel_that_delivered_the_barrier_is_blocked_and_its_buffers_wait_in_order() -> None:
    h = create_barrier_handler(2, EXACTLY_ONCE)
    assert h.on_event(0, b(1)) == [BlockChannel(0)]
    assert h.blocked_channels == {0}
    assert h.on_event(0, "a1") == [] and h.on_event(0, "a2") == []  # held back
    assert h.held_count(0) == 2
    assert h.on_event(1, "b1") == [Deliver(1, "b1")]  # the other channel is still read
    assert h.on_event(1, b(1)) == [ForwardBarrier(b(1)), Snapshot(b(1)), UnblockChannel(0),
                                   Deliver(0, "a1"), Deliver(0, "a2")]
    assert h.blocked_channels == frozenset() and h.held_count(0) == 0
    assert h.on_event(0, "a3") == [Deliver(0, "a3")]


@pytest.mark.parametrize("mode", [EXACTLY_ONCE, AT_LEAST_ONCE])
def test_single_input_task_snapshots_at_once_without_blocking(mode: str) -> None:
    h = create_barrier_handler(1, mode)
    assert h.on_event(0, "x") == [Deliver(0, "x")]
    assert h.on_event(0, b(1)) == [ForwardBarrier(b(1)), Snapshot(b(1))]
    assert h.on_event(0, b(2)) == [ForwardBarrier(b(2)), Snapshot(b(2))]
    assert h.blocked_channels == frozenset()


def test_out_of_order_barriers_across_three_channels() -> None:
    h = create_barrier_handler(3, EXACTLY_ONCE)
    actions = feed(h, [(2, b(1)), (0, "a1"), (2, "c1"), (0, b(1)), (1, "b1"), (0, "a2")])
    assert snapshots(actions) == []
    assert delivered(actions) == ["a1", "b1"]
    assert h.blocked_channels == {0, 2}
    actions = h.on_event(1, b(1))
    assert snapshots(actions) == [1]
    assert actions[:2] == [ForwardBarrier(b(1)), Snapshot(b(1))]  # before anything held is released
    assert set(a for a in actions if isinstance(a, UnblockChannel)) == {UnblockChannel(0), UnblockChannel(2)}
    assert delivered(actions) == ["a2", "c1"]


def test_a_held_newer_barrier_blocks_its_channel_again_after_release() -> None:
    h = create_barrier_handler(2, EXACTLY_ONCE)
    actions = feed(h, [(0, b(1)), (0, "x"), (0, b(2)), (0, "y"), (1, "z"), (1, b(1))])
    assert snapshots(actions) == [1]
    assert delivered(actions) == ["z", "x"]  # y stays behind barrier 2
    assert h.blocked_channels == {0} and h.held_count(0) == 1
    actions = feed(h, [(1, "w"), (1, b(2))])
    assert snapshots(actions) == [2] and delivered(actions) == ["w", "y"]


def test_end_of_partition_during_alignment_counts_as_aligned() -> None:
    h = create_barrier_handler(2, EXACTLY_ONCE)
    feed(h, [(0, b(1)), (0, "after")])
    actions = h.on_event(1, END_OF_PARTITION)
    assert actions == [ChannelEnded(1), ForwardBarrier(b(1)), Snapshot(b(1)), UnblockChannel(0),
                       Deliver(0, "after")]
    # the next checkpoint only waits for the channel still open: it triggers at once
    assert snapshots(h.on_event(0, b(2))) == [2]
    assert h.on_event(0, END_OF_PARTITION) == [ChannelEnded(0), EndOfInput()]


def test_channel_ended_before_the_checkpoint_is_not_waited_for() -> None:
    h = create_barrier_handler(3, EXACTLY_ONCE)
    feed(h, [(2, "c"), (2, END_OF_PARTITION)])
    assert snapshots(feed(h, [(0, b(1))])) == []
    assert snapshots(feed(h, [(1, b(1))])) == [1]


def test_end_of_partition_behind_a_barrier_waits_with_the_blocked_channel() -> None:
    h = create_barrier_handler(2, EXACTLY_ONCE)
    assert feed(h, [(0, b(1)), (0, "last"), (0, END_OF_PARTITION)]) == [BlockChannel(0)]
    assert h.open_channels == {0, 1}
    actions = h.on_event(1, b(1))
    assert actions == [ForwardBarrier(b(1)), Snapshot(b(1)), UnblockChannel(0), Deliver(0, "last"),
                       ChannelEnded(0)]
    assert h.open_channels == {1}


def test_end_of_partition_aborts_the_pending_checkpoint_when_checkpoints_after_finish_are_off() -> None:
    h = create_barrier_handler(2, EXACTLY_ONCE, checkpoints_after_tasks_finish=False)
    feed(h, [(0, b(1)), (0, "held")])
    actions = h.on_event(1, END_OF_PARTITION)
    assert aborts(actions) == [(1, AbortReason.INPUT_END_OF_STREAM)]
    assert snapshots(actions) == [] and delivered(actions) == ["held"]
    assert h.blocked_channels == frozenset()


def test_newer_barrier_subsumes_the_pending_checkpoint() -> None:
    h = create_barrier_handler(2, EXACTLY_ONCE)
    feed(h, [(0, b(1)), (0, "a-after-1")])
    actions = h.on_event(1, b(2))  # channel 1's upstream never sent barrier 1
    # Flink's abortInternal: resume the blocked channels, then decline
    assert actions == [UnblockChannel(0), AbortCheckpoint(1, AbortReason.SUBSUMED), BlockChannel(1),
                       Deliver(0, "a-after-1")]
    actions = feed(h, [(0, b(2))])
    assert snapshots(actions) == [2]
    # a late barrier 1 can no longer start or block anything
    assert h.on_event(1, b(1)) == []
    assert h.blocked_channels == frozenset()


def test_cancel_marker_aborts_the_pending_checkpoint_and_its_late_barriers_are_ignored() -> None:
    h = create_barrier_handler(3, EXACTLY_ONCE)
    feed(h, [(0, b(1)), (0, "a")])
    actions = h.on_event(1, CancelCheckpointMarker(1))
    assert actions == [UnblockChannel(0), AbortCheckpoint(1, AbortReason.CANCELLATION_BARRIER),
                       Deliver(0, "a")]
    assert h.on_event(2, b(1)) == []  # no block, no snapshot for an aborted checkpoint
    assert h.on_event(2, CancelCheckpointMarker(1)) == []  # trailing marker: already aborted
    assert snapshots(feed(h, [(0, b(2)), (1, b(2)), (2, b(2))])) == [2]


def test_cancel_marker_for_a_newer_checkpoint_aborts_both() -> None:
    h = create_barrier_handler(2, EXACTLY_ONCE)
    feed(h, [(0, b(1))])
    actions = h.on_event(1, CancelCheckpointMarker(2))
    assert aborts(actions) == [(1, AbortReason.SUBSUMED), (2, AbortReason.CANCELLATION_BARRIER)]
    assert h.blocked_channels == frozenset()
    assert feed(h, [(0, b(2)), (1, b(2))]) == []
    assert snapshots(feed(h, [(0, b(3)), (1, b(3))])) == [3]


def test_cancel_marker_without_a_pending_checkpoint_aborts_that_id() -> None:
    h = create_barrier_handler(2, EXACTLY_ONCE)
    assert h.on_event(1, CancelCheckpointMarker(5)) == [AbortCheckpoint(5, AbortReason.CANCELLATION_BARRIER)]
    assert feed(h, [(0, b(5)), (1, b(5))]) == []


def test_cancel_marker_for_a_completed_checkpoint_is_ignored() -> None:
    h = create_barrier_handler(2, EXACTLY_ONCE)
    feed(h, [(0, b(1)), (1, b(1))])
    assert h.on_event(0, CancelCheckpointMarker(1)) == []


def test_stale_or_repeated_barriers_never_block_or_snapshot_twice() -> None:
    h = create_barrier_handler(2, EXACTLY_ONCE)
    assert snapshots(feed(h, [(0, b(3)), (1, b(3))])) == [3]
    assert feed(h, [(0, b(3)), (1, b(2)), (0, b(1))]) == []
    assert h.blocked_channels == frozenset()


@pytest.mark.parametrize("seed", range(30))
def test_every_snapshot_is_a_consistent_cut_whatever_the_interleaving(seed: int) -> None:
    """Per channel, records before barrier n are processed before snapshot n, those after it after."""
    rng = random.Random(seed)
    channels, checkpoints = 3, 4
    streams: list[list[Any]] = []
    for ch in range(channels):
        stream: list[Any] = []
        for n in range(1, checkpoints + 1):
            stream += [(ch, n, i) for i in range(rng.randint(0, 3))] + [b(n)]
        streams.append(stream + [(ch, checkpoints + 1, 0)])
    h = create_barrier_handler(channels, EXACTLY_ONCE)
    cursors = [0] * channels
    actions: list[Action] = []
    while any(cursors[ch] < len(streams[ch]) for ch in range(channels)):
        ch = rng.choice([c for c in range(channels) if cursors[c] < len(streams[c])])
        actions += h.on_event(ch, streams[ch][cursors[ch]])
        cursors[ch] += 1
    assert snapshots(actions) == [1, 2, 3, 4]
    epoch = 1  # the checkpoint the next processed record belongs to
    for action in actions:
        if isinstance(action, Snapshot):
            epoch = action.checkpoint_id + 1
        elif isinstance(action, Deliver):
            assert action.item[1] == epoch, f"record {action.item} processed in epoch {epoch}"
    # and per channel in order, none lost or duplicated
    for ch in range(channels):
        assert [i for i in delivered(actions) if i[0] == ch] == [e for e in streams[ch] if isinstance(e, tuple)]


def test_all_channels_ending_ends_the_input() -> None:
    h = create_barrier_handler(2, EXACTLY_ONCE)
    assert h.on_event(0, END_OF_PARTITION) == [ChannelEnded(0)]
    assert h.on_event(1, END_OF_PARTITION) == [ChannelEnded(1), EndOfInput()]


# ---- at-least-once -------------------------------------------------------------------------------
def test_at_least_once_never_blocks_and_snapshots_on_the_last_barrier() -> None:
    h = create_barrier_handler(2, AT_LEAST_ONCE)
    actions = feed(h, [(0, b(1)), (0, "a-after"), (1, "b-before")])
    assert actions == [Deliver(0, "a-after"), Deliver(1, "b-before")]
    assert h.on_event(1, b(1)) == [ForwardBarrier(b(1)), Snapshot(b(1))]


def test_at_least_once_tracks_several_checkpoints_at_a_time() -> None:
    h = create_barrier_handler(2, AT_LEAST_ONCE)
    assert feed(h, [(0, b(1)), (0, b(2))]) == []
    assert snapshots(h.on_event(1, b(1))) == [1]
    assert snapshots(h.on_event(1, b(2))) == [2]


def test_at_least_once_completing_a_newer_checkpoint_drops_the_older_ones() -> None:
    h = create_barrier_handler(3, AT_LEAST_ONCE)
    actions = feed(h, [(0, b(1)), (1, b(1)), (0, b(2)), (1, b(2)), (2, b(2))])
    assert snapshots(actions) == [2]
    assert aborts(actions) == [(1, AbortReason.SUBSUMED)]
    assert h.on_event(2, b(1)) == []  # a late barrier of the subsumed checkpoint
    assert isinstance(h, BarrierTracker) and h.pending_checkpoint_ids == []


def test_at_least_once_cancel_marker_aborts_the_checkpoint_and_older_ones() -> None:
    h = create_barrier_handler(3, AT_LEAST_ONCE)
    feed(h, [(0, b(1)), (0, b(2))])
    actions = h.on_event(1, CancelCheckpointMarker(2))
    assert aborts(actions) == [(1, AbortReason.CANCELLATION_BARRIER), (2, AbortReason.CANCELLATION_BARRIER)]
    assert feed(h, [(2, b(2)), (1, b(1)), (2, CancelCheckpointMarker(2))]) == []
    assert snapshots(feed(h, [(0, b(3)), (1, b(3)), (2, b(3))])) == [3]


def test_at_least_once_end_of_partition_counts_as_aligned() -> None:
    h = create_barrier_handler(2, AT_LEAST_ONCE)
    feed(h, [(0, b(1))])
    assert h.on_event(1, END_OF_PARTITION) == [ChannelEnded(1), ForwardBarrier(b(1)), Snapshot(b(1))]
    assert snapshots(h.on_event(0, b(2))) == [2]


def test_at_least_once_end_of_partition_aborts_when_checkpoints_after_finish_are_off() -> None:
    h = create_barrier_handler(2, AT_LEAST_ONCE, checkpoints_after_tasks_finish=False)
    feed(h, [(0, b(1)), (0, b(2))])
    actions = h.on_event(1, END_OF_PARTITION)
    assert aborts(actions) == [(1, AbortReason.INPUT_END_OF_STREAM), (2, AbortReason.INPUT_END_OF_STREAM)]


@pytest.mark.parametrize("seed", range(10))
def test_at_least_once_buffers_flow_in_arrival_order_in_any_interleaving(seed: int) -> None:
    rng = random.Random(seed)
    h = create_barrier_handler(3, AT_LEAST_ONCE)
    events = [(ch, b(n) if i % 3 == 2 else (ch, n, i)) for ch in range(3) for n in range(1, 4) for i in range(3)]
    rng.shuffle(events)  # per-channel order is not kept here on purpose: nothing may be held anyway
    events.sort(key=lambda e: (e[1].checkpoint_id if isinstance(e[1], CheckpointBarrier) else e[1][1]))
    actions = feed(h, events)
    assert not any(isinstance(a, (BlockChannel, UnblockChannel)) for a in actions)
    assert delivered(actions) == [e for _, e in events if isinstance(e, tuple)]
    assert snapshots(actions) == [1, 2, 3]


# ---- bad input ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("handler_type", [AlignedBarrierHandler, BarrierTracker])
def test_bad_input_is_a_clear_error(handler_type: type[BarrierHandler]) -> None:
    with pytest.raises(ValueError, match="at least one input channel"):
        handler_type(0)
    h = handler_type(2)
    with pytest.raises(ValueError, match="no input channel 2"):
        h.on_event(2, "x")
    h.on_event(0, END_OF_PARTITION)
    with pytest.raises(ValueError, match="channel 0 already delivered end-of-partition"):
        h.on_event(0, "x")
    with pytest.raises(ValueError, match="unknown checkpointing mode"):
        create_barrier_handler(2, "SOMETIMES")


def test_the_checkpointing_mode_is_one_enum_pyflinks() -> None:
    # PyFlink: CheckpointingMode.EXACTLY_ONCE = 0, AT_LEAST_ONCE = 1; the engine reads the same class.
    from millstream.datastream import CheckpointingMode
    from millstream.runtime.checkpointing_mode import CheckpointingMode as EngineMode

    assert CheckpointingMode is EngineMode
    assert [(m.name, m.value) for m in CheckpointingMode] == [("EXACTLY_ONCE", 0), ("AT_LEAST_ONCE", 1)]
    assert isinstance(create_barrier_handler(2, CheckpointingMode.EXACTLY_ONCE), AlignedBarrierHandler)
    assert isinstance(create_barrier_handler(2, CheckpointingMode.AT_LEAST_ONCE), BarrierTracker)
    assert isinstance(create_barrier_handler(2, "at_least_once"), BarrierTracker)  # the name, as the TDD carries it
