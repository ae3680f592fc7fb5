"""The window operator through a real OperatorChain, against Flink's rules.

Expected results come from small oracles written from the rules (epoch-aligned windows with
Python's floor modulo, sessions as merged intervals), or are worked out by hand in the comments,
never from the operator's own code.
"""
from __future__ import annotations

from typing import Any, Iterable

import pytest

from millstream.common import Time, Types
from millstream.datastream import OutputTag, RuntimeExecutionMode
from millstream.datastream.functions import (
    AggregateFunction,
    AllWindowFunction,
    ProcessAllWindowFunction,
    ProcessWindowFunction,
    WindowFunction,
)
from millstream.datastream.state import ValueStateDescriptor
from millstream.datastream.window import (
    ContinuousEventTimeTrigger,
    ContinuousProcessingTimeTrigger,
    CountEvictor,
    CountTrigger,
    DynamicEventTimeSessionWindows,
    EventTimeSessionWindows,
    GlobalWindows,
    ProcessingTimeSessionWindows,
    PurgingTrigger,
    SlidingEventTimeWindows,
    TimeEvictor,
    Trigger,
    TriggerResult,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)
from millstream.runtime.task.chain import OperatorError
from millstream.runtime.task.environment import BATCH
from millstream.runtime.timestamps import LONG_MAX
from tests.unit.window_harness import WindowHarness

# Every test runs on each keyed state backend (heap, RocksDB, RocksDB with heap timers).
pytestmark = pytest.mark.usefixtures("state_backend")


def key0(r: Any) -> Any:
    return r[0]


def add(a: tuple, b: tuple) -> tuple:
    return (a[0], a[1] + b[1])


# -- oracles -----------------------------------------------------------------------------------


def tumbling_start(ts: int, size: int, offset: int = 0) -> int:
    return ts - (ts - offset) % size  # floor modulo: the window aligned to the epoch plus offset


def sliding_starts(ts: int, size: int, slide: int, offset: int = 0) -> list[int]:
    first = tumbling_start(ts, slide, offset)
    return [s for s in range(first - size, first + 1) if (s - offset) % slide == 0 and s <= ts < s + size]


def sessions(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """(start, end, count) of the merged sessions: intervals that overlap or touch merge."""
    out: list[list[int]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
            out[-1][2] += 1
        else:
            out.append([start, end, 1])
    return [tuple(s) for s in out]  # type: ignore[misc]


class Collect(WindowFunction):
    """(key, window start, window end, sorted values)."""

    def apply(self, key: Any, window: Any, inputs: Iterable[Any]) -> Iterable[Any]:
        yield key, window.start, window.end, sorted(v for _, v in inputs)


class Values(WindowFunction):
    def apply(self, key: Any, window: Any, inputs: Iterable[Any]) -> Iterable[Any]:
        yield [v for _, v in inputs]


class CountMinMax(AggregateFunction):
    def create_accumulator(self) -> tuple:
        return (0, None, None)

    def add(self, value: tuple, acc: tuple) -> tuple:
        v = value[1]
        return (acc[0] + 1, v if acc[1] is None else min(acc[1], v), v if acc[2] is None else max(acc[2], v))

    def get_result(self, acc: tuple) -> tuple:
        return acc

    def merge(self, a: tuple, b: tuple) -> tuple:
        return (a[0] + b[0], min(a[1], b[1]), max(a[2], b[2]))


class SessionInfo(ProcessWindowFunction):
    def process(self, key: Any, context: ProcessWindowFunction.Context, elements: Iterable[Any]) -> Iterable[Any]:
        (count, _, _), = elements
        w = context.window()
        yield key, w.start, w.end, count


# -- assigners ---------------------------------------------------------------------------------


def test_tumbling_event_time_with_offset_and_negative_timestamps_fire_as_the_watermark_passes() -> None:
    size, offset = 10, 3
    h = WindowHarness(lambda s: s.key_by(key0).window(
        TumblingEventTimeWindows.of(Time.milliseconds(size), Time.milliseconds(offset))).reduce(add))
    records = [(("a", -12), -12), (("a", -7), -7), (("a", -1), -1), (("a", 2), 2), (("a", 3), 3), (("a", 12), 12),
               (("b", 5), 5), (("b", 9), 9), (("b", 14), 14)]
    h.feed(*records)
    expected: dict[tuple[str, int], int] = {}
    for (k, v), ts in records:
        start = tumbling_start(ts, size, offset)
        expected[(k, start)] = expected.get((k, start), 0) + v
    # By hand: -12 is in [-17, -7); -7, -1 and 2 in [-7, 3); 3 and 12 in [3, 13); 14 in [13, 23).
    assert expected == {("a", -17): -12, ("a", -7): -6, ("a", 3): 15, ("b", 3): 14, ("b", 13): 14}
    assert h.take() == []
    previous = -(2**63)
    for watermark in (-8, 2, 12, LONG_MAX):
        h.watermark(watermark)
        due = sorted((k, total) for (k, start), total in expected.items() if previous < start + size - 1 <= watermark)
        assert due and sorted(h.take()) == due
        previous = watermark
    # Every result carries its window's max timestamp.
    assert sorted(h.stamped_out()) == sorted(((k, t), s + size - 1) for (k, s), t in expected.items())


def test_sliding_event_time_windows_with_offset() -> None:
    size, slide, offset = 10, 4, 1
    h = WindowHarness(lambda s: s.key_by(key0).window(SlidingEventTimeWindows.of(
        Time.milliseconds(size), Time.milliseconds(slide), Time.milliseconds(offset))).apply(Collect()))
    stamps = [-3, 0, 2, 5, 9, 11, 17]
    h.feed(*[(("k", t), t) for t in stamps]).watermark(LONG_MAX)
    expected: dict[int, list[int]] = {}
    for t in stamps:
        for start in sliding_starts(t, size, slide, offset):
            expected.setdefault(start, []).append(t)
    assert sliding_starts(5, size, slide, offset) == [-3, 1, 5]  # by hand: starts ≡ 1 (mod 4) within 10 ms before 5
    assert sorted(h.out()) == sorted(("k", s, s + size, sorted(v)) for s, v in expected.items())


def test_event_time_sessions_merge_when_a_late_element_bridges_two_sessions() -> None:
    gap = 5
    h = WindowHarness(lambda s: s.key_by(key0).window(EventTimeSessionWindows.with_gap(Time.milliseconds(gap)))
                      .aggregate(CountMinMax(), SessionInfo()))
    a = [1, 3, 10, 14]
    b = [2, 20]
    h.feed(*[(("a", t), t) for t in a], *[(("b", t), t) for t in b])
    h.watermark(5)  # no session ends at or before 5: b's [2, 7) ends at 6, a's [1, 8) at 7
    assert h.take() == []
    h.feed((("a", 7), 7))  # [7, 12) touches [1, 8) and [10, 19): one session [1, 19)
    h.watermark(LONG_MAX)
    expected = [("a", s, e, c) for s, e, c in sessions((t, t + gap) for t in a + [7])]
    expected += [("b", s, e, c) for s, e, c in sessions((t, t + gap) for t in b)]
    assert expected == [("a", 1, 19, 5), ("b", 2, 7, 1), ("b", 20, 25, 1)]
    assert sorted(h.out()) == sorted(expected)
    # Nothing left behind: panes, merging window sets and timers are gone after cleanup.
    assert h.operator.backend.is_empty()


def test_dynamic_gap_sessions_take_each_elements_gap() -> None:
    h = WindowHarness(lambda s: s.key_by(key0).window(
        DynamicEventTimeSessionWindows.with_dynamic_gap(lambda r: r[1])).apply(Collect()))
    records = [(("a", 3), 0), (("a", 10), 5), (("a", 4), 2), (("a", 2), 30)]
    h.feed(*records).watermark(LONG_MAX)
    merged = sessions((t, t + g) for (_, g), t in records)
    assert merged == [(0, 15, 3), (30, 32, 1)]  # [2, 6) bridges [0, 3) and [5, 15)
    assert sorted(h.out()) == [("a", 0, 15, [3, 4, 10]), ("a", 30, 32, [2])]


def test_global_window_with_count_trigger_fires_without_purging_and_purging_trigger_purges() -> None:
    plain = WindowHarness(lambda s: s.key_by(key0).window(GlobalWindows.create()).trigger(CountTrigger.of(3)).reduce(add))
    purging = WindowHarness(lambda s: s.key_by(key0).window(GlobalWindows.create())
                            .trigger(PurgingTrigger.of(CountTrigger.of(3))).reduce(add))
    for h in (plain, purging):
        h.feed_plain(*[("a", i) for i in range(1, 8)]).end()
    assert plain.out() == [("a", 1 + 2 + 3), ("a", sum(range(1, 7)))]
    assert purging.out() == [("a", 1 + 2 + 3), ("a", 4 + 5 + 6)]  # 7 waits for two more: never fires
    assert GlobalWindows.create().get_default_trigger().on_element(None, 0, None, None) is TriggerResult.CONTINUE


def test_count_windows_tumbling_and_sliding() -> None:
    tumbling = WindowHarness(lambda s: s.key_by(key0).count_window(3).reduce(add))
    sliding = WindowHarness(lambda s: s.key_by(key0).count_window(3, 2).apply(Values()))
    for h in (tumbling, sliding):
        h.feed_plain(*[("a", i) for i in range(1, 8)], ("b", 100)).end()
    assert tumbling.out() == [("a", 6), ("a", 15)]
    # PyFlink's sliding count windows: window k holds a key's elements k*slide .. k*slide + size - 1
    # and fires when it holds size of them.
    values = list(range(1, 8))
    expected = [values[k * 2: k * 2 + 3] for k in range(4) if k * 2 + 3 <= len(values)]
    assert expected == [[1, 2, 3], [3, 4, 5], [5, 6, 7]]
    assert sliding.out() == expected


# -- triggers ----------------------------------------------------------------------------------


def test_continuous_event_time_trigger_fires_every_interval_and_at_the_end() -> None:
    h = WindowHarness(lambda s: s.key_by(key0).window(TumblingEventTimeWindows.of(Time.milliseconds(10)))
                      .trigger(ContinuousEventTimeTrigger.of(Time.milliseconds(4))).reduce(add))
    h.feed((("a", 1), 1), (("a", 2), 2))
    h.watermark(3)
    assert h.take() == []
    h.watermark(4)  # first fire time: 1 rounded down to 4 ms, plus 4
    assert h.take() == [("a", 3)]
    h.feed((("a", 4), 6))
    h.watermark(8)
    assert h.take() == [("a", 7)]
    h.watermark(9)  # the window's end
    assert h.take() == [("a", 7)]
    h.watermark(LONG_MAX)
    assert h.take() == []
    assert h.operator.backend.is_empty()


def test_processing_time_tumbling_windows_on_the_manual_clock() -> None:
    h = WindowHarness(lambda s: s.key_by(key0).window(TumblingProcessingTimeWindows.of(Time.milliseconds(10)))
                      .reduce(add), clock_ms=100)
    h.feed_plain(("a", 1), ("b", 2))
    h.advance_to(105).feed_plain(("a", 3))
    h.advance_to(108)
    assert h.take() == []
    assert h.operator.next_timer_ms() == 109
    h.advance_to(109)
    assert sorted(h.take()) == [("a", 4), ("b", 2)]
    assert {t for _, t in h.stamped_out()} == {109}
    h.feed_plain(("a", 10)).advance_to(125)
    assert h.take() == [("a", 10)]


def test_processing_time_sessions_merge() -> None:
    h = WindowHarness(lambda s: s.key_by(key0).window(ProcessingTimeSessionWindows.with_gap(Time.milliseconds(5)))
                      .apply(Collect()), clock_ms=0)
    h.feed_plain(("a", 1)).advance_to(3).feed_plain(("a", 2)).advance_to(6)
    assert h.take() == []  # [0, 5) grew to [0, 8): its end is 7
    h.advance_to(7)
    assert h.take() == [("a", 0, 8, [1, 2])]


def test_continuous_processing_time_trigger() -> None:
    h = WindowHarness(lambda s: s.key_by(key0).window(GlobalWindows.create())
                      .trigger(ContinuousProcessingTimeTrigger.of(Time.milliseconds(5))).reduce(add), clock_ms=102)
    h.feed_plain(("a", 1))
    h.advance_to(104)
    assert h.take() == []
    h.advance_to(105)  # 102 rounded down to 5 ms is 100; first fire at 105
    assert h.take() == [("a", 1)]
    h.feed_plain(("a", 2)).advance_to(111)
    assert h.take() == [("a", 3)]


class FireOnMarker(Trigger):
    """Fires and purges on a "fire" element; the first element of a pane sets an event-time timer
    5 ms later (once per window, remembered in the trigger's window state)."""

    seen = ValueStateDescriptor("seen", Types.INT())

    def on_element(self, element: Any, timestamp: int, window: Any, ctx: Trigger.TriggerContext) -> TriggerResult:
        if element[1] == "fire":
            return TriggerResult.FIRE_AND_PURGE
        state: Any = ctx.get_partitioned_state(self.seen)
        if state.value() is None:
            state.update(1)
            ctx.register_event_time_timer(timestamp + 5)
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Any, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.FIRE

    def on_processing_time(self, time: int, window: Any, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_merge(self, window: Any, ctx: Trigger.OnMergeContext) -> None:
        return None

    def clear(self, window: Any, ctx: Trigger.TriggerContext) -> None:
        ctx.get_partitioned_state(self.seen).clear()


def test_a_custom_trigger_with_state_and_timers() -> None:
    h = WindowHarness(lambda s: s.key_by(key0).window(GlobalWindows.create()).trigger(FireOnMarker()).apply(Values()))
    h.feed((("a", "x"), 1), (("a", "y"), 2), (("b", "q"), 2), (("a", "fire"), 3), (("a", "z"), 4))
    assert h.take() == [["x", "y", "fire"]]
    h.watermark(6)  # a's timer (1 + 5); b's is at 7
    assert h.take() == [["z"]]
    h.watermark(7)
    assert h.take() == [["q"]]


# -- evictors ----------------------------------------------------------------------------------


def test_count_evictor_before_and_after_the_function() -> None:
    before = WindowHarness(lambda s: s.key_by(key0).window(GlobalWindows.create()).trigger(CountTrigger.of(3))
                           .evictor(CountEvictor.of(2)).apply(Values()))
    after = WindowHarness(lambda s: s.key_by(key0).window(GlobalWindows.create()).trigger(CountTrigger.of(3))
                          .evictor(CountEvictor.of(2, do_evict_after=True)).apply(Values()))
    for h in (before, after):
        h.feed_plain(*[("a", i) for i in range(1, 7)])
    assert before.out() == [[2, 3], [5, 6]]  # the pane keeps [2, 3], then gets 4, 5, 6
    assert after.out() == [[1, 2, 3], [2, 3, 4, 5, 6]]


def test_time_evictor_with_an_incremental_reduce_over_what_is_left() -> None:
    h = WindowHarness(lambda s: s.key_by(key0).window(TumblingEventTimeWindows.of(Time.milliseconds(20)))
                      .evictor(TimeEvictor.of(Time.milliseconds(5))).reduce(add))
    stamps = [1, 3, 8, 10, 12]
    h.feed(*[(("a", t), t) for t in stamps]).watermark(19)
    latest = max(stamps)
    assert h.out() == [("a", sum(t for t in stamps if t > latest - 5))]  # 8 + 10 + 12
    assert h.stamped_out() == [(("a", 30), 19)]


# -- lateness ----------------------------------------------------------------------------------


LATE = OutputTag("late", Types.TUPLE([Types.STRING(), Types.INT()]))


def test_allowed_lateness_refires_with_updated_results_and_late_data_goes_to_the_side_output() -> None:
    h = WindowHarness(lambda s: s.key_by(key0).window(TumblingEventTimeWindows.of(Time.milliseconds(10)))
                      .allowed_lateness(5).side_output_late_data(LATE).reduce(add), side_tags=(LATE,))
    h.feed((("a", 1), 1), (("a", 4), 4)).watermark(9)
    assert h.take() == [("a", 5)]
    h.feed((("a", 10), 2))  # late, but within the lateness: the window fires again at once
    assert h.take() == [("a", 15)]
    h.watermark(14)  # cleanup time of [0, 10): 9 + 5
    assert h.take() == []
    h.feed((("a", 100), 3), (("a", 7), 15))  # [0, 10) is gone: 3 is late data; 15 opens [10, 20)
    assert h.side(LATE) == [("a", 100)]
    h.watermark(LONG_MAX)
    assert h.take() == [("a", 7)]
    assert h.operator.backend.is_empty()


def test_late_elements_without_a_side_output_are_dropped() -> None:
    h = WindowHarness(lambda s: s.key_by(key0).window(TumblingEventTimeWindows.of(Time.milliseconds(10))).reduce(add))
    h.feed((("a", 1), 1)).watermark(20).feed((("a", 2), 5)).watermark(LONG_MAX)
    assert h.out() == [("a", 1)]


# -- window functions and state ----------------------------------------------------------------


class KeyedStart(WindowFunction):
    def apply(self, key: Any, window: Any, inputs: Iterable[Any]) -> Iterable[Any]:
        (value,) = inputs
        yield key, window.start, value[1]


class Average(AggregateFunction):
    def create_accumulator(self) -> tuple:
        return (0, 0)

    def add(self, value: tuple, acc: tuple) -> tuple:
        return (acc[0] + value[1], acc[1] + 1)

    def get_result(self, acc: tuple) -> float:
        return acc[0] / acc[1]

    def merge(self, a: tuple, b: tuple) -> tuple:
        return (a[0] + b[0], a[1] + b[1])


class WithTime(ProcessWindowFunction):
    def process(self, key: Any, context: ProcessWindowFunction.Context, elements: Iterable[Any]) -> Iterable[Any]:
        (avg,) = elements
        yield key, context.window().end, avg, context.current_watermark()


def test_reduce_and_aggregate_with_window_functions() -> None:
    tumbling = TumblingEventTimeWindows.of(Time.milliseconds(10))
    reduced = WindowHarness(lambda s: s.key_by(key0).window(tumbling).reduce(add, KeyedStart()))
    averaged = WindowHarness(lambda s: s.key_by(key0).window(tumbling).aggregate(Average(), WithTime()))
    for h in (reduced, averaged):
        h.feed((("a", 1), 1), (("a", 4), 4), (("b", 6), 12)).watermark(9).watermark(LONG_MAX)
    assert reduced.out() == [("a", 0, 5), ("b", 10, 6)]
    assert averaged.out() == [("a", 10, 2.5, 9), ("b", 20, 6.0, LONG_MAX)]


class Fires(ProcessWindowFunction):
    """Counts firings per window (window state) and per key (global state); emits side outputs."""

    per_window = ValueStateDescriptor("window-fires", Types.INT())
    per_key = ValueStateDescriptor("key-fires", Types.INT())
    cleared: list[Any] = []

    def process(self, key: Any, context: ProcessWindowFunction.Context, elements: Iterable[Any]) -> Iterable[Any]:
        w: Any = context.window_state().get_state(self.per_window)
        g: Any = context.global_state().get_state(self.per_key)
        w.update((w.value() or 0) + 1)
        g.update((g.value() or 0) + 1)
        context.output(SIDE, (key, "ctx"))
        yield SIDE, (key, "yield")
        yield key, context.window().start, w.value(), g.value(), len(list(elements))

    def clear(self, context: ProcessWindowFunction.Context) -> None:
        state: Any = context.window_state().get_state(self.per_window)
        Fires.cleared.append((context.window().start, state.value()))
        state.clear()


SIDE = OutputTag("side", Types.TUPLE([Types.STRING(), Types.STRING()]))


def test_process_with_window_state_global_state_side_outputs_and_clear() -> None:
    Fires.cleared = []
    h = WindowHarness(lambda s: s.key_by(key0).window(TumblingEventTimeWindows.of(Time.milliseconds(10)))
                      .allowed_lateness(10).process(Fires()), side_tags=(SIDE,))
    h.feed((("a", 1), 1), (("a", 2), 12)).watermark(9)
    h.feed((("a", 3), 5))  # a late firing of [0, 10)
    h.watermark(19)
    assert h.take() == [("a", 0, 1, 1, 1), ("a", 0, 2, 2, 2), ("a", 10, 1, 3, 1)]
    assert h.side(SIDE) == [("a", "ctx"), ("a", "yield")] * 3
    h.watermark(19 + 10)
    assert Fires.cleared == [(0, 2), (10, 1)]  # clear() once per window, at its cleanup time
    backend = h.operator.backend
    assert backend.entries("window-fires") == {}
    assert backend.entries("key-fires") == {"a": 3}


class Everything(AllWindowFunction):
    def apply(self, window: Any, inputs: Iterable[Any]) -> Iterable[Any]:
        yield window.start, sorted(inputs)


class AllCount(ProcessAllWindowFunction):
    def process(self, context: ProcessAllWindowFunction.Context, elements: Iterable[Any]) -> Iterable[Any]:
        yield context.window().start, len(list(elements))


def test_window_all_runs_with_parallelism_one_over_every_record() -> None:
    tumbling = TumblingEventTimeWindows.of(Time.milliseconds(10))
    h = WindowHarness(lambda s: s.window_all(tumbling).apply(Everything()))
    h.feed((("a", 1), 1), (("b", 2), 2), (("c", 3), 13)).watermark(LONG_MAX)
    assert h.out() == [(0, [("a", 1), ("b", 2)]), (10, [("c", 3)])]
    counted = WindowHarness(lambda s: s.window_all(tumbling).process(AllCount()))
    counted.feed((("a", 1), 1), (("b", 2), 2)).watermark(LONG_MAX)
    assert counted.out() == [(0, 2)]

    from millstream.datastream import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    windowed = env.from_collection([1, 2]).window_all(tumbling).reduce(lambda a, b: a + b)
    windowed.print()
    assert [v.parallelism for v in env.get_job_graph().proto.vertices if "AllWindow" in v.name] == [1]
    with pytest.raises(ValueError, match="must be 1"):
        windowed.set_parallelism(2)


# -- errors, batch mode, checkpoints ------------------------------------------------------------


def test_event_time_window_on_records_without_timestamps_names_the_fix() -> None:
    h = WindowHarness(lambda s: s.key_by(key0).window(TumblingEventTimeWindows.of(Time.seconds(1))).reduce(add))
    with pytest.raises(OperatorError, match="assign_timestamps_and_watermarks"):
        h.feed_plain(("a", 1))


class NoMerge(AggregateFunction):
    def create_accumulator(self) -> int:
        return 0

    def add(self, value: Any, acc: int) -> int:
        return acc + 1

    def get_result(self, acc: int) -> int:
        return acc


def test_session_aggregate_needs_merge_and_sessions_need_a_merging_trigger() -> None:
    h = WindowHarness(lambda s: s.key_by(key0).window(EventTimeSessionWindows.with_gap(Time.milliseconds(5)))
                      .aggregate(NoMerge()))
    h.feed((("a", 1), 1), (("a", 10), 10))
    with pytest.raises(OperatorError, match="merge"):
        h.feed((("a", 5), 5))  # [5, 10) joins [1, 6) and [10, 15): their accumulators merge
    from millstream.datastream import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    windowed = env.from_collection([("a", 1)]).key_by(key0).window(EventTimeSessionWindows.with_gap(Time.seconds(1)))
    with pytest.raises(TypeError, match="merging"):
        windowed.trigger(FireOnMarker())


def test_processing_time_windows_fire_at_the_end_of_input_in_batch_mode_only() -> None:
    def build(s: Any) -> Any:
        return s.key_by(key0).window(TumblingProcessingTimeWindows.of(Time.seconds(10))).reduce(add)

    streaming = WindowHarness(build, clock_ms=5)
    batch = WindowHarness(build, clock_ms=5, runtime_mode=BATCH)
    for h in (streaming, batch):
        h.feed_plain(("a", 1), ("a", 2)).end()
    assert streaming.out() == []  # Flink drops pending processing-time timers at the end in STREAMING
    assert batch.out() == [("a", 3)]
    assert RuntimeExecutionMode.BATCH is not None


def test_a_checkpoint_mid_window_restores_panes_merging_sets_and_timers() -> None:
    def build(s: Any) -> Any:
        return s.key_by(key0).window(EventTimeSessionWindows.with_gap(Time.milliseconds(5))).aggregate(
            CountMinMax(), SessionInfo())

    first_half = [(("a", 1), 1), (("b", 2), 2), (("a", 10), 10)]
    second_half = [(("a", 7), 7), (("b", 4), 4), (("c", 30), 30)]
    whole = WindowHarness(build)
    whole.feed(*first_half).watermark(3).feed(*second_half).watermark(LONG_MAX)

    before = WindowHarness(build)
    before.feed(*first_half).watermark(3)
    snapshot = before.snapshot()
    assert snapshot and all(snapshot.values())
    after = before.restored(snapshot)
    after.watermark(3).feed(*second_half).watermark(LONG_MAX)
    assert sorted(after.out()) == sorted(whole.out())
    intervals = {k: [(t, t + 5) for (key, _), t in first_half + second_half if key == k] for k in "abc"}
    expected = [(k, s, e, c) for k in "abc" for s, e, c in sessions(intervals[k])]
    assert expected == [("a", 1, 6, 1), ("a", 7, 15, 2), ("b", 2, 9, 2), ("c", 30, 35, 1)]
    assert sorted(whole.out()) == expected
