"""Flink 2.3's own command-line client, from the PyPI wheels ``apache-flink`` and
``apache-flink-libraries`` (``bin/flink`` and its jars under ``pyflink/``), run against a Millstream
cluster's REST API. ``make install`` installs the wheels without their Python dependencies into
``$(VENV)/flink-tools`` (PyFlink's own dependencies pin grpcio, protobuf and cloudpickle below what
Millstream needs, and the CLI is a shell script and jars: it needs none of them). Tests that use it
skip, saying how to install it, when it or Java is missing; nothing is downloaded at test time."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# $(VENV)/flink-tools/pyflink, or a Flink distribution named by MILLSTREAM_FLINK_HOME.
FLINK_HOME = Path(os.environ.get("MILLSTREAM_FLINK_HOME") or Path(sys.prefix) / "flink-tools" / "pyflink")
FLINK = FLINK_HOME / "bin" / "flink"
INSTALL_HINT = ("Flink's CLI is not installed: `make install` puts the apache-flink and apache-flink-libraries "
                f"wheels under {FLINK_HOME.parent} (or set MILLSTREAM_FLINK_HOME to a Flink distribution)")


def flink_cli_or_skip() -> None:
    if not FLINK.is_file() or not (FLINK_HOME / "lib").is_dir():
        pytest.skip(INSTALL_HINT)
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Flink's CLI needs Java (17): no `java` on PATH and no JAVA_HOME")


class FlinkCli:
    """``bin/flink`` pointed at a REST API the way an operator points it at a Flink cluster: a
    configuration directory whose config.yaml names ``rest.address`` and ``rest.port``."""

    def __init__(self, rest_url: str, directory: Path) -> None:
        host, _, port = rest_url.removeprefix("http://").partition(":")
        self.conf = directory / "conf"
        self.conf.mkdir(parents=True, exist_ok=True)
        shutil.copy(FLINK_HOME / "conf" / "log4j-cli.properties", self.conf)
        (self.conf / "config.yaml").write_text(f"rest:\n  address: {host}\n  port: {int(port)}\n")
        # A client JVM lives a few seconds: the quick JIT tier and the serial collector start it
        # with about a quarter less CPU (the tests run it some twenty times).
        self.env = {**os.environ, "FLINK_CONF_DIR": str(self.conf), "FLINK_LOG_DIR": str(directory / "log"),
                    "FLINK_ENV_JAVA_OPTS_CLI": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xshare:auto"}

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(FLINK), *args], capture_output=True, text=True, env=self.env, timeout=timeout)

    def ok(self, *args: str, timeout: float = 120) -> str:
        """Its output; fails the test (with what it printed) unless it exits 0."""
        done = self.run(*args, timeout=timeout)
        assert done.returncode == 0, (args, done.stdout[-3000:], done.stderr[-3000:])
        return done.stdout
