"""The window operator's batch path for the common case: tumbling or sliding time windows with the
assigner's default trigger (EventTimeTrigger / ProcessingTimeTrigger), no evictor.

It does what the generic per-record path (``WindowOperator._process_element``) does for such a job,
with the same state layout, the same timers registered in the same order, and the same user-function
calls in the same order, so results (values, timestamps, output order) and snapshots are identical
and either path can restore the other's state. What it saves is the generic machinery per record:

- windows come from arithmetic on the timestamp (Python's floor modulo is Flink's remainder rule
  with the negative wrap), and one TimeWindow object per window start is reused, so the pane dict
  finds its key by identity instead of calling ``TimeWindow.__eq__``;
- the element goes straight into the key group's pane dict (reduce, aggregate or list);
- timers are registered only when a pane is created. The generic path calls the trigger on every
  element, but EventTimeTrigger's timer at ``max_timestamp`` and the cleanup timer are deduplicated
  per (key, window), and a pane of a window the watermark has not reached was created by an element
  that registered both (they go only when the window is cleaned up, with the pane). The one
  exception is a restored pane of a window in its allowed lateness whose timer already fired: the
  watermark restarts after a restore, so the generic path would register that timer again. Hence
  with allowed lateness and restored panes every element registers (deduplicated) as the trigger does;
- an element whose window the watermark has reached (late, or within the allowed lateness: the
  trigger fires at once, or dropped / sent to the late side output) goes through the generic path,
  one element at a time and in order, so those rules stay in one place;
- timers fire in one loop that does what EventTimeTrigger / ProcessingTimeTrigger would answer,
  with no trigger context.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from millstream.datastream.window import (
    EventTimeTrigger,
    ProcessingTimeTrigger,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TimeWindow,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)
from millstream.runtime.state.heap_backend import TimerQueue
from millstream.runtime.timestamps import LONG_MAX

if TYPE_CHECKING:
    from millstream.runtime.operators.window import WindowOperator

__all__ = ["FastWindowPath", "fast_path_for"]

_MISSING: Any = object()
_TUMBLING = (TumblingEventTimeWindows, TumblingProcessingTimeWindows)
_SLIDING = (SlidingEventTimeWindows, SlidingProcessingTimeWindows)
_EVENT_TIME = (TumblingEventTimeWindows, SlidingEventTimeWindows)
_WINDOW_CACHE_SIZE = 4096  # distinct window starts kept for reuse (live windows are far fewer)


def fast_path_for(op: "WindowOperator") -> "FastWindowPath | None":
    """The batch path when ``op``'s job is one it serves exactly, else None. Exact types: a subclass
    may override what the batch path inlines (assign_windows, on_element...)."""
    assigner, trigger = type(op._assigner), type(op._trigger)
    if op._evictor is not None or op._merging or assigner not in _TUMBLING + _SLIDING:
        return None
    if trigger is not (EventTimeTrigger if assigner in _EVENT_TIME else ProcessingTimeTrigger):
        return None
    return FastWindowPath(op)


class FastWindowPath:
    """See the module docstring: ``process`` takes a keyed batch, ``fire`` the due timers."""

    def __init__(self, op: "WindowOperator") -> None:
        self.op = op
        assigner: Any = op._assigner
        self.event_time = op._event_time
        self.size: int = assigner._size
        self.slide: int = getattr(assigner, "_slide", assigner._size)
        self.offset: int = assigner._offset
        self.tumbling = type(assigner) in _TUMBLING
        self.lateness = op._lateness
        self.kind = op._pane_kind  # "reduce", "aggregate" or "list" (no evictor here)
        self._windows: dict[int, TimeWindow] = {}
        self._checked_restored = False
        self.register_always = False

    def _window(self, start: int) -> TimeWindow:
        windows = self._windows
        if len(windows) >= _WINDOW_CACHE_SIZE:
            windows.clear()
        w = windows[start] = TimeWindow(start, start + self.size)
        return w

    # -- elements ------------------------------------------------------------------------------

    def process(self, keys: list[Any], key_groups: list[int], records: list[Any], times: list[int]) -> None:
        """``times``: the records' timestamps (event time) or processing times, one per record."""
        op = self.op
        b = op.backend
        if not self._checked_restored:
            # Panes present before the first batch were restored (see the module docstring).
            self._checked_restored = True
            self.register_always = self.lateness > 0 and bool(op._panes.groups)
        size, slide, offset = self.size, self.slide, self.offset
        # A window's max timestamp is start + size - 1; the watermark reached it when start <= lim.
        # Processing-time windows are never late (the generic path's is_window_late).
        lim = op.current_watermark - size + 1 if self.event_time else None
        generic = op._process_element
        windows = self._windows
        new_window = self._window
        groups = op._panes.groups
        queue = b.event_timers if self.event_time else b.processing_timers
        register = queue.register
        lateness = self.lateness
        register_always = self.register_always
        kind = self.kind
        reduce: Callable[[Any, Any], Any] = op._reduce  # type: ignore[assignment]
        agg = op._agg
        tumbling = self.tumbling
        for key, kg, record, t in zip(keys, key_groups, records, times):
            b.current_key, b.current_key_group = key, kg
            last = t - (t - offset) % slide  # the latest window start at or before t
            if tumbling:
                starts: Any = (last,)
                earliest = last
            else:
                starts = range(last, t - size, -slide)  # Flink's order: latest start first
                if not starts:
                    generic(key, kg, record, t)  # a gap between windows: the generic path decides
                    continue
                earliest = starts[-1]
            if lim is not None and earliest <= lim:
                generic(key, kg, record, t)  # a window the watermark reached: lateness rules
                continue
            group = groups.get(kg)
            if group is None:
                group = groups[kg] = {}
            for start in starts:
                window = windows.get(start)
                if window is None:
                    window = new_window(start)
                slot = (key, window)
                current = group.get(slot, _MISSING)
                if current is _MISSING:
                    if kind == "reduce":
                        group[slot] = record
                    elif kind == "aggregate":
                        group[slot] = agg.add(record, agg.create_accumulator())
                    else:
                        group[slot] = [record]
                else:
                    if kind == "reduce":
                        group[slot] = reduce(current, record)
                    elif kind == "aggregate":
                        group[slot] = agg.add(record, current)
                    else:
                        current.append(record)
                    if not register_always:
                        continue
                # The trigger's timer, then the cleanup timer (the same one without lateness; none
                # at the end of time), as on_element and _register_cleanup_timer register them.
                max_ts = start + size - 1
                register(max_ts, slot, kg)
                if self.event_time:
                    cleanup = max_ts + lateness
                    if cleanup != max_ts and cleanup < LONG_MAX:
                        register(cleanup, slot, kg)

    # -- timers --------------------------------------------------------------------------------

    def fire(self, queue: TimerQueue, up_to: int) -> None:
        """Fires the due timers of the operator's own time domain, in order: EventTimeTrigger fires
        at the window's max timestamp, ProcessingTimeTrigger on any of its timers; at the cleanup
        time the pane, the trigger's timer and the function's per-window state go."""
        op = self.op
        b = op.backend
        event_time, lateness = self.event_time, self.lateness
        fire, panes = op._fire, op._panes
        clear_function, window_ctx = op._function.clear, op._window_ctx
        poll, delete = queue.poll, queue.delete
        while (timer := poll(up_to)) is not None:
            time, slot, kg = timer
            key, window = slot
            b.current_key, b.current_key_group = key, kg
            max_ts = window.end - 1
            if not event_time or time == max_ts:
                fire(key, kg, window, window)
            if time == (min(max_ts + lateness, LONG_MAX) if event_time else max_ts):
                panes.remove(kg, slot)
                delete(max_ts, slot, kg)  # the trigger's clear()
                window_ctx.store.ns.window = window
                clear_function(window, window_ctx)
