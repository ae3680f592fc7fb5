"""kill -9 of a TaskManager under a KafkaSource job (its own module: it needs a process cluster of
three TaskManagers, not the embedded one of test_kafka_source). Records keep arriving in a 3-partition
topic; once two checkpoints completed, the TaskManager running subtask 0 of the source is killed;
the job restarts from its last checkpoint on the other TaskManagers, its readers at the
checkpointed offsets, and the exactly-once FileSink holds every record's count once."""
from __future__ import annotations

import uuid

import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.common.restart_strategy import RestartStrategies
from millstream.datastream import StreamExecutionEnvironment
from millstream.datastream.connectors.kafka import KafkaOffsetsInitializer, KafkaTopicPartition
from millstream.runtime.execution_state import JobStatus

from .harness import ProcessCluster, ancestors, poll_for
from .jobs import NotePid, assert_exactly_once, ended
from .kafka import KafkaBroker, kafka_broker  # noqa: F401  (the module-scoped fixture)
from .test_kafka_source import counting_job, new_topic, source, spread, trickle

pytestmark = pytest.mark.timeout(400)


def test_kill_9_of_a_task_manager_resumes_the_kafka_source_from_its_checkpoint_exactly_once(
        kafka_broker: KafkaBroker, tmp_path) -> None:
    topic, group = new_topic(kafka_broker, 3), f"g-{uuid.uuid4().hex[:6]}"
    count = 3000
    stop = KafkaOffsetsInitializer.offsets({KafkaTopicPartition(topic, p): count // 3 for p in range(3)})
    with ProcessCluster(tmp_path, tasks_per_slot=3, taskmanagers=3,
                        jobmanager_options={"execution.checkpointing.dir": str(tmp_path / "checkpoints")}) as cluster:
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
            victims = [tm for tm in cluster.taskmanagers if tm.pid in ancestors(pid)]
            assert len(victims) == 1, (pid, [tm.pid for tm in cluster.taskmanagers])
            victims[0].kill()
            victims[0].wait(10)
            producer.join(60)
            summary = poll_for(lambda: ended(client, job_id), 240, interval=0.5, what="the job to end")
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
    assert summary.num_restarts >= 1 and summary.checkpoints.latest_restored_id >= 2, summary.checkpoints
    assert_exactly_once(out, count)
