"""The bounds on what a peer sends over gRPC (runtime/rpc/wire_bounds.py): pure checks of messages."""
from __future__ import annotations

import pytest

from millstream.proto import cluster_pb2 as cpb
from millstream.proto import jobgraph_pb2 as jpb
from millstream.runtime.rpc.wire_bounds import MAX_SLOTS_PER_TASKMANAGER, check_message


def test_a_taskmanager_with_two_billion_slots_is_named_with_the_bound() -> None:
    problem = check_message(cpb.RegisterTaskManagerRequest(resource_id="tm", address="h:1", num_slots=2**31 - 1))
    assert problem == f"num_slots is {2**31 - 1}; it must be within 1..{MAX_SLOTS_PER_TASKMANAGER}"


def test_sane_requests_pass() -> None:
    report = cpb.SlotReport(slots=[cpb.SlotStatus(slot_index=i) for i in range(4)])
    assert check_message(cpb.RegisterTaskManagerRequest(resource_id="tm", address="h:1", num_slots=4,
                                                        slot_report=report)) is None
    assert check_message(cpb.AcknowledgeCheckpointRequest(job_id=b"j" * 16, execution_attempt_id=b"a" * 16,
                                                          checkpoint_id=7, state_path="/x", state_size=10)) is None


@pytest.mark.parametrize("request_, field", [
    (cpb.SlotReportRequest(slot_report=cpb.SlotReport(slots=[cpb.SlotStatus()] * (MAX_SLOTS_PER_TASKMANAGER + 1))),
     "slot_report.slots has 4097 entries"),
    (cpb.SlotReportRequest(slot_report=cpb.SlotReport(slots=[cpb.SlotStatus(slot_index=-1)])),
     "slot_report.slots[0].slot_index is -1"),
    (cpb.OfferSlotsRequest(offers=[cpb.SlotOffer(slot_index=1 << 20)]), "offers[0].slot_index is 1048576"),
    (cpb.AcknowledgeCheckpointRequest(checkpoint_id=-5), "checkpoint_id is -5"),
    (cpb.AcknowledgeCheckpointRequest(job_id=b"x" * 1000), "job_id is an id of 1000 bytes; at most 16"),
    (cpb.FetchCollectRequest(max_bytes=1 << 40), "max_bytes is 1099511627776; it must be within 0..67108864"),
    (cpb.ReadLogRequest(max_bytes=-1), "max_bytes is -1"),
    (cpb.TaskOutputsRequest(subtask=1 << 30), "subtask is 1073741824"),
    (cpb.RegisterTaskManagerRequest(resource_id="r" * 100_000, num_slots=1), "resource_id has 100000 characters"),
    (cpb.PrintedLinesReport(lines=["x"] * 100_001), "lines has 100001 entries"),
    (cpb.TaskExecutionState(state=99), "state is 99, not a ExecutionState"),
    (cpb.TaskExecutionState(metrics={"m": float("nan")}), "metrics['m'] is NaN"),
    (cpb.SubmitTaskRequest(tdd=cpb.TaskDeploymentDescriptor(
        produced_partitions=[cpb.ResultPartitionDescriptor(num_subpartitions=2**31 - 1)])),
     "tdd.produced_partitions[0].num_subpartitions is 2147483647; it must be within 1..32768"),
    (cpb.RequestSlotRequest(slot_index=5000), "slot_index is 5000; it must be within 0..4095"),
])
def test_counts_sizes_and_ids_out_of_bounds_are_named(request_, field: str) -> None:
    problem = check_message(request_)
    assert problem is not None and problem.startswith(field), problem


def test_a_job_graph_is_bounded_too() -> None:
    from millstream.jobmanager.jobmaster.job_graph_validation import InvalidJobGraphError, validate_job_graph
    graph = jpb.JobGraph(job_id=b"j" * 16, vertices=[jpb.JobVertex(
        id=b"v" * 16, name="huge", parallelism=2**31 - 1, max_parallelism=2**31 - 1,
        operators=[jpb.StreamOperator(factory=b"f")])])
    with pytest.raises(InvalidJobGraphError, match=r"vertices\[0\]\.parallelism is 2147483647; it must be within 1\.\.32768"):
        validate_job_graph(graph)
    many = jpb.JobGraph(job_id=b"j" * 16, vertices=[jpb.JobVertex(
        id=bytes([i]) * 16, name=f"v{i}", parallelism=32768, max_parallelism=32768,
        operators=[jpb.StreamOperator(factory=b"f")]) for i in range(5)])
    with pytest.raises(InvalidJobGraphError, match="163840 subtasks; at most 131072"):
        validate_job_graph(many)


def test_job_graphs_the_client_builds_are_within_bounds() -> None:
    """Everything the API allows passes: unset parallelism (-1), buffer timeout -1 (flush only when
    full), infinite restart attempts (Integer.MAX_VALUE), a max parallelism of 32768."""
    from millstream.common.restart_strategy import RestartStrategies
    from millstream.datastream import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_buffer_timeout(-1)
    env.set_max_parallelism(32768)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2**31 - 1, 1000))
    env.enable_checkpointing(1000)
    env.from_collection([1, 2]).key_by(lambda x: x).map(lambda x: x).print()
    graph = env.get_job_graph("bounds").proto
    assert check_message(graph) is None
