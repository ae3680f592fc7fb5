"""``CheckpointConfig``: the checkpoint settings recorded into the JobGraph."""
from __future__ import annotations

from millstream.datastream.execution_mode import CheckpointingMode


class CheckpointConfig:
    def __init__(self) -> None:
        self.interval_ms = 0  # 0: disabled
        self.mode = CheckpointingMode.EXACTLY_ONCE
        self.timeout_ms = 600_000
        self.min_pause_between_checkpoints_ms = 0
        self.max_concurrent_checkpoints = 1

    def is_checkpointing_enabled(self) -> bool:
        return self.interval_ms > 0

    def get_checkpoint_interval(self) -> int:
        return self.interval_ms if self.interval_ms > 0 else -1

    def set_checkpoint_interval(self, checkpoint_interval: int) -> "CheckpointConfig":
        if checkpoint_interval < 10:
            raise ValueError(f"Checkpoint interval must be at least 10 ms, got {checkpoint_interval}")
        self.interval_ms = int(checkpoint_interval)
        return self

    def get_checkpointing_mode(self) -> CheckpointingMode:
        return self.mode

    def set_checkpointing_mode(self, mode: CheckpointingMode) -> "CheckpointConfig":
        self.mode = mode
        return self

    def get_checkpoint_timeout(self) -> int:
        return self.timeout_ms

    def set_checkpoint_timeout(self, timeout_ms: int) -> "CheckpointConfig":
        if timeout_ms < 1:
            raise ValueError("Checkpoint timeout must be at least 1 ms")
        self.timeout_ms = int(timeout_ms)
        return self

    def set_min_pause_between_checkpoints(self, pause_ms: int) -> "CheckpointConfig":
        self.min_pause_between_checkpoints_ms = int(pause_ms)
        return self

    def set_max_concurrent_checkpoints(self, n: int) -> "CheckpointConfig":
        self.max_concurrent_checkpoints = int(n)
        return self
