"""Nexmark benchmark (issue 29): ``python bench/nexmark/bench.py`` (also ``bench/run.py --only nexmark``).

One generated event file set (``generator.py``: ``--events`` events in ``--files`` CSV files,
seeded), read by both engines, each in a fresh process of its own that runs every query in turn,
each query twice: a timed run over that input into a blackhole sink (Nexmark's convention, as in
Flink's nexmark repository: what is timed is the engine's streaming work, not result collection),
after a checked run over a smaller input (``--check-events``, same seed) whose rows are collected
(which also warms each engine's code path for the query, so neither pays its first-use costs in
the timed run):

1. Millstream: an embedded cluster (parallelism 2), each query a job (``millstream_jobs.py``); timed
   with a discarding SinkFunction and ``env.execute``, checked with ``execute_and_collect``;
2. PySpark Structured Streaming, ``local[2]`` (``spark_jobs.py``): each query a streaming query
   over the same directory, ``availableNow``; timed into the ``noop`` sink, checked through the
   memory sink; by default every file in one micro-batch (Spark's default, faster here than a batch
   per file), and the no-data batch after it emits the windows the final watermark closed.

Each query's time is job only (the cluster or session already up, as bench/windows.py measures):
from submission to the job's end. events/s is the input's event count over it (every query reads
the whole input). Every engine's checked rows are compared with the plain-Python answer
(``reference.py``, ``check.py``) before any figure is printed: a wrong answer fails the
benchmark, except Spark's q4, which has no correct formulation (``spark_jobs.KNOWN_WRONG``) and is
reported as such. Spark emits a window only once its watermark passed the window's end, so its
windowed queries are checked for the windows its final watermark closed (and what it emitted must
all be right); the number it left open is printed.

Checkpointed throughput (``--checkpointed``, q5 and q7 by default): Millstream also runs the query on
RocksDB state (``state.backend.type: rocksdb``, full checkpoints: Flink's default) without and with
``enable_checkpointing(1000)`` over the timed input, ``--checkpointed-pairs`` pairs (5) in the same
cluster, alternating which goes first. Both runs of a pair are on RocksDB: the issue's measure is
what the checkpoints cost, not what RocksDB costs against the heap (that is printed apart, as the
heap time). It reports the share of events/s the checkpoints cost (medians) and the checkpoints
completed in each run; the checkpointed configuration's rows (over the checked input) are checked
like every other.

Spark runs with ``spark.sql.shuffle.partitions`` 2, one per core (``NEXMARK_SPARK_SHUFFLE_PARTITIONS``
to change it): with Spark's default 200, 500 k events at load 9, q3 took 60.9 s against 3.1 s, q5
54.8 s against 7.4 s, q11 20.1 s against 3.9 s.

The input is read through before each engine's process starts, so both read it from the page cache.

``--input kafka``: the same events from a Kafka topic for Millstream (``kafka_input.py``, which
says how, and why Spark reads the files there).
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # bench/: this directory is the package ``nexmark``

from nexmark import check, generator, reference  # noqa: E402

EVENTS, FILES, SEED = 500_000, 4, 29
CHECKPOINTED_QUERIES = ("q5", "q7")  # also timed with RocksDB state and 1 s checkpoints (issue 29)
CHECK_EVENTS = 100_000  # the checked runs' input: smaller, since collecting every row is not what is timed
ENGINES = ("millstream", "spark")


def warm(paths: list[str]) -> None:
    for path in paths:
        with open(path, "rb") as f:
            while f.read(1 << 22):
                pass


# -- measurements (each engine in a process of its own) ----------------------------------------------


class Blackhole:
    """Nexmark's blackhole sink (Flink's DiscardingSink): a SinkFunction that drops every record.
    Built on first use, so that importing this module does not import Millstream."""

    _cls: Any = None

    @classmethod
    def make(cls) -> Any:
        if cls._cls is None:
            from millstream.datastream.functions import SinkFunction

            class DiscardingSink(SinkFunction):
                def invoke(self, value, context=None) -> None:
                    pass

            cls._cls = DiscardingSink
        return cls._cls()


CHECKPOINTED = "1 s checkpoints on RocksDB state"  # the checkpointed measurement, against RocksDB without
CHECKPOINTED_PAIRS = 5  # medians of 5 alternating pairs: with 3, q7 (2-4 checkpoints a run) swung 3-13 % in runs minutes apart


def measure_millstream(queries: list[str], paths: list[str], check_paths: list[str], disorder_ms: int, out: str,
                       checkpointed: list[str] = (), repeats: int = CHECKPOINTED_PAIRS, kafka: str = "") -> dict:
    """Each query's job time (heap state, no checkpoints), its checked rows, and for the
    ``checkpointed`` queries pairs of timed runs on RocksDB state without and with 1 s checkpoints."""
    from millstream.client.cluster_client import ClusterClient
    from millstream.client.execution import ENV_JOBMANAGER
    from millstream.client.minicluster import MiniCluster
    from millstream.datastream import EmbeddedRocksDBStateBackend, StreamExecutionEnvironment
    from millstream.runtime import config as cfg

    from nexmark import millstream_jobs

    warm(paths + check_paths)
    if kafka:  # --input kafka: the same events from the topics kafka_input.setup wrote (timed, checked)
        from nexmark.kafka_input import Topic

        paths, check_paths = (Topic.parse(t) for t in kafka.split(","))
    started = time.perf_counter()
    times: dict[str, float] = {}
    results: dict[str, list[tuple]] = {}
    pairs: dict[str, dict[str, list]] = {}
    work = tempfile.mkdtemp(prefix="millstream-bench-nexmark-checkpoints-")
    config = cfg.Configuration.from_dict({**cfg.env_overrides(os.environ),  # MILLSTREAM_CONF_* apply (e.g. the task placement)
                                          "execution.checkpointing.dir": os.path.join(work, "checkpoints")})
    with MiniCluster(config, num_slots=2) as cluster, ClusterClient(cluster.address) as client:
        ready = time.perf_counter()
        os.environ[ENV_JOBMANAGER] = cluster.address

        def environment(with_checkpoints: bool, rocksdb: bool = True) -> Any:
            env = StreamExecutionEnvironment.get_execution_environment()
            env.set_parallelism(2)
            if rocksdb:
                env.set_state_backend(EmbeddedRocksDBStateBackend())
            if with_checkpoints:
                env.enable_checkpointing(1000)
            return env

        def timed(query: str, with_checkpoints: bool) -> tuple[float, int]:
            env = environment(with_checkpoints)  # RocksDB state, with or without checkpoints
            millstream_jobs.build(env, query, paths, disorder_ms).add_sink(Blackhole.make())
            submitted = time.perf_counter()
            result = env.execute(f"nexmark {query} (timed, blackhole sink, rocksdb{', 1 s checkpoints' if with_checkpoints else ''})")
            took = time.perf_counter() - submitted
            completed = client.status(bytes.fromhex(str(result.get_job_id()))).checkpoints.num_completed
            return took, completed

        # Checkpointed throughput: the same query on RocksDB state without and with a checkpoint a
        # second, in pairs, alternating which goes first; the checked run with checkpoints first.
        for query in checkpointed:
            env = environment(True)
            with millstream_jobs.build(env, query, check_paths, disorder_ms).execute_and_collect(f"nexmark {query} (checked, {CHECKPOINTED})") as rows:
                results[f"{query}@checkpointed"] = list(rows)
            pair = pairs[query] = {"plain_s": [], "checkpointed_s": [], "checkpoints": []}
            for i in range(repeats):
                for with_checkpoints in ((False, True) if i % 2 == 0 else (True, False)):
                    took, completed = timed(query, with_checkpoints)
                    pair["checkpointed_s" if with_checkpoints else "plain_s"].append(took)
                    if with_checkpoints:
                        pair["checkpoints"].append(completed)
        for query in queries:
            env = StreamExecutionEnvironment.get_execution_environment()
            env.set_parallelism(2)
            with millstream_jobs.build(env, query, check_paths, disorder_ms).execute_and_collect(f"nexmark {query} (checked)") as rows:
                results[query] = list(rows)
            env = StreamExecutionEnvironment.get_execution_environment()
            env.set_parallelism(2)
            millstream_jobs.build(env, query, paths, disorder_ms).add_sink(Blackhole.make())
            submitted = time.perf_counter()
            env.execute(f"nexmark {query} (timed, blackhole sink)")
            times[query] = time.perf_counter() - submitted
    shutil.rmtree(work, ignore_errors=True)
    with open(out, "wb") as f:
        pickle.dump({"rows": results, "watermarks": {}}, f, protocol=pickle.HIGHEST_PROTOCOL)
    return {"job_s": times, "startup_s": ready - started, "checkpointed": pairs}


def measure_spark(queries: list[str], paths: list[str], check_paths: list[str], disorder_ms: int, out: str,
                  files_per_trigger: int, kafka: str = "") -> dict:
    from nexmark import spark_jobs

    warm(paths + check_paths)
    started = time.perf_counter()
    spark = spark_jobs.session(shuffle_partitions=int(os.environ.get("NEXMARK_SPARK_SHUFFLE_PARTITIONS", "2")))
    ready = time.perf_counter()
    times: dict[str, float] = {}
    results: dict[str, list[tuple]] = {}
    watermarks: dict[str, int | None] = {}
    if kafka:  # --input kafka: can this Spark read Kafka? (it reads the files either way: kafka_input.py)
        from nexmark import kafka_input

        kafka = kafka_input.spark_kafka_unavailable(spark, kafka_input.Topic.parse(kafka.split(",")[0])) or \
            "its Kafka source is there, but spark_jobs has no Kafka formulation"
    unsupported: dict[str, str] = {}
    try:
        for query in queries:
            try:
                results[query], watermarks[query] = spark_jobs.run(spark, query, os.path.dirname(check_paths[0]), disorder_ms,
                                                                   files_per_trigger)
            except spark_jobs.Unsupported as exc:
                unsupported[query] = str(exc)
                continue
            submitted = time.perf_counter()
            spark_jobs.run(spark, query, os.path.dirname(paths[0]), disorder_ms, files_per_trigger, collect=False)
            times[query] = time.perf_counter() - submitted
    finally:
        spark.stop()
    with open(out, "wb") as f:
        pickle.dump({"rows": results, "watermarks": watermarks}, f, protocol=pickle.HIGHEST_PROTOCOL)
    return {"job_s": times, "startup_s": ready - started, "unsupported": unsupported, "kafka_unavailable": kafka}


def _measure(kind: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--measure", kind, *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{kind} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- the report --------------------------------------------------------------------------------------


def report(events: int = EVENTS, files: int = FILES, seed: int = SEED, queries: tuple[str, ...] = reference.QUERIES,
           engines: tuple[str, ...] = ENGINES, files_per_trigger: int = 0, check_events: int = CHECK_EVENTS,
           checkpointed: tuple[str, ...] = CHECKPOINTED_QUERIES, pairs: int = CHECKPOINTED_PAIRS,
           source: str = "file") -> dict:
    """Runs, checks and prints; returns the figures for headline()."""
    config = generator.Config()
    t0 = time.perf_counter()
    paths = generator.generate(events, files, seed, config)
    check_events = min(check_events, events)
    check_paths = paths if check_events == events else generator.generate(check_events, files, seed, config)
    made = time.perf_counter() - t0
    size = sum(os.path.getsize(p) for p in paths)
    disorder = config.max_disorder_ms() + 1  # the watermark lags the latest event by more than any event lags
    load = os.getloadavg()
    print(f"\nnexmark: {events:,} events ({size / 1e6:.0f} MB in {len(paths)} CSV files, seed {seed}, made in {made:.1f} s), "
          f"{config.first_event_rate:,} events/s of event time, out of order by up to {config.max_disorder_ms()} ms; "
          f"load average at start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")
    t0 = time.perf_counter()
    parsed = reference.read(check_paths)
    checkpointed = tuple(q for q in checkpointed if "millstream" in engines)
    answers = {q: reference.answer(q, parsed) for q in dict.fromkeys(queries + checkpointed)}
    del parsed
    print(f"plain-Python answers for the checked runs ({check_events:,} events, same seed) in "
          f"{time.perf_counter() - t0:.1f} s; timed runs write into a blackhole sink (Millstream: a discarding "
          f"SinkFunction, Spark: the noop sink)")
    work = tempfile.mkdtemp(prefix="millstream-bench-nexmark-")
    runs: dict[str, dict] = {}
    broker, extra = None, {}
    try:
        if source == "kafka":  # the events into Kafka topics first; Millstream also over the files (kafka_input.py)
            from nexmark import kafka_input

            broker, engines, checkpointed, extra = kafka_input.setup(paths, check_paths, engines)
        for engine in engines:
            out = os.path.join(work, f"{engine}.pickle")
            runs[engine] = _measure(engine, *extra.get(engine, ()), "--files-per-trigger", str(files_per_trigger),
                                    "--check-paths", ",".join(check_paths), "--checkpointed", ",".join(checkpointed),
                                    "--checkpointed-pairs", str(pairs), ",".join(queries), str(disorder), out, *paths)
            runs[engine]["check_events"] = check_events
            runs[engine]["load_after"] = os.getloadavg()[0]
            with open(out, "rb") as f:
                produced = pickle.load(f)
            runs[engine]["checked"] = {}
            runs[engine]["wrong"] = {}
            for query, rows in produced["rows"].items():
                closed = produced["watermarks"].get(query) if query not in ("q0", "q1", "q2", "q3", "q4") else None
                try:
                    base = query.split("@")[0]  # "q5@checkpointed": q5 with RocksDB state and checkpoints
                    check.check(base, answers[base], rows, closed_before=closed)
                except AssertionError as exc:
                    from nexmark import spark_jobs

                    if engine == "spark" and query in spark_jobs.KNOWN_WRONG:
                        runs[engine]["wrong"][query] = f"{spark_jobs.KNOWN_WRONG[query]} (check: {exc})"
                        continue
                    raise AssertionError(f"{engine} {query} is wrong: {exc}") from exc
                runs[engine]["checked"][query] = len(rows)
    finally:
        if broker is not None:
            broker.__exit__()
        shutil.rmtree(work, ignore_errors=True)

    mill, spark = runs.get("millstream"), runs.get("spark")
    if source == "kafka":
        kafka_input.label(runs)
    print(f"{'query':<6}{'Millstream s':>13}{'events/s':>12}{'Spark s':>10}{'events/s':>12}{'ratio':>8}   rows checked (Millstream / Spark)")
    ratios = {}
    for query in queries:
        m = mill["job_s"].get(query) if mill else None
        s = spark["job_s"].get(query) if spark and query not in spark["wrong"] else None
        line = f"{query:<6}"
        line += f"{m:>13.2f}{events / m:>12,.0f}" if m else f"{'—':>13}{'':>12}"
        line += f"{s:>10.2f}{events / s:>12,.0f}" if s else f"{'—':>10}{'':>12}"
        if m and s:
            ratios[query] = m / s
            line += f"{m / s:>8.2f}"
        else:
            line += f"{'':>8}"
        counts = [str(r["checked"].get(query, "—")) for r in (mill, spark) if r]
        line += f"   {' / '.join(counts)}"
        print(line)
    if spark:
        for query, why in {**spark.get("unsupported", {}), **spark["wrong"]}.items():
            print(f"Spark {query}: {why[:400]}")
    print("every Millstream result equals the plain-Python answer; every Spark result too, for the windows its last "
          "watermark closed (q12: no bidder over-counted)" + (", but q4" if spark and spark["wrong"] else ""))
    for engine, r in runs.items():
        print(f"{engine}: start-up {r['startup_s']:.1f} s, load average after {r['load_after']:.2f}")
    losses = {}
    for query, pair in (mill or {}).get("checkpointed", {}).items():
        plain, with_checkpoints = statistics.median(pair["plain_s"]), statistics.median(pair["checkpointed_s"])
        losses[query] = 1 - plain / with_checkpoints  # the share of events/s lost
        heap = mill["job_s"].get(query)
        print(f"Millstream {query} on RocksDB with 1 s checkpoints (result checked): "
              f"{' '.join(f'{t:.2f}' for t in pair['checkpointed_s'])} s ({pair['checkpoints']} checkpoints completed) "
              f"against {' '.join(f'{t:.2f}' for t in pair['plain_s'])} s on RocksDB without checkpoints, in alternating "
              f"pairs: {events:,} events, medians {events / with_checkpoints:,.0f} against {events / plain:,.0f} "
              f"events/s, {losses[query]:.1%} lost"
              + (f"; heap state without checkpoints, {events:,} events: {heap:.2f} s ({events / heap:,.0f} events/s)" if heap else ""))
    kafka_ratios = kafka_input.compare_with_files(runs, queries, events) if source == "kafka" else {}
    return {"events": events, "runs": runs, "ratios": ratios, "losses": losses, "input": source, "kafka_vs_file": kafka_ratios}


def headline(result: dict) -> list:
    """The README table's figures: events/s per query for both engines and the ratio of times."""
    from table import Figure

    figures = []
    millions = result["events"] / 1e6
    mill, spark = result["runs"].get("millstream"), result["runs"].get("spark")
    for query in reference.QUERIES:
        if mill and query in mill["job_s"]:
            figures.append(Figure(f"nexmark.{query}_millstream_eps", f"Nexmark {query}, {millions:g} M events: Millstream p=2, job only, blackhole sink",
                                  result["events"] / mill["job_s"][query], "events/s", "higher"))
        if spark and query in spark["job_s"] and query not in spark["wrong"]:
            figures.append(Figure(f"nexmark.{query}_spark_eps", f"Nexmark {query}: PySpark Structured Streaming local[2], job only, noop sink",
                                  result["events"] / spark["job_s"][query], "events/s", "higher"))
        if query in result["ratios"]:
            figures.append(Figure(f"nexmark.{query}_vs_spark", f"Nexmark {query}: Millstream / Structured Streaming, job time",
                                  result["ratios"][query], "x", "lower", "< 1x"))
        if query in result.get("losses", {}):
            figures.append(Figure(f"nexmark.{query}_checkpointed_loss", f"Nexmark {query}: events/s lost to {CHECKPOINTED} (vs RocksDB without)",
                                  100 * result["losses"][query], "%", "lower", "<= 10 %", signed=True))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=EVENTS)
    parser.add_argument("--files", type=int, default=FILES)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--queries", default=",".join(reference.QUERIES))
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--files-per-trigger", type=int, default=0,
                        help="Spark's maxFilesPerTrigger; 0 (Spark's default): every file in one micro-batch, the faster "
                             "(500 k events, load 8-14: q1 30 s against 72 s with 1, q5 19 s against 53 s)")
    parser.add_argument("--check-events", type=int, default=CHECK_EVENTS,
                        help="events of the checked runs (the results compared with the plain-Python answer)")
    parser.add_argument("--checkpointed", default=",".join(CHECKPOINTED_QUERIES),
                        help="queries Millstream also runs with RocksDB state and 1 s checkpoints, paired with runs "
                             "without ('' for none)")
    parser.add_argument("--checkpointed-pairs", type=int, default=CHECKPOINTED_PAIRS,
                        help="pairs of RocksDB runs without and with checkpoints per --checkpointed query")
    parser.add_argument("--input", choices=("file", "kafka"), default="file",
                        help="kafka: the events written to a topic on a tansu broker first, Millstream reading it "
                             "(bounded at the latest offsets); Spark reads the files when it cannot read Kafka (kafka_input.py)")
    parser.add_argument("--kafka", default="", help=argparse.SUPPRESS)
    parser.add_argument("--check-paths", help=argparse.SUPPRESS)
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("args", nargs="*", help=argparse.SUPPRESS)
    a = parser.parse_args()
    if a.measure:
        queries, disorder, out, *paths = a.args
        if a.measure in ("millstream", "millstream_file"):  # millstream_file: over the files, beside --input kafka
            result = measure_millstream(queries.split(","), paths, a.check_paths.split(","), int(disorder), out,
                                        [q for q in a.checkpointed.split(",") if q], a.checkpointed_pairs, kafka=a.kafka)
        elif a.measure == "spark":
            result = measure_spark(queries.split(","), paths, a.check_paths.split(","), int(disorder), out, a.files_per_trigger,
                                   kafka=a.kafka)
        else:
            raise SystemExit(f"unknown measurement {a.measure!r}")
        print(json.dumps(result))
        return
    queries = tuple(q.strip() for q in a.queries.split(",") if q.strip())
    unknown = set(queries) - set(reference.QUERIES)
    if unknown:
        raise SystemExit(f"unknown queries: {', '.join(sorted(unknown))} (choose from {', '.join(reference.QUERIES)})")
    engines = tuple(e.strip() for e in a.engines.split(",") if e.strip())
    if set(engines) - set(ENGINES):
        raise SystemExit(f"unknown engines: {', '.join(sorted(set(engines) - set(ENGINES)))} (choose from {', '.join(ENGINES)})")
    checkpointed = tuple(q.strip() for q in a.checkpointed.split(",") if q.strip())
    if set(checkpointed) - set(reference.QUERIES):
        raise SystemExit(f"unknown --checkpointed queries: {', '.join(sorted(set(checkpointed) - set(reference.QUERIES)))}")
    if a.check_events < 1:
        raise SystemExit(f"--check-events must be positive, got {a.check_events}")
    if a.checkpointed_pairs < 1:
        raise SystemExit(f"--checkpointed-pairs must be positive, got {a.checkpointed_pairs}")
    report(a.events, a.files, a.seed, queries, engines, a.files_per_trigger, a.check_events, checkpointed,
           a.checkpointed_pairs, a.input)


if __name__ == "__main__":
    main()
