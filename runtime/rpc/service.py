"""gRPC plumbing shared by every Millstream server and client.

Every server has the same lifecycle (build, health + reflection, bind, start, serve; on stop:
not-serving, then ``stop(grace)``); every channel has explicit message-size limits; every call
gets a deadline from the caller. Security (:mod:`millstream.runtime.rpc.security`): a channel made with
:class:`Credentials` uses TLS and sends its token on every call; a server made with
:class:`ServerSecurity` listens with TLS (client certificates required) and authenticates every
call but health checks before any other interceptor or servicer sees it.
"""
from __future__ import annotations

import errno
import logging
import os
import socket
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection

from millstream.runtime import config as cfg
from millstream.runtime.rpc.auth import aio_auth_interceptors, AuthServerInterceptor, SyncAuthInterceptor
from millstream.runtime.rpc.security import Credentials, ServerSecurity
from millstream.runtime.rpc.wire_bounds import BoundsServerInterceptor

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


def aio_channel(address: str, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                interceptors: Sequence[grpc.aio.ClientInterceptor] = (),
                credentials: Credentials | None = None) -> grpc.aio.Channel:
    """A channel to ``address``: TLS with ``credentials.tls``, ``credentials.token`` on every call."""
    chain: list[grpc.aio.ClientInterceptor] = list(interceptors)
    if credentials is not None and credentials.token:
        chain = [*aio_auth_interceptors(credentials.token), *chain]
    options = channel_options(max_message_bytes)
    if credentials is not None and credentials.tls is not None:
        return grpc.aio.secure_channel(address, credentials.tls.channel_credentials(), options=options,
                                       interceptors=chain or None)
    return grpc.aio.insecure_channel(address, options=options, interceptors=chain or None)


def sync_channel(address: str, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                 credentials: Credentials | None = None) -> grpc.Channel:
    """As :func:`aio_channel`, for synchronous callers (the client, Spark workers)."""
    options = channel_options(max_message_bytes)
    if credentials is not None and credentials.tls is not None:
        channel = grpc.secure_channel(address, credentials.tls.channel_credentials(), options=options)
    else:
        channel = grpc.insecure_channel(address, options=options)
    if credentials is not None and credentials.token:
        return grpc.intercept_channel(channel, SyncAuthInterceptor(credentials.token))
    return channel


@dataclass(frozen=True)
class ServerLimits:
    """What bounds a gRPC server's connections (millstream.rpc.max-connections, handshake-timeout,
    max-connection-idle): a flood of silent connections cannot hold its file descriptors."""

    max_connections: int = 1024
    handshake_timeout_ms: int = 10_000
    max_connection_idle_ms: int = 300_000
    max_concurrent_streams: int = 1024  # per connection: calls in flight on one client's channel

    @classmethod
    def of(cls, configuration: "cfg.Configuration") -> "ServerLimits":
        return cls(configuration.get(cfg.RPC_MAX_CONNECTIONS), configuration.get(cfg.RPC_HANDSHAKE_TIMEOUT),
                   configuration.get(cfg.RPC_MAX_CONNECTION_IDLE))


def server_options(max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                   limits: ServerLimits | None = None) -> list[tuple[str, int]]:
    # Clients ping every 10 s on long streams (WaitJobResult); without these the server answers
    # the third ping with GOAWAY "too_many_pings" and the stream dies.
    limits = limits or ServerLimits()
    return channel_options(max_message_bytes) + [
        ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
        ("grpc.http2.max_ping_strikes", 0),
        ("grpc.keepalive_permit_without_calls", 1),
        # gRPC sets SO_REUSEPORT by default on Linux: a second server on a taken port would bind
        # it too and share its connections. A server owns its port or fails to start.
        ("grpc.so_reuseport", 0),
        ("grpc.max_allowed_incoming_connections", limits.max_connections),
        ("grpc.server_handshake_timeout_ms", limits.handshake_timeout_ms),
        ("grpc.max_connection_idle_ms", limits.max_connection_idle_ms),
        ("grpc.max_concurrent_streams", limits.max_concurrent_streams),
    ]


class BindError(OSError):
    """A server cannot listen on its address; the message names the address and the reason."""


def _bind_problem(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be bound exclusively (for any address ``host`` resolves to), or None.

    gRPC reports a failed bind only when no resolved address could be bound ("localhost" is
    127.0.0.1 and ::1): one free address among taken ones would start a server that half listens.
    """
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        return f"cannot resolve {host!r}: {exc.strerror}"
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC: TIME_WAIT is no owner
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRNOTAVAIL and family == socket.AF_INET6:
                    continue  # no IPv6 on this machine: gRPC skips it too
                reason = os.strerror(exc.errno) if exc.errno else str(exc)
                return reason[:1].lower() + reason[1:]
    return None


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def check_bindable(name: str, host: str, port: int) -> None:
    """Raises :class:`BindError` if ``host:port`` is taken now; no gRPC object is made.

    For processes with a slow start-up (a TaskManager's Spark, which must fork its JVM before any
    gRPC server exists in the process): a taken port fails in a second instead of after it.
    """
    problem = _bind_problem(host, port) if port else None
    if problem is not None:
        raise BindError(f"{name} cannot listen on {_address(host, port)}: {problem}")


class RpcServer:
    """A grpc.aio server with health checking and reflection for the services added to it."""

    def __init__(self, name: str, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                 interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
                 security: ServerSecurity | None = None, limits: ServerLimits | None = None) -> None:
        self.name = name
        self.security = security or ServerSecurity()
        chain = list(interceptors)
        if self.security.authenticator is not None:  # first: an unauthenticated call reaches nothing else
            chain.insert(0, AuthServerInterceptor(self.security.authenticator))
        # last: every request's counts, sizes and ids are checked before any servicer sees them
        chain.append(BoundsServerInterceptor())
        self.server = grpc.aio.server(options=server_options(max_message_bytes, limits), interceptors=chain)
        self.health = HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self._service_names: list[str] = []
        self.port = 0

    def add(self, register: Callable[[object, grpc.aio.Server], None], servicer: object, full_names: Iterable[str]) -> None:
        register(servicer, self.server)
        self._service_names.extend(full_names)

    def bind(self, host: str, port: int) -> int:
        """Takes the port, exclusively; raises :class:`BindError` naming the address if it is taken."""
        if self.port:
            return self.port
        problem = _bind_problem(host, port) if port else None
        if problem is None:
            try:
                if self.security.tls is not None:
                    self.port = self.server.add_secure_port(_address(host, port), self.security.tls.server_credentials())
                else:
                    self.port = self.server.add_insecure_port(_address(host, port))
            except RuntimeError:  # grpc's "Failed to bind to address ...; set GRPC_VERBOSITY ..."
                problem = _bind_problem(host, port) or "the address cannot be bound"
        if problem is not None or self.port == 0:
            raise BindError(f"{self.name} cannot listen on {_address(host, port)}: {problem or 'no address bound'}")
        return self.port

    async def start(self, host: str, port: int) -> int:
        """Binds (unless :meth:`bind` did), starts, and marks every service SERVING."""
        reflection.enable_server_reflection(
            [*self._service_names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME],
            self.server,
        )
        self.bind(host, port)
        await self.server.start()
        for service in ["", *self._service_names]:
            await self.health.set(service, health_pb2.HealthCheckResponse.SERVING)
        log.info("%s serving on %s:%d%s", self.name, host, self.port,
                 " (TLS, client certificates required)" if self.security.tls is not None else "")
        return self.port

    async def stop(self, grace: float = 2.0) -> None:
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace)


def is_unavailable(error: BaseException) -> bool:
    return isinstance(error, grpc.aio.AioRpcError) and error.code() in (
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
    )
