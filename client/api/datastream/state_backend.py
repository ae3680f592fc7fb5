"""State backends at PyFlink's ``pyflink.datastream.state_backend`` path.

``HashMapStateBackend`` keeps a task's keyed state on the heap, as Python objects (the default);
``EmbeddedRocksDBStateBackend`` keeps it in an embedded RocksDB per task, on the worker's local
disk. ``env.set_state_backend(...)`` records the choice as ``state.backend.type`` (``hashmap`` or
``rocksdb``) in the job's configuration and ``get_state_backend()`` returns it.
"""
from __future__ import annotations

import enum
from typing import Any

from millstream.runtime import config as cfg
from millstream.runtime.state.options_factory import load_options_factory

__all__ = ["StateBackend", "HashMapStateBackend", "EmbeddedRocksDBStateBackend", "PredefinedOptions",
           "RocksDBOptionsFactory"]

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
        self._predefined: "PredefinedOptions | None" = None
        self._options_factory: str | None = None

    def set_predefined_options(self, options: "PredefinedOptions") -> None:
        """A profile of RocksDB options (``state.backend.rocksdb.predefined-options``), applied
        before the options factory's, as in Flink."""
        if not isinstance(options, PredefinedOptions):
            raise TypeError(f"set_predefined_options needs a PredefinedOptions, got {options!r}")
        self._predefined = options

    def get_predefined_options(self) -> "PredefinedOptions":
        return self._predefined or PredefinedOptions.DEFAULT

    def set_options(self, options_factory_class_name: str) -> None:
        """A :class:`RocksDBOptionsFactory` by its fully-qualified class name
        (``state.backend.rocksdb.options-factory``; PyFlink names a Java class, here a Python one,
        importable where the tasks run). Each task's RocksDB opens with the options it returns,
        applied on top of the predefined profile. The class is checked here, as PyFlink does."""
        if not isinstance(options_factory_class_name, str):
            raise TypeError(f"set_options needs the factory's fully-qualified class name, got {options_factory_class_name!r}")
        load_options_factory(options_factory_class_name)  # raises ValueError naming the problem
        self._options_factory = options_factory_class_name

    def get_options(self) -> str | None:
        """The options factory's fully-qualified class name, or None."""
        return self._options_factory

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
        if self._predefined is not None:
            out[cfg.STATE_BACKEND_ROCKSDB_PREDEFINED_OPTIONS.key] = self._predefined.name
        if self._options_factory is not None:
            out[cfg.STATE_BACKEND_ROCKSDB_OPTIONS_FACTORY.key] = self._options_factory
        return out

    def __eq__(self, other: object) -> bool:
        return (type(other) is type(self) and other._incremental == self._incremental
                and other._predefined == self._predefined and other._options_factory == self._options_factory)

    def __hash__(self) -> int:
        return hash((type(self), self._incremental))

    def __repr__(self) -> str:
        return f"EmbeddedRocksDBStateBackend(enable_incremental_checkpointing={self._incremental!r})"


class PredefinedOptions(enum.Enum):
    """Flink's profiles of RocksDB options, mapped onto the rocksdict Options that have them:

    - DEFAULT: nothing beyond the defaults;
    - SPINNING_DISK_OPTIMIZED: level compaction with dynamic level bytes, 4 background jobs, no
      limit on open files;
    - SPINNING_DISK_OPTIMIZED_HIGH_MEM: dynamic level bytes, 4 background jobs, no limit on open
      files, 128 KB blocks with a bloom filter (10 bits per key), a 256 MB block cache (unless
      memory is managed: the slot's shared cache stays), level base 1 GB, 256 MB target files,
      64 MB write buffers, 4 of them, 3 merged;
    - FLASH_SSD_OPTIMIZED: 4 background jobs, no limit on open files.
    """

    DEFAULT = 0
    SPINNING_DISK_OPTIMIZED = 1
    SPINNING_DISK_OPTIMIZED_HIGH_MEM = 2
    FLASH_SSD_OPTIMIZED = 3


class RocksDBOptionsFactory:
    """Flink's RocksDBOptionsFactory for rocksdict: subclass it and name the subclass in
    ``EmbeddedRocksDBStateBackend.set_options``. Each method gets the ``rocksdict.Options`` the task's
    RocksDB is about to open with (the predefined profile and the managed memory applied) and a list
    for objects that must live as long as the options, and returns the options to use."""

    def create_db_options(self, current_options: Any, handles_to_close: list[Any]) -> Any:
        return current_options

    def create_column_options(self, current_options: Any, handles_to_close: list[Any]) -> Any:
        return current_options


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
