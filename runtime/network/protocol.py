"""The data plane's wire format, defined once: frames, in-band events, handshake and errors.

Every message on a data connection is a frame: a 5-byte header ``(kind: u8, length: u32)``, big
endian, then ``length`` bytes of payload. Kinds:

=========  ===================  =================================================================
kind       direction            payload
=========  ===================  =================================================================
BUFFER     producer → consumer  a list of records pickled once by the producer (protocol 5,
                                :mod:`millstream.runtime.serialization`);
                                it costs one credit
EVENT      producer → consumer  an in-band event (:func:`encode_event`), ordered with the buffers;
                                it costs no credit (as in Flink, events never wait for buffers)
CREDIT     consumer → producer  ``u32``: this many more buffers may be sent
HELLO      consumer → producer  :class:`Hello`: the subpartition wanted, the initial credit and the
                                producer attempt id that fences stale consumers and producers
ERROR      producer → consumer  ``u8`` :class:`ErrorCode` + a UTF-8 message; the last frame sent
=========  ===================  =================================================================

A connection serves one subpartition: HELLO, then buffers and events until END_OF_PARTITION, after
which the consumer closes the connection (that close is how the producer learns its data arrived).
"""
from __future__ import annotations

import socket
import struct
import threading
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Callable

from millstream.runtime.rpc import wire_bounds
from millstream.runtime.serialization import deserialize
from millstream.runtime.task.barrier_handler import CancelCheckpointMarker, CheckpointBarrier
from millstream.runtime.timestamps import grouped, stamped
from millstream.runtime.watermarks import WatermarkStatus

__all__ = [
    "BUFFER", "CREDIT", "ERROR", "EVENT", "HELLO", "CancelCheckpointMarker", "CheckpointBarrier", "EndOfPartition", "ErrorCode",
    "Event", "ExchangeCancelled", "ExchangeError", "FrameKind", "FrameReader", "Hello", "PartitionError",
    "Watermark", "WatermarkStatus", "close_socket", "decode_credit", "decode_error", "decode_event", "encode_credit",
    "encode_error", "encode_event", "encode_frame", "never_cancelled", "start_thread", "tune_socket",
]

PROTOCOL_VERSION = 2


class FrameKind(IntEnum):
    BUFFER = 1
    EVENT = 2
    CREDIT = 3
    HELLO = 4
    ERROR = 5


BUFFER = FrameKind.BUFFER
EVENT = FrameKind.EVENT
CREDIT = FrameKind.CREDIT
HELLO = FrameKind.HELLO
ERROR = FrameKind.ERROR

_HEADER = struct.Struct("!BI")
_U32 = struct.Struct("!I")
_RECV_SIZE = 256 * 1024  # large reads: a buffer of small records is ~10-20 KB, take several at once


def encode_frame(kind: FrameKind, payload: bytes) -> bytes:
    # One bytes object per frame: the copy is negligible next to pickling, and one sendall per frame
    # (or a join of several) keeps the sender simple.
    return _HEADER.pack(kind, len(payload)) + payload


def split_frame(frame: bytes) -> tuple[int, memoryview]:
    """A whole frame's kind and payload (a view, no copy): how an in-process consumer reads the
    frames a producer queued."""
    kind, _length = _HEADER.unpack_from(frame)
    return kind, memoryview(frame)[_HEADER.size:]


def decode_buffer(payload: bytes | memoryview) -> list[Any]:
    """A BUFFER frame's batch as ``ResultPartition`` wrote it: a list of records, ``(records,
    timestamps)`` or ``(records, timestamps or None, key groups)``."""
    batch = deserialize(payload)
    if type(batch) is tuple:
        return stamped(*batch) if len(batch) == 2 else grouped(*batch)
    return batch


def encode_credit(n: int) -> bytes:
    return encode_frame(CREDIT, _U32.pack(n))


def decode_credit(payload: bytes) -> int:
    (n,) = _U32.unpack(payload)
    if n > wire_bounds.MAX_CREDIT:
        raise ValueError(f"a CREDIT frame grants {n} buffers; at most {wire_bounds.MAX_CREDIT} are allowed")
    return int(n)


# ---- in-band events ----------------------------------------------------------------------------


@dataclass(frozen=True)
class EndOfPartition:
    """The producer subtask will send nothing more on this channel."""


@dataclass(frozen=True)
class Watermark:
    """No record with a timestamp <= ``timestamp`` (epoch milliseconds) follows on this channel."""

    timestamp: int


Event = EndOfPartition | CheckpointBarrier | CancelCheckpointMarker | Watermark | WatermarkStatus

# An event is a type code + its wire fields packed with a fixed struct: no pickle for control data,
# so a consumer can always decode them, and a new event is one line here. (A barrier's ``options``
# stay local; its ``stop`` and ``drain`` flags travel: a stop's synchronous savepoint is told apart.)
_EVENT_CODECS: dict[type, tuple[int, struct.Struct, tuple[str, ...]]] = {
    EndOfPartition: (0, struct.Struct("!"), ()),
    CheckpointBarrier: (1, struct.Struct("!qq???"), ("checkpoint_id", "timestamp", "stop", "drain", "savepoint")),
    Watermark: (2, struct.Struct("!q"), ("timestamp",)),
    CancelCheckpointMarker: (3, struct.Struct("!q"), ("checkpoint_id",)),
    WatermarkStatus: (4, struct.Struct("!?"), ("idle",)),
}
_EVENT_TYPES = {code: (cls, codec) for cls, (code, codec, _) in _EVENT_CODECS.items()}
_EVENT_FIELDS = {cls: fields for cls, (_, _, fields) in _EVENT_CODECS.items()}


def encode_event(event: Event) -> bytes:
    code, codec, fields = _EVENT_CODECS[type(event)]
    return bytes((code,)) + codec.pack(*(getattr(event, f) for f in fields))


def decode_event(payload: bytes) -> Event:
    try:
        cls, codec = _EVENT_TYPES[payload[0]]
    except (IndexError, KeyError):
        raise ValueError(f"unknown event {payload[:1]!r}") from None
    fields = dict(zip(_EVENT_FIELDS[cls], codec.unpack_from(payload, 1)))
    # The producer went idle (its channel holds no watermark back downstream) or active again.
    event: Event = WatermarkStatus.of(**fields) if cls is WatermarkStatus else cls(**fields)
    return event


# ---- handshake and errors ----------------------------------------------------------------------


class ErrorCode(IntEnum):
    PARTITION_NOT_FOUND = 1       # not registered (yet): the consumer may retry until its deadline
    STALE_ATTEMPT = 2             # the partition is served for another producer attempt
    SUBPARTITION_UNAVAILABLE = 3  # no such subpartition, or it already has a consumer
    PRODUCER_FAILED = 4           # the producer failed or released the partition
    PROTOCOL = 5                  # a malformed or unexpected frame


@dataclass(frozen=True)
class Hello:
    result_id: bytes
    partition_index: int
    subpartition_index: int
    attempt_id: bytes  # the producer's execution attempt id: the fencing token
    initial_credit: int

    _FIXED = struct.Struct("!BiiIHH")

    def encode(self) -> bytes:
        fixed = self._FIXED.pack(
            PROTOCOL_VERSION, self.partition_index, self.subpartition_index, self.initial_credit,
            len(self.result_id), len(self.attempt_id),
        )
        return encode_frame(HELLO, fixed + self.result_id + self.attempt_id)

    @classmethod
    def decode(cls, payload: bytes) -> Hello:
        version, partition, subpartition, credit, n_result, n_attempt = cls._FIXED.unpack_from(payload)
        if version != PROTOCOL_VERSION:
            raise ValueError(f"data protocol version {version}, this worker speaks {PROTOCOL_VERSION}")
        start = cls._FIXED.size
        result_id = payload[start : start + n_result]
        attempt_id = payload[start + n_result : start + n_result + n_attempt]
        if len(attempt_id) != n_attempt:
            raise ValueError("truncated HELLO")
        hello = cls(bytes(result_id), partition, subpartition, bytes(attempt_id), credit)
        problem = wire_bounds.hello_problem(hello.partition_index, hello.subpartition_index, hello.initial_credit,
                                            hello.result_id, hello.attempt_id)
        if problem is not None:
            raise ValueError(f"HELLO out of bounds: {problem}")
        return hello


def encode_error(code: ErrorCode, message: str) -> bytes:
    return encode_frame(ERROR, bytes((code,)) + message.encode("utf-8", "replace"))


def decode_error(payload: bytes) -> tuple[ErrorCode, str]:
    try:
        code = ErrorCode(payload[0])
    except (IndexError, ValueError):
        code = ErrorCode.PROTOCOL
    return code, payload[1:].decode("utf-8", "replace")


# ---- errors and threads ------------------------------------------------------------------------


class ExchangeError(RuntimeError):
    """The data exchange failed: a broken connection, a failed producer or consumer, a closed end."""


class ExchangeCancelled(ExchangeError):
    """The task was cancelled while it waited on the data exchange."""


class PartitionError(ExchangeError):
    """Producer side: a subpartition's consumer failed or the partition was released."""


JOIN_TIMEOUT_S = 2.0  # close() waits this long for its threads (all woken by then; daemons anyway)


def never_cancelled() -> bool:
    return False


def start_thread(target: Callable[..., None], name: str, *args: Any) -> threading.Thread:
    """A daemon thread named ``millstream-net-<name>`` (tests check that none outlive their owner)."""
    thread = threading.Thread(target=target, args=args, name=f"millstream-net-{name}", daemon=True)
    thread.start()
    return thread


# ---- sockets -----------------------------------------------------------------------------------


class FrameReader:
    """Reads whole frames from a socket; bytes read beyond one frame are kept for the next.

    Raises EOFError when the peer closed the connection (between or inside frames) and OSError when
    it broke. Not thread safe: one reader thread per connection.
    """

    def __init__(self, sock: socket.socket, max_frame_bytes: int = wire_bounds.MAX_FRAME_BYTES) -> None:
        self._sock = sock
        self._buf = bytearray()
        self.max_frame_bytes = max_frame_bytes  # a peer's length field never sizes our buffer beyond this

    def read(self) -> tuple[int, bytes]:
        self._fill(_HEADER.size)
        kind, length = _HEADER.unpack_from(self._buf)
        if length > self.max_frame_bytes:
            raise ValueError(f"a frame of {length} bytes announced; at most {self.max_frame_bytes} are allowed here")
        end = _HEADER.size + length
        self._fill(end)
        payload = bytes(self._buf[_HEADER.size : end])
        del self._buf[:end]  # cheap: CPython's bytearray drops a prefix by moving its start
        return kind, payload

    def _fill(self, n: int) -> None:
        buf = self._buf
        while len(buf) < n:
            chunk = self._sock.recv(max(_RECV_SIZE, n - len(buf)))
            if not chunk:
                raise EOFError("connection closed by the peer" + (" inside a frame" if buf else ""))
            buf += chunk


def tune_socket(sock: socket.socket) -> None:
    """Low latency and bounded detection of dead peers for a data connection.

    Frames are written whole, so Nagle's algorithm only adds delay (40 ms with delayed ACKs on small
    frames such as CREDIT). Keepalive and TCP_USER_TIMEOUT make a connection to a host that vanished
    fail within ~30 s instead of never; a dead *process* is seen at once (the kernel closes its
    sockets). Where an option does not exist (non-Linux), the default stays.
    """
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3), ("TCP_USER_TIMEOUT", 30_000)):
        option = getattr(socket, name, None)
        if option is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, option, value)
            except OSError:  # not supported by this kernel: keep its default
                pass


def close_socket(sock: socket.socket | None) -> None:
    """Shuts down then closes: shutdown wakes any thread blocked in recv/send on it, close does not."""
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already disconnected
    sock.close()
