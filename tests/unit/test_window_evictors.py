"""CountEvictor and TimeEvictor against Flink's rules (expectations by hand)."""
from __future__ import annotations

import pytest

from millstream.common import Duration, Time
from millstream.datastream.window import CountEvictor, TimeEvictor, TimestampedValue, TimeWindow
from tests.unit.window_fakes import FakeEvictorContext

W = TimeWindow(0, 100)


def pane(*timestamps: int | None) -> list[TimestampedValue]:
    return [TimestampedValue(f"e{i}", ts) for i, ts in enumerate(timestamps)]


def values(elements: list[TimestampedValue]) -> list[str]:
    return [e.get_value() for e in elements]


def test_count_evictor_keeps_the_last_max_count_before_the_function() -> None:
    evictor, ctx = CountEvictor.of(3), FakeEvictorContext()
    elements = pane(1, 2, 3, 4, 5)
    evictor.evict_after(elements, 5, W, ctx)
    assert values(elements) == ["e0", "e1", "e2", "e3", "e4"]  # acts before, not after
    evictor.evict_before(elements, 5, W, ctx)
    assert values(elements) == ["e2", "e3", "e4"]
    short = pane(1, 2)
    evictor.evict_before(short, 2, W, ctx)
    assert values(short) == ["e0", "e1"]


def test_count_evictor_after_the_function() -> None:
    evictor, ctx = CountEvictor.of(1, do_evict_after=True), FakeEvictorContext()
    elements = pane(1, 2, 3)
    evictor.evict_before(elements, 3, W, ctx)
    assert len(elements) == 3
    evictor.evict_after(elements, 3, W, ctx)
    assert values(elements) == ["e2"]
    with pytest.raises(TypeError, match="do_evict_after must be a bool"):
        CountEvictor.of(1, "yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="int count"):
        CountEvictor.of(Time.seconds(1))  # type: ignore[arg-type]


def test_time_evictor_keeps_elements_newer_than_max_minus_size() -> None:
    # Max timestamp 50, size 20: the cutoff is 30 and elements at or before it go (Flink's <=).
    evictor, ctx = TimeEvictor.of(Duration.of_millis(20)), FakeEvictorContext()
    elements = pane(10, 50, 30, 31, 29, 45)
    evictor.evict_before(elements, 6, W, ctx)
    assert values(elements) == ["e1", "e3", "e5"]


def test_time_evictor_after_and_panes_without_timestamps() -> None:
    evictor, ctx = TimeEvictor.of(Time.seconds(1), True), FakeEvictorContext()
    elements = pane(0, 500, 2000)
    evictor.evict_before(elements, 3, W, ctx)
    assert len(elements) == 3
    evictor.evict_after(elements, 3, W, ctx)
    assert values(elements) == ["e2"]
    untimed = pane(None, None)
    TimeEvictor.of(Time.seconds(1)).evict_before(untimed, 2, W, ctx)
    assert len(untimed) == 2  # Flink skips a pane whose first element has no timestamp
    empty: list[TimestampedValue] = []
    TimeEvictor.of(Time.seconds(1)).evict_before(empty, 0, W, ctx)
    assert empty == []
    with pytest.raises(TypeError, match="Duration or Time"):
        TimeEvictor.of(1000)
