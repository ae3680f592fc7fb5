"""The docker-compose cluster (issue 12), as a user runs it: `docker compose up -d` starts a
healthy JobManager and two TaskManagers; jobs are submitted from the host with
MILLSTREAM_JOBMANAGER=localhost:PORT; `--scale taskmanager=4` adds TaskManagers that register by
themselves; a `docker kill` of a TaskManager during a checkpointed job leaves the exactly-once
output equal to ground truth; `down --volumes` leaves no container, network or volume behind.
"""
from __future__ import annotations

import collections
import json
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.datastream import MapFunction
from millstream.runtime.execution_state import JobStatus

from tests.integration.harness import completed_checkpoints
from tests.integration.jobs import assert_exactly_once, throttled_failover_graph

from .cluster import ROOT, ComposeProject, run, wait_for

pytestmark = pytest.mark.timeout(900)

FAST_HEARTBEATS = {"MILLSTREAM_CONF_HEARTBEAT_INTERVAL": "1 s", "MILLSTREAM_CONF_HEARTBEAT_TIMEOUT": "6 s"}


@pytest.fixture(scope="module")
def cluster(image: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[ComposeProject]:
    data = tmp_path_factory.mktemp("compose-data")
    data.chmod(0o777)  # the containers run as root
    project = ComposeProject(["docker-compose.yml"], data, FAST_HEARTBEATS)
    yield from project.session(request, [("jobmanager", 1), ("taskmanager", 2)])


def overview(project: ComposeProject):  # noqa: ANN201
    with ClusterClient(project.address) as client:
        return client.overview()


def registered(project: ComposeProject, taskmanagers: int) -> bool:
    o = overview(project)
    return o.taskmanagers == taskmanagers and o.slots_total == 2 * taskmanagers


def test_up_starts_a_healthy_jobmanager_and_two_taskmanagers_registered_with_their_slots(cluster: ComposeProject) -> None:
    assert len(cluster.containers("jobmanager")) == 1
    wait_for(lambda: registered(cluster, 2), 30, "2 TaskManagers with 4 slots")
    volumes = run(["docker", "inspect", "--format", "{{range .Mounts}}{{.Destination}} {{end}}",
                   cluster.containers("taskmanager")[0]]).stdout.split()
    assert sorted(volumes) == ["/checkpoints", "/data"]
    with urllib.request.urlopen(f"http://localhost:{cluster.rest_port}/overview", timeout=10) as response:
        overview = json.load(response)  # the JobManager's REST API, published like its RPC port
    assert (overview["taskmanagers"], overview["slots-total"]) == (2, 4), overview


def test_word_count_submitted_from_the_host_writes_the_exact_counts(cluster: ComposeProject) -> None:
    rng = random.Random(12)
    words = [f"w{rng.paretovariate(1.2):.0f}" for _ in range(60_000)]
    lines = [" ".join(words[i:i + 12]) for i in range(0, len(words), 12)]
    (cluster.data / "words.txt").write_text("\n".join(lines) + "\n")
    env = {**os.environ, "MILLSTREAM_JOBMANAGER": cluster.address}
    done = subprocess.run([sys.executable, "-m", "millstream.client.cli", "run", str(ROOT / "examples" / "word_count.py"),
                           "--input", "/data/words.txt", "--output", "/data/counts"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "submitted" in done.stdout and "FINISHED" in done.stdout, done.stdout
    counted = [line for path in (cluster.data / "counts").rglob("*") if path.is_file() and not path.name.startswith(".")
               for line in path.read_text().splitlines()]
    expected = collections.Counter(words)
    assert sorted(counted) == sorted(f"({word},{n})" for word, n in expected.items())

    # the same job collected back to the host (no --output): the records stream through the JobManager
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "word_count.py"), "--input", "/data/words.txt"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"total words: {len(words)}  distinct words: {len(expected)}" in done.stdout, done.stdout


def test_scaled_to_four_taskmanagers_the_new_ones_register_by_themselves_and_leave_when_scaled_down(
        cluster: ComposeProject) -> None:
    cluster.up("--scale", "taskmanager=4")
    cluster.wait_healthy("taskmanager", 4)
    wait_for(lambda: registered(cluster, 4), 30, "4 TaskManagers with 8 slots")
    cluster.up("--scale", "taskmanager=2")
    wait_for(lambda: registered(cluster, 2), 60, "2 TaskManagers again")


class WhereAmI(MapFunction):
    """Writes the container's hostname (its short id) to ``<directory>/host-<subtask>`` on open."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def open(self, runtime_context) -> None:
        index = runtime_context.get_index_of_this_subtask()
        Path(self.directory, f"host-{index}").write_text(socket.gethostname())

    def map(self, value):
        return value


def test_docker_kill_of_a_taskmanager_during_a_checkpointed_job_keeps_the_output_exactly_once(
        cluster: ComposeProject) -> None:
    count = 6_000
    slow = cluster.data / "slow"
    slow.touch()
    graph = throttled_failover_graph("checkpointed count", Path("/data/out"), count, "/data/slow", 0.003,
                                     before=[WhereAmI("/data")])
    with ClusterClient(cluster.address) as client:
        job_id = client.submit(graph.proto)

        wait_for(lambda: completed_checkpoints(client, job_id, 2), 120, "two completed checkpoints")
        victim = (cluster.data / "host-0").read_text().strip()
        assert victim in cluster.containers("taskmanager") or any(c.startswith(victim) for c in cluster.containers("taskmanager"))
        killed_at = time.monotonic()
        run(["docker", "kill", victim])
        slow.unlink()

        def restored():  # noqa: ANN202
            summary = client.status(job_id)
            return summary if summary.num_restarts >= 1 and summary.checkpoints.latest_restored_id else None
        summary = wait_for(restored, 120, "the job restored from a checkpoint")
        print(f"TaskManager container killed; job restored from checkpoint {summary.checkpoints.latest_restored_id} "
              f"after {time.monotonic() - killed_at:.1f} s")
        final = wait_for(lambda: JobStatus.from_proto(client.status(job_id).status).is_terminal() and client.status(job_id),
                         240, "the job to end")
        assert JobStatus.from_proto(final.status) is JobStatus.FINISHED, final
    assert_exactly_once(cluster.data / "out", count)
    # the killed TaskManager is not restarted by compose (no restart policy): one is left
    wait_for(lambda: registered(cluster, 1), 30, "the dead TaskManager to be unregistered")
