"""Keyed state: descriptors and state interfaces with PyFlink's names.

A descriptor names a state and its type; ``RuntimeContext.get_state(descriptor)`` (and the list,
map, reducing and aggregating variants) returns a handle scoped to the current key.
``descriptor.enable_time_to_live(StateTtlConfig...)`` makes the state expire (Flink's state TTL).
"""
from __future__ import annotations

import abc
from enum import Enum
from typing import Any, Generic, Iterable, Iterator, TypeVar

from millstream.common.time import Duration
from millstream.common.typeinfo import TypeInformation, Types
from millstream.datastream.functions import AggregateFunction, ReduceFunction, as_reduce_function

__all__ = [
    "ValueStateDescriptor", "ValueState", "ListStateDescriptor", "ListState", "MapStateDescriptor", "MapState",
    "ReducingStateDescriptor", "ReducingState", "AggregatingStateDescriptor", "AggregatingState",
    "ReadOnlyBroadcastState", "BroadcastState", "StateTtlConfig", "OperatorStateStore",
]

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")


class StateDescriptor(abc.ABC):
    def __init__(self, name: str, type_info: TypeInformation | None = None) -> None:
        if not name:
            raise ValueError("A state descriptor needs a non-empty name")
        self.name = name
        self.type_info = type_info
        self._ttl_config: StateTtlConfig | None = None

    def get_name(self) -> str:
        return self.name

    def enable_time_to_live(self, ttl_config: "StateTtlConfig") -> None:
        """Makes the state expire as ``ttl_config`` says (PyFlink's name; Flink's ``enableTimeToLive``).

        Call it before the state is first requested from the runtime context: the state is created
        with or without TTL then, and a state written with TTL cannot be read without it (nor the
        other way round, also after a restore), as in Flink.
        """
        if isinstance(ttl_config, StateTtlConfig.Builder):
            raise TypeError("enable_time_to_live needs a StateTtlConfig, got its Builder: call .build() on it")
        if not isinstance(ttl_config, StateTtlConfig):
            raise TypeError(
                f"enable_time_to_live needs a StateTtlConfig (StateTtlConfig.new_builder(ttl)...build()), "
                f"got {type(ttl_config).__name__}"
            )
        self._ttl_config = ttl_config

    def get_ttl_config(self) -> "StateTtlConfig | None":
        """The TTL configuration given to :meth:`enable_time_to_live`, or None."""
        return self._ttl_config

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class ValueStateDescriptor(StateDescriptor):
    def __init__(self, name: str, value_type_info: TypeInformation | None = None) -> None:
        super().__init__(name, value_type_info)


class ListStateDescriptor(StateDescriptor):
    """``type_info`` is the list's type, ``Types.LIST(elem_type_info)``, as in PyFlink."""

    def __init__(self, name: str, elem_type_info: TypeInformation | None = None) -> None:
        super().__init__(name, None if elem_type_info is None else Types.LIST(elem_type_info))
        self.elem_type_info = elem_type_info


class MapStateDescriptor(StateDescriptor):
    """``type_info`` is the map's type, ``Types.MAP(key_type_info, value_type_info)``, as in PyFlink."""

    def __init__(
        self, name: str, key_type_info: TypeInformation | None = None, value_type_info: TypeInformation | None = None
    ) -> None:
        both = key_type_info is not None or value_type_info is not None
        super().__init__(name, Types.MAP(key_type_info, value_type_info) if both else None)
        self.key_type_info = key_type_info
        self.value_type_info = value_type_info


class ReducingStateDescriptor(StateDescriptor):
    def __init__(self, name: str, reduce_function: Any, type_info: TypeInformation | None = None) -> None:
        super().__init__(name, type_info)
        self.reduce_function: ReduceFunction = as_reduce_function(reduce_function)

    def get_reduce_function(self) -> ReduceFunction:
        return self.reduce_function


class AggregatingStateDescriptor(StateDescriptor):
    def __init__(self, name: str, agg_function: AggregateFunction, state_type_info: TypeInformation | None = None) -> None:
        super().__init__(name, state_type_info)
        if not isinstance(agg_function, AggregateFunction):
            raise TypeError(f"AggregatingStateDescriptor {name!r} needs an AggregateFunction")
        self.agg_function = agg_function

    def get_agg_function(self) -> AggregateFunction:
        return self.agg_function


class OperatorStateStore(abc.ABC):
    """Operator (non-keyed) state of one operator instance; as in PyFlink, only broadcast state."""

    @abc.abstractmethod
    def get_broadcast_state(self, state_descriptor: MapStateDescriptor) -> "BroadcastState[Any, Any]":
        """The writable broadcast state that ``state_descriptor`` names."""


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


class MergingState(AppendingState[T, V]):
    """An appending state whose values of two namespaces (windows) can be merged."""


class ListState(MergingState[T, Iterable[T]]):
    @abc.abstractmethod
    def update(self, values: list[T]) -> None: ...

    @abc.abstractmethod
    def add_all(self, values: list[T]) -> None: ...

    def __iter__(self) -> Iterator[T]:
        return iter(self.get())


class ReducingState(MergingState[T, T]):
    pass


class AggregatingState(MergingState[T, V]):
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

    # Item syntax as PyFlink defines it: ``m[k]`` is ``get(k)`` (None for a missing key, no
    # KeyError), ``del m[k]`` is ``remove(k)`` (no error for a missing key).
    def __getitem__(self, key: K) -> V | None:
        return self.get(key)

    def __setitem__(self, key: K, value: V) -> None:
        self.put(key, value)

    def __delitem__(self, key: K) -> None:
        self.remove(key)

    def __contains__(self, key: K) -> bool:
        return self.contains(key)

    def __iter__(self) -> Iterator[K]:
        return iter(self.keys())


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

    def __getitem__(self, key: K) -> V | None:
        return self.get(key)

    def __contains__(self, key: K) -> bool:
        return self.contains(key)

    def __iter__(self) -> Iterator[K]:
        return iter(self.keys())


class BroadcastState(ReadOnlyBroadcastState[K, V]):
    """Broadcast state as the broadcast side sees it: a map it may change, the same way on every
    parallel instance (it must depend on the broadcast records only)."""

    @abc.abstractmethod
    def put(self, key: K, value: V) -> None: ...

    @abc.abstractmethod
    def put_all(self, dict_value: dict[K, V]) -> None: ...

    @abc.abstractmethod
    def remove(self, key: K) -> None: ...

    def __setitem__(self, key: K, value: V) -> None:
        self.put(key, value)

    def __delitem__(self, key: K) -> None:
        self.remove(key)


# -- state time-to-live ----------------------------------------------------------------------------


def _ttl_millis(ttl: Any, what: str) -> int:
    if not isinstance(ttl, Duration):
        raise TypeError(f"{what} must be a Duration (e.g. Time.seconds(10)), got {type(ttl).__name__}")
    return ttl.to_milliseconds()


class StateTtlConfig:
    """Time-to-live of a keyed state (Flink's ``StateTtlConfig``), built with
    ``StateTtlConfig.new_builder(Time.seconds(10))...build()`` and given to
    ``StateDescriptor.enable_time_to_live``.

    A value (a list element, a map entry) expires ``ttl`` after its last access timestamp, which is
    set on creation and every write and, with ``OnReadAndWrite``, on every read. Time is processing
    time. Expired values are removed when read, by incremental cleanup (a few entries checked per
    state access, or per record), and left out of checkpoints with ``cleanup_full_snapshot``.
    ``cleanup_in_rocksdb_compact_filter`` (on by default with cleanup in background, as Flink's) acts
    on the RocksDB backend only: a sweep over the state's rows, driven by the records processed,
    deletes expired entries and compacts them out of the files (the binding has no compaction
    filter hook); on the heap backend it has no effect, as in Flink.
    """

    class UpdateType(Enum):
        """When the last access timestamp, which prolongs the TTL, is updated."""

        Disabled = 0  # no TTL: the state never expires
        OnCreateAndWrite = 1  # on creation and every write
        OnReadAndWrite = 2  # also on every read

    class StateVisibility(Enum):
        """Whether an expired value that is still stored may be returned."""

        ReturnExpiredIfNotCleanedUp = 0
        NeverReturnExpired = 1

    class TtlTimeCharacteristic(Enum):
        """The time TTL is measured in: processing time only, as in Flink."""

        ProcessingTime = 0

    def __init__(
        self,
        update_type: "StateTtlConfig.UpdateType",
        state_visibility: "StateTtlConfig.StateVisibility",
        ttl_time_characteristic: "StateTtlConfig.TtlTimeCharacteristic",
        ttl: Duration,
        cleanup_strategies: "StateTtlConfig.CleanupStrategies",
    ) -> None:
        if not isinstance(update_type, StateTtlConfig.UpdateType):
            raise TypeError(f"update_type must be a StateTtlConfig.UpdateType, got {update_type!r}")
        if not isinstance(state_visibility, StateTtlConfig.StateVisibility):
            raise TypeError(f"state_visibility must be a StateTtlConfig.StateVisibility, got {state_visibility!r}")
        if not isinstance(ttl_time_characteristic, StateTtlConfig.TtlTimeCharacteristic):
            raise TypeError(
                f"ttl_time_characteristic must be a StateTtlConfig.TtlTimeCharacteristic, got {ttl_time_characteristic!r}"
            )
        if _ttl_millis(ttl, "The state TTL") <= 0:
            raise ValueError(f"The state TTL must be positive, got {ttl.to_milliseconds()} ms")
        self._update_type = update_type
        self._state_visibility = state_visibility
        self._ttl_time_characteristic = ttl_time_characteristic
        self._ttl = ttl
        self._cleanup_strategies = cleanup_strategies

    @staticmethod
    def new_builder(ttl: Duration) -> "StateTtlConfig.Builder":
        return StateTtlConfig.Builder(ttl)

    def get_update_type(self) -> "StateTtlConfig.UpdateType":
        return self._update_type

    def get_state_visibility(self) -> "StateTtlConfig.StateVisibility":
        return self._state_visibility

    def get_ttl(self) -> Duration:
        return self._ttl

    def get_ttl_time_characteristic(self) -> "StateTtlConfig.TtlTimeCharacteristic":
        return self._ttl_time_characteristic

    def is_enabled(self) -> bool:
        return self._update_type is not StateTtlConfig.UpdateType.Disabled

    def get_cleanup_strategies(self) -> "StateTtlConfig.CleanupStrategies":
        return self._cleanup_strategies

    def __repr__(self) -> str:
        return (
            f"StateTtlConfig<update_type={self._update_type}, state_visibility={self._state_visibility}, "
            f"ttl_time_characteristic={self._ttl_time_characteristic}, ttl={self._ttl}>"
        )

    class Builder:
        """Builds a :class:`StateTtlConfig`; defaults as Flink's: OnCreateAndWrite,
        NeverReturnExpired, processing time, cleanup in background."""

        def __init__(self, ttl: Duration) -> None:
            self._ttl = ttl
            self._update_type = StateTtlConfig.UpdateType.OnCreateAndWrite
            self._state_visibility = StateTtlConfig.StateVisibility.NeverReturnExpired
            self._ttl_time_characteristic = StateTtlConfig.TtlTimeCharacteristic.ProcessingTime
            self._is_cleanup_in_background = True
            self._strategies: dict[StateTtlConfig.CleanupStrategies.Strategies, StateTtlConfig.CleanupStrategies.CleanupStrategy] = {}

        def set_update_type(self, update_type: "StateTtlConfig.UpdateType") -> "StateTtlConfig.Builder":
            self._update_type = update_type
            return self

        def update_ttl_on_create_and_write(self) -> "StateTtlConfig.Builder":
            return self.set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite)

        def update_ttl_on_read_and_write(self) -> "StateTtlConfig.Builder":
            return self.set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite)

        def set_state_visibility(self, state_visibility: "StateTtlConfig.StateVisibility") -> "StateTtlConfig.Builder":
            self._state_visibility = state_visibility
            return self

        def return_expired_if_not_cleaned_up(self) -> "StateTtlConfig.Builder":
            return self.set_state_visibility(StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp)

        def never_return_expired(self) -> "StateTtlConfig.Builder":
            return self.set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired)

        def set_ttl_time_characteristic(
            self, ttl_time_characteristic: "StateTtlConfig.TtlTimeCharacteristic"
        ) -> "StateTtlConfig.Builder":
            self._ttl_time_characteristic = ttl_time_characteristic
            return self

        def use_processing_time(self) -> "StateTtlConfig.Builder":
            return self.set_ttl_time_characteristic(StateTtlConfig.TtlTimeCharacteristic.ProcessingTime)

        def cleanup_full_snapshot(self) -> "StateTtlConfig.Builder":
            """Leaves expired entries out of every checkpoint (the running state keeps them until
            they are read or cleaned up incrementally)."""
            S = StateTtlConfig.CleanupStrategies
            self._strategies[S.Strategies.FULL_STATE_SCAN_SNAPSHOT] = S.EMPTY_STRATEGY
            return self

        def cleanup_incrementally(self, cleanup_size: int, run_cleanup_for_every_record: bool) -> "StateTtlConfig.Builder":
            """On every access to the state, checks up to ``cleanup_size`` of its entries (a lazy
            walk over all keys that starts again at the end) and removes the expired ones; with
            ``run_cleanup_for_every_record`` also once per record the operator processes."""
            S = StateTtlConfig.CleanupStrategies
            self._strategies[S.Strategies.INCREMENTAL_CLEANUP] = S.IncrementalCleanupStrategy(
                cleanup_size, run_cleanup_for_every_record)
            return self

        def cleanup_in_rocksdb_compact_filter(
            self, query_time_after_num_entries: int, periodic_compaction_time: Duration | None = None
        ) -> "StateTtlConfig.Builder":
            """Accepted for PyFlink programs; no effect: Millstream's keyed state lives on the heap,
            where Flink ignores this strategy too."""
            S = StateTtlConfig.CleanupStrategies
            self._strategies[S.Strategies.ROCKSDB_COMPACTION_FILTER] = S.RocksdbCompactFilterCleanupStrategy(
                query_time_after_num_entries, periodic_compaction_time)
            return self

        def disable_cleanup_in_background(self) -> "StateTtlConfig.Builder":
            """Turns off the default background cleanup (incremental, 5 entries per access); a
            cleanup configured explicitly stays on."""
            self._is_cleanup_in_background = False
            return self

        def set_ttl(self, ttl: Duration) -> "StateTtlConfig.Builder":
            self._ttl = ttl
            return self

        def build(self) -> "StateTtlConfig":
            return StateTtlConfig(
                self._update_type,
                self._state_visibility,
                self._ttl_time_characteristic,
                self._ttl,
                StateTtlConfig.CleanupStrategies(dict(self._strategies), self._is_cleanup_in_background),
            )

    class CleanupStrategies:
        """When expired state is cleaned up, besides on an explicit read that finds it expired."""

        class Strategies(Enum):
            FULL_STATE_SCAN_SNAPSHOT = 0
            INCREMENTAL_CLEANUP = 1
            ROCKSDB_COMPACTION_FILTER = 2

        class CleanupStrategy(abc.ABC):  # noqa: B024 - a marker base, as in PyFlink
            """Base of the strategies' configurations."""

        class EmptyCleanupStrategy(CleanupStrategy):
            pass

        class IncrementalCleanupStrategy(CleanupStrategy):
            def __init__(self, cleanup_size: int, run_cleanup_for_every_record: bool) -> None:
                if isinstance(cleanup_size, bool) or not isinstance(cleanup_size, int) or cleanup_size < 0:
                    raise ValueError(
                        f"cleanup_incrementally: cleanup_size must be an int >= 0 (entries checked per state "
                        f"access), got {cleanup_size!r}"
                    )
                self._cleanup_size = cleanup_size
                self._run_cleanup_for_every_record = bool(run_cleanup_for_every_record)

            def get_cleanup_size(self) -> int:
                return self._cleanup_size

            def run_cleanup_for_every_record(self) -> bool:
                return self._run_cleanup_for_every_record

        class RocksdbCompactFilterCleanupStrategy(CleanupStrategy):
            def __init__(self, query_time_after_num_entries: int, periodic_compaction_time: Duration | None = None) -> None:
                if isinstance(query_time_after_num_entries, bool) or not isinstance(query_time_after_num_entries, int):
                    raise TypeError(
                        f"cleanup_in_rocksdb_compact_filter: query_time_after_num_entries must be an int, "
                        f"got {query_time_after_num_entries!r}"
                    )
                if periodic_compaction_time is None:
                    periodic_compaction_time = Duration.of_days(30)
                _ttl_millis(periodic_compaction_time, "periodic_compaction_time")
                self._query_time_after_num_entries = query_time_after_num_entries
                self._periodic_compaction_time = periodic_compaction_time

            def get_query_time_after_num_entries(self) -> int:
                return self._query_time_after_num_entries

            def get_periodic_compaction_time(self) -> Duration:
                return self._periodic_compaction_time

        EMPTY_STRATEGY = EmptyCleanupStrategy()

        def __init__(self, strategies: "dict[Any, Any]", is_cleanup_in_background: bool) -> None:
            self._strategies = strategies
            self._is_cleanup_in_background = is_cleanup_in_background

        def is_cleanup_in_background(self) -> bool:
            return self._is_cleanup_in_background

        def in_full_snapshot(self) -> bool:
            return StateTtlConfig.CleanupStrategies.Strategies.FULL_STATE_SCAN_SNAPSHOT in self._strategies

        def get_incremental_cleanup_strategy(self) -> "StateTtlConfig.CleanupStrategies.IncrementalCleanupStrategy | None":
            """The configured one; else, with cleanup in background, Flink's default (5 entries per
            access, not per record); else None."""
            S = StateTtlConfig.CleanupStrategies
            default = S.IncrementalCleanupStrategy(5, False) if self._is_cleanup_in_background else None
            return self._strategies.get(S.Strategies.INCREMENTAL_CLEANUP, default)

        def get_rocksdb_compact_filter_cleanup_strategy(
            self,
        ) -> "StateTtlConfig.CleanupStrategies.RocksdbCompactFilterCleanupStrategy | None":
            S = StateTtlConfig.CleanupStrategies
            default = S.RocksdbCompactFilterCleanupStrategy(1000) if self._is_cleanup_in_background else None
            return self._strategies.get(S.Strategies.ROCKSDB_COMPACTION_FILTER, default)
