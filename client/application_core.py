"""Application mode's decisions (pure): the application's job id, what a JobManager that starts
leading does with the application, and the exit status once it ended.

Flink's application mode (FLIP-85, its ``ApplicationDispatcherBootstrap``) runs the program's
``main`` inside the JobManager; the cluster lives for the application and ends with it. With high
availability a job of the application must be recognisable again after a JobManager failover, so
its job id is fixed: ``--job-id`` if given, else one derived from ``high-availability.cluster-id``
(Flink derives it from the cluster id too), and such an application runs a single job. A JobManager
that becomes leader then finds the job in the JobGraphStore (it was recovered: follow it to its end,
the program is not run again) or in the JobResultStore (it ended: report that status), and only
when neither knows it runs the program's ``main``.
"""
from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field
from typing import Optional, Sequence

# The namespace of job ids derived from a cluster id (any fixed UUID: the same cluster id gives the
# same job id in every process, on every host).
_JOB_ID_NAMESPACE = uuid.UUID("6d696c6c-7374-7265-616d-2d6170706c69")

EXIT_FINISHED = 0
EXIT_FAILED = 1      # the job FAILED, or the program raised (it had no job, or its own error)
EXIT_CANCELED = 3    # the job was CANCELED (2 is the CLI's usage error)


class ApplicationError(RuntimeError):
    """The program does what application mode cannot run (a second job with a fixed job id)."""


def parse_job_id(text: str) -> bytes:
    """``--job-id``: 32 hex characters (Flink's JobID), else ApplicationError naming the value."""
    try:
        job_id = bytes.fromhex(text)
    except ValueError:
        job_id = b""
    if len(job_id) != 16:
        raise ApplicationError(f"--job-id: expected 32 hex characters, got {text!r}")
    return job_id


def application_job_id(explicit: Optional[bytes], highly_available: bool, cluster_id: str) -> Optional[bytes]:
    """The fixed id of the application's job: ``explicit``, else (with HA) one derived from the
    cluster id; None: each job gets a fresh random id (without HA nothing needs to find it again)."""
    if explicit is not None:
        return explicit
    if highly_available:
        return uuid.uuid5(_JOB_ID_NAMESPACE, cluster_id).bytes
    return None


class ApplicationJobs:
    """The jobs the program submitted, in order. With a fixed job id the first job takes it and a
    second one is refused (Flink: one job per application with HA; it could not be told apart
    from the first after a failover)."""

    def __init__(self, fixed_job_id: Optional[bytes]) -> None:
        self.fixed_job_id = fixed_job_id
        self.submitted: list[bytes] = []
        self._assigned = 0

    def job_id_for(self, generated: bytes) -> bytes:
        """The id the next job is submitted under (``generated``: the one its JobGraph has)."""
        if self.fixed_job_id is None:
            self._assigned += 1
            return generated
        if self._assigned:
            raise ApplicationError(
                f"this application already ran job {self.fixed_job_id.hex()}: with high availability (or --job-id) "
                "an application runs a single job (its fixed id finds it again after a JobManager failover); "
                "run each job as its own application")
        self._assigned += 1
        return self.fixed_job_id

    def add(self, job_id: bytes) -> None:
        if job_id not in self.submitted:
            self.submitted.append(job_id)


class StartKind(enum.Enum):
    RUN_MAIN = "run main"  # nothing knows the job: run the program
    FOLLOW = "follow"      # the job was recovered from HA storage: follow it, do not run the program
    ENDED = "ended"        # the job has a result in HA storage: report it, run nothing


@dataclass(frozen=True)
class Start:
    kind: StartKind
    job_id: Optional[bytes] = None
    status: str = ""    # ENDED: the recorded status (FINISHED, FAILED, CANCELED)
    failure: str = ""   # ENDED: the recorded failure message


def decide_start(job_id: Optional[bytes], recovered: bool, result_status: Optional[str],
                 result_failure: str = "") -> Start:
    """What a JobManager that now leads does: ``recovered``: the job is among the jobs it recovered;
    ``result_status``: the job's status in the JobResultStore (None: no entry)."""
    if job_id is None:
        return Start(StartKind.RUN_MAIN)
    if result_status is not None:  # a result wins: a globally terminal job never runs again
        return Start(StartKind.ENDED, job_id, result_status, result_failure)
    if recovered:
        return Start(StartKind.FOLLOW, job_id)
    return Start(StartKind.RUN_MAIN, job_id)


@dataclass(frozen=True)
class JobOutcome:
    job_id: bytes
    job_name: str
    status: str          # a terminal JobStatus value
    failure: str = ""    # the failure's message, if any


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    lines: list[str] = field(default_factory=list)  # what to tell the user (stderr when not 0)


def outcome(jobs: Sequence[JobOutcome], program_error: Optional[str] = None) -> Outcome:
    """The application's final status (Flink's: SUCCEEDED only when the program returned and every
    job it ran FINISHED): a FAILED job or a program error exits 1, else a CANCELED job exits 3,
    else 0. ``program_error``: what the program raised besides a job's failure (its traceback);
    a program that submitted no job is an error too (Flink: "The application contains no
    execute() calls")."""
    lines = [f"Job {j.job_name} ({j.job_id.hex()}) {j.status}" + (f": {j.failure}" if j.failure else "") for j in jobs]
    failed = [j for j in jobs if j.status == "FAILED"]
    cancelled = [j for j in jobs if j.status == "CANCELED"]
    unfinished = [j for j in jobs if j.status not in ("FINISHED", "FAILED", "CANCELED")]
    if program_error:
        return Outcome(EXIT_FAILED, [*lines, f"The application's program failed:\n{program_error.rstrip()}"])
    if not jobs:
        return Outcome(EXIT_FAILED, ["The application ran no job: its program never called execute()"])
    if failed or unfinished:
        return Outcome(EXIT_FAILED, lines)
    if cancelled:
        return Outcome(EXIT_CANCELED, lines)
    return Outcome(EXIT_FINISHED, lines)
