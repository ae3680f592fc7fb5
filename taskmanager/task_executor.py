"""The TaskExecutor: a TaskManager's slots and tasks, driven over gRPC by the JobManager.

Slots are allocated on the ResourceManager's request and offered to the job's JobMaster; tasks
run in the SparkHost's executors and report every state change, in order, to the JobMaster.
Heartbeats from the ResourceManager and JobMasters are watched: without the ResourceManager the
TaskManager registers again; without a job's JobMaster it cancels that job's tasks and frees its
slots, as a Flink TaskExecutor does. Those decisions are :class:`TaskExecutorCore`'s (no I/O);
this module is its shell: the gRPC servicer, the calls to the JobManager, Spark submissions and
cancels, artifact downloads, and the threads and queues that carry each task's worker events.

Fencing (HA.md): the TaskExecutor serves one JobManager leader at a time, ``leader`` (its address
and leader session id). Every call it makes to the JobManager side carries the session id
(``FencingClientInterceptor`` on its channels), and :meth:`TaskExecutor.fencing_refusal`, the guard
of its gRPC server, refuses the JobManager calls whose token is not that session id. When the
leader changes, :meth:`TaskExecutor.disconnect_leader` cancels the old leader's tasks, frees every
slot and closes the channels before the TaskManager registers with the new leader.
"""
from __future__ import annotations

import asyncio
import logging
import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import grpc

from millstream.runtime.artifact_names import check_artifact_name
from millstream.runtime.thread_dump import python_threads
from millstream.proto import cluster_pb2 as cpb
from millstream.proto import cluster_pb2_grpc as cpb_grpc
from millstream.runtime.entrypoint import log_files
from millstream.runtime.rpc.auth import task_credential
from millstream.runtime.metrics.system import host_memory_bytes, process_rss_bytes, process_tree_rss_bytes
from millstream.runtime.clock import now_ms
from millstream.runtime.rpc.fencing import FencingClientInterceptor, Refusal
from millstream.runtime.ha.api import DEFAULT_LEADER_ID, LeaderInformation
from millstream.runtime.rpc.job_master_gateway import GrpcJobMasterGateway, JobMasterGateway
from millstream.runtime.rpc.resource_manager_gateway import GrpcResourceManagerGateway, ResourceManagerGateway
from millstream.runtime.rpc.service import aio_channel
from millstream.runtime.rpc.security import Credentials
from millstream.taskmanager import task_body
from millstream.taskmanager.print_forwarder import PrintForwarder
from millstream.taskmanager.task_output import TaskOutputStore
from millstream.runtime.task.worker_events import (
    CollectedBatch, ControlMessage, NotifyCheckpoint, OperatorEventDelivered, TriggerCheckpoint)
from millstream.taskmanager.slot_table import SlotTableError, TaskSlotTable
from millstream.taskmanager.spark.host import SparkHost, TaskExit, TaskHandle, make_payload
from millstream.taskmanager.task_executor_core import (
    COLLECT_IN_FLIGHT_BYTES,
    RESOURCE_MANAGER,
    AcknowledgeCheckpoint,
    ForwardOperatorEvent,
    CancelTask,
    CollectBudget,
    Command,
    DeclineCheckpoint,
    FlushPrintedLines,
    ForgetJob,
    ForwardPrintedLines,
    KeepTaskOutput,
    OfferSlot,
    PrintLines,
    ReportCollected,
    ReportTaskState,
    SendSlotReport,
    StartTask,
    TaskAccepted,
    TaskExecutorCore,
    TaskOutputEnded,
    TaskRecord,
)

log = logging.getLogger(__name__)


_TASK_EXECUTOR_SERVICE = "/" + cpb.DESCRIPTOR.services_by_name["TaskExecutor"].full_name + "/"
# The TaskExecutor's methods only the JobManager leader may call (LookupPartition, between
# TaskManagers, is not fenced).
FENCED_METHODS = frozenset(_TASK_EXECUTOR_SERVICE + name for name in (
    "RequestSlot", "SubmitTask", "CancelTask", "FreeSlot", "Heartbeat", "TriggerCheckpoint", "NotifyCheckpoint",
    "SendOperatorEvent"))


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
    """Blocks one task's control-channel reader thread while its :class:`CollectBudget` is spent.

    The reader calls :meth:`acquire` before queueing a collected batch and waits while the budget
    refuses it: it stops reading the channel, the worker's sends block, and the collect sink waits.
    So a full collect buffer in the JobManager (which refuses reports until the client pulled)
    backpressures the producing task, not this process's memory. :meth:`open` (the task is
    cancelled or the TaskManager stops) lets everything through.
    """

    def __init__(self, limit_bytes: int = COLLECT_IN_FLIGHT_BYTES) -> None:
        self._budget = CollectBudget(limit_bytes)
        self._cond = threading.Condition()

    @property
    def opened(self) -> bool:
        return self._budget.opened

    def acquire(self, size: int) -> None:
        with self._cond:
            while not self._budget.may_pass(size):
                self._cond.wait()
            self._budget.taken(size)

    def release(self, size: int) -> None:
        with self._cond:
            self._budget.released(size)
            self._cond.notify_all()

    def open(self) -> None:
        with self._cond:
            self._budget.open()
            self._cond.notify_all()


@dataclass(eq=False)
class TaskRuntime:
    """The shell's side of an accepted task: its event queue, its Spark task, its collect gate."""

    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    handle: TaskHandle | None = None
    collect_gate: CollectGate = field(default_factory=CollectGate)


class TaskExecutor:
    """The gRPC shell of a :class:`TaskExecutorCore`: hands it the RPCs and the tasks' events and
    carries out its commands (RPCs to the JobManager, Spark submissions and cancels, artifacts)."""

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
        self.core = TaskExecutorCore(resource_id, num_slots, forward_printed_lines)
        self.spark = spark
        self.address = ""
        self.data_address = ""
        # The JobManager leader served (None between leaders); without HA the one JobManager.
        self.leader: LeaderInformation | None = (
            LeaderInformation(jobmanager_address, DEFAULT_LEADER_ID) if jobmanager_address else None)
        self._rpc_timeout_s = rpc_timeout_s
        self._max_message_bytes = max_message_bytes
        self._work_dir = work_dir
        self.jobmanager_address = jobmanager_address
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._runtimes: dict[bytes, TaskRuntime] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._artifact_fetches: dict[bytes, asyncio.Future[list[str]]] = {}
        self.registered = asyncio.Event()
        self.printed_lines = PrintForwarder(self._send_printed_lines) if forward_printed_lines else None
        # What each attempt's user functions printed and logged (``task_output``: its bounds).
        self.task_output = task_output if task_output is not None else TaskOutputStore.with_defaults()

    # -- the core's state, read by the TaskManager process and its metrics ------------------------

    @property
    def slots(self) -> TaskSlotTable:
        return self.core.slots

    @property
    def tasks(self) -> dict[bytes, TaskRecord]:
        return self.core.tasks

    @property
    def heartbeats_received(self) -> int:
        return self.core.heartbeats_received

    @property
    def heartbeat_interval_ms(self) -> int:
        return self.core.heartbeats.interval_ms

    @property
    def registration_id(self) -> str:
        return self.core.registration_id

    @registration_id.setter
    def registration_id(self, value: str) -> None:
        self.core.registration_id = value

    @property
    def unusable_reason(self) -> str | None:
        return self.core.unusable_reason

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

    def job_master(self, address: str) -> JobMasterGateway:
        """The JobMaster at ``address``, over this TaskManager's fenced channel to it."""
        return GrpcJobMasterGateway(self._channel(address))

    def resource_manager(self, address: str | None = None) -> ResourceManagerGateway:
        """The ResourceManager of the leader at ``address`` (default: the one followed now)."""
        return GrpcResourceManagerGateway(self._channel(address or self.jobmanager_address))

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def close(self) -> None:
        for runtime in list(self._runtimes.values()):
            runtime.collect_gate.open()
            if runtime.handle is not None:
                await asyncio.to_thread(runtime.handle.cancel)
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
        self.registered.clear()
        if old is not None:
            log.info("TaskManager %s leaves the JobManager leader %s (session %s): %s; cancelling %d tasks",
                     self.resource_id, old.address, old.session_id, reason, len(self.tasks))
        self._execute(self.core.disconnect_leader(reason))
        deadline = time.monotonic() + timeout_s
        while self.tasks and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        still_running = [task.name for task in self.tasks.values()]
        channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            await channel.close()
        return still_running

    # -- commands ------------------------------------------------------------------------------

    def _execute(self, commands: list[Command]) -> None:
        """Carries out the commands that are not a task's ordered reports (those run in
        :meth:`_forward_events`)."""
        for command in commands:
            if isinstance(command, CancelTask):
                self._cancel_runtime(command)
            elif isinstance(command, OfferSlot):
                self._spawn(self._offer_slot(command))
            elif isinstance(command, SendSlotReport):
                self._spawn(self._send_slot_report())
            elif isinstance(command, ForgetJob):
                self._forget_job(command.job_id)
            elif isinstance(command, TaskAccepted):
                runtime = self._runtimes[command.attempt_id] = TaskRuntime()
                self.task_output.started(command.attempt_id)
                self._spawn(self._forward_events(command.attempt_id, runtime))
            elif isinstance(command, StartTask):
                self._spawn(self._start(command.attempt_id))
            else:
                raise TypeError(f"not a command the TaskExecutor carries out at once: {command!r}")

    def _cancel_runtime(self, command: CancelTask) -> None:
        runtime = self._runtimes.get(command.attempt_id)
        if runtime is None:
            return
        runtime.collect_gate.open()  # a reader blocked on it would hold up the task's exit
        if command.running:
            if runtime.handle is not None:
                self._spawn(asyncio.to_thread(runtime.handle.cancel))  # one py4j call: off the loop
        else:
            runtime.events.put_nowait(TaskExit("CANCELED"))

    # -- registration with the ResourceManager --------------------------------------------------

    def registered_with(self, response: cpb.RegisterTaskManagerResponse) -> None:
        self.core.registered(response.registration_id, response.heartbeat_interval_ms, response.heartbeat_timeout_ms,
                             now_ms())
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
        rm_alive, commands = self.core.check_heartbeats(now_ms())
        if not rm_alive:
            self.registered.clear()
        self._execute(commands)
        return rm_alive

    # -- RPC handlers --------------------------------------------------------------------------

    def unusable(self, reason: str) -> None:
        """From now on every slot request and task is refused with ``reason`` (e.g. Spark died)."""
        self.core.unusable(reason)

    def request_slot(self, request: cpb.RequestSlotRequest) -> None:
        self._execute(self.core.request_slot(request.slot_index, request.job_id, request.allocation_id,
                                             request.jobmaster_address, request.registration_id, now_ms()))

    async def _offer_slot(self, command: OfferSlot) -> None:
        offer = cpb.OfferSlotsRequest(
            job_id=command.job_id,
            resource_id=self.resource_id,
            taskmanager_address=self.address,
            data_address=self.data_address,
            offers=[cpb.SlotOffer(allocation_id=command.allocation_id, slot_index=command.slot_index)],
        )
        try:
            response = await self.job_master(command.jobmaster_address).offer_slots(offer, timeout=self._rpc_timeout_s)
            accepted = command.allocation_id in response.accepted
        except grpc.aio.AioRpcError as exc:
            log.warning("offering slot %d to job %s failed: %s", command.slot_index, command.job_id.hex(), exc.code().name)
            accepted = False
        self._execute(self.core.offer_answered(command.allocation_id, accepted))

    def free_slot(self, request: cpb.FreeSlotRequest) -> None:
        self._execute(self.core.free_slot(request.allocation_id, request.cause))

    async def _send_slot_report(self) -> None:
        if not self.registration_id:
            return
        try:
            await self.resource_manager().send_slot_report(
                cpb.SlotReportRequest(resource_id=self.resource_id, registration_id=self.registration_id, slot_report=self.slot_report()),
                timeout=self._rpc_timeout_s,
            )
        except grpc.aio.AioRpcError as exc:
            log.info("slot report not delivered (%s); the next heartbeat carries it", exc.code().name)

    async def submit_task(self, tdd: cpb.TaskDeploymentDescriptor) -> None:
        if self.core.is_known(tdd.execution_attempt_id):
            return  # a retried SubmitTask
        self.core.check_usable()  # before asking Spark, which may be the reason it is unusable
        local = self.spark.master.startswith("local")
        cores = self.spark.max_concurrent_tasks if local else await asyncio.to_thread(self.spark.capacity)
        # From here to the core's decision nothing awaits: a retry meanwhile is seen by the core.
        if self.spark.placement == "slot":  # a slot's subtasks share its core: the core counts slots
            self._execute(self.core.submit_task(tdd, cores, 0, self.spark.master, slot_placement=True))
        else:
            self._execute(self.core.submit_task(tdd, cores, len(self.spark.running_task_ids()), self.spark.master))

    async def _start(self, attempt_id: bytes) -> None:
        task, runtime = self.core.tasks.get(attempt_id), self._runtimes.get(attempt_id)
        if task is None or runtime is None:
            return  # cancelled and reported before it got here
        submitted = False
        try:
            paths = await self._fetch_artifacts(task.tdd)
            if self.spark.master.startswith("local"):
                data_host: str | None = self.data_address.rsplit(":", 1)[0]
                artifacts: list[str] | task_body.ShippedArtifacts = paths
            else:  # the worker runs elsewhere: it finds its own address and gets the files themselves
                data_host, artifacts = None, await asyncio.to_thread(self._shipped_artifacts, task.tdd)
            payload = make_payload(task_body.run_task, task.tdd.SerializeToString(), artifacts, data_host, self.network)
            if not self.core.may_start(attempt_id):
                return
            loop = asyncio.get_running_loop()
            gate, events = runtime.collect_gate, runtime.events

            def on_event(task_id: str, msg: Any) -> None:  # a runner thread: hop onto the loop
                if type(msg) is CollectedBatch:
                    gate.acquire(len(msg.payload))  # blocks the channel while too much waits
                loop.call_soon_threadsafe(events.put_nowait, msg)

            runtime.handle = self.spark.submit(attempt_id.hex(), payload, on_event, self._task_secrets(attempt_id),
                                               slot=task.tdd.allocation_id.hex())
            submitted = True
        except Exception as exc:
            log.exception("task %s could not start", task.name)
            runtime.events.put_nowait(TaskExit("FAILED", f"Task {task.name} could not start: {type(exc).__name__}: {exc}"))
        finally:
            self.core.start_done(attempt_id, submitted)

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

    async def _forward_events(self, attempt_id: bytes, runtime: TaskRuntime) -> None:
        """Hands the task's events to the core strictly in order and carries out what it answers
        before the next one (results before FINISHED), until the task's end is reported."""
        while True:
            event = await runtime.events.get()
            for command in self.core.worker_event(attempt_id, event):
                if not await self._report_command(command, runtime):
                    self._runtimes.pop(attempt_id, None)
                    return

    async def _report_command(self, command: Command, runtime: TaskRuntime) -> bool:
        """One command of a task's event; False once the task's end was reported (it is gone)."""
        if isinstance(command, ReportTaskState):
            await self._report(command)
            if command.final:
                self.core.final_state_reported(command.attempt_id)
                return False
        elif isinstance(command, ReportCollected):
            try:
                await self._report_collected(command, runtime)
            finally:
                runtime.collect_gate.release(len(command.batch.payload))
        elif isinstance(command, AcknowledgeCheckpoint):
            job_master = self.job_master(command.jobmaster_address)
            await self._call(job_master.acknowledge_checkpoint, cpb.AcknowledgeCheckpointRequest(
                job_id=command.job_id, execution_attempt_id=command.attempt_id, checkpoint_id=command.checkpoint_id,
                state_path=command.state_path, state_size=command.state_size, sync_duration_ms=command.sync_ms,
                async_duration_ms=command.async_ms, alignment_duration_ms=command.alignment_ms,
                start_delay_ms=command.start_delay_ms), command.attempt_id)
        elif isinstance(command, ForwardOperatorEvent):
            job_master = self.job_master(command.jobmaster_address)
            await self._call(job_master.send_operator_event, cpb.OperatorEventToCoordinator(
                job_id=command.job_id, execution_attempt_id=command.attempt_id, payload=command.payload),
                command.attempt_id)
        elif isinstance(command, DeclineCheckpoint):
            job_master = self.job_master(command.jobmaster_address)
            await self._call(job_master.decline_checkpoint, cpb.DeclineCheckpointRequest(
                job_id=command.job_id, execution_attempt_id=command.attempt_id, checkpoint_id=command.checkpoint_id,
                reason=command.reason, message=command.message), command.attempt_id)
        elif isinstance(command, PrintLines):
            stream = sys.stderr if command.to_stderr else sys.stdout
            stream.write("".join(f"{line}\n" for line in command.lines))
            stream.flush()
        elif isinstance(command, ForwardPrintedLines):
            if self.printed_lines is not None:
                self.printed_lines.add(command.job_id, command.jobmaster_address, command.lines)
        elif isinstance(command, KeepTaskOutput):
            self.task_output.add(command.attempt_id, command.lines, command.dropped)
            if command.echo:  # a TaskManager of its own: its stdout is Flink's .out
                sys.stdout.write("".join(f"{line}\n" for line in command.lines))
                sys.stdout.flush()
        elif isinstance(command, TaskOutputEnded):
            self.task_output.ended(command.attempt_id)
        elif isinstance(command, FlushPrintedLines):
            if self.printed_lines is not None:
                await self.printed_lines.flush(command.job_id)
        else:
            self._execute([command])
        return True

    async def _report_collected(self, command: ReportCollected, runtime: TaskRuntime) -> None:
        """Reports one collected batch until the JobManager takes it. A refusal means its buffer for
        the job is full (the client has not pulled yet): report again, without limit, since that is
        backpressure, not failure. A failed report: the core decides (see ``collect_report_failed``)."""
        batch = command.batch
        job_master = self.job_master(command.jobmaster_address)
        request = cpb.CollectRequest(job_id=command.job_id, execution_attempt_id=command.attempt_id, batch=cpb.CollectBatch(
            collect_id=batch.collect_id, subtask_index=batch.subtask_index, sequence=batch.sequence, payload=batch.payload))
        failures = 0
        while not self.core.collect_failed(command.attempt_id) and not runtime.collect_gate.opened:
            try:
                accepted = await job_master.report_collect_batch(request, timeout=self._rpc_timeout_s)
            except grpc.aio.AioRpcError as exc:
                failures += 1
                again, commands = self.core.collect_report_failed(command.attempt_id, exc.code().name, exc.details() or "",
                                                                  failures, len(batch.payload))
                self._execute(commands)
                if not again:
                    return
                await asyncio.sleep(min(0.1 * 2**failures, 2.0))
                continue
            if accepted:
                return

    async def _report(self, command: ReportTaskState) -> None:
        failure = command.failure
        update = cpb.TaskExecutionState(
            job_id=command.job_id,
            execution_attempt_id=command.attempt_id,
            state=f"EXEC_{command.state}",  # protobuf takes an enum value by its name
            failure=cpb.JobFailure(message=failure.message, task_name=failure.task_name, traceback=failure.traceback,
                                   secondary=failure.secondary) if failure is not None else None,
            records_in=command.records_in,
            records_out=command.records_out,
            metrics=command.metrics,
        )
        await self._call(self.job_master(command.jobmaster_address).update_task_execution_state, update,
                         command.attempt_id)

    async def _send_printed_lines(self, jobmaster_address: str, report: cpb.PrintedLinesReport) -> None:
        await self.job_master(jobmaster_address).report_printed_lines(report, timeout=self._rpc_timeout_s)

    async def _call(self, method: Any, request: Any, attempt_id: bytes, attempts: int = 5) -> None:
        """Idempotent reports to the JobMaster: retried on UNAVAILABLE, then given up (heartbeats take
        over). Nothing goes to the leader an orphaned task was deployed by."""
        for attempt in range(attempts):
            if not self.core.reports_to_leader(attempt_id):
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
        self._execute(self.core.cancel_task(attempt_id))

    def to_task(self, attempt_id: bytes, message: ControlMessage) -> bool:
        """A checkpoint control message for a running task's body; False if it is not running here."""
        runtime = self._runtimes.get(attempt_id)
        if not self.core.runs_here(attempt_id) or runtime is None or runtime.handle is None:
            return False
        runtime.handle.send(message)
        return True

    def lookup_partition(self, attempt_id: bytes) -> cpb.LookupPartitionResponse:
        state, address = self.core.lookup_partition(attempt_id)
        return cpb.LookupPartitionResponse(state=state, address=address)  # the enum value by its name

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
            running_tasks=self.core.running_tasks(),
        )

    def heartbeat(self, request: cpb.HeartbeatRequest) -> cpb.HeartbeatResponse:
        if request.sender == RESOURCE_MANAGER:
            self.core.heartbeat_from_resource_manager(request.registration_id, now_ms())
            return cpb.HeartbeatResponse(slot_report=self.slot_report(), resources=self.resources())
        tasks = [
            cpb.TaskExecutionState(
                job_id=t.tdd.job_id,
                execution_attempt_id=t.attempt_id,
                state=f"EXEC_{t.state}",
                records_in=t.records_in,
                records_out=t.records_out,
                metrics=t.metrics,
            )
            for t in self.core.heartbeat_from_job_master(request.job_id, now_ms())
        ]
        return cpb.HeartbeatResponse(slot_report=self.slot_report(), tasks=tasks)


def log_file_list() -> cpb.LogFileList:
    files, log_name, stdout_name = log_files.listed_files()
    return cpb.LogFileList(files=[cpb.LogFileInfo(name=f.name, size=f.size, mtime_ms=f.mtime_ms) for f in files],
                           log_name=log_name, stdout_name=stdout_name)


def read_log_file(request: cpb.ReadLogRequest) -> cpb.ReadLogResponse:
    text, why = log_files.read_log(request.name, request.stdout, request.max_bytes)
    return cpb.ReadLogResponse(found=text is not None, text=text or "", message=why)


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
                               TriggerCheckpoint(request.checkpoint_id, request.timestamp_ms, request.stop, request.drain,
                                                 request.savepoint)):
            await context.abort(grpc.StatusCode.NOT_FOUND, f"task {request.execution_attempt_id.hex()} is not running here")
        return cpb.Empty()

    async def SendOperatorEvent(self, request, context):  # noqa: N802, ANN001, ANN201
        if not self.te.to_task(request.execution_attempt_id, OperatorEventDelivered(request.payload)):
            await context.abort(grpc.StatusCode.NOT_FOUND, f"task {request.execution_attempt_id.hex()} is not running here")
        return cpb.Empty()

    async def NotifyCheckpoint(self, request, context):  # noqa: N802, ANN001, ANN201
        self.te.to_task(request.execution_attempt_id, NotifyCheckpoint(request.checkpoint_id, request.aborted))
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

    async def ThreadDump(self, request, context):  # noqa: N802, ANN001, ANN201
        return cpb.ThreadDumpResponse(threads=[cpb.ThreadDumpResponse.Thread(name=name, stack=stack)
                                               for name, stack in python_threads()])
