"""Task deployment descriptors, built once per deployment round off the event loop.

Flink's TaskDeploymentDescriptorFactory serializes the job and task information once and caches
the serialized shuffle descriptors of each ConsumedPartitionGroup, so that deploying an all-to-all
edge of parallelism n costs O(n) serialization, not O(n²). This does the same:

- the part of a descriptor shared by every subtask of a job vertex (job, vertex with its pickled
  chain, execution config, artifacts) is serialized once per vertex;
- each consumed partition group is serialized once into a ``ConsumedPartitionGroupDescriptor`` and
  the same bytes go into the descriptor of each of its consumers;
- a subtask's descriptor is the vertex bytes followed by its own fields. Protobuf parses
  concatenated messages as one merged message, so the TaskManager reads an ordinary
  ``SubmitTaskRequest``.

Everything here reads an immutable snapshot (``PlannedTask`` and producer locations taken on the
event loop), so ``build`` may run in a worker thread while the JobMaster keeps serving.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from millstream.jobmanager.jobmaster.execution_graph import ConsumedPartitionGroup, ExecutionGraph, ExecutionVertex
from millstream.proto import cluster_pb2 as cpb

VertexKey = tuple[bytes, int]  # (job vertex id, subtask index)


@dataclass(frozen=True)
class ProducerLocation:
    data_address: str
    attempt_id: bytes


@dataclass(frozen=True)
class PlannedTask:
    """One execution to deploy, as the JobMaster saw it when the round started."""

    vertex: ExecutionVertex
    attempt_id: bytes
    attempt_number: int
    allocation_id: bytes
    resource_id: str
    tm_address: str
    restore: cpb.TaskRestore | None = None  # the checkpoint state it resumes from


@dataclass(frozen=True)
class BuiltDeployment:
    task: PlannedTask
    request: bytes  # a serialized SubmitTaskRequest


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


_SUBMIT_TASK_TDD_TAG = b"\x0a"  # SubmitTaskRequest.tdd: field 1, length-delimited


class TaskDeploymentDescriptorFactory:
    def __init__(
        self,
        graph: ExecutionGraph,
        artifacts: Sequence[cpb.ArtifactRef],
        producers: dict[VertexKey, ProducerLocation],
        checkpoint_dir: str = "",
        checkpointing_mode: str = "",
    ) -> None:
        self._graph = graph
        self._checkpoint_dir = checkpoint_dir
        self._checkpointing_mode = checkpointing_mode
        self._artifacts = list(artifacts)
        self._producers = producers
        self._vertex_bytes: dict[bytes, bytes] = {}
        self._group_bytes: dict[int, bytes] = {}
        self.groups_serialized = 0

    def build(self, tasks: Sequence[PlannedTask]) -> list[BuiltDeployment]:
        return [BuiltDeployment(task, self.submit_task_request(task)) for task in tasks]

    def submit_task_request(self, task: PlannedTask) -> bytes:
        tdd = self._vertex_part(task.vertex) + self._subtask_part(task)
        return _SUBMIT_TASK_TDD_TAG + _varint(len(tdd)) + tdd

    def _vertex_part(self, ev: ExecutionVertex) -> bytes:
        ejv = ev.job_vertex
        cached = self._vertex_bytes.get(ejv.id)
        if cached is None:
            cached = self._vertex_bytes[ejv.id] = cpb.TaskDeploymentDescriptor(
                job_id=self._graph.job_id,
                job_name=self._graph.job_name,
                vertex=ejv.proto,
                execution_config=self._graph.job_graph.execution_config,
                artifacts=self._artifacts,
                checkpoint_dir=self._checkpoint_dir,
                checkpointing_mode=self._checkpointing_mode,
            ).SerializeToString()
        return cached

    def _subtask_part(self, task: PlannedTask) -> bytes:
        ev = task.vertex
        kgr = ev.key_group_range
        tdd = cpb.TaskDeploymentDescriptor(
            execution_attempt_id=task.attempt_id,
            attempt_number=task.attempt_number,
            allocation_id=task.allocation_id,
            subtask_index=ev.subtask_index,
            key_group_start=kgr.start_key_group,
            key_group_end=kgr.end_key_group,
            restore=task.restore,
        )
        partition_types = {r.id: r.partition_type for r in ev.job_vertex.proto.produced}
        for result_id, partition in ev.produced.items():
            tdd.produced_partitions.add(
                result_id=result_id,
                partition_index=partition.id.partition_index,
                num_subpartitions=partition.num_subpartitions,
                partition_type=partition_types[result_id],
            )
        for gate in ev.input_gates:
            tdd.input_gates.add(
                result_id=gate.edge.result_id,
                target_node_id=gate.edge.target_node_id,
                input_index=gate.edge.input_index,
                ship_strategy=gate.edge.ship_strategy,
                subpartition_index=gate.subpartition_index,
                consumed_partition_group=self._group(gate.consumed),
            )
        return tdd.SerializeToString()

    def _group(self, group: ConsumedPartitionGroup) -> bytes:
        cached = self._group_bytes.get(id(group))
        if cached is None:
            descriptor = cpb.ConsumedPartitionGroupDescriptor()
            for partition in group.partitions:
                producer = partition.producer
                location = self._producers[(producer.job_vertex.id, producer.subtask_index)]
                descriptor.partitions.add(
                    partition_index=partition.id.partition_index,
                    producer_data_address=location.data_address,
                    producer_attempt_id=location.attempt_id,
                )
            cached = self._group_bytes[id(group)] = descriptor.SerializeToString()
            self.groups_serialized += 1
        return cached
