"""A real ZooKeeper server for the HA tests, from Debian's `zookeeper` package.

    from tests.integration.zookeeper import zookeeper_server  # noqa: F401  (a pytest fixture)

    def test_x(zookeeper_server):
        conf = ha_config(zookeeper_server, tmp_path)      # high-availability.* for this server
        zookeeper_server.stop(); zookeeper_server.start() # a restart keeps port and data (sessions survive)

The server runs standalone (ZooKeeperServerMain) on a free loopback port with a temporary data
directory, is ready when it answers the ``srvr`` four-letter word as a serving server, and is
killed at the end. When the package is missing and cannot be installed (not root, no apt-get),
the tests that use it skip with the reason.
"""
from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator, Optional

import pytest

from millstream.runtime import config as cfg

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
# Sessions as short as the tests want (the server clamps a client's timeout to [2, 20] ticks otherwise).
TICK_MS = 250


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def zookeeper_unavailable() -> Optional[str]:
    """Why no ZooKeeper server can be started here (None: it can). Installs the package first
    when it is missing and we are root with apt-get (as `make install` does)."""
    if shutil.which("java") is None:
        return "no java on PATH: ZooKeeper needs Java"
    if not ZOOKEEPER_JAR.is_file() and os.geteuid() == 0 and shutil.which("apt-get"):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "zookeeper"]
        if subprocess.run(install, env=env, capture_output=True).returncode != 0:
            subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True)
            subprocess.run(install, env=env, capture_output=True)
    if not ZOOKEEPER_JAR.is_file():
        return (f"Debian's zookeeper package is not installed ({ZOOKEEPER_JAR} missing) and could not be "
                "installed here (needs root and apt-get): HA tests skipped")
    return None


def four_letter_word(port: int, word: str, timeout: float = 2.0) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(word.encode())
        chunks = []
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


class ZooKeeperServer:
    """One standalone server; ``start``/``stop``/``kill``/``restart`` keep its port and data."""

    def __init__(self, workdir: Path, port: Optional[int] = None) -> None:
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.port = port or _free_port()
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.log_path = workdir / "zookeeper.log"

    @property
    def connect_string(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _write_config(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        path = self.workdir / "zoo.cfg"
        path.write_text("\n".join([
            f"tickTime={TICK_MS}",
            f"dataDir={self.data_dir}",
            f"clientPort={self.port}",
            "clientPortAddress=127.0.0.1",
            f"minSessionTimeout={2 * TICK_MS}",
            "maxSessionTimeout=120000",
            "4lw.commands.whitelist=ruok,srvr,stat,cons",
            "admin.enableServer=false",
            "maxClientCnxns=0",
            "",
        ]))
        return path

    def start(self, timeout: float = 60.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("ZooKeeper is running already")
        config = self._write_config()
        log4j = self.workdir / "log4j.properties"
        log4j.write_text("log4j.rootLogger=WARN, CONSOLE\nlog4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender\n"
                         "log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout\n"
                         "log4j.appender.CONSOLE.layout.ConversionPattern=%d %-5p [%t] %c{1}: %m%n\n")
        classpath = ":".join([str(ZOOKEEPER_JAR), *sorted(glob.glob("/usr/share/java/slf4j-log4j12.jar")),
                              *sorted(glob.glob("/usr/share/java/log4j-1.2.jar"))])
        cmd = ["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Dzookeeper.4lw.commands.whitelist=*",
               f"-Dlog4j.configuration=file:{log4j}", f"-Dzookeeper.log.dir={self.workdir}",
               "-cp", classpath, MAIN_CLASS, str(config)]
        self.proc = subprocess.Popen(cmd, stdout=open(self.log_path, "ab"), stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}; log:\n{self.log_tail()}")
            try:
                last = four_letter_word(self.port, "srvr")
                if "Mode: standalone" in last:
                    return
            except OSError as e:
                last = e
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"ZooKeeper on port {self.port} did not serve within {timeout} s (last: {last!r}); "
                           f"log:\n{self.log_tail()}")

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM, as an operator stopping it (data and sessions are kept on disk)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(20)

    def restart(self) -> None:
        self.stop()
        self.start()

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


@pytest.fixture
def zookeeper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """A fresh ZooKeeper server for one test (stopped afterwards, even if the test stopped it)."""
    reason = zookeeper_unavailable()
    if reason:
        pytest.skip(reason)
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    server.start()
    try:
        yield server
    finally:
        server.kill()


def ha_config(server: ZooKeeperServer, storage_dir: Path, *, cluster_id: str = "/test",
              session_timeout: str = "5 s", **overrides: str) -> cfg.Configuration:
    """``high-availability.*`` for ``server`` with test-sized timeouts."""
    values = {
        cfg.HA_TYPE.key: "zookeeper",
        cfg.HA_ZOOKEEPER_QUORUM.key: server.connect_string,
        cfg.HA_STORAGE_DIR.key: str(storage_dir),
        cfg.HA_CLUSTER_ID.key: cluster_id,
        cfg.HA_ZOOKEEPER_SESSION_TIMEOUT.key: session_timeout,
        cfg.HA_ZOOKEEPER_CONNECTION_TIMEOUT.key: "15 s",
        cfg.HA_ZOOKEEPER_RETRY_WAIT.key: "200 ms",
        cfg.HA_ZOOKEEPER_MAX_RETRY_ATTEMPTS.key: "3",
    }
    values.update({k.replace("__", "."): v for k, v in overrides.items()})
    return cfg.Configuration.from_dict(values)


def expire_session(client: Any, timeout: float = 30.0) -> None:
    """Make the server expire a kazoo client's session, as after a long network partition: a
    second connection with the same session id and password is opened and closed (ZooKeeper's
    own test trick). The client sees its session LOST when it next hears from the server."""
    from kazoo.client import KazooClient

    session_id, password = client.client_id
    hosts = ",".join(f"{host}:{port}" for host, port in client.hosts)
    twin = KazooClient(hosts=hosts, client_id=(session_id, password), timeout=client._session_timeout / 1000)
    twin.start(timeout=timeout)
    twin.stop()
    twin.close()
