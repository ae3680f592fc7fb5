"""The docker ResourceManager's pure parts: its options, the TaskManager container's command line,
the engine address it accepts and the framing of a container's log lines. The containers
themselves: tests/compose/test_compose_ondemand.py (`make test-compose`)."""
from __future__ import annotations

import shlex

import pytest

from millstream.jobmanager.resourcemanager.docker_engine import DockerEngine, DockerEngineError
from millstream.jobmanager.resourcemanager.docker_workers import DockerDriver
from millstream.runtime import config as cfg


def test_options_name_the_image_network_volumes_and_engine() -> None:
    conf = cfg.Configuration.from_dict({
        cfg.RESOURCEMANAGER_TYPE.key: "docker",
        cfg.RESOURCEMANAGER_DOCKER_IMAGE.key: "millstream:1.0",
        cfg.RESOURCEMANAGER_DOCKER_NETWORK.key: "cluster_default",
        cfg.RESOURCEMANAGER_DOCKER_VOLUMES.key: "checkpoints:/checkpoints;/srv/data:/data",
        cfg.RESOURCEMANAGER_DOCKER_HOST.key: "unix:///run/user/1000/docker.sock",
    })
    driver = DockerDriver(conf)
    assert (driver.image, driver.network, driver.volumes) == (
        "millstream:1.0", "cluster_default", ["checkpoints:/checkpoints", "/srv/data:/data"])
    assert driver.engine.host == "unix:///run/user/1000/docker.sock"
    defaults = DockerDriver(cfg.Configuration())
    assert (defaults.image, defaults.network, defaults.volumes, defaults.engine.host) == (
        "millstream:latest", None, [], "unix:///var/run/docker.sock")


def test_the_container_runs_the_taskmanager_advertising_its_own_address() -> None:
    entry = DockerDriver(cfg.Configuration()).entrypoint(["--jobmanager", "jobmanager:6123", "-Dweird key=a b;c'd"])
    assert entry[:2] == ["sh", "-c"]
    words = shlex.split(entry[2])
    assert words[:5] == ["exec", "millstream", "taskmanager", "--jobmanager", "jobmanager:6123"]
    assert words[5] == "-Dweird key=a b;c'd"  # quoted through the shell unchanged
    assert words[6] == "-Dtaskmanager.host=$(hostname -i)"  # the shell substitutes it


def test_only_a_unix_socket_is_accepted() -> None:
    with pytest.raises(DockerEngineError, match="resourcemanager.docker.host: only unix:// sockets"):
        DockerEngine("tcp://127.0.0.1:2375")


def test_an_unreachable_engine_says_so(tmp_path) -> None:
    engine = DockerEngine(f"unix://{tmp_path}/no.sock")
    with pytest.raises(DockerEngineError, match="cannot be reached .* is it running"):
        engine.start("abc")


def test_a_docker_type_is_a_choice_and_a_bad_one_is_named() -> None:
    assert cfg.RESOURCEMANAGER_TYPE.parse("Docker") == "docker"
    with pytest.raises(cfg.ConfigurationError, match="resourcemanager.type: expected one of standalone, process, docker"):
        cfg.RESOURCEMANAGER_TYPE.parse("yarn")
