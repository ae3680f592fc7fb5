"""A minimal client of the Docker Engine API (HTTP over its unix socket), for the ``docker``
ResourceManager: create, start, inspect, stop and remove containers, read a container's last lines.

Blocking calls (run them off the event loop). Every failure is a :class:`DockerEngineError` whose
message says what failed and why: the engine unreachable ("is the Docker engine running?"), an
image missing, a refusal with the engine's own message.
"""
from __future__ import annotations

import http.client
import json
import socket
import struct
import urllib.parse
from typing import Any, Optional

API = "/v1.41"  # Docker 20.10 and later answer it
TIMEOUT_S = 30.0


class DockerEngineError(RuntimeError):
    """``reason``: what failed, the same for the same problem; ``request``: the call that failed."""

    def __init__(self, reason: str, request: str = "") -> None:
        super().__init__(f"{reason} ({request})" if request else reason)
        self.reason, self.request = reason, request


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


class DockerEngine:
    """The engine at ``host``: ``unix:///var/run/docker.sock`` (Docker's default)."""

    def __init__(self, host: str = "unix:///var/run/docker.sock", timeout_s: float = TIMEOUT_S) -> None:
        if not host.startswith("unix://"):
            raise DockerEngineError(f"resourcemanager.docker.host: only unix:// sockets are supported, got {host!r}")
        self.host = host
        self._path = host[len("unix://"):]
        self._timeout_s = timeout_s

    def _call(self, method: str, path: str, body: Optional[dict[str, Any]] = None,
              ok: tuple[int, ...] = (200, 201, 204, 304)) -> tuple[int, bytes]:
        connection = _UnixConnection(self._path, self._timeout_s)
        try:
            payload = json.dumps(body).encode() if body is not None else None
            headers = {"Content-Type": "application/json"} if payload is not None else {}
            connection.request(method, API + path, body=payload, headers=headers)
            response = connection.getresponse()
            data = response.read()
        except OSError as exc:
            raise DockerEngineError(f"the Docker engine at {self.host} cannot be reached ({exc}): is it running, and "
                                    "is its socket mounted into this container?") from exc
        finally:
            connection.close()
        if response.status not in ok:
            try:
                message = json.loads(data).get("message", "")
            except ValueError:
                message = data.decode(errors="replace")
            raise DockerEngineError(message or response.reason, f"Docker engine: {method} {path} -> {response.status}")
        return response.status, data

    def create(self, name: str, image: str, entrypoint: list[str], env: list[str], network: Optional[str],
               binds: list[str], labels: dict[str, str]) -> str:
        """Creates a container (not started); returns its id. A missing image fails (never pulled)."""
        host_config: dict[str, Any] = {"Binds": binds}
        if network:
            host_config["NetworkMode"] = network
        body = {"Image": image, "Entrypoint": entrypoint, "Cmd": [], "Env": env, "Labels": labels,
                "HostConfig": host_config}
        _, data = self._call("POST", f"/containers/create?name={urllib.parse.quote(name)}", body)
        return str(json.loads(data)["Id"])

    def start(self, container: str) -> None:
        self._call("POST", f"/containers/{container}/start")

    def state(self, container: str) -> Optional[dict[str, Any]]:
        """The container's State (Running, ExitCode, Error, ...); None when it is gone."""
        try:
            _, data = self._call("GET", f"/containers/{container}/json")
        except DockerEngineError as exc:
            if exc.request.endswith("-> 404"):
                return None
            raise
        return dict(json.loads(data).get("State") or {})

    def stop(self, container: str, grace_s: int = 15) -> None:
        self._call("POST", f"/containers/{container}/stop?t={grace_s}")

    def remove(self, container: str) -> None:
        self._call("DELETE", f"/containers/{container}?force=true", ok=(200, 204, 404))

    def last_lines(self, container: str, lines: int = 20) -> list[str]:
        """What the container wrote last (stdout and stderr; a container without a TTY frames
        each chunk with an 8-byte header)."""
        _, data = self._call("GET", f"/containers/{container}/logs?stdout=1&stderr=1&tail={lines}")
        text, i = [], 0
        while i + 8 <= len(data) and data[i] in (0, 1, 2):
            (size,) = struct.unpack(">I", data[i + 4:i + 8])
            text.append(data[i + 8:i + 8 + size])
            i += 8 + size
        raw = b"".join(text) if text else data
        return [line for line in raw.decode(errors="replace").splitlines() if line.strip()]
