"""StreamGraph → JobGraph: operator chaining (Flink's StreamingJobGraphGenerator).

Chains are built depth-first from the sorted sources; an edge is chained only when every
condition of :func:`is_chainable` holds. Every edge that is not chained becomes an
IntermediateDataSet of the producing vertex and a JobEdge of the consuming one.
"""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from millstream.client.node_hashes import generate_node_hashes
from millstream.client.stream_graph import StreamEdge, StreamGraph, StreamGraphError, StreamNode
from millstream.datastream.execution_mode import RuntimeExecutionMode
from millstream.datastream.transformations import UNSET, ChainingStrategy, StreamExchangeMode
from millstream.proto import jobgraph_pb2 as pb
from millstream.datastream.functions import _ReduceWrapper
from millstream.runtime import user_code
from millstream.runtime.keygroups import compute_default_max_parallelism
from millstream.runtime.operator_factories import AggregationFactory, KafkaSourceFactory, ReduceFactory
from millstream.runtime.operators.kafka_splits import coordinator_settings
from millstream.runtime.partitioners import ForwardPartitioner, KeyGroupStreamPartitioner

DISTRIBUTION_NAMES = {pb.POINTWISE: "POINTWISE", pb.ALL_TO_ALL: "ALL_TO_ALL"}
PARTITION_TYPE_NAMES = {pb.PIPELINED_BOUNDED: "PIPELINED_BOUNDED", pb.BLOCKING: "BLOCKING"}


def operators_chainable(upstream: StreamNode, downstream: StreamNode) -> bool:
    if downstream.chaining_strategy in (ChainingStrategy.NEVER, ChainingStrategy.HEAD):
        return False
    return upstream.chaining_strategy is not ChainingStrategy.NEVER


def is_chainable(edge: StreamEdge, graph: StreamGraph) -> bool:
    """Flink's chaining conditions, every one required."""
    upstream, downstream = graph.node(edge.source_id), graph.node(edge.target_id)
    return (
        len(downstream.in_edges) == 1  # one input: also excludes a union, even of the same stream
        and graph.chaining_enabled
        and upstream.slot_sharing_group == downstream.slot_sharing_group
        and operators_chainable(upstream, downstream)
        and isinstance(edge.partitioner, ForwardPartitioner)
        and edge.exchange_mode is not StreamExchangeMode.BATCH
        and upstream.parallelism == downstream.parallelism
    )


def _pickle(obj: Any, what: str) -> bytes:
    try:
        return user_code.dumps(obj)  # cloudpickle that keeps the user's file name and source lines
    except Exception as exc:  # cloudpickle raises many types (PicklingError, TypeError, ...)
        raise StreamGraphError(f"Cannot serialize {what}: {type(exc).__name__}: {exc}") from exc


@dataclass
class _Chain:
    head: StreamNode
    operators: list[pb.StreamOperator] = field(default_factory=list)
    out_edges: list[StreamEdge] = field(default_factory=list)


class JobGraphGenerator:
    def __init__(self, stream_graph: StreamGraph) -> None:
        self._graph = stream_graph
        self._chainable = lambda edge: is_chainable(edge, stream_graph)

    def generate(self, job_id: bytes | None = None) -> "JobGraph":
        graph = self._graph
        self._hashes = generate_node_hashes(graph, self._chainable)
        self._chained_names: dict[int, str] = {}
        self._chains: dict[int, _Chain] = {}
        self._vertices: dict[int, pb.JobVertex] = {}
        for source_id in graph.source_ids:
            self._create_chain(source_id, graph.node(source_id))
        for head_id, chain in self._chains.items():
            self._vertices[head_id] = self._create_vertex(chain)
        for head_id, chain in self._chains.items():
            for edge in chain.out_edges:
                self._connect(head_id, edge)
        proto = pb.JobGraph(
            job_id=job_id or uuid.uuid4().bytes,
            job_name=graph.job_name,
            vertices=[self._vertices[h] for h in self._topological_heads()],
            execution_config=self._execution_config(),
        )
        return JobGraph(proto)

    # -- chaining ------------------------------------------------------------------------------

    def _create_chain(self, head_id: int, node: StreamNode) -> list[StreamEdge]:
        """Adds ``node`` to the chain headed by ``head_id``; returns the edges leaving the chain below it."""
        if node.id == head_id:
            if head_id in self._chains:
                return []
            self._chains[head_id] = _Chain(node)
        chain = self._chains[head_id]
        operator = pb.StreamOperator(
            node_id=node.id,
            name=node.operator_name,
            operator_id=self._hashes[node.id],
            uid=node.uid or "",
            uid_hash=node.uid_hash or "",
            kind=node.factory.kind,
            factory=_pickle(node.factory, f"the function of operator '{node}'"),
        )
        if isinstance(node.factory, KafkaSourceFactory):  # its split enumerator runs on the JobManager
            operator.coordinator = coordinator_settings(node.factory)
        if node.state_key_selector is not None:
            operator.state_key_selector = _pickle(node.state_key_selector, f"the key selector of operator '{node}'")
        if node.state_key_selector2 is not None:
            operator.state_key_selector2 = _pickle(
                node.state_key_selector2, f"the second input's key selector of operator '{node}'"
            )
        chain.operators.append(operator)
        chainable = [e for e in node.out_edges if self._chainable(e)]
        leaving: list[StreamEdge] = []
        for edge in chainable:
            operator.chained_outputs.add(target_node_id=edge.target_id, output_tag=edge.output_tag or "")
            leaving += self._create_chain(head_id, self._graph.node(edge.target_id))
        for edge in node.out_edges:
            if not self._chainable(edge):
                leaving.append(edge)
                operator.non_chained_outputs.append(self._result_id(edge))
                self._create_chain(edge.target_id, self._graph.node(edge.target_id))
        names = [self._chained_names[e.target_id] for e in chainable]
        if len(names) > 1:
            self._chained_names[node.id] = f"{node.operator_name} -> ({', '.join(names)})"
        elif names:
            self._chained_names[node.id] = f"{node.operator_name} -> {names[0]}"
        else:
            self._chained_names[node.id] = node.operator_name
        if node.id == head_id:
            chain.out_edges = sorted(leaving, key=lambda e: e.index)
        return leaving

    def _result_id(self, edge: StreamEdge) -> bytes:
        return uuid.uuid5(uuid.NAMESPACE_OID, f"{self._hashes[edge.source_id].hex()}/{edge.edge_id}").bytes

    def _max_parallelism(self, node: StreamNode) -> int:
        if node.max_parallelism != UNSET:
            return node.max_parallelism
        if self._graph.max_parallelism != UNSET:
            return self._graph.max_parallelism
        return compute_default_max_parallelism(node.parallelism)

    def _create_vertex(self, chain: _Chain) -> pb.JobVertex:
        head = chain.head
        max_parallelism = self._max_parallelism(head)
        for op in chain.operators:
            node = self._graph.node(op.node_id)
            if node.parallelism > max_parallelism:
                raise StreamGraphError(
                    f"The parallelism of operator '{node}' ({node.parallelism}) is higher than its max "
                    f"parallelism ({max_parallelism}). Please lower the parallelism or increase the max parallelism."
                )
        return pb.JobVertex(
            id=self._hashes[head.id],
            name=self._chained_names[head.id],
            parallelism=head.parallelism,
            max_parallelism=max_parallelism,
            slot_sharing_group=head.slot_sharing_group,
            operators=chain.operators,
            is_source=head.is_source,
        )

    def _partition_type(self, edge: StreamEdge) -> int:
        if edge.exchange_mode is StreamExchangeMode.PIPELINED:
            return pb.PIPELINED_BOUNDED
        if edge.exchange_mode is StreamExchangeMode.BATCH:
            return pb.BLOCKING
        return pb.BLOCKING if self._graph.runtime_mode is RuntimeExecutionMode.BATCH else pb.PIPELINED_BOUNDED

    def _connect(self, head_id: int, edge: StreamEdge) -> None:
        producer, consumer = self._vertices[head_id], self._vertices[edge.target_id]
        partitioner = edge.partitioner
        if isinstance(partitioner, KeyGroupStreamPartitioner):
            partitioner.max_parallelism = consumer.max_parallelism
        source = self._graph.node(edge.source_id)
        partition_type = self._partition_type(edge)
        result_id = self._result_id(edge)
        dataset = producer.produced.add(
            id=result_id,
            source_node_id=edge.source_id,
            output_tag=edge.output_tag or "",
            consumer_vertex=consumer.id,
            target_node_id=edge.target_id,
            partitioner=pb.Partitioner(
                ship_strategy=partitioner.ship_strategy,
                payload=_pickle(partitioner, f"the partitioner of the edge from '{source}'"),
                max_parallelism=consumer.max_parallelism,
            ),
            partition_type=partition_type,
        )
        combiner = self._combiner(edge)
        if combiner is not None:
            dataset.combiner = _pickle(combiner, f"the aggregation of '{self._graph.node(edge.target_id)}'")
        consumer.inputs.add(
            source_vertex=producer.id,
            result_id=result_id,
            ship_strategy=partitioner.ship_strategy,
            distribution=pb.POINTWISE if partitioner.pointwise else pb.ALL_TO_ALL,
            partition_type=partition_type,
            target_node_id=edge.target_id,
            input_index=edge.type_number,
        )

    def _combiner(self, edge: StreamEdge) -> Any:
        """The consumer's aggregation when a producer may pre-aggregate for it (BATCH, keyed, and an
        aggregation that needs no runtime context: a built-in one or a plain reduce callable)."""
        if self._graph.runtime_mode is not RuntimeExecutionMode.BATCH:
            return None
        if not isinstance(edge.partitioner, KeyGroupStreamPartitioner):
            return None
        target = self._graph.node(edge.target_id)
        factory = target.factory
        if isinstance(factory, AggregationFactory):
            return factory
        if isinstance(factory, ReduceFactory) and type(factory.function) is _ReduceWrapper:
            return factory
        return None

    def _topological_heads(self) -> list[int]:
        """Kahn's algorithm; among ready vertices the smallest head id first, for a stable order."""
        indegree = {h: 0 for h in self._chains}
        for chain in self._chains.values():
            for edge in chain.out_edges:
                indegree[edge.target_id] += 1
        ready = sorted(h for h, d in indegree.items() if d == 0)
        order: list[int] = []
        while ready:
            head = ready.pop(0)
            order.append(head)
            for edge in self._chains[head].out_edges:
                indegree[edge.target_id] -= 1
                if indegree[edge.target_id] == 0:
                    ready.append(edge.target_id)
                    ready.sort()
        return order

    def _execution_config(self) -> pb.ExecutionConfig:
        g = self._graph
        config = pb.ExecutionConfig(
            runtime_mode=pb.BATCH if g.runtime_mode is RuntimeExecutionMode.BATCH else pb.STREAMING,
            parallelism=g.parallelism,
            max_parallelism=max(g.max_parallelism, 0),
            checkpoint_interval_ms=g.checkpoint_interval_ms,
            checkpointing_mode=g.checkpointing_mode,
            buffer_timeout_ms=g.buffer_timeout_ms,
            auto_watermark_interval_ms=g.auto_watermark_interval_ms,
            configuration=g.configuration,
        )
        if g.restart_strategy is not None:
            config.restart_strategy.CopyFrom(pb.RestartStrategy(**vars(g.restart_strategy)))
        return config


def _dot_quote(text: str) -> str:
    """A Graphviz string literal; ``\\n`` sequences in ``text`` stay line breaks."""
    return '"' + text.replace('"', '\\"') + '"'


class JobGraph:
    """The submitted job: a protobuf message plus readable views (JSON, Graphviz)."""

    def __init__(self, proto: pb.JobGraph) -> None:
        self.proto = proto

    @property
    def job_id(self) -> str:
        return self.proto.job_id.hex()

    @property
    def job_name(self) -> str:
        return self.proto.job_name

    @property
    def vertices(self) -> list[pb.JobVertex]:
        return list(self.proto.vertices)

    def vertex(self, name_or_id: str) -> pb.JobVertex:
        for v in self.proto.vertices:
            if v.name == name_or_id or v.id.hex() == name_or_id:
                return v
        raise KeyError(f"No vertex named {name_or_id!r}")

    def serialize(self) -> bytes:
        return self.proto.SerializeToString()

    @staticmethod
    def deserialize(data: bytes) -> "JobGraph":
        return JobGraph(pb.JobGraph.FromString(data))

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_name": self.proto.job_name,
            "vertices": [
                {
                    "id": v.id.hex(),
                    "name": v.name,
                    "parallelism": v.parallelism,
                    "max_parallelism": v.max_parallelism,
                    "operators": [op.name for op in v.operators],
                    "slot_sharing_group": v.slot_sharing_group,
                    "inputs": [
                        {
                            "source_vertex": e.source_vertex.hex(),
                            "ship_strategy": e.ship_strategy,
                            "distribution": DISTRIBUTION_NAMES[e.distribution],
                            "partition_type": PARTITION_TYPE_NAMES[e.partition_type],
                        }
                        for e in v.inputs
                    ],
                }
                for v in self.proto.vertices
            ],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def to_dot(self) -> str:
        """Graphviz: one box per vertex (chain and parallelism), one labelled arrow per edge."""
        lines = [f"digraph {json.dumps(self.proto.job_name)} {{", "  rankdir=LR;", "  node [shape=box];"]
        for v in self.proto.vertices:
            label = f"{v.name}\\nparallelism: {v.parallelism}"
            lines.append(f'  "{v.id.hex()}" [label={_dot_quote(label)}];')
        for v in self.proto.vertices:
            for e in v.inputs:
                label = f"{e.ship_strategy}\\n{DISTRIBUTION_NAMES[e.distribution]}"
                style = ', style="dashed"' if e.partition_type == pb.BLOCKING else ""
                lines.append(f'  "{e.source_vertex.hex()}" -> "{v.id.hex()}" [label={_dot_quote(label)}{style}];')
        lines.append("}")
        return "\n".join(lines) + "\n"

    def __repr__(self) -> str:
        return f"JobGraph({self.proto.job_name!r}, vertices={[v.name for v in self.proto.vertices]})"
