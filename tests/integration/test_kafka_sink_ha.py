"""EXACTLY_ONCE KafkaSink when the leading JobManager is killed with SIGKILL mid-job (ZooKeeper
HA, two JobManagers and a TaskManager as processes, a real broker): the standby takes over,
recovers the job (same job id, so the same commit markers) from its latest checkpoint, and a
read_committed consumer sees every record exactly once after the job; with a KafkaSource as the
input, its split enumerator is restored by the new leader as well. One HA cluster and one broker
for the module."""
from __future__ import annotations

from typing import Any

import pytest

from millstream.common import WatermarkStrategy
from millstream.common.restart_strategy import RestartStrategies
from millstream.datastream import StreamExecutionEnvironment
from millstream.datastream.connectors.datagen import DataGeneratorSource
from millstream.datastream.connectors.kafka import DeliveryGuarantee, KafkaOffsetsInitializer
from millstream.proto import cluster_pb2 as cpb
from millstream.runtime.execution_state import JobStatus

from .ha import HaCluster, checkpointing_since_restore, finished, status_of, summary_at
from .harness import poll_for
from .jobs import Throttle
from .kafka import kafka_broker  # noqa: F401  (the module-scoped fixture)
from .test_kafka_sink import assert_each_once, new_topic, read_topic, string_sink
from .test_kafka_source import produce, source, spread

pytestmark = pytest.mark.timeout(600)
HA_CLUSTER = {"taskmanagers": 1, "slots": 2}


def run_and_kill_the_leader(ha_cluster: HaCluster, leader, env: StreamExecutionEnvironment, name: str,  # noqa: ANN001
                            submission_id: str, broker, topic: str, count: int, slow) -> None:  # noqa: ANN001
    """Submits the job to the leader, kills it with SIGKILL after two checkpoints (some records
    committed already), lets the standby recover the job and finish it once ``slow`` is gone."""
    graph = env.get_job_graph(name)
    request = cpb.SubmitJobRequest(submission_id=submission_id, job_graph=graph.proto.SerializeToString())
    job_id = bytes(leader.dispatcher.SubmitJob(request, timeout=30).job_id)

    def checkpoints_at_leader() -> bool:
        summary = summary_at(leader, job_id)
        return summary is not None and summary.checkpoints.num_completed >= 2
    poll_for(checkpoints_at_leader, 120, 0.2, "two checkpoints at the leader")
    committed_before = len(read_topic(broker, topic, lambda got: len(got) > 0, timeout_s=15, linger_s=0))
    leader.kill()
    new_leader = poll_for(lambda: next((jm for jm in ha_cluster.jobmanagers if jm is not leader and jm.leads()), None),
                          120, 0.2, "the standby to lead")
    poll_for(lambda: checkpointing_since_restore(new_leader, job_id, restored=True), 240, 0.2,
             "the recovered job to complete a checkpoint at the new leader")
    slow.unlink()
    summary = poll_for(lambda: finished(new_leader, job_id), 240, 0.5, "the job to end")
    assert status_of(summary) is JobStatus.FINISHED, summary.failure.message
    assert summary.checkpoints.latest_restored_id >= 2, summary
    assert 0 < committed_before < count, committed_before


def _checkpointed_job_on_the_leader(ha_cluster: HaCluster, tmp_path) -> tuple[Any, Any, Any]:
    """Two JobManagers, the leader with its slots; an environment at parallelism 2 with checkpoints
    every 300 ms and 5 restarts; the marker file that keeps the job's Throttle slow while it exists."""
    slow = tmp_path / "slow"
    slow.touch()
    ha_cluster.ensure_jobmanagers(2)
    leader, _ = ha_cluster.leader_and_standby()
    ha_cluster.wait_for_slots(leader)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(300)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(5, 200))
    return leader, env, slow


def test_kill_9_of_the_leading_job_manager_leaves_every_record_in_kafka_exactly_once(
        ha_cluster: HaCluster, kafka_broker, tmp_path) -> None:
    topic = new_topic(kafka_broker)
    count = 12000
    leader, env, slow = _checkpointed_job_on_the_leader(ha_cluster, tmp_path)
    (env.from_source(DataGeneratorSource(lambda i: f"r{i}", count), WatermarkStrategy.no_watermarks(), "records")
        .map(Throttle(str(slow), 0.002))
        .sink_to(string_sink(kafka_broker, topic, DeliveryGuarantee.EXACTLY_ONCE, prefix=f"eo-{topic}")))
    run_and_kill_the_leader(ha_cluster, leader, env, "kafka sink survives the leader's kill -9", "kafka-ha", kafka_broker, topic, count, slow)
    assert_each_once(read_topic(kafka_broker, topic, lambda got: len(got) >= count, timeout_s=60),
                     [f"r{i}" for i in range(count)])


def test_kill_9_of_the_leader_under_a_kafka_to_kafka_job_reads_and_writes_every_record_once(
        ha_cluster: HaCluster, kafka_broker, tmp_path) -> None:
    """KafkaSource -> EXACTLY_ONCE KafkaSink, the leader killed mid-job: the new leader restores the
    source's split enumerator from the checkpoint recorded in ZooKeeper (its splits are assigned
    already: none is handed out again at its starting offset) and the readers from their
    checkpointed offsets, so a read_committed consumer sees every record of the source once."""
    source_topic, topic = new_topic(kafka_broker, 3), new_topic(kafka_broker)
    count = 4000
    produce(kafka_broker, source_topic, spread(list(range(count)), 3))
    leader, env, slow = _checkpointed_job_on_the_leader(ha_cluster, tmp_path)
    (env.from_source(source(kafka_broker, source_topic, set_bounded=KafkaOffsetsInitializer.latest()),
                     WatermarkStrategy.no_watermarks(), "kafka")
        .map(Throttle(str(slow), 0.004))
        .sink_to(string_sink(kafka_broker, topic, DeliveryGuarantee.EXACTLY_ONCE, prefix=f"eo-{topic}")))
    run_and_kill_the_leader(ha_cluster, leader, env, "kafka to kafka survives the leader's kill -9", "kafka-ha-source", kafka_broker, topic, count, slow)
    assert_each_once(read_topic(kafka_broker, topic, lambda got: len(got) >= count, timeout_s=60),
                     [str(i) for i in range(count)])
