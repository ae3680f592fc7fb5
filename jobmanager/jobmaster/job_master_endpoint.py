"""The JobMasterService endpoint: routes TaskManagers' calls to the job's JobMaster by job id."""
from __future__ import annotations

import grpc

from millstream.jobmanager.dispatcher.dispatcher import Dispatcher, DispatcherError, grpc_status, wait_within_deadline
from millstream.proto import cluster_pb2 as cpb
from millstream.proto import cluster_pb2_grpc as cpb_grpc


class JobMasterServicer(cpb_grpc.JobMasterServiceServicer):
    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher

    async def _job_master(self, job_id: bytes, context: grpc.aio.ServicerContext):  # noqa: ANN202
        try:
            return self.dispatcher.job_master(job_id)
        except DispatcherError as exc:
            await context.abort(grpc_status(exc), str(exc))

    async def OfferSlots(self, request, context):  # noqa: N802, ANN001, ANN201
        job_master = await self._job_master(request.job_id, context)
        return cpb.OfferSlotsResponse(accepted=job_master.offer_slots(request))

    async def UpdateTaskExecutionState(self, request, context):  # noqa: N802, ANN001, ANN201
        job_master = await self._job_master(request.job_id, context)
        job_master.update_task_state(request)
        return cpb.Empty()

    async def ReportCollectBatch(self, request, context):  # noqa: N802, ANN001, ANN201
        """Waits (within the caller's deadline) while the job's collect buffer is full; answers
        ``accepted=False`` if it stayed full, and the TaskManager reports the batch again."""
        job_master = await self._job_master(request.job_id, context)
        if not job_master.is_current_attempt(request.execution_attempt_id):  # fence stale attempts
            return cpb.CollectResponse(accepted=True)
        wait_s = wait_within_deadline(context)
        accepted = await self.dispatcher.add_collected(request.job_id, request.execution_attempt_id, request.batch, wait_s)
        return cpb.CollectResponse(accepted=accepted)

    async def ReportPrintedLines(self, request, context):  # noqa: N802, ANN001, ANN201
        """A TaskManager's batch of a job's printed lines, for the job's attached clients."""
        try:
            self.dispatcher.add_printed_lines(request.job_id, list(request.lines), request.dropped)
        except DispatcherError as exc:
            await context.abort(grpc_status(exc), str(exc))
        return cpb.Empty()

    async def AcknowledgeCheckpoint(self, request, context):  # noqa: N802, ANN001, ANN201
        job_master = await self._job_master(request.job_id, context)
        job_master.acknowledge_checkpoint(request)
        return cpb.Empty()

    async def DeclineCheckpoint(self, request, context):  # noqa: N802, ANN001, ANN201
        job_master = await self._job_master(request.job_id, context)
        job_master.decline_checkpoint(request)
        return cpb.Empty()

    async def SendOperatorEvent(self, request, context):  # noqa: N802, ANN001, ANN201
        job_master = await self._job_master(request.job_id, context)
        job_master.operator_event(request.execution_attempt_id, request.payload)
        return cpb.Empty()
