"""The keyed state backend unit tests run against: suites marked with the ``state_backend`` fixture
run every test once on the heap backend and once on the RocksDB backend, with the same assertions.

``make_chain`` (test_runtime_chain) puts the selected backend's settings into the task's job
configuration, as a job with ``state.backend.type: rocksdb`` does; :func:`keyed_backend` builds a
backend directly for tests of the state layer."""
from __future__ import annotations

from typing import Any, Callable

from millstream.runtime.keygroups import KeyGroupRange
from millstream.runtime.state.heap_backend import KeyedStateBackend

BACKENDS = ("hashmap", "rocksdb")
selected: dict[str, Any] = {"type": "hashmap", "dir": None, "open": []}


def job_parameters() -> dict[str, str]:
    """The job configuration entries of the selected backend."""
    if selected["type"] == "hashmap":
        return {}
    return {"state.backend.type": "rocksdb", "state.backend.rocksdb.localdir": str(selected["dir"]),
            "state.backend.rocksdb.timer-service.factory": selected.get("timers", "ROCKSDB")}


def keyed_backend(max_parallelism: int, parallelism: int, key_group_range: KeyGroupRange,
                  clock: Callable[[], int] | None = None, kind: str | None = None,
                  operator_id: str = "op") -> KeyedStateBackend:
    """A backend of the selected kind (or ``kind``); RocksDB ones are closed after the test."""
    kind = kind or selected["type"]
    if kind == "hashmap":
        return KeyedStateBackend(max_parallelism, parallelism, key_group_range, clock=clock)
    from millstream.runtime.state.rocksdb_backend import RocksDBKeyedStateBackend, RocksDBOptions, TaskRocksDB

    n = len(selected["open"])
    db = TaskRocksDB(f"{selected['dir']}/db{n}", RocksDBOptions(str(selected["dir"]),
                                                               timer_service=selected.get("timers", "ROCKSDB")))
    selected["open"].append(db)
    return RocksDBKeyedStateBackend(db, operator_id, max_parallelism, parallelism, key_group_range, clock=clock)
