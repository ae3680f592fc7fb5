"""A real Spark standalone cluster for tests: a Master and Workers started with the installed
pyspark's ``bin/spark-class`` (the same jars a user's cluster runs), on an address of the test's
choosing, each in its own process group so a test can kill a worker with its executors, as a
machine that dies would take them.

    cluster = SparkStandalone(workdir, LocalHost(address), [LocalHost(address)] * 2, cores=4)
    cluster.start()          # returns once the master lists every worker ALIVE
    cluster.url              # spark://host:port, for millstream.spark.master
    cluster.kill_worker(0)   # kill -9 of the worker and its executors; restart_worker(0) brings it back
    cluster.stop()
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any, Optional

import pyspark

SPARK_HOME = Path(pyspark.__file__).parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def machine_address() -> str:
    """This machine's address on its default route (not loopback), or 127.0.0.1 without one."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("8.8.8.8", 9))  # UDP: picks the route, sends nothing
            return str(probe.getsockname()[0])
    except OSError:
        return "127.0.0.1"


class LocalHost:
    """This machine at ``address``; netns.Host is the same for a host in a network namespace."""

    def __init__(self, address: str) -> None:
        self.address = address

    def free_port(self) -> int:
        return free_port(self.address)

    def spawn(self, args: list[str], log_path: Path, env: Optional[dict[str, str]] = None) -> "subprocess.Popen[bytes]":
        return subprocess.Popen(args, stdout=open(log_path, "ab"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)


class SparkStandalone:
    def __init__(self, workdir: Path, master_host: Any, worker_hosts: list[Any], cores: int = 4, memory: str = "1g") -> None:
        self.workdir, self.master_host, self.worker_hosts = workdir, master_host, worker_hosts
        self.host = master_host.address
        self.cores, self.memory = cores, memory
        self.port = master_host.free_port()
        self.ui_port = master_host.free_port()
        self.master: Optional[subprocess.Popen[bytes]] = None
        self.workers: list[Optional[subprocess.Popen[bytes]]] = [None] * len(worker_hosts)

    @property
    def url(self) -> str:
        return f"spark://{self.host}:{self.port}"

    def _spawn(self, host: Any, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": host.address,
               "SPARK_LOG_DIR": str(self.workdir), "SPARK_WORKER_DIR": str(self.workdir / f"{name}-work")}
        return host.spawn([str(SPARK_CLASS), *args], self.workdir / f"{name}.log", env)

    def start(self, timeout_s: float = 120) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.master = self._spawn(self.master_host, "master", [
            "org.apache.spark.deploy.master.Master", "--host", self.host, "--port", str(self.port),
            "--webui-port", str(self.ui_port)])
        for i in range(len(self.workers)):
            self.restart_worker(i, wait=False)
        self.wait_for_workers(len(self.workers), timeout_s)

    def restart_worker(self, index: int, wait: bool = True) -> None:
        host = self.worker_hosts[index]
        self.workers[index] = self._spawn(host, f"worker-{index}", [
            "org.apache.spark.deploy.worker.Worker", "--host", host.address, "--cores", str(self.cores),
            "--memory", self.memory, "--webui-port", str(host.free_port()), self.url])
        if wait:
            self.wait_for_workers(sum(w is not None for w in self.workers), 120)

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://{self.host}:{self.ui_port}/json/", timeout=5) as response:
            return json.load(response)

    def alive_workers(self) -> int:
        try:
            return sum(1 for w in self.state().get("workers", []) if w.get("state") == "ALIVE")
        except OSError:
            return 0
        except ValueError:  # not JSON: a master a second after its UI started once answered /json/ with an HTML page
            return 0

    def wait_for_workers(self, n: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self.alive_workers() != n:
            if time.monotonic() > deadline:
                logs = "\n".join((self.workdir / f).read_text(errors="replace")[-2000:]
                                 for f in ("master.log", "worker-0.log") if (self.workdir / f).exists())
                raise AssertionError(f"the Spark master {self.url} lists {self.alive_workers()} live workers, not {n}:\n{logs}")
            time.sleep(0.5)

    def kill_worker(self, index: int) -> None:
        """kill -9 of the worker's process group: the worker, its executors and their Python workers."""
        worker = self.workers[index]
        assert worker is not None
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(10)
        self.workers[index] = None

    def stop(self) -> None:
        for proc in [*self.workers, self.master]:
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in [*self.workers, self.master]:
            if proc is not None:
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)
