"""JobManager HA rules without sockets: the fencing guard (HA.md), the recovery decisions of a new
leader (Flink's Dispatcher: jobs with a result never run again), the non-blocking checkpoint id
counter in front of ZooKeeper's, and the Dispatcher's use of HA storage (in-memory stores)."""
from __future__ import annotations

import asyncio
import uuid

import grpc
import pytest

from millstream.jobmanager.blob_server import BlobStore
from millstream.jobmanager.checkpoint.coordinator import (
    CheckpointCoordinator,
    CheckpointFailureReason,
    CheckpointIDUnavailable,
    CheckpointSettings,
    PrefetchedCheckpointIDCounter,
    TaskSnapshot,
    TriggerCheckpoint,
)
from millstream.jobmanager.checkpoint.driver import draw_checkpoint_id
from millstream.jobmanager.dispatcher.dispatcher import Dispatcher, DispatcherError, ErrorKind
from millstream.runtime.execution_state import ExecutionState, JobStatus
from millstream.jobmanager.dispatcher.job_persistence import JobPersistence
from millstream.jobmanager.leadership import LeadershipGuard, plan_recovery, read_jobs_to_recover
from millstream.proto import cluster_pb2 as cpb
from millstream.runtime.ha import DEFAULT_LEADER_ID, JobResultEntry, JobResultStatus, StandaloneHaServices
from millstream.runtime.checkpoint_ids import StandaloneCheckpointIDCounter
from millstream.runtime.ha.job_stores import InMemoryJobGraphStore, InMemoryJobResultStore
from tests.unit.test_dispatcher import FakeJobMaster, _graph, _started

SUBMIT = "/millstream.v1.Dispatcher/SubmitJob"
LIST = "/millstream.v1.Dispatcher/ListJobs"
BLOB = "/millstream.v1.BlobServer/Put"
REGISTER = "/millstream.v1.ResourceManager/RegisterTaskManager"
OFFER = "/millstream.v1.JobMasterService/OfferSlots"
HEALTH = "/grpc.health.v1.Health/Check"


# -- fencing guard ---------------------------------------------------------------------------


def _leader(tokenless: bool = False) -> tuple[LeadershipGuard, uuid.UUID]:
    guard = LeadershipGuard("jm:1", tokenless_allowed=tokenless)
    session = uuid.uuid4()
    guard.grant(session)
    guard.serving_clients = True
    return guard, session


def test_a_standby_answers_clients_unavailable_not_the_leader_and_fences_taskmanagers() -> None:
    guard = LeadershipGuard("jm:1", tokenless_allowed=False)
    for method in (SUBMIT, LIST, BLOB):
        code, message = guard(method, None)
        assert code is grpc.StatusCode.UNAVAILABLE and message == "JobManager jm:1 is not the leader"
    for method in (REGISTER, OFFER):
        code, message = guard(method, str(uuid.uuid4()))
        assert code is grpc.StatusCode.FAILED_PRECONDITION and message.startswith("fenced: ")
    assert guard(HEALTH, None) is None  # health and reflection are always served


def test_the_leader_serves_fenced_calls_only_with_its_session_id() -> None:
    guard, session = _leader()
    assert guard(SUBMIT, None) is None and guard(LIST, "anything") is None
    assert guard(REGISTER, str(session)) is None and guard(OFFER, str(session)) is None
    for token in (str(uuid.uuid4()), str(DEFAULT_LEADER_ID), None, ""):
        code, message = guard(OFFER, token)
        assert code is grpc.StatusCode.FAILED_PRECONDITION and message.startswith("fenced: ")
        assert str(session) in message
    assert guard.token == str(session)


def test_a_revoked_leader_refuses_at_once_even_its_own_old_session() -> None:
    guard, session = _leader()
    guard.revoke()
    assert guard.token is None
    assert guard(REGISTER, str(session))[0] is grpc.StatusCode.FAILED_PRECONDITION
    assert guard(SUBMIT, None)[0] is grpc.StatusCode.UNAVAILABLE


def test_clients_wait_until_the_new_leader_has_recovered_its_jobs() -> None:
    guard = LeadershipGuard("jm:1", tokenless_allowed=False)
    session = uuid.uuid4()
    guard.grant(session)
    assert guard(LIST, None)[0] is grpc.StatusCode.UNAVAILABLE  # recovering
    assert guard(REGISTER, str(session)) is None  # TaskManagers may register meanwhile
    guard.serving_clients = True
    assert guard(LIST, None) is None


def test_without_ha_the_default_leader_id_or_no_token_is_accepted() -> None:
    guard = LeadershipGuard("jm:1", tokenless_allowed=True)
    guard.grant(DEFAULT_LEADER_ID)
    guard.serving_clients = True
    assert guard.token == "00000000-0000-0000-0000-000000000000"
    assert guard(REGISTER, None) is None and guard(REGISTER, str(DEFAULT_LEADER_ID)) is None
    assert guard(REGISTER, str(uuid.uuid4()))[0] is grpc.StatusCode.FAILED_PRECONDITION


# -- recovery decisions ----------------------------------------------------------------------


def test_jobs_with_a_result_are_never_recovered_and_dirty_ones_are_cleaned_up() -> None:
    a, b, c, d = b"\x0a" * 16, b"\x0b" * 16, b"\x0c" * 16, b"\x0d" * 16
    results = {b: "dirty", c: "clean"}
    dirty = [JobResultEntry(b, JobResultStatus.FINISHED), JobResultEntry(d, JobResultStatus.CANCELED)]
    plan = plan_recovery([c, a, b], results.__contains__, dirty)
    assert plan.recover == [a]
    assert sorted(plan.clean_up) == [b, c, d]  # d: its graph is gone already, the rest of its cleanup is not


def test_read_jobs_to_recover_reads_only_the_jobs_without_a_result() -> None:
    graphs, results = InMemoryJobGraphStore(), InMemoryJobResultStore()
    graphs.put_job_graph(b"\x01" * 16, b"first")
    graphs.put_job_graph(b"\x02" * 16, b"second")
    results.create_dirty_result(JobResultEntry(b"\x02" * 16, JobResultStatus.FAILED))
    plan, payloads = read_jobs_to_recover(graphs, results)
    assert payloads == {b"\x01" * 16: b"first"} and plan.clean_up == [b"\x02" * 16]


def test_a_job_graph_that_cannot_be_read_is_unrecoverable_and_the_other_jobs_are_still_recovered() -> None:
    from millstream.runtime.ha import HaStorageError

    broken = b"\x03" * 16

    class OneUnreadable(InMemoryJobGraphStore):
        def recover_job_graph(self, job_id: bytes) -> bytes:
            if job_id == broken:
                raise HaStorageError(f"job {job_id.hex()} cannot be recovered: HA storage file /ha/g-1 cannot be read")
            return super().recover_job_graph(job_id)

    graphs, results = OneUnreadable(), InMemoryJobResultStore()
    for job_id, payload in ((b"\x01" * 16, b"first"), (broken, b"third"), (b"\x04" * 16, b"fourth")):
        graphs.put_job_graph(job_id, payload)
    plan, payloads = read_jobs_to_recover(graphs, results)
    assert plan.recover == [b"\x01" * 16, b"\x04" * 16] and set(payloads) == set(plan.recover)
    assert list(plan.unrecoverable) == [broken] and "/ha/g-1" in plan.unrecoverable[broken]


def test_an_unrecoverable_job_is_listed_suspended_with_its_reason_never_run_and_kept_stored() -> None:
    async def test(d: Dispatcher, services: StandaloneHaServices) -> None:
        job_id = b"\x07" * 16
        services.job_graph_store().put_job_graph(job_id, b"unreadable")
        d.unrecoverable(job_id, f"job {job_id.hex()} cannot be recovered: HA storage file /ha/g-7 is corrupt")
        summary = d.record(job_id).summary()
        assert JobStatus.from_proto(summary.status) is JobStatus.SUSPENDED
        assert "/ha/g-7 is corrupt" in summary.failure.message and job_id.hex() in summary.failure.message
        assert d.record(job_id).job_master is None and not d._starting  # nothing runs it
        d.cancel_job(job_id)  # nothing to cancel: still listed as it was, and never globally terminal
        await asyncio.gather(*d._cleanups)  # a cleanup, had one been started, is over
        assert not services.job_result_store().has_job_result_entry(job_id)
        assert services.job_graph_store().job_ids() == [job_id]

    _with_ha(test)


# -- checkpoint ids in front of a blocking counter ------------------------------------------


def test_prefetched_ids_are_never_handed_out_twice_and_follow_the_shared_counter() -> None:
    shared = StandaloneCheckpointIDCounter(7)  # a former leader handed out 1..6
    requests: list[object] = []
    counter = PrefetchedCheckpointIDCounter(requests.append)
    with pytest.raises(CheckpointIDUnavailable):
        counter.get_and_increment()
    assert requests == [1]  # asked for one, at least the floor
    counter.supply(draw_checkpoint_id(shared, None))
    assert counter.get_and_increment() == 7 and requests[-1] is None
    counter.supply(draw_checkpoint_id(shared, None))
    counter.set_count(20)  # restored a checkpoint 19 (written by another leader)
    assert not counter.ready and requests[-1] == 20
    counter.supply(8)  # a draw from before set_count: too low, asked again
    assert not counter.ready and requests[-1] == 20
    counter.supply(draw_checkpoint_id(shared, 20))
    assert counter.get_and_increment() == 20 and shared.get() == 21


def test_a_trigger_without_a_ready_id_fails_without_counting_against_the_tolerance() -> None:
    refills: list[object] = []
    counter = PrefetchedCheckpointIDCounter(refills.append)
    coordinator = CheckpointCoordinator(CheckpointSettings(interval_ms=100, timeout_ms=1000, tolerable_failed_checkpoints=0),
                                        counter)
    task = TaskSnapshot(b"a1", "v_0", ExecutionState.RUNNING)
    assert coordinator.trigger_now(0, [task]) == []  # no FailJob either
    assert coordinator.stats.last_failure_reason == CheckpointFailureReason.TRIGGER_CHECKPOINT_FAILURE.value
    assert not CheckpointFailureReason.TRIGGER_CHECKPOINT_FAILURE.counts_against_tolerance
    counter.supply(5)
    commands = coordinator.trigger_now(10, [task])
    assert [c.checkpoint_id for c in commands if isinstance(c, TriggerCheckpoint)] == [5]


# -- the Dispatcher with HA storage --------------------------------------------------------


def _with_ha(test) -> None:  # noqa: ANN001
    async def body() -> None:
        blobs = BlobStore()
        services = StandaloneHaServices("jm:1")
        try:
            dispatcher = Dispatcher(blobs, FakeJobMaster, lambda: 4, job_retention_ms=60_000,
                                    persistence=JobPersistence(services))
            await test(dispatcher, services)
        finally:
            services.close()
            blobs.close()

    asyncio.run(body())


def test_a_submitted_job_is_in_the_job_graph_store_with_its_artifacts_before_the_answer() -> None:
    async def test(d: Dispatcher, services: StandaloneHaServices) -> None:
        request = cpb.SubmitJobRequest(submission_id="s1", job_graph=_graph(),
                                       artifacts=[cpb.Artifact(name="udfs.py", content=b"X = 1\n")])
        response = await d.submit_job(request)
        stored = cpb.SubmitJobRequest.FromString(services.job_graph_store().recover_job_graph(response.job_id))
        started = d.jobs[response.job_id].start_time_ms
        assert stored.accepted_at_ms == started > 0  # when it was accepted, for the leader that recovers it
        stored.ClearField("accepted_at_ms")
        assert stored == request

    _with_ha(test)


def test_a_recovered_job_keeps_the_start_time_it_was_first_accepted_at() -> None:
    async def test(d: Dispatcher, services: StandaloneHaServices) -> None:
        accepted_long_ago = 1_600_000_000_000
        d.recover(cpb.SubmitJobRequest(job_graph=_graph(), accepted_at_ms=accepted_long_ago))
        [record] = d.jobs.values()
        assert record.start_time_ms == accepted_long_ago and record.summary().start_time_ms == accepted_long_ago

    _with_ha(test)


def test_a_globally_terminal_job_gets_a_clean_result_and_leaves_the_job_graph_store() -> None:
    async def test(d: Dispatcher, services: StandaloneHaServices) -> None:
        response = await d.submit_job(cpb.SubmitJobRequest(job_graph=_graph()))
        job_master = await _started(d, response.job_id)
        job_master.on_status(JobStatus.FINISHED, None)
        results = services.job_result_store()
        await asyncio.gather(*d._cleanups)
        assert results.has_clean_job_result_entry(response.job_id)
        assert services.job_graph_store().job_ids() == []
        assert [e.status for e in results.dirty_results()] == []

    _with_ha(test)


def test_losing_leadership_suspends_jobs_without_a_result_and_keeps_them_stored() -> None:
    async def test(d: Dispatcher, services: StandaloneHaServices) -> None:
        response = await d.submit_job(cpb.SubmitJobRequest(job_graph=_graph()))
        await _started(d, response.job_id)
        record = d.jobs[response.job_id]
        d.suspend_all()
        assert record.status is JobStatus.SUSPENDED and d.jobs == {}
        await asyncio.gather(*d._cleanups)
        assert not services.job_result_store().has_job_result_entry(response.job_id)
        assert services.job_graph_store().job_ids() == [response.job_id]
        # a new leadership recovers it from the stored request
        d.recover(cpb.SubmitJobRequest.FromString(services.job_graph_store().recover_job_graph(response.job_id)))
        assert (await _started(d, response.job_id)).started

    _with_ha(test)


def test_a_job_that_cannot_be_stored_is_refused_unavailable_and_not_started() -> None:
    from millstream.runtime.ha import HaStorageError

    class Unwritable(JobPersistence):
        def put(self, request: cpb.SubmitJobRequest, job_id: bytes) -> None:
            raise HaStorageError("cannot write to high-availability.storageDir (/ha/x): Permission denied")

    async def body() -> None:
        blobs, services = BlobStore(), StandaloneHaServices("jm:1")
        try:
            d = Dispatcher(blobs, FakeJobMaster, lambda: 4, job_retention_ms=60_000, persistence=Unwritable(services))
            with pytest.raises(DispatcherError) as refused:
                await d.submit_job(cpb.SubmitJobRequest(job_graph=_graph()))
            assert refused.value.kind is ErrorKind.UNAVAILABLE
            assert "high-availability storage" in str(refused.value) and "Permission denied" in str(refused.value)
            assert d.jobs == {}
        finally:
            services.close()
            blobs.close()

    asyncio.run(body())
