"""A buffer goes through the chain in slices of about a buffer timeout's work (BatchSlicer)."""
from __future__ import annotations

from millstream.runtime.task.batch_slicer import PROBE_RECORDS, BatchSlicer


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run(slicer: BatchSlicer, clock: Clock, records: list[int], cost_s: float) -> list[list[int]]:
    """Feeds ``records`` through a chain costing ``cost_s`` a record; returns the slices it saw."""
    seen: list[list[int]] = []

    def process(part: list[int]) -> None:
        seen.append(part)
        clock.now += cost_s * len(part)

    for part in slicer.slices(records):
        slicer.timed(process, part)
    return seen


def test_a_cheap_chain_sees_whole_buffers_after_a_short_probe() -> None:
    clock = Clock()
    slicer = BatchSlicer(100, clock)
    first = run(slicer, clock, list(range(1024)), 1e-6)
    assert [len(p) for p in first] == [PROBE_RECORDS, 1024 - PROBE_RECORDS]
    buffer = list(range(1024))
    assert run(slicer, clock, buffer, 1e-6) == [buffer]  # the same list, not a copy


def test_a_slow_chain_gets_slices_of_about_the_budget() -> None:
    clock = Clock()
    slicer = BatchSlicer(100, clock)
    seen = run(slicer, clock, list(range(1024)), 0.02)  # 20 ms a record: 5 records per 100 ms
    assert len(seen[0]) == PROBE_RECORDS
    assert all(len(p) == 5 for p in seen[1:-1])
    assert [r for p in seen for r in p] == list(range(1024))  # every record once, in order


def test_the_estimate_follows_a_chain_that_becomes_cheap() -> None:
    clock = Clock()
    slicer = BatchSlicer(100, clock)
    run(slicer, clock, list(range(100)), 0.02)
    for _ in range(20):
        last = run(slicer, clock, list(range(1024)), 1e-6)
    assert len(last) == 1


def test_small_buffers_are_never_cut() -> None:
    clock = Clock()
    slicer = BatchSlicer(100, clock)
    assert run(slicer, clock, [1, 2, 3], 1.0) == [[1, 2, 3]]
    assert run(slicer, clock, [], 1.0) == []


def test_slices_of_a_timestamped_buffer_keep_each_records_timestamp() -> None:
    # Records carry their event time through every hop (Flink's StreamRecord timestamp): a slice of
    # a stamped buffer must be stamped with its own records' timestamps, or event-time windows
    # downstream see records without time.
    from millstream.runtime.timestamps import stamped, timestamps_of

    clock = Clock()
    slicer = BatchSlicer(100, clock)
    records = list(range(100))
    buffer = stamped(records, [1000 + r for r in records])
    parts = run(slicer, clock, buffer, 1e-3)  # slow enough to be cut after the probe
    assert len(parts) > 1
    assert [r for p in parts for r in p] == records
    for part in parts:
        assert timestamps_of(part) == [1000 + r for r in part]
