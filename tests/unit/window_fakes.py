"""In-memory fakes of the window operator's contexts, for unit tests of triggers, assigners and evictors.

They implement the protocols of ``millstream.datastream.window`` the way Flink's WindowOperator
does: timers are (time, window) pairs, trigger state is scoped to the current window, and
``merge_partitioned_state`` folds the merged windows' reducing state into the result window.
"""
from __future__ import annotations

from typing import Any

from millstream.datastream.evictors import Evictor
from millstream.datastream.state import ReducingStateDescriptor, ValueStateDescriptor
from millstream.datastream.window import Trigger, WindowAssigner


class FakeReducingState:
    """A reducing state of one (window, descriptor) slot of the shared store."""

    def __init__(self, store: dict, slot: tuple, descriptor: ReducingStateDescriptor) -> None:
        self._store, self._slot, self._reduce = store, slot, descriptor.reduce_function.reduce

    def get(self) -> Any:
        return self._store.get(self._slot)

    def add(self, value: Any) -> None:
        current = self._store.get(self._slot)
        self._store[self._slot] = value if current is None else self._reduce(current, value)

    def clear(self) -> None:
        self._store.pop(self._slot, None)


class FakeTriggerContext(Trigger.OnMergeContext):
    """One key's trigger context: the window is set per call (``ctx.window = w``), as the operator does."""

    def __init__(self, watermark: int = -(2**63), processing_time: int = 0) -> None:
        self.watermark = watermark
        self.processing_time = processing_time
        self.event_timers: set[tuple[int, Any]] = set()
        self.processing_timers: set[tuple[int, Any]] = set()
        self.store: dict[tuple, Any] = {}
        self.window: Any = None
        self.merged_windows: list[Any] = []

    def get_current_processing_time(self) -> int:
        return self.processing_time

    def get_current_watermark(self) -> int:
        return self.watermark

    def register_processing_time_timer(self, time: int) -> None:
        self.processing_timers.add((time, self.window))

    def register_event_time_timer(self, time: int) -> None:
        self.event_timers.add((time, self.window))

    def delete_processing_time_timer(self, time: int) -> None:
        self.processing_timers.discard((time, self.window))

    def delete_event_time_timer(self, time: int) -> None:
        self.event_timers.discard((time, self.window))

    def get_partitioned_state(self, state_descriptor: Any) -> FakeReducingState:
        if not isinstance(state_descriptor, ReducingStateDescriptor):
            raise TypeError(f"the fake only holds reducing state, got {state_descriptor!r}")
        return FakeReducingState(self.store, (self.window, state_descriptor.name), state_descriptor)

    def merge_partitioned_state(self, state_descriptor: Any) -> None:
        target = self.get_partitioned_state(state_descriptor)
        for window in self.merged_windows:
            slot = (window, state_descriptor.name)
            if slot in self.store:
                target.add(self.store.pop(slot))

    # -- helpers of the tests --

    def state_of(self, window: Any, name: str) -> Any:
        return self.store.get((window, name))

    def event_timers_of(self, window: Any) -> list[int]:
        return sorted(t for t, w in self.event_timers if w == window)

    def processing_timers_of(self, window: Any) -> list[int]:
        return sorted(t for t, w in self.processing_timers if w == window)


class FakeValueState:
    def __init__(self, store: dict, slot: tuple) -> None:
        self._store, self._slot = store, slot

    def value(self) -> Any:
        return self._store.get(self._slot)

    def update(self, value: Any) -> None:
        self._store[self._slot] = value


class FakeRuntimeContext:
    """Keyed value state of the current key (``ctx.key = k``)."""

    def __init__(self) -> None:
        self.key: Any = None
        self.store: dict = {}

    def get_state(self, descriptor: ValueStateDescriptor) -> FakeValueState:
        return FakeValueState(self.store, (self.key, descriptor.name))


class FakeAssignerContext(WindowAssigner.WindowAssignerContext):
    def __init__(self, processing_time: int = 0) -> None:
        self.processing_time = processing_time
        self.runtime_context = FakeRuntimeContext()

    def get_current_processing_time(self) -> int:
        return self.processing_time

    def get_runtime_context(self) -> Any:
        return self.runtime_context


class FakeEvictorContext(Evictor.EvictorContext):
    def get_current_processing_time(self) -> int:
        return 0

    def get_current_watermark(self) -> int:
        return 0
