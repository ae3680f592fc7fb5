"""Fixtures of the docker-compose tests (`make test-compose`): the Docker engine, started when none
runs and stopped afterwards, and the image, built once per session on a locally made base image.

Where no Docker engine can run at all (no dockerd and not root, or dockerd refused by the machine)
every test here is skipped with the reason; once an engine runs, anything that goes wrong fails.
"""
from __future__ import annotations

from typing import Iterator

import pytest

from .cluster import DockerEngine, build_image


@pytest.fixture(scope="session")
def docker_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockerEngine]:
    engine = DockerEngine(tmp_path_factory.mktemp("dockerd") / "dockerd.log")
    reason = engine.unavailable()
    if reason is not None:
        pytest.skip(f"docker-compose tests skipped: {reason}")
    try:
        yield engine
    finally:
        engine.stop()


@pytest.fixture(scope="session")
def image(docker_engine: DockerEngine, request: pytest.FixtureRequest) -> str:
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")

    def log(line: str) -> None:
        if reporter is not None:
            reporter.write_line(f"compose: {line}")

    return build_image(log)

