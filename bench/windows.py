"""Windows benchmark (issue 10), one command: ``python bench/windows.py`` (also ``bench/run.py --only windows``).

5 M events ``ts,user,value`` (seeded; 10 k users; the base time advances 1 ms every 10 events and
each event's timestamp lies up to 5 s behind it, so the input is at most 5 s out of order; value an
int in [0, 100)), 10 s tumbling event-time windows keyed by user, the sum of values per window, in
three engines, each in a fresh process reading the same CSV files (``--files`` of them, written once
under the temp dir and read through before every run so all three start from the page cache):

1. Millstream, embedded cluster, parallelism 2: FileSource -> map(parse) ->
   assign_timestamps_and_watermarks(bounded out-of-orderness 5 s) -> key_by(user) ->
   window(TumblingEventTimeWindows.of(Time.seconds(10))) -> reduce (+ a WindowFunction adding the
   window's start) -> execute_and_collect. The final watermark at the end of the input fires every
   window.
2. PySpark Structured Streaming, local[2] (spark.sql.shuffle.partitions=2): the same files read as a
   stream with Spark's default, every file in the first micro-batch (``--spark-files-per-trigger N``:
   ``maxFilesPerTrigger`` N, one micro-batch per N files; 1 took 22.1 s against the default's 18.6 s at
   quiet load, same windows, same final watermark), trigger(availableNow=True), withWatermark 5 s,
   groupBy(user, window(10 s)).sum, append mode, memory sink. Append mode emits a window once the
   watermark passes its end, so the windows still open at the end of the input are never emitted:
   the benchmark compares the windows Spark emitted and reports how many it dropped (and checks they
   are exactly those the final watermark had not passed).
3. A single-core pure-Python loop over the same lines: the ground truth. It also checks that no
   event would be late under a 5 s bound (so every engine must count every event).

The results must agree exactly (asserted). Each engine's time is the wall time from its first line
read to the last result in hand (its start-up is reported separately); events/s is 5 M over that.
Each measurement runs in its own process and prints one JSON line; the results go through a pickle
file, not the pipe.
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable

HERE = os.path.dirname(os.path.abspath(__file__))

EVENTS, USERS, FILES, SEED = 5_000_000, 10_000, 10, 10
EVENTS_PER_MS = 10  # the base time advances 1 ms every 10 events: 5 M events span 500 s, 50 windows
DISORDER_MS = 5_000  # an event's timestamp is up to this far behind the base time
WINDOW_MS = 10_000
START_MS = 1_700_000_000_000  # 2023-11-14T22:13:20Z, a multiple of the window size


# -- the input ----------------------------------------------------------------------------------


def data_dir(events: int, files: int, seed: int) -> Path:
    return Path(tempfile.gettempdir()) / "millstream-bench" / f"windows-{events}-{files}-{seed}"


def generate(events: int, files: int, seed: int) -> list[str]:
    """The input files (``part-NNN.csv``, in time order), generated once per (events, files, seed):
    a ``_COMPLETE`` marker (hidden from Spark's file source by its leading ``_``) lists them."""
    directory = data_dir(events, files, seed)
    marker = directory / "_COMPLETE"
    if marker.exists():
        return [str(directory / name) for name in marker.read_text().split()]
    shutil.rmtree(directory, ignore_errors=True)
    partial = directory.with_name(directory.name + f".partial-{os.getpid()}")
    partial.mkdir(parents=True)
    rng = random.Random(seed)
    r = rng.random
    names = []
    per_file = -(-events // files)
    mtime = time.time() - files
    for f in range(files):
        name = f"part-{f:03d}.csv"
        lo, hi = f * per_file, min(events, (f + 1) * per_file)
        lines = []
        for i in range(lo, hi):
            ts = START_MS + i // EVENTS_PER_MS - int(r() * (DISORDER_MS + 1))
            lines.append(f"{ts},{int(r() * USERS)},{int(r() * 100)}\n")
        path = partial / name
        path.write_text("".join(lines))
        os.utime(path, (mtime + f, mtime + f))  # Spark's file stream source reads the oldest first
        names.append(name)
    (partial / "_COMPLETE").write_text("\n".join(names) + "\n")
    partial.rename(directory)
    return [str(directory / name) for name in names]


def warm(paths: Iterable[str]) -> int:
    """Reads every file once, so each engine starts with the input in the page cache."""
    total = 0
    for path in paths:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 22):
                total += len(chunk)
    return total


def _save(results: dict[tuple[int, int], int], out: str) -> None:
    with open(out, "wb") as f:
        pickle.dump(results, f, protocol=pickle.HIGHEST_PROTOCOL)


# -- 1. the pure-Python loop (ground truth) ------------------------------------------------------


def measure_python(paths: list[str], out: str) -> dict:
    """Sums per (user, window start) in one loop on one core, with Flink's window assignment
    (start = ts - ts mod size, sizes and timestamps positive here) and a lateness check: an event is
    late under a 5 s bound if its timestamp is <= max seen - 5 s - 1 (the watermark could be no
    higher), which the generator rules out, so every event counts."""
    warm(paths)
    started = time.perf_counter()
    sums: dict[tuple[int, int], int] = {}
    get = sums.get
    high = -(1 << 63)
    late = events = 0
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                ts_s, user_s, value_s = line.split(",")
                ts = int(ts_s)
                if ts > high:
                    high = ts
                elif ts <= high - DISORDER_MS - 1:
                    late += 1
                key = (int(user_s), ts - ts % WINDOW_MS)
                sums[key] = get(key, 0) + int(value_s)
                events += 1
    wall = time.perf_counter() - started
    _save(sums, out)
    return {"wall_s": wall, "startup_s": 0.0, "events": events, "late": late, "windows": len(sums), "max_ts": high}


# -- 2. PySpark Structured Streaming ---------------------------------------------------------------


def measure_spark(directory: str, paths: list[str], out: str, files_per_trigger: int = 0) -> dict:
    """``files_per_trigger`` > 0: ``maxFilesPerTrigger``; 0: Spark's default (no limit)."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    warm(paths)
    started = time.perf_counter()
    spark = (
        SparkSession.builder.master("local[2]").appName("windows-structured-streaming")
        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1").config("spark.pyspark.python", sys.executable)
        .config("spark.sql.shuffle.partitions", "2")  # the default 200 state stores per batch on 2 cores is far slower
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    ready = time.perf_counter()
    checkpoint = tempfile.mkdtemp(prefix="millstream-bench-spark-")
    try:
        reader = spark.readStream.schema("ts LONG, user INT, value INT")
        if files_per_trigger > 0:
            reader = reader.option("maxFilesPerTrigger", files_per_trigger)
        events = reader.csv(directory)
        windowed = (events.withColumn("event_time", F.timestamp_millis("ts"))
                    .withWatermark("event_time", "5 seconds")
                    .groupBy("user", F.window("event_time", "10 seconds"))
                    .agg(F.sum("value").alias("total")))
        query = (windowed.select("user", F.unix_millis(F.col("window.start")).alias("start"), "total")
                 .writeStream.outputMode("append").format("memory").queryName("window_sums")
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        query.awaitTermination()
        rows = spark.sql("SELECT user, start, total FROM window_sums").collect()
        done = time.perf_counter()
        progress = query.recentProgress
        batches = len(progress)
        final_watermark = progress[-1]["eventTime"].get("watermark") if progress else None
    finally:
        spark.stop()
        shutil.rmtree(checkpoint, ignore_errors=True)
    sums: dict[tuple[int, int], int] = {}
    for user, start, total in rows:
        if (user, start) in sums:
            raise AssertionError(f"Spark emitted window ({user}, {start}) twice")
        sums[(user, start)] = total
    _save(sums, out)
    return {"wall_s": done - ready, "startup_s": ready - started, "windows": len(sums), "batches": batches,
            "final_watermark": final_watermark}


# -- 3. Millstream -----------------------------------------------------------------------------------


def _millstream_job(env: Any, paths: list[str]) -> Any:
    from millstream.common import Duration, Time, Types, WatermarkStrategy
    from millstream.common.watermark_strategy import TimestampAssigner
    from millstream.datastream import WindowFunction
    from millstream.datastream.connectors.file_system import FileSource, StreamFormat
    from millstream.datastream.window import TumblingEventTimeWindows

    class EventTime(TimestampAssigner):
        def extract_timestamp(self, value, record_timestamp) -> int:
            return value[0]

    class WithWindowStart(WindowFunction):
        def apply(self, key, window, inputs):
            for _, _, total in inputs:
                yield key, window.start, total

    def parse(line: str) -> tuple[int, int, int]:
        ts, user, value = line.split(",")
        return int(ts), int(user), int(value)

    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), *paths).process_static_file_set().build()
    strategy = (WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_seconds(5))
                .with_timestamp_assigner(EventTime()))
    return (env.from_source(source, WatermarkStrategy.no_watermarks(), "events")
            .map(parse, output_type=Types.TUPLE([Types.LONG(), Types.INT(), Types.INT()]))
            .assign_timestamps_and_watermarks(strategy)
            .key_by(lambda e: e[1], key_type=Types.INT())
            .window(TumblingEventTimeWindows.of(Time.seconds(10)))
            .reduce(lambda a, b: (a[0], a[1], a[2] + b[2]), window_function=WithWindowStart(),
                    output_type=Types.TUPLE([Types.INT(), Types.LONG(), Types.LONG()])))


def measure_millstream(paths: list[str], out: str) -> dict:
    from millstream.client.execution import ENV_JOBMANAGER
    from millstream.client.minicluster import MiniCluster
    from millstream.datastream import StreamExecutionEnvironment
    from millstream.runtime import config as cfg

    warm(paths)
    started = time.perf_counter()
    with MiniCluster(cfg.Configuration.from_dict(cfg.env_overrides(os.environ)), num_slots=2) as cluster:  # what env.execute() starts when no cluster is named
        ready = time.perf_counter()
        os.environ[ENV_JOBMANAGER] = cluster.address
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(2)
        sums: dict[tuple[int, int], int] = {}
        submitted = time.perf_counter()
        with _millstream_job(env, paths).execute_and_collect("windows bench") as results:
            for user, start, total in results:
                if (user, start) in sums:
                    raise AssertionError(f"Millstream emitted window ({user}, {start}) twice")
                sums[(user, start)] = total
        done = time.perf_counter()
    _save(sums, out)
    return {"wall_s": done - submitted, "startup_s": ready - started, "windows": len(sums)}


# -- the table ---------------------------------------------------------------------------------------


def _measure(kind: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--measure", kind, *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{kind} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _load(path: str) -> dict[tuple[int, int], int]:
    with open(path, "rb") as f:
        return pickle.load(f)


def spark_expected(truth: dict[tuple[int, int], int], watermark_ms: int) -> dict[tuple[int, int], int]:
    """The windows append mode emits: those whose end the last watermark reached (end <= watermark)."""
    return {k: v for k, v in truth.items() if k[1] + WINDOW_MS <= watermark_ms}


def report(events: int = EVENTS, files: int = FILES, seed: int = SEED, engines: tuple[str, ...] = ("python", "spark", "millstream"),
           spark_files_per_trigger: int = 0) -> dict:
    """Prints the comparison and returns each engine's run (with ``events``) for headline().
    ``spark_files_per_trigger``: Spark's ``maxFilesPerTrigger`` (0: its default, every file at once)."""
    t0 = time.perf_counter()
    paths = generate(events, files, seed)
    directory = os.path.dirname(paths[0])
    size = sum(os.path.getsize(p) for p in paths)
    load = os.getloadavg()
    print(f"\nwindows: {events:,} events ({size / 1e6:.0f} MB in {files} files, made in {time.perf_counter() - t0:.1f} s), "
          f"{USERS:,} users, 10 s tumbling event-time windows, sum per window; load average at start "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")
    work = tempfile.mkdtemp(prefix="millstream-bench-windows-")
    try:
        runs: dict[str, dict] = {}
        results: dict[str, dict[tuple[int, int], int]] = {}
        failures: dict[str, str] = {}
        for engine in engines:
            out = os.path.join(work, f"{engine}.pickle")
            args = [directory, out, str(spark_files_per_trigger)] if engine == "spark" else [out]
            try:
                runs[engine] = _measure(engine, *args, *paths)
            except RuntimeError as exc:
                if engine != "millstream":
                    raise
                failures[engine] = str(exc)
                continue
            results[engine] = _load(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    truth = results.get("python")
    if truth is not None:
        py = runs["python"]
        assert py["events"] == events and py["late"] == 0, py
        if "millstream" in results:
            mill = results["millstream"]
            missing, extra = truth.keys() - mill.keys(), mill.keys() - truth.keys()
            wrong = [k for k in truth.keys() & mill.keys() if truth[k] != mill[k]]
            assert not missing and not extra and not wrong, (
                f"Millstream differs from the ground truth: {len(missing)} windows missing, {len(extra)} extra, "
                f"{len(wrong)} with another sum (e.g. {sorted(missing)[:3]} {sorted(extra)[:3]} {sorted(wrong)[:3]})")
        if "spark" in results:
            spark = results["spark"]
            extra = spark.keys() - truth.keys()
            wrong = [k for k in spark.keys() & truth.keys() if spark[k] != truth[k]]
            assert not extra and not wrong, f"Spark differs: {len(extra)} windows not in the truth, {len(wrong)} with another sum"
            watermark = runs["spark"]["final_watermark"]
            if watermark is not None:
                from datetime import datetime

                wm_ms = int(datetime.fromisoformat(watermark.replace("Z", "+00:00")).timestamp() * 1000)
                runs["spark"]["final_watermark_ms"] = wm_ms
                assert spark == spark_expected(truth, wm_ms), (
                    "Spark emitted other windows than those its final watermark closed")
            runs["spark"]["dropped"] = len(truth) - len(spark)

    base = runs.get("spark", {}).get("wall_s")
    spark_total = runs["spark"]["wall_s"] + runs["spark"]["startup_s"] if "spark" in runs else None
    print(f"{'':<46}{'seconds':>9}{'events/s':>12}{'vs Spark':>10}{'start-up s':>12}{'end to end s':>14}{'vs Spark':>10}")
    names = {"millstream": "Millstream, embedded, parallelism 2",
             "spark": "PySpark Structured Streaming, local[2]",
             "python": "pure-Python loop, 1 core (ground truth)"}
    for engine in ("millstream", "spark", "python"):
        if engine not in runs:
            continue
        r = runs[engine]
        ratio = f"{r['wall_s'] / base:>10.2f}" if base else f"{'':>10}"
        total = r["wall_s"] + r["startup_s"]
        total_ratio = f"{total / spark_total:>10.2f}" if spark_total else f"{'':>10}"
        print(f"{names[engine]:<46}{r['wall_s']:>9.1f}{events / r['wall_s']:>12,.0f}{ratio}{r['startup_s']:>12.1f}"
              f"{total:>14.1f}{total_ratio}")
    if truth is not None:
        print(f"windows: {len(truth):,} in the ground truth", end="")
        if "millstream" in results:
            print(f"; Millstream emitted {runs['millstream']['windows']:,} (all, exact)", end="")
        if "spark" in results:
            s = runs["spark"]
            per_trigger = f"{spark_files_per_trigger} files" if spark_files_per_trigger else "every file at once, Spark's default"
            print(f"; Spark emitted {s['windows']:,} in {s['batches']} micro-batches ({per_trigger}; exact) and dropped "
                  f"{s['dropped']:,} still open at the end of the input (its last watermark {s['final_watermark']})", end="")
        print()
    for engine, message in failures.items():
        first = [line for line in message.splitlines() if line.strip()][-1]
        print(f"{names[engine]}: did not run: {first[:300]}")
    return {"events": events, **runs}


def headline(runs: dict) -> list:
    """The README table's figures: Millstream's job and end-to-end time, and its ratios to Spark's."""
    from table import Figure

    if "millstream" not in runs:
        return []
    mill, millions = runs["millstream"], runs["events"] / 1e6
    figures = [Figure("windows.millstream_job_s", f"windows, {millions:g} M events: Millstream job only", mill["wall_s"], "s", "lower")]
    if "spark" in runs:
        spark = runs["spark"]
        figures += [
            Figure("windows.vs_spark", "windows: Millstream / PySpark Structured Streaming, job only",
                   mill["wall_s"] / spark["wall_s"], "x", "lower", "≤ 0.5x"),
            Figure("windows.end_to_end_vs_spark", "windows: Millstream / PySpark Structured Streaming, with start-up",
                   (mill["wall_s"] + mill["startup_s"]) / (spark["wall_s"] + spark["startup_s"]), "x", "lower"),
        ]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=EVENTS)
    parser.add_argument("--files", type=int, default=FILES)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--engines", default="python,spark,millstream", help="comma-separated: python, spark, millstream")
    parser.add_argument("--spark-files-per-trigger", type=int, default=0,
                        help="Spark's maxFilesPerTrigger (default 0: Spark's default, every file in the first micro-batch)")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("args", nargs="*", help=argparse.SUPPRESS)
    a = parser.parse_args()
    if a.measure:
        if a.measure == "python":
            result = measure_python(a.args[1:], a.args[0])
        elif a.measure == "spark":
            result = measure_spark(a.args[0], a.args[3:], a.args[1], int(a.args[2]))
        elif a.measure == "millstream":
            result = measure_millstream(a.args[1:], a.args[0])
        else:
            raise SystemExit(f"unknown measurement {a.measure!r}")
        print(json.dumps(result))
        return
    engines = tuple(e.strip() for e in a.engines.split(",") if e.strip())
    unknown = set(engines) - {"python", "spark", "millstream"}
    if unknown:
        raise SystemExit(f"unknown engines: {', '.join(sorted(unknown))} (choose from python, spark, millstream)")
    if a.spark_files_per_trigger < 0:
        raise SystemExit(f"--spark-files-per-trigger: expected 0 (Spark's default) or more, got {a.spark_files_per_trigger}")
    report(a.events, a.files, a.seed, engines, a.spark_files_per_trigger)


if __name__ == "__main__":
    main()
