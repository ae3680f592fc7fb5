"""``python job.py`` with no cluster named: an embedded mini-cluster runs the job and goes away."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.timeout(400)


def test_a_job_script_runs_on_an_embedded_cluster_and_prints_to_the_console(tmp_path) -> None:
    (tmp_path / "helpers.py").write_text("def triple(x):\n    return 3 * x\n")
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent("""
        import os
        from millstream.datastream import StreamExecutionEnvironment
        from helpers import triple   # imported by reference: must travel as an artifact

        env = StreamExecutionEnvironment.get_execution_environment()
        env.add_python_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), "helpers.py"))
        env.set_parallelism(2)
        env.from_sequence(1, 3).map(triple).print()
        result = env.execute("embedded")
        print("JOB", result.get_job_id(), "DONE")
    """))
    env = {k: v for k, v in os.environ.items() if k != "MILLSTREAM_JOBMANAGER"}
    run = subprocess.run([sys.executable, str(job)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=170)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert sorted(line.split("> ", 1)[1] for line in lines if "> " in line) == ["3", "6", "9"]
    assert all(line[:2] in ("1>", "2>") for line in lines if "> " in line)
    assert any(line.startswith("JOB ") and line.endswith(" DONE") for line in lines)


THREE_EXECUTES = textwrap.dedent("""
    import os

    from pyspark import SparkContext
    from millstream.client import minicluster
    from millstream.datastream import StreamExecutionEnvironment

    jvms = []
    for i in range(3):
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism([1, os.cpu_count(), 1][i])  # a later job at a larger parallelism fits too
        env.from_sequence(1, 1000).key_by(lambda x: x % 3).sum(0).print()
        env.execute(f"job {i}")
        jvms.append(SparkContext._active_spark_context)  # None once a cluster stopped after its job
    print("STARTS", getattr(minicluster, "starts", None), "SPARKS", len({id(sc) for sc in jvms if sc is not None}),
          "STOPPED", sum(sc is None for sc in jvms))
""")


def test_a_program_that_executes_three_times_reuses_one_embedded_cluster_and_one_spark(tmp_path) -> None:
    job = tmp_path / "three.py"
    job.write_text(THREE_EXECUTES)
    env = {k: v for k, v in os.environ.items() if k != "MILLSTREAM_JOBMANAGER"}
    for _ in range(2):
        run = subprocess.run([sys.executable, str(job)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=170)
        assert run.returncode == 0, f"exit code {run.returncode}\n{run.stderr[-3000:]}"
        assert "STARTS 1 SPARKS 1 STOPPED 0" in run.stdout, run.stdout[-2000:]


def test_a_program_ends_without_stopping_its_spark_and_the_jvm_follows(tmp_path) -> None:
    """At the program's exit the embedded cluster skips Spark's graceful stop (~1 s): its JVM ends
    by itself on its stdin's EOF, and the console shows no error from the way down."""
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent("""
        from pyspark import SparkContext
        from millstream.datastream import StreamExecutionEnvironment

        env = StreamExecutionEnvironment.get_execution_environment()
        env.from_collection([1, 2, 3]).map(lambda x: x * 2).print()
        env.execute("exit")
        print("JVM", SparkContext._gateway.proc.pid, flush=True)
    """))
    env = {k: v for k, v in os.environ.items() if k not in ("MILLSTREAM_JOBMANAGER", "MILLSTREAM_LOG_LEVEL")}
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with open(out, "w") as stdout, open(err, "w") as stderr:  # files: a pipe would also wait for the JVM
        code = subprocess.Popen([sys.executable, str(job)], cwd=tmp_path, env=env, stdout=stdout, stderr=stderr).wait(170)
    assert code == 0, err.read_text()[-3000:]
    printed = out.read_text().splitlines()
    assert sorted(line.split("> ", 1)[1] for line in printed if "> " in line) == ["2", "4", "6"]
    jvm = int(next(line.split()[1] for line in printed if line.startswith("JVM ")))
    deadline = time.monotonic() + 60
    while os.path.exists(f"/proc/{jvm}") and not _zombie(jvm):
        assert time.monotonic() < deadline, f"Spark's JVM (pid {jvm}) still runs 60 s after its program ended"
        time.sleep(0.1)
    assert err.read_text() == "", err.read_text()[-3000:]


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


EXITS_DURING_JOBS = textwrap.dedent("""
    import threading, time
    from millstream.datastream import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.from_sequence(1, 3).add_sink(lambda x: None)
    env.execute("first")  # the embedded cluster runs

    def slow(x):
        time.sleep(0.01)
        return x

    # A non-daemon thread's job: the program waits for it before the cluster closes, as Python does.
    env.enable_checkpointing(200)
    env.from_sequence(1, 100).map(slow).add_sink(lambda x: None)
    threading.Thread(target=lambda: print("THREAD JOB", env.execute("waited for").get_job_id() is not None, flush=True)).start()
    # A daemon thread's endless checkpointing job: still running when the program exits.
    endless = StreamExecutionEnvironment.get_execution_environment()
    endless.set_parallelism(1)
    endless.enable_checkpointing(200)
    endless.from_sequence(1, 10**9).map(slow).add_sink(lambda x: None)

    def run_endless():
        try:
            endless.execute("endless")
        except Exception:  # the program's exit ends it: expected, and not what this test is about
            pass

    threading.Thread(target=run_endless, daemon=True).start()
    time.sleep(3)
    print("MAIN ENDS", flush=True)
""")


def test_a_program_exiting_while_jobs_run_closes_the_cluster_without_errors(tmp_path) -> None:
    """The embedded cluster's close at exit ran after concurrent.futures had shut its thread pools
    down: "cannot schedule new futures after interpreter shutdown" on the program's stderr."""
    job = tmp_path / "exits.py"
    job.write_text(EXITS_DURING_JOBS)
    env = {k: v for k, v in os.environ.items() if k != "MILLSTREAM_JOBMANAGER"}
    run = subprocess.run([sys.executable, str(job)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "MAIN ENDS" in run.stdout and "THREAD JOB True" in run.stdout, run.stdout
    assert "cannot schedule new futures" not in run.stderr and "Traceback" not in run.stderr, run.stderr[-3000:]
