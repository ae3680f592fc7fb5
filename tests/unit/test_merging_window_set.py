"""MergingWindowSet (session merging with state windows) and the window operator's lateness and
cleanup rules, against Flink's MergingWindowSetTest scenarios and a brute-force content check."""
from __future__ import annotations

import random
from typing import Any

import pytest

from millstream.common import Duration
from millstream.datastream.window import (
    CountWindow,
    DynamicEventTimeSessionWindows,
    EventTimeSessionWindows,
    GlobalWindow,
    SlidingEventTimeWindows,
    TimeWindow,
    TumblingEventTimeWindows,
)
from millstream.runtime.operators.window_logic import (
    MergingWindowSet,
    assign_windows_batch,
    cleanup_time,
    cleanup_timer,
    is_cleanup_time,
    is_element_late,
    is_window_late,
    windows_of_batch,
)

LONG_MAX = 2**63 - 1
TW = TimeWindow


class Recording:
    """A merge function that records its one call (Flink's TestingMergeFunction)."""

    def __init__(self) -> None:
        self.calls: list[tuple[TimeWindow, set, TimeWindow, set]] = []

    def merge(self, merge_result, merged_windows, state_window_result, merged_state_windows) -> None:  # type: ignore[no-untyped-def]
        self.calls.append((merge_result, set(merged_windows), state_window_result, set(merged_state_windows)))

    def take(self) -> tuple | None:
        assert len(self.calls) <= 1, f"more than one merge for one added window: {self.calls}"
        call = self.calls[0] if self.calls else None
        self.calls = []
        return call


def sessions(gap: int = 3) -> MergingWindowSet:
    return MergingWindowSet(EventTimeSessionWindows.with_gap(Duration.of_millis(gap)))


def test_incremental_merging_keeps_the_first_state_window() -> None:
    ws, f = sessions(), Recording()
    assert ws.add_window(TW(0, 4), f) == TW(0, 4) and f.take() is None
    assert ws.get_state_window(TW(0, 4)) == TW(0, 4)
    assert ws.add_window(TW(0, 4), f) == TW(0, 4) and f.take() is None
    assert ws.add_window(TW(3, 5), f) == TW(0, 5)
    assert f.take() == (TW(0, 5), {TW(0, 4)}, TW(0, 4), set())
    assert ws.add_window(TW(4, 6), f) == TW(0, 6)
    assert f.take() == (TW(0, 6), {TW(0, 5)}, TW(0, 4), set())
    assert ws.get_state_window(TW(0, 6)) == TW(0, 4)
    # Windows inside the merged one merge nothing.
    for inside in (TW(1, 4), TW(0, 4), TW(3, 5), TW(4, 6)):
        assert ws.add_window(inside, f) == TW(0, 6) and f.take() is None
    assert ws.add_window(TW(11, 14), f) == TW(11, 14) and f.take() is None
    assert ws.add_window(TW(10, 13), f) == TW(10, 14)
    assert f.take() == (TW(10, 14), {TW(11, 14)}, TW(11, 14), set())
    assert ws.add_window(TW(12, 15), f) == TW(10, 15)
    assert f.take() == (TW(10, 15), {TW(10, 14)}, TW(11, 14), set())
    assert ws.mapping() == {TW(0, 6): TW(0, 4), TW(10, 15): TW(11, 14)}
    ws.retire_window(TW(0, 6))
    assert ws.get_state_window(TW(0, 6)) is None
    assert ws.get_state_window(TW(10, 15)) == TW(11, 14)
    with pytest.raises(KeyError, match="not in the in-flight window set"):
        ws.retire_window(TW(0, 6))


def test_a_late_window_bridges_two_sessions() -> None:
    ws, f = sessions(), Recording()
    for w in (TW(0, 3), TW(5, 8), TW(10, 13)):
        assert ws.add_window(w, f) == w and f.take() is None
    assert ws.add_window(TW(8, 10), f) == TW(5, 13)
    result, merged, state, folded = f.take()  # type: ignore[misc]
    assert result == TW(5, 13) and merged == {TW(5, 8), TW(10, 13)}
    assert state in (TW(5, 8), TW(10, 13)) and folded == {TW(5, 8), TW(10, 13)} - {state}
    assert ws.get_state_window(TW(0, 3)) == TW(0, 3)
    # Then one window bridges everything: the three state windows fold into one.
    assert ws.add_window(TW(3, 5), f) == TW(0, 13)
    result, merged, state2, folded = f.take()  # type: ignore[misc]
    assert merged == {TW(0, 3), TW(5, 13)}
    assert {state2} | folded == {TW(0, 3), state} and state2 not in folded
    assert ws.mapping() == {TW(0, 13): state2}


def test_a_large_window_covering_existing_ones() -> None:
    ws, f = sessions(), Recording()
    ws.add_window(TW(1, 2), f)
    assert ws.add_window(TW(0, 3), f) == TW(0, 3)
    assert f.take() == (TW(0, 3), {TW(1, 2)}, TW(1, 2), set())
    assert ws.get_state_window(TW(0, 3)) == TW(1, 2)
    ws2, f2 = sessions(), Recording()
    for w in (TW(1, 3), TW(5, 8), TW(10, 13)):
        ws2.add_window(w, f2)
    assert ws2.add_window(TW(0, 13), f2) == TW(0, 13)
    _, merged, state, folded = f2.take()  # type: ignore[misc]
    assert merged == {TW(1, 3), TW(5, 8), TW(10, 13)} and len(folded) == 2 and state not in folded


def test_an_identical_window_to_a_merged_session_keeps_its_state_window() -> None:
    # Dynamic gaps can give a new window equal to an already merged one: (0,4) + (3,6) -> (0,6)
    # with state window (0,4); then an element at 0 with gap 6 gives (0,6) again. The pane's
    # contents stay in (0,4): the mapping must not be reset to (0,6) -> (0,6).
    ws = MergingWindowSet(DynamicEventTimeSessionWindows.with_dynamic_gap(lambda e: e))
    f = Recording()
    ws.add_window(TW(0, 4), f)
    ws.add_window(TW(3, 6), f)
    f.take()
    assert ws.add_window(TW(0, 6), f) == TW(0, 6) and f.take() is None
    assert ws.get_state_window(TW(0, 6)) == TW(0, 4)


def reference_sessions(intervals: list[TimeWindow]) -> dict[TimeWindow, set[int]]:
    """Sessions as unions of touching intervals, each with the indices of its elements."""
    groups: list[tuple[TimeWindow, set[int]]] = []
    for i, w in enumerate(intervals):
        cover, members = w, {i}
        rest = []
        for g, m in groups:
            if g.intersects(cover):
                cover, members = g.cover(cover), members | m
            else:
                rest.append((g, m))
        # a grown cover may now touch groups kept apart: repeat until stable
        changed = True
        while changed:
            changed = False
            for g, m in list(rest):
                if g.intersects(cover):
                    cover, members = g.cover(cover), members | m
                    rest.remove((g, m))
                    changed = True
        groups = rest + [(cover, members)]
    return {g: m for g, m in groups}


def test_contents_follow_their_state_windows_through_random_merges() -> None:
    """Simulate the operator: each element goes into the state window of the window it ended up
    in, and each merge folds the merged state windows' contents into the result's state window.
    At the end every session holds exactly its elements, whatever the merge order."""
    rng = random.Random(3)
    for _ in range(300):
        assigner = DynamicEventTimeSessionWindows.with_dynamic_gap(lambda gap: gap)  # elements are their gaps
        ws = MergingWindowSet(assigner)
        contents: dict[TimeWindow, set[int]] = {}

        def fold(result: Any, merged: Any, state_window: Any, merged_state_windows: Any) -> None:
            for sw in merged_state_windows:
                contents.setdefault(state_window, set()).update(contents.pop(sw, set()))

        intervals = []
        for i in range(rng.randint(1, 12)):
            ts, gap = rng.randint(0, 60), rng.randint(1, 6)
            (window,) = assigner.assign_windows(gap, ts, None)
            intervals.append(window)
            actual = ws.add_window(window, fold)
            state_window = ws.get_state_window(actual)
            assert state_window is not None
            contents.setdefault(state_window, set()).add(i)
        expected = reference_sessions(intervals)
        assert set(ws.windows()) == set(expected), intervals
        state_windows = [ws.get_state_window(w) for w in ws.windows()]
        assert len(set(state_windows)) == len(state_windows)  # one namespace per session
        assert {w: contents.get(ws.get_state_window(w), set()) for w in ws.windows()} == expected, intervals


class FakeMapState:
    def __init__(self, items: dict | None = None) -> None:
        self.data = dict(items or {})
        self.writes = 0

    def items(self):  # type: ignore[no-untyped-def]
        return list(self.data.items())

    def put(self, key: Any, value: Any) -> None:
        self.writes += 1
        self.data[key] = value

    def clear(self) -> None:
        self.data.clear()


def test_restore_and_persist_only_when_changed() -> None:
    state = FakeMapState({TW(17, 42): TW(42, 17), TW(1, 2): TW(3, 4)})
    assigner = EventTimeSessionWindows.with_gap(Duration.of_millis(3))
    ws = MergingWindowSet(assigner, state)
    assert ws.get_state_window(TW(17, 42)) == TW(42, 17) and ws.get_state_window(TW(1, 2)) == TW(3, 4)
    ws.persist()
    assert state.writes == 0
    ws.add_window(TW(100, 103), lambda *a: None)
    ws.persist()
    assert state.data == {TW(17, 42): TW(42, 17), TW(1, 2): TW(3, 4), TW(100, 103): TW(100, 103)}
    writes = state.writes
    ws.persist()
    assert state.writes == writes
    with pytest.raises(ValueError, match="no state"):
        MergingWindowSet(assigner).persist()
    with pytest.raises(TypeError, match="needs a MergingWindowAssigner"):
        MergingWindowSet(TumblingEventTimeWindows.of(Duration.of_millis(5)))  # type: ignore[arg-type]


# -- lateness and cleanup --------------------------------------------------------------------------


def test_cleanup_time() -> None:
    w = TW(0, 10)
    assert cleanup_time(w, 0) == 9
    assert cleanup_time(w, 5) == 14
    assert cleanup_time(w, 5, is_event_time=False) == 9  # no lateness in processing time
    assert cleanup_time(TW(0, LONG_MAX), 10) == LONG_MAX  # overflow saturates at the end of time
    assert cleanup_time(GlobalWindow.get(), 0) == LONG_MAX
    assert cleanup_time(CountWindow(3), 1000) == LONG_MAX
    assert cleanup_timer(w, 5) == 14
    assert cleanup_timer(GlobalWindow.get(), 0) is None  # no timer at Long.MAX_VALUE
    assert cleanup_timer(TW(0, LONG_MAX - 5), 100) is None
    assert is_cleanup_time(w, 14, 5) and not is_cleanup_time(w, 9, 5)
    with pytest.raises(ValueError, match="must not be negative"):
        cleanup_time(w, -1)


def test_window_and_element_lateness() -> None:
    w = TW(0, 10)
    # A window is late once the watermark reaches max_timestamp + lateness.
    assert not is_window_late(w, 8, 0) and is_window_late(w, 9, 0)
    assert not is_window_late(w, 13, 5) and is_window_late(w, 14, 5)
    assert not is_window_late(w, 10**6, 0, is_event_time=False)
    assert not is_window_late(GlobalWindow.get(), LONG_MAX - 1, 0)
    # An element is late when timestamp + lateness <= watermark.
    assert is_element_late(5, 5, 0) and not is_element_late(5, 4, 0)
    assert not is_element_late(5, 9, 5) and is_element_late(5, 10, 5)
    assert not is_element_late(5, 100, 0, is_event_time=False)


def test_batch_assignment() -> None:
    assigner = SlidingEventTimeWindows.of(Duration.of_millis(10), Duration.of_millis(5))
    batch = [("a", 3), ("b", 7), ("c", 12)]
    assert assign_windows_batch(assigner, batch, None) == [  # type: ignore[arg-type]
        ("a", 3, [TW(0, 10), TW(-5, 5)]),
        ("b", 7, [TW(5, 15), TW(0, 10)]),
        ("c", 12, [TW(10, 20), TW(5, 15)]),
    ]
    assert windows_of_batch(assigner, batch, None) == {  # type: ignore[arg-type]
        TW(-5, 5): [("a", 3)],
        TW(0, 10): [("a", 3), ("b", 7)],
        TW(5, 15): [("b", 7), ("c", 12)],
        TW(10, 20): [("c", 12)],
    }


class _SlowPathSessions(EventTimeSessionWindows):
    """The same session merging, through an overriding merge_windows (which turns the containment
    shortcut off: an assigner that overrides it may merge otherwise)."""

    def merge_windows(self, windows: Any, callback: Any) -> None:
        TimeWindow.merge_windows(windows, callback)


def test_a_window_inside_a_session_skips_the_merge(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = TimeWindow.merge_windows
    monkeypatch.setattr(TimeWindow, "merge_windows", staticmethod(lambda ws, cb: (calls.append(1), real(ws, cb))))
    sessions = MergingWindowSet(EventTimeSessionWindows(10))
    merge = Recording()
    assert sessions.add_window(TW(0, 10), merge) == TW(0, 10)
    assert sessions.add_window(TW(3, 13), merge) == TW(0, 10).cover(TW(3, 13))
    assert len(merge.calls) == 1
    assert sessions.add_window(TW(3, 13), merge) == TW(0, 13)  # inside the session: no merge to compute
    assert sessions.add_window(TW(5, 15), merge) == TW(0, 15)
    assert len(merge.calls) == 2
    assert sessions.mapping() == {TW(0, 15): TW(0, 10)}
    slow = MergingWindowSet(_SlowPathSessions(10))
    before = len(calls)
    for w in (TW(0, 10), TW(5, 15), TW(3, 13)):
        slow.add_window(w, Recording())
    assert len(calls) == before + 3  # an assigner that overrides merge_windows always merges through it


def test_a_window_touching_one_session_grows_it_without_the_full_merge(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = TimeWindow.merge_windows
    monkeypatch.setattr(TimeWindow, "merge_windows", staticmethod(lambda ws, cb: (calls.append(1), real(ws, cb))))
    sessions = MergingWindowSet(EventTimeSessionWindows(10))
    merge = Recording()
    assert sessions.add_window(TW(0, 10), merge) == TW(0, 10)  # touches nothing: in flight as it is
    assert sessions.add_window(TW(30, 40), merge) == TW(30, 40)
    assert sessions.add_window(TW(5, 15), merge) == TW(0, 15)  # grows the one session it overlaps
    assert sessions.add_window(TW(15, 25), merge) == TW(0, 25)  # touching merges too, as TimeWindow.intersects
    assert calls == [] and len(merge.calls) == 2
    assert sessions.mapping() == {TW(0, 25): TW(0, 10), TW(30, 40): TW(30, 40)}
    assert sessions.add_window(TW(24, 31), merge) == TW(0, 40)  # bridges two sessions: the full merge
    assert calls == [1] and len(merge.calls) == 3
    assert list(sessions.mapping()) == [TW(0, 40)]


def test_the_shortcut_gives_what_the_full_merge_gives() -> None:
    rng = random.Random(29)
    for _ in range(200):
        fast, slow = MergingWindowSet(EventTimeSessionWindows(10)), MergingWindowSet(_SlowPathSessions(10))
        for _ in range(30):
            start = rng.randrange(0, 200)
            window = TW(start, start + rng.choice((10, 10, 3, 25)))
            fast_merge, slow_merge = Recording(), Recording()
            assert fast.add_window(window, fast_merge) == slow.add_window(window, slow_merge)
            assert fast_merge.calls == slow_merge.calls
            assert fast.mapping() == slow.mapping()
            if rng.random() < 0.1:
                retired = rng.choice(fast.windows())
                fast.retire_window(retired)
                slow.retire_window(retired)
