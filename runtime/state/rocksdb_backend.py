"""Keyed state in an embedded RocksDB (Flink's EmbeddedRocksDBStateBackend / RocksDBKeyedStateBackend).

One RocksDB instance per task (:class:`TaskRocksDB`), under ``state.backend.rocksdb.localdir``; one
column family per (keyed operator, state name). Every row key starts with its key group, two bytes
big-endian, then the serialized key (which for per-window state is ``(key, window)``: key first,
namespace after), so a key group is one contiguous key range: a snapshot reads it with one seek,
and a rescaled subtask's range is a range of rows.

The backend keeps the heap backend's interface (:class:`KeyedStateBackend`): a state is a table
whose ``groups[kg]`` behaves as ``{key: value}``, so every operator, handle and TTL decorator runs
unchanged on either backend. Here ``groups[kg]`` is a view over RocksDB rows:

- value, list, reducing and aggregating state: one row per key, the value serialized with the
  records' serializer. Python code mutates a list or an accumulator it got from the view in place
  (``pane.append(x)``), which a serialized store does not see; so a mutable value read or written
  stays in a small per-state write-back cache (``_LOANS`` entries, least recently used written back
  first) and is written when it leaves the cache or at a snapshot. Immutable values (numbers,
  strings, tuples) are written through at once;
- map state: one row per map entry, ``kg | len(key) | key | user key``; the value of a key is a live
  :class:`RocksMap` over its rows, so ``get``/``put`` touch one row and iteration walks the rows
  with a RocksDB iterator instead of loading the map.

Timers are in RocksDB too (``state.backend.rocksdb.timer-service.factory: ROCKSDB``, the default
as in Flink): rows ``kg | timestamp | key`` per time domain, and in memory only the earliest
timestamp of each key group (Flink's key-group-partitioned priority queue), so the number of timers
is not bounded by memory. ``HEAP`` keeps them in the heap backend's queues.

Snapshots are the heap backend's format, one self-describing blob per key group
(:meth:`KeyedStateBackend.snapshot`): a savepoint of either backend restores on the other, and
rescaling clips the key groups to the new range exactly as for the heap.
"""
from __future__ import annotations

import heapq
import io
import os
import pickle
import shutil
import struct
import threading
from collections import OrderedDict
from collections.abc import MutableMapping
from typing import Any, Callable, Iterator

import cloudpickle

from millstream.datastream import state as api
from millstream.runtime.keygroups import KeyGroupRange
from millstream.runtime.serialization import PROTOCOL, RecordSerializer, deserialize
from millstream.runtime.state import ttl as _ttl
from millstream.runtime.state.heap_backend import MAP, HeapMapState, KeyedStateBackend, TimerQueue
from millstream.runtime.state.state_table import _MISSING, StateTable, _no_key

__all__ = ["RocksDBOptions", "TaskRocksDB", "RocksDBKeyedStateBackend", "RocksMap", "RocksTimerQueue",
           "StateBackendDiskFullError", "encode_key"]

_KG = struct.Struct(">H")
_LEN = struct.Struct(">I")
_TS = struct.Struct(">Q")
_TS_BIAS = 1 << 63  # timestamps are signed: biased so that byte order is numeric order
_LOANS = 4096  # mutable values per state kept in the write-back cache
_IMMUTABLE = frozenset({int, float, str, bytes, bool, type(None), tuple, frozenset})


class StateBackendDiskFullError(OSError):
    """The local RocksDB directory has no space left; the message names the directory."""


_ATOMS = frozenset({str, int, bytes, float, bool, type(None)})
_dumps = pickle.dumps


def encode_key(key: Any) -> bytes:
    """Serialized key bytes, the same for equal keys of the same types: the pickle format of the
    records' serializer, without the memo (pickle's memo depends on object identity, so ``("a", "a")``
    would serialize differently depending on whether both strings are one object)."""
    if type(key) in _ATOMS:  # one object: the memo never applies
        return _dumps(key, PROTOCOL)
    buf = io.BytesIO()
    p = pickle.Pickler(buf, PROTOCOL)
    p.fast = True  # no memo: deterministic bytes for equal values
    try:
        p.dump(key)
    except Exception:  # a class that travels by value (the job script's dataclass)
        return cloudpickle.dumps(key, PROTOCOL)
    return buf.getvalue()


def _kg_prefix(kg: int) -> bytes:
    return _KG.pack(kg)


def _next_prefix(prefix: bytes) -> bytes:
    """The smallest byte string greater than every string starting with ``prefix``."""
    b = bytearray(prefix)
    while b and b[-1] == 0xFF:
        b.pop()
    if not b:
        return b"\xff" * (len(prefix) + 1)
    b[-1] += 1
    return bytes(b)


class RocksDBOptions:
    """What the task's RocksDB is opened with: where, and its memory budget."""

    def __init__(self, local_dir: str, timer_service: str = "ROCKSDB", memory_managed: bool = True,
                 fixed_memory_per_slot: int = 64 << 20, write_buffer_ratio: float = 0.5) -> None:
        self.local_dir = local_dir
        self.timer_service = timer_service.upper()
        self.memory_managed = memory_managed
        self.fixed_memory_per_slot = fixed_memory_per_slot
        self.write_buffer_ratio = write_buffer_ratio


class TaskRocksDB:
    """The one RocksDB instance of a task: opened lazily, closed and deleted with the task."""

    def __init__(self, path: str, options: RocksDBOptions) -> None:
        import rocksdict as rd  # lazy: heap-only processes never load the native library

        self._rd = rd
        self.path = path
        self.options = options
        self._lock = threading.Lock()
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as e:
            raise _disk_error(e, path) from e
        self._cf_options = self._make_options(rd)
        try:
            self.db = rd.Rdict(path, self._cf_options)
        except Exception as e:
            raise _disk_error(e, path) from e
        # No write-ahead log, as Flink's RocksDB backend: a task's state is only ever recovered from
        # a checkpoint, and a checkpoint flushes the memtables first.
        write = rd.WriteOptions()
        write.disable_wal = True
        self.db.set_write_options(write)
        self._cfs: dict[str, Any] = {}

    def _make_options(self, rd: Any) -> Any:
        o = rd.Options(raw_mode=True)
        o.create_if_missing(True)
        o.create_missing_column_families(True)
        self.cache: Any = None
        self.write_buffer_manager: Any = None
        if self.options.memory_managed:
            # Flink's managed memory: one budget for block cache and write buffers, shared by every
            # column family whatever the number of states; memtables are charged to the cache, so
            # the cache's capacity bounds both.
            budget = self.options.fixed_memory_per_slot
            write = int(budget * self.options.write_buffer_ratio)
            self.cache = rd.Cache(budget)
            self.write_buffer_manager = rd.WriteBufferManager.new_write_buffer_manager_with_cache(write, False, self.cache)
            o.set_write_buffer_manager(self.write_buffer_manager)
            table = rd.BlockBasedOptions()
            table.set_block_cache(self.cache)
            table.set_cache_index_and_filter_blocks(True)
            o.set_block_based_table_factory(table)
            o.set_write_buffer_size(max(1 << 20, write // 4))
            o.set_max_write_buffer_number(2)
        return o

    def column_family(self, name: str) -> Any:
        cf = self._cfs.get(name)
        if cf is None:
            with self._lock:
                cf = self._cfs.get(name)
                if cf is None:
                    try:
                        cf = self.db.get_column_family(name)
                    except Exception:
                        cf = self.db.create_column_family(name, self._cf_options)
                    self._cfs[name] = cf
        return cf

    def flush(self) -> None:
        _guard(self.path, self.db.flush)

    def close(self, delete: bool = True) -> None:
        try:
            _guard(self.path, self.db.close)
        finally:
            if delete:
                shutil.rmtree(self.path, ignore_errors=True)


def _disk_full(path: str) -> bool:
    """Whether the file system of ``path`` (or its nearest existing parent) has next to no room."""
    p = path
    while p and not os.path.exists(p):
        p = os.path.dirname(p)
    try:
        st = os.statvfs(p or "/")
    except OSError:
        return False
    free, size = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
    return free < (64 << 20) or free < size // 50  # less than RocksDB needs to flush and compact


def _disk_error(e: BaseException, path: str) -> BaseException:
    """A full disk as :class:`StateBackendDiskFullError` naming the directory. RocksDB says "No space
    left on device" once; later writes only say "Writer has previous error", so an IO error on a
    file system with no room left is one too."""
    text = str(e)
    if (isinstance(e, OSError) and e.errno == 28 or "No space left" in text or "ENOSPC" in text
            or ("IO error" in text and _disk_full(path))):
        return StateBackendDiskFullError(28, f"RocksDB state backend: no space left on device in its local "
                                             f"directory {path} (state.backend.rocksdb.localdir): {text}")
    return e


def _guard(path: str, f: Callable[[], Any]) -> Any:
    try:
        return f()
    except Exception as e:
        err = _disk_error(e, path)
        if err is e:
            raise
        raise err from e


# -- tables -------------------------------------------------------------------------------------


class _Cf:
    """A column family with the helpers every view needs."""

    __slots__ = ("cf", "path")

    def __init__(self, cf: Any, path: str) -> None:
        self.cf = cf
        self.path = path

    def get(self, k: bytes) -> bytes | None:
        return self.cf.get(k)

    def put(self, k: bytes, v: bytes) -> None:
        try:
            self.cf.put(k, v)
        except Exception as e:
            err = _disk_error(e, self.path)
            if err is e:
                raise
            raise err from e

    def delete(self, k: bytes) -> None:
        _guard(self.path, lambda: self.cf.delete(k))

    def delete_prefix(self, prefix: bytes) -> None:
        _guard(self.path, lambda: self.cf.delete_range(prefix, _next_prefix(prefix)))

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Rows whose key starts with ``prefix``, in key order (a RocksDB iterator: the rows as of
        the first step, whatever is written meanwhile)."""
        it = self.cf.iter()
        it.seek(prefix)
        n = len(prefix)
        while it.valid():
            k = it.key()
            if k[:n] != prefix:
                return
            yield k, it.value()
            it.next()

    def has_prefix(self, prefix: bytes) -> bool:
        it = self.cf.iter()
        it.seek(prefix)
        return bool(it.valid() and it.key()[: len(prefix)] == prefix)

    def key_groups(self) -> list[int]:
        """The key groups with rows, by seeking from group to group."""
        out = []
        it = self.cf.iter()
        it.seek_to_first()
        while it.valid():
            kg = _KG.unpack_from(it.key())[0]
            out.append(kg)
            if kg >= 0xFFFF:
                break
            it.seek(_kg_prefix(kg + 1))
        return out


class RocksStateTable(StateTable):
    """A state whose ``groups`` are views over RocksDB rows (see the module docstring)."""

    __slots__ = ("cf", "serializer", "loans", "_views")

    def __init__(self, name: str, kind: str, ttl: bool, cf: _Cf) -> None:
        super().__init__(name, kind, ttl)
        self.cf = cf
        self.serializer = RecordSerializer()
        # (row key) -> (key group, key, value): mutable values handed out, written back on eviction
        self.loans: OrderedDict[bytes, tuple[int, Any, Any]] = OrderedDict()
        self._views: dict[int, Any] = {}
        self.groups = _RocksGroups(self)  # type: ignore[assignment]

    def view(self, kg: int) -> "_RocksGroup":
        v = self._views.get(kg)
        if v is None:
            v = self._views[kg] = (_RocksMapGroup if self.kind == MAP else _RocksGroup)(self, kg)
        return v

    def group(self, key_group: int) -> Any:
        return self.view(key_group)

    def remove(self, key_group: int, key: Any) -> None:
        self.view(key_group).pop(key, None)

    def items(self) -> Iterator[tuple[int, Any, Any]]:
        self.flush()
        for kg in self.cf.key_groups():
            for key, value in self.view(kg).materialized_items():
                yield kg, key, value

    def loan(self, row: bytes, kg: int, key: Any, value: Any) -> None:
        loans = self.loans
        loans[row] = (kg, key, value)
        loans.move_to_end(row)
        if len(loans) > _LOANS:
            old_row, (_, _, old) = loans.popitem(last=False)
            self.cf.put(old_row, self.serializer.serialize(old))

    def flush(self) -> None:
        """Writes back every loaned mutable value (they stay loaned: still the live objects)."""
        ser, put = self.serializer.serialize, self.cf.put
        for row, (_, _, value) in self.loans.items():
            put(row, ser(value))

    def flush_and_release(self) -> None:
        self.flush()
        self.loans.clear()


class _RocksGroups:
    """``table.groups``: key group -> view. Every group has a view (empty or not), so ``get`` never
    returns None; ``in``, ``bool`` and iteration look at the rows."""

    __slots__ = ("_t",)

    def __init__(self, table: RocksStateTable) -> None:
        self._t = table

    def get(self, kg: int, default: Any = None) -> Any:
        return self._t.view(kg)

    def __getitem__(self, kg: int) -> Any:
        return self._t.view(kg)

    def __setitem__(self, kg: int, entries: Any) -> None:
        view = self._t.view(kg)
        if entries is not view:
            view.clear()
            for k, v in dict(entries).items():
                view[k] = v

    def __delitem__(self, kg: int) -> None:
        self._t.view(kg).clear()

    def __contains__(self, kg: int) -> bool:
        return bool(self._t.view(kg))

    def __iter__(self) -> Iterator[int]:
        return iter(self.keys())

    def keys(self) -> list[int]:
        self._t.flush()
        return self._t.cf.key_groups()

    def __len__(self) -> int:
        return len(self.keys())

    def __bool__(self) -> bool:
        t = self._t
        return bool(t.loans) or bool(t.cf.key_groups())


class _RocksGroup(MutableMapping):
    """One key group of a value/list/reducing/aggregating state: ``{key: value}`` over rows."""

    __slots__ = ("_t", "_kg", "_prefix", "_last_key", "_last_row")

    def __init__(self, table: RocksStateTable, kg: int) -> None:
        self._t = table
        self._kg = kg
        self._prefix = _kg_prefix(kg)
        self._last_key: Any = _MISSING
        self._last_row = b""

    def _row(self, key: Any) -> bytes:
        # A read-modify-write encodes the same key object twice: the second time is free.
        if key is self._last_key:
            return self._last_row
        row = self._prefix + encode_key(key)
        self._last_key, self._last_row = key, row
        return row

    def get(self, key: Any, default: Any = None) -> Any:
        t = self._t
        row = self._row(key)
        loaned = t.loans.get(row)
        if loaned is not None:
            t.loans.move_to_end(row)
            return loaned[2]
        data = t.cf.get(row)
        if data is None:
            return default
        value = deserialize(data)
        if type(value) not in _IMMUTABLE:
            t.loan(row, self._kg, key, value)
        return value

    def __getitem__(self, key: Any) -> Any:
        v = self.get(key, _MISSING)
        if v is _MISSING:
            raise KeyError(key)
        return v

    def __setitem__(self, key: Any, value: Any) -> None:
        t = self._t
        row = self._row(key)
        if type(value) in _IMMUTABLE:
            t.loans.pop(row, None)
            t.cf.put(row, t.serializer.serialize(value))
        else:
            # Written now (the row exists for scans) and loaned (later in-place changes are kept).
            t.cf.put(row, t.serializer.serialize(value))
            t.loan(row, self._kg, key, value)

    def pop(self, key: Any, default: Any = _MISSING) -> Any:
        t = self._t
        row = self._row(key)
        v = self.get(key, _MISSING)
        if v is _MISSING:
            if default is _MISSING:
                raise KeyError(key)
            return default
        t.loans.pop(row, None)
        t.cf.delete(row)
        return v

    def __delitem__(self, key: Any) -> None:
        self.pop(key)

    def __contains__(self, key: Any) -> bool:
        return self.get(key, _MISSING) is not _MISSING

    def __bool__(self) -> bool:
        return self._t.cf.has_prefix(self._prefix)

    def clear(self) -> None:
        t = self._t
        for row in [r for r in t.loans if r.startswith(self._prefix)]:
            del t.loans[row]
        t.cf.delete_prefix(self._prefix)

    def materialized_items(self) -> Iterator[tuple[Any, Any]]:
        """(key, value) of every row, read from RocksDB (flush first for loaned values)."""
        n = len(self._prefix)
        for k, v in self._t.cf.scan(self._prefix):
            yield pickle.loads(k[n:]), deserialize(v)

    def __iter__(self) -> Iterator[Any]:
        self._t.flush()
        n = len(self._prefix)
        return iter([pickle.loads(k[n:]) for k, _ in self._t.cf.scan(self._prefix)])

    def items(self) -> Any:  # type: ignore[override]
        self._t.flush()
        return list(self.materialized_items())

    def __len__(self) -> int:
        return sum(1 for _ in self._t.cf.scan(self._prefix))


class RocksMap(MutableMapping):
    """The map of one key of a map state: one row per entry, iterated with a RocksDB iterator."""

    __slots__ = ("_cf", "_prefix", "_ser")

    def __init__(self, cf: _Cf, prefix: bytes, serializer: RecordSerializer) -> None:
        self._cf = cf
        self._prefix = prefix
        self._ser = serializer

    def __getitem__(self, user_key: Any) -> Any:
        data = self._cf.get(self._prefix + encode_key(user_key))
        if data is None:
            raise KeyError(user_key)
        return deserialize(data)

    def get(self, user_key: Any, default: Any = None) -> Any:
        data = self._cf.get(self._prefix + encode_key(user_key))
        return default if data is None else deserialize(data)

    def __setitem__(self, user_key: Any, value: Any) -> None:
        self._cf.put(self._prefix + encode_key(user_key), self._ser.serialize(value))

    def __delitem__(self, user_key: Any) -> None:
        row = self._prefix + encode_key(user_key)
        if self._cf.get(row) is None:
            raise KeyError(user_key)
        self._cf.delete(row)

    def pop(self, user_key: Any, default: Any = _MISSING) -> Any:
        row = self._prefix + encode_key(user_key)
        data = self._cf.get(row)
        if data is None:
            if default is _MISSING:
                raise KeyError(user_key)
            return default
        self._cf.delete(row)
        return deserialize(data)

    def __contains__(self, user_key: Any) -> bool:
        return self._cf.get(self._prefix + encode_key(user_key)) is not None

    def iter_items(self) -> Iterator[tuple[Any, Any]]:
        """Lazily, row by row."""
        n = len(self._prefix)
        for k, v in self._cf.scan(self._prefix):
            yield pickle.loads(k[n:]), deserialize(v)

    def __iter__(self) -> Iterator[Any]:
        n = len(self._prefix)
        return (pickle.loads(k[n:]) for k, _ in self._cf.scan(self._prefix))

    def items(self) -> Any:  # type: ignore[override]
        return self.iter_items()

    def values(self) -> Any:  # type: ignore[override]
        return (v for _, v in self.iter_items())

    def __len__(self) -> int:
        return sum(1 for _ in self._cf.scan(self._prefix))

    def __bool__(self) -> bool:
        return self._cf.has_prefix(self._prefix)

    def clear(self) -> None:
        self._cf.delete_prefix(self._prefix)

    def to_dict(self) -> dict[Any, Any]:
        return dict(self.iter_items())


class _RocksMapGroup(_RocksGroup):
    """One key group of a map state: the value of a key is a live :class:`RocksMap`."""

    __slots__ = ()

    def _map_prefix(self, key: Any) -> bytes:
        k = encode_key(key)
        return self._prefix + _LEN.pack(len(k)) + k

    def live(self, key: Any) -> RocksMap:
        return RocksMap(self._t.cf, self._map_prefix(key), self._t.serializer)

    def get(self, key: Any, default: Any = None) -> Any:
        m = self.live(key)
        return m if m else default

    def __setitem__(self, key: Any, value: Any) -> None:
        if isinstance(value, RocksMap) and value._prefix == self._map_prefix(key):
            return
        m = self.live(key)
        entries = dict(value)
        m.clear()
        for uk, uv in entries.items():
            m[uk] = uv

    def pop(self, key: Any, default: Any = _MISSING) -> Any:
        m = self.live(key)
        if not m:
            if default is _MISSING:
                raise KeyError(key)
            return default
        value = m.to_dict()
        m.clear()
        return value

    def _keys(self) -> Iterator[tuple[Any, bytes]]:
        """(key, its map prefix) per key with entries."""
        n = len(self._prefix)
        cf = self._t.cf
        it = cf.cf.iter()
        it.seek(self._prefix)
        while it.valid():
            row = it.key()
            if row[:n] != self._prefix:
                return
            size = _LEN.unpack_from(row, n)[0]
            prefix = row[: n + 4 + size]
            yield pickle.loads(row[n + 4: n + 4 + size]), prefix
            it.seek(_next_prefix(prefix))

    def materialized_items(self) -> Iterator[tuple[Any, Any]]:
        for key, prefix in list(self._keys()):
            yield key, RocksMap(self._t.cf, prefix, self._t.serializer).to_dict()

    def __iter__(self) -> Iterator[Any]:
        return iter([k for k, _ in self._keys()])

    def items(self) -> Any:  # type: ignore[override]
        return [(k, RocksMap(self._t.cf, p, self._t.serializer)) for k, p in self._keys()]

    def __len__(self) -> int:
        return sum(1 for _ in self._keys())


class RocksMapState(HeapMapState):
    """Map state over :class:`RocksMap`: writes touch one row, iteration walks rows lazily (a
    RocksDB iterator sees the rows as of its start, so the function may change the map meanwhile)."""

    def _live(self) -> RocksMap:
        b = self._backend
        if b.current_key_group < 0:
            raise _no_key(self._table.name)
        return self._table.view(b.current_key_group).live(b.current_key)  # type: ignore[attr-defined]

    def _map(self) -> Any:
        return self._live()

    def _map_for_write(self) -> Any:
        return self._live()

    def remove(self, key: Any) -> None:
        self._live().pop(key, None)

    def items(self) -> Iterator[tuple[Any, Any]]:
        return self._live().iter_items()

    def keys(self) -> Iterator[Any]:
        return iter(self._live())

    def values(self) -> Iterator[Any]:
        return iter(self._live().values())

    def is_empty(self) -> bool:
        return not self._live()


# -- timers -------------------------------------------------------------------------------------


class RocksTimerQueue(TimerQueue):
    """Timers of one time domain in a column family, rows ``kg | timestamp | key``; in memory the
    earliest timestamp per key group, in a heap (stale heap entries are skipped)."""

    def __init__(self, cf: _Cf) -> None:
        self._cf = cf
        self._heads: dict[int, int] = {}  # kg -> earliest timestamp in that group
        self._heap: list[tuple[int, int]] = []  # (timestamp, kg), possibly stale
        for kg in cf.key_groups():  # a reopened instance (not used today: tasks start empty)
            self._refresh(kg)

    @staticmethod
    def _row(ts: int, key: Any, kg: int) -> bytes:
        return _KG.pack(kg) + _TS.pack(ts + _TS_BIAS) + encode_key(key)

    def _first(self, kg: int) -> tuple[int, Any, bytes] | None:
        for row, _ in self._cf.scan(_KG.pack(kg)):
            return _TS.unpack_from(row, 2)[0] - _TS_BIAS, pickle.loads(row[10:]), row
        return None

    def _refresh(self, kg: int) -> None:
        first = self._first(kg)
        if first is None:
            self._heads.pop(kg, None)
        else:
            self._heads[kg] = first[0]
            heapq.heappush(self._heap, (first[0], kg))

    def register(self, timestamp: int, key: Any, key_group: int) -> None:
        self._cf.put(self._row(timestamp, key, key_group), b"")
        head = self._heads.get(key_group)
        if head is None or timestamp < head:
            self._heads[key_group] = timestamp
            heapq.heappush(self._heap, (timestamp, key_group))

    def delete(self, timestamp: int, key: Any, key_group: int) -> None:
        self._cf.delete(self._row(timestamp, key, key_group))
        if self._heads.get(key_group) == timestamp:
            self._refresh(key_group)

    def peek(self) -> int | None:
        heap, heads = self._heap, self._heads
        while heap:
            ts, kg = heap[0]
            if heads.get(kg) == ts:
                return ts
            heapq.heappop(heap)
        return None

    def poll(self, up_to: float) -> tuple[int, Any, int] | None:
        while True:
            ts = self.peek()
            if ts is None or ts > up_to:
                return None
            kg = self._heap[0][1]
            first = self._first(kg)
            if first is None:
                self._heads.pop(kg, None)
                continue
            ts, key, row = first
            self._cf.delete(row)
            self._refresh(kg)
            if ts <= up_to:
                return ts, key, kg
            self.register(ts, key, kg)  # not due after all (a stale head): put it back

    def __len__(self) -> int:
        return sum(1 for kg in self._heads for _ in self._cf.scan(_KG.pack(kg)))

    def key_groups(self) -> list[int]:  # type: ignore[override]
        return list(self._heads)

    def snapshot_group(self, key_group: int) -> list[tuple[int, Any]]:
        return [(_TS.unpack_from(row, 2)[0] - _TS_BIAS, pickle.loads(row[10:]))
                for row, _ in self._cf.scan(_KG.pack(key_group))]


# -- the backend --------------------------------------------------------------------------------


class RocksDBKeyedStateBackend(KeyedStateBackend):
    """:class:`KeyedStateBackend` with its tables (and, with the ROCKSDB timer service, its timers)
    in the task's RocksDB; column families are named ``<operator id>/<state name>``."""

    def __init__(self, db: TaskRocksDB, operator_id: str, max_parallelism: int, parallelism: int,
                 key_group_range: KeyGroupRange, clock: Callable[[], int] | None = None) -> None:
        super().__init__(max_parallelism, parallelism, key_group_range, clock=clock)
        self.db = db
        self.operator_id = operator_id
        if db.options.timer_service == "ROCKSDB":
            self.processing_timers = RocksTimerQueue(self._cf("_timer_state/processing_user-timers"))
            self.event_timers = RocksTimerQueue(self._cf("_timer_state/event_user-timers"))
        elif db.options.timer_service != "HEAP":
            raise ValueError(f"state.backend.rocksdb.timer-service.factory: expected ROCKSDB or HEAP, "
                             f"got {db.options.timer_service!r}")

    def _cf(self, name: str) -> _Cf:
        return _Cf(self.db.column_family(f"{self.operator_id}/{name}"), self.db.path)

    def table(self, name: str, kind: str, ttl: bool = False) -> StateTable:
        t = self._tables.get(name)
        if t is None:
            t = self._tables[name] = RocksStateTable(name, kind, ttl, self._cf(name))
            return t
        return super().table(name, kind, ttl)

    def get_map_state(self, descriptor: api.MapStateDescriptor) -> Any:
        return self._handle(descriptor, MAP, lambda t: RocksMapState(self, t))

    def flush(self) -> None:
        """Writes back every loaned value: RocksDB holds the whole state afterwards."""
        for t in self._tables.values():
            t.flush()  # type: ignore[attr-defined]

    def snapshot(self) -> dict[int, bytes]:
        self.flush()
        return super().snapshot()

    def snapshot_states(self, kg: int) -> dict[str, tuple[str, dict[Any, Any]]]:
        return {name: (t.kind, dict(t.view(kg).materialized_items()))  # type: ignore[attr-defined]
                for name, t in self._tables.items() if kg in t.groups}

    def entries(self, name: str) -> dict[Any, Any]:
        t = self._tables.get(name)
        return {} if t is None else {k: v for _, k, v in t.items()}

    def restore(self, key_group_states: Any) -> list[int]:
        loaded = super().restore(key_group_states)
        for t in self._tables.values():
            t.flush_and_release()  # type: ignore[attr-defined]
        return loaded


# -- incremental checkpoints --------------------------------------------------------------------
#
# Flink's RocksIncrementalSnapshotStrategy: on the task thread, flush the memtables and take a
# RocksDB checkpoint (hard links of the live SST files plus the small MANIFEST/CURRENT/OPTIONS/WAL);
# off the task thread, upload the SST files not uploaded before into the job's ``shared/``
# directory (an SST file never changes, so one uploaded for an earlier completed checkpoint is
# referenced, not copied again) and the small files into the checkpoint's own directory. The
# handle lists both; the JobManager's registry counts references to shared files across retained
# checkpoints (runtime/checkpoint_storage.py).

from millstream.runtime.checkpoint_storage import SHARED_DIR, SHARED_LIST_SUFFIX  # noqa: E402
NATIVE_FORMAT = "rocksdb-incremental-1"


class NativeSnapshot:
    """A RocksDB checkpoint taken on the task thread, uploaded by :meth:`upload` off it."""

    def __init__(self, checkpoint_id: int, local_dir: str, states: dict[str, tuple[str, str, bool]],
                 timer_cfs: dict[str, tuple[str, str]], heap_timers: dict[str, dict[int, Any]],
                 key_group_range: tuple[int, int]) -> None:
        self.checkpoint_id = checkpoint_id
        self.local_dir = local_dir
        self.states = states  # cf name -> (operator id, state name, kind, ttl)
        self.timer_cfs = timer_cfs  # cf name -> (operator id, "processing" | "event")
        self.heap_timers = heap_timers  # operator id -> {kg: {"processing_timers": [...], "event_timers": [...]}}
        self.key_group_range = key_group_range
        self.ttl_full: dict[str, int] = {}  # cf name -> ttl ms, states whose expired entries a full snapshot drops
        self.now_ms = 0

    def upload(self, job_dir: str, checkpoint_dir: str, reusable: dict[str, str]) -> tuple[dict[str, Any], int]:
        """Copies what is new; returns the handle and the bytes uploaded. ``reusable``: local SST
        name -> shared file name, of the last completed checkpoint."""
        shared_dir = os.path.join(job_dir, SHARED_DIR)
        private_rel = f"rocksdb-{uuid_hex()}"
        private_dir = os.path.join(checkpoint_dir, private_rel)
        os.makedirs(shared_dir, exist_ok=True)
        os.makedirs(private_dir, exist_ok=True)
        shared: dict[str, str] = {}
        private: list[str] = []
        uploaded = 0
        try:
            for name in sorted(os.listdir(self.local_dir)):
                src = os.path.join(self.local_dir, name)
                if name.endswith(".sst"):
                    known = reusable.get(name)
                    if known is not None:
                        shared[name] = known
                        continue
                    target = f"{uuid_hex()}-{name}"
                    _copy_durably(src, os.path.join(shared_dir, target))
                    uploaded += os.path.getsize(src)
                    shared[name] = target
                else:
                    _copy_durably(src, os.path.join(private_dir, name))
                    uploaded += os.path.getsize(src)
                    private.append(name)
        finally:
            shutil.rmtree(self.local_dir, ignore_errors=True)
        handle = {"format": NATIVE_FORMAT, "shared": shared, "private_dir": private_rel, "private": private,
                  "states": self.states, "timer_cfs": self.timer_cfs, "heap_timers": self.heap_timers,
                  "key_group_range": self.key_group_range}
        return handle, uploaded

    def canonical(self) -> dict[str, dict[int, bytes]]:
        """Off the task thread: the checkpoint's key groups in the canonical format (a full
        snapshot, Flink's RocksFullSnapshotStrategy), read from the hard-linked files."""
        import rocksdict as rd  # lazy: heap-only processes never load the native library

        try:
            db = rd.Rdict(self.local_dir, rd.Options(raw_mode=True), access_type=rd.AccessType.read_only())
            try:
                meta = {"states": self.states, "timer_cfs": self.timer_cfs, "heap_timers": self.heap_timers}
                start, end = self.key_group_range
                return _canonical_groups(db, meta, KeyGroupRange.of(start, end), self.ttl_full, self.now_ms)
            finally:
                db.close()
        finally:
            shutil.rmtree(self.local_dir, ignore_errors=True)

    def discard(self) -> None:
        shutil.rmtree(self.local_dir, ignore_errors=True)


def uuid_hex() -> str:
    import uuid

    return uuid.uuid4().hex


def _copy_durably(src: str, dst: str) -> None:
    tmp = dst + ".inprogress"
    shutil.copyfile(src, tmp)
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, dst)


def take_native_snapshot(db: TaskRocksDB, backends: dict[str, "RocksDBKeyedStateBackend"],
                         checkpoint_id: int) -> NativeSnapshot:
    """The synchronous part: write back loaned values, flush memtables, hard-link a checkpoint."""
    states: dict[str, tuple[str, str, bool]] = {}
    timer_cfs: dict[str, tuple[str, str]] = {}
    heap_timers: dict[str, dict[int, Any]] = {}
    key_group_range = (0, -1)
    for op_id, backend in backends.items():
        backend.flush()
        r = backend.key_group_range
        key_group_range = (r.start_key_group, r.end_key_group)
        for name, t in backend._tables.items():
            states[f"{op_id}/{name}"] = (op_id, name, t.kind, t.ttl)  # type: ignore[assignment]
        if isinstance(backend.processing_timers, RocksTimerQueue):
            timer_cfs[f"{op_id}/_timer_state/processing_user-timers"] = (op_id, "processing_timers")
            timer_cfs[f"{op_id}/_timer_state/event_user-timers"] = (op_id, "event_timers")
        else:
            heap_timers[op_id] = {
                kg: {"processing_timers": backend.processing_timers.snapshot_group(kg),
                     "event_timers": backend.event_timers.snapshot_group(kg)}
                for kg in set(backend.processing_timers.key_groups()) | set(backend.event_timers.key_groups())}
    local_dir = f"{db.path}-chk-{checkpoint_id}-{uuid_hex()[:8]}"
    ttl_full: dict[str, int] = {}
    now = 0
    for op_id, backend in backends.items():
        for name, t in backend._tables.items():
            if t.policy is not None and t.policy.full_snapshot:
                ttl_full[f"{op_id}/{name}"] = t.policy.ttl_ms
                now = backend.now_ms()

    def create() -> None:
        db.db.flush()
        db._rd.Checkpoint(db.db).create_checkpoint(local_dir)

    _guard(db.path, create)
    snap = NativeSnapshot(checkpoint_id, local_dir, states, timer_cfs, heap_timers, key_group_range)
    snap.ttl_full, snap.now_ms = ttl_full, now
    return snap


def shared_file_path(state_path: str, name: str) -> str:
    """Where a shared file of a task state file is: ``shared/`` next to a savepoint's state files
    (a self-contained copy), else ``shared/`` of the job's checkpoint directory."""
    here = os.path.dirname(state_path)
    local = os.path.join(here, SHARED_DIR, name)
    if os.path.exists(local):
        return local
    return os.path.join(os.path.dirname(here), SHARED_DIR, name)


def restore_native(handle: dict[str, Any], state_path: str, key_group_range: KeyGroupRange,
                   work_dir: str, into: dict[str, "RocksDBKeyedStateBackend"] | None = None) -> dict[str, dict[int, bytes]]:
    """A native handle's key groups in ``key_group_range`` (Flink's key-group-range clipping when
    rescaling): the files are copied into a temporary directory and opened read-only. ``into``:
    RocksDB backends per operator id, which get the rows as they are, one at a time (memory stays
    bounded whatever the state's size); else the key groups come back as canonical blobs
    ({operator id: {kg: blob}}) for any backend's ``restore``."""
    import rocksdict as rd  # lazy: heap-only processes never load the native library

    if handle.get("format") != NATIVE_FORMAT:
        raise ValueError(f"{state_path}: unknown RocksDB snapshot format {handle.get('format')!r}")
    tmp = os.path.join(work_dir, f"restore-{uuid_hex()}")
    os.makedirs(tmp)
    try:
        here = os.path.dirname(state_path)
        for name in handle["private"]:
            src = os.path.join(here, handle["private_dir"], name)
            if not os.path.exists(src):
                raise FileNotFoundError(f"RocksDB checkpoint file {src} is missing (restoring {state_path})")
            shutil.copyfile(src, os.path.join(tmp, name))
        for name, shared in handle["shared"].items():
            src = shared_file_path(state_path, shared)
            if not os.path.exists(src):
                raise FileNotFoundError(f"shared RocksDB file {src} is missing (referenced by {state_path}): the "
                                        "checkpoint cannot be restored")
            try:
                os.link(src, os.path.join(tmp, name))
            except OSError:
                shutil.copyfile(src, os.path.join(tmp, name))
        o = rd.Options(raw_mode=True)
        try:
            db = rd.Rdict(tmp, o, access_type=rd.AccessType.read_only())
        except Exception as e:
            raise ValueError(f"the RocksDB checkpoint of {state_path} cannot be opened (a corrupt file?): {e}") from e
        try:
            if into is not None:
                _copy_rows(db, handle, key_group_range, into)
                return {}
            return _canonical_groups(db, handle, key_group_range)
        finally:
            db.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _canonical_groups(db: Any, handle: dict[str, Any], r: KeyGroupRange, ttl_full: dict[str, int] | None = None,
                      now_ms: int = 0) -> dict[str, dict[int, bytes]]:
    payloads: dict[str, dict[int, dict[str, Any]]] = {}
    lo, hi = _KG.pack(r.start_key_group), _next_prefix(_KG.pack(r.end_key_group))

    def payload(op_id: str, kg: int) -> dict[str, Any]:
        groups = payloads.setdefault(op_id, {})
        p = groups.get(kg)
        if p is None:
            p = groups[kg] = {"version": 1, "states": {}, "processing_timers": [], "event_timers": []}
        return p

    def rows(cf_name: str) -> Iterator[tuple[bytes, bytes]]:
        cf = db.get_column_family(cf_name)
        it = cf.iter()
        it.seek(lo)
        while it.valid() and it.key() < hi:
            yield it.key(), it.value()
            it.next()

    existing = set(type(db).list_cf(db.path()))
    for cf_name, (op_id, name, kind, ttl) in handle["states"].items():
        if cf_name not in existing:
            continue  # a state created after the checkpoint's column families were listed
        for row, value in rows(cf_name):
            kg = _KG.unpack_from(row)[0]
            p = payload(op_id, kg)
            entries = p["states"].setdefault(name, (kind, {}))[1]
            if ttl:
                p.setdefault("ttl", [])
                if name not in p["ttl"]:
                    p["ttl"].append(name)
            if kind == MAP:
                size = _LEN.unpack_from(row, 2)[0]
                key = pickle.loads(row[6:6 + size])
                entries.setdefault(key, {})[pickle.loads(row[6 + size:])] = deserialize(value)
            else:
                entries[pickle.loads(row[2:])] = deserialize(value)
    for cf_name, ttl_ms in (ttl_full or {}).items():  # cleanup_full_snapshot: expired entries left out
        name, kind = handle["states"][cf_name][1], handle["states"][cf_name][2]
        for p in payloads.get(handle["states"][cf_name][0], {}).values():
            if name in p["states"]:
                live = {}
                for key, stored in p["states"][name][1].items():
                    kept = _ttl.unexpired_or_none(kind, stored, ttl_ms, now_ms)
                    if kept is not None:
                        live[key] = kept
                p["states"][name] = (kind, live)
    for cf_name, (op_id, field) in handle["timer_cfs"].items():
        if cf_name not in existing:
            continue
        for row, _ in rows(cf_name):
            kg = _KG.unpack_from(row)[0]
            payload(op_id, kg)[field].append((_TS.unpack_from(row, 2)[0] - _TS_BIAS, pickle.loads(row[10:])))
    for op_id, groups in handle.get("heap_timers", {}).items():
        for kg, timers in groups.items():
            if r.contains(kg):
                p = payload(op_id, kg)
                p["processing_timers"].extend(timers["processing_timers"])
                p["event_timers"].extend(timers["event_timers"])
    ser = RecordSerializer()
    return {op_id: {kg: ser.serialize(p) for kg, p in groups.items()} for op_id, groups in payloads.items()}


def _range_rows(db: Any, cf_name: str, r: KeyGroupRange) -> Iterator[tuple[bytes, bytes]]:
    lo, hi = _KG.pack(r.start_key_group), _next_prefix(_KG.pack(r.end_key_group))
    it = db.get_column_family(cf_name).iter()
    it.seek(lo)
    while it.valid() and it.key() < hi:
        yield it.key(), it.value()
        it.next()


def _copy_rows(db: Any, handle: dict[str, Any], r: KeyGroupRange,
               into: dict[str, "RocksDBKeyedStateBackend"]) -> None:
    """RocksDB to RocksDB: the rows of the range copied byte for byte (same layout on both sides)."""
    existing = set(type(db).list_cf(db.path()))

    def backend(op_id: str) -> "RocksDBKeyedStateBackend":
        b = into.get(op_id)
        if b is None:
            raise ValueError(f"Keyed state for operator {op_id}, which is not a keyed operator of this task")
        return b

    for cf_name, (op_id, name, kind, ttl) in handle["states"].items():
        if cf_name in existing:
            cf = backend(op_id).table(name, kind, ttl).cf  # type: ignore[attr-defined]
            for row, value in _range_rows(db, cf_name, r):
                cf.put(row, value)
    for cf_name, (op_id, field) in handle["timer_cfs"].items():
        if cf_name not in existing:
            continue
        queue = getattr(backend(op_id), field)
        for row, _ in _range_rows(db, cf_name, r):
            queue.register(_TS.unpack_from(row, 2)[0] - _TS_BIAS, pickle.loads(row[10:]), _KG.unpack_from(row)[0])
    for op_id, groups in handle.get("heap_timers", {}).items():
        b = backend(op_id)
        for kg, timers in groups.items():
            if r.contains(kg):
                b.processing_timers.restore_group(kg, timers["processing_timers"])
                b.event_timers.restore_group(kg, timers["event_timers"])
