"""Logs with real processes: a JobManager (with REST) and a TaskManager writing their own log files,
a job whose map prints and logs, `millstream logs` showing those lines for the right subtask after
the job finished, clear errors for bad ids, the REST log paths, and a TaskManager that is gone."""
from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.datastream import MapFunction, StreamExecutionEnvironment
from millstream.proto import cluster_pb2 as cpb

from .harness import poll_for, ProcessCluster, stop_processes

pytestmark = pytest.mark.timeout(300)


class PrintingMap(MapFunction):
    def open(self, runtime_context) -> None:  # noqa: ANN001
        self.index = runtime_context.get_index_of_this_subtask()

    def map(self, value: int) -> int:
        print(f"map subtask {self.index} saw {value}")
        logging.getLogger("user.map").warning("subtask %d logged %d", self.index, value)
        return value


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[dict]:
    directory = tmp_path_factory.mktemp("logs-cluster")
    log_dir = directory / "logs"
    with ProcessCluster(directory, rest=True, options={"env.log.dir": str(log_dir), "log.file.max-size": "10mb"},
                        taskmanagers=1) as c, ClusterClient(c.address) as client:
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(2)
        env.from_collection(list(range(10))).rebalance().map(PrintingMap()).name("Printing Map").add_sink(lambda x: None)
        job_id = client.submit(env.get_job_graph("printing job").proto).hex()
        poll_for(lambda: client.status(bytes.fromhex(job_id)).status == cpb.FINISHED, 120, interval=0.3,
                 what="the job FINISHED")
        yield {"address": c.address, "rest": c.rest_url, "job_id": job_id, "log_dir": log_dir,
               "procs": [c.jobmanager, *c.taskmanagers], "directory": directory}


def _logs(cluster: dict, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "MILLSTREAM_JOBMANAGER"}
    return subprocess.run([sys.executable, "-m", "millstream.client.cli", "logs", *args, "--jobmanager", cluster["address"]],
                          capture_output=True, text=True, timeout=60, env=env)


def _get(cluster: dict, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(cluster["rest"] + path, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_each_process_writes_its_own_log_file(cluster) -> None:  # noqa: ANN001
    names = sorted(os.listdir(cluster["log_dir"]))
    assert [n for n in names if n.endswith(".log")] == [
        n for n in names if re.fullmatch(r"millstream-(jobmanager|taskmanager)-0-.+\.log", n)]
    jm_log = next(Path(cluster["log_dir"], n) for n in names if n.startswith("millstream-jobmanager-0-") and n.endswith(".log"))
    assert "logging to" in jm_log.read_text() and "INFO" in jm_log.read_text()


def test_millstream_logs_shows_a_subtask_s_prints_and_log_records(cluster) -> None:  # noqa: ANN001
    done = _logs(cluster, cluster["job_id"], "--vertex", "Printing Map", "--subtask", "1")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert re.search(r"==> .*Printing Map.* \(2/2\) subtask 1, attempt 0, FINISHED on taskmanager-\w+ <==", out), out
    printed = re.findall(r"^\S+ \S+ INFO stdout: map subtask (\d) saw \d+$", out, re.M)
    logged = re.findall(r"^\S+ \S+ WARNING user\.map: subtask (\d) logged \d+$", out, re.M)
    assert printed and set(printed) == {"1"} and len(logged) == len(printed), out
    everything = _logs(cluster, cluster["job_id"])
    assert everything.returncode == 0, everything.stderr
    assert everything.stdout.count("==> ") == 3  # the source's one subtask and the map's two
    assert len(re.findall(r"INFO stdout: map subtask \d saw", everything.stdout)) == 10


@pytest.mark.parametrize("args, message", [
    (["0" * 32], "No job with id 00000000000000000000000000000000."),
    (["JOB", "--vertex", "Window"], "The job has no vertex 'Window'; its vertices: "),
    (["JOB", "--vertex", "Printing", "--subtask", "5"], "No subtask 5 (subtasks count from 0; "),
])
def test_bad_ids_are_clear_errors(cluster, args: list[str], message: str) -> None:  # noqa: ANN001
    done = _logs(cluster, *[cluster["job_id"] if a == "JOB" else a for a in args])
    assert done.returncode == 1 and message in done.stderr, done.stderr


def test_rest_log_paths(cluster) -> None:  # noqa: ANN001
    status, text = _get(cluster, "/jobmanager/log")
    assert status == 200 and "JobManager" in text
    status, text = _get(cluster, "/jobmanager/logs")
    assert status == 200 and re.search(r'"name": "millstream-jobmanager-0-[^"]+\.log"', text)
    [tm] = json.loads(_get(cluster, "/taskmanagers")[1])["taskmanagers"]
    status, text = _get(cluster, f"/taskmanagers/{tm['id']}/log")
    assert status == 200 and "TaskManager" in text
    status, text = _get(cluster, f"/taskmanagers/{tm['id']}/stdout")  # its stdout is a file: Flink's .out
    assert status == 200 and "INFO stdout: map subtask" in text
    files = json.loads(_get(cluster, f"/taskmanagers/{tm['id']}/logs")[1])["logs"]
    assert any(f["name"].startswith("millstream-taskmanager-0-") for f in files)
    status, text = _get(cluster, f"/taskmanagers/{tm['id']}/logs/{files[0]['name']}")
    assert status == 200 and "TaskManager" in text
    assert _get(cluster, "/taskmanagers/nobody/log")[0] == 404
    details = json.loads(_get(cluster, f"/jobs/{cluster['job_id']}")[1])
    map_id = next(v["id"] for v in details["vertices"] if "Printing Map" in v["name"])
    status, text = _get(cluster, f"/jobs/{cluster['job_id']}/vertices/{map_id}/subtasks/0/output")
    body = json.loads(text)
    assert status == 200 and body["available"] and all("subtask 0" in line for line in body["lines"]) and body["lines"]


def test_a_taskmanager_that_is_gone_is_named(cluster) -> None:  # noqa: ANN001 (last: stops the TaskManager)
    stop_processes(cluster["procs"][1:])
    with ClusterClient(cluster["address"]) as client:
        poll_for(lambda: client.overview().taskmanagers == 0, 60, interval=0.5, what="the TaskManager gone")
    done = _logs(cluster, cluster["job_id"], "--vertex", "Printing Map", "--subtask", "0")
    assert done.returncode == 0, done.stderr
    assert re.search(r"\(no output: TaskManager taskmanager-\w+ is gone \(no longer registered\): its output is lost\)",
                     done.stdout), done.stdout
