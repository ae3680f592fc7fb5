"""Running a JobGraph: on the cluster named by MILLSTREAM_JOBMANAGER, or an embedded mini-cluster.

``capture_job_graphs()`` turns ``execute()`` into "record the JobGraph and stop the program", which
is how ``millstream plan JOB.py`` learns a script's job without running it (Flink's ``flink info``).
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Iterator


class ClusterUnavailableError(RuntimeError):
    pass


class JobGraphCaptured(Exception):
    """Raised by ``execute()`` in capture mode to stop the user program after its first job."""

    def __init__(self, job_graph: Any) -> None:
        super().__init__(job_graph.job_name)
        self.job_graph = job_graph


_capturing: contextvars.ContextVar[bool] = contextvars.ContextVar("millstream_capture", default=False)


@contextlib.contextmanager
def capture_job_graphs() -> Iterator[None]:
    token = _capturing.set(True)
    try:
        yield
    finally:
        _capturing.reset(token)


def execute(job_graph: Any, configuration: Any) -> Any:
    if _capturing.get():
        raise JobGraphCaptured(job_graph)
    raise ClusterUnavailableError(
        f"Cannot execute job '{job_graph.job_name}': the Millstream cluster runtime (JobManager, "
        "TaskManagers) is not available in this version. Use get_execution_plan() or get_job_graph() "
        "to inspect the job, or `millstream plan JOB.py`."
    )


def execute_and_collect(job_graph: Any, configuration: Any, collect_id: str, limit: int | None) -> Any:
    if _capturing.get():
        raise JobGraphCaptured(job_graph)
    raise ClusterUnavailableError(
        "Cannot execute_and_collect: the Millstream cluster runtime is not available in this version."
    )
