"""Running a JobGraph: on the cluster named by MILLSTREAM_JOBMANAGER, or an embedded mini-cluster."""
from __future__ import annotations

from typing import Any


class ClusterUnavailableError(RuntimeError):
    pass


def execute(job_graph: Any, configuration: Any) -> Any:
    raise ClusterUnavailableError(
        f"Cannot execute job '{job_graph.job_name}': the Millstream cluster runtime (JobManager, "
        "TaskManagers) is not available in this version. Use get_execution_plan() or get_job_graph() "
        "to inspect the job."
    )


def execute_and_collect(env: Any, stream: Any, job_name: str | None, limit: int | None) -> Any:
    raise ClusterUnavailableError(
        "Cannot execute_and_collect: the Millstream cluster runtime is not available in this version."
    )
