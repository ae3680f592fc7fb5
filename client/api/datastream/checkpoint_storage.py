"""Checkpoint storage at PyFlink's ``pyflink.datastream.checkpoint_storage`` path.

Millstream's tasks write their checkpoints as files under ``execution.checkpointing.dir`` (a
directory the JobManager and every TaskManager share): Flink's ``FileSystemCheckpointStorage``.
``CheckpointConfig.set_checkpoint_storage(FileSystemCheckpointStorage(path))`` (or
``set_checkpoint_storage_dir(path)``) sets that directory for the job.

``JobManagerCheckpointStorage`` keeps, in Flink, every checkpoint's state in the JobManager's
memory (sent there with the acknowledgements). Millstream's JobManager never holds state: its
tasks write the state to files and the JobManager writes only the metadata naming them. So the
object can be built (a PyFlink program may construct one) but setting it fails, saying why.
"""
from __future__ import annotations

import abc
from typing import Optional

from millstream.runtime.checkpoint_storage import CheckpointStorageError, parse_checkpoint_dir

__all__ = ["CheckpointStorage", "JobManagerCheckpointStorage", "FileSystemCheckpointStorage"]


class CheckpointStorage(abc.ABC):
    """Where a job's checkpoints are written (Flink's ``CheckpointStorage``)."""

    @abc.abstractmethod
    def get_checkpoint_path(self) -> Optional[str]:
        """The base directory of the checkpoints (each job's go in a directory of its own there)."""

    def get_savepoint_path(self) -> Optional[str]:
        """None: savepoints go to ``execution.checkpointing.savepoint-dir`` or the directory given
        when one is taken, not to a directory of the storage."""
        return None


class JobManagerCheckpointStorage(CheckpointStorage):
    """Flink's in-JobManager-memory checkpoint storage; Millstream cannot use it (see the module
    docstring): ``set_checkpoint_storage`` refuses it."""

    DEFAULT_MAX_STATE_SIZE = 5 * 1024 * 1024  # Flink's: 5 MiB

    def __init__(self, checkpoint_path: Optional[str] = None, max_state_size: Optional[int] = None) -> None:
        self._checkpoint_path = checkpoint_path
        self._max_state_size = self.DEFAULT_MAX_STATE_SIZE if max_state_size is None else int(max_state_size)

    def get_checkpoint_path(self) -> Optional[str]:
        return self._checkpoint_path

    def get_max_state_size(self) -> int:
        return self._max_state_size

    def __repr__(self) -> str:
        return f"JobManagerCheckpointStorage(checkpoint_path={self._checkpoint_path!r})"


class FileSystemCheckpointStorage(CheckpointStorage):
    """Checkpoints as files under ``checkpoint_path`` (an absolute directory or a ``file://``
    URI every process of the cluster reaches), one ``<job id>/chk-<n>`` directory each."""

    def __init__(self, checkpoint_path: Optional[str] = None, file_state_size_threshold: Optional[int] = None,
                 write_buffer_size: int = -1) -> None:
        if checkpoint_path is None:
            raise ValueError("checkpoint_path must not be None")
        if file_state_size_threshold not in (None, -1) or write_buffer_size != -1:
            raise ValueError("FileSystemCheckpointStorage: Millstream writes each task's state to its own file, "
                             "so file_state_size_threshold and write_buffer_size cannot be set (leave them out)")
        try:
            parse_checkpoint_dir(checkpoint_path)
        except CheckpointStorageError as exc:
            raise ValueError(f"FileSystemCheckpointStorage: {exc}") from None
        self._checkpoint_path = checkpoint_path

    def get_checkpoint_path(self) -> str:
        return self._checkpoint_path

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FileSystemCheckpointStorage) and other._checkpoint_path == self._checkpoint_path

    def __hash__(self) -> int:
        return hash(self._checkpoint_path)

    def __repr__(self) -> str:
        return f"FileSystemCheckpointStorage({self._checkpoint_path!r})"
