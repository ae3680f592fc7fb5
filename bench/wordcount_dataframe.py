"""Word count as a PySpark user would write it with DataFrames (split, explode, groupBy: no Python
per record), for the end-to-end comparison with ``python examples/word_count.py``:

    python bench/wordcount_dataframe.py FILE

Prints the same summary line as the Millstream example ("total words: N  distinct words: M").
"""
from __future__ import annotations

import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def count_words(spark: SparkSession, path: str) -> dict[str, int]:
    words = spark.read.text(path).select(F.explode(F.split(F.col("value"), r"\s+")).alias("word"))
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
    spark = session("wordcount-dataframe")
    totals = count_words(spark, sys.argv[1])
    spark.stop()
    print(f"total words: {sum(totals.values())}  distinct words: {len(totals)}")
