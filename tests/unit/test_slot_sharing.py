"""The slots a job needs (Flink's slot sharing): per slot sharing group the largest parallelism of
its vertices; groups add up. Computed over the JobGraph alone, as the client sizes its embedded
mini-cluster, and the same numbers the JobMaster declares."""
from __future__ import annotations

from millstream.datastream import SlotSharingGroup, StreamExecutionEnvironment
from millstream.jobmanager.jobmaster.execution_graph import ExecutionGraph
from millstream.proto import jobgraph_pb2 as pb
from millstream.runtime.slot_sharing import required_slots, total_required_slots


def _vertex(name: str, parallelism: int, group: str) -> pb.JobVertex:
    return pb.JobVertex(name=name, parallelism=parallelism, slot_sharing_group=group)


def test_a_group_needs_its_largest_parallelism_not_the_sum() -> None:
    vertices = [_vertex("source", 2, "default"), _vertex("map", 5, "default"), _vertex("sink", 1, "default")]
    assert required_slots(vertices) == {"default": 5}
    assert total_required_slots(vertices) == 5


def test_groups_never_share_slots() -> None:
    vertices = [_vertex("a", 1, "a"), _vertex("b", 6, "b"), _vertex("b2", 3, "b"), _vertex("c", 2, "c")]
    assert required_slots(vertices) == {"a": 1, "b": 6, "c": 2}
    assert total_required_slots(vertices) == 9


def test_no_vertices_need_no_slots() -> None:
    assert required_slots([]) == {} and total_required_slots([]) == 0


def test_the_job_graph_alone_gives_the_job_masters_numbers() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(3)
    (env.from_sequence(1, 10).map(lambda x: x).set_parallelism(4)
        .key_by(lambda x: x % 2).map(lambda x: x).slot_sharing_group(SlotSharingGroup.builder("other").build())
        .set_parallelism(2).print())
    graph = env.get_job_graph("j").proto
    # the print sink inherits its input's group ("other") and runs at the default parallelism, 3
    assert required_slots(graph.vertices) == ExecutionGraph(graph).required_slots() == {"default": 4, "other": 3}
