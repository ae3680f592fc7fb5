"""Rescale benchmark (issue 28), one command: ``python bench/rescale.py [--keys N] [--runs R]``.

A JobManager in reactive mode (the adaptive scheduler; stabilization timeout 0, Flink's reactive
default), one TaskManager with one slot, and a checkpointed keyed job at full speed: generator ->
``(i % keys, 1)`` -> key_by -> reduce -> a map that notes the wall-clock time of its output ->
discarding sink; checkpoints every 2 s. Once every key is in the keyed state (the source emitted
``keys`` records and a checkpoint completed after that), a second TaskManager starts; then, in
seconds:

- registration -> running: from the new TaskManager's registration at the JobManager to the job
  running at parallelism 2 (every task RUNNING): the rescale's checkpoint restore of ``keys``
  keys, redeployment, and the new TaskManager's first tasks;
- pause: the longest gap between output records around the rescale (notes at most every 20 ms
  per subtask, so the gap is exact to ~20 ms), what a downstream consumer sees;
- the checkpoint the rescale restored: its size.

Each run starts a fresh cluster. The new TaskManager registers once its Spark Python workers are
warm, so the figure holds no Spark start-up.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from checkpoints import _poll, _spawn  # noqa: E402

HEARTBEATS = ["-Dheartbeat.interval=1 s", "-Dheartbeat.timeout=5 s"]


def _note_output() -> Any:
    from millstream.datastream import MapFunction

    class NoteOutput(MapFunction):
        """Appends the wall-clock time of an output record to ``<dir>/out-<pid>``, at most every 20 ms."""

        def __init__(self, directory: str) -> None:
            self.directory = directory

        def open(self, runtime_context) -> None:
            self.file = open(Path(self.directory, f"out-{os.getpid()}-{time.monotonic_ns()}"), "a", buffering=1)
            self.last = 0.0

        def map(self, value):
            now = time.time()
            if now - self.last >= 0.02:
                self.last = now
                self.file.write(f"{now}\n")
            return value

        def close(self) -> None:
            self.file.close()

    return NoteOutput


def _running(client: Any, job_id: bytes, parallelism: int) -> bool:
    summary = client.status(job_id)
    vertices = list(summary.vertices)
    return bool(vertices) and all(set(v.tasks_per_state) == {"RUNNING"} and v.parallelism == parallelism
                                  and v.tasks_per_state["RUNNING"] == parallelism for v in vertices)


def one_run(work: Path, keys: int) -> dict:
    from millstream.client.cluster_client import ClusterClient
    from millstream.common import WatermarkStrategy
    from millstream.datastream import StreamExecutionEnvironment
    from millstream.datastream.connectors.datagen import DataGeneratorSource

    procs: list[subprocess.Popen] = []
    ready = work / "jm.address"
    try:
        procs.append(_spawn(["millstream.jobmanager.jobmanager", "--ready-file", str(ready), "-Djobmanager.rpc.port=0",
                             "-Djobmanager.rpc.address=127.0.0.1", "-Dscheduler-mode=reactive",
                             f"-Dexecution.checkpointing.dir={work / 'checkpoints'}", *HEARTBEATS], work / "jm.log"))
        address = _poll(lambda: ready.exists() and ready.read_text().strip(), 60, "JobManager", 0.1)

        def taskmanager(i: int) -> subprocess.Popen:
            return _spawn(["millstream.taskmanager.taskmanager", "--jobmanager", address,
                           "-Dtaskmanager.numberOfTaskSlots=1", "-Dmillstream.spark.tasks-per-slot=3", *HEARTBEATS],
                          work / f"taskmanager-{i}.log")

        procs.append(taskmanager(0))
        notes = work / "notes"
        notes.mkdir()
        env = StreamExecutionEnvironment.get_execution_environment()
        env.enable_checkpointing(2000)
        (env.from_source(DataGeneratorSource(lambda i: i), WatermarkStrategy.no_watermarks(), "numbers")
            .map(lambda i, k=keys: (i % k, 1))
            .key_by(lambda t: t[0])
            .reduce(lambda a, b: (a[0], a[1] + b[1]))
            .map(_note_output()(str(notes)))
            .add_sink(lambda t: None))
        with ClusterClient(address) as client:
            _poll(lambda: client.overview().taskmanagers == 1, 240, "the first TaskManager", 0.2)
            job_id = client.submit(env.get_job_graph("rescale bench").proto)
            _poll(lambda: _running(client, job_id, 1), 240, "the job running at parallelism 1", 0.2)
            filled = time.monotonic()
            _poll(lambda: client.status(job_id).vertices[0].records_out >= keys, 1800, f"{keys} records", 0.5)
            fill_s = time.monotonic() - filled
            done = client.status(job_id).checkpoints.num_completed
            _poll(lambda: client.status(job_id).checkpoints.num_completed >= done + 1, 300, "a checkpoint of every key", 0.2)
            checkpoint_bytes = client.status(job_id).checkpoints.last_size_bytes
            procs.append(taskmanager(1))
            _poll(lambda: client.overview().taskmanagers == 2, 240, "the second TaskManager", 0.01)
            registered = time.time()
            load = os.getloadavg()[0]  # the machine's load when the rescale began (the figures depend on it)
            _poll(lambda: _running(client, job_id, 2), 300, "the job running at parallelism 2", 0.02)
            running = time.time()
            time.sleep(5)  # output at the new parallelism
            client.cancel(job_id)
        stamps = sorted(float(line) for path in notes.iterdir() for line in path.read_text().split())
        window = [t for t in stamps if registered - 5 <= t <= running + 5]
        gap = max((b - a for a, b in zip(window, window[1:])), default=float("nan"))
        return {"keys": keys, "fill_s": round(fill_s, 1), "checkpoint_mb": round(checkpoint_bytes / 1e6, 1),
                "registration_to_running_s": round(running - registered, 2), "pause_s": round(gap, 2),
                "load_average_1m": round(load, 1)}
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=1)
    a = parser.parse_args()
    if a.keys < 1 or a.runs < 1:
        parser.error("--keys and --runs must be at least 1")
    results = []
    for run in range(a.runs):
        work = Path(tempfile.mkdtemp(prefix="millstream-rescale-"))
        try:
            result = one_run(work, a.keys)
        except BaseException:
            print(f"run {run + 1} failed; logs kept in {work}", file=sys.stderr)
            raise
        shutil.rmtree(work, ignore_errors=True)
        print(json.dumps(result), flush=True)
        results.append(result)
    for field in ("registration_to_running_s", "pause_s"):
        values = [r[field] for r in results]
        print(f"{field}: min {min(values)} median {statistics.median(values)} max {max(values)}")


if __name__ == "__main__":
    main()
