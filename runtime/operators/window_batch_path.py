"""The window operator's batch path for the common case: tumbling or sliding time windows with the
assigner's default trigger (EventTimeTrigger / ProcessingTimeTrigger), no evictor.

It does what the generic per-record path (``WindowOperator._process_element``) does for such a job,
with the same state layout, the same timers registered in the same order, and the same user-function
calls in the same order, so results (values, timestamps, output order) and snapshots are identical
and either path can restore the other's state. What it saves is the generic machinery per record:

- windows come from arithmetic on the timestamp (Python's floor modulo is Flink's remainder rule
  with the negative wrap), and one TimeWindow object per window start is reused, so the pane dict
  finds its key by identity instead of calling ``TimeWindow.__eq__``;
- the element goes straight into the key group's pane dict (reduce, aggregate or list); on the heap,
  a window's panes stay out of that dict while the window is open, in a dict by window start then
  key, and go into it when anything reads the state whole (``FastWindowPath.open``);
- timers are registered only when a pane is created (event time without allowed lateness: when an
  open window's pane is settled; until then the window's firing takes its panes from the open
  windows, in the same order as their timers would fire). The generic path calls the trigger on every
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

from heapq import heappop, heappush
from typing import TYPE_CHECKING, Any, Callable, cast

from millstream.datastream import functions as fn
from millstream.datastream.window import (
    EventTimeSessionWindows,
    EventTimeTrigger,
    MergingWindowAssigner,
    ProcessingTimeTrigger,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TimeWindow,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)
from millstream.runtime.operators.window_logic import MergingWindowSet
from millstream.runtime.state.heap_backend import HeapMapState, TimerQueue
from millstream.runtime.timestamps import LONG_MAX, LONG_MIN

if TYPE_CHECKING:
    from millstream.runtime.operators.window import WindowOperator

__all__ = ["FastWindowPath", "SessionWindowPath", "fast_path_for"]

_MISSING: Any = object()


def _first_pane(kind: str, agg: Any, record: Any) -> Any:
    """A pane holding one element: ``kind`` "reduce" (the element), "aggregate" (an accumulator
    it was added to, ``agg`` the AggregateFunction) or "list"."""
    if kind == "reduce":
        return record
    if kind == "aggregate":
        return agg.add(record, agg.create_accumulator())
    return [record]
_TUMBLING = (TumblingEventTimeWindows, TumblingProcessingTimeWindows)
_SLIDING = (SlidingEventTimeWindows, SlidingProcessingTimeWindows)
_EVENT_TIME = (TumblingEventTimeWindows, SlidingEventTimeWindows)
_WINDOW_CACHE_SIZE = 4096  # distinct window starts kept for reuse (live windows are far fewer)


def fast_path_for(op: "WindowOperator") -> "FastWindowPath | SessionWindowPath | None":
    """The batch path when ``op``'s job is one it serves exactly, else None. Exact types: a subclass
    may override what the batch path inlines (assign_windows, on_element...)."""
    assigner, trigger = type(op._assigner), type(op._trigger)
    if assigner is EventTimeSessionWindows and trigger is EventTimeTrigger and op._evictor is None:
        return SessionWindowPath(op)
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
        # Heap state: the panes of the windows still open live here, by window
        # start then key, rather than in the pane table by (key, window), so an element costs a
        # lookup by its key alone (the table's tuple key hashes the TimeWindow in Python, twice per
        # element). A pane is in exactly one of the two places; ``settle`` writes these into the
        # table, which the backend calls before anything reads its tables whole (a snapshot).
        self.open: dict[int, _OpenWindow] | None = None
        if type(op._panes.groups) is dict:
            self.open = {}
            op.backend.state_holders.append(self.settle)
        # Event time without allowed lateness: a new pane of an open window registers its timer
        # only when it leaves ``open`` (settled: before a snapshot or the generic path reads it).
        # Until then its window's firing takes it from ``open`` (see ``fire``), in creation order
        # after the window's registered timers, which is the order eager registration gives.
        self.lazy_timers = self.open is not None and self.event_time and self.lateness == 0

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
        if not self._checked_restored:
            # Panes present before the first batch were restored (see the module docstring).
            self._checked_restored = True
            self.register_always = self.lateness > 0 and bool(op._panes.groups)
            if self.register_always:
                self.open = None  # every element registers its timers: the table's path does that
        # A window's max timestamp is start + size - 1; the watermark reached it when start <= lim.
        # Processing-time windows are never late (the generic path's is_window_late).
        lim = op.current_watermark - self.size + 1 if self.event_time else None
        if self.open is not None:
            if self.tumbling:
                self._tumbling_open(keys, key_groups, records, times, lim)
            else:
                self._sliding_open(keys, key_groups, records, times, lim)
        elif self.tumbling:
            self._tumbling(keys, key_groups, records, times, lim)
        else:
            self._sliding(keys, key_groups, records, times, lim)

    def _new_pane(self, group: dict[Any, Any], slot: tuple[Any, TimeWindow], record: Any, kg: int) -> None:
        """The pane's first element, then the trigger's timer and the cleanup timer (the same one
        without lateness; none at the end of time), as on_element and _register_cleanup_timer do."""
        group[slot] = _first_pane(self.kind, self.op._agg, record)
        self._register(slot, kg)

    def _register(self, slot: tuple[Any, TimeWindow], kg: int) -> None:
        max_ts = slot[1].end - 1
        b = self.op.backend
        if self.event_time:
            b.event_timers.register(max_ts, slot, kg)
            cleanup = max_ts + self.lateness
            if cleanup != max_ts and cleanup < LONG_MAX:
                b.event_timers.register(cleanup, slot, kg)
        else:
            b.processing_timers.register(max_ts, slot, kg)

    def _fold(self) -> Callable[[Any, Any], Any] | None:
        """How an element joins a non-empty pane: ``fold(pane, element)`` gives the new pane; None
        for a list pane (appended to)."""
        op = self.op
        if self.kind == "reduce":
            # A wrapped lambda directly, skipping the wrapper's method (as ReduceOperator does).
            reduce_function: Callable[[Any, Any], Any] = op._reduce  # type: ignore[assignment]
            owner: Any = getattr(reduce_function, "__self__", None)
            return owner.fn if type(owner) is fn._ReduceWrapper else reduce_function
        if self.kind == "aggregate":
            add = op._agg.add
            return lambda acc, value: add(value, acc)
        return None

    def _tumbling(self, keys: list[Any], key_groups: list[int], records: list[Any], times: list[int],
                  lim: int | None) -> None:
        op = self.op
        b = op.backend
        size, offset = self.size, self.offset
        generic = op._process_element
        windows = self._windows
        groups = op._panes.groups
        fold = self._fold()
        register_always = self.register_always
        # A reduce pane's first element is the pane, and its timers go straight into the queue
        # (what _new_pane and _register do, inlined: it runs once per key and window).
        inline_new = self.kind == "reduce"
        register = b.event_timers.register if self.event_time else b.processing_timers.register
        lateness = self.lateness if self.event_time else 0
        window = cast(TimeWindow, None)  # set by the first record: last_start is None until then
        last_start = None
        # a window starting at or below this is one the watermark reached (none in processing time)
        late_to = lim if lim is not None else 4 * LONG_MIN
        for key, kg, record, t in zip(keys, key_groups, records, times):
            b.current_key, b.current_key_group = key, kg
            start = t - (t - offset) % size
            if start <= late_to:
                generic(key, kg, record, t)  # a window the watermark reached: lateness rules
                continue
            if start != last_start:  # consecutive records mostly share a window
                cached = windows.get(start)
                window = self._window(start) if cached is None else cached
                last_start = start
            try:
                group = groups[kg]
            except KeyError:
                group = groups[kg] = {}
            slot = (key, window)
            current = group.get(slot, _MISSING)
            if current is _MISSING:
                if inline_new:  # as _register: the cleanup timer too when it differs, unless at the end of time
                    group[slot] = record
                    max_ts = window.end - 1
                    register(max_ts, slot, kg)
                    if lateness and max_ts + lateness < LONG_MAX:
                        register(max_ts + lateness, slot, kg)
                else:
                    self._new_pane(group, slot, record, kg)
                continue
            if fold is None:
                current.append(record)
            else:
                group[slot] = fold(current, record)
            if register_always:
                self._register(slot, kg)

    def _tumbling_open(self, keys: list[Any], key_groups: list[int], records: list[Any], times: list[int],
                       lim: int | None) -> None:
        """``_tumbling`` on the open windows' panes (see ``open``)."""
        op = self.op
        b = op.backend
        size, offset = self.size, self.offset
        generic = op._process_element
        open_windows = self.open
        assert open_windows is not None  # this path runs only with open panes
        fold = self._fold()
        late_to = lim if lim is not None else 4 * LONG_MIN
        last_start = None
        entry = cast(_OpenWindow, None)  # set with last_start
        panes: dict[Any, Any] = {}
        for key, kg, record, t in zip(keys, key_groups, records, times):
            b.current_key, b.current_key_group = key, kg
            start = t - (t - offset) % size
            if start != last_start:  # consecutive records mostly share a window
                if start <= late_to:  # a window the watermark reached: lateness rules, on the table
                    self._settle_pane(start, key)
                    generic(key, kg, record, t)
                    last_start = None
                    continue
                opened = open_windows.get(start)
                entry = self._open_window(start) if opened is None else opened
                panes = entry.panes
                last_start = start
            current = panes.get(key, _MISSING)
            if current is _MISSING:
                self._open_pane(entry, key, kg, record, fold)
            elif fold is None:
                current.append(record)
            else:
                panes[key] = fold(current, record)

    def _sliding_open(self, keys: list[Any], key_groups: list[int], records: list[Any], times: list[int],
                      lim: int | None) -> None:
        """``_sliding`` on the open windows' panes (see ``open``)."""
        op = self.op
        b = op.backend
        size, slide, offset = self.size, self.slide, self.offset
        generic = op._process_element
        open_windows = self.open
        assert open_windows is not None  # this path runs only with open panes
        fold = self._fold()
        for key, kg, record, t in zip(keys, key_groups, records, times):
            b.current_key, b.current_key_group = key, kg
            last = t - (t - offset) % slide  # the latest window start at or before t
            starts = range(last, t - size, -slide)  # Flink's order: latest start first
            if not starts or (lim is not None and starts[-1] <= lim):
                for start in starts:  # the generic path reads and writes the key's panes in the table
                    self._settle_pane(start, key)
                generic(key, kg, record, t)  # no window (a gap between windows) or one the watermark reached
                continue
            for start in starts:
                entry = open_windows.get(start)
                if entry is None:
                    entry = self._open_window(start)
                panes = entry.panes
                current = panes.get(key, _MISSING)
                if current is _MISSING:
                    self._open_pane(entry, key, kg, record, fold)
                elif fold is None:
                    current.append(record)
                else:
                    panes[key] = fold(current, record)

    def _open_window(self, start: int) -> "_OpenWindow":
        cached = self._windows.get(start)
        entry = cast(dict, self.open)[start] = _OpenWindow(self._window(start) if cached is None else cached)
        return entry

    def _open_pane(self, entry: "_OpenWindow", key: Any, kg: int, record: Any,
                   fold: Callable[[Any, Any], Any] | None) -> None:
        """The key's first element in an open window since the pane was last settled: the pane
        moves over from the table (its timers are registered already), or is new (it registers them,
        unless ``lazy_timers`` leaves that to its settling)."""
        groups = self.op._panes.groups
        group = groups.get(kg)
        current = _MISSING if group is None else group.pop((key, entry.window), _MISSING)
        if current is _MISSING:
            current = _first_pane(self.kind, self.op._agg, record)
            if not self.lazy_timers:
                self._register((key, entry.window), kg)
        else:
            if self.lazy_timers:
                entry.timed.add(key)  # a pane from the table has its timer
            if not group:
                del groups[kg]  # as the table drops an empty group
            if fold is None:
                current.append(record)
            else:
                current = fold(current, record)
        entry.panes[key] = current
        entry.key_groups[key] = kg

    def settle(self) -> None:
        """Writes the open windows' panes into the pane table (they leave ``open``)."""
        for start in list(self.open or ()):
            self._settle_window(start)

    def _settle_pane(self, start: int, key: Any) -> None:
        """Writes one key's pane of an open window into the pane table."""
        entry = self.open.get(start) if self.open else None
        if entry is None:
            return
        pane = entry.panes.pop(key, _MISSING)
        if pane is _MISSING:
            return
        kg = entry.key_groups.pop(key)
        if not entry.panes:
            del cast(dict, self.open)[start]
        if self.lazy_timers and key not in entry.timed:
            self._register((key, entry.window), kg)
        entry.timed.discard(key)
        groups = self.op._panes.groups
        group = groups.get(kg)
        if group is None:
            group = groups[kg] = {}
        group[(key, entry.window)] = pane

    def _settle_window(self, start: int) -> None:
        entry = self.open.pop(start, None) if self.open else None
        if entry is None:
            return
        groups = self.op._panes.groups
        window, pane_groups = entry.window, entry.key_groups
        lazy, timed = self.lazy_timers, entry.timed
        for key, pane in entry.panes.items():
            kg = pane_groups[key]
            if lazy and key not in timed:
                self._register((key, window), kg)
            group = groups.get(kg)
            if group is None:
                group = groups[kg] = {}
            group[(key, window)] = pane

    def _sliding(self, keys: list[Any], key_groups: list[int], records: list[Any], times: list[int],
                 lim: int | None) -> None:
        op = self.op
        b = op.backend
        size, slide, offset = self.size, self.slide, self.offset
        generic = op._process_element
        windows = self._windows
        groups = op._panes.groups
        fold = self._fold()
        register_always = self.register_always
        for key, kg, record, t in zip(keys, key_groups, records, times):
            b.current_key, b.current_key_group = key, kg
            last = t - (t - offset) % slide  # the latest window start at or before t
            starts = range(last, t - size, -slide)  # Flink's order: latest start first
            if not starts or (lim is not None and starts[-1] <= lim):
                generic(key, kg, record, t)  # no window (a gap between windows) or one the watermark reached
                continue
            group = groups.get(kg)
            if group is None:
                group = groups[kg] = {}
            for start in starts:
                window = windows.get(start)
                if window is None:
                    window = self._window(start)
                slot = (key, window)
                current = group.get(slot, _MISSING)
                if current is _MISSING:
                    self._new_pane(group, slot, record, kg)
                    continue
                if fold is None:
                    current.append(record)
                else:
                    group[slot] = fold(current, record)
                if register_always:
                    self._register(slot, kg)

    # -- timers --------------------------------------------------------------------------------

    def fire(self, queue: TimerQueue, up_to: int) -> None:
        """Fires the due timers of the operator's own time domain, in order, as the generic loop
        would with this trigger: EventTimeTrigger fires at the window's max timestamp,
        ProcessingTimeTrigger on any of its timers; at the cleanup time the pane, the trigger's timer
        and the function's per-window state go. Nothing registers timers while windows fire here
        (the triggers register on elements only), so polling the queue to the end is the generic order;
        with ``lazy_timers``, an open window's panes without a timer fire where their timers would be
        (after the registered ones of the same time: those panes were created first)."""
        if self.lazy_timers and self.open:
            # Windows with panes that registered no timer yet, due now: each fires after the
            # queue's timers up to its own time (its registered panes among them).
            size = self.size
            for start in sorted(s for s, e in self.open.items() if len(e.timed) < len(e.panes) and s + size - 1 <= up_to):
                self._fire_queue(queue, start + size - 1)
                self._fire_untimed(start)
        self._fire_queue(queue, up_to)

    def _fire_untimed(self, start: int) -> None:
        """An open window's panes left after its registered timers fired: none has a timer (see
        ``lazy_timers``); each fires and is cleaned up, in creation order, as its timer would."""
        entry = cast(dict, self.open).pop(start)
        op = self.op
        b = op.backend
        call, window = op._call, entry.window
        get_result = op._agg.get_result if self.kind == "aggregate" else None
        function, window_ctx = op._function, op._window_ctx
        clears = type(function).clear is not fn.InternalWindowFunction.clear
        key_groups = entry.key_groups
        for key, pane in entry.panes.items():
            b.current_key, b.current_key_group = key, key_groups[key]
            call(key, window, get_result(pane) if get_result is not None else pane)
            if clears:
                window_ctx.store.ns.window = window
                function.clear(window, window_ctx)

    def _fire_queue(self, queue: TimerQueue, up_to: int) -> None:
        op = self.op
        b = op.backend
        event_time, lateness, kind = self.event_time, self.lateness, self.kind
        groups = op._panes.groups
        call = op._call
        get_result = op._agg.get_result if kind == "aggregate" else None
        window_ctx = op._window_ctx
        function = op._function
        clears = type(function).clear is not fn.InternalWindowFunction.clear  # process functions' clear()
        poll, delete = queue.poll, queue.delete
        open_windows = self.open if self.open is not None else {}
        while (timer := poll(up_to)) is not None:
            time, slot, kg = timer
            key, window = slot
            max_ts = window.end - 1
            cleanup = (max_ts + lateness if max_ts + lateness < LONG_MAX else LONG_MAX) if event_time else max_ts
            fires = time == max_ts or not event_time
            if not fires and time != cleanup:
                continue  # EventTimeTrigger: CONTINUE, and not the cleanup time
            b.current_key, b.current_key_group = key, kg
            entry = open_windows.get(window.start) if open_windows else None
            if entry is not None and key in entry.panes:  # an open window's pane (see ``open``)
                if time == cleanup:
                    pane = entry.panes.pop(key)
                    del entry.key_groups[key]
                    entry.timed.discard(key)
                    if not entry.panes:
                        del open_windows[window.start]
                else:
                    pane = entry.panes[key]
                    if kind == "list":
                        pane = list(pane)  # a copy: the function may keep it while the pane grows
            elif (group := groups.get(kg)) is None:
                pane = _MISSING
            elif time == cleanup:  # the pane goes now: hand it over, no copy needed
                pane = group.pop(slot, _MISSING)
                # An empty heap group goes (as the generic path's state clear does); a RocksDB
                # group is a view over rows, whose emptiness would cost a seek per timer fired.
                if type(group) is dict and not group:
                    del groups[kg]
            else:
                pane = group.get(slot, _MISSING)
                if kind == "list" and pane is not _MISSING:
                    pane = list(pane)  # a copy: the function may keep it while the pane grows
            if fires and pane is not _MISSING:  # an empty window does not fire
                call(key, window, get_result(pane) if get_result is not None else pane)
            if time == cleanup:
                if cleanup != max_ts:
                    delete(max_ts, slot, kg)  # the trigger's clear(); without lateness it was this timer
                if clears:
                    window_ctx.store.ns.window = window
                    function.clear(window, window_ctx)


class _OpenWindow:
    """An open window's panes on the heap: {key: pane} and {key: key group}."""

    __slots__ = ("window", "panes", "key_groups", "timed")

    def __init__(self, window: TimeWindow) -> None:
        self.window = window
        self.panes: dict[Any, Any] = {}
        self.key_groups: dict[Any, int] = {}
        self.timed: set[Any] = set()  # keys whose pane has its timer registered (FastWindowPath.lazy_timers)


class SessionWindowPath:
    """The batch path of event-time sessions with a static gap, EventTimeTrigger and no evictor.

    The generic path copies the key's merging window set out of its map state for every element
    and writes it back after, and goes through the trigger and its context for every timer. Here,
    on the heap the set is the state's own dict, changed in place; on RocksDB a batch reads each
    key's set once and writes the changed ones back at its end, before anything else (a timer, a
    snapshot) can read them. An element that starts a session or extends one (most of them) is
    handled inline, doing what ``MergingWindowSet.add_window``, ``WindowOperator._merge``,
    EventTimeTrigger and the cleanup timer do, in the same order: the same panes, timers and sets,
    hence the same results and snapshots. An element whose window the watermark has reached (the
    trigger would fire at once, or lateness applies) goes through the generic path, after its key's
    set is written back; so does a window joining two or more sessions (the set's full merge, with
    the operator's merge function). Timers fire in the generic loop.

    Open sessions (heap state, no allowed lateness). Each element that extends a session changes
    its window: in the table layout that is a new TimeWindow, the set's entry moved, the old timer
    deleted and the new one registered, and the pane found again by ``(key, state window)``, each
    hashing a TimeWindow in Python. So a key's only in-flight session lives in ``open`` instead, as
    ``[start, end, pane, state window, key group]``, out of the set, the pane table and the timer
    queue, and an element costs a lookup by its key. ``by_end`` holds the open sessions by end, each
    end's in the order their timers would have been registered (an extended session moves to the
    back of its new end's, as the generic path's new timer goes to the back of its timestamp's).
    A session goes into the table layout (``_settle_end``, its timer registered) with every open
    session of the same end, keeping that order against the queue's timers of that timestamp:
    - when the watermark reaches it (``fire``, before the generic loop polls),
    - before the table path registers a timer at its timestamp,
    - when its key's element does not extend it (a second session, or a late element),
    - when anything reads the state whole (``settle``: a snapshot, the generic path).
    A key whose only in-flight session is in the table (restored, or settled) moves it back to
    ``open`` on an element that extends it, its old timer deleted as the generic path deletes it.
    """

    event_time = True

    def __init__(self, op: "WindowOperator") -> None:
        self.op = op
        self.gap: int = cast(Any, op._assigner)._session_gap
        self.lateness = op._lateness
        self.kind = op._pane_kind  # "reduce", "aggregate" or "list" (no evictor here)
        handle = op._merging_sets
        # The heap's map state keeps each key's set as a plain dict: changed in place, nothing to write back.
        self.in_place = type(handle) is HeapMapState
        self._set_groups: Any = handle._table.groups if self.in_place else None
        self.open: dict[Any, list[Any]] | None = None
        self.by_end: dict[int, dict[Any, list[Any]]] = {}
        self._ends: list[int] = []  # heap of by_end's ends (some maybe gone already)
        if self.in_place and not self.lateness and type(op._panes.groups) is dict:
            self.open = {}
            op.backend.state_holders.append(self.settle)

    def _fold(self) -> Callable[[Any, Any], Any] | None:
        return FastWindowPath._fold(cast(FastWindowPath, self))

    def process(self, keys: list[Any], key_groups: list[int], records: list[Any], times: list[int]) -> None:
        if self.open is not None:
            self._process_open(keys, key_groups, records, times)
            return
        op = self.op
        b = op.backend
        sets: dict[Any, tuple[MergingWindowSet, int]] = {}  # RocksDB: the batch's sets, written back at its end
        try:
            self._process(sets, keys, key_groups, records, times)
        finally:
            for key, (merging, kg) in sets.items():  # written back even when an element failed, as the generic path does
                b.current_key, b.current_key_group = key, kg
                merging.persist()

    def _process_open(self, keys: list[Any], key_groups: list[int], records: list[Any], times: list[int]) -> None:
        op = self.op
        gap, kind, agg = self.gap, self.kind, op._agg
        watermark = op.current_watermark
        open_sessions, by_end, ends = cast(dict, self.open), self.by_end, self._ends
        set_groups, groups = self._set_groups, op._panes.groups
        fold = self._fold()
        for key, kg, record, t in zip(keys, key_groups, records, times):
            end = t + gap
            late = end - 1 <= watermark
            session = open_sessions.get(key)
            if session is not None:
                start, last = session[0], session[1]
                if start <= t and end <= last:  # inside: the session's window is unchanged
                    if fold is None:
                        session[2].append(record)
                    else:
                        session[2] = fold(session[2], record)
                    continue
                if not late and t <= last and start <= end:  # extends it: a new window, its timer at the back
                    # (what _file_open does, inline: most elements take this branch)
                    del by_end[last][key]
                    if t < start:
                        session[0] = t
                    if end > last:
                        session[1] = last = end
                    bucket = by_end.get(last)
                    if bucket is None:
                        bucket = by_end[last] = {}
                        heappush(ends, last)
                    bucket[key] = session
                    if fold is None:
                        session[2].append(record)
                    else:
                        session[2] = fold(session[2], record)
                    continue
                self._settle_end(last)  # a second session, or a late element: the table's path
            elif not late:
                set_group = set_groups.get(kg)
                mapping = None if set_group is None else set_group.get(key)
                if not mapping:  # a new session
                    self._file_open(key, [t, end, _first_pane(kind, agg, record), TimeWindow(t, end), kg])
                    if mapping is not None:
                        del set_group[key]
                    continue
                if len(mapping) == 1 and self._reopen(key, kg, mapping, set_group, record, t, fold):
                    continue
            self._process({}, [key], [kg], [record], [t])

    def _process(self, sets: dict[Any, tuple[MergingWindowSet, int]], keys: list[Any], key_groups: list[int],
                 records: list[Any], times: list[int]) -> None:
        op = self.op
        b = op.backend
        gap, lateness, kind = self.gap, self.lateness, self.kind
        # this path runs only for EventTimeSessionWindows (a merging assigner)
        assigner, handle = cast(MergingWindowAssigner, op._assigner), op._merging_sets
        set_groups = self._set_groups
        watermark = op.current_watermark
        generic, merge = op._process_element, op._merge
        groups = op._panes.groups
        fold = self._fold()
        timers = b.event_timers
        register, delete = timers.register, timers.delete
        agg = op._agg
        by_end, settle_end = self.by_end, self._settle_end  # open sessions: settled before a timer of their end
        for key, kg, record, t in zip(keys, key_groups, records, times):
            b.current_key, b.current_key_group = key, kg
            if t + gap - 1 <= watermark:  # the new window's end is behind the watermark: lateness rules
                cached = sets.pop(key, None)
                if cached is not None:
                    cached[0].persist()
                if by_end:  # the generic merge may register a timer at the end of any of the key's sessions
                    for w in list(set_groups.get(kg, {}).get(key, ())):
                        settle_end(w.end)
                generic(key, kg, record, t)
                continue
            merging: Any = None
            if set_groups is not None:
                set_group = set_groups.get(kg)
                if set_group is None:
                    set_group = set_groups[kg] = {}
                mapping = set_group.get(key)
                if mapping is None:
                    mapping = set_group[key] = {}
            else:
                cached = sets.get(key)
                if cached is None:
                    merging = MergingWindowSet(assigner, handle)
                    sets[key] = (merging, kg)
                else:
                    merging = cached[0]
                mapping = merging._mapping
            start, end = t, t + gap
            actual: Any = None
            touched: Any = None
            count = 0
            for w in mapping:  # in-flight sessions never overlap: inside one, or touching some
                if w.start <= start and end <= w.end:
                    actual = w
                    break
                if w.start <= end and start <= w.end:
                    touched = w
                    count += 1
            if actual is None:
                if merging is not None:
                    merging._dirty = True
                if count == 0:
                    actual = TimeWindow(start, end)
                    mapping[actual] = actual
                elif count == 1:
                    actual = TimeWindow(min(start, touched.start), max(end, touched.end))
                    mapping[actual] = mapping.pop(touched)
                    if by_end:
                        settle_end(actual.end)
                    # _merge: EventTimeTrigger.on_merge registers the merged window's timer (its end is
                    # past the watermark: it holds the new window); the merged-away window's trigger
                    # timer and cleanup timer go; its pane is the state window's already.
                    register(actual.end - 1, (key, actual), kg)
                    old = (key, touched)
                    delete(touched.end - 1, old, kg)
                    if lateness and touched.end - 1 + lateness < LONG_MAX:
                        delete(touched.end - 1 + lateness, old, kg)
                else:
                    if by_end:  # the merged window ends where the last of the joined sessions ends
                        settle_end(max([end] + [w.end for w in mapping if w.start <= end and start <= w.end]))
                    if merging is None:  # the full merge of the set's class, on the state's dict
                        merging = MergingWindowSet(assigner)
                        merging._mapping = mapping
                    actual = merging.add_window(TimeWindow(start, end), lambda *args: merge(key, kg, *args))
            group = groups.get(kg)
            if group is None:
                group = groups[kg] = {}
            pane_slot = (key, mapping[actual])
            current = group.get(pane_slot, _MISSING)
            if current is _MISSING:
                group[pane_slot] = _first_pane(kind, agg, record)
            elif fold is None:
                current.append(record)
            else:
                group[pane_slot] = fold(current, record)
            # EventTimeTrigger.on_element (the window's end is past the watermark), then the cleanup timer
            # (the same timer without lateness); both deduplicated by the queue
            slot = (key, actual)
            end_ts = actual.end - 1
            if by_end:
                settle_end(actual.end)
            register(end_ts, slot, kg)
            if lateness and end_ts + lateness < LONG_MAX:
                register(end_ts + lateness, slot, kg)

    def _reopen(self, key: Any, kg: int, mapping: dict[TimeWindow, TimeWindow], set_group: dict[Any, Any],
                record: Any, t: int, fold: Callable[[Any, Any], Any] | None) -> bool:
        """Moves the key's one session in the table to ``open`` when ``record`` extends it: what the
        generic merge does (the old timer deleted, the pane kept under its state window), but
        the new timer left to ``_settle_end``."""
        ((window, state_window),) = mapping.items()
        end = t + self.gap
        if (window.start <= t and end <= window.end) or not (t <= window.end and window.start <= end):
            return False  # inside (nothing changes) or apart (a second session): the table's path
        group = self.op._panes.groups.get(kg)
        pane = _MISSING if group is None else group.pop((key, state_window), _MISSING)
        if pane is _MISSING:
            return False
        if not group:
            del self.op._panes.groups[kg]
        del set_group[key]
        self.op.backend.event_timers.delete(window.end - 1, (key, window), kg)
        if fold is None:
            pane.append(record)
        else:
            pane = fold(pane, record)
        self._file_open(key, [min(t, window.start), max(end, window.end), pane, state_window, kg])
        return True

    def _file_open(self, key: Any, session: list[Any]) -> None:
        """``session`` is the key's open session, at the back of its end's (see the class docstring)."""
        cast(dict, self.open)[key] = session
        end = session[1]
        bucket = self.by_end.get(end)
        if bucket is None:
            bucket = self.by_end[end] = {}
            heappush(self._ends, end)
        bucket[key] = session

    def _settle_end(self, end: int) -> None:
        """The open sessions ending at ``end`` go into the table layout, their timers registered in order."""
        bucket = self.by_end.pop(end, None)
        if not bucket:
            return
        open_sessions, set_groups, groups = cast(dict, self.open), self._set_groups, self.op._panes.groups
        register = self.op.backend.event_timers.register
        for key, (start, _, pane, state_window, kg) in bucket.items():
            del open_sessions[key]
            window = TimeWindow(start, end)
            set_group = set_groups.get(kg)
            if set_group is None:
                set_group = set_groups[kg] = {}
            set_group[key] = {window: state_window}
            group = groups.get(kg)
            if group is None:
                group = groups[kg] = {}
            group[(key, state_window)] = pane
            register(end - 1, (key, window), kg)

    def settle(self) -> None:
        """Every open session into the table layout (see the class docstring)."""
        for end in list(self.by_end):
            self._settle_end(end)
        self._ends.clear()

    def fire(self, queue: TimerQueue, up_to: int) -> None:
        """Session timers fire in the operator's generic loop (a timer there reads the key's set):
        the open sessions the watermark reached go into the table layout first."""
        ends = self._ends
        while ends and ends[0] - 1 <= up_to:
            self._settle_end(heappop(ends))
