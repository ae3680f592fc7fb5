"""JobManager at high parallelism: accept and deploy an all-to-all job of parallelism p.

A real JobManager process; fake TaskExecutors (real gRPC servers, no Spark) in this process accept
``SubmitTask`` and report INITIALIZING / RUNNING, so only the JobManager is measured. A separate
probe process calls ``GetClusterOverview`` every 10 ms: the slowest answer bounds how long the
JobManager's event loop was blocked (a heartbeat waits as long). RSS is the JobManager's
(``/proc/PID/status``: VmRSS now, VmHWM the peak).
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def _rss_mb(pid: int) -> dict[str, float]:
    values = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) / 1024
    return values


def run_probe(address: str) -> None:
    """Probe process: pings the JobManager until stdin closes, then prints the latencies."""
    from millstream.proto import cluster_pb2 as cpb
    from millstream.proto import cluster_pb2_grpc as cpb_grpc
    from millstream.runtime.rpc.service import sync_channel

    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    stub = cpb_grpc.DispatcherStub(sync_channel(address))
    latencies: list[float] = []
    failures = 0
    while not stop.is_set():
        started = time.perf_counter()
        try:
            stub.GetClusterOverview(cpb.Empty(), timeout=60)
        except grpc.RpcError:
            failures += 1
        latencies.append((time.perf_counter() - started) * 1000)
        time.sleep(0.01)
    latencies.sort()
    print(json.dumps({"probes": len(latencies), "failures": failures, "max_ms": latencies[-1] if latencies else 0.0,
                      "p99_ms": latencies[int(len(latencies) * 0.99)] if latencies else 0.0}))


def _job_graph(parallelism: int):  # noqa: ANN202
    from millstream.datastream import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.from_sequence(1, 10).rebalance().map(lambda x: x).add_sink(lambda x: None)
    return env.get_job_graph(f"all-to-all p={parallelism}").proto


async def _measure(parallelism: int, address: str, jm_pid: int, taskmanagers: int) -> dict:
    from millstream.proto import cluster_pb2 as cpb
    from millstream.proto import cluster_pb2_grpc as cpb_grpc
    from millstream.runtime.rpc.service import aio_channel
    from tests.integration.fake_task_executor import MAX_MESSAGE_BYTES, start_fake_task_executors

    slots_each = -(-parallelism // taskmanagers)
    fakes = await start_fake_task_executors(address, taskmanagers, slots_each)
    channel = aio_channel(address, MAX_MESSAGE_BYTES)
    dispatcher = cpb_grpc.DispatcherStub(channel)
    while (await dispatcher.GetClusterOverview(cpb.Empty(), timeout=10)).slots_total < taskmanagers * slots_each:
        await asyncio.sleep(0.05)
    graph = _job_graph(parallelism)
    expected_tasks = sum(v.parallelism for v in graph.vertices)
    idle = _rss_mb(jm_pid)["VmRSS"]
    probe = subprocess.Popen([sys.executable, __file__, "--probe", address], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    await asyncio.sleep(0.5)
    result: dict = {"parallelism": parallelism, "tasks": expected_tasks, "taskmanagers": taskmanagers, "rss_idle_before_mb": idle}
    started = time.monotonic()
    try:
        response = await dispatcher.SubmitJob(
            cpb.SubmitJobRequest(submission_id="bench", job_graph=graph.SerializeToString()), timeout=120
        )
        result["submit_s"] = time.monotonic() - started
        job = cpb.JobIdRequest(job_id=response.job_id)
        while sum(f.submitted for f in fakes) < expected_tasks:
            await asyncio.sleep(0.02)
        result["deployed_s"] = max(f.last_submit_at for f in fakes) - started
        result["tdd_mb_total"] = sum(f.submit_bytes for f in fakes) / 1e6
        while (await dispatcher.GetJobStatus(job, timeout=60)).tasks_per_state.get("RUNNING", 0) < expected_tasks:
            await asyncio.sleep(0.05)
        result["running_s"] = time.monotonic() - started
        result["rss_running_mb"] = _rss_mb(jm_pid)["VmRSS"]
        result["failed_reports"] = sum(f.failed_reports for f in fakes)
        result["report_errors"] = sorted({f.last_report_error for f in fakes if f.last_report_error})
        cancel_started = time.monotonic()
        await dispatcher.CancelJob(job, timeout=60)
        while (await dispatcher.GetJobStatus(job, timeout=60)).status != cpb.CANCELED:
            await asyncio.sleep(0.05)
        result["cancel_s"] = time.monotonic() - cancel_started
        await asyncio.sleep(2.0)
        rss = _rss_mb(jm_pid)
        result["rss_after_mb"], result["rss_peak_mb"] = rss["VmRSS"], rss["VmHWM"]
    finally:
        out, _ = probe.communicate("", timeout=60)
        lag = json.loads(out.strip().splitlines()[-1])
        result["probe_max_ms"], result["probe_p99_ms"], result["probe_failures"] = lag["max_ms"], lag["p99_ms"], lag["failures"]
        try:
            overview = await dispatcher.GetClusterOverview(cpb.Empty(), timeout=10)
            if hasattr(overview, "max_event_loop_lag_ms"):
                result["jm_loop_max_lag_ms"] = overview.max_event_loop_lag_ms
        finally:
            await channel.close()
            for fake in fakes:
                await fake.stop()
    return result


def measure_scale(parallelism: int, taskmanagers: int = 10) -> dict:  # noqa: C901
    with tempfile.TemporaryDirectory() as tmp:
        ready = os.path.join(tmp, "ready")
        log_path = os.path.join(tmp, "jobmanager.log")
        log_path = os.environ.get("SCALE_JM_LOG", log_path)
        with open(log_path, "w") as log:
            jm = subprocess.Popen(
                [sys.executable, "-m", "millstream.jobmanager.jobmanager", "--ready-file", ready,
                 "-D", "jobmanager.rpc.port=0", "-D", "jobmanager.rpc.address=127.0.0.1",
                 "-D", f"blob.storage.directory={tmp}/blobs", "-D", "millstream.rpc.timeout=60 s"],
                stdout=log, stderr=subprocess.STDOUT,
            )
        try:
            deadline = time.monotonic() + 60
            while not os.path.exists(ready) or not open(ready).read():
                if jm.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the JobManager did not start:\n{open(log_path).read()[-3000:]}")
                time.sleep(0.05)
            address = open(ready).read().strip()
            return asyncio.run(_measure(parallelism, address, jm.pid, taskmanagers))
        finally:
            jm.terminate()
            try:
                jm.wait(30)
            except subprocess.TimeoutExpired:
                jm.kill()


if __name__ == "__main__":
    if sys.argv[1] == "--probe":
        run_probe(sys.argv[2])
    else:
        print(json.dumps(measure_scale(int(sys.argv[1]))))
