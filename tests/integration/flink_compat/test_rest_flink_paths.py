"""The REST paths and fields Flink 2.3's dashboard asks for beyond the basic ones, on a real
cluster (a JobManager process with REST, one TaskManager): names, types and status codes of
Flink's response classes (JobConfigInfo, CheckpointConfigInfo, CheckpointStatistics,
JobVertexTaskManagersInfo, TaskExecutorMemoryConfiguration, ...)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.common import WatermarkStrategy
from millstream.common.watermark_strategy import TimestampAssigner
from millstream.datastream import StreamExecutionEnvironment
from millstream.datastream.connectors.datagen import DataGeneratorSource

from ..harness import Rest, poll_for
from ..jobs import Endless
from .conftest import SharedCluster, cancel_running

pytestmark = pytest.mark.timeout(240)


class NumberIsMillis(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):  # noqa: ANN001, ANN201
        return value


@pytest.fixture(scope="module")
def cluster(shared_cluster: SharedCluster) -> tuple[ClusterClient, Rest]:
    return shared_cluster.client, shared_cluster.rest


@pytest.fixture(scope="module")
def running(shared_cluster: SharedCluster, cluster) -> Iterator[tuple[str, list[str]]]:  # noqa: ANN001
    """A checkpointing job with event time: a generator source, then a keyed map (two vertices)."""
    client, rest = cluster
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.enable_checkpointing(300)
    (env.from_source(DataGeneratorSource(lambda i: i, 10**8, records_per_second=200),
                     WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(NumberIsMillis()), "numbers")
        .key_by(lambda i: i % 3).map(lambda i: i).add_sink(lambda x: None))
    job = client.submit(env.get_job_graph("dashboard paths").proto).hex()
    poll_for(lambda: rest.get(f"/jobs/{job}")["status-counts"]["RUNNING"] == 2, 90, interval=0.3, what="RUNNING")
    yield job, [v["id"] for v in rest.get(f"/jobs/{job}")["vertices"]]
    cancel_running(shared_cluster, job)


def test_job_config_and_checkpoint_config(cluster, running) -> None:  # noqa: ANN001
    _, rest = cluster
    job, _ = running
    config = rest.get(f"/jobs/{job}/config")
    assert (config["jid"], config["name"]) == (job, "dashboard paths")
    execution = config["execution-config"]
    assert execution["job-parallelism"] == 1 and execution["object-reuse-mode"] is False
    assert isinstance(execution["restart-strategy"], str) and execution["user-config"] == {}
    checkpointing = rest.get(f"/jobs/{job}/checkpoints/config")
    assert (checkpointing["mode"], checkpointing["interval"], checkpointing["max_concurrent"]) == ("exactly_once", 300, 1)
    assert checkpointing["externalization"] == {"enabled": False, "delete_on_cancellation": False}
    for name in ("timeout", "min_pause", "tolerable_failed_checkpoints", "aligned_checkpoint_timeout",
                 "changelog_periodic_materialization_interval"):
        assert isinstance(checkpointing[name], int), name
    assert checkpointing["unaligned_checkpoints"] is False and isinstance(checkpointing["state_backend"], str)
    status, body = rest.call(f"/jobs/{'ab' * 16}/config")
    assert status == 404 and body["errors"]


def test_checkpoint_details_history_fields_and_the_savepoint_kept(cluster, running, tmp_path) -> None:  # noqa: ANN001
    _, rest = cluster
    job, _ = running
    stats = poll_for(lambda: (s := rest.get(f"/jobs/{job}/checkpoints"))["counts"]["completed"] >= 1 and s, 60,
                     interval=0.3, what="a completed checkpoint")
    entry = next(h for h in stats["history"] if h["status"] == "COMPLETED")
    assert entry["num_subtasks"] == entry["num_acknowledged_subtasks"] == 2
    assert entry["processed_data"] == 0 and entry["persisted_data"] == 0 and entry["discarded"] is False
    assert Path(entry["external_path"]).name == f"chk-{entry['id']}"
    details = rest.get(f"/jobs/{job}/checkpoints/details/{entry['id']}")
    assert details["id"] == entry["id"] and details["num_subtasks"] == 2 and details["status"] == "COMPLETED"
    assert rest.call(f"/jobs/{job}/checkpoints/details/999999")[0] == 404
    assert rest.call(f"/jobs/{job}/checkpoints/details/nope")[0] == 400

    def savepoint() -> Any:  # retried while a checkpoint is in flight
        status, body = rest.call(f"/jobs/{job}/savepoints", "POST", {"target-directory": str(tmp_path)})
        assert status == 202, body
        result = poll_for(lambda: (r := rest.get(f"/jobs/{job}/savepoints/{body['request-id']}"))["status"]["id"]
                          == "COMPLETED" and r, 60, interval=0.2, what="the savepoint")
        return result["operation"].get("location")
    location = poll_for(savepoint, 60, interval=0.5, what="a savepoint")
    # Ten more checkpoints push the savepoint out of the history; latest.savepoint keeps it whole.
    savepoint_id = next(h["id"] for h in rest.get(f"/jobs/{job}/checkpoints")["history"] if h["is_savepoint"])
    _sizes_are_the_state_the_subtasks_wrote(rest, job, savepoint_id, Path(location))
    poll_for(lambda: all(h["id"] != savepoint_id for h in rest.get(f"/jobs/{job}/checkpoints")["history"]), 90,
             interval=0.5, what="the savepoint leaving the history")
    latest = rest.get(f"/jobs/{job}/checkpoints")["latest"]["savepoint"]
    assert (latest["id"], latest["external_path"], latest["is_savepoint"]) == (savepoint_id, location, True)
    assert latest["trigger_timestamp"] > 0 and latest["num_acknowledged_subtasks"] == 2
    assert rest.get(f"/jobs/{job}/checkpoints/details/{savepoint_id}")["external_path"] == location


def _sizes_are_the_state_the_subtasks_wrote(rest: Rest, job: str, checkpoint_id: int, directory: Path) -> None:
    """Each vertex's sizes (Flink's TaskCheckpointStatistics) are those its subtasks acknowledged:
    together the bytes of the state files in the savepoint, the source's position among them;
    the subtask details name each subtask's ack, size and durations."""
    details = rest.get(f"/jobs/{job}/checkpoints/details/{checkpoint_id}")
    written = sum(f.stat().st_size for f in directory.iterdir() if f.name != "_metadata")
    source, keyed = (details["tasks"][v["id"]] for v in rest.get(f"/jobs/{job}")["vertices"])
    assert source["state_size"] > 0 and source["checkpointed_size"] == source["state_size"]  # the generator's position
    assert source["state_size"] + keyed["state_size"] == details["state_size"] == written > 0
    for vertex_id, task in details["tasks"].items():
        assert task["num_acknowledged_subtasks"] == task["num_subtasks"] == 1 and task["processed_data"] == 0
        assert details["trigger_timestamp"] <= task["latest_ack_timestamp"] <= details["latest_ack_timestamp"]
        subtasks = rest.get(f"/jobs/{job}/checkpoints/details/{checkpoint_id}/subtasks/{vertex_id}")
        [one] = subtasks["subtasks"]
        assert (one["index"], one["status"], one["state_size"]) == (0, "completed", task["state_size"])
        assert one["ack_timestamp"] == task["latest_ack_timestamp"] and one["end_to_end_duration"] >= 0
        assert one["checkpoint"]["sync"] >= 0 and one["checkpoint"]["async"] >= 0 and one["alignment"]["duration"] >= 0
        assert subtasks["summary"]["state_size"]["max"] == task["state_size"]
    assert rest.call(f"/jobs/{job}/checkpoints/details/{checkpoint_id}/subtasks/{'cd' * 16}")[0] == 404


def test_vertex_tabs(cluster, running) -> None:  # noqa: ANN001
    _, rest = cluster
    job, vertices = running
    details = rest.get(f"/jobs/{job}")
    assert all(isinstance(v["maxParallelism"], int) and v["maxParallelism"] >= v["parallelism"] for v in details["vertices"])
    # Flink's *-complete: true while the job runs once every subtask reported (not "loading...").
    poll_for(lambda: all(v["metrics"]["read-records-complete"] and v["metrics"]["write-bytes-complete"]
                         for v in rest.get(f"/jobs/{job}")["vertices"]), 30, interval=0.5, what="complete figures")
    source, keyed = vertices
    marks = poll_for(lambda: rest.get(f"/jobs/{job}/vertices/{keyed}/watermarks"), 30, interval=0.5, what="a watermark")
    assert marks[0]["id"] == "0.currentInputWatermark" and int(marks[0]["value"]) >= 0
    [tm] = rest.get("/taskmanagers")["taskmanagers"]
    by_tm = rest.get(f"/jobs/{job}/vertices/{source}/taskmanagers")
    assert by_tm["id"] == source and isinstance(by_tm["now"], int)
    [entry] = by_tm["taskmanagers"]
    assert entry["taskmanager-id"] == tm["id"] and entry["status"] == "RUNNING" and entry["status-counts"]["RUNNING"] == 1
    assert entry["metrics"]["write-records"] >= 0 and "read-bytes" in entry["aggregated"]["metrics"]
    # Time per state (Flink's status-duration): a running subtask went through DEPLOYING and
    # INITIALIZING and has been RUNNING since; the job's timestamps say when it entered each status.
    [subtask] = rest.get(f"/jobs/{job}/vertices/{source}")["subtasks"]
    durations = subtask["status-duration"]
    assert durations["RUNNING"] > 0 and durations["DEPLOYING"] >= 0 and durations["INITIALIZING"] >= 0, durations
    assert entry["aggregated"]["status-duration"]["RUNNING"]["max"] > 0
    timestamps = details["timestamps"]
    assert 0 < timestamps["CREATED"] <= timestamps["RUNNING"] and timestamps["FINISHED"] == 0, timestamps
    assert rest.get(f"/jobs/{job}/vertices/{source}/accumulators") == {"id": source, "user-accumulators": []}
    accumulators = rest.get(f"/jobs/{job}/vertices/{source}/subtasks/accumulators")
    assert accumulators["parallelism"] == 1 and accumulators["subtasks"][0]["user-accumulators"] == []
    # Flame graphs: Flink's answer when rest.flamegraph.enabled is false.
    assert rest.get(f"/jobs/{job}/vertices/{source}/flamegraph") == {"endTimestamp": -2}
    assert rest.call(f"/jobs/{job}/vertices/{'cd' * 16}/flamegraph")[0] == 404


def test_cluster_paths(cluster, running) -> None:  # noqa: ANN001
    _, rest = cluster
    job, _ = running
    apps = rest.get("/applications/overview")["applications"]
    mine = next(a for a in apps if a["id"] == job)
    assert mine["status"] == "RUNNING" and mine["jobs"] == {"RUNNING": 1} and mine["name"] == "dashboard paths"
    config = {e["key"]: e["value"] for e in rest.get("/jobmanager/config")}
    assert config["execution.checkpointing.dir"].endswith("checkpoints")
    environment = rest.get("/jobmanager/environment")
    assert environment["jvm"]["version"].startswith("Python ") and isinstance(environment["classpath"], list)
    ids = [m["id"] for m in rest.get("/jobmanager/metrics")]
    assert "Status.JVM.Memory.Heap.Used" in ids
    [used] = rest.get("/jobmanager/metrics?get=Status.JVM.Memory.Heap.Used")
    assert int(used["value"]) > 10 << 20
    [tm] = rest.get("/taskmanagers")["taskmanagers"]
    values = poll_for(lambda: rest.get(f"/taskmanagers/{tm['id']}/metrics?get=Status.JVM.Memory.Heap.Used,"
                                       "Status.ProcessTree.Memory.RSS"), 20, interval=0.5, what="TaskManager metrics")
    assert {v["id"] for v in values} == {"Status.JVM.Memory.Heap.Used", "Status.ProcessTree.Memory.RSS"}
    details = rest.get(f"/taskmanagers/{tm['id']}")
    # Flink's assignedTasks: the running job's two tasks share one slot (slot sharing).
    [slot] = [s for s in details["allocatedSlots"] if s["jobId"] == job]
    assert slot["assignedTasks"] == 2 and details["assignedTasks"] == sum(s["assignedTasks"] for s in details["allocatedSlots"])
    memory = details["memoryConfiguration"]
    assert set(memory) == {"frameworkHeap", "taskHeap", "frameworkOffHeap", "taskOffHeap", "networkMemory", "managedMemory",
                           "jvmMetaspace", "jvmOverhead", "totalFlinkMemory", "totalProcessMemory"}
    assert details["metrics"]["heapUsed"] > 0 and details["metrics"]["garbageCollectors"] == []
    # Thread dumps (Flink's ThreadDumpInfo): each process's Python threads with their stacks.
    for path in ("/jobmanager/thread-dump", f"/taskmanagers/{tm['id']}/thread-dump"):
        threads = rest.get(path)["threadInfos"]
        main = next(t for t in threads if t["threadName"] == "MainThread")
        assert main["stringifiedThreadInfo"].startswith('"MainThread" Id=') and 'File "' in main["stringifiedThreadInfo"]
    assert rest.call("/taskmanagers/nope/thread-dump")[0] == 404
    # Jar upload is off, as on a Flink cluster with web.submit.enable: false: no /jars, and the
    # dashboard's feature flag says so.
    assert rest.call("/jars")[0] == 404 and rest.get("/config")["features"]["web-submit"] is False


def test_yarn_cancel_and_a_job_without_checkpointing(cluster) -> None:  # noqa: ANN001
    client, rest = cluster
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.add_source(Endless(every=10, pause_s=0.02)).map(lambda x: x).add_sink(lambda x: None)
    job = client.submit(env.get_job_graph("no checkpoints").proto).hex()
    poll_for(lambda: rest.get(f"/jobs/{job}")["state"] == "RUNNING", 90, interval=0.3, what="RUNNING")
    status, body = rest.call(f"/jobs/{job}/checkpoints/config")
    assert status == 404 and body["errors"]
    assert rest.call(f"/jobs/{job}/yarn-cancel") == (202, {})  # the dashboard's Cancel button
    poll_for(lambda: rest.get(f"/jobs/{job}")["state"] == "CANCELED", 60, interval=0.3, what="CANCELED")
    assert rest.call(f"/jobs/{job}/yarn-cancel")[0] == 409
    assert next(a for a in rest.get("/applications/overview")["applications"] if a["id"] == job)["status"] == "CANCELED"
