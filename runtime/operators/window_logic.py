"""Pure helpers of the window operator: merging window sets, assignment, lateness and cleanup times.

Ported from Flink's ``WindowOperator`` (``isWindowLate``, ``isElementLate``, ``cleanupTime``,
``isCleanupTime``) and ``MergingWindowSet``. No I/O, no timers of their own: the operator asks
these functions and acts on the answers.
"""
from __future__ import annotations

from typing import Any, Callable, Collection, Generic, Iterable, Protocol, TypeVar

from millstream.datastream.window import MAX_LONG_VALUE, MergingWindowAssigner, TimeWindow, Window, WindowAssigner
from millstream.datastream.window import _SessionWindows

W = TypeVar("W", bound=Window)
W_contra = TypeVar("W_contra", bound=Window, contravariant=True)


# -- lateness and cleanup --------------------------------------------------------------------------


def cleanup_time(window: Window, allowed_lateness: int, is_event_time: bool = True) -> int:
    """When a window's state is dropped: max_timestamp + allowed lateness in event time (Long.MAX_VALUE
    when that overflows, as Java's long arithmetic wraps and Flink then keeps the window forever);
    max_timestamp in processing time, where lateness does not apply."""
    if allowed_lateness < 0:
        raise ValueError(f"allowed lateness must not be negative, got {allowed_lateness} ms")
    if not is_event_time:
        return window.max_timestamp()
    return min(window.max_timestamp() + allowed_lateness, MAX_LONG_VALUE)


def is_cleanup_time(window: Window, time: int, allowed_lateness: int, is_event_time: bool = True) -> bool:
    """True when a timer at ``time`` is the window's cleanup timer."""
    return time == cleanup_time(window, allowed_lateness, is_event_time)


def cleanup_timer(window: Window, allowed_lateness: int, is_event_time: bool = True) -> int | None:
    """The time of the cleanup timer to register for ``window``, or None for "end of time" windows
    (Flink sets no timer at Long.MAX_VALUE: the final watermark ends the job)."""
    time = cleanup_time(window, allowed_lateness, is_event_time)
    return None if time == MAX_LONG_VALUE else time


def is_window_late(window: Window, watermark: int, allowed_lateness: int, is_event_time: bool = True) -> bool:
    """True when the watermark passed the window's cleanup time: elements for it are dropped.
    Processing-time windows are never late."""
    return is_event_time and cleanup_time(window, allowed_lateness, True) <= watermark


def is_element_late(timestamp: int, watermark: int, allowed_lateness: int, is_event_time: bool = True) -> bool:
    """True when an element is behind the watermark by more than the allowed lateness. The operator
    sends an element to the late-data side output when it is late and went into no window."""
    return is_event_time and timestamp + allowed_lateness <= watermark


# -- assignment ------------------------------------------------------------------------------------


def assign_windows_batch(
    assigner: WindowAssigner, batch: Iterable[tuple[Any, int]], context: WindowAssigner.WindowAssignerContext
) -> list[tuple[Any, int, Collection[Window]]]:
    """(record, timestamp, windows) for each (record, timestamp) of ``batch``, in order.

    Assigners with keyed state (count windows) read the current key from ``context``'s runtime
    context, so a batch must hold records of one key for them; time assigners take any batch.
    """
    return [(record, timestamp, assigner.assign_windows(record, timestamp, context)) for record, timestamp in batch]


def windows_of_batch(
    assigner: WindowAssigner, batch: Iterable[tuple[Any, int]], context: WindowAssigner.WindowAssignerContext
) -> dict[Window, list[tuple[Any, int]]]:
    """The batch's records grouped by window (each window's records in arrival order), for
    non-merging assigners whose triggers only need the pane, not the order across windows."""
    out: dict[Window, list[tuple[Any, int]]] = {}
    for record, timestamp, windows in assign_windows_batch(assigner, batch, context):
        for window in windows:
            out.setdefault(window, []).append((record, timestamp))
    return out


# -- merging windows -------------------------------------------------------------------------------


class MergeFunction(Protocol[W_contra]):
    """What the operator does when windows merge (Flink's ``MergingWindowSet.MergeFunction``)."""

    def merge(
        self, merge_result: W_contra, merged_windows: Collection[W_contra], state_window_result: W_contra,
        merged_state_windows: Collection[W_contra],
    ) -> None: ...


class MappingState(Protocol):
    """The keyed map state the operator persists a merging window set in (a ``MapState``)."""

    def items(self) -> Iterable[tuple[Any, Any]]: ...

    def put(self, key: Any, value: Any) -> None: ...

    def clear(self) -> None: ...


class _Collector(MergingWindowAssigner.MergeCallback[Any]):
    def __init__(self) -> None:
        self.results: dict[Any, set[Any]] = {}

    def merge(self, to_be_merged: Iterable[Any], merge_result: Any) -> None:
        self.results[merge_result] = set(to_be_merged)


class MergingWindowSet(Generic[W]):
    """The in-flight windows of one key of a merging assigner, each mapped to its *state window*.

    When windows merge, one of the merged windows' state windows stays the namespace of the merged
    window's contents, so adding to a growing session never moves its state: the operator merges
    the other state windows into it (``merge_function``) and reads/writes the pane through
    :meth:`get_state_window`. Mirrors Flink's ``MergingWindowSet``, with one fix: adding a window
    identical to an in-flight window keeps its state window (Flink's code remaps it to itself when
    no merge is reported, which would orphan the state of an already-merged session).
    """

    def __init__(self, assigner: MergingWindowAssigner, state: MappingState | None = None) -> None:
        if not isinstance(assigner, MergingWindowAssigner):
            raise TypeError(f"MergingWindowSet needs a MergingWindowAssigner, got {type(assigner).__name__}")
        self._assigner = assigner
        # Session windows merge as TimeWindow.merge_windows does (overlapping or touching windows),
        # which lets add_window skip the merge when the new window lies inside an in-flight one.
        self._time_window_merging = type(assigner).merge_windows is _SessionWindows.merge_windows
        self._state = state
        self._mapping: dict[W, W] = dict(state.items()) if state is not None else {}
        # Whether the mapping may differ from the state's: a flag rather than a copy of the mapping
        # to compare with, since the set is read for every element and most elements change nothing.
        self._dirty = False

    def persist(self) -> None:
        """Write the mapping to the state, only if it changed since it was read."""
        if self._state is None:
            raise ValueError("this MergingWindowSet has no state to persist to")
        if self._dirty:
            self._state.clear()
            for window, state_window in self._mapping.items():
                self._state.put(window, state_window)
            self._dirty = False

    def mapping(self) -> dict[W, W]:
        """A copy of the window -> state window mapping."""
        return dict(self._mapping)

    def windows(self) -> list[W]:
        return list(self._mapping)

    def get_state_window(self, window: W) -> W | None:
        return self._mapping.get(window)

    def retire_window(self, window: W) -> None:
        """Forget a window (it fired and was purged, or was cleaned up)."""
        if window not in self._mapping:
            raise KeyError(f"Window {window} is not in the in-flight window set")
        del self._mapping[window]
        self._dirty = True

    def add_window(self, new_window: W, merge_function: MergeFunction[W] | Callable[..., None]) -> W:
        """Add ``new_window``; returns the window it ended up in (itself, or the merged window).

        For each merge, ``merge_function`` gets (merge result, merged in-flight windows without the
        new one, the state window of the result, the other merged state windows to fold into it). A
        new window that falls inside one existing window merges nothing and calls nothing.
        """
        if self._time_window_merging and type(new_window) is TimeWindow:
            # In-flight windows never overlap (every add merged them), so a new window inside one
            # of them can only merge with that one, into it: the result is that window, unchanged,
            # as the full merge below would find. Most elements of a busy session come here (in
            # Nexmark's q11, four in five).
            new: Any = new_window
            start, end = new.start, new.end
            touched: list[Any] = []
            for window in self._mapping:
                session: Any = window  # a TimeWindow, as every window of a session assigner
                if session.start <= start and end <= session.end:
                    return window
                if session.start <= end and start <= session.end:  # TimeWindow.intersects: overlap or touch
                    touched.append(session)
            # A new window touching none or one in-flight window (a session growing by an element
            # at its end, most of the others): the full merge below would find no merge, or just
            # this one, since the cover of two intersecting windows reaches no third one that
            # neither reaches. Two or more: the full merge.
            if len(touched) <= 1:
                self._dirty = True
                if not touched:
                    self._mapping[new_window] = new_window
                    return new_window
                (session,) = touched
                merged: Any = TimeWindow(min(start, session.start), max(end, session.end))
                state_window = self._mapping.pop(session)
                self._mapping[merged] = state_window
                _call(merge_function, merged, {session}, state_window, [])
                return merged
        self._dirty = True  # the new window is added or merged (a custom assigner's no-op merge only costs a write)
        collector = _Collector()
        self._assigner.merge_windows([*self._mapping, new_window], collector)
        result_window = new_window
        new_window_merged = False
        for merge_result, merged_windows in collector.results.items():
            if new_window in merged_windows:
                merged_windows.discard(new_window)
                new_window_merged = True
                result_window = merge_result
            if not merged_windows:  # a custom assigner merged the new window with copies of itself
                self._mapping.setdefault(merge_result, merge_result)
                continue
            state_window = self._mapping[next(iter(merged_windows))]
            merged_state_windows = [self._mapping.pop(w) for w in list(merged_windows) if w in self._mapping]
            self._mapping[merge_result] = state_window
            merged_state_windows = [w for w in merged_state_windows if w != state_window]
            # A new window inside one existing window leaves that window as it was: no merge to do.
            if not (len(merged_windows) == 1 and merge_result in merged_windows):
                _call(merge_function, merge_result, merged_windows, state_window, merged_state_windows)
        if result_window == new_window and not new_window_merged and new_window not in self._mapping:
            self._mapping[result_window] = result_window
        return result_window

    def __repr__(self) -> str:
        return f"MergingWindowSet({self._mapping})"


def _call(merge_function: Any, *args: Any) -> None:
    if hasattr(merge_function, "merge"):
        merge_function.merge(*args)
    else:
        merge_function(*args)
