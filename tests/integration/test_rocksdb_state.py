"""The embedded RocksDB state backend on a real cluster (real processes, gRPC, Spark, files).

The job is test_checkpoints' keyed running count into a FileSink, whose exact output is known
("k,1" ... "k,n_k" for every key, each once): a lost record leaves a count missing, a replay
without restored state or an uncommitted duplicate shows as a repeated line.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.common import Configuration
from millstream.common.restart_strategy import RestartStrategies
from millstream.datastream import EmbeddedRocksDBStateBackend, HashMapStateBackend, StreamExecutionEnvironment
from millstream.runtime.execution_state import JobStatus

from .harness import ancestors, ClusterSpec, poll_for, ProcessCluster
from .jobs import assert_exactly_once, ended, fail_after_checkpoints, FailWhenMarked, NotePid, visible_lines
from .test_checkpoints import counting_job

pytestmark = pytest.mark.timeout(400)
CLUSTER = ClusterSpec(slots=4, tasks_per_slot=3, checkpoints=True)


def test_a_rocksdb_job_restarts_from_its_last_full_checkpoint_exactly_once(cluster, checkpoint_dir, tmp_path) -> None:
    out, marker = tmp_path / "out", tmp_path / "fail"
    count = 6000
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.set_state_backend(EmbeddedRocksDBStateBackend(enable_incremental_checkpointing=False))
    env.enable_checkpointing(200)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 100))
    counting_job(env, out, count, 1500, FailWhenMarked(str(marker)))
    summary = fail_after_checkpoints(cluster.address, env, "rocksdb fails after checkpoints", marker)
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
    assert summary.num_restarts == 1 and summary.checkpoints.latest_restored_id >= 2, summary.checkpoints
    assert_exactly_once(out, count)


def test_rescale_2_3_1_through_savepoints_switching_backends(cluster, tmp_path) -> None:
    """Parallelism 2 on RocksDB, 3 on the heap, 1 on RocksDB again: each run resumes from the
    previous one's savepoint, keyed state moving by key group and across backends."""
    out, savepoints = tmp_path / "out", tmp_path / "savepoints"
    count = 9000

    def job(parallelism: int, backend: Any, savepoint: str | None) -> Any:
        conf = Configuration()
        if savepoint:
            conf.set_string("execution.savepoint.path", savepoint)
        env = StreamExecutionEnvironment.get_execution_environment(conf)
        env.set_parallelism(parallelism)
        env.set_state_backend(backend)
        env.enable_checkpointing(300)
        counting_job(env, out, count, 1500)
        return env.get_job_graph(f"at parallelism {parallelism} on {backend!r}").proto

    savepoint = None
    with ClusterClient(cluster.address) as client:
        for parallelism, backend in ((2, EmbeddedRocksDBStateBackend()), (3, HashMapStateBackend())):
            job_id = client.submit(job(parallelism, backend, savepoint))
            done = len(visible_lines(out))
            poll_for(lambda: client.status(job_id).checkpoints.num_completed >= 1 and len(visible_lines(out)) > done,
                     60, what="a completed checkpoint with output")
            savepoint = client.savepoint(job_id, str(savepoints), stop=True)
            poll_for(lambda: ended(client, job_id), 60, what="the stopped job to end")
        assert len(visible_lines(out)) < count
        last = client.submit(job(1, EmbeddedRocksDBStateBackend(), savepoint))
        summary = poll_for(lambda: ended(client, last), 120, interval=0.2, what="the last run to end")
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
    assert_exactly_once(out, count)


def test_fifty_incremental_checkpoints_with_three_retained_leave_no_orphan_shared_files(cluster, checkpoint_dir,
                                                                                        tmp_path) -> None:
    """While the job runs: three checkpoints retained, every file they reference in ``shared/``,
    and every file of ``shared/`` that none of them references gone a few checkpoints later (the
    store keeps the files of the checkpoint it dropped last one subsumption longer, for a task that
    has not heard of the newer completion yet), unless a newer checkpoint references it again."""
    from millstream.runtime.checkpoint_storage import METADATA_FILE, SHARED_DIR, CompletedCheckpointStore

    conf = Configuration()
    conf.set_string("execution.checkpointing.num-retained", "3")
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(2)
    env.set_state_backend(EmbeddedRocksDBStateBackend(enable_incremental_checkpointing=True))
    env.enable_checkpointing(100)
    counting_job(env, tmp_path / "out", 10_000_000, 3000)
    with ClusterClient(cluster.address) as client:
        job_id = client.submit(env.get_job_graph("fifty incremental checkpoints").proto)
        try:
            poll_for(lambda: client.status(job_id).checkpoints.num_completed >= 50, 240, interval=0.5,
                     what="fifty completed checkpoints")
            job_dir = checkpoint_dir / job_id.hex()

            def complete() -> list[Path]:
                return sorted((d for d in job_dir.glob("chk-*") if (d / METADATA_FILE).is_file()),
                              key=lambda d: int(d.name[4:]))

            def consistent_view() -> tuple[list[Path], set[str], dict[str, float]]:
                """Retained checkpoints, the shared files they reference, and ``shared/`` (name ->
                mtime), read while no checkpoint completed."""
                while True:
                    try:
                        before = complete()
                        referenced = set().union(*(CompletedCheckpointStore.shared_references(d) for d in before))
                        shared = {p.name: p.stat().st_mtime for p in (job_dir / SHARED_DIR).iterdir()}
                        if complete() == before:
                            return before, referenced, shared
                    except FileNotFoundError:
                        pass

            for _ in range(3):
                retained, referenced, shared = consistent_view()
                assert 3 <= len(retained) <= 4, [d.name for d in retained]  # 4: the oldest not dropped yet
                assert referenced and referenced <= set(shared), sorted(referenced - set(shared))[:3]
                latest = (retained[-1] / METADATA_FILE).stat().st_mtime
                unreferenced = {name for name, mtime in shared.items() if name not in referenced and mtime < latest}
                newest = int(retained[-1].name[4:])
                poll_for(lambda: int(complete()[-1].name[4:]) >= newest + 4, 60, interval=0.1,
                         what="four more completed checkpoints")
                _, referenced_later, shared_later = consistent_view()
                orphans = sorted(name for name in unreferenced if name in shared_later and name not in referenced_later)
                assert not orphans, f"{len(orphans)} shared files unreferenced for four checkpoints, e.g. {orphans[:3]}"
        finally:
            client.cancel(job_id)
            poll_for(lambda: ended(client, job_id), 60, what="the cancelled job to end")


def test_a_full_checkpoint_by_hand_writes_no_shared_files_in_an_incremental_job(cluster, checkpoint_dir,
                                                                                tmp_path) -> None:
    """Flink's FULL checkpoint type (``millstream checkpoint --full``, REST ``checkpointType: FULL``):
    an incremental RocksDB job's checkpoint by hand references shared SST files, a FULL one writes
    its keyed state whole and references none, and the next one is incremental again."""
    from millstream.runtime.checkpoint_storage import METADATA_FILE, CompletedCheckpointStore

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.set_state_backend(EmbeddedRocksDBStateBackend(enable_incremental_checkpointing=True))
    env.enable_checkpointing(3_600_000)  # only the checkpoints taken by hand below
    counting_job(env, tmp_path / "out", 10_000_000, 3000)
    with ClusterClient(cluster.address) as client:
        job_id = client.submit(env.get_job_graph("full checkpoint by hand").proto)
        try:
            def references(full: bool) -> set[str]:
                checkpoint_id = poll_for(lambda: _checkpoint_or_none(client, job_id, full), 60, interval=0.5,
                                         what="a checkpoint by hand")
                directory = checkpoint_dir / job_id.hex() / f"chk-{checkpoint_id}"
                assert (directory / METADATA_FILE).is_file()
                return CompletedCheckpointStore.shared_references(directory)

            assert references(full=False), "a CONFIGURED checkpoint of an incremental job references shared files"
            assert references(full=True) == set(), "a FULL checkpoint references no shared file"
            assert references(full=False), "the checkpoint after a FULL one is incremental again"
        finally:
            client.cancel(job_id)
            poll_for(lambda: ended(client, job_id), 60, what="the cancelled job to end")


def _checkpoint_or_none(client: ClusterClient, job_id: bytes, full: bool) -> int | None:
    """A checkpoint by hand, or None while the job or its tasks are not running yet."""
    import grpc

    try:
        return client.checkpoint(job_id, full=full, timeout_s=60)
    except grpc.RpcError as exc:
        if exc.code() is grpc.StatusCode.FAILED_PRECONDITION and (
                "not all running" in str(exc.details()) or "only a RUNNING job" in str(exc.details())):
            return None
        raise


@pytest.mark.parametrize("incremental", [True, False], ids=["incremental", "full"])
def test_kill_9_of_a_task_manager_under_rocksdb_checkpoints_gives_exact_state(tmp_path, incremental) -> None:
    """A TaskManager killed with SIGKILL after two checkpoints: the job restarts on the others from
    the last completed checkpoint (incremental: its RocksDB files read back from shared/; full: the
    key groups the writer thread read through the views pinned at the barrier) and the keyed counts
    come out exact."""
    with ProcessCluster(tmp_path, tasks_per_slot=3, taskmanagers=3,
                        jobmanager_options={"execution.checkpointing.dir": str(tmp_path / "checkpoints")}) as pc:
        out, pids = tmp_path / "out", tmp_path / "pids"
        pids.mkdir()
        count = 16_000
        with ClusterClient(pc.address) as client:
            conf = Configuration()
            conf.set_string("execution.checkpointing.num-retained", "3")
            env = StreamExecutionEnvironment.get_execution_environment(conf)
            env.set_parallelism(2)
            env.set_state_backend(EmbeddedRocksDBStateBackend(enable_incremental_checkpointing=incremental))
            env.enable_checkpointing(300)
            env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 200))
            counting_job(env, out, count, 2000, NotePid(str(pids)))
            job_id = client.submit(env.get_job_graph("rocksdb survives kill -9").proto)
            poll_for(lambda: client.status(job_id).checkpoints.num_completed >= 2, 120, what="two completed checkpoints")
            shared = tmp_path / "checkpoints" / job_id.hex() / "shared"
            assert (shared.is_dir() and any(shared.iterdir())) == incremental  # the kind of checkpoint asked for
            pid = int((pids / "pid-0-0").read_text())
            victims = [tm for tm in pc.taskmanagers if tm.pid in ancestors(pid)]
            assert len(victims) == 1, (pid, [tm.pid for tm in pc.taskmanagers])
            victims[0].kill()
            victims[0].wait(10)
            summary = poll_for(lambda: ended(client, job_id), 240, interval=0.5, what="the job to end")
        assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
        assert summary.num_restarts >= 1 and summary.checkpoints.latest_restored_id >= 2, summary.checkpoints
        assert_exactly_once(out, count)


def test_a_full_local_disk_fails_the_task_naming_the_directory_and_the_job_restarts_from_its_checkpoint(
        cluster, tmp_path) -> None:
    """state.backend.rocksdb.localdir on a small tmpfs that something else fills up: the task fails
    with a message naming the directory; once there is room again, the restarted job resumes from its
    last checkpoint and its output is exact."""
    import os
    import subprocess

    local = tmp_path / "tiny"
    local.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(local)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {mounted.stderr.strip()}")
    filler = local / "filler"
    try:
        out = tmp_path / "out"
        count = 30_000
        conf = Configuration()
        conf.set_string("state.backend.rocksdb.localdir", str(local))
        conf.set_string("state.backend.rocksdb.memory.fixed-per-slot", "8 mb")
        # Three retained: with one, a checkpoint whose finalization races the failure can leave no
        # restore point (seen here with many restarts; a JobManager matter, reported separately).
        conf.set_string("execution.checkpointing.num-retained", "3")
        env = StreamExecutionEnvironment.get_execution_environment(conf)
        env.set_parallelism(2)
        # Incremental: each checkpoint flushes the memtable to the local directory, so the full disk
        # is met at the next checkpoint (a full snapshot reads the live database through iterators
        # and writes nothing locally; with it the task would meet the disk only at a memtable flush).
        env.set_state_backend(EmbeddedRocksDBStateBackend(True))
        env.enable_checkpointing(300)
        env.set_restart_strategy(RestartStrategies.fixed_delay_restart(200, 500))
        counting_job(env, out, count, 2000)
        with ClusterClient(cluster.address) as client:
            job_id = client.submit(env.get_job_graph("rocksdb on a full disk").proto)
            poll_for(lambda: client.status(job_id).checkpoints.num_completed >= 2, 60, what="two checkpoints")
            free = os.statvfs(local).f_bavail * os.statvfs(local).f_frsize
            with open(filler, "wb") as f:  # another process takes the disk
                try:
                    f.write(b"\0" * free)
                except OSError:
                    pass
            def disk_failure() -> str | None:
                message = client.status(job_id).failure.message
                return message if "no space left" in message.lower() else None

            failure = poll_for(disk_failure, 60, interval=0.2, what="the task's failure for the full disk")
            assert str(local) in failure and "state.backend.rocksdb.localdir" in failure, failure
            filler.unlink()  # room again: the next restart goes on from the last checkpoint
            summary = poll_for(lambda: ended(client, job_id), 180, interval=0.5, what="the job to end")
        assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
        assert summary.num_restarts >= 1 and summary.checkpoints.latest_restored_id >= 2, summary.checkpoints
        assert_exactly_once(out, count)
    finally:
        subprocess.run(["umount", "-l", str(local)], capture_output=True)
