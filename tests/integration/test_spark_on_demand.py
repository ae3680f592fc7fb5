"""TaskManagers on demand on an existing Spark cluster (issue 28): a JobManager with
``resourcemanager.type: process`` and ``millstream.spark.master`` pointing at a real standalone
Master with two Workers (pyspark's ``spark-class``, shared by this module) starts each TaskManager
it needs as a Spark application of its own, and stops it after ``resourcemanager.taskmanager-timeout``
idle, which ends the application and gives its cores back to the Spark cluster.

What a user relies on:
* a job at parallelism 4 on a cluster with no TaskManager starts two of 2 slots; both are
  applications on the Spark master holding their cores, the job's tasks run in the cluster's
  executors (CoarseGrainedExecutorBackend) with exact results, and once idle for the timeout both
  stop and the master shows no core used and no application running;
* under the adaptive scheduler a checkpointed keyed job that wishes 4 slots, on a Spark cluster
  with no free core: its TaskManagers fail their start naming the master, reported once however
  many fail; a worker comes back and a retried TaskManager gets its cores, the job runs at 2; a
  second worker joins, another TaskManager registers and the running job rescales to 4 with exact
  keyed counts.
"""
from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.datastream import MapFunction, StreamExecutionEnvironment

from .harness import (HEARTBEATS, ancestors, effective_placement, final_counts, poll_for, spawn_module,
                      stop_processes, word_counts)
from .jobs import assert_exactly_once
from .spark_standalone import LocalHost, SparkStandalone, machine_address
from .test_adaptive_scheduler import COUNT, SLOW, counting_graph, running_parallelism, stop_and_finish

pytestmark = pytest.mark.timeout(600)  # as test_spark_standalone: every TaskManager starts a Spark driver

SLOTS, TASKS_PER_SLOT = 2, 3
PLACEMENT = effective_placement()
# What one TaskManager asks Spark for (spark.cores.max), in one executor; each worker has that many
# cores, so the two workers hold two TaskManagers, one worker holds one.
TM_CORES = SLOTS * TASKS_PER_SLOT if PLACEMENT == "task" else SLOTS
IDLE_S = 4
# The wait counts registered executors: one the master granted must start its JVM and register
# within it (over 20 s on a 2-core machine under a load of 15-20), or a TaskManager gives up on
# cores it was given.
EXECUTOR_WAIT_S = 40


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandalone]:
    host = machine_address()
    cluster = SparkStandalone(tmp_path_factory.mktemp("spark-on-demand"), LocalHost(host), [LocalHost(host)] * 2,
                              cores=TM_CORES, memory="2g")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


class JobManager:
    """A JobManager process whose ResourceManager starts TaskManagers on the Spark master."""

    def __init__(self, workdir: Path, spark: SparkStandalone, *options: str) -> None:
        self.workdir, self.spark = workdir, spark
        self.log_dir = workdir / "log"
        ready = workdir / "jm.address"
        self.process: subprocess.Popen[bytes] = spawn_module(
            ["millstream.jobmanager.jobmanager", "--ready-file", str(ready), "-Djobmanager.rpc.port=0",
             f"-Djobmanager.rpc.address={spark.host}", f"-Dexecution.checkpointing.dir={workdir / 'checkpoints'}",
             f"-Denv.log.dir={self.log_dir}", *HEARTBEATS,
             "-Dresourcemanager.type=process", f"-Dresourcemanager.taskmanager-timeout={IDLE_S} s",
             f"-Dtaskmanager.numberOfTaskSlots={SLOTS}", f"-Dmillstream.spark.task-placement={PLACEMENT}",
             f"-Dmillstream.spark.tasks-per-slot={TASKS_PER_SLOT}", f"-Dmillstream.spark.master={spark.url}",
             # one executor holding all of a TaskManager's cores: it registers them at once (spread
             # over two workers, a TaskManager fitting its slots before the second executor came
             # would offer fewer)
             f"-Dmillstream.spark.conf=spark.executor.memory=512m;spark.executor.cores={TM_CORES}", *options],
            workdir / "jobmanager.log")
        self.address = poll_for(lambda: ready.exists() and ready.read_text().strip(), 60, what="the JobManager")

    def log(self) -> str:
        return (self.workdir / "jobmanager.log").read_text(errors="replace")

    def started(self) -> list[str]:
        """The TaskManagers its ResourceManager started, in order."""
        return re.findall(r"started TaskManager (taskmanager-ondemand-\S+) \(pid", self.log())

    def failed_starts(self) -> list[str]:
        """The started TaskManagers whose output says Spark gave them no core."""
        return [w for w in self.started() if (self.log_dir / f"{w}.out").exists()
                and "gave it no executor core" in (self.log_dir / f"{w}.out").read_text(errors="replace")]

    def seen_failures(self) -> list[str]:
        """The failed starts its ResourceManager took note of: each report and each repeat."""
        return re.findall(r"a TaskManager could not be started: |could not be started either", self.log())

    def stop(self) -> None:
        stop_processes([self.process])  # its TaskManagers end with it


def spark_apps(spark: SparkStandalone) -> dict[str, int]:
    """The applications running on the Spark master: name -> cores it holds."""
    return {app["name"]: app["cores"] for app in spark.state()["activeapps"]}


def idle_spark(spark: SparkStandalone, workers: int) -> None:
    """Waits for the Spark cluster to have ``workers`` live workers and nothing running on them."""
    spark.wait_for_workers(workers, 60)
    poll_for(lambda: spark.state()["coresused"] == 0 and not spark.state()["activeapps"], 60, interval=0.5,
             what="a Spark cluster with no application running")


class Opened(MapFunction):
    """Appends, once per subtask, when it opened and its worker's ancestors' command lines."""

    def __init__(self, path: str) -> None:
        self.path = path

    def open(self, runtime_context) -> None:
        chain = [Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                 for pid in sorted(ancestors(os.getpid())) if Path(f"/proc/{pid}/cmdline").exists()]
        with open(self.path, "a") as f:
            f.write(f"{time.time()} " + " | ".join(chain).replace("\n", " ") + "\n")

    def map(self, value):
        return value


def test_a_job_starts_taskmanagers_as_spark_applications_whose_cores_return_when_they_are_idle(
        spark: SparkStandalone, tmp_path: Path) -> None:
    idle_spark(spark, 2)
    jm = JobManager(tmp_path, spark)
    try:
        with ClusterClient(jm.address) as client:
            assert client.overview().taskmanagers == 0
        opened = tmp_path / "opened.txt"
        lines = [f"w{i % 11} w{i % 7} w{i % 5}" for i in range(3000)]
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(4)
        counts = (env.from_collection(lines).map(Opened(str(opened)))
                  .flat_map(lambda line: [(w, 1) for w in line.split()])
                  .key_by(lambda t: t[0]).reduce(lambda a, b: (a[0], a[1] + b[1])))
        submitted = time.time()
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("MILLSTREAM_JOBMANAGER", jm.address)
            final = final_counts(counts, "word count on TaskManagers started on Spark")
        finished = time.time()
        apps = spark_apps(spark)  # right away: the TaskManagers idle for IDLE_S before they stop
        assert final == word_counts(lines)
        started = jm.started()
        assert len(started) == 2, jm.log()[-3000:]  # 4 slots wished, 2 per TaskManager
        assert apps == {f"millstream-taskmanager {w}": TM_CORES for w in started}, apps
        rows = opened.read_text().splitlines()
        assert len(rows) == 4 and all("CoarseGrainedExecutorBackend" in row for row in rows), rows
        running = max(float(row.split(" ", 1)[0]) for row in rows) - submitted
        print(f"submit to every task open in an executor: {running:.1f} s; submit to finished: "
              f"{finished - submitted:.1f} s")

        with ClusterClient(jm.address) as client:
            poll_for(lambda: client.overview().taskmanagers == 0, IDLE_S + 30, interval=0.3,
                     what="the idle TaskManagers to stop")
        poll_for(lambda: spark.state()["coresused"] == 0 and not spark.state()["activeapps"], 30, interval=0.3,
                 what="the Spark master to get the cores back")
        print(f"job finished to cores back on the Spark master: {time.time() - finished:.1f} s")
        assert len(re.findall(rf"stopping TaskManager \S+: idle for {IDLE_S * 1000} ms", jm.log())) == 2
        completed = {app["name"] for app in spark.state()["completedapps"]}
        assert {f"millstream-taskmanager {w}" for w in started} <= completed
    finally:
        jm.stop()


def test_a_running_adaptive_job_grows_when_the_spark_cluster_gets_cores_for_another_taskmanager(
        spark: SparkStandalone, tmp_path: Path) -> None:
    for worker in range(2):  # a Spark cluster with no free core at all: both workers down
        spark.kill_worker(worker)
    idle_spark(spark, 0)
    jm = JobManager(tmp_path, spark, "-Djobmanager.scheduler=adaptive",
                    "-Djobmanager.adaptive-scheduler.resource-stabilization-timeout=1 s",
                    f"-Dmillstream.spark.executor-wait={EXECUTOR_WAIT_S} s",
                    "-Dresourcemanager.start-worker.retry-interval=1 s")
    try:
        with ClusterClient(jm.address) as client:
            out = tmp_path / "out"
            job_id = client.submit(counting_graph("adaptive on Spark, 2 then 4 slots", out, 4, SLOW))
            # the two TaskManagers for its 4 slots get no core: one cause, reported once
            poll_for(lambda: len(jm.failed_starts()) >= 2 and len(jm.seen_failures()) >= 2, 180, interval=0.5,
                     what="two failed starts of TaskManagers on a Spark cluster without cores")
            reports = jm.log().split("a TaskManager could not be started: ")[1:]
            assert len(reports) == 1, reports
            assert len(jm.seen_failures()) == 2  # the second one counted as a repeat, not reported
            assert f"the Spark cluster {spark.url} gave it no executor core within {EXECUTOR_WAIT_S} s" in reports[0]
            assert "millstream.spark.executor-wait" in reports[0].splitlines()[0]

            spark.restart_worker(0)  # cores for one TaskManager: a retried one gets them
            back = time.monotonic()
            assert poll_for(lambda: running_parallelism(client, job_id), 240, interval=0.3,
                            what="the job running") == {2}
            print(f"worker back to the job running at 2 on a TaskManager started on Spark: "
                  f"{time.monotonic() - back:.1f} s ({len(jm.failed_starts())} failed starts so far)")
            assert client.overview().taskmanagers == 1
            poll_for(lambda: client.status(job_id).checkpoints.num_completed >= 1, 60, what="a checkpoint")

            spark.restart_worker(1)  # the Spark cluster grows: cores for a second TaskManager
            grown = time.monotonic()
            poll_for(lambda: client.overview().taskmanagers == 2, 240, interval=0.3,
                     what="a retried TaskManager to get the new worker's cores and register")
            registered = time.monotonic()
            poll_for(lambda: running_parallelism(client, job_id) == {4}, 60, interval=0.3,
                     what="the job rescaled to 4")
            print(f"worker joined to TaskManager registered: {registered - grown:.1f} s; "
                  f"to the job running at 4: {time.monotonic() - grown:.1f} s")
            assert len(spark_apps(spark)) == 2
            stopped = stop_and_finish(client, job_id, out, tmp_path,
                                      lambda savepoint: counting_graph("resumed", out, 4, None, savepoint))
        assert [(r.old_parallelism, r.new_parallelism) for r in stopped.rescales] == [(2, 4)]
        assert stopped.checkpoints.latest_restored_id >= 1  # the rescale resumed from a checkpoint
    finally:
        jm.stop()
    assert_exactly_once(out, COUNT)
