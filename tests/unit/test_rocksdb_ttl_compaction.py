"""StateTtlConfig's ``cleanup_in_rocksdb_compact_filter`` on the RocksDB backend: expired entries
leave the column family, and the files on disk, without being read (Flink's FlinkCompactionFilter
drops them while RocksDB compacts; the binding has no filter hook, so a sweep driven by the
records processed deletes them and compacts). Rows are counted with a raw RocksDB iterator, the
files are searched for the expired values' bytes; the clock is a ManualClock."""
from __future__ import annotations

import os
from pathlib import Path

from millstream.common.time import Time
from millstream.datastream.state import ListStateDescriptor, MapStateDescriptor, StateTtlConfig, ValueStateDescriptor
from millstream.runtime.keygroups import KeyGroupRange
from millstream.runtime.state.rocksdb_backend import RocksDBKeyedStateBackend, RocksDBOptions, TaskRocksDB
from millstream.runtime.task.environment import ManualClock

TTL, T0 = 1_000, 5_000_000


def _backend(tmp_path: Path, clock: ManualClock) -> RocksDBKeyedStateBackend:
    db = TaskRocksDB(str(tmp_path / "db"), RocksDBOptions(str(tmp_path)))
    return RocksDBKeyedStateBackend(db, "op", 128, 1, KeyGroupRange(0, 127), clock=clock.now_ms)


def _ttl(compact_filter: bool = True, background: bool = False) -> StateTtlConfig:
    b = StateTtlConfig.new_builder(Time.milliseconds(TTL))
    if not background:
        b.disable_cleanup_in_background()
    if compact_filter:
        b.cleanup_in_rocksdb_compact_filter(10)
    return b.build()


def _rows(b: RocksDBKeyedStateBackend, name: str) -> int:
    it = b.db.column_family(f"op/{name}").iter()
    it.seek_to_first()
    n = 0
    while it.valid():
        n += 1
        it.next()
    return n


def _sst_bytes(db_dir: Path) -> int:
    return sum(p.stat().st_size for p in db_dir.glob("*.sst"))


def _files_contain(db_dir: Path, marker: bytes) -> bool:
    return any(marker in p.read_bytes() for p in db_dir.iterdir() if p.is_file())


def test_expired_values_disappear_from_the_column_family_and_the_files_without_a_read(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    b = _backend(tmp_path, clock)
    s = b.get_value_state(_with(ValueStateDescriptor("v", None), _ttl()))
    old = [os.urandom(48) for _ in range(300)]  # incompressible: their bytes show in the SST files
    new = [os.urandom(48) for _ in range(200)]
    for i, value in enumerate(old):  # written at T0: expire at T0 + TTL
        b.set_current_key(f"old{i}")
        s.update(value)
    clock.set(T0 + TTL // 2)
    for i, value in enumerate(new):  # still live at T0 + TTL
        b.set_current_key(f"new{i}")
        s.update(value)
    b.db.column_family("op/v").flush()
    assert _rows(b, "v") == 500 and any(_files_contain(tmp_path / "db", v) for v in old)
    sst_before = _sst_bytes(tmp_path / "db")
    clock.set(T0 + TTL)
    b.run_record_cleanups(999)  # under one chunk of records: nothing yet
    assert _rows(b, "v") == 500
    b.run_record_cleanups(1)  # records processed (no state read): the sweep goes round once
    assert _rows(b, "v") == 200
    b.db.column_family("op/v").flush()
    assert not any(_files_contain(tmp_path / "db", v) for v in old)  # compacted out of the SST files
    assert _sst_bytes(tmp_path / "db") < 0.6 * sst_before  # 300 of 500 rows gone from the files
    b.set_current_key("new7")
    assert s.value() == new[7]
    b.db.close()


def test_lists_lose_their_expired_elements_and_maps_their_expired_entries(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    b = _backend(tmp_path, clock)
    lst = b.get_list_state(_with(ListStateDescriptor("l", None), _ttl()))
    mp = b.get_map_state(_with(MapStateDescriptor("m", None, None), _ttl()))
    for k in range(50):
        b.set_current_key(k)
        lst.add("old")
        mp.put("old", 1)
    clock.set(T0 + TTL // 2)
    for k in range(50):
        b.set_current_key(k)
        lst.add("new")
        mp.put("new", 2)
    b.flush()
    assert _rows(b, "l") == 50 and _rows(b, "m") == 100
    clock.set(T0 + TTL)
    b.run_record_cleanups(1000)
    assert _rows(b, "m") == 50  # one row per map entry: the expired ones are gone
    assert b.entries("l") == {k: [("new", T0 + TTL // 2)] for k in range(50)}  # raw rows: element, timestamp
    b.db.close()


def test_without_the_strategy_nothing_is_swept(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    b = _backend(tmp_path, clock)
    s = b.get_value_state(_with(ValueStateDescriptor("v", None), _ttl(compact_filter=False)))
    for i in range(100):
        b.set_current_key(i)
        s.update(i)
    clock.set(T0 + 10 * TTL)
    b.run_record_cleanups(5000)
    assert _rows(b, "v") == 100
    b.db.close()


def test_cleanup_in_background_uses_it_by_default_as_flink(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    b = _backend(tmp_path, clock)
    s = b.get_value_state(_with(ValueStateDescriptor("v", None), _ttl(compact_filter=False, background=True)))
    for i in range(100):
        b.set_current_key(i)
        s.update(i)
    clock.set(T0 + TTL)
    b.run_record_cleanups(1000)
    assert _rows(b, "v") == 0
    b.db.close()


def _with(descriptor, config: StateTtlConfig):  # noqa: ANN001, ANN202
    descriptor.enable_time_to_live(config)
    return descriptor
