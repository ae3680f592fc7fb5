"""Dispatcher: validation, idempotent submission, duplicate jobs, artifacts, and result retention."""
from __future__ import annotations

import asyncio

import grpc
import pytest

from millstream.datastream import StreamExecutionEnvironment
from millstream.jobmanager.blob_server import BlobStore
from millstream.jobmanager.dispatcher import Dispatcher, DispatcherError
from millstream.jobmanager.execution_state import JobStatus
from millstream.proto import cluster_pb2 as cpb
from millstream.proto import jobgraph_pb2 as pb


class FakeJobMaster:
    def __init__(self, core, on_status) -> None:
        self.core, self.on_status, self.started, self.cancelled = core, on_status, False, False

    def start(self) -> None:
        self.started = True
        self.on_status(JobStatus.RUNNING, None)

    def cancel(self) -> None:
        self.cancelled = True

    async def stop(self) -> None:
        pass


def _graph() -> bytes:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_sequence(1, 3).add_sink(lambda x: None)
    return env.get_job_graph("job").proto.SerializeToString()


def _run(test):
    async def body():
        blobs = BlobStore()
        try:
            dispatcher = Dispatcher(blobs, FakeJobMaster, lambda: 4, job_retention_ms=50)
            await test(dispatcher)
        finally:
            blobs.close()

    asyncio.run(body())


async def _started(d: Dispatcher, job_id: bytes) -> FakeJobMaster:
    for _ in range(500):
        if d.jobs[job_id].job_master is not None:
            return d.jobs[job_id].job_master
        await asyncio.sleep(0.01)
    raise AssertionError("the JobMaster did not start")


def test_a_submission_starts_a_job_master_and_a_retry_returns_the_same_job() -> None:
    async def test(d: Dispatcher) -> None:
        graph = _graph()
        first = d.submit(cpb.SubmitJobRequest(submission_id="s1", job_graph=graph))
        assert (await _started(d, first.job_id)).started
        again = d.submit(cpb.SubmitJobRequest(submission_id="s1", job_graph=graph))
        assert again.job_id == first.job_id and again.duplicate and len(d.jobs) == 1
        with pytest.raises(DispatcherError) as info:
            d.submit(cpb.SubmitJobRequest(submission_id="s2", job_graph=graph))
        assert info.value.code is grpc.StatusCode.ALREADY_EXISTS

    _run(test)


def test_bad_submissions_are_invalid_arguments_naming_the_problem() -> None:
    async def test(d: Dispatcher) -> None:
        for request, fragment in [
            (cpb.SubmitJobRequest(job_graph=b"\x08\x96"), "cannot be decoded"),
            (cpb.SubmitJobRequest(job_graph=b""), "no vertices"),
            (cpb.SubmitJobRequest(job_graph=_graph(), artifacts=[cpb.Artifact(name="../evil.py", content=b"")]), "not allowed"),
            (cpb.SubmitJobRequest(job_graph=_graph(), artifacts=[cpb.Artifact(name="x.sh", content=b"")]), "not allowed"),
        ]:
            with pytest.raises(DispatcherError) as info:
                d.submit(request)
            assert info.value.code is grpc.StatusCode.INVALID_ARGUMENT and fragment in str(info.value)
        assert not d.jobs

    _run(test)


def test_a_submission_returns_the_job_id_before_the_execution_graph_is_built() -> None:
    """Flink's Dispatcher acknowledges a submission once the JobGraph is persisted; the JobMaster
    (and its ExecutionGraph) comes up afterwards, the job INITIALIZING meanwhile."""

    async def test(d: Dispatcher) -> None:
        job_id = d.submit(cpb.SubmitJobRequest(submission_id="s", job_graph=_graph())).job_id
        record = d.jobs[job_id]
        assert record.status is JobStatus.INITIALIZING and record.job_master is None
        assert d.record(job_id).summary().status == cpb.INITIALIZING
        assert (await _started(d, job_id)).started and record.status is JobStatus.RUNNING

    _run(test)


def test_a_job_cancelled_while_initializing_never_starts() -> None:
    async def test(d: Dispatcher) -> None:
        job_id = d.submit(cpb.SubmitJobRequest(submission_id="s", job_graph=_graph())).job_id
        assert d.cancel(job_id).status == cpb.CANCELED
        await asyncio.sleep(0.3)
        assert d.jobs[job_id].job_master is None and d.jobs[job_id].status is JobStatus.CANCELED

    _run(test)


def test_a_job_id_cancelled_before_its_submission_arrives_is_never_started() -> None:
    """A client that gave up on its submission cancels the job id it chose; a submission still in
    flight must not start the job afterwards."""

    async def test(d: Dispatcher) -> None:
        graph = _graph()
        job_id = pb.JobGraph.FromString(graph).job_id
        with pytest.raises(DispatcherError) as info:
            d.cancel(job_id)
        assert info.value.code is grpc.StatusCode.NOT_FOUND
        with pytest.raises(DispatcherError) as info:
            d.submit(cpb.SubmitJobRequest(submission_id="late", job_graph=graph))
        assert info.value.code is grpc.StatusCode.FAILED_PRECONDITION and "cancelled" in str(info.value)
        assert job_id not in d.jobs

    _run(test)


def test_finished_jobs_are_kept_for_the_retention_time_then_forgotten() -> None:
    async def test(d: Dispatcher) -> None:
        job_id = d.submit(cpb.SubmitJobRequest(submission_id="s", job_graph=_graph())).job_id
        await _started(d, job_id)
        record = d.jobs[job_id]
        record.job_master.on_status(JobStatus.FINISHED, None)
        d.expire_finished()
        assert job_id in d.jobs and d.record(job_id).summary().status == cpb.FINISHED
        await asyncio.sleep(0.06)
        d.expire_finished()
        assert job_id not in d.jobs
        with pytest.raises(DispatcherError) as info:
            d.record(job_id)
        assert info.value.code is grpc.StatusCode.NOT_FOUND

    _run(test)


def test_wait_streams_status_changes_and_collected_records_until_terminal() -> None:
    async def test(d: Dispatcher) -> None:
        job_id = d.submit(cpb.SubmitJobRequest(job_graph=_graph())).job_id
        await _started(d, job_id)
        updates = []

        async def consume() -> None:
            async for update in d.wait(job_id):
                updates.append(update)

        waiter = asyncio.ensure_future(consume())
        await asyncio.sleep(0.01)
        d.add_collected(job_id, cpb.CollectBatch(collect_id="c", payload=b"1"))
        await asyncio.sleep(0.01)
        d.jobs[job_id].job_master.on_status(JobStatus.FINISHED, None)
        await asyncio.wait_for(waiter, 2)
        assert [u.summary.status for u in updates][-1] == cpb.FINISHED and updates[-1].terminal
        assert [b.payload for u in updates for b in u.collected] == [b"1"]

    _run(test)
