"""A real ZooKeeper server for the HA tests, from Debian's `zookeeper` package.

    def test_x(zookeeper_server):            # the fixture, from tests/integration/conftest.py
        conf = ha_config(zookeeper_server, tmp_path)      # high-availability.* for this server
        zookeeper_server.stop(); zookeeper_server.start() # a restart keeps port and data (sessions survive)

The server runs standalone (ZooKeeperServerMain) on a free loopback port with a temporary data
directory, is ready when it answers the ``srvr`` four-letter word as a serving server, and is
killed at the end. When the package is missing and cannot be installed (not root, no apt-get),
the tests that use it skip with the reason.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Iterator, Optional

import pytest

from millstream.runtime import config as cfg
from millstream.runtime.ha.zookeeper_server import (  # noqa: F401  (re-exported for the tests)
    MAIN_CLASS,
    TICK_MS,
    ZOOKEEPER_JAR,
    ZooKeeperServer,
    four_letter_word,
    free_port,
)



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
