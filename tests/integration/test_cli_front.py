"""The ``millstream`` CLI as a user meets it, with real processes: a session cluster started by the
CLI, `run` attached / detached / interrupted, `cancel` of an ended job, user-only tracebacks, the
one-line answer when no JobManager is there, a quiet embedded console, and `cluster stop` stopping
a TaskManager added by hand."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from millstream.client.session_cluster import process_identity

from .harness import cli, poll_for, refused_port, session_cluster

pytestmark = pytest.mark.timeout(300)

NO_JOBMANAGER = ("No JobManager at {address} (connection refused). Start one with `millstream cluster start`, "
                 "or run `python job.py` for an embedded cluster.")

# Prints its arguments and stops on --help; else a job of N slow elements (N = first argument).
SLOW_JOB = textwrap.dedent("""
    import sys, time
    from millstream.datastream import StreamExecutionEnvironment

    if "--help" in sys.argv:
        print("usage: slow.py N (the script's own help)", sys.argv[1:])
        sys.exit(0)
    env = StreamExecutionEnvironment.get_execution_environment()

    def slow(x):
        time.sleep(0.1)
        return x

    env.from_sequence(1, int(sys.argv[1])).map(slow).add_sink(lambda x: None)
    env.execute("slow")
    print("PROGRAM DONE")
""")


def _popen_cli(*args: str, env: dict[str, str]) -> subprocess.Popen:
    # A suite started as a shell's background job ignores SIGINT, and an ignored signal stays
    # ignored in every child: the CLI would never see the test's Ctrl-C. Handled (not ignored)
    # here, the child starts with the default and Python installs its KeyboardInterrupt handler.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    return subprocess.Popen([sys.executable, "-m", "millstream.client.cli", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    directory = tmp_path_factory.mktemp("cluster")
    with session_cluster(directory, "--taskmanagers", "1", "--slots", "2", "--port", "0", "-D", "heartbeat.interval=500 ms",
                         "-D", "rest.port=0") as (env, printed):
        assert re.search(r"JobManager \S+: web UI and REST API at http://localhost:\d+\n", printed), printed
        yield env, directory


@pytest.fixture
def slow_job(tmp_path) -> Path:
    path = tmp_path / "slow.py"
    path.write_text(SLOW_JOB)
    return path


def _submitted_id(line: str) -> str:
    assert line.startswith("Job slow submitted: "), line
    job_id = line.rsplit(" ", 1)[1]
    assert len(bytes.fromhex(job_id)) == 16
    return job_id


def _status(job_id: str, env: dict[str, str]) -> dict:
    result = cli("status", job_id, "--json", env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_run_attached_prints_the_id_first_then_the_outcome_and_passes_arguments_to_the_script(cluster, slow_job) -> None:
    env, _ = cluster
    run = cli("run", "-p", "2", str(slow_job), "6", env=env)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    job_id = _submitted_id(lines[0])
    assert "Job slow: FINISHED" in run.stdout and lines[-1] == "PROGRAM DONE"
    assert "\x1b[" not in run.stdout  # not a terminal: plain lines, no redraw
    status = _status(job_id, env)
    assert status["status"] == "FINISHED" and status["num_tasks"] == 2  # -p 2: parallelism.default
    listed = cli("list", env=env)
    assert listed.stdout.splitlines()[0].split() == ["JOB", "ID", "NAME", "STATUS", "START", "DURATION", "PARALLELISM"]
    assert any(line.startswith(job_id) and " FINISHED " in line for line in listed.stdout.splitlines())
    assert any(job["job_id"] == job_id for job in json.loads(cli("list", "--json", env=env).stdout))

    helped = cli("run", str(slow_job), "--help", env=env)
    assert helped.returncode == 0 and "the script's own help" in helped.stdout and "['--help']" in helped.stdout


PRINT_JOB = textwrap.dedent("""
    from millstream.datastream import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.from_collection(["alpha", "beta", "gamma"]).map(lambda w: w.upper()).print()
    env.execute("printing")
""")


def test_run_shows_the_jobs_printed_lines_unless_no_print(cluster, tmp_path) -> None:
    env, _ = cluster
    job = tmp_path / "printing.py"
    job.write_text(PRINT_JOB)
    run = cli("run", str(job), env=env)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert [line for line in lines if line in ("ALPHA", "BETA", "GAMMA")] == ["ALPHA", "BETA", "GAMMA"]
    finished = next(i for i, line in enumerate(lines) if line.startswith("Job printing: FINISHED"))
    assert lines.index("GAMMA") < finished
    # each vertex's final state, as the JobManager reports it; no slot-wait advice for a job that got its slots at once
    assert any(line.startswith("  Source: Collection Source -> Map -> Sink: Print to Std. Out [1]: FINISHED 1; records in ")
               for line in lines[finished:]), "\n".join(lines)
    assert not any(line.startswith("waiting for slots") for line in lines)
    quiet = cli("run", "--no-print", str(job), env=env)
    assert quiet.returncode == 0 and not {"ALPHA", "BETA", "GAMMA"} & set(quiet.stdout.splitlines())


def test_run_on_a_terminal_redraws_a_live_view(cluster, slow_job) -> None:
    import pty

    env, _ = cluster
    master, slave = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "millstream.client.cli", "run", "-p", "2", str(slow_job), "20"],
                               env={**env, "COLUMNS": "120"}, stdout=slave, stderr=subprocess.PIPE, text=True)
    os.close(slave)
    output = b""
    try:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            output += chunk
        process.wait(timeout=60)
    finally:
        os.close(master)
        process.kill()
    text = output.decode(errors="replace")
    assert process.returncode == 0, process.stderr.read() if process.stderr else ""
    assert "Job slow submitted: " in text
    assert "\x1b[" in text  # redrawn in place (cursor movement), not appended lines
    assert text.rfind("FINISHED") > text.rfind("RUNNING") > text.find("Job slow submitted: ")  # the last frame: the end


def test_run_detached_returns_after_printing_the_id_and_cancel_of_an_ended_job_exits_1(cluster, slow_job) -> None:
    env, _ = cluster
    started = time.monotonic()
    run = cli("run", "-d", str(slow_job), "600", env=env)
    assert run.returncode == 0, run.stderr
    job_id = _submitted_id(run.stdout.splitlines()[0])
    assert "PROGRAM DONE" not in run.stdout and time.monotonic() - started < 30  # the job takes 60 s
    assert _status(job_id, env)["status"] in ("CREATED", "RUNNING")
    cancelled = cli("cancel", job_id, env=env)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.strip().endswith("CANCELED")
    again = cli("cancel", job_id, env=env)
    assert again.returncode == 1
    assert again.stderr.strip() == f"millstream: job {job_id} already CANCELED: nothing to cancel"


def test_ctrl_c_leaves_the_job_running_or_cancels_it_with_cancel_on_exit(cluster, slow_job) -> None:
    env, _ = cluster
    for flags, outcome in (((), "keeps running"), (("--cancel-on-exit",), "cancelled")):
        process = _popen_cli("run", *flags, str(slow_job), "600", env=env)
        try:
            first = process.stdout.readline()
            job_id = _submitted_id(first.strip())
            poll_for(lambda: _status(job_id, env)["status"] == "RUNNING", 60, what="the job to run")
            process.send_signal(signal.SIGINT)
            out, err = process.communicate(timeout=30)
        finally:
            process.kill()
        assert process.returncode == 130, err
        if outcome == "keeps running":
            assert err.strip() == f"job {job_id} keeps running; `millstream cancel {job_id}`"
            time.sleep(1.0)
            assert _status(job_id, env)["status"] == "RUNNING"
            assert cli("cancel", job_id, env=env).returncode == 0
        else:
            assert err.strip() == f"job {job_id} cancelled"
            poll_for(lambda: _status(job_id, env)["status"] == "CANCELED", 30, what="the job to be cancelled")


def test_a_job_waiting_for_slots_says_so_in_list_status_and_run(cluster, slow_job) -> None:
    import re

    env, _ = cluster
    run = _popen_cli("run", "-p", "3", str(slow_job), "100", env=env)  # 3 slots; the cluster has 2
    try:
        job_id = _submitted_id(run.stdout.readline().strip())
        wait = re.compile(r"waiting for slots: (\d) of 3 — add a TaskManager or lower parallelism; timeout in \d+:\d\d")
        listed = poll_for(lambda: (lambda out: out if wait.search(out) else None)(cli("list", env=env).stdout), 30,
                          what="list to show the slot wait")
        row = listed.splitlines().index(next(line for line in listed.splitlines() if line.startswith(job_id)))
        assert wait.fullmatch(listed.splitlines()[row + 1].strip())
        assert wait.search(cli("status", job_id, env=env).stdout)
        assert _status(job_id, env)["slot_wait"]["slots_required"] == 3
        line = poll_for(lambda: (lambda text: text if wait.search(text) else None)(run.stdout.readline()), 30,
                        what="run to say the job waits")
        assert wait.fullmatch(line.strip())
    finally:
        run.kill()
        run.wait()
    assert cli("cancel", job_id, env=env).returncode == 0


def test_an_exception_or_syntax_error_in_the_script_shows_the_users_traceback_only(cluster, tmp_path) -> None:
    env, _ = cluster
    bad = tmp_path / "bad.py"
    bad.write_text("def parse(text):\n    return int(text)\n\nparse('x')\n")
    run = cli("run", str(bad), env=env)
    assert run.returncode == 1
    assert run.stderr.splitlines() == [
        "Traceback (most recent call last):",
        f'  File "{bad}", line 4, in <module>', "    parse('x')",
        f'  File "{bad}", line 2, in parse', "    return int(text)", "           ^^^^^^^^^",
        "ValueError: invalid literal for int() with base 10: 'x'",
    ]
    syntax = tmp_path / "syntax.py"
    syntax.write_text("x = [1,\n")
    run = cli("run", str(syntax), env=env)
    assert run.returncode == 1 and "Traceback" not in run.stderr and "millstream" not in run.stderr
    assert f'File "{syntax}", line 1' in run.stderr and "SyntaxError" in run.stderr


def test_status_of_a_failed_job_shows_the_root_cause_and_its_remote_traceback(cluster, tmp_path) -> None:
    env, _ = cluster
    job = tmp_path / "failing.py"
    job.write_text(textwrap.dedent("""
        from millstream.datastream import StreamExecutionEnvironment

        def explode(x):
            raise KeyError(f"no such key {x}")

        env = StreamExecutionEnvironment.get_execution_environment()
        env.from_sequence(1, 3).map(explode).add_sink(lambda x: None)
        env.execute("failing")
    """))
    run = cli("run", str(job), env=env)
    assert run.returncode == 1
    job_id = run.stdout.splitlines()[0].rsplit(" ", 1)[1]
    status = cli("status", job_id, env=env)
    assert status.returncode == 0
    assert "Status:      FAILED" in status.stdout
    assert "Root cause: " in status.stdout and "no such key 1" in status.stdout
    remote = status.stdout.split("Remote traceback:\n", 1)[1]
    assert "in explode" in remote and "KeyError" in remote


def test_every_command_says_no_jobmanager_in_one_line_within_3_s(tmp_path) -> None:
    with refused_port() as port:
        env = {**os.environ, "MILLSTREAM_CLUSTER_DIR": str(tmp_path / "none"), "MILLSTREAM_JOBMANAGER": f"localhost:{port}"}
        job = tmp_path / "job.py"
        job.write_text(SLOW_JOB)
        job_id = "00" * 16
        for command in (["list"], ["status", job_id], ["cancel", job_id], ["run", str(job), "3"], ["run", "-d", str(job), "3"]):
            started = time.monotonic()
            result = cli(*command, env=env, timeout=30)
            elapsed = time.monotonic() - started
            assert (result.returncode, result.stderr, result.stdout) == (1, NO_JOBMANAGER.format(address=f"localhost:{port}") + "\n", ""), command
            assert elapsed < 3.0, f"{command}: {elapsed:.1f} s"
        for address in ("garbage", "localhost:70000", "local host:6123"):
            started = time.monotonic()
            result = cli("list", "--jobmanager", address, env=env, timeout=30)
            assert result.returncode == 1 and time.monotonic() - started < 3.0
            assert result.stderr.strip().splitlines() == [f"millstream: error: JobManager address: expected host:port, got {address!r}"]


QUIET_JOB = textwrap.dedent("""
    import logging
    logging.basicConfig(level=logging.INFO)   # as PyFlink's own examples do
    from millstream.datastream import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.from_collection([1, 2, 3]).map(lambda x: x * 10).print()
    env.execute("quiet")
    logging.getLogger("user").info("the user's own log line")

    def explode(x):
        raise ValueError("boom")

    env.from_collection([1]).map(explode).add_sink(lambda x: None)
    try:
        env.execute("failing")
    except Exception as e:
        print(str(e).splitlines()[-1])
""")


def test_an_embedded_job_keeps_the_console_to_the_user_even_with_logging_at_info(tmp_path) -> None:
    job = tmp_path / "quiet.py"
    job.write_text(QUIET_JOB)
    env = {k: v for k, v in os.environ.items() if k not in ("MILLSTREAM_JOBMANAGER", "MILLSTREAM_LOG_LEVEL")}
    env["MILLSTREAM_LOG_DIR"] = str(tmp_path / "logs")
    run = subprocess.run([sys.executable, str(job)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=200)
    assert run.returncode == 0, run.stderr[-3000:]
    [log] = list((tmp_path / "logs").iterdir())
    assert run.stdout.splitlines() == ["10", "20", "30", f"The embedded cluster's log: {log}"]  # a failure names the log
    assert run.stderr.splitlines() == ["INFO:user:the user's own log line"]
    text = log.read_text()
    # what the console did not show is there: Millstream's lines, py4j's, the JVM's banner
    assert "millstream.jobmanager" in text and "Spark" in text and "NativeCodeLoader" in text


# Fails on 20 every attempt (a restore from a checkpoint resumes before it): FAILED after its restarts.
FAILS_AT_20 = textwrap.dedent("""
    import time
    from millstream.datastream import StreamExecutionEnvironment

    def slow_then_fail(x):
        time.sleep(0.05)
        if x == 20:
            raise ValueError("twenty")
        return x

    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_sequence(1, 40).map(slow_then_fail).add_sink(lambda x: None)
    env.execute("per-job options")
""")


def test_run_applies_job_level_options_and_refuses_cluster_ones(cluster, slow_job, tmp_path) -> None:
    """`run -D`: slot.request.timeout, restart-strategy.* and execution.checkpointing.* apply to that job
    (the cluster has the defaults: 300 s, no restarts, no checkpoints); a cluster option is refused."""
    env, _ = cluster
    started = time.monotonic()
    run = cli("run", "-p", "3", "-D", "slot.request.timeout=2 s", str(slow_job), "5", env=env)  # 3 slots on a 2-slot cluster
    assert run.returncode == 1 and "not enough slots" in run.stdout + run.stderr, run.stdout + run.stderr
    assert time.monotonic() - started < 60

    job = tmp_path / "fails_at_20.py"
    job.write_text(FAILS_AT_20)
    run = cli("run", "-D", "restart-strategy.type=fixed-delay", "-D", "restart-strategy.fixed-delay.attempts=2",
               "-D", "restart-strategy.fixed-delay.delay=100 ms", "-D", "execution.checkpointing.interval=200 ms",
               "-D", f"execution.checkpointing.dir={tmp_path / 'chk'}", str(job), env=env)
    assert run.returncode == 1, run.stdout + run.stderr
    status = _status(run.stdout.splitlines()[0].rsplit(" ", 1)[1], env)
    assert status["status"] == "FAILED" and status["num_restarts"] == 2
    assert status["checkpoints"]["interval_ms"] == 200 and status["checkpoints"]["directory"].startswith(str(tmp_path / "chk"))

    jobs_before = len(json.loads(cli("list", "--json", env=env).stdout))
    for option in ("taskmanager.numberOfTaskSlots=4", "rest.port=9999"):
        refused = cli("run", "-D", option, str(slow_job), "1", env=env)
        key = option.split("=")[0]
        assert refused.returncode == 2 and f"-D {key}: a cluster option, not a job's" in refused.stderr, refused.stderr
        assert "Job slow submitted" not in refused.stdout
    assert len(json.loads(cli("list", "--json", env=env).stdout)) == jobs_before


def test_cluster_stop_also_stops_a_taskmanager_added_by_hand(cluster) -> None:
    env, directory = cluster
    address = json.loads((directory / "cluster.json").read_text())["jobmanager"]
    added = subprocess.Popen([sys.executable, "-m", "millstream.client.cli", "taskmanager", "--jobmanager", address,
                              "-Dtaskmanager.numberOfTaskSlots=1"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        poll_for(lambda: "TaskManagers: 2" in cli("cluster", "status", env=env).stdout, 120, interval=1.0,
                 what="the added TaskManager to register")
        stopped = cli("cluster", "stop", env=env, timeout=90)
        assert stopped.stdout.strip() == "Cluster stopped."
        added.wait(timeout=30)
        assert process_identity(added.pid) is None
    finally:
        if added.poll() is None:
            added.kill()
            added.wait()

