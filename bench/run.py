"""Millstream benchmarks, one command: ``python bench/run.py`` (or ``make bench``).

1. word count over a generated Zipf corpus: Millstream (parallelism 2, one TaskManager) vs the same
   job written directly in PySpark, with RDDs (flatMap/map/reduceByKey on local[2]) and with
   DataFrames (split/explode/groupBy, bench/wordcount_dataframe.py, split on ``\\s+`` and on ``" "``:
   the ratios take each round's faster one) vs ``collections.Counter``: one process (the per-core
   floor) and two at once on the corpus's halves, merged (the two-core floor); then end to end, each
   a fresh ``python`` process: examples/word_count.py (embedded cluster) vs
   bench/wordcount_dataframe.py; three rounds of every engine in turn, medians; then the job 3
   times in a row on a ``millstream cluster start`` (``--session-jobs``), the first job apart;
2. exchange throughput: source -> rebalance -> sink across two TaskManagers;
3. latency: a 1,000 records/s source -> key_by -> map -> sink, emission to sink, p50/p99;
4. collect: ``execute_and_collect`` of 20 M small records, 5 runs in a row, with the JobManager's
   memory: in a JobManager process of its own (its RSS alone), and in the embedded cluster (where
   JobManager, TaskManager and client share the process, so that RSS covers all three).
5. JobManager at scale: accept and deploy a parallelism-1000 all-to-all job to fake TaskExecutors
   (real gRPC, no Spark): time, the JobManager's RSS, and its longest event-loop stall.
6. checkpoints (bench/checkpoints.py, ~4 minutes): exchange throughput with 1 s checkpoints vs none,
   recovery after ``kill -9`` of a TaskManager, duration and size of a checkpoint of 1 M keys.
7. windows (bench/windows.py): 5 M events, 10 s tumbling event-time windows keyed by 10 k users,
   sum per window: Millstream vs PySpark Structured Streaming vs a pure-Python loop.
8. JobManager failover (bench/ha_failover.py, ~2 minutes): kill -9 of the leader JobManager under a
   checkpointed job with a standby on ZooKeeper: seconds to the standby leading, the job RUNNING
   there, its first record and its first committed output.
9. start-up (bench/startup.py, ~2 minutes): the embedded cluster against a bare Spark session,
   fresh processes alternated, medians: ready, first job done, process gone; and `millstream
   cluster start` until it returns.
10. metrics overhead (bench/metrics_overhead.py, ~5 minutes): the exchange job with the tasks'
   time accounting (``metrics.task.io-timing``) on vs off, alternating runs: the throughput lost.
11. Parquet read (bench/parquet_read.py, ~2 minutes): a FileSource job with
   ParquetColumnarRowInputFormat against pyarrow alone reading the same file, rows/s.
12. Nexmark (bench/nexmark/bench.py, ~5 minutes): q0-q5, q7, q8, q11, q12 over 500 k generated
   events, Millstream against PySpark Structured Streaming, job only, events/s and the ratio per
   query; every result checked against a plain-Python answer.
13. keyed state (bench/keyed_state.py, ~2 minutes): keyed updates/s on the heap and on the RocksDB
   backend, the memory 1 M keys take on each, a full against an incremental RocksDB checkpoint.
14. SQL (bench/sql.py, ~10 minutes): SQL word count and a TUMBLE window aggregation, Millstream's SQL
   against PyFlink 2.3's SQL (Flink's JVM runtime) and Spark SQL on Structured Streaming, same files,
   one run each, every result checked; the load average printed with them.
15. large RocksDB state (bench/rocksdb_large_state.py, only with ``--only rocksdb_large_state``, ~30
   minutes, ~10 GB of disk): a TaskManager's process tree RSS under a fixed RocksDB budget while a job
   writes ``--rocksdb-keys`` keys, and kill -9 of the TaskManager to RUNNING with that state restored.
16. task placement (bench/placement.py, only with ``--only placement``, ~15 minutes): word count,
   windows and Nexmark under ``millstream.spark.task-placement`` task and slot, alternating fresh
   processes, the ratio slot / task per job.
17. SQL Calc (bench/sql_calc.py, ~10 minutes): a projection + filter SQL job over 1 M CSV rows with
   the vectorized Calc (table.exec.millstream.vectorized-calc.enabled) on and off, alternating pairs.

``--task-placement task|slot`` runs every Millstream measurement under that placement (the default:
the option's default).

Each measurement runs in its own process (one SparkContext per process) and prints one JSON line.

Every benchmark also returns its headline figures (bench/table.py): they are printed against the
previous figures in README.md's generated table (ratio new/previous, better or worse), and the table's
rows of the benchmarks that ran are rewritten at the end (``--readme PATH``: another file;
``--no-readme``: compare only).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, HERE)

import table  # noqa: E402  (bench/table.py)
from table import Figure  # noqa: E402


def _corpus(size_mb: int) -> str:
    from corpus import generate

    return generate(os.path.join(ROOT, "data", f"corpus-{size_mb}mb.txt"), size_mb * 1024 * 1024)


# -- single measurements (each in its own process) ---------------------------------------------


def _digest(counts: Any) -> str:
    """A digest of every (word, count): engines agree exactly, not only in their totals."""
    import hashlib

    return hashlib.sha256(repr(sorted(counts.items())).encode()).hexdigest()[:16]


def _counts(path: str, start: int = 0, lines: int | None = None, user_function: bool = False) -> collections.Counter[str]:
    """``collections.Counter`` of the words of ``path``'s lines from byte ``start`` (a line's first
    byte), ``lines`` of them (None: to the end); the same text-mode reading either way.
    ``user_function``: each line goes through the job's own ``split_words`` (examples/word_count.py)
    and the words of its ``(word, 1)`` pairs are counted: the work any engine running that function
    does at least, with no engine around it."""
    import io
    import itertools
    from operator import itemgetter

    counts: collections.Counter[str] = collections.Counter()
    update = counts.update
    with open(path, "rb") as raw:
        raw.seek(start)
        f = io.TextIOWrapper(raw, encoding="utf-8")
        lines_read = f if lines is None else itertools.islice(f, lines)
        if user_function:
            from word_count import split_words

            first = itemgetter(0)
            for line in lines_read:
                update(map(first, split_words(line)))
        else:
            for line in lines_read:
                update(line.split())
    return counts


def measure_counter(path: str) -> dict:
    started = time.perf_counter()
    counts = _counts(path)
    return {"wall_s": time.perf_counter() - started, "words": sum(counts.values()), "distinct": len(counts),
            "digest": _digest(counts)}


def halves(path: str) -> tuple[int, int]:
    """Where the corpus splits into two halves on a line boundary: (the second half's first byte, the
    first half's line count). Found before the clock starts, as Spark plans its input splits."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        f.seek(size // 2)
        f.readline()  # to the end of the line the middle falls in
        middle = f.tell()
        f.seek(0)
        lines = f.read(middle).count(b"\n")
    return middle, lines


def _count_half(path: str, start: int, lines: int | None, user_function: bool, conn: Any) -> None:
    conn.send(_counts(path, start, lines, user_function))
    conn.close()


def measure_counter_two(path: str, user_function: str = "false") -> dict:
    """Two ``collections.Counter`` processes at once, one per half of the corpus (by lines), until
    both are done and their Counters merged in this process: the floor of two processes on two cores.
    ``user_function`` "true": each line through the job's ``split_words`` first (see _counts)."""
    import multiprocessing

    middle, lines = halves(path)
    fork = multiprocessing.get_context("fork")
    started = time.perf_counter()
    pipes, procs = [], []
    for start, n in ((0, lines), (middle, None)):
        receive, send = fork.Pipe(duplex=False)
        procs.append(fork.Process(target=_count_half, args=(path, start, n, user_function == "true", send)))
        procs[-1].start()
        send.close()
        pipes.append(receive)
    first, second = (pipe.recv() for pipe in pipes)
    first.update(second)  # Counter.update adds counts
    wall = time.perf_counter() - started
    for proc in procs:
        proc.join()
        if proc.exitcode != 0:
            raise RuntimeError(f"a Counter process exited with {proc.exitcode}")
    return {"wall_s": wall, "words": sum(first.values()), "distinct": len(first), "digest": _digest(first)}


def measure_pyspark(path: str) -> dict:
    from operator import add

    from pyspark.sql import SparkSession

    started = time.perf_counter()
    spark = (
        SparkSession.builder.master("local[2]").appName("wordcount-rdd")
        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1").config("spark.pyspark.python", sys.executable)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    ready = time.perf_counter()
    counts = spark.sparkContext.textFile(path, 2).flatMap(str.split).map(lambda w: (w, 1)).reduceByKey(add).collect()
    done = time.perf_counter()
    spark.stop()
    return {"wall_s": done - started, "startup_s": ready - started, "job_s": done - ready,
            "words": sum(c for _, c in counts), "distinct": len(counts)}


def measure_pyspark_dataframe(path: str, split: str) -> dict:
    from wordcount_dataframe import count_words, session

    started = time.perf_counter()
    spark = session("wordcount-dataframe")
    ready = time.perf_counter()
    counts = count_words(spark, path, split)
    done = time.perf_counter()
    spark.stop()
    return {"wall_s": done - started, "startup_s": ready - started, "job_s": done - ready,
            "words": sum(counts.values()), "distinct": len(counts), "digest": _digest(counts)}


def measure_end_to_end(path: str, script: str, split: str = "") -> dict:
    """Wall time of a whole program in a fresh process, as a user runs it (``python job.py``);
    ``split``: bench/wordcount_dataframe.py's ``--split``."""
    started = time.perf_counter()
    out = subprocess.run([sys.executable, os.path.join(ROOT, script), *(["--split", split] if split else []),
                          *(["--input"] if script.startswith("examples") else []), path], capture_output=True, text=True)
    wall = time.perf_counter() - started
    if out.returncode != 0:
        raise RuntimeError(f"{script} failed:\n{out.stderr[-3000:]}")
    totals = re.search(r"total words: (\d+)\s+distinct words: (\d+)", out.stdout)
    if totals is None:
        raise RuntimeError(f"{script} printed no totals:\n{out.stdout[-2000:]}")
    return {"wall_s": wall, "words": int(totals.group(1)), "distinct": int(totals.group(2))}


def measure_millstream(path: str, address: str = "") -> dict:
    """The word count job at parallelism 2: on an embedded cluster of 2 slots, or (``address``) on
    that running cluster; job only: from its submission to the last count in hand."""
    import contextlib

    import word_count
    from word_count import build

    from millstream.client.execution import ENV_JOBMANAGER
    from millstream.client.minicluster import MiniCluster
    from millstream.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
    from millstream.runtime import config as cfg

    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if not address:  # MILLSTREAM_CONF_* apply (e.g. the task placement)
            address = stack.enter_context(MiniCluster(cfg.Configuration.from_dict(cfg.env_overrides(os.environ)),
                                                      num_slots=2)).address
        ready = time.perf_counter()
        os.environ[ENV_JOBMANAGER] = address
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_runtime_mode(RuntimeExecutionMode.BATCH)
        env.set_parallelism(2)
        env.add_python_file(word_count.__file__)
        counts = build(env, path, None)
        submitted = time.perf_counter()
        with counts.execute_and_collect("word count bench") as results:
            totals = dict(results)
        done = time.perf_counter()
    return {"wall_s": done - submitted, "startup_s": ready - started, "words": sum(totals.values()), "distinct": len(totals),
            "digest": _digest(totals)}


def _tree_cpu_s(roots: list[int]) -> float:
    """CPU seconds (user + system, with those of reaped children) of the processes under ``roots``,
    roots included, from /proc: a session cluster's JobManager, TaskManager, Spark JVM and workers."""
    ticks = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue  # gone meanwhile
            stats[int(entry)] = (int(fields[1]), sum(int(v) for v in fields[11:15]) / ticks)  # ppid; utime stime cutime cstime
    children: dict[int, list[int]] = collections.defaultdict(list)
    for pid, (ppid, _) in stats.items():
        children[ppid].append(pid)
    total, todo = 0.0, [pid for pid in roots if pid in stats]
    while todo:
        pid = todo.pop()
        total += stats[pid][1]
        todo += children[pid]
    return total


def measure_session(path: str, jobs: int) -> dict:
    """``millstream cluster start`` (one TaskManager, 2 slots), then the word count job submitted to it
    ``jobs`` times in a row, each from a fresh client process (job only), then ``cluster stop``;
    with the CPU seconds the cluster's processes used from its start's return to each job's end."""
    from startup import session_cluster

    with session_cluster() as (start_s, state):
        runs, cpu = [], [_tree_cpu_s(state["pids"])]
        for _ in range(jobs):
            runs.append(_run("millstream", path, state["jobmanager"]))
            cpu.append(_tree_cpu_s(state["pids"]))
    return {"start_s": start_s, "jobs": runs, "cluster_cpu_s": [b - a for a, b in zip(cpu, cpu[1:])]}


def measure_exchange(records: int, checkpoint_ms: int = 0, io_timing: bool = True) -> dict:
    """Records/s of source -> rebalance -> sink; ``checkpoint_ms`` > 0: the same job with
    ``enable_checkpointing(checkpoint_ms)``, its checkpoint figures read from the job's summary;
    ``io_timing``: ``metrics.task.io-timing`` (the tasks' busy / idle / backpressured accounting)."""
    from millstream.client.execution import ENV_JOBMANAGER
    from millstream.client.minicluster import MiniCluster
    from millstream.common import WatermarkStrategy
    from millstream.datastream import StreamExecutionEnvironment
    from millstream.datastream.connectors.datagen import DataGeneratorSource
    from millstream.runtime import config as cfg
    from millstream.taskmanager.spark.host import SparkHost

    import tempfile

    from millstream.client.cluster_client import ClusterClient

    checkpoints = tempfile.mkdtemp(prefix="millstream-bench-checkpoints-")
    config = cfg.Configuration.from_dict({**cfg.env_overrides(os.environ), "execution.checkpointing.dir": checkpoints,
                                          cfg.METRICS_TASK_IO_TIMING.key: "true" if io_timing else "false"})
    placement = config.get(cfg.SPARK_TASK_PLACEMENT)  # the option's (MILLSTREAM_CONF_*: --task-placement)
    with SparkHost(slots=4, tasks_per_slot=2, placement=placement) as spark, \
            MiniCluster(config, num_slots=2, spark=spark) as cluster:  # type: ignore[arg-type]
        cluster.add_task_manager()
        os.environ[ENV_JOBMANAGER] = cluster.address
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(2)
        if checkpoint_ms > 0:
            env.enable_checkpointing(checkpoint_ms)
        # Distinct ~100-byte records: pickle would store a repeated string once per buffer.
        source = DataGeneratorSource(lambda i: (i, f"{i:090d}"), count=records)
        stream = env.from_source(source, WatermarkStrategy.no_watermarks(), "generator").slot_sharing_group("sources")
        stream.rebalance().filter(lambda r: False).slot_sharing_group("sinks").add_sink(lambda r: None)
        started = time.perf_counter()
        result = env.execute("exchange bench" + (f", checkpoints every {checkpoint_ms} ms" if checkpoint_ms > 0 else ""))
        elapsed = time.perf_counter() - started
        with ClusterClient(cluster.address) as client:
            c = client.status(bytes.fromhex(result.get_job_id())).checkpoints
        figures = {"checkpoint_ms": checkpoint_ms, "checkpoints_completed": c.num_completed, "checkpoints_failed": c.num_failed,
                   "checkpoint_last_duration_ms": c.last_duration_ms, "checkpoint_last_size_bytes": c.last_size_bytes,
                   "checkpoint_last_failure": f"{c.last_failure_reason}: {c.last_failure_message}" if c.num_failed else ""}
    import pickle
    import shutil

    shutil.rmtree(checkpoints, ignore_errors=True)

    sample = [(i, f"{i:090d}") for i in range(1024)]
    size = len(pickle.dumps(sample, protocol=pickle.HIGHEST_PROTOCOL)) / len(sample)
    return {"wall_s": elapsed, "records": records, "records_per_s": records / elapsed, "mb_per_s": records * size / elapsed / 1e6,
            "io_timing": io_timing, **figures}


def measure_latency(seconds: int, rate: int) -> dict:
    from millstream.client.execution import ENV_JOBMANAGER
    from millstream.client.minicluster import MiniCluster
    from millstream.common import WatermarkStrategy
    from millstream.datastream import StreamExecutionEnvironment
    from millstream.datastream.connectors.datagen import DataGeneratorSource
    from millstream.runtime import config as cfg

    with MiniCluster(cfg.Configuration(), num_slots=2) as cluster:
        os.environ[ENV_JOBMANAGER] = cluster.address
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(1)  # the default buffer timeout (100 ms): an idle task flushes at once
        source = DataGeneratorSource(lambda i: (i % 16, time.time()), count=seconds * rate, records_per_second=rate)
        stream = env.from_source(source, WatermarkStrategy.no_watermarks(), "timestamps")
        latencies = stream.key_by(lambda r: r[0]).map(lambda r: (time.time() - r[1]) * 1000)
        with latencies.execute_and_collect("latency bench") as results:
            values = sorted(results)
    warm = values[len(values) // 10 :]  # the first records meet cold connections
    return {"records": len(values), "p50_ms": warm[len(warm) // 2], "p99_ms": warm[int(len(warm) * 0.99)], "max_ms": warm[-1]}


def _rss_mb(pid: int | str = "self") -> tuple[float, float]:
    """(current RSS, peak RSS) of a process, in MB, from /proc."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def _collect_runs(address: str, records: int, runs: int, rss: Any) -> dict:
    """``runs`` jobs collecting ``records`` ints each; checks every result exactly (count and sum)."""
    import threading

    from millstream.client.execution import ENV_JOBMANAGER
    from millstream.datastream import StreamExecutionEnvironment

    os.environ[ENV_JOBMANAGER] = address
    ok, walls, errors, idle = 0, [], [], []
    sampled_peak = [0.0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.2):
            sampled_peak[0] = max(sampled_peak[0], rss()[0])

    threading.Thread(target=sample, daemon=True).start()
    for run in range(runs):
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(2)
        started = time.perf_counter()
        try:
            count = total = 0
            with env.from_sequence(0, records - 1).execute_and_collect(f"collect {records} #{run}") as results:
                for value in results:
                    count += 1
                    total += value
            if (count, total) != (records, records * (records - 1) // 2):
                raise AssertionError(f"collected {count:,} records summing to {total}, expected {records:,}")
            ok += 1
            walls.append(time.perf_counter() - started)
        except Exception as exc:  # a failed run is the measurement: count it, go on
            errors.append(f"{type(exc).__name__}: {str(exc)[:300]}")
        time.sleep(3)  # let the finished job be retired
        idle.append(rss()[0])
    stop.set()
    return {"records": records, "runs": runs, "ok": ok, "wall_s": walls, "errors": errors,
            "peak_rss_mb": max(sampled_peak[0], rss()[1]), "idle_rss_mb": idle}


def measure_collect(records: int, runs: int, mode: str) -> dict:
    if mode == "embedded":
        from millstream.client.minicluster import MiniCluster
        from millstream.runtime import config as cfg

        with MiniCluster(cfg.Configuration(), num_slots=2) as cluster:
            before = _rss_mb()[0]
            result = _collect_runs(cluster.address, records, runs, _rss_mb)
        return {**result, "rss_before_mb": before}
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        ready = os.path.join(tmp, "jobmanager.address")
        log = open(os.path.join(tmp, "cluster.log"), "wb")
        jm = subprocess.Popen([sys.executable, "-m", "millstream.jobmanager.jobmanager", "--ready-file", ready,
                               "-Djobmanager.rpc.port=0", "-Djobmanager.rpc.address=127.0.0.1"], stdout=log, stderr=log)
        procs = [jm]
        try:
            deadline = time.monotonic() + 120
            while not os.path.exists(ready) or not open(ready).read().strip():
                if jm.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the JobManager did not start")
                time.sleep(0.1)
            address = open(ready).read().strip()
            procs.append(subprocess.Popen([sys.executable, "-m", "millstream.taskmanager.taskmanager", "--jobmanager", address,
                                           "-Dtaskmanager.numberOfTaskSlots=2"], stdout=log, stderr=log))
            from millstream.client.cluster_client import ClusterClient

            with ClusterClient(address) as client:
                while client.overview().taskmanagers < 1:
                    if procs[1].poll() is not None or time.monotonic() > deadline + 120:
                        raise RuntimeError("the TaskManager did not register")
                    time.sleep(0.2)
            before = _rss_mb(jm.pid)[0]
            result = _collect_runs(address, records, runs, lambda: _rss_mb(jm.pid))
            return {**result, "rss_before_mb": before}
        finally:
            for proc in reversed(procs):
                proc.terminate()
            for proc in reversed(procs):
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()


# -- the table -----------------------------------------------------------------------------


def _run(kind: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--measure", kind, *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{kind} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


BENCHMARKS = ["wordcount", "exchange", "latency", "collect", "scale", "checkpoints", "windows", "ha", "startup", "metrics",
              "parquet", "kafka", "nexmark", "keyed_state", "sql", "rocksdb_large_state", "placement",
              "sql_calc"]
OPT_IN = {"rocksdb_large_state",  # ~30 minutes and ~10 GB of disk: only with --only
          "placement"}  # ~15 minutes, a comparison made to choose a default


SPLITS = ("regex", "literal")  # bench/wordcount_dataframe.py --split: both measured every round


def faster_split(job_s: dict[str, float]) -> str:
    """The DataFrame variant a user would keep: the faster job of the round (ties: the first of SPLITS)."""
    missing = [split for split in SPLITS if split not in job_s]
    if missing:
        raise ValueError(f"no DataFrame job time for the split {', '.join(missing)}")
    return min(SPLITS, key=lambda split: job_s[split])


def wordcount_summary(rounds: list[dict[str, float]], session: dict | None = None) -> dict[str, float]:
    """Medians of the rounds' figures and of their own ratios (a round ran every engine in turn, so
    machine drift hits all of a round's figures alike). A round's ``frame`` is its faster DataFrame
    variant; the floors: ``counter`` (one core, halved: the issue's two-core floor), ``counter2``
    (two Counter processes at once, merged) and ``user_fn2`` (the same with the job's ``split_words``
    before the count: what any engine running that function pays at least). ``session``: measure_session()'s jobs, the first apart
    from the median of the rest."""
    if not rounds:
        raise ValueError("no word count rounds")
    rounds = [{**r, "frame": r[f"frame_{faster_split({k: r[f'frame_{k}'] for k in SPLITS})}"]} for r in rounds]

    def col(k: str) -> float:
        return statistics.median(r[k] for r in rounds)

    def ratio(k: str, base: str, scale: float = 1.0) -> float:
        return statistics.median(r[k] / (r[base] * scale) for r in rounds)

    summary = {k: col(k) for k in rounds[0]}
    summary.update(vs_rdd=ratio("mill", "rdd"), vs_frame=ratio("mill", "frame"), vs_floor=ratio("mill", "counter", 0.5),
                   vs_two_process_floor=ratio("mill", "counter2"), vs_user_function_floor=ratio("mill", "user_fn2"),
                   user_function_floor_vs_floor=ratio("user_fn2", "counter", 0.5), e2e_vs_frame=ratio("e2e_mill", "e2e_frame"))
    if session is not None:
        jobs = [job["wall_s"] for job in session["jobs"]]
        summary["session_first"] = jobs[0]
        summary["session_next"] = statistics.median(jobs[1:]) if len(jobs) > 1 else float("nan")
    return summary


def bench_wordcount(a: argparse.Namespace) -> list[Figure]:
    """``--wordcount-rounds`` rounds, each running every engine once in turn (fresh processes):
    medians per engine, and each ratio the median of the rounds' own ratios (wordcount_summary); then
    ``--session-jobs`` jobs on a session cluster."""
    path = _corpus(a.size_mb)
    rounds, truth = [], None
    for _ in range(a.wordcount_rounds):
        r = {"counter": _run("counter", path), "counter2": _run("counter_two", path),
             "user_fn2": _run("counter_two", path, "true"), "rdd": _run("pyspark", path),
             **{f"frame_{split}": _run("pyspark_dataframe", path, split) for split in SPLITS}, "mill": _run("millstream", path)}
        split = faster_split({k: r[f"frame_{k}"]["job_s"] for k in SPLITS})
        r["e2e_frame"] = _run("end_to_end", path, "bench/wordcount_dataframe.py", split)
        r["e2e_mill"] = _run("end_to_end", path, "examples/word_count.py")
        truth = truth or r["counter"]
        for name, other in r.items():
            assert (truth["words"], truth["distinct"]) == (other["words"], other["distinct"]), (name, truth, other)
            assert other.get("digest", truth["digest"]) == truth["digest"], (name, truth, other)
        rounds.append({"counter": r["counter"]["wall_s"], "counter2": r["counter2"]["wall_s"],
                       "user_fn2": r["user_fn2"]["wall_s"], "rdd": r["rdd"]["job_s"],
                       **{f"frame_{k}": r[f"frame_{k}"]["job_s"] for k in SPLITS}, "mill": r["mill"]["wall_s"],
                       "e2e_frame": r["e2e_frame"]["wall_s"], "e2e_mill": r["e2e_mill"]["wall_s"],
                       "spark_startup": r["frame_literal"]["startup_s"], "mill_startup": r["mill"]["startup_s"]})
        print(f"round {len(rounds)}: " + ", ".join(f"{k} {v:.2f}" for k, v in rounds[-1].items()) + f" (faster split: {split})",
              file=sys.stderr, flush=True)
    if truth is None:
        raise SystemExit("--wordcount-rounds: expected at least 1")
    session = None
    if a.session_jobs > 0:
        session = measure_session(path, a.session_jobs)
        for job in session["jobs"]:
            assert job["digest"] == truth["digest"], ("session", truth, job)
    m = wordcount_summary(rounds, session)
    words = truth["words"]
    print(f"\nword count, {a.size_mb} MB, {words:,} words, {truth['distinct']:,} distinct (every engine's counts agree, "
          f"word by word); {len(rounds)} rounds, medians")
    print(f"{'':<44}{'job s':>8}{'records/s':>14}{'vs RDD':>9}{'vs DataFrame':>14}")
    for label, k in (("PySpark RDD local[2]", "rdd"), ("PySpark DataFrame, split on \\s+", "frame_regex"),
                     ("PySpark DataFrame, split on \" \"", "frame_literal"), ("Millstream p=2 (embedded)", "mill")):
        vs = [r[k] / r["rdd"] for r in rounds], [r[k] / min(r[f"frame_{s}"] for s in SPLITS) for r in rounds]
        print(f"{label:<44}{m[k]:>8.1f}{words / m[k]:>14,.0f}{statistics.median(vs[0]):>9.2f}{statistics.median(vs[1]):>14.2f}"
              f"   rounds: {', '.join(f'{r[k]:.1f}' for r in rounds)}")
    print(f"{'collections.Counter, 1 core':<44}{m['counter']:>8.1f}{words / m['counter']:>14,.0f}"
          f"   two-core floor (halved): {m['counter'] / 2:.1f} s; Millstream {m['vs_floor']:.2f}x of it (goal ≤ 1.25x)")
    print(f"{'collections.Counter, 2 processes + merge':<44}{m['counter2']:>8.1f}{words / m['counter2']:>14,.0f}"
          f"   Millstream {m['vs_two_process_floor']:.2f}x of it")
    print(f"{'split_words + Counter, 2 processes + merge':<44}{m['user_fn2']:>8.1f}{words / m['user_fn2']:>14,.0f}"
          f"   Millstream {m['vs_user_function_floor']:.2f}x of it; it is {m['user_function_floor_vs_floor']:.2f}x the "
          f"two-core floor itself")
    print(f"start-up: Spark session {m['spark_startup']:.1f} s (DataFrame runs); Millstream embedded cluster {m['mill_startup']:.1f} s")
    e2e_rounds = ", ".join(f"{r['e2e_mill'] / r['e2e_frame']:.2f}x" for r in rounds)
    print(f"end to end (a fresh `python script`; the DataFrame script with the round's faster split): PySpark DataFrame "
          f"{m['e2e_frame']:.1f} s, Millstream examples/word_count.py {m['e2e_mill']:.1f} s ({m['e2e_vs_frame']:.2f}x; "
          f"rounds: {e2e_rounds})")
    if session is not None:
        jobs = ", ".join(f"{job['wall_s']:.1f} s ({cpu:.1f} s CPU)" for job, cpu in zip(session["jobs"], session["cluster_cpu_s"]))
        print(f"session cluster (`cluster start` returned in {session['start_s']:.1f} s; 1 TaskManager, 2 slots), "
              f"{len(session['jobs'])} jobs in a row, job only, each with the CPU seconds of the cluster's processes since "
              f"the previous one: {jobs}")
    return wordcount_figures(m, a.size_mb)


def wordcount_figures(m: dict[str, float], size_mb: int) -> list[Figure]:
    """The README table's word count rows of one wordcount_summary()."""
    what = f"word count {size_mb} MB"
    figures = [
        Figure("wordcount.millstream_job_s", f"{what}, job only: Millstream p=2", m["mill"], "s", "lower"),
        Figure("wordcount.rdd_job_s", f"{what}, job only: PySpark RDD local[2]", m["rdd"], "s", "lower"),
        Figure("wordcount.dataframe_job_s", f"{what}, job only: PySpark DataFrame local[2], the faster split of each round",
               m["frame"], "s", "lower"),
        Figure("wordcount.dataframe_regex_job_s", f"{what}, job only: PySpark DataFrame, split on `\\s+`", m["frame_regex"],
               "s", "lower"),
        Figure("wordcount.dataframe_literal_job_s", f"{what}, job only: PySpark DataFrame, split on `\" \"`",
               m["frame_literal"], "s", "lower"),
        Figure("wordcount.counter_s", f"{what}: collections.Counter, 1 core", m["counter"], "s", "lower"),
        Figure("wordcount.counter_two_processes_s", f"{what}: 2 collections.Counter processes on halves, merged",
               m["counter2"], "s", "lower"),
        Figure("wordcount.user_function_two_processes_s",
               f"{what}: 2 processes of the job's `split_words` + collections.Counter on halves, merged",
               m["user_fn2"], "s", "lower"),
        Figure("wordcount.vs_rdd", "word count job only: Millstream / PySpark RDD", m["vs_rdd"], "x", "lower", "≤ 0.5x"),
        Figure("wordcount.vs_dataframe", "word count job only: Millstream / PySpark DataFrame (faster split)", m["vs_frame"],
               "x", "lower", "≤ 0.65x"),
        Figure("wordcount.vs_floor", "word count job only: Millstream / (Counter 1 core / 2)", m["vs_floor"], "x", "lower",
               "≤ 1.25x"),
        Figure("wordcount.vs_two_process_floor", "word count job only: Millstream / 2 Counter processes",
               m["vs_two_process_floor"], "x", "lower"),
        Figure("wordcount.vs_user_function_floor", "word count job only: Millstream / 2 `split_words` + Counter processes",
               m["vs_user_function_floor"], "x", "lower"),
        Figure("wordcount.user_function_floor_vs_floor",
               "word count: 2 `split_words` + Counter processes / (Counter 1 core / 2), no engine at all",
               m["user_function_floor_vs_floor"], "x", "lower"),
        Figure("wordcount.millstream_end_to_end_s", f"{what}, end to end: `python examples/word_count.py` (embedded)",
               m["e2e_mill"], "s", "lower"),
        Figure("wordcount.dataframe_end_to_end_s", f"{what}, end to end: `python bench/wordcount_dataframe.py` (faster split)",
               m["e2e_frame"], "s", "lower"),
        Figure("wordcount.end_to_end_vs_dataframe", "word count end to end: Millstream / PySpark DataFrame",
               m["e2e_vs_frame"], "x", "lower", "≤ 1.0x"),
    ]
    if "session_first" in m:
        figures += [
            Figure("wordcount.session_first_job_s", f"{what}, job only: Millstream p=2 on a session cluster, first job",
                   m["session_first"], "s", "lower"),
            Figure("wordcount.session_next_job_s", f"{what}, job only: Millstream p=2 on a session cluster, next jobs (median)",
                   m["session_next"], "s", "lower"),
        ]
    return figures


def bench_exchange(a: argparse.Namespace) -> list[Figure]:
    """``--exchange-runs`` runs (one of 20 M records took 11.4 s where the next ones took 5.7-6.8 s):
    the median run."""
    runs = sorted((_run("exchange", str(a.exchange_records)) for _ in range(a.exchange_runs)), key=lambda r: r["records_per_s"])
    ex = runs[len(runs) // 2]
    each = ", ".join(f"{r['records_per_s'] / 1e6:.2f}" for r in runs)
    print(f"\nexchange source -> rebalance -> sink, 2 TaskManagers: {ex['records']:,} records, median of {len(runs)} runs: "
          f"{ex['records_per_s']:,.0f} records/s, {ex['mb_per_s']:.1f} MB/s (runs: {each} M records/s)")
    what = f"exchange, 2 TaskManagers, {ex['records'] / 1e6:g} M ~100-byte records, median run"
    return [Figure("exchange.records_per_s", what, ex["records_per_s"], "records/s", "higher", "≥ 3 M records/s"),
            Figure("exchange.mb_per_s", f"{what}, pickled bytes", ex["mb_per_s"], "MB/s", "higher")]


def bench_latency(a: argparse.Namespace) -> list[Figure]:
    lat = _run("latency", str(a.latency_seconds))
    print(f"\nlatency at 1,000 records/s (key_by -> map): p50 {lat['p50_ms']:.1f} ms, p99 {lat['p99_ms']:.1f} ms, "
          f"max {lat['max_ms']:.1f} ms over {lat['records']:,} records")
    what = "latency at 1,000 records/s, default buffer timeout"
    return [Figure("latency.p50_ms", f"{what}: p50", lat["p50_ms"], "ms", "lower"),
            Figure("latency.p99_ms", f"{what}: p99", lat["p99_ms"], "ms", "lower", "< 10 ms"),
            Figure("latency.max_ms", f"{what}: max", lat["max_ms"], "ms", "lower")]


def bench_collect(a: argparse.Namespace) -> list[Figure]:
    import statistics

    figures = []
    for mode, what in (("process", "JobManager process"), ("embedded", "embedded cluster process (JM + TM + client)")):
        c = _run("collect", str(a.collect_records), str(a.collect_runs), mode)
        walls = c["wall_s"] or [float("nan")]
        print(f"\nexecute_and_collect of {c['records']:,} ints, {mode}: {c['ok']}/{c['runs']} runs exact, "
              f"{min(walls):.1f}-{max(walls):.1f} s per run; {what} RSS: {c['rss_before_mb']:.0f} MB before, "
              f"peak {c['peak_rss_mb']:.0f} MB, idle after the runs {c['idle_rss_mb'][-1]:.0f} MB")
        for error in c["errors"]:
            print(f"  failed run: {error}")
        label = f"execute_and_collect of {c['records'] / 1e6:g} M ints, {c['runs']} runs, {mode}"
        rss = "JobManager's" if mode == "process" else "the process's"
        figures += [Figure(f"collect.{mode}_run_s", f"{label}: median run", statistics.median(walls), "s", "lower"),
                    Figure(f"collect.{mode}_peak_rss_mb", f"{label}: {rss} peak RSS", c["peak_rss_mb"], "MB", "lower"),
                    Figure(f"collect.{mode}_failed_runs", f"{label}: failed or inexact runs", c["runs"] - c["ok"], "", "lower")]
    return figures


def bench_scale(a: argparse.Namespace) -> list[Figure]:
    sc = _run("scale", str(a.scale_parallelism))
    print(f"\nJobManager, all-to-all p={sc['parallelism']} ({sc['tasks']:,} tasks, {sc['taskmanagers']} fake TaskManagers): "
          f"submission answered in {sc['submit_s'] * 1000:.0f} ms, all deployed in {sc['deployed_s']:.1f} s, "
          f"all RUNNING in {sc['running_s']:.1f} s, cancelled in {sc['cancel_s']:.1f} s")
    print(f"  JobManager RSS: {sc['rss_idle_before_mb']:.0f} MB idle, peak {sc['rss_peak_mb']:.0f} MB, "
          f"{sc['rss_after_mb']:.0f} MB after the job; longest event-loop stall {sc.get('jm_loop_max_lag_ms', float('nan')):.0f} ms "
          f"(slowest overview RPC from a probe process: {sc['probe_max_ms']:.0f} ms)")
    what = f"JobManager, all-to-all p={sc['parallelism']}"
    return [Figure("scale.submit_ms", f"{what}: submission answered", sc["submit_s"] * 1000, "ms", "lower"),
            Figure("scale.deployed_s", f"{what}: all deployed", sc["deployed_s"], "s", "lower", "< 2 s"),
            Figure("scale.running_s", f"{what}: all RUNNING", sc["running_s"], "s", "lower"),
            Figure("scale.rss_peak_mb", f"{what}: JobManager peak RSS", sc["rss_peak_mb"], "MB", "lower", "< 300 MB"),
            Figure("scale.loop_stall_ms", f"{what}: longest event-loop stall", sc.get("jm_loop_max_lag_ms", float("nan")), "ms",
                   "lower")]


def bench_checkpoints(a: argparse.Namespace) -> list[Figure]:
    import checkpoints

    return checkpoints.headline(checkpoints.report())


def bench_windows(a: argparse.Namespace) -> list[Figure]:
    import windows

    return windows.headline(windows.report())


def bench_sql(a: argparse.Namespace) -> list[Figure]:
    import sql

    return sql.headline(sql.report())


def bench_sql_calc(a: argparse.Namespace) -> list[Figure]:
    import sql_calc

    return sql_calc.headline(sql_calc.report())


def bench_ha(a: argparse.Namespace) -> list[Figure]:
    import ha_failover

    return ha_failover.headline(ha_failover.report(runs=3))


def bench_kafka(a: argparse.Namespace) -> list[Figure]:
    import kafka_pipeline

    return kafka_pipeline.headline(kafka_pipeline.report())


def bench_startup(a: argparse.Namespace) -> list[Figure]:
    import startup

    return startup.headline(startup.report(runs=a.startup_runs, cluster=True))


def bench_metrics(a: argparse.Namespace) -> list[Figure]:
    import metrics_overhead

    return metrics_overhead.headline(metrics_overhead.report())


def bench_parquet(a: argparse.Namespace) -> list[Figure]:
    import parquet_read

    return parquet_read.headline(parquet_read.report())


def bench_nexmark(a: argparse.Namespace) -> list[Figure]:
    from nexmark import bench as nexmark

    result = nexmark.report(events=a.nexmark_events, source=a.nexmark_input)
    if a.nexmark_input == "kafka":  # its own comparison, printed above: the table keeps the file input's rows
        return []
    return nexmark.headline(result)


def bench_keyed_state(a: argparse.Namespace) -> list[Figure]:
    import keyed_state

    return keyed_state.headline(keyed_state.report())


def bench_rocksdb_large_state(a: argparse.Namespace) -> list[Figure]:
    import rocksdb_large_state

    return rocksdb_large_state.headline(rocksdb_large_state.report(keys=a.rocksdb_keys))


def bench_placement(a: argparse.Namespace) -> list[Figure]:
    import placement

    return placement.headline(placement.report(pairs=a.placement_pairs))


def _git_commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" with uncommitted changes" if dirty.strip() else "")


def _generated_text(started: float, load_start: float, command: str) -> str:
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started))
    return (f"generated {when} on {os.cpu_count()} cores ({cpu}), load average {load_start:.2f} at the start and "
            f"{os.getloadavg()[0]:.2f} at the end, commit {_git_commit()}, Python {sys.version.split()[0]}, by `{command}`")


def _write_readme(path: str, previous: table.Block, figures: list[Figure], benchmarks: list[str], generated: str) -> None:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    block = table.merge(previous, figures, table.Generated(tuple(benchmarks), generated), order=BENCHMARKS)
    with open(path, "w", encoding="utf-8") as f:
        f.write(table.replace_block(text, block))
    print(f"\n{path}: the table's rows of {', '.join(benchmarks)} rewritten")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=200)
    parser.add_argument("--wordcount-rounds", type=int, default=3, help="word count: rounds of every engine in turn (medians)")
    parser.add_argument("--session-jobs", type=int, default=3,
                        help="word count: jobs in a row on a session cluster after the rounds (0: none)")
    parser.add_argument("--exchange-records", type=int, default=20_000_000)  # 5 M runs last ~1.8 s, much of it deployment
    parser.add_argument("--exchange-runs", type=int, default=3)
    parser.add_argument("--latency-seconds", type=int, default=20)
    parser.add_argument("--scale-parallelism", type=int, default=1000)
    parser.add_argument("--collect-records", type=int, default=20_000_000)
    parser.add_argument("--collect-runs", type=int, default=5)  # 10 before: ~3.5 minutes more, same figures
    parser.add_argument("--only", choices=BENCHMARKS)
    parser.add_argument("--rocksdb-keys", type=int, default=20_000_000, help="rocksdb_large_state: keys of ~96 B")
    parser.add_argument("--startup-runs", type=int, default=5)
    parser.add_argument("--nexmark-events", type=int, default=500_000)
    parser.add_argument("--task-placement", choices=("task", "slot"),
                        help="millstream.spark.task-placement of every Millstream cluster measured (default: the option's)")
    parser.add_argument("--placement-pairs", type=int, default=3, help="placement: pairs of runs, task and slot, per job")
    parser.add_argument("--nexmark-input", choices=("file", "kafka"), default="file",
                        help="nexmark: kafka writes the events to a topic on a tansu broker first and Millstream "
                             "reads it (bench/nexmark/kafka_input.py); its figures are printed, not put in the table")
    parser.add_argument("--readme", default=os.path.join(ROOT, "README.md"),
                        help="the README whose generated table holds the previous figures and gets the new ones")
    parser.add_argument("--no-readme", action="store_true", help="compare with the README's figures but do not rewrite them")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("args", nargs="*", help=argparse.SUPPRESS)
    a = parser.parse_args()
    if a.measure:
        fn = {"counter": measure_counter, "counter_two": measure_counter_two, "pyspark": measure_pyspark, "millstream": measure_millstream,
              "pyspark_dataframe": measure_pyspark_dataframe, "end_to_end": measure_end_to_end,
              "exchange": lambda n, ms="0", timing="true": measure_exchange(int(n), int(ms), timing == "true"),
              "latency": lambda s: measure_latency(int(s), 1000),
              "scale": lambda p: measure_scale(int(p)),
              "collect": lambda n, r, m: measure_collect(int(n), int(r), m)}[a.measure]
        print(json.dumps(fn(*a.args)))
        return
    if a.task_placement:  # every measurement's MiniCluster reads MILLSTREAM_CONF_* (its child processes inherit it)
        os.environ["MILLSTREAM_CONF_MILLSTREAM_SPARK_TASK_PLACEMENT"] = a.task_placement
    started, load_start = time.time(), os.getloadavg()[0]
    command = "python bench/run.py" + "".join(f" {shlex.quote(arg)}" for arg in sys.argv[1:])
    try:
        with open(a.readme, encoding="utf-8") as f:
            previous = table.parse_block(f.read())
    except FileNotFoundError:
        if not a.no_readme:
            raise SystemExit(f"--readme {a.readme}: no such file (use --no-readme to run without one)")
        previous = table.Block({}, [])
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}; previous figures: {len(previous.rows)} "
          f"from {a.readme}")
    runners = {"wordcount": bench_wordcount, "exchange": bench_exchange, "latency": bench_latency, "collect": bench_collect,
               "scale": bench_scale, "checkpoints": bench_checkpoints, "windows": bench_windows, "ha": bench_ha,
               "startup": bench_startup, "metrics": bench_metrics, "parquet": bench_parquet, "kafka": bench_kafka,
               "nexmark": bench_nexmark, "keyed_state": bench_keyed_state, "sql": bench_sql,
               "rocksdb_large_state": bench_rocksdb_large_state, "placement": bench_placement,
               "sql_calc": bench_sql_calc}
    figures: list[Figure] = []
    measured: list[str] = []
    try:
        for name in BENCHMARKS:
            if a.only not in (None, name) or (a.only is None and name in OPT_IN):
                continue
            new = runners[name](a)
            if not new:
                continue  # skipped (e.g. no ZooKeeper for ha): its previous rows stay
            print(f"{name} against the previous figures ({a.readme}):")
            for figure in new:
                before = previous.rows.get(figure.key)
                print(table.describe(table.compare(figure, table.previous_value(previous, figure))))
                if before and before[0] != figure.label:
                    print(f"    (the previous figure was: {before[0]})")
            figures += new
            measured.append(name)
    finally:  # a benchmark that failed keeps its previous rows; the ones that ran still get theirs
        if measured and not a.no_readme:
            _write_readme(a.readme, previous, figures, measured, _generated_text(started, load_start, command))


def measure_scale(parallelism: int) -> dict:
    from scale import measure_scale as measure

    return measure(parallelism)


if __name__ == "__main__":
    main()
