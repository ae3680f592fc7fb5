"""Input buffers cut so one pass through the chain takes about a buffer timeout at most.

Operators work a batch at a time, which is what makes cheap functions fast. A slow function
(20 ms a record) would then hold a whole 1,024-record buffer's output for 20 s, where Flink hands
each record on as it is produced and flushes every buffer timeout. The slicer measures the
chain's cost per record (a moving average of wall time) and cuts a buffer into slices that each
take about ``budget_ms``, so output reaches the next flush in time. Until it has measured, it
sends a short probe slice first. Cheap chains see every buffer whole: the only cost is two clock
reads per buffer.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Iterator

PROBE_RECORDS = 16  # the first slice of an unmeasured chain
_WEIGHT = 0.3  # of the newest measurement in the moving average


class BatchSlicer:
    def __init__(self, budget_ms: float, clock: Callable[[], float] = time.perf_counter) -> None:
        self.budget_s = budget_ms / 1000
        self.per_record_s: float | None = None
        self._clock = clock

    def slices(self, records: list[Any]) -> Iterator[list[Any]]:
        """``records`` in order, in slices sized to the budget; time each with :meth:`timed`. A slice
        of a timestamped buffer carries its records' timestamps (a TimestampedBatch slices so)."""
        start, n = 0, len(records)
        while start < n:  # the estimate is updated by timed() between two slices
            size = self._slice_size(n - start)
            yield records if size == n else records[start:start + size]
            start += size

    def _slice_size(self, remaining: int) -> int:
        if self.per_record_s is None:
            return min(remaining, PROBE_RECORDS)
        if self.per_record_s * remaining <= self.budget_s:
            return remaining
        return max(1, round(self.budget_s / self.per_record_s)) if self.per_record_s > 0 else remaining

    def timed(self, process: Callable[[list[Any]], None], records: list[Any]) -> None:
        """Runs ``process(records)`` and learns its cost per record."""
        started = self._clock()
        process(records)
        per_record = (self._clock() - started) / max(1, len(records))
        old = self.per_record_s
        self.per_record_s = per_record if old is None else old + _WEIGHT * (per_record - old)
