"""Spark's driver JVM in two steps: fork it now, connect pyspark to it later.

pyspark's own launch forks ``spark-submit`` and then, in the same call, waits ~2 s for the JVM's
gateway. A process that starts gRPC servers during that wait must not let the fork happen among
gRPC's threads (a child forked there can die before its exec: JAVA_GATEWAY_EXITED). So the fork
happens here, in the caller's thread before any gRPC server runs, and the wait plus the
SparkContext's start (seconds) run on a thread while the caller starts its servers.
"""
from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Mapping

from millstream.runtime.rpc.auth import without_secrets

_POLL_S = 0.02  # pyspark polls for the gateway's file every 0.1 s
_env_lock = threading.Lock()


@dataclass
class LaunchedJvm:
    """A ``spark-submit`` gateway process forked by :func:`launch_driver_jvm`, not yet connected."""

    proc: subprocess.Popen
    conn_info_dir: str
    conn_info_file: str


def _ignore_sigint() -> None:  # Ctrl-C at the console is the program's, not the JVM's (as pyspark)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def launch_driver_jvm(conf: Mapping[str, str]) -> LaunchedJvm | None:
    """Forks Spark's driver JVM with ``conf`` on its command line (as pyspark does, so options read
    at the JVM's launch, like ``spark.driver.memory``, apply). None when this process already has
    a Spark JVM (an earlier, stopped session's): pyspark reuses that one."""
    from pyspark import SparkContext
    from pyspark.find_spark_home import _find_spark_home

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return None
    command = [os.path.join(_find_spark_home(), "bin", "spark-submit")]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    command += shlex.split(os.environ.get("PYSPARK_SUBMIT_ARGS", "pyspark-shell"))
    conn_info_dir = tempfile.mkdtemp(prefix="millstream-spark-gateway-")
    conn_info_file = os.path.join(conn_info_dir, "conn_info")
    # The JVM's environment is its Python workers' (user code): no token, nor the file naming them.
    env = {**without_secrets(os.environ), "SPARK_CONNECT_MODE": "0", "_PYSPARK_DRIVER_CONN_INFO_PATH": conn_info_file}
    try:
        # stdin is a pipe: the JVM exits when this process does (it reads EOF).
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, env=env, preexec_fn=_ignore_sigint)
    except BaseException:
        shutil.rmtree(conn_info_dir, ignore_errors=True)
        raise
    return LaunchedJvm(proc, conn_info_dir, conn_info_file)


def connect_driver_jvm(jvm: LaunchedJvm) -> None:
    """Waits for the JVM's gateway and makes it pyspark's, so the next SparkSession uses it."""
    from pyspark import SparkContext
    from pyspark.errors import PySparkRuntimeError
    from pyspark.java_gateway import launch_gateway
    from pyspark.serializers import UTF8Deserializer, read_int

    try:
        while jvm.proc.poll() is None and not os.path.isfile(jvm.conn_info_file):
            time.sleep(_POLL_S)
        if not os.path.isfile(jvm.conn_info_file):
            raise PySparkRuntimeError(errorClass="JAVA_GATEWAY_EXITED", messageParameters={})
        with open(jvm.conn_info_file, "rb") as info:
            port = read_int(info)
            secret = UTF8Deserializer().loads(info)
    finally:
        shutil.rmtree(jvm.conn_info_dir, ignore_errors=True)
    # pyspark's launch connects to a running gateway named by these variables (its route for a
    # driver started by spark-submit); they are set only for that call.
    with _env_lock:
        os.environ["PYSPARK_GATEWAY_PORT"], os.environ["PYSPARK_GATEWAY_SECRET"] = str(port), secret
        try:
            gateway = launch_gateway()
        finally:
            os.environ.pop("PYSPARK_GATEWAY_PORT", None)
            os.environ.pop("PYSPARK_GATEWAY_SECRET", None)
    gateway.proc = jvm.proc  # what pyspark's own launch records: SparkHost watches it for the JVM's death
    with SparkContext._lock:
        SparkContext._gateway = gateway
        SparkContext._jvm = gateway.jvm
