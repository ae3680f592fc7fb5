"""TaskManagers on demand in containers (resourcemanager.type: docker, docker-compose.ondemand.yml):
a JobManager without TaskManagers starts TaskManager containers of the millstream image through
the Docker engine when a job needs slots, and stops and removes them once idle; a missing image
is reported once and retried with back-off, not in a tight loop."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from .cluster import IMAGE, ROOT, ComposeProject, run, wait_for

pytestmark = pytest.mark.timeout(900)

LABEL = "label=millstream.resource-id"


def project(data: Path, **environment: str) -> ComposeProject:
    data.chmod(0o777)  # the containers run as root
    name = f"mstest-ondemand-{uuid.uuid4().hex[:8]}"
    return ComposeProject(["docker-compose.yml", "docker-compose.ondemand.yml"], data, {
        "MILLSTREAM_ONDEMAND": name, "MILLSTREAM_CONF_HEARTBEAT_INTERVAL": "1 s",
        "MILLSTREAM_CONF_HEARTBEAT_TIMEOUT": "6 s", "TASKMANAGER_TIMEOUT": "5 s", "TASKMANAGER_IMAGE": IMAGE,
        **environment})


def on_demand_containers(all_states: bool = True) -> list[str]:
    return run(["docker", "ps", "-q", *(["-a"] if all_states else []), "--filter", LABEL]).stdout.split()


@pytest.fixture
def ondemand(image: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ComposeProject]:
    yield from project(tmp_path).session(request, [("jobmanager", 1)], up=["jobmanager"])


def test_a_job_gets_taskmanager_containers_that_are_removed_when_idle(ondemand: ComposeProject) -> None:
    (ondemand.data / "words.txt").write_text("to be or not to be\nthat is the question\n")
    env = {**os.environ, "MILLSTREAM_JOBMANAGER": ondemand.address}
    done = subprocess.run([sys.executable, "-m", "millstream.client.cli", "run", str(ROOT / "examples" / "word_count.py"),
                           "--input", "/data/words.txt", "--output", "/data/counts", "--parallelism", "3"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr + ondemand.logs("jobmanager")
    counted = sorted(line for p in (ondemand.data / "counts").rglob("*") if p.is_file() and not p.name.startswith(".")
                     for line in p.read_text().splitlines())
    assert counted == ["(be,2)", "(is,1)", "(not,1)", "(or,1)", "(question,1)", "(that,1)", "(the,1)", "(to,2)"]
    logs = ondemand.logs("jobmanager")
    started = re.findall(r"started TaskManager (\S+) \(container", logs)
    assert len(started) == 2, logs  # 3 slots of 2 (deploy/millstream.yaml): two containers
    wait_for(lambda: not on_demand_containers(), 90, "the idle TaskManager containers to be stopped and removed")
    assert len(re.findall(r"stopping TaskManager \S+: idle for 5000 ms", ondemand.logs("jobmanager"))) == 2


def test_a_missing_image_is_reported_once_and_retried_with_back_off(image: str, tmp_path: Path,
                                                                   request: pytest.FixtureRequest) -> None:
    missing = project(tmp_path, START_WORKER_RETRY_INTERVAL="1 s", TASKMANAGER_IMAGE="millstream:no-such-image")
    for cluster in missing.session(request, [("jobmanager", 1)], up=["jobmanager"]):
        env = {**os.environ, "MILLSTREAM_JOBMANAGER": cluster.address}
        done = subprocess.run([sys.executable, "-m", "millstream.client.cli", "run", "-Dslot.request.timeout=12 s",
                               str(ROOT / "examples" / "word_count.py"), "--parallelism", "1"],
                              env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode != 0 and "not enough slots" in done.stdout + done.stderr
        logs = cluster.logs("jobmanager")
        reports = re.findall(r"a TaskManager could not be started: (.*)", logs)
        assert len(reports) == 1 and "No such image" in reports[0], logs
        attempts = len(re.findall(r"starting TaskManager taskmanager-ondemand-", logs))
        # back-off 1, 2, 4, 8 s: some 4 attempts in the job's 12 s wait, where a check every 0.5 s
        # without back-off would have made 24
        assert 2 <= attempts <= 6, logs
        assert on_demand_containers() == []
