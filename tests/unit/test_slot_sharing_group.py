"""SlotSharingGroup / MemorySize (PyFlink's classes), registering them on the environment, and what
groups mean for the JobGraph, the slot count and the JobMaster's error when slots are missing."""
from __future__ import annotations

import logging

import pytest

from millstream.datastream import MemorySize, SlotSharingGroup, StreamExecutionEnvironment
from millstream.jobmanager.jobmaster.execution_graph import ExecutionGraph
from millstream.jobmanager.jobmaster.job_master_core import JobMasterCore


def test_memory_size_units_and_parsing() -> None:
    m = MemorySize.of_mebi_bytes(512)
    assert m.get_bytes() == 512 << 20 and m.get_kibi_bytes() == 512 << 10 and m.get_mebi_bytes() == 512
    assert MemorySize.of_mebi_bytes(2048).get_gibi_bytes() == 2 and str(m) == "512 mb"
    assert MemorySize.parse("1g") == MemorySize.of_mebi_bytes(1024) and MemorySize.parse("10") == MemorySize(bytes_size=10)
    assert MemorySize(bytes_size=1) < m
    with pytest.raises(ValueError, match="Cannot parse"):
        MemorySize.parse("lots")
    with pytest.raises(ValueError, match="number of bytes >= 0"):
        MemorySize(bytes_size=-1)


def test_builder_keeps_the_resource_spec_and_checks_it() -> None:
    ssg = (SlotSharingGroup.builder("heavy").set_cpu_cores(1.5).set_task_heap_memory_mb(100)
           .set_task_off_heap_memory_mb(50).set_managed_memory(MemorySize.of_mebi_bytes(64))
           .set_external_resource("gpu", 1).build())
    assert ssg.get_name() == "heavy" and ssg.get_cpu_cores() == 1.5
    assert ssg.get_task_heap_memory() == MemorySize.of_mebi_bytes(100)
    assert ssg.get_task_off_heap_memory() == MemorySize.of_mebi_bytes(50)
    assert ssg.get_managed_memory() == MemorySize.of_mebi_bytes(64) and ssg.get_external_resources() == {"gpu": 1.0}
    assert SlotSharingGroup.builder("plain").build().get_cpu_cores() is None
    with pytest.raises(ValueError, match="CPU cores and the task heap memory must both be set"):
        SlotSharingGroup.builder("x").set_cpu_cores(1).build()
    with pytest.raises(ValueError, match="must be > 0"):
        SlotSharingGroup.builder("x").set_cpu_cores(0)
    with pytest.raises(ValueError, match="non-empty name"):
        SlotSharingGroup.builder("").build()


def two_groups(env: StreamExecutionEnvironment, second: object) -> None:
    env.set_parallelism(2)
    env.from_sequence(1, 10).map(lambda x: x).name("A").map(lambda x: x + 1).name("B").slot_sharing_group(second).print()


def test_two_groups_of_parallelism_two_are_not_chained_and_need_four_slots() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    two_groups(env, SlotSharingGroup.builder("second").set_cpu_cores(1).set_task_heap_memory_mb(64).build())
    graph = env.get_job_graph("j").proto
    groups = {v.name: v.slot_sharing_group for v in graph.vertices}
    assert groups == {"Source: Sequence Source -> A": "default", "B -> Sink: Print to Std. Out": "second"}
    execution = ExecutionGraph(graph)
    assert execution.required_slots() == {"default": 2, "second": 2} and execution.total_required_slots() == 4
    # the same name as a string, after registering the group on the environment
    env = StreamExecutionEnvironment.get_execution_environment()
    env.register_slot_sharing_group(SlotSharingGroup.builder("second").build())
    two_groups(env, "second")
    assert ExecutionGraph(env.get_job_graph("j").proto).total_required_slots() == 4


def test_a_name_registered_with_two_specs_is_an_error() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.register_slot_sharing_group(SlotSharingGroup.builder("g").set_cpu_cores(1).set_task_heap_memory_mb(10).build())
    env.register_slot_sharing_group(SlotSharingGroup.builder("g").set_cpu_cores(1).set_task_heap_memory_mb(10).build())
    with pytest.raises(ValueError, match="'g' is registered with two different resource specs"):
        env.register_slot_sharing_group(SlotSharingGroup.builder("g").set_cpu_cores(2).set_task_heap_memory_mb(10).build())
    with pytest.raises(TypeError, match="needs a SlotSharingGroup"):
        env.register_slot_sharing_group("g")


def test_a_resource_spec_is_logged_as_not_sizing_the_slots(caplog) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    two_groups(env, SlotSharingGroup.builder("second").set_cpu_cores(2).set_task_heap_memory_mb(64).build())
    with caplog.at_level(logging.INFO):
        env.get_job_graph("j")
    assert "Slot sharing group 'second' asks for cpu cores 2.0, task heap 64 mb" in caplog.text
    assert "does not size them" in caplog.text


def test_the_slot_timeout_failure_names_the_groups_and_their_needs() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    two_groups(env, "second")
    core = JobMasterCore(env.get_job_graph("j").proto, new_id=lambda: b"\x01" * 16)
    core.start()
    core.resources_unavailable("Could not acquire the minimum required resources: job needs 4 slots.")
    assert core.failure is not None
    assert "slot sharing groups do not share slots" in core.failure.message
    assert "'default' 2, 'second' 2" in core.failure.message


def test_a_sink_takes_a_group_and_conflicting_specs_on_operators_are_found_when_planning() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    one = SlotSharingGroup.builder("g").set_cpu_cores(1).set_task_heap_memory_mb(10).build()
    two = SlotSharingGroup.builder("g").set_cpu_cores(2).set_task_heap_memory_mb(10).build()
    env.from_collection([1]).map(lambda x: x).slot_sharing_group(one).print().slot_sharing_group(one)
    assert {v.slot_sharing_group for v in env.get_job_graph("j").proto.vertices} == {"default", "g"}
    env.from_collection([2]).map(lambda x: x).slot_sharing_group(two).print()
    with pytest.raises(ValueError, match="'g' is registered with two different resource specs"):
        env.get_job_graph("j")
