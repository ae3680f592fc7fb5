"""JobGraph → ExecutionGraph: the parallel view the JobMaster schedules (Flink's ExecutionGraph).

One ExecutionJobVertex per JobVertex, one ExecutionVertex per subtask, one
IntermediateResultPartition per producer subtask. POINTWISE inputs connect producers and consumers
in contiguous blocks exactly as Flink's EdgeManagerBuildUtil does; ALL_TO_ALL connects every
consumer to one ConsumedPartitionGroup shared by the whole edge, so a graph holds O(n) objects per
edge, never n² channels. A consumer reads the same subpartition of each partition of its gate.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from millstream.jobmanager.jobmaster.job_graph_validation import topological_order, validate_job_graph
from millstream.proto import jobgraph_pb2 as pb
from millstream.runtime import slot_sharing
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
class ConsumerVertexGroup:
    """The consumers of a partition, in subpartition order (Flink's ConsumerVertexGroup).

    ALL_TO_ALL shares one group among every partition of the result; consumer ``k`` of the group
    reads subpartition ``k``.
    """

    vertices: list["ExecutionVertex"]


@dataclass(eq=False)
class IntermediateResultPartition:
    id: ResultPartitionID
    producer: "ExecutionVertex"
    consumer_groups: list[ConsumerVertexGroup] = field(default_factory=list)

    @property
    def consumers(self) -> list["ExecutionVertex"]:
        return [v for group in self.consumer_groups for v in group.vertices]

    @property
    def num_subpartitions(self) -> int:
        return sum(len(group.vertices) for group in self.consumer_groups)


@dataclass(eq=False)
class ConsumedPartitionGroup:
    """Partitions of one result that a set of consumers all read (Flink's ConsumedPartitionGroup).

    ALL_TO_ALL builds one group per edge, shared by every consumer, instead of one edge per
    (producer, consumer) pair; the deployment descriptors serialize a group once for all its
    consumers.
    """

    result_id: bytes
    partitions: list[IntermediateResultPartition]
    num_consumers: int


@dataclass(frozen=True)
class InputChannel:
    """One channel of an input gate: which partition, and which of its subpartitions to read."""

    partition: ResultPartitionID
    subpartition_index: int
    producer: ExecutionVertexID


@dataclass(eq=False)
class InputGate:
    """A consumer's input from one edge: a consumed partition group, of which it reads the same
    subpartition of every partition."""

    edge: pb.JobEdge
    consumed: ConsumedPartitionGroup
    subpartition_index: int

    @property
    def channels(self) -> list[InputChannel]:
        """The gate's channels, made on demand (they are never stored: n² for ALL_TO_ALL)."""
        return [InputChannel(p.id, self.subpartition_index, p.producer.id) for p in self.consumed.partitions]


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
        """Wires one edge as Flink's EdgeManagerBuildUtil does: O(producers + consumers) objects."""
        partitions = [ev.produced[edge.result_id] for ev in producer.task_vertices]
        consumers = consumer.task_vertices
        if edge.distribution != pb.POINTWISE:
            group = ConsumedPartitionGroup(edge.result_id, partitions, len(consumers))
            consumer_group = ConsumerVertexGroup(list(consumers))
            for partition in partitions:
                partition.consumer_groups.append(consumer_group)
            for index, ev in enumerate(consumers):
                ev.input_gates.append(InputGate(edge, group, index))
            return
        p, c = len(partitions), len(consumers)
        if p >= c:  # consumer i reads partitions [i*p//c, (i+1)*p//c), each its only consumer
            for i, ev in enumerate(consumers):
                consumed = partitions[i * p // c : (i + 1) * p // c]
                for partition in consumed:
                    partition.consumer_groups.append(ConsumerVertexGroup([ev]))
                ev.input_gates.append(InputGate(edge, ConsumedPartitionGroup(edge.result_id, consumed, 1), 0))
        else:  # partition j feeds consumers [(j*c+p-1)//p, ((j+1)*c+p-1)//p), one subpartition each
            for j, partition in enumerate(partitions):
                fed = consumers[(j * c + p - 1) // p : ((j + 1) * c + p - 1) // p]
                group = ConsumedPartitionGroup(edge.result_id, [partition], len(fed))
                partition.consumer_groups.append(ConsumerVertexGroup(list(fed)))
                for index, ev in enumerate(fed):
                    ev.input_gates.append(InputGate(edge, group, index))

    def consumed_partition_groups(self) -> list[ConsumedPartitionGroup]:
        """Every group once (Flink's EdgeManager keeps them registered the same way)."""
        seen: dict[int, ConsumedPartitionGroup] = {}
        for ejv in self.job_vertices:
            for ev in ejv.task_vertices:
                for gate in ev.input_gates:
                    seen.setdefault(id(gate.consumed), gate.consumed)
        return list(seen.values())

    def job_vertex(self, vertex_id: bytes) -> ExecutionJobVertex:
        return self._by_id[vertex_id]

    def all_execution_vertices(self) -> list[ExecutionVertex]:
        return [ev for ejv in self.job_vertices for ev in ejv.task_vertices]

    def required_slots(self) -> dict[str, int]:
        """Slots per slot sharing group: the largest parallelism among the group's vertices."""
        return slot_sharing.required_slots(ejv.proto for ejv in self.job_vertices)

    def total_required_slots(self) -> int:
        return sum(self.required_slots().values())


def pipelined_regions(graph: ExecutionGraph) -> list[list[ExecutionVertex]]:
    """The job's pipelined regions (Flink's SchedulingPipelinedRegion): subtasks connected by data
    exchanges, which fail and restart together; every exchange is pipelined here, so a region is
    a connected component. A job with an all-to-all edge is one region; an embarrassingly parallel
    one has a region per pipeline. O(subtasks + partitions): each shared consumed partition group
    is joined once."""
    parent: dict[ExecutionVertexID, ExecutionVertexID] = {}

    def find(v: ExecutionVertexID) -> ExecutionVertexID:
        root = v
        while parent.get(root, root) != root:
            root = parent[root]
        while parent.get(v, v) != root:  # path compression
            parent[v], v = root, parent[v]
        return root

    def union(a: ExecutionVertexID, b: ExecutionVertexID) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[ra] = rb

    joined: set[int] = set()
    vertices = graph.all_execution_vertices()
    for ev in vertices:
        for gate in ev.input_gates:
            partitions = gate.consumed.partitions
            if not partitions:
                continue
            first = partitions[0].producer.id
            if id(gate.consumed) not in joined:
                joined.add(id(gate.consumed))
                for partition in partitions[1:]:
                    union(partition.producer.id, first)
            union(ev.id, first)
    regions: dict[ExecutionVertexID, list[ExecutionVertex]] = {}
    for ev in vertices:
        regions.setdefault(find(ev.id), []).append(ev)
    return list(regions.values())
