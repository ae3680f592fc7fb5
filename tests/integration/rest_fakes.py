"""A fake JobManager state behind a real RestServer (aiohttp on 127.0.0.1, port 0, in this
process), for the REST shell's tests (test_rest_server, test_rest_logs, test_web_ui)."""
from __future__ import annotations

import asyncio
from typing import Any

from millstream.jobmanager.resourcemanager.slot_manager import TaskManagerInfo
from millstream.jobmanager.rest import views
from millstream.jobmanager.rest.metrics_views import SubtaskView, VertexView
from millstream.jobmanager.rest.server import RestServer
from millstream.jobmanager.rest.views import JobView, TaskManagerView
from millstream.proto import cluster_pb2 as cpb

JOB = bytes(range(16))

VERTEX = bytes(range(16, 32))



class FakeSource:
    def __init__(self) -> None:
        self.leading = True
        self.cancelled: list[bytes] = []
        self.savepoints: list[tuple[bytes, str, bool]] = []
        self.release = asyncio.Event()
        summary = cpb.JobSummary(job_id=JOB, job_name="job", status=cpb.RUNNING, start_time_ms=1, num_tasks=1)
        self.jobs = {JOB: JobView(summary, {"RUNNING": 2}, {"jid": JOB.hex(), "nodes": []})}

    def leads(self) -> bool:
        return self.leading

    def cluster_overview(self) -> cpb.ClusterOverview:
        return cpb.ClusterOverview(taskmanagers=1, slots_total=2, slots_available=1, jobs_running=1)

    def job_views(self) -> list[JobView]:
        return list(self.jobs.values())

    def job_view(self, job_id: bytes) -> JobView | None:
        return self.jobs.get(job_id)

    def cancel(self, job_id: bytes) -> None:
        self.cancelled.append(job_id)

    def taskmanager_views(self) -> list[TaskManagerView]:
        return [TaskManagerView(TaskManagerInfo("tm-1", "127.0.0.1:1", "127.0.0.1:2", "r", 2, 1, 0, ()), 5)]

    def vertex_views(self, job_id: bytes) -> dict[bytes, VertexView] | None:
        if job_id not in self.jobs:
            return None
        subtask = SubtaskView(0, "RUNNING", 0, "127.0.0.1:1", "tm-1", 10, -1,
                              {"numRecordsIn": 5.0, "backPressuredTimeMsPerSecond": 600.0, "Map.hits": 3.0})
        return {VERTEX: VertexView(VERTEX, "Map", 1, 128, (subtask,))}

    def start_savepoint(self, job_id: bytes, directory: str, stop: bool, drain: bool = False) -> Any:
        """As the Dispatcher: refuses at once, else the savepoint completes when ``release`` is set."""
        if self.jobs[job_id].summary.status != cpb.RUNNING:
            raise views.Conflict(f"Job {job_id.hex()} is FINISHED: only a RUNNING job takes a savepoint")
        if not directory:
            raise views.BadRequest("No savepoint directory: give one, or set execution.checkpointing.savepoint-dir")
        self.savepoints.append((job_id, directory, stop) + ((True,) if drain else ()))
        release = self.release = asyncio.Event()

        async def take() -> str:
            await release.wait()
            if directory == "/broken":
                raise RuntimeError("Savepoint of job: the job takes no checkpoints")
            return f"{directory}/savepoint-{len(self.savepoints)}"
        return take()



def serve(source: FakeSource, **kwargs: Any):  # noqa: ANN201
    """Runs ``check(server)`` against a started server, then stops it."""
    def run(check: Any) -> None:
        async def main() -> None:
            server = RestServer(source, "0.1.0", **kwargs)
            await server.start("127.0.0.1", 0)
            try:
                await check(server)
            finally:
                await server.stop()
        asyncio.run(main())
    return run
