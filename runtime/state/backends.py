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
import uuid
from typing import Any, Mapping

from millstream.runtime import config as cfg
from millstream.runtime.state.heap_backend import KeyedStateBackend

__all__ = ["KeyedBackendFactory"]

_KEYS = (cfg.STATE_BACKEND_TYPE, cfg.STATE_BACKEND_ROCKSDB_LOCALDIR, cfg.STATE_BACKEND_ROCKSDB_TIMER_SERVICE,
         cfg.STATE_BACKEND_ROCKSDB_MEMORY_MANAGED, cfg.STATE_BACKEND_ROCKSDB_MEMORY_FIXED_PER_SLOT,
         cfg.STATE_BACKEND_ROCKSDB_WRITE_BUFFER_RATIO)


class KeyedBackendFactory:
    """Creates the keyed backends of one task; ``close()`` releases the task's RocksDB."""

    def __init__(self, env: Any) -> None:
        self._env = env
        params: Mapping[str, str] = getattr(env, "job_parameters", {}) or {}
        self.settings = cfg.Configuration.from_dict(
            {o.key: params[o.key] for o in _KEYS if o.key in params}, source="the job's configuration")
        self.type = self.settings.get(cfg.STATE_BACKEND_TYPE)
        self._db: Any = None

    def _rocksdb(self) -> Any:
        if self._db is None:
            from millstream.runtime.state.rocksdb_backend import RocksDBOptions, TaskRocksDB

            s, env = self.settings, self._env
            local_dir = s.get(cfg.STATE_BACKEND_ROCKSDB_LOCALDIR) or os.getcwd()
            options = RocksDBOptions(
                local_dir,
                timer_service=s.get(cfg.STATE_BACKEND_ROCKSDB_TIMER_SERVICE),
                memory_managed=s.get(cfg.STATE_BACKEND_ROCKSDB_MEMORY_MANAGED),
                fixed_memory_per_slot=s.get(cfg.STATE_BACKEND_ROCKSDB_MEMORY_FIXED_PER_SLOT),
                write_buffer_ratio=s.get(cfg.STATE_BACKEND_ROCKSDB_WRITE_BUFFER_RATIO),
            )
            # Flink's layout: job, operator (here the task), subtask and a fresh id per attempt.
            name = (f"job_{env.job_id or 'local'}_task_{_safe(env.task_name)}_{env.subtask_index}"
                    f"_attempt_{env.attempt_number}_{uuid.uuid4().hex[:8]}")
            self._db = TaskRocksDB(os.path.join(local_dir, "millstream-rocksdb", name), options)
        return self._db

    def create(self, operator_id: str) -> KeyedStateBackend:
        env = self._env
        if self.type == "rocksdb":
            from millstream.runtime.state.rocksdb_backend import RocksDBKeyedStateBackend

            return RocksDBKeyedStateBackend(self._rocksdb(), operator_id, env.max_parallelism, env.parallelism,
                                            env.key_group_range, clock=env.now_ms)
        return KeyedStateBackend(env.max_parallelism, env.parallelism, env.key_group_range, clock=env.now_ms)

    @property
    def db(self) -> Any:
        """The task's RocksDB instance, None before the first rocksdb backend."""
        return self._db

    def close(self) -> None:
        if self._db is not None:
            db, self._db = self._db, None
            db.close()


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)[:40]
