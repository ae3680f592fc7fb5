"""A real PostgreSQL server for the JDBC sink's tests, from Debian's `postgresql` package.

    def test_x(postgres):                                    # a module's server (see the fixture below)
        url = postgres.jdbc_url                              # jdbc:postgresql://127.0.0.1:<port>/postgres
        postgres.query("SELECT count(*) FROM t")             # rows, through psycopg

The server runs from a fresh ``initdb`` in a temporary directory, owned by the ``postgres`` system
user (or ``nobody``) when the tests run as root (the server refuses root), listening on a free
loopback port only, with password authentication for TCP (user ``millstream``), fsync off and
``max_prepared_transactions`` as asked (10 by default: the exactly-once sink's two-phase commit). It
is killed at the end. When the package is missing and cannot be installed (not root, no apt-get),
the tests that need it skip and say why; `make install` installs it where it can.
"""
from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Optional

import pytest

from millstream.runtime.ha.zookeeper_server import free_port

USER, PASSWORD, DATABASE = "millstream", "jdbc-test-secret", "postgres"
_BIN_ROOT = Path("/usr/lib/postgresql")


def postgres_bin() -> Optional[Path]:
    """The newest installed server's bin directory (Debian keeps initdb and postgres off PATH)."""
    versions = sorted((p for p in _BIN_ROOT.glob("*/bin") if (p / "initdb").is_file()),
                      key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    return versions[-1] if versions else None


def postgres_unavailable() -> Optional[str]:
    """Why no PostgreSQL server can be started here (None: it can). Installs Debian's package
    first when it is missing and we are root with apt-get (as `make install` does)."""
    if postgres_bin() is None and os.geteuid() == 0 and shutil.which("apt-get"):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "postgresql"]
        if subprocess.run(install, env=env, capture_output=True).returncode != 0:
            subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True)
            subprocess.run(install, env=env, capture_output=True)
    if postgres_bin() is None:
        return (f"Debian's postgresql package is not installed (no {_BIN_ROOT}/<version>/bin/initdb) and could "
                "not be installed here (needs root and apt-get): JDBC sink tests skipped")
    return None


class PostgresServer:
    """One server: ``start()`` (initdb + postgres), ``kill()``; ``query`` runs SQL through psycopg."""

    def __init__(self, max_prepared_transactions: int = 10) -> None:
        self.max_prepared_transactions = max_prepared_transactions
        self.port = free_port()
        self.host = "127.0.0.1"
        self._root = Path(tempfile.mkdtemp(prefix="millstream-pg-"))
        self.data_dir = self._root / "data"
        self.log_path = self._root / "server.log"
        self._process: Optional[subprocess.Popen[bytes]] = None
        self._user: Optional[str] = None
        if os.geteuid() == 0:  # initdb and postgres refuse to run as root
            self._user = "postgres" if _has_user("postgres") else "nobody"
            uid, gid = pwd.getpwnam(self._user).pw_uid, pwd.getpwnam(self._user).pw_gid
            os.chown(self._root, uid, gid)

    @property
    def jdbc_url(self) -> str:
        return f"jdbc:postgresql://{self.host}:{self.port}/{DATABASE}"

    def _run_as(self) -> dict[str, Any]:
        return {"user": self._user} if self._user else {}

    def start(self) -> "PostgresServer":
        bin_dir = postgres_bin()
        assert bin_dir is not None, postgres_unavailable()
        pwfile = self._root / "pwfile"
        pwfile.write_text(PASSWORD + "\n")
        if self._user:
            os.chown(pwfile, pwd.getpwnam(self._user).pw_uid, -1)
        subprocess.run(
            [str(bin_dir / "initdb"), "-D", str(self.data_dir), "-U", USER, f"--pwfile={pwfile}", "-A", "scram-sha-256",
             "--no-sync", "-E", "UTF8", "--locale=C"],
            check=True, capture_output=True, cwd=self._root, **self._run_as())
        for attempt in range(3):  # a free port may be taken by another process before the server binds it
            if self._launch(bin_dir):
                return self
            self.port = free_port()
        raise RuntimeError(f"PostgreSQL did not start (3 ports tried):\n{self.log()}")

    def _launch(self, bin_dir: Path) -> bool:
        """Starts postgres on ``self.port``; True once it answers, False when it exited (the log says why)."""
        log = open(self.log_path, "ab")
        self._process = subprocess.Popen(
            [str(bin_dir / "postgres"), "-D", str(self.data_dir), "-p", str(self.port), "-c", f"listen_addresses={self.host}",
             "-c", f"unix_socket_directories={self._root}", "-c", f"max_prepared_transactions={self.max_prepared_transactions}",
             "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_connections=50"],
            stdout=log, stderr=subprocess.STDOUT, cwd=self._root, start_new_session=True, **self._run_as())
        log.close()
        deadline = time.monotonic() + 60
        while True:
            try:
                self.query("SELECT 1")
                return True
            except Exception as e:  # noqa: BLE001 - not up yet: any connection error
                if self._process.poll() is not None:
                    return False
                if time.monotonic() > deadline:
                    self._stop()
                    raise RuntimeError(f"PostgreSQL did not answer on port {self.port} in 60 s: {e}\n{self.log()}") from e
                time.sleep(0.1)

    def connect(self, autocommit: bool = True) -> Any:
        import psycopg

        return psycopg.connect(host=self.host, port=self.port, user=USER, password=PASSWORD, dbname=DATABASE,
                               autocommit=autocommit, connect_timeout=5)

    def query(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        with self.connect() as conn:
            cur = conn.execute(sql, params)
            return cur.fetchall() if cur.description else []

    def prepared(self) -> list[str]:
        return [gid for (gid,) in self.query("SELECT gid FROM pg_prepared_xacts ORDER BY gid")]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def kill(self) -> None:
        self._stop()
        shutil.rmtree(self._root, ignore_errors=True)

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)  # fast shutdown: backends end, shared memory is released
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)  # its own session: the postmaster and its backends
                process.wait(10)


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    """The module's PostgreSQL server (``max_prepared_transactions=10``), killed at the end."""
    reason = postgres_unavailable()
    if reason:
        pytest.skip(reason)
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.kill()
