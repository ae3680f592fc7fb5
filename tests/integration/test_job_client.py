"""``env.execute_async()`` and its JobClient against a session cluster and the embedded one."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from millstream.client.execution import JobExecutionException
from millstream.common import CompletableFuture, JobClient, JobExecutionResult, JobID, JobStatus
from millstream.datastream import StreamExecutionEnvironment

from .harness import ClusterSpec, jobmanager_env, poll_for
from .jobs import Endless

pytestmark = pytest.mark.timeout(180)
CLUSTER = ClusterSpec()


def status_of(client: JobClient) -> JobStatus:
    future = client.get_job_status()
    assert isinstance(future, CompletableFuture)
    return future.result(timeout=30)


def test_a_streaming_job_runs_until_the_job_client_cancels_it(cluster) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.add_source(Endless()).map(lambda x: x + 1).filter(lambda x: x < 0).print()
    with jobmanager_env(cluster.address):
        client = env.execute_async("endless")
    assert isinstance(client, JobClient) and isinstance(client.get_job_id(), JobID)
    assert len(str(client.get_job_id())) == 32
    result = client.get_job_execution_result()
    poll_for(lambda: status_of(client) is JobStatus.RUNNING, 60, what="the job to run")
    assert not result.done()  # execute_async did not wait, and the job has no end
    assert client.cancel().result(timeout=30) is None
    poll_for(lambda: status_of(client) is JobStatus.CANCELED, 30, what="the job to be canceled")
    assert status_of(client).is_globally_terminal_state()
    with pytest.raises(JobExecutionException, match="CANCELED"):
        result.result(timeout=30)


def test_a_bounded_jobs_execution_result(cluster) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.from_sequence(1, 500).map(lambda x: x * 2).filter(lambda x: x < 0).print()
    with jobmanager_env(cluster.address):
        client = env.execute_async("bounded")
    result = client.get_job_execution_result().result(timeout=120)
    assert isinstance(result, JobExecutionResult)
    assert result.get_job_id() == str(client.get_job_id()) and result.get_job_name() == "bounded"
    assert status_of(client) is JobStatus.FINISHED


def savepoint_once_tasks_run(client: JobClient, directory: str) -> str | None:
    """The savepoint's path; None while the JobManager refuses because tasks are still deploying."""
    try:
        return client.trigger_savepoint(directory).result(timeout=60)
    except Exception as exc:
        if "not all running yet" in str(exc):
            return None
        raise


def test_trigger_savepoint_and_stop_with_savepoint(cluster, tmp_path) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.enable_checkpointing(60_000)
    env.set_default_savepoint_directory(str(tmp_path / "default"))
    assert env.get_default_savepoint_directory() == str(tmp_path / "default")
    env.add_source(Endless()).filter(lambda x: x < 0).print()
    with jobmanager_env(cluster.address):
        client = env.execute_async("savepoints")
    poll_for(lambda: status_of(client) is JobStatus.RUNNING, 60, what="the job to run")
    first = poll_for(lambda: savepoint_once_tasks_run(client, str(tmp_path / "a")), 60, what="a savepoint")
    assert first.startswith(str(tmp_path / "a")) and os.path.isdir(first)
    assert status_of(client) is JobStatus.RUNNING
    by_default = client.trigger_savepoint().result(timeout=60)  # no directory: the job's default
    assert by_default.startswith(str(tmp_path / "default")) and os.path.isdir(by_default)
    second = client.stop_with_savepoint(False, str(tmp_path / "b")).result(timeout=60)
    assert second.startswith(str(tmp_path / "b")) and os.path.isdir(second)
    poll_for(lambda: status_of(client).is_globally_terminal_state(), 30, what="the job to stop")


EMBEDDED = textwrap.dedent("""
    import time
    from millstream.common import JobStatus
    from millstream.datastream import SourceFunction, StreamExecutionEnvironment

    class Endless(SourceFunction):
        def __init__(self):
            self.running = True
        def run(self, ctx):
            while self.running:
                ctx.collect(1)
                time.sleep(0.01)
        def cancel(self):
            self.running = False

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.add_source(Endless()).filter(lambda x: x < 0).print()
    client = env.execute_async("embedded endless")
    deadline = time.time() + 120
    while client.get_job_status().result() is not JobStatus.RUNNING and time.time() < deadline:
        time.sleep(0.2)
    print("STATUS", client.get_job_status().result().name, flush=True)
    client.cancel().result()
    while client.get_job_status().result() is not JobStatus.CANCELED and time.time() < deadline:
        time.sleep(0.2)
    print("STATUS", client.get_job_status().result().name, flush=True)

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.from_collection([1, 2, 3]).map(lambda x: x * 2).print()
    result = env.execute_async("embedded bounded").get_job_execution_result().result()
    print("RESULT", result.get_job_name(), flush=True)
""")


def test_execute_async_on_the_embedded_cluster(tmp_path) -> None:
    job = tmp_path / "job.py"
    job.write_text(EMBEDDED)
    env = {k: v for k, v in os.environ.items() if k != "MILLSTREAM_JOBMANAGER"}
    run = subprocess.run([sys.executable, str(job)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=170)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = [line for line in run.stdout.splitlines() if line.startswith(("STATUS", "RESULT"))]
    assert lines == ["STATUS RUNNING", "STATUS CANCELED", "RESULT embedded bounded"], run.stdout[-2000:]
    assert sorted(line for line in run.stdout.splitlines() if line in ("2", "4", "6")) == ["2", "4", "6"]
