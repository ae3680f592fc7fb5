"""A TaskExecutor serves one JobManager leader at a time (HA.md, Flink's fenced TaskExecutor):
calls from any other leader session are refused, and leaving a leader cancels its tasks, reports
nothing more to it, frees every slot and closes the channels to it."""
from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest

from millstream.proto import cluster_pb2 as cpb
from millstream.proto import jobgraph_pb2 as pb
from millstream.runtime.ha import DEFAULT_LEADER_ID, LeaderInformation
from millstream.taskmanager.spark.host import TaskExit
from millstream.taskmanager.task_executor import FENCED_METHODS, TaskExecutor, fencing_refusal

SERVICE = "/" + cpb.DESCRIPTOR.services_by_name["TaskExecutor"].full_name + "/"
JOB = b"j" * 16


# -- the fence (pure) -------------------------------------------------------------------------


def test_every_jobmanager_call_is_fenced_and_partition_lookups_are_not() -> None:
    names = {m.rsplit("/", 1)[1] for m in FENCED_METHODS}
    assert names == {"RequestSlot", "SubmitTask", "CancelTask", "FreeSlot", "Heartbeat", "TriggerCheckpoint",
                     "NotifyCheckpoint", "SendOperatorEvent"}
    leader = LeaderInformation("jm-a:6123", uuid.uuid4())
    assert fencing_refusal(SERVICE + "LookupPartition", None, leader, "tm") is None
    assert fencing_refusal(SERVICE + "LookupPartition", "stale", None, "tm") is None


def test_only_the_registered_leaders_session_passes() -> None:
    session = uuid.uuid4()
    leader = LeaderInformation("jm-a:6123", session)
    assert fencing_refusal(SERVICE + "SubmitTask", str(session), leader, "tm-1") is None
    stale = uuid.uuid4()
    code, message = fencing_refusal(SERVICE + "SubmitTask", str(stale), leader, "tm-1")  # type: ignore[misc]
    assert code is grpc.StatusCode.FAILED_PRECONDITION
    assert message.startswith("fenced: ") and str(stale) in message and str(session) in message and "SubmitTask" in message
    # No token under a real leader session: refused (only a cluster without HA may omit it).
    assert fencing_refusal(SERVICE + "Heartbeat", None, leader, "tm-1") is not None
    # The default leader id of a cluster without HA: its token, or none, passes; another does not.
    plain = LeaderInformation("jm:6123", DEFAULT_LEADER_ID)
    assert fencing_refusal(SERVICE + "RequestSlot", str(DEFAULT_LEADER_ID), plain, "tm-1") is None
    assert fencing_refusal(SERVICE + "RequestSlot", None, plain, "tm-1") is None
    assert fencing_refusal(SERVICE + "RequestSlot", str(session), plain, "tm-1") is not None


def test_between_leaders_every_jobmanager_call_is_refused() -> None:
    refusal = fencing_refusal(SERVICE + "CancelTask", str(DEFAULT_LEADER_ID), None, "tm-1")
    assert refusal is not None and refusal[0] is grpc.StatusCode.FAILED_PRECONDITION
    assert "follows no JobManager leader" in refusal[1]


# -- leaving a leader -------------------------------------------------------------------------


class FakeHandle:
    def __init__(self, task_id: str, on_event: Any, stops: bool) -> None:
        self.task_id, self.on_event, self.stops = task_id, on_event, stops
        self.cancels = 0

    def cancel(self) -> None:
        self.cancels += 1
        if self.stops:
            threading.Timer(0.05, self.on_event, (self.task_id, TaskExit("CANCELED"))).start()

    def send(self, msg: Any) -> None:
        pass


class FakeSpark:
    master = "local[4]"
    placement = "task"
    max_concurrent_tasks = 8

    def __init__(self, stops: bool = True) -> None:
        self.handles: list[FakeHandle] = []
        self.stops = stops

    def running_task_ids(self) -> list[str]:
        return [h.task_id for h in self.handles]

    def submit(self, task_id: str, payload: bytes, on_event: Any, secrets: Any = None, slot: Any = None) -> FakeHandle:
        handle = FakeHandle(task_id, on_event, self.stops)
        self.handles.append(handle)
        return handle


class RecordingChannel:
    """Stands for a gRPC channel to the old leader: records every call made on it."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.closed = False

    def unary_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        async def call(request: Any, timeout: float | None = None) -> Any:
            self.calls.append(method.rsplit("/", 1)[1])
            return cpb.Empty()
        return call

    unary_stream = unary_unary

    async def close(self) -> None:
        self.closed = True


def _tdd(attempt: bytes, allocation: bytes) -> cpb.TaskDeploymentDescriptor:
    return cpb.TaskDeploymentDescriptor(job_id=JOB, execution_attempt_id=attempt, allocation_id=allocation,
                                        vertex=pb.JobVertex(name="Map", parallelism=2), subtask_index=0)


async def _executor_with_tasks(tmp_path: Path, spark: FakeSpark) -> tuple[TaskExecutor, RecordingChannel]:
    te = TaskExecutor("tm-1", 2, spark, 5.0, 4 << 20, str(tmp_path), "")  # type: ignore[arg-type]
    te.data_address = "127.0.0.1:1"
    old = LeaderInformation("127.0.0.1:1", uuid.uuid4())
    te.connect_to(old)
    te.registration_id = "reg-1"
    te.registered.set()
    channel = RecordingChannel()
    te._channels[old.address] = channel  # type: ignore[assignment]
    for index, (attempt, allocation) in enumerate(((b"attempt-1", b"alloc-1"), (b"attempt-2", b"alloc-2"))):
        te.slots.allocate_slot(index, JOB, allocation, old.address)
        await te.submit_task(_tdd(attempt, allocation))
    for _ in range(100):
        if len(spark.handles) == 2:
            break
        await asyncio.sleep(0.01)
    assert len(spark.handles) == 2 and len(te.tasks) == 2
    return te, channel


def test_leaving_the_leader_cancels_its_tasks_frees_every_slot_and_reports_nothing_to_it(tmp_path: Path) -> None:
    async def body() -> None:
        spark = FakeSpark()
        te, channel = await _executor_with_tasks(tmp_path, spark)
        stuck = await te.disconnect_leader("JobManager leader changed", timeout_s=10.0)
        assert stuck == []
        assert [h.cancels for h in spark.handles] == [1, 1]
        assert te.tasks == {} and te.slots.free_slots_count() == 2 and te.slots.jobs() == []
        assert te.leader is None and te.leader_token is None
        assert te.registration_id == "" and not te.registered.is_set()
        assert channel.calls == []  # the CANCELED reports do not go to the deposed leader
        assert channel.closed and te._channels == {}
        # From now on the old leader's calls are fenced off.
        assert te.fencing_refusal(SERVICE + "SubmitTask", "whatever") is not None
        await te.close()

    asyncio.run(body())


def test_tasks_that_do_not_stop_are_named_after_the_cancellation_timeout(tmp_path: Path) -> None:
    async def body() -> None:
        te, _ = await _executor_with_tasks(tmp_path, FakeSpark(stops=False))
        loop = asyncio.get_running_loop()
        started = loop.time()
        stuck = await te.disconnect_leader("no JobManager leader", timeout_s=0.5)
        assert 0.4 <= loop.time() - started < 5
        assert sorted(stuck) == ["Map (1/2)", "Map (1/2)"]
        assert te.slots.free_slots_count() == 2

    asyncio.run(body())


@pytest.mark.parametrize("leader", [None, LeaderInformation("jm:1", DEFAULT_LEADER_ID)])
def test_the_fencing_token_is_the_leaders_session(tmp_path: Path, leader: LeaderInformation | None) -> None:
    te = TaskExecutor("tm-1", 1, FakeSpark(), 5.0, 4 << 20, str(tmp_path), "")  # type: ignore[arg-type]
    assert te.leader is None and te.leader_token is None
    if leader is not None:
        te.connect_to(leader)
        assert te.leader_token == str(DEFAULT_LEADER_ID) and te.jobmanager_address == "jm:1"
    session = uuid.uuid4()
    te.connect_to(LeaderInformation("jm-b:2", session))
    assert te.leader_token == str(session)
    assert te.fencing_refusal(SERVICE + "FreeSlot", str(session)) is None


def test_the_cancellation_timeout_is_read_from_the_configuration() -> None:
    from millstream.runtime import config as cfg
    from millstream.taskmanager.taskmanager import TaskManager

    tm = TaskManager(cfg.Configuration.from_dict({"task.cancellation.timeout": "2 s"}), "jm:6123")
    assert tm._cancel_timeout_s == 2.0
    assert TaskManager(cfg.Configuration(), "jm:6123")._cancel_timeout_s == 180.0  # Flink's default
    tm._work.cleanup()
