"""Word count as a PySpark user would write it with DataFrames (split, explode, groupBy: no Python
per record), for the end-to-end comparison with ``python examples/word_count.py``:

    python bench/wordcount_dataframe.py [--split literal|regex] FILE

``--split literal`` (the default) splits each line on a single space, ``" "``, the corpus's only
separator within a line (examples/corpus.py joins words with one space and lines with a newline),
so it counts exactly what ``str.split()`` does there; ``--split regex`` splits on ``\\s+``, what a
user writes for arbitrary whitespace. Spark's ``split`` takes a Java regex either way, but a
one-character pattern that is no regex metacharacter takes Java's ``String.split`` fast path
(no regex engine), so the literal split is the faster one a user would pick for this input.

Prints the same summary line as the Millstream example ("total words: N  distinct words: M").
"""
from __future__ import annotations

import argparse
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

SPLITS = {"literal": " ", "regex": r"\s+"}  # --split: the pattern given to F.split


def count_words(spark: SparkSession, path: str, split: str = "regex") -> dict[str, int]:
    """Counts per word; ``split``: "literal" (one space) or "regex" (``\\s+``)."""
    if split not in SPLITS:
        raise ValueError(f"split: expected one of {', '.join(SPLITS)}, got {split!r}")
    words = spark.read.text(path).select(F.explode(F.split(F.col("value"), SPLITS[split])).alias("word"))
    rows = words.where(F.col("word") != "").groupBy("word").count().collect()
    return {row["word"]: row["count"] for row in rows}


def session(app: str) -> SparkSession:
    spark = (
        SparkSession.builder.master("local[2]").appName(app)
        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1").config("spark.pyspark.python", sys.executable)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", choices=tuple(SPLITS), default="literal",
                        help="literal: split on one space (the corpus's separator); regex: on \\s+")
    parser.add_argument("path")
    args = parser.parse_args()
    spark = session("wordcount-dataframe")
    totals = count_words(spark, args.path, args.split)
    spark.stop()
    print(f"total words: {sum(totals.values())}  distinct words: {len(totals)}")
