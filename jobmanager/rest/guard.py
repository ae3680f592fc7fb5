"""What the REST API accepts before aiohttp sees a request: connections and Host headers.

- **Connections** (:class:`ConnectionGuard`): at most ``rest.max-connections`` at once (one more is
  answered 503 and closed at once, so its file descriptor comes back); a connection must deliver
  its first request head within ``rest.header-timeout`` (a peer that connects and sends nothing
  is closed); between requests aiohttp's keep-alive timeout (``rest.idle-timeout``) closes it.
  Without these, 20,000 silent connections held the JobManager's every file descriptor.
- **Host names** (:func:`host_refusal`): a browser page of another origin can reach an unsecured
  REST API on a private address by DNS rebinding (its own name made to resolve to the cluster),
  but its requests still carry that name in ``Host``. So only the configured names, localhost and
  IP literals are served (``rest.allowed-hosts`` adds names, ``*`` turns the check off).
"""
from __future__ import annotations

import asyncio
import ipaddress
import logging
from typing import Any, Callable, Iterable

from aiohttp import web

log = logging.getLogger(__name__)

__all__ = ["ConnectionGuard", "GuardedSite", "allowed_hosts", "host_refusal"]

_HEAD_END = b"\r\n\r\n"
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
         b"Content-Length: %d\r\n\r\n%s")
_BUSY_BODY = b'{"errors": ["The REST API has too many open connections (rest.max-connections); try again later."]}'


class ConnectionGuard:
    """Wraps an aiohttp protocol factory: counts connections, refuses beyond ``max_connections`` and
    closes one whose first request head is not complete within ``header_timeout_s``."""

    def __init__(self, factory: Callable[[], asyncio.Protocol], max_connections: int, header_timeout_s: float) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {max_connections}")
        self._factory = factory
        self.max_connections = max_connections
        self.header_timeout_s = header_timeout_s
        self.active = 0
        self.refused = 0       # over the limit
        self.timed_out = 0     # no request head in time

    def __call__(self) -> asyncio.Protocol:
        if self.active >= self.max_connections:
            self.refused += 1
            return _Refused(self)
        return _Guarded(self._factory(), self)


def _refuse(guard: ConnectionGuard, transport: Any) -> None:
    if guard.refused in (1, 10, 100) or guard.refused % 1000 == 0:  # a flood logs a few lines, not one each
        log.warning("REST API: %d connections refused so far: %d open, rest.max-connections is %d",
                    guard.refused, guard.active, guard.max_connections)
    transport.write(_BUSY % (len(_BUSY_BODY), _BUSY_BODY))
    transport.close()


class _Refused(asyncio.Protocol):
    def __init__(self, guard: ConnectionGuard) -> None:
        self._guard = guard

    def connection_made(self, transport: Any) -> None:
        _refuse(self._guard, transport)


class _Guarded(asyncio.Protocol):
    """Passes every event to aiohttp's protocol; owns the header timer."""

    def __init__(self, inner: Any, guard: ConnectionGuard) -> None:
        self._inner = inner
        self._guard = guard
        self._transport: Any = None
        self._timer: asyncio.TimerHandle | None = None
        self._tail = b""  # the last bytes seen while the first head is incomplete

    def connection_made(self, transport: Any) -> None:
        # Counted here, not in the factory: accepted connections are made in a batch before any of
        # them is connected, and a failed TLS handshake never connects.
        if self._guard.active >= self._guard.max_connections:
            self._guard.refused += 1
            self._inner = None
            _refuse(self._guard, transport)
            return
        self._guard.active += 1
        self._transport = transport
        self._timer = asyncio.get_running_loop().call_later(self._guard.header_timeout_s, self._no_head)
        self._inner.connection_made(transport)

    def _no_head(self) -> None:
        self._timer = None
        self._guard.timed_out += 1
        if self._transport is not None:
            self._transport.abort()

    def data_received(self, data: bytes) -> None:
        if self._inner is None:
            return
        if self._timer is not None:
            seen = self._tail + data
            if _HEAD_END in seen:
                self._timer.cancel()
                self._timer = None
                self._tail = b""
            else:
                self._tail = seen[-(len(_HEAD_END) - 1):]
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return None if self._inner is None else self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._inner is None:
            return
        self._guard.active -= 1
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._transport = None
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()


class GuardedSite(web.TCPSite):
    """aiohttp's TCPSite with its protocol factory wrapped in a :class:`ConnectionGuard`."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, *, max_connections: int,
                 header_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(runner, host, port, **kwargs)
        self._limits = (max_connections, header_timeout_s)
        self.guard: ConnectionGuard | None = None

    async def start(self) -> None:
        # TCPSite.start with the factory wrapped (aiohttp offers no hook for it); a TLS handshake
        # gets the header timeout too, since it precedes the first byte aiohttp sees.
        self._runner._reg_site(self)
        server = self._runner.server
        assert server is not None
        self.guard = ConnectionGuard(server, *self._limits)
        self._server = await asyncio.get_running_loop().create_server(
            self.guard, self._host, self._port, ssl=self._ssl_context, backlog=self._backlog,
            reuse_address=self._reuse_address, reuse_port=self._reuse_port,
            ssl_handshake_timeout=self._limits[1] if self._ssl_context is not None else None,
        )


_ALWAYS = ("localhost",)


def allowed_hosts(configured: Iterable[str | None]) -> frozenset[str] | None:
    """The host names a REST API answers (lower case), or None when ``*`` allows every name."""
    names = {name.strip().lower().strip("[]") for name in configured if name and name.strip()}
    if "*" in names:
        return None
    return frozenset(names | set(_ALWAYS))


def _host_name(header: str) -> str:
    """``Host`` without its port: ``example.com:8081`` -> ``example.com``, ``[::1]:80`` -> ``::1``."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    if header.count(":") == 1:
        return header.rsplit(":", 1)[0]
    return header


def host_refusal(header: str | None, allowed: frozenset[str] | None) -> str | None:
    """Why a request with this ``Host`` header is not served, or None. IP literals are always
    served: DNS rebinding needs a name the attacker controls, and a name is what it sends."""
    if allowed is None:
        return None
    if not header:
        return "The request has no Host header."
    name = _host_name(header).rstrip(".")
    try:
        ipaddress.ip_address(name)
        return None
    except ValueError:
        pass
    if name in allowed:
        return None
    return (f"Host '{name}' is not a name of this REST API (DNS rebinding protection); add it to "
            f"rest.allowed-hosts, or use one of: {', '.join(sorted(allowed))} or an IP address.")
