"""``JobStatus``: the states of a job as a client sees them, PyFlink's ``pyflink.common.JobStatus``."""
from __future__ import annotations

import enum


class JobStatus(enum.Enum):
    """A job's status. Globally terminal (FINISHED, CANCELED, FAILED): the job is over for the whole
    cluster. Terminal also counts SUSPENDED: this JobManager stopped running it, but a new leader
    may take it over (high availability)."""

    CREATED = 0
    RUNNING = 1
    FAILING = 2
    FAILED = 3
    CANCELLING = 4
    CANCELED = 5
    FINISHED = 6
    RESTARTING = 7
    SUSPENDED = 8
    RECONCILING = 9
    INITIALIZING = 10

    def is_globally_terminal_state(self) -> bool:
        return self in (JobStatus.FAILED, JobStatus.CANCELED, JobStatus.FINISHED)

    def is_terminal_state(self) -> bool:
        return self.is_globally_terminal_state() or self is JobStatus.SUSPENDED
