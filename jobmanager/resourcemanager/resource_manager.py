"""The ResourceManager shell: TaskManager registration, heartbeats and the SlotManager's commands."""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

import grpc

from millstream.runtime.heartbeat import HeartbeatMonitor
from millstream.jobmanager.jobmaster.job_master import JobMaster, TaskExecutorClients
from millstream.runtime.clock import now_ms
from millstream.jobmanager.resourcemanager.slot_manager import AllocateSlot, Command, FreeSlots, RequirementsTimedOut, SlotManager
from millstream.proto import cluster_pb2 as cpb
from millstream.proto import cluster_pb2_grpc as cpb_grpc

log = logging.getLogger(__name__)


def slot_report_entries(report: cpb.SlotReport) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(s.slot_index, s.allocation_id or None, s.job_id or None) for s in report.slots]


class ResourceManager:
    def __init__(
        self,
        slot_manager: SlotManager,
        task_executors: TaskExecutorClients,
        job_master: Callable[[bytes], JobMaster | None],
        heartbeat_interval_ms: int,
        heartbeat_timeout_ms: int,
    ) -> None:
        self.slots = slot_manager
        self._te = task_executors
        self._job_master = job_master
        self._interval_ms = heartbeat_interval_ms
        self._timeout_ms = heartbeat_timeout_ms
        self._heartbeats = HeartbeatMonitor[str](heartbeat_interval_ms, heartbeat_timeout_ms)
        self._resources: dict[str, cpb.TaskManagerResources] = {}  # each TaskManager's latest, from its heartbeat
        self._background: set[asyncio.Task[Any]] = set()
        self._loop_task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._loop_task = asyncio.ensure_future(self._heartbeat_loop())

    def reset(self, slot_manager: SlotManager) -> None:
        """A leadership starts or ends: no TaskManager is registered any more (they register
        again with the leader, under its session id) and no slot is known; calls in flight are
        dropped. The heartbeat loop goes on (it has nobody to ask)."""
        for task in list(self._background):
            task.cancel()
        for resource_id in self._heartbeats.targets():
            tm = self.slots.task_manager(resource_id)
            if tm is not None:
                self._te.forget(tm.address)
        self.slots = slot_manager
        self._heartbeats = HeartbeatMonitor[str](self._interval_ms, self._timeout_ms)

    async def stop(self) -> None:
        if self._loop_task:
            self._loop_task.cancel()
        for task in list(self._background):
            task.cancel()

    # -- TaskManager events --------------------------------------------------------------------

    def register(self, request: cpb.RegisterTaskManagerRequest) -> cpb.RegisterTaskManagerResponse:
        if request.num_slots < 1 or not request.address or not request.resource_id:
            raise ValueError("A TaskManager registers with a resource id, an address and at least one slot")
        old = self.slots.task_manager(request.resource_id)
        if old is not None:
            # The same TaskManager reconnecting (its tasks may still run): its report keeps its slots.
            self._te.forget(old.address)
        registration_id, commands = self.slots.register_task_manager(
            request.resource_id,
            request.address,
            request.data_address,
            request.num_slots,
            slot_report_entries(request.slot_report),
            now_ms(),
        )
        self._heartbeats.monitor_target(request.resource_id, now_ms())
        self._run(commands)
        return cpb.RegisterTaskManagerResponse(
            registration_id=registration_id,
            heartbeat_interval_ms=self._interval_ms,
            heartbeat_timeout_ms=self._timeout_ms,
        )

    def slot_report(self, request: cpb.SlotReportRequest) -> None:
        self._run(
            self.slots.report_slots(request.resource_id, request.registration_id, slot_report_entries(request.slot_report), now_ms())
        )

    def disconnect(self, request: cpb.TaskManagerRef) -> None:
        tm = self.slots.task_manager(request.resource_id)
        if tm is not None and tm.registration_id == request.registration_id:
            self._lost(request.resource_id, request.reason or "disconnected", graceful=True)

    def _lost(self, resource_id: str, reason: str, graceful: bool = False) -> None:
        tm = self.slots.task_manager(resource_id)
        log.log(logging.INFO if graceful else logging.WARNING, "TaskManager %s %s: %s", resource_id, "left" if graceful else "lost", reason)
        self._heartbeats.unmonitor_target(resource_id)
        self._resources.pop(resource_id, None)
        jobs = {s.job_id for s in tm.slots if s.job_id} if tm else set()
        if tm is not None:
            self._te.forget(tm.address)
        self._run(self.slots.unregister_task_manager(resource_id, reason, now_ms()))
        for job_id in jobs:
            job_master = self._job_master(job_id)
            if job_master is not None:
                job_master.task_manager_lost(resource_id, reason)

    # -- JobMaster gateway ---------------------------------------------------------------------

    def declare_requirements(self, job_id: bytes, jobmaster_address: str, slots: int, timeout_ms: int | None = None) -> None:
        if slots == 0:
            self._run(self.slots.job_finished(job_id, now_ms()))
        else:
            self._run(self.slots.declare_requirements(job_id, jobmaster_address, slots, now_ms(), timeout_ms))

    def overview(self) -> tuple[int, int, int]:
        o = self.slots.overview()
        return o.task_managers, o.total_slots, o.free_slots

    def resources(self, resource_id: str) -> cpb.TaskManagerResources | None:
        """A TaskManager's machine and memory as its latest heartbeat reported them (None: none yet)."""
        return self._resources.get(resource_id)

    def last_heartbeat_wall_ms(self, resource_id: str) -> int:
        """Wall-clock time a TaskManager was last heard from (0: unknown)."""
        last = self._heartbeats.last_heartbeat(resource_id)
        if last is None:
            return 0
        return int(time.time() * 1000) - (now_ms() - last)

    # -- commands ------------------------------------------------------------------------------

    def _run(self, commands: list[Command]) -> None:
        for command in commands:
            if isinstance(command, AllocateSlot):
                self._spawn(self._allocate(command))
            elif isinstance(command, FreeSlots):
                for allocation_id in command.allocation_ids:
                    self._spawn(self._free(command.tm_address, allocation_id, command.cause))
            elif isinstance(command, RequirementsTimedOut):
                job_master = self._job_master(command.job_id)
                if job_master is not None:
                    job_master.resources_unavailable(command.message)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _allocate(self, command: AllocateSlot) -> None:
        request = cpb.RequestSlotRequest(
            slot_index=command.slot_index,
            job_id=command.job_id,
            allocation_id=command.allocation_id,
            jobmaster_address=command.jobmaster_address,
            registration_id=command.registration_id,
        )
        try:
            async with self._te.in_flight:
                await self._te.gateway(command.tm_address).request_slot(request, timeout=self._te.rpc_timeout_s)
        except grpc.aio.AioRpcError as exc:
            log.warning("RequestSlot to %s failed: %s %s", command.resource_id, exc.code().name, exc.details())
            self._run(self.slots.allocation_failed(command.allocation_id, exc.details() or exc.code().name, now_ms()))
        else:
            self._run(self.slots.allocation_confirmed(command.allocation_id, now_ms()))

    async def _free(self, address: str, allocation_id: bytes, cause: str) -> None:
        try:
            async with self._te.in_flight:
                await self._te.gateway(address).free_slot(
                    cpb.FreeSlotRequest(allocation_id=allocation_id, cause=cause), timeout=self._te.rpc_timeout_s
                )
        except grpc.aio.AioRpcError as exc:
            log.info("FreeSlot to %s failed: %s", address, exc.code().name)

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval_ms / 1000)
            for info in [self.slots.task_manager(rid) for rid in self._heartbeats.targets()]:
                if info is not None:
                    self._spawn(self._heartbeat(info.resource_id, info.address, info.registration_id))
            for resource_id in self._heartbeats.timed_out(now_ms()):
                self._lost(resource_id, f"no heartbeat for {self._timeout_ms} ms")
            self._run(self.slots.check_timeouts(now_ms()))

    async def _heartbeat(self, resource_id: str, address: str, registration_id: str) -> None:
        request = cpb.HeartbeatRequest(sender="resourcemanager", registration_id=registration_id)
        try:
            response = await self._te.gateway(address).heartbeat(request, timeout=self._timeout_ms / 1000)
        except grpc.aio.AioRpcError as exc:
            # Only a refused connection counts towards the failure threshold (see JobMaster._heartbeat).
            if exc.code() is grpc.StatusCode.UNAVAILABLE and self._heartbeats.record_rpc_failure(resource_id, now_ms()):
                self._lost(resource_id, f"connection refused: heartbeat RPCs {exc.code().name}")
            return
        self._heartbeats.record_heartbeat(resource_id, now_ms())
        if response.HasField("resources"):
            self._resources[resource_id] = response.resources
        self._run(self.slots.report_slots(resource_id, registration_id, slot_report_entries(response.slot_report), now_ms()))


class ResourceManagerServicer(cpb_grpc.ResourceManagerServicer):
    def __init__(self, resource_manager: ResourceManager) -> None:
        self.rm = resource_manager

    async def RegisterTaskManager(self, request, context):  # noqa: N802, ANN001, ANN201
        try:
            return self.rm.register(request)
        except ValueError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))

    async def SendSlotReport(self, request, context):  # noqa: N802, ANN001, ANN201
        self.rm.slot_report(request)
        return cpb.Empty()

    async def DisconnectTaskManager(self, request, context):  # noqa: N802, ANN001, ANN201
        self.rm.disconnect(request)
        return cpb.Empty()
