"""Tumbling count windows: the sum of every 3 values of a key.

The program PyFlink ships as ``examples/datastream/windowing/tumbling_count_window.py``, written
against the same API (only the imports say ``millstream``) and printing the same records:
``python examples/windowing/tumbling_count_window.py [--output DIR]``. A key's last window stays
unfired when fewer than 3 values are left for it at the end of the input.
"""
import argparse
import sys
from typing import Iterable

from millstream.common import Encoder, Types
from millstream.datastream import StreamExecutionEnvironment, WindowFunction
from millstream.datastream.connectors.file_system import FileSink, OutputFileConfig, RollingPolicy
from millstream.datastream.window import CountWindow

VALUES = [(1, "hi"), (2, "hello"), (3, "hi"), (4, "hello"), (5, "hi"), (6, "hello"), (6, "hello")]


class SumOfWindow(WindowFunction[tuple, tuple, str, CountWindow]):
    """(key, sum of the window's first fields)."""

    def apply(self, key: str, window: CountWindow, inputs: Iterable[tuple]):
        return [(key, sum(value for value, _ in inputs))]


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
    values = env.from_collection(VALUES, type_info=Types.TUPLE([Types.INT(), Types.STRING()]))
    sums = (values.key_by(lambda value: value[1], key_type=Types.STRING())
            .count_window(3)
            .apply(SumOfWindow(), Types.TUPLE([Types.STRING(), Types.INT()])))
    write_or_print(sums, args.output)
    env.execute()


if __name__ == "__main__":
    main(sys.argv[1:])
