"""The HA variant of the compose cluster (docker-compose.ha.yml, issues 11 and 12): ZooKeeper, a
leader and a standby JobManager. A `docker kill` of the leader's container during a checkpointed
job: the standby takes over, recovers the job from its latest checkpoint, and the exactly-once
output equals ground truth; the host's client, given both addresses, follows the new leader.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import pytest

from millstream.client.cluster_client import ClusterClient, NoJobManagerLeader
from millstream.runtime.execution_state import JobStatus
from tests.integration.harness import completed_checkpoints
from tests.integration.jobs import assert_exactly_once, throttled_failover_graph

from .cluster import BASE_IMAGE, ComposeProject, free_port, run, wait_for
from .test_compose import FAST_HEARTBEATS

pytestmark = pytest.mark.timeout(900)

SESSION_TIMEOUT = "5 s"


@pytest.fixture(scope="module")
def ha_cluster(image: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[ComposeProject]:
    data = tmp_path_factory.mktemp("compose-ha-data")
    data.chmod(0o777)  # the containers run as root
    project = ComposeProject(["docker-compose.yml", "docker-compose.ha.yml"], data,
                             {**FAST_HEARTBEATS, "ZOOKEEPER_SESSION_TIMEOUT": SESSION_TIMEOUT, "STANDBY_PORT": str(free_port()),
                              "ZOOKEEPER_BASE_IMAGE": BASE_IMAGE})
    yield from project.session(request, [("zookeeper", 1), ("jobmanager", 1), ("jobmanager-standby", 1), ("taskmanager", 2)],
                               build=["zookeeper"])


def test_docker_kill_of_the_leader_jobmanager_the_standby_recovers_the_job_exactly_once(
        ha_cluster: ComposeProject) -> None:
    addresses = f"localhost:{ha_cluster.port},localhost:{ha_cluster.env['STANDBY_PORT']}"
    count = 6_000
    slow = ha_cluster.data / "slow"
    slow.touch()
    graph = throttled_failover_graph("checkpointed count", Path("/data/out"), count, "/data/slow", 0.003)
    with ClusterClient(addresses) as client:
        wait_for(lambda: client.overview().slots_total == 4, 60, "4 slots at the leader")
        job_id = client.submit(graph.proto)
        first_leader = client.address

        wait_for(lambda: completed_checkpoints(client, job_id, 2), 120, "two completed checkpoints")
        leader_service = "jobmanager" if first_leader.endswith(f":{ha_cluster.port}") else "jobmanager-standby"
        killed_at = time.monotonic()
        run(["docker", "kill", *ha_cluster.containers(leader_service)])
        slow.unlink()

        def restored():  # noqa: ANN202
            try:
                summary = client.status(job_id)
            except NoJobManagerLeader:  # none leads yet (or the new one is not reached yet): ask again
                return None
            return summary if summary.checkpoints.latest_restored_id else None
        summary = wait_for(restored, 180, "the job recovered by the standby")
        assert client.address != first_leader
        print(f"leader {leader_service} killed; the standby restored the job from checkpoint "
              f"{summary.checkpoints.latest_restored_id} after {time.monotonic() - killed_at:.1f} s")
        final = wait_for(lambda: JobStatus.from_proto(client.status(job_id).status).is_terminal() and client.status(job_id),
                         240, "the job to end")
        assert JobStatus.from_proto(final.status) is JobStatus.FINISHED, final
    assert_exactly_once(ha_cluster.data / "out", count)
