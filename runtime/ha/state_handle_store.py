"""Pointers in ZooKeeper, data in shared storage (Flink's ZooKeeperStateHandleStore and
FileSystemStateStorageHelper).

A node ``<root>/<name>`` holds a small pointer (JSON); the data it points to is a file in HA
storage (job graphs) or a checkpoint's ``_metadata`` (checkpoints). Each store instance (one per
JobManager process and store) locks the nodes it added or read with an EPHEMERAL child
``<name>/locks/<lock id>``, owned by its ZooKeeper session. A node is deleted only by
``release_and_try_remove`` once no lock is left, atomically (``locks`` and the node in one
transaction): a deposed leader releasing a job cannot delete it while a new leader holds it, and
a crashed leader's locks vanish with its session.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError, NotEmptyError

from millstream.runtime.durable_files import write_atomically
from millstream.runtime.ha.api import HaError, HaStorageError
from millstream.runtime.ha.zookeeper_client import ZooKeeperClient

log = logging.getLogger(__name__)

LOCKS_NODE = "locks"


# -- files in high-availability.storageDir ----------------------------------------------------


@dataclass(frozen=True)
class StoredFile:
    """Where a payload was written, with what it must read back as."""

    path: str
    size: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "sha256": self.sha256}

    @classmethod
    def from_json(cls, doc: Any, where: str) -> StoredFile:
        try:
            return cls(str(doc["path"]), int(doc["size"]), str(doc["sha256"]))
        except (KeyError, TypeError, ValueError) as e:
            raise HaStorageError(f"{where}: not a stored-file pointer ({e!r}): {str(doc)[:200]}") from e


class FileStateStorage:
    """Payloads as files ``<directory>/<prefix>-<uuid>`` (Flink's FileSystemStateStorageHelper)."""

    def __init__(self, directory: Path, prefix: str) -> None:
        self.directory = directory
        self.prefix = prefix

    def store(self, data: bytes) -> StoredFile:
        path = self.directory / f"{self.prefix}-{uuid.uuid4().hex}"
        try:
            write_atomically(path, data)
        except OSError as e:
            raise HaStorageError(f"cannot write to high-availability.storageDir ({path}): {e}") from e
        return StoredFile(str(path), len(data), hashlib.sha256(data).hexdigest())

    @staticmethod
    def retrieve(stored: StoredFile) -> bytes:
        try:
            data = Path(stored.path).read_bytes()
        except OSError as e:
            raise HaStorageError(f"HA storage file {stored.path} cannot be read: {e}") from e
        if len(data) != stored.size or hashlib.sha256(data).hexdigest() != stored.sha256:
            raise HaStorageError(f"HA storage file {stored.path} is corrupt: {len(data)} bytes, expected {stored.size} "
                                 "with the checksum recorded in ZooKeeper")
        return data

    @staticmethod
    def discard(stored: StoredFile) -> None:
        try:
            os.unlink(stored.path)
        except FileNotFoundError:
            pass
        except OSError as e:
            log.warning("could not delete HA storage file %s: %s", stored.path, e)


# -- nodes with locks in ZooKeeper -------------------------------------------------------------


class ZooKeeperStateHandleStore:
    """Named pointer nodes under ``root`` (a full ZooKeeper path), locked per store instance.

    Every method blocks on ZooKeeper (with the client's retries): call it off the asyncio loop.
    """

    def __init__(self, client: ZooKeeperClient, root: str, lock_id: Optional[str] = None) -> None:
        self._client = client
        self._zk = client.kazoo
        self.root = root
        self.lock_id = lock_id or uuid.uuid4().hex
        client.retry(self._zk.ensure_path, root)

    def _node(self, name: str) -> str:
        if not name or "/" in name:
            raise HaError(f"invalid node name {name!r}")
        return f"{self.root}/{name}"

    def _lock(self, name: str) -> str:
        return f"{self._node(name)}/{LOCKS_NODE}/{self.lock_id}"

    def add_and_lock(self, name: str, data: bytes) -> None:
        """Create ``name`` with ``data`` and our lock, atomically; :class:`HaError` if it exists."""
        node = self._node(name)

        def add() -> None:
            tx = self._zk.transaction()
            tx.create(node, data)
            tx.create(f"{node}/{LOCKS_NODE}", b"")
            tx.create(self._lock(name), b"", ephemeral=True)
            results = tx.commit()
            failures = [r for r in results if isinstance(r, Exception)]
            if failures:
                if any(isinstance(r, NodeExistsError) for r in failures):
                    raise NodeExistsError()
                raise failures[0]

        try:
            self._client.retry(add)
        except NodeExistsError:
            # After a connection loss the first attempt may have committed: ours if our lock is there.
            if self._zk.exists(self._lock(name)) is not None and self._zk.get(node)[0] == data:
                return
            raise HaError(f"ZooKeeper node {node} exists already") from None

    def replace(self, name: str, data: bytes) -> None:
        """Overwrite the pointer of an existing node (locking it too)."""
        self.lock(name)
        self._client.retry(self._zk.set, self._node(name), data)

    def lock(self, name: str) -> None:
        try:
            self._client.retry(self._zk.create, self._lock(name), b"", ephemeral=True)
        except NodeExistsError:
            pass  # ours already
        except NoNodeError:
            raise HaStorageError(f"ZooKeeper node {self._node(name)} does not exist (or is being deleted)") from None

    def get_and_lock(self, name: str) -> bytes:
        """Lock ``name`` and read its pointer (:class:`HaStorageError` if there is no such node)."""
        self.lock(name)
        try:
            data, _ = self._client.retry(self._zk.get, self._node(name))
        except NoNodeError:
            raise HaStorageError(f"ZooKeeper node {self._node(name)} does not exist") from None
        return bytes(data)

    def get(self, name: str) -> Optional[bytes]:
        """The pointer without locking; None if there is no such node."""
        try:
            data, _ = self._client.retry(self._zk.get, self._node(name))
        except NoNodeError:
            return None
        return bytes(data)

    def names(self) -> list[str]:
        try:
            return sorted(self._client.retry(self._zk.get_children, self.root))
        except NoNodeError:
            return []

    def exists(self, name: str) -> bool:
        return self._client.retry(self._zk.exists, self._node(name)) is not None

    def release(self, name: str) -> None:
        try:
            self._client.retry(self._zk.delete, self._lock(name))
        except NoNodeError:
            pass

    def release_and_try_remove(self, name: str) -> bool:
        """Release our lock; delete the node if no other lock holds it. True when the node is gone
        (the caller may then delete what it pointed to), False when another JobManager holds it."""
        self.release(name)
        node = self._node(name)

        def remove() -> bool:
            tx = self._zk.transaction()
            tx.delete(f"{node}/{LOCKS_NODE}")
            tx.delete(node)
            results = tx.commit()
            failures = [r for r in results if isinstance(r, Exception)]
            if not failures:
                return True
            if any(isinstance(r, NotEmptyError) for r in failures):
                return False
            if any(isinstance(r, NoNodeError) for r in failures):
                # No locks node (a half-removed or hand-made node) or no node at all.
                try:
                    self._zk.delete(node)
                except NoNodeError:
                    return True
                except NotEmptyError:
                    return False
                return True
            raise failures[0]

        try:
            removed: bool = self._client.retry(remove)
        except KazooException as e:
            raise HaError(f"could not remove ZooKeeper node {node}: {e!r}") from e
        return removed

    def release_all(self) -> None:
        for name in self.names():
            self.release(name)


def pointer_bytes(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, sort_keys=True).encode("utf-8")


def parse_pointer(data: bytes, where: str) -> dict[str, Any]:
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise HaStorageError(f"{where}: the pointer in ZooKeeper is unreadable: {e}") from e
    if not isinstance(doc, dict):
        raise HaStorageError(f"{where}: the pointer in ZooKeeper is not an object: {str(doc)[:200]}")
    return doc
