"""Running a JobGraph from a user program: ``env.execute()`` and ``execute_and_collect()``.

The job goes to the cluster named by ``MILLSTREAM_JOBMANAGER=host:port`` (or several,
``host:port,host:port``: the one that leads), or, with ``high-availability.type: zookeeper`` in the
configuration, to the JobManager leader ZooKeeper names; without either, to the process's
embedded mini-cluster, started by the first job, reused by the next ones and stopped
when the interpreter exits. Either way the JobGraph travels
over gRPC to a Dispatcher. ``capture_job_graphs()`` turns ``execute()`` into "record the JobGraph
and stop the program", which is how ``millstream plan JOB.py`` learns a job without running it.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import sys
from typing import Any, Iterator, Protocol, Sequence

import grpc

from millstream.client import minicluster
from millstream.client.cluster_client import LEADER_LOOKUP_TIMEOUT_S, ClusterClient, LeaderResolver
from millstream.common.job_client import JobClient
from millstream.common.job_execution_result import JobExecutionResult
from millstream.proto import cluster_pb2 as cpb
from millstream.runtime import config as cfg
from millstream.runtime.execution_state import JobStatus
from millstream.runtime.rpc.security import client_credentials
from millstream.runtime.serialization import deserialize
from millstream.runtime.slot_sharing import total_required_slots

ENV_JOBMANAGER = cfg.ENV_JOBMANAGER
# A job's Python artifact: a path from add_python_file, or (path, target directory) from add_python_archive.
PythonArtifact = str | tuple[str, str]


class JobExecutionException(RuntimeError):
    """A job ended FAILED or CANCELED; the message carries the cause and the remote traceback."""

    def __init__(self, message: str, summary: cpb.JobSummary | None = None) -> None:
        super().__init__(message)
        self.summary = summary


class JobCancellationException(RuntimeError):
    """Cancelling a job failed (the JobManager could not be reached or refused): it may still run."""


class JobGraphCaptured(Exception):
    """Raised by ``execute()`` in capture mode to stop the user program after its first job."""

    def __init__(self, job_graph: Any) -> None:
        super().__init__(job_graph.job_name)
        self.job_graph = job_graph


class JobDetached(BaseException):
    """Raised by ``execute()`` under ``millstream run -d`` once the job is submitted: the program
    stops there and the job runs on without it. A BaseException, so a program's ``except
    Exception`` around ``execute()`` does not swallow it."""

    def __init__(self, job_id: bytes) -> None:
        super().__init__(job_id.hex())
        self.job_id = job_id


class JobObserver(Protocol):
    """What ``millstream run`` learns of the jobs a program submits (its progress view)."""

    def submitted(self, job_name: str, job_id: bytes, client: Any, follow: bool) -> None:
        """The job was accepted. ``follow``: nothing else reads its status stream, the observer
        may (``execute_and_collect``). May raise :class:`JobDetached`."""

    def update(self, update: cpb.JobStatusUpdate) -> None:
        """A status update of the job ``execute()`` waits for."""

    def stopped(self) -> None:
        """``execute()`` stopped waiting (the job ended, or the wait was interrupted)."""


_observer: JobObserver | None = None


@contextlib.contextmanager
def observing(observer: JobObserver) -> Iterator[JobObserver]:
    """Within the block, jobs the program submits report to ``observer``."""
    global _observer
    saved, _observer = _observer, observer
    try:
        yield observer
    finally:
        _observer = saved


_application: Any = None  # the ApplicationJobs of `millstream run-application`'s program


@contextlib.contextmanager
def running_application(jobs: Any) -> Iterator[Any]:
    """Within the block the program's jobs are an application's (client/application_core.py's
    ApplicationJobs): it may fix their id, and it records each one submitted."""
    global _application
    saved, _application = _application, jobs
    try:
        yield jobs
    finally:
        _application = saved


_capturing: contextvars.ContextVar[bool] = contextvars.ContextVar("millstream_capture", default=False)


@contextlib.contextmanager
def capture_job_graphs() -> Iterator[None]:
    token = _capturing.set(True)
    try:
        yield
    finally:
        _capturing.reset(token)


def job_artifacts(python_files: Sequence[PythonArtifact]) -> list[cpb.Artifact]:
    """The main script, the files added with ``add_python_file`` (paths) and the archives added
    with ``add_python_archive`` (``(path, target directory)`` pairs)."""
    files = list(python_files)
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    if main and main.endswith(".py") and os.path.isfile(main):
        files.insert(0, os.path.abspath(main))
    artifacts: dict[str, cpb.Artifact] = {}
    for entry in files:
        path, target = (entry, "") if isinstance(entry, str) else entry
        with open(path, "rb") as f:
            artifact = cpb.Artifact(name=os.path.basename(path), content=f.read(), archive_target=target)
        artifacts.setdefault(f"{artifact.name}#{target}", artifact)
    return list(artifacts.values())


def _client_configuration(user_conf: Any) -> cfg.Configuration:
    return cfg.load_configuration(dynamic_properties=[f"{k}={v}" for k, v in user_conf.to_dict().items()])


class _Session:
    """Where one job runs: the named cluster, or a mini-cluster owned by this session."""

    def __init__(self, job_graph: Any, user_conf: Any) -> None:
        self.config = _client_configuration(user_conf)
        resolver = LeaderResolver.from_configuration(self.config, os.environ.get(ENV_JOBMANAGER))
        if resolver is None:
            slots = total_required_slots(job_graph.proto.vertices)
            cluster = minicluster.embedded_cluster(self.config, slots)  # reused by later executes
            resolver = LeaderResolver([cluster.address], credentials=client_credentials(self.config))
        # A leader change while the job runs: keep looking for the new leader for as long as a
        # submission may take (a failover lasts about one ZooKeeper session timeout).
        budget_s = max(self.config.get(cfg.CLIENT_SUBMISSION_TIMEOUT) / 1000, 2 * LEADER_LOOKUP_TIMEOUT_S)
        self.client = ClusterClient(None, self.config.get(cfg.RPC_TIMEOUT) / 1000, self.config.get(cfg.RPC_MAX_MESSAGE_SIZE),
                                    resolver=resolver, failover_budget_s=budget_s, max_lookups=int(budget_s * 2))

    def submit(self, job_graph: Any, python_files: Sequence[PythonArtifact]) -> bytes:
        """Submits, retrying while the JobManager is unreachable for ``client.submission-timeout``.
        Under ``millstream run-application`` the application fixes the job's id (HA) and learns it."""
        timeout_s = self.config.get(cfg.CLIENT_SUBMISSION_TIMEOUT) / 1000
        if _application is not None:
            job_graph.proto.job_id = _application.job_id_for(job_graph.proto.job_id)
        job_id = self.client.submit(job_graph.proto, job_artifacts(python_files), give_up_after_s=timeout_s)
        if _application is not None:
            _application.add(job_id)
        return job_id

    def close(self) -> None:
        self.client.close()

    def wait_for_result(self, job_graph: Any, job_id: bytes) -> JobExecutionResult:
        """Follows the job's status stream to its end (``JobClient.get_job_execution_result``): the
        job's result, or the JobExecutionException naming how it ended."""
        summary = None
        for update in self.client.wait(job_id):
            summary = update.summary
        assert summary is not None, "the JobManager closed the job's status stream without a status"
        _raise_unless_finished(job_graph, summary)
        return _result(summary)


def _raise_unless_finished(job_graph: Any, summary: cpb.JobSummary) -> None:
    status = JobStatus.from_proto(summary.status)
    if status is JobStatus.FINISHED:
        return
    failure = summary.failure
    message = f"Job '{job_graph.job_name}' ({summary.job_id.hex()}) {status.value}"
    if failure.message:
        message += f": {failure.message}"
    if failure.task_name:
        message += f"\n  in task {failure.task_name}"
    if failure.traceback:
        message += f"\n\nRemote traceback:\n{failure.traceback}"
    if not os.environ.get(ENV_JOBMANAGER) and minicluster.log_file:
        message += f"\n\nThe embedded cluster's log: {minicluster.log_file}"
    raise JobExecutionException(message, summary)


def _not_recovered(job_graph: Any, job_id: bytes, client: Any, error: grpc.RpcError) -> Exception | None:
    """The JobManager the client followed after a leader change does not know the job."""
    if error.code() is grpc.StatusCode.NOT_FOUND and client.leader_changes:
        return JobExecutionException(
            f"Job '{job_graph.job_name}' ({job_id.hex()}) is not known to the new JobManager leader {client.address}: "
            f"it was not recovered after the leader change ({error.details()})")
    return None


def _result(summary: cpb.JobSummary) -> JobExecutionResult:
    return JobExecutionResult(summary.job_id.hex(), summary.job_name, max(0, summary.end_time_ms - summary.start_time_ms))


def execute(job_graph: Any, configuration: Any, python_files: Sequence[PythonArtifact] = ()) -> JobExecutionResult:
    if _capturing.get():
        raise JobGraphCaptured(job_graph)
    session = _Session(job_graph, configuration)
    try:
        job_id = session.submit(job_graph, python_files)
        observer = _observer
        summary = None
        try:
            if observer is not None:
                observer.submitted(job_graph.job_name, job_id, session.client, False)
            try:
                for update in session.client.wait(job_id):
                    summary = update.summary
                    if observer is not None:
                        observer.update(update)
            except grpc.RpcError as exc:
                lost = _not_recovered(job_graph, job_id, session.client, exc)
                if lost is None:
                    raise
                raise lost from exc
        finally:
            if observer is not None:
                observer.stopped()
        assert summary is not None
        _raise_unless_finished(job_graph, summary)
        return _result(summary)
    finally:
        session.close()


def execute_async(job_graph: Any, configuration: Any, python_files: Sequence[PythonArtifact] = ()) -> Any:
    """Submits the job and returns at once with a :class:`JobClient` for it (``env.execute_async``).
    The client keeps its connection to the cluster for the program's life: its calls may come
    long after the job ended."""
    if _capturing.get():
        raise JobGraphCaptured(job_graph)
    session = _Session(job_graph, configuration)
    try:
        job_id = session.submit(job_graph, python_files)
    except BaseException:
        session.close()
        raise
    return JobClient(session, job_graph, job_id)


def execute_and_collect(
    job_graph: Any, configuration: Any, python_files: Sequence[PythonArtifact], collect_id: str, limit: int | None
) -> Any:
    """Runs the job and returns its collect sink's records as a closeable iterator.

    Records are pulled from the JobManager in chunks of at most ``collect-sink.batch-size.max``
    bytes; each pull acknowledges the previous chunk, which the JobManager then drops. The end comes
    only after every collected batch was delivered. Closing early (or reaching ``limit``) cancels
    the job; a cancel that fails raises :class:`JobCancellationException`, since the job may still run.
    """
    # lazy: the CLI's job commands (list, status, cancel) import this module and need no DataStream API
    from millstream.datastream.data_stream import CloseableIterator

    if _capturing.get():
        raise JobGraphCaptured(job_graph)
    session = _Session(job_graph, configuration)
    max_bytes = session.config.get(cfg.COLLECT_BATCH_SIZE_MAX)
    state: dict[str, Any] = {"job_id": None, "done": False, "closed": False}

    def pull() -> Iterator[Any]:
        job_id = state["job_id"] = session.submit(job_graph, python_files)
        if _observer is not None:
            try:
                _observer.submitted(job_graph.job_name, job_id, session.client, True)
            except JobDetached:
                state["done"] = True  # detached: closing the results must not cancel the job
                raise
        if limit is not None and limit <= 0:
            return
        produced, offset = 0, 0
        while True:
            try:
                response = session.client.fetch_collected(job_id, offset, max_bytes)
            except grpc.RpcError as exc:
                if exc.code() is grpc.StatusCode.FAILED_PRECONDITION:  # the job restarted: see the Dispatcher
                    raise JobExecutionException(f"Job '{job_graph.job_name}' ({job_id.hex()}): {exc.details()}") from None
                lost = _not_recovered(job_graph, job_id, session.client, exc)
                if lost is None:
                    raise
                raise lost from exc
            offset = response.next_offset
            for batch in response.batches:
                if batch.collect_id != collect_id:
                    continue
                for record in deserialize(batch.payload):
                    produced += 1
                    yield record
                    if limit is not None and produced >= limit:
                        return  # closing cancels the job if it still runs
            if response.end_of_data:
                state["done"] = True
                _raise_unless_finished(job_graph, response.summary)
                return

    def records() -> Iterator[Any]:
        try:
            yield from pull()
        except Exception as exc:
            try:
                close()
            except JobCancellationException as cancel_error:  # keep the first error, mention the second
                if hasattr(exc, "add_note"):
                    exc.add_note(str(cancel_error))
            raise
        except GeneratorExit:
            close()
            raise
        close()

    def close() -> None:
        if state["closed"]:
            return
        state["closed"] = True
        try:
            job_id = state["job_id"]
            if job_id is not None and not state["done"]:
                try:
                    session.client.cancel(job_id)
                except grpc.RpcError as exc:
                    raise JobCancellationException(
                        f"Closing the results of job '{job_graph.job_name}' ({job_id.hex()}) did not cancel it: "
                        f"{exc.code().name}: {exc.details()}. The job may still be running; cancel it with "
                        f"`millstream cancel {job_id.hex()}`."
                    ) from exc
        finally:
            session.close()

    return CloseableIterator(records(), close)
