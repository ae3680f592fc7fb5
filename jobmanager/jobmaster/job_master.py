"""The JobMaster shell: runs one job's JobMasterCore commands over gRPC and heartbeats its TaskManagers."""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable, Protocol

import grpc

from millstream.jobmanager.checkpoint.driver import CheckpointDriver, CheckpointServices, SavepointError
from millstream.runtime.execution_state import ExecutionState, JobStatus
from millstream.runtime.clock import now_ms
from millstream.runtime.heartbeat import HeartbeatMonitor
from millstream.jobmanager.jobmaster.job_master_core import (
    AbortPendingCheckpoints,
    BuildDeployments,
    CancelTask,
    CheckpointRestored,
    Command,
    DeclareRequirements,
    DeployTask,
    FreeSlot,
    JobMasterCore,
    JobStatusChanged,
    StartAdaptiveTimer,
    StartRestartTimer,
    TriggerRescaleCheckpoint,
    job_slot_request_timeout,
)
from millstream.jobmanager.jobmaster.source_coordinators import SourceCoordinators
from millstream.proto import cluster_pb2 as cpb
from millstream.runtime.rpc.fencing import FencingClientInterceptor
from millstream.runtime.rpc.service import aio_channel
from millstream.runtime.rpc.task_executor_gateway import GrpcTaskExecutorGateway, TaskExecutorGateway
from millstream.runtime.rpc.security import Credentials

log = logging.getLogger(__name__)


# Calls to TaskManagers in flight at once (deploy, cancel, slot requests and frees): starting a
# gRPC call costs the event loop a fraction of a millisecond, so starting thousands in one turn
# (all the tasks of a p = 1000 job) would block it for a quarter of a second or more.
MAX_CONCURRENT_CALLS = 64
PROBE_GAP_S = 0.2
ADAPTIVE_DECLARATION_TIMEOUT_MS = 10 * 365 * 24 * 3600 * 1000  # between the probes of the TaskManagers after a broken exchange


class SlotRequirementsReceiver(Protocol):
    """The ResourceManager in this process, as a JobMaster declares how many slots its job needs
    (Flink's ResourceManagerGateway.declareRequiredResources; the TaskManagers' part is
    ``runtime.rpc.resource_manager_gateway``)."""

    def declare_requirements(self, job_id: bytes, jobmaster_address: str, slots: int, timeout_ms: int | None = None) -> None: ...


class TaskExecutorClients:
    """One channel per TaskManager address, shared by every job of this JobManager. Every call
    carries ``token()``, the JobManager's current leader session id (fencing), when not None, and
    the channels use ``credentials`` (TLS, the cluster token)."""

    def __init__(self, rpc_timeout_s: float, max_message_bytes: int,
                 token: Callable[[], str | None] = lambda: None, credentials: Credentials | None = None) -> None:
        self.rpc_timeout_s = rpc_timeout_s
        self._max_message_bytes = max_message_bytes
        self._credentials = credentials
        self._interceptors = [FencingClientInterceptor(token)]
        self._channels: dict[str, grpc.aio.Channel] = {}
        self.in_flight = asyncio.Semaphore(MAX_CONCURRENT_CALLS)  # taken around every call but heartbeats

    def _channel(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = aio_channel(address, self._max_message_bytes, self._interceptors,
                                                                  self._credentials)
        return channel

    def gateway(self, address: str) -> TaskExecutorGateway:
        return GrpcTaskExecutorGateway(self._channel(address))

    def forget(self, address: str) -> None:
        channel = self._channels.pop(address, None)
        if channel is not None:
            asyncio.ensure_future(channel.close())

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()


class JobMaster:
    def __init__(
        self,
        core: JobMasterCore,
        address: str,
        resource_manager: SlotRequirementsReceiver,
        task_executors: TaskExecutorClients,
        on_status: Callable[[JobStatus, cpb.JobFailure | None], None],
        heartbeat_interval_ms: int,
        heartbeat_timeout_ms: int,
        checkpoint_services: CheckpointServices | None = None,
    ) -> None:
        """``checkpoint_services``: the job's HA checkpoint store and id counter (None without HA)."""
        self.core = core
        self.address = address
        self._rm = resource_manager
        self._te = task_executors
        self._on_status = on_status
        self._heartbeats = HeartbeatMonitor[str](heartbeat_interval_ms, heartbeat_timeout_ms)
        self._tm_addresses: dict[str, str] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._probing = False  # probing the TaskManagers after a broken exchange
        self._restart_timer: asyncio.TimerHandle | None = None
        self._region_timers: dict[int, asyncio.TimerHandle] = {}
        self.checkpoints: CheckpointDriver | None = None
        if core.checkpointing is not None:
            self.checkpoints = CheckpointDriver(core, core.checkpointing, self._call_soon, self._global_failure, self._spawn,
                                                checkpoint_services)
        # The source vertices' split enumerators (Flink's OperatorCoordinators), None if none.
        coordinators = SourceCoordinators(core, task_executors, self._global_failure, self._spawn)
        self.coordinators = coordinators if coordinators else None
        if self.checkpoints is not None:
            self.checkpoints.coordinators = self.coordinators
            self.checkpoints.on_completed = lambda: self._run(self.core.checkpoint_completed())
        self._adaptive_timers: dict[str, asyncio.TimerHandle] = {}
        self._stopped = False
        self._awaiting_end: list[asyncio.Future[JobStatus]] = []  # stop-with-savepoint callers

    @property
    def job_id(self) -> bytes:
        return self.core.job_id

    def start(self) -> None:
        self._heartbeat_task = asyncio.ensure_future(self._heartbeat_loop())
        if self.checkpoints is not None and self.checkpoints.blocking:
            self._spawn(self._recover_off_loop(self.checkpoints))  # HA: ZooKeeper and files, in a thread
            return
        if self.checkpoints is not None:
            try:
                self.checkpoints.recover()
            except Exception as exc:  # a corrupt checkpoint: fail loudly, never start empty
                self._recovery_failed(self.checkpoints, exc)
                return
        self._start_core()

    def _start_core(self) -> None:
        """Schedules the job, its coordinators restored from its restore point first."""
        if self.coordinators is not None:
            try:
                self.coordinators.restore(self.core.restore_point)
            except Exception as exc:  # a corrupt enumerator state: fail loudly, never start empty
                self._run(self.core.start() + self.core.resources_unavailable(
                    f"Could not restore the source coordinators' state: {type(exc).__name__}: {exc}"))
                return
        self._run(self.core.start())

    def _recovery_failed(self, checkpoints: CheckpointDriver, exc: Exception) -> None:
        log.error("job %s: recovering its checkpoints failed: %s", self.job_id.hex(), exc)
        self._run(self.core.start() + self.core.resources_unavailable(
            f"Could not restore the job's state (checkpoints in {checkpoints.store.job_dir}): {exc}"))

    async def _recover_off_loop(self, checkpoints: CheckpointDriver) -> None:
        try:
            point, first_id = await asyncio.to_thread(checkpoints.load_restore_point)
        except Exception as exc:  # unreadable HA data: fail loudly, never start empty
            if not self._stopped:
                self._recovery_failed(checkpoints, exc)
            return
        if self._stopped:
            return  # suspended meanwhile (leadership lost)
        checkpoints.apply_restore_point(point, first_id)
        self._start_core()

    async def stop(self) -> None:
        """Stops this JobMaster's timers and calls; its job's checkpoints and HA data stay (the
        caller decides whether the job is globally terminal)."""
        self._stopped = True
        if self._heartbeat_task:
            self._heartbeat_task.cancel()
        if self._restart_timer is not None:
            self._restart_timer.cancel()
        for timer in self._region_timers.values():
            timer.cancel()
        for timer in self._adaptive_timers.values():
            timer.cancel()
        if self.checkpoints is not None:
            self.checkpoints.stop()
        if self.coordinators is not None:
            self.coordinators.stop()
        for task in list(self._background):
            task.cancel()
        for waiter in self._awaiting_end:
            if not waiter.done():
                waiter.set_exception(SavepointError("this JobManager stopped leading the job before it ended"))
        self._awaiting_end.clear()

    # -- events from TaskManagers --------------------------------------------------------------

    def offer_slots(self, request: cpb.OfferSlotsRequest) -> list[bytes]:
        accepted, commands = self.core.offer_slots(
            request.resource_id, request.taskmanager_address, request.data_address, list(request.offers)
        )
        if accepted and request.resource_id not in self._tm_addresses:
            self._tm_addresses[request.resource_id] = request.taskmanager_address
            self._heartbeats.monitor_target(request.resource_id, now_ms())
        self._run(commands)
        return accepted

    def update_task_state(self, update: cpb.TaskExecutionState) -> None:
        state = ExecutionState.from_proto(update.state)
        failure = update.failure if update.HasField("failure") else None
        self.core.update_records(update.execution_attempt_id, update.records_in, update.records_out, update.metrics)  # first: final totals
        self._run(self.core.update_task_state(update.execution_attempt_id, state, failure))
        if self.checkpoints is not None:
            self.checkpoints.task_state_changed(update.execution_attempt_id, state, failure.message if failure else "")
        if self.coordinators is not None and state.is_terminal():
            self.coordinators.task_ended(update.execution_attempt_id)
        if failure is not None and failure.secondary and not self._probing:
            self._probing = True
            self._spawn(self._probe_task_managers())

    def operator_event(self, attempt_id: bytes, payload: bytes) -> None:
        """A task's event for its vertex's coordinator (a source reader's registration)."""
        if self.coordinators is not None:
            self.coordinators.operator_event(attempt_id, payload)

    def is_current_attempt(self, attempt_id: bytes) -> bool:
        execution = self.core.executions.get(attempt_id)
        return execution is not None and not execution.state.is_terminal()

    def cancel(self) -> None:
        self._run(self.core.cancel())

    async def savepoint(self, target: Any, stop: bool, drain: bool = False) -> str:
        """Takes a savepoint into ``target`` (a Path). With ``stop`` it is Flink's synchronous
        savepoint: the tasks process nothing after its barrier, commit on its completion and end
        FINISHED (``drain``: after the end of their input, MAX_WATERMARK first); the answer comes
        once the job is FINISHED, so everything written before the stop is committed by then.
        Raises SavepointError."""
        if self.checkpoints is None:
            raise SavepointError("the job takes no checkpoints: savepoints need checkpointing "
                                 "(env.enable_checkpointing(ms) or execution.checkpointing.interval)")
        path = await self.checkpoints.trigger_savepoint(target, stop, drain)
        if stop:
            log.info("job %s: savepoint %s complete, the tasks end", self.job_id.hex(), path)
            self._run(self.core.stop())
            status = await self._job_end()
            if status is not JobStatus.FINISHED:
                failure = self.core.failure.message if self.core.failure is not None else ""
                raise SavepointError(f"savepoint {path} is complete, but the job ended {status.value} instead of "
                                     f"finishing{': ' + failure if failure else ''}")
        return path

    async def checkpoint(self, full: bool = False) -> int:
        """Takes a checkpoint now (Flink's manually triggered one) and answers its id once it is
        complete. Raises SavepointError (no checkpointing, tasks not running, one in progress)."""
        if self.checkpoints is None:
            raise SavepointError("the job takes no checkpoints: a checkpoint by hand needs checkpointing "
                                 "(env.enable_checkpointing(ms) or execution.checkpointing.interval)")
        return await self.checkpoints.trigger_checkpoint(full)

    def _job_end(self) -> Awaitable[JobStatus]:
        """The job's globally terminal status, once it has one."""
        waiter: asyncio.Future[JobStatus] = asyncio.get_running_loop().create_future()
        if self.core.status.is_terminal():
            waiter.set_result(self.core.status)
        else:
            self._awaiting_end.append(waiter)
        return waiter

    def acknowledge_checkpoint(self, request: cpb.AcknowledgeCheckpointRequest) -> None:
        if self.checkpoints is not None:
            self.checkpoints.acknowledge(request)

    def decline_checkpoint(self, request: cpb.DeclineCheckpointRequest) -> None:
        if self.checkpoints is not None:
            self.checkpoints.decline(request)

    def _global_failure(self, message: str) -> None:
        self._run(self.core.global_failure(message))

    def _call_soon(self, address: str, method: str, request: Any) -> None:
        if (method == "trigger_checkpoint" and self.coordinators is not None
                and self.coordinators.is_coordinated(request.execution_attempt_id)):
            # in order with the coordinator's events to the task (see source_coordinators)
            self.coordinators.send_ordered(request.execution_attempt_id, address, method, request)
            return
        self._spawn(self._call(address, method, request))

    def resources_unavailable(self, message: str) -> None:
        self._run(self.core.resources_unavailable(message))

    def task_manager_lost(self, resource_id: str, reason: str) -> None:
        if resource_id in self._tm_addresses:
            self._heartbeats.unmonitor_target(resource_id)
            del self._tm_addresses[resource_id]
            self._run(self.core.task_manager_lost(resource_id, reason))

    # -- commands ------------------------------------------------------------------------------

    def _run(self, commands: list[Command]) -> None:
        for command in commands:
            if isinstance(command, DeclareRequirements):
                # The adaptive scheduler declares its wish and runs with less: its own
                # resource-wait-timeout, not the ResourceManager's, ends a wait for slots.
                timeout = ADAPTIVE_DECLARATION_TIMEOUT_MS if self.core.adaptive is not None else job_slot_request_timeout(self.core.job_graph)
                self._rm.declare_requirements(self.job_id, self.address, command.slots, timeout)
            elif isinstance(command, StartAdaptiveTimer):
                old = self._adaptive_timers.pop(command.kind, None)
                if old is not None:
                    old.cancel()
                self._adaptive_timers[command.kind] = asyncio.get_running_loop().call_later(
                    command.delay_ms / 1000, self._adaptive_timer_elapsed, command.kind, command.epoch)
            elif isinstance(command, TriggerRescaleCheckpoint):
                self._spawn(self._rescale_checkpoint())
            elif isinstance(command, BuildDeployments):
                if self.coordinators is not None:  # the adaptive scheduler may have sized the graph anew
                    self.coordinators.follow_parallelism()
                self._spawn(self._build_deployments(command))
            elif isinstance(command, DeployTask):
                self._spawn(self._deploy(command))
            elif isinstance(command, CancelTask):
                self._spawn(self._call(command.tm_address, "cancel_task", cpb.CancelTaskRequest(execution_attempt_id=command.attempt_id)))
            elif isinstance(command, FreeSlot):
                self._spawn(self._call(command.tm_address, "free_slot", cpb.FreeSlotRequest(allocation_id=command.allocation_id, cause=command.cause)))
            elif isinstance(command, StartRestartTimer) and command.region is not None:
                log.info("job %s: restart of region %d in %d ms", self.job_id.hex(), command.region, command.delay_ms)
                self._region_timers[command.region] = asyncio.get_running_loop().call_later(
                    command.delay_ms / 1000, self._region_backoff_elapsed, command.region, command.restart)
            elif isinstance(command, StartRestartTimer):
                log.info("job %s: restart %d in %d ms", self.job_id.hex(), command.restart, command.delay_ms)
                if self._restart_timer is not None:
                    self._restart_timer.cancel()
                self._restart_timer = asyncio.get_running_loop().call_later(
                    command.delay_ms / 1000, self._restart_backoff_elapsed, command.restart
                )
            elif isinstance(command, AbortPendingCheckpoints):
                if self.checkpoints is not None:
                    self.checkpoints.abort_pending()
            elif isinstance(command, CheckpointRestored):
                if self.checkpoints is not None:
                    self.checkpoints.restored(command.checkpoint_id, command.path)
            elif isinstance(command, JobStatusChanged):
                if command.status.is_terminal():
                    waiters, self._awaiting_end = self._awaiting_end, []
                    for waiter in waiters:
                        if not waiter.done():
                            waiter.set_result(command.status)
                if self.checkpoints is not None:
                    self.checkpoints.job_status_changed(command.status)
                if self.coordinators is not None and command.status is JobStatus.RUNNING:
                    self.coordinators.job_running()
                elif self.coordinators is not None and command.status.is_terminal():
                    self.coordinators.stop()
                self._on_status(command.status, command.failure)
                if command.status.is_terminal() and self._heartbeat_task:
                    self._heartbeat_task.cancel()

    def _adaptive_timer_elapsed(self, kind: str, epoch: int) -> None:
        self._adaptive_timers.pop(kind, None)
        self._run(self.core.adaptive_timer_elapsed(kind, epoch))

    async def _rescale_checkpoint(self) -> None:
        """A checkpoint for a due rescale; its completion (``on_completed``) lets the rescale go on.
        If it cannot be taken now (one in flight, tasks not all running), the next completed one,
        periodic or not, does the same."""
        if self.checkpoints is None:  # nothing to restore: rescale at once, the state starts empty
            self.core.restore_point = None
            self._run(self.core.checkpoint_completed())
            return
        try:
            await self.checkpoints.trigger_checkpoint()
        except SavepointError as exc:
            log.info("job %s: rescale checkpoint not taken now (%s); the next one completes the rescale", self.job_id.hex(), exc)

    def _region_backoff_elapsed(self, region: int, restart: int) -> None:
        self._region_timers.pop(region, None)
        self._run(self.core.region_backoff_elapsed(region, restart))

    def _restart_backoff_elapsed(self, restart: int) -> None:
        self._restart_timer = None
        self._run(self.core.restart_backoff_elapsed(restart))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _build_deployments(self, command: BuildDeployments) -> None:
        started = time.monotonic()
        built = await asyncio.to_thread(command.build)
        log.info("job %s: %d deployment descriptors built in %.2f s", self.job_id.hex(), len(built), time.monotonic() - started)
        self._run(self.core.deployments_built(built))

    async def _deploy(self, command: DeployTask) -> None:
        async with self._te.in_flight:
            try:
                await self._te.gateway(command.tm_address).submit_task(command.request, timeout=self._te.rpc_timeout_s)
            except grpc.aio.AioRpcError as exc:
                self._run(self.core.deploy_failed(command.attempt_id, f"{exc.code().name}: {exc.details()}"))

    async def _call(self, address: str, method: str, request: Any) -> None:
        """``method``: the name of a :class:`TaskExecutorGateway` method taking ``request``."""
        try:
            async with self._te.in_flight:
                await getattr(self._te.gateway(address), method)(request, timeout=self._te.rpc_timeout_s)
        except grpc.aio.AioRpcError as exc:
            # A TaskManager that cannot be reached is found lost by the heartbeats.
            log.warning("%s to %s failed: %s", method, address, exc.code().name)

    async def _heartbeat_loop(self) -> None:
        interval = self._heartbeats.interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            for resource_id, address in list(self._tm_addresses.items()):
                self._spawn(self._heartbeat(resource_id, address))
            for resource_id in self._heartbeats.timed_out(now_ms()):
                self.task_manager_lost(resource_id, "heartbeat timed out")

    async def _probe_task_managers(self) -> None:
        """A task's broken exchange is the first sign of a lost TaskManager: ask the job's
        TaskManagers now, as often as the refused-RPC threshold needs, instead of waiting up to two
        heartbeat intervals; a dead one is found lost in well under a second."""
        try:
            for _ in range(self._heartbeats.rpc_failure_threshold):
                await asyncio.gather(*(self._heartbeat(r, a) for r, a in list(self._tm_addresses.items())))
                await asyncio.sleep(PROBE_GAP_S)
        finally:
            self._probing = False

    async def _heartbeat(self, resource_id: str, address: str) -> None:
        try:
            response = await self._te.gateway(address).heartbeat(
                cpb.HeartbeatRequest(sender="jobmaster", job_id=self.job_id),
                timeout=self._heartbeats.timeout_ms / 1000,
            )
        except grpc.aio.AioRpcError as exc:
            # Only a refused connection counts towards the failure threshold: a slow answer is
            # the heartbeat timeout's business, so a busy TaskManager is not declared lost early.
            if exc.code() is grpc.StatusCode.UNAVAILABLE and self._heartbeats.record_rpc_failure(resource_id, now_ms()):
                self.task_manager_lost(resource_id, f"connection refused: heartbeat RPCs {exc.code().name}")
        else:
            self._heartbeats.record_heartbeat(resource_id, now_ms())
            for task in response.tasks:  # the running tasks' record totals (Flink's metrics, a heartbeat behind)
                self.core.update_records(task.execution_attempt_id, task.records_in, task.records_out, task.metrics)
