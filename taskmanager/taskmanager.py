"""The TaskManager process: a TaskExecutor gRPC server, a SparkHost, and its ResourceManager link.

The JobManager it serves is the leader its HA services' leader retrieval names (Flink's
TaskExecutor with its ResourceManager leader retriever): without HA (``high-availability.type:
NONE``) the fixed ``--jobmanager`` address (or ``jobmanager.rpc.*``) under the default leader id;
with ZooKeeper whichever JobManager leads. On a new leader the TaskManager leaves the old one
(cancels its tasks, frees its slots, closes its channels) and registers with the new one carrying
its session id; on "no leader" it leaves the old one and waits.
"""
from __future__ import annotations

import asyncio
import logging
import tempfile
import uuid
from typing import Any

import grpc
from tenacity import AsyncRetrying, before_sleep_log, retry_if_exception, stop_after_delay, wait_exponential_jitter

from grpc_health.v1 import health_pb2

from millstream.proto import cluster_pb2 as cpb
from millstream.proto import cluster_pb2_grpc as cpb_grpc
from millstream.runtime import config as cfg
from millstream.runtime.rpc.fencing import FencingServerInterceptor
from millstream.runtime.ha import HaError, HighAvailabilityServices, LeaderInformation, LoopListener, create_ha_services
from millstream.runtime.metrics.prometheus import (
    PrometheusReporter,
    TaskReport,
    start_reporter,
    taskmanager_families,
)
from millstream.runtime.metrics.system import process_tree_rss_bytes
from millstream.runtime.entrypoint.process import StartupError, until_terminated, write_ready_file
from millstream.runtime.rpc.service import RpcServer, ServerLimits, check_bindable, is_unavailable
from millstream.runtime.rpc.security import cluster_credentials, server_security
from millstream.runtime.rpc.tls import tls_problem, tls_settings
from millstream.taskmanager.spark.host_config import (  # noqa: F401 (spark_conf, address_towards: re-exported)
    address_towards, check_slots, external_master, spark_conf, spark_host_for, start_spark_host, taskmanager_hosts)
from millstream.taskmanager.spark.host import NoSparkCores, SparkHost
from millstream.taskmanager.task_body import NetworkSettings
from millstream.taskmanager.task_output import TaskOutputStore
from millstream.taskmanager.task_executor import TaskExecutor, TaskExecutorServicer

log = logging.getLogger(__name__)

SERVICES = [cpb.DESCRIPTOR.services_by_name["TaskExecutor"].full_name]
_retry_log = before_sleep_log(log, logging.WARNING)


def network_settings(configuration: cfg.Configuration) -> NetworkSettings:
    """The exchange settings this TaskManager's tasks use; each must be at least 1."""
    for option in (cfg.NETWORK_BUFFERS_PER_CHANNEL, cfg.NETWORK_MAX_BUFFERS_PER_CHANNEL):
        if configuration.get(option) < 1:
            raise cfg.ConfigurationError(f"{option.key}: expected at least 1, got {configuration.get(option)}")
    return NetworkSettings(
        buffers_per_channel=configuration.get(cfg.NETWORK_BUFFERS_PER_CHANNEL),
        max_buffers_per_channel=configuration.get(cfg.NETWORK_MAX_BUFFERS_PER_CHANNEL),
        tls=tls_settings(configuration),
        io_timing=configuration.get(cfg.METRICS_TASK_IO_TIMING),
    )


def task_output_store(configuration: cfg.Configuration) -> TaskOutputStore:
    """The bounds of the task attempts' captured output (``taskmanager.task-output.*``)."""
    try:
        return TaskOutputStore(configuration.get(cfg.TASK_OUTPUT_MAX_SIZE), configuration.get(cfg.TASK_OUTPUT_RETAINED_ATTEMPTS))
    except ValueError as exc:
        raise cfg.ConfigurationError(str(exc)) from exc


class TaskManager:
    """``async with TaskManager(config, "host:port") as tm:`` registers and serves until the block ends.

    ``spark``: a started SparkHost to share (tests run several TaskManagers in one process, and a
    process has one SparkContext); without it the TaskManager starts and owns its own.
    ``owns_spark``: the given ``spark`` is this TaskManager's, maybe still booting (the process
    entry point forks its JVM before importing this module): it waits for it and stops it.
    """

    def __init__(
        self,
        configuration: cfg.Configuration | None,
        jobmanager_address: str | None = None,
        spark: SparkHost | None = None,
        resource_id: str | None = None,
        registration_timeout_s: float = 60.0,
        forward_printed_lines: bool = True,
        owns_spark: bool = False,
    ) -> None:
        self.config = configuration or cfg.Configuration()
        # Without HA the one JobManager; with HA the leader of the moment (see _follow_leader).
        self.jobmanager_address = jobmanager_address or (
            f"{self.config.get(cfg.JOBMANAGER_RPC_ADDRESS)}:{self.config.get(cfg.JOBMANAGER_RPC_PORT)}")
        self.resource_id = (resource_id or self.config.get(cfg.TASKMANAGER_RESOURCE_ID)
                            or f"taskmanager-{uuid.uuid4().hex[:12]}")
        self.num_slots = self.config.get(cfg.TASKMANAGER_NUM_TASK_SLOTS)
        self._spark = spark
        self._owns_spark = spark is None or owns_spark
        self._registration_timeout_s = registration_timeout_s
        # Tasks' printed lines go to this process's stdout and to the job's clients; an embedded
        # TaskManager's stdout is the client's console already, so it does not send them too.
        self._forward_printed_lines = forward_printed_lines
        self._work = tempfile.TemporaryDirectory(prefix="millstream-tm-")
        self._link_task: asyncio.Task[None] | None = None
        self._follow_task: asyncio.Task[None] | None = None
        self._leaders: asyncio.Queue[LeaderInformation | None] = asyncio.Queue()
        self._ha: HighAvailabilityServices | None = None
        self._retrieval: Any = None
        self.leader: LeaderInformation | None = None  # the leader registered with, or being registered with
        self.leader_changes = 0  # how often it left a leader (for tests and logs)
        self._cancel_timeout_s = self.config.get(cfg.TASK_CANCELLATION_TIMEOUT) / 1000
        self.fatal_error: str | None = None  # why this TaskManager cannot run tasks any more
        self.failed = asyncio.Event()
        # The JobManager refused this TaskManager's credentials (token auth): no retry can help.
        self.refusal: str | None = None
        self._refused = asyncio.Event()
        self._last_registration_error = ""
        self._started = False
        self.prometheus: PrometheusReporter | None = None  # metrics.reporter.prom.port

    @property
    def address(self) -> str:
        return self.executor.address

    async def start(self) -> "TaskManager":
        c = self.config
        check_slots(c)
        network = network_settings(c)
        security, credentials = server_security(c, jobmanager=False), cluster_credentials(c)
        name = f"TaskManager {self.resource_id}"
        host, bind_host = taskmanager_hosts(c)
        check_bindable(name, bind_host, c.get(cfg.TASKMANAGER_RPC_PORT))  # fail now, not after Spark's start
        try:  # connecting to ZooKeeper blocks (at most its connection timeout)
            self._ha = await asyncio.to_thread(create_ha_services, c, jobmanager_address=self.jobmanager_address,
                                               name=f"millstream-ha-{self.resource_id}")
        except HaError as exc:
            raise StartupError(f"{name} cannot start its high-availability services: {exc}") from exc
        if self._spark is None:
            self._spark = await asyncio.to_thread(start_spark_host, c)
        # The slots are offered (registered) only once Spark runs with warm workers; the servers
        # start meanwhile. An external cluster's cores decide how many slots there are: there the
        # servers wait too.
        spark_first = external_master(c) is not None
        if spark_first:
            await self._await_spark(name)
        self.executor = TaskExecutor(
            self.resource_id,
            self.num_slots,
            self._spark,
            c.get(cfg.RPC_TIMEOUT) / 1000,
            c.get(cfg.RPC_MAX_MESSAGE_SIZE),
            self._work.name,
            "",  # no leader until the leader retrieval names one
            network,
            forward_printed_lines=self._forward_printed_lines,
            credentials=credentials,
            task_output=task_output_store(c),
        )
        loop = asyncio.get_running_loop()
        self._spark.on_death(lambda reason: loop.call_soon_threadsafe(self._spark_died, reason))
        self.server = RpcServer(name, c.get(cfg.RPC_MAX_MESSAGE_SIZE),
                                interceptors=[FencingServerInterceptor(self.executor.fencing_refusal)],
                                security=security, limits=ServerLimits.of(c))
        self.server.add(cpb_grpc.add_TaskExecutorServicer_to_server, TaskExecutorServicer(self.executor), SERVICES)
        port = await self.server.start(bind_host, c.get(cfg.TASKMANAGER_RPC_PORT))
        await self._set_health(registered=False)  # health checks see SERVING once it is registered
        self.executor.address = f"{host}:{port}"
        self.executor.data_address = self.executor.address
        self.prometheus = await start_reporter(name, self._metric_families, bind_host,
                                               c.get(cfg.METRICS_PROMETHEUS_PORT))
        if not spark_first:
            try:
                await self._await_spark(name)
            except BaseException:
                await self.stop()
                raise
        self._follow_task = asyncio.ensure_future(self._follow_leader())
        self._retrieval = self._ha.jobmanager_leader_retrieval()
        self._retrieval.start(LoopListener(self, loop))
        waits = [asyncio.ensure_future(self.executor.registered.wait()), asyncio.ensure_future(self._refused.wait())]
        await asyncio.wait(waits, timeout=self._registration_timeout_s, return_when=asyncio.FIRST_COMPLETED)
        for waiting in waits:
            waiting.cancel()
        if not self.executor.registered.is_set():
            await self.stop()
            if self.refusal is not None:
                raise StartupError(f"TaskManager {self.resource_id} cannot register at {self._where()}: {self.refusal}")
            last = f"; last answer: {self._last_registration_error}" if self._last_registration_error else ""
            raise RuntimeError(
                f"TaskManager {self.resource_id} could not register at {self._where()} "
                f"within {self._registration_timeout_s:.0f} s{last}"
            ) from None
        self._started = True
        return self

    async def _await_spark(self, name: str) -> None:
        """Waits for an owned SparkHost's start, warm-up included (start_spark_host), and fits the
        slots to the cores an external Spark cluster gave."""
        if self._owns_spark:
            assert self._spark is not None
            try:
                timings = await asyncio.to_thread(self._spark.wait_started)
            except NoSparkCores as exc:
                raise StartupError(f"{name}: {exc} ({cfg.SPARK_EXECUTOR_WAIT.key})") from exc
            log.info("%s: Spark's session started in %.1f s and its workers warmed in %.1f s: registering its slots",
                     name, timings.session_start_s, timings.warmup_s)
        self._fit_slots_to_spark()

    def _metric_families(self) -> list[Any]:
        """The Prometheus reporter's scrape (on this loop): slots, memory, heartbeats and each
        running task's latest metric snapshot."""
        executor = self.executor
        tasks = [
            TaskReport(t.tdd.job_id.hex(), t.tdd.job_name, t.tdd.vertex.name, t.tdd.subtask_index,
                       t.tdd.attempt_number, t.metrics, t.metric_descriptors)
            for t in executor.tasks.values() if t.metrics
        ]
        return taskmanager_families(self.resource_id, executor.address.rpartition(":")[0], executor.slots.num_slots,
                                    executor.slots.free_slots_count(), executor.heartbeats_received,
                                    process_tree_rss_bytes(), tasks)

    def _fit_slots_to_spark(self) -> None:
        """An external Spark cluster: offer only as many slots as it gives cores (each deployed
        task holds one for its life); SparkHost.start waited for the first ones."""
        master = external_master(self.config)
        if master is None or self._spark is None:
            return
        cores = self._spark.capacity()
        if cores < self.num_slots:
            log.warning("TaskManager %s: the Spark cluster %s gives it %d cores: offering %d of its %d slots "
                        "(each deployed task holds a core for its life)", self.resource_id, master, cores, cores,
                        self.num_slots)
            self.num_slots = max(cores, 1)
        else:
            log.info("TaskManager %s: the Spark cluster %s gives it %d cores for %d slots", self.resource_id,
                     master, cores, self.num_slots)

    def _where(self) -> str:
        if self._ha is not None and self._ha.highly_available:
            settings = self._ha.settings  # type: ignore[attr-defined]
            known = f"{self.leader.address} (session {self.leader.session_id})" if self.leader else "none"
            return (f"the JobManager leader of ZooKeeper {settings.quorum} (cluster {settings.cluster_id}; "
                    f"leader known: {known})")
        return f"the JobManager {self.jobmanager_address}"

    # -- leader retrieval (called on the loop by the LoopListener) -----------------------------

    def notify_leader_address(self, leader: LeaderInformation | None) -> None:
        self._leaders.put_nowait(leader)

    def handle_error(self, error: BaseException) -> None:
        self._fatal(f"the JobManager leader retrieval failed: {type(error).__name__}: {error}")

    async def _follow_leader(self) -> None:
        """One leader at a time: on a new (address, session id) leave the old leader and register
        with the new one; on None leave the old one and wait. Only the latest news counts."""
        while True:
            leader = await self._leaders.get()
            while not self._leaders.empty():
                leader = self._leaders.get_nowait()
            if leader == self.leader:
                continue
            if self._link_task is not None:
                self._link_task.cancel()
                await asyncio.gather(self._link_task, return_exceptions=True)
                self._link_task = None
            if self.leader is not None:
                await self._set_health(registered=False)
                reason = (f"JobManager leader changed to {leader.address} (session {leader.session_id})"
                          if leader is not None else "no JobManager leader")
                self.leader_changes += 1
                stuck = await self.executor.disconnect_leader(reason, self._cancel_timeout_s)
                if stuck:
                    self._fatal(f"{len(stuck)} tasks of the old JobManager leader did not stop within "
                                f"{cfg.TASK_CANCELLATION_TIMEOUT.key} ({self._cancel_timeout_s:g} s): {', '.join(stuck)}")
                    return
            self.leader = leader
            if leader is None:
                log.info("TaskManager %s: no JobManager leader; waiting for one", self.resource_id)
                continue
            self.executor.connect_to(leader)
            self._link_task = asyncio.ensure_future(self._resource_manager_link(leader))

    async def _register(self, leader: LeaderInformation) -> None:
        resource_manager = self.executor.resource_manager(leader.address)
        request = cpb.RegisterTaskManagerRequest(
            resource_id=self.resource_id,
            address=self.executor.address,
            data_address=self.executor.data_address,
            num_slots=self.num_slots,
            slot_report=self.executor.slot_report(),
        )
        async for attempt in AsyncRetrying(
            retry=retry_if_exception(is_unavailable),
            wait=wait_exponential_jitter(multiplier=0.1, max=5.0),
            stop=stop_after_delay(self._registration_timeout_s),
            before_sleep=self._before_retry,
            reraise=True,
        ):
            with attempt:
                response = await resource_manager.register_task_manager(request, timeout=self.executor._rpc_timeout_s)
        self.executor.registered_with(response)
        await self._set_health(registered=True)
        log.info("TaskManager %s registered at %s (leader session %s) with %d slots", self.resource_id, leader.address,
                 leader.session_id, self.num_slots)

    def _describe_registration_error(self, exc: BaseException) -> str:
        if not isinstance(exc, grpc.aio.AioRpcError):
            return f"{type(exc).__name__}: {exc}"
        details = exc.details() or ""
        problem = tls_problem(details, self.executor._credentials is not None and self.executor._credentials.tls is not None,
                              "JobManager")
        return f"{exc.code().name} {problem or details}"

    def _before_retry(self, retry_state: Any) -> None:
        exc = retry_state.outcome.exception() if retry_state.outcome is not None else None
        if exc is not None:
            self._last_registration_error = self._describe_registration_error(exc)
        _retry_log(retry_state)

    async def _resource_manager_link(self, leader: LeaderInformation) -> None:
        """Registers with ``leader``, then watches heartbeats; registers again whenever the
        ResourceManager is lost. Cancelled when the leader changes."""
        while True:
            try:
                await self._register(leader)
            except grpc.aio.AioRpcError as exc:
                self._last_registration_error = self._describe_registration_error(exc)
                log.error("TaskManager %s cannot register at %s: %s", self.resource_id, leader.address,
                          self._last_registration_error)
                if exc.code() in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
                    self._refuse(f"{exc.code().name}: {exc.details()} (check {cfg.AUTH_CLUSTER_TOKEN.key})")
                    return
                await asyncio.sleep(1.0)
                continue
            while self.executor.check_heartbeats():
                await asyncio.sleep(self.executor.heartbeat_interval_ms / 1000 / 2)
            await self._set_health(registered=False)

    def _refuse(self, reason: str) -> None:
        """The JobManager refused our credentials: before the first registration the start fails
        with ``reason``; later it is fatal (the TaskManager leaves)."""
        self.refusal = reason
        self._refused.set()
        if self._started:
            self._fatal(f"the JobManager refused this TaskManager: {reason}")

    async def _set_health(self, registered: bool) -> None:
        """The server's overall health (what `millstream.runtime.rpc.healthcheck` and container health
        checks ask): SERVING only while registered with a JobManager leader."""
        status = health_pb2.HealthCheckResponse.SERVING if registered else health_pb2.HealthCheckResponse.NOT_SERVING
        await self.server.health.set("", status)

    def _spark_died(self, reason: str) -> None:
        """Spark's JVM is gone: refuse every task from now on and leave the cluster (a Flink
        TaskManager's fatal error). The running tasks fail on their own, naming the death."""
        self._fatal(reason)

    def _fatal(self, reason: str) -> None:
        if self.fatal_error is not None:
            return
        self.fatal_error = reason
        log.error("TaskManager %s: %s; leaving the cluster", self.resource_id, reason)
        self.executor.unusable(reason)
        if self._link_task:
            self._link_task.cancel()
        if self._follow_task and self._follow_task is not asyncio.current_task():
            self._follow_task.cancel()
        asyncio.ensure_future(self._disconnect(reason)).add_done_callback(lambda _: self.failed.set())

    async def _disconnect(self, reason: str) -> None:
        registration_id, self.executor.registration_id = self.executor.registration_id, ""
        leader = self.executor.leader
        if not registration_id or leader is None:
            return
        try:
            resource_manager = self.executor.resource_manager(leader.address)
            await resource_manager.disconnect_task_manager(
                cpb.TaskManagerRef(resource_id=self.resource_id, registration_id=registration_id, reason=reason),
                timeout=2.0,
            )
        except grpc.aio.AioRpcError as exc:
            log.warning("TaskManager %s could not say it leaves (%s): the heartbeats will tell", self.resource_id, exc.code().name)

    async def stop(self) -> None:
        if self._retrieval is not None:
            self._retrieval.stop()
        for task in (self._follow_task, self._link_task):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if getattr(self.executor, "registration_id", ""):
            await self._disconnect("TaskManager shut down")
        await self.executor.close()
        if self.prometheus is not None:
            await self.prometheus.stop()
        await self.server.stop(1.0)
        if self._ha is not None:
            await asyncio.to_thread(self._ha.close)
        if self._owns_spark and self._spark is not None:
            await asyncio.to_thread(self._spark.stop)
        self._work.cleanup()

    async def __aenter__(self) -> "TaskManager":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def serve(configuration: cfg.Configuration, jobmanager_address: str | None, spark: SparkHost | None = None,
                ready_file: str | None = None) -> int:
    """Serves until SIGTERM/SIGINT (exit code 0) or a fatal error such as Spark's death (1).
    ``spark``: this process's own SparkHost, started in the background already (launcher.py).
    ``ready_file`` gets the TaskManager's address once its slots are registered (written whole:
    whoever waits for it never reads half of it)."""
    async with TaskManager(configuration, jobmanager_address, spark=spark, owns_spark=True) as tm:
        print(f"TaskManager {tm.resource_id} serving at {tm.address} with {tm.num_slots} slots", flush=True)
        if ready_file:
            write_ready_file(ready_file, tm.address)
        waits = [asyncio.ensure_future(until_terminated()), asyncio.ensure_future(tm.failed.wait())]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for waiting in waits:
            waiting.cancel()
    if tm.fatal_error is not None:
        log.error("TaskManager %s exits: %s", tm.resource_id, tm.fatal_error)
        return 1
    return 0


def main(argv: list[str] | None = None) -> None:
    """The process's main; ``python -m millstream.taskmanager.launcher`` starts sooner (it forks
    Spark's JVM before importing this module)."""
    # lazy: the launcher imports this module itself, once Spark's JVM is forked
    from millstream.taskmanager.launcher import main as launcher_main

    launcher_main(argv)


if __name__ == "__main__":
    main()
