"""Allowed lateness and late data: ``python examples/windowing/allowed_lateness.py``.

A sensor sends one reading a second, ``(sensor, event time ms, value)``, some of them late. Readings
are summed in 10 s tumbling event-time windows; the watermark trails the largest timestamp by 1 s;
windows accept late readings for 5 s of event time after they close (``allowed_lateness``), and
readings later than that go to a side output instead of being dropped silently.

What happens, reading by reading (the watermark is max timestamp - 1 s - 1 ms; it is emitted
periodically, every 200 ms, so between two readings a second apart):

    reading             watermark after   output
    (1 000 ms, 1)       -1                -
    (3 000 ms, 2)       1 999             -
    (12 000 ms, 4)      10 999            window [0, 10 s) fires: 1 + 2 = 3
    (5 000 ms, 8)       10 999            late, but [0, 10 s) is kept until 14 999: it fires again, 11
    (22 000 ms, 16)     20 999            window [10 s, 20 s) fires: 4; [0, 10 s) is dropped
    (7 000 ms, 32)      20 999            too late for [0, 10 s): to the side output
    (26 000 ms, 64)     24 999            -
    end of input        +inf              window [20 s, 30 s) fires: 16 + 64 = 80
"""
from typing import Iterable

from millstream.common import Duration, Time, Types, WatermarkStrategy
from millstream.common.watermark_strategy import TimestampAssigner
from millstream.datastream import OutputTag, ProcessWindowFunction, StreamExecutionEnvironment
from millstream.datastream.connectors.datagen import DataGeneratorSource
from millstream.datastream.window import TimeWindow, TumblingEventTimeWindows

READINGS = [("sensor-1", 1000, 1), ("sensor-1", 3000, 2), ("sensor-1", 12000, 4), ("sensor-1", 5000, 8),
            ("sensor-1", 22000, 16), ("sensor-1", 7000, 32), ("sensor-1", 26000, 64)]
READING = Types.TUPLE([Types.STRING(), Types.LONG(), Types.INT()])
LATE = OutputTag("late-readings", READING)


class EventTime(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp) -> int:
        return value[1]


class SumPerWindow(ProcessWindowFunction[tuple, tuple, str, TimeWindow]):
    """(sensor, window start, sum of the window's values): once on time, again for each late reading."""

    def process(self, key: str, context: ProcessWindowFunction.Context[TimeWindow], elements: Iterable[tuple]) -> Iterable[tuple]:
        yield key, context.window().start, sum(value for _, _, value in elements)


def main() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    # one reading a second, so the periodic watermark moves between readings
    source = DataGeneratorSource(READINGS.__getitem__, count=len(READINGS), records_per_second=1)
    readings = env.from_source(source, WatermarkStrategy.no_watermarks(), "sensor", type_info=READING)
    timestamps = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_seconds(1)).with_timestamp_assigner(EventTime())
    sums = (readings.assign_timestamps_and_watermarks(timestamps)
            .key_by(lambda reading: reading[0], key_type=Types.STRING())
            .window(TumblingEventTimeWindows.of(Time.seconds(10)))
            .allowed_lateness(Time.seconds(5).to_milliseconds())
            .side_output_late_data(LATE)
            .process(SumPerWindow(), Types.TUPLE([Types.STRING(), Types.LONG(), Types.INT()])))
    sums.print("window")
    sums.get_side_output(LATE).print("too late")
    env.execute("allowed lateness")


if __name__ == "__main__":
    main()
