"""A ProcessWindowFunction with per-window and per-key state, under a custom trigger:
``python examples/windowing/process_window_state.py``.

Clicks ``(user, event time ms)`` go into 10 s tumbling event-time windows. The trigger reports
early, every 2 clicks of a window, and once more when the watermark passes the window's end. On
every firing the function emits ``(user, window start, firing number of this window, clicks in the
window so far, firings for this user so far)``: the firing number lives in the window's own state
(``context.window_state()``, cleared in ``clear`` when the window goes), the per-user count in the
key's state across windows (``context.global_state()``).

    ada: 1 000, 2 000 -> (ada,0,1,2,1); 4 000, 6 000 -> (ada,0,2,4,2); 12 000, 13 000 -> (ada,10000,1,2,3)
    bob: 2 500, 7 000 -> (bob,0,1,2,1); 9 000 -> nothing yet
    end of input: the watermark passes 9 999 and 19 999: (ada,0,3,4,4), (bob,0,2,3,2), (ada,10000,2,2,5)

The watermark trails the largest timestamp by 5 s, so no window ends before the input does.
"""
from typing import Iterable

from millstream.common import Duration, Time, Types, WatermarkStrategy
from millstream.common.watermark_strategy import TimestampAssigner
from millstream.datastream import ProcessWindowFunction, StreamExecutionEnvironment
from millstream.datastream.state import ReducingStateDescriptor, ValueStateDescriptor
from millstream.datastream.window import TimeWindow, Trigger, TriggerResult, TumblingEventTimeWindows

CLICKS = [("ada", 1000), ("ada", 2000), ("bob", 2500), ("ada", 4000), ("ada", 6000), ("bob", 7000),
          ("ada", 12000), ("ada", 13000), ("bob", 9000)]


class ClickTime(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp) -> int:
        return value[1]


class EveryTwoAndAtTheEnd(Trigger[tuple, TimeWindow]):
    """FIRE on every 2nd element of a window and when the watermark reaches the window's end."""

    def __init__(self) -> None:
        self.count = ReducingStateDescriptor("clicks-since-firing", lambda a, b: a + b, Types.LONG())

    def on_element(self, element, timestamp, window: TimeWindow, ctx: Trigger.TriggerContext) -> TriggerResult:
        ctx.register_event_time_timer(window.max_timestamp())
        since = ctx.get_partitioned_state(self.count)
        since.add(1)
        if since.get() >= 2:
            since.clear()
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: TimeWindow, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.FIRE if time == window.max_timestamp() else TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: TimeWindow, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_merge(self, window: TimeWindow, ctx: Trigger.OnMergeContext) -> None:
        raise RuntimeError("tumbling windows never merge")

    def clear(self, window: TimeWindow, ctx: Trigger.TriggerContext) -> None:
        ctx.delete_event_time_timer(window.max_timestamp())
        ctx.get_partitioned_state(self.count).clear()


class Report(ProcessWindowFunction[tuple, tuple, str, TimeWindow]):
    def __init__(self) -> None:
        self.firings_of_window = ValueStateDescriptor("firings-of-window", Types.INT())
        self.firings_of_user = ValueStateDescriptor("firings-of-user", Types.INT())

    def process(self, key: str, context: ProcessWindowFunction.Context[TimeWindow], elements: Iterable[tuple]) -> Iterable[tuple]:
        of_window = context.window_state().get_state(self.firings_of_window)
        of_user = context.global_state().get_state(self.firings_of_user)
        of_window.update((of_window.value() or 0) + 1)
        of_user.update((of_user.value() or 0) + 1)
        yield key, context.window().start, of_window.value(), sum(1 for _ in elements), of_user.value()

    def clear(self, context: ProcessWindowFunction.Context) -> None:
        context.window_state().get_state(self.firings_of_window).clear()


def main() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    clicks = env.from_collection(CLICKS, type_info=Types.TUPLE([Types.STRING(), Types.LONG()]))
    timestamps = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_seconds(5)).with_timestamp_assigner(ClickTime())
    reports = (clicks.assign_timestamps_and_watermarks(timestamps)
               .key_by(lambda click: click[0], key_type=Types.STRING())
               .window(TumblingEventTimeWindows.of(Time.seconds(10)))
               .trigger(EveryTwoAndAtTheEnd())
               .process(Report(), Types.TUPLE([Types.STRING(), Types.LONG(), Types.INT(), Types.INT(), Types.INT()])))
    reports.print()
    env.execute("process window function with state")


if __name__ == "__main__":
    main()
