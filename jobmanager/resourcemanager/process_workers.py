"""TaskManagers on demand: the shell of :mod:`active_workers` (which decides), and its ``process``
driver; the ``docker`` driver is :mod:`docker_workers`.

Every :data:`CHECK_INTERVAL_S` :class:`OnDemandWorkers` tells the core the SlotManager's unmet slot
needs, the registered TaskManagers' slots and which of its workers ended (with the error line a
worker prints before exiting, else its last line), and runs the core's commands through its
driver. A worker gets this JobManager's configuration with ``taskmanager.resource-id`` set to the
worker's id (so its registration is recognised).

``resourcemanager.type: process``: a worker is ``python -m millstream.taskmanager.launcher``, its
output in ``<env.log.dir>/<worker id>.out``, a child that ends with this process
(runtime/entrypoint/children.py). Workers are started from the JobManager's event loop thread, which
lives as long as they should. They share this host: their ports stay as configured
(taskmanager.rpc.port defaults to a free one; a fixed one lets a single worker start). With
``millstream.spark.master`` set, each worker is a Spark application on that master holding its
slots' cores until it stops (idle), which ends the application and gives them back; a worker that
gets no core within ``millstream.spark.executor-wait`` exits naming the master, a failed start
like any other.
"""
from __future__ import annotations

import asyncio
import logging
import os
import secrets
import subprocess
from typing import Any, Callable, Optional, Protocol

from millstream.jobmanager.resourcemanager.active_workers import (
    ActiveWorkers,
    Command,
    ReportFailure,
    StartWorker,
    StopWorker,
    TaskManagerSlots,
    WorkerStartError,
    error_line,
)
from millstream.jobmanager.resourcemanager.docker_workers import DockerDriver
from millstream.runtime import config as cfg
from millstream.runtime.clock import now_ms
from millstream.runtime.entrypoint.children import spawn_child
from millstream.runtime.entrypoint.log_files import configured_log_dir
from millstream.runtime.entrypoint.process import ERROR_PREFIX

log = logging.getLogger(__name__)

CHECK_INTERVAL_S = 0.5
STOP_GRACE_S = 15.0


class WorkerDriver(Protocol):
    """Starts, watches and stops workers of one kind. ``blocking``: its calls block (they run in
    a thread then); else they run on the event loop."""

    blocking: bool

    def launch(self, worker_id: str, args: list[str]) -> None:
        """Starts a TaskManager with these ``millstream taskmanager`` arguments (WorkerStartError)."""

    def exits(self) -> list[tuple[str, str, str]]:
        """The workers that ended since the last call: (worker id, cause, where)."""

    def terminate(self, worker_id: str) -> None: ...

    def close(self) -> None:
        """Stops every worker still running (blocking is fine: it runs in a thread)."""


def exit_reason(log_path: str, offset: int, code: Optional[int]) -> tuple[str, str]:
    """Why a worker process ended, from what it wrote after ``offset``; and where its output is."""
    try:
        with open(log_path, "rb") as f:
            f.seek(offset)
            lines = [line.strip() for line in f.read().decode(errors="replace").splitlines() if line.strip()]
    except OSError:
        lines = []
    return f"the TaskManager process exited with code {code}: {error_line(lines, ERROR_PREFIX)}", f"output: {log_path}"


class ProcessDriver:
    """``resourcemanager.type: process``: local child processes."""

    blocking = False

    def __init__(self, configuration: cfg.Configuration) -> None:
        self._log_dir = configured_log_dir(configuration)
        self.processes: dict[str, tuple[subprocess.Popen[bytes], str, int]] = {}  # worker -> process, log, offset

    def launch(self, worker_id: str, args: list[str]) -> None:
        path = os.path.join(self._log_dir, f"{worker_id}.out")
        try:
            os.makedirs(self._log_dir, exist_ok=True)
            offset = os.path.getsize(path) if os.path.exists(path) else 0
            process = spawn_child(["-m", "millstream.taskmanager.launcher", *args], path)
        except OSError as exc:
            raise WorkerStartError(f"the TaskManager process could not be started: {exc}") from exc
        log.info("started TaskManager %s (pid %d) for jobs waiting for slots; output: %s", worker_id, process.pid, path)
        self.processes[worker_id] = (process, path, offset)

    def exits(self) -> list[tuple[str, str, str]]:
        ended = []
        for worker_id, (process, path, offset) in list(self.processes.items()):
            code = process.poll()
            if code is not None:
                del self.processes[worker_id]
                ended.append((worker_id, *exit_reason(path, offset, code)))
        return ended

    def terminate(self, worker_id: str) -> None:
        entry = self.processes.get(worker_id)
        if entry is not None and entry[0].poll() is None:
            entry[0].terminate()

    def close(self) -> None:
        processes = [process for process, _, _ in self.processes.values()]
        self.processes.clear()
        for process in processes:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            try:
                process.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


class OnDemandWorkers:
    """TaskManagers on demand for one JobManager, through a driver."""

    def __init__(self, configuration: cfg.Configuration, jobmanager_address: Callable[[], str],
                 slot_manager: Callable[[], Any], driver: WorkerDriver) -> None:
        """``jobmanager_address``: where the workers register (without HA); ``slot_manager``: the
        ResourceManager's current SlotManager (it is replaced on leadership changes)."""
        self.config = configuration
        self._address = jobmanager_address
        self._slot_manager = slot_manager
        self.driver = driver
        self.core = ActiveWorkers(configuration.get(cfg.TASKMANAGER_NUM_TASK_SLOTS),
                                  configuration.get(cfg.SLOTMANAGER_MAX_SLOTS),
                                  configuration.get(cfg.RESOURCEMANAGER_TASKMANAGER_TIMEOUT),
                                  configuration.get(cfg.RESOURCEMANAGER_START_WORKER_RETRY_INTERVAL),
                                  # unique across JobManagers and their restarts (container names too)
                                  name_prefix=f"taskmanager-ondemand-{secrets.token_hex(3)}")
        self._task: Optional[asyncio.Task[None]] = None

    def start(self) -> None:
        log.info("ResourceManager type %s: TaskManagers of %d slot(s) start on demand (at most %s slots), "
                 "stop after %d ms idle", self.config.get(cfg.RESOURCEMANAGER_TYPE), self.core.slots_per_worker,
                 self.core.max_slots if self.core.max_slots is not None else "unlimited", self.core.idle_timeout_ms)
        if self.config.get(cfg.SCHEDULER_MODE) == "reactive" and self.core.max_slots is None:
            # a reactive job wishes every slot up to each vertex's max parallelism (128 by default):
            # TaskManagers would start for all of them (Flink runs reactive mode standalone only)
            log.warning("scheduler-mode reactive with resourcemanager.type %s and no %s: every job wishes "
                        "slots up to its max parallelism and TaskManagers start for all of them; set a limit",
                        self.config.get(cfg.RESOURCEMANAGER_TYPE), cfg.SLOTMANAGER_MAX_SLOTS.key)
        self._task = asyncio.ensure_future(self._loop())

    async def _io(self, call: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.to_thread(call, *args) if self.driver.blocking else call(*args)

    async def _loop(self) -> None:
        while True:
            try:
                await self.check()
            except Exception:  # a bug here must not end the loop: the next check tries again
                log.exception("the on-demand TaskManager check failed")
            await asyncio.sleep(CHECK_INTERVAL_S)

    async def check(self) -> None:
        for worker_id, cause, where in await self._io(self.driver.exits):
            repeats = self.core.repeats
            await self._run(self.core.exited(worker_id, cause, now_ms(), where))
            if self.core.repeats > repeats:  # reported before: one line, not the cause again
                log.info("TaskManager %s could not be started either, for the cause reported (%d repeats)",
                         worker_id, self.core.repeats)
        slots = self._slot_manager()
        unmet = sum(p.required_slots - p.acquired_slots for p in slots.pending_jobs())
        tms = [TaskManagerSlots(tm.resource_id, tm.num_slots, tm.free_slots) for tm in slots.task_managers()]
        await self._run(self.core.check(now_ms(), unmet, tms))

    async def _run(self, commands: list[Command]) -> None:
        for command in commands:
            if isinstance(command, StartWorker):
                log.info("starting TaskManager %s", command.worker_id)
                try:
                    await self._io(self.driver.launch, command.worker_id, self.worker_args(command.worker_id))
                except WorkerStartError as exc:
                    await self._run(self.core.exited(command.worker_id, exc.cause, now_ms(), exc.where))
            elif isinstance(command, StopWorker):
                log.info("stopping TaskManager %s: %s", command.worker_id, command.reason)
                await self._io(self.driver.terminate, command.worker_id)
            elif isinstance(command, ReportFailure):
                log.error(command.message)

    def worker_args(self, worker_id: str) -> list[str]:
        """``millstream taskmanager`` arguments of a worker: this JobManager and its configuration."""
        values = self.config.to_dict(as_strings=True)
        values[cfg.TASKMANAGER_RESOURCE_ID.key] = worker_id
        highly_available = self.config.get(cfg.HA_TYPE) == "ZOOKEEPER"
        target = [] if highly_available else ["--jobmanager", self._address()]
        return [*target, *[f"-D{k}={v}" for k, v in sorted(values.items())]]

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        await asyncio.to_thread(self.driver.close)


def driver_for(configuration: cfg.Configuration) -> Optional[WorkerDriver]:
    """The driver of ``resourcemanager.type`` (None: standalone, nothing started on demand)."""
    kind = configuration.get(cfg.RESOURCEMANAGER_TYPE)
    if kind == "process":
        return ProcessDriver(configuration)
    if kind == "docker":
        return DockerDriver(configuration)
    return None
