"""JobManager failover by `kill -9` (issue 11): the leader dies while a checkpointed job runs, a
standby takes over and recovers the job from its latest completed checkpoint, and the job's
exactly-once FileSink ends up holding every input exactly once. Also twice in a row (two
standbys), and while a checkpoint is pending (it is abandoned; its id is never used again).

Real processes throughout (ha.py's HaCluster: a ZooKeeper server, HA JobManagers, here two
HA TaskManagers with one slot each, so the job's keyed exchange crosses processes; real gRPC and
Spark). The job is test_failover's keyed running count: source -> Throttle (slow while a marker
file exists, so the job cannot end before the test lets it) -> keyed count -> FileSink.

Each failover prints the seconds from the kill to: the new leader, the job RUNNING there, all its
tasks RUNNING (restored), its first checkpoint there, and its first new output (committed lines
beyond what the restored checkpoint covers). Run with ``-s`` to see them.
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pytest

from millstream.datastream import MapFunction
from millstream.runtime.execution_state import JobStatus
from millstream.proto import cluster_pb2 as cpb

from .ha import HaCluster, JobManagerProcess, checkpointing_since_restore, finished, status_of, submit, summary_at
from .harness import poll_for
from .jobs import assert_exactly_once


pytestmark = pytest.mark.timeout(400)
HA_CLUSTER = {"taskmanagers": 2, "slots": 1}  # the job's keyed exchange crosses processes

# Slow phase: ~2 ms a record and source subtask, ~900 records/s in all, so 100,000 records take
# well over a minute. A source emits 1,024-record batches and takes a barrier only between two,
# so a checkpoint takes up to a batch's ~2 s here.
COUNT = 100_000
PAUSE_S = 0.002


class Stall(MapFunction):
    """Blocks every record while ``marker`` exists (at most ``limit_s`` at a time; looked at every
    64 records): behind it, a checkpoint's barrier cannot pass, so the checkpoint stays pending."""

    def __init__(self, marker: str, limit_s: float = 120.0) -> None:
        self.marker, self.limit_s = marker, limit_s

    def open(self, runtime_context) -> None:
        self.seen = 0

    def map(self, value):
        if self.seen % 64 == 0 and os.path.exists(self.marker):
            deadline = time.monotonic() + self.limit_s
            while os.path.exists(self.marker) and time.monotonic() < deadline:
                time.sleep(0.02)
        self.seen += 1
        return value


class CommittedLines:
    """Counts the lines of the FileSink's visible (committed) part files; a committed file never
    changes, so each is read once."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self._lines: dict[Path, int] = {}

    def __call__(self) -> int:
        if self.out.is_dir():
            for path in self.out.rglob("*"):
                if path not in self._lines and path.is_file() and not path.name.startswith("."):
                    self._lines[path] = len(path.read_bytes().splitlines())
        return sum(self._lines.values())


_CHECKPOINT_EVENT = re.compile(r"(Triggering|Completed) checkpoint (\d+)|Checkpoint (\d+) aborted")


@dataclass
class CheckpointLog:
    """The checkpoint ids one JobManager triggered, completed and aborted in its log after ``offset``."""
    triggered: list[int] = field(default_factory=list)
    completed: set[int] = field(default_factory=set)
    aborted: set[int] = field(default_factory=set)

    @classmethod
    def read(cls, jm: JobManagerProcess, offset: int) -> "CheckpointLog":
        found = cls()
        with open(jm.log_path, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
        for m in _CHECKPOINT_EVENT.finditer(text):
            if m.group(1) == "Triggering":
                found.triggered.append(int(m.group(2)))
            elif m.group(1) == "Completed":
                found.completed.add(int(m.group(2)))
            else:
                found.aborted.add(int(m.group(3)))
        return found

    @property
    def pending(self) -> set[int]:
        return set(self.triggered) - self.completed - self.aborted


def log_offset(jm: JobManagerProcess) -> int:
    return jm.log_path.stat().st_size


def leading(ha_cluster: HaCluster) -> JobManagerProcess:
    return poll_for(lambda: next((jm for jm in ha_cluster.jobmanagers if jm.leads()), None), 60, 0.1, "a leader")


def checkpoints_at_least(jm: JobManagerProcess, job_id: bytes, n: int) -> Optional[cpb.JobSummary]:
    summary = checkpointing_since_restore(jm, job_id, restored=False)
    return summary if summary is not None and summary.checkpoints.num_completed >= n else None


def tasks_running(jm: JobManagerProcess, job_id: bytes) -> Optional[cpb.JobSummary]:
    summary = summary_at(jm, job_id)
    if summary is None or status_of(summary) is not JobStatus.RUNNING:
        return None
    return summary if summary.tasks_per_state.get("RUNNING", 0) == summary.num_tasks > 0 else None


@dataclass
class Recovery:
    new_leader: JobManagerProcess
    summary: cpb.JobSummary     # at the new leader, once it completed a checkpoint after restoring
    seconds: dict[str, float]   # from the kill
    dead: CheckpointLog         # what the killed leader did with checkpoints of the job
    new: CheckpointLog          # what the new leader did up to ``summary``
    new_offset: int             # the new leader's log offset at the kill


def kill_leader_and_recover(ha_cluster: HaCluster, leader: JobManagerProcess, since: int, job_id: bytes,
                            out: Path, after_kill: Optional[Path] = None) -> Recovery:
    """``kill -9`` of ``leader`` (its log read from offset ``since`` on); ``after_kill``: a marker
    deleted right after the kill. Waits until the job restored at a new leader and its new output is
    committed, checks it resumed from the dead leader's latest completed checkpoint with none of its
    checkpoint ids reused, and returns the times."""
    before = summary_at(leader, job_id)
    assert before is not None and before.checkpoints.last_completed_id >= 1, before
    committed = CommittedLines(out)
    survivors = [jm for jm in ha_cluster.jobmanagers if jm is not leader]
    offsets = {id(jm): log_offset(jm) for jm in survivors}
    leader.kill()
    killed_at = time.monotonic()
    if after_kill is not None:
        after_kill.unlink()
    seconds: dict[str, float] = {}

    def mark(what: str) -> None:
        seconds[what] = time.monotonic() - killed_at
    new = poll_for(lambda: next((jm for jm in survivors if jm.leads()), None), 60, 0.05, "a new leader")
    mark("leader")
    poll_for(lambda: (lambda s: s is not None and status_of(s) is JobStatus.RUNNING)(summary_at(new, job_id)),
             120, 0.05, "the job RUNNING at the new leader")
    mark("running")
    restored = poll_for(lambda: tasks_running(new, job_id), 120, 0.05, "every task RUNNING at the new leader")
    mark("tasks")
    covered = committed()  # the restored tasks committed what their checkpoint covers before running
    summary = poll_for(lambda: checkpointing_since_restore(new, job_id, restored=True), 120, 0.05,
                       "a checkpoint at the new leader after its restore")
    mark("checkpoint")
    poll_for(lambda: committed() > covered, 60, 0.05, "new output committed after the restore")
    mark("output")

    dead = CheckpointLog.read(leader, since)
    new_log = CheckpointLog.read(new, offsets[id(new)])
    # Resumed from the latest checkpoint the dead leader completed, not from scratch.
    assert dead.completed and restored.checkpoints.latest_restored_id == max(dead.completed), (dead, restored)
    assert summary.checkpoints.latest_restored_id == max(dead.completed)
    # Every id the dead leader handed out (completed, pending or aborted) stays its own.
    assert new_log.triggered and min(new_log.triggered) > max(dead.triggered), (dead, new_log)
    assert new_log.triggered == sorted(set(new_log.triggered)), new_log
    # The recovered job keeps its start time and goes on counting its checkpoints (the counts and
    # history its latest completed checkpoint kept), as the dead leader showed them.
    assert summary.start_time_ms == before.start_time_ms
    assert summary.checkpoints.num_completed >= len(dead.completed) + 1, (dead, summary.checkpoints)
    assert max(dead.completed) in {h.id for h in summary.checkpoints.history if h.status == "COMPLETED"}
    return Recovery(new, summary, seconds, dead, new_log, offsets[id(new)])


def report(what: str, r: Recovery) -> None:
    s = r.seconds
    print(f"\n{what}: new leader after {s['leader']:.1f} s, job RUNNING there after {s['running']:.1f} s, "
          f"its tasks restored and RUNNING after {s['tasks']:.1f} s, first checkpoint there after "
          f"{s['checkpoint']:.1f} s, first new output committed after {s['output']:.1f} s "
          f"(restored checkpoint {r.summary.checkpoints.latest_restored_id}; the dead leader's ids "
          f"{min(r.dead.triggered)}..{max(r.dead.triggered)}, pending at the kill {sorted(r.dead.pending)}; "
          f"the new leader's from {min(r.new.triggered)})")


def finish(jm: JobManagerProcess, job_id: bytes, slow: Path, out: Path) -> None:
    slow.unlink()
    summary = poll_for(lambda: finished(jm, job_id), 240, 0.5, "the job to end")
    assert status_of(summary) is JobStatus.FINISHED, summary.failure.message
    assert_exactly_once(out, COUNT)


def start_job(ha_cluster: HaCluster, jobmanagers: int, name: str, tmp_path: Path,
              stall: Optional[Path] = None) -> tuple[JobManagerProcess, int, bytes, Path, Path]:
    """The job submitted to the leader of ``jobmanagers`` JobManagers once every slot is free there;
    returns the leader, its log offset before the job, the job id, the output and slow marker."""
    ha_cluster.ensure_jobmanagers(jobmanagers)
    leader = leading(ha_cluster)
    ha_cluster.wait_for_slots(leader)
    out, slow = tmp_path / "out", tmp_path / "slow"
    slow.touch()
    since = log_offset(leader)
    job_id = submit(leader, name, out, COUNT, slow, PAUSE_S, [Stall(str(stall))] if stall is not None else [])
    return leader, since, job_id, out, slow


def test_kill_9_of_the_leader_the_standby_recovers_the_job_from_its_latest_checkpoint_exactly_once(
        ha_cluster: HaCluster, tmp_path: Path) -> None:
    leader, since, job_id, out, slow = start_job(ha_cluster, 2, "leader killed", tmp_path)
    poll_for(lambda: checkpoints_at_least(leader, job_id, 2), 120, 0.2, "two checkpoints at the leader")
    poll_for(CommittedLines(out), 60, 0.1, "committed output before the kill")
    recovery = kill_leader_and_recover(ha_cluster, leader, since, job_id, out)
    report("kill -9 of the leader", recovery)
    finish(recovery.new_leader, job_id, slow, out)


def test_the_leader_killed_twice_in_a_row_with_two_standbys_the_output_is_exactly_once(
        ha_cluster: HaCluster, tmp_path: Path) -> None:
    leader, since, job_id, out, slow = start_job(ha_cluster, 3, "leader killed twice", tmp_path)
    poll_for(lambda: checkpoints_at_least(leader, job_id, 1), 120, 0.2, "a checkpoint at the leader")
    restored = []
    for round_ in (1, 2):
        recovery = kill_leader_and_recover(ha_cluster, leader, since, job_id, out)
        report(f"kill -9 of the leader, {round_} of 2", recovery)
        restored.append(recovery.summary.checkpoints.latest_restored_id)
        leader, since = recovery.new_leader, recovery.new_offset
    assert restored[1] > restored[0]  # the second recovery starts from a checkpoint of the first new leader
    assert len([jm for jm in ha_cluster.jobmanagers if jm.proc.poll() is None]) == 1
    finish(leader, job_id, slow, out)


def test_the_leader_killed_during_a_checkpoint_the_pending_one_is_abandoned_and_its_id_never_reused(
        ha_cluster: HaCluster, tmp_path: Path) -> None:
    stall = tmp_path / "stall"
    leader, since, job_id, out, slow = start_job(ha_cluster, 2, "leader killed during a checkpoint", tmp_path, stall)
    before = poll_for(lambda: checkpoints_at_least(leader, job_id, 1), 120, 0.2, "a checkpoint at the leader")
    # The keyed count's tasks stall: the sources take the next barrier and acknowledge it, the
    # stalled tasks never do, so that checkpoint stays pending until the kill.
    stall.touch()

    def stuck() -> Optional[int]:
        summary = summary_at(leader, job_id)
        log = CheckpointLog.read(leader, since)
        if summary is None or summary.checkpoints.num_in_progress < 1 or not log.pending:
            return None
        pending = max(log.pending)
        written = Path(summary.checkpoints.directory) / f"chk-{pending}"
        acknowledged = written.is_dir() and any(p.name != "_metadata" for p in written.iterdir())
        return pending if acknowledged and summary.checkpoints.last_completed_id < pending else None
    pending = poll_for(stuck, 120, 0.1, "a checkpoint pending behind the stalled tasks, acknowledged by some")
    assert pending > before.checkpoints.last_completed_id
    chk = Path(before.checkpoints.directory) / f"chk-{pending}"
    recovery = kill_leader_and_recover(ha_cluster, leader, since, job_id, out, after_kill=stall)
    report("kill -9 of the leader during a checkpoint", recovery)
    assert pending in recovery.dead.pending, recovery.dead  # it was still pending when the leader died
    assert recovery.summary.checkpoints.latest_restored_id < pending
    assert min(recovery.new.triggered) > pending
    assert not (chk / "_metadata").exists()  # the abandoned checkpoint never completed
    finish(recovery.new_leader, job_id, slow, out)
