"""A synchronous client of the JobManager's Dispatcher: what the CLI and ``env.execute()`` use.

Where the JobManager is (:class:`LeaderResolver`): one fixed address (no HA); or several,
``MILLSTREAM_JOBMANAGER=a:6123,b:6123``, of which the one that answers as the leader is used; or,
with ``high-availability.type: zookeeper``, the leader ZooKeeper names (Flink's leader retrieval).
A JobManager that is not the leader answers UNAVAILABLE "... is not the leader": the client then
looks the leader up again and repeats the call, a bounded number of times
(:class:`LeaderFailover`), and finally says which addresses it tried and what each answered.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
from typing import Any, Callable, Iterator, Sequence

import grpc
from tenacity import Retrying, before_sleep_log, retry_if_exception, stop_after_delay, wait_exponential_jitter

from millstream.proto import cluster_pb2 as cpb
from millstream.proto import cluster_pb2_grpc as cpb_grpc
from millstream.proto import jobgraph_pb2 as pb
from millstream.runtime import config as cfg
from millstream.runtime.config import ConfigurationError, parse_host_port
from millstream.runtime.rpc.service import DEFAULT_MAX_MESSAGE_BYTES, sync_channel
from millstream.runtime.rpc.security import Credentials, client_credentials
from millstream.runtime.rpc.tls import tls_problem

log = logging.getLogger(__name__)

REACH_TIMEOUT_S = 3.0  # how long a client waits for a first answer before saying nothing is there
LEADER_LOOKUP_TIMEOUT_S = 5.0  # the CLI's wait for ZooKeeper and for a leader to be named
MAX_LEADER_LOOKUPS = 5  # look-ups of the leader after "not the leader" answers, per call
NOT_THE_LEADER = "is not the leader"  # in a standby JobManager's UNAVAILABLE answer (HA.md)


class JobManagerUnreachable(ConnectionError):
    """Nothing answers at the JobManager's address: one line that says so and what to do."""

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(
            f"No JobManager at {address} ({reason}). Start one with `millstream cluster start`, "
            "or run `python job.py` for an embedded cluster."
        )
        self.address = address
        self.reason = reason


class JobManagerTlsError(JobManagerUnreachable):
    """A JobManager may be there, but no TLS connection could be made with it: the message says
    what failed (a certificate not trusted, one side without TLS) and which options to check."""

    def __init__(self, address: str, reason: str) -> None:
        ConnectionError.__init__(self, f"Cannot connect to the JobManager at {address}: {reason}")
        self.address = address
        self.reason = reason


class NoJobManagerLeader(JobManagerUnreachable):
    """No JobManager answers as the leader: the message names where the client looked and what it
    found there."""

    def __init__(self, message: str, tried: Sequence[tuple[str, str]] = ()) -> None:
        ConnectionError.__init__(self, message)
        self.address = ", ".join(a for a, _ in tried)
        self.reason = message
        self.tried = list(tried)


def check_address(address: str) -> str:
    """``host:port`` (``[v6]:port`` too), else a ConfigurationError naming the value."""
    _, port = parse_host_port(address, "JobManager address")
    if not port:
        raise ConfigurationError(f"JobManager address: expected host:port, got {address!r}")
    return address


def parse_addresses(text: str, what: str = cfg.ENV_JOBMANAGER) -> list[str]:
    """``"a:6123, b:6123"`` -> ``["a:6123", "b:6123"]`` (each checked, duplicates dropped), else a
    ConfigurationError naming the value and the bad entry."""
    parts = [part.strip() for part in text.split(",")]
    if not any(parts):
        raise ConfigurationError(f"{what}: expected host:port[,host:port...], got {text!r}")
    if "" in parts:
        raise ConfigurationError(f"{what}: an empty address in {text!r} (expected host:port[,host:port...])")
    for part in parts:
        try:
            _, port = parse_host_port(part, what)
        except ConfigurationError:
            port = None
        if not port:
            raise ConfigurationError(f"{what}: expected host:port, got {part!r}" + (f" in {text!r}" if len(parts) > 1 else ""))
    return list(dict.fromkeys(parts))


def is_not_leader(error: BaseException) -> bool:
    """A standby JobManager's answer: the call was not served, so it is safe to send it to the leader."""
    return (isinstance(error, grpc.RpcError) and error.code() is grpc.StatusCode.UNAVAILABLE
            and NOT_THE_LEADER in (error.details() or ""))


def _answer(error: grpc.RpcError) -> str:
    if is_not_leader(error):
        return "not the leader"
    return _unreachable_reason(error)


def choose_leader(addresses: Sequence[str], probe: Callable[[str], "str | None"]) -> tuple[str | None, list[tuple[str, str]]]:
    """The first address whose ``probe`` finds the leader (``probe`` returns None for the leader,
    else why not), and what the others answered, in order."""
    tried: list[tuple[str, str]] = []
    for address in addresses:
        reason = probe(address)
        if reason is None:
            return address, tried
        tried.append((address, reason))
    return None, tried


def _tried_text(tried: Sequence[tuple[str, str]]) -> str:
    return "; ".join(f"{address}: {reason}" for address, reason in tried)


class LeaderFailover:
    """How often one call may look the leader up again (pure policy): at most ``max_lookups``
    times and until ``budget_s`` has passed; ``record`` raises :class:`NoJobManagerLeader`
    naming every answer once either is spent."""

    def __init__(self, where: str, max_lookups: int = MAX_LEADER_LOOKUPS, budget_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.where = where
        self.max_lookups = max_lookups
        self._clock = clock
        self._deadline = clock() + budget_s
        self.budget_s = budget_s
        self.lookups = 0
        self.tried: list[tuple[str, str]] = []

    def record(self, address: str, reason: str) -> None:
        """``address`` answered ``reason`` instead of serving the call: may we look again?"""
        self.tried.append((address, reason))
        self.lookups += 1
        if self.lookups > self.max_lookups or self._clock() >= self._deadline:
            raise NoJobManagerLeader(
                f"No JobManager leader answered ({self.where}) after {len(self.tried)} attempts in "
                f"{self.budget_s:g} s: {_tried_text(self.tried)}", self.tried)

    def pause(self) -> float:
        """Seconds to wait before asking the same address again (doubling, at most 1 s)."""
        return min(0.1 * 2 ** self.lookups, 1.0)


class LeaderResolver:
    """Finds the JobManager leader: a fixed address, one of several, or the one ZooKeeper names."""

    def __init__(self, addresses: Sequence[str] = (), settings: Any = None,
                 lookup_timeout_s: float = LEADER_LOOKUP_TIMEOUT_S, probe_timeout_s: float = REACH_TIMEOUT_S,
                 credentials: Credentials | None = None) -> None:
        """``credentials``: what this client presents to JobManagers (TLS, the client token)."""
        if not addresses and settings is None:
            raise ConfigurationError("no JobManager address and no high-availability.type: zookeeper")
        self.credentials = credentials or Credentials()
        self.addresses = list(addresses)
        self.settings = settings
        self.lookup_timeout_s = lookup_timeout_s
        self.probe_timeout_s = probe_timeout_s
        self._services: Any = None
        self._retrieval: Any = None

    @classmethod
    def from_configuration(cls, conf: cfg.Configuration, addresses: str | None,
                           lookup_timeout_s: float = LEADER_LOOKUP_TIMEOUT_S) -> "LeaderResolver | None":
        """ZooKeeper when ``conf`` says ``high-availability.type: zookeeper``; else the
        comma-separated ``addresses`` (None when there are none: no cluster is named). The client
        presents the credentials ``conf`` gives it (security.ssl.*, security.auth.client-token)."""
        from millstream.runtime.ha import HaSettings  # lazy: kazoo (ZooKeeper) loads only when HA is configured

        settings = HaSettings.from_configuration(conf)
        credentials = client_credentials(conf)
        if settings.zookeeper:
            return cls(settings=settings, lookup_timeout_s=lookup_timeout_s, credentials=credentials)
        if not addresses:
            return None
        return cls(parse_addresses(addresses, "JobManager address"), lookup_timeout_s=lookup_timeout_s,
                   credentials=credentials)

    @property
    def highly_available(self) -> bool:
        """Whether another JobManager may lead next (so a failing one is worth looking past)."""
        return self.settings is not None or len(self.addresses) > 1

    def describe(self) -> str:
        if self.settings is not None:
            return f"ZooKeeper {self.settings.quorum}, cluster {self.settings.cluster_id}"
        return ", ".join(self.addresses)

    def resolve(self, avoid: str | None = None) -> str:
        """The leader's address; ``avoid`` (an address that just failed) is returned only when
        nothing else is named within the look-up timeout. :class:`NoJobManagerLeader` when none."""
        if self.settings is not None:
            return self._from_zookeeper(avoid)
        if len(self.addresses) == 1:
            return self.addresses[0]  # no HA: the one JobManager (check_reachable says if it is not there)
        leader, tried = choose_leader(self.addresses, self._probe)
        if leader is None:
            raise NoJobManagerLeader(f"No JobManager leader among {self.describe()}: {_tried_text(tried)}", tried)
        return leader

    def _probe(self, address: str) -> str | None:
        channel = sync_channel(address, credentials=self.credentials)
        try:
            cpb_grpc.DispatcherStub(channel).GetClusterOverview(cpb.Empty(), timeout=self.probe_timeout_s)
            return None
        except grpc.RpcError as exc:
            if exc.code() in _UNACKNOWLEDGED:
                return _answer(exc)
            return None  # it answers, and not with "not the leader": it serves
        finally:
            channel.close()

    def _from_zookeeper(self, avoid: str | None) -> str:
        from millstream.runtime.ha import HaError, ZooKeeperHaServices  # lazy: kazoo, only with HA

        settings = self.settings
        if self._services is None:
            # A client waits briefly: a dead quorum must be a quick, clear error, not a hang.
            quick = dataclasses.replace(settings, connection_timeout_ms=min(
                settings.connection_timeout_ms, int(self.lookup_timeout_s * 1000)))
            try:
                self._services = ZooKeeperHaServices(quick, name="millstream-client")
            except HaError as exc:
                raise NoJobManagerLeader(f"Cannot look up the JobManager leader: {exc}", [(settings.quorum, str(exc))]) from None
            self._retrieval = self._services.jobmanager_leader_retrieval()
            self._retrieval.start()
        try:
            leader = self._retrieval.current_leader(self.lookup_timeout_s)
        except HaError as exc:
            raise NoJobManagerLeader(f"No JobManager leads: {exc}", [(settings.quorum, "no leader")]) from None
        deadline = time.monotonic() + self.lookup_timeout_s
        while avoid is not None and leader.address == avoid and time.monotonic() < deadline:
            time.sleep(0.1)  # the failing leader is still named: wait a little for its successor
            current = self._retrieval.leader
            if current is not None:
                leader = current
        return str(leader.address)

    def close(self) -> None:
        if self._services is not None:
            self._services.close()
            self._services = None


CHANNEL_CLOSE_WAIT_S = 2.0


def close_channel(channel: grpc.Channel, wait_s: float = CHANNEL_CLOSE_WAIT_S) -> bool:
    """Closes ``channel``, waiting at most ``wait_s``; False if the close did not return.

    A Ctrl-C that lands while an RPC of the channel is in flight can leave ``Channel.close()``
    blocked for good (grpc/grpc#19973; seen as `millstream run` not exiting after Ctrl-C, and
    reproduced in about 1 of 100 interrupts of a streaming call). The close runs on a daemon thread
    so that a process that is ending anyway ends."""
    closed = threading.Event()

    def close() -> None:
        channel.close()
        closed.set()

    threading.Thread(target=close, name="millstream-channel-close", daemon=True).start()
    if closed.wait(wait_s):
        return True
    log.debug("a gRPC channel did not close within %.1f s (an RPC interrupted by a signal); left to the process's exit", wait_s)
    return False


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
    """``ClusterClient("host:port")`` (or ``"a:6123,b:6123"``), or ``ClusterClient(resolver=...)``
    for a leader found through ZooKeeper. Calls answered "not the leader" (and, with HA, calls to a
    JobManager that does not answer) go to the leader looked up again, within ``failover_budget_s``."""

    def __init__(self, address: str | None = None, rpc_timeout_s: float = 10.0,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, resolver: LeaderResolver | None = None,
                 failover_budget_s: float = 2 * LEADER_LOOKUP_TIMEOUT_S, max_lookups: int = MAX_LEADER_LOOKUPS,
                 credentials: Credentials | None = None) -> None:
        """``credentials`` (TLS, the client token): with ``address``; a ``resolver`` brings its own."""
        if resolver is None:
            if not address:
                raise ConfigurationError("JobManager address: none given")
            resolver = LeaderResolver(parse_addresses(address, "JobManager address"), credentials=credentials)
        self.resolver = resolver
        self.rpc_timeout_s = rpc_timeout_s
        self.failover_budget_s = failover_budget_s
        self.max_lookups = max_lookups
        self._max_message_bytes = max_message_bytes
        self._channel: grpc.Channel | None = None
        self.address = ""
        self.leader_changes = 0  # how often a call moved to another JobManager
        try:
            self._connect(resolver.resolve())
        except BaseException:
            resolver.close()
            raise

    def _connect(self, address: str) -> None:
        if self._channel is not None:
            self._channel.close()
        self.address = check_address(address)
        self._channel = sync_channel(address, self._max_message_bytes, self.resolver.credentials)
        self._stub = cpb_grpc.DispatcherStub(self._channel)

    def close(self) -> None:
        if self._channel is not None:
            close_channel(self._channel)
        self.resolver.close()

    def __enter__(self) -> "ClusterClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- finding the leader again ----------------------------------------------------------------

    def _failover(self) -> LeaderFailover:
        return LeaderFailover(self.resolver.describe(), self.max_lookups, self.failover_budget_s)

    def _worth_looking_again(self, error: grpc.RpcError, idempotent: bool = True) -> bool:
        """A "not the leader" answer was not served: always worth sending to the leader. With HA,
        a JobManager that does not answer may have been replaced: an idempotent call goes to
        whoever leads now."""
        return is_not_leader(error) or (
            idempotent and self.resolver.highly_available and error.code() in _UNACKNOWLEDGED)

    def _look_again(self, failover: LeaderFailover, error: grpc.RpcError) -> None:
        """Records ``error``'s answer, looks the leader up and connects to it (or pauses when the
        same one is named again); raises :class:`NoJobManagerLeader` once the failover is spent."""
        failover.record(self.address, _answer(error))
        if not self.resolver.highly_available:
            raise NoJobManagerLeader(
                f"The JobManager at {self.address} is not the leader ({error.details()}). Name every JobManager "
                f"({cfg.ENV_JOBMANAGER}=host:port,host:port) or look the leader up in ZooKeeper "
                "(-D high-availability.type=zookeeper -D high-availability.zookeeper.quorum=...).", failover.tried)
        try:
            leader = self.resolver.resolve(avoid=self.address)
        except NoJobManagerLeader as exc:  # none named right now (a failover under way?)
            failover.record(self.resolver.describe(), exc.reason)
            time.sleep(failover.pause())
            return
        if leader == self.address:
            time.sleep(failover.pause())
            return
        log.warning("JobManager %s answered %s; the leader is now %s", self.address, _answer(error), leader)
        self.leader_changes += 1
        self._connect(leader)

    def _leader_call(self, name: str, request: Any, timeout: float | None, idempotent: bool = True,
                     retry_in_place_s: float = 0.0) -> Any:
        """``Dispatcher.<name>(request)`` at the leader. ``retry_in_place_s``: without HA, how long
        an idempotent call is repeated while the one JobManager is briefly unavailable."""
        failover: LeaderFailover | None = None
        while True:
            try:
                if retry_in_place_s and not self.resolver.highly_available:
                    for attempt in self._retrying(retry_in_place_s, lambda e: _retryable_read(e) and not is_not_leader(e)):
                        with attempt:
                            return getattr(self._stub, name)(request, timeout=timeout)
                return getattr(self._stub, name)(request, timeout=timeout)
            except grpc.RpcError as exc:
                if not self._worth_looking_again(exc, idempotent):
                    raise
                failover = failover or self._failover()
                self._look_again(failover, exc)

    # -- calls -----------------------------------------------------------------------------------

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
        ``timeout_s`` (any answer, even an error, means a server is there), and
        :class:`NoJobManagerLeader` when no JobManager answers as the leader."""
        failover: LeaderFailover | None = None
        while True:
            try:
                self._stub.GetClusterOverview(cpb.Empty(), timeout=timeout_s)
                return
            except grpc.RpcError as exc:
                if self._worth_looking_again(exc):
                    failover = failover or self._failover()
                    self._look_again(failover, exc)
                    continue
                if exc.code() in _UNACKNOWLEDGED:
                    problem = tls_problem(exc.details() or "", self.resolver.credentials.tls is not None, "JobManager")
                    if problem is not None:
                        raise JobManagerTlsError(self.address, problem) from None
                    raise JobManagerUnreachable(self.address, _unreachable_reason(exc)) from None
                return

    def submit(self, job_graph: pb.JobGraph, artifacts: Sequence[cpb.Artifact] = (), give_up_after_s: float = 30.0) -> bytes:
        """Submits with this client's submission id and the JobGraph's job id, resending on
        UNAVAILABLE / DEADLINE_EXCEEDED (the Dispatcher answers a resend with the same job), and to
        the new leader after a "not the leader" answer. If no answer comes within
        ``give_up_after_s``, the job id is cancelled before giving up, so a job never keeps running
        unknown to the user. Nothing at the address at all is :class:`JobManagerUnreachable` within
        a few seconds: then the job never left this process."""
        self.check_reachable()
        request = cpb.SubmitJobRequest(submission_id=uuid.uuid4().hex, job_graph=job_graph.SerializeToString(), artifacts=artifacts)
        deadline = time.monotonic() + give_up_after_s
        failover: LeaderFailover | None = None
        while True:
            # With HA a JobManager that does not answer may have been replaced: ask the leader soon.
            in_place = max(0.1, deadline - time.monotonic())
            if self.resolver.highly_available:
                in_place = min(in_place, REACH_TIMEOUT_S)
            try:
                for attempt in self._retrying(in_place, lambda e: _unacknowledged(e) and not is_not_leader(e)):
                    with attempt:
                        return self._stub.SubmitJob(request, timeout=self.rpc_timeout_s).job_id
            except grpc.RpcError as exc:
                if self._worth_looking_again(exc) and time.monotonic() < deadline:
                    failover = failover or LeaderFailover(self.resolver.describe(), self.max_lookups,
                                                          max(0.1, deadline - time.monotonic()))
                    try:
                        self._look_again(failover, exc)
                        continue
                    except NoJobManagerLeader as no_leader:
                        if is_not_leader(exc):
                            raise  # never served anywhere: nothing runs
                        raise JobSubmissionError(f"{no_leader}. {self._give_up(job_graph.job_id, exc)}") from exc
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
        """Status updates until the job is terminal (no deadline: jobs run long). With HA, a stream
        cut by a leader change continues at the new leader (which answers NOT_FOUND if it did not
        recover the job)."""
        failover: LeaderFailover | None = None
        while True:
            try:
                for update in self._stub.WaitJobResult(cpb.JobIdRequest(job_id=job_id)):
                    failover = None  # progress: a later leader change gets a fresh budget
                    yield update
                return
            except grpc.RpcError as exc:
                if not self._worth_looking_again(exc):
                    raise
                failover = failover or self._failover()
                self._look_again(failover, exc)
                log.warning("following job %s at the JobManager %s", job_id.hex(), self.address)

    def fetch_collected(self, job_id: bytes, offset: int, max_bytes: int, give_up_after_s: float = 60.0) -> cpb.FetchCollectResponse:
        """Collected batches from ``offset`` on (acknowledging those before it), at most about
        ``max_bytes``. Idempotent by the offset, so lost answers and timeouts are retried (with HA,
        at whichever JobManager leads then)."""
        request = cpb.FetchCollectRequest(job_id=job_id, offset=offset, max_bytes=max_bytes)
        return self._leader_call("FetchCollectResults", request, self.rpc_timeout_s, retry_in_place_s=give_up_after_s)

    def status(self, job_id: bytes) -> cpb.JobSummary:
        return self._leader_call("GetJobStatus", cpb.JobIdRequest(job_id=job_id), self.rpc_timeout_s)

    def cancel(self, job_id: bytes) -> cpb.JobSummary:
        return self._leader_call("CancelJob", cpb.JobIdRequest(job_id=job_id), self.rpc_timeout_s)

    def savepoint(self, job_id: bytes, target_directory: str = "", stop: bool = False, timeout_s: float = 600.0,
                  drain: bool = False) -> str:
        """Takes a savepoint of a running job; returns its path. ``stop``: stop-with-savepoint, the
        answer comes once the job FINISHED (``drain``: its input ended first, MAX_WATERMARK)."""
        request = cpb.SavepointRequest(job_id=job_id, target_directory=target_directory, stop=stop, drain=drain)
        return self._leader_call("TriggerSavepoint", request, timeout_s, idempotent=False).path

    def checkpoint(self, job_id: bytes, full: bool = False, timeout_s: float = 600.0) -> int:
        """Takes a checkpoint of a running job now (Flink's ``flink checkpoint``); returns its id."""
        request = cpb.CheckpointRequest(job_id=job_id, full=full)
        return int(self._leader_call("TriggerCheckpoint", request, timeout_s, idempotent=False).checkpoint_id)

    def dispose_savepoint(self, path: str, timeout_s: float = 600.0) -> str:
        """Deletes a savepoint (Flink's ``flink savepoint -d``); returns the directory deleted."""
        request = cpb.DisposeSavepointRequest(path=path)
        return str(self._leader_call("DisposeSavepoint", request, timeout_s, idempotent=False).path)

    def task_outputs(self, job_id: bytes, vertex: str = "", subtask: int | None = None) -> cpb.TaskOutputsResponse:
        """What a job's subtasks printed and logged (every vertex / subtask unless named)."""
        request = cpb.TaskOutputsRequest(job_id=job_id, vertex=vertex)
        if subtask is not None:
            request.subtask = subtask
        # the JobManager asks each TaskManager with its own deadline: leave it room to answer
        return self._leader_call("GetTaskOutputs", request, self.rpc_timeout_s + 10.0)

    def list_jobs(self) -> list[cpb.JobSummary]:
        return list(self._leader_call("ListJobs", cpb.Empty(), self.rpc_timeout_s).jobs)

    def overview(self) -> cpb.ClusterOverview:
        return self._leader_call("GetClusterOverview", cpb.Empty(), self.rpc_timeout_s)
