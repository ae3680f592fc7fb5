"""The JobManager process: Dispatcher, BlobServer, ResourceManager and JobMasters behind one gRPC port.

High availability (``high-availability.type: zookeeper``): the JobManager is a contender in the
leader election and serves gRPC whether it leads or not (see :mod:`jobmanager.leadership` for
what it refuses while not leading). When granted leadership under a session id it starts the
ResourceManager afresh, recovers every job of the JobGraphStore that has no result (each from its
latest completed checkpoint), finishes the cleanup of jobs a former leader left dirty, and then
confirms its leadership, which publishes its address to TaskManagers and clients. When the
leadership is revoked it drops the session id first (every fenced call is refused from then on),
suspends its jobs without deleting their checkpoints or HA data, releases its locks on them and
forgets its TaskManagers. Without HA the JobManager is granted DEFAULT_LEADER_ID at start and
nothing else changes.
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

from millstream.jobmanager.checkpoint.settings import checkpoint_options_of
from millstream.jobmanager.blob_server import BlobServerServicer, BlobStore
from millstream.jobmanager.dispatcher.dispatcher import Dispatcher, DispatcherServicer
from millstream.runtime.execution_state import JobStatus
from millstream.jobmanager.jobmaster.adaptive_scheduler import adaptive_settings
from millstream.jobmanager.jobmaster.job_master_core import JobMasterCore
from millstream.jobmanager.jobmaster.job_master_endpoint import JobMasterServicer
from millstream.jobmanager.jobmaster.job_master import JobMaster, TaskExecutorClients
from millstream.runtime.clock import now_ms
from millstream.jobmanager.dispatcher.job_persistence import JobPersistence
from millstream.jobmanager.leadership import LeadershipGuard, read_jobs_to_recover
from millstream import __version__
from millstream.jobmanager.rest.rescales import RescaleHistorySettings
from millstream.jobmanager.rest.guard import allowed_hosts
from millstream.jobmanager.rest.ports import describe as describe_ports, rest_ports
from millstream.jobmanager.rest.server import JobManagerSource, RestServer
from millstream.jobmanager.resourcemanager.resource_manager import ResourceManager, ResourceManagerServicer
from millstream.jobmanager.resourcemanager.process_workers import OnDemandWorkers, driver_for
from millstream.jobmanager.resourcemanager.slot_manager import SlotManager
from millstream.jobmanager.task_logs import TaskLogs
from millstream.proto import cluster_pb2 as cpb
from millstream.proto import cluster_pb2_grpc as cpb_grpc
from millstream.runtime import restart_strategy
from millstream.runtime import config as cfg
from millstream.runtime.rpc.fencing import FencingServerInterceptor
from millstream.runtime.ha import HighAvailabilityServices, LoopContender, create_ha_services
from millstream.runtime.entrypoint.loop_monitor import EventLoopMonitor
from millstream.runtime.metrics.prometheus import (
    JobReport,
    PrometheusReporter,
    jobmanager_families,
    process_rss_bytes,
    start_reporter,
)
from millstream.runtime.ha import HaConfigurationError, HaError
from millstream.runtime.entrypoint.process import StartupError, process_parser, run_process, until_terminated, write_ready_file
from millstream.runtime.rpc.service import RpcServer, ServerLimits
from millstream.runtime.rpc.security import ServerSecurity, cluster_credentials, server_security

log = logging.getLogger(__name__)

SERVICES = [cpb.DESCRIPTOR.services_by_name[n].full_name for n in ("Dispatcher", "BlobServer", "ResourceManager", "JobMasterService")]
FIRST_GRANT_TIMEOUT_S = 30.0  # without HA leadership is granted at once; this only bounds a broken start


class JobManager:
    """``async with JobManager(config) as jm:`` serves until the block ends."""

    def __init__(self, configuration: cfg.Configuration | None = None, *, rest: bool | None = None) -> None:
        """``rest``: serve the REST API (``rest.port``); None: only when ``rest.port`` is set (an
        in-process JobManager), True: the JobManager process's default (8081 unless set)."""
        self.config = configuration or cfg.Configuration()
        self.address = ""
        self._rest_wanted = (cfg.REST_PORT in self.config or cfg.REST_BIND_PORT in self.config) if rest is None else rest
        self.rest: RestServer | None = None
        self.rest_url = ""  # http(s)://host:port once the REST API serves
        self.prometheus: PrometheusReporter | None = None  # metrics.reporter.prom.port
        self._cleanup_task: asyncio.Task[None] | None = None
        self.loop_monitor = EventLoopMonitor("JobManager")
        self._wall_minus_monotonic_ms = int(time.time() * 1000) - now_ms()
        self.ha: HighAvailabilityServices | None = None
        self.guard = LeadershipGuard("", tokenless_allowed=True)
        self.leader_session: uuid.UUID | None = None
        self.leading = asyncio.Event()  # set while this JobManager leads and serves (jobs recovered)
        self.fatal_error: BaseException | None = None
        self._fatal = asyncio.Event()
        self._transition: asyncio.Future[None] | None = None  # the last grant's or revocation's work
        self._closing = False

    async def start(self) -> "JobManager":
        c = self.config
        host = c.get(cfg.JOBMANAGER_BIND_HOST) or c.get(cfg.JOBMANAGER_RPC_ADDRESS)
        advertised = c.get(cfg.JOBMANAGER_RPC_ADDRESS)
        max_bytes = c.get(cfg.RPC_MAX_MESSAGE_SIZE)
        interval, timeout = c.get(cfg.HEARTBEAT_INTERVAL), c.get(cfg.HEARTBEAT_TIMEOUT)
        restart_options = restart_strategy.options_of(c)
        restart_strategy.spec_from_options(restart_options)  # a bad restart-strategy.* stops the start here
        security = server_security(c, jobmanager=True)  # bad security.* options stop the start here too
        self.blobs = BlobStore(c.get(cfg.BLOB_STORAGE_DIR))
        self.task_executors = TaskExecutorClients(c.get(cfg.RPC_TIMEOUT) / 1000, max_bytes, lambda: self.guard.token,
                                                  cluster_credentials(c))
        self.resource_manager = ResourceManager(
            SlotManager(c.get(cfg.SLOT_REQUEST_TIMEOUT)),
            self.task_executors,
            self._job_master_of,
            interval,
            timeout,
        )
        # resourcemanager.type process or docker: TaskManagers started and stopped on demand
        driver = driver_for(c)
        self.workers = (OnDemandWorkers(c, lambda: self.address, lambda: self.resource_manager.slots, driver)
                        if driver is not None else None)
        self.dispatcher = Dispatcher(
            self.blobs,
            self._make_job_master,
            lambda: self.resource_manager.overview()[1],
            c.get(cfg.JOBSTORE_EXPIRATION_TIME) * 1000,
            max_finished_jobs=c.get(cfg.JOBSTORE_MAX_CAPACITY),
            collect_buffer_bytes=c.get(cfg.COLLECT_BUFFER_SIZE),
            slot_timeout_at_ms=self._slot_timeout_at_ms,
            restart_options=restart_options,
            checkpoint_options=checkpoint_options_of(c),
            exception_history_size=c.get(cfg.WEB_EXCEPTION_HISTORY_SIZE),
        )
        self.server = RpcServer("JobManager", max_bytes, interceptors=[FencingServerInterceptor(self.guard)],
                                security=security, limits=ServerLimits.of(c))
        self.task_logs = TaskLogs(self.dispatcher.job_attempts, self._taskmanager_address, self.task_executors.gateway)
        self.server.add(cpb_grpc.add_DispatcherServicer_to_server,
                        DispatcherServicer(self.dispatcher, self.overview, self.task_logs), [])
        self.server.add(cpb_grpc.add_BlobServerServicer_to_server, BlobServerServicer(self.blobs), [])
        self.server.add(cpb_grpc.add_ResourceManagerServicer_to_server, ResourceManagerServicer(self.resource_manager), [])
        self.server.add(cpb_grpc.add_JobMasterServiceServicer_to_server, JobMasterServicer(self.dispatcher), SERVICES)
        port = self.server.bind(host, c.get(cfg.JOBMANAGER_RPC_PORT))
        self.address = self.guard.address = f"{advertised}:{port}"
        try:
            self.ha = await asyncio.to_thread(create_ha_services, c, jobmanager_address=self.address,
                                              name=f"millstream-jobmanager-{port}")
        except HaError as exc:
            if isinstance(exc, HaConfigurationError):
                raise
            raise StartupError(f"JobManager cannot start its high-availability services: {exc}") from exc
        highly_available = self.ha.highly_available
        self.guard.tokenless_allowed = not highly_available  # a TaskManager without fencing: NONE mode only
        if highly_available:
            self.dispatcher.persistence = JobPersistence(self.ha)
        try:
            await self.server.start(host, port)
            if self._rest_wanted:
                await self._start_rest(host, security)
            self.prometheus = await start_reporter("JobManager", self._metric_families, host,
                                                   c.get(cfg.METRICS_PROMETHEUS_PORT))
            self.resource_manager.start()
            if self.workers is not None:
                self.workers.start()
            self.loop_monitor.start()
            self._cleanup_task = asyncio.ensure_future(self._expire_jobs())
            self._election = self.ha.jobmanager_leader_election()
            self._election.start(LoopContender(self, asyncio.get_running_loop()))
            if not highly_available:  # granted at once: serve as before, as soon as start() returns
                await asyncio.wait_for(self.leading.wait(), FIRST_GRANT_TIMEOUT_S)
        except BaseException:
            if self.rest is not None:
                await self.rest.stop()
            if self.prometheus is not None:
                await self.prometheus.stop()
            await self.server.stop(0)  # a failed start (REST port taken) leaves nothing serving
            await asyncio.to_thread(self.ha.close)
            raise
        log.info("JobManager at %s %s", self.address, "is a contender for leadership" if highly_available else "leads")
        return self

    async def _start_rest(self, rpc_host: str, security: ServerSecurity) -> None:
        """The REST API on the same event loop (its handlers only read in-memory state). When
        ``rest.port`` was left at its default and 8081 is taken, the JobManager runs without it."""
        c = self.config
        host = c.get(cfg.REST_BIND_ADDRESS) or rpc_host
        hosts = allowed_hosts((c.get(cfg.JOBMANAGER_RPC_ADDRESS), c.get(cfg.JOBMANAGER_BIND_HOST),
                               c.get(cfg.REST_BIND_ADDRESS), host, *c.get(cfg.REST_ALLOWED_HOSTS)))
        rest = RestServer(JobManagerSource(self), __version__, tls=security.tls, authenticator=security.authenticator,
                          task_logs=self.task_logs, hosts=hosts, refresh_interval_ms=c.get(cfg.WEB_REFRESH_INTERVAL),
                          max_connections=c.get(cfg.REST_MAX_CONNECTIONS),
                          header_timeout_s=c.get(cfg.REST_HEADER_TIMEOUT) / 1000,
                          idle_timeout_s=c.get(cfg.REST_IDLE_TIMEOUT) / 1000,
                          flink_dashboard=c.get(cfg.REST_WEB_FLINK_DASHBOARD),
                          rescale_settings=RescaleHistorySettings(c.get(cfg.WEB_RESCALE_HISTORY_SIZE),
                                                                  adaptive_settings(c)))
        ports, chosen = rest_ports(c)  # rest.bind-port (the first free of them), else rest.port
        key = cfg.REST_BIND_PORT.key if cfg.REST_BIND_PORT in c else cfg.REST_PORT.key
        for port in ports:
            try:
                await rest.start(host, port)
                break
            except OSError as exc:
                error = exc
        else:
            where = f"{host}:{describe_ports(ports)}" if len(ports) == 1 else f"{host} at any port of {describe_ports(ports)}"
            if chosen:
                raise StartupError(f"The REST API cannot listen on {where} ({key}): {error.strerror or error}") from error
            log.warning("REST API not started: %s is taken (%s); set %s (0: any free port)",
                        where, error.strerror or error, cfg.REST_PORT.key)
            return
        self.rest, self.rest_url = rest, rest.url
        log.info("REST API serving at %s", rest.url)

    # -- leadership (LeaderContender; called on the loop through LoopContender) -----------------

    def grant_leadership(self, session_id: uuid.UUID) -> None:
        if self._closing or self.leader_session == session_id:
            return
        log.info("JobManager %s granted leadership, session %s", self.address, session_id)
        self.leader_session = session_id
        self.guard.grant(session_id)  # fenced calls carrying this session are served from now on
        self._chain(self._become_leader(session_id))

    def revoke_leadership(self) -> None:
        if self.leader_session is None:
            return
        log.warning("JobManager %s lost its leadership (session %s)", self.address, self.leader_session)
        self.leader_session = None
        self.guard.revoke()  # first: every fenced call is refused from here on
        self.leading.clear()
        if not self._closing:  # stop() stops the JobMasters itself; jobs keep their last status
            self._chain(self._step_down())

    def handle_error(self, error: BaseException) -> None:
        log.critical("JobManager %s: the leader election failed: %s", self.address, error)
        self.fatal_error = error
        self._fatal.set()

    def _chain(self, work: Any) -> None:
        """Grants and revocations do their work one after the other, in order."""
        previous = self._transition

        async def run() -> None:
            if previous is not None:
                await asyncio.wait([previous])
            await work

        self._transition = asyncio.ensure_future(run())

    async def _become_leader(self, session_id: uuid.UUID) -> None:
        assert self.ha is not None
        self.resource_manager.reset(SlotManager(self.config.get(cfg.SLOT_REQUEST_TIMEOUT)))
        try:
            plan, payloads = await asyncio.to_thread(read_jobs_to_recover, self.ha.job_graph_store(),
                                                     self.ha.job_result_store())
        except Exception as exc:  # unreadable HA storage: stop loudly, never go on without the jobs
            log.critical("JobManager %s: recovering the jobs from HA storage failed: %s", self.address, exc)
            self.handle_error(exc)
            return
        if self.leader_session != session_id:
            return  # revoked meanwhile: the revocation releases what was locked
        for job_id in plan.clean_up:
            self.dispatcher.clean_up_terminated(job_id)
        for job_id, reason in plan.unrecoverable.items():  # loudly, and the other jobs go on
            log.critical("JobManager %s: %s; the job does not run and stays in HA storage", self.address, reason)
            self.dispatcher.unrecoverable(job_id, reason)
        for job_id in plan.recover:
            try:
                self.dispatcher.recover(cpb.SubmitJobRequest.FromString(payloads[job_id]))
            except Exception as exc:  # a stored job that cannot run again: loudly, and the rest go on
                log.critical("job %s cannot be recovered: %s", job_id.hex(), exc)
                self.handle_error(exc)
                return
        if plan.recover or plan.clean_up:
            log.info("JobManager %s recovered %d job(s), cleans up %d finished one(s)", self.address,
                     len(plan.recover), len(plan.clean_up))
        self.guard.serving_clients = True
        self._election.confirm_leadership(session_id, self.address)
        self.leading.set()

    async def _step_down(self) -> None:
        assert self.ha is not None
        released = self.dispatcher.suspend_all()
        self.resource_manager.reset(SlotManager(self.config.get(cfg.SLOT_REQUEST_TIMEOUT)))
        if self.dispatcher.persistence is not None:
            try:
                await asyncio.to_thread(self.dispatcher.persistence.release, released)  # type: ignore[arg-type]
            except Exception as exc:  # the locks go with the ZooKeeper session anyway
                log.warning("JobManager %s: releasing its HA locks failed: %s", self.address, exc)

    def _job_master_of(self, job_id: bytes) -> JobMaster | None:
        return self.dispatcher.running_job_master(job_id)

    def _slot_timeout_at_ms(self, job_id: bytes) -> int | None:
        """The wall-clock time a job still waiting for slots fails with "not enough slots"."""
        deadline = self.resource_manager.slots.requirements_deadline(job_id)
        if deadline is None:
            return None
        return deadline + self._wall_minus_monotonic_ms  # one offset: the same deadline in every summary

    def _make_job_master(self, core: JobMasterCore, on_status: Any, checkpoint_services: Any = None) -> JobMaster:
        c = self.config
        settings = adaptive_settings(c)
        if settings is not None:
            core.enable_adaptive(settings)
        return JobMaster(
            core,
            self.address,
            self.resource_manager,
            self.task_executors,
            on_status,
            c.get(cfg.HEARTBEAT_INTERVAL),
            c.get(cfg.HEARTBEAT_TIMEOUT),
            checkpoint_services,
        )

    def _taskmanager_address(self, resource_id: str) -> str | None:
        info = self.resource_manager.slots.task_manager(resource_id)
        return info.address if info is not None else None

    def overview(self) -> cpb.ClusterOverview:
        tms, total, free = self.resource_manager.overview()
        statuses = [r.status.value for r in self.dispatcher.jobs.values()]
        return cpb.ClusterOverview(
            taskmanagers=tms,
            slots_total=total,
            slots_available=free,
            jobs_running=sum(1 for s in statuses if s in ("CREATED", "RUNNING", "FAILING", "CANCELLING", "RESTARTING")),
            jobs_finished=statuses.count("FINISHED"),
            jobs_failed=statuses.count("FAILED"),
            jobs_cancelled=statuses.count("CANCELED"),
            max_event_loop_lag_ms=round(self.loop_monitor.max_lag_ms),
        )

    def _metric_families(self) -> list[Any]:
        """The Prometheus reporter's scrape (on this loop): the cluster's figures and, per job with
        a JobMaster, its uptime, restarts and checkpoint figures."""
        tms, total, free = self.resource_manager.overview()
        now = int(time.time() * 1000)
        jobs = []
        for record in self.dispatcher.jobs.values():
            master = record.job_master
            if master is None:
                continue
            running_since = record.status_timestamps.get(JobStatus.RUNNING.value)
            uptime = now - running_since if record.status is JobStatus.RUNNING and running_since else 0
            checkpoints = master.checkpoints.summary() if master.checkpoints is not None else None
            jobs.append(JobReport(
                record.job_id.hex(), record.job_name, uptime, master.core.num_restarts,
                completed_checkpoints=checkpoints.num_completed if checkpoints else 0,
                failed_checkpoints=checkpoints.num_failed if checkpoints else 0,
                in_progress_checkpoints=checkpoints.num_in_progress if checkpoints else 0,
                last_checkpoint_duration_ms=checkpoints.last_duration_ms if checkpoints else 0,
                last_checkpoint_size=checkpoints.last_size_bytes if checkpoints else 0,
            ))
        host = self.address.rpartition(":")[0]
        return jobmanager_families(host, tms, total, free, len(jobs), process_rss_bytes(), jobs)

    async def _expire_jobs(self) -> None:
        while True:
            await asyncio.sleep(10)
            self.dispatcher.expire_finished()

    async def stop(self, grace: float = 2.0) -> None:
        """Stops serving. Under HA the jobs stay in HA storage (a standby recovers them); the
        ZooKeeper session ends, so the leadership passes on."""
        self._closing = True
        if self._cleanup_task:
            self._cleanup_task.cancel()
        self.loop_monitor.stop()
        if self.rest is not None:
            await self.rest.stop()
        if self.prometheus is not None:
            await self.prometheus.stop()
        for record in self.dispatcher.jobs.values():
            if record.job_master is not None:
                await record.job_master.stop()
        if self.workers is not None:
            await self.workers.stop()
        await self.resource_manager.stop()
        await self.server.stop(grace)
        await self.task_executors.close()
        if self.ha is not None:
            await asyncio.to_thread(self.ha.close)
        self.blobs.close()

    async def wait_fatal(self) -> BaseException:
        """Returns the error that makes this JobManager unusable (the leader election failed, HA
        storage unreadable on recovery); the process then exits."""
        await self._fatal.wait()
        assert self.fatal_error is not None
        return self.fatal_error

    async def __aenter__(self) -> "JobManager":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def serve(configuration: cfg.Configuration, ready_file: str | None = None) -> None:
    """Runs a JobManager until SIGTERM/SIGINT; writes its address to ``ready_file`` once serving."""
    async with JobManager(configuration, rest=True) as jm:
        print(f"JobManager serving at {jm.address}", flush=True)
        if jm.rest_url:
            print(f"REST API serving at {jm.rest_url}", flush=True)
        if ready_file:
            write_ready_file(ready_file, jm.address)
        terminated = asyncio.ensure_future(until_terminated())
        fatal = asyncio.ensure_future(jm.wait_fatal())
        await asyncio.wait([terminated, fatal], return_when=asyncio.FIRST_COMPLETED)
        terminated.cancel()
        fatal.cancel()
        if jm.fatal_error is not None:
            raise HaFatalError(f"JobManager {jm.address}: {jm.fatal_error}") from jm.fatal_error
    log.info("JobManager stopped")


class HaFatalError(StartupError):
    """The JobManager cannot go on (its leader election failed, or HA storage is unreadable)."""


def main(argv: list[str] | None = None) -> None:
    parser = process_parser("millstream jobmanager")
    parser.add_argument("--ready-file", help="write the serving address here once up")
    args = parser.parse_args(argv)
    run_process("jobmanager", args, lambda configuration: serve(configuration, args.ready_file))


if __name__ == "__main__":
    main()
