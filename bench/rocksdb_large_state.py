"""Large RocksDB state on one TaskManager, one command: ``python bench/rocksdb_large_state.py``
(``--keys``, ``--value-bytes``; ``python bench/run.py --only rocksdb_large_state`` writes the README rows).

A JobManager and one TaskManager (one slot) as processes, 1 s / 5 s heartbeats. The job: a
generator of ``i % keys`` -> key_by -> a KeyedProcessFunction that keeps ``value_bytes`` random
(incompressible) bytes per key in ValueState, parallelism 1, on the embedded RocksDB backend with
incremental checkpoints every ``--interval`` s, ``state.backend.rocksdb.memory.managed`` and a
fixed per-slot budget (``--budget-mb``) for block cache and write buffers; the TaskManager's Spark
JVM heap is ``spark.driver.memory`` (``--spark-driver-memory``, through ``millstream.spark.conf``).

Measured:

1. memory: every second, the RSS of the TaskManager's process tree (the TaskManager process and
   all its descendants: the Spark JVM and its Python workers), summed; the peak while the keys are
   written and checkpointed (shared pages count once per process, so the sum over-states);
2. the state: the task's local RocksDB directory on disk once every key exists, and the first
   checkpoint completed after that (its duration, and the job's ``shared/`` directory then);
3. restore: ``kill -9`` of the TaskManager, a replacement TaskManager started at once (a standby,
   as a cluster manager would restart it); the seconds from the kill until the job's restart is
   noticed, and until the job is RUNNING again with every task RUNNING (a task reports RUNNING
   only once its state is restored, and the restored checkpoint must be that one).

Prints one JSON line. Needs ~3.5x the state on free disk (local copy, checkpoint, restore copy).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))

from checkpoints import HEARTBEATS, _poll, _records_in, _spawn, _stop  # noqa: E402

KEYS, VALUE_BYTES, BUDGET_MB, INTERVAL_S, DRIVER_MEMORY = 20_000_000, 96, 64, 60, "512m"  # Spark refuses < ~450 MB


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        out.setdefault(ppid, []).append(int(name))
    return out


def tree_rss(root: int) -> tuple[int, dict[str, int]]:
    """Bytes of RSS of ``root`` and all its descendants, and per command name."""
    children = _children()
    todo, total, per = [root], 0, {}
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            with open(f"/proc/{pid}/status") as f:
                status = f.read()
            with open(f"/proc/{pid}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
                total += rss
                per[comm] = per.get(comm, 0) + rss
    return total, per


class RssSampler(threading.Thread):
    def __init__(self, pid: int, interval: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.peak, self.peak_parts, self.samples = 0, {}, 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            total, parts = tree_rss(self.pid)
            self.samples += 1
            if total > self.peak:
                self.peak, self.peak_parts = total, parts
            self.stopped.wait(self.interval)


def du(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def _keep_bytes(value_bytes: int) -> Any:
    from millstream.common import Types
    from millstream.datastream import KeyedProcessFunction
    from millstream.datastream.state import ValueStateDescriptor

    class KeepBytes(KeyedProcessFunction):
        """``value_bytes`` fresh random bytes per key in ValueState, on every record."""

        def __init__(self, value_bytes: int) -> None:
            self.value_bytes = value_bytes

        def open(self, runtime_context) -> None:
            import random

            self.state = runtime_context.get_state(ValueStateDescriptor("payload", Types.PICKLED_BYTE_ARRAY()))
            self.random = random.Random(runtime_context.get_index_of_this_subtask())

        def process_element(self, value, ctx):
            self.state.update(self.random.randbytes(self.value_bytes))
            return None

    return KeepBytes(value_bytes)


def report(keys: int = KEYS, value_bytes: int = VALUE_BYTES, budget_mb: int = BUDGET_MB, interval_s: int = INTERVAL_S,
           work_dir: str | None = None, driver_memory: str = DRIVER_MEMORY) -> dict:
    from millstream.client.cluster_client import ClusterClient
    from millstream.common import Configuration, WatermarkStrategy
    from millstream.datastream import EmbeddedRocksDBStateBackend, StreamExecutionEnvironment
    from millstream.datastream.connectors.datagen import DataGeneratorSource
    from millstream.runtime.execution_state import JobStatus

    work = Path(tempfile.mkdtemp(prefix="millstream-bench-rocksdb-", dir=work_dir))
    need = int(3.5 * keys * (value_bytes + 40))
    free = shutil.disk_usage(work).free
    if free < need:
        raise SystemExit(f"{work}: {free / 1e9:.1f} GB free, this run needs ~{need / 1e9:.1f} GB; use fewer --keys")
    ready = work / "jobmanager.address"
    procs = [_spawn(["millstream.jobmanager.jobmanager", "--ready-file", str(ready), "-Djobmanager.rpc.port=0",
                     "-Djobmanager.rpc.address=127.0.0.1", f"-Dexecution.checkpointing.dir={work / 'checkpoints'}",
                     *HEARTBEATS], work / "jobmanager.log")]
    result: dict[str, Any] = {"keys": keys, "value_bytes": value_bytes, "budget_mb": budget_mb, "interval_s": interval_s,
                              "spark_driver_memory": driver_memory, "started": time.time(),
                              "load_start": os.getloadavg()[0]}
    local = work / "local"
    try:
        address = _poll(lambda: ready.exists() and ready.read_text().strip(), 60, "JobManager", 0.1)

        def start_tm(i: int) -> subprocess.Popen:
            tm = _spawn(["millstream.taskmanager.taskmanager", "--jobmanager", address,
                         "-Dtaskmanager.numberOfTaskSlots=1", f"-Dmillstream.spark.conf=spark.driver.memory={driver_memory}",
                         *HEARTBEATS], work / f"taskmanager-{i}.log")
            procs.append(tm)
            return tm

        tm = start_tm(0)
        sampler = RssSampler(tm.pid)
        sampler.start()
        with ClusterClient(address) as client:
            _poll(lambda: client.overview().taskmanagers == 1, 240, "the TaskManager", 0.5)
            conf = Configuration()
            conf.set_string("state.backend.rocksdb.localdir", str(local))
            conf.set_string("state.backend.rocksdb.memory.managed", "true")
            conf.set_string("state.backend.rocksdb.memory.fixed-per-slot", f"{budget_mb}mb")
            conf.set_string("execution.checkpointing.num-retained", "1")
            env = StreamExecutionEnvironment.get_execution_environment(conf)
            env.set_parallelism(1)
            env.set_state_backend(EmbeddedRocksDBStateBackend(enable_incremental_checkpointing=True))
            env.enable_checkpointing(interval_s * 1000)
            env.get_checkpoint_config().set_checkpoint_timeout(1800_000)
            (env.from_source(DataGeneratorSource(lambda i: i % keys, 10**15), WatermarkStrategy.no_watermarks(), "keys")
                .key_by(lambda k: k)
                .process(_keep_bytes(value_bytes)).name("keep bytes")
                .add_sink(lambda r: None))
            started = time.time()
            job_id = client.submit(env.get_job_graph("rocksdb large state").proto)
            _poll(lambda: _records_in(client.status(job_id), "keep bytes") >= keys, 4 * 3600, f"{keys:,} records", 2)
            all_keys = time.time()
            result["write_s"] = all_keys - started
            after = client.status(job_id).checkpoints.last_completed_id

            def checkpoint_with_every_key() -> Any:
                s = client.status(job_id)
                if JobStatus.from_proto(s.status).is_terminal():
                    raise RuntimeError(f"the job ended: {s.failure.message}")
                return s.checkpoints if s.checkpoints.last_completed_id > after + 1 else None

            c = _poll(checkpoint_with_every_key, 3600, "a checkpoint started after every key existed", 1)
            result.update(checkpoint_id=c.last_completed_id, checkpoint_s=c.last_duration_ms / 1000,
                          local_bytes=du(local), shared_bytes=du(work / "checkpoints" / job_id.hex() / "shared"))
            sampler.stopped.set()
            sampler.join()
            result.update(peak_tree_rss_bytes=sampler.peak, peak_tree_rss_parts=sampler.peak_parts,
                          rss_samples=sampler.samples, rss_now_bytes=tree_rss(tm.pid)[0])
            before = client.status(job_id)
            tm.kill()
            killed = time.time()
            tm.wait(10)
            replacement = start_tm(1)
            restore_sampler = RssSampler(replacement.pid)
            restore_sampler.start()
            times: dict[str, float] = {}
            deadline = time.monotonic() + 3600
            while time.monotonic() < deadline:
                s = client.status(job_id)
                now = time.time()
                status = JobStatus.from_proto(s.status)
                if status.is_terminal():
                    raise RuntimeError(f"the job ended {status.name} instead of recovering: {s.failure.message}")
                if "detected" not in times and (status is not JobStatus.RUNNING or s.num_restarts > before.num_restarts):
                    times["detected"] = now
                if ("detected" in times and status is JobStatus.RUNNING and s.num_tasks
                        and s.tasks_per_state.get("RUNNING", 0) == s.num_tasks):
                    times["running"] = now
                    restored = s.checkpoints.latest_restored_id
                    break
                time.sleep(0.1)
            else:
                raise TimeoutError(f"no recovery within an hour (reached: {sorted(times)})")
            restore_sampler.stopped.set()
            restore_sampler.join()
            result.update(detect_s=times["detected"] - killed, restore_running_s=times["running"] - killed,
                          restored_checkpoint=restored,
                          restore_peak_tree_rss_bytes=restore_sampler.peak,
                          restore_peak_tree_rss_parts=restore_sampler.peak_parts)
            if restored != result["checkpoint_id"]:
                raise RuntimeError(f"restored checkpoint {restored}, expected {result['checkpoint_id']}")
            result["load_end"] = os.getloadavg()[0]
            client.cancel(job_id)
            _poll(lambda: JobStatus.from_proto(client.status(job_id).status).is_terminal(), 120, "the job's end", 0.5)
    finally:
        _stop(procs)
        if os.environ.get("MILLSTREAM_BENCH_KEEP"):
            print(f"logs kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return result


def headline(r: dict[str, Any]) -> list:
    from table import Figure

    keys = f"{r['keys'] / 1e6:g} M keys x {r['value_bytes']} B"
    return [
        Figure("rocksdb_large_state.local_gb", f"RocksDB, {keys}: local state on disk", r["local_bytes"] / 1e9, "GB", "lower"),
        Figure("rocksdb_large_state.tree_rss_mb", f"... TaskManager process tree peak RSS ({r['budget_mb']} MB budget)",
               r["peak_tree_rss_bytes"] / 1e6, "MB", "lower", "< 1000 MB"),
        Figure("rocksdb_large_state.write_s", "... time to write every key", r["write_s"], "s", "lower"),
        Figure("rocksdb_large_state.checkpoint_s", "... first incremental checkpoint with every key", r["checkpoint_s"],
               "s", "lower"),
        Figure("rocksdb_large_state.restore_s", "... kill -9 of the TaskManager to RUNNING, state restored",
               r["restore_running_s"], "s", "lower"),
        Figure("rocksdb_large_state.restore_rss_mb", "... replacement TaskManager tree peak RSS while restoring",
               r["restore_peak_tree_rss_bytes"] / 1e6, "MB", "lower", "< 1000 MB"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=KEYS)
    parser.add_argument("--value-bytes", type=int, default=VALUE_BYTES)
    parser.add_argument("--budget-mb", type=int, default=BUDGET_MB)
    parser.add_argument("--interval", type=int, default=INTERVAL_S, help="checkpoint interval, seconds")
    parser.add_argument("--work-dir", default=None, help="where the cluster's files go (default: the temp dir)")
    parser.add_argument("--spark-driver-memory", default=DRIVER_MEMORY, help="the TaskManager's Spark JVM heap")
    parser.add_argument("--readme", default=None, help="also rewrite this README's rows of this benchmark")
    parser.add_argument("--from-json", default=None, help="take the result from this file (a run's JSON line)")
    a = parser.parse_args()
    started, load_start = time.time(), os.getloadavg()[0]
    if a.from_json:
        result = json.loads(Path(a.from_json).read_text().strip().splitlines()[-1])
        started, load_start = result.get("started", started), result.get("load_start", load_start)
    else:
        result = report(a.keys, a.value_bytes, a.budget_mb, a.interval, a.work_dir, a.spark_driver_memory)
        print(json.dumps(result))
    if a.readme:
        import run
        import table

        previous = table.parse_block(Path(a.readme).read_text(encoding="utf-8"))
        command = (f"python bench/rocksdb_large_state.py --keys {result['keys']} --value-bytes {result['value_bytes']} "
                   f"--budget-mb {result['budget_mb']} --interval {result['interval_s']} "
                   f"--spark-driver-memory {result['spark_driver_memory']}")
        run._write_readme(a.readme, previous, headline(result), ["rocksdb_large_state"],
                          run._generated_text(started, load_start, command))


if __name__ == "__main__":
    main()
