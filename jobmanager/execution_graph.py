"""JobGraph → ExecutionGraph: the parallel view the JobMaster schedules (Flink's ExecutionGraph).

One ExecutionJobVertex per JobVertex, one ExecutionVertex per subtask, one
IntermediateResultPartition per producer subtask. POINTWISE inputs connect producers and consumers
in contiguous blocks exactly as Flink's EdgeManagerBuildUtil does; ALL_TO_ALL connects every pair.
A consumer reads one subpartition of each partition it is connected to.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from millstream.jobmanager.job_graph_validation import topological_order, validate_job_graph
from millstream.proto import jobgraph_pb2 as pb
from millstream.runtime.keygroups import KeyGroupRange, compute_key_group_range_for_operator_index


def pointwise_consumers(num_producers: int, num_consumers: int) -> list[list[int]]:
    """For each consumer subtask, the producer subtasks it reads (Flink's pointwise wiring)."""
    if num_producers == num_consumers:
        return [[i] for i in range(num_consumers)]
    inputs: list[list[int]] = [[] for _ in range(num_consumers)]
    if num_producers > num_consumers:
        for c in range(num_consumers):
            start = c * num_producers // num_consumers
            end = (c + 1) * num_producers // num_consumers
            inputs[c] = list(range(start, end))
    else:
        for p in range(num_producers):
            start = (p * num_consumers + num_producers - 1) // num_producers
            end = ((p + 1) * num_consumers + num_producers - 1) // num_producers
            for c in range(start, end):
                inputs[c].append(p)
    return inputs


@dataclass(frozen=True)
class ExecutionVertexID:
    job_vertex_id: bytes
    subtask_index: int

    def __str__(self) -> str:
        return f"{self.job_vertex_id.hex()}_{self.subtask_index}"


@dataclass(frozen=True)
class ResultPartitionID:
    result_id: bytes
    partition_index: int

    def __str__(self) -> str:
        return f"{self.result_id.hex()}#{self.partition_index}"


@dataclass(eq=False)
class IntermediateResultPartition:
    id: ResultPartitionID
    producer: "ExecutionVertex"
    consumers: list["ExecutionVertex"] = field(default_factory=list)

    @property
    def num_subpartitions(self) -> int:
        return len(self.consumers)


@dataclass(frozen=True)
class InputChannel:
    """One channel of an input gate: which partition, and which of its subpartitions to read."""

    partition: ResultPartitionID
    subpartition_index: int
    producer: ExecutionVertexID


@dataclass(eq=False)
class InputGate:
    edge: pb.JobEdge
    channels: list[InputChannel] = field(default_factory=list)


@dataclass(eq=False)
class ExecutionVertex:
    job_vertex: "ExecutionJobVertex"
    subtask_index: int
    input_gates: list[InputGate] = field(default_factory=list)
    produced: dict[bytes, IntermediateResultPartition] = field(default_factory=dict)

    @property
    def id(self) -> ExecutionVertexID:
        return ExecutionVertexID(self.job_vertex.id, self.subtask_index)

    @property
    def key_group_range(self) -> KeyGroupRange:
        jv = self.job_vertex
        return compute_key_group_range_for_operator_index(jv.max_parallelism, jv.parallelism, self.subtask_index)

    @property
    def task_name_with_subtasks(self) -> str:
        return f"{self.job_vertex.name} ({self.subtask_index + 1}/{self.job_vertex.parallelism})"

    def __repr__(self) -> str:
        return f"ExecutionVertex({self.task_name_with_subtasks})"


@dataclass(eq=False)
class ExecutionJobVertex:
    proto: pb.JobVertex
    task_vertices: list[ExecutionVertex] = field(default_factory=list)

    @property
    def id(self) -> bytes:
        return self.proto.id

    @property
    def name(self) -> str:
        return self.proto.name

    @property
    def parallelism(self) -> int:
        return self.proto.parallelism

    @property
    def max_parallelism(self) -> int:
        return self.proto.max_parallelism

    @property
    def slot_sharing_group(self) -> str:
        return self.proto.slot_sharing_group


class ExecutionGraph:
    def __init__(self, job_graph: pb.JobGraph) -> None:
        validate_job_graph(job_graph)
        self.job_graph = job_graph
        self.job_id = job_graph.job_id
        self.job_name = job_graph.job_name
        self.job_vertices: list[ExecutionJobVertex] = []
        self._by_id: dict[bytes, ExecutionJobVertex] = {}
        for vertex in topological_order(job_graph):
            ejv = ExecutionJobVertex(vertex)
            ejv.task_vertices = [ExecutionVertex(ejv, i) for i in range(vertex.parallelism)]
            self.job_vertices.append(ejv)
            self._by_id[vertex.id] = ejv
        for ejv in self.job_vertices:
            for result in ejv.proto.produced:
                for ev in ejv.task_vertices:
                    pid = ResultPartitionID(result.id, ev.subtask_index)
                    ev.produced[result.id] = IntermediateResultPartition(pid, ev)
        for ejv in self.job_vertices:
            for edge in ejv.proto.inputs:
                self._connect(self._by_id[edge.source_vertex], ejv, edge)

    def _connect(self, producer: ExecutionJobVertex, consumer: ExecutionJobVertex, edge: pb.JobEdge) -> None:
        gates = [InputGate(edge) for _ in consumer.task_vertices]
        for gate, ev in zip(gates, consumer.task_vertices):
            ev.input_gates.append(gate)
        if edge.distribution == pb.POINTWISE:
            wiring = pointwise_consumers(producer.parallelism, consumer.parallelism)
        else:
            wiring = [list(range(producer.parallelism))] * consumer.parallelism
        for c, producer_indices in enumerate(wiring):
            for p in producer_indices:
                partition = producer.task_vertices[p].produced[edge.result_id]
                gates[c].channels.append(InputChannel(partition.id, len(partition.consumers), partition.producer.id))
                partition.consumers.append(consumer.task_vertices[c])

    def job_vertex(self, vertex_id: bytes) -> ExecutionJobVertex:
        return self._by_id[vertex_id]

    def all_execution_vertices(self) -> list[ExecutionVertex]:
        return [ev for ejv in self.job_vertices for ev in ejv.task_vertices]

    def required_slots(self) -> dict[str, int]:
        """Slots per slot sharing group: the largest parallelism among the group's vertices."""
        needs: dict[str, int] = {}
        for ejv in self.job_vertices:
            needs[ejv.slot_sharing_group] = max(needs.get(ejv.slot_sharing_group, 0), ejv.parallelism)
        return needs

    def total_required_slots(self) -> int:
        return sum(self.required_slots().values())
