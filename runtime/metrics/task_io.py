"""A task's I/O metrics with Flink's names, computed from the running totals its task loop keeps.

The task loop only adds to plain counters (records and bytes per batch or buffer, seconds spent
waiting for input or for output credit); this class turns them into Flink's task metrics once
per reporting interval, so nothing here runs per record:

* ``numRecordsIn`` / ``numRecordsOut`` / ``numBytesIn`` / ``numBytesOut`` and their
  ``...PerSecond`` rates (a MeterView over 60 s, see :class:`~.types.RateWindow`);
* ``idleTimeMsPerSecond`` (waiting for input), ``backPressuredTimeMsPerSecond`` (waiting for
  output buffers / credit) and ``busyTimeMsPerSecond`` (the rest), over the latest interval, so
  the three add up to 1000; ``accumulateIdleTimeMs`` / ``accumulateBackPressuredTimeMs`` /
  ``accumulateBusyTimeMs`` since the task started running;
* ``currentInputWatermark`` / ``currentOutputWatermark`` once the task has seen one.
"""
from __future__ import annotations

import time
from typing import Callable

from millstream.runtime.metrics.types import RateWindow

__all__ = ["TaskIOMetrics", "IO_COUNTERS", "TIME_METRICS"]

IO_COUNTERS = ("numRecordsIn", "numRecordsOut", "numBytesIn", "numBytesOut")
TIME_METRICS = ("busyTimeMsPerSecond", "idleTimeMsPerSecond", "backPressuredTimeMsPerSecond")


class TaskIOMetrics:
    """``time_accounting``: report the busy / idle / backpressured times (off with
    ``metrics.task.io-timing: false``, when the task loop does not time its waits)."""

    def __init__(self, time_accounting: bool = True, clock: Callable[[], float] = time.monotonic,
                 rate_span_s: float = 60) -> None:
        self.time_accounting = time_accounting
        self._clock = clock
        self._rates = {name: RateWindow(rate_span_s, clock) for name in IO_COUNTERS}
        self._started = clock()
        self._last = (self._started, 0.0, 0.0)  # (time, idle s, backpressured s) at the last snapshot
        self._ratios = {"busyTimeMsPerSecond": 0.0, "idleTimeMsPerSecond": 0.0, "backPressuredTimeMsPerSecond": 0.0}

    def snapshot(self, records_in: int, records_out: int, bytes_in: int, bytes_out: int,
                 idle_s: float = 0.0, backpressured_s: float = 0.0,
                 input_watermark: int | None = None, output_watermark: int | None = None) -> dict[str, float]:
        now = self._clock()
        values: dict[str, float] = {}
        for name, count in zip(IO_COUNTERS, (records_in, records_out, bytes_in, bytes_out)):
            values[name] = float(count)
            values[name + "PerSecond"] = self._rates[name].rate(count, now)
        if self.time_accounting:
            values.update(self._times(now, idle_s, backpressured_s))
        if input_watermark is not None:
            values["currentInputWatermark"] = float(input_watermark)
        if output_watermark is not None:
            values["currentOutputWatermark"] = float(output_watermark)
        return values

    def _times(self, now: float, idle_s: float, backpressured_s: float) -> dict[str, float]:
        last_time, last_idle, last_backpressured = self._last
        interval = now - last_time
        if interval > 0:  # a second snapshot at the same instant keeps the previous ratios
            idle = min(1000.0, max(0.0, (idle_s - last_idle) / interval * 1000))
            backpressured = min(1000.0 - idle, max(0.0, (backpressured_s - last_backpressured) / interval * 1000))
            self._ratios = {
                "busyTimeMsPerSecond": 1000.0 - idle - backpressured,
                "idleTimeMsPerSecond": idle,
                "backPressuredTimeMsPerSecond": backpressured,
            }
            self._last = (now, idle_s, backpressured_s)
        running_ms = (now - self._started) * 1000
        return {
            **self._ratios,
            "accumulateIdleTimeMs": idle_s * 1000,
            "accumulateBackPressuredTimeMs": backpressured_s * 1000,
            "accumulateBusyTimeMs": max(0.0, running_ms - (idle_s + backpressured_s) * 1000),
        }
