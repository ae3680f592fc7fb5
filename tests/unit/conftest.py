"""Shared fixtures for the graph-layer unit tests (no cluster, no Spark, no sleeps)."""
from __future__ import annotations

import multiprocessing.util
import socket
import subprocess
from typing import Any

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


@pytest.fixture(params=["hashmap", "rocksdb", "rocksdb-heap-timers"])
def state_backend(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    """Runs the test on each keyed state backend (tests/unit/state_backends.py): the heap, RocksDB
    with its timers in RocksDB, RocksDB with heap timers (state.backend.rocksdb.timer-service.factory)."""
    from tests.unit import state_backends

    kind, _, timers = request.param.partition("-")
    state_backends.selected.update(type=kind, dir=tmp_path, open=[], timers="HEAP" if timers else "ROCKSDB")
    yield request.param
    for db in state_backends.selected["open"]:
        db.close()
    state_backends.selected.update(type="hashmap", dir=None, open=[], timers="ROCKSDB")


@pytest.fixture
def env() -> StreamExecutionEnvironment:
    """A fresh environment per test: graph state must never leak between tests."""
    return StreamExecutionEnvironment.get_execution_environment()


_NETWORK_FAMILIES = (socket.AF_INET, socket.AF_INET6)
_NO_NETWORK = ("unit tests use no network: {what} {where} from a unit test. A test that needs a server, a "
               "client connection or a process belongs in tests/integration")
_NO_PROCESS = ("unit tests start no process: {what} from a unit test. A test that needs one belongs in "
               "tests/integration")


def _refuse(what: str, original: Any) -> Any:
    def guarded(sock: socket.socket, address: Any, *args: Any) -> Any:
        if sock.family in _NETWORK_FAMILIES:
            raise OSError(_NO_NETWORK.format(what=what, where=address))
        return original(sock, address, *args)
    return guarded


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unit tests are pure: an IP socket's bind or connect fails with a message saying where such a
    test belongs (AF_UNIX sockets and socketpair stay allowed). gRPC opens its sockets in C, past
    Python's socket module, so its server constructors are refused too."""
    for name in ("bind", "connect", "connect_ex"):
        monkeypatch.setattr(socket.socket, name, _refuse(f"socket.{name}", getattr(socket.socket, name)))

    def refuse_server(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(_NO_NETWORK.format(what="a gRPC server", where="started"))

    import grpc
    import grpc.aio

    monkeypatch.setattr(grpc, "server", refuse_server)
    monkeypatch.setattr(grpc.aio, "server", refuse_server)


@pytest.fixture(autouse=True)
def no_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unit tests are pure: starting a program (subprocess, multiprocessing's spawn) fails with a
    message saying where such a test belongs (a bare os.fork is not guarded)."""
    def refuse(self: subprocess.Popen, args: Any, *rest: Any, **kwargs: Any) -> None:
        raise OSError(_NO_PROCESS.format(what=f"running {args!r}"[:200]))

    def refuse_spawn(path: str, args: Any, *rest: Any) -> int:
        raise OSError(_NO_PROCESS.format(what=f"spawning {args!r}"[:200]))

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)
    monkeypatch.setattr(multiprocessing.util, "spawnv_passfds", refuse_spawn)
