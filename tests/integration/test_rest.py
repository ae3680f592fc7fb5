"""The JobManager's REST API on a real cluster: a JobManager process with ``-Drest.port=0`` (its
URL read from its log), one TaskManager, jobs submitted over gRPC and read back over HTTP."""
from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.common import Configuration, Encoder, Time, WatermarkStrategy
from millstream.common.watermark_strategy import TimestampAssigner
from millstream.common.restart_strategy import RestartStrategies
from millstream.datastream import MapFunction, SourceFunction, StreamExecutionEnvironment
from millstream.datastream.window import TumblingEventTimeWindows
from millstream.datastream.connectors.datagen import DataGeneratorSource
from millstream.datastream.connectors.file_system import FileSink

from .harness import HISTORY_SIZE, Rest, poll_for, rest_cluster
from .jobs import Endless

pytestmark = pytest.mark.timeout(180)

KEYS = 5


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[tuple[ClusterClient, Rest]]:
    yield from rest_cluster(tmp_path_factory.mktemp("rest-cluster"))


def test_overview_and_taskmanagers(cluster) -> None:  # noqa: ANN001
    _, rest = cluster
    overview = rest.get("/overview")
    assert (overview["taskmanagers"], overview["slots-total"]) == (1, 2)
    assert overview["flink-version"] == "0.1.0"
    [tm] = rest.get("/taskmanagers")["taskmanagers"]
    assert tm["slotsNumber"] == 2 and tm["path"].startswith("127.0.0.1:")
    assert abs(tm["timeSinceLastHeartbeat"] - time.time() * 1000) < 30_000
    # Hardware and memory come with the ResourceManager's heartbeats (1 s here).
    details = poll_for(lambda: (d := rest.get(f"/taskmanagers/{tm['id']}"))["metrics"]["heapUsed"] and d, 10,
                       what="memory figures")
    assert details["id"] == tm["id"]
    assert details["hardware"]["cpuCores"] == os.cpu_count()
    assert 0 < details["hardware"]["freeMemory"] <= details["hardware"]["physicalMemory"]
    # The tree is the TaskManager process and its Spark JVM (a child process, over 100 MB resident).
    memory = {m["id"]: int(m["value"]) for m in rest.get(
        f"/taskmanagers/{tm['id']}/metrics?get=Status.JVM.Memory.Heap.Used,Status.ProcessTree.Memory.RSS")}
    rss, tree = memory["Status.JVM.Memory.Heap.Used"], memory["Status.ProcessTree.Memory.RSS"]
    assert rss > 10 << 20 and tree > rss + (100 << 20), memory
    assert rest.get("/config")["flink-version"] == "0.1.0"


def test_a_finished_job_over_rest(cluster) -> None:  # noqa: ANN001
    client, rest = cluster
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.from_collection(list(range(50))).map(lambda x: x * 2).key_by(lambda x: x % 3).map(lambda x: x).add_sink(lambda x: None)
    job_id = client.submit(env.get_job_graph("rest finite").proto).hex()
    assert job_id in [j["jid"] for j in rest.get("/jobs/overview")["jobs"]]
    details = poll_for(lambda: (d := rest.get(f"/jobs/{job_id}"))["state"] == "FINISHED" and d, 90, interval=0.3,
                       what="the job FINISHED over REST")
    assert details["name"] == "rest finite" and details["end-time"] >= details["start-time"] > 0
    assert details["timestamps"]["FINISHED"] >= details["timestamps"]["RUNNING"] > 0
    assert len(details["vertices"]) == 2 and {v["status"] for v in details["vertices"]} == {"FINISHED"}
    assert details["vertices"][-1]["metrics"]["read-records"] == 50
    plan = rest.get(f"/jobs/{job_id}/plan")["plan"]
    assert [n["id"] for n in plan["nodes"]] == [v["id"] for v in details["vertices"]]
    assert plan["nodes"][1]["inputs"][0]["ship_strategy"] == "HASH"
    assert rest.get(f"/jobs/{job_id}/exceptions")["exceptionHistory"]["entries"] == []
    assert {"id": job_id, "status": "FINISHED"} in rest.get("/jobs")["jobs"]
    assert rest.get("/overview")["jobs-finished"] >= 1


def test_cancel_a_running_job_over_rest(cluster) -> None:  # noqa: ANN001
    client, rest = cluster
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.add_source(Endless(every=100)).map(lambda x: x).add_sink(lambda x: None)
    job_id = client.submit(env.get_job_graph("rest endless").proto).hex()
    poll_for(lambda: rest.get(f"/jobs/{job_id}")["state"] == "RUNNING", 90, interval=0.3, what="the job RUNNING")
    assert rest.get("/overview")["jobs-running"] == 1
    # No checkpointing: a savepoint is refused naming that cause, with or without a directory.
    for body in ({}, {"target-directory": "/tmp/savepoints"}):
        status, answer = rest.call(f"/jobs/{job_id}/savepoints", "POST", body)
        assert status == 409 and "takes no checkpoints" in answer["errors"][0], answer
    assert rest.call(f"/jobs/{job_id}?mode=cancel", "PATCH") == (202, {})
    poll_for(lambda: rest.get(f"/jobs/{job_id}")["state"] == "CANCELED", 60, interval=0.3, what="the job CANCELED")
    assert rest.get("/overview")["jobs-cancelled"] == 1
    # Cancelling it again (a globally terminal job): 409 Conflict, as Flink's REST API answers.
    status, body = rest.call(f"/jobs/{job_id}?mode=cancel", "PATCH")
    assert status == 409 and "already reached another terminal state (CANCELED)" in body["errors"][0]


def test_errors_and_openapi(cluster) -> None:  # noqa: ANN001
    _, rest = cluster
    status, body = rest.call(f"/jobs/{'ab' * 16}")
    assert status == 404 and body == {"errors": [f"Job {'ab' * 16} not found."]}
    status, body = rest.call("/jobs/nope")
    assert status == 400 and "Invalid JobID" in body["errors"][0]
    assert rest.call("/no/such/path")[0] == 404
    paths = rest.get("/v1/openapi.json")["paths"]
    assert {"/overview", "/jobs/overview", "/jobs/{jobid}", "/jobs/{jobid}/checkpoints", "/taskmanagers"} <= set(paths)


def test_rest_only_when_set_in_process_and_a_taken_set_port_stops_the_start() -> None:
    """An in-process JobManager (embedded, MiniCluster) serves REST only with rest.port set; a set
    port that is taken stops the start with the key in the message; /config reports
    web.refresh-interval."""
    import asyncio
    import socket

    from millstream.jobmanager.jobmanager import JobManager
    from millstream.runtime import config as cfg
    from millstream.runtime.entrypoint.process import StartupError

    base = {"jobmanager.rpc.address": "127.0.0.1", "jobmanager.rpc.port": "0"}

    async def main() -> None:
        async with JobManager(cfg.Configuration.from_dict(base)) as jm:
            assert jm.rest is None and jm.rest_url == ""
        async with JobManager(cfg.Configuration.from_dict({**base, cfg.REST_PORT.key: "0"})) as jm:
            assert jm.rest is not None and jm.rest_url.startswith("http://127.0.0.1:")
            status, body = await asyncio.to_thread(Rest(jm.rest_url).call, "/overview")
            assert status == 200 and body["taskmanagers"] == 0
            status, body = await asyncio.to_thread(Rest(jm.rest_url).call, "/config")
            assert body["refresh-interval"] == 3000  # web.refresh-interval's default, Flink's
        refreshing = {**base, cfg.REST_PORT.key: "0", cfg.WEB_REFRESH_INTERVAL.key: "750 ms"}
        async with JobManager(cfg.Configuration.from_dict(refreshing)) as jm:
            status, body = await asyncio.to_thread(Rest(jm.rest_url).call, "/config")
            assert body["refresh-interval"] == 750  # what the web UI's pages refresh by
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            with pytest.raises(StartupError, match="rest.port"):
                await JobManager(cfg.Configuration.from_dict({**base, "rest.port": str(port)})).start()

    asyncio.run(main())


def counting_job(env: StreamExecutionEnvironment, out: Path, count: int) -> None:
    """Keyed running counts of ``count`` generated numbers (i % KEYS) into a FileSink."""
    (env.from_source(DataGeneratorSource(lambda i: i, count, records_per_second=1500),
                     WatermarkStrategy.no_watermarks(), "numbers")
        .map(lambda i: (i % KEYS, 1))
        .key_by(lambda t: t[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .map(lambda t: f"{t[0]},{t[1]}")
        .sink_to(FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build()))


def highest_counts(out: Path) -> dict[int, int]:
    counts: dict[int, int] = {}
    for path in out.rglob("*"):
        if path.is_file() and not path.name.startswith("."):
            for line in path.read_text().splitlines():
                key, n = map(int, line.split(","))
                counts[key] = max(counts.get(key, 0), n)
    return counts


def savepoint_result(rest: Rest, job_id: str, trigger: str) -> dict[str, Any]:
    return poll_for(lambda: (b := rest.get(f"/jobs/{job_id}/savepoints/{trigger}"))["status"]["id"] == "COMPLETED" and b,
                    120, interval=0.2, what="the savepoint operation COMPLETED")


def savepoint_location(rest: Rest, job_id: str, body: dict[str, Any]) -> str:
    """POST /jobs/:id/savepoints until one completes with a location: the savepoint needs every
    task running, so it is retried as a user would while the job starts."""
    def triggered() -> Any:
        status, answer = rest.call(f"/jobs/{job_id}/savepoints", "POST", body)
        assert status == 202, answer
        result = savepoint_result(rest, job_id, answer["request-id"])
        return result if "location" in result["operation"] else None
    return str(poll_for(triggered, 90, interval=0.5, what="a savepoint")["operation"]["location"])


def test_savepoint_over_rest_then_a_job_resumes_from_it(cluster, tmp_path) -> None:  # noqa: ANN001
    """POST /jobs/:id/savepoints answers 202 with a trigger id at once; polled, the operation
    completes with the savepoint's location; POST /jobs/:id/stop stops the job with another; a job
    submitted from the first resumes its keyed counts (the restore path of `millstream run -s`)."""
    client, rest = cluster
    count = 6000

    def job(out: Path, configuration: Configuration | None = None, records: int = count) -> StreamExecutionEnvironment:
        env = StreamExecutionEnvironment.get_execution_environment(configuration)
        env.set_parallelism(1)
        env.enable_checkpointing(300)
        counting_job(env, out, records)
        return env

    first = client.submit(job(tmp_path / "out-1").get_job_graph("savepoint over rest").proto).hex()
    poll_for(lambda: rest.get(f"/jobs/{first}")["state"] == "RUNNING", 90, interval=0.3, what="the job RUNNING")
    status, body = rest.call(f"/jobs/{first}/savepoints", "POST", {"cancel-job": False})
    assert status == 400 and "savepoint-dir" in body["errors"][0]  # no directory and no cluster default
    status, body = rest.call(f"/jobs/{'ab' * 16}/savepoints", "POST", {"target-directory": str(tmp_path)})
    assert status == 404
    location = savepoint_location(rest, first, {"target-directory": str(tmp_path / "savepoints"), "cancel-job": False})
    assert Path(location).parent == tmp_path / "savepoints" and (Path(location) / "_metadata").is_file()
    assert rest.get(f"/jobs/{first}")["state"] == "RUNNING"

    status, body = rest.call(f"/jobs/{first}/stop", "POST", {"targetDirectory": str(tmp_path / "stopped"), "drain": False})
    assert status == 202, body
    stopped = savepoint_result(rest, first, body["request-id"])["operation"]["location"]
    assert (Path(stopped) / "_metadata").is_file()
    poll_for(lambda: rest.get(f"/jobs/{first}")["state"] == "FINISHED", 60, interval=0.3, what="the stopped job FINISHED")
    assert sum(highest_counts(tmp_path / "out-1").values()) < count  # it really stopped midway
    status, body = rest.call(f"/jobs/{first}/savepoints", "POST", {"target-directory": str(tmp_path)})
    assert status == 409 and "only a RUNNING job" in body["errors"][0]

    conf = Configuration()
    conf.set_string("execution.savepoint.path", location)
    second = client.submit(job(tmp_path / "out-2", conf).get_job_graph("resumed over rest").proto).hex()
    poll_for(lambda: rest.get(f"/jobs/{second}")["state"] == "FINISHED", 120, interval=0.3, what="the resumed job FINISHED")
    restored = rest.get(f"/jobs/{second}/checkpoints")["latest"]["restored"]
    assert restored["external_path"] == location
    # Its counts went on from the savepoint's: the last count of each key is the key's total.
    assert highest_counts(tmp_path / "out-2") == {k: len(range(k, count, KEYS)) for k in range(KEYS)}

    # cancel-job: true (Flink's cancel-with-savepoint): the savepoint completes, then the job is CANCELED.
    third_env = job(tmp_path / "out-3", records=100 * count)  # ~400 s at 1,500 records/s: it cannot end first
    third = client.submit(third_env.get_job_graph("cancelled with a savepoint").proto).hex()
    poll_for(lambda: rest.get(f"/jobs/{third}")["state"] == "RUNNING", 90, interval=0.3, what="the third job RUNNING")
    last = savepoint_location(rest, third, {"target-directory": str(tmp_path / "cancelled"), "cancel-job": True})
    assert (Path(last) / "_metadata").is_file()
    poll_for(lambda: rest.get(f"/jobs/{third}")["state"] == "CANCELED", 60, interval=0.3, what="the job CANCELED")


class NumberIsMillis(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):  # noqa: ANN001, ANN201
        return value


def test_stop_with_drain_over_rest_fires_every_window_commits_it_and_every_task_finishes(cluster, tmp_path) -> None:  # noqa: ANN001
    """POST /jobs/:id/stop with drain (Flink's `stop --drain`): the source emits MAX_WATERMARK and
    ends its input before the savepoint, so every event-time window fires (hour-long windows: none
    would fire otherwise), the savepoint commits what they wrote, every task ends FINISHED (as
    /jobs/overview counts them) and the operation completes once the job is FINISHED."""
    client, rest = cluster
    out = tmp_path / "out"
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.enable_checkpointing(600_000)  # no periodic checkpoint before the stop
    (env.from_source(DataGeneratorSource(lambda i: i, 10**7, records_per_second=1500),
                     WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(NumberIsMillis()), "numbers")
        .map(lambda i: (i % KEYS, 1))
        .key_by(lambda t: t[0])
        .window(TumblingEventTimeWindows.of(Time.hours(1)))
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .map(lambda t: f"{t[0]},{t[1]}")
        .sink_to(FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build()))
    job_id = client.submit(env.get_job_graph("drained over rest").proto)
    job = job_id.hex()
    poll_for(lambda: any(v.records_out >= 1500 for v in client.status(job_id).vertices), 90, interval=0.3,
             what="records flowing")

    def stop() -> Any:  # retried while the job's tasks start, as savepoint_location does
        status, body = rest.call(f"/jobs/{job}/stop", "POST", {"targetDirectory": str(tmp_path / "sp"), "drain": True})
        assert status == 202, body
        result = savepoint_result(rest, job, body["request-id"])
        return result if "location" in result["operation"] else None
    location = poll_for(stop, 90, interval=0.5, what="the stop")["operation"]["location"]
    assert (Path(location) / "_metadata").is_file()
    # Completed means ended: the job and every task FINISHED, the windows' output committed.
    overview = next(j for j in rest.get("/jobs/overview")["jobs"] if j["jid"] == job)
    assert overview["state"] == "FINISHED"
    assert overview["tasks"]["finished"] == overview["tasks"]["total"] > 0 and overview["tasks"]["canceled"] == 0
    assert sorted(p.name for p in out.rglob(".*")) == []  # nothing left in progress or pending
    counts = highest_counts(out)
    read = next(v.records_out for v in client.status(job_id).vertices if "numbers" in v.name)
    assert sorted(counts) == list(range(KEYS)) and sum(counts.values()) == read > 0


class FailFirstAttempts(MapFunction):
    """Raises on its first record in attempts 0 and 1 of the job; attempt 2 runs through."""

    def open(self, runtime_context) -> None:  # noqa: ANN001
        self.attempt = runtime_context.get_attempt_number()

    def map(self, value):  # noqa: ANN001, ANN201
        if self.attempt < 2:
            raise ValueError(f"injected failure in attempt {self.attempt}")
        return value


def test_exception_history_lists_each_restarts_cause_newest_first(cluster) -> None:  # noqa: ANN001
    client, rest = cluster
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 100))
    env.from_collection(list(range(20))).map(FailFirstAttempts()).add_sink(lambda x: None)
    job_id = client.submit(env.get_job_graph("fails twice").proto).hex()
    poll_for(lambda: rest.get(f"/jobs/{job_id}")["state"] == "FINISHED", 120, interval=0.3, what="the job FINISHED")
    [tm] = rest.get("/taskmanagers")["taskmanagers"]
    history = rest.get(f"/jobs/{job_id}/exceptions")["exceptionHistory"]
    assert history["truncated"] is False
    newest, oldest = history["entries"]
    for entry, attempt in ((newest, 1), (oldest, 0)):
        # As Flink, the thrown exception's qualified class: the operator's wrapper of the user's error.
        assert entry["exceptionName"] == "millstream.runtime.operators.base.OperatorError"
        assert "Traceback" in entry["stacktrace"] and f"ValueError: injected failure in attempt {attempt}" in entry["stacktrace"]
        assert entry["taskManagerId"] == tm["id"] and entry["endpoint"] == tm["path"]
        assert "Map" in entry["taskName"]
    assert newest["timestamp"] >= oldest["timestamp"] > 0
    limited = rest.get(f"/jobs/{job_id}/exceptions?maxExceptions=1")["exceptionHistory"]
    assert [e["stacktrace"] for e in limited["entries"]] == [newest["stacktrace"]] and limited["truncated"] is True


def test_exception_history_is_bounded_by_its_option(cluster) -> None:  # noqa: ANN001
    """web.exception-history-size (3 here): a job failing five times keeps its last three causes."""
    client, rest = cluster

    class AlwaysFails(MapFunction):
        def open(self, runtime_context) -> None:  # noqa: ANN001
            self.attempt = runtime_context.get_attempt_number()

        def map(self, value):  # noqa: ANN001, ANN201
            raise ValueError(f"failure of attempt {self.attempt}")

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(4, 50))
    env.from_collection(list(range(5))).map(AlwaysFails()).add_sink(lambda x: None)
    job_id = client.submit(env.get_job_graph("fails five times").proto).hex()
    poll_for(lambda: rest.get(f"/jobs/{job_id}")["state"] == "FAILED", 120, interval=0.3, what="the job FAILED")
    body = rest.get(f"/jobs/{job_id}/exceptions")
    entries = body["exceptionHistory"]["entries"]
    assert len(entries) == HISTORY_SIZE
    assert [f"failure of attempt {n}" in e["stacktrace"] for e, n in zip(entries, (4, 3, 2))] == [True] * 3
    assert "failure of attempt 4" in body["exceptionHistory"]["entries"][0]["stacktrace"]


FAILING_SCRIPT = '''from millstream.datastream import StreamExecutionEnvironment


def parse(text):
    return int(text)  # line 5 fails on "x"


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
env.from_collection(["1", "x"]).map(parse).add_sink(lambda x: None)
env.execute("user traceback")
'''


def test_a_failing_user_function_names_the_job_script_line_and_source_on_the_cli_and_over_rest(cluster, tmp_path) -> None:  # noqa: ANN001
    """cloudpickle sends a __main__ function's code as "<dynamic-code>"; the user sees job.py, line 5."""
    import subprocess

    client, rest = cluster
    script = tmp_path / "job.py"
    script.write_text(FAILING_SCRIPT)
    run = subprocess.run([sys.executable, "-m", "millstream.client.cli", "run", "--jobmanager", client.address, str(script)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    shown = run.stdout + run.stderr
    where, source = f'File "{script}", line 5, in parse', 'return int(text)  # line 5 fails on "x"'
    assert "<dynamic-code>" not in shown and where in shown and source in shown, shown
    job_id = run.stdout.splitlines()[0].rsplit(" ", 1)[1]
    exceptions = rest.get(f"/jobs/{job_id}/exceptions")
    for text in (exceptions["exceptionHistory"]["entries"][0]["stacktrace"],):
        assert "<dynamic-code>" not in text and where in text and source in text, text


class SleepySource(SourceFunction):
    """One record every 50 ms: it sleeps nearly all the time, as a source polling an external system."""

    def __init__(self) -> None:
        self.running = True

    def run(self, ctx) -> None:  # noqa: ANN001
        i = 0
        while self.running:
            ctx.collect(i)
            i += 1
            time.sleep(0.05)

    def cancel(self) -> None:
        self.running = False


def _source_ratios(rest: Rest, job_id: str) -> dict:
    """The source vertex's first subtask's busy / idle ratios, once the task reports time figures."""
    source = rest.get(f"/jobs/{job_id}")["vertices"][0]

    def ratios() -> Any:
        body = rest.get(f"/jobs/{job_id}/vertices/{source['id']}/backpressure")
        if body["status"] != "ok":
            return None
        ratio = body["subtasks"][0]
        return ratio if ratio["idleRatio"] + ratio["busyRatio"] > 0 and time.monotonic() - started > 4 else None

    started = time.monotonic()  # past the first reporting intervals (the task's start is busy)
    return poll_for(ratios, 60, interval=0.5, what="the source's time figures")


def test_a_sleeping_or_rate_limited_source_is_idle_not_busy(cluster) -> None:  # noqa: ANN001
    """Flink counts a source's waits for its next record as idle: a SourceFunction sleeping between
    records, a DataGeneratorSource ahead of its rate. Busy was 100 % (a source has no input gate)."""
    client, rest = cluster
    for name, build in (
        ("sleepy source", lambda env: env.add_source(SleepySource())),
        ("rate-limited source", lambda env: env.from_source(DataGeneratorSource(lambda i: i, 10**9, records_per_second=20),
                                                              WatermarkStrategy.no_watermarks(), "slow numbers")),
    ):
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(1)
        build(env).map(lambda x: x).add_sink(lambda x: None)
        job_id = client.submit(env.get_job_graph(name).proto).hex()
        try:
            poll_for(lambda: rest.get(f"/jobs/{job_id}")["state"] == "RUNNING", 60, interval=0.3, what="RUNNING")
            ratio = _source_ratios(rest, job_id)
            assert ratio["idleRatio"] > 0.7 and ratio["busyRatio"] < 0.3, (name, ratio)
            vertex = rest.get(f"/jobs/{job_id}")["vertices"][0]
            [busiest] = rest.get(f"/jobs/{job_id}/vertices/{vertex['id']}/subtasks/metrics?get=busyTimeMsPerSecond&agg=max")
            assert busiest["max"] < 300 and vertex["metrics"]["accumulated-idle-time"] > 0, (vertex, busiest)
        finally:
            rest.call(f"/jobs/{job_id}?mode=cancel", "PATCH")
            poll_for(lambda: rest.get(f"/jobs/{job_id}")["state"] == "CANCELED", 60, interval=0.3, what="CANCELED")


def test_records_out_of_a_producer_add_up_to_records_in_of_its_consumer(cluster) -> None:  # noqa: ANN001
    """A BATCH keyed sum pre-aggregates in its producer: the producer's write-records counted what
    went into the pre-aggregation (1000), its consumer read one partial per key (7)."""
    from millstream.datastream import RuntimeExecutionMode

    client, rest = cluster
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    env.from_collection(list(range(1000))).map(lambda x: (x % 7, 1)).key_by(lambda t: t[0]).sum(1).add_sink(lambda x: None)
    job_id = client.submit(env.get_job_graph("records add up").proto).hex()
    poll_for(lambda: rest.get(f"/jobs/{job_id}")["state"] in ("FINISHED", "FAILED"), 60, interval=0.3, what="the job's end")
    details = rest.get(f"/jobs/{job_id}")
    assert details["state"] == "FINISHED", rest.get(f"/jobs/{job_id}/exceptions")["exceptionHistory"]
    vertices = {v["id"]: v for v in details["vertices"]}
    edges = [(i["id"], node["id"]) for node in details["plan"]["nodes"] for i in node.get("inputs", [])]
    [(producer, consumer)] = edges
    assert vertices[producer]["metrics"]["write-records"] == vertices[consumer]["metrics"]["read-records"] == 7, \
        (vertices[producer], vertices[consumer])


def test_vertex_names_hold_no_object_addresses(cluster) -> None:  # noqa: ANN001
    from millstream.datastream.window import CountTrigger, GlobalWindows, PurgingTrigger, Trigger, TriggerResult

    class EveryTwo(Trigger):
        def on_element(self, element, timestamp, window, ctx):  # noqa: ANN001, ANN201
            return TriggerResult.FIRE_AND_PURGE if element[1] % 2 else TriggerResult.CONTINUE

        def on_processing_time(self, time, window, ctx):  # noqa: ANN001, ANN201
            return TriggerResult.CONTINUE

        def on_event_time(self, time, window, ctx):  # noqa: ANN001, ANN201
            return TriggerResult.CONTINUE

        def on_merge(self, window, ctx) -> None:  # noqa: ANN001
            pass

        def clear(self, window, ctx) -> None:  # noqa: ANN001
            pass

    client, rest = cluster
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    keyed = env.from_collection([(i % 2, i) for i in range(10)]).key_by(lambda t: t[0])
    keyed.window(GlobalWindows.create()).trigger(EveryTwo()).reduce(lambda a, b: (a[0], a[1] + b[1])).add_sink(lambda x: None)
    keyed.window(GlobalWindows.create()).trigger(PurgingTrigger.of(CountTrigger.of(2))).reduce(lambda a, b: a) \
        .add_sink(lambda x: None)
    job_id = client.submit(env.get_job_graph("names").proto).hex()
    details = rest.get(f"/jobs/{job_id}")
    names = [v["name"] for v in details["vertices"]] + [n["description"] for n in details["plan"]["nodes"]]
    assert not [n for n in names if re.search(r" at 0x[0-9a-f]+", n)], names
    assert any("Window(GlobalWindows(), EveryTwo, ReduceFunction)" in n for n in names), names
    assert any("PurgingTrigger(CountTrigger(2))" in n for n in names), names
    poll_for(lambda: rest.get(f"/jobs/{job_id}")["state"] == "FINISHED", 120, interval=0.3, what="the job FINISHED")
