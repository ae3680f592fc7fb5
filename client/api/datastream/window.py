"""Windows, window assigners and triggers with PyFlink's names (``pyflink.datastream.window``).

Behaviour follows Flink's Java classes (``TimeWindow``, ``TumblingEventTimeWindows``,
``SlidingEventTimeWindows``, ``EventTimeSessionWindows``...), which PyFlink mirrors. The triggers
are defined in :mod:`millstream.datastream.triggers` and exported here under PyFlink's path.
Times are integer milliseconds; sizes, slides, offsets and gaps are given as
:class:`~millstream.common.Duration` (``Time.seconds(5)`` builds one), as PyFlink takes them.

A window operator drives these classes through small context protocols:
:class:`WindowAssigner.WindowAssignerContext` (processing time, runtime context for keyed state),
:class:`Trigger.TriggerContext` / :class:`Trigger.OnMergeContext` (timers, watermark, state scoped
to the current key and window, merging that state; in the triggers module) and
``Evictor.EvictorContext``. Evictors (Flink's ``CountEvictor`` and ``TimeEvictor``; PyFlink has
none) live in :mod:`millstream.datastream.evictors` and are re-exported here.
"""
from __future__ import annotations

import abc
import math
import struct
from typing import Any, Callable, Collection, Generic, Iterable, TypeVar

from millstream.common.time import Duration
from millstream.common.typeinfo import Types
from millstream.datastream.evictors import CountEvictor, Evictor, TimeEvictor, TimestampedValue
from millstream.datastream.functions import RuntimeContext
from millstream.datastream.state import ValueStateDescriptor
from millstream.datastream.triggers import (
    MAX_LONG_VALUE,
    MIN_LONG_VALUE,
    ContinuousEventTimeTrigger,
    ContinuousProcessingTimeTrigger,
    CountTrigger,
    EventTimeTrigger,
    NeverTrigger,
    ProcessingTimeTrigger,
    PurgingTrigger,
    Trigger,
    TriggerResult,
    _java_rem,
    _millis,
)

__all__ = [
    "Window",
    "TimeWindow",
    "CountWindow",
    "GlobalWindow",
    "TumblingProcessingTimeWindows",
    "TumblingEventTimeWindows",
    "SlidingProcessingTimeWindows",
    "SlidingEventTimeWindows",
    "ProcessingTimeSessionWindows",
    "EventTimeSessionWindows",
    "DynamicProcessingTimeSessionWindows",
    "DynamicEventTimeSessionWindows",
    "WindowAssigner",
    "MergingWindowAssigner",
    "CountTumblingWindowAssigner",
    "CountSlidingWindowAssigner",
    "TriggerResult",
    "Trigger",
    "EventTimeTrigger",
    "ProcessingTimeTrigger",
    "ContinuousEventTimeTrigger",
    "ContinuousProcessingTimeTrigger",
    "NeverTrigger",
    "PurgingTrigger",
    "CountTrigger",
    "SessionWindowTimeGapExtractor",
    "GlobalWindows",
    "TimeWindowSerializer",
    "CountWindowSerializer",
    # Flink's evictors (PyFlink has none): Millstream additions.
    "Evictor",
    "CountEvictor",
    "TimeEvictor",
    "TimestampedValue",
]

T = TypeVar("T")
W = TypeVar("W", bound="Window")
W2 = TypeVar("W2")  # MergeCallback's own: a nested class cannot use its outer class's W


def _require_timestamp(timestamp: int | None, assigner: str) -> int:
    if timestamp is None or timestamp <= MIN_LONG_VALUE:
        raise ValueError(
            f"{assigner}: the record has no timestamp. Event-time windows need timestamps: "
            "did you forget to call data_stream.assign_timestamps_and_watermarks(...)?"
        )
    return timestamp


# -- windows -------------------------------------------------------------------------------------


class Window(abc.ABC):
    """A finite bucket of elements; all its elements have arrived once time passes max_timestamp()."""

    @abc.abstractmethod
    def max_timestamp(self) -> int: ...


class TimeWindow(Window):
    """The time interval [start, end): start inclusive, end exclusive."""

    __slots__ = ("start", "end", "_hash")

    def __init__(self, start: int, end: int) -> None:
        self.start = start
        self.end = end
        self._hash = hash((start, end))  # windows key the panes' dicts: hashed on every element

    def max_timestamp(self) -> int:
        return self.end - 1

    def intersects(self, other: "TimeWindow") -> bool:
        """True when the windows overlap or touch (Flink merges adjacent session windows)."""
        return self.start <= other.end and self.end >= other.start

    def cover(self, other: "TimeWindow") -> "TimeWindow":
        """The smallest window that contains both."""
        return TimeWindow(min(self.start, other.start), max(self.end, other.end))

    @staticmethod
    def get_window_start_with_offset(timestamp: int, offset: int, window_size: int) -> int:
        """The start of the window of ``window_size`` (shifted by ``offset``) that holds ``timestamp``.

        Flink's rule: ``remainder = (timestamp - offset) % window_size`` in Java (sign of the
        dividend); a negative remainder is wrapped by one window, so windows stay aligned to the
        epoch for negative timestamps too (-1 with size 10 is in [-10, 0)).
        """
        remainder = _java_rem(timestamp - offset, window_size)
        if remainder < 0:
            return timestamp - (remainder + window_size)
        return timestamp - remainder

    @staticmethod
    def merge_windows(windows: Iterable["TimeWindow"], callback: "MergingWindowAssigner.MergeCallback") -> None:
        """Merge overlapping (or touching) windows: the callback gets each group of two or more."""
        merged: list[tuple[TimeWindow, set[TimeWindow]]] = []
        current: TimeWindow | None = None
        current_set: set[TimeWindow] = set()
        for candidate in sorted(windows, key=lambda w: w.start):
            if current is None:
                current, current_set = candidate, {candidate}
            elif current.intersects(candidate):
                current = current.cover(candidate)
                current_set.add(candidate)
            else:
                merged.append((current, current_set))
                current, current_set = candidate, {candidate}
        if current is not None:
            merged.append((current, current_set))
        for merge_result, to_be_merged in merged:
            if len(to_be_merged) > 1:
                _call_merge(callback, to_be_merged, merge_result)

    def __eq__(self, other: object) -> bool:
        return type(other) is TimeWindow and self.start == other.start and self.end == other.end

    def __hash__(self) -> int:
        return self._hash

    def __lt__(self, other: "TimeWindow") -> bool:
        if not isinstance(other, TimeWindow):
            return NotImplemented
        return (self.start, self.end) < (other.start, other.end)

    def __getstate__(self) -> tuple[int, int]:
        return (self.start, self.end)

    def __setstate__(self, state: tuple[int, int]) -> None:
        self.start, self.end = state
        self._hash = hash(state)

    def __repr__(self) -> str:
        return f"TimeWindow(start={self.start}, end={self.end})"


class CountWindow(Window):
    """A count window, named by its id (the namespace of its state)."""

    __slots__ = ("id",)

    def __init__(self, id: int) -> None:  # noqa: A002 (PyFlink's parameter name)
        self.id = id

    def max_timestamp(self) -> int:
        return MAX_LONG_VALUE

    def __eq__(self, other: object) -> bool:
        return type(other) is CountWindow and self.id == other.id

    def __hash__(self) -> int:
        return hash(("CountWindow", self.id))

    def __getstate__(self) -> int:
        return self.id

    def __setstate__(self, state: int) -> None:
        self.id = state

    def __repr__(self) -> str:
        return f"CountWindow(id={self.id})"


class GlobalWindow(Window):
    """The one window of :class:`GlobalWindows`: it never ends."""

    @staticmethod
    def get() -> "GlobalWindow":
        return GlobalWindow()

    def max_timestamp(self) -> int:
        return MAX_LONG_VALUE

    def __eq__(self, other: object) -> bool:
        return type(other) is GlobalWindow

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "GlobalWindow"


class TimeWindowSerializer:
    """Writes a TimeWindow as Flink does: start and end as two big-endian 8-byte longs.

    Millstream's runtime pickles windows with the state; this is PyFlink's public serializer for
    programs that write windows themselves.
    """

    _FORMAT = struct.Struct(">qq")

    def serialize(self, element: TimeWindow, stream: Any) -> None:
        stream.write(self._FORMAT.pack(element.start, element.end))

    def deserialize(self, stream: Any) -> TimeWindow:
        data = stream.read(16)
        if len(data) != 16:
            raise EOFError(f"A TimeWindow needs 16 bytes, got {len(data)}")
        return TimeWindow(*self._FORMAT.unpack(data))


class CountWindowSerializer:
    """Writes a CountWindow as Flink does: its id as one big-endian 8-byte long."""

    _FORMAT = struct.Struct(">q")

    def serialize(self, element: CountWindow, stream: Any) -> None:
        stream.write(self._FORMAT.pack(element.id))

    def deserialize(self, stream: Any) -> CountWindow:
        data = stream.read(8)
        if len(data) != 8:
            raise EOFError(f"A CountWindow needs 8 bytes, got {len(data)}")
        return CountWindow(self._FORMAT.unpack(data)[0])


# -- assigners -----------------------------------------------------------------------------------


class WindowAssigner(abc.ABC, Generic[T, W]):
    """Assigns zero or more windows to each element."""

    class WindowAssignerContext(abc.ABC):
        """What the window operator gives an assigner."""

        @abc.abstractmethod
        def get_current_processing_time(self) -> int: ...

        @abc.abstractmethod
        def get_runtime_context(self) -> RuntimeContext:
            """The runtime context; its keyed state is scoped to the element's key (count assigners use it)."""

    @abc.abstractmethod
    def assign_windows(self, element: T, timestamp: int, context: "WindowAssigner.WindowAssignerContext") -> Collection[W]:
        """The windows of ``element`` (whose timestamp is ``timestamp``)."""

    @abc.abstractmethod
    def get_default_trigger(self, env: Any = None) -> Trigger[T, W]:
        """The trigger used when the program sets none."""

    @abc.abstractmethod
    def is_event_time(self) -> bool:
        """True if windows follow element timestamps (and watermarks), False for processing time."""


class MergingWindowAssigner(WindowAssigner[T, W]):
    """An assigner whose windows may merge (sessions)."""

    class MergeCallback(abc.ABC, Generic[W2]):
        """Told which windows merge into which."""

        @abc.abstractmethod
        def merge(self, to_be_merged: Iterable[W2], merge_result: W2) -> None: ...

    @abc.abstractmethod
    def merge_windows(self, windows: Iterable[W], callback: "MergingWindowAssigner.MergeCallback[W]") -> None:
        """Call ``callback.merge(group, result)`` for each group of ``windows`` that merges."""


def _call_merge(callback: Any, to_be_merged: set, merge_result: Any) -> None:
    if hasattr(callback, "merge"):
        callback.merge(to_be_merged, merge_result)
    else:
        callback(to_be_merged, merge_result)


class _EventTime:
    """Event time: windows from the element's timestamp, fired by the watermark."""

    def _time(self, timestamp: int | None, context: Any) -> int:
        return _require_timestamp(timestamp, type(self).__name__)

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return EventTimeTrigger()

    def is_event_time(self) -> bool:
        return True


class _ProcessingTime:
    """Processing time: windows from the machine's clock when the element arrives."""

    def _time(self, timestamp: int | None, context: Any) -> int:
        return int(context.get_current_processing_time())

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return ProcessingTimeTrigger()

    def is_event_time(self) -> bool:
        return False


class _TumblingWindows(WindowAssigner[Any, TimeWindow]):
    """Fixed-size, non-overlapping windows aligned to the epoch plus ``offset``."""

    def __init__(self, size: int, offset: int = 0) -> None:
        if abs(offset) >= size:
            raise ValueError(f"{type(self).__name__} parameters must satisfy abs(offset) < size "
                             f"(size={size} ms, offset={offset} ms)")
        self._size = size
        self._offset = offset

    @classmethod
    def of(cls, size: Any, offset: Any = None) -> Any:
        """``of(Time.hours(1), Time.minutes(15))`` gives windows starting at 0:15, 1:15...;
        ``of(Time.days(1), Time.hours(-8))`` gives days starting at midnight UTC+8."""
        name = cls.__name__
        return cls(_millis(size, f"{name} size"), 0 if offset is None else _millis(offset, f"{name} offset"))

    def assign_windows(self, element: Any, timestamp: int, context: Any) -> list[TimeWindow]:
        start = TimeWindow.get_window_start_with_offset(self._time(timestamp, context), self._offset, self._size)  # type: ignore[attr-defined]
        return [TimeWindow(start, start + self._size)]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._size}, {self._offset})"


class TumblingEventTimeWindows(_EventTime, _TumblingWindows):
    """Fixed-size, non-overlapping windows over element timestamps, aligned to the epoch plus ``offset``."""


class TumblingProcessingTimeWindows(_ProcessingTime, _TumblingWindows):
    """Fixed-size, non-overlapping windows over the clock of the machine when the element arrives."""


def _sliding_windows(timestamp: int, size: int, slide: int, offset: int) -> list[TimeWindow]:
    """Every window of ``size`` every ``slide`` that holds ``timestamp``, latest start first (Flink's order)."""
    last_start = TimeWindow.get_window_start_with_offset(timestamp, offset, slide)
    return [TimeWindow(start, start + size) for start in range(last_start, timestamp - size, -slide)]


class _SlidingWindows(WindowAssigner[Any, TimeWindow]):
    """Windows of ``size`` starting every ``slide``; they overlap when slide < size."""

    def __init__(self, size: int, slide: int, offset: int = 0) -> None:
        if abs(offset) >= slide or size <= 0:
            raise ValueError(f"{type(self).__name__} parameters must satisfy abs(offset) < slide and size > 0 "
                             f"(size={size} ms, slide={slide} ms, offset={offset} ms)")
        self._size = size
        self._slide = slide
        self._offset = offset
        self._pane_size = math.gcd(size, slide)

    @classmethod
    def of(cls, size: Any, slide: Any, offset: Any = None) -> Any:
        name = cls.__name__
        return cls(_millis(size, f"{name} size"), _millis(slide, f"{name} slide"),
                   0 if offset is None else _millis(offset, f"{name} offset"))

    def assign_windows(self, element: Any, timestamp: int, context: Any) -> list[TimeWindow]:
        return _sliding_windows(self._time(timestamp, context), self._size, self._slide, self._offset)  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._size}, {self._slide}, {self._offset})"


class SlidingEventTimeWindows(_EventTime, _SlidingWindows):
    """Windows of ``size`` starting every ``slide`` over element timestamps; they overlap when slide < size."""


class SlidingProcessingTimeWindows(_ProcessingTime, _SlidingWindows):
    """Windows of ``size`` starting every ``slide`` over the machine's clock."""


class SessionWindowTimeGapExtractor(abc.ABC):
    """Gives each element its session gap in milliseconds (dynamic-gap sessions)."""

    @abc.abstractmethod
    def extract(self, element: Any) -> int: ...


def _gap_extractor(extractor: Any) -> Callable[[Any], int]:
    if isinstance(extractor, SessionWindowTimeGapExtractor):
        return extractor.extract
    if callable(extractor):
        return extractor
    raise TypeError(
        f"with_dynamic_gap needs a SessionWindowTimeGapExtractor or a callable, got {type(extractor).__name__}"
    )


def _dynamic_gap(extract: Callable[[Any], int], element: Any) -> int:
    gap = extract(element)
    if isinstance(gap, Duration):  # a Duration is as clear as milliseconds
        gap = gap.millis
    if isinstance(gap, bool) or not isinstance(gap, int):
        raise TypeError(f"The session gap extractor must return milliseconds as an int, got {gap!r} for {element!r}")
    if gap <= 0:
        raise ValueError(f"Dynamic session time gap must satisfy 0 < gap, got {gap} for {element!r}")
    return gap


class _SessionWindows(MergingWindowAssigner[Any, TimeWindow]):
    def merge_windows(self, windows: Iterable[TimeWindow], callback: Any) -> None:
        TimeWindow.merge_windows(windows, callback)


class _StaticGapSessions(_SessionWindows):
    """Each element opens [t, t + gap); overlapping sessions merge."""

    dynamic: type  # the dynamic-gap variant of the same time domain

    def __init__(self, session_gap: int) -> None:
        if session_gap <= 0:
            raise ValueError(f"{type(self).__name__} parameters must satisfy 0 < size, got {session_gap} ms")
        self._session_gap = session_gap

    @classmethod
    def with_gap(cls, size: Any) -> Any:
        return cls(_millis(size, f"{cls.__name__} gap"))

    @classmethod
    def with_dynamic_gap(cls, extractor: Any) -> Any:
        return cls.dynamic(extractor)

    def assign_windows(self, element: Any, timestamp: int, context: Any) -> list[TimeWindow]:
        start = self._time(timestamp, context)  # type: ignore[attr-defined]
        return [TimeWindow(start, start + self._session_gap)]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._session_gap})"


class _DynamicGapSessions(_SessionWindows):
    """Sessions whose gap the extractor gives per element."""

    def __init__(self, session_window_time_gap_extractor: Any) -> None:
        self._extractor = session_window_time_gap_extractor
        self._extract = _gap_extractor(session_window_time_gap_extractor)

    @classmethod
    def with_dynamic_gap(cls, extractor: Any) -> Any:
        return cls(extractor)

    def assign_windows(self, element: Any, timestamp: int, context: Any) -> list[TimeWindow]:
        start = self._time(timestamp, context)  # type: ignore[attr-defined]
        return [TimeWindow(start, start + _dynamic_gap(self._extract, element))]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._extractor!r})"


class DynamicEventTimeSessionWindows(_EventTime, _DynamicGapSessions):
    """Event-time sessions whose gap the extractor gives per element."""


class DynamicProcessingTimeSessionWindows(_ProcessingTime, _DynamicGapSessions):
    """Processing-time sessions whose gap the extractor gives per element."""


class EventTimeSessionWindows(_EventTime, _StaticGapSessions):
    """Sessions over element timestamps: each element opens [t, t + gap); overlapping ones merge."""

    dynamic = DynamicEventTimeSessionWindows


class ProcessingTimeSessionWindows(_ProcessingTime, _StaticGapSessions):
    """Sessions over the machine's clock: each element opens [now, now + gap)."""

    dynamic = DynamicProcessingTimeSessionWindows


class GlobalWindows(WindowAssigner[Any, GlobalWindow]):
    """Puts every element of a key into the one :class:`GlobalWindow`; its default trigger never fires."""

    def assign_windows(self, element: Any, timestamp: int, context: Any) -> list[GlobalWindow]:
        return [GlobalWindow.get()]

    @staticmethod
    def create() -> "GlobalWindows":
        return GlobalWindows()

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return NeverTrigger()

    def is_event_time(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "GlobalWindows()"


def _positive_count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int number of elements, got {type(value).__name__} {value!r}")
    if value <= 0:
        raise ValueError(f"{what} must be positive, got {value}")
    return value


def _next_count(context: WindowAssigner.WindowAssignerContext, descriptor: Any) -> int:
    """The element's 0-based position in its key's stream, kept in the key's value state."""
    state = context.get_runtime_context().get_state(descriptor)
    current = state.value() or 0
    state.update(current + 1)
    return int(current)


class CountTumblingWindowAssigner(WindowAssigner[Any, CountWindow]):
    """``count_window(size)``: element n of a key goes to CountWindow(n // size); it fires at ``size`` elements."""

    def __init__(self, window_size: int) -> None:
        self._window_size = _positive_count(window_size, "The count window size")
        self._count_descriptor = ValueStateDescriptor("tumble-count-assigner", Types.LONG())

    @staticmethod
    def of(window_size: int) -> "CountTumblingWindowAssigner":
        return CountTumblingWindowAssigner(window_size)

    def assign_windows(self, element: Any, timestamp: int, context: WindowAssigner.WindowAssignerContext) -> list[CountWindow]:
        return [CountWindow(_next_count(context, self._count_descriptor) // self._window_size)]

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return CountTrigger(self._window_size)

    def is_event_time(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"CountTumblingWindowAssigner({self._window_size})"


class CountSlidingWindowAssigner(WindowAssigner[Any, CountWindow]):
    """``count_window(size, slide)``: window k holds elements k*slide .. k*slide + size - 1 of a key."""

    def __init__(self, window_size: int, window_slide: int) -> None:
        self._window_size = _positive_count(window_size, "The count window size")
        self._window_slide = _positive_count(window_slide, "The count window slide")
        self._count_descriptor = ValueStateDescriptor("slide-count-assigner", Types.LONG())

    @staticmethod
    def of(window_size: int, window_slide: int) -> "CountSlidingWindowAssigner":
        return CountSlidingWindowAssigner(window_size, window_slide)

    def assign_windows(self, element: Any, timestamp: int, context: WindowAssigner.WindowAssignerContext) -> list[CountWindow]:
        count = _next_count(context, self._count_descriptor)
        window_id = count // self._window_slide
        windows = []
        # Latest window first, as PyFlink: walk back while the window still contains this element.
        while window_id >= 0 and count <= window_id * self._window_slide + self._window_size - 1:
            # (window_id * slide <= count holds: ids only go down from count // slide)
            windows.append(CountWindow(window_id))
            window_id -= 1
        return windows

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return CountTrigger(self._window_size)

    def is_event_time(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"CountSlidingWindowAssigner({self._window_size}, {self._window_slide})"
