"""Shared fixtures for the graph-layer unit tests (no cluster, no Spark, no sleeps)."""
from __future__ import annotations

import pytest

from millstream.datastream import StreamExecutionEnvironment
from millstream.datastream import stream_execution_environment as environment_module


@pytest.fixture(autouse=True)
def one_default_parallelism(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unit tests read graphs at a known default parallelism of 1, whatever this machine's cores
    (the local default is the core count: test_api checks that rule itself)."""
    monkeypatch.setattr(environment_module, "_default_parallelism", lambda: 1)


@pytest.fixture(autouse=True)
def internal_logs_propagate() -> None:
    """An embedded cluster started earlier in this process (an integration test) keeps Millstream's
    loggers off the root logger; unit tests read them with caplog, which listens there."""
    import logging

    from millstream.client.logs import INTERNAL_LOGGERS

    for name in INTERNAL_LOGGERS:
        logging.getLogger(name).propagate = True


@pytest.fixture
def env() -> StreamExecutionEnvironment:
    """A fresh environment per test: graph state must never leak between tests."""
    return StreamExecutionEnvironment.get_execution_environment()
