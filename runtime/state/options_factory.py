"""Loading a RocksDB options factory by its class name (``state.backend.rocksdb.options-factory``):
shared by the client, which checks the name as PyFlink does, and the task, which applies it."""
from __future__ import annotations

from typing import Any


def load_options_factory(name: str) -> Any:
    """An instance of the options factory class ``package.module.Class``; a clear error when it
    cannot be imported or is no options factory."""
    import importlib

    module, _, cls = name.rpartition(".")
    if not module or not cls:
        raise ValueError(f"state.backend.rocksdb.options-factory: {name!r} is not a fully-qualified class name "
                         "(package.module.Class)")
    try:
        factory = getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"state.backend.rocksdb.options-factory: cannot load {name!r}: {e}") from e
    if not isinstance(factory, type) or not all(callable(getattr(factory, m, None))
                                                for m in ("create_db_options", "create_column_options")):
        raise ValueError(f"state.backend.rocksdb.options-factory: {name!r} is not a RocksDBOptionsFactory "
                         "(it needs create_db_options and create_column_options)")
    return factory()
