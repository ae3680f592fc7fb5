"""A job's Python environment on a real cluster: set_python_requirements pip-installs a package
offline (a local wheel cache) into the job's directory on the TaskManager and its tasks import it;
set_python_executable names the workers' interpreter or fails the job saying why it cannot."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from millstream.client.execution import JobExecutionException
from millstream.datastream import StreamExecutionEnvironment

from tests.packages import requirements

from .harness import ClusterSpec, jobmanager_env

pytestmark = pytest.mark.timeout(240)
CLUSTER = ClusterSpec(tasks_per_slot=3)


def use_tinypkg(x):
    import tinypkg  # only the tasks have it: installed from the job's requirements

    return f"{x}:{tinypkg.VALUE}"


def test_requirements_are_installed_for_the_jobs_tasks(cluster, tmp_path: Path) -> None:
    with pytest.raises(ImportError):
        import tinypkg  # noqa: F401  (the client does not have it)
    req, cache = requirements(tmp_path)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.set_python_requirements(str(req), str(cache))
    stream = env.from_collection([1, 2, 3, 4]).rebalance().map(use_tinypkg)
    with jobmanager_env(cluster.address), stream.execute_and_collect("requirements") as results:
        assert sorted(results) == ["1:42", "2:42", "3:42", "4:42"]


def worker_gc(_: int) -> tuple[tuple[int, int, int], bool]:
    import gc

    return gc.get_threshold(), gc.get_freeze_count() > 0


def test_the_tasks_run_with_the_daemons_garbage_collector_settings(cluster) -> None:
    """Set once in Spark's Python daemon before it forks the workers (spark.daemon.GC_THRESHOLDS)."""
    from millstream.taskmanager.spark.daemon import GC_THRESHOLDS

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    with jobmanager_env(cluster.address), env.from_collection([1, 2]).rebalance().map(worker_gc).execute_and_collect("gc") as results:
        assert list(results) == [(GC_THRESHOLDS, True)] * 2


def test_python_executable_other_than_the_workers_fails_the_job_with_the_reason(cluster, tmp_path: Path) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.set_python_executable(str(tmp_path / "bin" / "python3.99"))
    stream = env.from_collection([1, 2]).map(lambda x: x + 1)
    with jobmanager_env(cluster.address), pytest.raises(JobExecutionException) as info:
        with stream.execute_and_collect("other python") as results:
            list(results)
    assert "python.executable is" in str(info.value) and "cannot choose another" in str(info.value)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    link = tmp_path / "python-link"
    link.symlink_to(sys.executable)
    env.set_python_executable(str(link))  # the TaskManager's own interpreter (its Spark workers run it)
    stream = env.from_collection([1, 2]).map(lambda x: (x + 1, python_variable()))
    with jobmanager_env(cluster.address), stream.execute_and_collect("same python") as results:
        # as in PyFlink's workers, the task sees the named interpreter in os.environ["python"]
        assert sorted(results) == [(2, str(link)), (3, str(link))]
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    stream = env.from_collection([1]).map(lambda x: python_variable())
    with jobmanager_env(cluster.address), stream.execute_and_collect("no python set") as results:
        assert list(results) != [str(link)]  # only that job's tasks saw it: the workers' own value is back


def python_variable():
    import os

    return os.environ.get("python")
