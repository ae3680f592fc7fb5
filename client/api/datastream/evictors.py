"""Evictors: drop elements from a window's pane before or after its function runs (Flink's ``evictors``).

PyFlink has no evictors; these follow Flink's Java ``CountEvictor`` and ``TimeEvictor``. The window
operator hands an evictor the pane as a ``list`` of :class:`TimestampedValue` (in insertion order)
and reads the list back: an evictor removes elements from it in place. ``evict_before`` runs before
the window function, ``evict_after`` after it; each evictor acts in one of the two, chosen by
``do_evict_after`` (default: before).
"""
from __future__ import annotations

import abc
from typing import Any, Generic, TypeVar

from millstream.datastream.triggers import _millis

T = TypeVar("T")


class TimestampedValue(Generic[T]):
    """An element of a pane with its timestamp (None when the record has none)."""

    __slots__ = ("value", "timestamp")

    def __init__(self, value: T, timestamp: int | None = None) -> None:
        self.value = value
        self.timestamp = timestamp

    def get_value(self) -> T:
        return self.value

    def get_timestamp(self) -> int | None:
        return self.timestamp

    def has_timestamp(self) -> bool:
        return self.timestamp is not None

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TimestampedValue) and self.value == other.value and self.timestamp == other.timestamp
        )

    def __hash__(self) -> int:
        return hash((self.timestamp, repr(self.value)))

    def __getstate__(self) -> tuple[Any, int | None]:
        return (self.value, self.timestamp)

    def __setstate__(self, state: tuple[Any, int | None]) -> None:
        self.value, self.timestamp = state

    def __repr__(self) -> str:
        return f"TimestampedValue({self.value!r}, {self.timestamp!r})"


class Evictor(abc.ABC, Generic[T]):
    """Removes elements of a pane, in place, before and/or after the window function."""

    class EvictorContext(abc.ABC):
        """What the window operator gives an evictor."""

        @abc.abstractmethod
        def get_current_processing_time(self) -> int: ...

        @abc.abstractmethod
        def get_current_watermark(self) -> int: ...

    @abc.abstractmethod
    def evict_before(self, elements: list[TimestampedValue[T]], size: int, window: Any, ctx: "Evictor.EvictorContext") -> None:
        """Called before the window function with the pane's ``size`` elements."""

    @abc.abstractmethod
    def evict_after(self, elements: list[TimestampedValue[T]], size: int, window: Any, ctx: "Evictor.EvictorContext") -> None:
        """Called after the window function with the pane's ``size`` elements."""


def _flag(do_evict_after: Any) -> bool:
    if not isinstance(do_evict_after, bool):
        raise TypeError(f"do_evict_after must be a bool, got {type(do_evict_after).__name__} {do_evict_after!r}")
    return do_evict_after


class CountEvictor(Evictor[Any]):
    """Keeps at most ``max_count`` elements: the latest ones (evicts from the beginning of the pane)."""

    def __init__(self, max_count: int, do_evict_after: bool = False) -> None:
        if isinstance(max_count, bool) or not isinstance(max_count, int):
            raise TypeError(f"CountEvictor.of needs an int count, got {type(max_count).__name__} {max_count!r}")
        self.max_count = max_count
        self.do_evict_after = _flag(do_evict_after)

    @staticmethod
    def of(max_count: int, do_evict_after: bool = False) -> "CountEvictor":
        return CountEvictor(max_count, do_evict_after)

    def evict_before(self, elements: list[TimestampedValue], size: int, window: Any, ctx: Evictor.EvictorContext) -> None:
        if not self.do_evict_after:
            self._evict(elements, size)

    def evict_after(self, elements: list[TimestampedValue], size: int, window: Any, ctx: Evictor.EvictorContext) -> None:
        if self.do_evict_after:
            self._evict(elements, size)

    def _evict(self, elements: list[TimestampedValue], size: int) -> None:
        if size > self.max_count:
            del elements[: size - self.max_count]

    def __repr__(self) -> str:
        return f"CountEvictor({self.max_count}, do_evict_after={self.do_evict_after})"


class TimeEvictor(Evictor[Any]):
    """Keeps the elements of the last ``window_size``: evicts every element whose timestamp is at
    or before (max timestamp in the pane - window_size). A pane whose first element has no timestamp
    is left alone, as in Flink."""

    def __init__(self, window_size: int, do_evict_after: bool = False) -> None:
        self.window_size = window_size
        self.do_evict_after = _flag(do_evict_after)

    @staticmethod
    def of(window_size: Any, do_evict_after: bool = False) -> "TimeEvictor":
        return TimeEvictor(_millis(window_size, "TimeEvictor window size"), do_evict_after)

    def evict_before(self, elements: list[TimestampedValue], size: int, window: Any, ctx: Evictor.EvictorContext) -> None:
        if not self.do_evict_after:
            self._evict(elements)

    def evict_after(self, elements: list[TimestampedValue], size: int, window: Any, ctx: Evictor.EvictorContext) -> None:
        if self.do_evict_after:
            self._evict(elements)

    def _evict(self, elements: list[TimestampedValue]) -> None:
        if not elements or not elements[0].has_timestamp():
            return
        latest = max(e.timestamp for e in elements if e.timestamp is not None)
        cutoff = latest - self.window_size
        elements[:] = [e for e in elements if e.timestamp is None or e.timestamp > cutoff]

    def __repr__(self) -> str:
        return f"TimeEvictor({self.window_size}, do_evict_after={self.do_evict_after})"


__all__ = ["CountEvictor", "Evictor", "TimeEvictor", "TimestampedValue"]
