"""Windows and window assigners against Flink's rules, with expectations from brute-force references."""
from __future__ import annotations

import pickle
import random

import pytest

from millstream.common import Duration, Time
from millstream.datastream.window import (
    ContinuousEventTimeTrigger,
    CountSlidingWindowAssigner,
    CountTrigger,
    CountTumblingWindowAssigner,
    CountWindow,
    DynamicEventTimeSessionWindows,
    DynamicProcessingTimeSessionWindows,
    EventTimeSessionWindows,
    EventTimeTrigger,
    GlobalWindow,
    GlobalWindows,
    MergingWindowAssigner,
    NeverTrigger,
    ProcessingTimeSessionWindows,
    ProcessingTimeTrigger,
    SessionWindowTimeGapExtractor,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TimeWindow,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)
from tests.unit.window_fakes import FakeAssignerContext

LONG_MAX = 2**63 - 1


def reference_start(timestamp: int, offset: int, size: int) -> int:
    """The start s of the window holding timestamp: s = offset + k*size and s <= timestamp < s + size,
    found by stepping from a start far below (no modulo involved)."""
    s = offset - size * (abs(timestamp) // size + 2)
    while s + size <= timestamp:
        s += size
    assert s <= timestamp < s + size
    return s


def reference_sliding(timestamp: int, size: int, slide: int, offset: int) -> list[TimeWindow]:
    """Every window [s, s + size) with s = offset + k*slide that holds timestamp, latest start first."""
    lowest = offset - slide * (abs(timestamp) // slide + size // slide + 3)
    starts = [s for s in range(lowest, timestamp + 1, slide) if s <= timestamp < s + size]
    return [TimeWindow(s, s + size) for s in sorted(starts, reverse=True)]


# -- TimeWindow ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("timestamp", "offset", "size", "start"),
    [
        (0, 0, 10, 0),
        (9, 0, 10, 0),
        (10, 0, 10, 10),
        (-1, 0, 10, -10),  # Java's remainder is -1: wrapped by one window, not truncated towards 0
        (-10, 0, 10, -10),
        (-11, 0, 10, -20),
        (7, 3, 10, 3),
        (2, 3, 10, -7),
        (2, -3, 10, -3),
        (-4, -3, 10, -13),
        (1_700_000_123_456, 0, 5000, 1_700_000_120_000),
    ],
)
def test_window_start_with_offset_by_hand(timestamp: int, offset: int, size: int, start: int) -> None:
    assert TimeWindow.get_window_start_with_offset(timestamp, offset, size) == start


def test_window_start_with_offset_matches_the_reference() -> None:
    rng = random.Random(7)
    for _ in range(3000):
        size = rng.randint(1, 50)
        offset = rng.randint(-size + 1, size - 1)
        timestamp = rng.randint(-500, 500)
        assert TimeWindow.get_window_start_with_offset(timestamp, offset, size) == reference_start(
            timestamp, offset, size
        ), (timestamp, offset, size)


def test_time_window_geometry() -> None:
    w = TimeWindow(0, 10)
    assert w.max_timestamp() == 9
    assert w.intersects(TimeWindow(10, 20))  # touching windows merge in sessions
    assert w.intersects(TimeWindow(-5, 0))
    assert w.intersects(TimeWindow(3, 4))
    assert not w.intersects(TimeWindow(11, 20))
    assert not w.intersects(TimeWindow(-5, -1))
    assert w.cover(TimeWindow(5, 15)) == TimeWindow(0, 15)
    assert TimeWindow(3, 4).cover(TimeWindow(-2, 1)) == TimeWindow(-2, 4)


def test_windows_are_values() -> None:
    assert TimeWindow(1, 2) == TimeWindow(1, 2) and hash(TimeWindow(1, 2)) == hash(TimeWindow(1, 2))
    assert TimeWindow(1, 2) != TimeWindow(1, 3)
    assert TimeWindow(1, 2) != CountWindow(1)
    assert len({TimeWindow(1, 2), TimeWindow(1, 2), TimeWindow(2, 3)}) == 2
    assert sorted([TimeWindow(5, 6), TimeWindow(1, 9), TimeWindow(1, 3)]) == [
        TimeWindow(1, 3),
        TimeWindow(1, 9),
        TimeWindow(5, 6),
    ]
    assert CountWindow(3) == CountWindow(3) and CountWindow(3) != CountWindow(4)
    assert GlobalWindow.get() == GlobalWindow() and len({GlobalWindow(), GlobalWindow.get()}) == 1
    assert CountWindow(0).max_timestamp() == LONG_MAX == GlobalWindow.get().max_timestamp()
    for w in (TimeWindow(-3, 8), CountWindow(12), GlobalWindow.get()):
        assert pickle.loads(pickle.dumps(w)) == w


class Recorder(MergingWindowAssigner.MergeCallback):
    def __init__(self) -> None:
        self.merges: list[tuple[frozenset, TimeWindow]] = []

    def merge(self, to_be_merged, merge_result) -> None:  # type: ignore[no-untyped-def]
        self.merges.append((frozenset(to_be_merged), merge_result))


def reference_groups(windows: list[TimeWindow]) -> set[tuple[frozenset, TimeWindow]]:
    """Connected components of the 'intersects' relation (transitively), by repeated union."""
    groups = [{w} for w in set(windows)]
    changed = True
    while changed:
        changed = False
        for i in range(len(groups)):
            for j in range(i + 1, len(groups)):
                if any(a.intersects(b) for a in groups[i] for b in groups[j]):
                    groups[i] |= groups.pop(j)
                    changed = True
                    break
            if changed:
                break
    out = set()
    for g in groups:
        if len(g) > 1:
            out.add((frozenset(g), TimeWindow(min(w.start for w in g), max(w.end for w in g))))
    return out


def test_merge_windows_by_hand() -> None:
    rec = Recorder()
    TimeWindow.merge_windows([TimeWindow(0, 3), TimeWindow(5, 8), TimeWindow(10, 13), TimeWindow(8, 10)], rec)
    assert rec.merges == [(frozenset({TimeWindow(5, 8), TimeWindow(8, 10), TimeWindow(10, 13)}), TimeWindow(5, 13))]
    rec = Recorder()
    TimeWindow.merge_windows([TimeWindow(0, 3), TimeWindow(4, 5)], rec)
    assert rec.merges == []  # a gap of 1 ms keeps sessions apart


def test_merge_windows_matches_the_reference() -> None:
    rng = random.Random(11)
    for _ in range(500):
        windows = []
        for _ in range(rng.randint(1, 8)):
            start = rng.randint(-30, 30)
            windows.append(TimeWindow(start, start + rng.randint(1, 8)))
        rec = Recorder()
        TimeWindow.merge_windows(windows, rec)
        assert set(rec.merges) == reference_groups(windows), windows
        assert len(rec.merges) == len(set(rec.merges))


# -- tumbling and sliding --------------------------------------------------------------------------


def test_tumbling_event_time_windows() -> None:
    assigner = TumblingEventTimeWindows.of(Time.seconds(5))
    assert assigner.assign_windows("x", 0, None) == [TimeWindow(0, 5000)]
    assert assigner.assign_windows("x", 4999, None) == [TimeWindow(0, 5000)]
    assert assigner.assign_windows("x", 5000, None) == [TimeWindow(5000, 10000)]
    assert assigner.assign_windows("x", -1, None) == [TimeWindow(-5000, 0)]
    assert assigner.is_event_time()
    assert isinstance(assigner.get_default_trigger(None), EventTimeTrigger)
    # A day starting at midnight UTC+8 (the offset example of PyFlink's docs).
    day = TumblingEventTimeWindows.of(Time.days(1), Time.hours(-8))
    assert day.assign_windows("x", 0, None) == [TimeWindow(-8 * 3_600_000, 16 * 3_600_000)]
    assert day.assign_windows("x", 16 * 3_600_000, None) == [TimeWindow(16 * 3_600_000, 40 * 3_600_000)]


@pytest.mark.parametrize("offset_ms", [0, 3, -3, 7, -9])
def test_tumbling_matches_the_reference(offset_ms: int) -> None:
    assigner = TumblingEventTimeWindows.of(Duration.of_millis(10), Duration.of_millis(offset_ms))
    for ts in range(-60, 60):
        start = reference_start(ts, offset_ms, 10)
        assert assigner.assign_windows(None, ts, None) == [TimeWindow(start, start + 10)]


def test_tumbling_processing_time_uses_the_clock_not_the_timestamp() -> None:
    assigner = TumblingProcessingTimeWindows.of(Time.seconds(1), Time.milliseconds(100))
    ctx = FakeAssignerContext(processing_time=12_345)
    assert assigner.assign_windows("x", 0, ctx) == [TimeWindow(12_100, 13_100)]
    assert not assigner.is_event_time()
    assert isinstance(assigner.get_default_trigger(None), ProcessingTimeTrigger)


@pytest.mark.parametrize(("size", "slide", "offset"), [(10, 5, 0), (10, 3, 0), (10, 3, 2), (10, 4, -3), (5, 5, 0), (3, 5, 1)])
def test_sliding_matches_the_reference(size: int, slide: int, offset: int) -> None:
    assigner = SlidingEventTimeWindows.of(Duration.of_millis(size), Duration.of_millis(slide), Duration.of_millis(offset))
    for ts in range(-40, 40):
        assert assigner.assign_windows(None, ts, None) == reference_sliding(ts, size, slide, offset), ts


def test_sliding_by_hand() -> None:
    assigner = SlidingEventTimeWindows.of(Time.seconds(10), Time.seconds(5))
    assert assigner.assign_windows("x", 7000, None) == [TimeWindow(5000, 15000), TimeWindow(0, 10000)]
    assert assigner.assign_windows("x", -1, None) == [TimeWindow(-5000, 5000), TimeWindow(-10000, 0)]
    # slide > size: gaps between windows hold no element.
    gappy = SlidingEventTimeWindows.of(Duration.of_millis(3), Duration.of_millis(5))
    assert gappy.assign_windows("x", 4, None) == []
    assert gappy.assign_windows("x", 6, None) == [TimeWindow(5, 8)]
    assert isinstance(assigner.get_default_trigger(None), EventTimeTrigger) and assigner.is_event_time()


def test_sliding_processing_time() -> None:
    assigner = SlidingProcessingTimeWindows.of(Time.seconds(10), Time.seconds(5))
    assert assigner.assign_windows("x", None, FakeAssignerContext(7000)) == [TimeWindow(5000, 15000), TimeWindow(0, 10000)]
    assert not assigner.is_event_time()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: TumblingEventTimeWindows.of(Time.seconds(5), Time.seconds(5)), "abs(offset) < size"),
        (lambda: TumblingEventTimeWindows.of(Time.seconds(5), Time.seconds(-6)), "abs(offset) < size"),
        (lambda: TumblingEventTimeWindows.of(Duration.of_millis(0)), "abs(offset) < size"),
        (lambda: TumblingProcessingTimeWindows.of(Duration.of_millis(-1)), "abs(offset) < size"),
        (lambda: SlidingEventTimeWindows.of(Time.seconds(5), Time.seconds(1), Time.seconds(1)), "abs(offset) < slide"),
        (lambda: SlidingEventTimeWindows.of(Duration.of_millis(0), Time.seconds(1)), "size > 0"),
        (lambda: SlidingProcessingTimeWindows.of(Time.seconds(5), Duration.of_millis(0)), "abs(offset) < slide"),
        (lambda: EventTimeSessionWindows.with_gap(Duration.of_millis(0)), "0 < size"),
        (lambda: ProcessingTimeSessionWindows.with_gap(Duration.of_millis(-5)), "0 < size"),
    ],
)
def test_bad_parameters_are_rejected_with_flinks_message(make, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make()


def test_sizes_must_be_durations() -> None:
    with pytest.raises(TypeError, match="TumblingEventTimeWindows size must be a Duration or Time"):
        TumblingEventTimeWindows.of(5000)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="SlidingEventTimeWindows slide"):
        SlidingEventTimeWindows.of(Time.seconds(5), "1s")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "assigner",
    [
        TumblingEventTimeWindows.of(Time.seconds(1)),
        SlidingEventTimeWindows.of(Time.seconds(2), Time.seconds(1)),
        EventTimeSessionWindows.with_gap(Time.seconds(1)),
        DynamicEventTimeSessionWindows.with_dynamic_gap(lambda e: 5),
    ],
)
def test_event_time_assigners_need_a_timestamp(assigner) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="assign_timestamps_and_watermarks"):
        assigner.assign_windows("x", None, None)
    with pytest.raises(ValueError, match="no timestamp"):
        assigner.assign_windows("x", -(2**63), None)


# -- sessions ------------------------------------------------------------------------------------


def test_event_time_sessions() -> None:
    assigner = EventTimeSessionWindows.with_gap(Time.seconds(3))
    assert assigner.assign_windows("x", 1000, None) == [TimeWindow(1000, 4000)]
    assert assigner.assign_windows("x", -500, None) == [TimeWindow(-500, 2500)]
    assert isinstance(assigner, MergingWindowAssigner) and assigner.is_event_time()
    assert isinstance(assigner.get_default_trigger(None), EventTimeTrigger)
    rec = Recorder()
    assigner.merge_windows([TimeWindow(0, 3000), TimeWindow(3000, 6000), TimeWindow(7000, 9000)], rec)
    assert rec.merges == [(frozenset({TimeWindow(0, 3000), TimeWindow(3000, 6000)}), TimeWindow(0, 6000))]


def test_processing_time_sessions() -> None:
    assigner = ProcessingTimeSessionWindows.with_gap(Time.milliseconds(10))
    assert assigner.assign_windows("x", 99999, FakeAssignerContext(50)) == [TimeWindow(50, 60)]
    assert not assigner.is_event_time()
    assert isinstance(assigner.get_default_trigger(None), ProcessingTimeTrigger)


class GapFromElement(SessionWindowTimeGapExtractor):
    def extract(self, element: tuple) -> int:
        return element[1]


def test_dynamic_gap_sessions() -> None:
    assigner = EventTimeSessionWindows.with_dynamic_gap(GapFromElement())
    assert isinstance(assigner, DynamicEventTimeSessionWindows) and isinstance(assigner, MergingWindowAssigner)
    assert assigner.assign_windows(("a", 7), 100, None) == [TimeWindow(100, 107)]
    assert assigner.assign_windows(("a", 1), 100, None) == [TimeWindow(100, 101)]
    assert assigner.is_event_time() and isinstance(assigner.get_default_trigger(None), EventTimeTrigger)
    as_callable = DynamicEventTimeSessionWindows.with_dynamic_gap(lambda e: e * 2)
    assert as_callable.assign_windows(4, 10, None) == [TimeWindow(10, 18)]
    with pytest.raises(ValueError, match="0 < gap"):
        assigner.assign_windows(("a", 0), 100, None)
    with pytest.raises(TypeError, match="milliseconds as an int"):
        assigner.assign_windows(("a", "5"), 100, None)
    processing = ProcessingTimeSessionWindows.with_dynamic_gap(GapFromElement())
    assert isinstance(processing, DynamicProcessingTimeSessionWindows)
    assert processing.assign_windows(("a", 5), 0, FakeAssignerContext(1000)) == [TimeWindow(1000, 1005)]
    assert not processing.is_event_time()
    with pytest.raises(TypeError, match="SessionWindowTimeGapExtractor or a callable"):
        EventTimeSessionWindows.with_dynamic_gap(5)


# -- global and count windows ----------------------------------------------------------------------


def test_global_windows() -> None:
    assigner = GlobalWindows.create()
    assert assigner.assign_windows("x", 5, None) == [GlobalWindow.get()]
    assert isinstance(assigner.get_default_trigger(None), NeverTrigger)
    assert not assigner.is_event_time()


def test_count_tumbling_windows_number_each_keys_elements() -> None:
    assigner = CountTumblingWindowAssigner.of(3)
    ctx = FakeAssignerContext()
    got = {}
    for key, n in [("a", 7), ("b", 4)]:
        ctx.runtime_context.key = key
        got[key] = [assigner.assign_windows(i, None, ctx) for i in range(n)]
    assert got["a"] == [[CountWindow(i // 3)] for i in range(7)]
    assert got["b"] == [[CountWindow(i // 3)] for i in range(4)]
    trigger = assigner.get_default_trigger(None)
    assert isinstance(trigger, CountTrigger) and trigger._window_size == 3
    assert not assigner.is_event_time()


@pytest.mark.parametrize(("size", "slide"), [(4, 2), (5, 2), (3, 3), (2, 3), (6, 1)])
def test_count_sliding_windows_match_the_reference(size: int, slide: int) -> None:
    assigner = CountSlidingWindowAssigner.of(size, slide)
    ctx = FakeAssignerContext()
    ctx.runtime_context.key = "k"
    for n in range(20):
        expected = [CountWindow(k) for k in range(n, -1, -1) if k * slide <= n <= k * slide + size - 1]
        assert assigner.assign_windows(n, None, ctx) == expected, n
    assert assigner.get_default_trigger(None)._window_size == size


def test_count_assigners_reject_bad_sizes() -> None:
    with pytest.raises(ValueError, match="size must be positive"):
        CountTumblingWindowAssigner.of(0)
    with pytest.raises(ValueError, match="slide must be positive"):
        CountSlidingWindowAssigner.of(3, 0)
    with pytest.raises(TypeError, match="int number of elements"):
        CountTumblingWindowAssigner.of(Time.seconds(1))  # type: ignore[arg-type]


def test_assigners_and_triggers_pickle() -> None:
    """They travel to the TaskManagers inside the operator: they must survive cloudpickle."""
    import cloudpickle

    ctx = FakeAssignerContext(processing_time=12_345)
    ctx.runtime_context.key = "k"
    for obj in (
        TumblingEventTimeWindows.of(Time.seconds(5)),
        SlidingProcessingTimeWindows.of(Time.seconds(5), Time.seconds(1)),
        EventTimeSessionWindows.with_dynamic_gap(lambda e: 3),
    ):
        copy = cloudpickle.loads(cloudpickle.dumps(obj))
        assert copy.assign_windows("x", 7777, ctx) == obj.assign_windows("x", 7777, ctx)
    trigger = cloudpickle.loads(cloudpickle.dumps(ContinuousEventTimeTrigger.of(Time.seconds(1))))
    assert trigger.interval == 1000 and trigger.state_desc.reduce_function.reduce(3, 2) == 2


def test_window_serializers_write_flinks_bytes() -> None:
    import io

    from millstream.datastream.window import CountWindowSerializer, TimeWindowSerializer

    stream = io.BytesIO()
    TimeWindowSerializer().serialize(TimeWindow(-10, 5), stream)
    CountWindowSerializer().serialize(CountWindow(3), stream)
    # Flink: two big-endian longs (start, end), then the count window's id as one long.
    assert stream.getvalue() == (-10).to_bytes(8, "big", signed=True) + (5).to_bytes(8, "big", signed=True) + (
        3).to_bytes(8, "big", signed=True)
    stream.seek(0)
    assert TimeWindowSerializer().deserialize(stream) == TimeWindow(-10, 5)
    assert CountWindowSerializer().deserialize(stream) == CountWindow(3)
    with pytest.raises(EOFError):
        CountWindowSerializer().deserialize(stream)
