"""millstream.spark.task-placement=slot on real Spark: a slot costs one Spark core. With a Spark of
2 cores (local[2]) and one TaskManager of 2 slots, word count at parallelism 2 (2 slots x 2 chains:
4 subtasks) runs with exact counts, and each slot's subtasks share one Python worker; under the
placement "task" the same budget cannot deploy the job (each subtask wants a core of its own)."""
from __future__ import annotations

import collections
import os
import sys

import pytest

from millstream.datastream import RuntimeExecutionMode, StreamExecutionEnvironment

from .harness import ClusterSpec

pytestmark = pytest.mark.timeout(240)
# spark_slots=2 and tasks_per_slot=1: the Spark budget is 2 cores whatever the placement.
CLUSTER = ClusterSpec(slots=2, tasks_per_slot=1, spark_slots=2, placement="slot", jobmanager_env=True)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    from corpus import generate

    return generate(str(tmp_path_factory.mktemp("corpus") / "corpus.txt"), 200_000, vocabulary_size=1_000)


def test_spark_has_two_cores(spark) -> None:
    assert spark.master == "local[2]"
    assert spark.max_concurrent_tasks == 2


@pytest.mark.parametrize("mode", [RuntimeExecutionMode.BATCH, RuntimeExecutionMode.STREAMING])
def test_word_count_at_parallelism_2_on_two_cores_is_exact(cluster, corpus, mode) -> None:
    import word_count
    from word_count import build

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.set_runtime_mode(mode)
    env.add_python_file(word_count.__file__)
    counts = build(env, corpus, None)
    with counts.execute_and_collect(f"word count p2 {mode.name}") as results:
        got = list(results)
    with open(corpus, encoding="utf-8") as f:
        expected = collections.Counter(w for line in f for w in line.split())
    final: dict[str, int] = {}
    for word, count in got:  # STREAMING: a rolling count per record; the last is the total
        final[word] = max(final.get(word, 0), count)
    assert final == dict(expected)
    if mode is RuntimeExecutionMode.BATCH:
        assert len(got) == len(expected)


def _pid_of_subtask(x: int) -> tuple[int, int]:
    return x, os.getpid()


def test_a_slots_subtasks_share_one_python_worker(cluster) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    # two chains per slot: (source -> pid) and, after the rebalance, (pid -> collect)
    stream = (env.from_collection(list(range(200))).map(_pid_of_subtask).rebalance()
              .map(lambda pair: (pair[0], pair[1], os.getpid())))
    with stream.execute_and_collect("pids per slot") as results:
        got = list(results)
    assert sorted(x for x, _, _ in got) == list(range(200))
    upstream = {p for _, p, _ in got}
    downstream = {p for _, _, p in got}
    assert len(upstream | downstream) == 2, (upstream, downstream)  # 4 subtasks, 2 workers
    assert upstream == downstream


def test_a_slot_with_no_task_left_holds_no_spark_core(cluster, spark) -> None:
    from .harness import poll_for

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    with env.from_collection(list(range(10))).map(lambda x: x + 1).execute_and_collect("short job") as results:
        assert sorted(results) == list(range(1, 11))
    poll_for(lambda: not spark.slots_in_use(), 30, what="the slots' Spark tasks to end")


def _endless(x: int) -> int:
    import time

    time.sleep(0.01)
    return x


def test_a_job_cancelled_while_its_subtasks_start_reports_no_illegal_transition(cluster, caplog) -> None:
    """A slot's subtasks start on their threads whatever the cancel says (no Spark job group to
    kill): their INITIALIZING after the cancel must not reach the JobMaster as an illegal move."""
    import logging

    from millstream.client.cluster_client import ClusterClient
    from millstream.runtime.execution_state import JobStatus

    from .harness import job_status, poll_for

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.from_collection(list(range(1_000_000))).map(_endless).rebalance().map(_endless).add_sink(lambda x: None)
    with caplog.at_level(logging.WARNING), ClusterClient(cluster.address) as client:
        for attempt in range(3):  # cancelled once scheduled: its subtasks are still deploying and starting
            job_id = client.submit(env.get_job_graph(f"cancelled while starting {attempt}").proto)
            poll_for(lambda: job_status(client, job_id) is JobStatus.RUNNING, 60, interval=0.01, what="the job scheduled")
            client.cancel(job_id)
            poll_for(lambda: job_status(client, job_id) is JobStatus.CANCELED, 60, what="the job to be cancelled")
    assert "illegal transition" not in caplog.text
