"""``JobClient``: a handle on one submitted job (``env.execute_async()``), PyFlink's
``pyflink.common.JobClient``.

Every call goes to the JobManager over gRPC on a daemon thread and answers with a
:class:`CompletableFuture`, so a program can keep working while the cluster answers.
"""
from __future__ import annotations

import threading
from typing import Any

from millstream.common.completable_future import CompletableFuture
from millstream.common.job_id import JobID
from millstream.common.job_status import JobStatus


class JobClient:
    """Scoped to one job on the cluster (embedded or session) it was submitted to."""

    def __init__(self, session: Any, job_graph: Any, job_id: bytes) -> None:
        self._session = session  # millstream.client.execution._Session: owns the gRPC channel, waits for the result
        self._job_graph = job_graph
        self._job_id = JobID(job_id)
        self._result: CompletableFuture | None = None
        self._lock = threading.Lock()

    def _call(self, name: str, work: Any) -> CompletableFuture:
        return CompletableFuture._supply_async(work, f"job-client-{name}-{self._job_id}")

    def get_job_id(self) -> JobID:
        return self._job_id

    def get_job_status(self) -> CompletableFuture:
        """The job's current :class:`JobStatus`."""
        # lazy: the cluster's job states bring protobuf; `import millstream.datastream` stays without it
        from millstream.runtime.execution_state import JobStatus as ClusterJobStatus

        def status() -> JobStatus:
            summary = self._session.client.status(self._job_id.to_bytes())
            return JobStatus[ClusterJobStatus.from_proto(summary.status).name]  # the cluster's states have PyFlink's names

        return self._call("status", status)

    def cancel(self) -> CompletableFuture:
        """Asks the JobManager to cancel the job; completes (with None) once it accepted. The job
        then goes CANCELLING -> CANCELED."""
        return self._call("cancel", lambda: self._session.client.cancel(self._job_id.to_bytes()) and None)

    def stop_with_savepoint(self, advance_to_end_of_event_time: bool, savepoint_directory: str | None = None) -> CompletableFuture:
        """Flink's stop-with-savepoint: a synchronous savepoint, the sinks commit, the job ends
        FINISHED; completes with the savepoint's path. ``advance_to_end_of_event_time``: drain
        (MAX_WATERMARK and end of input first, so every window and timer fires into the savepoint).
        ``savepoint_directory`` None: the job's default, else the cluster's
        ``execution.checkpointing.savepoint-dir``."""
        return self._savepoint(savepoint_directory, stop=True, drain=bool(advance_to_end_of_event_time))

    def trigger_savepoint(self, savepoint_directory: str | None = None) -> CompletableFuture:
        """Takes a savepoint of the running job; completes with the savepoint's path."""
        return self._savepoint(savepoint_directory, stop=False)

    def _savepoint(self, directory: str | None, stop: bool, drain: bool = False) -> CompletableFuture:
        if directory is not None and not isinstance(directory, str):
            raise TypeError(f"the savepoint directory must be a str, got {type(directory).__name__}")
        return self._call("savepoint", lambda: self._session.client.savepoint(
            self._job_id.to_bytes(), directory or "", stop, drain=drain))

    def get_accumulators(self, class_loader: Any = None) -> CompletableFuture:
        """The job's accumulators: Millstream jobs have none, so an empty dict."""
        return self._call("accumulators", lambda: {})

    def get_job_execution_result(self, user_class_loader: Any = None) -> CompletableFuture:
        """Completes when the job ends: with its :class:`JobExecutionResult` when it FINISHED, with
        a JobExecutionException naming the status and cause when it FAILED or was CANCELED.
        (``user_class_loader``: PyFlink's older signature; there is nothing to load here.)"""
        with self._lock:
            if self._result is None:
                self._result = self._call("result", self._wait_for_result)
            return self._result

    def _wait_for_result(self) -> Any:
        return self._session.wait_for_result(self._job_graph, self._job_id.to_bytes())

    def __repr__(self) -> str:
        return f"JobClient(job_id={self._job_id}, job_name={self._job_graph.job_name!r})"
