"""Triggers with PyFlink's names: when a window's pane is evaluated (``pyflink.datastream.window``).

Behaviour follows Flink's Java triggers (``EventTimeTrigger``, ``ProcessingTimeTrigger``,
``CountTrigger``, ``PurgingTrigger``, ``ContinuousEventTimeTrigger``,
``ContinuousProcessingTimeTrigger``), which PyFlink mirrors. A trigger keeps no state of its own:
the window operator implements :class:`Trigger.TriggerContext` (timers, current time and watermark,
state of the current key and window) and :class:`Trigger.OnMergeContext` (merging that state when
session windows merge). Import these names from :mod:`millstream.datastream.window`, as in PyFlink.
"""
from __future__ import annotations

import abc
import enum
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from millstream.common.time import Duration
from millstream.common.typeinfo import Types
from millstream.datastream.functions import ReduceFunction
from millstream.datastream.state import ReducingState, ReducingStateDescriptor, State, StateDescriptor

if TYPE_CHECKING:
    from millstream.datastream.window import GlobalWindow, TimeWindow, Window

MAX_LONG_VALUE = 2**63 - 1  # Java's Long.MAX_VALUE: the end of time (the final watermark)
MIN_LONG_VALUE = -(2**63)  # Java's Long.MIN_VALUE: Flink's "no timestamp" marker

T = TypeVar("T")
W = TypeVar("W")


def _millis(value: Any, what: str) -> int:
    """Milliseconds of a Duration/Time argument; anything else is a clear TypeError."""
    if isinstance(value, Duration):
        return value.millis
    to_ms = getattr(value, "to_milliseconds", None)
    if callable(to_ms) and not isinstance(value, (int, float)):
        return int(to_ms())
    raise TypeError(f"{what} must be a Duration or Time (e.g. Time.seconds(5)), got {type(value).__name__} {value!r}")


def _java_rem(a: int, b: int) -> int:
    """Java's ``a % b``: the remainder takes the sign of the dividend (Python's takes the divisor's)."""
    r = abs(a) % abs(b)
    return r if a >= 0 else -r


# -- triggers ------------------------------------------------------------------------------------


class TriggerResult(enum.Enum):
    """What a trigger decides for a window: evaluate it (fire) and/or drop its contents (purge).

    FIRE or FIRE_AND_PURGE on an empty window does not call the window function.
    """

    CONTINUE = (False, False)
    FIRE_AND_PURGE = (True, True)
    FIRE = (True, False)
    PURGE = (False, True)

    def is_fire(self) -> bool:
        return bool(self.value[0])

    def is_purge(self) -> bool:
        return bool(self.value[1])


class Trigger(abc.ABC, Generic[T, W]):
    """Decides when a pane (the elements of one key and one window) is evaluated.

    Triggers keep no state of their own (one instance serves every key and window): state goes
    through ``ctx.get_partitioned_state`` and timers through the context. With a merging assigner
    the trigger must return True from :meth:`can_merge` and implement :meth:`on_merge`.
    """

    class TriggerContext(abc.ABC):
        """What the window operator gives a trigger: timers, time, and state of the current key and window."""

        @abc.abstractmethod
        def get_current_processing_time(self) -> int: ...

        @abc.abstractmethod
        def get_current_watermark(self) -> int: ...

        @abc.abstractmethod
        def register_processing_time_timer(self, time: int) -> None:
            """``on_processing_time(time, window)`` runs once the clock passes ``time``."""

        @abc.abstractmethod
        def register_event_time_timer(self, time: int) -> None:
            """``on_event_time(time, window)`` runs once the watermark reaches ``time``."""

        @abc.abstractmethod
        def delete_processing_time_timer(self, time: int) -> None: ...

        @abc.abstractmethod
        def delete_event_time_timer(self, time: int) -> None: ...

        @abc.abstractmethod
        def get_partitioned_state(self, state_descriptor: StateDescriptor) -> State:
            """The state of ``state_descriptor`` scoped to the current key and window."""

    class OnMergeContext(TriggerContext):
        """The context of :meth:`Trigger.on_merge`: it can also merge the merged windows' state."""

        @abc.abstractmethod
        def merge_partitioned_state(self, state_descriptor: StateDescriptor) -> None:
            """Merge the state of ``state_descriptor`` of every merged window into the result window."""

    @abc.abstractmethod
    def on_element(self, element: T, timestamp: int, window: W, ctx: "Trigger.TriggerContext") -> TriggerResult:
        """Called for every element added to a pane."""

    @abc.abstractmethod
    def on_processing_time(self, time: int, window: W, ctx: "Trigger.TriggerContext") -> TriggerResult:
        """Called when a processing-time timer of this trigger fires."""

    @abc.abstractmethod
    def on_event_time(self, time: int, window: W, ctx: "Trigger.TriggerContext") -> TriggerResult:
        """Called when an event-time timer of this trigger fires."""

    def can_merge(self) -> bool:
        """True if the trigger supports merging windows (then :meth:`on_merge` must be implemented)."""
        return False

    @abc.abstractmethod
    def on_merge(self, window: W, ctx: "Trigger.OnMergeContext") -> None:
        """Called when windows were merged into ``window``."""

    @abc.abstractmethod
    def clear(self, window: W, ctx: "Trigger.TriggerContext") -> None:
        """Drop the trigger's timers and state of ``window`` (the window is being removed)."""


class _Min(ReduceFunction):
    def reduce(self, value1: int, value2: int) -> int:
        return min(value1, value2)


class _Sum(ReduceFunction):
    def reduce(self, value1: int, value2: int) -> int:
        return value1 + value2


class EventTimeTrigger(Trigger[Any, "TimeWindow"]):
    """Fires once the watermark passes the end of the window (the default of event-time assigners)."""

    def on_element(self, element: Any, timestamp: int, window: TimeWindow, ctx: Trigger.TriggerContext) -> TriggerResult:
        if window.max_timestamp() <= ctx.get_current_watermark():
            return TriggerResult.FIRE  # late but allowed: fire at once
        ctx.register_event_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: TimeWindow, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: TimeWindow, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.FIRE if time == window.max_timestamp() else TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: TimeWindow, ctx: Trigger.OnMergeContext) -> None:
        # A merged window whose end the watermark already passed fires on its next element instead.
        if window.max_timestamp() > ctx.get_current_watermark():
            ctx.register_event_time_timer(window.max_timestamp())

    def clear(self, window: TimeWindow, ctx: Trigger.TriggerContext) -> None:
        ctx.delete_event_time_timer(window.max_timestamp())

    @staticmethod
    def create() -> "EventTimeTrigger":
        return EventTimeTrigger()

    def __repr__(self) -> str:
        return "EventTimeTrigger()"


class ProcessingTimeTrigger(Trigger[Any, "TimeWindow"]):
    """Fires once the clock passes the end of the window (the default of processing-time assigners)."""

    def on_element(self, element: Any, timestamp: int, window: TimeWindow, ctx: Trigger.TriggerContext) -> TriggerResult:
        ctx.register_processing_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: TimeWindow, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.FIRE

    def on_event_time(self, time: int, window: TimeWindow, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: TimeWindow, ctx: Trigger.OnMergeContext) -> None:
        if window.max_timestamp() > ctx.get_current_processing_time():
            ctx.register_processing_time_timer(window.max_timestamp())

    def clear(self, window: TimeWindow, ctx: Trigger.TriggerContext) -> None:
        ctx.delete_processing_time_timer(window.max_timestamp())

    @staticmethod
    def create() -> "ProcessingTimeTrigger":
        return ProcessingTimeTrigger()

    def __repr__(self) -> str:
        return "ProcessingTimeTrigger()"


def _interval(interval: Any, what: str) -> int:
    millis = _millis(interval, what)
    if millis <= 0:
        raise ValueError(f"{what} must be positive, got {millis} ms")
    return millis


class _ContinuousTrigger(Trigger[Any, "TimeWindow"]):
    """Fires every ``interval`` within the window, in one time domain. The next fire time is kept
    in a reducing state ``"fire-time"`` (minimum) of the window, capped at its max timestamp."""

    def __init__(self, interval: int) -> None:
        self.interval = interval
        self.state_desc = ReducingStateDescriptor("fire-time", _Min(), Types.LONG())

    @classmethod
    def of(cls, interval: Any) -> Any:
        return cls(_interval(interval, f"{cls.__name__} interval"))

    # The time domain's timers: event time or processing time.
    @abc.abstractmethod
    def _register(self, ctx: Trigger.TriggerContext, time: int) -> None: ...

    @abc.abstractmethod
    def _delete(self, ctx: Trigger.TriggerContext, time: int) -> None: ...

    def _fire_on(self, time: int, ctx: Trigger.TriggerContext, window: TimeWindow) -> TriggerResult:
        """A timer of this domain at ``time``: fire, and set the next one, if it is the fire time."""
        fire_time: ReducingState = ctx.get_partitioned_state(self.state_desc)  # type: ignore[assignment]
        next_fire = fire_time.get()
        if next_fire is not None and next_fire == time:
            fire_time.clear()
            self._register_next(time, window, ctx, fire_time)
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def _start(self, time: int, window: TimeWindow, ctx: Trigger.TriggerContext) -> None:
        """The first fire time: ``time`` rounded down to the interval (Java's remainder) plus it."""
        fire_time: ReducingState = ctx.get_partitioned_state(self.state_desc)  # type: ignore[assignment]
        if fire_time.get() is None:
            self._register_next(time - _java_rem(time, self.interval), window, ctx, fire_time)

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: TimeWindow, ctx: Trigger.OnMergeContext) -> None:
        ctx.merge_partitioned_state(self.state_desc)
        next_fire = ctx.get_partitioned_state(self.state_desc).get()  # type: ignore[attr-defined]
        if next_fire is not None:
            self._register(ctx, next_fire)

    def clear(self, window: TimeWindow, ctx: Trigger.TriggerContext) -> None:
        fire_time: ReducingState = ctx.get_partitioned_state(self.state_desc)  # type: ignore[assignment]
        next_fire = fire_time.get()
        if next_fire is not None:
            self._delete(ctx, next_fire)
            fire_time.clear()

    def _register_next(self, time: int, window: TimeWindow, ctx: Trigger.TriggerContext, state: ReducingState) -> None:
        next_fire = min(time + self.interval, window.max_timestamp())
        state.add(next_fire)
        self._register(ctx, next_fire)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.interval})"


class ContinuousEventTimeTrigger(_ContinuousTrigger):
    """Fires every ``interval`` of event time within the window, and at its end; the first fire
    time comes from the element's timestamp."""

    def _register(self, ctx: Trigger.TriggerContext, time: int) -> None:
        ctx.register_event_time_timer(time)

    def _delete(self, ctx: Trigger.TriggerContext, time: int) -> None:
        ctx.delete_event_time_timer(time)

    def on_element(self, element: Any, timestamp: int, window: TimeWindow, ctx: Trigger.TriggerContext) -> TriggerResult:
        if window.max_timestamp() <= ctx.get_current_watermark():
            return TriggerResult.FIRE
        ctx.register_event_time_timer(window.max_timestamp())
        self._start(timestamp, window, ctx)
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: TimeWindow, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: TimeWindow, ctx: Trigger.TriggerContext) -> TriggerResult:
        if time == window.max_timestamp():
            return TriggerResult.FIRE
        return self._fire_on(time, ctx, window)


class ContinuousProcessingTimeTrigger(_ContinuousTrigger):
    """Fires every ``interval`` of processing time within the window (the clock of the machine)."""

    def _register(self, ctx: Trigger.TriggerContext, time: int) -> None:
        ctx.register_processing_time_timer(time)

    def _delete(self, ctx: Trigger.TriggerContext, time: int) -> None:
        ctx.delete_processing_time_timer(time)

    def on_element(self, element: Any, timestamp: int, window: TimeWindow, ctx: Trigger.TriggerContext) -> TriggerResult:
        self._start(ctx.get_current_processing_time(), window, ctx)
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: TimeWindow, ctx: Trigger.TriggerContext) -> TriggerResult:
        return self._fire_on(time, ctx, window)

    def on_event_time(self, time: int, window: TimeWindow, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE


class PurgingTrigger(Trigger[Any, "Window"]):
    """Wraps a trigger and turns each of its fires into FIRE_AND_PURGE."""

    def __init__(self, nested_trigger: Trigger) -> None:
        if not isinstance(nested_trigger, Trigger):
            raise TypeError(f"PurgingTrigger.of needs a Trigger, got {type(nested_trigger).__name__}")
        self.nested_trigger = nested_trigger

    @staticmethod
    def of(nested_trigger: Trigger) -> "PurgingTrigger":
        return PurgingTrigger(nested_trigger)

    @staticmethod
    def _purging(result: TriggerResult) -> TriggerResult:
        return TriggerResult.FIRE_AND_PURGE if result.is_fire() else result

    def on_element(self, element: Any, timestamp: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        return self._purging(self.nested_trigger.on_element(element, timestamp, window, ctx))

    def on_event_time(self, time: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        return self._purging(self.nested_trigger.on_event_time(time, window, ctx))

    def on_processing_time(self, time: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        return self._purging(self.nested_trigger.on_processing_time(time, window, ctx))

    def clear(self, window: Window, ctx: Trigger.TriggerContext) -> None:
        self.nested_trigger.clear(window, ctx)

    def can_merge(self) -> bool:
        return self.nested_trigger.can_merge()

    def on_merge(self, window: Window, ctx: Trigger.OnMergeContext) -> None:
        self.nested_trigger.on_merge(window, ctx)

    def __repr__(self) -> str:
        return f"PurgingTrigger({self.nested_trigger!r})"


class CountTrigger(Trigger[Any, "Window"]):
    """Fires when the pane holds ``window_size`` elements since its last fire (count in state ``"count"``)."""

    def __init__(self, window_size: int) -> None:
        if isinstance(window_size, bool) or not isinstance(window_size, int):
            raise TypeError(f"CountTrigger.of needs an int count, got {type(window_size).__name__} {window_size!r}")
        self._window_size = window_size
        self._count_state_descriptor = ReducingStateDescriptor("count", _Sum(), Types.LONG())

    @staticmethod
    def of(window_size: int) -> "CountTrigger":
        return CountTrigger(window_size)

    def on_element(self, element: Any, timestamp: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        count: ReducingState = ctx.get_partitioned_state(self._count_state_descriptor)  # type: ignore[assignment]
        count.add(1)
        if count.get() >= self._window_size:
            count.clear()
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Window, ctx: Trigger.OnMergeContext) -> None:
        ctx.merge_partitioned_state(self._count_state_descriptor)

    def clear(self, window: Window, ctx: Trigger.TriggerContext) -> None:
        ctx.get_partitioned_state(self._count_state_descriptor).clear()

    def __repr__(self) -> str:
        return f"CountTrigger({self._window_size})"


class NeverTrigger(Trigger[Any, "GlobalWindow"]):
    """Never fires: the default trigger of :class:`GlobalWindows` (give it another with ``.trigger``)."""

    def on_element(self, element: Any, timestamp: int, window: GlobalWindow, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: GlobalWindow, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: GlobalWindow, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_merge(self, window: GlobalWindow, ctx: Trigger.OnMergeContext) -> None:
        return None

    def clear(self, window: GlobalWindow, ctx: Trigger.TriggerContext) -> None:
        return None

    def __repr__(self) -> str:
        return "NeverTrigger()"
