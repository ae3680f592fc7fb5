"""The guards of tests/unit/conftest.py: an IP socket's bind or connect, a gRPC server and a child
process fail in a unit test with a message naming tests/integration; AF_UNIX socket pairs work."""
from __future__ import annotations

import multiprocessing
import socket
import subprocess
import sys

import grpc
import pytest


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6])
def test_an_ip_socket_can_neither_bind_nor_connect(family: socket.AddressFamily) -> None:
    host = "127.0.0.1" if family == socket.AF_INET else "::1"
    with socket.socket(family, socket.SOCK_STREAM) as s:
        with pytest.raises(OSError, match="unit tests use no network: socket.bind .* belongs in tests/integration"):
            s.bind((host, 0))
        with pytest.raises(OSError, match="socket.connect"):
            s.connect((host, 9))
        with pytest.raises(OSError, match="socket.connect_ex"):
            s.connect_ex((host, 9))


def test_a_grpc_server_is_refused() -> None:
    with pytest.raises(RuntimeError, match="a gRPC server started from a unit test"):
        grpc.server(None)


def test_a_unix_socket_pair_still_works() -> None:
    a, b = socket.socketpair()
    with a, b:
        a.sendall(b"ping")
        assert b.recv(4) == b"ping"


def test_a_child_process_is_refused() -> None:
    with pytest.raises(OSError, match="unit tests start no process: running .*belongs in tests/integration"):
        subprocess.run([sys.executable, "-c", "pass"])


def test_a_spawned_multiprocessing_child_is_refused() -> None:
    process = multiprocessing.get_context("spawn").Process(target=print)
    with pytest.raises(OSError, match="unit tests start no process: spawning"):
        process.start()
