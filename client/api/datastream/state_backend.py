"""State backends at PyFlink's ``pyflink.datastream.state_backend`` path.

Millstream keeps a task's keyed state on the heap, as Python objects, and snapshots it whole into
the checkpoint storage: Flink's ``HashMapStateBackend``. That is the one backend provided here;
``env.set_state_backend(HashMapStateBackend())`` selects it (``state.backend.type: hashmap`` in
the job's configuration) and ``get_state_backend()`` returns it. ``EmbeddedRocksDBStateBackend``
is not provided (yet): an import of it fails naming it.
"""
from __future__ import annotations

from millstream.runtime import config as cfg

__all__ = ["StateBackend", "HashMapStateBackend"]

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


def state_backend_of_type(type_name: str | None) -> StateBackend | None:
    """The backend ``state.backend.type`` names (None: not set). Raises ValueError for a backend
    Millstream does not have."""
    if type_name is None:
        return None
    if type_name.strip().lower() == HashMapStateBackend.type_name:
        return HashMapStateBackend()
    raise ValueError(f"{STATE_BACKEND_TYPE_KEY}: {type_name!r} is not a state backend Millstream has; "
                     f"its only one is {HashMapStateBackend.type_name!r} (heap keyed state, HashMapStateBackend)")
