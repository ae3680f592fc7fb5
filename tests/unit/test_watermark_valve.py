"""StatusWatermarkValve and WatermarkOutputMultiplexer against Flink's rules (expectations by hand).

Valve: output = minimum over active channels that have caught up, only forward; a channel going
idle may release the minimum; the last one going idle flushes to the highest channel when it held
the output; all idle -> IDLE; the first active again -> ACTIVE; end of input = LONG_MAX.
"""
from __future__ import annotations

import random

import pytest

from millstream.common.watermark_strategy import CollectingWatermarkOutput
from millstream.runtime.watermarks import (
    LONG_MAX,
    LONG_MIN,
    StatusWatermarkValve,
    WatermarkOutputMultiplexer,
    WatermarkStatus,
)

IDLE, ACTIVE = WatermarkStatus.IDLE, WatermarkStatus.ACTIVE


def test_output_is_the_minimum_over_channels_and_only_moves_forward() -> None:
    v = StatusWatermarkValve(3)
    assert v.input_watermark(5, 0) == []  # channels 1 and 2 are still at LONG_MIN
    assert v.input_watermark(7, 1) == []
    assert v.input_watermark(3, 2) == [3]
    assert v.input_watermark(10, 2) == [5]  # now channel 0 holds the minimum
    assert v.input_watermark(4, 0) == []  # a channel going back is ignored
    assert v.channel_watermark(0) == 5
    assert v.input_watermark(8, 0) == [7]
    assert v.input_watermark(8, 0) == []  # the same again: nothing
    assert v.last_output_watermark == 7


def test_a_channel_going_idle_releases_the_minimum_and_rejoins_only_when_caught_up() -> None:
    v = StatusWatermarkValve(2)
    v.input_watermark(2, 0)
    assert v.input_watermark(9, 1) == [2]
    assert v.input_watermark_status(IDLE, 0) == [9]  # channel 0 held the minimum
    assert v.input_watermark(6, 0) == []  # watermarks of an idle channel are ignored
    assert v.channel_watermark(0) == 2
    assert v.input_watermark_status(ACTIVE, 0) == []  # active, but behind the output (2 < 9)
    assert v.input_watermark(5, 0) == []  # still behind: it cannot pull the output back
    assert v.input_watermark(12, 1) == [12]  # channel 0 (at 5) does not hold channel 1 back
    assert v.input_watermark(13, 0) == []  # caught up (13 >= 12): it rejoins the minimum
    assert v.input_watermark(20, 1) == [13]


def test_an_idle_channel_that_did_not_hold_the_minimum_changes_nothing() -> None:
    v = StatusWatermarkValve(2)
    v.input_watermark(4, 0)
    assert v.input_watermark(8, 1) == [4]
    assert v.input_watermark_status(IDLE, 1) == []
    assert v.input_watermark_status(IDLE, 1) == []  # no status change, no effect
    assert v.input_watermark(6, 0) == [6]  # channel 1 (at 8) is out of the minimum while idle


def test_the_last_channel_going_idle_flushes_to_the_highest_watermark() -> None:
    v = StatusWatermarkValve(2)
    v.input_watermark(4, 0)
    assert v.input_watermark(8, 1) == [4]
    assert v.input_watermark_status(IDLE, 1) == []
    assert v.input_watermark_status(IDLE, 0) == [8, IDLE]  # channel 0 held the output at 4
    assert v.idle
    assert v.input_watermark(30, 0) == []  # an idle valve ignores watermarks
    assert v.input_watermark_status(ACTIVE, 1) == [ACTIVE]
    assert v.input_watermark(10, 1) == [10]


def test_all_idle_without_flush_when_the_output_is_already_past_the_last_channel() -> None:
    v = StatusWatermarkValve(2)
    v.input_watermark(4, 0)
    v.input_watermark(8, 1)
    assert v.input_watermark_status(IDLE, 0) == [8]
    assert v.input_watermark_status(ACTIVE, 0) == []  # back, but behind (4 < 8)
    assert v.input_watermark_status(IDLE, 1) == []  # channel 0 is active though unaligned
    assert v.input_watermark_status(IDLE, 0) == [IDLE]  # 4 != 8: no flush, never backwards
    assert v.last_output_watermark == 8


def test_all_idle_when_the_highest_equals_the_output_emits_only_the_status() -> None:
    v = StatusWatermarkValve(2)
    v.input_watermark(4, 0)
    v.input_watermark(8, 1)
    assert v.input_watermark_status(IDLE, 0) == [8]
    assert v.input_watermark_status(IDLE, 1) == [IDLE]


def test_end_of_input_is_a_final_max_watermark_per_channel() -> None:
    v = StatusWatermarkValve(2)
    v.input_watermark(5, 0)
    assert v.input_watermark(3, 1) == [3]
    assert v.end_of_input(1) == [5]
    assert v.end_of_input(0) == [LONG_MAX]
    assert v.end_of_input(0) == []  # repeated: nothing


def test_end_of_input_of_an_idle_channel() -> None:
    v = StatusWatermarkValve(2)
    v.input_watermark(5, 0)
    assert v.input_watermark(3, 1) == [3]
    assert v.input_watermark_status(IDLE, 0) == []  # channel 0 did not hold the output (3)
    assert v.end_of_input(1) == [LONG_MAX]  # channel 0 is idle: out of the minimum
    assert v.end_of_input(0) == []  # becomes active at 5 (< MAX, unaligned), then MAX: already out


def test_end_of_input_wakes_an_idle_valve() -> None:
    v = StatusWatermarkValve(1)
    assert v.input_watermark_status(IDLE, 0) == [IDLE]
    assert v.end_of_input(0) == [ACTIVE, LONG_MAX]


def test_long_min_is_not_above_the_start() -> None:
    v = StatusWatermarkValve(1)
    assert v.input_watermark(LONG_MIN, 0) == []
    assert v.input_watermark(LONG_MIN + 1, 0) == [LONG_MIN + 1]


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="at least one"):
        StatusWatermarkValve(0)
    v = StatusWatermarkValve(2)
    with pytest.raises(IndexError, match="channel 2"):
        v.input_watermark(1, 2)
    with pytest.raises(TypeError, match="integer milliseconds"):
        v.input_watermark(1.5, 0)
    with pytest.raises(ValueError, match="64-bit"):
        v.input_watermark(LONG_MAX + 1, 0)
    with pytest.raises(ValueError):
        v.input_watermark_status("sleepy", 0)  # type: ignore[arg-type]


def test_without_idleness_the_output_is_the_running_minimum_of_channel_maxima() -> None:
    """Reference model, independent of the valve: min over channels of their highest watermark."""
    rng = random.Random(7)
    n = 5
    v = StatusWatermarkValve(n)
    highest = [LONG_MIN] * n
    emitted: list[int] = []
    for _ in range(3_000):
        ch, wm = rng.randrange(n), rng.randrange(-50, 2_000)
        highest[ch] = max(highest[ch], wm)
        before = v.last_output_watermark
        events = v.input_watermark(wm, ch)
        emitted += events
        expected = min(highest)
        assert v.last_output_watermark == expected
        assert events == ([expected] if expected > before else [])
    assert emitted == sorted(set(emitted))


def test_random_idle_and_active_never_moves_the_output_back() -> None:
    rng = random.Random(11)
    n = 4
    v = StatusWatermarkValve(n)
    active = [True] * n
    last_out, valve_idle = LONG_MIN, False
    for _ in range(5_000):
        ch, roll = rng.randrange(n), rng.random()
        if roll < 0.7:
            events = v.input_watermark(rng.randrange(0, 10_000), ch)
        else:
            status = IDLE if roll < 0.85 else ACTIVE
            events = v.input_watermark_status(status, ch)
            active[ch] = status is ACTIVE
        for e in events:
            if isinstance(e, WatermarkStatus):
                assert e is (ACTIVE if valve_idle else IDLE), "statuses alternate"
                valve_idle = e is IDLE
            else:
                assert e > last_out, "the output never goes back or repeats"
                assert e <= max(v.channel_watermark(i) for i in range(n))
                last_out = e
        assert v.idle == (not any(active)) == valve_idle
        assert v.last_output_watermark == last_out


def test_many_channels_one_advancing_keeps_the_heap_bounded() -> None:
    v = StatusWatermarkValve(4)
    for wm in range(1, 10_000):
        v.input_watermark(wm, 1)  # channels 0, 2, 3 stay at LONG_MIN and hold the output
    assert len(v._heap) <= 2 * 4 + 9
    for ch in (0, 2, 3):
        v.input_watermark(50, ch)
    assert v.last_output_watermark == 50


# -- multiplexer -----------------------------------------------------------------------------------


def test_multiplexer_immediate_outputs_combine_to_the_minimum_of_active_splits() -> None:
    under = CollectingWatermarkOutput()
    m = WatermarkOutputMultiplexer(under)
    m.register_new_output("a")
    m.register_new_output("b")
    a, b = m.get_immediate_output("a"), m.get_immediate_output("b")
    a.emit_watermark(10)
    assert under.events == []  # b is still at LONG_MIN
    b.emit_watermark(5)
    assert under.events == [5]
    a.mark_idle()
    assert under.events == [5]  # min over b alone is 5: nothing new
    b.emit_watermark(20)
    assert under.events == [5, 20]  # a is idle: it does not hold b back
    a.mark_active()
    assert under.events == [5, 20]  # a at 10 cannot pull the combined watermark back
    b.mark_idle()
    assert under.events == [5, 20]
    a.mark_idle()
    assert under.events == [5, 20, "idle"]  # every split idle
    a.emit_watermark(30)  # a watermark makes a split active again
    assert under.events == [5, 20, "idle", 30]


def test_multiplexer_deferred_outputs_combine_only_on_periodic_emit() -> None:
    under = CollectingWatermarkOutput()
    m = WatermarkOutputMultiplexer(under)
    for split in ("s1", "s2", "s3"):
        m.register_new_output(split)
    m.get_deferred_output("s1").emit_watermark(100)
    m.get_deferred_output("s2").emit_watermark(300)
    m.get_deferred_output("s3").emit_watermark(200)
    assert under.events == []
    m.on_periodic_emit()
    assert under.events == [100]
    assert m.unregister_output("s1")
    m.on_periodic_emit()
    assert under.events == [100, 200]
    assert not m.unregister_output("s1")


def test_multiplexer_without_outputs_emits_nothing() -> None:
    under = CollectingWatermarkOutput()
    m = WatermarkOutputMultiplexer(under)
    m.on_periodic_emit()
    assert under.events == []


def test_multiplexer_rejects_duplicate_and_unknown_ids() -> None:
    m = WatermarkOutputMultiplexer(CollectingWatermarkOutput())
    m.register_new_output("a")
    with pytest.raises(ValueError, match="already"):
        m.register_new_output("a")
    with pytest.raises(KeyError, match="'z'"):
        m.get_immediate_output("z")
