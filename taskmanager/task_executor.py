"""The TaskExecutor: a TaskManager's slots and tasks, driven over gRPC by the JobManager.

Slots are allocated on the ResourceManager's request and offered to the job's JobMaster; tasks
run in the SparkHost's executors and report every state change, in order, to the JobMaster.
Heartbeats from the ResourceManager and JobMasters are watched: without the ResourceManager the
TaskManager registers again; without a job's JobMaster it cancels that job's tasks and frees its
slots, as a Flink TaskExecutor does.

Fencing (HA.md): the TaskExecutor serves one JobManager leader at a time, ``leader`` (its address
and leader session id). Every call it makes to the JobManager side carries the session id
(``FencingClientInterceptor`` on its channels), and :meth:`TaskExecutor.fencing_refusal`, the guard
of its gRPC server, refuses the JobManager calls whose token is not that session id. When the
leader changes, :meth:`TaskExecutor.disconnect_leader` cancels the old leader's tasks, frees every
slot and closes the channels before the TaskManager registers with the new leader.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import grpc

from millstream.jobmanager.blob_server import check_artifact_name
from millstream.runtime.heartbeat import HeartbeatMonitor
from millstream.proto import cluster_pb2 as cpb
from millstream.proto import cluster_pb2_grpc as cpb_grpc
from millstream.runtime.entrypoint import log_files
from millstream.runtime.rpc.auth import task_credential
from millstream.runtime.metrics.system import host_memory_bytes, process_rss_bytes, process_tree_rss_bytes
from millstream.runtime.rpc.fencing import FencingClientInterceptor, Refusal
from millstream.runtime.ha.api import DEFAULT_LEADER_ID, LeaderInformation
from millstream.runtime.rpc.service import aio_channel
from millstream.runtime.rpc.security import Credentials
from millstream.taskmanager import task as task_body
from millstream.taskmanager.print_forwarder import PrintForwarder
from millstream.taskmanager.task_output import TaskOutputStore
from millstream.taskmanager.slot_table import SlotTableError, TaskSlotTable
from millstream.taskmanager.spark.host import SparkHost, TaskExit, TaskHandle, make_payload

log = logging.getLogger(__name__)

RESOURCE_MANAGER = "resourcemanager"
# Collected bytes a task may have handed to this TaskManager that the JobManager has not taken yet.
COLLECT_IN_FLIGHT_BYTES = 4 << 20


def now_ms() -> int:
    return int(time.monotonic() * 1000)


_TASK_EXECUTOR_SERVICE = "/" + cpb.DESCRIPTOR.services_by_name["TaskExecutor"].full_name + "/"
# The TaskExecutor's methods only the JobManager leader may call (LookupPartition, between
# TaskManagers, is not fenced).
FENCED_METHODS = frozenset(_TASK_EXECUTOR_SERVICE + name for name in (
    "RequestSlot", "SubmitTask", "CancelTask", "FreeSlot", "Heartbeat", "TriggerCheckpoint", "NotifyCheckpoint"))


def fencing_refusal(method: str, token: str | None, leader: LeaderInformation | None, resource_id: str) -> Refusal | None:
    """Whether a call to ``method`` carrying the fencing ``token`` is refused, given the ``leader``
    this TaskManager follows (None between leaders): None to serve it, else the refusal.

    A call without a token is the JobManager of a cluster without HA that predates fencing: it is
    served only when the leader is the default one (no HA), never under a real leader session.
    """
    if method not in FENCED_METHODS:
        return None
    name = method.rsplit("/", 1)[-1]
    if leader is None:
        return (grpc.StatusCode.FAILED_PRECONDITION,
                f"fenced: TaskManager {resource_id} follows no JobManager leader right now; {name} with leader "
                f"session {token or '(none)'} refused")
    expected = str(leader.session_id)
    if token == expected or (token is None and leader.session_id == DEFAULT_LEADER_ID):
        return None
    return (grpc.StatusCode.FAILED_PRECONDITION,
            f"fenced: TaskManager {resource_id} follows the JobManager leader {leader.address} (session {expected}); "
            f"{name} with leader session {token or '(none)'} refused")


class CollectGate:
    """Bounds the collected bytes of one task that wait in this TaskManager for the JobManager.

    The task's control-channel reader thread calls :meth:`acquire` before queueing a collected
    batch and blocks while the bound is reached: it stops reading the channel, the worker's sends
    block, and the collect sink waits. So a full collect buffer in the JobManager (which refuses
    reports until the client pulled) backpressures the producing task, not this process's memory.
    :meth:`open` (the task is cancelled or the TaskManager stops) lets everything through.
    """

    def __init__(self, limit_bytes: int = COLLECT_IN_FLIGHT_BYTES) -> None:
        self._limit = limit_bytes
        self._pending = 0
        self._cond = threading.Condition()
        self.opened = False

    def acquire(self, size: int) -> None:
        with self._cond:
            # One batch always passes when nothing is pending, however large it is.
            while not self.opened and self._pending > 0 and self._pending + size > self._limit:
                self._cond.wait()
            self._pending += size

    def release(self, size: int) -> None:
        with self._cond:
            self._pending -= size
            self._cond.notify_all()

    def open(self) -> None:
        with self._cond:
            self.opened = True
            self._cond.notify_all()


@dataclass(eq=False)
class RunningTask:
    tdd: cpb.TaskDeploymentDescriptor
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    handle: TaskHandle | None = None
    state: str = "DEPLOYING"
    cancelled: bool = False  # cancelled before its Spark task started: it must never start
    collect_gate: CollectGate = field(default_factory=CollectGate)
    collect_failure: str | None = None  # collected records could not be delivered: the task fails
    starting: bool = True  # accepted, its Spark task not submitted yet (e.g. fetching artifacts)
    failing: tuple[str, bool] | None = None  # (traceback, caused by a neighbour) once the body failed
    orphaned: bool = False  # its JobManager leader is gone: nothing more is reported to it
    records_in: int = 0  # the body's running totals (Flink's numRecordsIn / numRecordsOut)
    records_out: int = 0
    metrics: dict[str, float] = field(default_factory=dict)  # the body's latest metric snapshot
    # Each user metric's Prometheus name (below the task scope) and extra labels, by identifier.
    metric_descriptors: dict[str, tuple[str, dict[str, str]]] = field(default_factory=dict)

    @property
    def attempt_id(self) -> bytes:
        return self.tdd.execution_attempt_id

    @property
    def name(self) -> str:
        return f"{self.tdd.vertex.name} ({self.tdd.subtask_index + 1}/{self.tdd.vertex.parallelism})"


class TaskExecutor:
    def __init__(
        self,
        resource_id: str,
        num_slots: int,
        spark: SparkHost,
        rpc_timeout_s: float,
        max_message_bytes: int,
        work_dir: str,
        jobmanager_address: str,
        network: task_body.NetworkSettings = task_body.NetworkSettings(),
        forward_printed_lines: bool = True,
        credentials: Credentials | None = None,
        task_output: TaskOutputStore | None = None,
    ) -> None:
        """``forward_printed_lines``: send the tasks' printed lines to their JobManager as well as to
        this process's stdout (off in the embedded mode, where stdout is the user's console already).
        ``credentials``: of every channel this TaskExecutor opens (TLS, the cluster token)."""
        self._credentials = credentials
        self.resource_id = resource_id
        self.network = network
        self.slots = TaskSlotTable(num_slots)
        self.spark = spark
        self.address = ""
        self.data_address = ""
        self.registration_id = ""
        # The JobManager leader served (None between leaders); without HA the one JobManager.
        self.leader: LeaderInformation | None = (
            LeaderInformation(jobmanager_address, DEFAULT_LEADER_ID) if jobmanager_address else None)
        self._rpc_timeout_s = rpc_timeout_s
        self._max_message_bytes = max_message_bytes
        self._work_dir = work_dir
        self.jobmanager_address = jobmanager_address
        self._channels: dict[str, grpc.aio.Channel] = {}
        self.tasks: dict[bytes, RunningTask] = {}
        self._heartbeats = HeartbeatMonitor[str](10_000, 50_000)
        self.heartbeats_received = 0  # heartbeat requests answered (a Prometheus metric)
        self._background: set[asyncio.Task[Any]] = set()
        self._artifact_fetches: dict[bytes, asyncio.Future[list[str]]] = {}
        # Where each running task serves its result partitions, and the attempts that ended here.
        self.partition_servers: dict[bytes, str] = {}
        self._ended_attempts: collections.deque[bytes] = collections.deque(maxlen=10_000)
        # Attempts cancelled before their SubmitTask arrived (the two RPCs may overtake each other):
        # such a task is reported CANCELED at once and never starts.
        self._cancelled_early: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        self.registered = asyncio.Event()
        self.unusable_reason: str | None = None
        self.printed_lines = PrintForwarder(self._send_printed_lines) if forward_printed_lines else None
        # What each attempt's user functions printed and logged (``task_output``: its bounds).
        self.task_output = task_output if task_output is not None else TaskOutputStore.with_defaults()

    # -- plumbing ------------------------------------------------------------------------------

    @property
    def leader_token(self) -> str | None:
        """The fencing token of this TaskManager's calls: the leader's session id (None between leaders)."""
        return str(self.leader.session_id) if self.leader is not None else None

    def fencing_refusal(self, method: str, token: str | None) -> Refusal | None:
        """The guard of the TaskExecutor's server (see :func:`fencing_refusal`)."""
        return fencing_refusal(method, token, self.leader, self.resource_id)

    def connect_to(self, leader: LeaderInformation) -> None:
        """Serve ``leader`` from now on: its calls pass the fence, ours carry its session id."""
        self.leader = leader
        self.jobmanager_address = leader.address

    def _channel(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = aio_channel(
                address, self._max_message_bytes, interceptors=[FencingClientInterceptor(lambda: self.leader_token)],
                credentials=self._credentials)
        return channel

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def close(self) -> None:
        for task in list(self.tasks.values()):
            task.collect_gate.open()
            if task.handle is not None:
                await asyncio.to_thread(task.handle.cancel)
        for bg in list(self._background):
            bg.cancel()
        if self.printed_lines is not None:
            self.printed_lines.close()
        for channel in self._channels.values():
            await channel.close()

    async def disconnect_leader(self, reason: str, timeout_s: float) -> list[str]:
        """Leave the current JobManager leader (a new one was elected, or none leads): from now on
        its calls are fenced off; every task is cancelled and nothing more is reported to it (a new
        leader recovers its jobs from their checkpoints; an old task must not commit output); every
        slot is freed; the channels to it are closed. Waits at most ``timeout_s`` for the tasks to
        end; returns the names of those still running then (none normally)."""
        old = self.leader
        self.leader = None
        self.registration_id = ""
        self.registered.clear()
        if old is not None:
            log.info("TaskManager %s leaves the JobManager leader %s (session %s): %s; cancelling %d tasks",
                     self.resource_id, old.address, old.session_id, reason, len(self.tasks))
        for task in self.tasks.values():
            task.orphaned = True
        in_slots = {t.attempt_id for job_id in self.slots.jobs() for t in self.slots.tasks_of_job(job_id)}
        for job_id in self.slots.jobs():
            for allocation_id in self.slots.allocations_of_job(job_id):
                self._free_slot(allocation_id, reason)  # cancels the slot's tasks
        for attempt_id in [a for a in self.tasks if a not in in_slots]:  # a task whose slot was freed already
            self._cancel(attempt_id)
        self._cancelled_early.clear()
        self._heartbeats = HeartbeatMonitor[str](self._heartbeats.interval_ms, self._heartbeats.timeout_ms)
        deadline = time.monotonic() + timeout_s
        while self.tasks and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        still_running = [task.name for task in self.tasks.values()]
        channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            await channel.close()
        return still_running

    # -- registration with the ResourceManager --------------------------------------------------

    def registered_with(self, response: cpb.RegisterTaskManagerResponse) -> None:
        self.registration_id = response.registration_id
        self._heartbeats = HeartbeatMonitor[str](response.heartbeat_interval_ms, response.heartbeat_timeout_ms)
        self._heartbeats.monitor_target(RESOURCE_MANAGER, now_ms())
        for job_id in self.slots.jobs():
            self._heartbeats.monitor_target(job_id.hex(), now_ms())
        self.registered.set()

    def slot_report(self) -> cpb.SlotReport:
        return cpb.SlotReport(
            slots=[
                cpb.SlotStatus(slot_index=s.slot_index, allocation_id=s.allocation_id or b"", job_id=s.job_id or b"")
                for s in self.slots.slot_report()
            ]
        )

    def check_heartbeats(self) -> bool:
        """Acts on lost JobMasters; returns False when the ResourceManager is lost (re-register)."""
        rm_alive = True
        for target in self._heartbeats.timed_out(now_ms()):
            if target == RESOURCE_MANAGER:
                log.warning("TaskManager %s: ResourceManager heartbeat timed out", self.resource_id)
                self.registered.clear()
                rm_alive = False
            else:
                self._job_master_lost(bytes.fromhex(target), "JobMaster heartbeat timed out")
        return rm_alive

    def _job_master_lost(self, job_id: bytes, reason: str) -> None:
        log.warning("TaskManager %s: %s for job %s; freeing its slots", self.resource_id, reason, job_id.hex())
        self._heartbeats.unmonitor_target(job_id.hex())
        for allocation_id in self.slots.allocations_of_job(job_id):
            self._free_slot(allocation_id, reason)

    # -- RPC handlers --------------------------------------------------------------------------

    def unusable(self, reason: str) -> None:
        """From now on every slot request and task is refused with ``reason`` (e.g. Spark died)."""
        self.unusable_reason = reason

    def _check_usable(self) -> None:
        if self.unusable_reason is not None:
            raise SlotTableError(f"TaskManager {self.resource_id} cannot run tasks: {self.unusable_reason}")

    def request_slot(self, request: cpb.RequestSlotRequest) -> None:
        self._check_usable()
        if request.registration_id != self.registration_id:
            raise SlotTableError(
                f"RequestSlot from an unknown ResourceManager registration {request.registration_id!r}"
            )
        if self.slots.allocate_slot(request.slot_index, request.job_id, request.allocation_id, request.jobmaster_address):
            self._heartbeats.monitor_target(request.job_id.hex(), now_ms())
            self._spawn(self._offer_slot(request))

    async def _offer_slot(self, request: cpb.RequestSlotRequest) -> None:
        offer = cpb.OfferSlotsRequest(
            job_id=request.job_id,
            resource_id=self.resource_id,
            taskmanager_address=self.address,
            data_address=self.data_address,
            offers=[cpb.SlotOffer(allocation_id=request.allocation_id, slot_index=request.slot_index)],
        )
        stub = cpb_grpc.JobMasterServiceStub(self._channel(request.jobmaster_address))
        try:
            response = await stub.OfferSlots(offer, timeout=self._rpc_timeout_s)
            accepted = request.allocation_id in response.accepted
        except grpc.aio.AioRpcError as exc:
            log.warning("offering slot %d to job %s failed: %s", request.slot_index, request.job_id.hex(), exc.code().name)
            accepted = False
        if accepted:
            self.slots.mark_active(request.allocation_id)
        else:
            self._free_slot(request.allocation_id, "offer rejected by the JobMaster")

    def free_slot(self, request: cpb.FreeSlotRequest) -> None:
        self._free_slot(request.allocation_id, request.cause or "freed by the JobManager")

    def _free_slot(self, allocation_id: bytes, cause: str) -> None:
        slot = self.slots.slot_of(allocation_id)
        for attempt_id in self.slots.free_slot(allocation_id):
            self._cancel(attempt_id)
        if slot is not None:
            if not self.slots.allocations_of_job(slot.job_id):
                self._heartbeats.unmonitor_target(slot.job_id.hex())
                self._forget_job(slot.job_id)
            log.info("slot %d freed: %s", slot.slot_index, cause)
            self._spawn(self._send_slot_report())

    async def _send_slot_report(self) -> None:
        if not self.registration_id:
            return
        stub = cpb_grpc.ResourceManagerStub(self._channel(self.jobmanager_address))
        try:
            await stub.SendSlotReport(
                cpb.SlotReportRequest(resource_id=self.resource_id, registration_id=self.registration_id, slot_report=self.slot_report()),
                timeout=self._rpc_timeout_s,
            )
        except grpc.aio.AioRpcError as exc:
            log.info("slot report not delivered (%s); the next heartbeat carries it", exc.code().name)

    async def submit_task(self, tdd: cpb.TaskDeploymentDescriptor) -> None:
        if tdd.execution_attempt_id in self.tasks:
            return  # a retried SubmitTask
        self._check_usable()
        task = RunningTask(tdd)
        # Every task holds a Spark core for its whole life: one more than Spark can run would wait
        # for a core forever. Tasks still fetching their artifacts hold none yet but will: count
        # them, or a burst of SubmitTask calls is accepted whole and its last tasks never start.
        local = self.spark.master.startswith("local")
        cores = self.spark.max_concurrent_tasks if local else await asyncio.to_thread(self.spark.capacity)
        if tdd.execution_attempt_id in self.tasks:
            return  # retried while we asked Spark; from here to the registration nothing awaits
        busy = len(self.spark.running_task_ids()) + sum(1 for t in self.tasks.values() if t.starting and not t.cancelled)
        if busy >= cores and local:
            raise SlotTableError(
                f"this TaskManager's Spark runs at most {cores} tasks at once and all are busy; "
                "raise millstream.spark.tasks-per-slot (a slot runs one task per vertex of its slot sharing group)")
        if busy >= cores:  # the JobMaster's failure names the task
            raise SlotTableError(
                f"cannot get a Spark core: the Spark cluster {self.spark.master} gives TaskManager "
                f"{self.resource_id} {cores} cores and running tasks hold {busy} of them (each task holds a core for "
                "its whole life); give the Spark workers more cores (SPARK_WORKER_CORES may exceed the physical "
                "cores), add workers, or lower the job's parallelism")
        if not self.slots.add_task(tdd.allocation_id, tdd.job_id, tdd.execution_attempt_id, task.name):
            return
        self.tasks[task.attempt_id] = task
        self.task_output.started(task.attempt_id)
        jobmaster_address = self.slots.slot_of(tdd.allocation_id).jobmaster_address  # type: ignore[union-attr]
        self._spawn(self._forward_events(task, jobmaster_address))
        if task.attempt_id in self._cancelled_early:
            del self._cancelled_early[task.attempt_id]
            log.info("task %s was cancelled before it arrived: not started", task.name)
            task.cancelled, task.starting = True, False
            task.events.put_nowait(TaskExit("CANCELED"))
            return
        self._spawn(self._start(task))

    async def _start(self, task: RunningTask) -> None:
        try:
            paths = await self._fetch_artifacts(task.tdd)
            if self.spark.master.startswith("local"):
                data_host: str | None = self.data_address.rsplit(":", 1)[0]
                artifacts: list[str] | task_body.ShippedArtifacts = paths
            else:  # the worker runs elsewhere: it finds its own address and gets the files themselves
                data_host, artifacts = None, await asyncio.to_thread(self._shipped_artifacts, task.tdd)
            payload = make_payload(task_body.run_task, task.tdd.SerializeToString(), artifacts, data_host, self.network)
            if task.cancelled:
                return
            loop = asyncio.get_running_loop()

            def on_event(task_id: str, msg: Any) -> None:  # a runner thread: hop onto the loop
                if type(msg) is tuple and msg[0] == task_body.COLLECT:
                    task.collect_gate.acquire(len(msg[4]))  # blocks the channel while too much waits
                loop.call_soon_threadsafe(task.events.put_nowait, msg)

            task.handle = self.spark.submit(task.attempt_id.hex(), payload, on_event, self._task_secrets(task.attempt_id))
        except Exception as exc:
            log.exception("task %s could not start", task.name)
            task.events.put_nowait(TaskExit("FAILED", f"Task {task.name} could not start: {type(exc).__name__}: {exc}"))
        finally:
            task.starting = False

    def _task_secrets(self, attempt_id: bytes) -> dict[str, str]:
        """What a task attempt's worker gets through its control channel: a credential for its own
        partition look-ups, never the cluster token (user code runs in that worker)."""
        token = self._credentials.token if self._credentials is not None else None
        return {task_body.TASK_CREDENTIAL_SECRET: task_credential(token, attempt_id)} if token else {}

    async def _fetch_artifacts(self, tdd: cpb.TaskDeploymentDescriptor) -> list[str]:
        """The sys.path entries of the job's artifacts, downloaded once per job for all its tasks."""
        fetch = self._artifact_fetches.get(tdd.job_id)
        if fetch is None or (fetch.done() and fetch.exception() is not None):
            fetch = self._artifact_fetches[tdd.job_id] = asyncio.ensure_future(self._download_artifacts(tdd))
        return await asyncio.shield(fetch)

    def _shipped_artifacts(self, tdd: cpb.TaskDeploymentDescriptor) -> task_body.ShippedArtifacts:
        """The job's downloaded artifacts, read for a worker on another machine."""
        job_dir = self._job_dir(tdd)
        files = []
        for ref in tdd.artifacts:
            with open(os.path.join(job_dir, check_artifact_name(ref.name)), "rb") as f:
                files.append((ref.name, f.read()))
        return task_body.ShippedArtifacts(tdd.job_id.hex(), tuple(files))

    def _job_dir(self, tdd: cpb.TaskDeploymentDescriptor) -> str:
        return os.path.join(self._work_dir, "jobs", tdd.job_id.hex())

    def _forget_job(self, job_id: bytes) -> None:
        self._artifact_fetches.pop(job_id, None)
        if self.printed_lines is not None:
            self.printed_lines.forget(job_id)
        shutil.rmtree(os.path.join(self._work_dir, "jobs", job_id.hex()), ignore_errors=True)

    async def _download_artifacts(self, tdd: cpb.TaskDeploymentDescriptor) -> list[str]:
        job_dir = self._job_dir(tdd)
        paths: list[str] = []
        for ref in tdd.artifacts:
            name = check_artifact_name(ref.name)
            target = os.path.join(job_dir, name)
            if not os.path.exists(target):
                os.makedirs(job_dir, exist_ok=True)
                stub = cpb_grpc.BlobServerStub(self._channel(self.jobmanager_address))
                tmp = f"{target}.{os.getpid()}.part"
                with open(tmp, "wb") as f:
                    async for chunk in stub.GetBlob(cpb.GetBlobRequest(blob_key=ref.blob_key), timeout=self._rpc_timeout_s * 6):
                        f.write(chunk.data)
                os.replace(tmp, target)
            paths.append(job_dir if name.endswith(".py") else target)
        return list(dict.fromkeys(paths))

    async def _forward_events(self, task: RunningTask, jobmaster_address: str) -> None:
        """Sends the task's events to its JobMaster strictly in order (results before FINISHED)."""
        stub = cpb_grpc.JobMasterServiceStub(self._channel(jobmaster_address))
        while True:
            msg = await task.events.get()
            if isinstance(msg, TaskExit):
                if task.collect_failure is not None:  # its own root cause: results were lost
                    msg = TaskExit("FAILED", task.collect_failure)
                msg, secondary = _with_reported_failure(msg, task.failing)
                failure = (
                    cpb.JobFailure(message=_first_line(msg.error), task_name=task.name, traceback=msg.error or "", secondary=secondary)
                    if msg.error
                    else None
                )
                self.partition_servers.pop(task.attempt_id, None)
                self._ended_attempts.append(task.attempt_id)
                self.task_output.ended(task.attempt_id)
                if self.printed_lines is not None and not task.orphaned:  # its last lines reach the clients first
                    await self.printed_lines.flush(task.tdd.job_id)
                await self._report(stub, task, msg.status, failure)
                self.tasks.pop(task.attempt_id, None)
                self.slots.remove_task(task.attempt_id)
                return
            kind = msg[0]
            if kind == task_body.FAILING:
                task.failing = (msg[1], msg[2])
            elif kind == task_body.PARTITIONS:
                self.partition_servers[task.attempt_id] = msg[1]
            elif kind == task_body.STATE:
                await self._report(stub, task, msg[1], None)
            elif kind == task_body.RECORDS:
                task.records_in, task.records_out, task.metrics = msg[1], msg[2], msg[3]
                if msg[4] is not None:
                    task.metric_descriptors = msg[4]
            elif kind == task_body.CHECKPOINT_ACK:  # in order: a task's ack reaches its JobMaster before its end
                _, checkpoint_id, state_path, state_size = msg
                await self._call(stub.AcknowledgeCheckpoint, cpb.AcknowledgeCheckpointRequest(
                    job_id=task.tdd.job_id, execution_attempt_id=task.attempt_id, checkpoint_id=checkpoint_id,
                    state_path=state_path, state_size=state_size), task=task)
            elif kind == task_body.CHECKPOINT_DECLINE:
                _, checkpoint_id, reason, message = msg
                await self._call(stub.DeclineCheckpoint, cpb.DeclineCheckpointRequest(
                    job_id=task.tdd.job_id, execution_attempt_id=task.attempt_id, checkpoint_id=checkpoint_id,
                    reason=reason, message=message), task=task)
            elif kind == task_body.PRINT:
                stream = sys.stderr if msg[2] else sys.stdout
                stream.write("".join(f"{line}\n" for line in msg[1]))
                stream.flush()
                if self.printed_lines is not None and not task.orphaned:
                    self.printed_lines.add(task.tdd.job_id, jobmaster_address, msg[1])
            elif kind == task_body.OUTPUT:
                self.task_output.add(task.attempt_id, msg[1], msg[2])
                if self.printed_lines is not None:  # a TaskManager of its own: its stdout is Flink's .out
                    sys.stdout.write("".join(f"{line}\n" for line in msg[1]))
                    sys.stdout.flush()
            elif kind == task_body.COLLECT:
                _, collect_id, subtask, sequence, payload = msg
                batch = cpb.CollectBatch(collect_id=collect_id, subtask_index=subtask, sequence=sequence, payload=payload)
                try:
                    await self._report_collected(stub, task, batch)
                finally:
                    task.collect_gate.release(len(payload))

    async def _report_collected(self, stub: cpb_grpc.JobMasterServiceStub, task: RunningTask, batch: cpb.CollectBatch) -> None:
        """Reports one collected batch until the JobManager takes it. A refusal means its buffer for
        the job is full (the client has not pulled yet): report again, without limit, since that is
        backpressure, not failure. Transport errors are retried a few times (the batch's sequence
        number makes a repeat harmless); then the task fails rather than lose records silently."""
        request = cpb.CollectRequest(job_id=task.tdd.job_id, execution_attempt_id=task.attempt_id, batch=batch)
        errors = 0
        while task.collect_failure is None and not task.collect_gate.opened:
            try:
                response = await stub.ReportCollectBatch(request, timeout=self._rpc_timeout_s)
            except grpc.aio.AioRpcError as exc:
                if exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION):
                    log.info("collected batch of %s not taken: %s %s", task.name, exc.code().name, exc.details())
                    return  # the job is over (no JobMaster any more): nobody reads it
                errors += 1
                if errors >= 5 or exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    task.collect_failure = (
                        f"collected records of {task.name} ({len(batch.payload):,} bytes in one batch) could not be "
                        f"delivered to the JobManager: {exc.code().name} {exc.details()}"
                    )
                    log.warning("%s; cancelling the task", task.collect_failure)
                    self._cancel(task.attempt_id)
                    return
                await asyncio.sleep(min(0.1 * 2**errors, 2.0))
                continue
            if response.accepted:
                return

    async def _report(self, stub: cpb_grpc.JobMasterServiceStub, task: RunningTask, state: str, failure: cpb.JobFailure | None) -> None:
        task.state = state
        update = cpb.TaskExecutionState(
            job_id=task.tdd.job_id,
            execution_attempt_id=task.attempt_id,
            state=cpb.ExecutionState.Value(f"EXEC_{state}"),
            failure=failure,
            records_in=task.records_in,
            records_out=task.records_out,
            metrics=task.metrics,
        )
        await self._call(stub.UpdateTaskExecutionState, update, task=task)

    async def _send_printed_lines(self, jobmaster_address: str, report: cpb.PrintedLinesReport) -> None:
        stub = cpb_grpc.JobMasterServiceStub(self._channel(jobmaster_address))
        await stub.ReportPrintedLines(report, timeout=self._rpc_timeout_s)

    async def _call(self, method: Any, request: Any, attempts: int = 5, task: RunningTask | None = None) -> None:
        """Idempotent reports to the JobMaster: retried on UNAVAILABLE, then given up (heartbeats take
        over). Nothing goes to the leader an orphaned task was deployed by."""
        for attempt in range(attempts):
            if task is not None and task.orphaned:
                return
            try:
                await method(request, timeout=self._rpc_timeout_s)
                return
            except grpc.aio.AioRpcError as exc:
                if exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    log.warning("report to JobMaster rejected: %s %s", exc.code().name, exc.details())
                    return
                await asyncio.sleep(min(0.1 * 2**attempt, 2.0))
        log.warning("report to JobMaster dropped after %d attempts", attempts)

    def cancel_task(self, attempt_id: bytes) -> None:
        self._cancel(attempt_id)

    def to_task(self, attempt_id: bytes, message: tuple[Any, ...]) -> bool:
        """A checkpoint control message for a running task's body; False if it is not running here."""
        task = self.tasks.get(attempt_id)
        if task is None or task.handle is None:
            return False
        task.handle.send(message)
        return True

    def _cancel(self, attempt_id: bytes) -> None:
        task = self.tasks.get(attempt_id)
        if task is None:
            if attempt_id not in self._ended_attempts:  # not here yet: its SubmitTask may still come
                self._cancelled_early[attempt_id] = None
                while len(self._cancelled_early) > 10_000:
                    self._cancelled_early.popitem(last=False)
            return
        task.collect_gate.open()  # a reader blocked on it would hold up the task's exit
        if task.handle is None:
            if not task.cancelled:
                task.cancelled = True
                task.events.put_nowait(TaskExit("CANCELED"))
        else:
            self._spawn(asyncio.to_thread(task.handle.cancel))  # one py4j call: off the loop

    def lookup_partition(self, attempt_id: bytes) -> cpb.LookupPartitionResponse:
        address = self.partition_servers.get(attempt_id)
        if address:
            return cpb.LookupPartitionResponse(state=cpb.LookupPartitionResponse.READY, address=address)
        if attempt_id in self._ended_attempts:
            return cpb.LookupPartitionResponse(state=cpb.LookupPartitionResponse.GONE)
        return cpb.LookupPartitionResponse(state=cpb.LookupPartitionResponse.PENDING)

    def resources(self) -> cpb.TaskManagerResources:
        """This TaskManager's machine and memory, for the ResourceManager (the REST API shows them)."""
        physical, available = host_memory_bytes()
        return cpb.TaskManagerResources(
            cpu_cores=os.cpu_count() or 0,
            physical_memory_bytes=physical,
            available_memory_bytes=available,
            process_rss_bytes=process_rss_bytes(),
            process_tree_rss_bytes=process_tree_rss_bytes(),
            heartbeats_received=self.heartbeats_received,
            running_tasks=sum(1 for t in self.tasks.values() if t.state == "RUNNING"),
        )

    def heartbeat(self, request: cpb.HeartbeatRequest) -> cpb.HeartbeatResponse:
        self.heartbeats_received += 1
        if request.sender == RESOURCE_MANAGER:
            if request.registration_id == self.registration_id:
                self._heartbeats.record_heartbeat(RESOURCE_MANAGER, now_ms())
            return cpb.HeartbeatResponse(slot_report=self.slot_report(), resources=self.resources())
        self._heartbeats.record_heartbeat(request.job_id.hex(), now_ms())
        tasks = [
            cpb.TaskExecutionState(
                job_id=t.tdd.job_id,
                execution_attempt_id=t.attempt_id,
                state=cpb.ExecutionState.Value(f"EXEC_{t.state}"),
                records_in=t.records_in,
                records_out=t.records_out,
                metrics=t.metrics,
            )
            for t in self.tasks.values()
            if t.tdd.job_id == request.job_id
        ]
        return cpb.HeartbeatResponse(slot_report=self.slot_report(), tasks=tasks)


def _with_reported_failure(exit: TaskExit, failing: tuple[str, bool] | None) -> tuple[TaskExit, bool]:
    """The task's outcome given the failure its body reported while it cleaned up.

    A body that failed before any cancel reached it failed, even if the cancel (sent because of its
    own failure, say) arrived during its clean-up and turned its exit into CANCELED."""
    if failing is None or exit.status == "FINISHED":
        return exit, False
    traceback_text, secondary = failing
    if exit.status == "CANCELED" or not exit.error:
        return TaskExit("FAILED", traceback_text), secondary
    return exit, secondary


def log_file_list() -> cpb.LogFileList:
    files, log_name, stdout_name = log_files.listed_files()
    return cpb.LogFileList(files=[cpb.LogFileInfo(name=f.name, size=f.size) for f in files],
                           log_name=log_name, stdout_name=stdout_name)


def read_log_file(request: cpb.ReadLogRequest) -> cpb.ReadLogResponse:
    text, why = log_files.read_log(request.name, request.stdout, request.max_bytes)
    return cpb.ReadLogResponse(found=text is not None, text=text or "", message=why)


def _first_line(text: str | None) -> str:
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "task failed"


class TaskExecutorServicer(cpb_grpc.TaskExecutorServicer):
    def __init__(self, executor: TaskExecutor) -> None:
        self.te = executor

    async def RequestSlot(self, request, context):  # noqa: N802, ANN001, ANN201
        try:
            self.te.request_slot(request)
        except SlotTableError as exc:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        return cpb.Empty()

    async def SubmitTask(self, request, context):  # noqa: N802, ANN001, ANN201
        try:
            await self.te.submit_task(request.tdd)
        except SlotTableError as exc:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        return cpb.Empty()

    async def CancelTask(self, request, context):  # noqa: N802, ANN001, ANN201
        self.te.cancel_task(request.execution_attempt_id)
        return cpb.Empty()

    async def FreeSlot(self, request, context):  # noqa: N802, ANN001, ANN201
        self.te.free_slot(request)
        return cpb.Empty()

    async def Heartbeat(self, request, context):  # noqa: N802, ANN001, ANN201
        return self.te.heartbeat(request)

    async def LookupPartition(self, request, context):  # noqa: N802, ANN001, ANN201
        return self.te.lookup_partition(request.producer_attempt_id)

    async def TriggerCheckpoint(self, request, context):  # noqa: N802, ANN001, ANN201
        if not self.te.to_task(request.execution_attempt_id,
                               (task_body.TRIGGER_CHECKPOINT, request.checkpoint_id, request.timestamp_ms,
                                request.stop, request.drain)):
            await context.abort(grpc.StatusCode.NOT_FOUND, f"task {request.execution_attempt_id.hex()} is not running here")
        return cpb.Empty()

    async def NotifyCheckpoint(self, request, context):  # noqa: N802, ANN001, ANN201
        self.te.to_task(request.execution_attempt_id,
                        (task_body.NOTIFY_CHECKPOINT, request.checkpoint_id, request.aborted))
        return cpb.Empty()

    async def GetTaskOutput(self, request, context):  # noqa: N802, ANN001, ANN201
        kept = self.te.task_output.read(request.execution_attempt_id)
        if kept is None:
            return cpb.TaskOutputResponse(found=False)
        return cpb.TaskOutputResponse(found=True, lines=kept[0], dropped_lines=kept[1])

    async def ListLogFiles(self, request, context):  # noqa: N802, ANN001, ANN201
        return await asyncio.to_thread(log_file_list)

    async def ReadLogFile(self, request, context):  # noqa: N802, ANN001, ANN201
        return await asyncio.to_thread(read_log_file, request)
