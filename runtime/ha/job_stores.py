"""The JobGraphStore and the JobResultStore (Flink's DefaultJobGraphStore on a
ZooKeeperStateHandleStore, and FileSystemJobResultStore), with their no-HA counterparts.

Layout::

    ZooKeeper  <path.root>/<cluster-id>/jobgraphs/<job id hex>          -> {"path", "size", "sha256"}
               <path.root>/<cluster-id>/jobgraphs/<job id hex>/locks/<lock id>   EPHEMERAL
    storage    <storageDir>/<cluster-id>/job-graphs/submittedJobGraph-<uuid>     the payload
               <storageDir>/<cluster-id>/job-result-store/<job id hex>_DIRTY.json   a terminal job,
               <storageDir>/<cluster-id>/job-result-store/<job id hex>.json         ... cleaned up

Every method blocks (ZooKeeper, files): call it from a thread, not on the asyncio loop.
"""
from __future__ import annotations

import json
import logging
import os
import re
import threading
from pathlib import Path

from millstream.runtime.durable_files import write_atomically
from millstream.runtime.ha.api import HaError, HaStorageError, JobResultEntry, JobResultStatus
from millstream.runtime.ha.state_handle_store import (
    FileStateStorage,
    StoredFile,
    ZooKeeperStateHandleStore,
    parse_pointer,
    pointer_bytes,
)
from millstream.runtime.ha.zookeeper_client import ZooKeeperClient

log = logging.getLogger(__name__)

JOB_GRAPHS_NODE = "jobgraphs"
JOB_GRAPHS_DIR = "job-graphs"
JOB_GRAPH_PREFIX = "submittedJobGraph"
JOB_RESULT_STORE_DIR = "job-result-store"
_DIRTY = "_DIRTY.json"
_CLEAN = ".json"
_JOB_ID_HEX = re.compile(r"[0-9a-f]{2,64}")


def _job_name(job_id: bytes) -> str:
    if not isinstance(job_id, bytes) or not job_id:
        raise HaError(f"a job id is non-empty bytes, got {job_id!r}")
    return job_id.hex()


def _job_id(name: str, where: str) -> bytes:
    if not _JOB_ID_HEX.fullmatch(name) or len(name) % 2:
        raise HaStorageError(f"{where}: {name!r} is not a job id")
    return bytes.fromhex(name)


# -- job graphs -------------------------------------------------------------------------------


class ZooKeeperJobGraphStore:
    """Submitted jobs' payloads in HA storage, their pointers (and this leader's locks) in ZooKeeper."""

    def __init__(self, client: ZooKeeperClient, cluster_storage_dir: Path) -> None:
        self._nodes = ZooKeeperStateHandleStore(client, client.path(JOB_GRAPHS_NODE))
        self._files = FileStateStorage(cluster_storage_dir / JOB_GRAPHS_DIR, JOB_GRAPH_PREFIX)

    def put_job_graph(self, job_id: bytes, payload: bytes) -> None:
        name = _job_name(job_id)
        stored = self._files.store(payload)
        pointer = pointer_bytes(stored.to_json())
        try:
            old = self._nodes.get(name)
            if old is None:
                self._nodes.add_and_lock(name, pointer)
            else:  # a re-submission of the same job (Flink replaces it)
                self._nodes.replace(name, pointer)
                FileStateStorage.discard(self._pointer(name, old))
        except BaseException:
            FileStateStorage.discard(stored)
            raise
        log.info("job %s: job graph stored in %s", name, stored.path)

    def _pointer(self, name: str, data: bytes) -> StoredFile:
        where = f"job {name} in the JobGraphStore"
        return StoredFile.from_json(parse_pointer(data, where), where)

    def recover_job_graph(self, job_id: bytes) -> bytes:
        name = _job_name(job_id)
        data = self._nodes.get_and_lock(name)
        try:
            return FileStateStorage.retrieve(self._pointer(name, data))
        except HaStorageError as e:
            raise HaStorageError(f"job {name} cannot be recovered: {e}") from e

    def job_ids(self) -> list[bytes]:
        return [_job_id(name, f"ZooKeeper node {self._nodes.root}") for name in self._nodes.names()]

    def remove_job_graph(self, job_id: bytes) -> None:
        name = _job_name(job_id)
        data = self._nodes.get(name)
        if self._nodes.release_and_try_remove(name):
            if data is not None:
                FileStateStorage.discard(self._pointer(name, data))
            log.info("job %s: job graph removed", name)
        else:
            log.info("job %s: job graph kept: another JobManager holds it", name)

    def release_job_graph(self, job_id: bytes) -> None:
        self._nodes.release(_job_name(job_id))

    def release_all(self) -> None:
        self._nodes.release_all()


class InMemoryJobGraphStore:
    """No HA: the jobs of this process only (Flink's StandaloneJobGraphStore keeps none at all;
    this one answers what was put, so one process sees a consistent store)."""

    def __init__(self) -> None:
        self._graphs: dict[bytes, bytes] = {}
        self._lock = threading.Lock()

    def put_job_graph(self, job_id: bytes, payload: bytes) -> None:
        with self._lock:
            self._graphs[job_id] = payload

    def recover_job_graph(self, job_id: bytes) -> bytes:
        with self._lock:
            if job_id not in self._graphs:
                raise HaStorageError(f"job {job_id.hex()} is not in the JobGraphStore")
            return self._graphs[job_id]

    def job_ids(self) -> list[bytes]:
        with self._lock:
            return sorted(self._graphs)

    def remove_job_graph(self, job_id: bytes) -> None:
        with self._lock:
            self._graphs.pop(job_id, None)

    def release_job_graph(self, job_id: bytes) -> None:
        pass  # one process: nobody else to hand it to

    def release_all(self) -> None:
        pass


# -- job results ------------------------------------------------------------------------------


def _entry_json(entry: JobResultEntry) -> bytes:
    doc = {"version": 1, "job_id": entry.job_id.hex(), "status": entry.status.value, "job_name": entry.job_name,
           "failure": entry.failure, "end_time_ms": entry.end_time_ms, "extra": dict(entry.extra)}
    return json.dumps(doc, sort_keys=True).encode("utf-8")


def _entry_from_json(data: bytes, where: str) -> JobResultEntry:
    try:
        doc = json.loads(data.decode("utf-8"))
        return JobResultEntry(bytes.fromhex(doc["job_id"]), JobResultStatus(doc["status"]), str(doc.get("job_name", "")),
                              str(doc.get("failure", "")), int(doc.get("end_time_ms", 0)),
                              {str(k): str(v) for k, v in dict(doc.get("extra", {})).items()})
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
        raise HaStorageError(f"job result {where} is unreadable or corrupt: {e!r}") from e


class FileSystemJobResultStore:
    """Terminal jobs as files in HA storage: ``<job>_DIRTY.json``, renamed to ``<job>.json`` once
    the job's HA data is cleaned up (Flink's FileSystemJobResultStore)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise HaStorageError(f"cannot create the job result store {directory}: {e}") from e

    def _dirty(self, job_id: bytes) -> Path:
        return self.directory / f"{_job_name(job_id)}{_DIRTY}"

    def _clean(self, job_id: bytes) -> Path:
        return self.directory / f"{_job_name(job_id)}{_CLEAN}"

    def create_dirty_result(self, entry: JobResultEntry) -> None:
        if self.has_job_result_entry(entry.job_id):
            raise HaError(f"job {entry.job_id.hex()} already has a result in {self.directory}")
        try:
            write_atomically(self._dirty(entry.job_id), _entry_json(entry))
        except OSError as e:
            raise HaStorageError(f"cannot write the result of job {entry.job_id.hex()} to {self.directory}: {e}") from e

    def mark_result_clean(self, job_id: bytes) -> None:
        dirty, clean = self._dirty(job_id), self._clean(job_id)
        if clean.exists() and not dirty.exists():
            return
        try:
            os.replace(dirty, clean)
        except FileNotFoundError:
            raise HaError(f"job {job_id.hex()} has no dirty result in {self.directory} to mark clean") from None
        except OSError as e:
            raise HaStorageError(f"cannot mark the result of job {job_id.hex()} clean: {e}") from e

    def has_dirty_job_result_entry(self, job_id: bytes) -> bool:
        return self._dirty(job_id).exists()

    def has_clean_job_result_entry(self, job_id: bytes) -> bool:
        return self._clean(job_id).exists()

    def has_job_result_entry(self, job_id: bytes) -> bool:
        return self.has_dirty_job_result_entry(job_id) or self.has_clean_job_result_entry(job_id)

    def dirty_results(self) -> list[JobResultEntry]:
        try:
            paths = sorted(p for p in self.directory.iterdir() if p.name.endswith(_DIRTY))
        except OSError as e:
            raise HaStorageError(f"cannot list the job result store {self.directory}: {e}") from e
        entries = []
        for path in paths:
            try:
                data = path.read_bytes()
            except OSError as e:
                raise HaStorageError(f"job result {path} cannot be read: {e}") from e
            entries.append(_entry_from_json(data, str(path)))
        return entries

    def clean_result(self, job_id: bytes) -> JobResultEntry:
        """A job's recorded result (dirty or clean)."""
        for path in (self._dirty(job_id), self._clean(job_id)):
            if path.exists():
                return _entry_from_json(path.read_bytes(), str(path))
        raise HaError(f"job {job_id.hex()} has no result in {self.directory}")


class InMemoryJobResultStore:
    """No HA: this process's terminal jobs (Flink's EmbeddedJobResultStore)."""

    def __init__(self) -> None:
        self._entries: dict[bytes, tuple[JobResultEntry, bool]] = {}  # job -> (entry, clean)
        self._lock = threading.Lock()

    def create_dirty_result(self, entry: JobResultEntry) -> None:
        with self._lock:
            if entry.job_id in self._entries:
                raise HaError(f"job {entry.job_id.hex()} already has a result")
            self._entries[entry.job_id] = (entry, False)

    def mark_result_clean(self, job_id: bytes) -> None:
        with self._lock:
            if job_id not in self._entries:
                raise HaError(f"job {job_id.hex()} has no dirty result to mark clean")
            self._entries[job_id] = (self._entries[job_id][0], True)

    def has_dirty_job_result_entry(self, job_id: bytes) -> bool:
        with self._lock:
            return job_id in self._entries and not self._entries[job_id][1]

    def has_clean_job_result_entry(self, job_id: bytes) -> bool:
        with self._lock:
            return job_id in self._entries and self._entries[job_id][1]

    def has_job_result_entry(self, job_id: bytes) -> bool:
        with self._lock:
            return job_id in self._entries

    def dirty_results(self) -> list[JobResultEntry]:
        with self._lock:
            return [entry for entry, clean in self._entries.values() if not clean]
