"""Task placement benchmark (issue 28): ``python bench/placement.py`` (also ``bench/run.py --only placement``).

The same jobs under ``millstream.spark.task-placement: task`` (every subtask a Spark task holding a
core) and ``slot`` (a slot's subtasks on threads of one Spark task), on the same machine in one
sitting: ``--pairs`` pairs of fresh processes, one per placement, the order alternating from pair to
pair so that drift in the machine's load hits both alike. Each process is one of the other
benchmarks' own measurements, its embedded cluster (2 slots, parallelism 2) told the placement
through ``MILLSTREAM_CONF_MILLSTREAM_SPARK_TASK_PLACEMENT``:

1. word count (``bench/run.py --measure millstream``): ``--wordcount-mb`` of the Zipf corpus, BATCH;
2. windows (``bench/windows.py --measure millstream``): ``--windows-events`` events, 10 s tumbling
   event-time windows keyed by user;
3. Nexmark (``bench/nexmark/bench.py --measure millstream``): ``--nexmark-events`` events, the
   ``--queries`` one after another in one cluster, heap state, no checkpoints.

Times are job only (submission to the last result; the cluster's start-up is printed apart), medians
per placement, and the ratio slot / task is the median of the pairs' own ratios. Every run's results
must be right (word count: the totals of every run equal; windows: every window's sum equals a
plain-Python loop's; Nexmark: the checked rows equal the plain-Python answer), or the benchmark fails. The load average is printed at the
start and after every pair: on a shared machine it says how far to trust the figures.
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "examples"))

PLACEMENTS = ("task", "slot")
ENV = "MILLSTREAM_CONF_MILLSTREAM_SPARK_TASK_PLACEMENT"


def _measure(placement: str, script: str, *args: str) -> dict:
    """One measurement in a fresh process whose MiniCluster runs with ``placement``."""
    env = {**os.environ, ENV: placement}
    out = subprocess.run([sys.executable, os.path.join(HERE, script), "--measure", *args], capture_output=True, text=True,
                         env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{script} {args[0]} ({placement}) failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


class _Case:
    """One job measured both ways: ``run(placement)`` -> (job seconds, start-up seconds), its
    results checked against the first run's."""

    name = ""

    def run(self, placement: str) -> tuple[float, float]:
        raise NotImplementedError


class _WordCount(_Case):
    def __init__(self, size_mb: int) -> None:
        from corpus import generate

        self.name = f"word count {size_mb} MB"
        self.path = generate(os.path.join(ROOT, "data", f"corpus-{size_mb}mb.txt"), size_mb * 1024 * 1024)
        self.totals: tuple[int, int] | None = None

    def run(self, placement: str) -> tuple[float, float]:
        r = _measure(placement, "run.py", "millstream", self.path)
        totals = (r["words"], r["distinct"])
        if self.totals is not None and totals != self.totals:
            raise AssertionError(f"word count ({placement}) counted {totals}, an earlier run {self.totals}")
        self.totals = totals
        return r["wall_s"], r["startup_s"]


class _Windows(_Case):
    def __init__(self, events: int, work: str) -> None:
        import windows

        self.name = f"windows {events / 1e6:g} M events"
        self.paths = windows.generate(events, windows.FILES, windows.SEED)
        self.out = os.path.join(work, "windows.pickle")
        windows.measure_python(self.paths, self.out)  # the ground truth: a single-core loop
        with open(self.out, "rb") as f:
            self.sums: dict = pickle.load(f)

    def run(self, placement: str) -> tuple[float, float]:
        r = _measure(placement, "windows.py", "millstream", self.out, *self.paths)
        with open(self.out, "rb") as f:
            sums = pickle.load(f)
        if sums != self.sums:
            wrong = sum(1 for k in self.sums.keys() | sums.keys() if sums.get(k) != self.sums.get(k))
            raise AssertionError(f"windows ({placement}): {wrong} of {len(self.sums)} windows differ from the plain-Python sums")
        return r["wall_s"], r["startup_s"]


class _Nexmark(_Case):
    def __init__(self, events: int, queries: list[str], work: str) -> None:
        from nexmark import check, generator, reference

        self.name = f"Nexmark {events / 1e3:g} k events, {'+'.join(queries)}"
        self.queries = queries
        config = generator.Config()
        self.paths = generator.generate(events, 4, 29, config)
        check_events = min(20_000, events)
        self.check_paths = generator.generate(check_events, 4, 29, config)
        self.disorder = config.max_disorder_ms() + 1
        parsed = reference.read(self.check_paths)
        self.answers = {q: reference.answer(q, parsed) for q in queries}
        self.check = check
        self.out = os.path.join(work, "nexmark.pickle")
        self.per_query: dict[str, dict[str, list[float]]] = {q: {p: [] for p in PLACEMENTS} for q in queries}

    def run(self, placement: str) -> tuple[float, float]:
        r = _measure(placement, os.path.join("nexmark", "bench.py"), "millstream", "--check-paths", ",".join(self.check_paths),
                     "--checkpointed", "", ",".join(self.queries), str(self.disorder), self.out, *self.paths)
        with open(self.out, "rb") as f:
            rows = pickle.load(f)["rows"]
        for query in self.queries:
            self.check.check(query, self.answers[query], rows[query])  # raises naming the difference
            self.per_query[query][placement].append(r["job_s"][query])
        return sum(r["job_s"][q] for q in self.queries), r["startup_s"]


def report(pairs: int = 3, wordcount_mb: int = 5, windows_events: int = 1_000_000, nexmark_events: int = 200_000,
           queries: tuple[str, ...] = ("q1", "q3", "q5"), only: tuple[str, ...] = ("wordcount", "windows", "nexmark")) -> dict:
    """Runs, checks and prints; returns {case: {placement: [job s], "ratios": [slot/task per pair]}}."""
    work = tempfile.mkdtemp(prefix="millstream-bench-placement-")
    cases: list[_Case] = []
    if "wordcount" in only:
        cases.append(_WordCount(wordcount_mb))
    if "windows" in only:
        cases.append(_Windows(windows_events, work))
    if "nexmark" in only:
        cases.append(_Nexmark(nexmark_events, list(queries), work))
    load = os.getloadavg()
    print(f"\ntask placement: {pairs} pairs of fresh processes per job, order alternating; load average at start "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")
    runs: dict[str, dict] = {c.name: {"task": [], "slot": [], "startup": {"task": [], "slot": []}, "ratios": []} for c in cases}
    for i in range(pairs):
        for case in cases:
            pair: dict[str, float] = {}
            for placement in (PLACEMENTS if i % 2 == 0 else PLACEMENTS[::-1]):
                job_s, startup_s = case.run(placement)
                pair[placement] = job_s
                runs[case.name][placement].append(job_s)
                runs[case.name]["startup"][placement].append(startup_s)
            runs[case.name]["ratios"].append(pair["slot"] / pair["task"])
            print(f"  pair {i + 1}, {case.name}: task {pair['task']:.2f} s, slot {pair['slot']:.2f} s "
                  f"(load {os.getloadavg()[0]:.2f})", flush=True)
    print(f"{'job only, medians':<40}{'task s':>9}{'slot s':>9}{'slot/task':>11}   start-up task / slot s")
    for case in cases:
        r = runs[case.name]
        print(f"{case.name:<40}{statistics.median(r['task']):>9.2f}{statistics.median(r['slot']):>9.2f}"
              f"{statistics.median(r['ratios']):>10.2f}x   {statistics.median(r['startup']['task']):.1f} / "
              f"{statistics.median(r['startup']['slot']):.1f}")
        if isinstance(case, _Nexmark):
            for query, times in case.per_query.items():
                print(f"  {query:<38}{statistics.median(times['task']):>9.2f}{statistics.median(times['slot']):>9.2f}")
    print(f"every run's results agree; load average at the end {os.getloadavg()[0]:.2f}")
    return runs


def headline(runs: dict) -> list:
    """The README table's figures: each job's median slot/task ratio (below 1: slot is faster)."""
    from table import Figure

    return [Figure(f"placement.{name.split()[0].lower()}_slot_vs_task", f"{name}: job time, task placement slot / task",
                   statistics.median(r["ratios"]), "x", "lower") for name, r in runs.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--wordcount-mb", type=int, default=5)
    parser.add_argument("--windows-events", type=int, default=1_000_000)
    parser.add_argument("--nexmark-events", type=int, default=200_000)
    parser.add_argument("--queries", default="q1,q3,q5")
    parser.add_argument("--only", default="wordcount,windows,nexmark", help="comma-separated: wordcount, windows, nexmark")
    a = parser.parse_args()
    only = tuple(x.strip() for x in a.only.split(",") if x.strip())
    unknown = set(only) - {"wordcount", "windows", "nexmark"}
    if unknown or a.pairs < 1:
        raise SystemExit(f"--only: unknown {', '.join(sorted(unknown))}" if unknown else f"--pairs must be positive, got {a.pairs}")
    started = time.perf_counter()
    report(a.pairs, a.wordcount_mb, a.windows_events, a.nexmark_events,
           tuple(q.strip() for q in a.queries.split(",") if q.strip()), only)
    print(f"took {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
