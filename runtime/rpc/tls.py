"""TLS for every connection between Millstream processes, from PEM files (``security.ssl.*``).

One :class:`TlsSettings` (three paths: private key, certificate chain, trusted CA certificates)
makes both ends of every kind of connection, always mutual: each side presents its certificate and
verifies the other's against the truststore; a client also checks that the server's certificate
names the host it dialled (subject alternative names: a DNS name or an IP address).

- gRPC (every server, every channel): :meth:`TlsSettings.server_credentials`,
  :meth:`TlsSettings.channel_credentials`;
- plain sockets (the data plane between tasks, the control channel between a TaskManager and its
  Spark workers): :meth:`TlsSettings.server_context`, :meth:`TlsSettings.client_context`.

Only paths travel (to Spark workers too): the files are read where a connection is made, so the
key never rides inside a task payload. With an external Spark cluster the files must exist at the
same paths on every Spark worker host, as Flink expects its keystores on every host.
"""
from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import grpc

from millstream.runtime import config as cfg

__all__ = ["TlsSettings", "tls_problem", "tls_settings"]


def _read(option: cfg.ConfigOption[str | None], path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise cfg.ConfigurationError(f"{option.key}: cannot read {path}: {exc.strerror or exc}") from None


@dataclass(frozen=True)
class TlsSettings:
    """Paths of the PEM files: ``key`` (private key), ``cert`` (certificate chain, leaf first),
    ``truststore`` (CA certificates the peers' certificates must chain to)."""

    key: str
    cert: str
    truststore: str

    def _pems(self) -> tuple[bytes, bytes, bytes]:
        return (_read(cfg.SSL_KEY, self.key), _read(cfg.SSL_CERT, self.cert),
                _read(cfg.SSL_TRUSTSTORE, self.truststore))

    def server_credentials(self) -> grpc.ServerCredentials:
        """A gRPC server's: its certificate, and a client certificate required (mutual TLS)."""
        key, cert, trusted = self._pems()
        return grpc.ssl_server_credentials([(key, cert)], root_certificates=trusted, require_client_auth=True)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """A gRPC channel's: the server is verified against the truststore, ours is presented."""
        key, cert, trusted = self._pems()
        return grpc.ssl_channel_credentials(root_certificates=trusted, private_key=key, certificate_chain=cert)

    def _context(self, purpose: int) -> ssl.SSLContext:
        context = ssl.SSLContext(purpose)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.verify_mode = ssl.CERT_REQUIRED
        try:
            context.load_cert_chain(self.cert, self.key)
        except (OSError, ssl.SSLError) as exc:
            raise cfg.ConfigurationError(
                f"{cfg.SSL_CERT.key} {self.cert} and {cfg.SSL_KEY.key} {self.key}: cannot load them as a PEM "
                f"certificate chain and its private key: {exc}") from None
        try:
            context.load_verify_locations(cafile=self.truststore)
        except (OSError, ssl.SSLError) as exc:
            raise cfg.ConfigurationError(
                f"{cfg.SSL_TRUSTSTORE.key} {self.truststore}: cannot load it as PEM CA certificates: {exc}") from None
        return context

    def server_context(self) -> ssl.SSLContext:
        """For a socket server: presents our certificate, requires and verifies the client's."""
        context = self._context(ssl.PROTOCOL_TLS_SERVER)
        # No session tickets: with none, nothing arrives after the handshake but application data,
        # so one thread may read a connection while another writes it (the data plane does).
        context.num_tickets = 0
        return context

    def client_context(self) -> ssl.SSLContext:
        """For a socket client: verifies the server's certificate and host name, presents ours."""
        context = self._context(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = True
        return context

    def check(self) -> None:
        """Raises :class:`~millstream.runtime.config.ConfigurationError` naming the option and the
        file when a file cannot be read or is not what its option says (a process checks at start,
        not at its first connection)."""
        self._context(ssl.PROTOCOL_TLS_SERVER)


def tls_settings(configuration: cfg.Configuration) -> TlsSettings | None:
    """The process's TLS settings, None when ``security.ssl.enabled`` is false; checked (every
    file set, readable and loadable), else a ConfigurationError naming the key."""
    if not configuration.get(cfg.SSL_ENABLED):
        return None
    key, cert, truststore = (configuration.get(cfg.SSL_KEY), configuration.get(cfg.SSL_CERT),
                             configuration.get(cfg.SSL_TRUSTSTORE))
    for option, value in ((cfg.SSL_KEY, key), (cfg.SSL_CERT, cert), (cfg.SSL_TRUSTSTORE, truststore)):
        if not value:
            raise cfg.ConfigurationError(f"{cfg.SSL_ENABLED.key} is true but {option.key} is not set "
                                         f"({option.description})")
    settings = TlsSettings(str(key), str(cert), str(truststore))
    settings.check()
    return settings


def tls_problem(details: str, tls_on: bool, peer: str = "server") -> str | None:
    """What a gRPC connection failure's ``details`` say about TLS, in words naming the options to
    check, or None when they say nothing about it. ``tls_on``: whether this side used TLS. (gRPC
    tells a client little: a server that refuses its certificate, or that speaks TLS to a plaintext
    client, just closes the connection; the server logs the reason.)"""
    text = details.lower()
    if tls_on:
        if "certificate_verify_failed" in text:
            return (f"TLS handshake failed: the {peer}'s certificate is not signed by a CA in "
                    f"{cfg.SSL_TRUSTSTORE.key}")
        if "wrong_version_number" in text or "http_request" in text:
            return f"TLS handshake failed: the {peer} does not use TLS (is {cfg.SSL_ENABLED.key} true there?)"
        if ("peer name" in text and "not in peer certificate" in text) or "hostname verification" in text:
            return (f"TLS handshake failed: the {peer}'s certificate does not name the host it was dialled at "
                    f"(its subject alternative names must include it)")
        if "handshake failed" in text:
            return f"TLS handshake failed: {details}"
        if "socket closed" in text or "connection reset" in text:
            return (f"the {peer} closed the connection during the TLS handshake: it does not accept this "
                    f"process's certificate ({cfg.SSL_CERT.key} must be signed by a CA the {peer} trusts), "
                    f"or it does not use TLS")
        return None
    if "socket closed" in text or "connection reset" in text:
        return (f"the {peer} closed the connection at once; if the cluster uses TLS, set {cfg.SSL_ENABLED.key}: "
                f"true with {cfg.SSL_KEY.key}, {cfg.SSL_CERT.key} and {cfg.SSL_TRUSTSTORE.key}")
    return None
