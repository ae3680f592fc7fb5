"""Runtime execution modes and checkpointing modes (PyFlink's enums)."""
from __future__ import annotations

import enum


class RuntimeExecutionMode(enum.Enum):
    STREAMING = 0
    BATCH = 1
    AUTOMATIC = 2  # BATCH when every source is bounded, else STREAMING


class CheckpointingMode(enum.Enum):
    EXACTLY_ONCE = 0
    AT_LEAST_ONCE = 1
