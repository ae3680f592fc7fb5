"""Fencing tokens on RPCs (Flink's FencedRpcEndpoint): the leader session id travels with calls
between the JobManager leader and its TaskManagers, so a deposed leader's calls, and calls meant for
one, are refused everywhere.

The token rides in call metadata (``millstream-leader-session``), added by a client interceptor
that reads the caller's current token on every call; the server side is a gRPC server interceptor
that asks a ``guard(method, token)`` callable whether to serve the call. Without high availability
the token is Flink's default leader id (all zeros) on both sides, so nothing changes.
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable

import grpc

__all__ = [
    "FENCING_METADATA_KEY", "FencingClientInterceptor", "FencingServerInterceptor", "GuardingServerInterceptor", "Refusal",
    "refusing_handler",
    "token_of_metadata",
]

FENCING_METADATA_KEY = "millstream-leader-session"

# A guard returns None to serve the call, or the refusal: (status code, message).
Refusal = tuple[grpc.StatusCode, str]
Guard = Callable[[str, "str | None"], "Refusal | None"]


def token_of_metadata(metadata: Any) -> str | None:
    """The fencing token among a call's invocation metadata, or None when it carries none."""
    for key, value in metadata or ():
        if key == FENCING_METADATA_KEY:
            return str(value)
    return None


class FencingClientInterceptor(grpc.aio.UnaryUnaryClientInterceptor):
    """Adds ``token()`` (when not None) to every unary call of the channel it is installed on."""

    def __init__(self, token: Callable[[], "str | None"]) -> None:
        self._token = token

    async def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        token = self._token()
        if token is not None:
            metadata = list(client_call_details.metadata or ())
            metadata.append((FENCING_METADATA_KEY, token))
            client_call_details = grpc.aio.ClientCallDetails(
                client_call_details.method, client_call_details.timeout, grpc.aio.Metadata(*metadata),
                client_call_details.credentials, client_call_details.wait_for_ready,
            )
        return await continuation(client_call_details, request)


def refusing_handler(handler: grpc.RpcMethodHandler, refusal: Refusal,
                     on_refuse: Callable[[grpc.aio.ServicerContext], None] | None = None) -> grpc.RpcMethodHandler:
    """A handler of the same kind and message types as ``handler`` that answers every call with
    ``refusal`` (status code, message) and runs nothing else but ``on_refuse(context)``."""
    code, message = refusal
    kwargs = {"request_deserializer": handler.request_deserializer, "response_serializer": handler.response_serializer}

    async def refuse(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if on_refuse is not None:
            on_refuse(context)
        await context.abort(code, message)

    async def refuse_stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if on_refuse is not None:
            on_refuse(context)
        await context.abort(code, message)
        yield  # pragma: no cover (abort raises)

    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(refuse, **kwargs)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(refuse_stream, **kwargs)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(refuse, **kwargs)
    return grpc.stream_stream_rpc_method_handler(refuse_stream, **kwargs)


class GuardingServerInterceptor(grpc.aio.ServerInterceptor):
    """Serves a call only when ``guard(method, read(metadata))`` returns None; otherwise answers
    with its refusal before the servicer runs, calling ``on_refuse(context, refusal)`` first.
    ``method`` is the full gRPC method name (``/millstream.cluster.TaskExecutor/SubmitTask``)."""

    def __init__(self, guard: Guard, read: Callable[[Any], str | None],
                 on_refuse: Callable[[grpc.aio.ServicerContext, Refusal], None] | None = None) -> None:
        self._guard, self._read, self._on_refuse = guard, read, on_refuse

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[grpc.RpcMethodHandler | None]], handler_call_details: Any,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        refusal = self._guard(handler_call_details.method, self._read(handler_call_details.invocation_metadata))
        if refusal is None:
            return handler
        on_refuse = self._on_refuse
        return refusing_handler(handler, refusal, None if on_refuse is None else lambda context: on_refuse(context, refusal))


class FencingServerInterceptor(GuardingServerInterceptor):
    """Refuses calls whose leader session id (fencing token) ``guard`` does not accept."""

    def __init__(self, guard: Guard) -> None:
        super().__init__(guard, token_of_metadata)
