"""WatermarkStrategy and its generators, against Flink's rules with expectations worked out by hand.

Flink: bounded out-of-orderness B emits ``max_ts - B - 1`` periodically (``LONG_MIN`` before any
event); monotonous is B = 0; idleness marks the output idle once, at the first periodic emission
strictly more than the timeout after the first quiet one.
"""
from __future__ import annotations

import pickle

import pytest

from millstream.common import Duration, TimestampAssigner, WatermarkStrategy
from millstream.common.watermark_strategy import (
    LONG_MIN,
    BoundedOutOfOrdernessWatermarks,
    CollectingWatermarkOutput,
    WatermarksWithIdleness,
)


class FakeClock:
    def __init__(self, now: float = 0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class FirstField(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[0]


def feed(strategy: WatermarkStrategy, timestamps: list[int]) -> list[int]:
    """The periodic watermark after each event."""
    gen, out = strategy.create_watermark_generator(), CollectingWatermarkOutput()
    for ts in timestamps:
        gen.on_event(("x", ts), ts, out)
        gen.on_periodic_emit(out)
    return out.events  # type: ignore[return-value]


def test_bounded_out_of_orderness_is_max_minus_bound_minus_one() -> None:
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_seconds(5))
    # 10 s; 12 s; 11 s is late but within the bound; 3 s is beyond it (it does not pull the
    # watermark back); 20 s moves it on.
    assert feed(strategy, [10_000, 12_000, 11_000, 3_000, 20_000]) == [4_999, 6_999, 6_999, 6_999, 14_999]


def test_bounded_out_of_orderness_before_any_event_is_long_min() -> None:
    gen = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(300)).create_watermark_generator()
    out = CollectingWatermarkOutput()
    gen.on_periodic_emit(out)
    assert out.events == [-(2**63)]


def test_bounded_batch_path_matches_the_per_event_path() -> None:
    timestamps = [50, 7, 400, 399, -20, 401, 3]
    one, many = BoundedOutOfOrdernessWatermarks(100), BoundedOutOfOrdernessWatermarks(100)
    out_one, out_many = CollectingWatermarkOutput(), CollectingWatermarkOutput()
    for ts in timestamps:
        one.on_event(None, ts, out_one)
    many.on_events([None] * len(timestamps), timestamps, out_many)
    one.on_periodic_emit(out_one)
    many.on_periodic_emit(out_many)
    assert out_one.events == out_many.events == [401 - 100 - 1]


def test_monotonous_is_max_minus_one() -> None:
    assert feed(WatermarkStrategy.for_monotonous_timestamps(), [1_000, 1_001, 5_000]) == [999, 1_000, 4_999]


def test_negative_event_timestamps_are_ordinary_timestamps() -> None:
    assert feed(WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(10)), [-100, -50]) == [-111, -61]


def test_no_watermarks_emits_nothing() -> None:
    assert feed(WatermarkStrategy.no_watermarks(), [1, 2, 3]) == []


def test_idleness_marks_idle_once_after_the_timeout_and_resumes_on_events() -> None:
    clock, out = FakeClock(0), CollectingWatermarkOutput()
    gen = (WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(100))
           .with_idleness(Duration.of_seconds(1)).create_watermark_generator(clock))
    gen.on_event("a", 1_000, out)
    clock.now = 200
    gen.on_periodic_emit(out)  # activity since the last probe: emits
    assert out.events == [899]
    clock.now = 400
    gen.on_periodic_emit(out)  # first quiet probe: the countdown starts at 400, still emitting
    clock.now = 1_400
    gen.on_periodic_emit(out)  # exactly the timeout after 400: not yet idle
    assert out.events == [899, 899, 899]
    clock.now = 1_401
    gen.on_periodic_emit(out)  # strictly more than the timeout
    assert out.events[-1] == "idle"
    clock.now = 5_000
    gen.on_periodic_emit(out)  # idle is said once
    assert out.events == [899, 899, 899, "idle"]
    gen.on_event("b", 3_000, out)
    clock.now = 5_200
    gen.on_periodic_emit(out)  # an event: the wrapped generator emits again
    assert out.events == [899, 899, 899, "idle", 2_899]


def test_idleness_countdown_restarts_after_activity() -> None:
    clock, out = FakeClock(0), CollectingWatermarkOutput()
    gen = WatermarksWithIdleness(BoundedOutOfOrdernessWatermarks(0), 500, clock)
    gen.on_periodic_emit(out)  # no events ever: countdown starts at 0
    clock.now = 400
    gen.on_event("a", 10, out)
    clock.now = 600
    gen.on_periodic_emit(out)  # activity: reset, not idle although 600 > 500 after the first start
    clock.now = 700
    gen.on_periodic_emit(out)  # quiet: countdown starts at 700
    clock.now = 1_200
    gen.on_periodic_emit(out)
    assert "idle" not in out.events
    clock.now = 1_201
    gen.on_periodic_emit(out)
    assert out.events[-1] == "idle"


def test_no_watermarks_with_idleness_goes_idle() -> None:
    clock, out = FakeClock(10), CollectingWatermarkOutput()
    gen = WatermarkStrategy.no_watermarks().with_idleness(Duration.of_millis(50)).create_watermark_generator(clock)
    gen.on_periodic_emit(out)
    clock.now = 61
    gen.on_periodic_emit(out)
    assert out.events == ["idle"]


def test_strategies_are_immutable_and_keep_their_parts() -> None:
    base = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_seconds(2))
    with_assigner = base.with_timestamp_assigner(FirstField())
    assert base.timestamp_assigner is None
    full = with_assigner.with_idleness(Duration.of_minutes(1))
    assert isinstance(full.timestamp_assigner, FirstField)
    assert (full.kind, full.max_out_of_orderness_ms, full.idleness_ms) == ("bounded", 2_000, 60_000)


def test_a_plain_function_is_an_assigner() -> None:
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, ts: v * 10)
    assert isinstance(strategy.timestamp_assigner, TimestampAssigner)
    assert strategy.timestamp_assigner.extract_timestamp(7, LONG_MIN) == 70


def test_strategy_with_a_class_assigner_pickles() -> None:
    strategy = (WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_seconds(1))
                .with_timestamp_assigner(FirstField()).with_idleness(Duration.of_seconds(3)))
    again = pickle.loads(pickle.dumps(strategy))
    assert again.timestamp_assigner.extract_timestamp((42, "x"), LONG_MIN) == 42
    assert (again.kind, again.max_out_of_orderness_ms, again.idleness_ms) == ("bounded", 1_000, 3_000)


@pytest.mark.parametrize(("make", "error", "words"), [
    (lambda: WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(-1)), ValueError, "negative"),
    (lambda: WatermarkStrategy.for_bounded_out_of_orderness(5), TypeError, "Duration"),
    (lambda: WatermarkStrategy.for_monotonous_timestamps().with_idleness(Duration.of_millis(0)), ValueError,
     "greater than zero"),
    (lambda: WatermarkStrategy.no_watermarks().with_idleness("1 min"), TypeError, "Duration"),
    (lambda: WatermarkStrategy.no_watermarks().with_timestamp_assigner(3), TypeError, "TimestampAssigner"),
    (lambda: WatermarkStrategy("hourly"), ValueError, "hourly"),
])
def test_bad_arguments_are_named(make, error, words) -> None:
    with pytest.raises(error, match=words):
        make()


def test_an_assigner_that_does_not_override_says_so() -> None:
    with pytest.raises(NotImplementedError):
        TimestampAssigner().extract_timestamp("x", LONG_MIN)
