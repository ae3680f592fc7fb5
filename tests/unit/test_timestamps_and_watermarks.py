"""TimestampsAndWatermarks: a strategy applied to batches of records, on a fake clock.

Flink's order per record: the assigner's timestamp (``record_timestamp`` = LONG_MIN when none),
then ``on_event``; watermarks come from periodic rounds every auto-watermark interval, only when
they advance; idle/active are sent on change; the end of input sends LONG_MAX whatever the strategy.
"""
from __future__ import annotations

import pytest

from millstream.common import Duration, TimestampAssigner, WatermarkStrategy
from millstream.runtime.watermarks import LONG_MAX, LONG_MIN, TimestampsAndWatermarks, WatermarkStatus

IDLE, ACTIVE = WatermarkStatus.IDLE, WatermarkStatus.ACTIVE


class FakeClock:
    def __init__(self, now: float = 0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class SecondField(TimestampAssigner):
    def __init__(self) -> None:
        self.seen: list[int] = []

    def extract_timestamp(self, value, record_timestamp):
        self.seen.append(record_timestamp)
        return value[1]


def bounded(ms: int) -> WatermarkStrategy:
    return WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(ms))


def test_assigner_gets_the_record_timestamp_or_long_min() -> None:
    assigner = SecondField()
    tw = TimestampsAndWatermarks(bounded(0).with_timestamp_assigner(assigner), clock=FakeClock())
    batch = tw.process_batch([("a", 30), ("b", 10)], [None, 77])
    assert batch.timestamps == [30, 10]
    assert assigner.seen == [LONG_MIN, 77]
    assert batch.events == []  # periodic generators emit nothing on events


def test_a_plain_function_assigner() -> None:
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, ts: v + 1)
    tw = TimestampsAndWatermarks(strategy, clock=FakeClock())
    assert tw.process_batch([1, 2, 3]).timestamps == [2, 3, 4]
    assert tw.emit_periodic() == [3]


def test_without_an_assigner_records_keep_their_timestamps() -> None:
    tw = TimestampsAndWatermarks(bounded(10), clock=FakeClock())
    assert tw.process_batch(["a", "b", "c"], [100, None, 40]).timestamps == [100, None, 40]
    assert tw.emit_periodic() == [89]


def test_bounded_watermarks_after_batches_late_and_early_events() -> None:
    tw = TimestampsAndWatermarks(bounded(1_000).with_timestamp_assigner(lambda v, ts: v), clock=FakeClock())
    assert tw.emit_periodic() == []  # LONG_MIN is not above the start
    tw.process_batch([5_000, 7_000, 6_500])
    assert tw.emit_periodic() == [5_999]
    tw.process_batch([3_000])  # late beyond the bound: the watermark stays
    assert tw.emit_periodic() == []
    tw.process_batch([6_000, 9_500])  # within the bound, then ahead
    assert tw.emit_periodic() == [8_499]
    assert tw.end_of_input() == [LONG_MAX]
    assert tw.emit_periodic() == []


def test_periodic_emission_follows_the_interval() -> None:
    clock = FakeClock(1_000)
    tw = TimestampsAndWatermarks(bounded(0).with_timestamp_assigner(lambda v, ts: v),
                                 auto_watermark_interval_ms=200, clock=clock)
    tw.process_batch([50])
    clock.now = 1_199
    assert tw.emit_periodic_if_due() == []
    clock.now = 1_200
    assert tw.emit_periodic_if_due() == [49]
    tw.process_batch([80])
    clock.now = 1_300
    assert tw.emit_periodic_if_due() == []  # 100 ms since the last round
    clock.now = 1_400
    assert tw.emit_periodic_if_due() == [79]


def test_interval_zero_disables_periodic_emission() -> None:
    clock = FakeClock()
    tw = TimestampsAndWatermarks(bounded(0).with_timestamp_assigner(lambda v, ts: v),
                                 auto_watermark_interval_ms=0, clock=clock)
    tw.process_batch([50])
    clock.now = 10**9
    assert tw.emit_periodic_if_due() == []
    assert tw.end_of_input() == [LONG_MAX]


def test_idle_after_the_timeout_and_active_again_with_the_next_watermark() -> None:
    clock = FakeClock(0)
    strategy = bounded(0).with_timestamp_assigner(lambda v, ts: v).with_idleness(Duration.of_seconds(1))
    tw = TimestampsAndWatermarks(strategy, clock=clock)
    tw.process_batch([100])
    clock.now = 200
    assert tw.emit_periodic() == [99]
    clock.now = 400
    assert tw.emit_periodic() == []  # quiet since 200: the countdown starts at 400
    clock.now = 1_400
    assert tw.emit_periodic() == []  # exactly the timeout: not yet
    clock.now = 1_401
    assert tw.emit_periodic() == [IDLE]
    clock.now = 1_600
    assert tw.emit_periodic() == []
    tw.process_batch([500])
    clock.now = 1_800
    assert tw.emit_periodic() == [ACTIVE, 499]


def test_idle_source_finishing_is_active_then_max() -> None:
    clock = FakeClock(0)
    tw = TimestampsAndWatermarks(WatermarkStrategy.for_monotonous_timestamps().with_idleness(Duration.of_millis(10)),
                                 clock=clock)
    tw.emit_periodic()
    clock.now = 11
    assert tw.emit_periodic() == [IDLE]
    assert tw.end_of_input() == [ACTIVE, LONG_MAX]


def test_splits_combine_to_the_minimum_and_release_lets_it_advance() -> None:
    tw = TimestampsAndWatermarks(bounded(0).with_timestamp_assigner(lambda v, ts: v), clock=FakeClock())
    tw.process_batch([1_000], split="a")
    tw.process_batch([5_000, 4_000], split="b")
    assert tw.emit_periodic() == [999]
    tw.process_batch([2_000], split="a")
    assert tw.emit_periodic() == [1_999]
    assert tw.release_split("a") == [4_999]
    assert tw.release_split("a") == []


def test_an_idle_split_does_not_hold_the_others_back() -> None:
    clock = FakeClock(0)
    strategy = bounded(0).with_timestamp_assigner(lambda v, ts: v).with_idleness(Duration.of_millis(100))
    tw = TimestampsAndWatermarks(strategy, clock=clock)
    tw.process_batch([10], split="slow")
    tw.process_batch([500], split="fast")
    assert tw.emit_periodic() == [9]
    events = []
    for now, ts in ((50, 600), (151, 700), (300, 800)):  # "slow" gets nothing after time 0
        clock.now = now
        tw.process_batch([ts], split="fast")
        events.append(tw.emit_periodic())
    # slow: its countdown starts at the quiet probe at 50; idle at 151 (151 - 50 > 100).
    assert events == [[], [699], [799]]
    tw.process_batch([20], split="slow")  # back, but far behind: it cannot pull the output back
    clock.now = 400
    assert tw.emit_periodic() == []


def test_upstream_watermarks_are_replaced_except_the_final_one() -> None:
    tw = TimestampsAndWatermarks(bounded(0).with_timestamp_assigner(lambda v, ts: v), clock=FakeClock())
    tw.process_batch([10])
    assert tw.on_upstream_watermark(1_000_000) == []
    assert tw.emit_periodic() == [9]
    assert tw.on_upstream_watermark(LONG_MAX) == [LONG_MAX]


def test_no_watermarks_still_ends_with_max() -> None:
    tw = TimestampsAndWatermarks(WatermarkStrategy.no_watermarks(), clock=FakeClock())
    tw.process_batch([1, 2])
    assert tw.emit_periodic() == []
    assert tw.end_of_input() == [LONG_MAX]


def test_without_progressive_watermarks_only_the_final_one() -> None:
    tw = TimestampsAndWatermarks(bounded(0).with_timestamp_assigner(lambda v, ts: v), clock=FakeClock(),
                                 emit_progressive_watermarks=False)
    assert tw.process_batch([5, 6]).timestamps == [5, 6]
    assert tw.emit_periodic() == []
    assert tw.end_of_input() == [LONG_MAX]


@pytest.mark.parametrize(("returned", "error", "words"), [
    (1.5, TypeError, "integer milliseconds"),
    ("12", TypeError, "integer milliseconds"),
    (2**63, ValueError, "64 bits"),
])
def test_a_bad_timestamp_from_the_assigner_is_named(returned, error, words) -> None:
    tw = TimestampsAndWatermarks(bounded(0).with_timestamp_assigner(lambda v, ts: returned), clock=FakeClock())
    with pytest.raises(error, match=words):
        tw.process_batch(["r"])


def test_mismatched_timestamps_and_bad_interval_are_named() -> None:
    tw = TimestampsAndWatermarks(bounded(0), clock=FakeClock())
    with pytest.raises(ValueError, match="2 records but 1 timestamps"):
        tw.process_batch(["a", "b"], [1])
    with pytest.raises(ValueError, match="negative"):
        TimestampsAndWatermarks(bounded(0), auto_watermark_interval_ms=-1)
