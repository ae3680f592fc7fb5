"""Triggers against Flink's rules, run on an in-memory trigger context (tests/unit/window_fakes.py).

Expected fire times and timer sets are worked out by hand from the rules in the comments.
"""
from __future__ import annotations

from typing import Any

import pytest

from millstream.common import Duration, Time
from millstream.datastream.window import (
    ContinuousEventTimeTrigger,
    ContinuousProcessingTimeTrigger,
    CountTrigger,
    CountWindow,
    EventTimeTrigger,
    GlobalWindow,
    NeverTrigger,
    ProcessingTimeTrigger,
    PurgingTrigger,
    TimeWindow,
    Trigger,
    TriggerResult,
)
from tests.unit.window_fakes import FakeTriggerContext

R = TriggerResult


def on_element(trigger: Trigger, ctx: FakeTriggerContext, window: Any, timestamp: int, element: Any = "x") -> R:
    ctx.window = window
    return trigger.on_element(element, timestamp, window, ctx)


def advance_watermark(trigger: Trigger, ctx: FakeTriggerContext, watermark: int) -> list[tuple[int, Any, R]]:
    """Fire every event-time timer <= watermark in time order, as the operator's timer service does
    (timers registered while firing fire too if due)."""
    fired = []
    ctx.watermark = watermark
    while due := sorted((t, w) for t, w in ctx.event_timers if t <= watermark):
        time, window = due[0]
        ctx.event_timers.discard((time, window))
        ctx.window = window
        fired.append((time, window, trigger.on_event_time(time, window, ctx)))
    return fired


def advance_clock(trigger: Trigger, ctx: FakeTriggerContext, now: int, limit: int = 100) -> list[tuple[int, Any, R]]:
    fired = []
    ctx.processing_time = now
    while (due := sorted((t, w) for t, w in ctx.processing_timers if t <= now)) and len(fired) < limit:
        time, window = due[0]
        ctx.processing_timers.discard((time, window))
        ctx.window = window
        fired.append((time, window, trigger.on_processing_time(time, window, ctx)))
    return fired


def merge(trigger: Trigger, ctx: FakeTriggerContext, result: Any, merged: list[Any]) -> None:
    """What the operator does on a merge: on_merge with the result window, then clear the merged ones."""
    ctx.window, ctx.merged_windows = result, merged
    trigger.on_merge(result, ctx)
    for window in merged:
        ctx.window = window
        trigger.clear(window, ctx)
    ctx.merged_windows = []


def test_trigger_result_flags() -> None:
    assert [(r.is_fire(), r.is_purge()) for r in (R.CONTINUE, R.FIRE, R.PURGE, R.FIRE_AND_PURGE)] == [
        (False, False),
        (True, False),
        (False, True),
        (True, True),
    ]


# -- EventTimeTrigger ------------------------------------------------------------------------------


def test_event_time_trigger_fires_when_the_watermark_reaches_the_window_end() -> None:
    trigger, ctx, w = EventTimeTrigger.create(), FakeTriggerContext(watermark=0), TimeWindow(0, 10)
    assert on_element(trigger, ctx, w, 3) is R.CONTINUE
    assert ctx.event_timers_of(w) == [9]  # max_timestamp, not end
    assert advance_watermark(trigger, ctx, 8) == []
    assert advance_watermark(trigger, ctx, 9) == [(9, w, R.FIRE)]
    assert trigger.on_event_time(5, w, ctx) is R.CONTINUE  # someone else's timer
    assert trigger.on_processing_time(9, w, ctx) is R.CONTINUE


def test_event_time_trigger_fires_at_once_for_a_late_element() -> None:
    trigger, ctx, w = EventTimeTrigger.create(), FakeTriggerContext(watermark=9), TimeWindow(0, 10)
    assert on_element(trigger, ctx, w, 2) is R.FIRE
    assert ctx.event_timers == set()  # no timer for a window already due


def test_event_time_trigger_merge_and_clear() -> None:
    trigger, ctx = EventTimeTrigger.create(), FakeTriggerContext(watermark=10)
    assert trigger.can_merge()
    a, b = TimeWindow(0, 12), TimeWindow(11, 20)
    on_element(trigger, ctx, a, 0)
    on_element(trigger, ctx, b, 11)
    merge(trigger, ctx, TimeWindow(0, 20), [a, b])
    assert ctx.event_timers == {(19, TimeWindow(0, 20))}
    # A merged window whose end the watermark already passed gets no timer (Flink's rule).
    ctx2 = FakeTriggerContext(watermark=30)
    ctx2.window = TimeWindow(0, 20)
    trigger.on_merge(TimeWindow(0, 20), ctx2)
    assert ctx2.event_timers == set()
    ctx.window = TimeWindow(0, 20)
    trigger.clear(TimeWindow(0, 20), ctx)
    assert ctx.event_timers == set()


# -- ProcessingTimeTrigger -------------------------------------------------------------------------


def test_processing_time_trigger() -> None:
    trigger, ctx, w = ProcessingTimeTrigger.create(), FakeTriggerContext(processing_time=5), TimeWindow(0, 10)
    assert on_element(trigger, ctx, w, 123) is R.CONTINUE
    assert ctx.processing_timers_of(w) == [9]
    assert advance_clock(trigger, ctx, 9) == [(9, w, R.FIRE)]
    assert trigger.on_event_time(9, w, ctx) is R.CONTINUE
    assert trigger.can_merge()
    ctx.processing_time = 15
    ctx.window = TimeWindow(0, 15)
    trigger.on_merge(TimeWindow(0, 15), ctx)
    assert ctx.processing_timers == set()  # max_timestamp 14 is not after the clock
    ctx.processing_time = 3
    trigger.on_merge(TimeWindow(0, 15), ctx)
    assert ctx.processing_timers_of(TimeWindow(0, 15)) == [14]
    trigger.clear(TimeWindow(0, 15), ctx)
    assert ctx.processing_timers == set()


# -- CountTrigger and PurgingTrigger ---------------------------------------------------------------


def test_count_trigger_fires_every_n_elements() -> None:
    trigger, ctx, w = CountTrigger.of(3), FakeTriggerContext(), CountWindow(0)
    results = [on_element(trigger, ctx, w, i) for i in range(7)]
    assert results == [R.CONTINUE, R.CONTINUE, R.FIRE, R.CONTINUE, R.CONTINUE, R.FIRE, R.CONTINUE]
    assert ctx.state_of(w, "count") == 1
    assert trigger.on_event_time(1, w, ctx) is R.CONTINUE and trigger.on_processing_time(1, w, ctx) is R.CONTINUE
    trigger.clear(w, ctx)
    assert ctx.state_of(w, "count") is None
    # Counts are per window.
    other = CountWindow(1)
    assert [on_element(trigger, ctx, other, i) for i in range(2)] == [R.CONTINUE, R.CONTINUE]
    assert on_element(trigger, ctx, w, 0) is R.CONTINUE


def test_count_trigger_merges_counts() -> None:
    trigger, ctx = CountTrigger.of(4), FakeTriggerContext()
    a, b, merged = TimeWindow(0, 5), TimeWindow(5, 9), TimeWindow(0, 9)
    on_element(trigger, ctx, a, 0)
    on_element(trigger, ctx, a, 1)
    on_element(trigger, ctx, b, 6)
    merge(trigger, ctx, merged, [a, b])
    assert ctx.state_of(merged, "count") == 3 and ctx.state_of(a, "count") is None
    assert on_element(trigger, ctx, merged, 7) is R.FIRE  # 2 + 1 + 1 = 4


def test_count_trigger_needs_an_int() -> None:
    with pytest.raises(TypeError, match="int count"):
        CountTrigger.of(Time.seconds(1))  # type: ignore[arg-type]


class Scripted(Trigger):
    """Returns the scripted results, and records what it was asked."""

    def __init__(self, result: R) -> None:
        self.result = result
        self.calls: list[str] = []

    def on_element(self, element, timestamp, window, ctx):  # type: ignore[no-untyped-def]
        self.calls.append("element")
        return self.result

    def on_processing_time(self, time, window, ctx):  # type: ignore[no-untyped-def]
        self.calls.append("processing")
        return self.result

    def on_event_time(self, time, window, ctx):  # type: ignore[no-untyped-def]
        self.calls.append("event")
        return self.result

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window, ctx):  # type: ignore[no-untyped-def]
        self.calls.append("merge")

    def clear(self, window, ctx):  # type: ignore[no-untyped-def]
        self.calls.append("clear")


@pytest.mark.parametrize(
    ("nested", "purging"),
    [(R.FIRE, R.FIRE_AND_PURGE), (R.FIRE_AND_PURGE, R.FIRE_AND_PURGE), (R.CONTINUE, R.CONTINUE), (R.PURGE, R.PURGE)],
)
def test_purging_trigger_turns_fires_into_fire_and_purge(nested: R, purging: R) -> None:
    inner = Scripted(nested)
    trigger, ctx, w = PurgingTrigger.of(inner), FakeTriggerContext(), TimeWindow(0, 1)
    assert trigger.on_element("x", 0, w, ctx) is purging
    assert trigger.on_event_time(0, w, ctx) is purging
    assert trigger.on_processing_time(0, w, ctx) is purging
    trigger.on_merge(w, ctx)
    trigger.clear(w, ctx)
    assert inner.calls == ["element", "event", "processing", "merge", "clear"]
    assert trigger.can_merge() is True
    assert PurgingTrigger.of(NeverTrigger()).can_merge() is False


def test_purging_count_trigger() -> None:
    trigger, ctx, w = PurgingTrigger.of(CountTrigger.of(2)), FakeTriggerContext(), GlobalWindow.get()
    assert [on_element(trigger, ctx, w, i) for i in range(4)] == [R.CONTINUE, R.FIRE_AND_PURGE] * 2
    with pytest.raises(TypeError, match="needs a Trigger"):
        PurgingTrigger.of(CountTrigger)  # type: ignore[arg-type]


def test_never_trigger() -> None:
    trigger, ctx, w = NeverTrigger(), FakeTriggerContext(), GlobalWindow.get()
    assert on_element(trigger, ctx, w, 0) is R.CONTINUE
    assert trigger.on_event_time(2**63 - 1, w, ctx) is R.CONTINUE
    assert trigger.on_processing_time(0, w, ctx) is R.CONTINUE
    assert not trigger.can_merge()
    assert ctx.event_timers == set() and ctx.processing_timers == set()


# -- continuous triggers ---------------------------------------------------------------------------


def test_continuous_event_time_trigger_timer_chain() -> None:
    # Window [0, 100), interval 30, first element at 7: the first fire is at 7 rounded down to the
    # interval (0) + 30, then every 30, the last capped at max_timestamp 99, which is also the
    # window-end timer: fires at 30, 60, 90, 99.
    trigger, ctx, w = ContinuousEventTimeTrigger.of(Duration.of_millis(30)), FakeTriggerContext(watermark=0), TimeWindow(0, 100)
    assert on_element(trigger, ctx, w, 7) is R.CONTINUE
    assert ctx.event_timers_of(w) == [30, 99]
    assert ctx.state_of(w, "fire-time") == 30
    assert on_element(trigger, ctx, w, 50) is R.CONTINUE  # a pending fire time: nothing new
    assert ctx.event_timers_of(w) == [30, 99]
    fired = advance_watermark(trigger, ctx, 10_000)
    assert [(t, r) for t, _, r in fired] == [(30, R.FIRE), (60, R.FIRE), (90, R.FIRE), (99, R.FIRE)]


def test_continuous_event_time_trigger_with_a_late_element_and_clear() -> None:
    trigger = ContinuousEventTimeTrigger.of(Time.seconds(1))
    ctx, w = FakeTriggerContext(watermark=5000), TimeWindow(0, 5000)
    assert on_element(trigger, ctx, w, 100) is R.FIRE  # the watermark passed the window's end
    assert ctx.event_timers == set() and ctx.state_of(w, "fire-time") is None
    ctx.watermark = 0
    on_element(trigger, ctx, w, 2500)
    assert ctx.event_timers_of(w) == [3000, 4999]
    trigger.clear(w, ctx)
    assert ctx.event_timers_of(w) == [4999]  # the end timer is the operator's to delete (cleanup)
    assert ctx.state_of(w, "fire-time") is None


def test_continuous_event_time_trigger_rounds_with_javas_remainder() -> None:
    # Flink computes timestamp - timestamp % interval in Java: for -37 % 30 that is -7, so the
    # rounded time is -30 and the first fire -30 + 30 = 0, capped at max_timestamp -1.
    trigger, ctx, w = ContinuousEventTimeTrigger.of(Duration.of_millis(30)), FakeTriggerContext(watermark=-1000), TimeWindow(-100, 0)
    on_element(trigger, ctx, w, -37)
    assert ctx.state_of(w, "fire-time") == -1
    trigger2, ctx2, w2 = ContinuousEventTimeTrigger.of(Duration.of_millis(30)), FakeTriggerContext(watermark=-1000), TimeWindow(-200, 0)
    on_element(trigger2, ctx2, w2, -67)  # -67 % 30 = -7 in Java -> -60 + 30 = -30
    assert ctx2.state_of(w2, "fire-time") == -30


def test_continuous_event_time_trigger_merge_keeps_the_earliest_fire_time() -> None:
    trigger, ctx = ContinuousEventTimeTrigger.of(Duration.of_millis(10)), FakeTriggerContext(watermark=0)
    a, b, merged = TimeWindow(0, 50), TimeWindow(45, 100), TimeWindow(0, 100)
    on_element(trigger, ctx, a, 23)  # next fire 30
    on_element(trigger, ctx, b, 47)  # next fire 50
    merge(trigger, ctx, merged, [a, b])
    assert ctx.state_of(merged, "fire-time") == 30
    assert ctx.event_timers_of(merged) == [30]  # on_merge registers the fire time only, as Flink's
    # The merged windows' state moved into the result before clear(), so clear() finds no fire time
    # and their timers stay: Flink's operator ignores timers of windows no longer in flight.
    assert ctx.event_timers_of(a) == [30, 49] and ctx.event_timers_of(b) == [50, 99]


def test_continuous_processing_time_trigger_timer_chain() -> None:
    # Clock at 1234, interval 1000, window [0, 5000): first fire 1000 + 1000 = 2000, then 3000,
    # 4000, then min(5000, 4999) = 4999.
    trigger = ContinuousProcessingTimeTrigger.of(Time.seconds(1))
    ctx, w = FakeTriggerContext(processing_time=1234), TimeWindow(0, 5000)
    assert on_element(trigger, ctx, w, -99) is R.CONTINUE  # the element's timestamp plays no part
    assert ctx.processing_timers_of(w) == [2000]
    on_element(trigger, ctx, w, 0)
    assert ctx.processing_timers_of(w) == [2000]
    fired = advance_clock(trigger, ctx, 4999, limit=4)
    assert [(t, r) for t, _, r in fired] == [(2000, R.FIRE), (3000, R.FIRE), (4000, R.FIRE), (4999, R.FIRE)]
    assert trigger.on_processing_time(1234, w, ctx) is R.CONTINUE  # not the pending fire time
    assert trigger.on_event_time(4999, w, ctx) is R.CONTINUE
    trigger.clear(w, ctx)
    assert ctx.processing_timers == set() and ctx.state_of(w, "fire-time") is None


def test_continuous_processing_time_trigger_merge() -> None:
    trigger = ContinuousProcessingTimeTrigger.of(Duration.of_millis(100))
    ctx = FakeTriggerContext(processing_time=250)
    a, b, merged = TimeWindow(0, 1000), TimeWindow(900, 2000), TimeWindow(0, 2000)
    on_element(trigger, ctx, a, 0)  # next fire 300
    ctx.processing_time = 420
    on_element(trigger, ctx, b, 0)  # next fire 500
    merge(trigger, ctx, merged, [a, b])
    assert ctx.state_of(merged, "fire-time") == 300
    assert ctx.processing_timers_of(merged) == [300]
    assert ctx.processing_timers_of(a) == [300] and ctx.processing_timers_of(b) == [500]  # stale, as in Flink


@pytest.mark.parametrize("make", [ContinuousEventTimeTrigger.of, ContinuousProcessingTimeTrigger.of])
def test_continuous_triggers_need_a_positive_duration(make) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="must be positive"):
        make(Duration.of_millis(0))
    with pytest.raises(TypeError, match="Duration or Time"):
        make(1000)
