"""``WatermarkStrategy`` and ``TimestampAssigner`` as PyFlink names them, and the generators behind them.

A strategy is a recipe: it is recorded on the source's (or ``assign_timestamps_and_watermarks``')
transformation, shipped to the tasks, and there builds a timestamp assigner and a fresh
:class:`WatermarkGenerator` per source subtask (or split), as Flink's
``org.apache.flink.api.common.eventtime`` does. ``millstream.runtime.watermarks`` drives them.

Timestamps and watermarks are integer milliseconds. A watermark ``W`` says "no record with a
timestamp ``<= W`` follows"; ``LONG_MAX`` (Flink's ``Watermark.MAX_WATERMARK``) ends event time.

Example::

    >>> class FirstField(TimestampAssigner):
    ...     def extract_timestamp(self, value, record_timestamp):
    ...         return value[0]
    >>> strategy = (WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_seconds(5))
    ...             .with_timestamp_assigner(FirstField()))
    >>> out = CollectingWatermarkOutput()
    >>> gen = strategy.create_watermark_generator()
    >>> gen.on_event((12_000, "a"), 12_000, out)
    >>> gen.on_periodic_emit(out)
    >>> out.watermarks
    [6999]
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Protocol, Sequence

from millstream.common.time import Duration

LONG_MIN = -(2**63)  # Java's Long.MIN_VALUE: "no watermark yet" and "no timestamp"
LONG_MAX = 2**63 - 1  # Java's Long.MAX_VALUE: the final watermark, end of event time

Clock = Callable[[], float]
"""A relative clock in milliseconds (only differences matter), as Flink's ``RelativeClock``."""


def monotonic_millis() -> float:
    """The default clock of idleness detection: monotonic, so wall-clock jumps do not idle a stream."""
    return time.monotonic() * 1000.0


class TimestampAssigner:
    """Extracts an event timestamp (integer milliseconds) from a record."""

    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        """The record's event time. ``record_timestamp`` is the timestamp it already carries, or
        ``LONG_MIN`` when it carries none (PyFlink passes Java's ``Long.MIN_VALUE``)."""
        raise NotImplementedError


class _FunctionTimestampAssigner(TimestampAssigner):
    """A plain ``f(value, record_timestamp) -> int`` used as an assigner (Java's lambda assigner)."""

    def __init__(self, function: Callable[[Any, int], int]) -> None:
        self.function = function

    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return self.function(value, record_timestamp)

    def __repr__(self) -> str:
        return f"_FunctionTimestampAssigner({getattr(self.function, '__qualname__', self.function)!r})"


# -- the generator side: what a task drives --------------------------------------------------------


class WatermarkOutput(Protocol):
    """Where a generator sends watermarks and idleness (Flink's ``WatermarkOutput``)."""

    def emit_watermark(self, watermark: int) -> None: ...

    def mark_idle(self) -> None: ...

    def mark_active(self) -> None: ...


class WatermarkGenerator(Protocol):
    """Generates watermarks from the events it sees (``on_event``) and when the task asks
    periodically (``on_periodic_emit``, every ``pipeline.auto-watermark-interval``)."""

    def on_event(self, event: Any, event_timestamp: int, output: WatermarkOutput) -> None: ...

    def on_periodic_emit(self, output: WatermarkOutput) -> None: ...

    def on_events(self, events: Sequence[Any], timestamps: Sequence[int], output: WatermarkOutput) -> None:
        """``on_event`` for each (event, timestamp) in order; generators may do it in one step."""
        ...


class CollectingWatermarkOutput:
    """A :class:`WatermarkOutput` that records what it is told, in order (tests, doc examples)."""

    def __init__(self) -> None:
        self.events: list[int | str] = []  # watermarks, and "idle" / "active"

    @property
    def watermarks(self) -> list[int]:
        return [e for e in self.events if isinstance(e, int)]

    def emit_watermark(self, watermark: int) -> None:
        self.events.append(watermark)

    def mark_idle(self) -> None:
        self.events.append("idle")

    def mark_active(self) -> None:
        self.events.append("active")


class NoWatermarksGenerator:
    """Emits no watermarks at all (``WatermarkStrategy.no_watermarks()``)."""

    def on_event(self, event: Any, event_timestamp: int, output: WatermarkOutput) -> None:
        return None

    def on_events(self, events: Sequence[Any], timestamps: Sequence[int], output: WatermarkOutput) -> None:
        return None

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        return None


class BoundedOutOfOrdernessWatermarks:
    """Periodic watermark ``max timestamp - bound - 1``: once an event with timestamp T was seen, no
    event older than ``T - bound`` is expected. Before any event it emits ``LONG_MIN``."""

    def __init__(self, max_out_of_orderness_ms: int) -> None:
        if max_out_of_orderness_ms < 0:
            raise ValueError(f"maxOutOfOrderness cannot be negative, got {max_out_of_orderness_ms} ms")
        self.out_of_orderness_ms = int(max_out_of_orderness_ms)
        # Start so that the lowest watermark is LONG_MIN (Flink's starting value).
        self.max_timestamp = LONG_MIN + self.out_of_orderness_ms + 1

    def on_event(self, event: Any, event_timestamp: int, output: WatermarkOutput) -> None:
        if event_timestamp > self.max_timestamp:
            self.max_timestamp = event_timestamp

    def on_events(self, events: Sequence[Any], timestamps: Sequence[int], output: WatermarkOutput) -> None:
        if timestamps:
            highest = max(timestamps)
            if highest > self.max_timestamp:
                self.max_timestamp = highest

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        output.emit_watermark(self.max_timestamp - self.out_of_orderness_ms - 1)


class AscendingTimestampsWatermarks(BoundedOutOfOrdernessWatermarks):
    """Timestamps ascend: bounded out-of-orderness with a zero bound (watermark = max - 1)."""

    def __init__(self) -> None:
        super().__init__(0)


class IdlenessTimer:
    """Flink's idleness countdown, evaluated only at periodic emissions.

    The countdown starts at the first probe that saw no activity since the previous probe; the
    stream is idle at the first probe strictly more than the timeout after that start.
    """

    def __init__(self, clock: Clock, idle_timeout_ms: int) -> None:
        self.clock = clock
        self.max_idle_ms = idle_timeout_ms
        self._counter = 0
        self._last_counter = 0
        self._start_of_inactivity: float | None = None  # None: no countdown running

    def activity(self) -> None:
        self._counter += 1

    def check_if_idle(self) -> bool:
        if self._counter != self._last_counter:  # activity since the last probe: reset
            self._last_counter = self._counter
            self._start_of_inactivity = None
            return False
        if self._start_of_inactivity is None:  # first quiet probe: start the countdown
            self._start_of_inactivity = self.clock()
            return False
        return self.clock() - self._start_of_inactivity > self.max_idle_ms


class WatermarksWithIdleness:
    """Adds idleness to another generator: with no events for the timeout, the output is marked
    idle (once) instead of emitting; an event makes the wrapped generator emit again, and the next
    advancing watermark makes the output active (the output does that, as in Flink)."""

    def __init__(self, watermarks: WatermarkGenerator, idle_timeout_ms: int, clock: Clock | None = None) -> None:
        if idle_timeout_ms <= 0:
            raise ValueError(f"idleTimeout must be greater than zero, got {idle_timeout_ms} ms")
        self.watermarks = watermarks
        self.timer = IdlenessTimer(clock or monotonic_millis, idle_timeout_ms)
        self.is_idle_now = False

    def on_event(self, event: Any, event_timestamp: int, output: WatermarkOutput) -> None:
        self.watermarks.on_event(event, event_timestamp, output)
        self.timer.activity()
        self.is_idle_now = False

    def on_events(self, events: Sequence[Any], timestamps: Sequence[int], output: WatermarkOutput) -> None:
        if not timestamps:
            return
        self.watermarks.on_events(events, timestamps, output)
        self.timer.activity()
        self.is_idle_now = False

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        if self.timer.check_if_idle():
            if not self.is_idle_now:
                output.mark_idle()
                self.is_idle_now = True
        else:
            self.watermarks.on_periodic_emit(output)


# -- the user API ----------------------------------------------------------------------------------


def _millis(name: str, duration: Any) -> int:
    if not isinstance(duration, Duration):
        raise TypeError(f"{name} needs a Duration (Duration.of_seconds(5), ...), got {type(duration).__name__}")
    return duration.to_milliseconds()


_KINDS = ("none", "monotonous", "bounded")


@dataclass(frozen=True)
class WatermarkStrategy:
    """How a stream gets event timestamps and watermarks: a recipe the tasks instantiate.

    Strategies are immutable: ``with_timestamp_assigner`` and ``with_idleness`` return new ones
    (Flink's Java semantics; PyFlink's ``with_timestamp_assigner`` also sets it on ``self``, which
    only differs for a program that discards the returned strategy).
    """

    kind: str  # "none", "monotonous", "bounded"
    max_out_of_orderness_ms: int = 0
    timestamp_assigner: TimestampAssigner | None = None
    idleness_ms: int = 0

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"unknown watermark strategy kind {self.kind!r}; expected one of {_KINDS}")

    @staticmethod
    def no_watermarks() -> "WatermarkStrategy":
        """No watermarks at all: for processing-time programs."""
        return WatermarkStrategy("none")

    @staticmethod
    def for_monotonous_timestamps() -> "WatermarkStrategy":
        """Ascending timestamps: periodic watermark ``max timestamp - 1``."""
        return WatermarkStrategy("monotonous")

    @staticmethod
    def for_bounded_out_of_orderness(max_out_of_orderness: Duration) -> "WatermarkStrategy":
        """Records late by at most the bound: periodic watermark ``max timestamp - bound - 1``."""
        millis = _millis("for_bounded_out_of_orderness", max_out_of_orderness)
        if millis < 0:
            raise ValueError(f"for_bounded_out_of_orderness: the bound cannot be negative, got {millis} ms")
        return WatermarkStrategy("bounded", millis)

    def with_timestamp_assigner(
        self, timestamp_assigner: TimestampAssigner | Callable[[Any, int], int]
    ) -> "WatermarkStrategy":
        """This strategy with the given assigner: a :class:`TimestampAssigner` or a plain function
        ``f(value, record_timestamp) -> int``."""
        if not isinstance(timestamp_assigner, TimestampAssigner):
            if not callable(timestamp_assigner):
                raise TypeError(
                    "with_timestamp_assigner needs a TimestampAssigner or a function (value, record_timestamp) "
                    f"-> int, got {type(timestamp_assigner).__name__}"
                )
            timestamp_assigner = _FunctionTimestampAssigner(timestamp_assigner)
        return replace(self, timestamp_assigner=timestamp_assigner)

    def with_idleness(self, idle_timeout: Duration) -> "WatermarkStrategy":
        """This strategy, marking the stream idle after ``idle_timeout`` without events, so that it
        does not hold back the watermark downstream."""
        millis = _millis("with_idleness", idle_timeout)
        if millis <= 0:
            raise ValueError(f"with_idleness: the idle timeout must be greater than zero, got {millis} ms")
        return replace(self, idleness_ms=millis)

    # -- what the runtime instantiates ---------------------------------------------------------

    def create_watermark_generator(self, clock: Clock | None = None) -> WatermarkGenerator:
        """A fresh generator (one per source subtask or split); ``clock`` drives idleness."""
        generator: WatermarkGenerator
        if self.kind == "none":
            generator = NoWatermarksGenerator()
        elif self.kind == "monotonous":
            generator = AscendingTimestampsWatermarks()
        else:
            generator = BoundedOutOfOrdernessWatermarks(self.max_out_of_orderness_ms)
        if self.idleness_ms > 0:
            generator = WatermarksWithIdleness(generator, self.idleness_ms, clock)
        return generator
