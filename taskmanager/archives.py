"""Archives shipped with ``env.add_python_archive``: extracted into the task's working directory.

PyFlink extracts each such zip into the Python worker's working directory, under the target
directory name given (or the archive's file name), so user functions open its files by relative
path: ``open("data/data.txt")``. A task here runs in a Spark Python worker that serves many tasks,
of many jobs, one after the other; so the job's archives are extracted once per machine into
``<the job's artifact directory>/workdir/<target>``, and the worker changes into that ``workdir``
for the task's run only, returning to its own directory after it.

With ``millstream.spark.task-placement: slot`` a worker runs a slot's subtasks as threads at once,
and the working directory is the process's: the worker is in the workdir of the task that entered
last among those still running, and in its own directory once none runs (a task never returns to a
directory another task's job may since have deleted).

The archives arrive like the job's other artifacts (a file path per artifact, downloaded by the
TaskManager or written from the task payload); they are not put on ``sys.path``.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import threading
import zipfile
from typing import Iterator, Sequence

from millstream.runtime.artifact_names import check_archive_target
from millstream.proto import cluster_pb2 as cpb

__all__ = ["extract_archive", "task_working_directory"]

WORKDIR = "workdir"


def extract_archive(zip_path: str, target: str) -> str:
    """Extracts ``zip_path`` to ``<its directory>/workdir/<target>`` unless done already (by another
    task of the job on this machine); returns that ``workdir``. Concurrent tasks extract into their
    own temporary directories and the first rename wins, so no task ever sees half an archive."""
    workdir = os.path.join(os.path.dirname(zip_path), WORKDIR)
    dest = os.path.join(workdir, check_archive_target(target))
    if os.path.isdir(dest):
        return workdir
    os.makedirs(workdir, exist_ok=True)
    part = f"{dest}.{os.getpid()}.{threading.get_ident()}.part"
    try:
        with zipfile.ZipFile(zip_path) as archive:
            archive.extractall(part)  # member names with '..' or a leading '/' stay inside (zipfile's rule)
        try:
            os.rename(part, dest)
        except OSError:
            if not os.path.isdir(dest):
                raise
    finally:
        shutil.rmtree(part, ignore_errors=True)
    return workdir


@contextlib.contextmanager
def task_working_directory(tdd: cpb.TaskDeploymentDescriptor, artifact_paths: Sequence[str]) -> Iterator[list[str]]:
    """Extracts the job's archives and runs the block in their working directory (when the job has
    any); yields the artifact paths that remain for ``sys.path``."""
    targets = {ref.name: ref.archive_target for ref in tdd.artifacts if ref.archive_target}
    if not targets:
        yield list(artifact_paths)
        return
    workdir: str | None = None
    importable: list[str] = []
    for path in artifact_paths:
        name = os.path.basename(path)
        if name in targets and os.path.isfile(path):
            workdir = extract_archive(path, targets[name])
        else:
            importable.append(path)
    if workdir is None:  # archives announced but not delivered: a TaskManager bug, not the user's
        raise FileNotFoundError(f"The job's archives {sorted(targets)} were not delivered to this task")
    with _CWD_LOCK:
        _IN_WORKDIRS.append(workdir)
        os.chdir(workdir)
    try:
        yield importable
    finally:
        with _CWD_LOCK:
            _IN_WORKDIRS.remove(workdir)
            os.chdir(_IN_WORKDIRS[-1] if _IN_WORKDIRS else _WORKER_HOME)


# The worker's own directory, and the workdirs of its tasks running now (slot placement runs several).
_WORKER_HOME = os.getcwd()
_CWD_LOCK = threading.Lock()
_IN_WORKDIRS: list[str] = []
