"""A local ZooKeeper server from Debian's ``zookeeper`` package (standalone ZooKeeperServerMain),
for the HA tests and for ``millstream cluster start --ha``.

    server = ZooKeeperServer(workdir)          # a free loopback port unless given
    server.start()                             # returns once it serves (``srvr`` says standalone)
    server.connect_string                      # 127.0.0.1:<port>, for high-availability.zookeeper.quorum
    server.stop() / server.kill() / server.restart()   # port and data are kept

The server runs in its own session (it outlives the process that started it) and logs to
``<workdir>/zookeeper.log``.
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
from typing import Any, Optional

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
# Sessions as short as the tests want (the server clamps a client's timeout to [2, 20] ticks otherwise).
TICK_MS = 250


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
        self.port = port or free_port()
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


def zookeeper_missing() -> Optional[str]:
    """Why no ZooKeeper server can be started here (None: it can); installs nothing."""
    if shutil.which("java") is None:
        return "no java on PATH: ZooKeeper needs Java"
    if not ZOOKEEPER_JAR.is_file():
        return (f"Debian's zookeeper package is not installed ({ZOOKEEPER_JAR} missing): "
                "apt-get install zookeeper (`make install` does)")
    return None
