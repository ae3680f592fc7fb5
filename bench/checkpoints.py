"""Checkpoint benchmarks (issue 9), one command: ``python bench/checkpoints.py`` (``--only`` one of them).

1. throughput: run.py's exchange job (generator -> rebalance -> sink, 2 + 2 tasks on two
   TaskManagers) without checkpoints and with ``enable_checkpointing(1000)``, measured the same
   way (wall time of ``env.execute``), alternating, ``--pairs`` times each; the checkpointed runs
   report how many checkpoints the job completed (from its summary): a run with none is an error.
2. recovery: a JobManager and 3 TaskManagers (2 slots each) as processes with 1 s / 5 s
   heartbeats; a checkpointed keyed job (generator -> key_by -> reduce -> FileSink, parallelism 2,
   checkpoints every second, the default restart strategy: exponential delay from 1 s). After two
   completed checkpoints, ``kill -9`` of the TaskManager running source subtask 0; then, from the
   kill: the job leaves RUNNING (detection), every task RUNNING again, the first record reaching
   the sink in the new attempt (a map in front of the sink notes its wall-clock time), and the
   first checkpoint completed after the restore (the FileSink commits the new attempt's output
   on it: its first visible output). The TaskManager is replaced between runs.
3. state: 1 M keys of ValueState (a KeyedProcessFunction counting per key, parallelism 1, all keys
   in one task): once every key exists, the completed checkpoints' duration and size from the job's
   summary; the task thread's stalls while checkpoints run (the longest gaps between two records in
   the function); and the synchronous part alone, in this process, on a heap backend holding the
   same 1 M keys (TaskCheckpointer's own snapshot code).

Each measurement runs in its own process and prints one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

HEARTBEATS = ["-Dheartbeat.interval=1 s", "-Dheartbeat.timeout=5 s"]
RECOVERY_RATE = 4000  # records/s of the recovery job's source
RECOVERY_KEYS = 100
# Defaults of one run (``make bench`` takes these): ~4 minutes on the 2-core machine.
RECORDS, PAIRS, RECOVERY_RUNS, KEYS = 10_000_000, 3, 2, 1_000_000


# -- 1. throughput ------------------------------------------------------------------------------


def throughput(records: int, pairs: int, interval_ms: int = 1000) -> dict:
    from run import _run

    plain, checkpointed = [], []
    for _ in range(pairs):  # alternating, so a change of the machine's load hits both sides
        plain.append(_run("exchange", str(records), "0"))
        checkpointed.append(_run("exchange", str(records), str(interval_ms)))
    for run in checkpointed:
        if run["checkpoints_completed"] < 1:
            raise RuntimeError(f"a checkpointed exchange run completed no checkpoint: {run}")
    rate = statistics.median(r["records_per_s"] for r in plain)
    rate_ck = statistics.median(r["records_per_s"] for r in checkpointed)
    return {"records": records, "interval_ms": interval_ms, "plain": plain, "checkpointed": checkpointed,
            "median_records_per_s": rate, "median_records_per_s_checkpointed": rate_ck, "loss_pct": 100 * (1 - rate_ck / rate)}


# -- 2. recovery --------------------------------------------------------------------------------


def _recovery_functions() -> tuple[Any, Any]:
    from millstream.datastream import MapFunction

    class NotePid(MapFunction):
        """Writes its worker's pid to ``<directory>/pid-<subtask>-<attempt>``."""

        def __init__(self, directory: str) -> None:
            self.directory = directory

        def open(self, runtime_context) -> None:
            name = f"pid-{runtime_context.get_index_of_this_subtask()}-{runtime_context.get_attempt_number()}"
            Path(self.directory, name).write_text(str(os.getpid()))

        def map(self, value):
            return value

    class NoteFirstRecord(MapFunction):
        """Writes the wall-clock time of its attempt's first record to ``first-<subtask>-<attempt>``."""

        def __init__(self, directory: str) -> None:
            self.directory = directory

        def open(self, runtime_context) -> None:
            self.name = f"first-{runtime_context.get_index_of_this_subtask()}-{runtime_context.get_attempt_number()}"
            self.noted = False

        def map(self, value):
            if not self.noted:
                self.noted = True
                Path(self.directory, self.name).write_text(repr(time.time()))
            return value

    return NotePid, NoteFirstRecord


def _ancestors(pid: int) -> set[int]:
    seen = set()
    while pid > 1:
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return seen


def _poll(check: Any, timeout: float, what: str, interval: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"no {what} within {timeout:.0f} s")


def _spawn(args: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", *args], stdout=open(log, "ab"), stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)


def _stop(procs: list[subprocess.Popen]) -> None:
    """Terminates ``procs`` (last started first), killing any that does not stop within 30 s."""
    for p in reversed(procs):
        if p.poll() is None:
            p.terminate()
    for p in reversed(procs):
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()


def _recovery_run(client: Any, work: Path, tms: list[subprocess.Popen]) -> tuple[dict, subprocess.Popen]:
    from millstream.common import Encoder, WatermarkStrategy
    from millstream.datastream import StreamExecutionEnvironment
    from millstream.datastream.connectors.datagen import DataGeneratorSource
    from millstream.datastream.connectors.file_system import FileSink
    from millstream.runtime.execution_state import JobStatus

    NotePid, NoteFirstRecord = _recovery_functions()
    notes, out = work / "notes", work / "out"
    notes.mkdir()
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(1000)
    (env.from_source(DataGeneratorSource(lambda i: i, 10**9, records_per_second=RECOVERY_RATE), WatermarkStrategy.no_watermarks(), "numbers")
        .map(NotePid(str(notes)))
        .map(lambda i: (i % RECOVERY_KEYS, 1))
        .key_by(lambda t: t[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .map(NoteFirstRecord(str(notes)))
        .map(lambda t: f"{t[0]},{t[1]}")
        .sink_to(FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build()))
    job_id = client.submit(env.get_job_graph("recovery bench").proto)
    _poll(lambda: client.status(job_id).checkpoints.num_completed >= 2, 180, "two completed checkpoints", 0.2)
    pid = int((notes / "pid-0-0").read_text())
    victims = [tm for tm in tms if tm.pid in _ancestors(pid)]
    if len(victims) != 1:
        raise RuntimeError(f"source subtask 0 (pid {pid}) runs under none or several TaskManagers: {[tm.pid for tm in tms]}")
    victim = victims[0]
    before = client.status(job_id)
    victim.kill()
    killed = time.time()
    victim.wait(10)
    times: dict[str, float] = {}
    cause = ""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        s = client.status(job_id)
        now = time.time()
        status = JobStatus.from_proto(s.status)
        if status.is_terminal():
            raise RuntimeError(f"the job ended {status.name} instead of recovering: {s.failure.message}")
        if "detected" not in times and (status is not JobStatus.RUNNING or s.num_restarts > before.num_restarts):
            times["detected"] = now
            cause = s.failure.message
        if ("detected" in times and "running" not in times and status is JobStatus.RUNNING
                and s.tasks_per_state.get("RUNNING", 0) == s.num_tasks):
            times["running"] = now
        c = s.checkpoints
        if "running" in times and c.latest_restored_id > 0 and c.last_completed_id > c.latest_restored_id:
            times["committed"] = now
            restored_id, committed_id = c.latest_restored_id, c.last_completed_id
            break
        time.sleep(0.02)
    else:
        raise TimeoutError(f"no recovery within 180 s (reached: {sorted(times)})")
    firsts = [float(p.read_text()) for p in notes.glob("first-*-*") if int(p.name.rsplit("-", 1)[1]) > 0 and p.read_text()]
    if not firsts:
        raise RuntimeError("no record reached the sink in the new attempt")
    summary = client.status(job_id)
    client.cancel(job_id)
    _poll(lambda: JobStatus.from_proto(client.status(job_id).status).is_terminal(), 60, "the job's end", 0.2)
    return ({"detect_s": times["detected"] - killed, "running_s": times["running"] - killed,
             "first_record_s": min(firsts) - killed, "first_commit_s": times["committed"] - killed,
             "restored_checkpoint": restored_id, "first_checkpoint_after": committed_id,
             "restarts": summary.num_restarts, "cause": cause[:200]}, victim)


def recovery(runs: int) -> dict:
    from millstream.client.cluster_client import ClusterClient

    work = Path(tempfile.mkdtemp(prefix="millstream-bench-recovery-"))
    ready = work / "jobmanager.address"
    procs = [_spawn(["millstream.jobmanager.jobmanager", "--ready-file", str(ready), "-Djobmanager.rpc.port=0",
                     "-Djobmanager.rpc.address=127.0.0.1", f"-Dexecution.checkpointing.dir={work / 'checkpoints'}", *HEARTBEATS],
                    work / "jobmanager.log")]
    results = []
    try:
        address = _poll(lambda: ready.exists() and ready.read_text().strip(), 60, "JobManager", 0.1)

        def start_tm(i: int) -> subprocess.Popen:
            tm = _spawn(["millstream.taskmanager.taskmanager", "--jobmanager", address, "-Dtaskmanager.numberOfTaskSlots=2",
                         "-Dmillstream.spark.tasks-per-slot=3", *HEARTBEATS], work / f"taskmanager-{i}.log")
            procs.append(tm)
            return tm

        tms = [start_tm(i) for i in range(3)]
        with ClusterClient(address) as client:
            for run in range(runs):
                _poll(lambda: client.overview().taskmanagers == 3, 240, "three TaskManagers", 0.5)
                (work / f"run-{run}").mkdir()
                result, victim = _recovery_run(client, work / f"run-{run}", tms)
                results.append(result)
                tms.remove(victim)
                if run + 1 < runs:
                    tms.append(start_tm(3 + run))
    finally:
        _stop(procs)
    import shutil

    if os.environ.get("MILLSTREAM_BENCH_KEEP"):
        print(f"logs kept in {work}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return {"runs": results}


# -- 3. 1 M keys of ValueState ------------------------------------------------------------------


def _count_per_key(gaps_path: str) -> Any:
    from millstream.common import Types
    from millstream.datastream import KeyedProcessFunction
    from millstream.datastream.state import ValueStateDescriptor

    class CountPerKey(KeyedProcessFunction):
        """A count per key in ValueState; notes every gap of over 50 ms between two of its records."""

        def __init__(self, gaps_path: str) -> None:
            self.gaps_path = gaps_path

        def open(self, runtime_context) -> None:
            self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))
            self.last = None

        def process_element(self, value, ctx):
            now = time.perf_counter()
            if self.last is not None and now - self.last > 0.05:
                with open(self.gaps_path, "a") as f:
                    f.write(f"{time.time()} {now - self.last}\n")
            self.count.update((self.count.value() or 0) + 1)
            self.last = time.perf_counter()
            return None

    return CountPerKey(gaps_path)


def _records_in(summary: Any, name: str) -> int:
    """Records read by the vertex named like ``name`` (0 while the job has no vertices yet)."""
    return _vertex(summary, name).records_in if summary.vertices else 0


def _vertex(summary: Any, name: str) -> Any:
    for v in summary.vertices:
        if name in v.name:
            return v
    raise LookupError(f"no vertex named like {name!r} in {[v.name for v in summary.vertices]}")


def state(keys: int, checkpoints: int = 4, interval_ms: int = 1000) -> dict:
    from millstream.client.cluster_client import ClusterClient
    from millstream.client.minicluster import MiniCluster
    from millstream.common import WatermarkStrategy
    from millstream.datastream import StreamExecutionEnvironment
    from millstream.datastream.connectors.datagen import DataGeneratorSource
    from millstream.runtime.execution_state import JobStatus
    from millstream.runtime import config as cfg

    work = Path(tempfile.mkdtemp(prefix="millstream-bench-state-"))
    gaps_path = work / "gaps"
    config = cfg.Configuration.from_dict({"execution.checkpointing.dir": str(work / "checkpoints")})
    with MiniCluster(config, num_slots=2) as cluster, ClusterClient(cluster.address) as client:
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(1)
        env.enable_checkpointing(interval_ms)
        (env.from_source(DataGeneratorSource(lambda i: i % keys, 10**12), WatermarkStrategy.no_watermarks(), "keys")
            .key_by(lambda k: k)
            .process(_count_per_key(str(gaps_path))).name("count per key")
            .add_sink(lambda r: None))
        job_id = client.submit(env.get_job_graph("1 M keys of ValueState").proto)
        started = time.time()
        # Records are reported with the heartbeats (a few seconds late): every key exists by now.
        _poll(lambda: _records_in(client.status(job_id), "count per key") >= keys, 600, f"{keys:,} records", 0.5)
        all_keys_at = time.time()
        after = client.status(job_id).checkpoints.last_completed_id
        seen: dict[int, tuple[int, int, float]] = {}
        deadline = time.monotonic() + 600
        while len([i for i in seen if i > after + 1]) < checkpoints:  # checkpoint after+1 may have started earlier
            if time.monotonic() > deadline:
                raise TimeoutError(f"fewer than {checkpoints} checkpoints completed in 600 s after every key existed")
            s = client.status(job_id)
            if JobStatus.from_proto(s.status).is_terminal():
                raise RuntimeError(f"the job ended: {s.failure.message}")
            c = s.checkpoints
            if c.last_completed_id and c.last_completed_id not in seen:
                seen[c.last_completed_id] = (c.last_duration_ms, c.last_size_bytes, time.time())
            time.sleep(0.05)
        summary = client.status(job_id)
        client.cancel(job_id)
        _poll(lambda: JobStatus.from_proto(client.status(job_id).status).is_terminal(), 60, "the job's end", 0.2)
    measured = {i: v for i, v in seen.items() if i > after + 1}
    gaps = [tuple(map(float, line.split())) for line in gaps_path.read_text().splitlines()] if gaps_path.exists() else []
    gaps_after = [g for t, g in gaps if t >= all_keys_at]
    import shutil

    shutil.rmtree(work, ignore_errors=True)
    sync = _sync_part(keys)
    return {"keys": keys, "interval_ms": interval_ms, "all_keys_after_s": all_keys_at - started,
            "checkpoints": [{"id": i, "duration_ms": d, "size_bytes": b} for i, (d, b, _) in sorted(measured.items())],
            "num_failed": summary.checkpoints.num_failed,
            "records_in": _vertex(summary, "count per key").records_in,
            "stalls_over_50ms_s": sorted(gaps_after, reverse=True)[:10], "stalls_window_s": time.time() - all_keys_at,
            **sync}


def _sync_part(keys: int) -> dict:
    """The task thread's part of a checkpoint (TaskCheckpointer._snapshot: every key group
    serialized, then the task's snapshot) on a heap backend holding ``keys`` ValueState entries, as
    the state job's one keyed subtask holds them (parallelism 1, default max parallelism)."""
    from types import SimpleNamespace

    from millstream.common import Types
    from millstream.datastream.state import ValueStateDescriptor
    from millstream.runtime.keygroups import KeyGroupRange, compute_default_max_parallelism
    from millstream.runtime.state.heap_backend import KeyedStateBackend
    from millstream.runtime.task.checkpointing import TaskCheckpointer

    max_parallelism = compute_default_max_parallelism(1)
    backend = KeyedStateBackend(max_parallelism, 1, KeyGroupRange(0, max_parallelism - 1))
    count = backend.get_value_state(ValueStateDescriptor("count", Types.LONG()))
    for key in range(keys):
        backend.set_current_key(key)
        count.update(7)
    chain = SimpleNamespace(operators=[], snapshot_keyed_state=lambda: {"count per key": backend.snapshot()},
                            snapshot_positions=lambda: {"0": keys}, env=SimpleNamespace(max_parallelism=max_parallelism))
    checkpointer = TaskCheckpointer(chain, lambda event: None, "", b"bench", lambda message: None)  # type: ignore[arg-type]
    times, size = [], 0
    for i in range(3):
        started = time.perf_counter()
        blob = checkpointer._snapshot(i + 1)
        times.append(time.perf_counter() - started)
        size = len(blob or b"")
    checkpointer.close()
    key_groups_s = []
    for _ in range(3):
        started = time.perf_counter()
        backend.snapshot()
        key_groups_s.append(time.perf_counter() - started)
    return {"sync_part_s": times, "sync_part_key_groups_s": key_groups_s, "sync_part_blob_bytes": size}


# -- the table ----------------------------------------------------------------------------------


def _measure(kind: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--measure", kind, *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{kind} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def report(only: str | None = None, records: int = RECORDS, pairs: int = PAIRS, recovery_runs: int = RECOVERY_RUNS,
           keys: int = KEYS) -> dict[str, dict]:
    """Prints the measurements and returns them by part (``throughput``, ``recovery``, ``state``) for headline()."""
    measured: dict[str, dict] = {}
    load = os.getloadavg()
    print(f"\ncheckpoints (load average at start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores)")
    if only in (None, "throughput"):
        t = measured["throughput"] = _measure("throughput", str(records), str(pairs))
        print(f"exchange, {t['records']:,} records, {pairs} runs each (alternating): no checkpoints "
              f"{t['median_records_per_s']:,.0f} records/s, checkpoints every {t['interval_ms']} ms "
              f"{t['median_records_per_s_checkpointed']:,.0f} records/s (medians): loss {t['loss_pct']:.1f} % (goal <= 10 %)")
        print("  runs without: " + ", ".join(f"{r['records_per_s']:,.0f}" for r in t["plain"]))
        print("  runs with:    " + ", ".join(f"{r['records_per_s']:,.0f} ({r['checkpoints_completed']} completed, "
                                              f"{r['checkpoints_failed']} failed, last {r['checkpoint_last_duration_ms']} ms)"
                                              for r in t["checkpointed"]))
        for r in t["checkpointed"]:
            if r.get("checkpoint_last_failure"):
                print(f"  a failed checkpoint: {r['checkpoint_last_failure'][:200]}")
    if only in (None, "recovery"):
        r = measured["recovery"] = _measure("recovery", str(recovery_runs))
        print("kill -9 of a TaskManager (3 TaskManagers, heartbeats 1 s / 5 s, checkpoints every 1 s, "
              "exponential-delay restart from 1 s), seconds from the kill:")
        for run in r["runs"]:
            print(f"  detected {run['detect_s']:.1f}, all tasks RUNNING {run['running_s']:.1f} "
                  f"({run['running_s'] - run['detect_s']:.1f} after detection), first record at the sink "
                  f"{run['first_record_s']:.1f}, first output committed {run['first_commit_s']:.1f} "
                  f"(checkpoint {run['first_checkpoint_after']} after restoring {run['restored_checkpoint']}); cause: {run['cause'][:100]}")
    if only in (None, "state"):
        s = measured["state"] = _measure("state", str(keys))
        durations = [c["duration_ms"] for c in s["checkpoints"]]
        sizes = [c["size_bytes"] for c in s["checkpoints"]]
        print(f"{s['keys']:,} keys of ValueState, one keyed task, checkpoints every {s['interval_ms']} ms, once every key existed "
              f"({s['all_keys_after_s']:.0f} s): {len(durations)} checkpoints, duration {min(durations)}-{max(durations)} ms, "
              f"size {min(sizes) / 1e6:.1f}-{max(sizes) / 1e6:.1f} MB; {s['num_failed']} failed")
        print(f"  synchronous part (in process, same code): {min(s['sync_part_s']) * 1000:.0f}-{max(s['sync_part_s']) * 1000:.0f} ms "
              f"(the key groups alone {min(s['sync_part_key_groups_s']) * 1000:.0f} ms), blob {s['sync_part_blob_bytes'] / 1e6:.1f} MB")
        stalls = ", ".join(f"{g * 1000:.0f}" for g in s["stalls_over_50ms_s"]) or "none"
        print(f"  task-thread stalls over 50 ms in the job during {s['stalls_window_s']:.0f} s (longest first, ms): {stalls}")
    return measured


def headline(measured: dict[str, dict]) -> list:
    """The README table's figures of whichever parts report() measured."""
    from table import Figure

    figures = []
    if "throughput" in measured:
        t = measured["throughput"]
        figures += [
            Figure("checkpoints.records_per_s_checkpointed", f"exchange with 1 s checkpoints, {t['records'] / 1e6:g} M records, "
                   "median", t["median_records_per_s_checkpointed"], "records/s", "higher"),
            Figure("checkpoints.loss_pct", "throughput lost to 1 s checkpoints (medians of alternating runs)",
                   t["loss_pct"], "%", "lower", "≤ 10 %", signed=True),
        ]
    if "recovery" in measured:
        runs = measured["recovery"]["runs"]
        figures += [
            Figure("checkpoints.recovery_detect_s", "kill -9 of a TaskManager: detected after (median)",
                   statistics.median(r["detect_s"] for r in runs), "s", "lower"),
            Figure("checkpoints.recovery_running_after_detection_s", "kill -9 of a TaskManager: every task RUNNING again, "
                   "after detection (median)", statistics.median(r["running_s"] - r["detect_s"] for r in runs), "s", "lower", "< 10 s"),
            Figure("checkpoints.recovery_first_commit_s", "kill -9 of a TaskManager: first output committed after the kill (median)",
                   statistics.median(r["first_commit_s"] for r in runs), "s", "lower"),
        ]
    if "state" in measured:
        s = measured["state"]
        figures += [
            Figure("checkpoints.state_duration_ms", f"checkpoint of {s['keys'] / 1e6:g} M keys: longest, trigger to last ack",
                   max(c["duration_ms"] for c in s["checkpoints"]), "ms", "lower"),
            Figure("checkpoints.state_size_mb", f"checkpoint of {s['keys'] / 1e6:g} M keys: size",
                   max(c["size_bytes"] for c in s["checkpoints"]) / 1e6, "MB", "lower"),
            Figure("checkpoints.state_sync_part_ms", f"checkpoint of {s['keys'] / 1e6:g} M keys: synchronous part on the task "
                   "thread (longest)", max(s["sync_part_s"]) * 1000, "ms", "lower"),
        ]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=["throughput", "recovery", "state"])
    parser.add_argument("--records", type=int, default=RECORDS, help="exchange records per throughput run")
    parser.add_argument("--pairs", type=int, default=PAIRS, help="throughput runs without and with checkpoints")
    parser.add_argument("--recovery-runs", type=int, default=RECOVERY_RUNS)
    parser.add_argument("--keys", type=int, default=KEYS)
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("args", nargs="*", help=argparse.SUPPRESS)
    a = parser.parse_args()
    if a.measure:
        fn = {"throughput": lambda n, p: throughput(int(n), int(p)), "recovery": lambda n: recovery(int(n)),
              "state": lambda k: state(int(k))}[a.measure]
        print(json.dumps(fn(*a.args)))
        return
    report(a.only, a.records, a.pairs, a.recovery_runs, a.keys)


if __name__ == "__main__":
    main()
