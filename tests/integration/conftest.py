"""Fixtures shared by the integration modules: a module's embedded cluster (SparkHost, MiniCluster,
client) from its ``CLUSTER`` spec, a module's HA cluster of processes from its ``HA_CLUSTER``, and
a real ZooKeeper per test. Modules with a cluster of processes of their own build it from
harness.ProcessCluster / session_cluster / rest_cluster."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.integration.harness import ClusterSpec, embedded_cluster, test_placement
from tests.integration.zookeeper import zookeeper_server  # noqa: F401  (a real ZooKeeper per test)
from tests.integration.zookeeper import zookeeper_unavailable


@pytest.fixture(scope="session", autouse=True)
def task_placement_everywhere() -> Iterator[None]:
    """MILLSTREAM_TEST_TASK_PLACEMENT reaches every process a test starts, not only the embedded
    clusters built from a ClusterSpec: JobManagers, TaskManagers, CLI clusters and job scripts read
    it as MILLSTREAM_CONF_MILLSTREAM_SPARK_TASK_PLACEMENT (a test's own -D still wins)."""
    placement = test_placement()
    name = "MILLSTREAM_CONF_MILLSTREAM_SPARK_TASK_PLACEMENT"
    if placement is None or name in os.environ:
        yield
        return
    os.environ[name] = placement
    try:
        yield
    finally:
        os.environ.pop(name, None)


@pytest.fixture(scope="module")
def cluster_spec(request: pytest.FixtureRequest) -> ClusterSpec:
    """An indirect parameter, else the module's ``CLUSTER``, else the default spec."""
    spec = getattr(request, "param", None) or getattr(request.module, "CLUSTER", None) or ClusterSpec()
    if not isinstance(spec, ClusterSpec):
        raise TypeError(f"{request.module.__name__}.CLUSTER must be a ClusterSpec, got {spec!r}")
    return spec


@pytest.fixture(scope="module")
def spark(cluster_spec: ClusterSpec) -> Iterator[Any]:
    """The module's started SparkHost (one per process at a time: Spark allows one session)."""
    from millstream.taskmanager.spark.host import SparkHost

    with SparkHost(slots=cluster_spec.spark_host_slots, tasks_per_slot=cluster_spec.tasks_per_slot,
                   placement=cluster_spec.placement) as host:  # type: ignore[arg-type]
        yield host


@pytest.fixture(scope="module")
def checkpoint_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's checkpoint directory (its cluster's, when its spec says ``checkpoints``)."""
    return tmp_path_factory.mktemp("checkpoints")


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, cluster_spec: ClusterSpec, spark: Any) -> Iterator[Any]:
    """The module's MiniCluster, shared by its tests (a module with a cluster of processes defines
    its own ``cluster`` instead)."""
    options = {}
    if cluster_spec.checkpoints:
        options["execution.checkpointing.dir"] = str(request.getfixturevalue("checkpoint_dir"))
    with embedded_cluster(cluster_spec, spark, **options) as mc:
        yield mc


@pytest.fixture
def client(cluster: Any) -> Iterator[Any]:
    """A ClusterClient of the module's cluster, per test."""
    from millstream.client.cluster_client import ClusterClient

    with ClusterClient(cluster.address) as c:
        yield c


@pytest.fixture(scope="module")
def ha_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """ZooKeeper, two HA JobManagers and HA TaskManagers for the module (its ``HA_CLUSTER``: the
    keyword arguments of ha.HaCluster); skipped, saying why, where ZooKeeper is not installed."""
    from tests.integration.ha import HaCluster

    reason = zookeeper_unavailable()
    if reason:
        pytest.skip(reason)
    with HaCluster(tmp_path_factory.mktemp("ha-cluster"), **getattr(request.module, "HA_CLUSTER", {})) as cluster:
        yield cluster
