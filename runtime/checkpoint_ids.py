"""Checkpoint ids: the counter interface and its in-memory implementation (Flink's
CheckpointIDCounter and StandaloneCheckpointIDCounter).

A job's checkpoint coordinator draws its ids from a counter; a counter recovered after a failover
continues after every id ever handed out, so an id is never reused. The HA services hand out the
counter of each job: this in-memory one without HA (a restarted JobManager starts it after the
highest checkpoint directory on disk), ZooKeeper's (`runtime/ha/checkpoints`) with HA.
"""
from __future__ import annotations

import threading
from typing import Protocol

INITIAL_CHECKPOINT_ID = 1


class CheckpointIDCounter(Protocol):
    """Hands out checkpoint ids; a recovered counter continues after every id ever used."""

    def get_and_increment(self) -> int: ...

    def get(self) -> int: ...

    def set_count(self, next_id: int) -> None: ...


class StandaloneCheckpointIDCounter:
    """No HA: the ids of this process, starting at ``start``. Across a JobManager restart, start it
    after the highest id found in checkpoint storage. Thread-safe: the HA services' counters are
    called from threads."""

    def __init__(self, start: int = INITIAL_CHECKPOINT_ID) -> None:
        if start < INITIAL_CHECKPOINT_ID:
            raise ValueError(f"checkpoint ids start at {INITIAL_CHECKPOINT_ID}, got {start}")
        self._next = start
        self._lock = threading.Lock()

    def get_and_increment(self) -> int:
        with self._lock:
            value = self._next
            self._next += 1
            return value

    def get(self) -> int:
        return self._next

    def set_count(self, next_id: int) -> None:
        if next_id < INITIAL_CHECKPOINT_ID:
            raise ValueError(f"checkpoint ids start at {INITIAL_CHECKPOINT_ID}, got {next_id}")
        with self._lock:
            self._next = next_id

    def shutdown(self, globally_terminal: bool) -> None:
        """Nothing to release: the ids live in this process only."""
