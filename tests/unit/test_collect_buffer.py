"""The JobManager's collect buffer: the rules of Flink's collect sink (bounded buffer that blocks
the producer, client pulls by offset, acknowledged data dropped at once, end only after all)."""
from __future__ import annotations

import pytest

from millstream.jobmanager.dispatcher.collect_buffer import CollectBuffer, CollectOffsetError, Offer

A, B = b"attempt-a", b"attempt-b"


def test_the_buffer_takes_batches_until_its_bytes_are_used_then_refuses_them() -> None:
    buf: CollectBuffer[str] = CollectBuffer(capacity_bytes=10)
    assert buf.offer(A, 0, "a0", 4) is Offer.ACCEPTED
    assert buf.offer(A, 1, "a1", 6) is Offer.ACCEPTED
    assert buf.buffered_bytes == 10
    assert buf.offer(A, 2, "a2", 1) is Offer.FULL  # one more byte would exceed the bound
    assert buf.offer(B, 0, "b0", 1) is Offer.FULL  # for every producer of the job
    assert buf.buffered_bytes == 10 and not Offer.FULL.delivered


def test_an_empty_buffer_takes_a_batch_larger_than_its_capacity() -> None:
    buf: CollectBuffer[str] = CollectBuffer(capacity_bytes=10)
    assert buf.offer(A, 0, "huge", 50) is Offer.ACCEPTED  # else it could never be delivered
    assert buf.offer(A, 1, "next", 1) is Offer.FULL
    assert buf.fetch(0, 1000).batches == ["huge"]
    assert buf.fetch(1, 1000).batches == [] and buf.offer(A, 1, "next", 1) is Offer.ACCEPTED


def test_a_fetch_acknowledges_what_precedes_its_offset_and_that_frees_room_for_producers() -> None:
    buf: CollectBuffer[str] = CollectBuffer(capacity_bytes=8)
    for seq in range(4):
        assert buf.offer(A, seq, f"a{seq}", 2) is Offer.ACCEPTED
    assert buf.offer(A, 4, "a4", 2) is Offer.FULL
    first = buf.fetch(0, max_bytes=4)
    assert first.batches == ["a0", "a1"] and first.next_offset == 2
    assert buf.buffered_bytes == 8  # delivered but not yet acknowledged: kept for a retry
    assert buf.offer(A, 4, "a4", 2) is Offer.FULL
    second = buf.fetch(first.next_offset, max_bytes=4)  # acknowledges a0, a1: dropped at once
    assert second.batches == ["a2", "a3"] and buf.buffered_bytes == 4
    assert buf.offer(A, 4, "a4", 2) is Offer.ACCEPTED


def test_asking_again_with_the_same_offset_returns_the_same_batches() -> None:
    buf: CollectBuffer[str] = CollectBuffer(capacity_bytes=100)
    for seq in range(3):
        buf.offer(A, seq, f"a{seq}", 1)
    assert buf.fetch(1, 100).batches == ["a1", "a2"]
    assert buf.fetch(1, 100).batches == ["a1", "a2"]  # the answer was lost: same data
    with pytest.raises(CollectOffsetError, match="already acknowledged"):
        buf.fetch(0, 100)
    with pytest.raises(CollectOffsetError, match="beyond"):
        buf.fetch(5, 100)


def test_a_fetch_returns_at_most_max_bytes_but_always_one_batch() -> None:
    buf: CollectBuffer[str] = CollectBuffer(capacity_bytes=100)
    for seq, size in enumerate([3, 3, 3, 20]):
        buf.offer(A, seq, f"a{seq}", size)
    assert buf.fetch(0, max_bytes=7).batches == ["a0", "a1"]
    assert buf.fetch(2, max_bytes=7).batches == ["a2"]
    assert buf.fetch(3, max_bytes=7).batches == ["a3"]  # larger than max_bytes, still delivered


def test_batches_come_out_in_the_order_they_were_accepted_and_a_retried_offer_is_not_stored_twice() -> None:
    buf: CollectBuffer[str] = CollectBuffer(capacity_bytes=100)
    assert buf.offer(A, 0, "a0", 1) is Offer.ACCEPTED
    assert buf.offer(B, 0, "b0", 1) is Offer.ACCEPTED
    assert buf.offer(A, 0, "a0", 1) is Offer.DUPLICATE  # the answer to the first report was lost
    assert buf.offer(A, 1, "a1", 1) is Offer.ACCEPTED
    assert buf.offer(B, 1, "b1", 1) is Offer.ACCEPTED
    assert buf.fetch(0, 100).batches == ["a0", "b0", "a1", "b1"]
    assert Offer.DUPLICATE.delivered and buf.buffered_bytes == 4


def test_the_end_of_data_comes_only_after_the_job_finished_and_every_batch_was_acknowledged() -> None:
    buf: CollectBuffer[str] = CollectBuffer(capacity_bytes=100)
    buf.offer(A, 0, "a0", 1)
    buf.offer(A, 1, "a1", 1)
    assert not buf.fetch(0, 100).end_of_data  # running job
    buf.finish()
    assert buf.offer(B, 0, "late", 1) is Offer.CLOSED
    delivered = buf.fetch(0, 1)
    assert delivered.batches == ["a0"] and not delivered.end_of_data
    last = buf.fetch(1, 1)
    assert last.batches == ["a1"] and not last.end_of_data  # delivered, not yet acknowledged
    end = buf.fetch(2, 1)
    assert end.batches == [] and end.end_of_data and end.next_offset == 2 and buf.buffered_bytes == 0


def test_discarding_drops_everything_and_ends_the_data() -> None:
    buf: CollectBuffer[str] = CollectBuffer(capacity_bytes=10)
    buf.offer(A, 0, "a0", 10)
    version = buf.version
    buf.discard()
    assert buf.version != version and buf.buffered_bytes == 0
    assert buf.offer(A, 1, "a1", 1) is Offer.CLOSED and Offer.CLOSED.delivered
    assert buf.fetch(0, 10).end_of_data


def test_a_non_positive_capacity_is_rejected_with_its_value() -> None:
    with pytest.raises(ValueError, match="-1 bytes"):
        CollectBuffer(capacity_bytes=-1)


def test_a_collect_sink_batch_is_split_in_order_into_parts_of_at_most_the_limit() -> None:
    import pickle

    from millstream.runtime.serialization import RecordSerializer

    records = [f"{i:01000d}" for i in range(100)]  # ~1 kB each
    parts = RecordSerializer().serialize_parts(records, max_bytes=10_000)
    assert len(parts) > 10 and all(len(p) <= 10_000 for p in parts)
    assert [r for p in parts for r in pickle.loads(p)] == records
    single = RecordSerializer().serialize_parts(["x" * 50_000], max_bytes=10_000)  # one record larger than the limit travels alone
    assert len(single) == 1 and pickle.loads(single[0]) == ["x" * 50_000]


def test_the_task_manager_gate_blocks_the_channel_reader_while_too_many_collected_bytes_wait() -> None:
    import threading

    from millstream.taskmanager.task_executor import CollectGate

    gate = CollectGate(limit_bytes=10)
    gate.acquire(8)
    gate.acquire(2)  # up to the limit: passes
    passed = threading.Event()

    def reader() -> None:
        gate.acquire(5)
        passed.set()

    threading.Thread(target=reader, daemon=True).start()
    assert not passed.wait(0.1)  # blocked: the worker's sends stall behind it
    gate.release(8)  # the JobManager took a batch
    assert passed.wait(2)
    gate.release(2)
    gate.release(5)
    gate.acquire(100)  # nothing waits: one batch larger than the limit is not refused forever ...
    blocked = threading.Event()
    threading.Thread(target=lambda: (gate.acquire(1), blocked.set()), daemon=True).start()
    assert not blocked.wait(0.1)
    gate.open()  # ... and a cancelled task's reader is let through at once
    assert blocked.wait(2)
