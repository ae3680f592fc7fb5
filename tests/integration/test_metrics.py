"""Metrics on a real cluster: a JobManager and a TaskManager process with the Prometheus reporter
(``metrics.reporter.prom.port`` a range both take a port of), a job with a user counter, and the
figures read back over HTTP from both processes' ``/metrics`` and from the REST API."""
from __future__ import annotations

import random
import re
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from millstream.client.cluster_client import ClusterClient
from millstream.datastream import MapFunction, RuntimeContext, SourceFunction, StreamExecutionEnvironment

from .harness import ProcessCluster, Rest, poll_for

pytestmark = pytest.mark.timeout(240)

RECORDS = 2048  # two full source batches: both leave the source at once, then it idles
METRICS_AT = re.compile(r"Prometheus metrics at http://\S+:(\d+)/metrics")


class ThenIdle(SourceFunction):
    """Emits 0..RECORDS-1, then runs on without records until cancelled (its tasks stay up)."""

    def __init__(self) -> None:
        self.running = True

    def run(self, ctx) -> None:  # noqa: ANN001
        for i in range(RECORDS):
            ctx.collect(i)
        while self.running:
            time.sleep(0.05)

    def cancel(self) -> None:
        self.running = False


class Counting(MapFunction):
    """Counts what it sees with a user counter in a group of its own."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.seen = runtime_context.get_metrics_group().add_group("test").counter("seen")

    def map(self, value: int) -> int:
        self.seen.inc()
        return value


def scrape(port: int) -> dict[tuple[str, frozenset], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value for f in text_string_to_metric_families(text) for s in f.samples}


def find(samples: dict[tuple[str, frozenset], float], name: str, **labels: str) -> list[float]:
    return [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[tuple[ClusterClient, Rest, int, int]]:
    directory: Path = tmp_path_factory.mktemp("metrics-cluster")
    first = random.randrange(20_000, 60_000)
    ports = f"{first}-{first + 40}"
    with ProcessCluster(directory, rest=True, options={"metrics.reporter.prom.port": ports}) as c:
        jm_port = int(poll_for(lambda: METRICS_AT.search(c.jobmanager_log.read_text()), 10,
                               what="the JobManager's reporter").group(1))
        c.add_taskmanagers(1)
        tm_log = directory / "taskmanager-0.log"
        tm_port = int(poll_for(lambda: METRICS_AT.search(tm_log.read_text()), 120, interval=0.5,
                               what="the TaskManager's reporter").group(1))
        assert jm_port != tm_port and first <= min(jm_port, tm_port) and max(jm_port, tm_port) <= first + 40
        with ClusterClient(c.address) as client:
            poll_for(lambda: client.overview().taskmanagers == 1, 120, interval=0.5, what="the TaskManager")
            yield client, Rest(c.rest_url), jm_port, tm_port


def test_user_and_task_metrics_in_prometheus_and_rest(cluster) -> None:  # noqa: ANN001
    client, rest, jm_port, tm_port = cluster
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    (env.add_source(ThenIdle()).name("idle source")
        .rebalance().map(Counting()).name("counting map").filter(lambda x: x % 2 == 0)
        .rebalance().add_sink(lambda x: None).name("drop"))
    job_id = client.submit(env.get_job_graph("metrics job").proto).hex()
    evens = RECORDS // 2
    try:
        # The TaskManager: the user counter saw every record; the counting vertex wrote the evens.
        def counted() -> Any:
            samples = scrape(tm_port)
            seen = find(samples, "flink_taskmanager_job_task_operator_test_seen", operator_name="counting map", job_id=job_id)
            out = find(samples, "flink_taskmanager_job_task_numRecordsOut", task_name="counting map -> Filter", job_id=job_id)
            sink_in = find(samples, "flink_taskmanager_job_task_numRecordsIn", task_name="Sink: drop", job_id=job_id)
            busy = find(samples, "flink_taskmanager_job_task_busyTimeMsPerSecond", job_id=job_id)  # every task reported
            return seen == [RECORDS] and out == [evens] and sink_in == [evens] and len(busy) == 3 and samples

        # Each task reports once a second: the three figures arrive within a second of each other.
        samples = poll_for(counted, 90, interval=0.5, what="the counter, numRecordsOut and the sink's numRecordsIn")
        assert find(samples, "flink_taskmanager_Status_taskSlotsTotal") == [2]
        assert find(samples, "flink_taskmanager_Status_taskSlotsAvailable") == [1]
        assert find(samples, "flink_taskmanager_Status_numHeartbeatsReceived")[0] > 0
        assert find(samples, "flink_taskmanager_Status_ProcessTree_Memory_RSS")[0] > 1 << 20

        # The JobManager: the job's figures while it runs.
        jm = scrape(jm_port)
        assert find(jm, "flink_jobmanager_job_uptime", job_id=job_id, job_name="metrics job")[0] > 0
        assert find(jm, "flink_jobmanager_job_numRestarts", job_id=job_id) == [0]
        assert find(jm, "flink_jobmanager_job_numberOfCompletedCheckpoints", job_id=job_id) == [0]
        assert find(jm, "flink_jobmanager_taskSlotsTotal") == [2]
        assert find(jm, "flink_jobmanager_Status_ProcessTree_Memory_RSS")[0] > 1 << 20

        # REST: the same figures a heartbeat later, per vertex and subtask.
        vertices = {v["name"]: v for v in rest.get(f"/jobs/{job_id}")["vertices"]}
        counting = next(v for name, v in vertices.items() if "counting map" in name)
        base = f"/jobs/{job_id}/vertices/{counting['id']}"

        def vertex_counted() -> Any:
            details = rest.get(base)
            metrics = details["subtasks"][0]["metrics"]
            return metrics["read-records"] == RECORDS and metrics["write-records"] == evens and details

        details = poll_for(vertex_counted, 30, interval=0.5, what="the vertex's records over REST")
        (subtask,) = details["subtasks"]
        assert subtask["status"] == "RUNNING" and subtask["endpoint"].startswith("127.0.0.1:") and subtask["start-time"] > 0
        assert subtask["metrics"]["read-bytes"] > 0 and subtask["metrics"]["write-bytes"] > 0
        assert rest.get(f"{base}/metrics?get=0.counting_map.test.seen") == [{"id": "0.counting_map.test.seen", "value": str(RECORDS)}]
        assert {"id": "0.numRecordsIn"} in rest.get(f"{base}/metrics")
        aggregated = rest.get(f"{base}/subtasks/metrics?get=numRecordsOut&agg=sum")
        assert aggregated == [{"id": "numRecordsOut", "sum": evens}]
        backpressure = rest.get(f"{base}/backpressure")
        assert backpressure["status"] == "ok" and backpressure["backpressure-level"] == "ok"
        # It waits for input: idle, hardly busy, not backpressured.
        ratios = backpressure["subtasks"][0]
        assert ratios["idleRatio"] > 0.5 and ratios["ratio"] <= 0.1
        assert abs(ratios["idleRatio"] + ratios["busyRatio"] + ratios["ratio"] - 1) < 0.01
        entry = rest.get(f"/jobs/{job_id}")["vertices"]
        counting_entry = next(v for v in entry if v["id"] == counting["id"])
        assert counting_entry["metrics"]["write-bytes"] > 0 and counting_entry["metrics"]["accumulated-busy-time"] >= 0
        [busiest] = rest.get(f"{base}/subtasks/metrics?get=busyTimeMsPerSecond&agg=max")  # as Flink's dashboard asks
        assert 0 <= busiest["max"] <= 1000
    finally:
        client.cancel(bytes.fromhex(job_id))
