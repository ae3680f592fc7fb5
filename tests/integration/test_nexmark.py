"""The Nexmark queries of bench/nexmark as Millstream jobs on the embedded cluster (real Spark, two
TaskManagers, parallelism 2), each checked against the plain-Python answer over the same small
generated file set: every query's result exact (q12: its processing-time windows never count a
bid twice or for the wrong bidder)."""
from __future__ import annotations

import os
import sys

import pytest

from millstream.datastream import StreamExecutionEnvironment

from .harness import ClusterSpec

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))

from nexmark import check, generator, millstream_jobs, reference  # noqa: E402  (millstream_jobs: by value to the workers)

pytestmark = pytest.mark.timeout(300)
CLUSTER = ClusterSpec(taskmanagers=2, jobmanager_env=True)
CONFIG = generator.Config(out_of_order_group_size=500)
EVENTS = 30_000  # 3 s of event time: the sliding and tumbling windows close while the job runs and at its end


@pytest.fixture(scope="module")
def events(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], tuple]:
    paths = generator.generate(EVENTS, files=3, seed=29, config=CONFIG, directory=tmp_path_factory.mktemp("nexmark") / "events")
    return paths, reference.read(paths)


@pytest.mark.parametrize("query", reference.QUERIES)
def test_query_matches_the_plain_python_answer(cluster, events, query) -> None:
    paths, parsed = events
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    job = millstream_jobs.build(env, query, paths, CONFIG.max_disorder_ms() + 1)
    with job.execute_and_collect(f"nexmark {query}") as results:
        rows = list(results)
    expected = reference.answer(query, parsed)
    check.check(query, expected, rows)
    if query not in ("q4", "q12"):
        assert rows, f"{query}: the input is big enough for a result"
