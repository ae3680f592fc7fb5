"""BlobServer: user artifacts (job file, modules, archives) stored and served by content hash.

Files are stored as ``<storage>/<sha256>`` only: a client-supplied name is metadata for the
TaskManager (the module name to import) and never touches the JobManager's file system.
"""
from __future__ import annotations

import hashlib
import os
import re
import tempfile
from typing import AsyncIterator

import grpc

from millstream.proto import cluster_pb2 as cpb
from millstream.proto import cluster_pb2_grpc as cpb_grpc
from millstream.runtime.artifact_names import InvalidArtifactError, check_archive_target  # noqa: F401 (the Dispatcher's)

CHUNK_BYTES = 1024 * 1024
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,254}$")


def check_artifact_name(name: str) -> str:
    """A bare file name that a TaskManager may materialize: no directories, no dot-files."""
    if not _SAFE_NAME.match(name) or name in (".", "..") or not name.endswith((".py", ".zip", ".egg", ".whl")):
        raise InvalidArtifactError(
            f"Artifact name {name!r} is not allowed: use a plain file name ending in .py, .zip, .egg or .whl"
        )
    return name


class BlobStore:
    def __init__(self, storage_dir: str | None = None) -> None:
        self._tmp = None if storage_dir else tempfile.TemporaryDirectory(prefix="millstream-blobs-")
        self.storage_dir = storage_dir or self._tmp.name  # type: ignore[union-attr]
        os.makedirs(self.storage_dir, exist_ok=True)

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
