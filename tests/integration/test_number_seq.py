"""PyFlink's ``NumberSequenceSource`` on a real cluster: ``env.from_source(NumberSequenceSource(1, 1000),
WatermarkStrategy.no_watermarks(), ...)`` at parallelism 2 reads the range split between its two
subtasks, every number exactly once, and the job finishes (the source is bounded). After a failure
the job resumes from its last checkpoint at the checkpointed positions of the sequence, as
``from_sequence`` does (the same source), and a FileSink behind it holds every number's update once."""
from __future__ import annotations

import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.common import Encoder, WatermarkStrategy
from millstream.common.restart_strategy import RestartStrategies
from millstream.datastream import MapFunction, RuntimeContext, StreamExecutionEnvironment
from millstream.datastream.connectors.file_system import FileSink
from millstream.datastream.connectors.number_seq import NumberSequenceSource
from millstream.runtime.execution_state import JobStatus

from .harness import ClusterSpec, jobmanager_env, poll_for
from .jobs import KEYS, FailWhenMarked, Throttle, assert_exactly_once, ended

pytestmark = pytest.mark.timeout(300)
CLUSTER = ClusterSpec(checkpoints=True)  # one TaskManager, two slots


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


def test_a_failure_resumes_the_sequence_from_the_last_checkpoint_exactly_once(cluster, tmp_path) -> None:
    out, slow, fail = tmp_path / "out", tmp_path / "slow", tmp_path / "fail"
    count = 6000
    slow.touch()  # the Throttle keeps the bounded job running until the failure was injected
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(200)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 100))
    (env.from_source(NumberSequenceSource(0, count - 1), WatermarkStrategy.no_watermarks(), "numbers")
        .map(Throttle(str(slow), 0.002))
        .map(FailWhenMarked(str(fail)))
        .map(lambda i: (i % KEYS, 1))
        .key_by(lambda t: t[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .map(lambda t: f"{t[0]},{t[1]}")
        .sink_to(FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build()))
    with ClusterClient(cluster.address) as client:
        job_id = client.submit(env.get_job_graph("number sequence failover").proto)
        poll_for(lambda: client.status(job_id).checkpoints.num_completed >= 2, 120, what="two completed checkpoints")
        fail.touch()
        poll_for(lambda: client.status(job_id).num_restarts >= 1, 120, interval=0.1, what="the restart")
        slow.unlink()
        summary = poll_for(lambda: ended(client, job_id), 120, interval=0.2, what="the job to end")
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
    assert not fail.exists() and summary.num_restarts == 1
    assert summary.checkpoints.latest_restored_id >= 2  # resumed from a checkpoint, not from the start
    assert_exactly_once(out, count)
