"""``WatermarkStrategy`` and ``TimestampAssigner`` as PyFlink names them.

The strategy is recorded on the source's transformation; event-time processing applies it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from millstream.common.time import Duration


class TimestampAssigner:
    """Extracts an event timestamp (integer milliseconds) from a record."""

    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        raise NotImplementedError


@dataclass(frozen=True)
class WatermarkStrategy:
    kind: str  # "none", "monotonous", "bounded"
    max_out_of_orderness_ms: int = 0
    timestamp_assigner: TimestampAssigner | None = None
    idleness_ms: int = 0

    @staticmethod
    def no_watermarks() -> "WatermarkStrategy":
        return WatermarkStrategy("none")

    @staticmethod
    def for_monotonous_timestamps() -> "WatermarkStrategy":
        return WatermarkStrategy("monotonous")

    @staticmethod
    def for_bounded_out_of_orderness(max_out_of_orderness: Duration) -> "WatermarkStrategy":
        return WatermarkStrategy("bounded", max_out_of_orderness.to_milliseconds())

    def with_timestamp_assigner(self, assigner: TimestampAssigner) -> "WatermarkStrategy":
        return replace(self, timestamp_assigner=assigner)

    def with_idleness(self, idle_timeout: Duration) -> "WatermarkStrategy":
        return replace(self, idleness_ms=idle_timeout.to_milliseconds())
