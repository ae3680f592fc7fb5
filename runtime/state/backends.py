"""Which keyed state backend a task's keyed operators get (``state.backend.type``).

The choice travels in the job's configuration (``env.set_state_backend`` or ``-D``). ``hashmap``
gives every keyed operator a :class:`~millstream.runtime.state.heap_backend.KeyedStateBackend`;
``rocksdb`` opens one RocksDB instance for the task, under ``state.backend.rocksdb.localdir``, and
gives each keyed operator a :class:`~millstream.runtime.state.rocksdb_backend.RocksDBKeyedStateBackend`
on it. The instance is closed and its directory deleted when the task ends: a restarted task
restores from the checkpoint, never from a local directory.
"""
from __future__ import annotations

import os
import shutil
import uuid
from typing import Any, Mapping

from millstream.runtime import config as cfg
from millstream.runtime.state.heap_backend import KeyedStateBackend
from millstream.runtime.state.rocksdb_backend import RocksDBKeyedStateBackend, RocksDBOptions, TaskRocksDB
from millstream.runtime.state.rocksdb_snapshot import take_full_snapshot, take_native_snapshot

__all__ = ["KeyedBackendFactory"]

_KEYS = (cfg.STATE_BACKEND_TYPE, cfg.STATE_BACKEND_ROCKSDB_LOCALDIR, cfg.STATE_BACKEND_ROCKSDB_TIMER_SERVICE,
         cfg.STATE_BACKEND_ROCKSDB_MEMORY_MANAGED, cfg.STATE_BACKEND_ROCKSDB_MEMORY_FIXED_PER_SLOT,
         cfg.STATE_BACKEND_ROCKSDB_WRITE_BUFFER_RATIO, cfg.CHECKPOINTING_INCREMENTAL,
         cfg.STATE_BACKEND_ROCKSDB_PREDEFINED_OPTIONS, cfg.STATE_BACKEND_ROCKSDB_OPTIONS_FACTORY)


class KeyedBackendFactory:
    """Creates the keyed backends of one task; ``close()`` releases the task's RocksDB."""

    def __init__(self, env: Any) -> None:
        self._env = env
        params: Mapping[str, str] = getattr(env, "job_parameters", {}) or {}
        self.settings = cfg.Configuration.from_dict(
            {o.key: params[o.key] for o in _KEYS if o.key in params}, source="the job's configuration")
        self.type = self.settings.get(cfg.STATE_BACKEND_TYPE)
        self.incremental = self.type == "rocksdb" and self.settings.get(cfg.CHECKPOINTING_INCREMENTAL)
        self._db: Any = None
        self._rocks: dict[str, Any] = {}  # operator id -> its RocksDB backend
        # Incremental checkpoints: local SST name -> shared file name, of the last completed
        # checkpoint (what the next one may reference) and of each checkpoint not yet confirmed.
        self.reusable: dict[str, str] = {}
        self._uploads: dict[int, dict[str, str]] = {}

    def local_dir(self) -> str:
        """Where this task's RocksDB files go (state.backend.rocksdb.localdir, else the working dir)."""
        return self.settings.get(cfg.STATE_BACKEND_ROCKSDB_LOCALDIR) or os.getcwd()

    def _rocksdb(self) -> Any:
        if self._db is None:
            s, env = self.settings, self._env
            local_dir = self.local_dir()
            options = RocksDBOptions(
                local_dir,
                timer_service=s.get(cfg.STATE_BACKEND_ROCKSDB_TIMER_SERVICE),
                memory_managed=s.get(cfg.STATE_BACKEND_ROCKSDB_MEMORY_MANAGED),
                fixed_memory_per_slot=s.get(cfg.STATE_BACKEND_ROCKSDB_MEMORY_FIXED_PER_SLOT),
                write_buffer_ratio=s.get(cfg.STATE_BACKEND_ROCKSDB_WRITE_BUFFER_RATIO),
                predefined=s.get(cfg.STATE_BACKEND_ROCKSDB_PREDEFINED_OPTIONS),
                options_factory=s.get(cfg.STATE_BACKEND_ROCKSDB_OPTIONS_FACTORY),
            )
            # Flink's layout: job, operator (here the task), subtask and a fresh id per attempt.
            stem = f"job_{env.job_id or 'local'}_task_{_safe(env.task_name)}_{env.subtask_index}_attempt_"
            name = f"{stem}{env.attempt_number}_{uuid.uuid4().hex[:8]}"
            _remove_earlier_attempts(os.path.join(local_dir, "millstream-rocksdb"), stem, env.attempt_number)
            self._db = TaskRocksDB(os.path.join(local_dir, "millstream-rocksdb", name), options)
        return self._db

    def create(self, operator_id: str) -> KeyedStateBackend:
        env = self._env
        if self.type == "rocksdb":
            backend = RocksDBKeyedStateBackend(self._rocksdb(), operator_id, env.max_parallelism, env.parallelism,
                                               env.key_group_range, clock=env.now_ms)
            self._rocks[operator_id] = backend
            return backend
        return KeyedStateBackend(env.max_parallelism, env.parallelism, env.key_group_range, clock=env.now_ms)

    @property
    def db(self) -> Any:
        """The task's RocksDB instance, None before the first rocksdb backend."""
        return self._db

    # -- incremental checkpoints ----------------------------------------------------------------

    def native_snapshot(self, checkpoint_id: int, incremental: bool) -> Any:
        """The task thread's part of a RocksDB snapshot, None for heap state: incremental, a RocksDB
        checkpoint of hard links, which the writer thread uploads; full, views pinned at this point,
        which the writer thread reads into canonical key groups."""
        if self._db is None:
            return None
        if incremental:
            return take_native_snapshot(self._db, self._rocks, checkpoint_id)
        return take_full_snapshot(self._db, self._rocks, checkpoint_id)

    def uploaded(self, checkpoint_id: int, shared: dict[str, str]) -> None:
        """The writer thread uploaded checkpoint ``checkpoint_id``'s files (not yet confirmed)."""
        self._uploads[checkpoint_id] = dict(shared)

    def checkpoint_completed(self, checkpoint_id: int) -> None:
        """Flink's notifyCheckpointComplete: its files may be referenced from now on."""
        # A completed checkpoint without an upload of this task (a savepoint, canonical) may
        # subsume the one whose files were reusable: the next checkpoint uploads everything.
        self.reusable = self._uploads.pop(checkpoint_id, {})  # one assignment: the writer reads either map whole
        for old in [c for c in self._uploads if c < checkpoint_id]:
            del self._uploads[old]

    def close(self) -> None:
        if self._db is not None:
            db, self._db = self._db, None
            db.close()


def _remove_earlier_attempts(parent: str, stem: str, attempt: int) -> None:
    """Deletes what earlier attempts of this subtask left (a process killed before its task closed
    its RocksDB): an earlier attempt of the same subtask has ended once a later one starts."""
    try:
        names = os.listdir(parent)
    except FileNotFoundError:
        return
    for entry in names:
        if entry.startswith(stem):
            number = entry[len(stem):].split("_", 1)[0]
            if number.isdigit() and int(number) < attempt:
                shutil.rmtree(os.path.join(parent, entry), ignore_errors=True)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)[:40]
