"""The result of a finished job (``env.execute()``), shaped like PyFlink's."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from millstream.common.job_id import JobID

from millstream.common.job_id import JobID


class JobExecutionResult:
    def __init__(self, job_id: str, job_name: str, net_runtime_ms: int, accumulators: dict[str, Any] | None = None) -> None:
        self._job_id = job_id
        self._job_name = job_name
        self._net_runtime_ms = net_runtime_ms
        self._accumulators = accumulators or {}

    def get_job_id(self) -> JobID:
        """The job's :class:`JobID` (a str of its 32 hex digits, as before)."""
        return JobID(self._job_id)

    def get_job_name(self) -> str:
        return self._job_name

    def get_net_runtime(self) -> int:
        """Milliseconds from the job's start to its end on the cluster."""
        return self._net_runtime_ms

    def get_accumulator_result(self, name: str) -> Any:
        return self._accumulators.get(name)

    def get_all_accumulator_results(self) -> dict[str, Any]:
        return dict(self._accumulators)

    def is_job_execution_result(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"JobExecutionResult(job_id={self._job_id}, net_runtime={self._net_runtime_ms} ms)"
