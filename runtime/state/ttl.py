"""State time-to-live on the heap backend (Flink's TtlStateFactory and its Ttl*State decorators).

A state with TTL stores every value with its last access timestamp (processing time, ms): a value,
reducing or aggregating state stores ``(value, ts)``, a list state ``[(element, ts), ...]`` (each
element expires on its own), a map state ``{user_key: (value, ts)}`` (each entry expires on its
own). A value is expired once ``now >= ts + ttl``. The timestamps are part of the stored value, so
checkpoints carry them and a restored value expires at its original time.

States without TTL keep their plain handles (heap_backend), so TTL costs nothing where unused.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator

from millstream.datastream import state as api
from millstream.runtime.state.state_table import _MISSING, StateTable, _KeyedState, _no_key

__all__ = [
    "TtlPolicy", "IncrementalCleanup", "TtlValueState", "TtlListState", "TtlMapState", "TtlReducingState",
    "TtlAggregatingState", "ttl_policy", "unexpired_or_none",
]

Clock = Callable[[], int]


@dataclass(frozen=True)
class TtlPolicy:
    """What the runtime needs of a :class:`~millstream.datastream.state.StateTtlConfig`."""

    ttl_ms: int
    update_on_read: bool  # UpdateType.OnReadAndWrite
    return_expired: bool  # StateVisibility.ReturnExpiredIfNotCleanedUp
    cleanup_size: int  # incremental cleanup: entries checked per state access (0: none)
    cleanup_every_record: bool  # ...and per record processed
    full_snapshot: bool  # leave expired entries out of checkpoints
    # RocksDB backend, cleanup_in_rocksdb_compact_filter: entries swept between two reads of the
    # clock (query_time_after_num_entries); 0: no such cleanup
    compaction_filter_query: int = 0


def ttl_policy(descriptor: api.StateDescriptor) -> TtlPolicy | None:
    """The descriptor's TTL, or None without one (or with UpdateType.Disabled: no TTL, as in Flink)."""
    config = getattr(descriptor, "_ttl_config", None)
    if config is None or not config.is_enabled():
        return None
    strategies = config.get_cleanup_strategies()
    incremental = strategies.get_incremental_cleanup_strategy()
    return TtlPolicy(
        ttl_ms=config.get_ttl().to_milliseconds(),
        update_on_read=config.get_update_type() is api.StateTtlConfig.UpdateType.OnReadAndWrite,
        return_expired=config.get_state_visibility() is api.StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp,
        cleanup_size=incremental.get_cleanup_size() if incremental is not None else 0,
        cleanup_every_record=incremental is not None and incremental.run_cleanup_for_every_record(),
        full_snapshot=strategies.in_full_snapshot(),
        compaction_filter_query=_compaction_filter_query(strategies),
    )


def _compaction_filter_query(strategies: Any) -> int:
    compact = strategies.get_rocksdb_compact_filter_cleanup_strategy()
    return 0 if compact is None else max(1, compact.get_query_time_after_num_entries())


def unexpired_or_none(kind: str, stored: Any, ttl_ms: int, now: int) -> Any:
    """The stored value of one key without its expired parts: the same object when nothing expired,
    a filtered copy for a list or map that lost some, None when nothing is left."""
    if kind == "list":
        live = [e for e in stored if now < e[1] + ttl_ms]
        return stored if len(live) == len(stored) else (live or None)
    if kind == "map":
        live_map = {k: e for k, e in stored.items() if now < e[1] + ttl_ms}
        return stored if len(live_map) == len(stored) else (live_map or None)
    return stored if now < stored[1] + ttl_ms else None


class IncrementalCleanup:
    """Flink's TtlIncrementalCleanup: a lazy walk over all keys of one state, ``size`` entries a step,
    removing what expired; at the end of the walk the next step starts a new one.

    The walk copies the list of key groups when it starts and a group's keys when it reaches the
    group (the state changes between steps); a key written later is seen by the next walk.
    """

    def __init__(self, table: StateTable, policy: TtlPolicy, clock: Clock) -> None:
        self._table = table
        self._kind = table.kind
        self._single = table.kind not in ("list", "map")
        self._ttl = policy.ttl_ms
        self._size = policy.cleanup_size
        self._clock = clock
        self._groups_left: list[int] = []  # key groups of this walk not yet reached
        self._group: dict[Any, Any] = {}  # the group being walked (emptied before it is dropped: safe to hold)
        self._kg = -1
        self._keys: list[Any] = []  # its keys, copied when the walk reached it
        self._pos = 0

    def step(self, steps: int = 1) -> None:
        """Checks up to ``size * steps`` entries. A walk that ends within the step is started once
        more, so a step on a state that has entries checks some of them."""
        n = self._size * steps
        if n <= 0:
            return
        now = self._clock()
        table, ttl = self._table, self._ttl
        restarted = False
        while n > 0:
            keys, pos = self._keys, self._pos
            if pos >= len(keys):
                if not self._groups_left:
                    if restarted:
                        return
                    restarted = True
                    self._groups_left = list(table.groups)
                    self._groups_left.reverse()  # popped from the end: key-group order
                    if not self._groups_left:
                        return
                kg = self._groups_left.pop()
                d = table.groups.get(kg)
                if d:
                    self._kg, self._group, self._keys, self._pos = kg, d, list(d), 0
                continue
            chunk = keys[pos:pos + n]
            self._pos = pos + len(chunk)
            n -= len(chunk)
            d, kg = self._group, self._kg
            if self._single:  # the common case inline: this runs on every access of the state
                for key in chunk:
                    stored = d.get(key, _MISSING)
                    if stored is not _MISSING and now >= stored[1] + ttl:
                        table.remove(kg, key)
            else:
                for key in chunk:
                    stored = d.get(key, _MISSING)
                    if stored is not _MISSING:
                        live = unexpired_or_none(self._kind, stored, ttl, now)
                        if live is None:
                            table.remove(kg, key)
                        elif live is not stored:
                            d[key] = live


class _TtlState(_KeyedState):
    """A handle whose values carry their last access timestamp."""

    def __init__(self, backend: Any, table: StateTable, policy: TtlPolicy, cleanup: IncrementalCleanup | None) -> None:
        super().__init__(backend, table)
        self._ttl = policy.ttl_ms
        self._update_on_read = policy.update_on_read
        self._return_expired = policy.return_expired
        self._clock: Clock = backend.now_ms
        self._cleanup = cleanup

    def _accessed(self) -> None:
        """Every call on the state runs a step of incremental cleanup first, as in Flink."""
        if self._cleanup is not None:
            self._cleanup.step()

    def _check_key(self) -> None:
        if self._backend.current_key_group < 0:
            raise _no_key(self._table.name)

    def _get_single(self) -> Any:
        """The value of a single-value state: None when absent or expired (then removed; returned
        once more with ReturnExpiredIfNotCleanedUp); refreshes the timestamp on read if so set."""
        entry = self._read()
        if entry is _MISSING:
            return _MISSING
        value, ts = entry
        now = self._clock()
        if now >= ts + self._ttl:
            self.clear()
            return value if self._return_expired else _MISSING
        if self._update_on_read:
            self._write((value, now))
        return value

    def _unexpired_single(self) -> Any:
        """For add(): the current value if it may still be used (unexpired, or expired but visible)."""
        entry = self._read()
        if entry is _MISSING:
            return _MISSING
        value, ts = entry
        if self._return_expired or self._clock() < ts + self._ttl:
            return value
        return _MISSING


class TtlValueState(_TtlState, api.ValueState[Any]):
    def value(self) -> Any:
        self._accessed()
        v = self._get_single()
        return None if v is _MISSING else v

    def update(self, value: Any) -> None:
        self._accessed()
        if value is None:
            self.clear()
        else:
            self._write((value, self._clock()))


class TtlReducingState(_TtlState, api.ReducingState[Any]):
    def __init__(self, backend: Any, table: StateTable, policy: TtlPolicy, cleanup: IncrementalCleanup | None,
                 descriptor: api.ReducingStateDescriptor) -> None:
        super().__init__(backend, table, policy, cleanup)
        self._reduce = descriptor.reduce_function.reduce

    def get(self) -> Any:
        self._accessed()
        v = self._get_single()
        return None if v is _MISSING else v

    def add(self, value: Any) -> None:
        self._accessed()
        current = self._unexpired_single()
        self._write((value if current is _MISSING else self._reduce(current, value), self._clock()))


class TtlAggregatingState(_TtlState, api.AggregatingState[Any, Any]):
    def __init__(self, backend: Any, table: StateTable, policy: TtlPolicy, cleanup: IncrementalCleanup | None,
                 descriptor: api.AggregatingStateDescriptor) -> None:
        super().__init__(backend, table, policy, cleanup)
        self._agg = descriptor.agg_function

    def get(self) -> Any:
        self._accessed()
        acc = self._get_single()
        return None if acc is _MISSING else self._agg.get_result(acc)

    def add(self, value: Any) -> None:
        self._accessed()
        acc = self._unexpired_single()
        if acc is _MISSING:
            acc = self._agg.create_accumulator()
        self._write((self._agg.add(value, acc), self._clock()))


class TtlListState(_TtlState, api.ListState[Any]):
    """Every element carries its own timestamp: ``add`` stamps only the new element."""

    def _none_check(self, values: list[Any]) -> None:
        if any(x is None for x in values):
            raise ValueError(f"You cannot add None to ListState '{self._table.name}'.")

    def get(self) -> list[Any]:
        """The unexpired elements (all, with ReturnExpiredIfNotCleanedUp). As in Flink, a read
        removes expired elements only when none is left unexpired, or when it rewrites the list
        to refresh the timestamps (OnReadAndWrite); otherwise incremental cleanup removes them."""
        self._accessed()
        entries = self._read()
        if entries is _MISSING:
            return []
        now, ttl = self._clock(), self._ttl
        live = [e for e in entries if now < e[1] + ttl]
        result = [e[0] for e in (entries if self._return_expired else live)]
        if not live:
            self.clear()
        elif self._update_on_read:
            self._write([(e[0], now) for e in live])
        return result

    def add(self, value: Any) -> None:
        self._accessed()
        if value is None:
            raise ValueError(f"You cannot add None to ListState '{self._table.name}'.")
        entries = self._read()
        if entries is _MISSING:
            self._write([(value, self._clock())])
        else:
            entries.append((value, self._clock()))

    def add_all(self, values: list[Any]) -> None:
        self._accessed()
        values = list(values)
        self._none_check(values)
        if values:
            now = self._clock()
            stamped = [(v, now) for v in values]
            entries = self._read()
            if entries is _MISSING:
                self._write(stamped)
            else:
                entries.extend(stamped)

    def update(self, values: list[Any]) -> None:
        self._accessed()
        values = list(values or ())
        self._none_check(values)
        if values:
            now = self._clock()
            self._write([(v, now) for v in values])
        else:
            self.clear()


class TtlMapState(_TtlState, api.MapState[Any, Any]):
    """Every entry carries its own timestamp; reading an entry (get, contains, iterating) checks and,
    with OnReadAndWrite, refreshes it."""

    def _map(self) -> dict[Any, Any] | None:
        m = self._read()
        return None if m is _MISSING else m

    def _drop(self, m: dict[Any, Any], key: Any) -> None:
        del m[key]
        if not m:
            self.clear()

    def _get_entry(self, key: Any) -> Any:
        m = self._map()
        if m is None:
            return _MISSING
        entry = m.get(key, _MISSING)
        if entry is _MISSING:
            return _MISSING
        value, ts = entry
        now = self._clock()
        if now >= ts + self._ttl:
            self._drop(m, key)
            return value if self._return_expired else _MISSING
        if self._update_on_read:
            m[key] = (value, now)
        return value

    def _visible(self) -> list[tuple[Any, Any]]:
        """(key, value) of every entry that may be returned; removes the expired ones."""
        m = self._map()
        if m is None:
            return []
        now, ttl, refresh = self._clock(), self._ttl, self._update_on_read
        out = []
        for key, (value, ts) in list(m.items()):
            if now >= ts + ttl:
                del m[key]
                if self._return_expired:
                    out.append((key, value))
            else:
                if refresh:
                    m[key] = (value, now)
                out.append((key, value))
        if not m:
            self.clear()
        return out

    def get(self, key: Any) -> Any:
        self._accessed()
        v = self._get_entry(key)
        return None if v is _MISSING else v

    def contains(self, key: Any) -> bool:
        self._accessed()
        return self._get_entry(key) is not _MISSING

    def put(self, key: Any, value: Any) -> None:
        self._accessed()
        m = self._map()
        if m is None:
            self._write({key: (value, self._clock())})
        else:
            m[key] = (value, self._clock())

    def put_all(self, dict_value: dict[Any, Any]) -> None:
        self._accessed()
        if dict_value:
            now = self._clock()
            stamped = {k: (v, now) for k, v in dict_value.items()}
            m = self._map()
            if m is None:
                self._write(stamped)
            else:
                m.update(stamped)

    def remove(self, key: Any) -> None:
        self._accessed()
        m = self._map()
        if m is not None and key in m:
            self._drop(m, key)
        elif m is None:
            self._check_key()

    def items(self) -> Iterator[tuple[Any, Any]]:
        self._accessed()
        return iter(self._visible())

    def keys(self) -> Iterator[Any]:
        self._accessed()
        return iter([k for k, _ in self._visible()])

    def values(self) -> Iterator[Any]:
        self._accessed()
        return iter([v for _, v in self._visible()])

    def is_empty(self) -> bool:
        """As Flink's (an iterator's hasNext): the first visible entry found makes it non-empty; expired
        entries met on the way are removed."""
        self._accessed()
        m = self._map()
        if m is None:
            return True
        now = self._clock()
        for key, (value, ts) in list(m.items()):
            if now >= ts + self._ttl:
                self._drop(m, key)
                if self._return_expired:
                    return False
            else:
                if self._update_on_read:
                    m[key] = (value, now)
                return False
        return True
