"""``NumberSequenceSource``: the numbers ``start..end`` (inclusive), each exactly once (PyFlink's
``pyflink.datastream.connectors.number_seq``; Flink's FLIP-27 NumberSequenceSource).

A bounded, parallel source: the range is split among the subtasks. It is the same source as
``env.from_sequence`` (one implementation, ``SequenceSourceFactory``), so splitting, checkpointed
positions and restore behave identically.

    env.from_source(NumberSequenceSource(1, 1000), WatermarkStrategy.no_watermarks(), "numbers")
"""
from __future__ import annotations

from millstream.runtime import operator_factories

# Flink's bounds are Java longs; a larger Python int is refused here, not wrapped around.
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


class NumberSequenceSource:
    def __init__(self, start: int, end: int) -> None:
        # bool is an int in Python but never a number a sequence means; Flink takes two longs.
        for name, value in (("start", start), ("end", end)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"NumberSequenceSource needs an int {name}, got {type(value).__name__}")
            if not _LONG_MIN <= value <= _LONG_MAX:
                raise ValueError(f"NumberSequenceSource's {name} {value} does not fit a Java long")
        if start > end:
            raise ValueError(f"NumberSequenceSource needs start <= end, got {start}..{end}")
        self.start = start
        self.end = end

    def get_from(self) -> int:
        return self.start

    def get_to(self) -> int:
        return self.end

    def _source_factory(self) -> operator_factories.SourceFactory:
        return operator_factories.SequenceSourceFactory(start=self.start, end=self.end)

    def __repr__(self) -> str:
        return f"NumberSequenceSource({self.start}, {self.end})"
