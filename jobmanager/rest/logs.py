"""The REST API's log paths (Flink's): the JobManager's log files, a TaskManager's through the
JobManager, and a subtask's captured output (ours).

The JobManager's own files are read in a thread; a TaskManager's over gRPC with a deadline
(:class:`~millstream.jobmanager.task_logs.TaskLogs`), so no handler blocks the event loop. Text
paths answer ``text/plain`` (the last MiB of the file, from a line start); lists and the subtask
output answer JSON; what does not exist is a 404 naming it, as every other REST path.
"""
from __future__ import annotations

import asyncio
import json
from typing import Any

import grpc
from aiohttp import web

from millstream.jobmanager.rest import views
from millstream.jobmanager.rest.views import BadRequest, NotFound, error_body
from millstream.jobmanager.task_logs import TaskLogError, TaskLogs, select_attempts
from millstream.runtime.entrypoint import log_files

# Path template -> {method: summary}; merged into the REST server's table (and its OpenAPI document).
LOG_ROUTES: dict[str, dict[str, str]] = {
    "/jobmanager/log": {"get": "The end (last MiB) of the JobManager's log file, as text."},
    "/jobmanager/stdout": {"get": "The end of the JobManager's stdout, as text, when it is a file."},
    "/jobmanager/logs": {"get": "The JobManager's log files: {\"logs\": [{\"name\", \"size\"}]}."},
    "/jobmanager/logs/{filename}": {"get": "The end of one of the JobManager's log files, as text."},
    "/taskmanagers/{taskmanagerid}/log": {"get": "The end of a TaskManager's log file, as text (read through the JobManager)."},
    "/taskmanagers/{taskmanagerid}/stdout": {"get": "The end of a TaskManager's stdout (its tasks' prints and log lines), as text."},
    "/taskmanagers/{taskmanagerid}/logs": {"get": "A TaskManager's log files: {\"logs\": [{\"name\", \"size\"}]}."},
    "/taskmanagers/{taskmanagerid}/logs/{filename}": {"get": "The end of one of a TaskManager's log files, as text."},
    "/taskmanagers/{taskmanagerid}/thread-dump": {"get": "A TaskManager's Python threads, each with its stack "
                                                         "(Flink's ThreadDumpInfo)."},
    "/jobs/{jobid}/vertices/{vertexid}/subtasks/{subtaskindex}/output": {
        "get": "What a subtask's current (or last) attempt printed and logged: {\"lines\": [...], ...}."},
}
TEXT_PATHS = frozenset(p for p in LOG_ROUTES if not p.endswith(("/logs", "/output", "/thread-dump")))


def _text(text: str) -> web.Response:
    return web.Response(text=text, content_type="text/plain", charset="utf-8", headers={"Cache-Control": "no-cache"})


def _raise(exc: TaskLogError) -> None:
    if exc.code is grpc.StatusCode.INVALID_ARGUMENT:
        raise BadRequest(str(exc)) from exc
    if exc.code is grpc.StatusCode.UNAVAILABLE:
        raise web.HTTPServiceUnavailable(text=json.dumps(error_body(str(exc))), content_type="application/json") from exc
    raise NotFound(str(exc)) from exc


class LogHandlers:
    """The handlers of :data:`LOG_ROUTES`; ``task_logs`` None: no TaskManager paths (404)."""

    def __init__(self, task_logs: TaskLogs | None) -> None:
        self._task_logs = task_logs

    def routes(self) -> dict[str, Any]:
        return {
            "/jobmanager/log": self._jm_log,
            "/jobmanager/stdout": self._jm_stdout,
            "/jobmanager/logs": self._jm_logs,
            "/jobmanager/logs/{filename}": self._jm_file,
            "/taskmanagers/{taskmanagerid}/log": self._tm_log,
            "/taskmanagers/{taskmanagerid}/stdout": self._tm_stdout,
            "/taskmanagers/{taskmanagerid}/logs": self._tm_logs,
            "/taskmanagers/{taskmanagerid}/thread-dump": self._tm_thread_dump,
            "/taskmanagers/{taskmanagerid}/logs/{filename}": self._tm_file,
            "/jobs/{jobid}/vertices/{vertexid}/subtasks/{subtaskindex}/output": self._subtask_output,
        }

    # -- the JobManager's own files ----------------------------------------------------------

    @staticmethod
    async def _read_own(name: str = "", stdout: bool = False) -> web.Response:
        text, why = await asyncio.to_thread(log_files.read_log, name, stdout)
        if text is None:
            raise NotFound(f"JobManager: {why}.")
        return _text(text)

    async def _jm_log(self, request: web.Request) -> web.StreamResponse:
        return await self._read_own()

    async def _jm_stdout(self, request: web.Request) -> web.StreamResponse:
        return await self._read_own(stdout=True)

    async def _jm_file(self, request: web.Request) -> web.StreamResponse:
        return await self._read_own(request.match_info["filename"])

    async def _jm_logs(self, request: web.Request) -> web.StreamResponse:
        files, _, _ = await asyncio.to_thread(log_files.listed_files)
        return web.json_response({"logs": [{"name": f.name, "size": f.size, "mtime": f.mtime_ms} for f in files]})

    # -- a TaskManager's, through gRPC -------------------------------------------------------

    def _logs(self) -> TaskLogs:
        if self._task_logs is None:
            raise NotFound("This JobManager does not read TaskManagers' logs.")
        return self._task_logs

    async def _read_tm(self, request: web.Request, name: str = "", stdout: bool = False) -> web.Response:
        resource_id = request.match_info["taskmanagerid"]
        try:
            response = await self._logs().read_file(resource_id, name, stdout)
        except TaskLogError as exc:
            _raise(exc)
        if not response.found:
            raise NotFound(f"TaskManager {resource_id}: {response.message}.")
        return _text(response.text)

    async def _tm_log(self, request: web.Request) -> web.StreamResponse:
        return await self._read_tm(request)

    async def _tm_stdout(self, request: web.Request) -> web.StreamResponse:
        return await self._read_tm(request, stdout=True)

    async def _tm_file(self, request: web.Request) -> web.StreamResponse:
        return await self._read_tm(request, request.match_info["filename"])

    async def _tm_logs(self, request: web.Request) -> web.StreamResponse:
        try:
            listed = await self._logs().list_files(request.match_info["taskmanagerid"])
        except TaskLogError as exc:
            _raise(exc)
        return web.json_response({"logs": [{"name": f.name, "size": f.size, "mtime": f.mtime_ms} for f in listed.files]})

    async def _tm_thread_dump(self, request: web.Request) -> web.StreamResponse:
        try:
            dump = await self._logs().thread_dump(request.match_info["taskmanagerid"])
        except TaskLogError as exc:
            _raise(exc)
        return web.json_response({"threadInfos": [{"threadName": t.name, "stringifiedThreadInfo": t.stack}
                                                  for t in dump.threads]})

    # -- a subtask's captured output -----------------------------------------------------------

    async def _subtask_output(self, request: web.Request) -> web.StreamResponse:
        job_id = views.parse_job_id(request.match_info["jobid"])
        text = request.match_info["subtaskindex"]
        if not text.isdigit():
            raise BadRequest(f"Not a subtask index (0, 1, ...): {text}")
        logs = self._logs()
        vertex = request.match_info["vertexid"]
        try:
            _, attempts = logs.job_attempts(job_id)
            if not any(a.vertex_id.hex() == vertex.lower() for a in attempts):
                raise TaskLogError(grpc.StatusCode.NOT_FOUND, f"Job {job_id.hex()} has no vertex {vertex}.")
            [attempt] = select_attempts(attempts, vertex, int(text))
            out = await logs.output(attempt)
        except TaskLogError as exc:
            _raise(exc)
        return web.json_response({
            "vertex-id": out.vertex_id, "vertex-name": out.vertex_name, "subtask": out.subtask_index,
            "attempt": out.attempt_number, "status": out.state, "taskmanager-id": out.taskmanager_id,
            "available": out.available, "reason": out.unavailable_reason, "dropped-lines": out.dropped_lines,
            "lines": list(out.lines),
        })
