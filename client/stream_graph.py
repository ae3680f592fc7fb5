"""Transformations → StreamGraph (Flink's StreamGraphGenerator and StreamGraph).

Each non-virtual transformation becomes a StreamNode. Partitioning and side outputs are virtual
nodes folded into the edges that leave them (the partitioner closest to the consumer wins);
unions only multiply edges. The default partitioner is forward between equal parallelisms and
rebalance otherwise; an explicit forward across a change of parallelism is rejected.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from millstream.datastream.execution_mode import RuntimeExecutionMode
from millstream.datastream.transformations import (
    UNSET,
    ChainingStrategy,
    OneInputTransformation,
    PartitionTransformation,
    SideOutputTransformation,
    SinkTransformation,
    SourceTransformation,
    StreamExchangeMode,
    Transformation,
    TwoInputTransformation,
    UnionTransformation,
)
from millstream.runtime.operator_factories import OperatorFactory, SourceFactory
from millstream.runtime.partitioners import (ForwardPartitioner, KeyGroupStreamPartitioner, RebalancePartitioner,
                                             StreamPartitioner)

DEFAULT_SLOT_SHARING_GROUP = "default"


class StreamGraphError(ValueError):
    """A pipeline that cannot become a StreamGraph; the message names the operator."""



# Python's default reprs, as they end up in names built from the objects (a window's trigger, a
# session gap's extractor): they change every run and mean nothing in the web UI.
_OBJECT_REPR = re.compile(r"<(?:[\w.<>]+\.)?(\w+) object at 0x[0-9a-fA-F]+>")  # <locals> too
_FUNCTION_REPR = re.compile(r"<(?:function|built-in function|bound method) (?:[\w.<>]+\.)?(<lambda>|\w+)(?: of <[^<>]*>)? at 0x[0-9a-fA-F]+>"
                            r"|<bound method (?:[\w.<>]+\.)?(\w+) of [^>]*>+")


def display_name(name: str) -> str:
    """An operator's name with every default object repr replaced by its class or function name
    (``<__main__.MyTrigger object at 0x7f...>`` -> ``MyTrigger``; a lambda -> ``lambda``), as Flink
    names operators by classes and functions, never by addresses."""
    name = _OBJECT_REPR.sub(lambda m: m.group(1), name)
    return _FUNCTION_REPR.sub(lambda m: (m.group(1) or m.group(2) or "").replace("<lambda>", "lambda"), name)

# PyFlink's name of the operator that computes a key_by's Python key selector (its PythonConfigUtil's).
KEY_BY_NODE_NAME = "_stream_key_by_map_operator"


@dataclass(eq=False)
class StreamEdge:
    source_id: int
    target_id: int
    type_number: int
    partitioner: StreamPartitioner
    output_tag: str | None
    exchange_mode: StreamExchangeMode
    index: int  # unique per graph: a union of a stream with itself gives two distinct edges
    key_by_id: int | None = None  # the key_by (its PartitionTransformation's id) this HASH edge comes from

    @property
    def edge_id(self) -> str:
        return f"{self.source_id}_{self.target_id}_{self.type_number}_{self.partitioner}_{self.output_tag}_{self.index}"


@dataclass(eq=False)
class StreamNode:
    id: int
    operator_name: str
    factory: OperatorFactory
    parallelism: int
    max_parallelism: int
    slot_sharing_group: str
    chaining_strategy: ChainingStrategy
    uid: str | None = None
    uid_hash: str | None = None
    state_key_selector: Any = None  # the first input's, for a two-input operator
    state_key_selector2: Any = None  # a two-input operator's second input's
    buffer_timeout: int | None = None
    is_source: bool = False
    is_sink: bool = False
    in_edges: list[StreamEdge] = field(default_factory=list)
    out_edges: list[StreamEdge] = field(default_factory=list)

    def __str__(self) -> str:
        return f"{self.operator_name}-{self.id}"


@dataclass
class StreamGraph:
    job_name: str
    runtime_mode: RuntimeExecutionMode  # resolved: STREAMING or BATCH
    chaining_enabled: bool
    parallelism: int
    max_parallelism: int
    checkpoint_interval_ms: int
    checkpointing_mode: str
    restart_strategy: Any
    buffer_timeout_ms: int
    configuration: dict[str, str]
    auto_watermark_interval_ms: int = 200
    nodes: dict[int, StreamNode] = field(default_factory=dict)

    @property
    def source_ids(self) -> list[int]:
        return sorted(n.id for n in self.nodes.values() if n.is_source)

    @property
    def sink_ids(self) -> list[int]:
        return sorted(n.id for n in self.nodes.values() if n.is_sink)

    def node(self, node_id: int) -> StreamNode:
        return self.nodes[node_id]

    def to_json(self) -> str:
        """Flink's execution-plan JSON: nodes with id, type, pact, contents, parallelism, predecessors.

        A ``key_by`` shows as PyFlink's plan shows it: PyFlink computes a Python key selector in an
        operator named ``_stream_key_by_map_operator`` that it aligns with the key_by's input (same
        parallelism, FORWARD), followed by the HASH exchange. Millstream computes the key at the
        same place, in the input's task as it routes each record (the HASH partitioner), so the
        plan gives that step PyFlink's node (the key_by's id) rather than hiding it in the edge."""
        def predecessor(source_id: int, ship_strategy: str) -> dict[str, Any]:
            return {"id": source_id, "ship_strategy": ship_strategy, "side": "second"}

        key_by_inputs: dict[int, list[int]] = {}
        for node in self.nodes.values():
            for e in node.in_edges:
                if e.key_by_id is not None and e.source_id not in key_by_inputs.setdefault(e.key_by_id, []):
                    key_by_inputs[e.key_by_id].append(e.source_id)
        entries: list[tuple[bool, int, dict[str, Any]]] = []
        for key_by_id, inputs in key_by_inputs.items():
            entries.append((False, key_by_id, {
                "id": key_by_id, "type": KEY_BY_NODE_NAME, "pact": "Operator", "contents": KEY_BY_NODE_NAME,
                "parallelism": self.nodes[inputs[0]].parallelism,
                "predecessors": [predecessor(i, "FORWARD") for i in inputs],
            }))
        for node in self.nodes.values():
            entry: dict[str, Any] = {
                "id": node.id,
                "type": node.operator_name,
                "pact": "Data Source" if node.is_source else "Data Sink" if node.is_sink else "Operator",
                "contents": node.operator_name,
                "parallelism": node.parallelism,
            }
            if node.in_edges:
                entry["predecessors"] = [
                    predecessor(e.source_id if e.key_by_id is None else e.key_by_id, str(e.partitioner))
                    for e in node.in_edges
                ]
            entries.append((node.is_sink, node.id, entry))
        # Flink's JSONGenerator lists sinks after every other node, each part by id.
        return json.dumps({"nodes": [e for _, _, e in sorted(entries, key=lambda x: (x[0], x[1]))]}, indent=2)


class StreamGraphGenerator:
    """Walks the transformations from the operators back to the sources, once per transformation."""

    def __init__(self, env: Any, transformations: list[Transformation]) -> None:
        self._env = env
        self._transformations = list(transformations)
        self._translated: dict[int, list[int]] = {}
        self._virtual_partitions: dict[int, tuple[int, StreamPartitioner, StreamExchangeMode]] = {}
        self._virtual_key_bys: dict[int, int] = {}  # a key_by's virtual partition -> the key_by's transformation id
        self._virtual_side_outputs: dict[int, tuple[int, str]] = {}
        self._last_virtual_id = 0
        self._edge_count = 0

    def generate(self, job_name: str) -> StreamGraph:
        if not self._transformations:
            raise StreamGraphError("No operators defined in streaming topology. Cannot generate StreamGraph.")
        env = self._env
        checkpoints = env.get_checkpoint_config()
        self._graph = StreamGraph(
            job_name=job_name,
            runtime_mode=self._resolve_runtime_mode(),
            chaining_enabled=env.is_chaining_enabled(),
            parallelism=env.get_parallelism(),
            max_parallelism=env.get_max_parallelism(),
            checkpoint_interval_ms=checkpoints.interval_ms,
            checkpointing_mode=checkpoints.mode.name,
            restart_strategy=env.get_restart_strategy(),
            buffer_timeout_ms=env.get_buffer_timeout(),
            auto_watermark_interval_ms=env.get_config().get_auto_watermark_interval(),
            configuration={**env.get_configuration().to_dict(), **checkpoints._job_settings()},
        )
        for t in self._transformations:
            self._transform(t)
        return self._graph

    def _resolve_runtime_mode(self) -> RuntimeExecutionMode:
        sources = _reachable_sources(self._transformations)
        unbounded = [s for s in sources if not getattr(s.factory, "bounded", True)]
        mode = self._env.get_runtime_mode()
        if mode is RuntimeExecutionMode.AUTOMATIC:
            return RuntimeExecutionMode.STREAMING if unbounded else RuntimeExecutionMode.BATCH
        if mode is RuntimeExecutionMode.BATCH and unbounded:
            raise StreamGraphError(
                f"Detected an UNBOUNDED source ('{unbounded[0].name}') with the runtime mode set to BATCH. "
                "This combination is not allowed, please set the runtime mode to STREAMING or AUTOMATIC."
            )
        return mode

    # -- translation ---------------------------------------------------------------------------

    def _transform(self, t: Transformation) -> list[int]:
        done = self._translated.get(t.id)
        if done is not None:
            return done
        if isinstance(t, SourceTransformation):
            ids = [self._add_node(t, is_source=True)]
        elif isinstance(t, OneInputTransformation):
            input_ids = self._transform(t.inputs[0])
            node_id = self._add_node(t, is_sink=isinstance(t, SinkTransformation), input_ids=input_ids)
            for input_id in input_ids:
                self._add_edge(input_id, node_id, 0, None, None, StreamExchangeMode.UNDEFINED)
            ids = [node_id]
        elif isinstance(t, TwoInputTransformation):
            input_ids1 = self._transform(t.inputs[0])
            input_ids2 = self._transform(t.inputs[1])
            node_id = self._add_node(t, input_ids=input_ids1 + input_ids2)
            for type_number, input_ids in ((0, input_ids1), (1, input_ids2)):
                for input_id in input_ids:
                    self._add_edge(input_id, node_id, type_number, None, None, StreamExchangeMode.UNDEFINED)
            ids = [node_id]
        elif isinstance(t, PartitionTransformation):
            ids = []
            for input_id in self._transform(t.inputs[0]):
                virtual_id = self._virtual_id(t, input_id)
                self._virtual_partitions[virtual_id] = (input_id, t.partitioner, t.exchange_mode)
                if isinstance(t.partitioner, KeyGroupStreamPartitioner):
                    self._virtual_key_bys[virtual_id] = t.id
                ids.append(virtual_id)
        elif isinstance(t, SideOutputTransformation):
            ids = []
            for input_id in self._transform(t.inputs[0]):
                virtual_id = self._virtual_id(t, input_id)
                self._virtual_side_outputs[virtual_id] = (input_id, t.tag_id)
                ids.append(virtual_id)
        elif isinstance(t, UnionTransformation):
            ids = [i for inp in t.inputs for i in self._transform(inp)]
        else:
            raise StreamGraphError(f"Unknown transformation {t!r}")
        self._translated[t.id] = ids
        return ids

    def _virtual_id(self, t: Transformation, input_id: int) -> int:
        # A virtual transformation over a union has one virtual node per input. Ids come from a
        # counter (as Flink draws them from its id counter), negative to stay clear of real node
        # ids; deriving them from the transformation and input ids made distinct nodes collide.
        self._last_virtual_id -= 1
        return self._last_virtual_id

    def _add_node(self, t: Any, is_source: bool = False, is_sink: bool = False, input_ids: Sequence[int] = ()) -> int:
        name = display_name(t.name)
        if is_source:
            name = f"Source: {name}"
        elif is_sink:
            name = f"Sink: {name}"
        node = StreamNode(
            id=t.id,
            operator_name=name,
            factory=t.factory,
            parallelism=t.parallelism if t.parallelism != UNSET else self._graph.parallelism,
            max_parallelism=t.max_parallelism,
            slot_sharing_group=self._slot_sharing_group(t.slot_sharing_group, input_ids),
            chaining_strategy=t.chaining_strategy,
            uid=t.uid,
            uid_hash=t.uid_hash,
            state_key_selector=getattr(t, "state_key_selector", getattr(t, "state_key_selector1", None)),
            state_key_selector2=getattr(t, "state_key_selector2", None),
            buffer_timeout=t.buffer_timeout,
            is_source=is_source,
            is_sink=is_sink,
        )
        if isinstance(t.factory, SourceFactory) and not t.factory.parallel and node.parallelism != 1:
            raise StreamGraphError(f"The parallelism of non parallel operator '{node}' must be 1.")
        self._graph.nodes[node.id] = node
        return node.id

    def _slot_sharing_group(self, specified: str | None, input_ids: Sequence[int]) -> str:
        """Flink's rule: the user's group, else the inputs' common group, else ``default``."""
        if specified:
            return specified
        groups = {self._graph.nodes[self._physical(i)].slot_sharing_group for i in input_ids}
        return groups.pop() if len(groups) == 1 else DEFAULT_SLOT_SHARING_GROUP

    def _physical(self, node_id: int) -> int:
        while node_id < 0:
            if node_id in self._virtual_partitions:
                node_id = self._virtual_partitions[node_id][0]
            else:
                node_id = self._virtual_side_outputs[node_id][0]
        return node_id

    def _add_edge(
        self,
        upstream_id: int,
        downstream_id: int,
        type_number: int,
        partitioner: StreamPartitioner | None,
        output_tag: str | None,
        exchange_mode: StreamExchangeMode,
        key_by_id: int | None = None,
    ) -> None:
        if upstream_id in self._virtual_side_outputs:
            original, tag = self._virtual_side_outputs[upstream_id]
            self._add_edge(original, downstream_id, type_number, partitioner, output_tag or tag, exchange_mode, key_by_id)
            return
        if upstream_id in self._virtual_partitions:
            original, virtual_partitioner, virtual_mode = self._virtual_partitions[upstream_id]
            if partitioner is None and upstream_id in self._virtual_key_bys:
                key_by_id = self._virtual_key_bys[upstream_id]
            self._add_edge(
                original, downstream_id, type_number, partitioner or virtual_partitioner, output_tag, virtual_mode,
                key_by_id,
            )
            return
        upstream = self._graph.nodes[upstream_id]
        downstream = self._graph.nodes[downstream_id]
        if partitioner is None:
            same = upstream.parallelism == downstream.parallelism
            partitioner = ForwardPartitioner() if same else RebalancePartitioner()
        elif isinstance(partitioner, ForwardPartitioner) and upstream.parallelism != downstream.parallelism:
            raise StreamGraphError(
                "Forward partitioning does not allow change of parallelism. "
                f"Upstream operation: {upstream} parallelism: {upstream.parallelism}, "
                f"downstream operation: {downstream} parallelism: {downstream.parallelism} "
                "You must use another partitioning strategy, such as broadcast, rebalance, shuffle or global."
            )
        edge = StreamEdge(upstream_id, downstream_id, type_number, partitioner, output_tag, exchange_mode, self._edge_count,
                          key_by_id)
        self._edge_count += 1
        upstream.out_edges.append(edge)
        downstream.in_edges.append(edge)


def _reachable_sources(transformations: list[Transformation]) -> list[SourceTransformation]:
    seen: set[int] = set()
    sources: list[SourceTransformation] = []
    stack = list(transformations)
    while stack:
        t = stack.pop()
        if t.id in seen:
            continue
        seen.add(t.id)
        if isinstance(t, SourceTransformation):
            sources.append(t)
        stack.extend(t.inputs)
    return sorted(sources, key=lambda s: s.id)
