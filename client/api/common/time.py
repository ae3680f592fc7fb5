"""``Duration`` and ``Time``: millisecond durations as PyFlink builds them."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Duration:
    """A length of time, stored in milliseconds (Flink's unit for timers, windows and timeouts)."""

    millis: int

    @staticmethod
    def of_millis(millis: int) -> "Duration":
        return Duration(int(millis))

    @staticmethod
    def of_seconds(seconds: int) -> "Duration":
        return Duration(int(seconds) * 1000)

    @staticmethod
    def of_minutes(minutes: int) -> "Duration":
        return Duration(int(minutes) * 60_000)

    @staticmethod
    def of_hours(hours: int) -> "Duration":
        return Duration(int(hours) * 3_600_000)

    @staticmethod
    def of_days(days: int) -> "Duration":
        return Duration(int(days) * 86_400_000)

    @staticmethod
    def of_nanos(nanos: int) -> "Duration":
        return Duration(int(nanos) // 1_000_000)

    def to_milliseconds(self) -> int:
        return self.millis


class Time:
    """Window sizes and slides (``Time.seconds(5)``); kept as :class:`Duration`."""

    @staticmethod
    def milliseconds(value: int) -> Duration:
        return Duration.of_millis(value)

    @staticmethod
    def seconds(value: int) -> Duration:
        return Duration.of_seconds(value)

    @staticmethod
    def minutes(value: int) -> Duration:
        return Duration.of_minutes(value)

    @staticmethod
    def hours(value: int) -> Duration:
        return Duration.of_hours(value)

    @staticmethod
    def days(value: int) -> Duration:
        return Duration.of_days(value)


@dataclass(frozen=True)
class Instant:
    """A point on the time-line, as seconds and nanoseconds since the epoch (PyFlink's ``Instant``,
    Java's ``java.time.Instant``): what ``Types.INSTANT()`` fields hold. A table reads it as a
    ``TIMESTAMP_LTZ(9)``."""

    seconds: int
    nanos: int

    def to_epoch_milli(self) -> int:
        return self.seconds * 1000 + self.nanos // 1_000_000

    @staticmethod
    def of_epoch_milli(epoch_milli: int) -> "Instant":
        return Instant(epoch_milli // 1000, (epoch_milli % 1000) * 1_000_000)

    def __repr__(self) -> str:
        return f"Instant<{self.seconds}, {self.nanos}>"
