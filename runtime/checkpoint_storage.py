"""File system checkpoint storage and the completed-checkpoint store (Flink's FsCheckpointStorage,
its ``_metadata`` file and StandaloneCompletedCheckpointStore), on a directory every TaskManager
and the JobManager share.

Layout (Flink's)::

    <execution.checkpointing.dir>/<job id hex>/chk-<n>/<uuid>.state   task state, written by tasks
    <execution.checkpointing.dir>/<job id hex>/chk-<n>/_metadata      written by the JobManager, LAST

A checkpoint is complete exactly when its ``_metadata`` exists: tasks write their state files
first (each to a fresh, exclusively created file, so concurrent writers never clash), and the
JobManager writes the metadata to a temporary file, fsyncs it and renames it into place once every
task acknowledged. A crash at any moment leaves either no ``_metadata`` (an incomplete checkpoint,
ignored on restore and deleted later) or a whole one. Deletion removes ``_metadata`` first, so a
half-deleted checkpoint is never taken for a complete one.

Task side: ``write_task_state(base, job_id, checkpoint_id, data) -> FileStateHandle``.
JobManager side: ``CompletedCheckpointStore.recover()`` at start, ``add_checkpoint(...)`` on
``FinalizeCheckpoint``, ``latest()`` to restore, ``discard_checkpoint(n)`` on an abort. The
JobMaster adds with ``subsume=False`` and calls ``subsume(n)`` only once its coordinator confirmed
``n`` (no failover came first): until then the older checkpoint, which tasks may be restoring
from, stays; a checkpoint aborted after its metadata was written is discarded instead.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Union
from urllib.parse import unquote, urlparse

from millstream.runtime.durable_files import write_atomically

log = logging.getLogger(__name__)

METADATA_FILE = "_metadata"
METADATA_VERSION = 1
_CHK_DIR = re.compile(r"^chk-(\d+)$")
_STATE_SUFFIX = ".state"
SHARED_DIR = "shared"  # incremental RocksDB files of the job, referenced by its checkpoints
SHARED_LIST_SUFFIX = ".shared.json"  # next to a task's state file: the shared files it references


class CheckpointStorageError(Exception):
    """The checkpoint directory is unusable, or a checkpoint in it is corrupt or incomplete."""


def parse_checkpoint_dir(value: str) -> Path:
    """``execution.checkpointing.dir``: an absolute directory or a ``file://`` URI (``file:///x``,
    ``file://localhost/x``, ``file:/x``). It must be absolute: every process resolves it."""
    text = value.strip()
    if not text:
        raise CheckpointStorageError("execution.checkpointing.dir is empty")
    if "://" in text or text.startswith("file:"):
        parsed = urlparse(text)
        if parsed.scheme != "file":
            raise CheckpointStorageError(
                f"execution.checkpointing.dir {value!r}: scheme {parsed.scheme!r} is not supported; "
                "use a directory every TaskManager shares, as a path or a file:// URI")
        if parsed.netloc not in ("", "localhost"):
            raise CheckpointStorageError(
                f"execution.checkpointing.dir {value!r}: a file:// URI names no host other than localhost "
                f"(got {parsed.netloc!r}); write file:///absolute/path")
        path = unquote(parsed.path)
    else:
        path = os.path.expanduser(text)
    if not os.path.isabs(path):
        raise CheckpointStorageError(
            f"execution.checkpointing.dir {value!r} is not absolute: JobManager and TaskManagers resolve it "
            "in different working directories; give an absolute path")
    return Path(os.path.normpath(path))


def _job_dir_name(job_id: Union[bytes, str]) -> str:
    name = job_id.hex() if isinstance(job_id, bytes) else job_id
    if not name or "/" in name or name in (".", ".."):
        raise CheckpointStorageError(f"invalid job id for a checkpoint directory: {job_id!r}")
    return name


def checkpoint_directory(base: Path, job_id: Union[bytes, str], checkpoint_id: int) -> Path:
    if checkpoint_id < 1:
        raise CheckpointStorageError(f"checkpoint ids start at 1, got {checkpoint_id}")
    return base / _job_dir_name(job_id) / f"chk-{checkpoint_id}"


@dataclass(frozen=True)
class FileStateHandle:
    """A task's snapshot in one file of a checkpoint directory."""

    path: str
    size: int

    def read(self) -> bytes:
        try:
            data = Path(self.path).read_bytes()
        except FileNotFoundError:
            raise CheckpointStorageError(f"state file {self.path} is missing") from None
        if len(data) != self.size:
            raise CheckpointStorageError(f"state file {self.path} has {len(data)} bytes, its checkpoint "
                                         f"recorded {self.size}: truncated or corrupt")
        return data


def write_task_state(base: Path, job_id: Union[bytes, str], checkpoint_id: int, data: bytes) -> FileStateHandle:
    """Task side: write one snapshot to a new file of the checkpoint's directory; the handle goes
    into the task's acknowledgement. Runs off the task's main loop (it blocks on fsync)."""
    directory = checkpoint_directory(base, job_id, checkpoint_id)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{uuid.uuid4().hex}{_STATE_SUFFIX}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)  # EXCL: never another writer's file
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    return FileStateHandle(str(path), len(data))


def discard_state(handle: object) -> None:
    """Delete a state handle's file (an ack that came late or from a stale attempt)."""
    if isinstance(handle, FileStateHandle):
        try:
            os.unlink(handle.path)
        except FileNotFoundError:
            pass


@dataclass(frozen=True)
class CompletedCheckpoint:
    """A checkpoint whose ``_metadata`` exists: what a restart restores."""

    job_id: str
    checkpoint_id: int
    timestamp_ms: float
    directory: Path
    task_states: dict[str, Optional[FileStateHandle]]  # task key -> its handle (None: no state)
    finished_tasks: frozenset[str] = frozenset()  # tasks that had finished: they end at once on restore
    # The job's checkpoint statistics as of this checkpoint's completion (plain JSON: counts and the
    # recent history, wall-clock times), so a JobManager that recovers the job goes on counting.
    stats: Optional[dict[str, Any]] = None
    # The OperatorCoordinators' states (a KafkaSource's split enumerator), per job vertex id (hex): JSON.
    coordinator_states: dict[str, Any] = field(default_factory=dict)

    @property
    def size_bytes(self) -> int:
        return sum(h.size for h in self.task_states.values() if h is not None)

    @property
    def metadata_path(self) -> Path:
        return self.directory / METADATA_FILE


class CompletedCheckpointStore:
    """The job's completed checkpoints on disk, keeping the newest ``num_retained``
    (``execution.checkpointing.num-retained``, default 1) and deleting the rest."""

    def __init__(self, base: Path, job_id: Union[bytes, str], num_retained: int = 1) -> None:
        if num_retained < 1:
            raise CheckpointStorageError(f"execution.checkpointing.num-retained must be at least 1, got {num_retained}")
        self.base = base
        self.job_id = _job_dir_name(job_id)
        self.job_dir = base / self.job_id
        self.num_retained = num_retained
        self._completed: list[CompletedCheckpoint] = []  # oldest first
        # The shared files of the checkpoint subsumed last: a task learns of a newer checkpoint's
        # completion asynchronously, and until then may base an incremental checkpoint on the
        # older one (a barrier can overtake the notification), so they go one subsumption later.
        self._subsumed_refs: set[str] = set()
        self._unconfirmed: set[int] = set()  # added with subsume=False, not yet subsume()d
        # The JobMaster calls from threads (a finalization, a discard): one at a time.
        self._lock = threading.RLock()

    # -- reading ---------------------------------------------------------------------------------

    def _chk_dirs(self) -> list[tuple[int, Path]]:
        if not self.job_dir.is_dir():
            return []
        found = []
        for entry in self.job_dir.iterdir():
            match = _CHK_DIR.match(entry.name)
            if match and entry.is_dir():
                found.append((int(match.group(1)), entry))
        return sorted(found)

    def highest_checkpoint_id(self) -> int:
        """The highest id with a directory, complete or not (0: none): a recovered
        CheckpointIDCounter starts after it, so no id is ever reused."""
        dirs = self._chk_dirs()
        return dirs[-1][0] if dirs else 0

    def load(self, directory: Path) -> CompletedCheckpoint:
        """Read and check a checkpoint's metadata; a missing or corrupt one is an error, never an
        empty checkpoint."""
        path = directory / METADATA_FILE
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise CheckpointStorageError(f"{directory} has no {METADATA_FILE}: the checkpoint is incomplete") from None
        except (OSError, ValueError) as e:
            raise CheckpointStorageError(f"checkpoint metadata {path} is unreadable or corrupt: {e}") from e
        try:
            if doc["version"] != METADATA_VERSION:
                raise CheckpointStorageError(f"checkpoint metadata {path} has version {doc['version']}, "
                                             f"this Millstream reads {METADATA_VERSION}")
            states: dict[str, Optional[FileStateHandle]] = {}
            for key, entry in doc["tasks"].items():
                # File names are relative to the checkpoint directory, so a moved directory still works.
                states[key] = None if entry is None else FileStateHandle(str(directory / entry["file"]), int(entry["size"]))
            stats = doc.get("stats")
            coordinators = doc.get("coordinators", {})
            if not isinstance(coordinators, dict):
                raise TypeError(f"coordinators is a {type(coordinators).__name__}, not an object")
            checkpoint = CompletedCheckpoint(str(doc["job_id"]), int(doc["checkpoint_id"]), float(doc["timestamp_ms"]),
                                             directory, states, frozenset(doc.get("finished", ())),
                                             stats if isinstance(stats, dict) else None, coordinators)
        except (KeyError, TypeError, ValueError) as e:
            raise CheckpointStorageError(f"checkpoint metadata {path} is malformed: {e!r}") from e
        for key, handle in states.items():
            if handle is not None and not os.path.isfile(handle.path):
                raise CheckpointStorageError(f"checkpoint {checkpoint.checkpoint_id}: the state file of task {key} "
                                             f"({handle.path}) is missing")
        return checkpoint

    def recover(self) -> Optional[CompletedCheckpoint]:
        """Find the completed checkpoints (directories with metadata) after a restart or a
        JobManager failover, keep the newest ``num_retained``, and return the latest (None: no
        completed checkpoint). A corrupt latest checkpoint raises: a job never silently restarts
        empty. Incomplete directories older than the latest completed one are deleted."""
        dirs = self._chk_dirs()
        complete = [(n, d) for n, d in dirs if (d / METADATA_FILE).is_file()]
        self._completed = [self.load(d) for _, d in complete[-self.num_retained:]]
        for n, d in complete[:-self.num_retained]:
            self._delete_dir(d)
        latest_id = complete[-1][0] if complete else 0
        for n, d in dirs:
            if n < latest_id and not (d / METADATA_FILE).is_file():
                self._delete_dir(d)
        self.delete_unreferenced_shared_state()
        return self.latest()

    def latest(self) -> Optional[CompletedCheckpoint]:
        return self._completed[-1] if self._completed else None

    @property
    def checkpoints(self) -> list[CompletedCheckpoint]:
        return list(self._completed)

    # -- writing ---------------------------------------------------------------------------------

    def add_checkpoint(self, checkpoint_id: int, timestamp_ms: float, task_states: Mapping[str, object],
                       finished_tasks: frozenset[str] = frozenset(),
                       stats: Optional[dict[str, Any]] = None,
                       coordinator_states: Optional[dict[str, Any]] = None,
                       subsume: bool = True) -> CompletedCheckpoint:
        """Finalize: write ``_metadata`` atomically (the checkpoint is complete from the rename on),
        then drop the checkpoints beyond ``num_retained`` and the incomplete older directories.
        ``subsume`` False: nothing older is dropped until :meth:`subsume` (or the new checkpoint
        is discarded with :meth:`discard_checkpoint`)."""
        with self._lock:
            return self._add_checkpoint(checkpoint_id, timestamp_ms, task_states, finished_tasks, stats,
                                        coordinator_states, subsume)

    def _add_checkpoint(self, checkpoint_id: int, timestamp_ms: float, task_states: Mapping[str, object],
                        finished_tasks: frozenset[str], stats: Optional[dict[str, Any]],
                        coordinator_states: Optional[dict[str, Any]], subsume: bool) -> CompletedCheckpoint:
        directory = checkpoint_directory(self.base, self.job_id, checkpoint_id)
        if self._completed and checkpoint_id <= self._completed[-1].checkpoint_id:
            raise CheckpointStorageError(f"checkpoint {checkpoint_id} is not newer than the latest completed "
                                         f"one ({self._completed[-1].checkpoint_id})")
        tasks: dict[str, Optional[dict[str, object]]] = {}
        handles: dict[str, Optional[FileStateHandle]] = {}
        for key, handle in task_states.items():
            if handle is None:
                tasks[key], handles[key] = None, None
                continue
            if not isinstance(handle, FileStateHandle):
                raise CheckpointStorageError(f"task {key} acked checkpoint {checkpoint_id} with a {type(handle).__name__}, "
                                             "not a FileStateHandle")
            path = Path(handle.path)
            if path.parent != directory:
                raise CheckpointStorageError(f"task {key}'s state {path} is outside checkpoint directory {directory}")
            tasks[key], handles[key] = {"file": path.name, "size": handle.size}, handle
        for name in sorted(self.shared_references(directory)):  # incremental RocksDB state: every file there
            if not (self.job_dir / SHARED_DIR / name).is_file():
                raise CheckpointStorageError(f"checkpoint {checkpoint_id}: shared state file "
                                             f"{self.job_dir / SHARED_DIR / name} it references is missing")
        doc = {"version": METADATA_VERSION, "job_id": self.job_id, "checkpoint_id": checkpoint_id,
               "timestamp_ms": timestamp_ms, "tasks": tasks, "finished": sorted(finished_tasks)}
        if stats is not None:
            doc["stats"] = stats
        if coordinator_states:
            doc["coordinators"] = coordinator_states
        write_atomically(directory / METADATA_FILE, json.dumps(doc, sort_keys=True).encode("utf-8"))
        checkpoint = CompletedCheckpoint(self.job_id, checkpoint_id, timestamp_ms, directory, handles,
                                         frozenset(finished_tasks), stats, dict(coordinator_states or {}))
        self._register_completed(checkpoint)  # before older ones are dropped: there is always a latest
        self._completed.append(checkpoint)
        if subsume:
            self._subsume(checkpoint_id)
        else:
            self._unconfirmed.add(checkpoint_id)
        return checkpoint

    def subsume(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` (added with ``subsume=False``) is confirmed: drop the
        checkpoints it subsumes (beyond ``num_retained``), older incomplete directories and the
        shared files no retained checkpoint references."""
        with self._lock:
            if not any(c.checkpoint_id == checkpoint_id for c in self._completed):
                return  # discarded meanwhile
            self._unconfirmed.discard(checkpoint_id)
            self._subsume(checkpoint_id)

    def _subsume(self, checkpoint_id: int) -> None:
        confirmed = [c for c in self._completed if c.checkpoint_id not in self._unconfirmed]
        for old in confirmed[:-self.num_retained]:
            if old.checkpoint_id < checkpoint_id:
                self._subsumed_refs = self.shared_references(old.directory)
                self._completed.remove(old)
                self._delete_dir(old.directory)
        for n, d in self._chk_dirs():
            if n < checkpoint_id and not (d / METADATA_FILE).is_file():
                self._delete_dir(d)
        self.delete_unreferenced_shared_state()

    # -- shared state (incremental checkpoints) ----------------------------------------------------

    @staticmethod
    def shared_references(directory: Path) -> set[str]:
        """The files of ``shared/`` that the task states of a checkpoint directory reference (each
        incremental RocksDB state file lists them in ``<file>.shared.json``)."""
        refs: set[str] = set()
        try:
            lists = [p for p in directory.iterdir() if p.name.endswith(SHARED_LIST_SUFFIX)]
        except FileNotFoundError:
            return refs
        for path in lists:
            try:
                refs.update(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError) as e:
                raise CheckpointStorageError(f"shared state list {path} is unreadable or corrupt: {e}") from e
        return refs

    def delete_unreferenced_shared_state(self) -> list[str]:
        """Flink's SharedStateRegistry: a file of ``shared/`` is deleted once no retained checkpoint
        references it. Only files older than the oldest retained checkpoint go: a newer one may be
        an upload of a checkpoint still in flight. Returns the names deleted."""
        shared = self.job_dir / SHARED_DIR
        if not self._completed or not shared.is_dir():
            return []
        live: set[str] = set(self._subsumed_refs)
        for c in self._completed:
            live |= self.shared_references(c.directory)
        try:
            oldest = (self._completed[0].directory / METADATA_FILE).stat().st_mtime
        except FileNotFoundError:
            return []
        deleted = []
        for path in shared.iterdir():
            if path.name in live:
                continue
            try:
                if path.stat().st_mtime < oldest:
                    path.unlink()
                    deleted.append(path.name)
            except FileNotFoundError:
                pass
        return deleted

    def _register_completed(self, checkpoint: CompletedCheckpoint) -> None:
        """Hook of the HA store (runtime/ha/checkpoints.py): record the new checkpoint where a
        new leader finds it. Raising makes ``add_checkpoint`` fail: the checkpoint is not complete."""

    def discard_checkpoint(self, checkpoint_id: int) -> None:
        """An aborted checkpoint: delete its directory (never a completed checkpoint's, unless it
        was added with ``subsume=False`` and not confirmed: aborted while its metadata was written)."""
        with self._lock:
            self._discard_checkpoint(checkpoint_id)

    def _discard_checkpoint(self, checkpoint_id: int) -> None:
        if checkpoint_id in self._unconfirmed:
            self._unconfirmed.discard(checkpoint_id)
            self._completed = [c for c in self._completed if c.checkpoint_id != checkpoint_id]
        if any(c.checkpoint_id == checkpoint_id for c in self._completed):
            raise CheckpointStorageError(f"checkpoint {checkpoint_id} is completed; it is not discarded")
        directory = checkpoint_directory(self.base, self.job_id, checkpoint_id)
        try:  # the shared files it uploaded, unless a retained checkpoint references them too
            mine = self.shared_references(directory)
        except CheckpointStorageError:
            mine = set()
        if mine:
            for c in self._completed:
                mine -= self.shared_references(c.directory)
            for name in mine:
                (self.job_dir / SHARED_DIR / name).unlink(missing_ok=True)
        self._delete_dir(directory)

    def _delete_dir(self, directory: Path) -> None:
        # _metadata first: a deletion interrupted halfway leaves an incomplete checkpoint, not a
        # complete-looking one with missing files.
        try:
            (directory / METADATA_FILE).unlink(missing_ok=True)
            shutil.rmtree(directory, ignore_errors=False)
        except FileNotFoundError:
            pass
        except OSError as e:
            log.warning("could not delete checkpoint directory %s: %s", directory, e)
        else:
            log.debug("deleted checkpoint directory %s", directory)


def dispose_savepoint(value: str) -> Path:
    """Deletes a savepoint (Flink's savepoint disposal: ``flink savepoint -d PATH``): ``value`` is
    its directory (a path or a ``file://`` URI) or its ``_metadata`` file. The metadata must be
    readable first, so a mistyped path never deletes a directory that is no savepoint. Blocking
    (files). Raises CheckpointStorageError naming the problem. Answers the deleted directory."""
    try:
        directory = parse_checkpoint_dir(value)
    except CheckpointStorageError as exc:
        raise CheckpointStorageError(f"savepoint path {value!r}: {exc}") from None
    if directory.name == METADATA_FILE:
        directory = directory.parent
    if not directory.exists():
        raise CheckpointStorageError(f"savepoint {value!r}: {directory} does not exist")
    if not directory.is_dir():
        raise CheckpointStorageError(f"savepoint {value!r}: {directory} is not a directory")
    CompletedCheckpointStore(directory.parent, directory.name).load(directory)  # a savepoint, whole
    shutil.rmtree(directory)
    return directory
