"""Keyed state: descriptors and state interfaces with PyFlink's names.

A descriptor names a state and its type; ``RuntimeContext.get_state(descriptor)`` (and the list,
map, reducing and aggregating variants) returns a handle scoped to the current key.
"""
from __future__ import annotations

import abc
from typing import Any, Generic, Iterable, Iterator, TypeVar

from millstream.common.typeinfo import TypeInformation
from millstream.datastream.functions import AggregateFunction, ReduceFunction, as_reduce_function

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")


class StateDescriptor(abc.ABC):
    def __init__(self, name: str, type_info: TypeInformation | None = None) -> None:
        if not name:
            raise ValueError("A state descriptor needs a non-empty name")
        self.name = name
        self.type_info = type_info

    def get_name(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class ValueStateDescriptor(StateDescriptor):
    def __init__(self, name: str, value_type_info: TypeInformation | None = None) -> None:
        super().__init__(name, value_type_info)


class ListStateDescriptor(StateDescriptor):
    def __init__(self, name: str, elem_type_info: TypeInformation | None = None) -> None:
        super().__init__(name, elem_type_info)


class MapStateDescriptor(StateDescriptor):
    def __init__(
        self, name: str, key_type_info: TypeInformation | None = None, value_type_info: TypeInformation | None = None
    ) -> None:
        super().__init__(name, value_type_info)
        self.key_type_info = key_type_info


class ReducingStateDescriptor(StateDescriptor):
    def __init__(self, name: str, reduce_function: Any, type_info: TypeInformation | None = None) -> None:
        super().__init__(name, type_info)
        self.reduce_function: ReduceFunction = as_reduce_function(reduce_function)


class AggregatingStateDescriptor(StateDescriptor):
    def __init__(self, name: str, agg_function: AggregateFunction, state_type_info: TypeInformation | None = None) -> None:
        super().__init__(name, state_type_info)
        if not isinstance(agg_function, AggregateFunction):
            raise TypeError(f"AggregatingStateDescriptor {name!r} needs an AggregateFunction")
        self.agg_function = agg_function


class State(abc.ABC):
    @abc.abstractmethod
    def clear(self) -> None: ...


class ValueState(State, Generic[T]):
    @abc.abstractmethod
    def value(self) -> T | None: ...

    @abc.abstractmethod
    def update(self, value: T) -> None: ...


class AppendingState(State, Generic[T, V]):
    @abc.abstractmethod
    def get(self) -> V: ...

    @abc.abstractmethod
    def add(self, value: T) -> None: ...


class ListState(AppendingState[T, Iterable[T]]):
    @abc.abstractmethod
    def update(self, values: list[T]) -> None: ...

    @abc.abstractmethod
    def add_all(self, values: list[T]) -> None: ...


class ReducingState(AppendingState[T, T]):
    pass


class AggregatingState(AppendingState[T, V]):
    pass


class MapState(State, Generic[K, V]):
    @abc.abstractmethod
    def get(self, key: K) -> V | None: ...

    @abc.abstractmethod
    def put(self, key: K, value: V) -> None: ...

    @abc.abstractmethod
    def put_all(self, dict_value: dict[K, V]) -> None: ...

    @abc.abstractmethod
    def remove(self, key: K) -> None: ...

    @abc.abstractmethod
    def contains(self, key: K) -> bool: ...

    @abc.abstractmethod
    def items(self) -> Iterator[tuple[K, V]]: ...

    @abc.abstractmethod
    def keys(self) -> Iterator[K]: ...

    @abc.abstractmethod
    def values(self) -> Iterator[V]: ...

    @abc.abstractmethod
    def is_empty(self) -> bool: ...


class ReadOnlyBroadcastState(State, Generic[K, V]):
    """Broadcast state as the non-broadcast side sees it: the same map on every parallel instance,
    readable only (changing it there would make the instances disagree)."""

    @abc.abstractmethod
    def get(self, key: K) -> V | None: ...

    @abc.abstractmethod
    def contains(self, key: K) -> bool: ...

    @abc.abstractmethod
    def items(self) -> Iterator[tuple[K, V]]: ...

    @abc.abstractmethod
    def keys(self) -> Iterator[K]: ...

    @abc.abstractmethod
    def values(self) -> Iterator[V]: ...

    @abc.abstractmethod
    def is_empty(self) -> bool: ...


class BroadcastState(ReadOnlyBroadcastState[K, V]):
    """Broadcast state as the broadcast side sees it: a map it may change, the same way on every
    parallel instance (it must depend on the broadcast records only)."""

    @abc.abstractmethod
    def put(self, key: K, value: V) -> None: ...

    @abc.abstractmethod
    def put_all(self, dict_value: dict[K, V]) -> None: ...

    @abc.abstractmethod
    def remove(self, key: K) -> None: ...
