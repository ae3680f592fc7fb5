"""Options of the JobManager, the TaskManager's host and the client's submission timeout, on real
in-process servers over real gRPC (no Spark: no task runs here)."""
from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import grpc
import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.common import Configuration
from millstream.datastream import StreamExecutionEnvironment
from millstream.runtime.execution_state import JobStatus
from millstream.jobmanager.jobmanager import JobManager
from millstream.proto import cluster_pb2 as cpb
from millstream.proto import cluster_pb2_grpc as cpb_grpc
from millstream.runtime import config as cfg
from millstream.taskmanager.spark.host import SparkHost
from millstream.taskmanager.taskmanager import TaskManager

from .harness import fast_config, jobmanager_env, poll_for, refused_port

pytestmark = pytest.mark.timeout(120)


class EventLoopThread:
    """An asyncio loop in a thread, for servers that a synchronous client talks to."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(self, coro: Any, timeout: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def loop():
    thread = EventLoopThread()
    yield thread
    thread.close()


def _job_graph(name: str) -> Any:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_sequence(1, 10).map(lambda x: x).print()
    return env.get_job_graph(name).proto


def test_bind_host_and_advertised_address(loop) -> None:
    conf = fast_config(**{"jobmanager.rpc.address": "jm.example.invalid", "jobmanager.bind-host": "127.0.0.1",
                          "jobmanager.rpc.port": "0"})
    jm = loop.call(JobManager(conf).start())
    try:
        host, port = jm.address.rsplit(":", 1)
        assert host == "jm.example.invalid"  # what TaskManagers and clients are told
        with ClusterClient(f"127.0.0.1:{port}") as client:  # where it listens
            assert client.overview().taskmanagers == 0
        assert conf.get(cfg.JOBMANAGER_RPC_ADDRESS) == "jm.example.invalid"
        assert conf.get(cfg.JOBMANAGER_BIND_HOST) == "127.0.0.1"
    finally:
        loop.call(jm.stop())


def test_slot_request_timeout_blob_dir_and_jobstore_expiration(loop, tmp_path) -> None:
    conf = fast_config(**{"jobmanager.rpc.address": "127.0.0.1", "jobmanager.rpc.port": "0",
                          "slot.request.timeout": "1 s", "millstream.blob.storage-dir": str(tmp_path / "blobs"),
                          "jobstore.expiration-time": "0"})
    jm = loop.call(JobManager(conf).start())
    try:
        with ClusterClient(jm.address) as client:
            started = time.monotonic()
            job_id = client.submit(_job_graph("no slots"), [cpb.Artifact(name="helper.py", content=b"X = 1\n")])
            assert any((tmp_path / "blobs").rglob("*")), "the artifact was not stored in millstream.blob.storage-dir"
            poll_for(lambda: JobStatus.from_proto(client.status(job_id).status) is JobStatus.FAILED, 30,
                     what="the job to fail for want of slots")
            assert time.monotonic() - started < 20  # slot.request.timeout, not the default 300 s
            assert "slot" in client.status(job_id).failure.message.lower()
            # jobstore.expiration-time = 0: the finished job leaves the list at the next sweep.
            poll_for(lambda: not client.list_jobs(), 30, what="the finished job to expire")
    finally:
        loop.call(jm.stop())


def test_max_message_size_is_enforced_by_the_jobmanager(loop) -> None:
    conf = fast_config(**{"jobmanager.rpc.address": "127.0.0.1", "jobmanager.rpc.port": "0",
                          "millstream.rpc.max-message-size": "1 mb"})
    jm = loop.call(JobManager(conf).start())
    try:
        with ClusterClient(jm.address) as client:
            with pytest.raises(grpc.RpcError) as error:
                client.submit(_job_graph("too big"), [cpb.Artifact(name="big.py", content=b"#" * (2 << 20))])
            assert error.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    finally:
        loop.call(jm.stop())


def test_taskmanager_host_is_where_it_listens_and_what_it_advertises(loop) -> None:
    jm = loop.call(JobManager(fast_config(**{"jobmanager.rpc.address": "127.0.0.1", "jobmanager.rpc.port": "0"})).start())
    tm = None
    try:
        conf = fast_config(**{"taskmanager.host": "localhost", "taskmanager.numberOfTaskSlots": "1"})
        # A SparkHost that is never started: registering and serving RPCs need no Spark.
        tm = loop.call(TaskManager(conf, jm.address, spark=SparkHost(1)).start())
        assert tm.address.startswith("localhost:")
        with ClusterClient(jm.address) as client:
            poll_for(lambda: client.overview().taskmanagers == 1, 30, what="the TaskManager to register")
    finally:
        if tm is not None:
            loop.call(tm.stop())
        loop.call(jm.stop())


class _RefusingDispatcher(cpb_grpc.DispatcherServicer):
    """A Dispatcher that is there but never accepts a submission (UNAVAILABLE), as an overloaded one."""

    def __init__(self) -> None:
        self.submissions = 0

    def GetClusterOverview(self, request, context):  # noqa: N802, ANN001, ANN201
        return cpb.ClusterOverview()

    def SubmitJob(self, request, context):  # noqa: N802, ANN001, ANN201
        self.submissions += 1
        context.abort(grpc.StatusCode.UNAVAILABLE, "busy")

    def CancelJob(self, request, context):  # noqa: N802, ANN001, ANN201
        context.abort(grpc.StatusCode.NOT_FOUND, "no such job")


def test_client_submission_timeout_bounds_how_long_a_submission_is_resent() -> None:
    from concurrent import futures

    from millstream.client.cluster_client import JobSubmissionError

    servicer = _RefusingDispatcher()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    cpb_grpc.add_DispatcherServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        env = StreamExecutionEnvironment.get_execution_environment(
            Configuration({"millstream.client.submission-timeout": "1 s"}))
        env.from_sequence(1, 3).print()
        started = time.monotonic()
        with jobmanager_env(f"127.0.0.1:{port}"), pytest.raises(JobSubmissionError, match="cancelled"):
            env.execute("refused")
        assert time.monotonic() - started < 10  # the default (60 s) would still be resending
        assert servicer.submissions >= 2  # it did resend, within the configured time
    finally:
        server.stop(0)
    assert cfg.CLIENT_SUBMISSION_TIMEOUT.key == "millstream.client.submission-timeout"


def test_nothing_at_the_address_is_one_clear_error_within_seconds() -> None:
    
    from millstream.client.cluster_client import JobManagerUnreachable

    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_sequence(1, 3).print()
    started = time.monotonic()
    with refused_port() as port, jobmanager_env(address := f"127.0.0.1:{port}"), \
            pytest.raises(JobManagerUnreachable) as error:
        env.execute("unreachable")
    assert time.monotonic() - started < 5
    assert str(error.value) == (
        f"No JobManager at {address} (connection refused). Start one with `millstream cluster start`, "
        "or run `python job.py` for an embedded cluster."
    )
    for garbage in ("garbage:port", "localhost:99999", ":6123"):
        env = StreamExecutionEnvironment.get_execution_environment()
        env.from_sequence(1, 3).print()
        with jobmanager_env(garbage), pytest.raises(cfg.ConfigurationError, match="expected host:port"):
            env.execute("garbage")

