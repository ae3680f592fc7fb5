"""The window operator's batch path (runtime/operators/window_batch_path.py) against its generic path.

Tumbling and sliding time windows and event-time sessions with the assigner's default trigger and
no evictor take a batch path; the same job with a trigger that only subclasses the default one (the same rules, but not the
exact type) takes the generic per-record path. Both must give the same results in the same order,
with the same timestamps, late data and state, and each must restore the other's checkpoints.
"""
from __future__ import annotations

import random
from typing import Any, Callable, Iterable

import pytest

from millstream.common import Time, Types
from millstream.datastream import OutputTag
from millstream.datastream.functions import AggregateFunction, AllWindowFunction, ProcessWindowFunction, WindowFunction
from millstream.datastream.state import ValueStateDescriptor
from millstream.datastream.window import (
    EventTimeSessionWindows,
    EventTimeTrigger,
    ProcessingTimeTrigger,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)
from millstream.runtime.serialization import deserialize
from millstream.runtime.timestamps import LONG_MAX
from tests.unit.window_harness import WindowHarness

# Every test runs on each keyed state backend (heap, RocksDB, RocksDB with heap timers).
pytestmark = pytest.mark.usefixtures("state_backend")


class SameEventTimeTrigger(EventTimeTrigger):
    """EventTimeTrigger's rules, but not its exact type: the operator takes the generic path."""


class SameProcessingTimeTrigger(ProcessingTimeTrigger):
    """ProcessingTimeTrigger's rules through the generic path."""


LATE = OutputTag("late", Types.TUPLE([Types.STRING(), Types.INT()]))
SIDE = OutputTag("side", Types.STRING())


def key0(r: Any) -> Any:
    return r[0]


def add(a: tuple, b: tuple) -> tuple:
    return (a[0], a[1] + b[1])


class CountSum(AggregateFunction):
    def create_accumulator(self) -> list:
        return [0, 0]

    def add(self, value: tuple, acc: list) -> list:
        return [acc[0] + 1, acc[1] + value[1]]

    def get_result(self, acc: list) -> tuple:
        return tuple(acc)

    def merge(self, a: list, b: list) -> list:
        return [a[0] + b[0], a[1] + b[1]]


class Contents(WindowFunction):
    """Every element in arrival order (the pane's order is part of the result)."""

    def apply(self, key: Any, window: Any, inputs: Iterable[Any]) -> Iterable[Any]:
        yield key, window.start, window.end, [v for _, v in inputs]


class SortsInPlace(WindowFunction):
    """Sorts the list it is given: the pane (still growing within the lateness) must not change."""

    def apply(self, key: Any, window: Any, inputs: Any) -> Iterable[Any]:
        inputs.sort(reverse=True)
        yield key, window.start, list(inputs)


class WithStart(WindowFunction):
    def apply(self, key: Any, window: Any, inputs: Iterable[Any]) -> Iterable[Any]:
        for value in inputs:
            yield key, window.start, value


class Everything(AllWindowFunction):
    def apply(self, window: Any, inputs: Iterable[Any]) -> Iterable[Any]:
        yield window.start, list(inputs)


class Fires(ProcessWindowFunction):
    """Counts firings per window (window state, cleared with the window) and per key (global state),
    and emits a side output on each firing and on each clear()."""

    per_window = ValueStateDescriptor("fires", Types.INT())
    per_key = ValueStateDescriptor("key-fires", Types.INT())

    def process(self, key: Any, context: ProcessWindowFunction.Context, elements: Iterable[Any]) -> Iterable[Any]:
        w: Any = context.window_state().get_state(self.per_window)
        g: Any = context.global_state().get_state(self.per_key)
        w.update((w.value() or 0) + 1)
        g.update((g.value() or 0) + 1)
        context.output(SIDE, f"{key}@{context.window().start} watermark {context.current_watermark()}")
        yield key, context.window().start, w.value(), g.value(), list(elements)

    def clear(self, context: ProcessWindowFunction.Context) -> None:
        state: Any = context.window_state().get_state(self.per_window)
        state.clear()


def event_time_jobs() -> dict[str, Callable[[Any, Callable[[Any], Any]], Any]]:
    """name -> build(stream, with_trigger): with_trigger(windowed stream) sets the trigger (or not)."""
    def tumbling(size: int, offset: int = 0) -> Any:
        return TumblingEventTimeWindows.of(Time.milliseconds(size), Time.milliseconds(offset))

    def sliding(size: int, slide: int, offset: int = 0) -> Any:
        return SlidingEventTimeWindows.of(Time.milliseconds(size), Time.milliseconds(slide), Time.milliseconds(offset))

    def sessions(gap: int) -> Any:
        return EventTimeSessionWindows.with_gap(Time.milliseconds(gap))

    return {
        "tumbling reduce, offset": lambda s, t: t(s.key_by(key0).window(tumbling(10, 3))).reduce(add),
        "tumbling reduce + window function, lateness, late output": lambda s, t: t(
            s.key_by(key0).window(tumbling(10))).allowed_lateness(6).side_output_late_data(LATE).reduce(add, WithStart()),
        "tumbling apply sorting its input, lateness": lambda s, t: t(s.key_by(key0).window(tumbling(10)))
        .allowed_lateness(8).apply(SortsInPlace()),
        "tumbling aggregate, lateness": lambda s, t: t(s.key_by(key0).window(tumbling(8))).allowed_lateness(3)
        .aggregate(CountSum()),
        "tumbling process with window state, lateness, late output": lambda s, t: t(
            s.key_by(key0).window(tumbling(10))).allowed_lateness(7).side_output_late_data(LATE).process(Fires()),
        "sliding apply, offset, lateness, late output": lambda s, t: t(
            s.key_by(key0).window(sliding(10, 4, 1))).allowed_lateness(3).side_output_late_data(LATE).apply(Contents()),
        "sliding with gaps between windows, late output": lambda s, t: t(
            s.key_by(key0).window(sliding(3, 5))).side_output_late_data(LATE).reduce(add),
        "tumbling window_all apply": lambda s, t: t(s.window_all(tumbling(10))).apply(Everything()),
        "sessions reduce": lambda s, t: t(s.key_by(key0).window(sessions(4))).reduce(add),
        "sessions aggregate + window function": lambda s, t: t(s.key_by(key0).window(sessions(3)))
        .aggregate(CountSum(), WithStart()),
        "sessions reduce + window function, lateness, late output": lambda s, t: t(
            s.key_by(key0).window(sessions(3))).allowed_lateness(6).side_output_late_data(LATE).reduce(add, WithStart()),
        "sessions aggregate, lateness": lambda s, t: t(s.key_by(key0).window(sessions(2))).allowed_lateness(3)
        .aggregate(CountSum()),
        "sessions apply, late output": lambda s, t: t(s.key_by(key0).window(sessions(5)))
        .side_output_late_data(LATE).apply(Contents()),
    }


def event_time_script(seed: int, steps: int = 60) -> list[tuple[str, Any]]:
    """Batches of out-of-order records of a few keys, from negative timestamps on, and watermarks
    that sometimes overtake records still to come (late elements, some within the lateness)."""
    rng = random.Random(seed)
    script: list[tuple[str, Any]] = []
    high = -40
    for _ in range(steps):
        batch = []
        for _ in range(rng.randint(1, 12)):
            high += rng.randint(0, 2)
            behind = rng.randint(0, 9) if rng.random() < 0.85 else rng.randint(10, 30)
            batch.append(((rng.choice("abcd"), rng.randint(1, 9)), high - behind))
        script.append(("feed", batch))
        if rng.random() < 0.5:
            script.append(("watermark", high - rng.randint(0, 8)))
    script.append(("watermark", LONG_MAX))
    return script


def run(h: WindowHarness, script: list[tuple[str, Any]]) -> list[Any]:
    """Each step's output, in order."""
    steps = []
    for op, arg in script:
        if op == "feed":
            h.feed(*arg)
        elif op == "feed_plain":
            h.feed_plain(*arg)
        elif op == "watermark":
            h.watermark(arg)
        else:
            h.advance_to(arg)
        steps.append(h.take())
    return steps


def state_of(h: WindowHarness) -> dict[int, Any]:
    """The snapshot's content per key group, timers as sets (their order within a timestamp is not state)."""
    (blobs,) = h.snapshot().values()
    out = {}
    for kg, blob in blobs.items():
        payload = deserialize(blob)
        out[kg] = (payload["states"], set(payload["event_timers"]), set(payload["processing_timers"]))
    return out


def harnesses(build: Callable[[Any, Callable[[Any], Any]], Any], generic_trigger: Any,
              **kwargs: Any) -> tuple[WindowHarness, WindowHarness]:
    fast = WindowHarness(lambda s: build(s, lambda w: w), side_tags=(LATE, SIDE), **kwargs)
    generic = WindowHarness(lambda s: build(s, lambda w: w.trigger(generic_trigger)), side_tags=(LATE, SIDE), **kwargs)
    assert fast.operator.fast_path is not None and generic.operator.fast_path is None
    return fast, generic


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("job", list(event_time_jobs()))
def test_the_batch_path_gives_the_generic_paths_results_late_data_and_state(job: str, seed: int) -> None:
    fast, generic = harnesses(event_time_jobs()[job], SameEventTimeTrigger())
    script = event_time_script(seed)
    middle = len(script) // 2
    assert run(fast, script[:middle]) == run(generic, script[:middle])
    assert state_of(fast) == state_of(generic)
    assert run(fast, script[middle:]) == run(generic, script[middle:])
    assert fast.stamped_out() == generic.stamped_out()  # values and timestamps, in order
    assert fast.side(LATE) == generic.side(LATE)
    assert fast.side(SIDE) == generic.side(SIDE)
    for h in (fast, generic):  # every window cleaned up after the final watermark
        backend = h.operator.backend
        assert backend.entries("window-contents") == {} and backend.entries("fires") == {}
        assert len(backend.event_timers) == 0
    if "late output" in job:
        assert fast.side(LATE), "the script must make some elements late"


def tied_sessions_script(seed: int, steps: int = 80) -> list[tuple[str, Any]]:
    """Many keys on few timestamps, so that sessions of different keys end at the same time: the
    order in which they fire is the order their timers were registered, which the batch path's
    open sessions must keep. Some elements are late, some bridge two sessions of their key."""
    rng = random.Random(seed)
    script: list[tuple[str, Any]] = []
    high = 0
    for _ in range(steps):
        batch = []
        for _ in range(rng.randint(1, 15)):
            high += rng.choice((0, 0, 0, 1, 4))
            behind = rng.choice((0, 0, 1, 2, 3, 6, 12))
            batch.append(((f"k{rng.randint(0, 11)}", rng.randint(1, 9)), high - behind))
        script.append(("feed", batch))
        if rng.random() < 0.4:
            script.append(("watermark", high - rng.randint(0, 5)))
    script.append(("watermark", LONG_MAX))
    return script


@pytest.mark.parametrize("seed", [7, 8, 9])
@pytest.mark.parametrize("job", [j for j in event_time_jobs() if "sessions" in j])
def test_sessions_of_many_keys_ending_together_fire_in_the_generic_paths_order(job: str, seed: int) -> None:
    fast, generic = harnesses(event_time_jobs()[job], SameEventTimeTrigger())
    script = tied_sessions_script(seed)
    assert run(fast, script) == run(generic, script)
    outputs = fast.stamped_out()
    assert outputs == generic.stamped_out()
    stamps = [ts for _, ts in outputs]
    assert len(stamps) - len(set(stamps)) > 10, "the script must make sessions end together"
    assert fast.side(LATE) == generic.side(LATE)


@pytest.mark.parametrize("job", [j for j in event_time_jobs()
                                 if "tumbling" in j or "sliding" in j or "sessions" in j])
def test_a_snapshot_after_every_step_sees_every_open_pane_and_changes_no_result(job: str) -> None:
    """On the heap the batch path keeps open windows' panes and open sessions out of the state
    tables and the timer queue until something reads the state whole (a snapshot), and moves each
    back on its key's next element: the state and results stay the generic path's, step after step."""
    fast, generic = harnesses(event_time_jobs()[job], SameEventTimeTrigger())
    script = event_time_script(6) if "sessions" not in job else tied_sessions_script(6)
    for step in script:
        assert run(fast, [step]) == run(generic, [step])
        assert state_of(fast) == state_of(generic)
    assert fast.stamped_out() == generic.stamped_out()
    assert fast.side(LATE) == generic.side(LATE)


@pytest.mark.parametrize("seed", [4, 5])
@pytest.mark.parametrize("job", [j for j in event_time_jobs() if "lateness" in j or "sliding" in j or "sessions" in j])
def test_each_path_restores_the_others_checkpoint_mid_window(job: str, seed: int) -> None:
    fast, generic = harnesses(event_time_jobs()[job], SameEventTimeTrigger())
    script = event_time_script(seed)
    middle = len(script) // 2
    run(fast, script[:middle])
    run(generic, script[:middle])
    from_fast, from_generic = fast.snapshot(), generic.snapshot()
    # A restarted operator's watermark starts over: elements of windows in their allowed lateness,
    # whose timers fired before the checkpoint, set the trigger's timer again (as in Flink).
    results = {}
    for name, h, snapshot in [("fast<-fast", fast, from_fast), ("generic<-fast", generic, from_fast),
                              ("fast<-generic", fast, from_generic), ("generic<-generic", generic, from_generic)]:
        restored = h.restored(snapshot)
        assert (restored.operator.fast_path is None) == name.startswith("generic")
        results[name] = (run(restored, script[middle:]), restored.stamped_out(), restored.side(LATE),
                         restored.side(SIDE))
    assert results["fast<-fast"] == results["generic<-fast"]
    assert results["fast<-generic"] == results["generic<-generic"]
    assert sorted(map(repr, results["fast<-fast"][1])) == sorted(map(repr, results["fast<-generic"][1]))


def test_a_restored_pane_in_its_allowed_lateness_fires_again_when_the_restarted_watermark_passes_its_end() -> None:
    # By hand: [0, 10) fires at watermark 9 with 1 + 2, and again at once for 4 (late, within 10 ms
    # of lateness). The checkpoint holds the pane (7) and its cleanup timer at 19, not its timer at 9.
    # After the restart the watermark starts over: 8 joins the pane, EventTimeTrigger sets its timer
    # at 9 again, and watermark 9 fires the window once more (7 + 8); the cleanup timer ends it.
    def build(s: Any, t: Callable[[Any], Any]) -> Any:
        return t(s.key_by(key0).window(TumblingEventTimeWindows.of(Time.milliseconds(10)))).allowed_lateness(10).reduce(add)

    for h in harnesses(build, SameEventTimeTrigger()):
        h.feed((("a", 1), 1), (("a", 2), 2)).watermark(9).feed((("a", 4), 3))
        assert h.take() == [("a", 3), ("a", 7)]
        restored = h.restored(h.snapshot())
        restored.feed((("a", 8), 5))
        assert restored.take() == []
        restored.watermark(9)
        assert restored.take() == [("a", 15)]
        restored.watermark(19)
        assert restored.take() == [] and restored.operator.backend.is_empty()


def processing_time_jobs() -> dict[str, Callable[[Any, Callable[[Any], Any]], Any]]:
    return {
        "tumbling reduce": lambda s, t: t(s.key_by(key0).window(TumblingProcessingTimeWindows.of(
            Time.milliseconds(10)))).reduce(add),
        "sliding process": lambda s, t: t(s.key_by(key0).window(SlidingProcessingTimeWindows.of(
            Time.milliseconds(10), Time.milliseconds(3)))).process(Fires()),
    }


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("job", list(processing_time_jobs()))
def test_processing_time_windows_on_the_batch_path_match_the_generic_path(job: str, seed: int) -> None:
    rng = random.Random(seed)
    script: list[tuple[str, Any]] = []
    now = 100
    for _ in range(40):
        script.append(("feed_plain", [(rng.choice("abc"), rng.randint(1, 9)) for _ in range(rng.randint(1, 6))]))
        now += rng.randint(0, 4)
        script.append(("clock", now))
    script.append(("clock", now + 100))
    fast, generic = harnesses(processing_time_jobs()[job], SameProcessingTimeTrigger(), clock_ms=100)
    assert run(fast, script) == run(generic, script)
    assert fast.stamped_out() == generic.stamped_out() and fast.stamped_out()
    assert fast.side(SIDE) == generic.side(SIDE)


def test_jobs_the_batch_path_does_not_serve_stay_on_the_generic_path() -> None:
    from millstream.datastream.window import (CountEvictor, CountTrigger, DynamicEventTimeSessionWindows, GlobalWindows,
                                              ProcessingTimeSessionWindows)

    tumbling = TumblingEventTimeWindows.of(Time.milliseconds(10))
    for build in [
        lambda s: s.key_by(key0).window(tumbling).trigger(CountTrigger.of(2)).reduce(add),
        lambda s: s.key_by(key0).window(tumbling).evictor(CountEvictor.of(2)).reduce(add),
        lambda s: s.key_by(key0).window(EventTimeSessionWindows.with_gap(Time.milliseconds(5))).evictor(CountEvictor.of(2)).reduce(add),
        lambda s: s.key_by(key0).window(DynamicEventTimeSessionWindows.with_dynamic_gap(lambda r: 5)).reduce(add),
        lambda s: s.key_by(key0).window(ProcessingTimeSessionWindows.with_gap(Time.milliseconds(5))).reduce(add),
        lambda s: s.key_by(key0).window(GlobalWindows.create()).trigger(CountTrigger.of(2)).reduce(add),
        lambda s: s.key_by(key0).window(tumbling).trigger(ProcessingTimeTrigger.create()).reduce(add),
    ]:
        assert WindowHarness(build).operator.fast_path is None
    assert WindowHarness(lambda s: s.key_by(key0).window(tumbling).trigger(EventTimeTrigger.create())
                         .reduce(add)).operator.fast_path is not None
