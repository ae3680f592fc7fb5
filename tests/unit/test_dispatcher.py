"""DispatcherCore, from Flink's Dispatcher rules: idempotent submission, duplicate jobs, job
records and their results kept after the end, cancel and savepoint requests against the job's
state, recovery; collected results and printed lines. The core is driven directly (no event
loop, no sockets, no sleeps: time is passed in). The last tests drive the asyncio shell without
sockets: artifacts, the JobMaster's start, and waits woken by changes."""
from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import grpc
import pytest

from millstream.datastream import StreamExecutionEnvironment
from millstream.jobmanager.blob_server import BlobStore
from millstream.jobmanager.dispatcher import dispatcher_core
from millstream.jobmanager.dispatcher.dispatcher import GRPC_STATUS, Dispatcher
from millstream.jobmanager.dispatcher.dispatcher_core import (
    CancelJobMaster,
    CleanUpJob,
    DispatcherCore,
    DispatcherError,
    ErrorKind,
    JobChanged,
    LaunchJob,
    StartJobMaster,
    StopJobMaster,
)
from millstream.jobmanager.jobmaster.job_master_core import JobMasterCore
from millstream.proto import cluster_pb2 as cpb
from millstream.proto import jobgraph_pb2 as pb
from millstream.runtime.execution_state import JobStatus

T0 = 1_700_000_000_000  # wall clock, ms


class FakeJobMaster:
    """A JobMaster as the core sees it (its JobMasterCore, no checkpoints) and as the shell drives it."""

    def __init__(self, core, on_status=None) -> None:  # noqa: ANN001
        self.core, self.on_status, self.started, self.cancelled = core, on_status, False, False
        self.checkpoints = None

    def start(self) -> None:
        self.started = True
        if self.on_status is not None:
            self.on_status(JobStatus.RUNNING, None)

    def cancel(self) -> None:
        self.cancelled = True

    async def stop(self) -> None:
        pass


class FakeCheckpoints:
    def __init__(self, services: object) -> None:
        self.services = services

    def summary(self) -> cpb.CheckpointSummary:
        return cpb.CheckpointSummary(num_completed=2)


def _graph() -> bytes:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_sequence(1, 3).add_sink(lambda x: None)
    return env.get_job_graph("job").proto.SerializeToString()


def _graph_with(restart=None, configuration=None, checkpoint_ms: int = 0, savepoint_dir: str = "") -> bytes:  # noqa: ANN001
    from millstream.common import Configuration

    env = StreamExecutionEnvironment.get_execution_environment(Configuration() if configuration is None else configuration)
    if restart is not None:
        env.set_restart_strategy(restart)
    if checkpoint_ms:
        env.enable_checkpointing(checkpoint_ms)
    if savepoint_dir:
        env.set_default_savepoint_directory(savepoint_dir)
    env.from_sequence(1, 3).add_sink(lambda x: None)
    return env.get_job_graph("job").proto.SerializeToString()


def _submit(core: DispatcherCore, graph: bytes | None = None, submission_id: str = "", now: int = T0,
            **request: object) -> LaunchJob:
    launched = core.submit(cpb.SubmitJobRequest(submission_id=submission_id, job_graph=graph or _graph(), **request), now)
    assert isinstance(launched, LaunchJob)
    return launched


def _run(core: DispatcherCore, graph: bytes | None = None, submission_id: str = "", now: int = T0,
         checkpoints: object = None) -> FakeJobMaster:
    """Submits a job and brings it to RUNNING, as the shell and the JobMaster would."""
    launch = _submit(core, graph, submission_id, now)
    job_master = FakeJobMaster(JobMasterCore(launch.graph, checkpointing=launch.checkpointing))
    job_master.checkpoints = checkpoints
    assert core.job_master_ready(launch.record, job_master, now + 1) == [StartJobMaster(job_master)]
    core.job_status_changed(launch.record, JobStatus.RUNNING, None, now + 2)
    return job_master


def _refused(kind: ErrorKind, call, *args, **kwargs) -> str:  # noqa: ANN001
    with pytest.raises(DispatcherError) as info:
        call(*args, **kwargs)
    assert info.value.kind is kind, str(info.value)
    return str(info.value)


def test_the_core_does_no_io_of_its_own() -> None:
    """Sans-I/O: the core module imports neither asyncio nor grpc nor a clock."""
    tree = ast.parse(Path(dispatcher_core.__file__).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert not imported & {"asyncio", "grpc", "time", "threading", "socket"}


# -- submission ----------------------------------------------------------------------------------


def test_a_retried_submission_answers_the_same_job_and_a_second_job_with_its_id_is_refused() -> None:
    """Flink: submitting a job whose id the Dispatcher runs is a DuplicateJobSubmission; a client's
    retry (same submission id) gets the job it already has."""
    core = DispatcherCore(job_retention_ms=60_000)
    graph = _graph()
    first = _submit(core, graph, "s1")
    again = core.submit(cpb.SubmitJobRequest(submission_id="s1", job_graph=graph), T0 + 5)
    assert isinstance(again, cpb.SubmitJobResponse) and again.duplicate and again.job_id == first.record.job_id
    assert len(core.jobs) == 1
    message = _refused(ErrorKind.ALREADY_EXISTS, core.submit, cpb.SubmitJobRequest(submission_id="s2", job_graph=graph), T0)
    assert first.record.job_id.hex() in message and "already running" in message


def test_an_accepted_job_is_initializing_until_its_job_master_exists_then_created() -> None:
    """Flink acknowledges a submission before the JobMaster (and its ExecutionGraph) exists."""
    core = DispatcherCore(job_retention_ms=60_000)
    launch = _submit(core, now=T0)
    record = launch.record
    assert record.status is JobStatus.INITIALIZING and record.job_master is None
    assert record.summary().status == cpb.INITIALIZING and record.summary().start_time_ms == T0
    assert record.num_tasks == sum(v.parallelism for v in launch.graph.vertices) and record.plan
    job_master = FakeJobMaster(JobMasterCore(launch.graph))
    assert core.job_master_ready(record, job_master, T0 + 7) == [StartJobMaster(job_master)]
    assert record.status is JobStatus.CREATED and record.status_timestamps["CREATED"] == T0 + 7
    assert core.job_master(record.job_id) is job_master


def test_bad_submissions_are_invalid_arguments_naming_the_problem() -> None:
    from millstream.common.restart_strategy import RestartStrategies

    core = DispatcherCore(job_retention_ms=60_000)
    for graph, fragment in [
        (b"\x08\x96", "cannot be decoded"),
        (b"", "no vertices"),
        (_graph_with(RestartStrategies.failure_rate_restart(0, 1000, 1000)), "max-failures-per-interval"),
        (_graph_with(configuration=_conf({"slot.request.timeout": "0 ms"})), "slot.request.timeout"),
    ]:
        assert fragment in _refused(ErrorKind.INVALID_ARGUMENT, core.submit, cpb.SubmitJobRequest(job_graph=graph), T0)
    assert not core.jobs


def _conf(values: dict[str, str]):  # noqa: ANN202
    from millstream.common import Configuration

    conf = Configuration()
    for key, value in values.items():
        conf.set_string(key, value)
    return conf


def test_the_jobs_restart_strategy_wins_over_the_clusters_then_the_cluster_then_flinks_default() -> None:
    from millstream.common.restart_strategy import RestartStrategies
    from millstream.runtime import config as cfg
    from millstream.runtime.restart_strategy import ExponentialDelay, FixedDelay, NoRestart, options_of

    cluster = cfg.Configuration.from_dict({
        "restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attempts": 4,
        "restart-strategy.fixed-delay.delay": "2 s"})
    core = DispatcherCore(job_retention_ms=60_000, restart_options=options_of(cluster))
    assert _submit(core, _graph_with(RestartStrategies.fixed_delay_restart(7, 3000))).restart_spec == FixedDelay(7, 3000)
    assert _submit(core, _graph_with(RestartStrategies.fall_back_restart())).restart_spec == FixedDelay(4, 2000)
    assert _submit(core, _graph_with()).restart_spec == FixedDelay(4, 2000)

    defaults = DispatcherCore(job_retention_ms=60_000, restart_options=options_of(cfg.Configuration()))
    assert _submit(defaults, _graph_with()).restart_spec == NoRestart()
    assert _submit(defaults, _graph_with(checkpoint_ms=1000)).restart_spec == ExponentialDelay()


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


def test_negative_store_bounds_are_rejected_naming_the_option() -> None:
    with pytest.raises(ValueError, match="jobstore.max-capacity"):
        DispatcherCore(job_retention_ms=50, max_finished_jobs=-1)
    with pytest.raises(ValueError, match="web.exception-history-size"):
        DispatcherCore(job_retention_ms=50, exception_history_size=-1)


# -- cancel --------------------------------------------------------------------------------------


def test_cancelling_a_running_job_asks_its_job_master_and_the_job_follows_its_reports() -> None:
    core = DispatcherCore(job_retention_ms=60_000)
    job_master = _run(core)
    job_id = job_master.core.job_id
    summary, commands = core.cancel(job_id, T0 + 10)
    assert summary.status == cpb.RUNNING and commands == [CancelJobMaster(job_master)]
    record = core.record(job_id)
    core.job_status_changed(record, JobStatus.CANCELLING, None, T0 + 11)
    commands = core.job_status_changed(record, JobStatus.CANCELED, None, T0 + 12)
    assert StopJobMaster(record, job_master) in commands and JobChanged(record) in commands
    assert record.end_time_ms == T0 + 12 and record.job_master is None


def test_a_job_cancelled_while_initializing_ends_canceled_and_its_job_master_never_starts() -> None:
    core = DispatcherCore(job_retention_ms=60_000)
    launch = _submit(core)
    summary, commands = core.cancel(launch.record.job_id, T0 + 3)
    assert summary.status == cpb.CANCELED and JobChanged(launch.record) in commands
    assert core.job_master_ready(launch.record, FakeJobMaster(JobMasterCore(launch.graph)), T0 + 4) == []
    assert launch.record.job_master is None and launch.record.status is JobStatus.CANCELED
    assert core.initialization_failed(launch.record, "late", T0 + 5) == [] and launch.record.failure is None


def test_cancelling_a_job_that_ended_answers_its_summary_and_changes_nothing() -> None:
    core = DispatcherCore(job_retention_ms=60_000)
    job_master = _run(core)
    record = core.record(job_master.core.job_id)
    core.job_status_changed(record, JobStatus.FINISHED, None, T0 + 10)
    summary, commands = core.cancel(record.job_id, T0 + 20)
    assert summary.status == cpb.FINISHED and summary.end_time_ms == T0 + 10 and commands == []


def test_a_job_id_cancelled_before_its_submission_arrives_is_never_started() -> None:
    """A client that gave up on its submission cancels the job id it chose: the cancel of an unknown
    job is NOT_FOUND, and a submission still in flight must not start the job afterwards."""
    core = DispatcherCore(job_retention_ms=60_000)
    graph = _graph()
    job_id = pb.JobGraph.FromString(graph).job_id
    assert job_id.hex() in _refused(ErrorKind.NOT_FOUND, core.cancel, job_id, T0)
    message = _refused(ErrorKind.FAILED_PRECONDITION, core.submit, cpb.SubmitJobRequest(submission_id="late", job_graph=graph), T0)
    assert "cancelled" in message and job_id not in core.jobs


# -- results after the end -----------------------------------------------------------------------


def test_a_finished_job_keeps_its_summary_only_and_stops_its_job_master() -> None:
    core = DispatcherCore(job_retention_ms=60_000)
    job_master = _run(core, checkpoints=FakeCheckpoints(None))
    record = core.record(job_master.core.job_id)
    tasks = job_master.core.tasks_per_state()
    vertices = list(record.summary().vertices)
    assert core.offer_collected(record.job_id, b"attempt", cpb.CollectBatch(collect_id="c", payload=b"x"))[0]
    commands = core.job_status_changed(record, JobStatus.FAILED, cpb.JobFailure(message="boom"), T0 + 50)
    assert commands == [StopJobMaster(record, job_master), JobChanged(record)]  # no HA: nothing to clean up
    # No JobMaster (and so no ExecutionGraph) and no collected data any more ...
    assert record.job_master is None and record.collect is None
    # ... but what a client asks for afterwards: status, times, failure, task counts, vertices, checkpoints.
    summary = core.record(record.job_id).summary()
    assert summary.status == cpb.FAILED and summary.failure.message == "boom"
    assert (summary.start_time_ms, summary.end_time_ms) == (T0, T0 + 50) and dict(summary.tasks_per_state) == tasks
    assert list(summary.vertices) == vertices and summary.checkpoints.num_completed == 2
    assert record.status_timestamps["FAILED"] == T0 + 50


def test_ended_jobs_are_kept_for_the_expiration_time_then_forgotten() -> None:
    core = DispatcherCore(job_retention_ms=50)
    job_master = _run(core, submission_id="s")
    record = core.record(job_master.core.job_id)
    core.job_status_changed(record, JobStatus.FINISHED, None, T0 + 100)
    core.expire_finished(T0 + 150)
    assert core.record(record.job_id).summary().status == cpb.FINISHED
    core.expire_finished(T0 + 151)
    _refused(ErrorKind.NOT_FOUND, core.record, record.job_id)
    again = core.submit(cpb.SubmitJobRequest(submission_id="s", job_graph=_graph()), T0 + 200)
    assert isinstance(again, LaunchJob)  # its submission id was forgotten with it


def test_the_job_store_keeps_at_most_max_capacity_ended_jobs_dropping_the_oldest() -> None:
    core = DispatcherCore(job_retention_ms=60_000, max_finished_jobs=2)
    running = _run(core, submission_id="r").core.job_id
    finished = []
    for i in range(4):
        job_master = _run(core, submission_id=f"s{i}")
        core.job_status_changed(core.record(job_master.core.job_id), JobStatus.FINISHED, None, T0 + 10 + i)
        finished.append(job_master.core.job_id)
    assert set(core.jobs) == {running, finished[2], finished[3]}  # the running job is never dropped
    _refused(ErrorKind.NOT_FOUND, core.record, finished[0])
    again = core.submit(cpb.SubmitJobRequest(submission_id="s0", job_graph=_graph()), T0 + 20)
    assert isinstance(again, LaunchJob) and again.record.job_id != finished[0]


def test_a_failed_execution_graph_build_fails_the_job_with_the_reason() -> None:
    core = DispatcherCore(job_retention_ms=60_000)
    record = _submit(core).record
    commands = core.initialization_failed(record, "Could not build the ExecutionGraph: ValueError: x", T0 + 9)
    assert commands == [JobChanged(record)]
    assert record.status is JobStatus.FAILED and record.summary().failure.message.endswith("ValueError: x")


# -- savepoints ----------------------------------------------------------------------------------


def test_only_a_running_job_that_takes_checkpoints_takes_a_savepoint() -> None:
    core = DispatcherCore(job_retention_ms=60_000)
    _refused(ErrorKind.NOT_FOUND, core.savepoint, b"\x01" * 16, "/tmp/sp", stop=False)
    initializing = _submit(core, _graph_with(checkpoint_ms=1000)).record
    assert "INITIALIZING: only a RUNNING job" in _refused(ErrorKind.FAILED_PRECONDITION, core.savepoint, initializing.job_id,
                                                          "/tmp/sp", stop=False)
    plain = _run(core).core.job_id
    for directory in ("", "/tmp/savepoints"):  # the cause, whatever the directory
        message = _refused(ErrorKind.FAILED_PRECONDITION, core.savepoint, plain, directory, stop=False)
        assert "takes no checkpoints: a savepoint needs checkpointing" in message


def test_the_savepoint_directory_is_the_requests_else_the_jobs_else_the_clusters() -> None:
    from millstream.runtime import config as cfg

    core = DispatcherCore(job_retention_ms=60_000)
    checkpointed = _run(core, _graph_with(checkpoint_ms=1000))
    job_id = checkpointed.core.job_id
    message = _refused(ErrorKind.INVALID_ARGUMENT, core.savepoint, job_id, "", stop=True)
    assert "No savepoint directory" in message and cfg.CHECKPOINTING_SAVEPOINT_DIR.key in message
    assert "is not absolute" in _refused(ErrorKind.INVALID_ARGUMENT, core.savepoint, job_id, "relative/dir", stop=True)
    take = core.savepoint(job_id, "/tmp/requested", stop=True, drain=True)
    assert (str(take.directory), take.stop, take.drain, take.job_master) == ("/tmp/requested", True, True, checkpointed)

    clustered = DispatcherCore(job_retention_ms=60_000, checkpoint_options={cfg.CHECKPOINTING_SAVEPOINT_DIR.key: "/tmp/cluster"})
    own = _run(clustered, _graph_with(checkpoint_ms=1000, savepoint_dir="/tmp/own")).core.job_id
    assert str(clustered.savepoint(own, "", stop=False).directory) == "/tmp/own"
    other = _run(clustered, _graph_with(checkpoint_ms=1000)).core.job_id
    assert str(clustered.savepoint(other, "", stop=False).directory) == "/tmp/cluster"


# -- recovery and HA -----------------------------------------------------------------------------


def test_a_recovered_job_keeps_the_start_time_it_was_first_accepted_at() -> None:
    core = DispatcherCore(job_retention_ms=60_000)
    record = _submit(core, now=T0, accepted_at_ms=1_600_000_000_000).record
    assert record.start_time_ms == 1_600_000_000_000 and record.summary().start_time_ms == 1_600_000_000_000


def test_an_unrecoverable_job_is_listed_suspended_with_its_reason_and_never_run() -> None:
    core = DispatcherCore(job_retention_ms=60_000)
    core.highly_available = True
    job_id = b"\x07" * 16
    core.unrecoverable(job_id, f"job {job_id.hex()} cannot be recovered: HA storage file /ha/g-7 is corrupt", T0)
    summary = core.record(job_id).summary()
    assert JobStatus.from_proto(summary.status) is JobStatus.SUSPENDED
    assert "/ha/g-7 is corrupt" in summary.failure.message and job_id.hex() in summary.failure.message
    _refused(ErrorKind.FAILED_PRECONDITION, core.job_master, job_id)
    assert core.cancel(job_id, T0 + 1)[1] == []  # nothing to cancel, and never globally terminal: no cleanup


def test_under_ha_a_globally_terminal_job_is_cleaned_up_and_a_suspended_one_is_not() -> None:
    core = DispatcherCore(job_retention_ms=60_000)
    core.highly_available = True
    services = object()
    ended = _run(core, checkpoints=FakeCheckpoints(services))
    record = core.record(ended.core.job_id)
    commands = core.job_status_changed(record, JobStatus.FAILED, cpb.JobFailure(message="boom"), T0 + 30)
    assert commands[0] == CleanUpJob(record, "FAILED", "boom", T0 + 30, services)

    suspended = _run(core, checkpoints=FakeCheckpoints(services))
    record = core.record(suspended.core.job_id)
    assert not any(isinstance(c, CleanUpJob) for c in core.job_status_changed(record, JobStatus.SUSPENDED, None, T0 + 40))


def test_losing_leadership_suspends_the_jobs_that_have_not_ended_and_forgets_every_job() -> None:
    core = DispatcherCore(job_retention_ms=60_000)
    core.highly_available = True
    services = object()
    running = _run(core, submission_id="a", checkpoints=FakeCheckpoints(services))
    ended = _run(core, submission_id="b")
    core.job_status_changed(core.record(ended.core.job_id), JobStatus.FINISHED, None, T0 + 5)
    record = core.record(running.core.job_id)
    released, commands = core.suspend_all(T0 + 10)
    assert released == [services] and record.status is JobStatus.SUSPENDED and record.end_time_ms == T0 + 10
    assert StopJobMaster(record, running) in commands and not any(isinstance(c, CleanUpJob) for c in commands)
    assert core.jobs == {}
    # A new leadership recovers it from the stored request: the same submission id is new again.
    assert isinstance(core.submit(cpb.SubmitJobRequest(submission_id="a", job_graph=_graph()), T0 + 20), LaunchJob)


# -- collected results ---------------------------------------------------------------------------


def _batch(sequence: int, size: int) -> cpb.CollectBatch:
    return cpb.CollectBatch(collect_id="c", sequence=sequence, payload=bytes([sequence % 256]) * size)


def _fetch(core: DispatcherCore, job_id: bytes, offset: int, max_bytes: int = 1000, give_up: bool = True):  # noqa: ANN202
    return core.fetch_collected(cpb.FetchCollectRequest(job_id=job_id, offset=offset, max_bytes=max_bytes), give_up)[0]


def test_a_full_buffer_refuses_a_batch_until_the_client_acknowledged_what_it_has() -> None:
    core = DispatcherCore(job_retention_ms=60_000, collect_buffer_bytes=100)
    record = _submit(core).record
    assert core.offer_collected(record.job_id, b"a", _batch(0, 60)) == (True, [JobChanged(record)])
    assert core.offer_collected(record.job_id, b"a", _batch(1, 40))[0]
    assert core.offer_collected(record.job_id, b"a", _batch(2, 10)) == (False, [])  # full: offered again later
    first = _fetch(core, record.job_id, 0)
    assert [b.sequence for b in first.batches] == [0, 1] and first.next_offset == 2
    assert not core.offer_collected(record.job_id, b"a", _batch(2, 10))[0]  # delivered, not acknowledged yet
    response, commands = core.fetch_collected(cpb.FetchCollectRequest(job_id=record.job_id, offset=2, max_bytes=1000), True)
    assert commands == [JobChanged(record)]  # acknowledged data dropped: waiting producers may go on
    assert core.offer_collected(record.job_id, b"a", _batch(2, 10))[0]
    assert record.collect.buffered_bytes == 10


def test_a_pull_with_nothing_buffered_waits_unless_the_callers_wait_is_over() -> None:
    core = DispatcherCore(job_retention_ms=60_000)
    job_id = _submit(core).record.job_id
    assert core.fetch_collected(cpb.FetchCollectRequest(job_id=job_id, offset=0, max_bytes=100), give_up=False) == (None, [])
    empty = _fetch(core, job_id, 0)
    assert not empty.batches and not empty.end_of_data and empty.next_offset == 0
    assert "max_bytes must be positive" in _refused(ErrorKind.INVALID_ARGUMENT, core.fetch_collected,
                                                    cpb.FetchCollectRequest(job_id=job_id, max_bytes=0), True)
    _refused(ErrorKind.NOT_FOUND, core.fetch_collected, cpb.FetchCollectRequest(job_id=b"\x09" * 16, max_bytes=1), True)


def test_the_client_gets_the_end_only_after_acknowledging_every_batch_of_a_finished_job() -> None:
    core = DispatcherCore(job_retention_ms=60_000)
    job_master = _run(core)
    job_id = job_master.core.job_id
    for seq in range(3):
        assert core.offer_collected(job_id, b"a", _batch(seq, 10))[0]
    core.job_status_changed(core.record(job_id), JobStatus.FINISHED, None, T0 + 9)
    offset, seen, end = 0, [], None
    for _ in range(10):
        response = _fetch(core, job_id, offset, max_bytes=15)
        seen += [b.sequence for b in response.batches]
        offset = response.next_offset
        if response.end_of_data:
            end = response
            break
        assert len(response.batches) == 1  # 15 bytes: one 10-byte batch per answer
    assert end is not None and not end.batches and seen == [0, 1, 2]
    assert end.summary.status == cpb.FINISHED and core.record(job_id).collect is None
    assert _fetch(core, job_id, offset, max_bytes=15).end_of_data  # the answer with the end was lost: asking again is harmless


def test_a_job_that_failed_or_is_unknown_takes_every_batch_so_its_producers_go_on() -> None:
    core = DispatcherCore(job_retention_ms=60_000, collect_buffer_bytes=100)
    job_master = _run(core)
    job_id = job_master.core.job_id
    assert core.offer_collected(job_id, b"a", _batch(0, 100))[0]
    assert not core.offer_collected(job_id, b"a", _batch(1, 100))[0]
    core.job_status_changed(core.record(job_id), JobStatus.CANCELED, None, T0 + 5)
    assert core.offer_collected(job_id, b"a", _batch(1, 100)) == (True, [])  # nobody will read it
    assert core.offer_collected(b"\x09" * 16, b"a", _batch(0, 1)) == (True, [])
    end = _fetch(core, job_id, 1)
    assert end.end_of_data and end.summary.status == cpb.CANCELED


def test_fetching_an_acknowledged_offset_is_out_of_range_naming_it() -> None:
    core = DispatcherCore(job_retention_ms=60_000)
    job_id = _submit(core).record.job_id
    for seq in range(2):
        core.offer_collected(job_id, b"a", _batch(seq, 1))
    _fetch(core, job_id, 2, max_bytes=10)
    message = _refused(ErrorKind.OUT_OF_RANGE, core.fetch_collected,
                       cpb.FetchCollectRequest(job_id=job_id, offset=1, max_bytes=10), True)
    assert "offset 1 was already acknowledged" in message


def test_a_restart_while_results_are_collected_discards_them_and_the_client_is_told() -> None:
    core = DispatcherCore(job_retention_ms=60_000)
    job_master = _run(core)
    job_id = job_master.core.job_id
    record = core.record(job_id)
    assert core.offer_collected(job_id, b"attempt-0", _batch(0, 10))[0]
    assert [b.sequence for b in _fetch(core, job_id, 0).batches] == [0]
    assert core.offer_collected(job_id, b"attempt-0", _batch(1, 10))[0]  # not fetched before the failure
    job_master.core.failure = cpb.JobFailure(message="RuntimeError: boom")
    assert JobChanged(record) in core.job_status_changed(record, JobStatus.RESTARTING, None, T0 + 5)  # wakes the pull
    message = _refused(ErrorKind.FAILED_PRECONDITION, core.fetch_collected,
                       cpb.FetchCollectRequest(job_id=job_id, offset=2, max_bytes=100), False)
    assert "restarted" in message and "RuntimeError: boom" in message
    job_master.core.failure = None  # running again: the cause is still named
    core.job_status_changed(record, JobStatus.RUNNING, None, T0 + 6)
    assert "RuntimeError: boom" in _refused(ErrorKind.FAILED_PRECONDITION, core.fetch_collected,
                                            cpb.FetchCollectRequest(job_id=job_id, offset=1, max_bytes=100), True)
    assert core.offer_collected(job_id, b"attempt-1", _batch(0, 10))[0]  # the new attempt: not stored
    assert record.collect.buffered_bytes == 0


def test_a_checkpointed_job_that_restarts_while_collected_says_results_do_not_outlive_it() -> None:
    core = DispatcherCore(job_retention_ms=60_000)
    job_master = _run(core, checkpoints=FakeCheckpoints(None))
    job_id = job_master.core.job_id
    record = core.record(job_id)
    assert core.offer_collected(job_id, b"attempt-0", _batch(0, 10))[0]
    job_master.core.failure = cpb.JobFailure(message="ChannelError: the producer closed the connection")
    core.job_status_changed(record, JobStatus.RESTARTING, None, T0 + 5)
    message = _refused(ErrorKind.FAILED_PRECONDITION, core.fetch_collected,
                       cpb.FetchCollectRequest(job_id=job_id, offset=0, max_bytes=100), False)
    assert "even with checkpoints" in message and "FileSink" in message and "ChannelError" in message
    assert "without checkpoints" not in message


def test_a_restart_before_anything_was_collected_leaves_collecting_alone() -> None:
    core = DispatcherCore(job_retention_ms=60_000)
    job_master = _run(core)
    job_id = job_master.core.job_id
    core.job_status_changed(core.record(job_id), JobStatus.RESTARTING, None, T0 + 5)
    core.job_status_changed(core.record(job_id), JobStatus.RUNNING, None, T0 + 6)
    assert core.offer_collected(job_id, b"attempt-1", _batch(0, 10))[0]
    assert [b.sequence for b in _fetch(core, job_id, 0, max_bytes=100).batches] == [0]


# -- following a job (WaitJobResult) and its printed lines ----------------------------------------


def test_a_watch_sends_the_summary_at_once_then_each_status_change_and_ends_with_the_terminal_one() -> None:
    core = DispatcherCore(job_retention_ms=60_000)
    job_master = _run(core)
    record = core.record(job_master.core.job_id)
    watch = core.watch(record.job_id, printed_lines_interval_s=0.2, progress_interval_s=60)
    update, wait_s = watch.poll(100.0)
    assert update.summary.status == cpb.RUNNING and not update.terminal and wait_s == pytest.approx(60)
    assert watch.poll(100.5) == (None, pytest.approx(59.5))  # nothing changed: nothing to send
    core.job_status_changed(record, JobStatus.FINISHED, None, T0 + 9)
    update, wait_s = watch.poll(101.0)
    assert update.summary.status == cpb.FINISHED and update.terminal and wait_s is None
    watch.close()
    _refused(ErrorKind.NOT_FOUND, core.watch, b"\x09" * 16, 0.2, 60)


def test_printed_lines_reach_every_watcher_batched_at_most_every_interval() -> None:
    core = DispatcherCore(job_retention_ms=60_000)
    record = core.record(_run(core).core.job_id)
    watches = [core.watch(record.job_id, printed_lines_interval_s=0.2, progress_interval_s=60) for _ in range(2)]
    streams: list[list[cpb.JobStatusUpdate]] = [[], []]
    now = 0.0
    for i in range(100):  # one report every 10 ms for a second
        assert core.add_printed_lines(record.job_id, [f"line {i}"], 0) == [JobChanged(record)]
        for watch, stream in zip(watches, streams):
            update, wait_s = watch.poll(now)
            assert wait_s is not None
            if update is not None:
                stream.append(update)
            else:  # a line waits: polled again once the interval since the last lines is over
                assert wait_s <= 0.2 + 1e-9
        now += 0.01
    core.job_status_changed(record, JobStatus.FINISHED, None, T0 + 9)
    for watch, stream in zip(watches, streams):
        update, wait_s = watch.poll(now)
        stream.append(update)
        assert wait_s is None and update.terminal
        lines = [line for u in stream for line in u.printed_lines]
        assert lines == [f"line {i}" for i in range(100)]  # each watcher gets all, in order
        assert 2 <= len([u for u in stream if u.printed_lines]) <= 1.0 / 0.2 + 2  # batched, not one update per line
        watch.close()
    assert record.printed is None  # an ended job keeps no lines once nobody reads them


def test_a_slow_watcher_learns_how_many_lines_it_missed() -> None:
    core = DispatcherCore(job_retention_ms=60_000, printed_lines=(10, 10_000))
    record = core.record(_run(core).core.job_id)
    watch = core.watch(record.job_id, printed_lines_interval_s=0.05, progress_interval_s=60)
    first, _ = watch.poll(0.0)
    assert first.summary.status == cpb.RUNNING and not first.printed_lines
    core.add_printed_lines(record.job_id, [str(i) for i in range(25)], dropped=3)
    update, _ = watch.poll(0.1)
    assert list(update.printed_lines) == [str(i) for i in range(15, 25)] and update.printed_lines_dropped == 15 + 3
    assert "negative" in _refused(ErrorKind.INVALID_ARGUMENT, core.add_printed_lines, record.job_id, [], -1)
    assert core.add_printed_lines(b"\x09" * 16, ["x"], 0) == []  # unknown job: dropped


# -- the asyncio shell (no sockets, no sleeps) ---------------------------------------------------


def test_every_error_kind_has_a_grpc_status() -> None:
    assert set(GRPC_STATUS) == set(ErrorKind)
    assert all(GRPC_STATUS[kind] is getattr(grpc.StatusCode, kind.name) for kind in ErrorKind)


def _shell(test, **options) -> None:  # noqa: ANN001
    async def body() -> None:
        blobs = BlobStore()
        try:
            await test(Dispatcher(blobs, FakeJobMaster, lambda: 4, job_retention_ms=60_000, **options), blobs)
        finally:
            blobs.close()

    asyncio.run(body())


async def _started(d: Dispatcher, job_id: bytes) -> FakeJobMaster:
    """Waits for the shell's start of the job (its ExecutionGraph built in a thread)."""
    await asyncio.gather(*d._starting)
    job_master = d.jobs[job_id].job_master
    assert job_master is not None, "the JobMaster did not start"
    return job_master  # type: ignore[no-any-return]


def test_the_shell_stores_artifacts_and_starts_the_job_master_and_refuses_bad_artifact_names() -> None:
    async def test(d: Dispatcher, blobs: BlobStore) -> None:
        request = cpb.SubmitJobRequest(submission_id="s", job_graph=_graph(),
                                       artifacts=[cpb.Artifact(name="udfs.py", content=b"X = 1\n")])
        job_id = d.submit(request).job_id
        job_master = await _started(d, job_id)
        assert job_master.started and d.jobs[job_id].status is JobStatus.RUNNING
        [artifact] = job_master.core.artifacts
        assert artifact.name == "udfs.py"
        with blobs.open(artifact.blob_key) as stored:
            assert stored.read() == b"X = 1\n"
        for name in ("../evil.py", "x.sh"):
            with pytest.raises(DispatcherError) as info:
                d.submit(cpb.SubmitJobRequest(submission_id=name, job_graph=_graph(),
                                              artifacts=[cpb.Artifact(name=name, content=b"")]))
            assert info.value.kind is ErrorKind.INVALID_ARGUMENT and "not allowed" in str(info.value)
        assert list(d.jobs) == [job_id]  # a refused job is not kept, nor its submission id
        assert not d.submit(cpb.SubmitJobRequest(submission_id="x.sh", job_graph=_graph())).duplicate

    _shell(test)


def test_a_waiting_producer_is_woken_by_the_clients_acknowledgement() -> None:
    async def test(d: Dispatcher, blobs: BlobStore) -> None:
        job_id = d.submit(cpb.SubmitJobRequest(job_graph=_graph())).job_id
        assert await d.add_collected(job_id, b"a", _batch(0, 100), 0)
        assert not await d.add_collected(job_id, b"a", _batch(1, 10), 0)  # full, and no time to wait
        waiting = asyncio.ensure_future(d.add_collected(job_id, b"a", _batch(1, 10), 30))
        pulling = asyncio.ensure_future(d.fetch_collected(cpb.FetchCollectRequest(job_id=job_id, offset=1, max_bytes=100), 30))
        # The pull acknowledges batch 0 (room for batch 1), the producer's batch wakes the pull.
        assert await asyncio.wait_for(waiting, 10)
        assert [b.sequence for b in (await asyncio.wait_for(pulling, 10)).batches] == [1]

    _shell(test, collect_buffer_bytes=100)


def test_the_shell_streams_the_job_until_it_ends() -> None:
    async def test(d: Dispatcher, blobs: BlobStore) -> None:
        job_id = d.submit(cpb.SubmitJobRequest(job_graph=_graph())).job_id
        job_master = await _started(d, job_id)
        stream = d.request_job_result(job_id)
        assert (await stream.__anext__()).summary.status == cpb.RUNNING
        following = asyncio.ensure_future(stream.__anext__())
        job_master.on_status(JobStatus.FINISHED, None)
        last = await asyncio.wait_for(following, 10)
        assert last.summary.status == cpb.FINISHED and last.terminal
        with pytest.raises(StopAsyncIteration):
            await stream.__anext__()
        assert d.cancel_job(job_id).status == cpb.FINISHED

    _shell(test)


def test_the_rest_api_reads_the_dispatcher_through_its_gateway_and_maps_its_refusals() -> None:
    """Flink's REST API: an unknown job 404, a job whose state refuses the request 409, else 400."""
    from millstream.jobmanager.rest.server import JobManagerSource
    from millstream.jobmanager.rest.views import BadRequest, Conflict, NotFound
    from millstream.runtime import config as cfg

    async def test(d: Dispatcher, blobs: BlobStore) -> None:
        source = JobManagerSource(type("JobManager", (), {"dispatcher": d, "config": cfg.Configuration()})())
        job_id = d.submit(cpb.SubmitJobRequest(job_graph=_graph())).job_id
        await _started(d, job_id)
        assert [v.summary.job_id for v in source.job_views()] == [job_id] and source.job_view(b"\x09" * 16) is None
        with pytest.raises(NotFound):
            source.start_savepoint(b"\x09" * 16, "/tmp/sp", stop=False)
        with pytest.raises(Conflict, match="takes no checkpoints"):
            source.start_savepoint(job_id, "/tmp/sp", stop=False)
        source.cancel(job_id)
        assert d.jobs[job_id].job_master.cancelled
        checkpointed = d.submit(cpb.SubmitJobRequest(job_graph=_graph_with(checkpoint_ms=1000))).job_id
        await _started(d, checkpointed)
        with pytest.raises(BadRequest, match="No savepoint directory"):
            source.start_savepoint(checkpointed, "", stop=False)

    _shell(test)
