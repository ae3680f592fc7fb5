"""kill -9 of a TaskManager under Kafka jobs: a JobManager and TaskManagers as real processes (one
cluster for the module, TaskManagers started again as a test needs them) and a real broker (tansu).

EXACTLY_ONCE KafkaSink: the killed attempt's pending batches come back from the last completed
checkpoint; the ones whose transaction committed before the kill are not written again, the others
are; the records after the checkpoint are replayed. A read_committed consumer then sees every record
exactly once. The kill can land inside a commit (a transaction is open only while one runs, a few
ms per checkpoint): Kafka would abort that transaction when the restore initializes the id again;
tansu makes its records readable instead (tests/integration/test_kafka_broker.py), which would show
here as a duplicated batch.

KafkaSource: records keep arriving in a 3-partition topic; once two checkpoints completed, the
TaskManager running subtask 0 of the source is killed; the job restarts from its last checkpoint on
the other TaskManagers, its readers at the checkpointed offsets (and the splits its enumerator
assigned since given back), and the exactly-once FileSink holds every record's count once.
"""
from __future__ import annotations

import uuid
from typing import Any, Iterator

import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.common import WatermarkStrategy
from millstream.common.restart_strategy import RestartStrategies
from millstream.datastream import StreamExecutionEnvironment
from millstream.datastream.connectors.datagen import DataGeneratorSource
from millstream.datastream.connectors.kafka import DeliveryGuarantee, KafkaOffsetsInitializer, KafkaTopicPartition
from millstream.runtime.execution_state import JobStatus

from .harness import ProcessCluster, ancestors, poll_for
from .jobs import NotePid, Throttle, assert_exactly_once, ended
from .kafka import KafkaBroker, kafka_broker  # noqa: F401  (the module-scoped fixture)
from .test_kafka_sink import assert_each_once, new_topic, read_topic, string_sink
from .test_kafka_source import counting_job, source, spread, trickle
from .test_kafka_source import new_topic as new_source_topic

pytestmark = pytest.mark.timeout(400)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[ProcessCluster]:
    directory = tmp_path_factory.mktemp("kafka-failover-cluster")
    with ProcessCluster(directory, tasks_per_slot=3,
                        jobmanager_options={"execution.checkpointing.dir": str(directory / "checkpoints")}) as c:
        yield c




def host_of(pid: int, taskmanagers: list[Any]) -> Any:
    hosts = [tm for tm in taskmanagers if tm.pid in ancestors(pid)]
    assert len(hosts) == 1, (pid, [tm.pid for tm in taskmanagers])
    return hosts[0]


def test_kill_9_of_a_task_manager_mid_job_leaves_every_record_in_kafka_exactly_once(
        cluster, kafka_broker, tmp_path) -> None:
    topic = new_topic(kafka_broker)
    count = 12000
    marks, slow = tmp_path / "marks", tmp_path / "slow"
    marks.mkdir()
    slow.touch()
    with ClusterClient(cluster.address) as client:
        taskmanagers = cluster.ensure_taskmanagers(2)  # the job takes two slots: one TaskManager can host it
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(2)
        env.enable_checkpointing(300)
        env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 200))
        (env.from_source(DataGeneratorSource(lambda i: f"r{i}", count), WatermarkStrategy.no_watermarks(), "records")
            .map(Throttle(str(slow), 0.002))
            .map(NotePid(str(marks)))
            .sink_to(string_sink(kafka_broker, topic, DeliveryGuarantee.EXACTLY_ONCE, prefix=f"eo-{topic}")))
        job_id = client.submit(env.get_job_graph("kafka sink survives kill -9").proto)
        poll_for(lambda: client.status(job_id).checkpoints.num_completed >= 2, 120, interval=0.1,
                 what="two completed checkpoints")
        committed_before = len(read_topic(kafka_broker, topic, lambda got: len(got) > 0, timeout_s=15, linger_s=0))
        victim = host_of(int((marks / "pid-0-0").read_text()), taskmanagers)
        victim.kill()
        victim.wait(10)
        poll_for(lambda: client.status(job_id).num_restarts >= 1, 120, interval=0.1, what="the restart")
        slow.unlink()
        summary = poll_for(lambda: ended(client, job_id), 240, interval=0.5, what="the job to end")
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
    assert summary.num_restarts >= 1 and summary.checkpoints.latest_restored_id >= 2, summary
    assert 0 < committed_before < count, committed_before  # the kill came mid-job, after commits
    assert_each_once(read_topic(kafka_broker, topic, lambda got: len(got) >= count, timeout_s=60),
                     [f"r{i}" for i in range(count)])


def test_kill_9_of_a_task_manager_resumes_the_kafka_source_from_its_checkpoint_exactly_once(
        cluster, kafka_broker: KafkaBroker, tmp_path) -> None:
    topic, group = new_source_topic(kafka_broker, 3), f"g-{uuid.uuid4().hex[:6]}"
    count = 3000
    stop = KafkaOffsetsInitializer.offsets({KafkaTopicPartition(topic, p): count // 3 for p in range(3)})
    taskmanagers = cluster.ensure_taskmanagers(3)
    out, pids = tmp_path / "out", tmp_path / "pids"
    pids.mkdir()
    with ClusterClient(cluster.address) as client:
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(2)
        env.enable_checkpointing(300)
        env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 200))
        counting_job(env, source(kafka_broker, topic, set_group_id=group, set_bounded=stop), out, NotePid(str(pids)))
        job_id = client.submit(env.get_job_graph("kafka survives kill -9").proto)
        poll_for(lambda: client.status(job_id).checkpoints.num_completed >= 1, 120, what="the job running")
        producer = trickle(kafka_broker, topic, spread(list(range(count)), 3), per_s=300)
        done = client.status(job_id).checkpoints.num_completed
        poll_for(lambda: client.status(job_id).checkpoints.num_completed >= done + 2, 120,
                 what="two checkpoints while records come")
        pid = int((pids / "pid-0-0").read_text())
        victim = host_of(pid, taskmanagers)
        victim.kill()
        victim.wait(10)
        producer.join(60)
        summary = poll_for(lambda: ended(client, job_id), 240, interval=0.5, what="the job to end")
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
    assert summary.num_restarts >= 1 and summary.checkpoints.latest_restored_id >= 2, summary.checkpoints
    assert_exactly_once(out, count)
