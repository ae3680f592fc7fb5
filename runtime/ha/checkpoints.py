"""Checkpoint ids and completed-checkpoint pointers in ZooKeeper (Flink's ZooKeeperCheckpointIDCounter
and DefaultCompletedCheckpointStore on a ZooKeeperStateHandleStore).

Layout::

    <path.root>/<cluster-id>/checkpoint_id_counter/<job id hex>      the next id, as decimal text
    <path.root>/<cluster-id>/checkpoints/<job id hex>/<id, 19 digits> -> {"metadata": <chk dir>/_metadata}
                                                   .../locks/<lock id>  EPHEMERAL

The checkpoints themselves stay where the file store writes them
(``<execution.checkpointing.dir>/<job>/chk-<n>/``); ZooKeeper says which of them are completed. A
new leader recovers from the pointers, not from listing the directory: a pointer whose
``_metadata`` is missing or corrupt raises, so a job never silently starts over.

Every method blocks on ZooKeeper: call it from a thread, not on the asyncio loop.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Optional, Union

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from millstream.runtime.checkpoint_storage import (
    METADATA_FILE,
    CheckpointStorageError,
    CompletedCheckpoint,
    CompletedCheckpointStore,
)
from millstream.runtime.checkpoint_ids import INITIAL_CHECKPOINT_ID
from millstream.runtime.ha.api import HaError, HaStorageError
from millstream.runtime.ha.state_handle_store import ZooKeeperStateHandleStore, parse_pointer, pointer_bytes
from millstream.runtime.ha.zookeeper_client import ZooKeeperClient

log = logging.getLogger(__name__)

COUNTER_NODE = "checkpoint_id_counter"
CHECKPOINTS_NODE = "checkpoints"


class HaCheckpointStorageError(HaStorageError, CheckpointStorageError):
    """A completed checkpoint named in ZooKeeper cannot be read (caught as either kind)."""


def _job_hex(job_id: Union[bytes, str]) -> str:
    return job_id.hex() if isinstance(job_id, bytes) else job_id


def checkpoint_node_name(checkpoint_id: int) -> str:
    """Zero-padded so that names sort as ids (Flink's ZooKeeperCheckpointStoreUtil)."""
    return f"{checkpoint_id:019d}"


# -- id counters ------------------------------------------------------------------------------


class ZooKeeperCheckpointIDCounter:
    """A shared counter node, updated with compare-and-set on its version: two leaders (an old
    one that does not know yet) never hand out the same id."""

    def __init__(self, client: ZooKeeperClient, job_id: Union[bytes, str]) -> None:
        self._client = client
        self._zk = client.kazoo
        self.path = client.path(COUNTER_NODE, _job_hex(job_id))
        try:
            client.retry(self._zk.create, self.path, str(INITIAL_CHECKPOINT_ID).encode(), makepath=True)
        except NodeExistsError:
            pass  # recovered: continue after every id handed out

    def _read(self) -> tuple[int, int]:
        try:
            data, stat = self._client.retry(self._zk.get, self.path)
        except NoNodeError:
            raise HaStorageError(f"checkpoint id counter {self.path} is gone from ZooKeeper") from None
        try:
            return int(data.decode("ascii")), stat.version
        except (UnicodeDecodeError, ValueError):
            raise HaStorageError(f"checkpoint id counter {self.path} holds {bytes(data)[:40]!r}, not a number") from None

    def _cas(self, update: Callable[[int], tuple[int, int]]) -> int:
        """``update(current) -> (value to store, value to return)``, retried until no other writer
        came in between."""
        while True:
            current, version = self._read()
            stored, result = update(current)
            try:
                self._client.retry(self._zk.set, self.path, str(stored).encode(), version=version)
                return result
            except BadVersionError:
                continue  # another writer in between: read again

    def get_and_increment(self) -> int:
        return self._cas(lambda current: (current + 1, current))

    def get(self) -> int:
        return self._read()[0]

    def set_count(self, next_id: int) -> None:
        if next_id < INITIAL_CHECKPOINT_ID:
            raise ValueError(f"checkpoint ids start at {INITIAL_CHECKPOINT_ID}, got {next_id}")
        self._cas(lambda current: (next_id, next_id))

    def shutdown(self, globally_terminal: bool) -> None:
        """Delete the counter once the job is globally terminal (it is never run again)."""
        if globally_terminal:
            try:
                self._client.retry(self._zk.delete, self.path)
            except NoNodeError:
                pass


# -- completed checkpoints --------------------------------------------------------------------


class ZooKeeperCompletedCheckpointStore(CompletedCheckpointStore):
    """The file store (it writes ``_metadata`` and deletes directories) plus a locked pointer in
    ZooKeeper per retained checkpoint. Same interface as :class:`CompletedCheckpointStore`."""

    def __init__(self, client: ZooKeeperClient, base: Path, job_id: Union[bytes, str], num_retained: int = 1) -> None:
        super().__init__(base, job_id, num_retained)
        self._nodes = ZooKeeperStateHandleStore(client, client.path(CHECKPOINTS_NODE, self.job_id))

    def recover(self) -> Optional[CompletedCheckpoint]:
        """The checkpoints ZooKeeper names, newest ``num_retained`` kept (older pointers and their
        directories are removed). Raises :class:`HaCheckpointStorageError` when a named checkpoint
        cannot be read."""
        names = self._nodes.names()
        completed: list[CompletedCheckpoint] = []
        for name in names:
            where = f"checkpoint {name.lstrip('0')} of job {self.job_id} (ZooKeeper {self._nodes.root}/{name})"
            try:
                doc = parse_pointer(self._nodes.get_and_lock(name), where)
            except HaStorageError as e:
                raise HaCheckpointStorageError(str(e)) from e
            metadata = doc.get("metadata")
            if not isinstance(metadata, str) or not metadata.endswith("/" + METADATA_FILE):
                raise HaCheckpointStorageError(f"{where}: the pointer names no _metadata file: {doc}")
            try:
                checkpoint = self.load(Path(metadata).parent)
            except CheckpointStorageError as e:
                raise HaCheckpointStorageError(f"{where} cannot be recovered: {e}") from e
            if checkpoint.checkpoint_id != int(name):
                raise HaCheckpointStorageError(f"{where}: {metadata} is checkpoint {checkpoint.checkpoint_id}")
            completed.append(checkpoint)
        self._completed = completed
        while len(self._completed) > self.num_retained:
            self._delete_dir(self._completed.pop(0).directory)
        latest = self.latest()
        log.info("job %s: recovered %d completed checkpoint(s) from ZooKeeper, latest %s", self.job_id,
                 len(self._completed), latest.checkpoint_id if latest else "none")
        return latest

    def _register_completed(self, checkpoint: CompletedCheckpoint) -> None:
        self._nodes.add_and_lock(checkpoint_node_name(checkpoint.checkpoint_id),
                                 pointer_bytes({"metadata": str(checkpoint.metadata_path)}))

    def _delete_dir(self, directory: Path) -> None:
        # The pointer first: a crash in between leaves an unreferenced directory, never a pointer
        # to a deleted checkpoint. A checkpoint another leader still holds is left alone.
        match = directory.name.removeprefix("chk-")
        if match.isdigit() and not self._nodes.release_and_try_remove(checkpoint_node_name(int(match))):
            log.info("checkpoint %s of job %s is held by another JobManager: kept", match, self.job_id)
            return
        super()._delete_dir(directory)

    def shutdown(self, globally_terminal: bool) -> None:
        """Globally terminal: remove every pointer (the caller deletes the job's checkpoint
        directory, as today). Otherwise (suspended, leadership lost): release our locks only."""
        if not globally_terminal:
            self._nodes.release_all()
            return
        for name in self._nodes.names():
            if not self._nodes.release_and_try_remove(name):
                raise HaError(f"checkpoint {name} of job {self.job_id} is held by another JobManager: not removed")
