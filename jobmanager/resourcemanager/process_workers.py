"""``resourcemanager.type: process``: the ResourceManager starts local TaskManager processes when
jobs lack slots and stops the idle ones (the shell of :mod:`active_workers`, which decides).

Every :data:`CHECK_INTERVAL_S` it tells the core the SlotManager's unmet slot needs, the registered
TaskManagers' slots and which of its processes exited (with the error line a process prints before
exiting, else its last line), and runs the core's commands: a worker is ``python -m
millstream.taskmanager.launcher`` with this JobManager's configuration, ``taskmanager.resource-id``
set to the worker's id (so its registration is recognised), its output in
``<env.log.dir>/<worker id>.out``; it is a child that ends with this process
(runtime/entrypoint/children.py). Workers are started from the JobManager's event loop thread,
which lives as long as they should. Workers share this host: their ports stay as configured
(taskmanager.rpc.port defaults to a free one; a fixed one lets a single worker start).
"""
from __future__ import annotations

import asyncio
import logging
import os
import subprocess
from typing import Any, Callable, Optional

from millstream.jobmanager.resourcemanager.active_workers import (
    ActiveWorkers,
    Command,
    ReportFailure,
    StartWorker,
    StopWorker,
    TaskManagerSlots,
)
from millstream.runtime import config as cfg
from millstream.runtime.clock import now_ms
from millstream.runtime.entrypoint.children import spawn_child
from millstream.runtime.entrypoint.log_files import configured_log_dir
from millstream.runtime.entrypoint.process import ERROR_PREFIX

log = logging.getLogger(__name__)

CHECK_INTERVAL_S = 0.5
STOP_GRACE_S = 15.0


def exit_reason(log_path: str, offset: int, code: Optional[int]) -> tuple[str, str]:
    """Why a worker process ended, from what it wrote after ``offset``: its one-line error
    (``millstream taskmanager: error: ...``), else its last line; and where its output is."""
    try:
        with open(log_path, "rb") as f:
            f.seek(offset)
            lines = [line.strip() for line in f.read().decode(errors="replace").splitlines() if line.strip()]
    except OSError:
        lines = []
    prefix = ERROR_PREFIX.format(name="taskmanager")
    errors = [line for line in lines if line.startswith(prefix)]
    said = errors[-1][len(prefix):] if errors else (lines[-1] if lines else "it printed nothing")
    return f"the TaskManager process exited with code {code}: {said}", f"output: {log_path}"


class ProcessWorkers:
    """Local TaskManager processes on demand for one JobManager."""

    def __init__(self, configuration: cfg.Configuration, jobmanager_address: Callable[[], str],
                 slot_manager: Callable[[], Any]) -> None:
        """``jobmanager_address``: where the workers register (without HA); ``slot_manager``: the
        ResourceManager's current SlotManager (it is replaced on leadership changes)."""
        self.config = configuration
        self._address = jobmanager_address
        self._slot_manager = slot_manager
        max_slots = configuration.get(cfg.SLOTMANAGER_MAX_SLOTS)
        self.core = ActiveWorkers(configuration.get(cfg.TASKMANAGER_NUM_TASK_SLOTS), max_slots,
                                  configuration.get(cfg.RESOURCEMANAGER_TASKMANAGER_TIMEOUT),
                                  configuration.get(cfg.RESOURCEMANAGER_START_WORKER_RETRY_INTERVAL),
                                  name_prefix=f"taskmanager-ondemand-{os.getpid()}")
        self._log_dir = configured_log_dir(configuration)
        self.processes: dict[str, tuple[subprocess.Popen[bytes], str, int]] = {}  # worker -> process, log, offset
        self._task: Optional[asyncio.Task[None]] = None

    def start(self) -> None:
        log.info("ResourceManager type process: TaskManagers of %d slot(s) start on demand (at most %s slots), "
                 "stop after %d ms idle", self.core.slots_per_worker,
                 self.core.max_slots if self.core.max_slots is not None else "unlimited", self.core.idle_timeout_ms)
        self._task = asyncio.ensure_future(self._loop())

    async def _loop(self) -> None:
        while True:
            try:
                self.check()
            except Exception:  # a bug here must not end the loop: the next check tries again
                log.exception("the on-demand TaskManager check failed")
            await asyncio.sleep(CHECK_INTERVAL_S)

    def check(self) -> None:
        now = now_ms()
        for worker_id, (process, path, offset) in list(self.processes.items()):
            code = process.poll()
            if code is not None:
                del self.processes[worker_id]
                cause, where = exit_reason(path, offset, code)
                self._run(self.core.exited(worker_id, cause, now, where))
        slots = self._slot_manager()
        unmet = sum(p.required_slots - p.acquired_slots for p in slots.pending_jobs())
        tms = [TaskManagerSlots(tm.resource_id, tm.num_slots, tm.free_slots) for tm in slots.task_managers()]
        self._run(self.core.check(now, unmet, tms))

    def _run(self, commands: list[Command]) -> None:
        for command in commands:
            if isinstance(command, StartWorker):
                self._start_worker(command.worker_id)
            elif isinstance(command, StopWorker):
                entry = self.processes.get(command.worker_id)
                log.info("stopping TaskManager %s: %s", command.worker_id, command.reason)
                if entry is not None and entry[0].poll() is None:
                    entry[0].terminate()
            elif isinstance(command, ReportFailure):
                log.error(command.message)

    def worker_args(self, worker_id: str) -> list[str]:
        values = self.config.to_dict(as_strings=True)
        values[cfg.TASKMANAGER_RESOURCE_ID.key] = worker_id
        highly_available = self.config.get(cfg.HA_TYPE) == "ZOOKEEPER"
        target = [] if highly_available else ["--jobmanager", self._address()]
        return ["-m", "millstream.taskmanager.launcher", *target, *[f"-D{k}={v}" for k, v in sorted(values.items())]]

    def _start_worker(self, worker_id: str) -> None:
        path = os.path.join(self._log_dir, f"{worker_id}.out")
        try:
            os.makedirs(self._log_dir, exist_ok=True)
            offset = os.path.getsize(path) if os.path.exists(path) else 0
            process = spawn_child(self.worker_args(worker_id), path)
        except OSError as exc:
            self._run(self.core.exited(worker_id, f"the TaskManager process could not be started: {exc}", now_ms()))
            return
        log.info("started TaskManager %s (pid %d) for jobs waiting for slots; output: %s", worker_id, process.pid, path)
        self.processes[worker_id] = (process, path, offset)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        processes = [process for process, _, _ in self.processes.values()]
        self.processes.clear()
        for process in processes:
            if process.poll() is None:
                process.terminate()

        def wait_all() -> None:
            for process in processes:
                try:
                    process.wait(STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()

        await asyncio.to_thread(wait_all)
