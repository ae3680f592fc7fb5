"""The Prometheus reporter (``metrics.reporter.prom.port``): every JobManager and TaskManager
process serves ``/metrics`` in Prometheus' text format, with Flink's PrometheusReporter names
and labels so Flink dashboards and alerts carry over.

Names are the logical scope joined by underscores behind ``flink_``
(``flink_taskmanager_job_task_numRecordsIn``, ``flink_jobmanager_job_uptime``, user metrics
``flink_taskmanager_job_task_operator_<group>_<name>``); the scope's variables are labels
(``job_id``, ``job_name``, ``task_name``, ``subtask_index``, ``task_attempt_num``, ``tm_id``,
``host``, ``operator_name``, and a key/value group's key). Every value is a gauge, as Flink reports
counters too.

The families are built at scrape time from what the process keeps anyway (the tasks' latest
snapshots, the jobs' records): a :class:`CallbackCollector` calls the process's read function on
the process's event loop, since the HTTP server is an aiohttp site on that loop, so the scrape
reads state without locks and costs nothing between scrapes.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric

from millstream.runtime.config import METRICS_PROMETHEUS_PORT, parse_port_range
from millstream.runtime.metrics.system import process_rss_bytes

__all__ = [
"process_rss_bytes", "TaskReport", "JobReport", "taskmanager_families",
    "jobmanager_families", "CallbackCollector", "PrometheusReporter",
]

log = logging.getLogger(__name__)

_INVALID = re.compile(r"[^A-Za-z0-9_]")


def _name(*parts: str) -> str:
    return _INVALID.sub("_", "_".join(("flink",) + parts))


class _Families:
    """Gauge families by name, in first-seen order."""

    def __init__(self) -> None:
        self._by_name: dict[str, Metric] = {}

    def add(self, name: str, labels: Mapping[str, str], value: float, doc: str = "") -> None:
        family = self._by_name.get(name)
        if family is None:
            family = self._by_name[name] = Metric(name, doc or name, "gauge")
        family.add_sample(name, dict(labels), float(value))

    def families(self) -> list[Metric]:
        return list(self._by_name.values())


@dataclass(frozen=True)
class TaskReport:
    """One running task of a TaskManager: its identity and latest snapshot."""

    job_id: str
    job_name: str
    task_name: str
    subtask_index: int
    attempt: int
    metrics: Mapping[str, float]
    # identifier -> (name below the task scope, extra labels): the user metrics; a snapshot key
    # without a descriptor is a task metric named as its key (numRecordsIn, ...).
    descriptors: Mapping[str, tuple[str, Mapping[str, str]]] = field(default_factory=dict)


def taskmanager_families(tm_id: str, host: str, slots_total: int, slots_free: int, heartbeats: int,
                         rss_bytes: int, tasks: Iterable[TaskReport]) -> list[Metric]:
    """The TaskManager's families: its slots, memory and heartbeats, and each task's metrics."""
    out = _Families()
    tm_labels = {"host": host, "tm_id": tm_id}
    out.add(_name("taskmanager", "Status", "taskSlotsTotal"), tm_labels, slots_total, "Slots of this TaskManager.")
    out.add(_name("taskmanager", "Status", "taskSlotsAvailable"), tm_labels, slots_free, "Free slots of this TaskManager.")
    out.add(_name("taskmanager", "Status", "ProcessTree", "Memory", "RSS"), tm_labels, rss_bytes,
            "Resident memory of the TaskManager process and its children (the embedded Spark JVM, its Python workers), bytes.")
    out.add(_name("taskmanager", "Status", "numHeartbeatsReceived"), tm_labels, heartbeats,
            "Heartbeat requests this TaskManager answered (JobMasters and the ResourceManager).")
    for task in tasks:
        labels = {**tm_labels, "job_id": task.job_id, "job_name": task.job_name, "task_name": task.task_name,
                  "subtask_index": str(task.subtask_index), "task_attempt_num": str(task.attempt)}
        for identifier, value in task.metrics.items():
            described = task.descriptors.get(identifier)
            if described is None:
                out.add(_name("taskmanager", "job", "task", identifier), labels, value)
            else:
                name, extra = described
                out.add(_name("taskmanager", "job", "task", name), {**labels, **extra}, value)
    return out.families()


@dataclass(frozen=True)
class JobReport:
    """One job the JobManager runs (Flink keeps job metrics while the job's JobMaster lives)."""

    job_id: str
    job_name: str
    uptime_ms: int
    num_restarts: int
    completed_checkpoints: int = 0
    failed_checkpoints: int = 0
    in_progress_checkpoints: int = 0
    last_checkpoint_duration_ms: int = 0
    last_checkpoint_size: int = 0


def jobmanager_families(host: str, taskmanagers: int, slots_total: int, slots_free: int, running_jobs: int,
                        rss_bytes: int, jobs: Iterable[JobReport]) -> list[Metric]:
    """The JobManager's families: the cluster's figures, its memory and each running job's."""
    out = _Families()
    jm = {"host": host}
    out.add(_name("jobmanager", "numRegisteredTaskManagers"), jm, taskmanagers)
    out.add(_name("jobmanager", "taskSlotsTotal"), jm, slots_total)
    out.add(_name("jobmanager", "taskSlotsAvailable"), jm, slots_free)
    out.add(_name("jobmanager", "numRunningJobs"), jm, running_jobs)
    out.add(_name("jobmanager", "Status", "ProcessTree", "Memory", "RSS"), jm, rss_bytes,
            "Resident memory of the JobManager process, bytes.")
    for job in jobs:
        labels = {**jm, "job_id": job.job_id, "job_name": job.job_name}
        out.add(_name("jobmanager", "job", "uptime"), labels, job.uptime_ms, "Milliseconds the job has been running.")
        out.add(_name("jobmanager", "job", "numRestarts"), labels, job.num_restarts)
        out.add(_name("jobmanager", "job", "numberOfCompletedCheckpoints"), labels, job.completed_checkpoints)
        out.add(_name("jobmanager", "job", "numberOfFailedCheckpoints"), labels, job.failed_checkpoints)
        out.add(_name("jobmanager", "job", "numberOfInProgressCheckpoints"), labels, job.in_progress_checkpoints)
        out.add(_name("jobmanager", "job", "totalNumberOfCheckpoints"), labels,
                job.completed_checkpoints + job.failed_checkpoints + job.in_progress_checkpoints)
        out.add(_name("jobmanager", "job", "lastCheckpointDuration"), labels, job.last_checkpoint_duration_ms)
        out.add(_name("jobmanager", "job", "lastCheckpointSize"), labels, job.last_checkpoint_size)
    return out.families()


class CallbackCollector:
    """A prometheus_client collector whose families are built by ``read`` at each scrape."""

    def __init__(self, read: Callable[[], list[Metric]]) -> None:
        self._read = read

    def collect(self) -> list[Metric]:
        return self._read()


class PrometheusReporter:
    """Serves ``GET /metrics`` on the first free port of a range, on the caller's event loop."""

    def __init__(self, process: str, read: Callable[[], list[Metric]]) -> None:
        self._process = process
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(CallbackCollector(read))
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self, host: str, ports: range) -> int:
        """Binds the first free port of ``ports`` (0: any); an OSError naming the range if none is."""
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/", self._metrics)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        last: OSError | None = None
        for port in ports:
            site = web.TCPSite(runner, host, port)
            try:
                await site.start()
            except OSError as exc:
                last = exc
                continue
            self._runner = runner
            self.port = int(runner.addresses[0][1])
            log.info("%s: Prometheus metrics at http://%s:%d/metrics", self._process, host or "0.0.0.0", self.port)
            return self.port
        await runner.cleanup()
        span = f"{ports.start}" if len(ports) == 1 else f"{ports.start}-{ports.stop - 1}"
        raise OSError(f"{self._process}: no free port for the Prometheus reporter in {span} on {host}: {last}")

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        body: Any = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def start_reporter(process: str, read: Callable[[], list[Metric]], host: str,
                         port_spec: str | None) -> PrometheusReporter | None:
    """The process's reporter when ``metrics.reporter.prom.port`` is set (a bad value raises
    ConfigurationError naming the key). No free port in the range is logged and the process runs on without
    a reporter, as Flink's does."""
    if not port_spec:
        return None
    ports = parse_port_range(port_spec, METRICS_PROMETHEUS_PORT.key)
    reporter = PrometheusReporter(process, read)
    try:
        await reporter.start(host, ports)
    except OSError as exc:
        log.error("%s", exc)
        return None
    return reporter
