"""Task and job states with their transition tables (Flink's ExecutionState and JobStatus).

    Execution:  CREATED -> SCHEDULED -> DEPLOYING -> INITIALIZING -> RUNNING -> FINISHED
                   any non-terminal -> CANCELING -> CANCELED,  any non-terminal -> FAILED
    Job:        INITIALIZING -> CREATED -> RUNNING -> FINISHED
                RUNNING -> FAILING -> FAILED,  RUNNING -> RESTARTING -> RUNNING (a restart),
                * -> CANCELLING -> CANCELED
"""
from __future__ import annotations

import enum
import logging

from millstream.proto import cluster_pb2 as cpb
from millstream.runtime.state_machine import StateMachine

log = logging.getLogger(__name__)


class ExecutionState(str, enum.Enum):
    CREATED = "CREATED"
    SCHEDULED = "SCHEDULED"
    DEPLOYING = "DEPLOYING"
    INITIALIZING = "INITIALIZING"
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    CANCELING = "CANCELING"
    CANCELED = "CANCELED"
    FAILED = "FAILED"

    def is_terminal(self) -> bool:
        return self in (ExecutionState.FINISHED, ExecutionState.CANCELED, ExecutionState.FAILED)

    def to_proto(self) -> int:
        return cpb.ExecutionState.Value(f"EXEC_{self.value}")

    @staticmethod
    def from_proto(value: int) -> "ExecutionState":
        name = cpb.ExecutionState.Name(value)
        if not name.startswith("EXEC_"):
            raise ValueError(f"unknown execution state {value}")
        return ExecutionState(name[len("EXEC_"):])


_E = ExecutionState
EXECUTION_TRANSITIONS: dict[ExecutionState, frozenset[ExecutionState]] = {
    _E.CREATED: frozenset({_E.SCHEDULED, _E.CANCELED, _E.FAILED}),
    _E.SCHEDULED: frozenset({_E.DEPLOYING, _E.CANCELED, _E.FAILED}),
    # A short task may report RUNNING or even FINISHED before INITIALIZING reaches us.
    _E.DEPLOYING: frozenset({_E.INITIALIZING, _E.RUNNING, _E.FINISHED, _E.CANCELING, _E.CANCELED, _E.FAILED}),
    _E.INITIALIZING: frozenset({_E.RUNNING, _E.FINISHED, _E.CANCELING, _E.CANCELED, _E.FAILED}),
    _E.RUNNING: frozenset({_E.FINISHED, _E.CANCELING, _E.CANCELED, _E.FAILED}),
    _E.CANCELING: frozenset({_E.CANCELED, _E.FAILED}),
    _E.FINISHED: frozenset(),
    _E.CANCELED: frozenset(),
    _E.FAILED: frozenset(),
}
EXECUTION_STATES = StateMachine("execution", EXECUTION_TRANSITIONS, log)


class JobStatus(str, enum.Enum):
    INITIALIZING = "INITIALIZING"
    CREATED = "CREATED"
    RUNNING = "RUNNING"
    FAILING = "FAILING"
    FAILED = "FAILED"
    CANCELLING = "CANCELLING"
    CANCELED = "CANCELED"
    FINISHED = "FINISHED"
    RESTARTING = "RESTARTING"
    SUSPENDED = "SUSPENDED"

    def is_globally_terminal(self) -> bool:
        return self in (JobStatus.FAILED, JobStatus.CANCELED, JobStatus.FINISHED)

    def is_terminal(self) -> bool:
        return self.is_globally_terminal() or self is JobStatus.SUSPENDED

    def to_proto(self) -> int:
        return cpb.JobStatus.Value(self.value)

    @staticmethod
    def from_proto(value: int) -> "JobStatus":
        return JobStatus(cpb.JobStatus.Name(value))


_J = JobStatus
JOB_TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    _J.INITIALIZING: frozenset({_J.CREATED, _J.FAILED, _J.CANCELED, _J.SUSPENDED}),
    _J.CREATED: frozenset({_J.RUNNING, _J.FAILING, _J.FAILED, _J.CANCELLING, _J.CANCELED, _J.SUSPENDED}),
    _J.RUNNING: frozenset({_J.FINISHED, _J.FAILING, _J.CANCELLING, _J.RESTARTING, _J.SUSPENDED}),
    _J.FAILING: frozenset({_J.FAILED, _J.RESTARTING, _J.CANCELLING}),
    _J.RESTARTING: frozenset({_J.RUNNING, _J.CREATED, _J.CANCELLING, _J.FAILED, _J.SUSPENDED}),
    _J.CANCELLING: frozenset({_J.CANCELED}),
    _J.FAILED: frozenset(),
    _J.CANCELED: frozenset(),
    _J.FINISHED: frozenset(),
    _J.SUSPENDED: frozenset(),
}
JOB_STATES = StateMachine("job", JOB_TRANSITIONS, log)
