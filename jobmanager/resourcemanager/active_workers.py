"""TaskManagers on demand (Flink's active ResourceManager): when to start workers, which to stop.

Pure core: the shell (jobmanager/resourcemanager/process_workers.py) tells it what it sees, the
SlotManager's unmet slot needs and the registered TaskManagers' free slots, and what became of the
workers it started (registered, exited, could not start); it answers with :class:`StartWorker` and
:class:`StopWorker` commands. Time is the caller's ``now`` in milliseconds.

The rules (Flink's ActiveResourceManager with its default resource allocation strategy):

- Demand: the slots jobs still lack, less the free slots of registered TaskManagers (the
  SlotManager hands those out at once) and the slots of workers started but not registered yet.
  Each worker brings ``slots_per_worker`` slots; as many start as cover the demand, but never more
  than ``slotmanager.number-of-slots.max`` slots in all (registered plus starting).
- Idle: a worker this ResourceManager started whose slots have all been free for
  ``resourcemanager.taskmanager-timeout`` is stopped, unless a job is still short of slots. Only
  its own workers: a TaskManager started by hand is never stopped here.
- Failure: a worker that exits before it registered, or cannot be started at all, is reported
  once with its cause (the same cause again, the worker's own id aside, is counted, not
  repeated); starts then wait
  ``resourcemanager.start-worker.retry-interval``, doubling after each further failure up to
  :data:`MAX_BACKOFF_FACTOR` times it, and the first registration resets the back-off.
"""
from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Iterable, Optional

log = logging.getLogger(__name__)

MAX_BACKOFF_FACTOR = 32  # the back-off stops growing at 32 retry intervals (3 s -> at most 96 s)


@dataclass(frozen=True)
class StartWorker:
    worker_id: str  # the TaskManager's resource id (taskmanager.resource-id)


@dataclass(frozen=True)
class StopWorker:
    worker_id: str
    reason: str


@dataclass(frozen=True)
class ReportFailure:
    """Tell the user, once per distinct cause, that workers cannot be started."""

    message: str


Command = StartWorker | StopWorker | ReportFailure


class WorkerStartError(Exception):
    """A worker could not be started: ``cause`` (compared between failures) and ``where`` (its
    output, named in the report)."""

    def __init__(self, cause: str, where: str = "") -> None:
        super().__init__(cause)
        self.cause, self.where = cause, where


def error_line(lines: list[str], error_prefix: str) -> str:
    """A worker's one-line error (``error_prefix``: ``"millstream {name}: error: "``), else its last
    line."""
    prefix = error_prefix.format(name="taskmanager")
    errors = [line for line in lines if line.startswith(prefix)]
    return errors[-1][len(prefix):] if errors else (lines[-1] if lines else "it printed nothing")


class WorkerState(enum.Enum):
    STARTING = "STARTING"      # process started, not registered yet
    REGISTERED = "REGISTERED"  # its TaskManager registered with the ResourceManager


@dataclass
class _Worker:
    worker_id: str
    state: WorkerState
    started_at_ms: int
    idle_since_ms: Optional[int] = None
    stopping: bool = False


@dataclass(frozen=True)
class TaskManagerSlots:
    """A registered TaskManager as the SlotManager sees it."""

    resource_id: str
    total: int
    free: int


class ActiveWorkers:
    """Decides which workers (TaskManager processes) to start and to stop."""

    def __init__(self, slots_per_worker: int, max_slots: Optional[int], idle_timeout_ms: int,
                 retry_interval_ms: int, name_prefix: str = "taskmanager-active") -> None:
        if slots_per_worker < 1:
            raise ValueError(f"slots_per_worker must be >= 1, got {slots_per_worker}")
        if max_slots is not None and max_slots < 0:
            raise ValueError(f"slotmanager.number-of-slots.max must be >= 0, got {max_slots}")
        self.slots_per_worker = slots_per_worker
        self.max_slots = max_slots
        self.idle_timeout_ms = idle_timeout_ms
        self.retry_interval_ms = retry_interval_ms
        self._prefix = name_prefix
        self._workers: dict[str, _Worker] = {}
        self._counter = 0
        self._failures = 0            # consecutive failed starts (reset by a registration)
        self._retry_at_ms: Optional[int] = None
        self._reported: Optional[str] = None  # the cause last reported (a repeat is not reported again)
        self.repeats = 0              # failures with the reported cause since it was reported

    # -- what the shell saw --------------------------------------------------------------------

    def registered(self, worker_id: str, now: int) -> None:
        worker = self._workers.get(worker_id)
        if worker is not None and worker.state is WorkerState.STARTING:
            worker.state = WorkerState.REGISTERED
            worker.idle_since_ms = now
            self._failures, self._retry_at_ms, self._reported, self.repeats = 0, None, None, 0

    def exited(self, worker_id: str, cause: str, now: int, where: str = "") -> list[Command]:
        """The worker's process ended (or never started: ``cause`` says why; ``where``: its output,
        named in the report but not part of the cause). Before it registered that is a failed
        start: back off, and report a new cause."""
        worker = self._workers.pop(worker_id, None)
        if worker is None or worker.stopping or worker.state is WorkerState.REGISTERED:
            if worker is not None and not worker.stopping:
                log.warning("TaskManager %s (started on demand) exited: %s", worker_id, cause)
            return []
        self._failures += 1
        factor = min(2 ** (self._failures - 1), MAX_BACKOFF_FACTOR)
        self._retry_at_ms = now + self.retry_interval_ms * factor
        # Each worker names itself in its error (TaskManager <id>: ...): the cause without its
        # own id is what repeats, or every retry of one Spark cluster without cores is news.
        same = cause.replace(worker_id, "<worker>")
        if same == self._reported:
            self.repeats += 1
            return []
        self._reported, self.repeats = same, 0
        return [ReportFailure(f"a TaskManager could not be started: {cause}{f' ({where})' if where else ''}; "
                              f"starting TaskManagers again in "
                              f"{self.retry_interval_ms * factor / 1000:g} s (and backing off while it fails)")]

    # -- decisions -----------------------------------------------------------------------------

    def check(self, now: int, unmet_slots: int, task_managers: Iterable[TaskManagerSlots]) -> list[Command]:
        """``unmet_slots``: the slots jobs declared and do not hold yet; ``task_managers``: every
        registered TaskManager. Returns the workers to start and to stop now."""
        tms = {tm.resource_id: tm for tm in task_managers}
        commands: list[Command] = []
        for worker in self._workers.values():  # a starting worker seen registered: registered
            if worker.state is WorkerState.STARTING and worker.worker_id in tms:
                self.registered(worker.worker_id, now)
        free = sum(tm.free for tm in tms.values())
        starting = sum(self.slots_per_worker for w in self._workers.values() if w.state is WorkerState.STARTING)
        demand = unmet_slots - free - starting
        commands.extend(self._stop_idle(now, tms, short=unmet_slots > free))
        if demand > 0 and (self._retry_at_ms is None or now >= self._retry_at_ms):
            have = sum(tm.total for tm in tms.values()) + starting
            wanted = -(-demand // self.slots_per_worker)
            if self.max_slots is not None:
                wanted = min(wanted, max(0, (self.max_slots - have) // self.slots_per_worker))
            for _ in range(wanted):
                commands.append(self._start(now))
        return commands

    def _start(self, now: int) -> StartWorker:
        self._counter += 1
        worker_id = f"{self._prefix}-{self._counter}"
        self._workers[worker_id] = _Worker(worker_id, WorkerState.STARTING, now)
        return StartWorker(worker_id)

    def _stop_idle(self, now: int, tms: dict[str, TaskManagerSlots], short: bool) -> list[Command]:
        commands: list[Command] = []
        for worker in self._workers.values():
            tm = tms.get(worker.worker_id)
            if worker.state is not WorkerState.REGISTERED or worker.stopping or tm is None:
                continue
            if tm.free < tm.total or short:  # in use, or about to be: not idle
                worker.idle_since_ms = None
                continue
            if worker.idle_since_ms is None:
                worker.idle_since_ms = now
            if now - worker.idle_since_ms >= self.idle_timeout_ms:
                worker.stopping = True
                commands.append(StopWorker(worker.worker_id, f"idle for {self.idle_timeout_ms} ms "
                                                             "(resourcemanager.taskmanager-timeout)"))
        return commands

    def stopped(self, worker_id: str) -> None:
        """A worker this manager stopped is gone."""
        self._workers.pop(worker_id, None)

    # -- queries -------------------------------------------------------------------------------

    def workers(self) -> dict[str, WorkerState]:
        return {w.worker_id: w.state for w in self._workers.values()}

    def retry_at_ms(self) -> Optional[int]:
        return self._retry_at_ms
