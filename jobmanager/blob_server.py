"""BlobServer: user artifacts (job file, modules, archives) stored and served by content hash.

Files are stored as ``<storage>/<sha256>`` only: a client-supplied name is metadata for the
TaskManager (the module name to import) and never touches the JobManager's file system.

Without ``millstream.blob.storage-dir`` each JobManager keeps its blobs in a temporary
``millstream-blobs-*`` directory, removed when it stops; a killed JobManager cannot remove it. So
the owner holds an ``flock`` on the directory's ``.owner.lock`` for its life (the kernel releases it
when the process dies, however it dies), and a starting JobManager removes every such directory
whose lock it can take: its owner is gone. A directory without a lock file, or younger than a
minute (its owner may be between creating it and locking it), is left alone.
"""
from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
import shutil
import tempfile
import time
from typing import AsyncIterator

import grpc

from millstream.proto import cluster_pb2 as cpb
from millstream.proto import cluster_pb2_grpc as cpb_grpc

CHUNK_BYTES = 1024 * 1024


log = logging.getLogger(__name__)

TEMP_PREFIX = "millstream-blobs-"
OWNER_LOCK = ".owner.lock"
_MIN_AGE_S = 60.0


def remove_stale_blob_dirs(parent: str | None = None, min_age_s: float = _MIN_AGE_S) -> list[str]:
    """Removes the temporary blob directories under ``parent`` (the temp dir) whose owning
    JobManager is gone (see the module docstring); returns their paths."""
    parent = parent or tempfile.gettempdir()
    removed: list[str] = []
    try:
        names = [n for n in os.listdir(parent) if n.startswith(TEMP_PREFIX)]
    except OSError:
        return removed
    for name in names:
        path = os.path.join(parent, name)
        lock_path = os.path.join(path, OWNER_LOCK)
        try:
            if os.path.islink(path) or not os.path.isdir(path) or os.stat(path).st_uid != os.getuid():
                continue
            if time.time() - os.stat(path).st_mtime < min_age_s:
                continue
            fd = os.open(lock_path, os.O_RDWR)  # no lock file: not ours to judge
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # its JobManager lives
        try:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        finally:
            os.close(fd)
    if removed:
        log.info("removed %d blob directories of JobManagers that are gone: %s", len(removed), ", ".join(removed))
    return removed


class BlobStore:
    def __init__(self, storage_dir: str | None = None) -> None:
        self._owner_lock = -1
        if storage_dir is None:
            remove_stale_blob_dirs()
        self._tmp = None if storage_dir else tempfile.TemporaryDirectory(prefix=TEMP_PREFIX)
        self.storage_dir = storage_dir or self._tmp.name  # type: ignore[union-attr]
        os.makedirs(self.storage_dir, exist_ok=True)
        if self._tmp is not None:  # held for this process's life: a later JobManager sees it is alive
            self._owner_lock = os.open(os.path.join(self.storage_dir, OWNER_LOCK), os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(self._owner_lock, fcntl.LOCK_EX)

    def put(self, content: bytes) -> str:
        key = hashlib.sha256(content).hexdigest()
        path = self._path(key)
        if not os.path.exists(path):
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "wb") as f:
                f.write(content)
            os.replace(tmp, path)
        return key

    def _path(self, key: str) -> str:
        if not re.fullmatch(r"[0-9a-f]{64}", key):
            raise KeyError(f"not a blob key: {key!r}")
        return os.path.join(self.storage_dir, key)

    def open(self, key: str):  # noqa: ANN201 - a binary file object
        path = self._path(key)
        if not os.path.exists(path):
            raise KeyError(f"no blob {key}")
        return open(path, "rb")

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
        if self._owner_lock >= 0:
            os.close(self._owner_lock)
            self._owner_lock = -1


class BlobServerServicer(cpb_grpc.BlobServerServicer):
    def __init__(self, store: BlobStore) -> None:
        self.store = store

    async def GetBlob(self, request: cpb.GetBlobRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[cpb.BlobChunk]:
        try:
            f = self.store.open(request.blob_key)
        except KeyError as exc:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
        with f:
            while chunk := f.read(CHUNK_BYTES):
                yield cpb.BlobChunk(data=chunk)
