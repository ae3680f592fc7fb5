"""Slot sharing groups on a real cluster: a job with two groups of parallelism 2 needs 4 slots. With
2 slots it fails after slot.request.timeout with a message naming the groups; with 4 it runs and
holds all 4 (the groups' tasks do not share slots)."""
from __future__ import annotations

import sys

import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.common import JobStatus
from millstream.datastream import SlotSharingGroup, StreamExecutionEnvironment


from .harness import ClusterSpec, jobmanager_env, poll_for
from .jobs import ParallelEndless

pytestmark = pytest.mark.timeout(180)
CLUSTER = ClusterSpec(tasks_per_slot=3, spark_slots=4, options={"slot.request.timeout": "3 s"})


def two_group_job() -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    heavy = SlotSharingGroup.builder("heavy").set_cpu_cores(1).set_task_heap_memory_mb(64).build()
    (env.add_source(ParallelEndless()).name("source")
        .map(lambda x: x).name("lookup").slot_sharing_group(heavy)
        .filter(lambda x: x < 0).print())
    return env


def test_a_job_with_two_groups_needs_the_slots_of_both(cluster) -> None:
    with jobmanager_env(cluster.address):
        client = two_group_job().execute_async("two groups, two slots")
    with pytest.raises(Exception) as info:
        client.get_job_execution_result().result(timeout=60)
    message = str(info.value)
    assert "not enough slots" in message and "job needs 4 slots" in message, message
    assert "'default' 2, 'heavy' 2" in message, message

    cluster.add_task_manager()  # now 4 slots
    with jobmanager_env(cluster.address):
        client = two_group_job().execute_async("two groups, four slots")
    poll_for(lambda: client.get_job_status().result(10) is JobStatus.RUNNING, 60, what="the job to run")
    with ClusterClient(cluster.address) as c:
        poll_for(lambda: c.overview().slots_available == 0, 30, what="all 4 slots to be taken")
        assert c.overview().slots_total == 4
    client.cancel().result(30)
    poll_for(lambda: client.get_job_status().result(10) is JobStatus.CANCELED, 30, what="the job to be canceled")


EMBEDDED = """
from millstream.datastream import SlotSharingGroup, StreamExecutionEnvironment

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
(env.from_sequence(1, 100).map(lambda x: x * 2).slot_sharing_group(SlotSharingGroup.builder("heavy").build())
    .filter(lambda x: x % 50 == 0).print())
result = env.execute("groups on the embedded cluster")
print("DONE", result.get_job_name())
"""


def test_the_embedded_cluster_gets_the_slots_of_every_group(tmp_path) -> None:
    import os
    import subprocess

    job = tmp_path / "groups.py"
    job.write_text(EMBEDDED)
    env = {k: v for k, v in os.environ.items() if k != "MILLSTREAM_JOBMANAGER"}
    env["MILLSTREAM_CONF_SLOT_REQUEST_TIMEOUT"] = "20 s"  # short: a missing slot fails fast
    run = subprocess.run([sys.executable, str(job)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=170)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "DONE groups on the embedded cluster" in run.stdout
    assert sorted(line.split("> ")[-1] for line in run.stdout.splitlines() if "> " in line) == ["100", "150", "200", "50"]
