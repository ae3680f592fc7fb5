"""Snapshots of the RocksDB state backend, and their restore (Flink's RocksIncrementalSnapshotStrategy
and RocksFullSnapshotStrategy).

On the task thread a snapshot only writes back loaned values, flushes the memtables and takes a
RocksDB checkpoint: hard links of the live SST files plus the small MANIFEST/CURRENT/OPTIONS files
(:func:`take_native_snapshot`). Off the task thread, the writer thread either

- uploads it, incrementally: the SST files not uploaded for the last completed checkpoint go into
  the job's ``shared/`` directory (an SST file never changes, so one uploaded before is referenced,
  not copied again), the small files into the checkpoint's own directory; the handle lists both and
  the JobManager's registry counts references to shared files across retained checkpoints
  (runtime/checkpoint_storage.py); or
- reads it into the canonical key groups (a full checkpoint or a savepoint), which either backend
  restores.

A restore copies a handle's files into the task's local directory, opens them read-only and takes
the key groups of the subtask's range (Flink's key-group-range clipping): rows copied as they are
into a RocksDB backend, or decoded into canonical key groups for the heap.
"""
from __future__ import annotations

import os
import shutil
from typing import Any, Iterator

from millstream.runtime.checkpoint_storage import SHARED_DIR, SHARED_LIST_SUFFIX
from millstream.runtime.keygroups import KeyGroupRange
from millstream.runtime.serialization import RecordSerializer
from millstream.runtime.state import ttl as _ttl
from millstream.runtime.state.rocksdb_backend import (_KG, RocksDBKeyedStateBackend, RocksTimerQueue,
                                                      TaskRocksDB, _guard, _next_prefix)
from millstream.runtime.state.row_format import ROWS_VERSION, decode_state_row, decode_timer_row

__all__ = ["NATIVE_FORMAT", "SHARED_LIST_SUFFIX", "NativeSnapshot", "restore_native", "shared_file_path",
           "take_native_snapshot"]

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
    """The key groups of ``r`` as version-2 payloads (:mod:`~millstream.runtime.state.row_format`):
    each row's bytes as they are, split by key group, nothing decoded; except the states whose
    expired entries a full snapshot leaves out (``cleanup_full_snapshot``), decoded to be judged."""
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

    def by_key_group(cf_name: str) -> Iterator[tuple[int, list[tuple[bytes, bytes]]]]:
        """(kg, [(row key after the key group, value)]) per key group with rows, in order."""
        cf = db.get_column_family(cf_name)
        it = cf.iter()
        it.seek(lo)
        prefix = b""
        rows: list[tuple[bytes, bytes]] = []
        while it.valid():
            row = it.key()
            if row >= hi:
                break
            if row[:2] != prefix:
                if rows:
                    yield _KG.unpack(prefix)[0], rows
                prefix, rows = row[:2], []
            rows.append((row[2:], it.value()))
            it.next()
        if rows:
            yield _KG.unpack(prefix)[0], rows

    existing = set(type(db).list_cf(db.path()))
    for cf_name, (op_id, name, kind, ttl) in handle["states"].items():
        if cf_name not in existing:
            continue  # a state created after the checkpoint's column families were listed
        ttl_ms = ttl_full.get(cf_name)
        for kg, rows in by_key_group(cf_name):
            p = payload(op_id, kg)
            if ttl_ms is None:
                p["rows"][name] = (kind, ttl, rows)
                continue
            entries: dict[Any, Any] = {}
            for suffix, value in rows:
                decode_state_row(kind, suffix, value, entries)
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
        if cf_name not in existing:
            continue
        for kg, rows in by_key_group(cf_name):
            payload(op_id, kg)["timer_rows"][field] = [suffix for suffix, _ in rows]
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
            queue.register(*decode_timer_row(row[2:]), _KG.unpack_from(row)[0])
    for op_id, groups in handle.get("heap_timers", {}).items():
        b = backend(op_id)
        for kg, timers in groups.items():
            if r.contains(kg):
                b.processing_timers.restore_group(kg, timers["processing_timers"])
                b.event_timers.restore_group(kg, timers["event_timers"])
