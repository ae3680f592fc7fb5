"""Start-up: the embedded cluster against a bare Spark session, fresh processes, same run.

    python bench/startup.py [--runs 5] [--before DIR] [--wordcount] [--cluster]
    python bench/run.py --only startup

Each repetition runs, alternately and each in a fresh interpreter:
- spark: ``SparkSession.builder.master("local[2]").getOrCreate()`` and a one-element Python job
  (``parallelize([1]).map(...).collect()``), the program then exits;
- embedded: a Millstream program ``from_collection([1]) -> sink`` on the embedded default (no
  cluster named), then exits.
Times are seconds from the process's spawn: the session (Spark) or the cluster (Millstream) ready
for work, the job done, the process gone. Printed: medians, and the embedded start-up's difference
to and ratio over Spark's session start (issue 14's goal: at most 1 s more).

``--before DIR``: a third series, the embedded program run against another Millstream tree laid
out as an importable package (``DIR/millstream/...``, found ahead of the installed one), e.g. the
code before a change. ``--wordcount``: also ``python examples/word_count.py`` end to end (20 MB).
``--cluster``: also ``millstream cluster start`` (one TaskManager, 2 slots, a free fixed port) until
it returns, i.e. every TaskManager registered, then ``cluster stop``.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Iterator

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

SPARK = """
import json, sys, time
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false").config("spark.driver.host", "127.0.0.1")
         .config("spark.pyspark.python", sys.executable).getOrCreate())
ready = time.time()
assert spark.sparkContext.parallelize([1], 1).map(lambda x: x + 1).collect() == [2]
print(json.dumps({"ready": ready, "done": time.time()}), flush=True)
"""

EMBEDDED = """
import json, time
from millstream.client import minicluster
from millstream.datastream import StreamExecutionEnvironment

marks = {}
start_embedded = minicluster.embedded_cluster

def timed_embedded_cluster(*args, **kwargs):  # the one execute() calls: note when it is ready
    cluster = start_embedded(*args, **kwargs)
    marks.setdefault("ready", time.time())
    return cluster

minicluster.embedded_cluster = timed_embedded_cluster
env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
env.from_collection([1]).add_sink(lambda x: None)
env.execute("start-up")
marks["done"] = time.time()
print(json.dumps(marks), flush=True)
"""


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def session_cluster(pythonpath: str | None = None) -> Iterator[tuple[float, dict]]:
    """``millstream cluster start`` (one TaskManager, 2 slots) in a scratch cluster directory:
    yields the seconds it took to return (its TaskManager registered) and its ``cluster.json``
    (``jobmanager`` address, ``pids``); ``cluster stop`` at the end."""
    import tempfile

    env = {k: v for k, v in os.environ.items() if k != "MILLSTREAM_JOBMANAGER"}
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    with tempfile.TemporaryDirectory(prefix="millstream-bench-cluster-") as directory:
        env["MILLSTREAM_CLUSTER_DIR"] = directory
        cli = [sys.executable, "-m", "millstream.client.cli", "cluster"]
        started = time.time()
        out = subprocess.run([*cli, "start", "--taskmanagers", "1", "--slots", "2", "--port", str(_free_port()),
                              "-Drest.port=0"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
        ready = time.time() - started
        try:
            if out.returncode != 0:
                raise RuntimeError(f"cluster start failed ({out.returncode}):\n{out.stdout[-2000:]}{out.stderr[-3000:]}")
            with open(os.path.join(directory, "cluster.json")) as f:
                yield ready, json.load(f)
        finally:
            subprocess.run([*cli, "stop"], capture_output=True, env=env, cwd=ROOT, timeout=120)


def cluster_start_once(before: str | None = None) -> dict[str, float]:
    """Seconds ``millstream cluster start`` takes to return (its TaskManager registered)."""
    with session_cluster(before) as (ready, _):
        return {"ready": ready}


def run_once(kind: str, before: str | None = None) -> dict[str, float]:
    """One fresh process: seconds from its spawn to ready, done and exit."""
    if kind == "cluster":
        return cluster_start_once(before)
    env = {k: v for k, v in os.environ.items() if k != "MILLSTREAM_JOBMANAGER"}
    if kind == "wordcount":
        command = [sys.executable, os.path.join(ROOT, "examples", "word_count.py")]
    else:
        command = [sys.executable, "-c", SPARK if kind == "spark" else EMBEDDED]
    if before is not None:
        env["PYTHONPATH"] = before
    import tempfile

    # Output to files, not pipes: a pipe stays open until Spark's JVM (which inherits it) has exited
    # too, while a shell returns to its prompt when the program's process ends.
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        spawned = time.time()
        process = subprocess.Popen(command, stdout=stdout, stderr=stderr, text=True, env=env, cwd=ROOT)
        code = process.wait(600)
        gone = time.time()
        stdout.seek(0)
        stderr.seek(0)
        output, errors = stdout.read(), stderr.read()
    if code != 0:
        raise RuntimeError(f"{kind} failed ({code}):\n{errors[-3000:]}")
    figures = {"exit": gone - spawned}
    if kind != "wordcount":
        marks = json.loads(output.strip().splitlines()[-1])
        figures.update({name: at - spawned for name, at in marks.items()})
    return figures


def measure(runs: int, before: str | None, wordcount: bool, cluster: bool = False) -> dict[str, list[dict[str, float]]]:
    series = ["spark", "embedded"] + (["before"] if before else []) + (["wordcount"] if wordcount else [])
    series += ["wordcount-before"] if wordcount and before else []
    series += (["cluster"] + (["cluster-before"] if before else [])) if cluster else []
    results: dict[str, list[dict[str, float]]] = {name: [] for name in series}
    for run in range(runs):
        for name in series:  # alternated: every series sees the same machine state
            kind = {"before": "embedded", "wordcount-before": "wordcount", "cluster-before": "cluster"}.get(name, name)
            results[name].append(run_once(kind, before if name.endswith("before") else None))
            print(f"run {run + 1}/{runs} {name}: " + ", ".join(f"{k} {v:.2f} s" for k, v in results[name][-1].items()),
                  file=sys.stderr, flush=True)
    return results


def median(rows: list[dict[str, float]], key: str) -> float:
    return statistics.median(row[key] for row in rows)


def report(runs: int = 5, before: str | None = None, wordcount: bool = False, cluster: bool = False) -> dict[str, float]:
    load = os.getloadavg()[0]
    results = measure(runs, before, wordcount, cluster)
    spark, embedded = results["spark"], results["embedded"]
    print(f"\nstart-up, {runs} alternating runs each, medians (load average {load:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end)")
    print(f"{'':<38}{'ready s':>9}{'job done s':>12}{'exit s':>9}")
    labels = {"spark": "Spark session + 1-element job", "embedded": "Millstream embedded + 1-element job",
              "before": "  same, --before tree"}
    for name in ("spark", "embedded", "before"):
        if name in results:
            rows = results[name]
            print(f"{labels[name]:<38}{median(rows, 'ready'):>9.2f}{median(rows, 'done'):>12.2f}{median(rows, 'exit'):>9.2f}")
    summary = {"spark_ready_s": median(spark, "ready"), "embedded_ready_s": median(embedded, "ready"),
               "spark_exit_s": median(spark, "exit"), "embedded_exit_s": median(embedded, "exit")}
    # Under load single runs spread by seconds; a run's two processes ran back to back, so the
    # median of the per-run differences is the steadier figure.
    paired = statistics.median(e["ready"] - s["ready"] for e, s in zip(embedded, spark))
    summary["paired_ready_difference_s"] = paired
    difference = summary["embedded_ready_s"] - summary["spark_ready_s"]
    print(f"embedded start-up - Spark session start: {difference:+.2f} s between medians "
          f"({summary['embedded_ready_s'] / summary['spark_ready_s']:.2f}x), {paired:+.2f} s median of the runs' "
          f"differences (goal: at most +1 s); whole program: {summary['embedded_exit_s'] - summary['spark_exit_s']:+.2f} s")
    if before:
        before_paired = statistics.median(b["ready"] - s["ready"] for b, s in zip(results["before"], spark))
        print(f"  --before tree: {before_paired:+.2f} s median of the runs' differences")
    if wordcount:
        print(f"python examples/word_count.py (20 MB), exit: {median(results['wordcount'], 'exit'):.2f} s"
              + (f" (--before tree: {median(results['wordcount-before'], 'exit'):.2f} s)" if before else ""))
    if cluster:
        summary["cluster_ready_s"] = median(results["cluster"], "ready")
        print(f"millstream cluster start (1 TaskManager) until it returns: {summary['cluster_ready_s']:.2f} s "
              f"({summary['cluster_ready_s'] - summary['spark_ready_s']:+.2f} s over Spark's session start)"
              + (f"; --before tree: {median(results['cluster-before'], 'ready'):.2f} s" if before else ""))
    return summary


def headline(summary: dict[str, float]) -> list:
    """The README table's figures of one report() (medians; the cluster's only with ``cluster=True``)."""
    from table import Figure

    figures = [
        Figure("startup.spark_ready_s", "Spark session ready (median, fresh process)", summary["spark_ready_s"], "s", "lower"),
        Figure("startup.embedded_ready_s", "embedded cluster ready (median, fresh process)", summary["embedded_ready_s"], "s", "lower"),
        Figure("startup.embedded_minus_spark_s", "embedded start-up minus Spark session start (medians)",
               summary["embedded_ready_s"] - summary["spark_ready_s"], "s", "lower", "≤ +1 s", signed=True),
        Figure("startup.paired_difference_s", "embedded minus Spark, median of the runs' differences",
               summary["paired_ready_difference_s"], "s", "lower", signed=True),
    ]
    if "cluster_ready_s" in summary:
        figures += [
            Figure("startup.cluster_start_s", "`millstream cluster start` until it returns (median)", summary["cluster_ready_s"], "s", "lower"),
            Figure("startup.cluster_start_minus_spark_s", "`millstream cluster start` minus Spark session start",
                   summary["cluster_ready_s"] - summary["spark_ready_s"], "s", "lower", "≤ +1 s", signed=True),
        ]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--before", help="a Millstream tree (DIR/millstream/...) to run the embedded program against too")
    parser.add_argument("--wordcount", action="store_true", help="also time `python examples/word_count.py` end to end")
    parser.add_argument("--cluster", action="store_true", help="also time `millstream cluster start`")
    args = parser.parse_args()
    report(args.runs, args.before, args.wordcount, args.cluster)


if __name__ == "__main__":
    main()
