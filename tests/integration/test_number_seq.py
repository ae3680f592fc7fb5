"""PyFlink's ``NumberSequenceSource`` on a real cluster: ``env.from_source(NumberSequenceSource(1, 1000),
WatermarkStrategy.no_watermarks(), ...)`` at parallelism 2 reads the range split between its two
subtasks, every number exactly once, and the job finishes (the source is bounded)."""
from __future__ import annotations

import pytest

from millstream.common import WatermarkStrategy
from millstream.datastream import MapFunction, RuntimeContext, StreamExecutionEnvironment
from millstream.datastream.connectors.number_seq import NumberSequenceSource

from .harness import ClusterSpec, jobmanager_env

pytestmark = pytest.mark.timeout(120)
CLUSTER = ClusterSpec()  # one TaskManager, two slots


class TagSubtask(MapFunction):
    """Pairs each number with the subtask that read it (the map chains to the source)."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.index = runtime_context.get_index_of_this_subtask()

    def map(self, value):
        return value, self.index


def test_from_source_at_parallelism_2_delivers_each_number_exactly_once(cluster) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    numbers = env.from_source(NumberSequenceSource(1, 1000), WatermarkStrategy.no_watermarks(), "numbers")
    with jobmanager_env(cluster.address):
        with numbers.map(TagSubtask()).execute_and_collect("number sequence p2") as results:
            rows = list(results)
    assert sorted(n for n, _ in rows) == list(range(1, 1001))
    by_subtask = {i: [n for n, s in rows if s == i] for i in (0, 1)}
    assert all(by_subtask.values()), "both subtasks read a part of the range"
