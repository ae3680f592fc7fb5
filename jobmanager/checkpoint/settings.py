"""A submitted job's checkpoint settings: its own, then its configuration's keys, then the cluster's.

Flink's order: ``env.enable_checkpointing(ms, mode)`` (recorded in the JobGraph's ExecutionConfig)
wins; then the ``execution.checkpointing.*`` keys of the job's own configuration; then the
cluster's. Resolved once at submission, so a bad value is refused with the job, naming its key.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

from millstream.jobmanager.checkpoint.coordinator import CheckpointSettings
from millstream.proto import jobgraph_pb2 as pb
from millstream.runtime import config as cfg
from millstream.runtime.checkpoint_storage import CheckpointStorageError, parse_checkpoint_dir


def default_checkpoint_dir() -> str:
    return os.path.join(tempfile.gettempdir(), "millstream-checkpoints")


@dataclass(frozen=True)
class JobCheckpointing:
    settings: CheckpointSettings
    mode: str  # EXACTLY_ONCE or AT_LEAST_ONCE
    directory: Path
    num_retained: int
    savepoint_path: Optional[Path] = None  # resume from this savepoint (when the job has no checkpoint of its own)
    ignore_unclaimed_state: bool = False
    savepoint_dir: Optional[Path] = None  # the cluster's default savepoint target
    retention: str = cfg.CHECKPOINTING_EXTERNALIZED_RETENTION.default  # what the job's end does to them
    unaligned_requested: bool = False  # the job asked for unaligned checkpoints; they are taken aligned


def unaligned_checkpoints_warning(job_name: str, job_id_hex: str) -> str:
    """What the JobManager logs (WARNING, once, when it accepts the job) for a job that asked for
    unaligned checkpoints: Millstream's barriers always align, so the request has no effect."""
    return (f"job {job_id_hex} ('{job_name}') asks for unaligned checkpoints "
            f"({cfg.CHECKPOINTING_UNALIGNED.key}: true); Millstream takes aligned checkpoints only, so this job's "
            "checkpoints stay aligned. Exactly-once is unaffected; only checkpoint times under back-pressure "
            "differ (a barrier waits behind the buffered records instead of overtaking them).")


def deletes_checkpoints(retention: str, status: str) -> bool:
    """Whether a job that ended in ``status`` (FINISHED, CANCELED, FAILED) loses its checkpoints
    under ``retention`` (Flink's ExternalizedCheckpointRetention): a finished job's always go; a
    cancelled job's unless RETAIN_ON_CANCELLATION; a failed job's only under
    NO_EXTERNALIZED_CHECKPOINTS (the checkpoints are not meant to outlive the job at all)."""
    if status == "FINISHED":
        return True
    if status == "CANCELED":
        return retention != "RETAIN_ON_CANCELLATION"
    if status == "FAILED":
        return retention == "NO_EXTERNALIZED_CHECKPOINTS"
    raise ValueError(f"not a terminal job status: {status!r}")


def checkpoint_options_of(conf: cfg.Configuration) -> dict[str, Any]:
    """The cluster's ``execution.checkpointing.*`` values, by key."""
    return {
        cfg.CHECKPOINTING_INTERVAL.key: conf.get(cfg.CHECKPOINTING_INTERVAL),
        cfg.CHECKPOINTING_MODE.key: conf.get(cfg.CHECKPOINTING_MODE),
        cfg.CHECKPOINTING_TIMEOUT.key: conf.get(cfg.CHECKPOINTING_TIMEOUT),
        cfg.CHECKPOINTING_MIN_PAUSE.key: conf.get(cfg.CHECKPOINTING_MIN_PAUSE),
        cfg.CHECKPOINTING_TOLERABLE_FAILURES.key: conf.get(cfg.CHECKPOINTING_TOLERABLE_FAILURES),
        cfg.CHECKPOINTING_DIR.key: conf.get(cfg.CHECKPOINTING_DIR),
        cfg.CHECKPOINTING_NUM_RETAINED.key: conf.get(cfg.CHECKPOINTING_NUM_RETAINED),
        cfg.CHECKPOINTING_SAVEPOINT_DIR.key: conf.get(cfg.CHECKPOINTING_SAVEPOINT_DIR),
        cfg.CHECKPOINTING_EXTERNALIZED_RETENTION.key: conf.get(cfg.CHECKPOINTING_EXTERNALIZED_RETENTION),
        cfg.CHECKPOINTING_UNALIGNED.key: conf.get(cfg.CHECKPOINTING_UNALIGNED),
    }


def _job_value(graph: pb.JobGraph, option: cfg.ConfigOption[Any]) -> tuple[bool, Any]:
    raw = graph.execution_config.configuration
    for key in (option.key, *option.fallback_keys, *option.deprecated_keys):
        if key in raw:
            return True, option.parse(raw[key])
    return False, None


def checkpointing_for_job(graph: pb.JobGraph, cluster: Mapping[str, Any]) -> Optional[JobCheckpointing]:
    """None when the job takes no checkpoints (or runs in BATCH mode, as Flink ignores them there).
    Raises ValueError naming the bad key or value."""
    def value(option: cfg.ConfigOption[Any]) -> Any:
        found, job_value = _job_value(graph, option)
        return job_value if found else cluster.get(option.key, option.default)

    config = graph.execution_config
    _, savepoint = _job_value(graph, cfg.SAVEPOINT_PATH)
    interval = config.checkpoint_interval_ms or value(cfg.CHECKPOINTING_INTERVAL)
    if config.runtime_mode == pb.BATCH or not interval or interval <= 0:
        if savepoint:
            raise ValueError(f"the job resumes from savepoint {savepoint} ({cfg.SAVEPOINT_PATH.key}), which needs "
                             "checkpointing: call env.enable_checkpointing(ms) or set execution.checkpointing.interval "
                             "(STREAMING mode)")
        return None
    # The JobGraph always records a mode; it is the job's choice only when the job enabled checkpoints.
    mode = cfg.CHECKPOINTING_MODE.parse(config.checkpointing_mode if config.checkpoint_interval_ms > 0 and
                                        config.checkpointing_mode else value(cfg.CHECKPOINTING_MODE))
    try:
        directory = parse_checkpoint_dir(value(cfg.CHECKPOINTING_DIR) or default_checkpoint_dir())
    except CheckpointStorageError as exc:
        raise ValueError(str(exc)) from None
    settings = CheckpointSettings(
        interval_ms=int(interval),
        timeout_ms=int(value(cfg.CHECKPOINTING_TIMEOUT)),
        min_pause_ms=int(value(cfg.CHECKPOINTING_MIN_PAUSE)),
        tolerable_failed_checkpoints=int(value(cfg.CHECKPOINTING_TOLERABLE_FAILURES)),
    )
    num_retained = int(value(cfg.CHECKPOINTING_NUM_RETAINED))
    if num_retained < 1:
        raise ValueError(f"{cfg.CHECKPOINTING_NUM_RETAINED.key} must be at least 1, got {num_retained}")
    try:
        savepoint_path = parse_checkpoint_dir(savepoint) if savepoint else None
        savepoint_dir = value(cfg.CHECKPOINTING_SAVEPOINT_DIR)
        savepoint_dir = parse_checkpoint_dir(savepoint_dir) if savepoint_dir else None
    except CheckpointStorageError as exc:
        raise ValueError(str(exc).replace("execution.checkpointing.dir", "savepoint path")) from None
    _, ignore = _job_value(graph, cfg.SAVEPOINT_IGNORE_UNCLAIMED_STATE)
    retention = cfg.CHECKPOINTING_EXTERNALIZED_RETENTION.parse(value(cfg.CHECKPOINTING_EXTERNALIZED_RETENTION))
    # Flink takes unaligned checkpoints only in EXACTLY_ONCE mode (AT_LEAST_ONCE never aligns).
    unaligned = mode == "EXACTLY_ONCE" and bool(value(cfg.CHECKPOINTING_UNALIGNED))
    return JobCheckpointing(settings, mode, directory, num_retained, savepoint_path, bool(ignore), savepoint_dir,
                            retention, unaligned)
