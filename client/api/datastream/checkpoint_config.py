"""``CheckpointConfig``: the checkpoint settings recorded into the JobGraph.

As in PyFlink, the ``execution.checkpointing.*`` keys of the environment's configuration (its
constructor's Configuration, the configuration file, ``env.configure(conf)``) set these values, and
the setters override them. The JobManager takes a job's timeout, minimum pause, tolerable
failures and externalized checkpoint retention from the job's configuration, so the values set
here travel there (:meth:`_job_settings`).
"""
from __future__ import annotations

from typing import Any, Optional

from millstream.common.time import Duration
from millstream.datastream.checkpoint_storage import (CheckpointStorage, FileSystemCheckpointStorage,
                                                      JobManagerCheckpointStorage)
from millstream.datastream.execution_mode import CheckpointingMode
from millstream.datastream.externalized_checkpoint_retention import ExternalizedCheckpointRetention
from millstream.runtime import config as cfg

_MINIMAL_CHECKPOINT_TIME_MS = 10  # Flink's lower bound for an interval and a timeout


class CheckpointConfig:
    def __init__(self) -> None:
        self.interval_ms = 0  # 0: disabled
        self.mode = CheckpointingMode.EXACTLY_ONCE
        self.timeout_ms = 600_000
        self.min_pause_between_checkpoints_ms = 0
        self.max_concurrent_checkpoints = 1
        self.tolerable_checkpoint_failure_number = 0
        self.unaligned_checkpoints = False
        self.force_unaligned_checkpoints = False
        self.aligned_checkpoint_timeout = Duration.of_millis(0)
        self.externalized_checkpoint_retention = ExternalizedCheckpointRetention[
            cfg.CHECKPOINTING_EXTERNALIZED_RETENTION.default]
        self.checkpoint_storage: Optional[CheckpointStorage] = None  # None: the cluster's directory
        self._explicit: set[str] = set()  # options set here or by configuration: they go to the job

    def is_checkpointing_enabled(self) -> bool:
        return self.interval_ms > 0

    def get_checkpoint_interval(self) -> int:
        return self.interval_ms if self.interval_ms > 0 else -1

    def set_checkpoint_interval(self, checkpoint_interval: int) -> "CheckpointConfig":
        if checkpoint_interval < _MINIMAL_CHECKPOINT_TIME_MS:
            raise ValueError(f"Checkpoint interval must be at least 10 ms, got {checkpoint_interval}")
        self.interval_ms = int(checkpoint_interval)
        return self

    def get_checkpointing_mode(self) -> CheckpointingMode:
        return self.mode

    def set_checkpointing_mode(self, mode: CheckpointingMode) -> "CheckpointConfig":
        if not isinstance(mode, CheckpointingMode):
            raise TypeError(f"set_checkpointing_mode needs a CheckpointingMode, got {mode!r}")
        self.mode = mode
        return self

    def get_checkpoint_timeout(self) -> int:
        return self.timeout_ms

    def set_checkpoint_timeout(self, checkpoint_timeout: int) -> "CheckpointConfig":
        if checkpoint_timeout < _MINIMAL_CHECKPOINT_TIME_MS:
            raise ValueError(f"Checkpoint timeout must be at least 10 ms, got {checkpoint_timeout}")
        self.timeout_ms = int(checkpoint_timeout)
        self._explicit.add(cfg.CHECKPOINTING_TIMEOUT.key)
        return self

    def get_min_pause_between_checkpoints(self) -> int:
        return self.min_pause_between_checkpoints_ms

    def set_min_pause_between_checkpoints(self, min_pause_between_checkpoints: int) -> "CheckpointConfig":
        if min_pause_between_checkpoints < 0:
            raise ValueError(f"Pause value must be zero or positive, got {min_pause_between_checkpoints}")
        self.min_pause_between_checkpoints_ms = int(min_pause_between_checkpoints)
        self._explicit.add(cfg.CHECKPOINTING_MIN_PAUSE.key)
        return self

    def get_max_concurrent_checkpoints(self) -> int:
        return self.max_concurrent_checkpoints

    def set_max_concurrent_checkpoints(self, max_concurrent_checkpoints: int) -> "CheckpointConfig":
        """An upper bound, as in Flink; Millstream's coordinator takes one checkpoint at a time."""
        if max_concurrent_checkpoints < 1:
            raise ValueError("The maximum number of concurrent attempts must be at least one, "
                             f"got {max_concurrent_checkpoints}")
        self.max_concurrent_checkpoints = int(max_concurrent_checkpoints)
        return self

    def get_tolerable_checkpoint_failure_number(self) -> int:
        return self.tolerable_checkpoint_failure_number

    def set_tolerable_checkpoint_failure_number(self, tolerable_checkpoint_failure_number: int) -> "CheckpointConfig":
        if tolerable_checkpoint_failure_number < 0:
            raise ValueError("The tolerable checkpoint failure number must be zero or positive, "
                             f"got {tolerable_checkpoint_failure_number}")
        self.tolerable_checkpoint_failure_number = int(tolerable_checkpoint_failure_number)
        self._explicit.add(cfg.CHECKPOINTING_TOLERABLE_FAILURES.key)
        return self

    def enable_unaligned_checkpoints(self, enabled: bool = True) -> "CheckpointConfig":
        """Recorded as in PyFlink and sent with the job (``execution.checkpointing.unaligned.enabled``).
        Millstream takes aligned checkpoints only: the JobManager logs a WARNING when such a job is
        submitted, and its checkpoints stay aligned (exactly once all the same)."""
        self.unaligned_checkpoints = bool(enabled)
        self._explicit.add(cfg.CHECKPOINTING_UNALIGNED.key)
        return self

    def disable_unaligned_checkpoints(self) -> "CheckpointConfig":
        return self.enable_unaligned_checkpoints(False)

    def is_unaligned_checkpoints_enabled(self) -> bool:
        return self.unaligned_checkpoints

    def is_fail_on_checkpointing_errors(self) -> bool:
        """PyFlink 2.x: true when no checkpoint failure is tolerated (the tolerable number is 0)."""
        return self.tolerable_checkpoint_failure_number == 0

    def set_fail_on_checkpointing_errors(self, fail_on_checkpointing_errors: bool) -> "CheckpointConfig":
        """PyFlink 2.x's mapping onto the tolerable failure number: 0, or every failure tolerated."""
        return self.set_tolerable_checkpoint_failure_number(0 if fail_on_checkpointing_errors else 2_147_483_647)

    def set_externalized_checkpoint_retention(self, retention_mode: ExternalizedCheckpointRetention) -> "CheckpointConfig":
        """Whether the job's checkpoints outlive it: the JobManager keeps or deletes them when the
        job ends, by this mode (see :class:`ExternalizedCheckpointRetention`)."""
        if not isinstance(retention_mode, ExternalizedCheckpointRetention):
            raise TypeError("set_externalized_checkpoint_retention needs an ExternalizedCheckpointRetention, "
                            f"got {retention_mode!r}")
        self.externalized_checkpoint_retention = retention_mode
        self._explicit.add(cfg.CHECKPOINTING_EXTERNALIZED_RETENTION.key)
        return self

    def get_externalized_checkpoint_retention(self) -> ExternalizedCheckpointRetention:
        return self.externalized_checkpoint_retention

    def is_externalized_checkpoints_enabled(self) -> bool:
        return self.externalized_checkpoint_retention is not ExternalizedCheckpointRetention.NO_EXTERNALIZED_CHECKPOINTS

    def is_force_unaligned_checkpoints(self) -> bool:
        return self.force_unaligned_checkpoints

    def set_force_unaligned_checkpoints(self, force_unaligned_checkpoints: bool = True) -> "CheckpointConfig":
        """Recorded as in PyFlink. In Flink it matters only with unaligned checkpoints enabled,
        which Millstream does not take (see :meth:`enable_unaligned_checkpoints`)."""
        self.force_unaligned_checkpoints = bool(force_unaligned_checkpoints)
        return self

    def set_aligned_checkpoint_timeout(self, alignment_timeout: Duration) -> "CheckpointConfig":
        """Recorded as in PyFlink. In Flink, with unaligned checkpoints enabled, the alignment time
        after which a checkpoint goes unaligned; Millstream's checkpoints stay aligned."""
        if not isinstance(alignment_timeout, Duration):
            raise TypeError(f"set_aligned_checkpoint_timeout needs a Duration, got {alignment_timeout!r}")
        if alignment_timeout.to_milliseconds() < 0:
            raise ValueError(f"The aligned checkpoint timeout must not be negative, got {alignment_timeout}")
        self.aligned_checkpoint_timeout = alignment_timeout
        return self

    def get_aligned_checkpoint_timeout(self) -> Duration:
        """Zero (Flink's default) unless set."""
        return self.aligned_checkpoint_timeout

    def set_alignment_timeout(self, alignment_timeout: Duration) -> "CheckpointConfig":
        """PyFlink 2.x's older name of :meth:`set_aligned_checkpoint_timeout`."""
        return self.set_aligned_checkpoint_timeout(alignment_timeout)

    def get_alignment_timeout(self) -> Duration:
        """PyFlink 2.x's older name of :meth:`get_aligned_checkpoint_timeout`."""
        return self.get_aligned_checkpoint_timeout()

    def set_checkpoint_storage(self, storage: CheckpointStorage) -> "CheckpointConfig":
        """Where the job's checkpoints go: a :class:`FileSystemCheckpointStorage` directory (the
        job's ``execution.checkpointing.dir``). A :class:`JobManagerCheckpointStorage` is refused:
        Millstream's JobManager does not hold state in its memory."""
        if isinstance(storage, JobManagerCheckpointStorage):
            raise ValueError(
                "JobManagerCheckpointStorage keeps checkpointed state in the JobManager's memory; Millstream's "
                "tasks write their state to files and its JobManager holds none, so it cannot be used. Use "
                "FileSystemCheckpointStorage(dir) or set_checkpoint_storage_dir(dir) (execution.checkpointing.dir)")
        if not isinstance(storage, FileSystemCheckpointStorage):
            raise TypeError(f"set_checkpoint_storage needs a FileSystemCheckpointStorage, got {storage!r}")
        self.checkpoint_storage = storage
        self._explicit.add(cfg.CHECKPOINTING_DIR.key)
        return self

    def set_checkpoint_storage_dir(self, checkpoint_path: str) -> "CheckpointConfig":
        """The job's checkpoints go under ``checkpoint_path`` (a :class:`FileSystemCheckpointStorage`)."""
        return self.set_checkpoint_storage(FileSystemCheckpointStorage(checkpoint_path))

    def get_checkpoint_storage(self) -> Optional[CheckpointStorage]:
        """The storage set here or by ``execution.checkpointing.dir``; None: the cluster's."""
        return self.checkpoint_storage

    # -- configuration ---------------------------------------------------------------------------

    def _configure(self, settings: cfg.Configuration) -> None:
        """Takes the ``execution.checkpointing.*`` keys set in ``settings`` (Flink's
        CheckpointConfig.configure): each goes through its setter, so bad values are rejected."""
        def given(option: cfg.ConfigOption[Any]) -> bool:
            return option in settings

        if given(cfg.CHECKPOINTING_INTERVAL) and (interval := settings.get(cfg.CHECKPOINTING_INTERVAL)) is not None:
            self.set_checkpoint_interval(interval)
        if given(cfg.CHECKPOINTING_MODE):
            self.set_checkpointing_mode(CheckpointingMode[settings.get(cfg.CHECKPOINTING_MODE)])
        if given(cfg.CHECKPOINTING_TIMEOUT):
            self.set_checkpoint_timeout(settings.get(cfg.CHECKPOINTING_TIMEOUT))
        if given(cfg.CHECKPOINTING_MIN_PAUSE):
            self.set_min_pause_between_checkpoints(settings.get(cfg.CHECKPOINTING_MIN_PAUSE))
        if given(cfg.CHECKPOINTING_MAX_CONCURRENT):
            self.set_max_concurrent_checkpoints(settings.get(cfg.CHECKPOINTING_MAX_CONCURRENT))
        if given(cfg.CHECKPOINTING_TOLERABLE_FAILURES):
            self.set_tolerable_checkpoint_failure_number(settings.get(cfg.CHECKPOINTING_TOLERABLE_FAILURES))
        if given(cfg.CHECKPOINTING_UNALIGNED):
            self.enable_unaligned_checkpoints(settings.get(cfg.CHECKPOINTING_UNALIGNED))
        if given(cfg.CHECKPOINTING_DIR) and (directory := settings.get(cfg.CHECKPOINTING_DIR)):
            self.set_checkpoint_storage_dir(directory)
        if given(cfg.CHECKPOINTING_EXTERNALIZED_RETENTION):
            self.set_externalized_checkpoint_retention(
                ExternalizedCheckpointRetention[settings.get(cfg.CHECKPOINTING_EXTERNALIZED_RETENTION)])

    def _job_settings(self) -> dict[str, str]:
        """The values set on this config that the JobManager reads from the job's configuration."""
        values: dict[cfg.ConfigOption[Any], Any] = {
            cfg.CHECKPOINTING_TIMEOUT: self.timeout_ms,
            cfg.CHECKPOINTING_MIN_PAUSE: self.min_pause_between_checkpoints_ms,
            cfg.CHECKPOINTING_TOLERABLE_FAILURES: self.tolerable_checkpoint_failure_number,
            cfg.CHECKPOINTING_EXTERNALIZED_RETENTION: self.externalized_checkpoint_retention.name,
            cfg.CHECKPOINTING_UNALIGNED: self.unaligned_checkpoints,
        }
        if isinstance(self.checkpoint_storage, FileSystemCheckpointStorage):
            values[cfg.CHECKPOINTING_DIR] = self.checkpoint_storage.get_checkpoint_path()
        return {o.key: o.format(v) for o, v in values.items() if o.key in self._explicit}
