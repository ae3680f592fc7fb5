"""The producer side of the data plane: result partitions and the server that hands them consumers.

See :mod:`millstream.runtime.network.environment` for the flow-control scheme and the threads involved.
"""
from __future__ import annotations

import logging
import socket
import struct
import threading
import time
from collections import deque
from typing import Any, Callable

from millstream.runtime.rpc import wire_bounds
from millstream.runtime.partitioners import StreamPartitioner
from millstream.runtime.serialization import RecordSerializer
from millstream.runtime.timestamps import timestamps_of
from millstream.runtime.rpc.tls import TlsSettings
from millstream.runtime.network import local
from millstream.runtime.network.protocol import (
    BUFFER,
    CREDIT,
    EVENT,
    HELLO,
    JOIN_TIMEOUT_S,
    EndOfPartition,
    ErrorCode,
    Event,
    ExchangeCancelled,
    ExchangeError,
    FrameReader,
    Hello,
    PartitionError,
    Watermark,
    WatermarkStatus,
    close_socket,
    decode_credit,
    encode_error,
    encode_event,
    encode_frame,
    never_cancelled,
    start_thread,
    tune_socket,
)

__all__ = ["PartitionServer", "ResultPartition"]

log = logging.getLogger(__name__)

_WAIT_SLICE_S = 0.05  # how often a blocked emit re-checks is_cancelled(): cancel wakes it within this
_MAX_FRAMES_PER_WRITE = 16  # one write joins at most this many frames: bounds the copy
_EOP_FRAME = encode_frame(EVENT, encode_event(EndOfPartition()))


class _Staging:
    """Records waiting for a buffer, and their timestamps once any of them has one (a buffer of
    timestamped records travels as ``(records, timestamps)``; see ``runtime.timestamps``), and, on a
    keyed exchange, their key groups while every staged record came with one (the buffer then
    travels as ``(records, timestamps or None, key groups)``)."""

    __slots__ = ("records", "stamps", "groups")

    def __init__(self) -> None:
        self.records: list[Any] = []
        self.stamps: list[int | None] | None = None
        self.groups: bytearray | None = None

    def add(self, records: list[Any], stamps: list[int | None] | None, groups: bytes | None = None) -> None:
        if not records:
            return
        if not self.records:
            self.groups = None if groups is None else bytearray(groups)
        elif self.groups is not None:
            if groups is None:
                self.groups = None  # these records have none: the buffer goes without
            else:
                self.groups += groups
        if stamps is not None and self.stamps is None:
            self.stamps = [None] * len(self.records)
        if self.stamps is not None:
            self.stamps.extend(stamps if stamps is not None else [None] * len(records))
        self.records.extend(records)

    def __len__(self) -> int:
        return len(self.records)

    def cut(self, start: int, end: int) -> tuple[list[Any], list[int | None] | None, bytes | None]:
        return (self.records[start:end], None if self.stamps is None else self.stamps[start:end],
                None if self.groups is None else bytes(self.groups[start:end]))

    def drop(self, n: int) -> None:
        del self.records[:n]
        if self.groups is not None:
            del self.groups[:n]
        if self.stamps is not None:
            del self.stamps[:n]
            if not self.records:
                self.stamps = None

    def clear(self) -> None:
        self.records.clear()
        self.stamps = None
        self.groups = None


class _Subpartition:
    """One consumer channel of a partition: its staged records, queued frames and connection.

    Every field but ``staged`` is guarded by the partition's lock; ``staged`` is the task thread's.
    """

    def __init__(self, index: int, lock: threading.Lock) -> None:
        self.index = index
        self.staged = _Staging()
        self.queue: deque[tuple[bool, bytes]] = deque()  # (costs a credit, frame), in send order
        self.queued_buffers = 0
        self.credit = 0
        self.sock: socket.socket | None = None
        self.consumer: local.LocalConsumer | None = None  # a consumer in this process: frames go to it directly
        self.wakeup = threading.Condition(lock)  # its sender waits here for frames or credit
        self.eop_taken = False    # the sender took END_OF_PARTITION off the queue
        self.eop_written = False  # ... and the kernel accepted it
        self.peer_closed = False  # the consumer closed its end (after END_OF_PARTITION: consumed)
        self.failing = False      # an ERROR frame is queued; the sender stops after it
        self.error: str | None = None
        self.threads: list[threading.Thread] = []

    @property
    def consumed(self) -> bool:
        return self.eop_written and self.peer_closed


class ResultPartition:
    """One producer subtask's output for one data set, served to its consumers (a ResultWriter).

    ``emit`` routes records to subpartitions with the partitioner, stages them, and serializes a
    staged list into one buffer at ``records_per_buffer`` records; ``flush`` (the task's buffer
    timeout) serializes what is staged now (with :class:`RecordSerializer`, which carries classes by
    value when records need it). Broadcast stages one list and serializes it once for all
    subpartitions. Buffers queue per subpartition up to ``max_backlog_per_subpartition``; beyond, the
    task thread blocks until a consumer's credit lets the sender drain one — or raises if the task is
    cancelled, the consumer's connection fails or the partition is released. A subpartition whose
    consumer has not connected yet queues up to the bound too, then backpressures.

    Counters: ``records_out`` (records emitted once, whatever the fan-out), ``buffers_out`` and
    ``bytes_out`` (buffers and frame bytes queued, per subpartition), ``max_backlog_seen`` (deepest
    queue, in buffers), ``blocked_s`` (time ``emit``/``flush`` spent backpressured).
    """

    def __init__(
        self,
        result_id: bytes,
        partition_index: int,
        num_subpartitions: int,
        partitioner: StreamPartitioner,
        attempt_id: bytes,
        records_per_buffer: int = 1024,
        max_backlog_per_subpartition: int = 4,
        is_cancelled: Callable[[], bool] = never_cancelled,
    ) -> None:
        if num_subpartitions < 1 or records_per_buffer < 1 or max_backlog_per_subpartition < 1:
            raise ValueError("num_subpartitions, records_per_buffer and max_backlog_per_subpartition must be >= 1")
        partitioner.setup(num_subpartitions)
        self.result_id = result_id
        self.partition_index = partition_index
        self.num_subpartitions = num_subpartitions
        self.partitioner = partitioner
        self.attempt_id = attempt_id
        self.records_per_buffer = records_per_buffer
        self.max_backlog_per_subpartition = max_backlog_per_subpartition
        self._is_cancelled = is_cancelled
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # the task thread waits here: space, consumed
        self._subs = [_Subpartition(i, self._lock) for i in range(num_subpartitions)]
        self._broadcast_staged = _Staging()
        # one per writer: a switch to classes by value sticks; records in flight share no objects
        self.serializer = RecordSerializer(shared=False)
        self._finished = False
        self._failure: str | None = None
        self._closed = False
        self._waiting = False
        self.records_out = 0
        self.buffers_out = 0
        self.bytes_out = 0
        self.max_backlog_seen = 0
        self.blocked_s = 0.0

    @property
    def key(self) -> tuple[bytes, int]:
        return self.result_id, self.partition_index

    def describe(self, subpartition: int | None = None) -> str:
        where = f"partition {self.result_id.hex()}#{self.partition_index}"
        return where if subpartition is None else f"{where} subpartition {subpartition}"

    @property
    def backpressured(self) -> bool:
        """Whether the task thread is blocked right now waiting for queue space."""
        return self._waiting

    # -- the task thread: ResultWriter -------------------------------------------------------------

    def emit(self, records: list[Any]) -> None:
        if not records:
            return
        if self._finished:
            raise ExchangeError(f"{self.describe()}: emit after finish")
        self.records_out += len(records)
        stamps = timestamps_of(records)
        if self.partitioner.broadcast:
            self._stage(self._broadcast_staged, records, stamps, self._subs)
        elif self.num_subpartitions == 1:  # forward and friends: no per-record channel selection
            self._stage(self._subs[0].staged, records, stamps, self._subs)
        else:  # a keyed exchange's key groups go along
            for sub, (routed, routed_stamps, groups) in zip(self._subs, self.partitioner.route_batch(records, stamps)):
                if routed:
                    sub.staged.add(routed, routed_stamps, groups)
                if len(sub.staged) >= self.records_per_buffer:
                    self._stage(sub.staged, [], None, [sub])

    def flush(self) -> None:
        if self._broadcast_staged:
            self._write_buffer(*self._broadcast_staged.cut(0, len(self._broadcast_staged)), self._subs)
            self._broadcast_staged.clear()
        for sub in self._subs:
            if sub.staged:
                self._write_buffer(*sub.staged.cut(0, len(sub.staged)), [sub])
                sub.staged.clear()

    def broadcast_event(self, event: Event) -> None:
        """Sends ``event`` to every subpartition after everything emitted before it."""
        if self._finished:
            raise ExchangeError(f"{self.describe()}: event after finish")
        self.flush()
        frame = encode_frame(EVENT, encode_event(event))
        for sub in self._subs:
            self._enqueue(sub, frame, costs_credit=False)

    def emit_watermark(self, watermark: int) -> None:
        self.broadcast_event(Watermark(watermark))

    def emit_watermark_status(self, idle: bool) -> None:
        self.broadcast_event(WatermarkStatus.of(idle))

    def finish(self) -> None:
        """Flushes and ends every subpartition; then wait_consumed() tells when consumers have it all."""
        if self._finished:
            return
        self.flush()
        for sub in self._subs:
            self._enqueue(sub, _EOP_FRAME, costs_credit=False)
        self._finished = True

    @property
    def failed(self) -> bool:
        """The partition or one of its consumer connections failed or was released."""
        with self._lock:
            return bool(self._closed or self._failure or any(s.error for s in self._subs))

    def wait_consumed(self, timeout_s: float) -> bool:
        """True once every consumer received END_OF_PARTITION and closed its connection (so the worker
        that serves this partition may exit); False at the timeout or as soon as a subpartition or the
        partition failed."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while not all(sub.consumed for sub in self._subs):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._closed or self._failure or any(s.error for s in self._subs):
                    return False
                self._changed.wait(min(remaining, 1.0))
        return True

    def _stage(self, staged: _Staging, records: list[Any], stamps: list[int | None] | None,
               targets: list[_Subpartition]) -> None:
        size = self.records_per_buffer
        if not staged and len(records) == size:  # a whole buffer as given: no copy
            self._write_buffer(list(records) if stamps is not None else records, stamps, None, targets)
            return
        staged.add(records, stamps)
        start = 0
        while len(staged) - start >= size:
            self._write_buffer(*staged.cut(start, start + size), targets)
            start += size
        staged.drop(start)

    def _write_buffer(self, records: list[Any], stamps: list[int | None] | None, groups: bytes | None,
                      targets: list[_Subpartition]) -> None:
        # Timestamped records travel as (records, timestamps), with key groups as (records,
        # timestamps or None, key groups); the input gate rebuilds the batch.
        if groups is not None:
            payload = self.serializer.serialize((records, stamps, groups))
        else:
            payload = self.serializer.serialize(records if stamps is None else (records, stamps))
        frame = encode_frame(BUFFER, payload)
        for sub in targets:
            self._enqueue(sub, frame, costs_credit=True)
        self.buffers_out += len(targets)
        self.bytes_out += len(frame) * len(targets)

    def _enqueue(self, sub: _Subpartition, frame: bytes, costs_credit: bool) -> None:
        with self._lock:
            self._check_usable(sub)
            if costs_credit:
                if sub.queued_buffers >= self.max_backlog_per_subpartition:
                    self._wait_for_space(sub)
                sub.queued_buffers += 1
                self.max_backlog_seen = max(self.max_backlog_seen, sub.queued_buffers)
            sub.queue.append((costs_credit, frame))
            if sub.consumer is not None:
                self._hand_over(sub)
            else:
                sub.wakeup.notify()

    def _wait_for_space(self, sub: _Subpartition) -> None:
        # Sliced waits: is_cancelled() is a plain callable nobody signals us about.
        started = time.monotonic()
        self._waiting = True
        try:
            while sub.queued_buffers >= self.max_backlog_per_subpartition:
                if self._is_cancelled():
                    raise ExchangeCancelled(f"{self.describe(sub.index)}: cancelled while backpressured")
                self._changed.wait(_WAIT_SLICE_S)
                self._check_usable(sub)
        finally:
            self._waiting = False
            self.blocked_s += time.monotonic() - started

    def _check_usable(self, sub: _Subpartition) -> None:
        if self._closed:
            raise PartitionError(f"{self.describe()} was released")
        if self._failure is not None:
            raise PartitionError(f"{self.describe()} failed: {self._failure}")
        if sub.error is not None:
            raise PartitionError(f"{self.describe(sub.index)}: {sub.error}")

    # -- connections (server and sender threads) ---------------------------------------------------

    def _attach(self, hello: Hello, sock: socket.socket, reader: FrameReader) -> tuple[ErrorCode, str] | None:
        """Hands a consumer's connection to its subpartition; a refusal (code, message) otherwise."""
        with self._lock:
            refusal = self._refusal(hello)
            if refusal is not None:
                return refusal
            sub = self._subs[hello.subpartition_index]
            sub.sock = sock
            sub.credit = hello.initial_credit
            name = f"{self.result_id.hex()[:8]}-{self.partition_index}-{sub.index}"
            sub.threads = [
                start_thread(self._send_loop, f"send-{name}", sub, sock),
                start_thread(self._credit_loop, f"credit-{name}", sub, reader),
            ]
            sub.wakeup.notify()
        return None

    def _refusal(self, hello: Hello) -> tuple[ErrorCode, str] | None:
        """Why a consumer, by socket or in this process, may not attach (lock held), or None."""
        if self._closed or self._failure is not None:
            return ErrorCode.PRODUCER_FAILED, f"{self.describe()} " + (
                f"failed: {self._failure}" if self._failure else "was released")
        if not 0 <= hello.subpartition_index < self.num_subpartitions:
            return ErrorCode.SUBPARTITION_UNAVAILABLE, (
                f"{self.describe()} has {self.num_subpartitions} subpartitions, not {hello.subpartition_index + 1}")
        taken = self._subs[hello.subpartition_index]
        if taken.sock is not None or taken.consumer is not None:
            return ErrorCode.SUBPARTITION_UNAVAILABLE, f"{self.describe(hello.subpartition_index)} already has a consumer"
        return None

    # -- a consumer in this process (the consumer's task thread calls these) ------------------------

    def attach_local(self, hello: Hello, consumer: local.LocalConsumer) -> tuple[ErrorCode, str] | None:
        """Makes ``consumer`` the subpartition's reader: what its credit lets through is handed to it
        now, on this thread, the rest as it is queued or as credit returns; a refusal (code, message)
        otherwise."""
        with self._lock:
            refusal = self._refusal(hello)
            if refusal is not None:
                return refusal
            sub = self._subs[hello.subpartition_index]
            sub.consumer = consumer
            sub.credit = hello.initial_credit
            self._hand_over(sub)
        return None

    def grant_local(self, index: int, credit: int) -> None:
        """The local consumer of subpartition ``index`` processed ``credit`` buffers."""
        with self._lock:
            sub = self._subs[index]
            if sub.consumer is None:
                return  # failed or released meanwhile: nothing more to hand over
            sub.credit += credit
            self._hand_over(sub)

    def detach_local(self, index: int, consumer: local.LocalConsumer) -> None:
        """``consumer``, the local consumer of subpartition ``index``, went away (its gate closed)."""
        with self._lock:
            sub = self._subs[index]
            if sub.consumer is not consumer:
                return  # ended, failed or released before, or another consumer's
            sub.consumer = None
            sub.peer_closed = True
            self._changed.notify_all()
            early = not sub.eop_taken
        if early:
            self._subpartition_failed(sub, "the consumer closed its connection before the end of the partition")

    def _hand_over(self, sub: _Subpartition) -> None:
        """Gives the local consumer every frame its credit allows (lock held), on the calling thread."""
        consumer = sub.consumer
        assert consumer is not None
        handed = False
        while frames := self._take_sendable(sub):
            handed = True
            for frame in frames:
                consumer.deliver(frame)
            if sub.eop_taken:  # the consumer has it all and lets go, as its reader closes a socket
                sub.eop_written = sub.peer_closed = True
                sub.consumer = None
                break
        if handed:
            self._changed.notify_all()  # queue space for a blocked emit; wait_consumed

    # -- connections (server and sender threads) ---------------------------------------------------

    def _take_sendable(self, sub: _Subpartition) -> list[bytes]:
        """Frames the sender may write now (lock held): events freely, buffers while credit lasts."""
        frames: list[bytes] = []
        q = sub.queue
        while q and len(frames) < _MAX_FRAMES_PER_WRITE:
            costs_credit, frame = q[0]
            if costs_credit:
                if sub.credit <= 0:
                    break
                sub.credit -= 1
                sub.queued_buffers -= 1
            q.popleft()
            frames.append(frame)
            if frame is _EOP_FRAME:
                sub.eop_taken = True
                break
        return frames

    def _send_loop(self, sub: _Subpartition, sock: socket.socket) -> None:
        try:
            while True:
                with self._lock:
                    frames = self._take_sendable(sub)
                    while not frames:
                        if self._closed or sub.error is not None:
                            return
                        sub.wakeup.wait(1.0)
                        frames = self._take_sendable(sub)
                    self._changed.notify_all()  # queue space for a blocked emit
                    failing = sub.failing
                sock.sendall(frames[0] if len(frames) == 1 else b"".join(frames))
                if frames[-1] is _EOP_FRAME or failing:
                    with self._lock:
                        sub.eop_written = not failing
                        self._changed.notify_all()
                    return  # nothing follows END_OF_PARTITION or ERROR
        except OSError as e:
            self._subpartition_failed(sub, f"sending to the consumer failed: {e}")
        finally:
            if sub.failing:
                close_socket(sock)

    def _credit_loop(self, sub: _Subpartition, reader: FrameReader) -> None:
        try:
            while True:
                kind, payload = reader.read()
                if kind != CREDIT:
                    raise ValueError(f"unexpected frame kind {kind} from the consumer")
                with self._lock:
                    sub.credit += decode_credit(payload)
                    if sub.credit > wire_bounds.MAX_CREDIT:  # a consumer never holds more buffers than this
                        raise ValueError(f"the consumer's credit grew to {sub.credit} buffers; "
                                         f"at most {wire_bounds.MAX_CREDIT} are allowed")
                    sub.wakeup.notify()
        except EOFError:
            with self._lock:
                sub.peer_closed = True
                self._changed.notify_all()
                early = not sub.eop_taken
            if early:
                self._subpartition_failed(sub, "the consumer closed its connection before the end of the partition")
        except (OSError, ValueError, struct.error) as e:
            self._subpartition_failed(sub, f"the consumer connection failed: {e}")

    def _subpartition_failed(self, sub: _Subpartition, message: str) -> None:
        with self._lock:
            if self._closed or sub.consumed or sub.failing:
                return  # our own close, or after the end: nothing lost
            if sub.error is None:
                sub.error = message
                log.warning("%s: %s", self.describe(sub.index), message)
            sock = sub.sock
            sub.wakeup.notify_all()
            self._changed.notify_all()
        close_socket(sock)

    # -- teardown ----------------------------------------------------------------------------------

    def fail(self, message: str) -> None:
        """The producer failed: connected consumers get an ERROR frame with ``message`` instead of the
        data still queued; consumers that connect later are refused with it."""
        with self._lock:
            if self._closed or self._failure is not None:
                return
            self._failure = message
            error_frame = encode_error(ErrorCode.PRODUCER_FAILED, f"{self.describe()} failed: {message}")
            for sub in self._subs:
                if sub.consumer is not None:
                    sub.queue.clear()
                    sub.queued_buffers = 0
                    sub.consumer.fail(f"the producer failed: {self.describe()} failed: {message}")
                    sub.consumer = None
                elif sub.sock is not None and not sub.eop_taken and sub.error is None:
                    sub.queue.clear()
                    sub.queued_buffers = 0
                    sub.queue.append((False, error_frame))
                    sub.failing = True
                    sub.wakeup.notify_all()
            self._changed.notify_all()

    def close(self) -> None:
        """Releases the partition: wakes a blocked emit (it raises), gives ERROR frames a moment to
        leave, then drops every connection and waits for its threads."""
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        for sub in self._subs:
            if sub.failing and sub.threads:
                sub.threads[0].join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            self._closed = True
            socks = [sub.sock for sub in self._subs]
            for sub in self._subs:
                if sub.consumer is not None:  # as the socket's EOF tells a remote consumer
                    sub.consumer.fail("the producer closed the connection before the end of the partition")
                    sub.consumer = None
                sub.wakeup.notify_all()
            self._changed.notify_all()
        for sock in socks:
            close_socket(sock)
        for sub in self._subs:
            for thread in sub.threads:
                thread.join(max(0.0, deadline - time.monotonic()))


class PartitionServer:
    """Serves a worker's result partitions to consumers; one per task worker.

    Binds when built (``address`` is known at once), accepts after ``start()`` (connections made
    before wait in the listen backlog). A consumer's HELLO is routed by (result id, partition index)
    after checking the producer attempt id; an unknown partition, a stale attempt or a subpartition
    that already has a consumer gets an ERROR frame. The server owns the partitions registered with
    it: ``close()`` releases them. With ``tls`` every connection is mutual TLS, the consumer's
    certificate checked before its HELLO is read.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, handshake_timeout_s: float = 10.0,
                 advertised_host: str | None = None, tls: TlsSettings | None = None, local: bool = False) -> None:
        """``local``: consumers in this process connect through memory (:mod:`.local`), not a socket."""
        self._local = local
        self._tls_context = tls.server_context() if tls is not None else None
        self._listener = socket.create_server((host, port), backlog=128)
        # ``address`` is what consumers are told: the bound host, or the advertised one when it
        # binds every interface
        self.address: tuple[str, int] = (advertised_host or host, self._listener.getsockname()[1])
        self._handshake_timeout_s = handshake_timeout_s
        self._lock = threading.Lock()
        self._partitions: dict[tuple[bytes, int], ResultPartition] = {}
        self._handshaking: set[socket.socket] = set()
        self._thread: threading.Thread | None = None
        self._closed = False

    def register(self, partition: ResultPartition) -> None:
        with self._lock:
            if self._closed:
                raise ExchangeError(f"data server {self.address[0]}:{self.address[1]} is closed")
            if partition.key in self._partitions:
                raise ValueError(f"{partition.describe()} is already registered")
            self._partitions[partition.key] = partition

    def start(self) -> PartitionServer:
        if self._thread is None:
            self._thread = start_thread(self._accept_loop, f"accept-{self.address[1]}")
            if self._local:
                local.register(self.address, self)
        return self

    def __enter__(self) -> PartitionServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError as e:
                if self._closed:
                    return
                log.warning("data server %s: accept failed: %s", self.address, e)
                time.sleep(0.1)  # e.g. out of file descriptors: do not spin
                continue
            start_thread(self._handshake, "handshake", conn)

    def _handshake(self, conn: socket.socket) -> None:
        with self._lock:
            if self._closed:
                conn.close()
                return
            self._handshaking.add(conn)
        attached = False
        try:
            tune_socket(conn)
            conn.settimeout(self._handshake_timeout_s)  # a consumer sends HELLO right after connecting
            if self._tls_context is not None:
                conn = self._tls_accept(conn)
            reader = FrameReader(conn, wire_bounds.MAX_HELLO_BYTES)  # an unknown peer: a HELLO is small
            kind, payload = reader.read()
            if kind != HELLO:
                raise ValueError(f"expected HELLO, got frame kind {kind}")
            reader.max_frame_bytes = 64  # from here on the consumer sends CREDIT frames only
            hello = Hello.decode(payload)
            conn.settimeout(None)  # from here on, close() and TCP keepalive bound every wait
            partition, refusal = self.partition_for(hello)
            if partition is not None:
                refusal = partition._attach(hello, conn, reader)
            if refusal is not None:
                conn.sendall(encode_error(*refusal))
            attached = refusal is None
        except (OSError, EOFError, ValueError, struct.error) as e:
            log.info("data server %s: dropped a connection during its handshake: %s", self.address, e)
            try:
                conn.sendall(encode_error(ErrorCode.PROTOCOL, str(e)))
            except OSError:
                pass
        finally:
            with self._lock:
                self._handshaking.discard(conn)
            if not attached:
                close_socket(conn)

    def partition_for(self, hello: Hello) -> tuple[ResultPartition | None, tuple[ErrorCode, str] | None]:
        """The partition ``hello`` asks for, or why there is none to attach to."""
        host, port = self.address
        with self._lock:
            partition = None if self._closed else self._partitions.get((hello.result_id, hello.partition_index))
        if partition is None:
            return None, (ErrorCode.PARTITION_NOT_FOUND,
                          f"partition {hello.result_id.hex()}#{hello.partition_index} is not served at {host}:{port}")
        if partition.attempt_id != hello.attempt_id:
            return None, (ErrorCode.STALE_ATTEMPT,
                          f"{partition.describe()} is served for producer attempt {partition.attempt_id.hex()}, "
                          f"not {hello.attempt_id.hex()}")
        return partition, None

    def _tls_accept(self, raw: socket.socket) -> socket.socket:
        """The TLS side of an accepted connection (tracked for ``close()`` in place of ``raw``);
        a failed handshake is logged and raises OSError, which drops the connection."""
        assert self._tls_context is not None
        try:
            conn = self._tls_context.wrap_socket(raw, server_side=True)
        except (OSError, ValueError) as e:
            log.warning("data server %s: refused a connection: TLS handshake failed: %s", self.address, e)
            raise OSError(f"TLS handshake failed: {e}") from e
        with self._lock:
            self._handshaking.discard(raw)
            self._handshaking.add(conn)
        return conn

    def close(self, failure: str | None = None) -> None:
        """Stops serving and releases every registered partition; with ``failure``, their connected
        consumers first get an ERROR frame saying so (the producer task failed)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            partitions = list(self._partitions.values())
            pending = list(self._handshaking)
        if self._local:
            local.unregister(self.address)
        close_socket(self._listener)  # shutdown wakes accept() on Linux; close alone does not
        for conn in pending:
            close_socket(conn)
        for partition in partitions:
            if failure is not None:
                partition.fail(failure)
            partition.close()
        if self._thread is not None:
            self._thread.join(JOIN_TIMEOUT_S)
