"""Deterministic StreamNode hashes: the ids of operators and JobVertices (Flink's StreamGraphHasherV2).

Nodes are visited breadth-first from the sources sorted by id. A node's hash covers its position in
that walk, one more position entry per chainable output, and then folds in the hashes of its inputs,
so it is identical across runs and processes for the same topology. A node with a ``uid`` hashes the
uid alone, which keeps its id (and state) stable when the rest of the job changes.
"""
from __future__ import annotations

import struct
from collections import deque
from typing import Callable

import mmh3

from millstream.client.stream_graph import StreamEdge, StreamGraph, StreamGraphError, StreamNode


def murmur3_128(data: bytes) -> bytes:
    return mmh3.hash_bytes(data, 0, True)


def uid_hash(uid: str) -> bytes:
    return murmur3_128(uid.encode("utf-8"))


def generate_node_hashes(graph: StreamGraph, is_chainable: Callable[[StreamEdge], bool]) -> dict[int, bytes]:
    hashes: dict[int, bytes] = {}
    remaining: deque[StreamNode] = deque()
    visited: set[int] = set()
    for source_id in graph.source_ids:
        remaining.append(graph.node(source_id))
        visited.add(source_id)
    while remaining:
        node = remaining.popleft()
        if _hash_node(node, graph, hashes, is_chainable):
            for edge in node.out_edges:
                if edge.target_id not in visited:
                    remaining.append(graph.node(edge.target_id))
                    visited.add(edge.target_id)
        else:
            # Not every input has its hash yet; the node is queued again from that input.
            visited.discard(node.id)
    return hashes


def _hash_node(
    node: StreamNode, graph: StreamGraph, hashes: dict[int, bytes], is_chainable: Callable[[StreamEdge], bool]
) -> bool:
    if node.uid:
        digest = uid_hash(node.uid)
        for other_id, other in hashes.items():
            if other == digest:
                raise StreamGraphError(
                    f'Hash collision on user-specified ID "{node.uid}" (operators \'{graph.node(other_id)}\' '
                    f"and '{node}'). Most likely cause is a non-unique ID. Please check that all IDs "
                    "specified via `uid(str)` are unique."
                )
        hashes[node.id] = digest
        return True
    if any(edge.source_id not in hashes for edge in node.in_edges):
        return False
    position = len(hashes)
    local = [position] + [position for edge in node.out_edges if is_chainable(edge)]
    mixed = bytearray(murmur3_128(struct.pack(f"<{len(local)}i", *local)))
    for edge in node.in_edges:
        other = hashes[edge.source_id]
        for j in range(len(mixed)):
            mixed[j] = ((mixed[j] * 37) ^ other[j]) & 0xFF
    hashes[node.id] = bytes(mixed)
    return True
