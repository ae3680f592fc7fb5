"""Windows on the embedded cluster (two TaskManagers, real Spark), keyed by a key_by before the
window with parallelism 2: count windows (tumbling and sliding), a global window with a purging
count trigger and an evictor, window_all (one instance), and event-time windows: tumbling and
sliding with offsets over out-of-order input (negative timestamps too), lateness with late firings
and a late side output, merging sessions (static and dynamic gap), and an idle source behind a
rebalance. Expected outputs are computed here by a plain-Python oracle written from Flink's rules,
independently of the operator (see the "oracle" section)."""
from __future__ import annotations

import random
from typing import Any, Iterable

import pytest

from millstream.common import Duration, Time, Types, WatermarkStrategy
from millstream.common.watermark_strategy import TimestampAssigner
from millstream.datastream import (
    AggregateFunction,
    OutputTag,
    ProcessWindowFunction,
    SourceFunction,
    StreamExecutionEnvironment,
    WindowFunction,
)
from millstream.datastream.connectors.datagen import DataGeneratorSource
from millstream.datastream.functions import ProcessAllWindowFunction
from millstream.datastream.window import (
    CountEvictor,
    CountTrigger,
    DynamicEventTimeSessionWindows,
    EventTimeSessionWindows,
    GlobalWindows,
    PurgingTrigger,
    SessionWindowTimeGapExtractor,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
)

from .harness import ClusterSpec

pytestmark = pytest.mark.timeout(180)
CLUSTER = ClusterSpec(taskmanagers=2, jobmanager_env=True)

KEYS = ["k0", "k1", "k2", "k3", "k4"]
RECORDS = [(KEYS[i % len(KEYS)], i) for i in range(103)]  # one source: each key's records stay in order


def _env(parallelism: int) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    return env


def _per_key() -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for k, v in RECORDS:
        out.setdefault(k, []).append(v)
    return out


class KeyedValues(WindowFunction):
    def apply(self, key: Any, window: Any, inputs: Iterable[Any]) -> Iterable[Any]:
        yield key, window.id, [v for _, v in inputs]


def test_tumbling_and_sliding_count_windows_after_key_by(cluster) -> None:
    env = _env(2)
    source = env.from_collection(RECORDS, Types.TUPLE([Types.STRING(), Types.INT()]))
    sums = source.key_by(lambda r: r[0]).count_window(4).reduce(lambda a, b: (a[0], a[1] + b[1]))
    with sums.execute_and_collect("count windows") as results:
        got = list(results)
    expected = [(k, sum(vs[i:i + 4])) for k, vs in _per_key().items() for i in range(0, len(vs) - 3, 4)]
    assert sorted(got) == sorted(expected)

    env = _env(2)
    source = env.from_collection(RECORDS, Types.TUPLE([Types.STRING(), Types.INT()]))
    sliding = source.key_by(lambda r: r[0]).count_window(5, 2).apply(KeyedValues())
    with sliding.execute_and_collect("sliding count windows") as results:
        got = list(results)
    # PyFlink's sliding count window k: a key's elements k*slide .. k*slide + size - 1, fired when full.
    expected = [(k, w, vs[w * 2:w * 2 + 5]) for k, vs in _per_key().items() for w in range(len(vs)) if w * 2 + 5 <= len(vs)]
    assert sorted(got) == sorted(expected)


def test_global_window_with_purging_count_trigger_and_count_evictor(cluster) -> None:
    env = _env(2)
    source = env.from_collection(RECORDS, Types.TUPLE([Types.STRING(), Types.INT()]))
    windowed = (source.key_by(lambda r: r[0]).window(GlobalWindows.create())
                .trigger(PurgingTrigger.of(CountTrigger.of(6))).evictor(CountEvictor.of(2))
                .reduce(lambda a, b: (a[0], a[1] + b[1])))
    with windowed.execute_and_collect("evicting global windows") as results:
        got = list(results)
    # Each batch of 6 fires; the evictor keeps its last 2, which the reduce sums; the purge empties it.
    expected = [(k, vs[i + 4] + vs[i + 5]) for k, vs in _per_key().items() for i in range(0, len(vs) - 5, 6)]
    assert sorted(got) == sorted(expected)


class Batches(ProcessAllWindowFunction):
    def process(self, context: Any, elements: Iterable[Any]) -> Iterable[Any]:
        yield sorted(v for _, v in elements)


def test_window_all_sees_every_record_in_one_instance(cluster) -> None:
    env = _env(2)
    source = env.from_collection(RECORDS, Types.TUPLE([Types.STRING(), Types.INT()]))
    evens = source.filter(lambda r: r[1] % 2 == 0)  # runs with parallelism 2 before the window
    batches = evens.window_all(GlobalWindows.create()).trigger(PurgingTrigger.of(CountTrigger.of(10))).process(Batches())
    with batches.execute_and_collect("window_all") as results:
        got = list(results)
    total = [v for _, v in RECORDS if v % 2 == 0]
    # The filter's two subtasks interleave, so which records share a batch varies; that every batch
    # holds 10 distinct records of the stream, and all but the last incomplete 10 are emitted, does not.
    assert [len(b) for b in got] == [10] * (len(total) // 10)
    emitted = [v for b in got for v in b]
    assert len(set(emitted)) == len(emitted) and set(emitted) <= set(total)


# -- event time: the oracle (Flink's rules, written independently of the operator) -------------

LONG_MIN, LONG_MAX = -2**63, 2**63 - 1


def java_rem(a: int, b: int) -> int:
    """Java's ``a % b``: the sign of the dividend."""
    r = abs(a) % abs(b)
    return r if a >= 0 else -r


def window_start(ts: int, offset: int, size: int) -> int:
    """Flink's TimeWindow.getWindowStartWithOffset: epoch-aligned, a negative remainder wrapped."""
    remainder = java_rem(ts - offset, size)
    return ts - (remainder + size) if remainder < 0 else ts - remainder


def tumbling(ts: int, size: int, offset: int = 0) -> list[tuple[int, int]]:
    start = window_start(ts, offset, size)
    return [(start, start + size)]


def sliding(ts: int, size: int, slide: int, offset: int = 0) -> list[tuple[int, int]]:
    windows, start = [], window_start(ts, offset, slide)
    while start > ts - size:
        windows.append((start, start + size))
        start -= slide
    return windows


def sessions(elements: list[tuple[int, int, Any]]) -> list[tuple[int, int, list[Any]]]:
    """``(start, end, value)`` session windows of one key merged as Flink merges them: sorted by
    start, a window joins the current session when ``start <= session end`` (touching ones merge)."""
    merged: list[tuple[int, int, list[Any]]] = []
    for start, end, value in sorted(elements, key=lambda e: e[0]):
        if merged and start <= merged[-1][1]:
            s, e, values = merged[-1]
            merged[-1] = (s, max(e, end), values + [value])
        else:
            merged.append((start, end, [value]))
    return merged


def disordered(n: int, keys: int, first_ts: int, step: int, bound: int, seed: int) -> list[tuple[str, int, int]]:
    """``(key, timestamp, value)`` events, timestamps rising by ``step`` but each up to ``bound`` ms
    early, so none is behind ``max seen - bound``: never late for a watermark ``max - bound - 1``."""
    rng = random.Random(seed)
    return [(f"k{rng.randrange(keys)}", first_ts + i * step - rng.randint(0, bound), i) for i in range(n)]


def within_bound(events: list[tuple[str, int, int]], bound: int) -> bool:
    highest = LONG_MIN
    for _, ts, _ in events:
        if ts < highest - bound:
            return False
        highest = max(highest, ts)
    return True


class EventTs(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[1]


def bounded(bound_ms: int) -> WatermarkStrategy:
    return WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(bound_ms)).with_timestamp_assigner(EventTs())


def _event_env(parallelism: int = 2) -> StreamExecutionEnvironment:
    env = _env(parallelism)
    env.get_config().set_auto_watermark_interval(20)
    return env


class Tagged(ProcessWindowFunction):
    """Each result with its tag, key and window: ``(tag, key, start, end, result)``."""

    def __init__(self, tag: str) -> None:
        self.tag = tag

    def process(self, key, context, elements):
        w = context.window()
        for e in elements:
            yield self.tag, key, w.start, w.end, e


class AllValues(ProcessWindowFunction):
    def __init__(self, tag: str) -> None:
        self.tag = tag

    def process(self, key, context, elements):
        w = context.window()
        yield self.tag, key, w.start, w.end, tuple(sorted(v for _, _, v in elements))


class CountSumMax(AggregateFunction):
    def create_accumulator(self):
        return 0, 0, LONG_MIN

    def add(self, value, acc):
        return acc[0] + 1, acc[1] + value[2], max(acc[2], value[2])

    def get_result(self, acc):
        return acc

    def merge(self, a, b):
        return a[0] + b[0], a[1] + b[1], max(a[2], b[2])


def _sum3(a, b):
    return a[0], max(a[1], b[1]), a[2] + b[2]


# -- 1. tumbling and sliding event-time windows -------------------------------------------------

def test_tumbling_and_sliding_event_time_windows_over_out_of_order_input_fire_every_window_exactly(cluster) -> None:
    bound = 120
    events = disordered(1500, 5, -2_000, 3, bound, seed=1)  # from negative timestamps up to ~2.5 s
    assert within_bound(events, bound)
    env = _event_env()
    keyed = (env.from_collection(events).assign_timestamps_and_watermarks(bounded(bound))
             .key_by(lambda e: e[0]))
    reduced = keyed.window(TumblingEventTimeWindows.of(Time.milliseconds(250), Time.milliseconds(-70))).reduce(
        _sum3, Tagged("tumbling reduce"))
    aggregated = keyed.window(SlidingEventTimeWindows.of(Time.milliseconds(300), Time.milliseconds(100),
                                                         Time.milliseconds(40))).aggregate(CountSumMax(), Tagged("sliding aggregate"))
    processed = keyed.window(TumblingEventTimeWindows.of(Time.milliseconds(400), Time.milliseconds(130))).process(
        AllValues("tumbling process"))
    with reduced.union(aggregated, processed).execute_and_collect("event-time windows") as results:
        got = list(results)

    def by_window(assign) -> dict[tuple[str, int, int], list[tuple[str, int, int]]]:
        panes: dict[tuple[str, int, int], list[tuple[str, int, int]]] = {}
        for e in events:
            for start, end in assign(e[1]):
                panes.setdefault((e[0], start, end), []).append(e)
        return panes

    expected = []
    for (k, start, end), pane in by_window(lambda ts: tumbling(ts, 250, -70)).items():
        expected.append(("tumbling reduce", k, start, end, sum(v for _, _, v in pane)))
    for (k, start, end), pane in by_window(lambda ts: sliding(ts, 300, 100, 40)).items():
        values = [v for _, _, v in pane]
        expected.append(("sliding aggregate", k, start, end, (len(values), sum(values), max(values))))
    for (k, start, end), pane in by_window(lambda ts: tumbling(ts, 400, 130)).items():
        expected.append(("tumbling process", k, start, end, tuple(sorted(v for _, _, v in pane))))
    # the reduce keeps (key, max ts, sum): compare the sum only
    normalized = [(t, k, s, e, r[2] if t == "tumbling reduce" else r) for t, k, s, e, r in got]
    assert min(s for _, _, s, _, _ in expected) < 0  # negative timestamps are part of it
    assert sorted(normalized) == sorted(expected)


# -- 2. disorder beyond the bound: allowed lateness, late firings, late side output --------------

class Phases(SourceFunction):
    """Emits each phase's events with their timestamps, then the watermark ``max seen - bound - 1``
    (bounded out-of-orderness, applied at the phase's end), so which events arrive behind which
    watermark is fixed, not left to periodic emission."""

    def __init__(self, phases: list[list[tuple[str, int, int]]], bound: int) -> None:
        self.phases, self.bound = phases, bound

    def run(self, ctx) -> None:
        highest = LONG_MIN + self.bound + 1
        for phase in self.phases:
            for e in phase:
                ctx.collect_with_timestamp(e, e[1])
                highest = max(highest, e[1])
            ctx.emit_watermark(highest - self.bound - 1)

    def cancel(self) -> None:
        pass


def lateness_oracle(phases: list[list[tuple[str, int, int]]], bound: int, size: int, lateness: int):
    """Flink's WindowOperator with EventTimeTrigger on tumbling windows, fed one phase, then one
    watermark: ``(fired, late)``, each firing ``(key, start, end, sum, count)`` with the pane's
    contents at the time, ``late`` the events dropped to the side output."""
    wm, highest = LONG_MIN, LONG_MIN
    panes: dict[tuple[str, int], list[int]] = {}
    fired: list[tuple[str, int, int, int, int]] = []
    late: list[tuple[str, int, int]] = []

    def advance(new: int) -> None:
        nonlocal wm
        if new <= wm:
            return
        for (k, start), (total, n) in sorted(panes.items()):
            if wm < start + size - 1 <= new:  # the window's timer at end - 1
                fired.append((k, start, start + size, total, n))
        for (k, start) in [w for w in panes if w[1] + size - 1 + lateness <= new]:  # cleanup
            del panes[(k, start)]
        wm = new

    for phase in phases:
        for k, ts, v in phase:
            start = window_start(ts, 0, size)
            if start + size - 1 + lateness <= wm:  # the window is gone: the element is late
                late.append((k, ts, v))
                continue
            pane = panes.setdefault((k, start), [0, 0])
            pane[0] += v
            pane[1] += 1
            if start + size - 1 <= wm:  # the window already fired: a late firing with the whole pane
                fired.append((k, start, start + size, pane[0], pane[1]))
        highest = max([highest] + [ts for _, ts, _ in phase])
        advance(highest - bound - 1)
    advance(LONG_MAX)
    return fired, late


class SumCount(ProcessWindowFunction):
    def process(self, key, context, elements):
        w = context.window()
        for _, _, total, n in elements:
            yield "fired", (key, w.start, w.end, total, n)


def test_allowed_lateness_fires_late_updates_and_sends_what_is_too_late_to_the_side_output(cluster) -> None:
    bound, size, lateness = 50, 100, 150
    # First the edges, by hand (watermark after each phase: max - 51): a window exactly at its
    # cleanup time drops its element; one a millisecond before takes it and fires late; the
    # watermark reaching a window's end - 1 exactly fires it, and an element then fires it again.
    phases = [
        [("k0", 1000, 1)],                                   # wm 949
        [("k1", 850, 2), ("k2", 700, 3), ("k2", 800, 4),     # [700, 800) is gone at 949: 3 is late
         ("k0", 950, 5), ("k1", 899, 6)],                    # [800, 900) fires late, twice for k1
        [("k0", 1050, 7)],                                   # wm 999: [900, 1000) fires on time
        [("k0", 999, 8), ("k3", 849, 9)],                    # late firings (k3's first fires at once)
        [("k0", 1200, 10)],                                  # wm 1149: [900, 1000) cleaned up
        [("k0", 900, 11), ("k0", 1000, 12)],                 # 11 is late; [1000, 1100) fires again
    ]
    rng = random.Random(2)
    now, i = 1300, 100
    for _ in range(40):
        phase = []
        for _ in range(rng.randint(3, 9)):
            # mostly recent, some far behind the bound: late firings and dropped ones
            ts = now + rng.randint(-40, 30) if rng.random() < 0.7 else now - rng.randint(60, 420)
            phase.append((f"k{rng.randrange(3)}", ts, i))
            i += 1
        phases.append(phase)
        now += rng.randint(20, 80)
    fired, late = lateness_oracle(phases, bound, size, lateness)
    on_time = {(k, s) for k, s, _, _, _ in fired}
    assert len(fired) > len(on_time) + 10, "the input should cause late firings"
    assert len(late) > 10, "the input should have events too late even for the allowed lateness"

    env = _env(2)
    late_tag = OutputTag("late", Types.PICKLED_BYTE_ARRAY())
    source = env.add_source(Phases(phases, bound), "phases").set_parallelism(1)
    windowed = (source.map(lambda e: (e[0], e[1], e[2], 1)).set_parallelism(1)
                .key_by(lambda e: e[0])
                .window(TumblingEventTimeWindows.of(Time.milliseconds(size)))
                .allowed_lateness(lateness)
                .side_output_late_data(late_tag)
                .reduce(lambda a, b: (a[0], max(a[1], b[1]), a[2] + b[2], a[3] + b[3]), SumCount()))
    too_late = windowed.get_side_output(late_tag).map(lambda e: ("late", (e[0], e[1], e[2])))
    with windowed.union(too_late).execute_and_collect("allowed lateness") as results:
        got = list(results)
    assert sorted(r for tag, r in got if tag == "late") == sorted(late)
    assert sorted(r for tag, r in got if tag == "fired") == sorted(fired)


# -- 3. session windows ----------------------------------------------------------------------

def session_events(n: int, bound: int, seed: int) -> list[tuple[str, int, int]]:
    """Events of 3 keys, mostly close together with now and then a pause longer than any gap,
    each up to ``bound`` early: arriving late, an event often bridges two sessions seen before."""
    rng = random.Random(seed)
    events, now = [], 0
    for i in range(n):
        now += rng.choice([4, 8, 15, 30, 400])
        events.append((f"k{rng.randrange(3)}", now - rng.randint(0, bound), i))
    return events


def dynamic_gap(e: tuple[str, int, int]) -> int:
    return 40 + (e[2] % 5) * 30


def bridges(events: list[tuple[str, int, int]], gap_of) -> int:
    """How many events, taken in arrival order, merged two or more sessions of their key."""
    seen: dict[str, list[tuple[int, int, int]]] = {}
    count = 0
    for e in events:
        before = sessions(seen.setdefault(e[0], []))
        seen[e[0]].append((e[1], e[1] + gap_of(e), e[2]))
        after = sessions(seen[e[0]])
        count += len(after) < len(before)
    return count


class GapOf(SessionWindowTimeGapExtractor):
    def extract(self, element):
        return dynamic_gap(element)


def test_session_windows_with_static_and_dynamic_gaps_merge_across_batches(cluster) -> None:
    bound, gap = 200, 100
    events = session_events(700, bound, seed=3)
    assert within_bound(events, bound)
    assert bridges(events, lambda e: gap) > 10 and bridges(events, dynamic_gap) > 10
    env = _event_env()
    source = env.from_source(DataGeneratorSource(lambda i: events[i], len(events), records_per_second=1500),
                             bounded(bound), "sessions").set_parallelism(1)  # small batches: merges span many
    keyed = source.key_by(lambda e: e[0])
    static = keyed.window(EventTimeSessionWindows.with_gap(Time.milliseconds(gap))).reduce(_sum3, Tagged("static reduce"))
    aggregated = keyed.window(EventTimeSessionWindows.with_dynamic_gap(GapOf())).aggregate(CountSumMax(), Tagged("dynamic aggregate"))
    processed = keyed.window(DynamicEventTimeSessionWindows.with_dynamic_gap(dynamic_gap)).process(AllValues("dynamic process"))
    with static.union(aggregated, processed).execute_and_collect("session windows") as results:
        got = list(results)

    expected = []
    for k in sorted({e[0] for e in events}):
        mine = [e for e in events if e[0] == k]
        for start, end, values in sessions([(ts, ts + gap, v) for _, ts, v in mine]):
            expected.append(("static reduce", k, start, end, sum(values)))
        for start, end, values in sessions([(e[1], e[1] + dynamic_gap(e), e[2]) for e in mine]):
            expected.append(("dynamic aggregate", k, start, end, (len(values), sum(values), max(values))))
            expected.append(("dynamic process", k, start, end, tuple(sorted(values))))
    normalized = [(t, k, s, e, r[2] if t == "static reduce" else r) for t, k, s, e, r in got]
    assert sorted(normalized) == sorted(expected)


# -- 4. parallelism 2, a rebalance before the key_by, an idle source -----------------------------

class WithWatermark(ProcessWindowFunction):
    def process(self, key, context, elements):
        w = context.window()
        values = [v for _, _, v in elements]
        yield key, w.start, w.end, sum(values), len(values), context.current_watermark()


def test_windows_fire_while_the_input_runs_when_one_source_is_idle_behind_a_rebalance(cluster) -> None:
    """Two sources unioned, a rebalance to parallelism 2, key_by, windows. The second source emits
    one event at timestamp 0 at once, then nothing for ~4 s, longer than the first one runs: its
    watermark would hold every window back to the end, but it goes idle after 200 ms, so windows
    fire on the first source's watermarks while the input still flows. Its second event (timestamp
    far in the past) comes when the watermark is long past it: late, to the side output."""
    bound, size, count = 100, 200, 1200
    fast = disordered(count, 3, 0, 2, bound, seed=4)  # ~2.4 s of event time at 800 events/s: ~1.5 s
    slow = [("k0", 0, -1), ("k1", -10**9, -2)]
    assert within_bound(fast, bound)
    env = _event_env()
    strategy = bounded(bound).with_idleness(Duration.of_millis(200))
    first = env.from_source(DataGeneratorSource(lambda i: fast[i], count, records_per_second=800), strategy,
                            "fast").set_parallelism(1)
    second = env.from_source(DataGeneratorSource(lambda i: slow[i], len(slow), records_per_second=0.25), strategy,
                             "slow").set_parallelism(1)
    late_tag = OutputTag("late", Types.PICKLED_BYTE_ARRAY())
    windowed = (first.union(second).rebalance().map(lambda e: e)  # parallelism 2
                .key_by(lambda e: e[0])
                .window(TumblingEventTimeWindows.of(Time.milliseconds(size)))
                .side_output_late_data(late_tag)
                .process(WithWatermark()))
    too_late = windowed.get_side_output(late_tag).map(lambda e: ("late",) + tuple(e))
    with windowed.union(too_late).execute_and_collect("an idle source") as results:
        got = list(results)
    late = [r[1:] for r in got if r[0] == "late"]
    fired = [r for r in got if r[0] != "late"]
    assert late == [slow[1]]
    panes: dict[tuple[str, int, int], list[int]] = {}
    for k, ts, v in fast + slow[:1]:
        for start, end in tumbling(ts, size):
            panes.setdefault((k, start, end), []).append(v)
    assert sorted(r[:5] for r in fired) == sorted((k, s, e, sum(vs), len(vs)) for (k, s, e), vs in panes.items())
    assert all(wm >= end - 1 for _, _, end, _, _, wm in fired)  # no window fires before its end
    early = [r for r in fired if r[5] < LONG_MAX]
    assert len(early) > len(fired) * 3 // 4, f"only {len(early)} of {len(fired)} windows fired before the end of input"


def session_lateness_oracle(phases: list[list[tuple[str, int, int]]], bound: int, gap: int, lateness: int):
    """Flink's WindowOperator with a merging assigner (event-time sessions) and EventTimeTrigger, fed
    as :func:`lateness_oracle`: an element's window ``[ts, ts + gap)`` first merges with the key's
    in-flight sessions it intersects (touching counts); only then is the result checked for being
    late (``end - 1 + lateness <= watermark``: dropped, to the side output); a session whose end - 1
    the watermark already passed fires at once with its whole contents; the watermark crossing a
    session's end - 1 fires it; at ``end - 1 + lateness`` it is gone."""
    wm, highest = LONG_MIN, LONG_MIN
    live: dict[str, list[tuple[int, int, list[int]]]] = {}
    fired: list[tuple[str, int, int, int, int]] = []
    late: list[tuple[str, int, int]] = []

    def advance(new: int) -> None:
        nonlocal wm
        if new <= wm:
            return
        for k in sorted(live):
            for start, end, values in live[k]:
                if wm < end - 1 <= new:
                    fired.append((k, start, end, sum(values), len(values)))
            live[k] = [s for s in live[k] if s[1] - 1 + lateness > new]
        wm = new

    for phase in phases:
        for k, ts, v in phase:
            start, end, values = ts, ts + gap, [v]
            rest = []
            for s in live.get(k, []):
                if s[0] <= end and start <= s[1]:
                    start, end, values = min(start, s[0]), max(end, s[1]), s[2] + values
                else:
                    rest.append(s)
            if end - 1 + lateness <= wm:  # only possible when it merged with nothing
                late.append((k, ts, v))
                continue
            live[k] = rest + [(start, end, values)]
            if end - 1 <= wm:
                fired.append((k, start, end, sum(values), len(values)))
        highest = max([highest] + [ts for _, ts, _ in phase])
        advance(highest - bound - 1)
    advance(LONG_MAX)
    return fired, late


def test_sessions_with_allowed_lateness_merge_late_elements_fire_late_and_drop_what_is_too_late(cluster) -> None:
    bound, gap, lateness = 50, 100, 120
    phases = [
        [("k0", 1000, 1)],                  # wm 949; k0 [1000, 1100)
        [("k0", 1150, 2)],                  # wm 1099: [1000, 1100) fires; k0 [1150, 1250)
        [("k0", 1100, 3)],                  # [1100, 1200) bridges both: [1000, 1250) (end - 1 > wm: no firing yet)
        [("k1", 1300, 4)],                  # wm 1249: [1000, 1250) fires with 1, 2, 3
        [("k0", 960, 5)],                   # alone late (1059 + 120 <= 1249) but it touches [1000, 1250): merged, fires late
        [("k0", 700, 6), ("k1", 1190, 7)],  # 6 is late; [1190, 1290) misses [1300, 1400) by 10 ms
        [("k2", 1500, 8)],                  # wm 1449: everything of k0 is gone
        [("k0", 1250, 9)],                  # [1250, 1350): 1349 + 120 > 1449, in time, fires late alone
    ]
    rng = random.Random(5)
    now, i = 1600, 100
    for _ in range(40):
        phase = []
        for _ in range(rng.randint(2, 6)):
            ts = now + rng.randint(-40, 30) if rng.random() < 0.6 else now - rng.randint(150, 700)
            phase.append((f"k{rng.randrange(3)}", ts, i))
            i += 1
        phases.append(phase)
        now += rng.randint(20, 120)
    fired, late = session_lateness_oracle(phases, bound, gap, lateness)
    assert ("k0", 960, 1250, 11, 4) in fired and ("k0", 700, 6) in late  # the edges above, as the rules say
    assert len(late) > 10 and len(fired) > len({(k, s) for k, s, _, _, _ in fired}) + 5

    env = _env(2)
    late_tag = OutputTag("late sessions", Types.PICKLED_BYTE_ARRAY())
    source = env.add_source(Phases(phases, bound), "phases").set_parallelism(1)
    windowed = (source.map(lambda e: (e[0], e[1], e[2], 1)).set_parallelism(1)
                .key_by(lambda e: e[0])
                .window(EventTimeSessionWindows.with_gap(Time.milliseconds(gap)))
                .allowed_lateness(lateness)
                .side_output_late_data(late_tag)
                .reduce(lambda a, b: (a[0], max(a[1], b[1]), a[2] + b[2], a[3] + b[3]), SumCount()))
    too_late = windowed.get_side_output(late_tag).map(lambda e: ("late", (e[0], e[1], e[2])))
    with windowed.union(too_late).execute_and_collect("sessions with allowed lateness") as results:
        got = list(results)
    assert sorted(r for tag, r in got if tag == "late") == sorted(late)
    assert sorted(r for tag, r in got if tag == "fired") == sorted(fired)
