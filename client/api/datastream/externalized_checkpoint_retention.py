"""``ExternalizedCheckpointRetention`` at PyFlink's path: what becomes of a job's checkpoints when
the job ends (Flink 2's ``execution.checkpointing.externalized-checkpoint-retention``).

- ``DELETE_ON_CANCELLATION``: kept when the job fails; deleted when it is cancelled or finishes.
- ``RETAIN_ON_CANCELLATION``: kept when the job fails or is cancelled; deleted when it finishes.
- ``NO_EXTERNALIZED_CHECKPOINTS`` (the default, as in Flink 2): deleted however the job ends.

The JobManager applies the mode when the job reaches its terminal state (see
``millstream.jobmanager.checkpoint.settings.deletes_checkpoints``).
"""
from __future__ import annotations

from enum import Enum

__all__ = ["ExternalizedCheckpointRetention"]


class ExternalizedCheckpointRetention(Enum):
    DELETE_ON_CANCELLATION = 0
    RETAIN_ON_CANCELLATION = 1
    NO_EXTERNALIZED_CHECKPOINTS = 2
