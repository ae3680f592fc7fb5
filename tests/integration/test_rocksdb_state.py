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

from .harness import ClusterSpec, poll_for
from .jobs import assert_exactly_once, ended, fail_after_checkpoints, FailWhenMarked, visible_lines
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
