"""Checks a submitted JobGraph before anything is scheduled; every error names what is wrong."""
from __future__ import annotations

from millstream.proto import jobgraph_pb2 as pb
from millstream.runtime.rpc.wire_bounds import MAX_JOB_TASKS, check_message


class InvalidJobGraphError(ValueError):
    pass


def _label(vertex: pb.JobVertex) -> str:
    return f"'{vertex.name}' ({vertex.id.hex()})" if vertex.name else f"{vertex.id.hex() or '<no id>'}"


def validate_job_graph(graph: pb.JobGraph) -> None:
    """Raises :class:`InvalidJobGraphError` naming the first problem found."""
    if not graph.vertices:
        raise InvalidJobGraphError("The JobGraph has no vertices.")
    if len(graph.job_id) != 16:
        raise InvalidJobGraphError(f"The JobGraph's job id must be 16 bytes, got {len(graph.job_id)}.")
    by_id: dict[bytes, pb.JobVertex] = {}
    for vertex in graph.vertices:
        if len(vertex.id) != 16:
            raise InvalidJobGraphError(f"Vertex {_label(vertex)} has an id of {len(vertex.id)} bytes; ids are 16 bytes.")
        if vertex.id in by_id:
            raise InvalidJobGraphError(f"Two vertices share the id {vertex.id.hex()}: {_label(by_id[vertex.id])} and {_label(vertex)}.")
        by_id[vertex.id] = vertex
        if not vertex.operators:
            raise InvalidJobGraphError(f"Vertex {_label(vertex)} has no operators.")
        if vertex.parallelism < 1:
            raise InvalidJobGraphError(f"Vertex {_label(vertex)} has parallelism {vertex.parallelism}; it must be at least 1.")
        if vertex.max_parallelism < vertex.parallelism:
            raise InvalidJobGraphError(
                f"Vertex {_label(vertex)} has parallelism {vertex.parallelism} above its max parallelism "
                f"{vertex.max_parallelism}."
            )
        for op in vertex.operators:
            if not op.factory:
                raise InvalidJobGraphError(f"Operator '{op.name}' of vertex {_label(vertex)} has no operator factory.")
    for vertex in graph.vertices:
        for edge in vertex.inputs:
            if edge.source_vertex not in by_id:
                raise InvalidJobGraphError(
                    f"Vertex {_label(vertex)} has an input from unknown vertex {edge.source_vertex.hex() or '<empty>'}."
                )
            if edge.distribution not in (pb.POINTWISE, pb.ALL_TO_ALL):
                raise InvalidJobGraphError(f"The input of vertex {_label(vertex)} from {_label(by_id[edge.source_vertex])} has no distribution pattern.")
            if edge.partition_type not in (pb.PIPELINED_BOUNDED, pb.BLOCKING):
                raise InvalidJobGraphError(f"The input of vertex {_label(vertex)} from {_label(by_id[edge.source_vertex])} has no result partition type.")
        for result in vertex.produced:
            if result.consumer_vertex not in by_id:
                raise InvalidJobGraphError(
                    f"Vertex {_label(vertex)} produces a result for unknown vertex {result.consumer_vertex.hex() or '<empty>'}."
                )
    problem = check_message(graph)  # counts, sizes and ids against the wire bounds
    if problem is not None:
        raise InvalidJobGraphError(f"The JobGraph is out of bounds: {problem}.")
    tasks = sum(vertex.parallelism for vertex in graph.vertices)
    if tasks > MAX_JOB_TASKS:
        raise InvalidJobGraphError(f"The JobGraph has {tasks} subtasks; at most {MAX_JOB_TASKS} are allowed.")
    cycle = find_cycle(graph)
    if cycle:
        names = " -> ".join(_label(by_id[v]) for v in cycle)
        raise InvalidJobGraphError(f"The JobGraph has a cycle: {names}.")


def find_cycle(graph: pb.JobGraph) -> list[bytes]:
    """A list of vertex ids forming a cycle (first vertex repeated at the end), or [] if acyclic."""
    successors: dict[bytes, list[bytes]] = {v.id: [] for v in graph.vertices}
    for vertex in graph.vertices:
        for edge in vertex.inputs:
            successors.setdefault(edge.source_vertex, []).append(vertex.id)
    WHITE, GREY, BLACK = 0, 1, 2
    color = {v: WHITE for v in successors}
    for start in successors:
        if color[start] != WHITE:
            continue
        path: list[bytes] = [start]
        color[start] = GREY
        iters = [iter(successors[start])]
        while iters:
            nxt = next(iters[-1], None)
            if nxt is None:
                color[path.pop()] = BLACK
                iters.pop()
            elif color.get(nxt, WHITE) == GREY:
                return path[path.index(nxt):] + [nxt]
            elif color.get(nxt, WHITE) == WHITE:
                color[nxt] = GREY
                path.append(nxt)
                iters.append(iter(successors.get(nxt, [])))
    return []


def topological_order(graph: pb.JobGraph) -> list[pb.JobVertex]:
    """Vertices so that every producer precedes its consumers (graph must be acyclic)."""
    indegree = {v.id: len(v.inputs) for v in graph.vertices}
    consumers: dict[bytes, list[bytes]] = {v.id: [] for v in graph.vertices}
    by_id = {v.id: v for v in graph.vertices}
    for v in graph.vertices:
        for edge in v.inputs:
            consumers[edge.source_vertex].append(v.id)
    ready = [v.id for v in graph.vertices if indegree[v.id] == 0]
    order: list[pb.JobVertex] = []
    while ready:
        vid = ready.pop(0)
        order.append(by_id[vid])
        for c in consumers[vid]:
            indegree[c] -= 1
            if indegree[c] == 0:
                ready.append(c)
    return order
