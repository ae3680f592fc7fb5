"""The gateways a TaskManager calls the JobManager through (Flink's ResourceManagerGateway and
JobMasterGateway, the TaskExecutor's part), over gRPC to a real in-process JobManager (no Spark)."""
from __future__ import annotations

import asyncio

import grpc
import pytest

from millstream.jobmanager.jobmanager import JobManager
from millstream.proto import cluster_pb2 as cpb
from millstream.proto import cluster_pb2_grpc as cpb_grpc
from millstream.runtime import config as cfg
from millstream.runtime.rpc.job_master_gateway import GrpcJobMasterGateway, JobMasterGateway
from millstream.runtime.rpc.resource_manager_gateway import GrpcResourceManagerGateway, ResourceManagerGateway
from millstream.runtime.rpc.service import aio_channel

pytestmark = pytest.mark.timeout(60)

BASE = {"jobmanager.rpc.address": "127.0.0.1", "jobmanager.rpc.port": "0"}
UNKNOWN_JOB = b"u" * 16


def _free_slots(n: int) -> cpb.SlotReport:
    return cpb.SlotReport(slots=[cpb.SlotStatus(slot_index=i) for i in range(n)])


def test_a_taskmanager_registers_reports_and_leaves_through_the_resource_manager_gateway() -> None:
    async def main() -> None:
        async with JobManager(cfg.Configuration.from_dict(BASE)) as jm, aio_channel(jm.address) as channel:
            resource_manager: ResourceManagerGateway = GrpcResourceManagerGateway(channel)
            overview = cpb_grpc.DispatcherStub(channel).GetClusterOverview
            registered = await resource_manager.register_task_manager(cpb.RegisterTaskManagerRequest(
                resource_id="tm-1", address="127.0.0.1:1", data_address="127.0.0.1:2", num_slots=2,
                slot_report=_free_slots(2)), timeout=10)
            assert registered.registration_id and registered.heartbeat_timeout_ms > 0
            seen = await overview(cpb.Empty(), timeout=5)
            assert (seen.taskmanagers, seen.slots_total, seen.slots_available) == (1, 2, 2)
            await resource_manager.send_slot_report(cpb.SlotReportRequest(
                resource_id="tm-1", registration_id=registered.registration_id, slot_report=_free_slots(2)), timeout=10)
            await resource_manager.disconnect_task_manager(cpb.TaskManagerRef(
                resource_id="tm-1", registration_id=registered.registration_id, reason="test"), timeout=10)
            seen = await overview(cpb.Empty(), timeout=5)
            assert (seen.taskmanagers, seen.slots_total) == (0, 0)
    asyncio.run(main())


def test_the_job_master_gateway_reaches_the_job_master_service_which_refuses_an_unknown_job() -> None:
    async def main() -> None:
        async with JobManager(cfg.Configuration.from_dict(BASE)) as jm, aio_channel(jm.address) as channel:
            job_master: JobMasterGateway = GrpcJobMasterGateway(channel)
            calls = [
                job_master.offer_slots(cpb.OfferSlotsRequest(job_id=UNKNOWN_JOB, resource_id="tm-1"), timeout=10),
                job_master.update_task_execution_state(cpb.TaskExecutionState(job_id=UNKNOWN_JOB), timeout=10),
                job_master.report_collect_batch(cpb.CollectRequest(job_id=UNKNOWN_JOB), timeout=10),
                job_master.acknowledge_checkpoint(cpb.AcknowledgeCheckpointRequest(job_id=UNKNOWN_JOB, checkpoint_id=1),
                                                  timeout=10),
                job_master.decline_checkpoint(cpb.DeclineCheckpointRequest(job_id=UNKNOWN_JOB, checkpoint_id=1),
                                              timeout=10),
            ]
            for call in calls:
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await call
                assert refused.value.code() is grpc.StatusCode.NOT_FOUND, refused.value.details()
                assert UNKNOWN_JOB.hex() in (refused.value.details() or "")
            # printed lines of a job that is not (or no longer) there are dropped, not refused
            await job_master.report_printed_lines(cpb.PrintedLinesReport(job_id=UNKNOWN_JOB, lines=["x"]), timeout=10)
    asyncio.run(main())
