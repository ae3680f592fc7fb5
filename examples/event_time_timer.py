"""Event-time timers in a KeyedProcessFunction: a running sum per name, reported 2 s of event time
after each payment (``python examples/event_time_timer.py``).

The program PyFlink ships as ``examples/datastream/event_time_timer.py``, written against the same
API (only the imports say ``millstream``) and printing the same records. Payments are
``(event time ms, name, amount)`` and arrive up to 2 s out of order; every payment sets a timer at
its time + 2 s, and each timer emits the name's sum as it stands when the watermark passes it.
"""
from millstream.common import Duration, WatermarkStrategy
from millstream.common.typeinfo import Types
from millstream.common.watermark_strategy import TimestampAssigner
from millstream.datastream import StreamExecutionEnvironment
from millstream.datastream.functions import KeyedProcessFunction, RuntimeContext
from millstream.datastream.state import ValueStateDescriptor

PAYMENTS = [
    (1000, "Alice", 110.1),
    (4000, "Bob", 30.2),
    (3000, "Alice", 20.0),
    (2000, "Bob", 53.1),
    (5000, "Alice", 13.1),
    (3000, "Bob", 3.1),
    (7000, "Bob", 16.1),
    (10000, "Alice", 20.1),
]


class SumWithTimers(KeyedProcessFunction):
    def open(self, runtime_context: RuntimeContext):
        self.total = runtime_context.get_state(ValueStateDescriptor("total", Types.PICKLED_BYTE_ARRAY()))

    def process_element(self, value, ctx: "KeyedProcessFunction.Context"):
        self.total.update((self.total.value() or 0) + value[2])
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 2000)

    def on_timer(self, timestamp: int, ctx: "KeyedProcessFunction.OnTimerContext"):
        yield ctx.get_current_key(), self.total.value()


class FirstField(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp: int) -> int:
        return int(value[0])


def main() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    payments = env.from_collection(collection=PAYMENTS)
    payments = payments.assign_timestamps_and_watermarks(
        WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_seconds(2)).with_timestamp_assigner(FirstField())
    )
    payments.key_by(lambda payment: payment[1]).process(SumWithTimers()).print()
    env.execute()


if __name__ == "__main__":
    main()
