"""The JobManager's REST API on a real cluster: a JobManager process with ``-Drest.port=0`` (its
URL read from its log), one TaskManager, jobs submitted over gRPC and read back over HTTP."""
from __future__ import annotations

import json
import re
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import cloudpickle
import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.datastream import SourceFunction, StreamExecutionEnvironment

from .harness import poll_for, spawn_module, stop_processes

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # tasks cannot import test modules

pytestmark = pytest.mark.timeout(180)

HEARTBEATS = ["-Dheartbeat.interval=1 s", "-Dheartbeat.timeout=5 s"]


class Endless(SourceFunction):
    def __init__(self) -> None:
        self.running = True

    def run(self, ctx) -> None:  # noqa: ANN001
        i = 0
        while self.running:
            ctx.collect(i)
            i += 1
            if i % 100 == 0:
                time.sleep(0.01)

    def cancel(self) -> None:
        self.running = False


class Rest:
    def __init__(self, url: str) -> None:
        self.url = url

    def call(self, path: str, method: str = "GET") -> tuple[int, Any]:
        request = urllib.request.Request(self.url + path, method=method)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def get(self, path: str) -> Any:
        status, body = self.call(path)
        assert status == 200, (path, status, body)
        return body


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[tuple[ClusterClient, Rest]]:
    yield from rest_cluster(tmp_path_factory.mktemp("rest-cluster"))


def rest_cluster(directory: Path) -> Iterator[tuple[ClusterClient, Rest]]:
    """A JobManager process with its REST API on a free port and one TaskManager (2 slots)."""
    ready, log = directory / "jm.address", directory / "jobmanager.log"
    procs = [spawn_module(["millstream.jobmanager.jobmanager", "--ready-file", str(ready), "-Djobmanager.rpc.port=0",
                           "-Djobmanager.rpc.address=127.0.0.1", "-Drest.port=0", "-Drest.bind-address=127.0.0.1",
                           *HEARTBEATS], log)]
    try:
        address = poll_for(lambda: ready.exists() and ready.read_text().strip(), 60, what="the JobManager")
        found = poll_for(lambda: re.search(r"REST API serving at (http://\S+)", log.read_text()), 10, what="the REST URL")
        procs.append(spawn_module(["millstream.taskmanager.taskmanager", "--jobmanager", address,
                                   "-Dtaskmanager.numberOfTaskSlots=2", "-Dmillstream.spark.tasks-per-slot=2", *HEARTBEATS],
                                  directory / "taskmanager.log"))
        with ClusterClient(address) as client:
            poll_for(lambda: client.overview().taskmanagers == 1, 120, interval=0.5, what="the TaskManager")
            yield client, Rest(found.group(1))
    finally:
        stop_processes(procs)


def test_overview_and_taskmanagers(cluster) -> None:  # noqa: ANN001
    _, rest = cluster
    overview = rest.get("/overview")
    assert (overview["taskmanagers"], overview["slots-total"]) == (1, 2)
    assert overview["flink-version"] == "0.1.0"
    [tm] = rest.get("/taskmanagers")["taskmanagers"]
    assert tm["slotsNumber"] == 2 and tm["path"].startswith("127.0.0.1:")
    assert abs(tm["timeSinceLastHeartbeat"] - time.time() * 1000) < 30_000
    assert rest.get(f"/taskmanagers/{tm['id']}")["id"] == tm["id"]
    assert rest.get("/config")["flink-version"] == "0.1.0"


def test_a_finished_job_over_rest(cluster) -> None:  # noqa: ANN001
    client, rest = cluster
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.from_collection(list(range(50))).map(lambda x: x * 2).key_by(lambda x: x % 3).map(lambda x: x).add_sink(lambda x: None)
    job_id = client.submit(env.get_job_graph("rest finite").proto).hex()
    assert job_id in [j["jid"] for j in rest.get("/jobs/overview")["jobs"]]
    details = poll_for(lambda: (d := rest.get(f"/jobs/{job_id}"))["state"] == "FINISHED" and d, 90, interval=0.3,
                       what="the job FINISHED over REST")
    assert details["name"] == "rest finite" and details["end-time"] >= details["start-time"] > 0
    assert details["timestamps"]["FINISHED"] >= details["timestamps"]["RUNNING"] > 0
    assert len(details["vertices"]) == 2 and {v["status"] for v in details["vertices"]} == {"FINISHED"}
    assert details["vertices"][-1]["metrics"]["read-records"] == 50
    plan = rest.get(f"/jobs/{job_id}/plan")["plan"]
    assert [n["id"] for n in plan["nodes"]] == [v["id"] for v in details["vertices"]]
    assert plan["nodes"][1]["inputs"][0]["ship_strategy"] == "HASH"
    assert rest.get(f"/jobs/{job_id}/exceptions")["root-exception"] is None
    assert {"id": job_id, "status": "FINISHED"} in rest.get("/jobs")["jobs"]
    assert rest.get("/overview")["jobs-finished"] >= 1


def test_cancel_a_running_job_over_rest(cluster) -> None:  # noqa: ANN001
    client, rest = cluster
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.add_source(Endless()).map(lambda x: x).add_sink(lambda x: None)
    job_id = client.submit(env.get_job_graph("rest endless").proto).hex()
    poll_for(lambda: rest.get(f"/jobs/{job_id}")["state"] == "RUNNING", 90, interval=0.3, what="the job RUNNING")
    assert rest.get("/overview")["jobs-running"] == 1
    assert rest.call(f"/jobs/{job_id}?mode=cancel", "PATCH") == (202, {})
    poll_for(lambda: rest.get(f"/jobs/{job_id}")["state"] == "CANCELED", 60, interval=0.3, what="the job CANCELED")
    assert rest.get("/overview")["jobs-cancelled"] == 1


def test_errors_and_openapi(cluster) -> None:  # noqa: ANN001
    _, rest = cluster
    status, body = rest.call(f"/jobs/{'ab' * 16}")
    assert status == 404 and body == {"errors": [f"Job {'ab' * 16} not found."]}
    status, body = rest.call("/jobs/nope")
    assert status == 400 and "Invalid JobID" in body["errors"][0]
    assert rest.call("/no/such/path")[0] == 404
    paths = rest.get("/v1/openapi.json")["paths"]
    assert {"/overview", "/jobs/overview", "/jobs/{jobid}", "/jobs/{jobid}/checkpoints", "/taskmanagers"} <= set(paths)


def test_rest_only_when_set_in_process_and_a_taken_set_port_stops_the_start() -> None:
    """An in-process JobManager (embedded, MiniCluster) serves REST only with rest.port set; a set
    port that is taken stops the start with the key in the message."""
    import asyncio
    import socket

    from millstream.jobmanager.jobmanager import JobManager
    from millstream.runtime import config as cfg
    from millstream.runtime.process import StartupError

    base = {"jobmanager.rpc.address": "127.0.0.1", "jobmanager.rpc.port": "0"}

    async def main() -> None:
        async with JobManager(cfg.Configuration.from_dict(base)) as jm:
            assert jm.rest is None and jm.rest_url == ""
        async with JobManager(cfg.Configuration.from_dict({**base, cfg.REST_PORT.key: "0"})) as jm:
            assert jm.rest is not None and jm.rest_url.startswith("http://127.0.0.1:")
            status, body = await asyncio.to_thread(Rest(jm.rest_url).call, "/overview")
            assert status == 200 and body["taskmanagers"] == 0
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            with pytest.raises(StartupError, match="rest.port"):
                await JobManager(cfg.Configuration.from_dict({**base, "rest.port": str(port)})).start()

    asyncio.run(main())
