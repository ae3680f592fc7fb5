"""What a process presents when it calls (:class:`Credentials`) and what its servers demand
(:class:`ServerSecurity`), read from the configuration (``security.ssl.*``, ``security.auth.*``).

Both are plain values handed to :mod:`millstream.runtime.rpc.service` (channels, servers) and to the
socket code of the data plane and the control channel; nothing here is process-global, so a test
can run a well-configured and a misconfigured TaskManager in one process.
"""
from __future__ import annotations

from dataclasses import dataclass

from millstream.runtime import config as cfg
from millstream.runtime.rpc.auth import Role, TokenAuthenticator, client_token, cluster_token
from millstream.runtime.rpc.tls import TlsSettings, tls_settings

__all__ = ["Credentials", "ServerSecurity", "client_credentials", "cluster_credentials", "server_security"]


@dataclass(frozen=True)
class Credentials:
    """A caller's: TLS files (None: plaintext) and the token sent with every call (None: none)."""

    tls: TlsSettings | None = None
    token: str | None = None

    def __repr__(self) -> str:  # never print a token into a log
        return f"Credentials(tls={self.tls!r}, token={'***' if self.token else None})"


@dataclass(frozen=True)
class ServerSecurity:
    """A server's: TLS files (None: plaintext) and the authenticator of its calls (None: open)."""

    tls: TlsSettings | None = None
    authenticator: TokenAuthenticator | None = None


def client_credentials(configuration: cfg.Configuration) -> Credentials:
    """A client's (CLI, ``env.execute()``, health checks): TLS and the client token."""
    return Credentials(tls_settings(configuration), client_token(configuration))


def cluster_credentials(configuration: cfg.Configuration) -> Credentials:
    """A cluster process's (JobManager, TaskManager, Spark worker): TLS and the cluster token."""
    return Credentials(tls_settings(configuration), cluster_token(configuration))


def server_security(configuration: cfg.Configuration, *, jobmanager: bool) -> ServerSecurity:
    """A server's. Token authentication is on once either token is set. A JobManager then needs
    both (clients call its Dispatcher, the cluster the rest), and they must differ, or roles could
    not be told apart; a TaskManager needs the cluster token (only the cluster calls it)."""
    tokens = {Role.CLIENT: client_token(configuration), Role.CLUSTER: cluster_token(configuration)}
    authenticator = None
    if any(tokens.values()):
        needed = (Role.CLIENT, Role.CLUSTER) if jobmanager else (Role.CLUSTER,)
        for role in needed:
            if not tokens[role]:
                other = Role.CLUSTER if role is Role.CLIENT else Role.CLIENT
                raise cfg.ConfigurationError(
                    f"token authentication is on ({other.option.key} is set) but {role.option.key} (or "
                    f"{role.option.key}-file) is not: a {'JobManager' if jobmanager else 'TaskManager'} needs it")
        if tokens[Role.CLIENT] and tokens[Role.CLIENT] == tokens[Role.CLUSTER]:
            raise cfg.ConfigurationError(f"{cfg.AUTH_CLIENT_TOKEN.key} and {cfg.AUTH_CLUSTER_TOKEN.key} must differ: "
                                         "with one token a client could act as a TaskManager")
        authenticator = TokenAuthenticator({role: token for role, token in tokens.items() if token})
    return ServerSecurity(tls_settings(configuration), authenticator)
