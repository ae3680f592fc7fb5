"""JobID, JobStatus and CompletableFuture (PyFlink's ``pyflink.common`` names) and the JobClient's
calls, against a fake cluster client (the real cluster: tests/integration/test_job_client.py)."""
from __future__ import annotations

import threading

import pytest

from millstream.common import CompletableFuture, JobClient, JobID, JobStatus
from millstream.runtime.execution_state import JobStatus as ClusterStatus
from millstream.proto import cluster_pb2 as cpb


def test_job_id_round_trips_hex_and_bytes() -> None:
    raw = bytes(range(16))
    assert str(JobID(raw)) == raw.hex() and JobID(raw.hex()) == JobID(raw) and JobID(raw).to_bytes() == raw
    assert len({JobID(raw), JobID(raw.hex())}) == 1
    with pytest.raises(ValueError, match="32 hex digits"):
        JobID("xyz")
    with pytest.raises(ValueError, match="16 bytes"):
        JobID(b"short")
    assert repr(JobID(raw)) == f"JobID({raw.hex()})" and JobID(raw) == raw.hex()  # also its hex text


def test_job_execution_result_gives_a_job_id() -> None:
    from millstream.common import JobExecutionResult

    result = JobExecutionResult(bytes(range(16)).hex(), "j", 5)
    assert isinstance(result.get_job_id(), JobID) and result.get_job_id().to_bytes() == bytes(range(16))


def test_job_status_terminal_states_follow_flink() -> None:
    assert {s for s in JobStatus if s.is_globally_terminal_state()} == {JobStatus.FINISHED, JobStatus.CANCELED, JobStatus.FAILED}
    assert {s for s in JobStatus if s.is_terminal_state()} == {JobStatus.FINISHED, JobStatus.CANCELED, JobStatus.FAILED,
                                                               JobStatus.SUSPENDED}
    # every status the cluster reports has a PyFlink status of the same name
    assert {s.value for s in ClusterStatus} <= {s.name for s in JobStatus}


def test_completable_future_first_completion_wins_and_cancel_works_while_pending() -> None:
    f = CompletableFuture()
    assert not f.done() and str(f) == "CompletableFuture[Incomplete]"
    assert f.set_result(1) is True and f.set_result(2) is False and f.set_exception(ValueError()) is False
    assert f.result() == 1 and f.exception() is None and not f.cancel()
    g = CompletableFuture()
    assert g.cancel() and g.cancelled() and g.done() and g.set_result(3) is False
    h = CompletableFuture()
    h.set_exception(ValueError("bad"))
    assert isinstance(h.exception(), ValueError)
    with pytest.raises(ValueError, match="bad"):
        h.result()


def test_a_cancelled_future_drops_the_late_answer_of_its_work() -> None:
    release = threading.Event()
    f = CompletableFuture._supply_async(lambda: release.wait(5) and "late", "test")
    assert f.cancel() and f.cancelled()
    release.set()
    assert f.cancelled()


class FakeClusterClient:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def status(self, job_id: bytes) -> cpb.JobSummary:
        self.calls.append(("status", job_id))
        return cpb.JobSummary(job_id=job_id, status=ClusterStatus.RUNNING.to_proto())

    def cancel(self, job_id: bytes) -> cpb.JobSummary:
        self.calls.append(("cancel", job_id))
        return cpb.JobSummary(job_id=job_id, status=ClusterStatus.CANCELLING.to_proto())

    def savepoint(self, job_id: bytes, directory: str, stop: bool, drain: bool = False) -> str:
        self.calls.append(("savepoint", job_id, directory, stop, drain))
        return f"{directory}/savepoint-1"


class FakeSession:
    def __init__(self) -> None:
        self.client = FakeClusterClient()


class FakeGraph:
    job_name = "j"


def test_job_client_calls_reach_the_cluster_with_the_jobs_id() -> None:
    job_id = bytes(range(16))
    session = FakeSession()
    client = JobClient(session, FakeGraph(), job_id)
    assert client.get_job_id() == JobID(job_id)
    assert client.get_job_status().result(5) is JobStatus.RUNNING
    assert client.cancel().result(5) is None
    assert client.trigger_savepoint("/sp").result(5) == "/sp/savepoint-1"
    assert client.stop_with_savepoint(False, "/sp2").result(5) == "/sp2/savepoint-1"
    assert client.stop_with_savepoint(True, "/sp3").result(5) == "/sp3/savepoint-1"  # drain
    assert session.client.calls == [("status", job_id), ("cancel", job_id), ("savepoint", job_id, "/sp", False, False),
                                    ("savepoint", job_id, "/sp2", True, False), ("savepoint", job_id, "/sp3", True, True)]
    with pytest.raises(TypeError, match="must be a str"):
        client.trigger_savepoint(3)
