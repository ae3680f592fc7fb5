"""Record timestamps in the runtime: a batch and its event timestamps, side by side.

Flink wraps every record in a StreamRecord that may carry a timestamp. Millstream moves records in
lists, so a batch whose records have timestamps is a :class:`TimestampedBatch`: still a list of
the records (every operator, sink and writer takes it as one), plus ``timestamps``, one per record
(``None`` for a record without one). A plain list is a batch without timestamps, so a job that
never assigns them pays nothing.

Lists are shared by every consumer of an output and never mutated after they are emitted; the
same holds for a batch's ``timestamps``, so an operator that keeps records one-to-one (map, a
reduce) hands the input's ``timestamps`` on unchanged.

A batch that arrived over a keyed exchange may also carry its records' key groups (``key_groups``,
one byte a record, computed by the producer's partitioner to pick the channel): the keyed operator
it is handed to takes them instead of hashing every key again (``key_groups_of``). Only the batch
as it arrived has them; any batch an operator builds is a new list without.
"""
from __future__ import annotations

from itertools import compress
from typing import Any, Iterable, Sequence

__all__ = ["LONG_MAX", "LONG_MIN", "KeyGroupedBatch", "TimestampedBatch", "filtered", "grouped", "key_groups_of", "repeated",
           "stamped", "timestamps_of"]

LONG_MIN = -(2**63)  # Java's Long.MIN_VALUE: the watermark before any input
LONG_MAX = 2**63 - 1  # Java's Long.MAX_VALUE: the final watermark at the end of input


class TimestampedBatch(list):
    """Records with their event timestamps: ``self[i]`` has timestamp ``self.timestamps[i]``."""

    __slots__ = ("timestamps", "key_groups")  # key_groups: set only by grouped()

    def __init__(self, records: Iterable[Any] = (), timestamps: Sequence[int | None] | None = None) -> None:
        super().__init__(records)
        self.timestamps: list[int | None] = list(timestamps) if timestamps is not None else [None] * len(self)
        if len(self.timestamps) != len(self):
            raise ValueError(f"{len(self)} records but {len(self.timestamps)} timestamps")

    def __getitem__(self, index: Any) -> Any:  # a slice keeps its timestamps (the task slices big batches)
        if type(index) is slice:
            return stamped(list.__getitem__(self, index), self.timestamps[index])
        return list.__getitem__(self, index)

    def __reduce__(self) -> Any:  # pickles as (records, timestamps): no slot state to reconstruct
        return TimestampedBatch, (list(self), self.timestamps)

    def __repr__(self) -> str:
        return f"TimestampedBatch({list(self)!r}, timestamps={self.timestamps!r})"


def timestamps_of(records: list[Any]) -> list[int | None] | None:
    """The batch's timestamps, or None for a batch without any."""
    return records.timestamps if type(records) is TimestampedBatch else None


def stamped(records: list[Any], timestamps: list[int | None] | None) -> list[Any]:
    """``records`` with ``timestamps`` (shared, not copied), or as they are when there are none."""
    if timestamps is None:
        return records
    batch = TimestampedBatch.__new__(TimestampedBatch)
    list.extend(batch, records)
    batch.timestamps = timestamps
    return batch


class KeyGroupedBatch(list):
    """Records without timestamps, with the key group of each as it arrived (see ``grouped``)."""

    __slots__ = ("key_groups",)

    def __reduce__(self) -> Any:  # pickles as the plain list it is (a slice is one too)
        return list, (list(self),)


def grouped(records: list[Any], timestamps: list[int | None] | None, key_groups: bytes) -> list[Any]:
    """A received batch whose producer sent each record's key group (``key_groups[i]`` is
    ``records[i]``'s); see the module docstring."""
    if timestamps is not None:
        batch: Any = stamped(records, timestamps)
    else:
        batch = KeyGroupedBatch.__new__(KeyGroupedBatch)
        list.extend(batch, records)
    batch.key_groups = key_groups
    return batch


def key_groups_of(records: list[Any]) -> bytes | None:
    """The key groups a received batch came with, or None."""
    kind = type(records)
    if kind is TimestampedBatch or kind is KeyGroupedBatch:
        return getattr(records, "key_groups", None)
    return None


def filtered(records: list[Any], timestamps: list[int | None] | None, keep: list[Any]) -> list[Any]:
    """The records (with their timestamps) whose ``keep`` is true."""
    out = list(compress(records, keep))
    return out if timestamps is None else stamped(out, list(compress(timestamps, keep)))


def repeated(parts: list[list[Any]], timestamps: list[int | None] | None) -> list[Any]:
    """Flattens one output list per input record; every output takes its input's timestamp (a
    flat_map's results carry the timestamp of the record they came from)."""
    out: list[Any] = []
    if timestamps is None:
        for part in parts:
            out.extend(part)
        return out
    ts_out: list[int | None] = []
    for part, ts in zip(parts, timestamps):
        if part:
            out.extend(part)
            ts_out.extend([ts] * len(part))
    return stamped(out, ts_out)
