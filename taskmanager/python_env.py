"""A job's Python environment inside the Spark worker that runs its task (PyFlink's
``set_python_requirements`` and ``set_python_executable``, worker side).

Requirements: the client ships the requirements file and its optional package cache as one
artifact (:data:`REQUIREMENTS_ARTIFACT`). The first task of the job on a machine runs
``pip install --target <job dir>/python-requirements -r requirements.txt`` with this worker's
interpreter (``--no-index --find-links <cache> --no-build-isolation`` when a cache came with it,
so no network is needed, even to build an sdist from the cache); later tasks of the job on that
machine find it done. The directory goes on the task's ``sys.path``, ahead of the worker's own packages, as PyFlink puts the installed requirements first
on the PYTHONPATH of its Python workers.

Executable: a TaskManager's Spark workers all run the interpreter its SparkSession was started
with (``spark.pyspark.python``, fixed when the session starts and shared by every job on that
TaskManager), so a job cannot pick its own. A job that names another interpreter fails with a
message saying so; naming the one the workers run is fine. As in PyFlink's workers, the task sees
the named interpreter in its environment variable ``python`` (:func:`executable_variable`).
"""
from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import zipfile
from contextlib import contextmanager
from typing import Iterator

from millstream.runtime.python_requirements import REQUIREMENTS_ARTIFACT, REQUIREMENTS_FILE

PYTHON_EXECUTABLE = "python.executable"  # PyFlink's configuration key
EXECUTABLE_VARIABLE = "python"  # the environment variable PyFlink's Python workers see it in
PIP_TIMEOUT_S = 600.0


class PythonEnvironmentError(RuntimeError):
    """The job's Python environment cannot be set up in this worker."""


def check_executable(configuration: dict[str, str]) -> None:
    wanted = configuration.get(PYTHON_EXECUTABLE)
    if not wanted:
        return
    if os.path.realpath(wanted) != os.path.realpath(sys.executable):
        raise PythonEnvironmentError(
            f"{PYTHON_EXECUTABLE} is {wanted!r} but this TaskManager's Spark workers run {sys.executable!r}: "
            "the interpreter is fixed when the TaskManager starts its SparkSession (spark.pyspark.python, shared "
            "by every job on it), so one job cannot choose another. Start the TaskManager with that interpreter, "
            "or do not call set_python_executable.")


@contextmanager
def executable_variable(configuration: dict[str, str]) -> Iterator[None]:
    """While the task runs, ``os.environ["python"]`` is the job's ``python.executable`` (PyFlink
    starts its Python workers with it there); the worker's own value comes back after, as Spark
    reuses the worker for other jobs' tasks."""
    wanted = configuration.get(PYTHON_EXECUTABLE)
    if not wanted:
        yield
        return
    previous = os.environ.get(EXECUTABLE_VARIABLE)
    os.environ[EXECUTABLE_VARIABLE] = wanted
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(EXECUTABLE_VARIABLE, None)
        else:
            os.environ[EXECUTABLE_VARIABLE] = previous


def prepare(configuration: dict[str, str], artifact_paths: list[str]) -> list[str]:
    """The task's ``sys.path`` entries: the artifacts, with the installed requirements first."""
    check_executable(configuration)
    paths = [p for p in artifact_paths if os.path.basename(p) != REQUIREMENTS_ARTIFACT]
    bundle = next((p for p in artifact_paths if os.path.basename(p) == REQUIREMENTS_ARTIFACT), None)
    if bundle is None:
        return paths
    return [install_requirements(bundle), *paths]


def install_requirements(bundle: str) -> str:
    """Installs the bundle's requirements once per job directory; returns the install target."""
    job_dir = os.path.dirname(bundle)
    target = os.path.join(job_dir, "python-requirements")
    done = os.path.join(job_dir, ".python-requirements.done")
    with open(os.path.join(job_dir, ".python-requirements.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the job's other tasks on this machine wait for one install
        if os.path.exists(done):
            return target
        source = os.path.join(job_dir, "python-requirements-src")
        with zipfile.ZipFile(bundle) as z:
            z.extractall(source)
        command = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
                   "--target", target, "-r", os.path.join(source, REQUIREMENTS_FILE)]
        cache = os.path.join(source, "cache")
        if os.path.isdir(cache):
            # offline: only the cache. An sdist there must build offline too, so with the worker's
            # own setuptools (pip's build isolation would fetch setuptools from an index)
            command += ["--no-index", "--find-links", cache, "--no-build-isolation"]
        try:
            run = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise PythonEnvironmentError(f"Installing the job's Python requirements took over {PIP_TIMEOUT_S:.0f} s") from None
        if run.returncode != 0:
            raise PythonEnvironmentError(
                f"Installing the job's Python requirements failed (pip exit code {run.returncode}):\n"
                f"{(run.stderr or run.stdout)[-3000:]}")
        open(done, "w").close()
    return target
