"""The adaptive scheduler and reactive mode on a real cluster (JobManager and TaskManager
processes, gRPC, Spark, files), as Flink documents them: a job starts with the slots there are,
a TaskManager that joins makes it rescale up from its latest checkpoint, and in reactive mode a
TaskManager killed with -9 makes it scale down, not fail; its keyed counts stay exact and its
FileSink output holds every record exactly once through every rescale."""
from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.common.restart_strategy import RestartStrategies
from millstream.datastream import StreamExecutionEnvironment
from millstream.runtime.execution_state import JobStatus

from .harness import ancestors, poll_for, ProcessCluster
from .jobs import assert_exactly_once, ended, NotePid, visible_lines
from .test_checkpoints import counting_job

pytestmark = pytest.mark.timeout(480)


def running_parallelism(client: ClusterClient, job_id: bytes) -> set[int] | None:
    """Every vertex's parallelism once all its current tasks are deployed and running (None before,
    or while restarting). A source subtask may have finished: after a rescale the bounded
    generator's splits stay with the subtasks that had them, as Flink's operator state does."""
    summary = client.status(job_id)
    assert not JobStatus.from_proto(summary.status).is_terminal(), summary.failure.message
    vertices = list(summary.vertices)
    if not vertices or any(set(v.tasks_per_state) - {"RUNNING", "FINISHED"} or "RUNNING" not in v.tasks_per_state
                           or sum(v.tasks_per_state.values()) != v.parallelism for v in vertices):
        return None
    return {v.parallelism for v in vertices}


def test_a_job_starts_below_its_parallelism_and_rescales_up_when_a_task_manager_joins(tmp_path: Path) -> None:
    options = {"jobmanager.scheduler": "adaptive",
               "jobmanager.adaptive-scheduler.resource-stabilization-timeout": "1 s",
               "execution.checkpointing.dir": str(tmp_path / "checkpoints")}
    with ProcessCluster(tmp_path, slots=1, tasks_per_slot=3, taskmanagers=1, jobmanager_options=options,
                        rest=True) as cluster:
        out, count = tmp_path / "out", 9000
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(2)  # the wish: one 1-slot TaskManager gives it 1
        env.enable_checkpointing(300)
        counting_job(env, out, count, 120)
        with ClusterClient(cluster.address) as client:
            job_id = client.submit(env.get_job_graph("adaptive, 1 then 2 slots").proto)
            assert poll_for(lambda: running_parallelism(client, job_id), 120, what="the job running") == {1}
            poll_for(lambda: client.status(job_id).checkpoints.num_completed >= 1, 60, what="a checkpoint")
            cluster.add_taskmanagers(1)
            poll_for(lambda: running_parallelism(client, job_id) == {2}, 240, interval=0.5,
                     what="the job running at parallelism 2")
            details = json.loads(urllib.request.urlopen(f"{cluster.rest_url}/jobs/{job_id.hex()}", timeout=10).read())
            assert details["schedulerType"] == "Adaptive"
            assert {v["parallelism"] for v in details["vertices"]} == {2}  # /jobs/:id follows the rescale
            assert {n["parallelism"] for n in details["plan"]["nodes"]} == {2}
            assert len(visible_lines(out)) < count, "the job ended before it could rescale: slow it down"
            summary = poll_for(lambda: ended(client, job_id), 240, interval=0.5, what="the job to end")
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
    assert summary.checkpoints.latest_restored_id >= 1  # the rescale resumed from a checkpoint
    assert {v.parallelism for v in summary.vertices} == {2}
    assert_exactly_once(out, count)


def test_reactive_mode_scales_up_when_a_task_manager_joins_and_down_without_failing_when_one_is_killed(tmp_path: Path) -> None:
    options = {"scheduler-mode": "reactive",
               "jobmanager.adaptive-scheduler.resource-stabilization-timeout": "1 s",
               "execution.checkpointing.dir": str(tmp_path / "checkpoints")}
    with ProcessCluster(tmp_path, slots=1, tasks_per_slot=3, taskmanagers=1, jobmanager_options=options) as cluster:
        out, pids, count = tmp_path / "out", tmp_path / "pids", 12_000
        pids.mkdir()
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(1)  # reactive mode ignores it: every slot, up to the max parallelism
        env.enable_checkpointing(300)
        # the default scheduler would fail this job when a TaskManager is lost
        env.set_restart_strategy(RestartStrategies.no_restart())
        counting_job(env, out, count, 150, NotePid(str(pids)))
        with ClusterClient(cluster.address) as client:
            job_id = client.submit(env.get_job_graph("reactive, join then kill -9").proto)
            assert poll_for(lambda: running_parallelism(client, job_id), 120, what="the job running") == {1}
            cluster.add_taskmanagers(1)
            poll_for(lambda: running_parallelism(client, job_id) == {2}, 240, interval=0.5,
                     what="the job running at parallelism 2")
            rescaled = client.status(job_id).checkpoints.num_completed
            poll_for(lambda: client.status(job_id).checkpoints.num_completed >= rescaled + 2, 60, what="two checkpoints more")
            pid = int((pids / "pid-1-1").read_text())  # subtask 1, in the rescaled graph (attempt 1)
            victims = [tm for tm in cluster.taskmanagers if tm.pid in ancestors(pid)]
            assert len(victims) == 1
            victims[0].kill()
            victims[0].wait(10)
            poll_for(lambda: running_parallelism(client, job_id) == {1}, 120, interval=0.5,
                     what="the job running at parallelism 1 again")
            assert len(visible_lines(out)) < count, "the job ended before it could rescale: slow it down"
            summary = poll_for(lambda: ended(client, job_id), 300, interval=0.5, what="the job to end")
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
    assert summary.num_restarts == 2  # two rescales; the restart strategy (none) was never asked
    assert {v.parallelism for v in summary.vertices} == {1}
    assert_exactly_once(out, count)
