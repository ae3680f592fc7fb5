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
  (``pane.append(x)``), which a serialized store does not see; so a value read or written stays in
  a small per-state write-back cache (``_LOANS`` entries, least recently used written back first)
  and is written when it leaves the cache or at a snapshot. A key's first write goes through at
  once (its row then exists for scans); later writes of a cached key, immutable values too (a
  count, a sum: the read-modify-write of every aggregation), only replace the cached value. A
  cached value is written back only if it may differ from its row: it was written, or handed out
  and is mutable (``dirty``); a snapshot writes back those changed since the last one, an eviction
  of an unchanged value writes nothing;
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

import bisect
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
from millstream.datastream.window import TimeWindow as _TimeWindow
from millstream.runtime.keygroups import KeyGroupRange
from millstream.runtime.serialization import PROTOCOL, RecordSerializer, deserialize
from millstream.runtime.state import ttl as _ttl
from millstream.runtime.state.heap_backend import MAP, HeapMapState, KeyedStateBackend, TimerQueue
from millstream.runtime.state.options_factory import load_options_factory
from millstream.runtime.state.rocksdb_views import PinnedViews
from millstream.runtime.state.row_format import _KG, _LEN, _TS, _TS_BIAS, ROWS_VERSIONS, decode_timer_row  # the row layout
from millstream.runtime.state.state_table import _MISSING, StateTable, _no_key

__all__ = ["RocksDBOptions", "TaskRocksDB", "RocksDBKeyedStateBackend", "RocksMap", "RocksTimerQueue",
           "RocksTtlCompactionCleanup", "StateBackendDiskFullError", "encode_key"]

_LOANS = 4096  # values per state kept in the write-back cache
# Values a caller cannot change in place: handing one out does not make its row stale.
_SETTLED = frozenset({int, float, complex, str, bytes, bool, type(None)})


def _settled(value: Any) -> bool:
    """Whether ``value`` cannot be mutated in place: a scalar, or a flat tuple of scalars."""
    t = type(value)
    if t in _SETTLED:
        return True
    return t is tuple and all(type(v) in _SETTLED for v in value)


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
    if type(key) is tuple:
        body = _tuple_body(key)
        if body is not None:
            return _framed(body)
    return _pickled_without_memo(key)


def _pickled_without_memo(key: Any) -> bytes:
    buf = io.BytesIO()
    p = pickle.Pickler(buf, PROTOCOL)
    p.fast = True  # no memo: deterministic bytes for equal values
    try:
        p.dump(key)
    except Exception:  # a class that travels by value (the job script's dataclass)
        return cloudpickle.dumps(key, PROTOCOL)
    return buf.getvalue()


# Row keys of windowed state and timers are tuples ``(key, window)``: pickling them with a Pickler
# per call (a BytesIO, the window's __reduce_ex__ and its class looked up by name) was the largest
# cost of RocksDB state in Nexmark q5. Tuples of ints, short strings, None, booleans and TimeWindows
# are written here directly, opcode for opcode what the memo-less Pickler writes (protocol 5: one
# frame, elements, TUPLE1-3 or MARK...TUPLE, STOP; a test compares both on random keys); any other
# element takes the Pickler.
_FRAME = struct.Struct("<Q")
_TUPLE_END = {1: b"\x85", 2: b"\x86", 3: b"\x87"}
_CONSTANTS = {None: b"N", True: b"\x88", False: b"\x89"}
_WINDOW_BODIES: dict[Any, bytes] = {}  # TimeWindow -> its pickled body; cleared when large


def _framed(body: bytes) -> bytes:
    """PROTO 5, then ``body`` and STOP in one frame (the Pickler frames from 4 bytes on)."""
    n = len(body) + 1
    if n < 4:
        return b"\x80\x05" + body + b"."
    return b"\x80\x05\x95" + _FRAME.pack(n) + body + b"."


def _int_body(x: int) -> bytes:
    d = _dumps(x, PROTOCOL)
    return d[11:-1] if d[2] == 0x95 else d[2:-1]  # without PROTO, the frame header and STOP


def _tuple_body(t: tuple) -> bytes | None:
    parts = []
    for x in t:
        tx = type(x)
        if tx is int:
            parts.append(_int_body(x))
        elif tx is _TimeWindow:
            b = _WINDOW_BODIES.get(x)
            if b is None:
                if type(x.start) is not int or type(x.end) is not int or _WINDOW_HEAD is None:
                    return None
                if len(_WINDOW_BODIES) >= 4096:
                    _WINDOW_BODIES.clear()
                b = _WINDOW_BODIES[x] = _WINDOW_HEAD + _int_body(x.start) + _int_body(x.end) + b"\x86b"
            parts.append(b)
        elif tx is str:
            u = x.encode("utf-8", "surrogatepass")
            if len(u) >= 256:
                return None
            parts.append(b"\x8c" + bytes((len(u),)) + u)  # SHORT_BINUNICODE
        elif tx is tuple:
            b = _tuple_body(x)
            if b is None:
                return None
            parts.append(b)
        elif x is None or tx is bool:
            parts.append(_CONSTANTS[x])
        else:
            return None
    end = _TUPLE_END.get(len(t))
    body = b"".join(parts)
    if len(body) > 60_000:  # the Pickler would cut frames at 64 KiB
        return None
    if end is not None:
        return body + end
    return b")" if not t else b"(" + body + b"t"


def _window_head() -> bytes | None:
    """What the Pickler writes for a TimeWindow before its (start, end) state: its class (by
    module and name), EMPTY_TUPLE, NEWOBJ. Taken from the Pickler itself; None (no direct path)
    if its shape is not the expected one."""
    body = _pickled_without_memo(_TimeWindow(0, 1))[11:-1]
    tail = b"K\x00K\x01\x86b"
    return body[:-len(tail)] if body.endswith(tail) and body.startswith(b"\x8c") else None


_WINDOW_HEAD = _window_head()


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
    """What the task's RocksDB is opened with: where, its memory budget, a predefined options
    profile (Flink's PredefinedOptions, by name) and an options factory (a class name)."""

    def __init__(self, local_dir: str, timer_service: str = "ROCKSDB", memory_managed: bool = True,
                 fixed_memory_per_slot: int = 64 << 20, write_buffer_ratio: float = 0.5,
                 predefined: str = "DEFAULT", options_factory: str | None = None) -> None:
        self.local_dir = local_dir
        self.timer_service = timer_service.upper()
        self.memory_managed = memory_managed
        self.fixed_memory_per_slot = fixed_memory_per_slot
        self.write_buffer_ratio = write_buffer_ratio
        if predefined.upper() not in _PREDEFINED:
            raise ValueError(f"state.backend.rocksdb.predefined-options: {predefined!r} is none of {sorted(_PREDEFINED)}")
        self.predefined = predefined.upper()
        self.options_factory = options_factory


def _spinning_disk(o: Any, table: Any, managed: bool) -> None:
    import rocksdict as rd

    o.set_compaction_style(rd.DBCompactionStyle.level())
    o.set_level_compaction_dynamic_level_bytes(True)
    o.set_max_background_jobs(4)
    o.set_max_open_files(-1)


def _spinning_disk_high_mem(o: Any, table: Any, managed: bool) -> None:
    import rocksdict as rd

    if not managed:  # with managed memory the slot's shared cache stays the only block cache
        table.set_block_cache(rd.Cache(256 << 20))
    table.set_block_size(128 << 10)
    table.set_bloom_filter(10, False)  # Flink's bloom-filter.bits-per-key default, full filters
    o.set_level_compaction_dynamic_level_bytes(True)
    o.set_max_background_jobs(4)
    o.set_max_bytes_for_level_base(1 << 30)
    o.set_max_open_files(-1)
    o.set_max_write_buffer_number(4)
    o.set_min_write_buffer_number_to_merge(3)
    o.set_target_file_size_base(256 << 20)
    o.set_write_buffer_size(64 << 20)


def _flash_ssd(o: Any, table: Any, managed: bool) -> None:
    o.set_max_background_jobs(4)
    o.set_max_open_files(-1)


# Flink's PredefinedOptions, each as the rocksdict calls that set what its profile sets.
_PREDEFINED: dict[str, Callable[[Any, Any, bool], None]] = {
    "DEFAULT": lambda o, table, managed: None,
    "SPINNING_DISK_OPTIMIZED": _spinning_disk,
    "SPINNING_DISK_OPTIMIZED_HIGH_MEM": _spinning_disk_high_mem,
    "FLASH_SSD_OPTIMIZED": _flash_ssd,
}


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
        write.disable_wal = True  # type: ignore[method-assign,assignment]  # a property at run time, a method in the stubs
        self.db.set_write_options(write)
        self._cfs: dict[str, Any] = {}
        self.views = PinnedViews()  # full snapshots' point-in-time views, read by the checkpoint writer

    def _make_options(self, rd: Any) -> Any:
        """Flink's order: the predefined profile, the managed memory (its shared block cache
        replaces any other), then the options factory, which sees and may change all of it."""
        o = rd.Options(raw_mode=True)
        o.create_if_missing(True)
        o.create_missing_column_families(True)
        self.cache: Any = None
        self.write_buffer_manager: Any = None
        table = rd.BlockBasedOptions()
        _PREDEFINED[self.options.predefined](o, table, self.options.memory_managed)
        if self.options.memory_managed:
            # Flink's managed memory: one budget for block cache and write buffers, shared by every
            # column family whatever the number of states; memtables are charged to the cache, so
            # the cache's capacity bounds both.
            budget = self.options.fixed_memory_per_slot
            write = int(budget * self.options.write_buffer_ratio)
            self.cache = rd.Cache(budget)
            self.write_buffer_manager = rd.WriteBufferManager.new_write_buffer_manager_with_cache(write, False, self.cache)
            o.set_write_buffer_manager(self.write_buffer_manager)
            table.set_block_cache(self.cache)
            table.set_cache_index_and_filter_blocks(True)
            if self.options.predefined != "SPINNING_DISK_OPTIMIZED_HIGH_MEM":  # else its write buffers stay
                o.set_write_buffer_size(max(1 << 20, write // 4))
                o.set_max_write_buffer_number(2)
        o.set_block_based_table_factory(table)
        if self.options.options_factory:
            factory = load_options_factory(self.options.options_factory)
            handles: list[Any] = []  # Flink's handlesToClose: rocksdict objects live as long as the options
            o = factory.create_db_options(o, handles)
            o = factory.create_column_options(o, handles)
            if not isinstance(o, rd.Options):
                raise ValueError(f"state.backend.rocksdb.options-factory {self.options.options_factory}: "
                                 f"create_db_options/create_column_options must return the rocksdict Options, got "
                                 f"{type(o).__name__}")
            self._factory_handles = handles
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

    def pin_views(self, names: list[str]) -> int:
        """A point-in-time view of each named column family that exists (a RocksDB iterator, which
        reads the instance as of now), held in :attr:`views` for the checkpoint writer thread.
        Called on the task thread, the instance's only writer: all views see the same state."""
        return self.views.pin({name: self._cfs[name].iter() for name in names if name in self._cfs})

    def close(self, delete: bool = True) -> None:
        self.views.close()  # a snapshot being read finishes (or gives up) first
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

    __slots__ = ("cf", "serializer", "loans", "dirty", "_views")

    def __init__(self, name: str, kind: str, ttl: bool, cf: _Cf) -> None:
        super().__init__(name, kind, ttl)
        self.cf = cf
        self.serializer = RecordSerializer()
        # (row key) -> (key group, key, value): mutable values handed out, written back on eviction
        self.loans: OrderedDict[bytes, tuple[int, Any, Any]] = OrderedDict()
        # Loaned rows whose value may differ from the row in RocksDB (written, or handed out and
        # mutable, since its last write-back); always a subset of ``loans``.
        self.dirty: set[bytes] = set()
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
        """Caches ``value`` (just read from or written to ``row``), dirty unless it cannot change."""
        loans = self.loans
        loans[row] = (kg, key, value)
        loans.move_to_end(row)
        if not _settled(value):
            self.dirty.add(row)
        if len(loans) > _LOANS:
            old_row, (_, _, old) = loans.popitem(last=False)
            if old_row in self.dirty:  # an unchanged value's row is current: nothing to write
                self.dirty.discard(old_row)
                self.cf.put(old_row, self.serializer.serialize(old))

    def unloan(self, row: bytes) -> None:
        """Drops ``row``'s cached value without writing it (its row is deleted or rewritten)."""
        self.loans.pop(row, None)
        self.dirty.discard(row)

    def flush(self) -> int:
        """Writes back the loaned values changed since their last write-back (they stay loaned:
        still the live objects); returns how many."""
        dirty = self.dirty
        if not dirty:
            return 0
        ser, put, loans = self.serializer.serialize, self.cf.put, self.loans
        for row in dirty:
            put(row, ser(loans[row][2]))
        n = len(dirty)
        dirty.clear()
        return n

    def flush_group(self, kg: int) -> None:
        """Writes back the changed loaned values of one key group (before its rows are read)."""
        ser, put, loans = self.serializer.serialize, self.cf.put, self.loans
        for row in [r for r in self.dirty if loans[r][0] == kg]:
            put(row, ser(loans[row][2]))
            self.dirty.discard(row)

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
            value = loaned[2]
            if type(value) not in _SETTLED and not _settled(value):  # the caller may change it in place
                t.dirty.add(row)
            return value
        data = t.cf.get(row)
        if data is None:
            return default
        value = deserialize(data)
        t.loan(row, self._kg, key, value)  # a read is mostly followed by a write of the same key
        return value

    def __getitem__(self, key: Any) -> Any:
        v = self.get(key, _MISSING)
        if v is _MISSING:
            raise KeyError(key)
        return v

    def __setitem__(self, key: Any, value: Any) -> None:
        t = self._t
        row = self._row(key)
        loans = t.loans
        if row in loans:  # its row exists: the new value is written back with the loan
            loans[row] = (self._kg, key, value)
            loans.move_to_end(row)
            t.dirty.add(row)
        else:
            # Written now (the row exists for scans) and loaned (later changes, in place or by
            # another write, reach RocksDB when the loan is written back).
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
        t.unloan(row)
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
            t.unloan(row)
        t.cf.delete_prefix(self._prefix)

    def materialized_items(self) -> Iterator[tuple[Any, Any]]:
        """(key, value) of every row, read from RocksDB (flush first for loaned values)."""
        n = len(self._prefix)
        for k, v in self._t.cf.scan(self._prefix):
            yield pickle.loads(k[n:]), deserialize(v)

    def __iter__(self) -> Iterator[Any]:
        n = len(self._prefix)  # keys only: a loaned value's row exists already
        return iter([pickle.loads(k[n:]) for k, _ in self._t.cf.scan(self._prefix)])

    def items(self) -> Any:
        self._t.flush_group(self._kg)
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

    def items(self) -> Any:
        return self.iter_items()

    def values(self) -> Any:
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

    def items(self) -> Any:
        return [(k, RocksMap(self._t.cf, p, self._t.serializer)) for k, p in self._keys()]

    def __len__(self) -> int:
        return sum(1 for _ in self._keys())


class RocksTtlCompactionCleanup:
    """``cleanup_in_rocksdb_compact_filter`` without a compaction filter (the Python binding has no
    hook for one): expired rows of one TTL state are found by a sweep over its column family, not
    by reads, and deleted; once a sweep has gone round the column family and deleted something,
    that column family is compacted, so the deleted rows leave the SST files as they would in
    Flink's filtered compaction.

    It runs on the task thread, driven by writes as compactions are: the keyed operators report
    their records (``step``), and every ``CHUNK`` records the sweep looks at as many rows, from
    where it stopped, reading the clock every ``query_time_after_num_entries`` rows (Flink's
    setting). A list loses its expired elements (rewritten), a map its expired entries (one row
    each); a value in the write-back cache is judged by its cached, newer copy.
    """

    CHUNK = 1000

    def __init__(self, table: RocksStateTable, ttl_ms: int, query_every: int, clock: Callable[[], int]) -> None:
        self._table = table
        self._ttl = ttl_ms
        self._every = max(1, query_every)
        self._clock = clock
        self._cursor = b""  # the next row to look at; b"": a new round
        self._records = 0
        self._deleted_this_round = 0
        self.deleted = 0  # rows deleted in all
        self.compactions = 0

    def step(self, records: int) -> None:
        self._records += records
        if self._records >= self.CHUNK:
            rows, self._records = self._records, 0
            self.sweep(rows)

    def sweep(self, rows: int) -> int:
        """Looks at up to ``rows`` rows; returns how many it deleted."""
        t, ttl = self._table, self._ttl
        cf, ser, loans, kind = t.cf, t.serializer, t.loans, t.kind
        it = cf.cf.iter()
        it.seek(self._cursor)
        now = self._clock()
        seen = deleted = 0
        while seen < rows and it.valid():
            if seen and seen % self._every == 0:
                now = self._clock()
            seen += 1
            row = it.key()
            loaned = loans.get(row)  # a loaned value is newer than its row
            stored = loaned[2] if loaned is not None else deserialize(it.value())
            live = (stored if now < stored[1] + ttl else None) if kind == MAP else \
                _ttl.unexpired_or_none(kind, stored, ttl, now)
            if live is None:
                t.unloan(row)
                cf.delete(row)
                deleted += 1
            elif live is not stored:
                if loaned is not None:
                    loans[row] = (loaned[0], loaned[1], live)
                    t.dirty.discard(row)  # written just below
                cf.put(row, ser.serialize(live))
            it.next()
        self.deleted += deleted
        self._deleted_this_round += deleted
        if it.valid():
            self._cursor = it.key()
        else:  # round done: compact what it deleted out of the files
            self._cursor = b""
            if self._deleted_this_round:
                _guard(cf.path, lambda: cf.cf.compact_range(None, None))
                self.compactions += 1
            self._deleted_this_round = 0
        return deleted


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
    """Timers of one time domain in a column family, rows ``kg | timestamp | key``; in memory, per
    key group, its first rows in order (Flink's RocksDBCachingPriorityQueueSet), and the earliest
    timestamp per key group in a heap (stale heap entries are skipped).

    RocksDB holds every timer, so their number is not bounded by memory; the cache of a key group
    holds its ``CACHE`` smallest rows, all of them while it is ``complete``. Polling takes the first
    cached row and deletes its row: no seek, where reading the head from RocksDB took two per timer
    (the first row, then the next head), each stepping over the tombstones of the timers fired
    before. A row registered below the cache's last one (or into a complete cache) joins it; a cache
    emptied while RocksDB has more is refilled with one seek."""

    CACHE = 128  # rows per key group (Flink's default cache size for this queue)

    def __init__(self, cf: _Cf) -> None:
        self._cf = cf
        self._heads: dict[int, int] = {}  # kg -> earliest timestamp in that group
        self._heap: list[Any] = []  # (timestamp, kg), possibly stale
        self._cache: dict[int, list[bytes]] = {}  # kg -> its smallest rows, sorted (a kg with timers has an entry)
        self._complete: dict[int, bool] = {}  # kg -> whether its cache holds all its rows
        for kg in cf.key_groups():  # a reopened instance (not used today: tasks start empty)
            self._refresh(kg)

    @staticmethod
    def _row(ts: int, key: Any, kg: int) -> bytes:
        return _KG.pack(kg) + _TS.pack(ts + _TS_BIAS) + encode_key(key)

    def _refresh(self, kg: int) -> None:
        """Loads the key group's first rows from RocksDB (one seek) and publishes its head."""
        rows: list[bytes] = []
        more = False  # rows beyond the cache
        it = self._cf.cf.iter()
        prefix = _KG.pack(kg)
        it.seek(prefix)
        while it.valid():
            row = it.key()
            if row[:2] != prefix:
                break
            if len(rows) == self.CACHE:
                more = True
                break
            rows.append(row)
            it.next()
        if not rows:
            self._forget(kg)
            return
        self._cache[kg] = rows
        self._complete[kg] = not more
        self._publish(kg, rows[0])

    def _forget(self, kg: int) -> None:
        self._heads.pop(kg, None)
        self._cache.pop(kg, None)
        self._complete.pop(kg, None)

    def _publish(self, kg: int, first: bytes) -> None:
        ts = _TS.unpack_from(first, 2)[0] - _TS_BIAS
        if self._heads.get(kg) != ts:
            self._heads[kg] = ts
            heapq.heappush(self._heap, (ts, kg))

    def register(self, timestamp: int, key: Any, key_group: int) -> None:
        row = self._row(timestamp, key, key_group)
        self._cf.put(row, b"")
        cache = self._cache.get(key_group)
        if cache is None:  # the group had no timer
            self._cache[key_group] = [row]
            self._complete[key_group] = True
            self._publish(key_group, row)
            return
        if not self._complete[key_group] and row > cache[-1]:
            return  # beyond the cache: RocksDB has it, a refill reads it in order
        i = bisect.bisect_left(cache, row)
        if i < len(cache) and cache[i] == row:
            return  # registered already
        cache.insert(i, row)
        if len(cache) > self.CACHE:
            cache.pop()
            self._complete[key_group] = False
        if i == 0:
            self._publish(key_group, row)

    def delete(self, timestamp: int, key: Any, key_group: int) -> None:
        row = self._row(timestamp, key, key_group)
        self._cf.delete(row)
        cache = self._cache.get(key_group)
        if cache is None:
            return
        i = bisect.bisect_left(cache, row)
        if i < len(cache) and cache[i] == row:
            del cache[i]
            if i == 0:
                self._after_head_removed(key_group, cache)

    def _after_head_removed(self, kg: int, cache: list[bytes]) -> None:
        if cache:
            self._publish(kg, cache[0])
        elif self._complete[kg]:
            self._forget(kg)
        else:
            self._refresh(kg)

    def peek(self) -> int | None:
        heap, heads = self._heap, self._heads
        while heap:
            ts, kg = heap[0]
            if heads.get(kg) == ts:
                return ts
            heapq.heappop(heap)
        return None

    def poll(self, up_to: float) -> tuple[int, Any, int] | None:
        ts = self.peek()
        if ts is None or ts > up_to:
            return None
        kg = self._heap[0][1]
        cache = self._cache[kg]
        row = cache.pop(0)
        self._cf.delete(row)
        self._after_head_removed(kg, cache)
        return ts, pickle.loads(row[10:]), kg

    def restore_rows(self, key_group: int, rows: list[bytes], whole: bool = False) -> None:
        """Timer rows of a version-2 snapshot (their keys after the key group) or, ``whole``, of a
        version-3 one (whole row keys), written as they are."""
        put = self._cf.put
        if whole:
            for row in rows:
                put(row, b"")
        else:
            prefix = _KG.pack(key_group)
            for suffix in rows:
                put(prefix + suffix, b"")
        if rows:
            self._refresh(key_group)

    def __len__(self) -> int:
        return sum(1 for kg in self._heads for _ in self._cf.scan(_KG.pack(kg)))

    def key_groups(self) -> list[int]:
        return list(self._heads)

    def snapshot_group(self, key_group: int) -> list[tuple[int, Any]]:
        return [decode_timer_row(row[2:]) for row, _ in self._cf.scan(_KG.pack(key_group))]


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

    def _ttl_handle(self, descriptor: api.StateDescriptor, kind: str, table: StateTable, policy: Any) -> Any:
        handle = super()._ttl_handle(descriptor, kind, table, policy)
        if policy.compaction_filter_query > 0 and isinstance(table, RocksStateTable):
            self.record_cleanups.append(RocksTtlCompactionCleanup(table, policy.ttl_ms, policy.compaction_filter_query,
                                                                  self.now_ms))
        return handle

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

    def _restore_payload(self, kg: int, payload: dict[str, Any]) -> None:
        """A version-2 or -3 payload's rows go in byte for byte (the same layout); the rest as decoded state."""
        version = payload.get("version")
        if version in ROWS_VERSIONS:
            prefix = _KG.pack(kg)
            for name, spec in payload.get("rows", {}).items():
                table = self.table(name, spec[0], spec[1])
                table.flush_and_release()  # type: ignore[attr-defined]  # no loaned value may overwrite a restored row
                put = table.cf.put  # type: ignore[attr-defined]
                if version == 2:  # [(row key after the key group, value)]
                    for suffix, value in spec[2]:
                        put(prefix + suffix, value)
                else:  # [row key], [value]
                    for row, value in zip(spec[2], spec[3]):
                        put(row, value)
            timer_rows = payload.get("timer_rows", {})
            skip = 0 if version == 2 else 2
            for field in ("processing_timers", "event_timers"):
                queue = getattr(self, field)
                rows = timer_rows.get(field, ())
                if isinstance(queue, RocksTimerQueue):
                    queue.restore_rows(kg, list(rows), whole=version != 2)
                else:  # HEAP timers with RocksDB state
                    queue.restore_group(kg, [decode_timer_row(r[skip:]) for r in rows])
            payload = {"version": 1, "states": payload.get("states", {}), "ttl": payload.get("ttl", ()),
                       "processing_timers": payload.get("processing_timers", []),
                       "event_timers": payload.get("event_timers", [])}
        super()._restore_payload(kg, payload)

    def restore(self, key_group_states: Any) -> list[int]:
        loaded = super().restore(key_group_states)
        for t in self._tables.values():
            t.flush_and_release()  # type: ignore[attr-defined]
        return loaded
