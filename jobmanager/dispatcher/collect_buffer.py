"""The JobManager's buffer of one job's ``execute_and_collect`` results: bounded, pulled by offset.

Built as Flink's collect sink is (``CollectSinkFunction`` + ``CollectResultFetcher``): producers
(the collect sink tasks, through their TaskManagers) offer batches; the buffer accepts them while it
holds fewer than ``capacity_bytes`` and refuses them otherwise, so the producer waits and offers
again (backpressure). The client pulls with an offset: asking for offset ``n`` acknowledges every
batch before ``n``, which is dropped at once, and returns the batches from ``n`` on, at most
``max_bytes`` of them. A lost answer is harmless: the client asks again with the same offset and
gets the same batches. The end of the data is reported only once the job finished *and* the client
acknowledged every batch.

Batches are opaque to the buffer (the JobManager never unpickles user records); each is offered
with its size. A producer's offers carry its own increasing sequence number, so an offer retried
after a lost answer is recognised and not stored twice.

Pure logic: no I/O, no asyncio. The Dispatcher wakes waiters when :attr:`version` changes.
"""
from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


class Offer(str, enum.Enum):
    ACCEPTED = "ACCEPTED"
    DUPLICATE = "DUPLICATE"  # this producer's sequence number was accepted before: nothing stored
    FULL = "FULL"  # offer it again once the client drained some data
    CLOSED = "CLOSED"  # the job ended or its results were discarded: the batch is not wanted

    @property
    def delivered(self) -> bool:
        """True when the producer is done with the batch (it need not offer it again)."""
        return self is not Offer.FULL


class CollectOffsetError(ValueError):
    """The client asked for an offset the buffer cannot serve (a bug or a second client)."""


@dataclass(frozen=True)
class Fetched(Generic[T]):
    batches: list[T]
    next_offset: int  # what the client asks for next (and so acknowledges everything before)
    end_of_data: bool  # the job finished and every batch was acknowledged: nothing more will come


class CollectBuffer(Generic[T]):
    """A bounded FIFO of batches with offsets; see the module docstring."""

    def __init__(self, capacity_bytes: int) -> None:
        if capacity_bytes <= 0:
            raise ValueError(f"the collect buffer capacity must be positive, got {capacity_bytes} bytes")
        self.capacity_bytes = capacity_bytes
        self._batches: deque[tuple[T, int]] = deque()  # (batch, size), offsets first_offset..
        self.first_offset = 0  # offset of _batches[0]: everything before it was acknowledged
        self.buffered_bytes = 0
        self._last_sequence: dict[bytes, int] = {}
        self.finished = False  # no producer will offer again; end of data once drained
        self.discarded = False  # the results are not wanted (job failed or cancelled)
        self.version = 0  # bumped on every change a waiting producer or client cares about

    @property
    def next_offset(self) -> int:
        return self.first_offset + len(self._batches)

    @property
    def end_of_data(self) -> bool:
        return (self.finished or self.discarded) and not self._batches

    def offer(self, producer: bytes, sequence: int, batch: T, size: int) -> Offer:
        """Store ``batch`` (``size`` bytes) unless the buffer is full. ``sequence`` increases per
        ``producer``; a sequence at or below the last accepted one is a retry and is not stored."""
        if self.finished or self.discarded:
            return Offer.CLOSED
        last = self._last_sequence.get(producer)
        if last is not None and sequence <= last:
            return Offer.DUPLICATE
        # An empty buffer takes any batch, however large: refusing it would block forever.
        if self._batches and self.buffered_bytes + size > self.capacity_bytes:
            return Offer.FULL
        self._batches.append((batch, size))
        self.buffered_bytes += size
        self._last_sequence[producer] = sequence
        self.version += 1
        return Offer.ACCEPTED

    def fetch(self, offset: int, max_bytes: int) -> Fetched[T]:
        """Acknowledge everything before ``offset`` (dropping it) and return the batches from
        ``offset``: at least one when there is one, more while they fit in ``max_bytes``."""
        if self.discarded:
            return Fetched([], offset, True)
        if offset > self.next_offset:
            raise CollectOffsetError(f"offset {offset} is beyond the last collected batch ({self.next_offset - 1})")
        if offset < self.first_offset:
            raise CollectOffsetError(
                f"offset {offset} was already acknowledged (the buffer starts at {self.first_offset}): "
                "is a second client reading this job's results?"
            )
        if offset > self.first_offset:
            for _ in range(offset - self.first_offset):
                self.buffered_bytes -= self._batches.popleft()[1]
            self.first_offset = offset
            self.version += 1
        batches: list[T] = []
        total = 0
        for batch, size in self._batches:
            if batches and total + size > max_bytes:
                break
            batches.append(batch)
            total += size
        return Fetched(batches, offset + len(batches), self.end_of_data)

    def finish(self) -> None:
        """The job finished: every producer's batches are in; end of data once acknowledged."""
        self.finished = True
        self.version += 1

    def discard(self) -> None:
        """The results are not wanted any more (the job failed or was cancelled): drop them all."""
        self.discarded = True
        self.first_offset = self.next_offset
        self._batches.clear()
        self.buffered_bytes = 0
        self.version += 1
