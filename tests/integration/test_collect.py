"""execute_and_collect through a real JobManager and TaskManagers: a bounded JobManager buffer that
backpressures the collect sinks, results pulled in bounded chunks, summary-only finished jobs, and
a close whose cancel fails raising instead of staying silent."""
from __future__ import annotations

import threading
import time

import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.client.execution import JobCancellationException
from millstream.client.minicluster import MiniCluster
from millstream.common import Configuration
from millstream.datastream import StreamExecutionEnvironment

from .harness import ClusterSpec, fast_config, jobmanager_env, poll_for

pytestmark = pytest.mark.timeout(300)

BUFFER_BYTES = 256 * 1024  # per job in the JobManager: far below what 2 M records need
CLUSTER = ClusterSpec(tasks_per_slot=2, options={"millstream.collect.buffer-size": f"{BUFFER_BYTES}", "jobstore.max-capacity": "2"})
CHUNK = "64 kb"  # what the client pulls per request


def _env(parallelism: int = 2) -> StreamExecutionEnvironment:
    conf = Configuration()
    conf.set_string("collect-sink.batch-size.max", CHUNK)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(parallelism)
    return env


class BufferWatch:
    """Samples the JobManager's collect buffers from another thread: the most bytes ever buffered."""

    def __init__(self, cluster: MiniCluster) -> None:
        self.dispatcher = cluster.job_manager.dispatcher
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for record in list(self.dispatcher.jobs.values()):
                buffer = record.collect
                if buffer is not None:
                    self.peak = max(self.peak, buffer.buffered_bytes)
            time.sleep(0.002)

    def __enter__(self) -> "BufferWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def test_two_million_records_are_collected_exactly_through_a_small_buffer_that_backpressures(cluster, monkeypatch) -> None:
    answers: list[int] = []  # payload bytes per FetchCollectResults answer the client got
    fetch = ClusterClient.fetch_collected

    def spy(self, *args, **kwargs):  # the real call, observed
        response = fetch(self, *args, **kwargs)
        answers.append(sum(len(b.payload) for b in response.batches))
        return response

    monkeypatch.setattr(ClusterClient, "fetch_collected", spy)
    n = 2_000_000
    stream = _env().from_sequence(0, n - 1).map(lambda x: x * 3)
    with jobmanager_env(cluster.address), BufferWatch(cluster) as watch:
        with stream.execute_and_collect("collect 2M") as results:
            head = [next(results) for _ in range(10)]
            # A slow reader: the producers fill the JobManager's buffer and must wait there.
            poll_for(lambda: watch.peak >= BUFFER_BYTES // 2, 60, what="the collect buffer to fill")
            time.sleep(1.0)
            rest = list(results)
    values = head + rest
    assert len(values) == n
    assert sorted(values) == [3 * i for i in range(n)]  # every record exactly once
    # Bounded: the buffer's capacity plus at most one batch (a batch is at most 1 MB, and here
    # ~5 kB: 1,024 small ints), never the whole result.
    assert BUFFER_BYTES // 2 <= watch.peak <= BUFFER_BYTES + 64 * 1024, watch.peak
    # Pulled in chunks of at most collect-sink.batch-size.max (64 kB here), many batches each.
    assert len(answers) > 100 and max(answers) <= 64 * 1024, (len(answers), max(answers))
    job = poll_for(lambda: [r for r in cluster.job_manager.dispatcher.jobs.values() if r.job_name == "collect 2M"], 10)[0]
    assert job.status.value == "FINISHED" and job.job_master is None and job.collect is None


def test_records_of_each_subtask_arrive_in_order_and_large_records_are_split_below_the_chunk(cluster) -> None:
    # 1,024 distinct 20 kB records would be a 20 MB batch: the sink splits it into ~1 MB parts,
    # and a client pulling 64 kB per request still gets them (one batch per answer at least).
    stream = _env().from_sequence(0, 2_999).map(lambda i: (i, f"{i:020000d}"))
    with jobmanager_env(cluster.address), BufferWatch(cluster) as watch:
        with stream.execute_and_collect("big records") as results:
            values = [i for i, payload in results if payload == f"{i:020000d}"]
    assert watch.peak <= BUFFER_BYTES + (1 << 20) + 4096, watch.peak
    assert sorted(values) == list(range(3_000))
    # from_sequence gives each subtask an ascending range; collected order per subtask is kept.
    halves = [v for v in values if v < 1_500], [v for v in values if v >= 1_500]
    assert all(h == sorted(h) for h in halves)


def test_the_job_store_keeps_only_max_capacity_finished_jobs(cluster) -> None:
    names = [f"store {i}" for i in range(3)]
    for name in names:
        with jobmanager_env(cluster.address):
            with _env(1).from_sequence(1, 3).execute_and_collect(name) as results:
                assert sorted(results) == [1, 2, 3]
    with ClusterClient(cluster.address) as client:
        kept = {j.job_name for j in client.list_jobs()}
    assert names[0] not in kept and {names[1], names[2]} <= kept and len(kept) <= 2


def test_closing_the_results_when_the_cancel_fails_raises_instead_of_hiding_it(spark) -> None:
    with MiniCluster(fast_config(), num_slots=1, spark=spark) as own:
        endless = _env(1).from_sequence(0, 10**12).map(lambda x: x)
        with jobmanager_env(own.address):
            results = endless.execute_and_collect("endless")
            assert [next(results) for _ in range(3)] == [0, 1, 2]
        own.call(own.job_manager.stop(), timeout=60)  # the cancel cannot reach anyone now
        with pytest.raises(JobCancellationException, match="did not cancel it: UNAVAILABLE.*may still be running"):
            results.close()
