"""Snapshots of the RocksDB state backend, and their restore (Flink's RocksIncrementalSnapshotStrategy
and RocksFullSnapshotStrategy).

On the task thread a snapshot first writes back loaned values, then

- incremental: flushes the memtables and takes a RocksDB checkpoint, hard links of the live SST
  files plus the small MANIFEST/CURRENT/OPTIONS files (:func:`take_native_snapshot`), which the
  writer thread uploads off the task thread: the SST files not uploaded for the last completed
  checkpoint go into the job's ``shared/`` directory (an SST file never changes, so one uploaded
  before is referenced, not copied again), the small files into the checkpoint's own directory;
  the handle lists both and the JobManager's registry counts references to shared files across
  retained checkpoints (runtime/checkpoint_storage.py);
- full (a full checkpoint or a savepoint, :func:`take_full_snapshot`): pins a point-in-time view
  of each column family (:mod:`~millstream.runtime.state.rocksdb_views`), no flush and no files, as
  Flink's full snapshot reads a RocksDB snapshot; the writer thread reads the live instance through
  them into the canonical key groups, which either backend restores. It used to take the
  incremental path's hard links and open them as a second, read-only instance: a memtable flush,
  an open and a close per checkpoint, and the task's own reads and writes slowed by the small SST
  files this left (README, Nexmark q5 with 1 s checkpoints).

A restore copies a handle's files into the task's local directory, opens them read-only and takes
the key groups of the subtask's range (Flink's key-group-range clipping): rows copied as they are
into a RocksDB backend, or decoded into canonical key groups for the heap.
"""
from __future__ import annotations

import bisect
import os
import shutil
from typing import Any, Callable, Iterator, Optional

from millstream.runtime.checkpoint_storage import SHARED_DIR, SHARED_LIST_SUFFIX
from millstream.runtime.keygroups import KeyGroupRange
from millstream.runtime.serialization import RecordSerializer
from millstream.runtime.state import ttl as _ttl
from millstream.runtime.state.rocksdb_backend import (_KG, RocksDBKeyedStateBackend, RocksTimerQueue,
                                                      TaskRocksDB, _guard, _next_prefix)
from millstream.runtime.state.rocksdb_views import ViewsReleased
from millstream.runtime.state.row_format import ROWS_VERSION, decode_state_row, decode_timer_row, dumps_flat

__all__ = ["NATIVE_FORMAT", "SHARED_LIST_SUFFIX", "FullSnapshot", "NativeSnapshot", "restore_native",
           "shared_file_path", "take_full_snapshot", "take_native_snapshot"]

NATIVE_FORMAT = "rocksdb-incremental-1"


class NativeSnapshot:
    """A RocksDB checkpoint taken on the task thread, uploaded by :meth:`upload` off it."""

    def __init__(self, checkpoint_id: int, local_dir: str, states: dict[str, tuple[str, str, str, bool]],
                 timer_cfs: dict[str, tuple[str, str]], heap_timers: dict[str, dict[int, Any]],
                 key_group_range: tuple[int, int]) -> None:
        self.checkpoint_id = checkpoint_id
        self.local_dir = local_dir
        self.states = states  # cf name -> (operator id, state name, kind, ttl)
        self.timer_cfs = timer_cfs  # cf name -> (operator id, "processing" | "event")
        self.heap_timers = heap_timers  # operator id -> {kg: {"processing_timers": [...], "event_timers": [...]}}
        self.key_group_range = key_group_range

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


class _Meta:
    """What a snapshot records of the task's keyed backends besides their rows."""

    def __init__(self, backends: dict[str, "RocksDBKeyedStateBackend"]) -> None:
        self.states: dict[str, tuple[str, str, str, bool]] = {}  # cf name -> (operator id, state name, kind, ttl)
        self.timer_cfs: dict[str, tuple[str, str]] = {}  # cf name -> (operator id, "processing_timers" | "event_timers")
        self.heap_timers: dict[str, dict[int, Any]] = {}  # HEAP timers: operator id -> {kg: timers}
        self.key_group_range = (0, -1)
        self.ttl_full: dict[str, int] = {}  # cf name -> ttl ms, states whose expired entries a full snapshot drops
        self.now_ms = 0
        for op_id, backend in backends.items():
            backend.flush()  # loaned values written back: RocksDB holds the whole state
            r = backend.key_group_range
            self.key_group_range = (r.start_key_group, r.end_key_group)
            for name, t in backend._tables.items():
                self.states[f"{op_id}/{name}"] = (op_id, name, t.kind, t.ttl)
                if t.policy is not None and t.policy.full_snapshot:
                    self.ttl_full[f"{op_id}/{name}"] = t.policy.ttl_ms
                    self.now_ms = backend.now_ms()
            if isinstance(backend.processing_timers, RocksTimerQueue):
                self.timer_cfs[f"{op_id}/_timer_state/processing_user-timers"] = (op_id, "processing_timers")
                self.timer_cfs[f"{op_id}/_timer_state/event_user-timers"] = (op_id, "event_timers")
            else:
                self.heap_timers[op_id] = {
                    kg: {"processing_timers": backend.processing_timers.snapshot_group(kg),
                         "event_timers": backend.event_timers.snapshot_group(kg)}
                    for kg in set(backend.processing_timers.key_groups()) | set(backend.event_timers.key_groups())}

    def handle(self) -> dict[str, Any]:
        return {"states": self.states, "timer_cfs": self.timer_cfs, "heap_timers": self.heap_timers}


def take_native_snapshot(db: TaskRocksDB, backends: dict[str, "RocksDBKeyedStateBackend"],
                         checkpoint_id: int) -> NativeSnapshot:
    """The synchronous part of an incremental snapshot: write back loaned values, flush memtables,
    hard-link a checkpoint."""
    meta = _Meta(backends)
    local_dir = f"{db.path}-chk-{checkpoint_id}-{uuid_hex()[:8]}"

    def create() -> None:
        db.db.flush()
        db._rd.Checkpoint(db.db).create_checkpoint(local_dir)

    _guard(db.path, create)
    return NativeSnapshot(checkpoint_id, local_dir, meta.states, meta.timer_cfs, meta.heap_timers, meta.key_group_range)


class FullSnapshot:
    """A full snapshot (Flink's RocksFullSnapshotStrategy): taken on the task thread by
    :func:`take_full_snapshot`, read by :meth:`canonical` off it."""

    def __init__(self, checkpoint_id: int, db: TaskRocksDB, token: int, meta: _Meta) -> None:
        self.checkpoint_id = checkpoint_id
        self._db = db
        self._token = token
        self._meta = meta

    def canonical(self) -> dict[str, dict[int, bytes]]:
        """The snapshot's key groups in the canonical format, read from the live instance as of the
        snapshot. Raises :class:`ViewsReleased` if the instance closed first (the task ended)."""
        views = self._db.views
        meta = self._meta
        start, end = meta.key_group_range
        with views.reading(self._token) as pinned:
            groups = _canonical_groups(pinned.get, meta.handle(), KeyGroupRange.of(start, end), meta.ttl_full,
                                       meta.now_ms, cancelled=lambda: views.closed)
        if groups is None:
            raise ViewsReleased(f"the task's RocksDB instance closed while checkpoint {self.checkpoint_id} was read")
        return groups

    def discard(self) -> None:
        self._db.views.release(self._token)


def take_full_snapshot(db: TaskRocksDB, backends: dict[str, "RocksDBKeyedStateBackend"],
                       checkpoint_id: int) -> FullSnapshot:
    """The synchronous part of a full snapshot: write back loaned values, pin a view of each column
    family (nothing flushed, no file written)."""
    meta = _Meta(backends)
    token = db.pin_views([*meta.states, *meta.timer_cfs])
    return FullSnapshot(checkpoint_id, db, token, meta)


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
            existing = set(type(db).list_cf(db.path()))
            groups = _canonical_groups(lambda name: db.get_column_family(name).iter() if name in existing else None,
                                       handle, key_group_range)
            assert groups is not None  # never cancelled
            return groups
        finally:
            db.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


_CHUNK = range(4096)  # rows read between two looks at ``cancelled``


def _read_range(it: Any, lo: bytes, hi: bytes, cancelled: Callable[[], bool],
                keys_only: bool = False) -> Optional[tuple[list[bytes], list[bytes]]]:
    """([row key], [value]) of the rows in [lo, hi) of a RocksDB iterator, in order (no values
    with ``keys_only``). Flat lists of bytes: no tuple per row, so reading makes no work for the
    garbage collector; an iterator past its end has no key (rocksdict returns None), which spares a
    ``valid()`` call per row. None once ``cancelled()`` (asked every 4,096 rows)."""
    keys: list[bytes] = []
    values: list[bytes] = []
    add_key, add_value = keys.append, values.append
    key, value, step = it.key, it.value, it.next
    it.seek(lo)
    while not cancelled():
        if keys_only:
            for _ in _CHUNK:
                row = key()
                if row is None or row >= hi:
                    return keys, values
                add_key(row)
                step()
        else:
            for _ in _CHUNK:
                row = key()
                if row is None or row >= hi:
                    return keys, values
                add_key(row)
                add_value(value())
                step()
    return None


def _split_groups(keys: list[bytes]) -> list[tuple[int, int, int]]:
    """[(kg, start, end)]: the slices of sorted row keys that share a key group (a bisection each)."""
    out = []
    i, n = 0, len(keys)
    while i < n:
        kg = _KG.unpack_from(keys[i])[0]
        j = n if kg >= 0xFFFF else bisect.bisect_left(keys, _KG.pack(kg + 1), i)
        out.append((kg, i, j))
        i = j
    return out


def _canonical_groups(open_cf: Callable[[str], Any], handle: dict[str, Any], r: KeyGroupRange,
                      ttl_full: dict[str, int] | None = None, now_ms: int = 0,
                      cancelled: Callable[[], bool] = lambda: False) -> Optional[dict[str, dict[int, bytes]]]:
    """The key groups of ``r`` as version-3 payloads (:mod:`~millstream.runtime.state.row_format`):
    each row's bytes as they are, split by key group, nothing decoded; except the states whose
    expired entries a full snapshot leaves out (``cleanup_full_snapshot``), decoded to be judged.
    ``open_cf(cf name)``: an iterator over the column family, None if it has none (a state created
    after the snapshot). None once ``cancelled()``."""
    payloads: dict[str, dict[int, dict[str, Any]]] = {}
    lo, hi = _KG.pack(r.start_key_group), _next_prefix(_KG.pack(r.end_key_group))
    ttl_full = ttl_full or {}

    def payload(op_id: str, kg: int) -> dict[str, Any]:
        groups = payloads.setdefault(op_id, {})
        p = groups.get(kg)
        if p is None:
            p = groups[kg] = {"version": ROWS_VERSION, "states": {}, "rows": {}, "timer_rows": {},
                              "processing_timers": [], "event_timers": []}
        return p

    for cf_name, (op_id, name, kind, ttl) in handle["states"].items():
        it = open_cf(cf_name)
        read = ([], []) if it is None else _read_range(it, lo, hi, cancelled)
        if read is None:
            return None
        keys, values = read
        ttl_ms = ttl_full.get(cf_name)
        for kg, i, j in _split_groups(keys):
            p = payload(op_id, kg)
            if ttl_ms is None:
                p["rows"][name] = (kind, ttl, keys[i:j], values[i:j])
                continue
            entries: dict[Any, Any] = {}
            for row, value in zip(keys[i:j], values[i:j]):
                decode_state_row(kind, row[2:], value, entries)
            live = {}
            for key, stored in entries.items():
                kept = _ttl.unexpired_or_none(kind, stored, ttl_ms, now_ms)
                if kept is not None:
                    live[key] = kept
            p["states"][name] = (kind, live)
            if ttl:
                p.setdefault("ttl", [])
                if name not in p["ttl"]:
                    p["ttl"].append(name)
    for cf_name, (op_id, field) in handle["timer_cfs"].items():
        it = open_cf(cf_name)
        read = ([], []) if it is None else _read_range(it, lo, hi, cancelled, keys_only=True)
        if read is None:
            return None
        keys = read[0]
        for kg, i, j in _split_groups(keys):
            payload(op_id, kg)["timer_rows"][field] = keys[i:j]
    for op_id, heap_groups in handle.get("heap_timers", {}).items():
        for kg, timers in heap_groups.items():
            if r.contains(kg):
                p = payload(op_id, kg)
                p["processing_timers"].extend(timers["processing_timers"])
                p["event_timers"].extend(timers["event_timers"])
    return {op_id: {kg: _dumps_payload(p) for kg, p in groups.items()} for op_id, groups in payloads.items()}


def _dumps_payload(p: dict[str, Any]) -> bytes:
    """A key group's payload: flat (no memo) when it is rows only; decoded state (TTL states a full
    snapshot filters) or HEAP timers hold the user's keys, which take the records' serializer."""
    if p["states"] or p["processing_timers"] or p["event_timers"]:
        return RecordSerializer().serialize(p)
    return dumps_flat(p)


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
            queue.register(*decode_timer_row(row[2:]), _KG.unpack_from(row)[0])
    for op_id, groups in handle.get("heap_timers", {}).items():
        b = backend(op_id)
        for kg, timers in groups.items():
            if r.contains(kg):
                b.processing_timers.restore_group(kg, timers["processing_timers"])
                b.event_timers.restore_group(kg, timers["event_timers"])
