"""State backends at PyFlink's ``pyflink.datastream.state_backend`` path.

``HashMapStateBackend`` keeps a task's keyed state on the heap, as Python objects (the default);
``EmbeddedRocksDBStateBackend`` keeps it in an embedded RocksDB per task, on the worker's local
disk. ``env.set_state_backend(...)`` records the choice as ``state.backend.type`` (``hashmap`` or
``rocksdb``) in the job's configuration and ``get_state_backend()`` returns it.
"""
from __future__ import annotations

from millstream.runtime import config as cfg

__all__ = ["StateBackend", "HashMapStateBackend", "EmbeddedRocksDBStateBackend"]

STATE_BACKEND_TYPE_KEY = cfg.STATE_BACKEND_TYPE.key  # Flink's key, declared once in the option registry


class StateBackend:
    """How a job's operators hold their state while running (Flink's ``StateBackend``)."""

    type_name = ""  # the value of ``state.backend.type`` that selects this backend

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class HashMapStateBackend(StateBackend):
    """Keyed state as objects on the heap of the task's process, snapshotted whole into the
    checkpoint storage at each checkpoint (what Millstream's tasks do)."""

    type_name = "hashmap"


class EmbeddedRocksDBStateBackend(StateBackend):
    """Keyed state in an embedded RocksDB instance per task, under ``state.backend.rocksdb.localdir``
    on the task's worker: state larger than memory spills to local disk.

    ``enable_incremental_checkpointing``: True or False sets ``execution.checkpointing.incremental``
    for the job; None (PyFlink's default, Flink's UNDEFINED) leaves it to the configuration.
    """

    type_name = "rocksdb"

    def __init__(self, enable_incremental_checkpointing: bool | None = None) -> None:
        if enable_incremental_checkpointing not in (None, True, False):
            raise TypeError(f"Unsupported input for 'enable_incremental_checkpointing': "
                            f"{enable_incremental_checkpointing!r}, the value of the parameter should be None or "
                            "True or False.")
        self._incremental = enable_incremental_checkpointing
        self._paths: list[str] = []

    def is_incremental_checkpoints_enabled(self) -> bool:
        return bool(self._incremental)

    def set_db_storage_paths(self, *paths: str) -> None:
        """Where the tasks' RocksDB files go (``state.backend.rocksdb.localdir``); none: the task's
        working directory. Millstream uses one directory: more than one is refused."""
        if len(paths) > 1:
            raise ValueError(f"set_db_storage_paths: Millstream keeps a task's RocksDB in one directory, got {len(paths)}")
        if paths and (not isinstance(paths[0], str) or not paths[0]):
            raise ValueError(f"set_db_storage_paths needs a directory, got {paths[0]!r}")
        self._paths = list(paths)

    def get_db_storage_paths(self) -> list[str]:
        return list(self._paths)

    def _job_settings(self) -> dict[str, str]:
        out = {}
        if self._incremental is not None:
            out[INCREMENTAL_KEY] = "true" if self._incremental else "false"
        if self._paths:
            out[cfg.STATE_BACKEND_ROCKSDB_LOCALDIR.key] = self._paths[0]
        return out

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._incremental == self._incremental

    def __hash__(self) -> int:
        return hash((type(self), self._incremental))

    def __repr__(self) -> str:
        return f"EmbeddedRocksDBStateBackend(enable_incremental_checkpointing={self._incremental!r})"


INCREMENTAL_KEY = cfg.CHECKPOINTING_INCREMENTAL.key


def state_backend_of_type(type_name: str | None) -> StateBackend | None:
    """The backend ``state.backend.type`` names (None: not set). Raises ValueError for a backend
    Millstream does not have."""
    if type_name is None:
        return None
    name = type_name.strip().lower()
    if name == HashMapStateBackend.type_name:
        return HashMapStateBackend()
    if name == EmbeddedRocksDBStateBackend.type_name:
        return EmbeddedRocksDBStateBackend()
    raise ValueError(f"{STATE_BACKEND_TYPE_KEY}: {type_name!r} is not a state backend Millstream has; "
                     f"its are {HashMapStateBackend.type_name!r} (HashMapStateBackend) and "
                     f"{EmbeddedRocksDBStateBackend.type_name!r} (EmbeddedRocksDBStateBackend)")
