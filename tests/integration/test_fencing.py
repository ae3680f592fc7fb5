"""Fencing tokens over real gRPC (loopback): the client interceptor adds the caller's current token
to every call; the server interceptor refuses a call whose token the guard rejects, before the
servicer runs, with the guard's status and message."""
from __future__ import annotations

import asyncio

import grpc
import pytest

from millstream.proto import cluster_pb2 as cpb
from millstream.proto import cluster_pb2_grpc as cpb_grpc
from millstream.runtime.rpc.fencing import FencingClientInterceptor, FencingServerInterceptor
from millstream.runtime.rpc.service import RpcServer, aio_channel


class Echo(cpb_grpc.TaskExecutorServicer):
    def __init__(self) -> None:
        self.calls = 0

    async def Heartbeat(self, request, context):  # noqa: N802
        self.calls += 1
        return cpb.HeartbeatResponse()


def test_a_call_carries_the_current_token_and_a_stale_one_is_refused() -> None:
    async def body() -> None:
        current = {"token": "leader-1"}
        seen: list[tuple[str, str | None]] = []

        def guard(method: str, token: str | None):
            seen.append((method, token))
            if token != current["token"]:
                return grpc.StatusCode.FAILED_PRECONDITION, f"fenced: token {token} is not the current leader's"
            return None

        servicer = Echo()
        server = RpcServer("test", interceptors=[FencingServerInterceptor(guard)])
        server.add(cpb_grpc.add_TaskExecutorServicer_to_server, servicer, [])
        port = await server.start("127.0.0.1", 0)
        caller_token = {"value": "leader-1"}
        channel = aio_channel(f"127.0.0.1:{port}", interceptors=[FencingClientInterceptor(lambda: caller_token["value"])])
        stub = cpb_grpc.TaskExecutorStub(channel)
        try:
            await stub.Heartbeat(cpb.HeartbeatRequest(), timeout=5)
            assert servicer.calls == 1
            assert seen[-1] == ("/millstream.v1.TaskExecutor/Heartbeat", "leader-1")
            current["token"] = "leader-2"  # a new leader took over: the old token is stale
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.Heartbeat(cpb.HeartbeatRequest(), timeout=5)
            assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "fenced" in refused.value.details()
            assert servicer.calls == 1  # the servicer never ran
            caller_token["value"] = "leader-2"
            await stub.Heartbeat(cpb.HeartbeatRequest(), timeout=5)
            assert servicer.calls == 2
            caller_token["value"] = None  # no token at all
            with pytest.raises(grpc.aio.AioRpcError):
                await stub.Heartbeat(cpb.HeartbeatRequest(), timeout=5)
            assert seen[-1][1] is None
        finally:
            await channel.close()
            await server.stop(0)

    asyncio.run(body())
