"""TaskManager options reach what they configure: the Spark session and every task's exchange."""
from __future__ import annotations

import cloudpickle
import pytest

from millstream.proto import cluster_pb2 as cpb
from millstream.proto import jobgraph_pb2 as pb
from millstream.runtime import config as cfg
from millstream.runtime.partitioners import RebalancePartitioner
from millstream.taskmanager import task_body
from millstream.taskmanager.task_body import NetworkSettings
from millstream.taskmanager.taskmanager import network_settings, spark_conf, spark_host_for, taskmanager_hosts


def test_embedded_spark_is_sized_to_slots_times_tasks_per_slot_with_the_task_placement() -> None:
    conf = cfg.Configuration.from_dict({"taskmanager.numberOfTaskSlots": 2, "millstream.spark.tasks-per-slot": 3,
                                        "millstream.spark.task-placement": "task"})
    host = spark_host_for(conf)  # not started: only its settings are checked
    assert host.master == "local[6]"
    assert host.max_concurrent_tasks == 6
    assert "local[slots x millstream.spark.tasks-per-slot] (task)" in cfg.SPARK_MASTER.description


def test_by_default_a_slot_costs_one_spark_core() -> None:
    """The default placement is slot (measured faster for word count, windows and Nexmark): the
    embedded Spark has one core per slot, whatever tasks-per-slot says."""
    conf = cfg.Configuration.from_dict({"taskmanager.numberOfTaskSlots": 2, "millstream.spark.tasks-per-slot": 3})
    host = spark_host_for(conf)
    assert (host.placement, host.master, host.max_concurrent_tasks) == ("slot", "local[2]", 2)
    assert "slots (millstream.spark.task-placement=slot, the default)" in cfg.SPARK_MASTER.description


def test_a_taskmanager_with_a_resource_id_is_a_spark_application_named_after_it() -> None:
    # a Spark master lists every TaskManager as an application: the ResourceManager's on-demand
    # ones (taskmanager.resource-id set) are told apart by name
    conf = cfg.Configuration.from_dict({"millstream.spark.master": "spark://m:7077",
                                        "taskmanager.host": "tm1.example",
                                        "taskmanager.resource-id": "taskmanager-ondemand-ab12-3"})
    assert spark_host_for(conf).app_name == "millstream-taskmanager taskmanager-ondemand-ab12-3"
    assert spark_host_for(cfg.Configuration.from_dict({})).app_name == "millstream-taskmanager"


def test_spark_master_and_conf_are_passed_through() -> None:
    conf = cfg.Configuration.from_dict({
        "millstream.spark.master": "spark://m:7077", "millstream.spark.conf": "spark.a=1;spark.b = x=y",
        "taskmanager.host": "tm1.example",
    })
    host = spark_host_for(conf)
    assert host.master == "spark://m:7077"
    assert spark_conf(conf) == {"spark.a": "1", "spark.b": "x=y"}
    assert host.conf == {"spark.a": "1", "spark.b": "x=y"}


def test_network_settings_from_the_configuration() -> None:
    assert network_settings(cfg.Configuration()) == NetworkSettings(buffers_per_channel=4, max_buffers_per_channel=4)
    conf = cfg.Configuration.from_dict({
        "taskmanager.network.memory.buffers-per-channel": 2,
        "taskmanager.network.memory.max-buffers-per-channel": 10,
    })
    assert network_settings(conf) == NetworkSettings(buffers_per_channel=2, max_buffers_per_channel=10)
    for key in ("taskmanager.network.memory.buffers-per-channel", "taskmanager.network.memory.max-buffers-per-channel"):
        with pytest.raises(cfg.ConfigurationError, match=f"{key}: expected at least 1, got 0"):
            network_settings(cfg.Configuration.from_dict({key: 0}))


def _tdd() -> cpb.TaskDeploymentDescriptor:
    result = b"r" * 16
    partitioner = pb.Partitioner(ship_strategy="REBALANCE", payload=cloudpickle.dumps(RebalancePartitioner()))
    vertex = pb.JobVertex(name="v", parallelism=1, produced=[pb.IntermediateDataSet(id=result, partitioner=partitioner)])
    group = cpb.ConsumedPartitionGroupDescriptor(
        partitions=[cpb.ConsumedPartitionDescriptor(producer_data_address="127.0.0.1:1", producer_attempt_id=b"a" * 16)]
    )
    return cpb.TaskDeploymentDescriptor(
        vertex=vertex, execution_attempt_id=b"e" * 16,
        produced_partitions=[cpb.ResultPartitionDescriptor(result_id=result, num_subpartitions=2)],
        input_gates=[cpb.InputGateDescriptor(result_id=b"i" * 16, consumed_partition_group=group.SerializeToString())],
    )


def test_a_task_uses_the_taskmanagers_network_settings() -> None:
    settings = NetworkSettings(buffers_per_channel=2, max_buffers_per_channel=7)
    partitions, _ = task_body._result_partitions(_tdd(), lambda: False, settings)
    assert [p.max_backlog_per_subpartition for p in partitions.values()] == [7]
    gate = task_body._input_gate(_tdd(), lambda spec: None, lambda: False, settings)
    assert gate._initial_credit == 2  # the credit each channel grants its producer


def test_embedded_spark_binds_and_advertises_loopback_unless_told_otherwise() -> None:
    assert taskmanager_hosts(cfg.Configuration()) == ("127.0.0.1", "127.0.0.1")
    conf = cfg.Configuration.from_dict({"taskmanager.host": "10.1.2.3"})
    assert taskmanager_hosts(conf) == ("10.1.2.3", "10.1.2.3")
    conf = cfg.Configuration.from_dict({"taskmanager.host": "tm.example", "taskmanager.bind-host": "0.0.0.0"})
    assert taskmanager_hosts(conf) == ("tm.example", "0.0.0.0")


def test_control_ports_are_a_port_or_an_inclusive_range() -> None:
    key = cfg.SPARK_CONTROL_PORT.key
    assert cfg.parse_port_range("0", key) == range(0, 1)
    assert cfg.parse_port_range("6130", key) == range(6130, 6131)
    assert cfg.parse_port_range(" 50100-50200 ", key) == range(50100, 50201)
    for bad in ("", "x", "50200-50100", "0-10", "70000"):
        with pytest.raises(cfg.ConfigurationError, match=f"^{key}: .*{bad!r}"):
            spark_host_for(cfg.Configuration.from_dict({key: bad}))
    conf = cfg.Configuration.from_dict({"millstream.spark.control.port": "a-b"})
    with pytest.raises(cfg.ConfigurationError, match="millstream.spark.control.port"):
        spark_host_for(conf)


def test_slot_placement_asks_spark_for_one_core_per_slot() -> None:
    """millstream.spark.task-placement=slot: a slot's subtasks share one Spark task, so the
    embedded Spark has a core per slot and an external cluster is asked for slots cores."""
    key = cfg.SPARK_TASK_PLACEMENT.key
    assert cfg.SPARK_TASK_PLACEMENT.default == "slot"
    slot = cfg.Configuration.from_dict({"taskmanager.numberOfTaskSlots": 2, "millstream.spark.tasks-per-slot": 8, key: "slot"})
    host = spark_host_for(slot)
    assert (host.placement, host.master, host.max_concurrent_tasks) == ("slot", "local[2]", 2)
    task = cfg.Configuration.from_dict({"taskmanager.numberOfTaskSlots": 2, "millstream.spark.tasks-per-slot": 8, key: "task"})
    assert (spark_host_for(task).placement, spark_host_for(task).master) == ("task", "local[16]")
    external = {"taskmanager.numberOfTaskSlots": 3, "millstream.spark.master": "spark://m:7077", "taskmanager.host": "tm1"}
    assert spark_host_for(cfg.Configuration.from_dict(external)).session_conf()["spark.cores.max"] == "3"  # the default
    assert spark_host_for(cfg.Configuration.from_dict({**external, key: "task"})).session_conf()["spark.cores.max"] == "24"
    with pytest.raises(cfg.ConfigurationError, match=f"{key}.*one of task, slot"):
        spark_host_for(cfg.Configuration.from_dict({key: "chain"}))


@pytest.mark.parametrize("placement, usable", [("slot", 2), ("task", 6)])
def test_a_taskmanager_never_asks_spark_for_more_cores_than_it_can_use(placement: str, usable: int, caplog,
                                                                      monkeypatch) -> None:
    """A TaskManager runs at most slots (placement slot) or slots x tasks-per-slot (task) tasks at
    once: a bigger spark.cores.max in millstream.spark.conf, or a local master with more threads,
    is lowered to that, with a warning; a smaller one is kept (the core check then counts it)."""
    monkeypatch.setattr("os.cpu_count", lambda: 64)  # local[*]: a machine with more cores than the slots use
    base = {"taskmanager.numberOfTaskSlots": 2, "millstream.spark.tasks-per-slot": 3,
            cfg.SPARK_TASK_PLACEMENT.key: placement}
    external = {**base, "millstream.spark.master": "spark://m:7077", "taskmanager.host": "tm1"}
    greedy = spark_host_for(cfg.Configuration.from_dict({**external, "millstream.spark.conf": "spark.cores.max=64"}))
    assert greedy.session_conf()["spark.cores.max"] == str(usable)
    assert "spark.cores.max=64" in caplog.text
    modest = spark_host_for(cfg.Configuration.from_dict({**external, "millstream.spark.conf": "spark.cores.max=1"}))
    assert modest.session_conf()["spark.cores.max"] == "1"
    for master in ("local[64]", "local[*]", "local[64,2]"):
        host = spark_host_for(cfg.Configuration.from_dict({**base, "millstream.spark.master": master}))
        assert (host.master, host.max_concurrent_tasks) == (f"local[{usable}]", usable), master
    small = spark_host_for(cfg.Configuration.from_dict({**base, "millstream.spark.master": "local[1]"}))
    assert (small.master, small.max_concurrent_tasks, small.capacity()) == ("local[1]", 1, 1)
    single = spark_host_for(cfg.Configuration.from_dict({**base, "millstream.spark.master": "local"}))
    assert (single.master, single.max_concurrent_tasks) == ("local", 1)
