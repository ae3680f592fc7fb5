"""The cluster side of the CLI's live view, as pure logic: per-vertex task states and record totals
(Flink's numRecordsIn / numRecordsOut), a job waiting for slots, and printed lines on their way to
attached clients (bounded, drops counted, rate-limited)."""
from __future__ import annotations

import asyncio
import itertools

import grpc
import pytest

from millstream.datastream import StreamExecutionEnvironment
from millstream.jobmanager.dispatcher.dispatcher_core import DispatcherCore
from millstream.runtime.execution_state import ExecutionState, JobStatus
from millstream.jobmanager.jobmaster.job_master_core import BuildDeployments, JobMasterCore
from millstream.runtime.bounded_lines import MAX_LINE_CHARS, LineCursor, PrintedLines
from millstream.proto import cluster_pb2 as cpb
from millstream.taskmanager.print_forwarder import LineOutbox, PrintForwarder

from .test_runtime_chain import make_chain, vertex

S = ExecutionState


def _graph(parallelism: int = 2, sink_parallelism: int | None = None):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    ds = env.from_sequence(1, 100).map(lambda x: (x % 3, x)).key_by(lambda t: t[0]).map(lambda t: t[1])
    sink = ds.print()
    if sink_parallelism:
        ds.set_parallelism(sink_parallelism)
        sink.set_parallelism(sink_parallelism)
    return env.get_job_graph("job").proto


def _core(parallelism: int = 2, sink_parallelism: int | None = None) -> JobMasterCore:
    counter = itertools.count()
    return JobMasterCore(_graph(parallelism, sink_parallelism), new_id=lambda: next(counter).to_bytes(16, "big"))


def _offers(n: int, start: int = 0) -> list[cpb.SlotOffer]:
    return [cpb.SlotOffer(allocation_id=bytes([100 + i]) * 16, slot_index=i) for i in range(start, start + n)]


def _deployed(core: JobMasterCore) -> None:
    core.start()
    _, commands = core.offer_slots("tm", "tm:1", "tm:2", _offers(core.required_slots))
    for command in commands:
        if isinstance(command, BuildDeployments):
            core.deployments_built(command.build())


def _by_name(core: JobMasterCore) -> dict[str, cpb.VertexSummary]:
    return {v.name.split(" ")[0]: v for v in core.vertex_summaries()}


class NoScan(dict):
    """The core's executions, refusing to be iterated: a report must cost O(changes), not O(tasks)."""

    def _refuse(self, *args):
        raise AssertionError("the JobMaster scanned every task for a report")

    __iter__ = values = items = keys = _refuse  # type: ignore[assignment]


# -- per-vertex task states and record totals ----------------------------------------------------------


def test_each_vertex_reports_its_parallelism_and_task_states_in_topological_order() -> None:
    core = _core(parallelism=2, sink_parallelism=3)
    assert core.parallelism == 3
    summaries = core.vertex_summaries()
    assert [v.parallelism for v in summaries] == [2, 3]
    assert summaries[0].name.startswith("Source") and "Map" in summaries[1].name
    assert [dict(v.tasks_per_state) for v in summaries] == [{"CREATED": 2}, {"CREATED": 3}]
    _deployed(core)
    source, sink = core.vertex_summaries()
    assert dict(source.tasks_per_state) == {"DEPLOYING": 2} and dict(sink.tasks_per_state) == {"DEPLOYING": 3}
    first_sink = [e for e in core.current.values() if e.vertex.job_vertex.id == sink.vertex_id][0]
    core.current = NoScan(core.current)  # from here on, a scan of the tasks fails the test
    core.update_task_state(first_sink.attempt_id, S.RUNNING)
    core.update_task_state(first_sink.attempt_id, S.FINISHED)
    source, sink = core.vertex_summaries()
    assert dict(source.tasks_per_state) == {"DEPLOYING": 2}
    assert dict(sink.tasks_per_state) == {"DEPLOYING": 2, "FINISHED": 1}
    assert core.tasks_per_state() == {"DEPLOYING": 4, "FINISHED": 1}


def test_record_totals_are_summed_per_vertex_and_never_go_back() -> None:
    core = _core(parallelism=2)
    _deployed(core)
    executions = {(e.vertex.job_vertex.name.split(" ")[0], e.vertex.subtask_index): e for e in core.current_executions()}
    source0, source1 = executions[("Source:", 0)], executions[("Source:", 1)]
    (map0,) = [e for k, e in executions.items() if k[0] != "Source:" and k[1] == 0]
    core.update_records(source0.attempt_id, 0, 40)
    core.update_records(source1.attempt_id, 0, 60)
    core.update_records(map0.attempt_id, 70, 0)
    core.update_records(source0.attempt_id, 0, 30)  # an older heartbeat overtaken by a newer report
    core.update_records(b"unknown".ljust(16, b"\0"), 5, 5)
    source, sink = core.vertex_summaries()
    assert (source.records_in, source.records_out) == (0, 100)
    assert (sink.records_in, sink.records_out) == (70, 0)


def test_a_finished_job_keeps_its_final_vertices_in_the_dispatcher() -> None:
    class FakeJobMaster:
        def __init__(self, core) -> None:  # noqa: ANN001
            self.core, self.checkpoints = core, None

    deadline = {"at": None}
    d = DispatcherCore(60_000, slot_timeout_at_ms=lambda job_id: deadline["at"])
    launch = d.submit(cpb.SubmitJobRequest(job_graph=_graph(parallelism=2, sink_parallelism=3).SerializeToString()), 1)
    record = launch.record
    core = JobMasterCore(launch.graph)
    d.job_master_ready(record, FakeJobMaster(core), 2)
    core.start()
    d.job_status_changed(record, JobStatus.RUNNING, None, 3)
    deadline["at"] = 1_700_000_000_000
    summary = d.record(record.job_id).summary()
    assert summary.parallelism == 3 and len(summary.vertices) == 2
    # Waiting for slots: how many it needs, has, and when it fails.
    assert (summary.slot_wait.slots_required, summary.slot_wait.slots_allocated) == (3, 0)
    assert summary.slot_wait.timeout_at_ms == 1_700_000_000_000 and summary.HasField("slot_wait")
    core.offer_slots("tm", "tm:1", "tm:2", _offers(2))
    assert d.record(record.job_id).summary().slot_wait.slots_allocated == 2
    _, commands = core.offer_slots("tm", "tm:1", "tm:2", _offers(1, start=2))
    for command in commands:
        if isinstance(command, BuildDeployments):
            core.deployments_built(command.build())
    assert not d.record(record.job_id).summary().HasField("slot_wait")  # cleared once all slots are there
    for execution in core.current_executions():
        core.update_records(execution.attempt_id, 7, 3)
        core.update_task_state(execution.attempt_id, S.FINISHED)
    vertices = list(d.record(record.job_id).summary().vertices)
    d.job_status_changed(record, JobStatus.FINISHED, None, 4)
    assert record.job_master is None
    final = d.record(record.job_id).summary()
    assert list(final.vertices) == vertices and final.parallelism == 3
    assert [(v.records_in, v.records_out, dict(v.tasks_per_state)) for v in final.vertices] == [
        (14, 6, {"FINISHED": 2}), (21, 9, {"FINISHED": 3})
    ]


def test_slot_wait_follows_the_offers_and_ends_with_deployment_or_cancel() -> None:
    core = _core(parallelism=3)
    assert core.slot_wait() is None  # not scheduled yet
    core.start()
    assert core.slot_wait() == (3, 0)
    core.offer_slots("tm", "tm:1", "tm:2", _offers(2))
    assert core.slot_wait() == (3, 2)
    core.cancel()
    assert core.slot_wait() is None


# -- record counting in the task ---------------------------------------------------------------------


def test_a_chain_counts_records_read_from_the_network_and_written_to_its_outputs() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.from_sequence(1, 10).map(lambda x: x).key_by(lambda x: x % 2).filter(lambda x: x > 3).key_by(lambda x: x).map(lambda x: x).print()
    reported: list[tuple[int, int]] = []
    run = make_chain(vertex(env, "Filter"))
    run.chain.records_listener = lambda i, o: reported.append((i, o))
    run.chain.records_interval_ms = 1000
    run.chain.open()
    target = vertex(env, "Filter").inputs[0].target_node_id
    run.chain.process_batch([1, 2, 3, 4, 5], target)
    run.chain.between_batches()
    assert reported == []  # not due yet: at most once per interval
    run.env.clock.advance(1000)
    run.chain.process_batch([6, 7], target)
    run.chain.between_batches()
    run.chain.process_batch([8], target)
    run.chain.between_batches()
    assert (run.chain.records_in, run.chain.records_out) == (8, 5)  # 4, 5, 6, 7, 8 passed the filter
    assert reported == [(7, 4)]

    source = make_chain(vertex(env, "Source"))
    source.chain.open()
    assert source.chain.run_source()
    source.chain.end_input()
    assert (source.chain.records_in, source.chain.records_out) == (0, 10)  # a source reads no network input

    last = list(env.get_job_graph().proto.vertices)[-1]  # Map -> Print: a sink writes nothing out
    sink = make_chain(last)
    sink.chain.open()
    sink.chain.process_batch([1, 2, 3], last.inputs[0].target_node_id)
    assert (sink.chain.records_in, sink.chain.records_out) == (3, 0)


# -- printed lines: the Dispatcher's buffer -----------------------------------------------------------


def test_the_line_buffer_keeps_the_last_lines_and_counts_what_a_reader_missed() -> None:
    buffer = PrintedLines(max_lines=3, max_chars=1000)
    early, late = buffer.reader(), None
    buffer.add(["a", "b"])
    assert buffer.read(early) == (["a", "b"], 0)
    buffer.add(["c", "d", "e", "f"])  # a and b would be dropped anyway; c too: it holds 3
    late = buffer.reader()
    assert buffer.read(early) == (["d", "e", "f"], 1)  # c went before this reader saw it
    assert buffer.read(late) == (["d", "e", "f"], 0)  # attached later: what is buffered now
    buffer.add(["g"], dropped_upstream=5)  # a TaskManager dropped 5 on its side
    assert buffer.read(early) == (["g"], 5) and buffer.read(late) == (["g"], 5)
    assert buffer.read(early) == ([], 0) and not buffer.has_unread(early)
    assert buffer.evicted == 4 and len(buffer) == 3


def test_the_line_buffer_is_bounded_in_characters_and_cuts_one_huge_line() -> None:
    buffer = PrintedLines(max_lines=1000, max_chars=MAX_LINE_CHARS * 2)
    cursor = LineCursor()
    buffer.add(["x" * 10 * MAX_LINE_CHARS])
    buffer.add(["y" * 100] * 500)
    assert buffer.chars <= MAX_LINE_CHARS * 2
    lines, missed = buffer.read(cursor)
    assert missed == 1 + 500 - len(lines) and len(lines) == (MAX_LINE_CHARS * 2) // 100
    with pytest.raises(ValueError, match="room"):
        PrintedLines(max_lines=0)


# -- printed lines: the TaskManager's forwarder -------------------------------------------------------


def test_the_outbox_drops_the_oldest_lines_when_full_and_counts_them() -> None:
    outbox = LineOutbox(max_lines=3, max_chars=1000)
    outbox.add(["1", "2"])
    outbox.add(["3", "4", "5"])
    assert outbox.take() == (["3", "4", "5"], 2)
    assert outbox.take() == ([], 0) and not outbox.pending()


class _Unavailable(grpc.aio.AioRpcError):
    def __init__(self) -> None:
        super().__init__(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "down")


def test_the_forwarder_batches_lines_never_blocks_on_a_slow_job_manager_and_counts_losses() -> None:
    async def body() -> None:
        sent: list[cpb.PrintedLinesReport] = []
        release = asyncio.Event()
        mode = {"fail": False}

        async def send(address: str, report: cpb.PrintedLinesReport) -> None:
            assert address == "jm:1"
            if mode["fail"]:
                raise _Unavailable()
            await release.wait()  # a JobManager that does not answer
            sent.append(report)

        forwarder = PrintForwarder(send, interval_s=0.02, max_lines=100, max_chars=100_000)
        job = b"j" * 16
        loop = asyncio.get_running_loop()
        started = loop.time()
        for i in range(1000):  # add() never waits for the JobManager
            forwarder.add(job, "jm:1", [f"{i}"])
            if i % 100 == 0:
                await asyncio.sleep(0.03)
        assert loop.time() - started < 2
        release.set()
        await forwarder.flush(job)
        await asyncio.sleep(0.1)
        await forwarder.flush(job)
        lines = [line for r in sent for line in r.lines]
        dropped = sum(r.dropped for r in sent)
        assert len(lines) + dropped == 1000 and dropped > 0  # every line either sent or counted
        assert lines[-1] == "999" and len(sent) < 50  # batched
        mode["fail"] = True
        forwarder.add(job, "jm:1", ["lost", "too"])
        await forwarder.flush(job)
        mode["fail"] = False
        forwarder.add(job, "jm:1", ["next"])
        await forwarder.flush(job)
        assert list(sent[-1].lines) == ["next"] and sent[-1].dropped == 2  # the failed report's lines
        forwarder.close()

    asyncio.run(body())
