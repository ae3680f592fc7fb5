"""Runtime execution modes and checkpointing modes (PyFlink's enums)."""
from __future__ import annotations

import enum

from millstream.runtime.checkpointing_mode import CheckpointingMode  # one enum for API and tasks

__all__ = ["CheckpointingMode", "RuntimeExecutionMode"]


class RuntimeExecutionMode(enum.Enum):
    STREAMING = 0
    BATCH = 1
    AUTOMATIC = 2  # BATCH when every source is bounded, else STREAMING
