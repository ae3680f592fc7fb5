"""Dispatcher: validation, idempotent submission, duplicate jobs, artifacts, and result retention."""
from __future__ import annotations

import asyncio

import grpc
import pytest

from millstream.datastream import StreamExecutionEnvironment
from millstream.jobmanager.blob_server import BlobStore
from millstream.jobmanager.dispatcher.dispatcher import Dispatcher, DispatcherError
from millstream.runtime.execution_state import JobStatus
from millstream.proto import cluster_pb2 as cpb
from millstream.proto import jobgraph_pb2 as pb


class FakeJobMaster:
    def __init__(self, core, on_status) -> None:
        self.core, self.on_status, self.started, self.cancelled = core, on_status, False, False
        self.checkpoints = None

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


def _run(test, **options):
    async def body():
        blobs = BlobStore()
        try:
            dispatcher = Dispatcher(blobs, FakeJobMaster, lambda: 4, job_retention_ms=50, **options)
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


def test_wait_streams_status_changes_until_terminal() -> None:
    async def test(d: Dispatcher) -> None:
        job_id = d.submit(cpb.SubmitJobRequest(job_graph=_graph())).job_id
        await _started(d, job_id)
        updates = []

        async def consume() -> None:
            async for update in d.wait(job_id):
                updates.append(update)

        waiter = asyncio.ensure_future(consume())
        await asyncio.sleep(0.01)
        (await _started(d, job_id)).on_status(JobStatus.FINISHED, None)
        await asyncio.wait_for(waiter, 2)
        assert [u.summary.status for u in updates] == [cpb.RUNNING, cpb.FINISHED] and updates[-1].terminal

    _run(test)


def test_a_finished_job_keeps_its_summary_only() -> None:
    async def test(d: Dispatcher) -> None:
        job_id = d.submit(cpb.SubmitJobRequest(job_graph=_graph())).job_id
        await _started(d, job_id)
        record = d.jobs[job_id]
        tasks = record.job_master.core.tasks_per_state()
        assert await d.add_collected(job_id, b"attempt", cpb.CollectBatch(collect_id="c", payload=b"x"), 0)
        record.job_master.on_status(JobStatus.FAILED, cpb.JobFailure(message="boom"))
        # No JobMaster (and so no ExecutionGraph) and no collected data any more ...
        assert record.job_master is None and record.collect is None
        # ... but what a client asks for afterwards: status, times, failure, task counts.
        summary = d.record(job_id).summary()
        assert summary.status == cpb.FAILED and summary.failure.message == "boom"
        assert summary.end_time_ms >= summary.start_time_ms > 0 and dict(summary.tasks_per_state) == tasks

    _run(test)


def test_the_job_store_keeps_at_most_max_capacity_finished_jobs_dropping_the_oldest() -> None:
    async def test(d: Dispatcher) -> None:
        running = d.submit(cpb.SubmitJobRequest(submission_id="r", job_graph=_graph())).job_id
        finished = []
        for i in range(4):
            job_id = d.submit(cpb.SubmitJobRequest(submission_id=f"s{i}", job_graph=_graph())).job_id
            (await _started(d, job_id)).on_status(JobStatus.FINISHED, None)
            finished.append(job_id)
            await asyncio.sleep(0.002)  # distinct end times
        assert set(d.jobs) == {running, finished[2], finished[3]}  # the running job is never dropped
        with pytest.raises(DispatcherError) as info:
            d.record(finished[0])
        assert info.value.code is grpc.StatusCode.NOT_FOUND
        # A forgotten job's submission id is forgotten with it.
        again = d.submit(cpb.SubmitJobRequest(submission_id="s0", job_graph=_graph()))
        assert not again.duplicate and again.job_id != finished[0]

    _run(test, max_finished_jobs=2)


def test_a_negative_job_store_capacity_is_rejected() -> None:
    with pytest.raises(ValueError, match="jobstore.max-capacity"):
        Dispatcher(None, FakeJobMaster, lambda: 4, job_retention_ms=50, max_finished_jobs=-1)  # type: ignore[arg-type]


def _batch(sequence: int, size: int) -> cpb.CollectBatch:
    return cpb.CollectBatch(collect_id="c", sequence=sequence, payload=bytes([sequence % 256]) * size)


def test_a_report_waits_while_the_job_buffer_is_full_and_is_taken_once_the_client_acknowledged() -> None:
    async def test(d: Dispatcher) -> None:
        job_id = d.submit(cpb.SubmitJobRequest(job_graph=_graph())).job_id
        assert await d.add_collected(job_id, b"a", _batch(0, 60), 1)
        assert await d.add_collected(job_id, b"a", _batch(1, 40), 1)
        # Full: refused after waiting (the TaskManager reports it again) ...
        assert not await d.add_collected(job_id, b"a", _batch(2, 10), 0.05)
        # ... and a waiting report goes through as soon as the client acknowledges what it has.
        waiting = asyncio.ensure_future(d.add_collected(job_id, b"a", _batch(2, 10), 5))
        first = await d.fetch_collected(cpb.FetchCollectRequest(job_id=job_id, offset=0, max_bytes=1000), 1)
        assert [b.sequence for b in first.batches] == [0, 1] and first.next_offset == 2
        await asyncio.sleep(0.05)
        assert not waiting.done()  # delivered but not acknowledged: still buffered for a retry
        second = asyncio.ensure_future(d.fetch_collected(cpb.FetchCollectRequest(job_id=job_id, offset=2, max_bytes=1000), 5))
        assert await asyncio.wait_for(waiting, 2)
        assert [b.sequence for b in (await second).batches] == [2]
        assert d.jobs[job_id].collect.buffered_bytes == 10  # 0 and 1 were dropped at once

    _run(test, collect_buffer_bytes=100)


def test_the_client_gets_the_end_only_after_acknowledging_every_batch_of_a_finished_job() -> None:
    async def test(d: Dispatcher) -> None:
        job_id = d.submit(cpb.SubmitJobRequest(job_graph=_graph())).job_id
        for seq in range(3):
            assert await d.add_collected(job_id, b"a", _batch(seq, 10), 1)
        (await _started(d, job_id)).on_status(JobStatus.FINISHED, None)
        offset, seen, end = 0, [], None
        for _ in range(10):
            response = await d.fetch_collected(cpb.FetchCollectRequest(job_id=job_id, offset=offset, max_bytes=15), 1)
            seen += [b.sequence for b in response.batches]
            offset = response.next_offset
            if response.end_of_data:
                end = response
                break
            assert len(response.batches) == 1  # 15 bytes: one 10-byte batch per answer
        assert end is not None and not end.batches and seen == [0, 1, 2]
        assert end.summary.status == cpb.FINISHED and d.jobs[job_id].collect is None
        again = await d.fetch_collected(cpb.FetchCollectRequest(job_id=job_id, offset=offset, max_bytes=15), 1)
        assert again.end_of_data  # the answer with the end was lost: asking again is harmless

    _run(test)


def test_a_fetch_waits_for_data_and_a_failed_job_releases_its_waiting_producers() -> None:
    async def test(d: Dispatcher) -> None:
        job_id = d.submit(cpb.SubmitJobRequest(job_graph=_graph())).job_id
        empty = await d.fetch_collected(cpb.FetchCollectRequest(job_id=job_id, offset=0, max_bytes=100), 0.05)
        assert not empty.batches and not empty.end_of_data and empty.next_offset == 0
        pending = asyncio.ensure_future(d.fetch_collected(cpb.FetchCollectRequest(job_id=job_id, offset=0, max_bytes=100), 5))
        await asyncio.sleep(0.01)
        assert await d.add_collected(job_id, b"a", _batch(0, 100), 1)
        assert [b.sequence for b in (await asyncio.wait_for(pending, 2)).batches] == [0]
        blocked = asyncio.ensure_future(d.add_collected(job_id, b"a", _batch(1, 100), 5))
        await asyncio.sleep(0.01)
        (await _started(d, job_id)).on_status(JobStatus.CANCELED, None)
        assert await asyncio.wait_for(blocked, 2)  # nobody will read it: the producer goes on
        end = await d.fetch_collected(cpb.FetchCollectRequest(job_id=job_id, offset=1, max_bytes=100), 1)
        assert end.end_of_data and end.summary.status == cpb.CANCELED

    _run(test, collect_buffer_bytes=100)


def test_fetching_an_acknowledged_offset_is_an_error_naming_it() -> None:
    async def test(d: Dispatcher) -> None:
        job_id = d.submit(cpb.SubmitJobRequest(job_graph=_graph())).job_id
        for seq in range(2):
            await d.add_collected(job_id, b"a", _batch(seq, 1), 1)
        await d.fetch_collected(cpb.FetchCollectRequest(job_id=job_id, offset=2, max_bytes=10), 0)
        with pytest.raises(DispatcherError) as info:
            await d.fetch_collected(cpb.FetchCollectRequest(job_id=job_id, offset=1, max_bytes=10), 0)
        assert info.value.code is grpc.StatusCode.OUT_OF_RANGE and "offset 1 was already acknowledged" in str(info.value)

    _run(test)


def _graph_with(restart=None, configuration=None, checkpoint_ms: int = 0) -> bytes:
    from millstream.common import Configuration

    env = StreamExecutionEnvironment.get_execution_environment(Configuration() if configuration is None else configuration)
    if restart is not None:
        env.set_restart_strategy(restart)
    if checkpoint_ms:
        env.enable_checkpointing(checkpoint_ms)
    env.from_sequence(1, 3).add_sink(lambda x: None)
    return env.get_job_graph("job").proto.SerializeToString()


def test_the_jobs_restart_strategy_wins_over_the_clusters_then_the_cluster_then_flinks_default() -> None:

    from millstream.common.restart_strategy import RestartStrategies
    from millstream.runtime import config as cfg
    from millstream.runtime.restart_strategy import ExponentialDelay, FixedDelay, NoRestart, options_of

    cluster = cfg.Configuration.from_dict({
        "restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attempts": 4,
        "restart-strategy.fixed-delay.delay": "2 s"})

    async def test(d: Dispatcher) -> None:
        own = d.submit(cpb.SubmitJobRequest(job_graph=_graph_with(RestartStrategies.fixed_delay_restart(7, 3000)))).job_id
        assert (await _started(d, own)).core.restart_spec == FixedDelay(7, 3000)
        fallback = d.submit(cpb.SubmitJobRequest(job_graph=_graph_with(RestartStrategies.fall_back_restart()))).job_id
        assert (await _started(d, fallback)).core.restart_spec == FixedDelay(4, 2000)
        unset = d.submit(cpb.SubmitJobRequest(job_graph=_graph_with())).job_id
        assert (await _started(d, unset)).core.restart_spec == FixedDelay(4, 2000)

    _run(test, restart_options=options_of(cluster))

    async def defaults(d: Dispatcher) -> None:
        plain = d.submit(cpb.SubmitJobRequest(job_graph=_graph_with())).job_id
        assert (await _started(d, plain)).core.restart_spec == NoRestart()
        checkpointed = d.submit(cpb.SubmitJobRequest(job_graph=_graph_with(checkpoint_ms=1000))).job_id
        assert (await _started(d, checkpointed)).core.restart_spec == ExponentialDelay()

    _run(defaults, restart_options=options_of(cfg.Configuration()))


def test_the_cluster_options_are_read_with_flinks_keys_and_defaults() -> None:
    from millstream.runtime import config as cfg
    from millstream.runtime.restart_strategy import ExponentialDelay, FailureRate, options_of, spec_from_options

    assert spec_from_options(options_of(cfg.Configuration())) is None  # no type: the job's or the default
    conf = cfg.Configuration.from_dict({
        cfg.RESTART_STRATEGY_TYPE.key: "failure-rate", cfg.RESTART_FAILURE_RATE_MAX_FAILURES.key: 3,
        cfg.RESTART_FAILURE_RATE_INTERVAL.key: "5 min", cfg.RESTART_FAILURE_RATE_DELAY.key: "10 s"})
    assert spec_from_options(options_of(conf)) == FailureRate(3, 300_000, 10_000)
    conf = cfg.Configuration.from_dict({
        "restart-strategy": "exponentialdelay",  # Flink's deprecated key
        cfg.RESTART_EXP_INITIAL_BACKOFF.key: "2 s", cfg.RESTART_EXP_MAX_BACKOFF.key: "30 s",
        cfg.RESTART_EXP_MULTIPLIER.key: 2.0, cfg.RESTART_EXP_RESET_THRESHOLD.key: "10 min",
        cfg.RESTART_EXP_JITTER.key: 0.0, cfg.RESTART_EXP_ATTEMPTS.key: 5})
    assert spec_from_options(options_of(conf)) == ExponentialDelay(2000, 30_000, 2.0, 600_000, 0.0, 5)
    conf = cfg.Configuration.from_dict({cfg.RESTART_STRATEGY_TYPE.key: "fixed-delay"})
    spec = spec_from_options(options_of(conf))
    assert (spec.attempts, spec.delay_ms) == (cfg.RESTART_FIXED_DELAY_ATTEMPTS.default, cfg.RESTART_FIXED_DELAY_DELAY.default) == (1, 1000)


def test_a_bad_restart_strategy_rejects_the_submission_naming_it() -> None:
    from millstream.common.restart_strategy import RestartStrategies

    async def test(d: Dispatcher) -> None:
        with pytest.raises(DispatcherError) as info:
            d.submit(cpb.SubmitJobRequest(job_graph=_graph_with(RestartStrategies.failure_rate_restart(0, 1000, 1000))))
        assert info.value.code is grpc.StatusCode.INVALID_ARGUMENT
        assert "max-failures-per-interval" in str(info.value)

    _run(test)


def test_a_restart_while_results_are_collected_discards_them_and_the_client_is_told() -> None:
    async def test(d: Dispatcher) -> None:
        job_id = d.submit(cpb.SubmitJobRequest(job_graph=_graph())).job_id
        job_master = await _started(d, job_id)
        assert await d.add_collected(job_id, b"attempt-0", _batch(0, 10), 1)
        first = await d.fetch_collected(cpb.FetchCollectRequest(job_id=job_id, offset=0, max_bytes=100), 1)
        assert [b.sequence for b in first.batches] == [0]
        assert await d.add_collected(job_id, b"attempt-0", _batch(1, 10), 1)  # not fetched before the failure
        waiting = asyncio.ensure_future(d.fetch_collected(cpb.FetchCollectRequest(job_id=job_id, offset=2, max_bytes=100), 5))
        job_master.core.failure = cpb.JobFailure(message="RuntimeError: boom")
        job_master.on_status(JobStatus.RESTARTING, None)
        with pytest.raises(DispatcherError) as info:
            await asyncio.wait_for(waiting, 2)
        assert info.value.code is grpc.StatusCode.FAILED_PRECONDITION and "restarted" in str(info.value)
        job_master.core.failure = None  # running again: the cause is still named
        job_master.on_status(JobStatus.RUNNING, None)
        with pytest.raises(DispatcherError, match="RuntimeError: boom"):
            await d.fetch_collected(cpb.FetchCollectRequest(job_id=job_id, offset=1, max_bytes=100), 0.05)
        assert await d.add_collected(job_id, b"attempt-1", _batch(0, 10), 1)  # the new attempt: not stored
        with pytest.raises(DispatcherError):
            await d.fetch_collected(cpb.FetchCollectRequest(job_id=job_id, offset=1, max_bytes=100), 0.05)
        assert d.jobs[job_id].collect.buffered_bytes == 0

    _run(test)


def test_a_restart_before_anything_was_collected_leaves_collecting_alone() -> None:
    async def test(d: Dispatcher) -> None:
        job_id = d.submit(cpb.SubmitJobRequest(job_graph=_graph())).job_id
        job_master = await _started(d, job_id)
        job_master.on_status(JobStatus.RESTARTING, None)
        job_master.on_status(JobStatus.RUNNING, None)
        assert await d.add_collected(job_id, b"attempt-1", _batch(0, 10), 1)
        fetched = await d.fetch_collected(cpb.FetchCollectRequest(job_id=job_id, offset=0, max_bytes=100), 1)
        assert [b.sequence for b in fetched.batches] == [0]

    _run(test)


def test_a_savepoint_of_a_job_without_checkpointing_names_that_cause_not_a_directory() -> None:
    """Whether or not a directory is given (and without a cluster default), the refusal says the
    job takes no checkpoints; a checkpointing job without any directory is told about the directory."""
    from millstream.jobmanager.dispatcher.dispatcher import DispatcherError

    async def test(d: Dispatcher) -> None:
        plain = d.submit(cpb.SubmitJobRequest(job_graph=_graph_with())).job_id
        checkpointed = d.submit(cpb.SubmitJobRequest(job_graph=_graph_with(checkpoint_ms=1000))).job_id
        await _started(d, plain)
        await _started(d, checkpointed)
        for directory in ("", "/tmp/savepoints"):
            with pytest.raises(DispatcherError, match="takes no checkpoints: a savepoint needs checkpointing") as refused:
                d.start_savepoint(plain, directory, stop=False)
            assert refused.value.code is grpc.StatusCode.FAILED_PRECONDITION
        with pytest.raises(DispatcherError, match="No savepoint directory.*execution.checkpointing.savepoint-dir"):
            d.start_savepoint(checkpointed, "", stop=True)

    _run(test)
