"""Keyed state on the heap, laid out by key group (Flink's HeapKeyedStateBackend).

Every state is a :class:`StateTable`: ``key_group -> {key: value}``. A key group is the unit that
moves when a job is rescaled, so snapshots are taken and restored per key group: a restored
subtask loads exactly the groups of its :class:`KeyGroupRange`, whichever old subtasks wrote them.
Timers are keyed state too (Flink keeps them in key-group-partitioned queues), so they travel in
the same per-group snapshot.

The current key is set by the operator before user code runs; state handles read it from the
backend, so one handle serves every key. Operators on the hot path (reduce, aggregations) use
their table's ``groups`` directly instead of going through a handle. A state whose descriptor
enables TTL gets a handle of :mod:`millstream.runtime.state.ttl` instead; its table is marked
``ttl`` (values stored with their timestamps), in snapshots too.
"""
from __future__ import annotations

import heapq
import itertools
import time
from collections import OrderedDict
from typing import Any, Callable, Iterable, Iterator, Mapping, TypeVar

from millstream.datastream import state as api
from millstream.runtime.keygroups import KeyGroupAssigner, KeyGroupRange
from millstream.runtime.serialization import RecordSerializer, deserialize
from millstream.runtime.state import row_format as _row_format
from millstream.runtime.state import ttl as _ttl
from millstream.runtime.state.state_table import _MISSING, StateTable, _KeyedState

__all__ = [
    "KeyedStateBackend", "KeyGroupOutOfRangeError", "StateTable", "TimerQueue", "VALUE", "LIST", "MAP",
    "REDUCING", "AGGREGATING",
]

VALUE, LIST, MAP, REDUCING, AGGREGATING = "value", "list", "map", "reducing", "aggregating"
_KIND_NAMES = {
    VALUE: "ValueState", LIST: "ListState", MAP: "MapState", REDUCING: "ReducingState",
    AGGREGATING: "AggregatingState",
}
_SNAPSHOT_VERSION = 1
_S = TypeVar("_S")
_TEXT = frozenset({str, bytes})
_INT_ONLY = frozenset({int})
_MINUS_ONE = itertools.repeat(-1)


class KeyGroupOutOfRangeError(RuntimeError):
    """A key whose group belongs to another subtask: the key's hash differs between processes."""


class TimerQueue:
    """Timers of one time domain: deduplicated per (timestamp, key), fired in timestamp order and,
    at one timestamp, in the order they were first registered.

    Timers are bucketed by timestamp (``{timestamp: {key: key_group}}``, an insertion-ordered dict
    per timestamp) under a heap of the distinct timestamps: windows of one size end together, so a
    job's timers share few timestamps, and registering, polling and deleting one costs a dict
    operation instead of a heap push and pop among all timers with a live-set check. A timestamp
    with one timer holds it as a ``[key, key_group]`` pair instead (timers at distinct timestamps
    then take no more memory than before). A deleted timer stays in its bucket as a tombstone
    (key group None) until a poll passes it, and registering it again revives it in place: the
    order a heap of (timestamp, sequence) entries with lazily skipped stale entries gave. Snapshots
    read the timers per key group through an index built on demand (a snapshot asks for every group
    in turn) and dropped by the next change.
    """

    def __init__(self) -> None:
        self._times: list[int] = []  # heap of the timestamps with a bucket
        self._buckets: dict[int, list[Any] | OrderedDict[Any, int | None]] = {}
        self._index: dict[int, list[tuple[int, Any]]] | None = None  # key group -> its timers, by time

    def register(self, timestamp: int, key: Any, key_group: int) -> None:
        bucket = self._buckets.get(timestamp)
        if bucket is None:
            self._buckets[timestamp] = [key, key_group]
            heapq.heappush(self._times, timestamp)
        elif isinstance(bucket, list):
            if bucket[0] is key or bucket[0] == key:
                if bucket[1] is not None:
                    return  # live already
                bucket[1] = key_group  # revived
            else:
                self._buckets[timestamp] = OrderedDict(((bucket[0], bucket[1]), (key, key_group)))
        elif bucket.get(key) is not None:
            return  # live already: deduplicated, keeps its place
        else:
            bucket[key] = key_group  # new (at the end) or a tombstone revived in place
        self._index = None

    def delete(self, timestamp: int, key: Any, key_group: int) -> None:
        bucket = self._buckets.get(timestamp)
        if bucket is None:
            return
        if isinstance(bucket, list):
            if bucket[1] is not None and (bucket[0] is key or bucket[0] == key):
                bucket[1] = None
                self._index = None
        elif bucket.get(key) is not None:
            bucket[key] = None
            self._index = None

    @staticmethod
    def _items(bucket: list[Any] | OrderedDict[Any, int | None]) -> Iterable[tuple[Any, int | None]]:
        return ((bucket[0], bucket[1]),) if isinstance(bucket, list) else bucket.items()

    def peek(self) -> int | None:
        """The earliest live timestamp, or None."""
        times, buckets = self._times, self._buckets
        while times:
            ts = times[0]
            bucket = buckets.get(ts)
            if bucket is not None:
                for _, kg in self._items(bucket):
                    if kg is not None:
                        return ts
                del buckets[ts]  # tombstones only
            heapq.heappop(times)
        return None

    def poll(self, up_to: float) -> tuple[int, Any, int] | None:
        """Removes and returns the earliest live timer with timestamp <= ``up_to``, or None.

        Polling one at a time lets a timer registered while firing fire in the same round when due.
        """
        times, buckets = self._times, self._buckets
        while times and times[0] <= up_to:
            ts = times[0]
            bucket = buckets.get(ts)
            if isinstance(bucket, list):
                del buckets[ts]
                heapq.heappop(times)
                if bucket[1] is not None:
                    self._index = None
                    return ts, bucket[0], bucket[1]
                continue
            while bucket:
                key, kg = bucket.popitem(last=False)
                if kg is not None:
                    if not bucket:
                        del buckets[ts]
                        heapq.heappop(times)
                    self._index = None
                    return ts, key, kg
            if bucket is not None:
                del buckets[ts]
            heapq.heappop(times)
        return None

    def __len__(self) -> int:
        return sum(kg is not None for bucket in self._buckets.values() for _, kg in self._items(bucket))

    def _by_group(self) -> dict[int, list[tuple[int, Any]]]:
        index = self._index
        if index is None:
            index = {}
            for ts in sorted(self._buckets):
                for key, kg in self._items(self._buckets[ts]):
                    if kg is not None:
                        group = index.get(kg)
                        if group is None:
                            group = index[kg] = []
                        group.append((ts, key))
            self._index = index
        return index

    def key_groups(self) -> Iterable[int]:
        return list(self._by_group())

    def snapshot_group(self, key_group: int) -> list[tuple[int, Any]]:
        return list(self._by_group().get(key_group, ()))

    def restore_group(self, key_group: int, entries: Iterable[tuple[int, Any]]) -> None:
        for ts, key in entries:
            self.register(ts, key, key_group)


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class HeapValueState(_KeyedState, api.ValueState[Any]):
    def value(self) -> Any:
        v = self._read()
        return None if v is _MISSING else v

    def update(self, value: Any) -> None:
        if value is None:  # Flink: updating to null clears the state
            self.clear()
        else:
            self._write(value)


class HeapListState(_KeyedState, api.ListState[Any]):
    def get(self) -> list[Any]:
        v = self._read()
        return [] if v is _MISSING else list(v)  # a copy: mutating it must not change the state

    def add(self, value: Any) -> None:
        if value is None:
            raise ValueError(f"You cannot add None to ListState '{self._table.name}'.")
        v = self._read()
        if v is _MISSING:
            self._write([value])
        else:
            v.append(value)

    def add_all(self, values: list[Any]) -> None:
        values = list(values)
        if any(x is None for x in values):
            raise ValueError(f"You cannot add None to ListState '{self._table.name}'.")
        if values:
            v = self._read()
            if v is _MISSING:
                self._write(values)
            else:
                v.extend(values)

    def update(self, values: list[Any]) -> None:
        values = list(values or ())
        if any(x is None for x in values):
            raise ValueError(f"You cannot add None to ListState '{self._table.name}'.")
        if values:
            self._write(values)
        else:
            self.clear()


class HeapMapState(_KeyedState, api.MapState[Any, Any]):
    def _map(self) -> dict[Any, Any]:
        v: dict[Any, Any] = self._read()
        return {} if v is _MISSING else v

    def _map_for_write(self) -> dict[Any, Any]:
        v: dict[Any, Any] = self._read()
        if v is _MISSING:
            v = {}
            self._write(v)
        return v

    def get(self, key: Any) -> Any:
        return self._map().get(key)

    def put(self, key: Any, value: Any) -> None:
        self._map_for_write()[key] = value

    def put_all(self, dict_value: dict[Any, Any]) -> None:
        if dict_value:
            self._map_for_write().update(dict_value)

    def remove(self, key: Any) -> None:
        m = self._map()
        m.pop(key, None)
        if not m:
            self.clear()

    def contains(self, key: Any) -> bool:
        return key in self._map()

    # Iterators run over a copy so user code may modify the map while iterating (as on Flink's heap).
    def items(self) -> Iterator[tuple[Any, Any]]:
        return iter(list(self._map().items()))

    def keys(self) -> Iterator[Any]:
        return iter(list(self._map()))

    def values(self) -> Iterator[Any]:
        return iter(list(self._map().values()))

    def is_empty(self) -> bool:
        return not self._map()

    def __iter__(self) -> Iterator[Any]:
        return self.keys()


class HeapReducingState(_KeyedState, api.ReducingState[Any]):
    def __init__(self, backend: "KeyedStateBackend", table: StateTable, descriptor: api.ReducingStateDescriptor) -> None:
        super().__init__(backend, table)
        self._reduce = descriptor.reduce_function.reduce

    def get(self) -> Any:
        v = self._read()
        return None if v is _MISSING else v

    def add(self, value: Any) -> None:
        v = self._read()
        self._write(value if v is _MISSING else self._reduce(v, value))


class HeapAggregatingState(_KeyedState, api.AggregatingState[Any, Any]):
    """Stores the accumulator; ``get()`` is the function's result, None while nothing was added."""

    def __init__(
        self, backend: "KeyedStateBackend", table: StateTable, descriptor: api.AggregatingStateDescriptor
    ) -> None:
        super().__init__(backend, table)
        self._agg = descriptor.agg_function

    def get(self) -> Any:
        acc = self._read()
        return None if acc is _MISSING else self._agg.get_result(acc)

    def add(self, value: Any) -> None:
        acc = self._read()
        if acc is _MISSING:
            acc = self._agg.create_accumulator()
        self._write(self._agg.add(value, acc))


def _unexpired_entries(table: StateTable, entries: dict[Any, Any], now: int) -> dict[Any, Any]:
    """One key group's {key: stored value} of a TTL state without its expired parts."""
    out = {}
    for key, stored in entries.items():
        live = _ttl.unexpired_or_none(table.kind, stored, table.policy.ttl_ms, now)
        if live is not None:
            out[key] = live
    return out


class KeyedStateBackend:
    """All keyed state and timers of one keyed operator in one subtask.

    ``set_current_key`` (or the operator writing ``current_key``/``current_key_group`` after its own
    batch-wise key-group computation) scopes every handle. ``snapshot()`` returns one blob per
    non-empty key group; ``restore()`` loads the blobs of the groups in this subtask's range.
    """

    def __init__(
        self,
        max_parallelism: int,
        parallelism: int,
        key_group_range: KeyGroupRange,
        cache_size: int = 1 << 16,
        batch_cache_size: int = 1 << 18,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self._assigner = KeyGroupAssigner(max_parallelism, parallelism, cache_size)
        self.key_group_of = self._assigner.key_group  # one key at a time (set_current_key, timers)
        self.max_parallelism = max_parallelism
        self.key_group_range = key_group_range
        self.current_key: Any = None
        self.current_key_group = -1
        self._tables: dict[str, StateTable] = {}
        self._handles: dict[str, Any] = {}
        self.processing_timers = TimerQueue()
        self.event_timers = TimerQueue()
        self._serializer = RecordSerializer()  # snapshots: the records' serializer (user classes by value)
        # Batch path: plain dicts looked up with one C-level map() per batch. Computing a key group
        # costs ~1-3 µs (Java hash + murmur), an LRU hit ~0.5 µs of Python call per key, this ~50 ns.
        # str and bytes keys equal no key of another type that hashes differently in Java, so their
        # cache may be consulted with any key, unchecked; ints equal floats and bools (1 == 1.0 ==
        # True, three Java hashes), so the int cache serves only batches of exact ints.
        self._text_kg_cache: dict[Any, int] = {}
        self._int_kg_cache: dict[int, int] = {}
        self._kg_cache_size = batch_cache_size
        # Processing time in ms, for state TTL (the task's clock; wall clock when none is given).
        self.now_ms: Callable[[], int] = clock or _wall_clock_ms
        # Incremental TTL cleanups that run once per record (run_cleanup_for_every_record); the
        # keyed operators call run_record_cleanups per batch, so without them it costs one check.
        self.record_cleanups: list[Any] = []
        # Operators that keep some of their state outside the tables between batches (the window
        # batch path's open panes): each writes it into the tables when anything reads them whole.
        self.state_holders: list[Callable[[], None]] = []

    def assign_key_groups(self, keys: list[Any]) -> list[int]:
        """The key groups of a batch of keys, each checked against this subtask's range."""
        if not keys:
            return []
        ints = type(keys[0]) is int
        if ints and not _INT_ONLY.issuperset(map(type, keys)):
            ints = False
        cache: dict[Any, int] = self._int_kg_cache if ints else self._text_kg_cache
        kgs = list(map(cache.get, keys, _MINUS_ONE))
        if min(kgs) < 0:  # keys not cached (new, or of a type never cached): compute, check, remember
            if len(cache) > self._kg_cache_size:
                cache.clear()  # amortized bound on memory for ever-new keys
            r = self.key_group_range
            kg_of = self.key_group_of
            for i, kg in enumerate(kgs):
                if kg < 0:
                    key = keys[i]
                    kg = kgs[i] = kg_of(key)
                    if not r.start_key_group <= kg <= r.end_key_group:
                        raise self.out_of_range(key, kg)
                    if ints or type(key) in _TEXT:
                        cache[key] = kg
        return kgs

    def set_current_key(self, key: Any) -> None:
        kg = self.key_group_of(key)
        r = self.key_group_range
        if not r.start_key_group <= kg <= r.end_key_group:
            raise self.out_of_range(key, kg)
        self.current_key = key
        self.current_key_group = kg

    def get_current_key(self) -> Any:
        return self.current_key

    def out_of_range(self, key: Any, key_group: int) -> KeyGroupOutOfRangeError:
        r = self.key_group_range
        return KeyGroupOutOfRangeError(
            f"Key {key!r} is in key group {key_group}, which is not in this subtask's KeyGroupRange"
            f"[{r.start_key_group}, {r.end_key_group}]. Most likely the key's hash is not deterministic "
            "across processes (keys must be str, int, float, bytes, bool, None-free tuples of those, dataclasses "
            "of those, or objects whose pickle is stable)."
        )

    def check_key_groups(self, keys: list[Any], key_groups: list[int]) -> None:
        """Range check for a batch of precomputed key groups (two C-level scans, not a Python loop)."""
        if key_groups:
            r = self.key_group_range
            if min(key_groups) < r.start_key_group or max(key_groups) > r.end_key_group:
                for key, kg in zip(keys, key_groups):
                    if not r.start_key_group <= kg <= r.end_key_group:
                        raise self.out_of_range(key, kg)

    # -- tables and handles --------------------------------------------------------------------

    def table(self, name: str, kind: str, ttl: bool = False) -> StateTable:
        t = self._tables.get(name)
        if t is None:
            t = self._tables[name] = StateTable(name, kind, ttl)
        elif t.kind != kind:
            raise ValueError(
                f"State '{name}' is a {_KIND_NAMES.get(t.kind, t.kind)}; it cannot also be used as a "
                f"{_KIND_NAMES.get(kind, kind)}. State names must be unique per operator."
            )
        elif t.ttl != ttl:
            # Flink fails the same way (StateMigrationException): the stored values differ in format.
            raise ValueError(
                f"State '{name}' was created {'with' if t.ttl else 'without'} time-to-live (possibly in the "
                f"checkpoint restored from); it cannot be used {'with' if ttl else 'without'} TTL. Keep the "
                "descriptor's enable_time_to_live as it was, or use a new state name."
            )
        return t

    def _handle(self, descriptor: api.StateDescriptor, kind: str, make: Callable[[StateTable], _S]) -> _S:
        name = descriptor.get_name()
        policy = _ttl.ttl_policy(descriptor)
        table = self.table(name, kind, policy is not None)
        handle = self._handles.get(name)
        if handle is None:
            if policy is None:
                handle = make(table)
            else:
                handle = self._ttl_handle(descriptor, kind, table, policy)
            self._handles[name] = handle
        return handle  # registered under this name with this kind, so of the type ``make`` returns

    def _ttl_handle(self, descriptor: api.StateDescriptor, kind: str, table: StateTable, policy: Any) -> Any:
        table.policy = policy
        cleanup = _ttl.IncrementalCleanup(table, policy, self.now_ms) if policy.cleanup_size > 0 else None
        if cleanup is not None and policy.cleanup_every_record:
            self.record_cleanups.append(cleanup)
        if kind == VALUE:
            return _ttl.TtlValueState(self, table, policy, cleanup)
        if kind == LIST:
            return _ttl.TtlListState(self, table, policy, cleanup)
        if kind == MAP:
            return _ttl.TtlMapState(self, table, policy, cleanup)
        if kind == REDUCING:
            return _ttl.TtlReducingState(self, table, policy, cleanup, descriptor)  # type: ignore[arg-type]
        return _ttl.TtlAggregatingState(self, table, policy, cleanup, descriptor)  # type: ignore[arg-type]

    def run_record_cleanups(self, records: int) -> None:
        """Incremental TTL cleanup for ``records`` records (run_cleanup_for_every_record)."""
        for cleanup in self.record_cleanups:
            cleanup.step(records)

    def get_value_state(self, descriptor: api.ValueStateDescriptor) -> HeapValueState:
        return self._handle(descriptor, VALUE, lambda t: HeapValueState(self, t))

    def get_list_state(self, descriptor: api.ListStateDescriptor) -> HeapListState:
        return self._handle(descriptor, LIST, lambda t: HeapListState(self, t))

    def get_map_state(self, descriptor: api.MapStateDescriptor) -> HeapMapState:
        return self._handle(descriptor, MAP, lambda t: HeapMapState(self, t))

    def get_reducing_state(self, descriptor: api.ReducingStateDescriptor) -> HeapReducingState:
        return self._handle(descriptor, REDUCING, lambda t: HeapReducingState(self, t, descriptor))

    def get_aggregating_state(self, descriptor: api.AggregatingStateDescriptor) -> HeapAggregatingState:
        return self._handle(descriptor, AGGREGATING, lambda t: HeapAggregatingState(self, t, descriptor))

    # -- accessors for checkpoints, tests and rescaling ----------------------------------------

    def state_kind(self, name: str) -> str:
        return self._tables[name].kind

    def settle(self) -> None:
        """Writes the state operators hold outside the tables into them (see ``state_holders``)."""
        for write_back in self.state_holders:
            write_back()

    def entries(self, name: str) -> dict[Any, Any]:
        """{key: value} of one state across all key groups (a copy)."""
        self.settle()
        t = self._tables.get(name)
        return {} if t is None else {k: v for _, k, v in t.items()}

    def key_groups(self) -> list[int]:
        """Key groups holding any state or timer."""
        self.settle()
        groups: set[int] = set()
        for t in self._tables.values():
            groups.update(t.groups)
        groups.update(self.processing_timers.key_groups())
        groups.update(self.event_timers.key_groups())
        return sorted(groups)

    def is_empty(self) -> bool:
        return not self.key_groups()

    # -- snapshot and restore ------------------------------------------------------------------

    def snapshot(self) -> dict[int, bytes]:
        """One self-describing blob per non-empty key group: every state (with its kind) and timer.

        States with TTL are listed under "ttl" (their values carry timestamps); with
        ``cleanup_full_snapshot`` their expired entries are left out (the running state keeps them).
        """
        out: dict[int, bytes] = {}
        full_scan = [t for t in self._tables.values() if t.policy is not None and t.policy.full_snapshot]
        now = self.now_ms() if full_scan else 0
        for kg in self.key_groups():
            states = self.snapshot_states(kg)
            for t in full_scan:
                if t.name in states:
                    states[t.name] = (t.kind, _unexpired_entries(t, states[t.name][1], now))
            payload = {
                "version": _SNAPSHOT_VERSION,
                "states": states,
                "processing_timers": self.processing_timers.snapshot_group(kg),
                "event_timers": self.event_timers.snapshot_group(kg),
            }
            ttl_names = [name for name in states if self._tables[name].ttl]
            if ttl_names:
                payload["ttl"] = ttl_names
            out[kg] = self._serializer.serialize(payload)
        return out

    def snapshot_states(self, kg: int) -> dict[str, tuple[str, dict[Any, Any]]]:
        """{state name: (kind, {key: value})} of one key group, plain objects (the snapshot format)."""
        self.settle()
        return {name: (t.kind, dict(t.groups[kg])) for name, t in self._tables.items() if kg in t.groups}

    def restore(self, key_group_states: Mapping[int, bytes]) -> list[int]:
        """Loads the blobs of the key groups in this subtask's range and ignores the others (they
        belong to other subtasks after a rescale). Returns the groups loaded. Restore before the
        first record: restored values replace current ones key by key."""
        loaded = []
        r = self.key_group_range
        for kg, blob in key_group_states.items():
            if not r.contains(kg):
                continue
            payload = deserialize(blob)
            if payload.get("version") not in (_SNAPSHOT_VERSION, *_row_format.ROWS_VERSIONS):
                raise ValueError(f"Key group {kg}: unknown keyed-state snapshot version {payload.get('version')!r}")
            self._restore_payload(kg, payload)
            loaded.append(kg)
        return sorted(loaded)

    def _restore_payload(self, kg: int, payload: dict[str, Any]) -> None:
        """One key group's payload; one of RocksDB rows (version 2 or 3) is decoded first."""
        payload = _row_format.as_canonical(payload)
        ttl_names = payload.get("ttl", ())
        for name, (kind, entries) in payload["states"].items():
            if entries:
                self.table(name, kind, name in ttl_names).group(kg).update(entries)
        self.processing_timers.restore_group(kg, payload["processing_timers"])
        self.event_timers.restore_group(kg, payload["event_timers"])
