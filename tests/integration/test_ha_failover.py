"""JobManager failover by `kill -9` (issue 11): the leader dies while a checkpointed job runs, a
standby takes over and recovers the job from its latest completed checkpoint, and the job's
exactly-once FileSink ends up holding every input exactly once. Also twice in a row (two
standbys), and while a checkpoint is in flight (the pending checkpoint is abandoned; its id is
never used again).

Real processes throughout (test_ha_faults' Cluster: a ZooKeeper server, HA JobManagers, one HA
TaskManager, real gRPC and Spark). The recovery times printed here are the ones the README quotes
next to `make bench`'s.
"""
from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Iterator, Optional

import cloudpickle
import pytest

from millstream.common.restart_strategy import RestartStrategies
from millstream.datastream import StreamExecutionEnvironment
from millstream.jobmanager.execution_state import JobStatus
from millstream.proto import cluster_pb2 as cpb

from .harness import poll_for
from .test_checkpoints import assert_exactly_once, visible_lines
from .test_failover import Throttle, failover_job
from .test_ha_faults import Cluster, checkpointing_since_restore, finished, status_of, submit, summary_at
from .test_ha_jobmanager import JobManagerProcess
from .zookeeper import zookeeper_unavailable

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.timeout(400)

COUNT = 40_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    reason = zookeeper_unavailable()
    if reason:
        pytest.skip(reason)
    c = Cluster(tmp_path_factory.mktemp("ha-failover"))
    try:
        yield c
    finally:
        c.stop()


def running_at(jm: JobManagerProcess, job_id: bytes) -> Optional[cpb.JobSummary]:
    summary = summary_at(jm, job_id)
    return summary if summary is not None and status_of(summary) is JobStatus.RUNNING else None


def kill_leader_and_wait_for_recovery(cluster: Cluster, leader: JobManagerProcess, job_id: bytes,
                                      out: Path) -> tuple[JobManagerProcess, cpb.JobSummary, dict[str, float]]:
    """``kill -9`` of ``leader``; returns the new leader once the job checkpointed there after
    restoring, and the seconds from the kill to: a new leader, the job RUNNING there, its first
    checkpoint there (the exactly-once FileSink makes new output visible when a checkpoint completes;
    what the dead leader's last checkpoint held is committed already when the job restores)."""
    before = summary_at(leader, job_id)
    assert before is not None and before.checkpoints.last_completed_id >= 1, before
    lines_before = len(visible_lines(out))
    leader.kill()
    killed_at = time.monotonic()
    survivors = [jm for jm in cluster.jobmanagers if jm is not leader]
    new = poll_for(lambda: next((jm for jm in survivors if jm.leads()), None), 60, 0.05, "a new leader")
    times = {"leader": time.monotonic() - killed_at}
    poll_for(lambda: running_at(new, job_id), 120, 0.05, "the job RUNNING at the new leader")
    times["running"] = time.monotonic() - killed_at
    summary = poll_for(lambda: checkpointing_since_restore(new, job_id, restored=True), 120, 0.05,
                       "the job checkpointing at the new leader after its restore")
    times["output"] = time.monotonic() - killed_at
    poll_for(lambda: len(visible_lines(out)) > lines_before, 30, 0.05, "output committed after the kill")
    # It resumed from the latest checkpoint the dead leader completed (or a later one), not from scratch.
    assert summary.checkpoints.latest_restored_id >= before.checkpoints.last_completed_id, (before, summary)
    return new, summary, times


def finish(jm: JobManagerProcess, job_id: bytes, slow: Path, out: Path) -> None:
    slow.unlink()
    summary = poll_for(lambda: finished(jm, job_id), 240, 0.5, "the job to end")
    assert status_of(summary) is JobStatus.FINISHED, summary.failure.message
    assert_exactly_once(out, COUNT)


def report(what: str, times: dict[str, float], summary: cpb.JobSummary) -> None:
    print(f"{what}: new leader after {times['leader']:.1f} s, job RUNNING there after {times['running']:.1f} s, "
          f"first new output (a checkpoint there) after {times['output']:.1f} s (restored checkpoint {summary.checkpoints.latest_restored_id})")


def test_kill_9_of_the_leader_the_standby_recovers_the_job_from_its_latest_checkpoint_exactly_once(
        cluster: Cluster, tmp_path: Path) -> None:
    cluster.ensure_jobmanagers()
    leader, _ = cluster.leader_and_standby()
    cluster.wait_for_slots(leader)
    out, slow = tmp_path / "out", tmp_path / "slow"
    slow.touch()
    job_id = submit(leader, "leader killed", out, COUNT, slow)
    poll_for(lambda: (lambda s: s if s is not None and s.checkpoints.last_completed_id >= 2 else None)(
        checkpointing_since_restore(leader, job_id, restored=False)), 120, 0.2, "two checkpoints at the leader")
    poll_for(lambda: visible_lines(out), 60, 0.1, "committed output before the kill")
    new, summary, times = kill_leader_and_wait_for_recovery(cluster, leader, job_id, out)
    report("kill -9 of the leader", times, summary)
    finish(new, job_id, slow, out)


def test_the_leader_killed_twice_in_a_row_with_two_standbys_the_output_is_exactly_once(
        cluster: Cluster, tmp_path: Path) -> None:
    cluster.ensure_jobmanagers(3)
    leader = poll_for(lambda: next((jm for jm in cluster.jobmanagers if jm.leads()), None), 60, 0.1, "a leader")
    cluster.wait_for_slots(leader)
    out, slow = tmp_path / "out", tmp_path / "slow"
    slow.touch()
    job_id = submit(leader, "leader killed twice", out, COUNT, slow)
    poll_for(lambda: checkpointing_since_restore(leader, job_id, restored=False), 120, 0.2, "a checkpoint at the leader")
    restored = []
    for round_ in (1, 2):
        leader, summary, times = kill_leader_and_wait_for_recovery(cluster, leader, job_id, out)
        report(f"kill -9 of the leader, {round_} of 2", times, summary)
        restored.append(summary.checkpoints.latest_restored_id)
    assert restored[1] > restored[0]  # the second recovery starts from the first one's newer checkpoint
    finish(leader, job_id, slow, out)


def checkpoint_ids_on_disk(cluster: Cluster, job_id: bytes) -> set[int]:
    directory = Path(cluster.options["execution.checkpointing.dir"]) / job_id.hex()
    return {int(m.group(1)) for p in directory.glob("chk-*") if (m := re.fullmatch(r"chk-(\d+)", p.name))}


def test_the_leader_killed_during_a_checkpoint_the_pending_one_is_abandoned_and_its_id_never_reused(
        cluster: Cluster, tmp_path: Path) -> None:
    cluster.ensure_jobmanagers()
    leader, _ = cluster.leader_and_standby()
    cluster.wait_for_slots(leader)
    out, slow = tmp_path / "out", tmp_path / "slow"
    slow.touch()
    # Slow after the keyed exchange: the barriers queue behind buffered records there, so a
    # checkpoint stays in flight for a while (the sources run at full speed, backpressured).
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(300)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(20, 200))
    failover_job(env, out, COUNT, [], [Throttle(str(slow), 0.002)])
    name = "leader killed during a checkpoint"
    request = cpb.SubmitJobRequest(submission_id=name, job_graph=env.get_job_graph(name).proto.SerializeToString())
    job_id = bytes(leader.dispatcher.SubmitJob(request, timeout=30).job_id)

    def in_flight_after_one_completed() -> Optional[cpb.JobSummary]:
        summary = running_at(leader, job_id)
        c = summary.checkpoints if summary is not None else None
        return summary if c is not None and c.last_completed_id >= 1 and c.num_in_progress >= 1 else None
    poll_for(in_flight_after_one_completed, 180, 0.02, "a checkpoint in flight after one completed")
    started_before_kill = checkpoint_ids_on_disk(cluster, job_id)
    new, summary, times = kill_leader_and_wait_for_recovery(cluster, leader, job_id, out)
    report("kill -9 of the leader during a checkpoint", times, summary)
    # Ids the dead leader handed out (completed or pending) are never handed out again.
    assert summary.checkpoints.last_completed_id > max(started_before_kill), (started_before_kill, summary)
    finish(new, job_id, slow, out)
