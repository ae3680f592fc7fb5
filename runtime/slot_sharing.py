"""How many slots a job needs: Flink's slot sharing rule, pure, over the JobGraph's vertices.

One subtask of every vertex of a slot sharing group may share a slot, so a group needs as many
slots as the largest parallelism among its vertices; different groups never share a slot. The
client sizes its embedded mini-cluster with this and the JobMaster declares it to the
ResourceManager: one rule, without building an ExecutionGraph.
"""
from __future__ import annotations

from typing import Iterable

from millstream.proto import jobgraph_pb2 as pb


def required_slots(vertices: Iterable[pb.JobVertex]) -> dict[str, int]:
    """Slots per slot sharing group, in the order the groups first appear."""
    needs: dict[str, int] = {}
    for vertex in vertices:
        needs[vertex.slot_sharing_group] = max(needs.get(vertex.slot_sharing_group, 0), vertex.parallelism)
    return needs


def total_required_slots(vertices: Iterable[pb.JobVertex]) -> int:
    return sum(required_slots(vertices).values())
