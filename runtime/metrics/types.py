"""The metric types a user function registers (PyFlink's ``pyflink.metrics``): plain Python
objects the task thread updates in place, read by the task's periodic snapshot.

No locks: a metric is updated by the task thread and read by the same thread when it takes the
snapshot (once per reporting interval), so an update costs one attribute write.
"""
from __future__ import annotations

import collections
import math
import time
from typing import Callable

__all__ = ["Counter", "Meter", "Gauge", "Distribution", "RateWindow", "DISTRIBUTION_STATS"]

DISTRIBUTION_WINDOW = 1024  # a distribution's percentiles are over its latest this many values
# The statistics of a distribution, each reported as ``<name>_<stat>`` (Flink's histogram dump names).
DISTRIBUTION_STATS = ("count", "min", "max", "mean", "p50", "p95", "p99")


class Counter:
    """A count that goes up and down (PyFlink's Counter)."""

    __slots__ = ("_count",)

    def __init__(self) -> None:
        self._count = 0

    def inc(self, n: int = 1) -> None:
        self._count += n

    def dec(self, n: int = 1) -> None:
        self._count -= n

    def get_count(self) -> int:
        return self._count


class RateWindow:
    """Events per second of an ever-growing count over the latest ``time_span_s`` (Flink's
    MeterView). Samples are kept at most one a second, so memory is bounded by the span. Until
    the span has passed, the rate is over the time elapsed so far (Flink divides by the whole span
    from the start, which under-reports every young task's rate)."""

    __slots__ = ("time_span_s", "_clock", "_samples")

    def __init__(self, time_span_s: float = 60, clock: Callable[[], float] = time.monotonic) -> None:
        if time_span_s <= 0:
            raise ValueError(f"a meter's time span must be positive, got {time_span_s}")
        self.time_span_s = time_span_s
        self._clock = clock
        self._samples: collections.deque[tuple[float, float]] = collections.deque([(clock(), 0.0)])

    def rate(self, count: float, now: float | None = None) -> float:
        now = self._clock() if now is None else now
        samples = self._samples
        horizon = now - self.time_span_s
        while len(samples) >= 2 and samples[1][0] <= horizon:  # keep one baseline at or before the horizon
            samples.popleft()
        base_time, base_count = samples[0]
        if now - samples[-1][0] >= 1.0:
            samples.append((now, count))
        elapsed = now - base_time
        return (count - base_count) / elapsed if elapsed > 0 else 0.0


class Meter:
    """Marks events and reports their rate per second over a time span (PyFlink's Meter,
    ``meter(name, time_span_in_seconds=60)``)."""

    __slots__ = ("_count", "_window")

    def __init__(self, time_span_in_seconds: float = 60, clock: Callable[[], float] = time.monotonic) -> None:
        self._count = 0
        self._window = RateWindow(time_span_in_seconds, clock)

    def mark_event(self, value: int = 1) -> None:
        self._count += value

    def get_count(self) -> int:
        return self._count

    def get_rate(self) -> float:
        return self._window.rate(self._count)


class Gauge:
    """A value read when the snapshot is taken: ``obj`` is called then (PyFlink's gauge takes a
    callable returning a number)."""

    __slots__ = ("_obj",)

    def __init__(self, obj: Callable[[], float]) -> None:
        if not callable(obj):
            raise TypeError(f"a gauge needs a callable returning a number, got {type(obj).__name__}")
        self._obj = obj

    def get_value(self) -> float:
        return self._obj()


class Distribution:
    """Values whose count, min, max, mean and percentiles are reported (PyFlink's Distribution;
    Flink's histogram statistics). Count, min, max and mean cover every value; the percentiles the
    latest :data:`DISTRIBUTION_WINDOW` values, like Flink's sliding-window histogram."""

    __slots__ = ("_count", "_sum", "_min", "_max", "_window")

    def __init__(self) -> None:
        self._count = 0
        self._sum = 0.0
        self._min = math.inf
        self._max = -math.inf
        self._window: collections.deque[float] = collections.deque(maxlen=DISTRIBUTION_WINDOW)

    def update(self, value: float) -> None:
        self._count += 1
        self._sum += value
        if value < self._min:
            self._min = value
        if value > self._max:
            self._max = value
        self._window.append(value)

    def get_count(self) -> int:
        return self._count

    def statistics(self) -> dict[str, float]:
        """Every statistic of :data:`DISTRIBUTION_STATS`; all 0 before the first value."""
        if not self._count:
            return dict.fromkeys(DISTRIBUTION_STATS, 0.0)
        ordered = sorted(self._window)
        return {
            "count": float(self._count),
            "min": float(self._min),
            "max": float(self._max),
            "mean": self._sum / self._count,
            "p50": _percentile(ordered, 0.50),
            "p95": _percentile(ordered, 0.95),
            "p99": _percentile(ordered, 0.99),
        }


def _percentile(ordered: list[float], q: float) -> float:
    """The nearest-rank percentile of sorted values."""
    rank = max(1, math.ceil(q * len(ordered)))
    return float(ordered[rank - 1])

