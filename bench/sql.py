"""SQL benchmark (issue 30), one command: ``python bench/sql.py`` (also ``bench/run.py --only sql``).

Two SQL jobs, the same SQL text in Millstream and in PyFlink 2.3 (Flink's own SQL runtime in its
JVM), and the same query through Spark SQL on Structured Streaming, on the same files, each engine
in a fresh process, one run each, in one sitting (the load average is printed with the results):

1. **word count**: ``SELECT word, COUNT(*) FROM words GROUP BY word`` over ``--words`` words (one a
   line, a Zipf-like draw from 20 k words, seeded) in ``--files`` CSV files. Millstream and PyFlink
   in batch mode (a bounded input: each word's final count once); Spark as a stream of the files
   (``trigger(availableNow=True)``, complete mode, memory sink), its final counts.
2. **TUMBLE**: ``SELECT user_id, window_start, SUM(v) FROM TABLE(TUMBLE(TABLE events,
   DESCRIPTOR(rt), INTERVAL '10' SECOND)) GROUP BY user_id, window_start, window_end`` over
   ``--events`` events of bench/windows.py's generator (10 k users, at most 5 s out of order), the
   rowtime ``rt AS TO_TIMESTAMP_LTZ(ts, 3)`` with ``WATERMARK FOR rt AS rt - INTERVAL '5' SECOND``,
   in streaming mode (the end of the bounded input fires the last windows); Spark: ``withWatermark``
   5 s, ``GROUP BY user_id, window(event_time, '10 seconds')`` in SQL, append mode, which never
   emits the windows still open at the end (compared on the windows it emitted, as windows.py does).

Every result is checked against a plain-Python answer. Times are wall seconds from submitting the
query to the last result in hand (start-up, the cluster or session or JVM gateway, apart; end to end
adds it). PyFlink's local executor starts a MiniCluster for every job, inside its job time; its
start-up is the JVM gateway's. PyFlink's ``collect()`` fetches the rows over py4j, one call a row,
also inside its job time (what a PyFlink program that collects pays); the load average goes into
the README's "generated" line.
Millstream runs on its embedded MiniCluster at parallelism 2, PyFlink on its local MiniCluster at
parallelism 2, Spark on local[2] with 2 shuffle partitions.

PyFlink runs from ``.venv/flink-tools`` (``make install``: the apache-flink 2.3 wheels without their
Python dependencies, plus ruamel.yaml, which its gateway launcher reads config with); py4j comes
from PySpark's. ``_python_worker_execution_mode=process`` keeps PyFlink from starting its Beam
loopback server, which these queries (no Python UDF) never use. It needs Java 17.
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
from collections import Counter
from pathlib import Path
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

WORDS, EVENTS, FILES, SEED = 2_000_000, 1_000_000, 4, 30
VOCABULARY = 20_000
FLINK_TOOLS = Path(os.environ.get("MILLSTREAM_FLINK_TOOLS") or Path(sys.prefix) / "flink-tools")

WORDCOUNT_SQL = "SELECT word, COUNT(*) AS n FROM words GROUP BY word"
TUMBLE_SQL = ("SELECT user_id, window_start, SUM(v) AS total FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(rt), "
              "INTERVAL '10' SECOND)) GROUP BY user_id, window_start, window_end")


def words_ddl(directory: str) -> str:
    return (f"CREATE TABLE words (word STRING) WITH ('connector' = 'filesystem', 'path' = '{directory}', "
            f"'format' = 'csv')")


def events_ddl(directory: str) -> str:
    return ("CREATE TABLE events (ts BIGINT, user_id INT, v INT, rt AS TO_TIMESTAMP_LTZ(ts, 3), "
            "WATERMARK FOR rt AS rt - INTERVAL '5' SECOND) WITH ("
            f"'connector' = 'filesystem', 'path' = '{directory}', 'format' = 'csv')")


# -- the input ------------------------------------------------------------------------------------


def word_files(words: int, files: int, seed: int) -> Path:
    """A directory of ``files`` CSV files of one word a line (made once per size and seed)."""
    directory = Path(tempfile.gettempdir()) / "millstream-bench" / f"sql-words-{words}-{files}-{seed}"
    if (directory.parent / (directory.name + ".complete")).exists():
        return directory
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(VOCABULARY)]
    weights = [1 / (i + 1) for i in range(VOCABULARY)]  # Zipf's law, s = 1
    per_file = -(-words // files)
    for f in range(files):
        n = min(per_file, words - f * per_file)
        (directory / f"part-{f:03d}.csv").write_text("\n".join(rng.choices(vocabulary, weights, k=n)) + "\n")
    (directory.parent / (directory.name + ".complete")).touch()
    return directory


def event_files(events: int, files: int, seed: int) -> Path:
    import windows
    return Path(windows.generate(events, files, seed)[0]).parent


def warm(directory: Path) -> None:
    for p in directory.iterdir():
        if p.is_file():
            p.read_bytes()


# -- ground truth -----------------------------------------------------------------------------------


def truth(kind: str, directory: Path) -> dict:
    out: dict = {}
    if kind == "wordcount":
        counts: Counter[str] = Counter()
        for p in sorted(directory.glob("part-*")):
            counts.update(p.read_text().split())
        return dict(counts)
    for p in sorted(directory.glob("part-*")):
        for line in p.read_text().splitlines():
            ts, user, v = (int(x) for x in line.split(","))
            key = (user, ts - ts % 10_000)
            out[key] = out.get(key, 0) + v
    return out


# -- engines (each in its own process) ----------------------------------------------------------------


def _rows_to_result(kind: str, rows: Any, epoch_ms: Any) -> dict:
    out: dict = {}
    for r in rows:
        if kind == "wordcount":
            out[str(r[0])] = int(r[1])
        else:
            key = (int(r[0]), epoch_ms(r[1]))
            if key in out:
                raise AssertionError(f"window {key} emitted twice")
            out[key] = int(r[2])
    return out


def _ms(v: Any) -> int:
    """A window start (datetime, aware or naive UTC, or an Instant-like) in epoch ms."""
    import datetime
    if isinstance(v, datetime.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=datetime.timezone.utc)
        return round(v.timestamp() * 1000)
    return int(v)


def _table_environment(table: Any, kind: str) -> Any:
    """A TableEnvironment of ``table`` (millstream.table or pyflink.table: the same API) set up alike."""
    settings = table.EnvironmentSettings.in_batch_mode() if kind == "wordcount" \
        else table.EnvironmentSettings.in_streaming_mode()
    t_env = table.TableEnvironment.create(settings)
    t_env.get_config().set("parallelism.default", "2")
    t_env.get_config().set("table.local-time-zone", "UTC")
    return t_env


def _query(t_env: Any, kind: str, directory: str) -> tuple[dict, float]:
    """The query's checked result and its seconds: the DDL, the query, every row collected."""
    t0 = time.perf_counter()
    t_env.execute_sql(words_ddl(directory) if kind == "wordcount" else events_ddl(directory))
    with t_env.execute_sql(WORDCOUNT_SQL if kind == "wordcount" else TUMBLE_SQL).collect() as rows:
        result = _rows_to_result(kind, rows, _ms)
    return result, time.perf_counter() - t0


def measure_millstream(kind: str, directory: str, out: str) -> dict:
    from millstream import table
    from millstream.client.execution import ENV_JOBMANAGER
    from millstream.client.minicluster import MiniCluster
    from millstream.runtime import config as cfg

    warm(Path(directory))
    started = time.perf_counter()
    with MiniCluster(cfg.Configuration.from_dict(cfg.env_overrides(os.environ)), num_slots=2) as cluster:
        ready = time.perf_counter()
        os.environ[ENV_JOBMANAGER] = cluster.address
        result, wall_s = _query(_table_environment(table, kind), kind, directory)
    _save(result, out)
    return {"wall_s": wall_s, "startup_s": ready - started, "results": len(result)}


def measure_pyflink(kind: str, directory: str, out: str) -> dict:
    from pyflink import table  # from FLINK_TOOLS (PYTHONPATH)

    warm(Path(directory))
    started = time.perf_counter()
    t_env = _table_environment(table, kind)
    ready = time.perf_counter()
    result, wall_s = _query(t_env, kind, directory)
    _save(result, out)
    return {"wall_s": wall_s, "startup_s": ready - started, "results": len(result)}


def measure_spark(kind: str, directory: str, out: str) -> dict:
    from pyspark.sql import SparkSession

    warm(Path(directory))
    started = time.perf_counter()
    spark = (SparkSession.builder.master("local[2]").appName(f"sql-{kind}")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.host", "127.0.0.1").config("spark.pyspark.python", sys.executable)
             .config("spark.sql.shuffle.partitions", "2").config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    ready = time.perf_counter()
    checkpoint = tempfile.mkdtemp(prefix="millstream-bench-sql-spark-")
    try:
        if kind == "wordcount":
            spark.readStream.schema("word STRING").csv(directory).createOrReplaceTempView("words")
            query = (spark.sql(WORDCOUNT_SQL).writeStream.outputMode("complete").format("memory")
                     .queryName("result").option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        else:
            # one file a micro-batch (as bench/windows.py): the watermark advances between batches
            (spark.readStream.schema("ts LONG, user_id INT, v INT").option("maxFilesPerTrigger", 1).csv(directory)
             .selectExpr("user_id", "v", "timestamp_millis(ts) AS event_time")
             .withWatermark("event_time", "5 seconds").createOrReplaceTempView("events"))
            sql = ("SELECT user_id, unix_millis(window.start) AS window_start, SUM(v) AS total FROM events "
                   "GROUP BY user_id, window(event_time, '10 seconds')")
            query = (spark.sql(sql).writeStream.outputMode("append").format("memory").queryName("result")
                     .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        query.awaitTermination()
        result = _rows_to_result(kind, spark.sql("SELECT * FROM result").collect(), _ms)
        done = time.perf_counter()
        progress = query.recentProgress
        watermark = progress[-1]["eventTime"].get("watermark") if progress and kind == "tumble" else None
    finally:
        spark.stop()
        shutil.rmtree(checkpoint, ignore_errors=True)
    _save(result, out)
    return {"wall_s": done - ready, "startup_s": ready - started, "results": len(result), "final_watermark": watermark}


def _save(result: dict, out: str) -> None:
    with open(out, "wb") as f:
        pickle.dump(result, f, protocol=pickle.HIGHEST_PROTOCOL)


def _environment(engine: str) -> dict[str, str]:
    env = dict(os.environ)
    if engine == "pyflink":
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(FLINK_TOOLS), env.get("PYTHONPATH", "")) if p)
        env["_python_worker_execution_mode"] = "process"
    return env


def pyflink_unavailable() -> str | None:
    if not (FLINK_TOOLS / "pyflink" / "lib").is_dir():
        return f"PyFlink 2.3 is not installed under {FLINK_TOOLS} (`make install`)"
    if not (FLINK_TOOLS / "ruamel").is_dir():
        return f"ruamel.yaml is not installed under {FLINK_TOOLS} (`make install`)"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "PyFlink needs Java 17: no `java` on PATH and no JAVA_HOME"
    return None


def _measure(engine: str, kind: str, directory: Path, out: str) -> dict:
    done = subprocess.run([sys.executable, __file__, "--measure", engine, kind, str(directory), out],
                          capture_output=True, text=True, env=_environment(engine))
    if done.returncode != 0:
        raise RuntimeError(f"{engine} {kind} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _load(path: str) -> dict:
    with open(path, "rb") as f:
        return pickle.load(f)


# -- the report ---------------------------------------------------------------------------------------


def check(kind: str, engine: str, got: dict, expected: dict, run: dict) -> str:
    """Raises unless ``got`` is the answer; Spark's append mode emits only the windows its last
    watermark closed (end <= watermark), exactly those."""
    if engine == "spark" and kind == "tumble":
        from datetime import datetime
        mark = run.get("final_watermark")
        wm = int(datetime.fromisoformat(mark.replace("Z", "+00:00")).timestamp() * 1000) if mark else -1
        closed = {k: v for k, v in expected.items() if k[1] + 10_000 <= wm}
        assert got == closed, f"spark tumble: not the {len(closed)} windows its last watermark {mark} closed"
        return f"exact; {len(expected) - len(got):,} windows still open at the end not emitted (append mode)"
    assert got == expected, (f"{engine} {kind} differs: {len(expected.keys() - got.keys())} missing, "
                             f"{len(got.keys() - expected.keys())} extra, "
                             f"{sum(1 for k in expected.keys() & got.keys() if expected[k] != got[k])} other values")
    return "exact"


def report(words: int = WORDS, events: int = EVENTS, files: int = FILES, seed: int = SEED,
           engines: tuple[str, ...] = ("millstream", "pyflink", "spark")) -> dict:
    """Prints the comparison; returns {kind: {engine: run}} (and the load average) for headline()."""
    inputs = {"wordcount": word_files(words, files, seed), "tumble": event_files(events, files, seed)}
    sizes = {"wordcount": words, "tumble": events}
    unavailable = pyflink_unavailable() if "pyflink" in engines else None
    load = os.getloadavg()
    print(f"\nsql: word count of {words:,} words and TUMBLE(10 s) of {events:,} events, {files} files each; "
          f"load average at start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")
    runs: dict[str, Any] = {"load": load[0]}
    work = tempfile.mkdtemp(prefix="millstream-bench-sql-")
    names = {"millstream": "Millstream SQL, embedded, p=2", "pyflink": "PyFlink 2.3 SQL, local, p=2",
             "spark": "Spark SQL Structured Streaming, local[2]"}
    try:
        for kind in ("wordcount", "tumble"):
            expected = truth(kind, inputs[kind])
            runs[kind] = {}
            print(f"{kind}: {len(expected):,} results{'':<20}{'seconds':>9}{'rows/s':>12}{'start-up s':>12}"
                  f"{'end to end s':>14}  check")
            for engine in engines:
                if engine == "pyflink" and unavailable:
                    print(f"  {names[engine]:<44} skipped: {unavailable}")
                    continue
                out = os.path.join(work, f"{engine}-{kind}.pickle")
                try:
                    r = _measure(engine, kind, inputs[kind], out)
                except RuntimeError as exc:
                    lines = [x for x in str(exc).splitlines() if x.strip()]
                    print(f"  {names[engine]:<44} failed: {lines[-1][:300] if lines else exc}")
                    continue
                note = check(kind, engine, _load(out), expected, r)
                runs[kind][engine] = r
                print(f"  {names[engine]:<44}{r['wall_s']:>9.1f}{sizes[kind] / r['wall_s']:>12,.0f}"
                      f"{r['startup_s']:>12.1f}{r['wall_s'] + r['startup_s']:>14.1f}  {note}")
            mill = runs[kind].get("millstream")
            for other in ("pyflink", "spark"):
                if mill and other in runs[kind]:
                    o = runs[kind][other]
                    print(f"  Millstream / {other}: {mill['wall_s'] / o['wall_s']:.2f}x job only, "
                          f"{(mill['wall_s'] + mill['startup_s']) / (o['wall_s'] + o['startup_s']):.2f}x end to end")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return runs


def headline(runs: dict) -> list:
    from table import Figure

    figures = []
    for kind, label in (("wordcount", "SQL word count"), ("tumble", "SQL TUMBLE window")):
        r = runs.get(kind, {})
        if "millstream" not in r:
            continue
        mill = r["millstream"]["wall_s"]
        figures.append(Figure(f"sql.{kind}_millstream_s", f"{label}: Millstream job only", mill, "s", "lower"))
        for other, name in (("pyflink", "PyFlink 2.3 SQL"), ("spark", "Spark SQL Structured Streaming")):
            if other in r:
                o = r[other]
                figures.append(Figure(f"sql.{kind}_vs_{other}", f"{label}: Millstream / {name}, job only",
                                      mill / o["wall_s"], "x", "lower"))
                figures.append(Figure(f"sql.{kind}_end_to_end_vs_{other}", f"{label}: Millstream / {name}, with start-up",
                                      (mill + r["millstream"]["startup_s"]) / (o["wall_s"] + o["startup_s"]), "x", "lower"))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--words", type=int, default=WORDS)
    parser.add_argument("--events", type=int, default=EVENTS)
    parser.add_argument("--files", type=int, default=FILES)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--engines", default="millstream,pyflink,spark")
    parser.add_argument("--measure", nargs=4, help=argparse.SUPPRESS)
    a = parser.parse_args()
    if a.measure:
        engine, kind, directory, out = a.measure
        measure = {"millstream": measure_millstream, "pyflink": measure_pyflink, "spark": measure_spark}[engine]
        print(json.dumps(measure(kind, directory, out)))
        return
    engines = tuple(e.strip() for e in a.engines.split(",") if e.strip())
    unknown = set(engines) - {"millstream", "pyflink", "spark"}
    if unknown:
        raise SystemExit(f"unknown engines: {', '.join(sorted(unknown))} (choose from millstream, pyflink, spark)")
    report(a.words, a.events, a.files, a.seed, engines)


if __name__ == "__main__":
    main()
