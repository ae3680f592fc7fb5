"""JobManager HA under faults that are not a kill (issue 11): a leader paused past its ZooKeeper
session, ZooKeeper itself restarted or down for longer than a session, and HA storage that can no
longer be read. Real processes throughout: a ZooKeeper server, two JobManagers and one TaskManager
with the HA options, real gRPC and Spark; the job is test_failover's checkpointed keyed count with
an exactly-once FileSink, so its output can be checked against ground truth.

What Flink promises and these tests hold us to:

* A leader SIGSTOPped past its session timeout is replaced; once resumed, its fenced RPCs do
  nothing: TaskManagers refuse them, it writes no checkpoint pointer or job result, it learns it
  no longer leads (its clients get "not the leader"), and the job's output is exactly once.
* ZooKeeper restarted while a job runs: the leadership is revoked while the connection is
  SUSPENDED (Flink's default, high-availability.zookeeper.client.tolerate-suspended-connections:
  false), the job is suspended (not failed, its HA data kept) and recovered from its latest
  checkpoint when ZooKeeper is back. Down for longer than the session timeout (the session LOST):
  the same, nothing fails or ends for good.
* HA storage unreadable at a failover: recovery fails loudly, naming the job and the file, and
  never starts the job from scratch; the new leader keeps serving other jobs.
"""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any, Optional

import grpc
import pytest

from millstream.proto import cluster_pb2 as cpb
from millstream.runtime import config as cfg
from millstream.runtime.execution_state import JobStatus
from millstream.runtime.ha.checkpoints import CHECKPOINTS_NODE
from millstream.runtime.ha.job_stores import JOB_GRAPHS_NODE, JOB_RESULT_STORE_DIR

from .ha import (SESSION_TIMEOUT_S, HaCluster, JobManagerProcess, checkpointing_since_restore, current_leader, fenced_call,
                 finished, status_of, submit, summary_at, timed_cli)
from .harness import poll_for
from .jobs import assert_exactly_once, visible_lines


pytestmark = pytest.mark.timeout(300)


def checkpoint_pointers(ha_cluster: HaCluster, job_id: bytes) -> dict[int, int]:
    """Checkpoint id -> number of locks on its pointer, as ZooKeeper holds them now."""
    with ha_cluster.zk() as services:
        zk, root = services.client.kazoo, services.client.path(CHECKPOINTS_NODE, job_id.hex())
        if zk.exists(root) is None:
            return {}
        return {int(name): len(zk.get_children(f"{root}/{name}/locks")) for name in zk.get_children(root)}


def job_results(ha_cluster: HaCluster, job_id: bytes) -> list[str]:
    directory = ha_cluster.storage / ha_cluster.options[cfg.HA_CLUSTER_ID.key].strip("/") / JOB_RESULT_STORE_DIR
    return sorted(p.name for p in directory.glob(f"{job_id.hex()}*")) if directory.is_dir() else []


def stored_job_graph(ha_cluster: HaCluster, job_id: bytes) -> Optional[dict[str, Any]]:
    with ha_cluster.zk() as services:
        zk = services.client.kazoo
        path = services.client.path(JOB_GRAPHS_NODE, job_id.hex())
        return json.loads(zk.get(path)[0]) if zk.exists(path) is not None else None


def refused_as_not_leader(jm: JobManagerProcess) -> Optional[str]:
    try:
        jm.list_jobs()
        return None
    except grpc.RpcError as exc:
        return exc.details() if exc.code() is grpc.StatusCode.UNAVAILABLE else None


# -- 1. the leader paused past its session timeout -------------------------------------------------


def test_a_leader_paused_past_its_session_is_replaced_and_once_resumed_its_fenced_calls_do_nothing(
        ha_cluster: HaCluster, tmp_path: Path) -> None:
    ha_cluster.ensure_jobmanagers()
    old, standby = ha_cluster.leader_and_standby()
    ha_cluster.wait_for_slots(old)
    out, slow, count = tmp_path / "out", tmp_path / "slow", 40_000
    slow.touch()
    job_id = submit(old, "paused leader", out, count, slow)
    poll_for(lambda: checkpointing_since_restore(old, job_id, restored=False), 120, 0.2, "checkpoints at the leader")
    old_leader = current_leader(ha_cluster.options)
    assert old_leader.address == old.address

    os.kill(old.proc.pid, signal.SIGSTOP)
    paused_at = time.monotonic()
    try:
        poll_for(standby.leads, 4 * SESSION_TIMEOUT_S + 30, 0.1, "the standby to lead")
        took_over = time.monotonic() - paused_at
        summary = poll_for(lambda: checkpointing_since_restore(standby, job_id, restored=True), 120, 0.2,
                           "the job recovered at the new leader, checkpointing again")
        running = time.monotonic() - paused_at
    finally:
        os.kill(old.proc.pid, signal.SIGCONT)
    print(f"SIGSTOP of the leader: standby leads after {took_over:.1f} s, the job runs there and checkpointed "
          f"after {running:.1f} s (restored checkpoint {summary.checkpoints.latest_restored_id})")
    assert old.proc.poll() is None
    new_leader = current_leader(ha_cluster.options)
    assert new_leader.address == standby.address and new_leader.session_id != old_leader.session_id

    # Resumed, the old leader learns it is deposed: its clients are sent to the leader.
    details = poll_for(lambda: refused_as_not_leader(old), 60, 0.1, "the resumed leader to refuse clients")
    assert details == f"JobManager {old.address} is not the leader"
    assert "lost its leadership" in old.log_path.read_text(errors="replace")
    # The TaskManager refuses whatever the old leader's session sends; it serves the new one.
    refused = fenced_call(ha_cluster.tm_address, str(old_leader.session_id))
    assert refused is not None and refused.code() is grpc.StatusCode.FAILED_PRECONDITION, refused
    assert refused.details().startswith("fenced: ") and str(new_leader.session_id) in refused.details()
    assert fenced_call(ha_cluster.tm_address, str(new_leader.session_id)) is None

    # HA storage holds only what the new leader wrote: its latest checkpoint, locked by it alone
    # (num-retained 1: a pointer the old leader added would stay, unknown to the new leader), no
    # job result, and the job graph.
    def pointers_are_the_new_leaders() -> bool:
        summary = summary_at(standby, job_id)
        pointers = checkpoint_pointers(ha_cluster, job_id)
        return summary is not None and pointers == {summary.checkpoints.last_completed_id: 1}
    poll_for(pointers_are_the_new_leaders, 30, 0.2, "ZooKeeper's checkpoint pointers to be the new leader's only")
    assert job_results(ha_cluster, job_id) == []
    assert stored_job_graph(ha_cluster, job_id) is not None
    assert status_of(summary_at(standby, job_id)) is JobStatus.RUNNING  # type: ignore[arg-type]

    slow.unlink()
    summary = poll_for(lambda: finished(standby, job_id), 240, 0.5, "the job to end")
    assert status_of(summary) is JobStatus.FINISHED, summary.failure.message
    assert_exactly_once(out, count)
    poll_for(lambda: job_results(ha_cluster, job_id) == [f"{job_id.hex()}.json"], 30, 0.2, "the job's clean result")
    assert old.proc.poll() is None and refused_as_not_leader(old)  # a standby now


# -- 2. ZooKeeper restarted, and down for longer than a session ------------------------------------


def test_zookeeper_restarted_or_down_past_the_session_timeout_suspends_the_job_and_it_resumes_exactly_once(
        ha_cluster: HaCluster, tmp_path: Path) -> None:
    ha_cluster.ensure_jobmanagers()
    leader, _ = ha_cluster.leader_and_standby()
    ha_cluster.wait_for_slots(leader)
    out, slow, count = tmp_path / "out", tmp_path / "slow", 40_000
    slow.touch()
    job_id = submit(leader, "zookeeper restarts", out, count, slow)
    before = poll_for(lambda: checkpointing_since_restore(leader, job_id, restored=False), 120, 0.2, "checkpoints")

    def recovered_after(last_completed: int) -> Optional[tuple[JobManagerProcess, cpb.JobSummary]]:
        for jm in ha_cluster.jobmanagers:
            summary = checkpointing_since_restore(jm, job_id, restored=True)
            if summary is not None and summary.checkpoints.last_completed_id > last_completed:
                return jm, summary
        return None

    for outage_s in (2.0, SESSION_TIMEOUT_S + 4):  # shorter than a session, then longer
        ha_cluster.zookeeper.stop()
        stopped_at = time.monotonic()
        # The connection is suspended: nobody leads, the job is suspended (not failed).
        poll_for(lambda: all(refused_as_not_leader(jm) for jm in ha_cluster.jobmanagers), 30, 0.1,
                 "both JobManagers to stop leading")
        time.sleep(max(0.0, outage_s - (time.monotonic() - stopped_at)))
        assert all(jm.proc.poll() is None for jm in ha_cluster.jobmanagers)
        assert ha_cluster.taskmanager.poll() is None
        assert job_results(ha_cluster, job_id) == []  # not globally terminal
        ha_cluster.zookeeper.start()
        back_at = time.monotonic()
        leader, summary = poll_for(lambda: recovered_after(before.checkpoints.last_completed_id), 120, 0.2,
                                   f"the job recovered after a {outage_s:.0f} s ZooKeeper outage")
        print(f"ZooKeeper down {back_at - stopped_at:.1f} s: the job runs again and checkpointed "
              f"{time.monotonic() - back_at:.1f} s after it came back (restored checkpoint "
              f"{summary.checkpoints.latest_restored_id}, last before {before.checkpoints.last_completed_id})")
        assert summary.checkpoints.latest_restored_id >= before.checkpoints.last_completed_id
        assert stored_job_graph(ha_cluster, job_id) is not None
        before = summary

    slow.unlink()
    summary = poll_for(lambda: finished(leader, job_id), 240, 0.5, "the job to end")
    assert status_of(summary) is JobStatus.FINISHED, summary.failure.message
    assert_exactly_once(out, count)
    assert [jm.proc.poll() for jm in ha_cluster.jobmanagers] == [None, None]


# -- 3. HA storage unreadable at a failover --------------------------------------------------------


def make_unreadable(path: Path, *, remove: bool) -> str:
    """chmod 000; where that does not stop reads (root), corrupt the file or remove it too."""
    path.chmod(0)
    if not os.access(path, os.R_OK):
        return "unreadable"
    if remove:
        path.unlink()
        return "removed"
    path.write_bytes(b"\x00not what was stored")
    return "corrupt"


def test_unreadable_ha_storage_fails_recovery_loudly_never_starts_from_scratch_and_other_jobs_run(
        ha_cluster: HaCluster, tmp_path: Path) -> None:
    ha_cluster.ensure_jobmanagers()
    leader, standby = ha_cluster.leader_and_standby()
    ha_cluster.wait_for_slots(leader)
    slow = tmp_path / "slow"
    slow.touch()
    graph_out, metadata_out = tmp_path / "graph-out", tmp_path / "metadata-out"
    graph_job = submit(leader, "job graph unreadable", graph_out, 40_000, slow)
    metadata_job = submit(leader, "checkpoint unreadable", metadata_out, 40_000, slow)
    for job_id in (graph_job, metadata_job):
        poll_for(lambda: checkpointing_since_restore(leader, job_id, restored=False), 120, 0.2, "checkpoints")
    poll_for(lambda: visible_lines(graph_out) and visible_lines(metadata_out), 60, 0.2, "committed output of both jobs")

    leader.kill()  # nothing completes a checkpoint now; the standby leads after the session timeout
    graph_file = Path(stored_job_graph(ha_cluster, graph_job)["path"])  # type: ignore[index]
    pointers = checkpoint_pointers(ha_cluster, metadata_job)
    with ha_cluster.zk() as services:
        node = services.client.path(CHECKPOINTS_NODE, metadata_job.hex(), f"{max(pointers):019d}")
        metadata_file = Path(json.loads(services.client.kazoo.get(node)[0])["metadata"])
    graph_damage = make_unreadable(graph_file, remove=False)
    metadata_damage = make_unreadable(metadata_file, remove=True)
    # Committed output only changes on a leader's checkpoint notification: none comes from the dead one.
    outputs = {graph_job: sorted(visible_lines(graph_out)), metadata_job: sorted(visible_lines(metadata_out))}

    poll_for(standby.leads, 4 * SESSION_TIMEOUT_S + 30, 0.1, "the standby to lead")
    assert standby.proc.poll() is None, standby.log()
    jobs = {j.job_id: j for j in standby.list_jobs().jobs}
    # The job whose graph cannot be read is listed, not run, with the job and the file named.
    graph_summary = jobs[graph_job]
    assert status_of(graph_summary) not in (JobStatus.RUNNING, JobStatus.CREATED, JobStatus.RESTARTING)
    for needle in (graph_job.hex(), str(graph_file)):
        assert needle in graph_summary.failure.message, (graph_damage, graph_summary.failure.message)
    shown, _ = timed_cli("status", graph_job.hex(), "--jobmanager", standby.address)
    assert "SUSPENDED" in shown.stdout and f"Root cause: job {graph_job.hex()}" in shown.stdout, shown.stdout + shown.stderr
    assert str(graph_file) in shown.stdout
    # The job whose checkpoint cannot be read fails, naming the checkpoint; it never starts empty.
    summary = poll_for(lambda: finished(standby, metadata_job), 60, 0.2, "the job with the unreadable checkpoint to end")
    assert status_of(summary) is JobStatus.FAILED
    assert str(metadata_file.parent) in summary.failure.message, (metadata_damage, summary.failure.message)
    log = standby.log_path.read_text(errors="replace")
    assert str(graph_file) in log and graph_job.hex() in log and str(metadata_file.parent) in log

    # The cluster keeps serving: another job runs to its end, exactly once.
    other_out, other_count = tmp_path / "other-out", 3_000
    other = submit(standby, "another job", other_out, other_count, None)
    summary = poll_for(lambda: finished(standby, other), 180, 0.5, "the other job to end")
    assert status_of(summary) is JobStatus.FINISHED, summary.failure.message
    assert_exactly_once(other_out, other_count)

    # Neither damaged job ran again: their output is as the old leader left it (no output from
    # offset 0, no restore from nothing), and the unreadable job stays in HA storage, not ended.
    assert {graph_job: sorted(visible_lines(graph_out)), metadata_job: sorted(visible_lines(metadata_out))} == outputs
    assert stored_job_graph(ha_cluster, graph_job) is not None and job_results(ha_cluster, graph_job) == []
    status = summary_at(standby, graph_job)
    assert status is not None and status_of(status) is status_of(graph_summary)
    print(f"job graph {graph_damage}, checkpoint metadata {metadata_damage}: "
          f"{graph_summary.failure.message!r}; {summary_at(standby, metadata_job).failure.message!r}")  # type: ignore[union-attr]
