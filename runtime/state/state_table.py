"""A keyed state's storage and the handle base class, shared by the heap backend and TTL states.

A :class:`StateTable` holds one named state as ``key_group -> {key: value}``; a handle
(:class:`_KeyedState`) reads and writes it under the backend's current key. Both
:mod:`~millstream.runtime.state.heap_backend` (plain handles, the backend) and
:mod:`~millstream.runtime.state.ttl` (TTL handles) build on them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    from millstream.runtime.state.heap_backend import KeyedStateBackend

_MISSING: Any = object()


class StateTable:
    """One named state: ``groups[key_group][key] = value``; empty groups are dropped.

    ``ttl``: the values carry TTL timestamps (see :mod:`millstream.runtime.state.ttl`); ``policy``:
    that state's TTL settings once a handle was created (a restored table has none before).
    """

    __slots__ = ("name", "kind", "groups", "ttl", "policy")

    def __init__(self, name: str, kind: str, ttl: bool = False) -> None:
        self.name = name
        self.kind = kind
        self.groups: dict[int, dict[Any, Any]] = {}
        self.ttl = ttl
        self.policy: Any = None

    def group(self, key_group: int) -> dict[Any, Any]:
        """The group's dict, created on first write."""
        d = self.groups.get(key_group)
        if d is None:
            d = self.groups[key_group] = {}
        return d

    def remove(self, key_group: int, key: Any) -> None:
        d = self.groups.get(key_group)
        if d is not None and d.pop(key, _MISSING) is not _MISSING and not d:
            del self.groups[key_group]

    def items(self) -> Iterator[tuple[int, Any, Any]]:
        """(key_group, key, value) in key-group order."""
        for kg in sorted(self.groups):
            for key, value in self.groups[kg].items():
                yield kg, key, value


def _no_key(name: str) -> RuntimeError:
    return RuntimeError(
        f"No key set for state '{name}'. Keyed state is only accessible while processing a record or a "
        "timer of a keyed stream, not in open() or close()."
    )


class _KeyedState:
    """A handle on one table, scoped to the backend's current key."""

    def __init__(self, backend: "KeyedStateBackend", table: StateTable) -> None:
        self._backend = backend
        self._table = table
        self._groups = table.groups

    def _read(self) -> Any:
        b = self._backend
        kg = b.current_key_group
        if kg < 0:
            raise _no_key(self._table.name)
        d = self._groups.get(kg)
        return _MISSING if d is None else d.get(b.current_key, _MISSING)

    def _write(self, value: Any) -> None:
        b = self._backend
        kg = b.current_key_group
        if kg < 0:
            raise _no_key(self._table.name)
        d = self._groups.get(kg)
        if d is None:
            d = self._groups[kg] = {}
        d[b.current_key] = value

    def clear(self) -> None:
        b = self._backend
        if b.current_key_group < 0:
            raise _no_key(self._table.name)
        self._table.remove(b.current_key_group, b.current_key)
