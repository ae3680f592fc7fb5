"""Event time on the embedded cluster (two TaskManagers, real Spark, real network): timestamps and
watermarks cross task boundaries, and event-time timers fire while the job runs, as the watermark
passes them, not only at the final watermark. Expected outputs are computed here independently."""
from __future__ import annotations


import pytest

from millstream.common import Duration, WatermarkStrategy
from millstream.common.watermark_strategy import TimestampAssigner
from millstream.datastream import KeyedProcessFunction, ProcessFunction, StreamExecutionEnvironment, TimeDomain
from millstream.datastream.connectors.datagen import DataGeneratorSource

from .harness import ClusterSpec

pytestmark = pytest.mark.timeout(180)
CLUSTER = ClusterSpec(taskmanagers=2, jobmanager_env=True)
LONG_MAX = 2**63 - 1


class EventTime(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[0]


def event(i: int) -> tuple[int, str]:
    """Event i: timestamps advance 10 ms per event, every fifth one 30 ms late (within the 50 ms bound)."""
    return (i * 10 - (30 if i % 5 == 0 and i else 0), f"k{i % 4}")


class Deadline(KeyedProcessFunction):
    """Per event, a timer 100 ms after it; on the timer: the key, the timer, and the watermark that fired it."""

    def process_element(self, value, ctx):
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 100)

    def on_timer(self, timestamp, ctx):
        assert ctx.time_domain() == TimeDomain.EVENT_TIME
        yield ctx.get_current_key(), timestamp, ctx.timestamp(), ctx.timer_service().current_watermark()


def test_event_time_timers_fire_as_watermarks_cross_the_network(cluster) -> None:
    count = 400
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.get_config().set_auto_watermark_interval(50)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(50)).with_timestamp_assigner(EventTime())
    # 400 events at 200/s: about two seconds, so periodic watermarks must carry the timers, not the end
    # One source subtask: with two, each reads a contiguous half of the indices, and the second
    # half's timers would rightly wait for the first half's watermark (the minimum) until the end.
    source = env.from_source(DataGeneratorSource(event, count, records_per_second=200), strategy, "events").set_parallelism(1)
    fired = source.rebalance().map(lambda e: e).key_by(lambda e: e[1]).process(Deadline())
    with fired.execute_and_collect("event-time timers") as results:
        got = list(results)
    expected = {(f"k{i % 4}", event(i)[0] + 100) for i in range(count)}  # one timer per key and timestamp
    assert sorted((k, t) for k, t, _, _ in got) == sorted(expected)
    assert all(ts == t for _, t, ts, _ in got)  # ctx.timestamp() in on_timer is the timer's
    assert all(wm >= t for _, t, _, wm in got)  # a timer never fires before the watermark reaches it
    # most timers fired on a regular watermark while the source was still running
    early = [t for _, t, _, wm in got if wm < LONG_MAX]
    assert len(early) > count * 3 // 4, f"only {len(early)} of {len(got)} timers fired before the final watermark"


class Stamp(ProcessFunction):
    def process_element(self, value, ctx):
        yield value, ctx.timestamp()


def test_records_carry_their_timestamps_through_a_keyed_exchange(cluster) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    rows = [(t * 7 % 1000, f"k{t % 3}") for t in range(300)]
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(EventTime())
    stamped = env.from_collection(rows).assign_timestamps_and_watermarks(strategy).key_by(lambda r: r[1]).map(
        lambda r: (r[1], r[0])).process(Stamp())
    with stamped.execute_and_collect("timestamps across the network") as results:
        got = list(results)
    assert sorted(got) == sorted(((k, t), t) for t, k in rows)
