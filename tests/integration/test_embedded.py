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
