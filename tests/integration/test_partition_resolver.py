"""The consumer's PartitionResolver over real gRPC: it retries only what may heal, and fails at once otherwise."""
from __future__ import annotations

import socket
import time
from concurrent import futures

import grpc
import pytest

import millstream.datastream  # noqa: F401  (first: runtime.partitioners and the API import each other)
from millstream.proto import cluster_pb2 as cpb
from millstream.proto import cluster_pb2_grpc as cpb_grpc
from millstream.runtime.network.environment import ChannelError, ChannelSpec, InputGate
from millstream.taskmanager.task_body import PartitionResolver

pytestmark = pytest.mark.timeout(60)


class Lookup(cpb_grpc.TaskExecutorServicer):
    """A TaskExecutor whose LookupPartition answers with a fixed response or status."""

    def __init__(self) -> None:
        self.calls = 0
        self.error: tuple[grpc.StatusCode, str] | None = None
        self.response = cpb.LookupPartitionResponse(state=cpb.LookupPartitionResponse.PENDING)

    def LookupPartition(self, request, context):  # noqa: N802, ANN001, ANN201
        self.calls += 1
        if self.error is not None:
            context.abort(*self.error)
        return self.response


@pytest.fixture
def task_executor():
    servicer = Lookup()
    server = grpc.server(futures.ThreadPoolExecutor(2))
    cpb_grpc.add_TaskExecutorServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield servicer, f"127.0.0.1:{port}"
    server.stop(0)


def _spec(location: str) -> ChannelSpec:
    return ChannelSpec(b"\x01" * 16, 0, 0, b"\x02" * 16, target_node_id=1, input_index=0, producer_location=location)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_partition_not_registered_yet_is_asked_again(task_executor) -> None:
    servicer, address = task_executor
    resolver = PartitionResolver()
    try:
        assert resolver(_spec(address)) is None
        servicer.response = cpb.LookupPartitionResponse(state=cpb.LookupPartitionResponse.READY, address="127.0.0.1:4242")
        assert resolver(_spec(address)) == ("127.0.0.1", 4242)
    finally:
        resolver.close()


def test_an_unreachable_task_manager_is_asked_again() -> None:
    resolver = PartitionResolver(rpc_timeout_s=2.0)
    try:
        assert resolver(_spec(f"127.0.0.1:{_free_port()}")) is None  # UNAVAILABLE: it may be starting
    finally:
        resolver.close()


@pytest.mark.parametrize("code", [grpc.StatusCode.INTERNAL, grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.INVALID_ARGUMENT])
def test_a_real_lookup_error_fails_the_channel_at_once_with_its_cause(task_executor, code) -> None:
    servicer, address = task_executor
    servicer.error = (code, "the lookup broke")
    resolver = PartitionResolver()
    gate = InputGate([_spec(address)], resolver, connect_timeout_s=60)
    gate.start()
    started = time.monotonic()
    try:
        with pytest.raises(ChannelError, match=f"{code.name}: the lookup broke"):
            while time.monotonic() - started < 30:
                gate.poll(0.1)
        assert time.monotonic() - started < 10, "the error was retried instead of surfaced"
        assert servicer.calls == 1
    finally:
        gate.close()
        resolver.close()
