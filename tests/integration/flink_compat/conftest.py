"""One cluster for every module of this package: Flink's own CLI and dashboard, the REST paths
and fields they use, Millstream's CLI counterparts and the REST contract test all talk to the
same JobManager process (REST and Flink's dashboard on) and TaskManager, started once for the
package and stopped after its last test (each module starting its own cost CI a minute).

Each module cancels the jobs it leaves running, so the next one finds the slots free; jobs of
earlier modules stay listed (every test picks its own jobs by id)."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator, NamedTuple

import pytest

from millstream.client.cluster_client import ClusterClient

from ..harness import HISTORY_SIZE, HISTORY_SIZE_KEY, ProcessCluster, Rest, all_slots_free, poll_for


class SharedCluster(NamedTuple):
    client: ClusterClient
    rest: Rest
    address: str  # the JobManager's gRPC address (Millstream's CLI)
    directory: Path  # the cluster's files: checkpoints/, logs


@pytest.fixture(scope="package")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedCluster]:
    directory = tmp_path_factory.mktemp("flink-compat")
    options = {
        "execution.checkpointing.dir": str(directory / "checkpoints"),
        HISTORY_SIZE_KEY: str(HISTORY_SIZE),
        "rest.web.flink-dashboard": "true",  # Flink's dashboard at /flink/ (test_flink_dashboard)
        "restart-strategy.type": "none",  # a failing job ends FAILED at once (dashboard, contract)
    }
    # Four slots: a module's jobs never wait for the previous module's cancelled ones to free theirs.
    with ProcessCluster(directory, rest=True, jobmanager_options=options, slots=4, taskmanagers=1) as processes, \
            ClusterClient(processes.address) as client:
        yield SharedCluster(client, Rest(processes.rest_url), processes.address, directory)


def cancel_running(cluster: SharedCluster, *jobs: str) -> None:
    """Cancels those of ``jobs`` still running and waits until every slot is free again (a
    module's teardown, so the next module starts on an idle cluster)."""
    for job in jobs:
        if cluster.rest.get(f"/jobs/{job}")["state"] not in ("FINISHED", "FAILED", "CANCELED"):
            cluster.rest.call(f"/jobs/{job}", "PATCH")
    for job in jobs:
        poll_for(lambda: cluster.rest.get(f"/jobs/{job}")["state"] in ("FINISHED", "FAILED", "CANCELED"), 60,
                 interval=0.3, what=f"job {job} ended")
    poll_for(lambda: all_slots_free(cluster.client), 60, interval=0.3, what="every slot free")
