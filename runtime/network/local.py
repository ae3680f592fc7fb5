"""In-process connections: a consumer whose producer serves its partition from the same process
(placement ``slot``: a slot's subtasks are threads of one Python worker) reads it through memory,
not through the kernel (Flink's local input channel).

A :class:`LocalConnection` pair stands in for a connected socket pair: the same frames, HELLO,
CREDIT, buffers, events and ERROR, travel the same way, so credit-based flow control, in-band
failures and every close path stay exactly those of the network path; only the socket and its
copies into and out of the kernel are gone. Buffers are still the serialized bytes the producer
wrote (as in Flink, a consumer never shares record objects with its producer).

A :class:`~millstream.runtime.network.partition.PartitionServer` built with ``local=True``
registers its advertised address here while it serves; a consumer that resolves a producer to an
address found here connects through :func:`connect_local`.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Any, Callable

_lock = threading.Lock()
_servers: dict[tuple[str, int], Callable[[LocalConnection], object]] = {}


class _Direction:
    """One direction of a connection: chunks written whole by one side, read by the other."""

    def __init__(self) -> None:
        self.cond = threading.Condition(threading.Lock())
        self.chunks: deque[bytes] = deque()
        self.writer_closed = False  # the peer read what was written, then EOF
        self.reader_closed = False  # reads end at once, writes fail

    def put(self, data: bytes) -> None:
        with self.cond:
            if self.writer_closed or self.reader_closed:
                raise BrokenPipeError("local connection closed")
            self.chunks.append(bytes(data))
            self.cond.notify()

    def get(self, timeout: float | None) -> bytes:
        with self.cond:
            while not self.chunks or self.reader_closed:
                if self.reader_closed or self.writer_closed:
                    return b""
                if not self.cond.wait(timeout) and timeout is not None:
                    raise TimeoutError("timed out")
            return self.chunks.popleft()

    def close_writer(self) -> None:
        with self.cond:
            self.writer_closed = True
            self.cond.notify_all()

    def close_reader(self) -> None:
        with self.cond:
            self.reader_closed = True
            self.chunks.clear()
            self.cond.notify_all()


class LocalConnection:
    """One end of an in-process connection, with the socket methods the data plane uses.

    ``recv`` returns the next whole chunk one ``sendall`` wrote (possibly more than asked: the
    only reader, ``FrameReader``, keeps any bytes beyond a frame for the next one)."""

    def __init__(self, incoming: _Direction, outgoing: _Direction) -> None:
        self._in, self._out = incoming, outgoing
        self._timeout: float | None = None

    def sendall(self, data: bytes) -> None:
        self._out.put(data)

    def recv(self, _size: int) -> bytes:
        return self._in.get(self._timeout)

    def settimeout(self, timeout: float | None) -> None:
        self._timeout = timeout

    def setsockopt(self, *_args: Any) -> None:
        pass  # TCP options: nothing to tune in memory

    def shutdown(self, _how: int) -> None:
        self._out.close_writer()
        self._in.close_reader()

    def close(self) -> None:
        self.shutdown(0)

    def getpeername(self) -> str:
        return "local"


def pair() -> tuple[LocalConnection, LocalConnection]:
    a_to_b, b_to_a = _Direction(), _Direction()
    return LocalConnection(b_to_a, a_to_b), LocalConnection(a_to_b, b_to_a)


def register(address: tuple[str, int], accept: Callable[[LocalConnection], object]) -> None:
    """``accept(server_end)`` takes each local connection made to ``address``."""
    with _lock:
        _servers[address] = accept


def unregister(address: tuple[str, int]) -> None:
    with _lock:
        _servers.pop(address, None)


def connect_local(address: tuple[str, int]) -> LocalConnection | None:
    """A connection to the server at ``address`` when it serves in this process, else None."""
    with _lock:
        accept = _servers.get(address)
    if accept is None:
        return None
    client, server = pair()
    accept(server)
    return client
