"""Which SparkHost a TaskManager's configuration asks for: its master, conf and addresses.

Light to import (no gRPC): the embedded cluster forks Spark's JVM with it before it imports the rest.
"""
from __future__ import annotations

import socket

from millstream.runtime import config as cfg
from millstream.runtime.rpc.security import cluster_credentials
from millstream.taskmanager.spark.host import SparkHost


def spark_conf(configuration: cfg.Configuration) -> dict[str, str]:
    pairs = (item.split("=", 1) for item in configuration.get(cfg.SPARK_CONF))
    return {k.strip(): v.strip() for k, v in pairs}


def external_master(configuration: cfg.Configuration) -> str | None:
    """The Spark master URL when it is a cluster of its own (not an embedded local[...])."""
    master = configuration.get(cfg.SPARK_MASTER)
    return master if master and not master.startswith("local") else None


def address_towards(url: str) -> str:
    """This machine's address on the route to ``url``'s (first) host: where that host, and the
    machines beside it, reach us. A UDP connect sends nothing; it only picks the route."""
    netloc = url.split("://", 1)[-1].split("/", 1)[0].split(",", 1)[0]
    host = netloc.rsplit(":", 1)[0].strip("[]") if ":" in netloc else netloc
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((host, 7077))
            return str(probe.getsockname()[0])
    except OSError as exc:
        raise cfg.ConfigurationError(
            f"{cfg.SPARK_MASTER.key}: cannot find this machine's address towards {host!r} ({exc}); "
            f"set {cfg.TASKMANAGER_HOST.key}") from exc


def taskmanager_hosts(configuration: cfg.Configuration) -> tuple[str, str]:
    """(advertised, bind) addresses: see taskmanager.host and taskmanager.bind-host."""
    external = external_master(configuration)
    advertised = configuration.get(cfg.TASKMANAGER_HOST) or (address_towards(external) if external else "127.0.0.1")
    bind = configuration.get(cfg.TASKMANAGER_BIND_HOST) or ("0.0.0.0" if external else advertised)
    return advertised, bind


def spark_host_for(configuration: cfg.Configuration) -> SparkHost:
    """The SparkHost a TaskManager with this configuration runs its tasks on (not started): its
    control channel uses the configured TLS. Its workers never get the cluster token: each task
    attempt gets its own task credential through the channel (``TaskExecutor``)."""
    advertised, bind = taskmanager_hosts(configuration)
    credentials = cluster_credentials(configuration)
    control_ports = cfg.parse_port_range(configuration.get(cfg.SPARK_CONTROL_PORT), cfg.SPARK_CONTROL_PORT.key)
    # A Spark master lists each TaskManager as an application: its resource id, when set (the
    # ResourceManager's on-demand ones), tells them apart there.
    resource_id = configuration.get(cfg.TASKMANAGER_RESOURCE_ID)
    try:
        return SparkHost(
            configuration.get(cfg.TASKMANAGER_NUM_TASK_SLOTS),
            configuration.get(cfg.SPARK_MASTER) or None,
            app_name=f"millstream-taskmanager {resource_id}" if resource_id else "millstream-taskmanager",
            conf=spark_conf(configuration),
            tasks_per_slot=configuration.get(cfg.SPARK_TASKS_PER_SLOT),
            placement=configuration.get(cfg.SPARK_TASK_PLACEMENT),  # type: ignore[arg-type]  # choices checked
            control_host=advertised,
            bind_host=bind,
            control_ports=control_ports,
            tls=credentials.tls,
            executor_wait_s=configuration.get(cfg.SPARK_EXECUTOR_WAIT) / 1000,
        )
    except ValueError as exc:
        raise cfg.ConfigurationError(f"{cfg.SPARK_CONTROL_PORT.key}: {exc}") from exc


def check_slots(configuration: cfg.Configuration) -> None:
    slots = configuration.get(cfg.TASKMANAGER_NUM_TASK_SLOTS)
    if slots < 1:
        raise cfg.ConfigurationError(f"{cfg.TASKMANAGER_NUM_TASK_SLOTS.key}: expected at least 1, got {slots}")


def start_spark_host(configuration: cfg.Configuration) -> SparkHost:
    """Forks the JVM of the Spark a TaskManager with this configuration owns, in the calling thread
    (before any gRPC server of this process runs: a fork among gRPC's threads can break the
    child); the session boots on a thread of its own (:meth:`SparkHost.wait_started`).

    The host counts as started once its Python workers are warm (``warm_up="wait"``), and the
    TaskManager registers its slots only then: a job deployed into them, such as a rescale onto a
    TaskManager that just joined, finds Spark's daemon and workers running instead of waiting for
    them (13-29 s on a loaded 2-core machine, against 1.5-4.5 s idle); a warm-up in the background
    would also compete with that first job for the CPU. On an external cluster the start also
    waits for its executors (:meth:`SparkHost.wait_for_executors`), whose cores cap the slots offered."""
    host = spark_host_for(configuration)
    host.start_in_background("wait")
    return host
