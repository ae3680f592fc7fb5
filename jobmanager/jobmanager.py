"""The JobManager process: Dispatcher, BlobServer, ResourceManager and JobMasters behind one gRPC port."""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from millstream.jobmanager import checkpointing
from millstream.jobmanager.blob_server import BlobServerServicer, BlobStore
from millstream.jobmanager.dispatcher import Dispatcher, DispatcherServicer
from millstream.jobmanager.job_master_core import JobMasterCore
from millstream.jobmanager.job_master_endpoint import JobMasterServicer
from millstream.jobmanager.job_master import JobMaster, TaskExecutorClients, now_ms
from millstream.jobmanager.resource_manager import ResourceManager, ResourceManagerServicer
from millstream.jobmanager.slot_manager import SlotManager
from millstream.proto import cluster_pb2 as cpb
from millstream.proto import cluster_pb2_grpc as cpb_grpc
from millstream.runtime import restart_strategy
from millstream.runtime import config as cfg
from millstream.runtime.loop_monitor import EventLoopMonitor
from millstream.runtime.process import process_parser, run_process, until_terminated
from millstream.runtime.rpc import RpcServer

log = logging.getLogger(__name__)

SERVICES = [cpb.DESCRIPTOR.services_by_name[n].full_name for n in ("Dispatcher", "BlobServer", "ResourceManager", "JobMasterService")]


class JobManager:
    """``async with JobManager(config) as jm:`` serves until the block ends."""

    def __init__(self, configuration: cfg.Configuration | None = None) -> None:
        self.config = configuration or cfg.Configuration()
        self.address = ""
        self._cleanup_task: asyncio.Task[None] | None = None
        self.loop_monitor = EventLoopMonitor("JobManager")
        self._wall_minus_monotonic_ms = int(time.time() * 1000) - now_ms()

    async def start(self) -> "JobManager":
        c = self.config
        host = c.get(cfg.JOBMANAGER_BIND_HOST) or c.get(cfg.JOBMANAGER_RPC_ADDRESS)
        advertised = c.get(cfg.JOBMANAGER_RPC_ADDRESS)
        max_bytes = c.get(cfg.RPC_MAX_MESSAGE_SIZE)
        interval, timeout = c.get(cfg.HEARTBEAT_INTERVAL), c.get(cfg.HEARTBEAT_TIMEOUT)
        restart_options = restart_strategy.options_of(c)
        restart_strategy.spec_from_options(restart_options)  # a bad restart-strategy.* stops the start here
        self.blobs = BlobStore(c.get(cfg.BLOB_STORAGE_DIR))
        self.task_executors = TaskExecutorClients(c.get(cfg.RPC_TIMEOUT) / 1000, max_bytes)
        self.resource_manager = ResourceManager(
            SlotManager(c.get(cfg.SLOT_REQUEST_TIMEOUT)),
            self.task_executors,
            self._job_master_of,
            interval,
            timeout,
        )
        self.dispatcher = Dispatcher(
            self.blobs,
            self._make_job_master,
            lambda: self.resource_manager.overview()[1],
            c.get(cfg.JOBSTORE_EXPIRATION_TIME) * 1000,
            max_finished_jobs=c.get(cfg.JOBSTORE_MAX_CAPACITY),
            collect_buffer_bytes=c.get(cfg.COLLECT_BUFFER_SIZE),
            slot_timeout_at_ms=self._slot_timeout_at_ms,
            restart_options=restart_options,
            checkpoint_options=checkpointing.checkpoint_options_of(c),
        )
        self.server = RpcServer("JobManager", max_bytes)
        self.server.add(cpb_grpc.add_DispatcherServicer_to_server, DispatcherServicer(self.dispatcher, self.overview), [])
        self.server.add(cpb_grpc.add_BlobServerServicer_to_server, BlobServerServicer(self.blobs), [])
        self.server.add(cpb_grpc.add_ResourceManagerServicer_to_server, ResourceManagerServicer(self.resource_manager), [])
        self.server.add(cpb_grpc.add_JobMasterServiceServicer_to_server, JobMasterServicer(self.dispatcher), SERVICES)
        port = await self.server.start(host, c.get(cfg.JOBMANAGER_RPC_PORT))
        self.address = f"{advertised}:{port}"
        self.resource_manager.start()
        self.loop_monitor.start()
        self._cleanup_task = asyncio.ensure_future(self._expire_jobs())
        return self

    def _job_master_of(self, job_id: bytes) -> JobMaster | None:
        record = self.dispatcher.jobs.get(job_id)
        return record.job_master if record else None

    def _slot_timeout_at_ms(self, job_id: bytes) -> int | None:
        """The wall-clock time a job still waiting for slots fails with "not enough slots"."""
        deadline = self.resource_manager.slots.requirements_deadline(job_id)
        if deadline is None:
            return None
        return deadline + self._wall_minus_monotonic_ms  # one offset: the same deadline in every summary

    def _make_job_master(self, core: JobMasterCore, on_status: Any) -> JobMaster:
        c = self.config
        return JobMaster(
            core,
            self.address,
            self.resource_manager,
            self.task_executors,
            on_status,
            c.get(cfg.HEARTBEAT_INTERVAL),
            c.get(cfg.HEARTBEAT_TIMEOUT),
        )

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

    async def _expire_jobs(self) -> None:
        while True:
            await asyncio.sleep(10)
            self.dispatcher.expire_finished()

    async def stop(self, grace: float = 2.0) -> None:
        if self._cleanup_task:
            self._cleanup_task.cancel()
        self.loop_monitor.stop()
        for record in self.dispatcher.jobs.values():
            if record.job_master is not None:
                await record.job_master.stop()
        await self.resource_manager.stop()
        await self.server.stop(grace)
        await self.task_executors.close()
        self.blobs.close()

    async def __aenter__(self) -> "JobManager":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def serve(configuration: cfg.Configuration, ready_file: str | None = None) -> None:
    """Runs a JobManager until SIGTERM/SIGINT; writes its address to ``ready_file`` once serving."""
    async with JobManager(configuration) as jm:
        print(f"JobManager serving at {jm.address}", flush=True)
        if ready_file:
            with open(ready_file, "w") as f:
                f.write(jm.address)
        await until_terminated()
    log.info("JobManager stopped")


def main(argv: list[str] | None = None) -> None:
    parser = process_parser("millstream jobmanager")
    parser.add_argument("--ready-file", help="write the serving address here once up")
    args = parser.parse_args(argv)
    run_process("jobmanager", args, lambda configuration: serve(configuration, args.ready_file))


if __name__ == "__main__":
    main()
