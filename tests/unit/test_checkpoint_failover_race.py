"""A checkpoint whose metadata is being written when the job fails over must never subsume the
checkpoint the new attempts restore from (Flink aborts pending checkpoints on failover, in
``restoreState``, and only a checkpoint that completes afterwards replaces the restore point).

The JobMaster's checkpoint shell runs with its real file store on a temporary directory and the
job's real JobMasterCore; the TaskManagers are left out (the tasks' acks are fed in by hand, with
state files written as a task writes them) and the shell's spawned work runs when the test says,
so the interleaving that loses the restore point under load is reproduced exactly."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from millstream.jobmanager.checkpoint.coordinator import (
    CheckpointCoordinator,
    CheckpointSettings,
    DiscardCheckpoint,
    DiscardState,
    FailJob,
    FinalizeCheckpoint,
    NotifyCheckpointComplete,
)
from millstream.jobmanager.checkpoint.driver import CheckpointDriver
from millstream.jobmanager.checkpoint.settings import JobCheckpointing
from millstream.jobmanager.jobmaster.job_master_core import AbortPendingCheckpoints, BuildDeployments, JobMasterCore
from millstream.proto import cluster_pb2 as cpb
from millstream.runtime.checkpoint_ids import StandaloneCheckpointIDCounter
from millstream.runtime.checkpoint_storage import SHARED_DIR, SHARED_LIST_SUFFIX, write_task_state
from millstream.runtime.execution_state import ExecutionState, JobStatus

from .test_live_view import _core, _deployed


class Shell:
    """A CheckpointDriver whose spawned coroutines wait in a list until ``drain``."""

    def __init__(self, base: Path) -> None:
        self.core: JobMasterCore = _core(parallelism=1)
        _deployed(self.core)
        for execution in self.core.current_executions():
            self.core.update_task_state(execution.attempt_id, ExecutionState.INITIALIZING)
            self.core.update_task_state(execution.attempt_id, ExecutionState.RUNNING)
        self.spawned: list[Any] = []
        settings = JobCheckpointing(CheckpointSettings(60_000), "EXACTLY_ONCE", base, 1)  # num-retained 1
        self.driver = CheckpointDriver(self.core, settings, lambda *a: None, lambda m: None, self.spawned.append)
        self.base = base
        self.driver.maybe_start()

    async def drain(self) -> None:
        while self.spawned:
            await self.spawned.pop(0)

    def ack_all(self, shared: list[str]) -> int:
        """Triggers a checkpoint and acks it from every task, each with a state file; the first
        also lists ``shared`` files (an incremental RocksDB snapshot's uploads)."""
        done = self.driver.trigger_checkpoint()
        done.add_done_callback(lambda f: f.cancelled() or f.exception())  # a restart fails it: expected
        pending = self.driver.coordinator.pending
        assert pending is not None
        cid = pending.checkpoint_id
        for n, attempt in enumerate(pending.to_wait_for):
            handle = write_task_state(self.base, self.core.job_id, cid, b"state of %d" % cid)
            if n == 0 and shared:
                (self.base / self.core.job_id.hex() / SHARED_DIR).mkdir(exist_ok=True)
                for name in shared:
                    path = self.base / self.core.job_id.hex() / SHARED_DIR / name
                    if not path.exists():
                        path.write_bytes(b"sst")
                Path(handle.path + SHARED_LIST_SUFFIX).write_text(json.dumps(shared))
            self.driver.acknowledge(cpb.AcknowledgeCheckpointRequest(
                checkpoint_id=cid, execution_attempt_id=attempt, state_path=handle.path, state_size=handle.size))
        return cid

    def chk(self, cid: int) -> Path:
        return self.base / self.core.job_id.hex() / f"chk-{cid}"

    def shared(self, name: str) -> Path:
        return self.base / self.core.job_id.hex() / SHARED_DIR / name


def _restore_point_intact(shell: Shell, cid: int) -> None:
    point = shell.core.restore_point
    assert point is not None and point.checkpoint_id == cid
    shell.driver.store.load(shell.chk(cid))  # metadata and every task's state file are there
    for handle in point.task_states.values():
        assert handle is not None and Path(handle.path).is_file()


def test_a_checkpoint_finalizing_when_the_job_restarts_does_not_delete_the_restore_point(tmp_path: Path) -> None:
    async def run() -> None:
        shell = Shell(tmp_path)
        first = shell.ack_all(["a.sst"])
        await shell.drain()
        _restore_point_intact(shell, first)
        second = shell.ack_all(["a.sst", "b.sst"])  # every task acked: its metadata is being written...
        assert shell.spawned, "the finalization waits to run"
        # ...when a task fails: the job restarts and its new attempts restore the first checkpoint.
        shell.driver.job_status_changed(JobStatus.RESTARTING)
        await shell.drain()  # the metadata write returns after the failover
        _restore_point_intact(shell, first)
        assert shell.shared("a.sst").is_file()  # the restore point's shared file
        assert not shell.chk(second).exists() and not shell.shared("b.sst").exists()  # the aborted one's are gone
        assert shell.driver.store.latest().checkpoint_id == first
        assert shell.driver.coordinator.stats.num_completed == 1

    asyncio.run(run())


def test_a_region_failover_aborts_a_checkpoint_whose_acks_came_from_the_failed_attempts(tmp_path: Path) -> None:
    async def run() -> None:
        shell = Shell(tmp_path)
        first = shell.ack_all([])
        await shell.drain()
        second = shell.ack_all([])
        shell.driver.abort_pending()  # a region is redeployed from the restore point (the job stays RUNNING)
        await shell.drain()
        _restore_point_intact(shell, first)
        assert not shell.chk(second).exists()

    asyncio.run(run())


def test_a_checkpoint_confirmed_without_failover_subsumes_the_older_one(tmp_path: Path) -> None:
    async def run() -> None:
        shell = Shell(tmp_path)
        first = shell.ack_all(["a.sst"])
        await shell.drain()
        second = shell.ack_all(["b.sst"])
        await shell.drain()
        _restore_point_intact(shell, second)
        # the subsumed checkpoint's shared files go one subsumption later: a task may still base an
        # incremental checkpoint on it until it hears of the newer one
        assert not shell.chk(first).exists() and shell.shared("a.sst").is_file()
        assert shell.shared("b.sst").is_file()
        third = shell.ack_all(["c.sst"])
        await shell.drain()
        _restore_point_intact(shell, third)
        assert not shell.shared("a.sst").exists()
        assert shell.shared("b.sst").is_file() and shell.shared("c.sst").is_file()

    asyncio.run(run())


# -- the pure rules --------------------------------------------------------------------------------


def test_abort_pending_aborts_a_finalizing_checkpoint_and_discards_it_only_once_the_write_returns() -> None:
    c = CheckpointCoordinator(CheckpointSettings(1000, tolerable_failed_checkpoints=0), StandaloneCheckpointIDCounter())
    c.start(0)
    [trigger] = c.trigger_now(0, [_task(b"old-1", "v_0")], savepoint=False)
    [finalize] = c.acknowledge(trigger.checkpoint_id, b"old-1", "handle")
    assert isinstance(finalize, FinalizeCheckpoint)
    out = c.abort_pending()
    assert not [x for x in out if isinstance(x, (DiscardCheckpoint, FailJob))]  # not while it is written; not counted
    assert c.pending is None and c.stats.last_failure_reason == "JOB_FAILOVER_REGION"
    # a late ack of the old attempt is discarded, the write's return discards the directory, nothing commits
    assert c.acknowledge(trigger.checkpoint_id, b"old-1", "late") == [DiscardState(trigger.checkpoint_id, "late")]
    out = c.checkpoint_finalized(trigger.checkpoint_id, 10)
    assert out == [DiscardCheckpoint(trigger.checkpoint_id)]
    assert not [x for x in out if isinstance(x, NotifyCheckpointComplete)] and c.stats.num_completed == 0


def test_a_failed_metadata_write_of_a_checkpoint_aborted_meanwhile_still_discards_it() -> None:
    c = CheckpointCoordinator(CheckpointSettings(1000), StandaloneCheckpointIDCounter())
    c.start(0)
    [trigger] = c.trigger_now(0, [_task(b"a", "v_0")], savepoint=False)
    c.acknowledge(trigger.checkpoint_id, b"a", "handle")
    c.stop()
    assert c.checkpoint_finalize_failed(trigger.checkpoint_id, "disk full") == [DiscardCheckpoint(trigger.checkpoint_id)]


def test_a_region_redeployment_aborts_pending_checkpoints_before_deploying() -> None:
    from .test_job_master_restart import _confirm_cancels, _fail_one, _parallel_pipelines, _running
    from millstream.jobmanager.jobmaster.job_master_core import StartRestartTimer
    from millstream.runtime.restart_strategy import FixedDelay

    core = _parallel_pipelines(FixedDelay(attempts=3, delay_ms=50))
    _running(core)
    commands = _fail_one(core)
    _confirm_cancels(core, commands)
    [timer] = [c for c in commands if isinstance(c, StartRestartTimer)]
    assert timer.region is not None
    out = core.region_backoff_elapsed(timer.region, timer.restart)
    kinds = [type(c) for c in out]
    assert AbortPendingCheckpoints in kinds
    assert kinds.index(AbortPendingCheckpoints) < kinds.index(BuildDeployments)


def _task(attempt: bytes, key: str):  # noqa: ANN202
    from millstream.jobmanager.checkpoint.coordinator import TaskSnapshot
    return TaskSnapshot(attempt, key, ExecutionState.RUNNING)
