"""Token authentication of gRPC calls: two shared secrets, one per role.

- the **client** token (``security.auth.client-token``): the CLI and ``env.execute()``; it may
  call the Dispatcher (submit, list, status, cancel, savepoint, collected results) and nothing else;
- the **cluster** token (``security.auth.cluster-token``): JobManagers, TaskManagers and their
  Spark workers; it may call the ResourceManager, JobMaster, BlobServer and TaskExecutor services
  and not the Dispatcher, so a TaskManager's credentials cannot submit a job, and a client's
  cannot register a TaskManager or offer slots.

A caller sends its token as call metadata, ``authorization: Bearer <token>`` (client interceptors
below, installed by :mod:`millstream.runtime.rpc.service` on every channel made with a token). A server's
:class:`AuthServerInterceptor` asks :class:`TokenAuthenticator` (pure: method and header in, None or
a refusal out) before the servicer runs, so a refused call executes nothing: UNAUTHENTICATED when
the token is missing or unknown, PERMISSION_DENIED when it is the other role's. Health checks are
always open (container health checks carry no token); reflection takes either token.

A task's user code never sees the cluster token: its Spark worker gets a **task credential**
instead (:func:`task_credential`), an HMAC of its execution attempt id under the cluster token. Any
server that knows the cluster token can check it without state, and it grants only what a task
calls itself (:data:`TASK_METHODS`: where a producer serves its partitions), so code that reads it
from the worker's memory can neither register a TaskManager nor report slots, deploy or ack.
"""
from __future__ import annotations

import collections
import enum
import hashlib
import hmac
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable

import grpc

from millstream.proto import cluster_pb2 as cpb
from millstream.runtime import config as cfg
from millstream.runtime.rpc.fencing import GuardingServerInterceptor, Refusal

__all__ = [
    "AUTHORIZATION", "aio_auth_interceptors", "AuthServerInterceptor", "Role", "SyncAuthInterceptor",
    "TASK_METHODS", "TokenAuthenticator", "cluster_token", "client_token", "service_of", "task_credential", "without_secrets",
]

log = logging.getLogger(__name__)

AUTHORIZATION = "authorization"
_BEARER = "bearer "


class Role(str, enum.Enum):
    CLIENT = "client"
    CLUSTER = "cluster"

    @property
    def option(self) -> cfg.ConfigOption[str | None]:
        return cfg.AUTH_CLIENT_TOKEN if self is Role.CLIENT else cfg.AUTH_CLUSTER_TOKEN


_SERVICES = cpb.DESCRIPTOR.services_by_name
# Which role may call each service; a service in neither table is refused to every token.
SERVICE_ROLES: Mapping[str, Role] = {
    _SERVICES["Dispatcher"].full_name: Role.CLIENT,
    _SERVICES["BlobServer"].full_name: Role.CLUSTER,  # TaskManagers fetch the jobs' artifacts
    _SERVICES["ResourceManager"].full_name: Role.CLUSTER,
    _SERVICES["JobMasterService"].full_name: Role.CLUSTER,
    _SERVICES["TaskExecutor"].full_name: Role.CLUSTER,
}
OPEN_SERVICES = frozenset({"grpc.health.v1.Health"})
ANY_ROLE_SERVICES = frozenset({"grpc.reflection.v1alpha.ServerReflection", "grpc.reflection.v1.ServerReflection"})


# What a task's credential may call: a consumer task looks up where its producers serve their partitions.
TASK_METHODS = frozenset({f"/{_SERVICES['TaskExecutor'].full_name}/LookupPartition"})
_TASK_PREFIX = "task."


def _task_mac(cluster_token: str, attempt_id: bytes) -> str:
    return hmac.new(cluster_token.encode(), b"millstream-task-credential\0" + attempt_id, hashlib.sha256).hexdigest()


def task_credential(cluster_token: str, attempt_id: bytes) -> str:
    """The token a task attempt's Spark worker presents instead of the cluster token:
    ``task.<attempt id hex>.<HMAC-SHA256 of the attempt id under the cluster token>``."""
    return f"{_TASK_PREFIX}{attempt_id.hex()}.{_task_mac(cluster_token, attempt_id)}"


def service_of(method: str) -> str:
    """``/millstream.cluster.Dispatcher/SubmitJob`` -> ``millstream.cluster.Dispatcher``."""
    parts = method.split("/")
    return parts[1] if len(parts) >= 3 else ""


def _short(method: str) -> str:
    """``/millstream.cluster.Dispatcher/SubmitJob`` -> ``Dispatcher/SubmitJob``."""
    service = service_of(method)
    return f"{service.rsplit('.', 1)[-1]}/{method.rsplit('/', 1)[-1]}" if service else method


def bearer_value(token: str) -> str:
    return f"Bearer {token}"


def header_of_metadata(metadata: Any) -> str | None:
    """The ``authorization`` value among a call's invocation metadata, or None."""
    for key, value in metadata or ():
        if key == AUTHORIZATION:
            return value.decode("latin-1") if isinstance(value, bytes) else str(value)
    return None


class TokenAuthenticator:
    """Decides whether a call may run (pure): ``authenticator(method, authorization_header)`` is
    None to serve it, else ``(status code, message)``. ``tokens``: the token of each role this
    server knows; a role without one cannot call the services that need it."""

    def __init__(self, tokens: Mapping[Role, str]) -> None:
        self._tokens = {role: token.encode() for role, token in tokens.items() if token}
        if not self._tokens:
            raise ValueError("a TokenAuthenticator needs at least one token")

    def role_of(self, token: str) -> Role | None:
        presented = token.encode()
        found = None
        for role, known in self._tokens.items():  # compare with all, in constant time each
            if hmac.compare_digest(presented, known):
                found = role
        return found

    def __call__(self, method: str, header: str | None) -> Refusal | None:
        service = service_of(method)
        if service in OPEN_SERVICES:
            return None
        needed = SERVICE_ROLES.get(service)
        what = _short(method)
        wants = (f"the {needed.value} token ({needed.option.key})" if needed is not None
                 else "a token" if service in ANY_ROLE_SERVICES else None)
        if wants is None:
            return grpc.StatusCode.PERMISSION_DENIED, f"{what}: no token may call this service"
        if header is None:
            return (grpc.StatusCode.UNAUTHENTICATED,
                    f"{what} needs {wants}: the call carries no 'authorization: Bearer <token>' metadata")
        if not header[:len(_BEARER)].lower() == _BEARER or not header[len(_BEARER):].strip():
            return (grpc.StatusCode.UNAUTHENTICATED,
                    f"{what} needs {wants}: the call's authorization metadata is not 'Bearer <token>'")
        token = header[len(_BEARER):].strip()
        if token.startswith(_TASK_PREFIX):
            return self._task_refusal(method, token, what, wants)
        role = self.role_of(token)
        if role is None:
            return grpc.StatusCode.UNAUTHENTICATED, f"{what} needs {wants}: the call's token is not valid here"
        if needed is not None and role is not needed:
            return (grpc.StatusCode.PERMISSION_DENIED,
                    f"{what} needs {wants}: the call carries the {role.value} token, which may not call it")
        return None

    def _task_refusal(self, method: str, token: str, what: str, wants: str) -> Refusal | None:
        cluster = self._tokens.get(Role.CLUSTER)
        attempt_hex, _, mac = token[len(_TASK_PREFIX):].partition(".")
        try:
            attempt_id = bytes.fromhex(attempt_hex)
        except ValueError:
            attempt_id = None
        if cluster is None or attempt_id is None or not hmac.compare_digest(
                mac.encode(), _task_mac(cluster.decode(), attempt_id).encode()):
            return grpc.StatusCode.UNAUTHENTICATED, f"{what} needs {wants}: the call's token is not valid here"
        if method not in TASK_METHODS:
            return (grpc.StatusCode.PERMISSION_DENIED,
                    f"{what} needs {wants}: the call carries a task's credential, which may only look up partitions")
        return None


class AuthServerInterceptor(GuardingServerInterceptor):
    """Serves a call only when its authenticator says so; otherwise answers with the refusal
    before the servicer runs and logs who was turned away (install it first, ahead of fencing)."""

    def __init__(self, authenticator: Callable[[str, "str | None"], "Refusal | None"]) -> None:
        super().__init__(authenticator, header_of_metadata, _log_refusal)


def _log_refusal(context: grpc.aio.ServicerContext, refusal: "Refusal") -> None:
    log.warning("refused a call from %s: %s %s", context.peer(), refusal[0].name, refusal[1])


def _with_token(metadata: Any, token: str) -> list[tuple[str, str]]:
    return [*(metadata or ()), (AUTHORIZATION, bearer_value(token))]


class _AioUnaryUnary(grpc.aio.UnaryUnaryClientInterceptor):
    def __init__(self, token: str) -> None:
        self._token = token

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(_aio_details(details, self._token), request)


class _AioUnaryStream(grpc.aio.UnaryStreamClientInterceptor):
    def __init__(self, token: str) -> None:
        self._token = token

    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(_aio_details(details, self._token), request)


def _aio_details(details: Any, token: str) -> grpc.aio.ClientCallDetails:
    return grpc.aio.ClientCallDetails(details.method, details.timeout, grpc.aio.Metadata(*_with_token(details.metadata, token)),
                                      details.credentials, details.wait_for_ready)


def aio_auth_interceptors(token: str) -> list[grpc.aio.ClientInterceptor]:
    """The interceptors that add ``token`` to every call of an aio channel (grpc.aio files each
    interceptor under one call kind only: one per kind the services use)."""
    return [_AioUnaryUnary(token), _AioUnaryStream(token)]


class _SyncDetails(collections.namedtuple("_SyncDetails", ("method", "timeout", "metadata", "credentials",
                                                              "wait_for_ready", "compression")),
                   grpc.ClientCallDetails):
    pass


class SyncAuthInterceptor(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Adds ``token`` to every unary-request call of a synchronous channel."""

    def __init__(self, token: str) -> None:
        self._token = token

    def _details(self, details: Any) -> _SyncDetails:
        return _SyncDetails(details.method, details.timeout, _with_token(details.metadata, self._token),
                            details.credentials, getattr(details, "wait_for_ready", None),
                            getattr(details, "compression", None))

    def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return continuation(self._details(client_call_details), request)

    def intercept_unary_stream(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return continuation(self._details(client_call_details), request)


def _token(value: str | None, file_option: cfg.ConfigOption[str | None], file: str | None) -> str | None:
    if value:
        return value.strip() or None
    if not file:
        return None
    try:
        text = Path(file).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise cfg.ConfigurationError(f"{file_option.key}: cannot read {file}: {exc}") from None
    if not text:
        raise cfg.ConfigurationError(f"{file_option.key}: {file} is empty")
    return text


# Environment variables that may hold a token or say where one is: a process that runs user code
# (a Spark JVM and its Python workers) is started without them.
_SECRET_ENV_PREFIXES = ("MILLSTREAM_CONF_SECURITY_AUTH_",)
_SECRET_ENV_NAMES = frozenset({"MILLSTREAM_CONFIG_FILE"})


def without_secrets(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without the variables that carry tokens (``MILLSTREAM_CONF_SECURITY_AUTH_*``)
    or the configuration file that may hold them."""
    return {key: value for key, value in environ.items()
            if key not in _SECRET_ENV_NAMES and not key.upper().startswith(_SECRET_ENV_PREFIXES)}


def client_token(configuration: cfg.Configuration) -> str | None:
    """``security.auth.client-token``, else the content of ``security.auth.client-token-file``."""
    return _token(configuration.get(cfg.AUTH_CLIENT_TOKEN), cfg.AUTH_CLIENT_TOKEN_FILE,
                  configuration.get(cfg.AUTH_CLIENT_TOKEN_FILE))


def cluster_token(configuration: cfg.Configuration) -> str | None:
    """``security.auth.cluster-token``, else the content of ``security.auth.cluster-token-file``."""
    return _token(configuration.get(cfg.AUTH_CLUSTER_TOKEN), cfg.AUTH_CLUSTER_TOKEN_FILE,
                  configuration.get(cfg.AUTH_CLUSTER_TOKEN_FILE))
