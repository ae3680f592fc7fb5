"""The data plane over real sockets on 127.0.0.1, producers and consumers as threads of this process.

No sleeps except bounded polling (``poll_for``) and the deliberately slow consumer of the
backpressure test; every test is bounded by pytest-timeout and checks that no network thread
outlives it.
"""
from __future__ import annotations

import dataclasses
import pickle
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from millstream.runtime import keygroups
from millstream.runtime.partitioners import (
    BroadcastPartitioner,
    ForwardPartitioner,
    KeyGroupStreamPartitioner,
    RebalancePartitioner,
    StreamPartitioner,
)
from millstream.runtime.serialization import RecordSerializer
from millstream.runtime.timestamps import TimestampedBatch, timestamps_of
from millstream.runtime.network.environment import (
    BUFFER,
    EVENT,
    ChannelError,
    ChannelSpec,
    CheckpointBarrier,
    EndOfPartition,
    ExchangeCancelled,
    InputGate,
    PartitionError,
    PartitionServer,
    ResultPartition,
    Watermark,
    WatermarkStatus,
)
from millstream.runtime.network.protocol import (
    CancelCheckpointMarker,
    ErrorCode,
    FrameReader,
    Hello,
    decode_error,
    decode_event,
    encode_credit,
    encode_error,
    encode_event,
    encode_frame,
)

from .network_helpers import ATTEMPT, RESULT, InThread, drain, emit_all, poll_for, records_of, spec

pytestmark = pytest.mark.timeout(30)


class Net:
    """Builds servers, partitions and gates, and closes them all at the end of a test."""

    def __init__(self, local: bool = False) -> None:
        self._closers: list[Callable[[], None]] = []
        self.local = local  # consumers reach the servers through memory (placement slot), not sockets

    def server(self) -> PartitionServer:
        server = PartitionServer(local=self.local).start()
        self._closers.append(server.close)
        return server

    def partition(self, server: PartitionServer, partitioner: StreamPartitioner, n: int = 1, index: int = 0,
                  **kwargs: Any) -> ResultPartition:
        partition = ResultPartition(RESULT, index, n, partitioner, ATTEMPT, **kwargs)
        server.register(partition)
        return partition

    def gate(self, specs: list[ChannelSpec], servers: dict[str, PartitionServer] | None = None,
             resolve: Callable[[ChannelSpec], tuple[str, int] | None] | None = None, **kwargs: Any) -> InputGate:
        if resolve is None:
            assert servers is not None
            known = servers

            def resolve(spec: ChannelSpec) -> tuple[str, int] | None:
                return known[spec.producer_location].address

        gate = InputGate(specs, resolve, **kwargs)
        self._closers.append(gate.close)
        gate.start()
        return gate

    def close(self) -> None:
        for close in reversed(self._closers):
            close()


def _network_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("millstream-net-")]


@pytest.fixture(params=["socket", "memory"])
def net(request: pytest.FixtureRequest) -> Iterator[Net]:
    """Every exchange test runs over sockets and over in-process connections (a slot's subtasks)."""
    net = Net(local=request.param == "memory")
    try:
        yield net
    finally:
        net.close()
    poll_for(lambda: not _network_threads(), 5, what=f"network threads to end: {_network_threads()}")


# ---- wire format -------------------------------------------------------------------------------


def test_events_round_trip_through_their_encoding() -> None:
    for event in (EndOfPartition(), CheckpointBarrier(42, 1_700_000_000_000), Watermark(-1), Watermark(2**63 - 1),
                  CancelCheckpointMarker(7), CheckpointBarrier(43, 5, stop=True), CheckpointBarrier(44, 6, stop=True, drain=True),
                  WatermarkStatus.IDLE, WatermarkStatus.ACTIVE):
        assert decode_event(encode_event(event)) == event
    # a stop's synchronous savepoint is told apart from a checkpoint downstream
    assert decode_event(encode_event(CheckpointBarrier(43, 5, stop=True))).stop
    with pytest.raises(ValueError, match="unknown event"):
        decode_event(b"\x7f")


def test_frames_are_read_whole_and_in_order_over_a_socket() -> None:
    hello = Hello(RESULT, 3, 2, ATTEMPT, 4)
    big = pickle.dumps(list(range(200_000)), protocol=5)  # larger than one recv
    frames = [
        hello.encode(),
        encode_frame(BUFFER, big),
        encode_frame(EVENT, encode_event(Watermark(5))),
        encode_credit(3),
        encode_error(ErrorCode.STALE_ATTEMPT, "stale ✗"),
    ]
    a, b = socket.socketpair()
    with a, b:
        writer = InThread(lambda: a.sendall(b"".join(frames)))
        reader = FrameReader(b)
        kind, payload = reader.read()
        assert Hello.decode(payload) == hello
        assert reader.read() == (BUFFER, big)
        kind, payload = reader.read()
        assert kind == EVENT and decode_event(payload) == Watermark(5)
        kind, _ = reader.read()
        kind, payload = reader.read()
        assert decode_error(payload) == (ErrorCode.STALE_ATTEMPT, "stale ✗")
        writer.join()
        a.close()
        with pytest.raises(EOFError):
            reader.read()


# ---- records arrive complete and in order ------------------------------------------------------


def test_forward_delivers_every_record_in_order(net: Net) -> None:
    server = net.server()
    partition = net.partition(server, ForwardPartitioner(), records_per_buffer=256)
    gate = net.gate([spec()], {"tm-0": server})
    expected = list(range(10_000))

    def produce() -> None:
        start = 0
        for size in [1, 255, 256, 700, 3, 1024] * 100:  # batch sizes that straddle buffer boundaries
            partition.emit([("word", i) for i in expected[start : start + size]])
            start += size
            if start >= len(expected):
                break
        partition.finish()

    producer = InThread(produce)
    items = drain(gate)
    producer.join()
    assert [i for _, i in records_of(items)] == expected
    assert partition.wait_consumed(5)
    assert all(len(payload) <= 256 for _, kind, payload in items if kind == BUFFER)
    assert items[-1][1:] == (EVENT, EndOfPartition())
    assert partition.records_out == gate.records_in == 10_000
    assert partition.buffers_out == gate.buffers_in == 10_000 // 256 + 1
    assert gate.max_in_flight_seen <= 4
    assert gate.local_channels == (1 if net.local else 0)  # through memory exactly when served so


def test_a_local_server_is_reached_through_memory_only_while_it_serves() -> None:
    from millstream.runtime.network import local

    server = PartitionServer(local=True).start()
    try:
        assert local.server_at(server.address) is server
    finally:
        server.close()
    assert local.server_at(server.address) is None  # closed: a consumer falls back to a socket
    plain = PartitionServer().start()
    try:
        assert local.server_at(plain.address) is None  # not local: consumers use the socket
    finally:
        plain.close()


def test_an_in_process_channel_needs_no_thread_of_its_own_once_attached() -> None:
    """Flink's local input channel: the producer's task thread hands buffers to the consumer and
    the consumer's returns credit; no sender, credit or reader thread carries them."""
    net = Net(local=True)
    try:
        server = net.server()
        partition = net.partition(server, ForwardPartitioner(), records_per_buffer=10, max_backlog_per_subpartition=2)
        gate = net.gate([spec()], {"tm-0": server}, initial_credit=2)
        poll_for(lambda: gate.local_channels == 1, 5, what="the channel to attach")
        poll_for(lambda: not [t for t in _network_threads() if not t.startswith("millstream-net-accept")], 5,
                 what="no thread but the server's accept thread")
        emit_all(partition, list(range(35)), 10)  # 4 buffers: 2 within the credit, 2 queued in the backlog
        partition.finish()
        assert records_of(drain(gate)) == list(range(35))  # each poll's credit let the next buffer through
        assert partition.wait_consumed(1)
        assert gate.max_in_flight_seen <= 2
    finally:
        net.close()


class FirstField:
    def get_key(self, record: tuple[str, int]) -> str:
        return record[0]


@pytest.mark.parametrize("make_partitioner", [RebalancePartitioner, lambda: KeyGroupStreamPartitioner(FirstField(), 128)],
                         ids=["rebalance", "hash"])
def test_two_producers_to_three_consumers_all_to_all(net: Net, make_partitioner: Callable[[], StreamPartitioner]) -> None:
    servers = {f"tm-{p}": net.server() for p in range(2)}
    partitions = [net.partition(servers[f"tm-{p}"], make_partitioner(), n=3, index=p, records_per_buffer=100) for p in range(2)]
    gates = [net.gate([spec(c, p, f"tm-{p}") for p in range(2)], servers) for c in range(3)]
    keys = [f"key-{k}" for k in range(50)]

    def produce(p: int) -> None:
        records = [(keys[i % len(keys)], p, i) for i in range(6_000)]
        for start in range(0, len(records), 512):
            partitions[p].emit(records[start : start + 512])
        partitions[p].finish()

    producers = [InThread(produce, p) for p in range(2)]
    consumers = [InThread(drain, g) for g in gates]
    received = [c.join(15) for c in consumers]
    for producer in producers:
        producer.join()
    everything: list[Any] = []
    for c, items in enumerate(received):
        for p in range(2):
            sequence = [i for ch, kind, payload in items if kind == BUFFER and ch.partition_index == p for (_, _, i) in payload]
            assert sequence == sorted(sequence), "per-channel order"
        got = records_of(items)
        everything += got
        if isinstance(partitions[0].partitioner, KeyGroupStreamPartitioner):
            assert all(keygroups.assign_key_to_parallel_operator(k, 128, 3) == c for k, _, _ in got)
        else:
            assert abs(len(got) - 4_000) <= 2, "round robin splits evenly"
    assert sorted(everything) == sorted((keys[i % 50], p, i) for p in range(2) for i in range(6_000))
    assert all(p.wait_consumed(5) for p in partitions)


def test_records_of_a_class_only_known_by_value_cross_the_exchange(net: Net) -> None:
    """A job script's dataclass, as a Spark worker sees it: not importable by reference."""

    @dataclasses.dataclass(frozen=True)
    class Order:
        customer: str
        amount: int

    Order.__module__, Order.__qualname__ = "__main__", "Order"
    server = net.server()
    partition = net.partition(server, RebalancePartitioner(), n=2, records_per_buffer=100)
    gates = [net.gate([spec(c)], {"tm-0": server}) for c in range(2)]
    orders = [Order(f"c{i % 7}", i) for i in range(1_000)]
    producer = InThread(emit_all, partition, orders)
    got = [r for g in gates for r in records_of(drain(g))]
    producer.join()
    assert sorted(got, key=lambda o: o.amount) == orders
    assert {type(o) for o in got} == {Order}
    assert partition.serializer.by_value


def test_broadcast_sends_every_record_to_every_consumer_serialized_once(net: Net) -> None:
    dumps: list[int] = []

    class CountingSerializer(RecordSerializer):
        def serialize(self, records: Any) -> bytes:
            dumps.append(len(records))
            return super().serialize(records)

    server = net.server()
    partition = net.partition(server, BroadcastPartitioner(), n=3, records_per_buffer=100)
    partition.serializer = CountingSerializer()
    gates = [net.gate([spec(c)], {"tm-0": server}) for c in range(3)]
    producer = InThread(emit_all, partition, list(range(1_050)), 1_050)
    consumers = [InThread(drain, g) for g in gates]  # together: a stalled one stalls all
    for consumer in consumers:
        assert records_of(consumer.join()) == list(range(1_050))
    producer.join()
    assert dumps == [100] * 10 + [50]  # each buffer pickled once for all 3 consumers
    assert partition.buffers_out == 33 and partition.records_out == 1_050


# ---- events, end of partition, flushing --------------------------------------------------------


def test_events_travel_in_band_in_order_with_buffers(net: Net) -> None:
    server = net.server()
    partition = net.partition(server, RebalancePartitioner(), n=2, records_per_buffer=1_000)
    gates = [net.gate([spec(c)], {"tm-0": server}) for c in range(2)]
    partition.emit(list(range(4)))
    partition.broadcast_event(Watermark(100))
    partition.emit(list(range(4, 8)))
    partition.broadcast_event(CheckpointBarrier(7, 1234))
    partition.broadcast_event(Watermark(200))
    partition.finish()
    for gate in gates:
        shape = [(kind, len(payload)) if kind == BUFFER else payload for _, kind, payload in drain(gate)]
        assert shape == [(BUFFER, 2), Watermark(100), (BUFFER, 2), CheckpointBarrier(7, 1234), Watermark(200), EndOfPartition()]


def test_flush_sends_a_partial_buffer_at_once(net: Net) -> None:
    server = net.server()
    partition = net.partition(server, ForwardPartitioner(), records_per_buffer=1_024)
    gate = net.gate([spec()], {"tm-0": server})
    partition.emit([("a", 1), ("b", 2)])
    assert gate.poll(0.2) is None  # staged, not sent: no buffer timeout yet
    partition.flush()
    item = gate.poll(5)
    assert item is not None and item[1:] == (BUFFER, [("a", 1), ("b", 2)])
    assert item[0] == spec()
    partition.finish()
    drain(gate)


def test_end_of_partition_of_every_channel_finishes_the_gate_and_the_producers(net: Net) -> None:
    servers = {f"tm-{p}": net.server() for p in range(2)}
    partitions = [net.partition(servers[f"tm-{p}"], ForwardPartitioner(), index=p) for p in range(2)]
    for p, partition in enumerate(partitions):
        partition.emit([p])
    partitions[0].finish()
    assert not partitions[0].wait_consumed(0.05), "nobody has read it yet"
    gate = net.gate([spec(0, p, f"tm-{p}") for p in range(2)], servers)
    seen: list[Any] = []

    def channel_0_ended() -> bool:
        item = gate.poll(0.05)
        if item is not None:
            seen.append(item[2])
        return EndOfPartition() in seen

    poll_for(channel_0_ended, 5, what="END_OF_PARTITION of channel 0")
    assert not gate.all_finished
    assert partitions[0].wait_consumed(5)
    assert not partitions[1].wait_consumed(0.05)
    partitions[1].finish()
    seen += [payload for _, _, payload in drain(gate)]
    assert sorted(seen, key=str) == sorted([[0], [1], EndOfPartition(), EndOfPartition()], key=str)
    assert gate.all_finished and partitions[1].wait_consumed(5)


# ---- credit-based flow control -----------------------------------------------------------------


def test_slow_consumer_backpressures_a_fast_producer_within_fixed_bounds(net: Net) -> None:
    backlog, credit, per_buffer = 4, 2, 100
    server = net.server()
    partition = net.partition(server, ForwardPartitioner(), records_per_buffer=per_buffer, max_backlog_per_subpartition=backlog)
    gate = net.gate([spec()], {"tm-0": server}, initial_credit=credit)
    total = 20_000
    producer = InThread(emit_all, partition, [("word", i) for i in range(total)])
    unconsumed: list[int] = []

    def slow_task() -> None:
        # Buffers produced and not yet taken by the task: the queue plus whatever credit lets travel.
        unconsumed.append(partition.buffers_out - gate.buffers_in)
        time.sleep(0.001)

    items = drain(gate, timeout_s=20, on_buffer=slow_task)
    producer.join()
    assert [i for _, i in records_of(items)] == list(range(total))
    assert partition.max_backlog_seen == backlog, "the queue filled up to its bound and no further"
    assert gate.max_in_flight_seen <= credit
    assert max(unconsumed) <= backlog + credit
    assert partition.blocked_s > 0, "the producer was backpressured"


def test_a_consumer_that_connects_late_receives_everything(net: Net) -> None:
    server = net.server()
    partition = net.partition(server, ForwardPartitioner(), records_per_buffer=100, max_backlog_per_subpartition=3)
    producer = InThread(emit_all, partition, list(range(5_000)), 100)
    poll_for(lambda: partition.backpressured, 5, what="the producer to block without a consumer")
    assert partition.max_backlog_seen == 3 and partition.buffers_out == 3
    gate = net.gate([spec()], {"tm-0": server})
    assert records_of(drain(gate)) == list(range(5_000))
    producer.join()
    assert partition.wait_consumed(5)


def test_cancellation_wakes_a_blocked_emit_within_a_second(net: Net) -> None:
    server = net.server()
    cancelled = threading.Event()
    partition = net.partition(server, ForwardPartitioner(), records_per_buffer=10, max_backlog_per_subpartition=2,
                              is_cancelled=cancelled.is_set)
    producer = InThread(lambda: partition.emit(list(range(1_000))))
    poll_for(lambda: partition.backpressured, 5, what="emit to block")
    started = time.monotonic()
    cancelled.set()
    with pytest.raises(ExchangeCancelled, match="cancelled"):
        producer.join(2)
    assert producer.ended_at is not None and producer.ended_at - started < 1.0


def test_a_consumer_that_goes_away_fails_the_blocked_producer(net: Net) -> None:
    server = net.server()
    partition = net.partition(server, ForwardPartitioner(), records_per_buffer=10, max_backlog_per_subpartition=2)
    gate = net.gate([spec()], {"tm-0": server}, initial_credit=1)
    producer = InThread(lambda: partition.emit(list(range(1_000))))
    assert gate.poll(5) is not None
    poll_for(lambda: partition.backpressured, 5, what="emit to block")
    gate.close()  # the consumer task died
    with pytest.raises(PartitionError, match="subpartition 0: the consumer closed its connection"):
        producer.join(2)
    assert not partition.wait_consumed(0.1)


def test_a_producer_sending_beyond_its_credit_is_a_protocol_error(net: Net) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    dropped = threading.Event()

    def greedy_producer() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(5)
            reader = FrameReader(conn)
            _, payload = reader.read()
            buffer = encode_frame(BUFFER, pickle.dumps([1], protocol=5))
            conn.sendall(buffer * (Hello.decode(payload).initial_credit + 1))
            try:
                while conn.recv(1024):  # until the consumer hangs up on us
                    pass
            except OSError:
                pass
            dropped.set()

    producer = InThread(greedy_producer)
    with listener:
        gate = net.gate([spec()], resolve=lambda _: listener.getsockname(), initial_credit=2)
        poll_for(dropped.is_set, 5, what="the consumer to drop the connection")  # before any poll returns credit
        with pytest.raises(ChannelError, match="protocol violation: the producer sent a buffer without credit"):
            drain(gate)
        producer.join()


# ---- fencing and failures ----------------------------------------------------------------------


def test_a_stale_attempt_id_is_refused_with_an_error(net: Net) -> None:
    server = net.server()
    net.partition(server, ForwardPartitioner())
    gate = net.gate([spec(attempt=b"attempt-0")], {"tm-0": server})
    with pytest.raises(ChannelError, match="refused: partition 0123.*#0 is served for producer attempt") as failure:
        poll_for(lambda: gate.poll(0.05), 5, what="an error")
    assert failure.value.channel == spec(attempt=b"attempt-0")


def test_unknown_partitions_and_taken_subpartitions_are_refused(net: Net) -> None:
    server = net.server()
    partition = net.partition(server, ForwardPartitioner())
    unknown = net.gate([spec(partition=5)], {"tm-0": server}, connect_timeout_s=0.3)
    with pytest.raises(ChannelError, match=r"#5 .*not connected within 0.3 s: partition .*#5 is not served at"):
        poll_for(lambda: unknown.poll(0.05), 5, what="an error")
    first = net.gate([spec()], {"tm-0": server})
    partition.emit([1])
    partition.flush()
    assert first.poll(5) is not None
    second = net.gate([spec()], {"tm-0": server})
    with pytest.raises(ChannelError, match="already has a consumer"):
        poll_for(lambda: second.poll(0.05), 5, what="an error")


@pytest.mark.parametrize("failure", [None, "boom in the map function"], ids=["dies", "fails"])
def test_a_producer_that_dies_mid_stream_surfaces_in_poll(net: Net, failure: str | None) -> None:
    server = net.server()
    partition = net.partition(server, ForwardPartitioner(), records_per_buffer=10)
    gate = net.gate([spec()], {"tm-0": server})
    partition.emit(list(range(25)))
    assert gate.poll(5) is not None
    server.close(failure)  # process death closes every socket; a task failure says why first
    expected = failure or "the producer closed the connection before the end of the partition"
    with pytest.raises(ChannelError, match=f"input channel partition {RESULT.hex()}#0 subpartition 0 .*{expected}"):
        drain(gate)


def test_a_producer_that_never_appears_fails_within_the_connect_timeout(net: Net) -> None:
    gate = net.gate([spec(partition=3)], resolve=lambda _: None, connect_timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(ChannelError, match=rf"partition {RESULT.hex()}#3 subpartition 0 .*not connected within 0.5 s"):
        poll_for(lambda: gate.poll(0.05), 5, what="an error")
    assert time.monotonic() - started < 1.5


def test_a_resolver_that_says_the_producer_is_gone_fails_at_once(net: Net) -> None:
    def gone(spec: ChannelSpec) -> tuple[str, int] | None:
        raise ConnectionError("its TaskManager was lost")

    gate = net.gate([spec()], resolve=gone, connect_timeout_s=30)
    with pytest.raises(ChannelError, match="the producer is gone: its TaskManager was lost"):
        poll_for(lambda: gate.poll(0.05), 2, what="an error")


def test_close_wakes_a_blocked_poll_and_a_blocked_emit(net: Net) -> None:
    gate = net.gate([spec()], resolve=lambda _: None, connect_timeout_s=30)
    poller = InThread(lambda: gate.poll(20))
    server = net.server()
    partition = net.partition(server, ForwardPartitioner(), records_per_buffer=1, max_backlog_per_subpartition=1)
    producer = InThread(lambda: partition.emit([1, 2, 3]))
    poll_for(lambda: partition.backpressured, 5, what="emit to block")
    started = time.monotonic()
    gate.close()
    server.close()
    with pytest.raises(Exception, match="closed"):
        poller.join(2)
    with pytest.raises(PartitionError, match="released"):
        producer.join(2)
    assert time.monotonic() - started < 1.0


def test_a_held_back_buffer_keeps_its_credit_until_it_is_released(net: Net) -> None:
    """Checkpoint alignment holds a blocked channel's buffers back: their credit is not returned,
    so the producer stops after its credit, as a blocked channel in Flink."""
    credit = 2
    server = net.server()
    partition = net.partition(server, ForwardPartitioner(), records_per_buffer=1, max_backlog_per_subpartition=1)
    gate = net.gate([spec()], {"tm-0": server}, initial_credit=credit)
    producer = InThread(emit_all, partition, list(range(20)), 1)
    held = []
    for _ in range(credit):  # take every buffer the credit let through, and hold each back
        item = poll_for(lambda: gate.poll(0.1), 10, what="a buffer")
        held.append(item[2])
        gate.defer_ack()
    time.sleep(0.3)
    assert gate.poll(0.2) is None, "the producer sent beyond the credit of a blocked channel"
    assert gate.buffers_in == credit
    for _ in held:
        gate.release(spec())  # processed: the credit goes back, the producer continues
    rest = drain(gate)
    producer.join()
    assert [r for buffer in held for r in buffer] + records_of(rest) == list(range(20))


def test_timestamped_batches_and_watermarks_cross_a_real_partition_in_order() -> None:
    partition = ResultPartition(b"r" * 16, 0, 1, RebalancePartitioner(), b"a" * 16, records_per_buffer=3)
    server = PartitionServer("127.0.0.1").start()
    server.register(partition)
    spec = ChannelSpec(result_id=b"r" * 16, partition_index=0, subpartition_index=0, producer_attempt_id=b"a" * 16,
                       target_node_id=1, input_index=0, producer_location="")
    gate = InputGate([spec], lambda s: server.address, initial_credit=4)
    gate.start()
    try:
        partition.emit([1, 2])  # no timestamps
        partition.emit(TimestampedBatch([3, 4, 5, 6], [30, 40, 50, 60]))
        partition.emit_watermark(45)
        partition.emit(TimestampedBatch([7], [70]))
        partition.finish()
        received: list[Any] = []
        while not gate.all_finished:
            item = gate.poll(5)
            assert item is not None
            _, kind, payload = item
            received.append((list(payload), timestamps_of(payload)) if isinstance(payload, list) else payload)
        batches = [r for r in received if isinstance(r, tuple)]
        assert [x for recs, _ in batches for x in recs] == [1, 2, 3, 4, 5, 6, 7]
        stamps = [t for recs, ts in batches for t in (ts or [None] * len(recs))]
        assert stamps == [None, None, 30, 40, 50, 60, 70]
        assert Watermark(45) in received
        assert received.index(Watermark(45)) > max(i for i, r in enumerate(received) if isinstance(r, tuple) and 60 in (r[1] or []))
    finally:
        gate.close()
        server.close()
