"""Broadcast state: operator state that is the same map on every parallel instance (Flink's
``HeapBroadcastState`` in the operator state backend, mode BROADCAST).

One map per ``MapStateDescriptor`` given to ``DataStream.broadcast(...)``, by descriptor name. The
broadcast side gets a writable handle, the other side a read-only view of the same map. Snapshots
hold every map whole; on restore, at any parallelism, every instance takes one copy.
"""
from __future__ import annotations

from typing import Any, Iterator, Mapping, Sequence

from millstream.datastream import state as api

__all__ = ["BroadcastStates", "HeapBroadcastState", "ReadOnlyBroadcastStateView"]


class HeapBroadcastState(api.BroadcastState[Any, Any]):
    def __init__(self, name: str) -> None:
        self.name = name
        self.map: dict[Any, Any] = {}

    def get(self, key: Any) -> Any:
        return self.map.get(key)

    def contains(self, key: Any) -> bool:
        return key in self.map

    def items(self) -> Iterator[tuple[Any, Any]]:
        return iter(list(self.map.items()))  # a copy: the function may change the state while iterating

    def keys(self) -> Iterator[Any]:
        return iter(list(self.map))

    def values(self) -> Iterator[Any]:
        return iter(list(self.map.values()))

    def is_empty(self) -> bool:
        return not self.map

    def __iter__(self) -> Iterator[Any]:
        return self.keys()

    def put(self, key: Any, value: Any) -> None:
        self.map[key] = value

    def put_all(self, dict_value: dict[Any, Any]) -> None:
        self.map.update(dict_value)

    def remove(self, key: Any) -> None:
        self.map.pop(key, None)

    def clear(self) -> None:
        self.map.clear()

    def __repr__(self) -> str:
        return f"BroadcastState({self.name!r}, {len(self.map)} entries)"


class ReadOnlyBroadcastStateView(api.ReadOnlyBroadcastState[Any, Any]):
    """The non-broadcast side's view: reads the live map, refuses to change it."""

    def __init__(self, state: HeapBroadcastState) -> None:
        self._state = state

    def get(self, key: Any) -> Any:
        return self._state.map.get(key)

    def contains(self, key: Any) -> bool:
        return key in self._state.map

    def items(self) -> Iterator[tuple[Any, Any]]:
        return iter(self._state.map.items())

    def keys(self) -> Iterator[Any]:
        return iter(self._state.map)

    def values(self) -> Iterator[Any]:
        return iter(self._state.map.values())

    def is_empty(self) -> bool:
        return not self._state.map

    def __iter__(self) -> Iterator[Any]:
        return self.keys()

    def clear(self) -> None:
        raise RuntimeError(
            f"Broadcast state {self._state.name!r} is read-only here: only process_broadcast_element may change it."
        )


class BroadcastStates(api.OperatorStateStore):
    """The broadcast states of one operator instance, one per declared descriptor: the operator's
    state store as PyFlink's ``OperatorStateStore`` defines it (broadcast state only)."""

    def __init__(self, descriptors: Sequence[api.MapStateDescriptor], operator_name: str) -> None:
        self._operator_name = operator_name
        self._states: dict[str, HeapBroadcastState] = {}
        self._views: dict[str, ReadOnlyBroadcastStateView] = {}
        for descriptor in descriptors:
            state = self._states[descriptor.name] = HeapBroadcastState(descriptor.name)
            self._views[descriptor.name] = ReadOnlyBroadcastStateView(state)

    def _check(self, descriptor: Any) -> str:
        if not isinstance(descriptor, api.MapStateDescriptor):
            raise TypeError(f"get_broadcast_state needs a MapStateDescriptor, got {type(descriptor).__name__}")
        if descriptor.name not in self._states:
            raise ValueError(
                f"Operator '{self._operator_name}': the requested broadcast state {descriptor.name!r} does not "
                f"exist (declared: {sorted(self._states)}). Check for typos in your state descriptor, or give the "
                "descriptor to datastream.broadcast(...) if you forgot to register it."
            )
        return descriptor.name

    def writable(self, descriptor: Any) -> HeapBroadcastState:
        return self._states[self._check(descriptor)]

    def get_broadcast_state(self, state_descriptor: api.MapStateDescriptor) -> HeapBroadcastState:
        return self.writable(state_descriptor)

    def read_only(self, descriptor: Any) -> ReadOnlyBroadcastStateView:
        return self._views[self._check(descriptor)]

    def snapshot(self) -> dict[str, dict[Any, Any]] | None:
        """Every map, copied (the snapshot must not change with later records); None when all are empty."""
        if all(not s.map for s in self._states.values()):
            return None
        return {name: dict(s.map) for name, s in self._states.items()}

    def restore(self, maps: Mapping[str, Mapping[Any, Any]]) -> None:
        """Loads the maps of one instance's snapshot; a map no descriptor declares any more is an error."""
        for name, entries in maps.items():
            state = self._states.get(name)
            if state is None:
                raise ValueError(
                    f"Operator '{self._operator_name}': the snapshot holds broadcast state {name!r}, which this "
                    f"job does not declare (declared: {sorted(self._states)})"
                )
            state.map = dict(entries)
            self._views[name] = ReadOnlyBroadcastStateView(state)
