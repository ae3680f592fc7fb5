"""``resourcemanager.type: docker``: TaskManagers on demand as containers of the Millstream image
(deploy/Dockerfile), through the Docker engine's API (the driver of process_workers'
:class:`OnDemandWorkers`).

A worker is a container of ``resourcemanager.docker.image`` on ``resourcemanager.docker.network``
(the JobManager's, so each reaches the other by name) with ``resourcemanager.docker.volumes``
mounted, running ``millstream taskmanager`` with this JobManager's configuration and advertising its
container address (as docker-compose.yml's TaskManagers do). Its name is its resource id and it is
labelled ``millstream.resource-id``. A container that exits is removed once its last lines were
read for the cause; a missing image or an unreachable engine is a failed start (reported once,
retried with back-off). Containers do not end with a JobManager killed with ``kill -9``: they keep
looking for it, and a JobManager stopped normally stops and removes its own.
"""
from __future__ import annotations

import logging
import shlex

from millstream.jobmanager.resourcemanager.active_workers import WorkerStartError, error_line
from millstream.jobmanager.resourcemanager.docker_engine import DockerEngine, DockerEngineError
from millstream.runtime import config as cfg
from millstream.runtime.entrypoint.process import ERROR_PREFIX

log = logging.getLogger(__name__)

STOP_GRACE_S = 15
LABEL = "millstream.resource-id"


class DockerDriver:
    blocking = True  # every call is an HTTP request to the engine: run in a thread

    def __init__(self, configuration: cfg.Configuration, engine: DockerEngine | None = None) -> None:
        self.engine = engine or DockerEngine(configuration.get(cfg.RESOURCEMANAGER_DOCKER_HOST))
        self.image = configuration.get(cfg.RESOURCEMANAGER_DOCKER_IMAGE)
        self.network = configuration.get(cfg.RESOURCEMANAGER_DOCKER_NETWORK)
        volumes: tuple[str, ...] = configuration.get(cfg.RESOURCEMANAGER_DOCKER_VOLUMES)
        self.volumes = list(volumes)
        self.containers: dict[str, str] = {}  # worker id -> container id

    def entrypoint(self, args: list[str]) -> list[str]:
        """``millstream taskmanager ARGS`` advertising the container's address."""
        command = " ".join(shlex.quote(arg) for arg in ["millstream", "taskmanager", *args])
        return ["sh", "-c", f'exec {command} "-Dtaskmanager.host=$(hostname -i)"']

    def launch(self, worker_id: str, args: list[str]) -> None:
        container = ""
        try:
            container = self.engine.create(worker_id, self.image, self.entrypoint(args), [], self.network,
                                           self.volumes, {LABEL: worker_id})
            self.engine.start(container)
        except DockerEngineError as exc:
            if container:
                self._remove(container)
            raise WorkerStartError(f"the TaskManager container ({self.image}) could not be started: {exc.reason}",
                                   exc.request) from exc
        self.containers[worker_id] = container
        log.info("started TaskManager %s (container %s of %s) for jobs waiting for slots", worker_id, container[:12],
                 self.image)

    def exits(self) -> list[tuple[str, str, str]]:
        ended = []
        for worker_id, container in list(self.containers.items()):
            try:
                state = self.engine.state(container)
                if state is None:
                    del self.containers[worker_id]
                    ended.append((worker_id, "its container was removed", f"container {container[:12]}"))
                elif not state.get("Running") and state.get("Status") in ("exited", "dead"):
                    lines = self.engine.last_lines(container)
                    del self.containers[worker_id]
                    self._remove(container)
                    cause = (f"the TaskManager container exited with code {state.get('ExitCode')}: "
                             f"{state.get('Error') or error_line(lines, ERROR_PREFIX)}")
                    ended.append((worker_id, cause, f"container {container[:12]}"))
            except DockerEngineError as exc:  # the engine is away: ask again next time
                log.debug("cannot inspect container %s: %s", container[:12], exc)
        return ended

    def terminate(self, worker_id: str) -> None:
        container = self.containers.get(worker_id)
        if container is not None:
            try:
                self.engine.stop(container, STOP_GRACE_S)
            except DockerEngineError as exc:
                log.warning("stopping TaskManager container %s: %s", container[:12], exc)

    def _remove(self, container: str) -> None:
        try:
            self.engine.remove(container)
        except DockerEngineError as exc:
            log.warning("removing TaskManager container %s: %s", container[:12], exc)

    def close(self) -> None:
        for worker_id, container in list(self.containers.items()):
            self.terminate(worker_id)
            self._remove(container)
        self.containers.clear()
