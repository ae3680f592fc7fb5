"""A KafkaSource under the adaptive scheduler (reactive mode) on a real cluster and a real broker
(tansu): records keep arriving in a 4-partition topic while the job runs at parallelism 1; a
TaskManager joins, the job rescales to 2 from its latest checkpoint, its split enumerator reset to
that checkpoint at the new parallelism (Flink's resetToCheckpoint): the readers' splits are spread
one by one over the new readers (Flink's split list state), unassigned ones go to their owners at
parallelism 2, and both readers read.
The bounded source then reads every partition to its stopping offset: the exactly-once FileSink
holds every record's count once. Before the rescale, the one reader reads every partition."""
from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.datastream import MapFunction, StreamExecutionEnvironment
from millstream.datastream.connectors.kafka import KafkaOffsetsInitializer, KafkaTopicPartition
from millstream.runtime.execution_state import JobStatus

from .harness import ProcessCluster, poll_for
from .jobs import KEYS, assert_exactly_once, ended, visible_lines
from .kafka import KafkaBroker, kafka_broker  # noqa: F401  (the module-scoped fixture)
from .test_adaptive_scheduler import running_parallelism

from .test_kafka_source import counting_job, new_topic, produce, source, spread, trickle

pytestmark = pytest.mark.timeout(400)


class NoteReading(MapFunction):
    """Creates ``<directory>/read-<subtask>-<attempt>`` at its first record: which readers read."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def open(self, runtime_context: Any) -> None:
        self.path = Path(self.directory, f"read-{runtime_context.get_index_of_this_subtask()}-"
                                         f"{runtime_context.get_attempt_number()}")

    def map(self, value: Any) -> Any:
        if not self.path.exists():
            self.path.touch()
        return value


def counted(out: Path) -> dict[int, int]:
    """Each key's count in the FileSink's committed output."""
    counts: dict[int, int] = {}
    for line in visible_lines(out):
        key, count = map(int, line.split(","))
        counts[key] = max(counts.get(key, 0), count)
    return counts


def test_a_kafka_source_rescales_up_when_a_task_manager_joins_and_reads_every_record_once(
        kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    partitions, count = 4, 2400
    topic, group = new_topic(kafka_broker, partitions), f"g-{uuid.uuid4().hex[:6]}"
    stop = KafkaOffsetsInitializer.offsets({KafkaTopicPartition(topic, p): count // partitions for p in range(partitions)})
    options = {"scheduler-mode": "reactive", "jobmanager.adaptive-scheduler.resource-stabilization-timeout": "1 s",
               "execution.checkpointing.dir": str(tmp_path / "checkpoints")}
    with ProcessCluster(tmp_path, slots=1, tasks_per_slot=3, taskmanagers=1, jobmanager_options=options) as cluster, \
            ClusterClient(cluster.address) as client:
        out, notes = tmp_path / "out", tmp_path / "notes"
        notes.mkdir()
        env = StreamExecutionEnvironment.get_execution_environment()
        env.enable_checkpointing(300)
        counting_job(env, source(kafka_broker, topic, set_group_id=group, set_bounded=stop), out, NoteReading(str(notes)))
        job_id = client.submit(env.get_job_graph("kafka, 1 then 2 slots").proto)
        assert poll_for(lambda: running_parallelism(client, job_id), 120, what="the job running") == {1}
        # The first half at once: the one reader at parallelism 1 owns every partition (the bug:
        # the enumerator was sized by the JobGraph's parallelism, and at 1 half the partitions
        # waited for a reader that did not exist) ...
        half = count // 2
        produce(kafka_broker, topic, spread(list(range(half)), partitions))
        poll_for(lambda: counted(out) == {k: len(range(k, half, KEYS)) for k in range(KEYS)}, 120, interval=0.5,
                 what="every record of the first half counted at parallelism 1")
        # ... the rest slow enough that the job is still reading when the second TaskManager started
        producer = trickle(kafka_broker, topic, spread(list(range(half, count)), partitions), per_s=20)
        cluster.add_taskmanagers(1)
        poll_for(lambda: running_parallelism(client, job_id) == {2}, 120, interval=0.2, what="the job at parallelism 2")
        producer.join(180)
        summary = poll_for(lambda: ended(client, job_id), 180, interval=0.5, what="the job to end")
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
    assert [(r.old_parallelism, r.new_parallelism) for r in summary.rescales] == [(1, 2)]
    assert summary.checkpoints.latest_restored_id >= 1
    # both readers of the rescaled graph (attempt 1) read: the partitions were spread over them
    assert {p.name for p in notes.iterdir()} >= {"read-0-1", "read-1-1"}, sorted(p.name for p in notes.iterdir())
    assert_exactly_once(out, count)
