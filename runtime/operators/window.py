"""The window operator (Flink's WindowOperator and, with an evictor, EvictingWindowOperator).

Per record: the assigner gives its windows; each window's pane (the key's elements of that window)
takes the record, the trigger decides whether to fire and/or purge, and a cleanup timer is set
at the window's end plus the allowed lateness. Timers fire the trigger again (event time as the
watermark passes, processing time on the clock); at a window's cleanup time its pane, trigger
state and per-window state are dropped. Merging assigners (sessions) keep, per key, a
:class:`~millstream.runtime.operators.window_logic.MergingWindowSet` mapping each in-flight window to the
*state window* that names its pane.

Everything lives in the operator's KeyedStateBackend, so checkpoints snapshot it and rescaling
moves it by key group: panes in the table ``window-contents``, trigger state and per-window state
in tables of their descriptors' names, and timers in the backend's timer queues, all under the
composite key ``(key, window)`` in the key's own key group; the merging window sets in the key's
map state ``merging-window-set``. Results carry the timestamp ``window.max_timestamp()``.
"""
from __future__ import annotations

from typing import Any, Callable

from millstream.datastream import functions as fn
from millstream.datastream.evictors import Evictor, TimestampedValue
from millstream.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)
from millstream.datastream.window import MAX_LONG_VALUE, MergingWindowAssigner, Trigger, TriggerResult, Window, WindowAssigner
from millstream.runtime import operator_factories
from millstream.runtime.operators.base import OperatorContext, StreamOperator, discard
from millstream.runtime.operators.window_batch_path import FastWindowPath, SessionWindowPath, fast_path_for
from millstream.runtime.output_tag import OutputTag
from millstream.runtime.state.heap_backend import (
    AGGREGATING,
    LIST,
    MAP,
    REDUCING,
    VALUE,
    HeapAggregatingState,
    HeapListState,
    HeapMapState,
    HeapReducingState,
    HeapValueState,
    TimerQueue,
)
from millstream.runtime.task.environment import BATCH
from millstream.runtime.timestamps import LONG_MAX, stamped, timestamps_of
from millstream.runtime.operators.window_logic import (
    MergingWindowSet,
    cleanup_timer,
    is_cleanup_time,
    is_element_late,
    is_window_late,
)

__all__ = ["WINDOW_STATE_NAME", "MERGING_WINDOW_SET_NAME", "WindowOperator"]

WINDOW_STATE_NAME = "window-contents"  # Flink's name of the panes' state
MERGING_WINDOW_SET_NAME = "merging-window-set"
_MISSING: Any = object()
_CONTENT_KINDS = {"list": LIST, "reduce": REDUCING, "aggregate": AGGREGATING}


class _Namespace:
    """The backend seen through one window: state handles built on it read and write the entry of
    ``(current key, window)`` in the current key's group."""

    def __init__(self, backend: Any) -> None:
        self._b = backend
        self.window: Any = None

    @property
    def current_key(self) -> Any:
        return (self._b.current_key, self.window)

    @property
    def current_key_group(self) -> int:
        return int(self._b.current_key_group)


class _WindowStateStore(fn.KeyedStateStore):
    """Keyed state of the current key and window (trigger state, ``window_state()``)."""

    def __init__(self, backend: Any) -> None:
        self._b = backend
        self.ns = _Namespace(backend)
        self._handles: dict[str, Any] = {}

    def _handle(self, descriptor: StateDescriptor, kind: str, make: Callable[[Any], Any]) -> Any:
        name = descriptor.get_name()
        ttl = getattr(descriptor, "_ttl_config", None)
        if ttl is not None and ttl.is_enabled():
            raise NotImplementedError(
                f"State '{name}': time-to-live is not supported for per-window state (window_state() and "
                "trigger state) in Millstream; that state is dropped with its window anyway. Use "
                "global_state() or the runtime context for state with TTL."
            )
        table = self._b.table(name, kind)  # checks the kind against earlier uses of the name
        handle = self._handles.get(name)
        if handle is None:
            handle = self._handles[name] = make(table)
        return handle

    def get_state(self, state_descriptor: ValueStateDescriptor) -> Any:
        return self._handle(state_descriptor, VALUE, lambda t: HeapValueState(self.ns, t))  # type: ignore[arg-type]

    def get_list_state(self, state_descriptor: ListStateDescriptor) -> Any:
        return self._handle(state_descriptor, LIST, lambda t: HeapListState(self.ns, t))  # type: ignore[arg-type]

    def get_map_state(self, state_descriptor: MapStateDescriptor) -> Any:
        return self._handle(state_descriptor, MAP, lambda t: HeapMapState(self.ns, t))  # type: ignore[arg-type]

    def get_reducing_state(self, state_descriptor: ReducingStateDescriptor) -> Any:
        return self._handle(state_descriptor, REDUCING,
                            lambda t: HeapReducingState(self.ns, t, state_descriptor))  # type: ignore[arg-type]

    def get_aggregating_state(self, state_descriptor: AggregatingStateDescriptor) -> Any:
        return self._handle(state_descriptor, AGGREGATING,
                            lambda t: HeapAggregatingState(self.ns, t, state_descriptor))  # type: ignore[arg-type]

    def get_partitioned_state(self, descriptor: StateDescriptor) -> Any:
        if isinstance(descriptor, ReducingStateDescriptor):
            return self.get_reducing_state(descriptor)
        if isinstance(descriptor, AggregatingStateDescriptor):
            return self.get_aggregating_state(descriptor)
        if isinstance(descriptor, ListStateDescriptor):
            return self.get_list_state(descriptor)
        if isinstance(descriptor, MapStateDescriptor):
            return self.get_map_state(descriptor)
        if isinstance(descriptor, ValueStateDescriptor):
            return self.get_state(descriptor)
        raise TypeError(f"Unknown state descriptor {descriptor!r}")


def _merger(descriptor: StateDescriptor) -> Callable[[Any, Any], Any]:
    """How two values of a merging state combine (Flink's mergeNamespaces per state kind)."""
    if isinstance(descriptor, ReducingStateDescriptor):
        return fn.as_reduce_function(descriptor.reduce_function).reduce
    if isinstance(descriptor, AggregatingStateDescriptor):
        return descriptor.agg_function.merge
    if isinstance(descriptor, ListStateDescriptor):
        return lambda a, b: a + b
    raise TypeError(
        f"State '{descriptor.get_name()}' cannot be merged: merge_partitioned_state needs a reducing, "
        "aggregating or list state descriptor"
    )


def merge_namespaces(group: dict[Any, Any], key: Any, target: Any, sources: Any, merge: Callable[[Any, Any], Any]) -> None:
    """Folds the values of ``(key, s)`` for each source window into ``(key, target)``, removing them
    (Flink: the sources merged in order, then merged into the target)."""
    merged = _MISSING
    for source in sources:
        value = group.pop((key, source), _MISSING)
        if value is not _MISSING:
            merged = value if merged is _MISSING else merge(merged, value)
    if merged is not _MISSING:
        current = group.get((key, target), _MISSING)
        group[(key, target)] = merged if current is _MISSING else merge(current, merged)


class _TriggerContext(Trigger.OnMergeContext):
    """The trigger's view of the current key and window: timers, time and partitioned state."""

    def __init__(self, operator: "WindowOperator") -> None:
        self._op = operator
        self._b = operator.backend
        self.store = _WindowStateStore(operator.backend)
        self.merged_windows: Any = ()

    @property
    def window(self) -> Any:
        return self.store.ns.window

    @window.setter
    def window(self, window: Any) -> None:
        self.store.ns.window = window

    def get_current_processing_time(self) -> int:
        return self._op.ctx.env.now_ms()

    def get_current_watermark(self) -> int:
        return self._op.current_watermark

    def _timer(self, queue: TimerQueue, time: int, register: bool) -> None:
        b = self._b
        if register:
            queue.register(int(time), (b.current_key, self.window), b.current_key_group)
        else:
            queue.delete(int(time), (b.current_key, self.window), b.current_key_group)

    def register_processing_time_timer(self, time: int) -> None:
        self._timer(self._b.processing_timers, time, True)

    def register_event_time_timer(self, time: int) -> None:
        self._timer(self._b.event_timers, time, True)

    def delete_processing_time_timer(self, time: int) -> None:
        self._timer(self._b.processing_timers, time, False)

    def delete_event_time_timer(self, time: int) -> None:
        self._timer(self._b.event_timers, time, False)

    def get_partitioned_state(self, state_descriptor: StateDescriptor) -> Any:
        return self.store.get_partitioned_state(state_descriptor)

    def merge_partitioned_state(self, state_descriptor: StateDescriptor) -> None:
        if not self.merged_windows:
            return
        merge = _merger(state_descriptor)
        kind = {ReducingStateDescriptor: REDUCING, AggregatingStateDescriptor: AGGREGATING}.get(
            type(state_descriptor), LIST)
        table = self._b.table(state_descriptor.get_name(), kind)
        merge_namespaces(table.group(self._b.current_key_group), self._b.current_key, self.window,
                         self.merged_windows, merge)


class _WindowContext(fn.InternalWindowFunction.InternalWindowContext, Evictor.EvictorContext):
    """What the window function (and an evictor) sees: time, window and global state, side outputs."""

    def __init__(self, operator: "WindowOperator") -> None:
        self._op = operator
        self.store = _WindowStateStore(operator.backend)

    def current_processing_time(self) -> int:
        return self._op.ctx.env.now_ms()

    def current_watermark(self) -> int:
        return self._op.current_watermark

    get_current_processing_time = current_processing_time
    get_current_watermark = current_watermark

    def window_state(self) -> fn.KeyedStateStore:
        return self.store

    def global_state(self) -> fn.KeyedStateStore:
        return self._op.ctx.runtime_context

    def output(self, output_tag: Any, value: Any) -> None:
        if not isinstance(output_tag, OutputTag):
            raise TypeError(f"output() needs an OutputTag, got {type(output_tag).__name__}")
        self._op.side(output_tag.tag_id, value, self.store.ns.window.max_timestamp())


class _AssignerContext(WindowAssigner.WindowAssignerContext):
    def __init__(self, operator: "WindowOperator") -> None:
        self._op = operator

    def get_current_processing_time(self) -> int:
        return self._op.ctx.env.now_ms()

    def get_runtime_context(self) -> Any:
        return self._op.ctx.runtime_context


class WindowOperator(StreamOperator):
    """Keyed windows with Flink's semantics; see the module docstring. With an evictor, panes keep
    every element with its timestamp and reduce/aggregate run over the pane when it fires."""

    uses_processing_time = True

    def __init__(self, factory: operator_factories.WindowFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        self.backend = self._backend()
        if not isinstance(factory.assigner, WindowAssigner):
            raise TypeError(f"window() needs a WindowAssigner, got {type(factory.assigner).__name__}")
        if factory.allowed_lateness < 0:
            raise ValueError(f"The allowed lateness cannot be negative, got {factory.allowed_lateness} ms")
        self._assigner: WindowAssigner = factory.assigner
        self._trigger: Trigger = factory.trigger or factory.assigner.get_default_trigger()
        self._evictor: Evictor | None = factory.evictor
        self._lateness = int(factory.allowed_lateness)
        self._late_tag = factory.late_data_tag
        self._function: fn.InternalWindowFunction = factory.window_function
        self._event_time = bool(self._assigner.is_event_time())
        self._merging = isinstance(self._assigner, MergingWindowAssigner)
        if self._merging and not self._trigger.can_merge():
            raise TypeError(
                f"A merging window assigner ({self._assigner!r}) cannot be used with a trigger that does not "
                f"support merging ({self._trigger!r})"
            )
        if factory.contents not in _CONTENT_KINDS:
            raise ValueError(f"Unknown window contents {factory.contents!r}")
        self._contents_kind = factory.contents
        self._reduce = fn.as_reduce_function(factory.reduce_function).reduce if factory.reduce_function else None
        self._agg = factory.aggregate_function
        # An evictor needs every element with its timestamp: the pane is a list of (value, timestamp).
        self._pane_kind = "list" if self._evictor is not None else factory.contents
        self._panes = self.backend.table(WINDOW_STATE_NAME, _CONTENT_KINDS[self._pane_kind])
        self._merge_panes = self._pane_merger()
        self._trigger_ctx = _TriggerContext(self)
        self._window_ctx = _WindowContext(self)
        self._assigner_ctx = _AssignerContext(self)
        self._merging_sets = self.backend.get_map_state(MapStateDescriptor(MERGING_WINDOW_SET_NAME, None, None))
        self._out: list[Any] = []
        self._out_ts: list[int | None] = []
        self._side: dict[str, tuple[list[Any], list[int | None]]] = {}
        # Tumbling/sliding windows with the default trigger and no evictor take the batch path
        # (window_fast.py), with the same results and state; None: every record goes one by one.
        self.fast_path: FastWindowPath | SessionWindowPath | None = fast_path_for(self)

    def user_functions(self) -> list[Any]:
        f = self.factory
        candidates = [f.reduce_function, f.aggregate_function, f.window_function]  # type: ignore[attr-defined]
        return [c for c in candidates if isinstance(c, fn.Function)]

    def _pane_merger(self) -> Callable[[Any, Any], Any]:
        if self._pane_kind == "reduce":
            assert self._reduce is not None
            return self._reduce
        if self._pane_kind == "aggregate":
            return lambda a, b: self._agg.merge(a, b)  # session windows merge accumulators
        return lambda a, b: a + b

    # -- output --------------------------------------------------------------------------------

    def side(self, tag_id: str, value: Any, timestamp: int | None) -> None:
        buf = self._side.get(tag_id)
        if buf is None:
            buf = self._side[tag_id] = ([], [])
        buf[0].append(value)
        buf[1].append(timestamp)

    def _emit(self) -> None:
        if self._out:
            out, ts = self._out, self._out_ts
            self._out, self._out_ts = [], []
            self.output(stamped(out, ts))
        if self._side:
            side, self._side = self._side, {}
            for tag_id, (records, ts) in side.items():
                self.side_outputs.get(tag_id, discard)(stamped(records, ts))

    def _discard_output(self) -> None:
        self._out, self._out_ts, self._side = [], [], {}

    # -- elements ------------------------------------------------------------------------------

    def process_batch(self, records: list[Any]) -> None:
        keys, key_groups = self.key_batch(records)
        stamps = timestamps_of(records)
        fast = self.fast_path
        if fast is not None:
            if not fast.event_time:
                # One reading of the clock for the batch: its records are processed together, and
                # timers fire only between batches, so none could see a time in between.
                times: list[Any] | None = [int(self.ctx.env.now_ms())] * len(records)
            else:
                # A record without a timestamp fails in the generic path, with its error.
                times = stamps if stamps is not None and None not in stamps else None
            if times is not None:
                try:
                    fast.process(keys, key_groups, records, times)
                except Exception as e:
                    self._discard_output()
                    self.fail(e, "the window operator's processing of an element")
                self._emit()
                return
        timestamps = stamps or [None] * len(records)
        b = self.backend
        b.settle()  # the batch path's open panes, for the generic path's reads
        try:
            for key, kg, record, ts in zip(keys, key_groups, records, timestamps):
                b.current_key, b.current_key_group = key, kg
                self._process_element(key, kg, record, ts)
        except Exception as e:
            self._discard_output()
            self.fail(e, "the window operator's processing of an element")
        self._emit()

    def _process_element(self, key: Any, kg: int, record: Any, ts: int | None) -> None:
        windows = self._assigner.assign_windows(record, ts, self._assigner_ctx)  # type: ignore[arg-type]
        watermark, lateness, event_time = self.current_watermark, self._lateness, self._event_time
        skipped = True
        trigger, tctx = self._trigger, self._trigger_ctx
        if self._merging:
            event_timers = self.backend.event_timers
            merging: MergingWindowSet[Window] = MergingWindowSet(self._assigner, self._merging_sets)  # type: ignore[arg-type]
            for window in windows:
                actual = merging.add_window(window, lambda *args: self._merge(key, kg, *args))
                if is_window_late(actual, watermark, lateness, event_time):
                    merging.retire_window(actual)
                    continue
                skipped = False
                state_window = merging.get_state_window(actual)
                if state_window is None:
                    raise RuntimeError(f"Window {actual} is not in the in-flight window set")
                self._add(key, kg, state_window, record, ts)
                tctx.window = actual
                # ts is None for a record without a timestamp (processing time), as PyFlink passes it
                self._act(trigger.on_element(record, ts, actual, tctx), key, kg, actual, state_window)  # type: ignore[arg-type]
                # The cleanup timer, registered again for every element as Flink does (the queue
                # keeps one; a trigger may have deleted its own timer at the same time), straight
                # into the queue: most elements of a session land in an unchanged window.
                if event_time:
                    cleanup = actual.max_timestamp() + lateness
                    if cleanup < MAX_LONG_VALUE:  # else the window is kept forever (cleanup_timer: None)
                        event_timers.register(cleanup, (key, actual), kg)
                else:
                    self._register_cleanup_timer(actual)
            merging.persist()
        else:
            for window in windows:
                if is_window_late(window, watermark, lateness, event_time):
                    continue
                skipped = False
                self._add(key, kg, window, record, ts)
                tctx.window = window
                self._act(trigger.on_element(record, ts, window, tctx), key, kg, window, window)  # type: ignore[arg-type]
                self._register_cleanup_timer(window)
        if skipped and event_time and ts is not None and is_element_late(ts, watermark, lateness, event_time):
            if self._late_tag is not None:
                self.side(self._late_tag, record, ts)
            # else: dropped, as Flink counts numLateRecordsDropped

    def _add(self, key: Any, kg: int, state_window: Any, record: Any, ts: int | None) -> None:
        group = self._panes.group(kg)
        slot = (key, state_window)
        kind = self._pane_kind
        if kind == "list":
            pane = group.get(slot)
            entry = (record, ts) if self._evictor is not None else record
            if pane is None:
                group[slot] = [entry]
            else:
                pane.append(entry)
        elif kind == "reduce":
            current = group.get(slot, _MISSING)
            group[slot] = record if current is _MISSING else self._reduce(current, record)  # type: ignore[misc]
        else:
            current = group.get(slot, _MISSING)
            acc = self._agg.create_accumulator() if current is _MISSING else current
            group[slot] = self._agg.add(record, acc)

    def _act(self, result: TriggerResult, key: Any, kg: int, window: Any, state_window: Any) -> None:
        """Fire and/or purge the pane of ``window`` (stored under ``state_window``) as the trigger says."""
        if result.is_fire():
            self._fire(key, kg, window, state_window)
        if result.is_purge():
            self._panes.remove(kg, (key, state_window))

    def _merge(self, key: Any, kg: int, merge_result: Window, merged_windows: Any, state_window_result: Window,
               merged_state_windows: Any) -> None:
        """Windows merged (sessions): merge their trigger state and panes, drop their timers."""
        if self._event_time:
            if merge_result.max_timestamp() + self._lateness <= self.current_watermark:
                raise RuntimeError(
                    "The end timestamp of an event-time window cannot become earlier than the current watermark "
                    f"by merging. Current watermark: {self.current_watermark} window: {merge_result}"
                )
        elif merge_result.max_timestamp() <= self.ctx.env.now_ms():
            raise RuntimeError(
                "The end timestamp of a processing-time window cannot become earlier than the current "
                f"processing time by merging. Current processing time: {self.ctx.env.now_ms()} window: {merge_result}"
            )
        tctx = self._trigger_ctx
        tctx.window, tctx.merged_windows = merge_result, list(merged_windows)
        try:
            self._trigger.on_merge(merge_result, tctx)
        finally:
            tctx.merged_windows = ()
        for window in merged_windows:
            tctx.window = window
            self._trigger.clear(window, tctx)
            self._delete_cleanup_timer(window)
        merge_namespaces(self._panes.group(kg), key, state_window_result, merged_state_windows, self._merge_panes)

    # -- timers --------------------------------------------------------------------------------

    def _register_cleanup_timer(self, window: Window) -> None:
        time = cleanup_timer(window, self._lateness, self._event_time)
        if time is not None:
            if self._event_time:
                self._trigger_ctx.register_event_time_timer(time)
            else:
                self._trigger_ctx.register_processing_time_timer(time)

    def _delete_cleanup_timer(self, window: Window) -> None:
        time = cleanup_timer(window, self._lateness, self._event_time)
        if time is not None:
            if self._event_time:
                self._trigger_ctx.delete_event_time_timer(time)
            else:
                self._trigger_ctx.delete_processing_time_timer(time)

    def on_event_time(self, watermark: int) -> None:
        self._fire_timers(self.backend.event_timers, watermark, True)

    def on_processing_time(self, now_ms: int) -> None:
        self._fire_timers(self.backend.processing_timers, now_ms, False)

    def next_timer_ms(self) -> int | None:
        return self.backend.processing_timers.peek()

    def end_input(self) -> None:
        if self.ctx.env.runtime_mode == BATCH:  # as KeyedProcessOperator: BATCH fires processing time too
            self._fire_timers(self.backend.processing_timers, LONG_MAX, False)

    def _fire_timers(self, queue: TimerQueue, up_to: int, event_time: bool) -> None:
        b, trigger, tctx = self.backend, self._trigger, self._trigger_ctx
        fast = self.fast_path if event_time == self._event_time else None
        try:
            if fast is not None:
                fast.fire(queue, up_to)
            elif (due := queue.peek()) is not None and due <= up_to:
                b.settle()  # the batch path's open panes, for the generic loop's reads
            while (timer := queue.poll(up_to)) is not None:
                time, (key, window), kg = timer
                b.current_key, b.current_key_group = key, kg
                tctx.window = window
                merging: MergingWindowSet[Window] | None = None
                if self._merging:
                    merging = MergingWindowSet(self._assigner, self._merging_sets)  # type: ignore[arg-type]
                    state_window = merging.get_state_window(window)
                    if state_window is None:
                        continue  # a timer of a window already merged away or cleaned up
                else:
                    state_window = window
                if event_time:
                    result = trigger.on_event_time(time, window, tctx)
                else:
                    result = trigger.on_processing_time(time, window, tctx)
                self._act(result, key, kg, window, state_window)
                if event_time == self._event_time and is_cleanup_time(window, time, self._lateness, event_time):
                    self._clear_all_state(key, kg, window, state_window, merging)
                if merging is not None:
                    merging.persist()
        except Exception as e:
            self._discard_output()
            self.fail(e, "firing a window timer")
        self._emit()

    def _clear_all_state(self, key: Any, kg: int, window: Any, state_window: Any,
                         merging: MergingWindowSet | None) -> None:
        """The window's cleanup time: its pane, trigger state and per-window state go."""
        self._panes.remove(kg, (key, state_window))
        tctx = self._trigger_ctx
        tctx.window = window
        self._trigger.clear(window, tctx)
        self._window_ctx.store.ns.window = window
        self._function.clear(window, self._window_ctx)
        if merging is not None:
            merging.retire_window(window)

    # -- firing --------------------------------------------------------------------------------

    def _fire(self, key: Any, kg: int, window: Any, state_window: Any) -> None:
        group = self._panes.groups.get(kg)
        pane = _MISSING if group is None else group.get((key, state_window), _MISSING)
        if pane is _MISSING:
            return  # an empty window does not fire
        if self._evictor is not None:
            self._fire_evicting(key, kg, window, state_window, pane)
            return
        kind = self._pane_kind
        if kind == "list":
            contents: Any = list(pane)  # a copy: the function may keep it while the pane grows
        elif kind == "aggregate":
            contents = self._agg.get_result(pane)
        else:
            contents = pane
        self._call(key, window, contents)

    def _fire_evicting(self, key: Any, kg: int, window: Any, state_window: Any, pane: list[Any]) -> None:
        """Flink's EvictingWindowOperator: evict_before, the function over what is left, evict_after,
        and the pane keeps what the evictor left."""
        evictor, ctx = self._evictor, self._window_ctx
        assert evictor is not None
        ctx.store.ns.window = window
        elements = [TimestampedValue(v, t) for v, t in pane]
        evictor.evict_before(elements, len(elements), window, ctx)
        values = [e.value for e in elements]
        if self._contents_kind == "reduce":
            current = None
            for v in values:
                current = v if current is None else self._reduce(current, v)  # type: ignore[misc]
            contents: Any = current
        elif self._contents_kind == "aggregate":
            acc = self._agg.create_accumulator()
            for v in values:
                acc = self._agg.add(v, acc)
            contents = self._agg.get_result(acc)
        else:
            contents = values
        self._call(key, window, contents)
        evictor.evict_after(elements, len(elements), window, ctx)
        if elements:
            self._panes.group(kg)[(key, state_window)] = [(e.value, e.timestamp) for e in elements]
        else:
            self._panes.remove(kg, (key, state_window))

    def _call(self, key: Any, window: Any, contents: Any) -> None:
        ctx = self._window_ctx
        ctx.store.ns.window = window
        result = self._function.process(key, window, ctx, contents)
        if result is None:
            return
        ts = window.max_timestamp()
        out, out_ts = self._out, self._out_ts
        for value in result:
            if type(value) is tuple and len(value) == 2 and isinstance(value[0], OutputTag):
                self.side(value[0].tag_id, value[1], ts)
            else:
                out.append(value)
                out_ts.append(ts)
