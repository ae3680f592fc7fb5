"""Fixtures shared by the integration modules."""
from tests.integration.zookeeper import zookeeper_server  # noqa: F401  (a real ZooKeeper per test)
