"""Event-time session windows: a session ends after 5 ms without a reading.

The program PyFlink ships as ``examples/datastream/windowing/session_with_gap_window.py``, written
against the same API (only the imports say ``millstream``) and printing the same records:
``python examples/windowing/session_with_gap_window.py [--output DIR]``.
"""
import argparse
import sys
from typing import Iterable

from millstream.common import Encoder, Time, Types, WatermarkStrategy
from millstream.common.watermark_strategy import TimestampAssigner
from millstream.datastream import ProcessWindowFunction, StreamExecutionEnvironment
from millstream.datastream.connectors.file_system import FileSink, OutputFileConfig, RollingPolicy
from millstream.datastream.window import EventTimeSessionWindows, TimeWindow

READINGS = [("hi", 1), ("hi", 2), ("hi", 3), ("hi", 4), ("hi", 8), ("hi", 9), ("hi", 15)]


class SecondField(TimestampAssigner):
    """The reading's event time is its second field (milliseconds)."""

    def extract_timestamp(self, value, record_timestamp) -> int:
        return int(value[1])


class CountPerWindow(ProcessWindowFunction[tuple, tuple, str, TimeWindow]):
    """One record per window: (key, window start, window end, number of readings)."""

    def process(self, key: str, context: ProcessWindowFunction.Context[TimeWindow], elements: Iterable[tuple]) -> Iterable[tuple]:
        window = context.window()
        return [(key, window.start, window.end, sum(1 for _ in elements))]


def write_or_print(stream, output: str | None) -> None:
    if output is None:
        print("Printing result to stdout. Use --output to specify output path.")
        stream.print()
        return
    config = OutputFileConfig.builder().with_part_prefix("prefix").with_part_suffix(".ext").build()
    stream.sink_to(FileSink.for_row_format(base_path=output, encoder=Encoder.simple_string_encoder())
                   .with_output_file_config(config)
                   .with_rolling_policy(RollingPolicy.default_rolling_policy())
                   .build())


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output", help="write the results to files under this directory instead of printing them")
    args, _ = parser.parse_known_args(argv)

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)  # one output file / one printer
    readings = env.from_collection(READINGS, type_info=Types.TUPLE([Types.STRING(), Types.INT()]))
    timestamps = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(SecondField())
    counts = (readings.assign_timestamps_and_watermarks(timestamps)
              .key_by(lambda reading: reading[0], key_type=Types.STRING())
              .window(EventTimeSessionWindows.with_gap(Time.milliseconds(5)))
              .process(CountPerWindow(), Types.TUPLE([Types.STRING(), Types.INT(), Types.INT(), Types.INT()])))
    write_or_print(counts, args.output)
    env.execute()


if __name__ == "__main__":
    main(sys.argv[1:])
