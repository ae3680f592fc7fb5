"""Shared fixtures for the graph-layer unit tests (no cluster, no Spark, no sleeps)."""
from __future__ import annotations

import pytest

from millstream.datastream import StreamExecutionEnvironment


@pytest.fixture
def env() -> StreamExecutionEnvironment:
    """A fresh environment per test: graph state must never leak between tests."""
    return StreamExecutionEnvironment.get_execution_environment()
