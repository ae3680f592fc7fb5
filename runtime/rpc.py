"""gRPC plumbing shared by every Millstream server and client.

Every server has the same lifecycle (build, health + reflection, bind, start, serve; on stop:
not-serving, then ``stop(grace)``); every channel has explicit message-size limits; every call
gets a deadline from the caller.
"""
from __future__ import annotations

import logging
from typing import Callable, Iterable, Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection

log = logging.getLogger(__name__)

DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024


def channel_options(max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> list[tuple[str, int]]:
    return [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
        # Fail fast on a dead peer instead of waiting for TCP timeouts.
        ("grpc.keepalive_time_ms", 10_000),
        ("grpc.keepalive_timeout_ms", 5_000),
        ("grpc.enable_retries", 0),
    ]


def aio_channel(address: str, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(address, options=channel_options(max_message_bytes))


def sync_channel(address: str, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> grpc.Channel:
    return grpc.insecure_channel(address, options=channel_options(max_message_bytes))


def server_options(max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> list[tuple[str, int]]:
    # Clients ping every 10 s on long streams (WaitJobResult); without these the server answers
    # the third ping with GOAWAY "too_many_pings" and the stream dies.
    return channel_options(max_message_bytes) + [
        ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
        ("grpc.http2.max_ping_strikes", 0),
        ("grpc.keepalive_permit_without_calls", 1),
    ]


class RpcServer:
    """A grpc.aio server with health checking and reflection for the services added to it."""

    def __init__(self, name: str, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
        self.name = name
        self.server = grpc.aio.server(options=server_options(max_message_bytes))
        self.health = HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self._service_names: list[str] = []
        self.port = 0

    def add(self, register: Callable[[object, grpc.aio.Server], None], servicer: object, full_names: Iterable[str]) -> None:
        register(servicer, self.server)
        self._service_names.extend(full_names)

    async def start(self, host: str, port: int) -> int:
        reflection.enable_server_reflection(
            [*self._service_names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME],
            self.server,
        )
        self.port = self.server.add_insecure_port(f"{host}:{port}")
        if self.port == 0:
            raise OSError(f"{self.name}: cannot bind {host}:{port}")
        await self.server.start()
        for service in ["", *self._service_names]:
            await self.health.set(service, health_pb2.HealthCheckResponse.SERVING)
        log.info("%s serving on %s:%d", self.name, host, self.port)
        return self.port

    async def stop(self, grace: float = 2.0) -> None:
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace)


def service_names(*descriptors: object) -> Sequence[str]:
    """Full names of the services of generated ``*_pb2`` modules' service descriptors."""
    return [d.full_name for d in descriptors]  # type: ignore[attr-defined]


def is_unavailable(error: BaseException) -> bool:
    return isinstance(error, grpc.aio.AioRpcError) and error.code() in (
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
    )
