"""Application mode's decisions (client/application_core.py), from Flink's documented behaviour:
a fixed job id under HA (one job per application), a leader that recovers the job does not run
the program again, a job with a result is never run again, and the application's exit status."""
from __future__ import annotations

import pytest

from millstream.client.application_core import (
    EXIT_CANCELED,
    EXIT_FAILED,
    EXIT_FINISHED,
    ApplicationError,
    ApplicationJobs,
    JobOutcome,
    StartKind,
    application_job_id,
    decide_start,
    outcome,
    parse_job_id,
)

A, B = bytes(range(16)), bytes(range(1, 17))


def test_job_id_fixed_only_with_ha_or_explicitly() -> None:
    assert application_job_id(None, False, "/default") is None
    assert application_job_id(A, False, "/default") == A
    assert application_job_id(A, True, "/default") == A
    derived = application_job_id(None, True, "/default")
    assert derived is not None and len(derived) == 16
    assert application_job_id(None, True, "/default") == derived  # another process, the same id
    assert application_job_id(None, True, "/other") != derived     # another cluster, another id


def test_parse_job_id_names_bad_values() -> None:
    assert parse_job_id(A.hex()) == A
    for bad in ("xyz", "00", A.hex() + "00"):
        with pytest.raises(ApplicationError, match="--job-id: expected 32 hex characters"):
            parse_job_id(bad)


def test_without_a_fixed_id_every_job_keeps_its_own() -> None:
    jobs = ApplicationJobs(None)
    assert jobs.job_id_for(A) == A
    assert jobs.job_id_for(B) == B
    jobs.add(A)
    jobs.add(B)
    jobs.add(A)
    assert jobs.submitted == [A, B]


def test_a_fixed_id_takes_the_first_job_and_refuses_a_second() -> None:
    jobs = ApplicationJobs(B)
    assert jobs.job_id_for(A) == B
    with pytest.raises(ApplicationError, match="runs a single job"):
        jobs.job_id_for(A)


def test_start_runs_main_when_nothing_knows_the_job() -> None:
    assert decide_start(None, False, None).kind is StartKind.RUN_MAIN
    assert decide_start(A, False, None).kind is StartKind.RUN_MAIN


def test_start_follows_a_recovered_job_without_the_program() -> None:
    start = decide_start(A, True, None)
    assert start.kind is StartKind.FOLLOW and start.job_id == A


def test_start_reports_a_recorded_result_and_runs_nothing() -> None:
    start = decide_start(A, False, "FAILED", "boom")
    assert (start.kind, start.status, start.failure) == (StartKind.ENDED, "FAILED", "boom")
    assert decide_start(A, True, "FINISHED").kind is StartKind.ENDED  # a result wins over a left-over graph


def _job(status: str, failure: str = "", job_id: bytes = A) -> JobOutcome:
    return JobOutcome(job_id, "wc", status, failure)


def test_outcome_exit_codes() -> None:
    assert outcome([_job("FINISHED")]).exit_code == EXIT_FINISHED
    assert outcome([_job("FINISHED"), _job("FINISHED", job_id=B)]).exit_code == EXIT_FINISHED
    assert outcome([_job("CANCELED")]).exit_code == EXIT_CANCELED
    assert outcome([_job("CANCELED"), _job("FAILED", job_id=B)]).exit_code == EXIT_FAILED
    assert outcome([_job("SUSPENDED")]).exit_code == EXIT_FAILED


def test_outcome_names_the_failure() -> None:
    result = outcome([_job("FAILED", "ValueError: bad record")])
    assert result.exit_code == EXIT_FAILED
    assert any("FAILED: ValueError: bad record" in line and A.hex() in line for line in result.lines)


def test_a_program_error_fails_the_application_even_if_its_jobs_finished() -> None:
    result = outcome([_job("FINISHED")], program_error="Traceback ...\nKeyError: 'x'\n")
    assert result.exit_code == EXIT_FAILED
    assert "KeyError: 'x'" in result.lines[-1]


def test_a_program_without_jobs_fails() -> None:
    result = outcome([])
    assert result.exit_code == EXIT_FAILED
    assert "never called execute()" in result.lines[0]
