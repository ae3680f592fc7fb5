"""A session cluster of real processes started by the CLI: run, list, status, and kill -9 detection."""
from __future__ import annotations

import os
import signal
import textwrap
import time

import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.datastream import StreamExecutionEnvironment

from millstream.runtime.execution_state import JobStatus

from .harness import cli, poll_for, session_cluster
from .jobs import ParallelEndless

pytestmark = pytest.mark.timeout(240)

HEARTBEAT_TIMEOUT_S = 3.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    directory = tmp_path_factory.mktemp("cluster")
    with session_cluster(directory, "--taskmanagers", "2", "--slots", "2", "--port", "0", "-D", "heartbeat.interval=500 ms",
                         "-D", f"heartbeat.timeout={int(HEARTBEAT_TIMEOUT_S * 1000)} ms") as (env, _):
        yield env, directory


def _state(directory) -> dict:
    import json

    with open(os.path.join(directory, "cluster.json")) as f:
        return json.load(f)


def test_run_list_and_status_through_the_cli(cluster, tmp_path) -> None:
    env, directory = cluster
    job = tmp_path / "squares.py"
    job.write_text(textwrap.dedent("""
        from millstream.datastream import StreamExecutionEnvironment

        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(4)
        stream = env.from_sequence(1, 100).map(lambda x: x * x)
        with stream.execute_and_collect("squares") as results:
            print("SUM", sum(results))
    """))
    run = cli("run", str(job), env=env)
    assert run.returncode == 0, run.stderr
    assert f"SUM {sum(x * x for x in range(1, 101))}" in run.stdout
    listed = cli("list", env=env)
    assert "FINISHED" in listed.stdout and "squares" in listed.stdout
    job_id = next(line.split()[0] for line in listed.stdout.splitlines() if "squares" in line)
    status = cli("status", job_id, env=env)
    assert "FINISHED" in status.stdout and "FINISHED 4" in status.stdout


def test_a_bad_job_id_is_a_clear_cli_error(cluster) -> None:
    env, _ = cluster
    result = cli("status", "nope", env=env)
    assert result.returncode == 2 and "Not a job id" in result.stderr
    result = cli("status", "00" * 16, env=env)
    assert result.returncode == 1 and result.stderr == f"millstream: error: No job with id {'00' * 16}.\n"


def test_cancel_through_the_cli_stops_the_job_and_frees_its_slots(cluster) -> None:
    env, directory = cluster
    with ClusterClient(_state(directory)["jobmanager"]) as client:
        job_env = StreamExecutionEnvironment.get_execution_environment()
        job_env.set_parallelism(2)
        job_env.add_source(ParallelEndless()).add_sink(lambda x: None)
        job_id = client.submit(job_env.get_job_graph("to cancel").proto)
        poll_for(lambda: client.status(job_id).tasks_per_state.get("RUNNING") == 2, 60, what="tasks running")
        cancelled = cli("cancel", job_id.hex(), env=env, timeout=60)
        assert cancelled.returncode == 0, cancelled.stderr
        assert "CANCELED" in cancelled.stdout
        poll_for(lambda: client.overview().slots_available == 4, 15, what="slots to be freed")


def test_kill_9_of_a_task_manager_is_detected_and_fails_the_job(cluster) -> None:
    env, directory = cluster
    state = _state(directory)
    with ClusterClient(state["jobmanager"]) as client:
        job_env = StreamExecutionEnvironment.get_execution_environment()
        job_env.set_parallelism(4)  # all four slots: both TaskManagers host tasks
        job_env.add_source(ParallelEndless()).add_sink(lambda x: None)
        job_id = client.submit(job_env.get_job_graph("victim").proto)
        poll_for(lambda: client.status(job_id).tasks_per_state.get("RUNNING") == 4, 60, what="all tasks running")
        victim = state["pids"][-1]
        killed_at = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        poll_for(
            lambda: JobStatus.from_proto(client.status(job_id).status) is JobStatus.FAILED,
            HEARTBEAT_TIMEOUT_S + 5, interval=0.05, what="the job to fail",
        )
        detected = time.monotonic() - killed_at
        assert detected <= HEARTBEAT_TIMEOUT_S + 1.0, f"detected after {detected:.1f} s"
        assert "was lost" in client.status(job_id).failure.message
        poll_for(lambda: client.overview().taskmanagers == 1, 10, what="the lost TaskManager to leave")
