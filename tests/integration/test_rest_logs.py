"""The REST log paths over fakes: the JobManager's own log files, a TaskManager's through a fake
TaskExecutor stub, a subtask's output, and 404s that name what is missing (no cluster)."""
from __future__ import annotations

import logging
from typing import Any

import aiohttp

from millstream.jobmanager.rest.server import OPENAPI_PATH, RestServer
from millstream.jobmanager.task_logs import SubtaskAttempt, TaskLogError, TaskLogs
from millstream.proto import cluster_pb2 as cpb
from millstream.runtime import config as cfg
from millstream.runtime.entrypoint import log_files
from .rest_fakes import JOB, FakeSource, serve

MAP = bytes.fromhex("bb" * 16)


class FakeTaskExecutor:
    async def get_task_output(self, request: cpb.TaskOutputRequest, timeout: float) -> cpb.TaskOutputResponse:
        return cpb.TaskOutputResponse(found=True, lines=["2026-01-01 00:00:00,000 INFO stdout: printed by map"])

    async def list_log_files(self, timeout: float) -> cpb.LogFileList:
        return cpb.LogFileList(files=[cpb.LogFileInfo(name="millstream-taskmanager-0-h.log", size=12)])

    async def read_log_file(self, request: cpb.ReadLogRequest, timeout: float) -> cpb.ReadLogResponse:
        if request.stdout:
            return cpb.ReadLogResponse(found=False, message="this process's stdout is not a file")
        return cpb.ReadLogResponse(found=True, text=f"tm log {request.name or 'current'}\n")


def _task_logs() -> TaskLogs:
    def attempts(job_id: bytes) -> tuple[str, list[SubtaskAttempt]]:
        if job_id != JOB:
            raise TaskLogError(__import__("grpc").StatusCode.NOT_FOUND, f"No job with id {job_id.hex()}.")
        return "job", [SubtaskAttempt(MAP, "Map", i, 2, 0, b"a%d" % i, "RUNNING", "tm-1") for i in range(2)]
    return TaskLogs(attempts, {"tm-1": "127.0.0.1:1"}.get, lambda address: FakeTaskExecutor())


async def get(server: RestServer, path: str) -> tuple[int, str, Any]:
    async with aiohttp.ClientSession() as session:
        async with session.get(server.url + path) as response:
            text = await response.text()
            return response.status, response.content_type, text


def test_log_paths(tmp_path) -> None:
    process_log = log_files.install_process_log("jobmanager", cfg.load_configuration(
        None, dynamic_properties=[f"env.log.dir={tmp_path}"]))
    logging.getLogger("millstream.test").warning("a line of the JobManager")
    process_log.handler.flush()

    async def check(server: RestServer) -> None:
        status, kind, text = await get(server, "/jobmanager/log")
        assert (status, kind) == (200, "text/plain") and "WARNING millstream.test: a line of the JobManager" in text
        status, _, text = await get(server, "/jobmanager/logs")
        assert status == 200 and process_log.name in text
        assert (await get(server, f"/v1/jobmanager/logs/{process_log.name}"))[0] == 200
        status, _, text = await get(server, "/jobmanager/logs/..%2F..%2Fetc%2Fpasswd")
        assert status == 404 and "no log file named" in text
        status, kind, text = await get(server, "/taskmanagers/tm-1/log")
        assert (status, kind, text) == (200, "text/plain", "tm log current\n")
        assert (await get(server, "/taskmanagers/tm-1/logs/x.log"))[2] == "tm log x.log\n"
        status, _, text = await get(server, "/taskmanagers/tm-1/stdout")
        assert status == 404 and "stdout is not a file" in text
        status, _, text = await get(server, "/taskmanagers/tm-1/logs")
        assert status == 200 and '"name": "millstream-taskmanager-0-h.log"' in text
        status, _, text = await get(server, "/taskmanagers/tm-9/log")
        assert status == 404 and "TaskManager tm-9 not found" in text
        status, kind, text = await get(server, f"/jobs/{JOB.hex()}/vertices/{MAP.hex()}/subtasks/1/output")
        assert status == 200 and kind == "application/json" and "printed by map" in text and '"subtask": 1' in text
        status, _, text = await get(server, f"/jobs/{JOB.hex()}/vertices/{MAP.hex()}/subtasks/2/output")
        assert status == 404 and "No subtask 2" in text
        status, _, text = await get(server, f"/jobs/{JOB.hex()}/vertices/{'cc' * 16}/subtasks/0/output")
        assert status == 404 and "has no vertex" in text
        status, _, text = await get(server, f"/jobs/{'dd' * 16}/vertices/{MAP.hex()}/subtasks/0/output")
        assert status == 404 and "No job with id" in text
        status, _, text = await get(server, f"/jobs/{JOB.hex()}/vertices/{MAP.hex()}/subtasks/x/output")
        assert status == 400 and "Not a subtask index" in text
        status, _, text = await get(server, OPENAPI_PATH)
        assert "/taskmanagers/{taskmanagerid}/logs/{filename}" in text and "text/plain" in text

    try:
        serve(FakeSource(), task_logs=_task_logs())(check)
    finally:
        logging.getLogger().removeHandler(process_log.handler)
        process_log.close()
        log_files._current = None
