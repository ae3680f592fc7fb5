"""JobManager failover benchmark (issue 11), one command: ``python bench/ha_failover.py`` (``make bench`` runs it).

A local ZooKeeper (Debian's package), two JobManagers with ZooKeeper HA (session timeout 5 s,
Flink's production default is 60 s), two TaskManagers (2 slots each) and a checkpointed keyed job
(generator at 4,000 records/s -> key_by -> reduce -> FileSink, parallelism 2, checkpoints every
second). After two completed checkpoints, ``kill -9`` of the leader JobManager; then, from the
kill, in seconds:

- leader: the standby answers as the leader (ZooKeeper expired the dead leader's session, the
  standby's latch won, it recovered the job from HA storage);
- running: the job RUNNING at the new leader with every task RUNNING (the TaskManagers followed
  the leader, cancelled the old leader's tasks, offered their slots again, the tasks restored);
- first record: the first record reaching the sink in the recovered job (a map in front of the
  sink notes its wall-clock time);
- first commit: the first checkpoint completed after the restore (the exactly-once FileSink makes
  the new output visible then).

The floor is the session timeout: nothing can take over before ZooKeeper gives the dead leader's
session up. Each run starts a fresh cluster; the numbers are printed per run and as min/median/max.
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
import uuid
from pathlib import Path
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from checkpoints import _poll, _spawn, _stop  # noqa: E402

SESSION_TIMEOUT_S = 5
RATE = 4000
KEYS = 100
HEARTBEATS = ["-Dheartbeat.interval=1 s", "-Dheartbeat.timeout=5 s"]


def _note_first_record() -> Any:
    from millstream.datastream import MapFunction

    class NoteFirstRecord(MapFunction):
        """Writes the wall-clock time of each deployment's first record to ``first-<unique>``."""

        def __init__(self, directory: str) -> None:
            self.directory = directory

        def open(self, runtime_context) -> None:
            self.path, self.noted = Path(self.directory, f"first-{uuid.uuid4().hex}"), False

        def map(self, value):
            if not self.noted:
                self.noted = True
                self.path.write_text(repr(time.time()))
            return value

    return NoteFirstRecord


def _leads(address: str) -> bool:
    import grpc

    from millstream.proto import cluster_pb2 as cpb
    from millstream.proto import cluster_pb2_grpc as cpb_grpc
    from millstream.runtime.rpc.service import sync_channel

    channel = sync_channel(address)
    try:
        cpb_grpc.DispatcherStub(channel).ListJobs(cpb.Empty(), timeout=2)
        return True
    except grpc.RpcError:
        return False
    finally:
        channel.close()


def one_run(work: Path) -> dict:
    from millstream.client.cluster_client import ClusterClient
    from millstream.common import Encoder, WatermarkStrategy
    from millstream.datastream import StreamExecutionEnvironment
    from millstream.datastream.connectors.datagen import DataGeneratorSource
    from millstream.datastream.connectors.file_system import FileSink
    from millstream.runtime.execution_state import JobStatus
    from millstream.runtime.ha.zookeeper_server import ZooKeeperServer

    zookeeper = ZooKeeperServer(work / "zookeeper")
    zookeeper.start()
    ha = ["-Dhigh-availability.type=zookeeper", f"-Dhigh-availability.zookeeper.quorum={zookeeper.connect_string}",
          f"-Dhigh-availability.storageDir={work / 'ha'}", "-Dhigh-availability.cluster-id=/bench",
          f"-Dhigh-availability.zookeeper.client.session-timeout={SESSION_TIMEOUT_S} s"]
    jobmanagers: list[tuple[subprocess.Popen, str]] = []
    procs: list[subprocess.Popen] = []
    try:
        for i in range(2):
            ready = work / f"jm{i}.address"
            proc = _spawn(["millstream.jobmanager.jobmanager", "--ready-file", str(ready), "-Djobmanager.rpc.port=0",
                           "-Djobmanager.rpc.address=127.0.0.1", f"-Dexecution.checkpointing.dir={work / 'checkpoints'}",
                           *HEARTBEATS, *ha], work / f"jm{i}.log")
            procs.append(proc)
            jobmanagers.append((proc, _poll(lambda: ready.exists() and ready.read_text().strip(), 60, "JobManager", 0.1)))
        for i in range(2):
            procs.append(_spawn(["millstream.taskmanager.taskmanager", "-Dtaskmanager.numberOfTaskSlots=2",
                                 "-Dmillstream.spark.tasks-per-slot=3", *HEARTBEATS, *ha], work / f"taskmanager-{i}.log"))
        notes, out = work / "notes", work / "out"
        notes.mkdir()
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(2)
        env.enable_checkpointing(1000)
        (env.from_source(DataGeneratorSource(lambda i: i, 10**9, records_per_second=RATE), WatermarkStrategy.no_watermarks(), "numbers")
            .map(lambda i: (i % KEYS, 1))
            .key_by(lambda t: t[0])
            .reduce(lambda a, b: (a[0], a[1] + b[1]))
            .map(_note_first_record()(str(notes)))
            .map(lambda t: f"{t[0]},{t[1]}")
            .sink_to(FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build()))
        addresses = ",".join(address for _, address in jobmanagers)
        with ClusterClient(addresses) as client:
            _poll(lambda: client.overview().slots_total == 4, 240, "four slots at the leader", 0.2)
            job_id = client.submit(env.get_job_graph("ha failover bench").proto)
            _poll(lambda: client.status(job_id).checkpoints.num_completed >= 2, 180, "two completed checkpoints", 0.2)
            before = client.status(job_id)
            leader = next(p for p, address in jobmanagers if address == client.address)
            standby = next(address for p, address in jobmanagers if p is not leader)
            leader.kill()
            killed = time.time()
            leader.wait(10)
            times: dict[str, float] = {}
            _poll(lambda: _leads(standby), 120, "the standby to lead", 0.02)
            times["leader"] = time.time()
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                try:
                    s = client.status(job_id)
                except Exception:  # the client follows the leader; until then the job is unknown here
                    time.sleep(0.02)
                    continue
                now = time.time()
                status = JobStatus.from_proto(s.status)
                if status.is_terminal():
                    raise RuntimeError(f"the job ended {status.name} instead of recovering: {s.failure.message}")
                if "running" not in times and status is JobStatus.RUNNING and s.tasks_per_state.get("RUNNING", 0) == s.num_tasks:
                    times["running"] = now
                c = s.checkpoints
                if "running" in times and c.latest_restored_id > 0 and c.last_completed_id > c.latest_restored_id:
                    times["committed"] = now
                    restored, committed = c.latest_restored_id, c.last_completed_id
                    break
                time.sleep(0.02)
            else:
                raise TimeoutError(f"no recovery within 180 s (reached: {sorted(times)})")
            firsts = [float(t) for p in notes.glob("first-*") if (t := p.read_text()) and float(t) > killed]
            if not firsts:
                raise RuntimeError("no record reached the sink after the kill")
            client.cancel(job_id)
        return {"leader_s": times["leader"] - killed, "running_s": times["running"] - killed,
                "first_record_s": min(firsts) - killed, "first_commit_s": times["committed"] - killed,
                "restored_checkpoint": restored, "last_before_kill": before.checkpoints.last_completed_id,
                "first_checkpoint_after": committed}
    finally:
        _stop(procs)
        zookeeper.kill()


def measure(runs: int) -> dict:
    results = []
    for run in range(runs):
        work = Path(tempfile.mkdtemp(prefix="millstream-bench-ha-"))
        try:
            results.append(one_run(work))
        finally:
            if os.environ.get("MILLSTREAM_BENCH_KEEP"):
                print(f"logs kept in {work}", file=sys.stderr)
            else:
                shutil.rmtree(work, ignore_errors=True)
    return {"runs": results}


def report(runs: int) -> list[dict] | None:
    """Prints the runs' figures and returns the runs (None: skipped, ZooKeeper is missing)."""
    from millstream.runtime.ha.zookeeper_server import zookeeper_missing

    missing = zookeeper_missing()
    if missing:
        print(f"\nJobManager failover: skipped ({missing})")
        return None
    load = os.getloadavg()
    done = subprocess.run([sys.executable, __file__, "--measure", str(runs)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the failover benchmark failed:\n{done.stderr[-4000:]}")
    r = json.loads(done.stdout.strip().splitlines()[-1])["runs"]
    print(f"\nJobManager failover (load average at start {load[0]:.2f}; ZooKeeper session timeout {SESSION_TIMEOUT_S} s, "
          f"checkpoints every 1 s, {RATE:,} records/s), seconds from kill -9 of the leader:")
    for run in r:
        print(f"  standby leads {run['leader_s']:.1f}, job RUNNING there {run['running_s']:.1f}, first record at the sink "
              f"{run['first_record_s']:.1f}, first output committed {run['first_commit_s']:.1f} (restored checkpoint "
              f"{run['restored_checkpoint']}, the last before the kill {run['last_before_kill']})")
    for key, what in (("running_s", "job RUNNING"), ("first_record_s", "first record"), ("first_commit_s", "first commit")):
        values = [run[key] for run in r]
        print(f"  {what}: min {min(values):.1f}, median {statistics.median(values):.1f}, max {max(values):.1f} (goal < 15 s)")
    return r


def headline(runs: list[dict] | None) -> list:
    """The README table's figures: medians over the runs, seconds from the kill (none when skipped)."""
    from table import Figure

    if not runs:
        return []
    labels = {"leader_s": ("standby leads", ""), "running_s": ("job RUNNING on the standby", "< 15 s"),
              "first_record_s": ("first record at the sink", ""), "first_commit_s": ("first output committed", "")}
    return [Figure(f"ha.{key}", f"JobManager kill -9: {what} after (median)", statistics.median(r[key] for r in runs), "s", "lower", goal)
            for key, (what, goal) in labels.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    a = parser.parse_args()
    if a.measure:
        print(json.dumps(measure(int(a.measure))))
        return
    report(a.runs)


if __name__ == "__main__":
    main()
