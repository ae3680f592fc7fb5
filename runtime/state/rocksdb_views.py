"""Point-in-time views of a task's RocksDB that its checkpoint writer thread still has to read.

A full snapshot (Flink's RocksFullSnapshotStrategy) does not flush memtables or write files on the
task thread: it pins one RocksDB iterator per column family there, and a RocksDB iterator reads the
instance as of its creation whatever is written, deleted, flushed or compacted afterwards (an
implicit snapshot, what Flink gets from ``db.getSnapshot()``). The writer thread then reads the
live instance through them. (rocksdict's own ``Snapshot.iter`` does not apply its snapshot to the
iterator it returns, in 0.3.29: the iterator is the snapshot here.)

The views read a live instance, so its end must wait for them: :meth:`PinnedViews.close`, called
before the instance closes, stops new reads, waits for one in progress (which gives up at its next
key group, see :attr:`PinnedViews.closed`) and drops the views never read, so no read touches a
closed instance or the directory deleted after it.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

__all__ = ["PinnedViews", "ViewsReleased"]


class ViewsReleased(RuntimeError):
    """The views were dropped before they were read: the instance closed (its task ended)."""


class PinnedViews:
    """The views pinned per snapshot (a token each) until read or released."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._held: dict[int, dict[str, Any]] = {}
        self._next = 0
        self._reading = 0
        self.closed = False  # a read in progress checks it between key groups

    def pin(self, views: dict[str, Any]) -> int:
        """Holds ``views`` ({column family name: iterator}); returns their token."""
        with self._cond:
            if self.closed:
                raise ViewsReleased("the task's RocksDB instance is closed")
            self._next += 1
            self._held[self._next] = views
            return self._next

    @contextlib.contextmanager
    def reading(self, token: int) -> Iterator[dict[str, Any]]:
        """The views of ``token``, taken out of the registry for one read; the instance stays
        open until the block ends. Raises :class:`ViewsReleased` if they were dropped."""
        with self._cond:
            views = self._held.pop(token, None)
            if views is None or self.closed:
                raise ViewsReleased("the task's RocksDB instance closed before its snapshot was read")
            self._reading += 1
        try:
            yield views
        finally:
            views.clear()  # the iterators go now, before the instance may close
            with self._cond:
                self._reading -= 1
                self._cond.notify_all()

    def release(self, token: int) -> None:
        """Drops the views of a snapshot that will not be read (its checkpoint failed)."""
        with self._cond:
            self._held.pop(token, None)

    def held(self) -> int:
        with self._cond:
            return len(self._held) + self._reading

    def close(self) -> None:
        """No read from now on: waits for the one in progress and drops the others."""
        with self._cond:
            self.closed = True
            self._held.clear()
            while self._reading:
                self._cond.wait()
