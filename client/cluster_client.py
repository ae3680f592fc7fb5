"""A synchronous client of the JobManager's Dispatcher: what the CLI and ``env.execute()`` use."""
from __future__ import annotations

import logging
import uuid
from typing import Callable, Iterator, Sequence

import grpc
from tenacity import Retrying, before_sleep_log, retry_if_exception, stop_after_delay, wait_exponential_jitter

from millstream.proto import cluster_pb2 as cpb
from millstream.proto import cluster_pb2_grpc as cpb_grpc
from millstream.proto import jobgraph_pb2 as pb
from millstream.runtime.config import ConfigurationError, parse_host_port
from millstream.runtime.rpc import DEFAULT_MAX_MESSAGE_BYTES, sync_channel

log = logging.getLogger(__name__)

REACH_TIMEOUT_S = 3.0  # how long a client waits for a first answer before saying nothing is there


class JobManagerUnreachable(ConnectionError):
    """Nothing answers at the JobManager's address: one line that says so and what to do."""

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(
            f"No JobManager at {address} ({reason}). Start one with `millstream cluster start`, "
            "or run `python job.py` for an embedded cluster."
        )
        self.address = address
        self.reason = reason


def check_address(address: str) -> str:
    """``host:port`` (``[v6]:port`` too), else a ConfigurationError naming the value."""
    _, port = parse_host_port(address, "JobManager address")
    if not port:
        raise ConfigurationError(f"JobManager address: expected host:port, got {address!r}")
    return address


def _unreachable_reason(error: grpc.RpcError) -> str:
    details = (error.details() or "").lower()
    if error.code() is grpc.StatusCode.DEADLINE_EXCEEDED:
        return f"no answer within {REACH_TIMEOUT_S:g} s"
    if "refused" in details:
        return "connection refused"
    if "dns" in details or "resolv" in details or "lookup" in details or "name or service" in details:
        return "cannot resolve the host name"
    return (error.details() or error.code().name).splitlines()[0]


def _retryable(error: BaseException) -> bool:
    return isinstance(error, grpc.RpcError) and error.code() in (grpc.StatusCode.UNAVAILABLE,)


_UNACKNOWLEDGED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def _unacknowledged(error: BaseException) -> bool:
    """The submission may or may not have arrived: safe to resend, as it carries its submission id."""
    return isinstance(error, grpc.RpcError) and error.code() in _UNACKNOWLEDGED


class JobSubmissionError(RuntimeError):
    """The JobManager never acknowledged a submission; the job id was cancelled so nothing runs."""


def _retryable_read(error: BaseException) -> bool:
    """A read (collected results by offset) is idempotent: safe to repeat on a transient error."""
    return isinstance(error, grpc.RpcError) and error.code() in _UNACKNOWLEDGED


class ClusterClient:
    def __init__(self, address: str, rpc_timeout_s: float = 10.0, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
        self.address = check_address(address)
        self.rpc_timeout_s = rpc_timeout_s
        self._channel = sync_channel(address, max_message_bytes)
        self._stub = cpb_grpc.DispatcherStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "ClusterClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _retrying(self, give_up_after_s: float, retryable: Callable[[BaseException], bool] = _retryable) -> Retrying:
        # Only for idempotent calls: a submission carries its submission id.
        return Retrying(
            retry=retry_if_exception(retryable),
            wait=wait_exponential_jitter(multiplier=0.1, max=2.0),
            stop=stop_after_delay(give_up_after_s),
            before_sleep=before_sleep_log(log, logging.WARNING),
            reraise=True,
        )

    def check_reachable(self, timeout_s: float = REACH_TIMEOUT_S) -> None:
        """Raises :class:`JobManagerUnreachable` unless something answers at the address within
        ``timeout_s`` (any answer, even an error, means a server is there)."""
        try:
            self._stub.GetClusterOverview(cpb.Empty(), timeout=timeout_s)
        except grpc.RpcError as exc:
            if exc.code() in _UNACKNOWLEDGED:
                raise JobManagerUnreachable(self.address, _unreachable_reason(exc)) from None

    def submit(self, job_graph: pb.JobGraph, artifacts: Sequence[cpb.Artifact] = (), give_up_after_s: float = 30.0) -> bytes:
        """Submits with this client's submission id and the JobGraph's job id, resending on
        UNAVAILABLE / DEADLINE_EXCEEDED (the Dispatcher answers a resend with the same job). If no
        answer comes within ``give_up_after_s``, the job id is cancelled before giving up, so a job
        never keeps running unknown to the user. Nothing at the address at all is
        :class:`JobManagerUnreachable` within a few seconds: then the job never left this process."""
        self.check_reachable()
        request = cpb.SubmitJobRequest(submission_id=uuid.uuid4().hex, job_graph=job_graph.SerializeToString(), artifacts=artifacts)
        try:
            for attempt in self._retrying(give_up_after_s, _unacknowledged):
                with attempt:
                    return self._stub.SubmitJob(request, timeout=self.rpc_timeout_s).job_id
        except grpc.RpcError as exc:
            if exc.code() not in _UNACKNOWLEDGED:
                raise
            raise JobSubmissionError(self._give_up(job_graph.job_id, exc)) from exc
        raise AssertionError("unreachable")

    def _give_up(self, job_id: bytes, error: grpc.RpcError) -> str:
        message = f"The JobManager at {self.address} did not acknowledge job {job_id.hex()} ({error.code().name})"
        try:
            self._stub.CancelJob(cpb.JobIdRequest(job_id=job_id), timeout=self.rpc_timeout_s)
        except grpc.RpcError as cancel_error:
            if cancel_error.code() is not grpc.StatusCode.NOT_FOUND:  # NOT_FOUND: it never arrived, and now never starts
                return f"{message}, and cancelling it failed ({cancel_error.code().name}): it may be running; cancel it with `millstream cancel {job_id.hex()}`."
        return f"{message}; the job was cancelled."

    def wait(self, job_id: bytes) -> Iterator[cpb.JobStatusUpdate]:
        """Status updates until the job is terminal (no deadline: jobs run long)."""
        yield from self._stub.WaitJobResult(cpb.JobIdRequest(job_id=job_id))

    def fetch_collected(self, job_id: bytes, offset: int, max_bytes: int, give_up_after_s: float = 60.0) -> cpb.FetchCollectResponse:
        """Collected batches from ``offset`` on (acknowledging those before it), at most about
        ``max_bytes``. Idempotent by the offset, so lost answers and timeouts are retried."""
        request = cpb.FetchCollectRequest(job_id=job_id, offset=offset, max_bytes=max_bytes)
        for attempt in self._retrying(give_up_after_s, _retryable_read):
            with attempt:
                return self._stub.FetchCollectResults(request, timeout=self.rpc_timeout_s)
        raise AssertionError("unreachable")

    def status(self, job_id: bytes) -> cpb.JobSummary:
        return self._stub.GetJobStatus(cpb.JobIdRequest(job_id=job_id), timeout=self.rpc_timeout_s)

    def cancel(self, job_id: bytes) -> cpb.JobSummary:
        return self._stub.CancelJob(cpb.JobIdRequest(job_id=job_id), timeout=self.rpc_timeout_s)

    def savepoint(self, job_id: bytes, target_directory: str = "", stop: bool = False, timeout_s: float = 600.0) -> str:
        """Takes a savepoint of a running job (``stop``: then cancels it); returns its path."""
        request = cpb.SavepointRequest(job_id=job_id, target_directory=target_directory, stop=stop)
        return self._stub.TriggerSavepoint(request, timeout=timeout_s).path

    def list_jobs(self) -> list[cpb.JobSummary]:
        return list(self._stub.ListJobs(cpb.Empty(), timeout=self.rpc_timeout_s).jobs)

    def overview(self) -> cpb.ClusterOverview:
        return self._stub.GetClusterOverview(cpb.Empty(), timeout=self.rpc_timeout_s)

    def wait_until_ready(self, timeout_s: float = 30.0) -> cpb.ClusterOverview:
        for attempt in self._retrying(timeout_s):
            with attempt:
                return self.overview()
        raise AssertionError("unreachable")
