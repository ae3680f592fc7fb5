"""The CLI's live view, cluster side, with real gRPC and Spark: per-vertex task states and record
totals in every summary, a job waiting for slots, and a running job's printed lines reaching
another client's WaitJobResult stream (and, in the embedded mode, the console exactly once)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from millstream.client.cluster_client import ClusterClient
from millstream.client.minicluster import MiniCluster
from millstream.datastream import StreamExecutionEnvironment
from millstream.datastream.functions import ParallelSourceFunction
from millstream.runtime.execution_state import JobStatus
from millstream.proto import cluster_pb2 as cpb

from .harness import ClusterSpec, fast_config, poll_for

pytestmark = pytest.mark.timeout(180)
CLUSTER = ClusterSpec(taskmanagers=2)  # two TaskManagers with two slots each, heartbeats every 200 ms


class Ticks(ParallelSourceFunction):  # one per subtask: the tests fill every slot
    """Emits 0, 1, 2, ... every ``delay_s`` until cancelled."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.running = True

    def run(self, ctx) -> None:
        i = 0
        while self.running:
            ctx.collect(i)
            i += 1
            time.sleep(self.delay_s)

    def cancel(self) -> None:
        self.running = False


def _vertices(summary: cpb.JobSummary) -> list[tuple[int, dict[str, int], int, int]]:
    return [(v.parallelism, dict(v.tasks_per_state), v.records_in, v.records_out) for v in summary.vertices]


def _status(summary: cpb.JobSummary) -> JobStatus:
    return JobStatus.from_proto(summary.status)


def test_a_finished_keyed_job_reports_each_vertex_with_exact_record_totals(client) -> None:
    n = 20_000
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    (env.from_sequence(1, n).map(lambda x: (x % 7, x))
     .key_by(lambda t: t[0]).map(lambda t: t[1] * 2).filter(lambda x: x % 4 == 0)
     .add_sink(lambda x: None))
    job_id = client.submit(env.get_job_graph("keyed totals").proto)
    updates = list(client.wait(job_id))
    final = updates[-1].summary
    assert _status(final) is JobStatus.FINISHED, final.failure.message
    assert final.parallelism == 2 and [v.name.split(" ")[0] for v in final.vertices] == ["Source:", "Map"]
    # The source vertex (source -> map) read nothing from the network and sent every record over the
    # keyed exchange; the keyed vertex (map -> filter -> sink) received them all and sent nothing.
    assert _vertices(final) == [(2, {"FINISHED": 2}, 0, n), (2, {"FINISHED": 2}, n, 0)]
    for summary in (client.status(job_id), next(j for j in client.list_jobs() if j.job_id == job_id)):
        assert _vertices(summary) == _vertices(final)  # a finished job keeps its final vertices


def test_a_running_job_shows_running_tasks_and_growing_records_then_cancel_keeps_them(client) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.add_source(Ticks(0.002)).key_by(lambda x: x % 5).map(lambda x: x).add_sink(lambda x: None)
    job_id = client.submit(env.get_job_graph("endless").proto)
    try:
        running = poll_for(
            lambda: (s := client.status(job_id)).vertices
            and all(v.tasks_per_state.get("RUNNING") == 2 for v in s.vertices)
            and s.vertices[0].records_out > 0 and s.vertices[1].records_in > 0 and s,
            60, what="both vertices RUNNING with records reported by heartbeats",
        )
        assert running.vertices[0].records_in == 0 and running.vertices[1].records_out == 0
        later = poll_for(lambda: (s := client.status(job_id)).vertices[1].records_in > running.vertices[1].records_in and s,
                         30, what="records_in growing")
        assert later.vertices[0].records_out >= running.vertices[0].records_out
        assert not running.HasField("slot_wait")
    finally:
        cancelled = client.cancel(job_id)
    assert len(cancelled.vertices) == 2  # CancelJob answers with the vertices too
    final = poll_for(lambda: _status(s := client.status(job_id)).is_terminal() and s, 30, what="CANCELED")
    assert _status(final) is JobStatus.CANCELED
    assert [dict(v.tasks_per_state) for v in final.vertices] == [{"CANCELED": 2}, {"CANCELED": 2}]
    # Records sent by the source's tasks were all received by the keyed tasks, or were in flight.
    assert final.vertices[0].records_out >= final.vertices[1].records_in > 0


def test_a_job_waiting_for_slots_says_how_many_it_has_and_when_it_gives_up(spark) -> None:
    config = fast_config(slot__request__timeout="120 s")
    with MiniCluster(config, num_slots=1, spark=spark) as mc, ClusterClient(mc.address) as client:
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(2)
        env.from_sequence(1, 100).map(lambda x: x).add_sink(lambda x: None)
        submitted_ms = time.time() * 1000
        job_id = client.submit(env.get_job_graph("needs two").proto)
        waiting = poll_for(lambda: (s := client.status(job_id)).slot_wait.slots_allocated == 1 and s, 30,
                           what="one of two slots")
        assert waiting.slot_wait.slots_required == 2
        assert submitted_ms + 100_000 < waiting.slot_wait.timeout_at_ms < time.time() * 1000 + 121_000
        assert [dict(v.tasks_per_state) for v in waiting.vertices] == [{"SCHEDULED": 2}]
        listed = next(j for j in client.list_jobs() if j.job_id == job_id)
        assert listed.slot_wait.slots_required == 2
        mc.add_task_manager()
        final = list(client.wait(job_id))[-1].summary
        assert _status(final) is JobStatus.FINISHED and not final.HasField("slot_wait")
        assert not client.status(job_id).HasField("slot_wait")


def test_a_running_jobs_printed_lines_reach_a_second_clients_stream(cluster, client, capfd) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.add_source(Ticks(0.02)).map(lambda x: f"tick {x}").print()
    job_id = client.submit(env.get_job_graph("printing").proto)
    lines: list[str] = []
    updates: list[cpb.JobStatusUpdate] = []

    def attach() -> None:  # another client, attached while the job runs
        with ClusterClient(cluster.address) as second:
            for update in second.wait(job_id):
                updates.append(update)
                lines.extend(update.printed_lines)

    reader = threading.Thread(target=attach, daemon=True)
    reader.start()
    try:
        poll_for(lambda: len(lines) >= 100, 60, what="100 printed lines on the stream")
    finally:
        client.cancel(job_id)
    reader.join(30)
    assert not reader.is_alive() and updates[-1].terminal
    # Flink's print prefixes: subtask 1 and 2 of 2; each subtask's ticks arrive in order.
    for prefix in ("1> tick ", "2> tick "):
        ticks = [int(line[len(prefix):]) for line in lines if line.startswith(prefix)]
        assert ticks and ticks == sorted(ticks) and len(set(ticks)) == len(ticks)
    assert all(line.startswith(("1> tick ", "2> tick ")) for line in lines)
    with_lines = [u for u in updates if u.printed_lines]
    assert len(with_lines) < len(lines) / 2  # batched, not one message per line
    assert sum(u.printed_lines_dropped for u in updates) == 0
    assert "1> tick 0" in capfd.readouterr().out  # the TaskManager prints them too (Flink's .out file)


EMBEDDED = textwrap.dedent("""
    import threading
    from millstream.client import minicluster
    from millstream.client.cluster_client import ClusterClient
    from millstream.datastream import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.from_sequence(1, 50).map(lambda x: f"first {x}").print()
    env.execute("first")
    # A second job on the same embedded cluster, watched through WaitJobResult as a client would.
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.from_sequence(1, 50).map(lambda x: f"second {x}").print()
    with ClusterClient(minicluster._embedded.address) as client:
        job_id = client.submit(env.get_job_graph("second").proto)
        streamed = sum(len(u.printed_lines) for u in client.wait(job_id))
    print("STREAMED", streamed)
""")


def test_the_embedded_mode_prints_each_line_once_and_does_not_stream_them(tmp_path) -> None:
    """Embedded (``python job.py``): the TaskManager prints to the console, which is the client's;
    the status stream carries no lines, so nothing that prints from it can show them twice."""
    job = tmp_path / "job.py"
    job.write_text(EMBEDDED)
    env = {k: v for k, v in os.environ.items() if k != "MILLSTREAM_JOBMANAGER"}
    run = subprocess.run([sys.executable, str(job)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=170)
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout.splitlines()
    for name in ("first", "second"):
        printed = sorted(int(line.rsplit(" ", 1)[1]) for line in out if f"> {name} " in line)
        assert printed == list(range(1, 51)), out[-20:]
    assert "STREAMED 0" in out
