"""`millstream checkpoint JOB [--full]` and `millstream savepoint --dispose PATH`, what Flink's CLI
has as `flink checkpoint [-full]` and `flink savepoint -d`, against real JobManager and TaskManager
processes."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.datastream import StreamExecutionEnvironment

from ..harness import Rest, cli, poll_for
from ..jobs import Endless
from .conftest import SharedCluster

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def cluster(shared_cluster: SharedCluster) -> tuple[ClusterClient, Rest, str]:
    return shared_cluster.client, shared_cluster.rest, shared_cluster.address


def _running(client: ClusterClient, rest: Rest, name: str, checkpointing: bool = True) -> str:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    if checkpointing:
        env.enable_checkpointing(600_000)  # none periodic during the test: only the CLI's
    env.add_source(Endless(every=10, pause_s=0.02)).map(lambda x: x).add_sink(lambda x: None)
    job = client.submit(env.get_job_graph(name).proto).hex()
    poll_for(lambda: rest.get(f"/jobs/{job}")["status-counts"]["RUNNING"] == 1, 90, interval=0.3, what="RUNNING")
    return job


def _until_ok(*args: str) -> Any:
    """Retried while the job's tasks start (a checkpoint needs every task running)."""
    def attempt() -> Any:
        done = cli(*args)
        return done if done.returncode == 0 else None
    return poll_for(attempt, 90, interval=1, what=f"millstream {' '.join(args)}")


def test_checkpoint_now_and_full(cluster) -> None:  # noqa: ANN001
    client, rest, address = cluster
    job = _running(client, rest, "checkpointed by the CLI")
    out = _until_ok("checkpoint", "--jobmanager", address, job).stdout
    first = int(re.fullmatch(rf"Checkpoint (\d+) for job {job} completed\.\n", out).group(1))  # type: ignore[union-attr]
    stats = rest.get(f"/jobs/{job}/checkpoints")
    assert stats["counts"]["completed"] == 1 and stats["latest"]["completed"]["id"] == first
    assert stats["latest"]["completed"]["is_savepoint"] is False  # a checkpoint, not a savepoint
    out = _until_ok("checkpoint", "--full", "--jobmanager", address, job).stdout
    second = int(re.fullmatch(rf"Checkpoint\(FULL\) (\d+) for job {job} completed\.\n", out).group(1))  # type: ignore[union-attr]
    assert second > first and rest.get(f"/jobs/{job}/checkpoints")["counts"]["completed"] == 2
    client.cancel(bytes.fromhex(job))


def test_checkpoint_of_a_job_without_checkpointing_is_refused_naming_why(cluster) -> None:  # noqa: ANN001
    client, rest, address = cluster
    job = _running(client, rest, "no checkpointing", checkpointing=False)
    refused = cli("checkpoint", "--jobmanager", address, job)
    assert refused.returncode != 0 and "takes no checkpoints" in refused.stderr, refused
    unknown = cli("checkpoint", "--jobmanager", address, "ab" * 16)
    assert unknown.returncode != 0 and "ab" * 16 in unknown.stderr, unknown
    client.cancel(bytes.fromhex(job))


def test_savepoint_dispose_deletes_a_savepoint_and_nothing_else(cluster, tmp_path) -> None:  # noqa: ANN001
    client, rest, address = cluster
    job = _running(client, rest, "savepoint to dispose")
    out = _until_ok("savepoint", "--jobmanager", address, job, str(tmp_path / "sp")).stdout
    path = Path(re.search(r"Savepoint completed\. Path: (\S+)", out).group(1))  # type: ignore[union-attr]
    assert (path / "_metadata").is_file()
    disposed = cli("savepoint", "--dispose", str(path), "--jobmanager", address)
    assert disposed.returncode == 0 and disposed.stdout == f"Savepoint '{path}' disposed.\n", disposed
    assert not path.exists()
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "keep.txt").write_text("keep")
    refused = cli("savepoint", "-d", str(plain), "--jobmanager", address)
    assert refused.returncode != 0 and "has no _metadata" in refused.stderr, refused
    assert (plain / "keep.txt").read_text() == "keep"
    both = cli("savepoint", "-d", str(plain), job, "--jobmanager", address)
    assert both.returncode == 2 and "takes no JOB_ID" in both.stderr
    neither = cli("savepoint", "--jobmanager", address)
    assert neither.returncode == 2 and "needs JOB_ID" in neither.stderr
    client.cancel(bytes.fromhex(job))
