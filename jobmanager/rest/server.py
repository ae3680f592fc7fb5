"""The JobManager's REST API: an aiohttp server on the JobManager's event loop (thin shell).

Handlers only read in-memory state through a :class:`RestSource` (the JobManager's Dispatcher,
ResourceManager and JobMasters, see :class:`JobManagerSource`) and hand it to the pure views of
:mod:`millstream.jobmanager.rest.views`; none awaits anything but the response write, so the event
loop that runs the gRPC services is never blocked by a REST call. Paths are Flink's, each also
under ``/v1`` as Flink serves them.

Errors have Flink's shape, ``{"errors": ["..."]}``: 404 for an unknown path or id, 400 for a
malformed id, 503 while this JobManager is not the leader (a standby under HA: its state is
empty, so it answers nothing but the OpenAPI document). With ``security.ssl.enabled`` the server
speaks mutual TLS with the cluster's key, certificate and truststore, as the gRPC servers do; with
token authentication on it requires ``Authorization: Bearer <client token>`` on every path but
the OpenAPI document.
"""
from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import platform
import re
import sys
from pathlib import Path
from typing import Any, Awaitable, Callable, Protocol

from aiohttp import web

from millstream.jobmanager.rest import metrics_views
from millstream.jobmanager.rest import rescales
from millstream.jobmanager.rest import views
from millstream.jobmanager.dispatcher.dispatcher_core import DispatcherError, ErrorKind
from millstream.jobmanager.dispatcher.gateway import DispatcherGateway
from millstream.jobmanager.jobmaster.adaptive_scheduler import adaptive_settings
from millstream.runtime.clock import wall_ms
from millstream.runtime.thread_dump import python_threads
from millstream.runtime.metrics.system import host_memory_bytes, process_rss_bytes, process_tree_rss_bytes
from millstream.runtime.execution_state import JobStatus
from millstream.jobmanager.rest.flink_dashboard import DASHBOARD_PREFIX, FlinkDashboard, find_flink_dist
from millstream.jobmanager.rest.guard import GuardedSite, allowed_hosts, host_refusal
from millstream.jobmanager.rest.logs import LOG_ROUTES, TEXT_PATHS, LogHandlers
from millstream.jobmanager.task_logs import TaskLogs
from millstream.jobmanager.rest.views import (
    BadRequest,
    Conflict,
    JobView,
    NotFound,
    SavepointOperation,
    TaskManagerView,
    error_body,
)
from millstream.proto import cluster_pb2 as cpb
from millstream.runtime.rpc.auth import Role, TokenAuthenticator
from millstream.runtime.rpc.tls import TlsSettings

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
OPENAPI_PATH = "/v1/openapi.json"
# The web UI: static files (package data) served at / and /web/<name>, without a token and on a
# standby too (the page itself asks for the token and shows the API's errors).
WEB_DIR = Path(__file__).resolve().parent / "web"
WEB_FILES = {"index.html": "text/html", "app.js": "application/javascript", "style.css": "text/css"}
_BEARER = "bearer "
# Savepoint operations kept for their status (Flink keeps them rest.async.store-duration); the
# oldest finished ones go beyond this many.
MAX_SAVEPOINT_OPERATIONS = 1000


class RestSource(Protocol):
    """What the REST API reads: the JobManager's in-memory state, on its event loop."""

    def leads(self) -> bool: ...
    def cluster_overview(self) -> cpb.ClusterOverview: ...
    def job_views(self) -> list[JobView]: ...
    def job_view(self, job_id: bytes) -> JobView | None: ...
    def cancel(self, job_id: bytes) -> None: ...
    def taskmanager_views(self) -> list[TaskManagerView]: ...
    def start_savepoint(self, job_id: bytes, directory: str, stop: bool, drain: bool = False) -> Awaitable[str]:
        """Checks now (NotFound, BadRequest, Conflict); the awaitable takes it and gives its path."""
        ...
    def vertex_views(self, job_id: bytes) -> dict[bytes, metrics_views.VertexView] | None:
        """The job's vertices with their current attempts (None: no such job)."""
    def configuration(self) -> dict[str, str]:
        """The JobManager's configuration: every key set, as text."""
        ...
    def start_checkpoint(self, job_id: bytes, full: bool = False) -> Awaitable[int]:
        """Checks now (NotFound, Conflict); the awaitable takes a checkpoint and gives its id."""
        ...
    def dispose_savepoint(self, path: str) -> Awaitable[str]:
        """Deletes the savepoint at ``path``; raises if it is none."""
        ...


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(body), status=status, content_type="application/json")


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    response = _json(error_body(message), status)
    if headers:
        response.headers.update(headers)
    return response


# Path template -> {method: summary}: the routes and the OpenAPI document from one table.
ROUTES: dict[str, dict[str, str]] = {
    "/config": {"get": "The dashboard configuration: refresh interval, version, features."},
    "/overview": {"get": "Cluster overview: TaskManagers, slots, jobs per state, version."},
    "/jobs": {"get": "Every job's id and status."},
    "/jobs/overview": {"get": "Every job's name, state, times and task counts per state."},
    "/jobs/{jobid}": {"get": "A job's details: timestamps, vertices (state, tasks, records), status counts, plan.",
                      "patch": "Cancels the job (mode=cancel, the default): 202 once the cancellation started."},
    "/jobs/{jobid}/plan": {"get": "The job's dataflow plan: one node per operator chain, inputs with ship strategies."},
    "/jobs/{jobid}/exceptions": {"get": "The job's root exception (remote traceback) and exception history."},
    "/jobs/{jobid}/checkpoints": {"get": "Checkpoint counts and the latest completed, failed and restored one.",
                                  "post": "Triggers a checkpoint ({\"checkpointType\": CONFIGURED, FULL or INCREMENTAL, "
                                          "\"triggerId\"}): 202 {\"request-id\"}; poll /jobs/{jobid}/checkpoints/{triggerid}."},
    "/jobs/{jobid}/vertices/{vertexid}": {"get": "A vertex's subtasks: state, attempt, TaskManager, times, I/O metrics."},
    "/jobs/{jobid}/vertices/{vertexid}/metrics": {
        "get": "The vertex's metric ids (<subtask>.<metric>, user metrics <subtask>.<operator>.<group>.<name>); "
               "with get=a,b their values."},
    "/jobs/{jobid}/vertices/{vertexid}/subtasks/metrics": {
        "get": "The vertex's metric names; with get=a,b each aggregated over the subtasks (agg=min,max,avg,sum)."},
    "/jobs/{jobid}/vertices/{vertexid}/backpressure": {
        "get": "Each subtask's backpressured / idle / busy time ratio and backpressure level (ok, low, high)."},
    "/jobs/{jobid}/savepoints": {"post": "Triggers a savepoint ({\"target-directory\", \"cancel-job\", \"triggerId\"}): "
                                         "202 {\"request-id\"}; poll /jobs/{jobid}/savepoints/{triggerid}."},
    "/jobs/{jobid}/savepoints/{triggerid}": {"get": "A savepoint operation: status IN_PROGRESS or COMPLETED, "
                                                    "then operation.location or operation.failure-cause."},
    "/jobs/{jobid}/checkpoints/{triggerid}": {
        "get": "A checkpoint triggered by hand: status IN_PROGRESS or COMPLETED, then operation.checkpointId "
               "or operation.failureCause."},
    "/savepoint-disposal": {"post": "Deletes a savepoint ({\"savepoint-path\"}): 200 {\"request-id\"}; "
                                    "poll /savepoint-disposal/{triggerid}."},
    "/savepoint-disposal/{triggerid}": {"get": "A savepoint disposal: status IN_PROGRESS or COMPLETED, "
                                               "then operation.failure-cause if it failed."},
    "/jobs/{jobid}/stop": {"post": "Stops the job with a synchronous savepoint ({\"targetDirectory\", \"drain\"}): "
                                   "202 {\"request-id\"}, polled as a savepoint; COMPLETED once the job FINISHED."},
    "/jobs/{jobid}/config": {"get": "The job's execution configuration: restart strategy, parallelism (Flink's JobConfigInfo)."},
    "/jobs/{jobid}/yarn-cancel": {"get": "Cancels the job, as PATCH /jobs/{jobid} does (the path Flink's dashboard calls)."},
    "/jobs/{jobid}/checkpoints/config": {"get": "The job's checkpoint configuration (Flink's CheckpointConfigInfo); "
                                                "404 without checkpointing."},
    "/jobs/{jobid}/checkpoints/details/{checkpointid}": {"get": "One checkpoint's statistics, while kept."},
    "/jobs/{jobid}/checkpoints/details/{checkpointid}/subtasks/{vertexid}": {
        "get": "One vertex's part of a checkpoint: each subtask's acknowledgement, state size and durations."},
    "/jobs/{jobid}/vertices/{vertexid}/watermarks": {"get": "Each subtask's current input watermark."},
    "/jobs/{jobid}/vertices/{vertexid}/taskmanagers": {"get": "The vertex's subtasks grouped by TaskManager."},
    "/jobs/{jobid}/vertices/{vertexid}/accumulators": {"get": "The vertex's user accumulators (none in PyFlink's API)."},
    "/jobs/{jobid}/vertices/{vertexid}/subtasks/accumulators": {"get": "Each subtask's user accumulators (none)."},
    "/jobs/{jobid}/vertices/{vertexid}/flamegraph": {"get": "Flink's answer with flame graphs disabled "
                                                            "(endTimestamp -2): they sample JVM stacks."},
    "/applications/overview": {"get": "Flink 2.3's applications: one per job."},
    "/jobmanager/config": {"get": "The JobManager's configuration: [{\"key\", \"value\"}], secrets hidden."},
    "/jobmanager/environment": {"get": "The JobManager's interpreter: version, architecture, command line, path."},
    "/jobmanager/metrics": {"get": "The JobManager's process metrics (ids; with get=a,b their values)."},
    "/jobmanager/thread-dump": {"get": "The JobManager's Python threads, each with its stack."},
    "/jobs/{jobid}/rescales/config": {"get": "The adaptive scheduler's settings (Flink's JobRescaleConfigInfo); "
                                             "404 under the default scheduler."},
    "/jobs/{jobid}/rescales/overview": {"get": "The rescale counts and the latest rescale (Flink's "
                                               "JobRescalesOverview); 404 unless "
                                               "web.adaptive-scheduler.rescale-history.size > 0."},
    "/jobs/{jobid}/rescales/summary": {"get": "The rescale counts and durations (Flink's JobRescalesSummary); "
                                              "404 as overview."},
    "/jobs/{jobid}/rescales/history": {"get": "The latest rescales, latest first (Flink's JobRescalesHistory); "
                                              "404 as overview."},
    "/jobs/{jobid}/rescales/details/{rescaleuuid}": {"get": "One rescale with its scheduler states (Flink's "
                                                             "JobRescaleDetails); 404 as overview."},
    "/jobs/{jobid}/rescale-events": {"get": "Millstream's: each rescale of the adaptive scheduler (time, old and "
                                            "new parallelism, reason), oldest first; the web UI's timeline."},
    "/taskmanagers/{taskmanagerid}/metrics": {"get": "A TaskManager's process metrics, from its latest heartbeat."},
    "/taskmanagers": {"get": "Every registered TaskManager: address, slots, free slots, last heartbeat."},
    "/taskmanagers/{taskmanagerid}": {"get": "One TaskManager and its allocated slots."},
    OPENAPI_PATH: {"get": "This document."},
}
ROUTES.update(LOG_ROUTES)


def openapi_document(version: str) -> dict[str, Any]:
    """A hand-written OpenAPI 3 document listing :data:`ROUTES`."""
    paths: dict[str, Any] = {}
    for path, methods in ROUTES.items():
        entry: dict[str, Any] = {}
        for method, summary in methods.items():
            operation: dict[str, Any] = {"summary": summary, "responses": {
                "202" if method in ("patch", "post") else "200": {"description": "OK", "content": {
                    "text/plain" if path in TEXT_PATHS else "application/json": {}}},
                "404": {"description": "Unknown id: {\"errors\": [...]}"},
            }}
            parameters = [{"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
                          for name in re.findall(r"{(\w+)}", path)]
            if path.endswith("metrics"):
                parameters.extend({"name": name, "in": "query", "required": False, "schema": {"type": "string"}}
                                  for name in (("get", "agg") if "subtasks" in path else ("get",)))
            if method == "patch":
                parameters.append({"name": "mode", "in": "query", "required": False,
                                   "schema": {"type": "string", "enum": ["cancel"]}})
            if parameters:
                operation["parameters"] = parameters
            entry[method] = operation
        paths[path] = entry
    return {
        "openapi": "3.0.1",
        "info": {"title": "Millstream JobManager REST API", "version": version,
                 "description": "Flink's REST paths and field names, served by the Millstream JobManager."},
        "paths": paths,
    }


ALLOWED_BY_DEFAULT = allowed_hosts(())  # localhost and IP literals
MAX_JSON_DEPTH = 32  # Flink's request bodies are flat objects


def _nesting_depth(text: str) -> int:
    """The deepest bracket nesting of a JSON text (brackets inside strings count too: an upper
    bound, cheap and without recursion)."""
    depth = deepest = 0
    for char in text:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class RestServer:
    """``await RestServer(source, ...).start(host, port)`` serves until :meth:`stop`."""

    def __init__(self, source: RestSource, version: str, *, tls: TlsSettings | None = None,
                 authenticator: TokenAuthenticator | None = None, task_logs: TaskLogs | None = None,
                 hosts: frozenset[str] | None = ALLOWED_BY_DEFAULT, max_connections: int = 512,
                 header_timeout_s: float = 10.0, idle_timeout_s: float = 60.0,
                 refresh_interval_ms: int = 3000, flink_dashboard: bool = False,
                 rescale_settings: rescales.RescaleHistorySettings = rescales.RescaleHistorySettings()) -> None:
        """``task_logs``: reads TaskManagers' logs and subtask output (None: those paths are 404);
        ``hosts``: the Host names served (:mod:`rest_guard`; None: any); the connection limits:
        rest.max-connections, rest.header-timeout, rest.idle-timeout; ``refresh_interval_ms``: how
        often the web UI refreshes (``web.refresh-interval``); ``flink_dashboard``: serve Flink's
        own dashboard at /flink/ (``rest.web.flink-dashboard``; DashboardNotFound without its jar);
        ``rescale_settings``: what /jobs/:jobid/rescales/* serve (:mod:`rescales`)."""
        self._rescale_settings = rescale_settings
        self._dashboard = FlinkDashboard(find_flink_dist()) if flink_dashboard else None
        self._source = source
        self._hosts = hosts
        self._limits = (max_connections, header_timeout_s, idle_timeout_s)
        self.site: GuardedSite | None = None
        self._refresh_interval_ms = refresh_interval_ms
        self._log_handlers = LogHandlers(task_logs)
        self._version = version
        self._tls = tls
        self._authenticator = authenticator
        self._runner: web.AppRunner | None = None
        # (job id hex, trigger id) -> its savepoint, insertion ordered; the tasks taking them.
        self._savepoints: collections.OrderedDict[tuple[str, str], SavepointOperation] = collections.OrderedDict()
        self._savepoint_tasks: set[asyncio.Task[None]] = set()
        # Checkpoints by hand ((job id hex, trigger id) ->) and disposals (trigger id ->).
        self._checkpoint_ops: collections.OrderedDict[tuple[str, str], views.TriggeredOperation] = collections.OrderedDict()
        self._disposals: collections.OrderedDict[str, views.TriggeredOperation] = collections.OrderedDict()
        self.port = 0
        self.url = ""

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware])
        get = {
            "/config": self._config,
            "/overview": self._overview,
            "/jobs": self._jobs,
            "/jobs/overview": self._jobs_overview,  # before /jobs/{jobid}: routes match in order
            "/jobs/{jobid}": self._job,
            "/jobs/{jobid}/plan": self._plan,
            "/jobs/{jobid}/exceptions": self._exceptions,
            "/jobs/{jobid}/checkpoints": self._checkpoints,
            "/jobs/{jobid}/vertices/{vertexid}": self._vertex,
            "/jobs/{jobid}/vertices/{vertexid}/metrics": self._vertex_metrics,
            "/jobs/{jobid}/vertices/{vertexid}/subtasks/metrics": self._subtasks_metrics,
            "/jobs/{jobid}/vertices/{vertexid}/backpressure": self._backpressure,
            "/jobs/{jobid}/config": self._job_config,
            "/jobs/{jobid}/yarn-cancel": self._cancel,
            "/jobs/{jobid}/checkpoints/config": self._checkpoint_config,  # before .../checkpoints/{triggerid}
            "/jobs/{jobid}/checkpoints/details/{checkpointid}": self._checkpoint_details,
            "/jobs/{jobid}/checkpoints/details/{checkpointid}/subtasks/{vertexid}": self._checkpoint_subtasks,
            "/jobs/{jobid}/vertices/{vertexid}/watermarks": self._watermarks,
            "/jobs/{jobid}/vertices/{vertexid}/taskmanagers": self._vertex_taskmanagers,
            "/jobs/{jobid}/vertices/{vertexid}/accumulators": self._accumulators,
            "/jobs/{jobid}/vertices/{vertexid}/subtasks/accumulators": self._subtasks_accumulators,
            "/jobs/{jobid}/vertices/{vertexid}/flamegraph": self._flame_graph,
            "/applications/overview": self._applications,
            "/jobmanager/config": self._jobmanager_config,
            "/jobmanager/environment": self._jobmanager_environment,
            "/jobmanager/metrics": self._jobmanager_metrics,
            "/jobmanager/thread-dump": self._jobmanager_thread_dump,
            "/jobs/{jobid}/rescales/config": self._rescales(rescales.config_view),
            "/jobs/{jobid}/rescales/overview": self._rescales(rescales.overview_view),
            "/jobs/{jobid}/rescales/summary": self._rescales(rescales.summary_view),
            "/jobs/{jobid}/rescales/history": self._rescales(rescales.history_view),
            "/jobs/{jobid}/rescales/details/{rescaleuuid}": self._rescale_details,
            "/jobs/{jobid}/rescale-events": self._rescale_events,
            "/taskmanagers": self._taskmanagers,
            "/taskmanagers/{taskmanagerid}": self._taskmanager,
            "/taskmanagers/{taskmanagerid}/metrics": self._taskmanager_metrics,
            **self._log_handlers.routes(),
        }
        prefixes = ("", "/v1", DASHBOARD_PREFIX) if self._dashboard is not None else ("", "/v1")
        for prefix in prefixes:
            for path, handler in get.items():
                app.router.add_get(prefix + path, handler, allow_head=False)
            app.router.add_patch(prefix + "/jobs/{jobid}", self._cancel)
            app.router.add_post(prefix + "/jobs/{jobid}/savepoints", self._trigger_savepoint)
            app.router.add_get(prefix + "/jobs/{jobid}/savepoints/{triggerid}", self._savepoint_status, allow_head=False)
            app.router.add_post(prefix + "/jobs/{jobid}/stop", self._stop_with_savepoint)
            app.router.add_post(prefix + "/jobs/{jobid}/checkpoints", self._trigger_checkpoint)
            app.router.add_get(prefix + "/jobs/{jobid}/checkpoints/{triggerid}", self._checkpoint_status,
                               allow_head=False)
            app.router.add_post(prefix + "/savepoint-disposal", self._dispose_savepoint)
            app.router.add_get(prefix + "/savepoint-disposal/{triggerid}", self._disposal_status, allow_head=False)
        app.router.add_get(OPENAPI_PATH, self._openapi, allow_head=False)
        app.router.add_get("/", self._web, allow_head=False)
        app.router.add_get("/web/{name}", self._web, allow_head=False)
        if self._dashboard is not None:  # after the REST paths under /flink: the files are the rest
            app.router.add_get(DASHBOARD_PREFIX, self._to_dashboard, allow_head=False)
            app.router.add_get(DASHBOARD_PREFIX + "/{name:.*}", self._flink_dashboard, allow_head=False)
        return app

    async def start(self, host: str, port: int) -> int:
        """Binds and serves; returns the bound port (``port`` 0: a free one). An OSError if taken."""
        max_connections, header_timeout_s, idle_timeout_s = self._limits
        runner = web.AppRunner(self.app(), access_log=None, handle_signals=False, keepalive_timeout=idle_timeout_s)
        await runner.setup()
        ssl_context = self._tls.server_context() if self._tls is not None else None
        site = self.site = GuardedSite(runner, host, port, ssl_context=ssl_context, reuse_address=True,
                                       max_connections=max_connections, header_timeout_s=header_timeout_s)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = int(runner.addresses[0][1])
        shown = "localhost" if host in ("", "0.0.0.0", "::") else host
        self.url = f"{'https' if ssl_context else 'http'}://{shown}:{self.port}"
        return self.port

    async def stop(self) -> None:
        if self._dashboard is not None:
            self._dashboard.close()
        for task in list(self._savepoint_tasks):
            task.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- cross-cutting: errors, authentication, leadership -------------------------------------

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        misdirected = host_refusal(request.headers.get("Host"), self._hosts)
        if misdirected is not None:
            return _error(421, misdirected)
        if request.path != OPENAPI_PATH and not is_web_path(request.path) and not self._is_dashboard_file(request.path):
            refused = self._refusal(request)
            if refused is not None:
                return refused
            if not self._source.leads():
                return _error(503, "This JobManager is not the leader: ask the leading JobManager's REST API.")
        try:
            return await handler(request)
        except NotFound as exc:
            return _error(404, str(exc))
        except BadRequest as exc:
            return _error(400, str(exc))
        except Conflict as exc:
            return _error(409, str(exc))
        except web.HTTPMethodNotAllowed as exc:
            return _error(405, f"{request.method} is not allowed on {request.path}; allowed: "
                               f"{', '.join(sorted(exc.allowed_methods))}")
        except web.HTTPNotFound:
            return _error(404, f"Not found: {request.path}")

    def _refusal(self, request: web.Request) -> web.Response | None:
        """401/403 unless the request carries the client token (when token authentication is on)."""
        if self._authenticator is None:
            return None
        challenge = {"WWW-Authenticate": "Bearer"}
        header = request.headers.get("Authorization")
        if header is None:
            return _error(401, "This REST API needs the client token: send 'Authorization: Bearer <token>'.", challenge)
        if header[:len(_BEARER)].lower() != _BEARER or not header[len(_BEARER):].strip():
            return _error(401, "The Authorization header is not 'Bearer <token>'.", challenge)
        role = self._authenticator.role_of(header[len(_BEARER):].strip())
        if role is None:
            return _error(401, "The token is not valid here.", challenge)
        if role is not Role.CLIENT:
            return _error(403, f"The REST API takes the client token ({Role.CLIENT.option.key}), not the {role.value} token.")
        return None

    # -- handlers ------------------------------------------------------------------------------

    def _job_view(self, request: web.Request) -> JobView:
        text = request.match_info["jobid"]
        job = self._source.job_view(views.parse_job_id(text))
        if job is None:
            raise NotFound(f"Job {text} not found.")
        return job

    async def _config(self, request: web.Request) -> web.StreamResponse:
        return _json(views.config_view(self._version, self._refresh_interval_ms))

    async def _overview(self, request: web.Request) -> web.StreamResponse:
        return _json(views.overview_view(self._source.cluster_overview(), self._version))

    async def _jobs(self, request: web.Request) -> web.StreamResponse:
        return _json(views.jobs_view(self._source.job_views()))

    async def _jobs_overview(self, request: web.Request) -> web.StreamResponse:
        return _json(views.jobs_overview_view(self._source.job_views(), wall_ms()))

    async def _job(self, request: web.Request) -> web.StreamResponse:
        return _json(views.job_details_view(self._job_view(request), wall_ms()))

    async def _plan(self, request: web.Request) -> web.StreamResponse:
        return _json(views.plan_view(self._job_view(request)))

    async def _exceptions(self, request: web.Request) -> web.StreamResponse:
        max_exceptions = views.parse_max_exceptions(request.query.get("maxExceptions"))
        return _json(views.exceptions_view(self._job_view(request), wall_ms(), max_exceptions))

    async def _checkpoints(self, request: web.Request) -> web.StreamResponse:
        return _json(views.checkpoints_view(self._job_view(request)))

    def _vertex_view(self, request: web.Request) -> metrics_views.VertexView:
        text = request.match_info["jobid"]
        job_id = views.parse_job_id(text)
        vertex_id = metrics_views.parse_vertex_id(request.match_info["vertexid"])
        vertices = self._source.vertex_views(job_id)
        if vertices is None:
            raise NotFound(f"Job {text} not found.")
        return metrics_views.find_vertex(vertices, vertex_id, text)

    async def _vertex(self, request: web.Request) -> web.StreamResponse:
        return _json(metrics_views.vertex_details_view(self._vertex_view(request), wall_ms()))

    async def _vertex_metrics(self, request: web.Request) -> web.StreamResponse:
        return _json(metrics_views.vertex_metrics_view(self._vertex_view(request), request.query.get("get")))

    async def _subtasks_metrics(self, request: web.Request) -> web.StreamResponse:
        return _json(metrics_views.subtasks_metrics_view(self._vertex_view(request), request.query.get("get"),
                                                        request.query.get("agg")))

    async def _backpressure(self, request: web.Request) -> web.StreamResponse:
        return _json(metrics_views.backpressure_view(self._vertex_view(request), wall_ms()))

    async def _taskmanagers(self, request: web.Request) -> web.StreamResponse:
        return _json(views.taskmanagers_view(self._source.taskmanager_views()))

    def _taskmanager_view(self, request: web.Request) -> TaskManagerView:
        wanted = request.match_info["taskmanagerid"]
        for tm in self._source.taskmanager_views():
            if tm.info.resource_id == wanted:
                return tm
        raise NotFound(f"TaskManager {wanted} not found.")

    async def _taskmanager(self, request: web.Request) -> web.StreamResponse:
        return _json(views.taskmanager_details_view(self._taskmanager_view(request)))

    async def _taskmanager_metrics(self, request: web.Request) -> web.StreamResponse:
        r = self._taskmanager_view(request).resources
        values = {} if r is None else views.process_metrics(r.process_rss_bytes, r.process_tree_rss_bytes,
                                                             r.physical_memory_bytes)
        return _json(metrics_views.named_metrics_view(values, request.query.get("get")))

    async def _job_config(self, request: web.Request) -> web.StreamResponse:
        return _json(views.job_config_view(self._job_view(request)))

    async def _checkpoint_config(self, request: web.Request) -> web.StreamResponse:
        return _json(views.checkpoint_config_view(self._job_view(request)))

    async def _checkpoint_details(self, request: web.Request) -> web.StreamResponse:
        return _json(views.checkpoint_details_view(self._job_view(request), request.match_info["checkpointid"]))

    async def _checkpoint_subtasks(self, request: web.Request) -> web.StreamResponse:
        job = self._job_view(request)
        vertex_id = metrics_views.parse_vertex_id(request.match_info["vertexid"])
        return _json(views.checkpoint_subtasks_view(job, request.match_info["checkpointid"], vertex_id))

    async def _watermarks(self, request: web.Request) -> web.StreamResponse:
        return _json(metrics_views.watermarks_view(self._vertex_view(request)))

    async def _vertex_taskmanagers(self, request: web.Request) -> web.StreamResponse:
        return _json(metrics_views.vertex_taskmanagers_view(self._vertex_view(request), wall_ms()))

    async def _accumulators(self, request: web.Request) -> web.StreamResponse:
        return _json(metrics_views.accumulators_view(self._vertex_view(request)))

    async def _subtasks_accumulators(self, request: web.Request) -> web.StreamResponse:
        return _json(metrics_views.subtasks_accumulators_view(self._vertex_view(request)))

    async def _flame_graph(self, request: web.Request) -> web.StreamResponse:
        self._vertex_view(request)  # 404 for an unknown job or vertex, as Flink
        return _json(metrics_views.flame_graph_view())

    async def _applications(self, request: web.Request) -> web.StreamResponse:
        return _json(views.applications_overview_view(self._source.job_views(), wall_ms()))

    async def _jobmanager_config(self, request: web.Request) -> web.StreamResponse:
        return _json(views.cluster_config_view(self._source.configuration()))

    async def _jobmanager_environment(self, request: web.Request) -> web.StreamResponse:
        return _json(views.environment_view(f"Python {sys.version.split()[0]} ({platform.python_implementation()})",
                                            platform.machine(), list(sys.argv), list(sys.path)))

    async def _jobmanager_thread_dump(self, request: web.Request) -> web.StreamResponse:
        return _json(views.thread_dump_view(python_threads()))

    def _rescales(self, view: Callable[[JobView, rescales.RescaleHistorySettings], Any]) -> Any:
        async def handler(request: web.Request) -> web.StreamResponse:
            return _json(view(self._job_view(request), self._rescale_settings))
        return handler

    async def _rescale_details(self, request: web.Request) -> web.StreamResponse:
        return _json(rescales.details_view(self._job_view(request), self._rescale_settings,
                                           request.match_info["rescaleuuid"]))

    async def _rescale_events(self, request: web.Request) -> web.StreamResponse:
        return _json(views.rescale_events_view(self._job_view(request)))

    async def _jobmanager_metrics(self, request: web.Request) -> web.StreamResponse:
        values = views.process_metrics(process_rss_bytes(), process_tree_rss_bytes(), host_memory_bytes()[0])
        return _json(metrics_views.named_metrics_view(values, request.query.get("get")))

    async def _cancel(self, request: web.Request) -> web.StreamResponse:
        mode = request.query.get("mode", "cancel")
        if mode != "cancel":
            raise BadRequest(f"mode={mode} is not supported: only mode=cancel (stop-with-savepoint: `millstream stop`).")
        job = self._job_view(request)
        status = JobStatus.from_proto(job.summary.status)
        if status.is_globally_terminal():  # Flink's JobCancellationHandler: 409, nothing to cancel
            raise Conflict(f"Job cancellation failed because the job has already reached another terminal "
                           f"state ({status.value}).")
        self._source.cancel(job.summary.job_id)
        return _json({}, 202)

    # -- savepoints: Flink's asynchronous operations --------------------------------------------

    @staticmethod
    async def _json_body(request: web.Request) -> Any:
        """The body as JSON; every malformed body is a 400 naming why, never a 500."""
        raw = await request.read()  # at most the application's client_max_size (413 beyond)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadRequest(f"The request body is not UTF-8: {exc.reason} at byte {exc.start}.") from None
        if not text.strip():
            return {}
        depth = _nesting_depth(text)
        if depth > MAX_JSON_DEPTH:  # json's recursive decoder would hit the recursion limit
            raise BadRequest(f"The request body is not valid here: JSON nested {depth} levels deep; "
                             f"at most {MAX_JSON_DEPTH} are allowed.")
        try:
            return json.loads(text, parse_constant=_no_constant)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
            raise BadRequest(f"The request body is not JSON: {exc}") from None

    async def _trigger_savepoint(self, request: web.Request) -> web.StreamResponse:
        job = self._job_view(request)
        directory, cancel_job, trigger_id = views.savepoint_trigger_request(await self._json_body(request))
        # cancel-job (Flink's cancel-with-savepoint): the savepoint, then a cancel; the job ends CANCELED.
        return self._start_savepoint(job, directory, False, trigger_id, cancel_after=cancel_job)

    async def _stop_with_savepoint(self, request: web.Request) -> web.StreamResponse:
        job = self._job_view(request)
        directory, drain, trigger_id = views.stop_request(await self._json_body(request))
        return self._start_savepoint(job, directory, True, trigger_id, drain=drain)

    def _start_savepoint(self, job: JobView, directory: str, stop: bool, trigger_id: str | None,
                         cancel_after: bool = False, drain: bool = False) -> web.Response:
        """202 with the trigger id at once; the savepoint is taken by a task on this loop. A trigger
        id given again for the same job answers the same operation (Flink's safe retry)."""
        job_hex = job.summary.job_id.hex()
        if trigger_id is not None and (job_hex, trigger_id) in self._savepoints:
            return _json({"request-id": trigger_id}, 202)
        taking = self._source.start_savepoint(job.summary.job_id, directory, stop, drain)
        operation = SavepointOperation(job.summary.job_id, trigger_id or os.urandom(16).hex(), stop or cancel_after)
        self._remember(job_hex, operation)
        task = asyncio.ensure_future(self._take_savepoint(operation, taking, cancel_after))
        self._savepoint_tasks.add(task)
        task.add_done_callback(self._savepoint_tasks.discard)
        return _json({"request-id": operation.trigger_id}, 202)

    def _remember(self, job_hex: str, operation: SavepointOperation) -> None:
        self._savepoints[(job_hex, operation.trigger_id)] = operation
        excess = len(self._savepoints) - MAX_SAVEPOINT_OPERATIONS
        for key in [k for k, op in self._savepoints.items() if op.done][:max(0, excess)]:
            del self._savepoints[key]

    async def _take_savepoint(self, operation: SavepointOperation, taking: Awaitable[str], cancel_after: bool) -> None:
        try:
            operation.location = await taking
            if cancel_after:
                self._source.cancel(operation.job_id)
        except asyncio.CancelledError:
            operation.failure = "the REST server stopped before the savepoint completed"
            raise
        except Exception as exc:  # the operation's failure-cause; the server keeps serving
            operation.failure = str(exc) or type(exc).__name__
            log.info("savepoint %s of job %s failed: %s", operation.trigger_id, operation.job_id.hex(), operation.failure)

    async def _savepoint_status(self, request: web.Request) -> web.StreamResponse:
        job = self._job_view(request)
        trigger_id = views.parse_trigger_id(request.match_info["triggerid"])
        operation = self._savepoints.get((job.summary.job_id.hex(), trigger_id))
        if operation is None:
            raise NotFound(f"There is no savepoint operation {trigger_id} of job {job.summary.job_id.hex()}.")
        return _json(views.savepoint_status_view(operation))

    # -- checkpoints by hand, savepoint disposal ------------------------------------------------

    def _run_operation(self, operation: views.TriggeredOperation, running: Awaitable[Any]) -> None:
        """Runs ``running`` on this loop; its result or failure completes ``operation``."""
        async def run() -> None:
            try:
                operation.result = await running
            except asyncio.CancelledError:
                operation.failure = "the REST server stopped before the operation completed"
                raise
            except Exception as exc:  # the operation's failure cause; the server keeps serving
                operation.failure = str(exc) or type(exc).__name__
            finally:
                operation.done = True

        task = asyncio.ensure_future(run())
        self._savepoint_tasks.add(task)
        task.add_done_callback(self._savepoint_tasks.discard)

    @staticmethod
    def _keep(operations: collections.OrderedDict[Any, views.TriggeredOperation], key: Any,
              operation: views.TriggeredOperation) -> None:
        operations[key] = operation
        excess = len(operations) - MAX_SAVEPOINT_OPERATIONS
        for old in [k for k, op in operations.items() if op.done][:max(0, excess)]:
            del operations[old]

    async def _trigger_checkpoint(self, request: web.Request) -> web.StreamResponse:
        """Flink's CheckpointTriggerHandler: 202 with a trigger id at once; refusals known now (no
        such job, not running, no checkpointing) are answered at once too."""
        job = self._job_view(request)
        kind, trigger_id = views.checkpoint_trigger_request(await self._json_body(request))
        key = (job.summary.job_id.hex(), trigger_id or "")
        if trigger_id is not None and key in self._checkpoint_ops:  # a retry: the same operation
            return _json({"request-id": trigger_id}, 202)
        taking = self._source.start_checkpoint(job.summary.job_id, full=kind == "FULL")
        operation = views.TriggeredOperation(trigger_id or os.urandom(16).hex())
        self._keep(self._checkpoint_ops, (key[0], operation.trigger_id), operation)
        self._run_operation(operation, taking)
        return _json({"request-id": operation.trigger_id}, 202)

    async def _checkpoint_status(self, request: web.Request) -> web.StreamResponse:
        job = self._job_view(request)
        trigger_id = views.parse_trigger_id(request.match_info["triggerid"])
        operation = self._checkpoint_ops.get((job.summary.job_id.hex(), trigger_id))
        if operation is None:
            raise NotFound(f"There is no checkpoint operation {trigger_id} of job {job.summary.job_id.hex()}.")
        return _json(views.checkpoint_status_view(operation))

    async def _dispose_savepoint(self, request: web.Request) -> web.StreamResponse:
        path = views.disposal_request(await self._json_body(request))
        operation = views.TriggeredOperation(os.urandom(16).hex(), failure_class="FlinkException")
        self._keep(self._disposals, operation.trigger_id, operation)
        self._run_operation(operation, self._source.dispose_savepoint(path))
        return _json({"request-id": operation.trigger_id})  # 200, where Flink's other triggers answer 202

    async def _disposal_status(self, request: web.Request) -> web.StreamResponse:
        trigger_id = views.parse_trigger_id(request.match_info["triggerid"])
        operation = self._disposals.get(trigger_id)
        if operation is None:
            raise NotFound(f"There is no savepoint disposal {trigger_id}.")
        return _json(views.disposal_status_view(operation))

    def _is_dashboard_file(self, path: str) -> bool:
        """Flink's dashboard's static files: served without a token and on a standby, as /web/ is."""
        if self._dashboard is None or not (path == DASHBOARD_PREFIX or path.startswith(DASHBOARD_PREFIX + "/")):
            return False
        return path == DASHBOARD_PREFIX or self._dashboard.has(path[len(DASHBOARD_PREFIX) + 1:])

    async def _to_dashboard(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound(DASHBOARD_PREFIX + "/")

    async def _flink_dashboard(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if self._dashboard is None or not self._dashboard.has(name):
            raise NotFound(f"Not found: {request.path}")
        data, content_type = await asyncio.to_thread(self._dashboard.read, name)
        # The index names the current build's files (content-hashed names): it is checked each
        # time, the files are kept by the browser.
        caching = "no-cache" if name in ("", "index.html") else "max-age=86400"
        return web.Response(body=data, content_type=content_type, headers={"Cache-Control": caching})

    async def _openapi(self, request: web.Request) -> web.StreamResponse:
        return _json(openapi_document(self._version))

    async def _web(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info.get("name", "index.html")
        content_type = WEB_FILES.get(name)
        path = WEB_DIR / name
        if content_type is None or not path.is_file():
            raise NotFound(f"Not found: {request.path}")
        return web.Response(body=path.read_bytes(), content_type=content_type, charset="utf-8",
                            headers={"Cache-Control": "no-cache"})


def is_web_path(path: str) -> bool:
    """The web UI's static files: served without a token and on a standby."""
    return path == "/" or path.startswith("/web/")


class JobManagerSource:
    """:class:`RestSource` over a running JobManager's Dispatcher and ResourceManager."""

    def __init__(self, jobmanager: Any) -> None:
        self._jm = jobmanager
        self._dispatcher: DispatcherGateway = jobmanager.dispatcher  # in-process: the gateway's calls, no RPC
        # The cluster's scheduler schedules every job of it: a job ended (its JobMaster gone) or not
        # yet started was scheduled by the adaptive one too (Flink's archived job says Adaptive).
        self._adaptive = adaptive_settings(jobmanager.config) is not None

    def leads(self) -> bool:
        return bool(self._jm.leading.is_set())

    def cluster_overview(self) -> cpb.ClusterOverview:
        return self._jm.overview()

    def _view(self, record: Any, with_io: bool = False) -> JobView:
        """``with_io``: fill the vertices' bytes, times and ratios (O(tasks): one job's details only)."""
        summary = record.summary()
        if with_io:
            vertices = JobManagerSource._vertices(record)
            for v in summary.vertices:
                view = vertices.get(v.vertex_id)
                if view is not None:
                    v.metrics.update(metrics_views.vertex_io_summary(view))
        return JobView(summary, dict(record.status_timestamps), record.plan, tuple(record.exception_history()),
                       record.config, record.checkpoint_config, "Adaptive" if self._adaptive else views.SCHEDULER_TYPE)

    @staticmethod
    def _vertices(record: Any) -> dict[bytes, metrics_views.VertexView]:
        if record.job_master is not None:
            return metrics_views.vertex_views(record.job_master.core)
        return dict(record.final_vertex_views)

    def vertex_views(self, job_id: bytes) -> dict[bytes, metrics_views.VertexView] | None:
        record = self._dispatcher.request_job(job_id)
        return None if record is None else self._vertices(record)

    def job_views(self) -> list[JobView]:
        return [self._view(r) for r in self._dispatcher.list_jobs()]

    def job_view(self, job_id: bytes) -> JobView | None:
        record = self._dispatcher.request_job(job_id)
        return None if record is None else self._view(record, with_io=True)

    def cancel(self, job_id: bytes) -> None:
        self._dispatcher.cancel_job(job_id)

    def start_savepoint(self, job_id: bytes, directory: str, stop: bool, drain: bool = False) -> Awaitable[str]:
        try:
            return self._dispatcher.trigger_savepoint(job_id, directory, stop, drain)
        except DispatcherError as exc:
            raise _rest_error(exc) from None

    def configuration(self) -> dict[str, str]:
        return dict(self._jm.config.to_dict(as_strings=True))

    def start_checkpoint(self, job_id: bytes, full: bool = False) -> Awaitable[int]:
        try:
            return self._dispatcher.trigger_checkpoint(job_id, full)
        except DispatcherError as exc:
            raise _rest_error(exc) from None

    def dispose_savepoint(self, path: str) -> Awaitable[str]:
        return self._dispatcher.dispose_savepoint(path)

    def taskmanager_views(self) -> list[TaskManagerView]:
        rm = self._jm.resource_manager
        tasks: collections.Counter[tuple[str, int]] = collections.Counter()
        for record in self._dispatcher.list_jobs():  # the running jobs' deployed attempts, per slot
            if record.job_master is None:
                continue
            for execution in record.job_master.core.current.values():
                if execution.slot is not None and not execution.state.is_terminal():
                    tasks[(execution.slot.resource_id, execution.slot.slot_index)] += 1
        return [TaskManagerView(info, rm.last_heartbeat_wall_ms(info.resource_id), rm.resources(info.resource_id),
                                {index: n for (tm, index), n in tasks.items() if tm == info.resource_id})
                for info in rm.slots.task_managers()]


def _rest_error(exc: DispatcherError) -> Exception:
    """The Dispatcher's refusal as the REST API's: unknown job 404, a job not running 409, else 400."""
    if exc.kind is ErrorKind.NOT_FOUND:
        return NotFound(str(exc))
    if exc.kind is ErrorKind.FAILED_PRECONDITION:
        return Conflict(str(exc))
    return BadRequest(str(exc))
