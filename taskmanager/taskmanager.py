"""The TaskManager process: a TaskExecutor gRPC server, a SparkHost, and its ResourceManager link."""
from __future__ import annotations

import asyncio
import logging
import tempfile
import uuid
from typing import Any

import grpc
from tenacity import AsyncRetrying, before_sleep_log, retry_if_exception, stop_after_delay, wait_exponential_jitter

from millstream.proto import cluster_pb2 as cpb
from millstream.proto import cluster_pb2_grpc as cpb_grpc
from millstream.runtime import config as cfg
from millstream.runtime.process import process_parser, run_process, until_terminated
from millstream.runtime.rpc import RpcServer, check_bindable, is_unavailable
from millstream.taskmanager.spark_runner import SparkHost
from millstream.taskmanager.task import NetworkSettings
from millstream.taskmanager.task_executor import TaskExecutor, TaskExecutorServicer

log = logging.getLogger(__name__)

SERVICES = [cpb.DESCRIPTOR.services_by_name["TaskExecutor"].full_name]


def spark_conf(configuration: cfg.Configuration) -> dict[str, str]:
    pairs = (item.split("=", 1) for item in configuration.get(cfg.SPARK_CONF))
    return {k.strip(): v.strip() for k, v in pairs}


def network_settings(configuration: cfg.Configuration) -> NetworkSettings:
    """The exchange settings this TaskManager's tasks use; each must be at least 1."""
    for option in (cfg.NETWORK_BUFFERS_PER_CHANNEL, cfg.NETWORK_MAX_BUFFERS_PER_CHANNEL):
        if configuration.get(option) < 1:
            raise cfg.ConfigurationError(f"{option.key}: expected at least 1, got {configuration.get(option)}")
    return NetworkSettings(
        buffers_per_channel=configuration.get(cfg.NETWORK_BUFFERS_PER_CHANNEL),
        max_buffers_per_channel=configuration.get(cfg.NETWORK_MAX_BUFFERS_PER_CHANNEL),
    )


def spark_host_for(configuration: cfg.Configuration) -> SparkHost:
    """The SparkHost a TaskManager with this configuration runs its tasks on (not started)."""
    return SparkHost(
        configuration.get(cfg.TASKMANAGER_NUM_TASK_SLOTS),
        configuration.get(cfg.SPARK_MASTER) or None,
        conf=spark_conf(configuration),
        tasks_per_slot=configuration.get(cfg.SPARK_TASKS_PER_SLOT),
    )


class TaskManager:
    """``async with TaskManager(config, "host:port") as tm:`` registers and serves until the block ends.

    ``spark``: a started SparkHost to share (tests run several TaskManagers in one process, and a
    process has one SparkContext); without it the TaskManager starts and owns its own.
    """

    def __init__(
        self,
        configuration: cfg.Configuration | None,
        jobmanager_address: str,
        spark: SparkHost | None = None,
        resource_id: str | None = None,
        registration_timeout_s: float = 60.0,
        forward_printed_lines: bool = True,
    ) -> None:
        self.config = configuration or cfg.Configuration()
        self.jobmanager_address = jobmanager_address
        self.resource_id = resource_id or f"taskmanager-{uuid.uuid4().hex[:12]}"
        self.num_slots = self.config.get(cfg.TASKMANAGER_NUM_TASK_SLOTS)
        self._spark = spark
        self._owns_spark = spark is None
        self._registration_timeout_s = registration_timeout_s
        # Tasks' printed lines go to this process's stdout and to the job's clients; an embedded
        # TaskManager's stdout is the client's console already, so it does not send them too.
        self._forward_printed_lines = forward_printed_lines
        self._work = tempfile.TemporaryDirectory(prefix="millstream-tm-")
        self._link_task: asyncio.Task[None] | None = None
        self.fatal_error: str | None = None  # why this TaskManager cannot run tasks any more
        self.failed = asyncio.Event()

    @property
    def address(self) -> str:
        return self.executor.address

    async def start(self) -> "TaskManager":
        c = self.config
        if self.num_slots < 1:
            raise cfg.ConfigurationError(f"{cfg.TASKMANAGER_NUM_TASK_SLOTS.key}: expected at least 1, got {self.num_slots}")
        network = network_settings(c)
        name, host = f"TaskManager {self.resource_id}", c.get(cfg.TASKMANAGER_HOST) or "127.0.0.1"
        check_bindable(name, host, c.get(cfg.TASKMANAGER_RPC_PORT))  # fail now, not after Spark's start
        if self._spark is None:
            self._spark = spark_host_for(c)
            # Warm before offering slots: the first task must not pay Spark's start-up.
            await asyncio.to_thread(self._spark.start)
        self.executor = TaskExecutor(
            self.resource_id,
            self.num_slots,
            self._spark,
            c.get(cfg.RPC_TIMEOUT) / 1000,
            c.get(cfg.RPC_MAX_MESSAGE_SIZE),
            self._work.name,
            self.jobmanager_address,
            network,
            forward_printed_lines=self._forward_printed_lines,
        )
        loop = asyncio.get_running_loop()
        self._spark.on_death(lambda reason: loop.call_soon_threadsafe(self._spark_died, reason))
        self.server = RpcServer(name, c.get(cfg.RPC_MAX_MESSAGE_SIZE))
        self.server.add(cpb_grpc.add_TaskExecutorServicer_to_server, TaskExecutorServicer(self.executor), SERVICES)
        port = await self.server.start(host, c.get(cfg.TASKMANAGER_RPC_PORT))
        self.executor.address = f"{host}:{port}"
        self.executor.data_address = self.executor.address
        self._channel = grpc.aio.insecure_channel(self.jobmanager_address)
        self._link_task = asyncio.ensure_future(self._resource_manager_link())
        try:
            await asyncio.wait_for(self.executor.registered.wait(), self._registration_timeout_s)
        except asyncio.TimeoutError:
            await self.stop()
            raise RuntimeError(
                f"TaskManager {self.resource_id} could not register at the JobManager {self.jobmanager_address} "
                f"within {self._registration_timeout_s:.0f} s"
            ) from None
        return self

    async def _register(self) -> None:
        stub = cpb_grpc.ResourceManagerStub(self._channel)
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
            before_sleep=before_sleep_log(log, logging.WARNING),
            reraise=True,
        ):
            with attempt:
                response = await stub.RegisterTaskManager(request, timeout=self.executor._rpc_timeout_s)
        self.executor.registered_with(response)
        log.info("TaskManager %s registered at %s with %d slots", self.resource_id, self.jobmanager_address, self.num_slots)

    async def _resource_manager_link(self) -> None:
        """Registers, then watches heartbeats; registers again whenever the ResourceManager is lost."""
        while True:
            try:
                await self._register()
            except grpc.aio.AioRpcError as exc:
                log.error("TaskManager %s cannot register at %s: %s", self.resource_id, self.jobmanager_address, exc.details())
                await asyncio.sleep(1.0)
                continue
            while self.executor.check_heartbeats():
                await asyncio.sleep(self.executor._heartbeats.interval_ms / 1000 / 2)

    def _spark_died(self, reason: str) -> None:
        """Spark's JVM is gone: refuse every task from now on and leave the cluster (a Flink
        TaskManager's fatal error). The running tasks fail on their own, naming the death."""
        if self.fatal_error is not None:
            return
        self.fatal_error = reason
        log.error("TaskManager %s: %s; leaving the cluster", self.resource_id, reason)
        self.executor.unusable(reason)
        if self._link_task:
            self._link_task.cancel()
        asyncio.ensure_future(self._disconnect(reason)).add_done_callback(lambda _: self.failed.set())

    async def _disconnect(self, reason: str) -> None:
        registration_id, self.executor.registration_id = self.executor.registration_id, ""
        if not registration_id:
            return
        try:
            await cpb_grpc.ResourceManagerStub(self._channel).DisconnectTaskManager(
                cpb.TaskManagerRef(resource_id=self.resource_id, registration_id=registration_id, reason=reason),
                timeout=2.0,
            )
        except grpc.aio.AioRpcError as exc:
            log.warning("TaskManager %s could not say it leaves (%s): the heartbeats will tell", self.resource_id, exc.code().name)

    async def stop(self) -> None:
        if self._link_task:
            self._link_task.cancel()
        if getattr(self.executor, "registration_id", ""):
            await self._disconnect("TaskManager shut down")
        await self.executor.close()
        await self.server.stop(1.0)
        await self._channel.close()
        if self._owns_spark and self._spark is not None:
            await asyncio.to_thread(self._spark.stop)
        self._work.cleanup()

    async def __aenter__(self) -> "TaskManager":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def serve(configuration: cfg.Configuration, jobmanager_address: str) -> int:
    """Serves until SIGTERM/SIGINT (exit code 0) or a fatal error such as Spark's death (1)."""
    async with TaskManager(configuration, jobmanager_address) as tm:
        print(f"TaskManager {tm.resource_id} serving at {tm.address} with {tm.num_slots} slots", flush=True)
        waits = [asyncio.ensure_future(until_terminated()), asyncio.ensure_future(tm.failed.wait())]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for waiting in waits:
            waiting.cancel()
    if tm.fatal_error is not None:
        log.error("TaskManager %s exits: %s", tm.resource_id, tm.fatal_error)
        return 1
    return 0


def main(argv: list[str] | None = None) -> None:
    parser = process_parser("millstream taskmanager")
    parser.add_argument("--jobmanager", help="host:port of the JobManager (default: jobmanager.rpc.address/port)")
    args = parser.parse_args(argv)

    def serve_configured(configuration: cfg.Configuration) -> Any:
        address = args.jobmanager or f"{configuration.get(cfg.JOBMANAGER_RPC_ADDRESS)}:{configuration.get(cfg.JOBMANAGER_RPC_PORT)}"
        return serve(configuration, address)

    run_process("taskmanager", args, serve_configured)


if __name__ == "__main__":
    main()
