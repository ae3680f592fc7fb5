"""Flink 2.3.0's own CLI (``bin/flink`` from the PyPI wheels) against a Millstream cluster's REST
API, unchanged: list, checkpoint, savepoint, savepoint disposal, cancel and stop, as Flink's
documentation of the CLI shows them. Skipped, saying how to install it, without the wheels."""
from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.datastream import StreamExecutionEnvironment

from ..flink_tools import FlinkCli, flink_cli_or_skip
from ..harness import Rest, poll_for
from ..jobs import Endless
from .conftest import SharedCluster

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster(shared_cluster: SharedCluster, tmp_path_factory) -> tuple[ClusterClient, Rest, FlinkCli]:  # noqa: ANN001
    flink_cli_or_skip()
    return shared_cluster.client, shared_cluster.rest, FlinkCli(shared_cluster.rest.url, tmp_path_factory.mktemp("flink-cli"))


def _endless(client: ClusterClient, rest: Rest, name: str, parallelism: int = 1) -> str:
    """A running job that checkpoints (rarely: the test's own checkpoints are the ones it sees)."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.enable_checkpointing(600_000)
    env.add_source(Endless(every=10, pause_s=0.02)).key_by(lambda x: x % 3).map(lambda x: x).add_sink(lambda x: None)
    job = client.submit(env.get_job_graph(name).proto).hex()
    poll_for(lambda: rest.get(f"/jobs/{job}")["status-counts"]["RUNNING"] == 2 * parallelism, 90, interval=0.3,
             what="every task RUNNING")
    return job


def _finite(client: ClusterClient, rest: Rest, name: str) -> str:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.from_collection(list(range(20))).map(lambda x: x).add_sink(lambda x: None)
    job = client.submit(env.get_job_graph(name).proto).hex()
    poll_for(lambda: rest.get(f"/jobs/{job}")["state"] == "FINISHED", 90, interval=0.3, what="the job FINISHED")
    return job


def _retried(cli: FlinkCli, *args: str) -> str:
    """A checkpoint or savepoint needs every task running and none in flight: retried as a user
    would while the job starts."""
    def attempt() -> Any:
        done = cli.run(*args)
        return done.stdout if done.returncode == 0 else None
    return str(poll_for(attempt, 120, interval=1, what=f"flink {' '.join(args)}"))


def test_list_in_every_variant(cluster) -> None:  # noqa: ANN001
    """`flink list` parses /jobs/overview (Flink's MultipleJobsDetails: `pending-operators` is a
    required int there) and sorts the jobs into running, scheduled and terminated."""
    client, rest, cli = cluster
    running = _endless(client, rest, "listed running")
    finished = _finite(client, rest, "listed finished")
    default = cli.ok("list")
    assert re.search(rf": {running} : listed running \(RUNNING\)", default), default
    assert finished not in default  # terminated jobs only with -a
    everything = cli.ok("list", "-a")
    assert f"{running} : listed running (RUNNING)" in everything
    assert f"{finished} : listed finished (FINISHED)" in everything and "Terminated Jobs" in everything
    only_running = cli.ok("list", "-r")
    assert running in only_running and finished not in only_running
    assert "No scheduled jobs." in cli.ok("list", "-s")
    cli.ok("cancel", running)
    poll_for(lambda: rest.get(f"/jobs/{running}")["state"] == "CANCELED", 60, interval=0.3, what="CANCELED")
    assert f"{running} : listed running (CANCELED)" in cli.ok("list", "-a")


def test_checkpoint_and_full_checkpoint(cluster) -> None:  # noqa: ANN001
    """`flink checkpoint JOB` (and `-full`): POST /jobs/:id/checkpoints, then the trigger's status
    until it names the completed checkpoint, which /jobs/:id/checkpoints counts."""
    client, rest, cli = cluster
    job = _endless(client, rest, "checkpointed")
    out = _retried(cli, "checkpoint", job)
    first = int(re.search(rf"Checkpoint (\d+) for job {job} completed", out).group(1))  # type: ignore[union-attr]
    stats = rest.get(f"/jobs/{job}/checkpoints")
    assert stats["latest"]["completed"]["id"] == first and stats["counts"]["completed"] == 1
    assert stats["latest"]["completed"]["is_savepoint"] is False
    out = _retried(cli, "checkpoint", "-full", job)
    second = int(re.search(rf"Checkpoint\(FULL\) (\d+) for job {job} completed", out).group(1))  # type: ignore[union-attr]
    assert second > first and rest.get(f"/jobs/{job}/checkpoints")["counts"]["completed"] == 2
    # Of a job that is not running: refused at once, the cause printed.
    cli.ok("cancel", job)
    poll_for(lambda: rest.get(f"/jobs/{job}")["state"] == "CANCELED", 60, interval=0.3, what="CANCELED")
    refused = cli.run("checkpoint", job)
    assert refused.returncode != 0 and "only a RUNNING job takes a checkpoint" in refused.stdout + refused.stderr


def test_savepoint_then_dispose_it(cluster, tmp_path) -> None:  # noqa: ANN001
    """`flink savepoint JOB DIR` then `flink savepoint -d PATH` (POST /savepoint-disposal and its
    status): the savepoint's directory is gone."""
    client, rest, cli = cluster
    job = _endless(client, rest, "disposed")
    out = _retried(cli, "savepoint", job, str(tmp_path / "savepoints"))
    path = Path(re.search(r"Savepoint completed\. Path: (\S+)", out).group(1))  # type: ignore[union-attr]
    assert (path / "_metadata").is_file()
    disposed = cli.ok("savepoint", "-d", str(path))
    assert f"Savepoint '{path}' disposed." in disposed
    assert not path.exists() and (tmp_path / "savepoints").is_dir()
    # A directory that is no savepoint: the disposal fails, its cause reaches the CLI (Flink's
    # client reads only the Java-serialized throwable), and nothing is deleted.
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "keep.txt").write_text("keep")
    started = time.monotonic()
    refused = cli.run("savepoint", "-d", str(plain))
    assert refused.returncode != 0 and "has no _metadata" in refused.stdout + refused.stderr, refused
    assert time.monotonic() - started < 45  # answered, not Flink's client timing out after 60 s
    assert (plain / "keep.txt").read_text() == "keep"
    cli.ok("cancel", job)
    poll_for(lambda: rest.get(f"/jobs/{job}")["state"] == "CANCELED", 60, interval=0.3, what="CANCELED")


def test_cancel_of_a_finished_job_is_refused(cluster) -> None:  # noqa: ANN001
    """Flink answers 409 to cancelling a job in a globally terminal state; its CLI fails, printing
    why."""
    client, rest, cli = cluster
    job = _finite(client, rest, "finished before the cancel")
    refused = cli.run("cancel", job)
    assert refused.returncode != 0
    assert "already reached another terminal state (FINISHED)" in refused.stdout + refused.stderr
    assert rest.get(f"/jobs/{job}")["state"] == "FINISHED"


def test_stop_with_savepoint_counts_every_task_finished(cluster, tmp_path) -> None:  # noqa: ANN001
    """`flink stop --savepointPath DIR JOB`: the savepoint, then the job FINISHED with every task
    FINISHED in /jobs/overview and /jobs/:id (none CANCELED), as Flink's stop-with-savepoint ends
    them."""
    client, rest, cli = cluster
    job = _endless(client, rest, "stopped")
    out = _retried(cli, "stop", "--savepointPath", str(tmp_path / "sp"), job)
    path = Path(re.search(r"Savepoint completed\. Path: (\S+)", out).group(1))  # type: ignore[union-attr]
    assert (path / "_metadata").is_file()
    overview = next(j for j in rest.get("/jobs/overview")["jobs"] if j["jid"] == job)
    assert overview["state"] == "FINISHED" and overview["pending-operators"] == 0
    assert overview["tasks"]["finished"] == overview["tasks"]["total"] == 2 and overview["tasks"]["canceled"] == 0
    details = rest.get(f"/jobs/{job}")
    assert details["status-counts"]["FINISHED"] == 2 and details["status-counts"]["CANCELED"] == 0
    assert {v["status"] for v in details["vertices"]} == {"FINISHED"}
