"""Word count: the main Millstream job (PyFlink's word_count example, ported by its imports).

    python examples/word_count.py [--input FILE] [--output DIR] [--parallelism N]

Without --input it counts a deterministic ~20 MB corpus generated under data/ on first run.
Without --output the counts stream back to this program, which prints the top 20 words.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from millstream.common import Types, WatermarkStrategy  # noqa: E402
from millstream.common.serialization import Encoder  # noqa: E402
from millstream.datastream import RuntimeExecutionMode, StreamExecutionEnvironment  # noqa: E402
from millstream.datastream.connectors.file_system import FileSink, FileSource, StreamFormat  # noqa: E402

DEFAULT_CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "corpus-20mb.txt")


def split_words(line: str):
    return [(word, 1) for word in line.split()]


def build(env: StreamExecutionEnvironment, input_path: str, output_path: str | None):
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), input_path).build()
    lines = env.from_source(source, WatermarkStrategy.no_watermarks(), "file-source")
    # Declaring the tuple type is what PyFlink needs to sum natively (and prints "(word,count)").
    pairs = lines.flat_map(split_words, output_type=Types.TUPLE([Types.STRING(), Types.INT()])).name("split")
    counts = pairs.key_by(lambda pair: pair[0]).sum(1).name("count")
    if output_path:
        counts.sink_to(FileSink.for_row_format(output_path, Encoder.simple_string_encoder()).build())
    return counts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", help="text file to count (default: generated corpus)")
    parser.add_argument("--output", help="directory for part files (default: print the top words)")
    parser.add_argument("--parallelism", type=int, default=2)
    args = parser.parse_args(argv)

    input_path = args.input
    if input_path is None:
        from corpus import generate

        input_path = generate(os.path.normpath(DEFAULT_CORPUS), 20 * 1024 * 1024)

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    env.set_parallelism(args.parallelism)
    counts = build(env, input_path, args.output)

    started = time.perf_counter()
    if args.output:
        env.execute("word count")
        print(f"wrote counts to {args.output} in {time.perf_counter() - started:.1f} s")
        return
    with counts.execute_and_collect("word count") as results:
        totals = dict(results)
    elapsed = time.perf_counter() - started
    total = sum(totals.values())
    print(f"{'word':<16}{'count':>10}")
    for word, count in sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))[:20]:
        print(f"{word:<16}{count:>10}")
    print(f"total words: {total}  distinct words: {len(totals)}")
    print(f"elapsed: {elapsed:.2f} s  ({total / elapsed:,.0f} records/s)")


if __name__ == "__main__":
    main()
