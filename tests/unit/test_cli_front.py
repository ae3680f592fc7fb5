"""The CLI's front end without a cluster: argument help, what list/status/run show of constructed
JobSummary messages (the JobManager's contract in cluster.proto), printed-line rate limiting, and
tracebacks that show the user's frames only."""
from __future__ import annotations

import argparse
import io
import json
import textwrap
import time

import pytest

from millstream.client import cli, progress
from millstream.client.execution import JobDetached
from millstream.proto import cluster_pb2 as cpb

NOW = 1_700_000_000_000
JOB_ID = bytes(range(16))


def _summary(status: int = cpb.RUNNING, **kwargs) -> cpb.JobSummary:
    s = cpb.JobSummary(job_id=JOB_ID, job_name="wordcount", status=status, start_time_ms=NOW - 65_000, num_tasks=5, **kwargs)
    return s


def _with_vertices(s: cpb.JobSummary) -> cpb.JobSummary:
    s.vertices.add(name="Source: Files -> Map", parallelism=2, tasks_per_state={"RUNNING": 2}, records_in=0, records_out=12345)
    s.vertices.add(name="Keyed Sum -> Sink: Print", parallelism=3, tasks_per_state={"RUNNING": 1, "DEPLOYING": 2},
                   records_in=12000, records_out=11000)
    s.parallelism = 3
    s.tasks_per_state.update({"RUNNING": 3, "DEPLOYING": 2})
    return s


def _all_actions(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                yield "subcommand " + choice.dest, choice
            for name, sub in action.choices.items():
                for where, a in _all_actions(sub):
                    yield f"{name} {where}", a
        else:
            yield ",".join(action.option_strings) or action.dest, action


def test_every_argument_of_every_subcommand_has_a_help_string() -> None:
    missing = [where for where, action in _all_actions(cli.build_parser()) if not action.help]
    assert missing == []


def test_run_takes_everything_after_the_script_as_the_scripts_arguments() -> None:
    args = cli.build_parser().parse_args(["run", "-d", "-p", "4", "job.py", "--help", "-p", "x"])
    assert (args.detached, args.parallelism, args.script, args.script_args) == (True, 4, "job.py", ["--help", "-p", "x"])
    args = cli.build_parser().parse_args(["run", "--no-print", "-sae", "job.py"])
    assert args.no_print and args.cancel_on_exit and args.script_args == []
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["run", "-p", "0", "job.py"])


def test_slot_wait_line_says_how_many_slots_what_to_do_and_when_it_times_out() -> None:
    s = _summary(slot_wait=cpb.SlotWait(slots_required=5, slots_allocated=4, timeout_at_ms=NOW + 277_000))
    assert progress.slot_wait_line(s, NOW) == ("waiting for slots: 4 of 5 — add a TaskManager or lower parallelism; "
                                               "timeout in 4:37")
    assert progress.slot_wait_line(_summary(), NOW) is None
    # A job that ended waits for nothing, even if the last summary still carried the wait.
    ended = _summary(cpb.FAILED, slot_wait=cpb.SlotWait(slots_required=5, slots_allocated=4))
    assert progress.slot_wait_line(ended, NOW) is None


def test_list_has_a_header_start_time_duration_and_parallelism() -> None:
    finished = cpb.JobSummary(job_id=b"\x01" * 16, job_name="old", status=cpb.FINISHED, start_time_ms=NOW - 3_600_000,
                              end_time_ms=NOW - 3_600_000 + 754_000)
    waiting = _summary(slot_wait=cpb.SlotWait(slots_required=5, slots_allocated=4, timeout_at_ms=NOW + 277_000))
    rows = progress.list_rows([finished, _with_vertices(waiting)], NOW)
    assert rows[0].split() == ["JOB", "ID", "NAME", "STATUS", "START", "DURATION", "PARALLELISM"]
    assert rows[1].split()[1:3] == ["wordcount", "RUNNING"] and rows[1].split()[-2:] == ["1:05", "3"]  # newest first
    assert rows[2].strip() == "waiting for slots: 4 of 5 — add a TaskManager or lower parallelism; timeout in 4:37"
    assert rows[3].split()[0] == "01" * 16  # the oldest last, as the web UI lists jobs
    assert rows[3].split()[2:] == ["FINISHED", progress.format_start(finished.start_time_ms).split()[0],
                                   progress.format_start(finished.start_time_ms).split()[1], "12:34", "-"]
    # columns line up under the header
    assert rows[3].index("FINISHED") == rows[0].index("STATUS") == rows[1].index("RUNNING")


def test_status_shows_each_vertex_and_the_root_cause_with_its_remote_traceback() -> None:
    failed = _with_vertices(_summary(cpb.FAILED))
    failed.end_time_ms = NOW
    failed.failure.CopyFrom(cpb.JobFailure(message="ZeroDivisionError: division by zero", task_name="Map (2/2)",
                                           traceback='Traceback (most recent call last):\n  File "job.py", line 7, in f\nZeroDivisionError: division by zero\n'))
    out = progress.status_report(failed, NOW)
    assert out[:2] == [f"Job:         wordcount ({JOB_ID.hex()})", "Status:      FAILED"]
    assert "Duration:    1:05" in out and "Parallelism: 3" in out and "Tasks:       DEPLOYING 2, RUNNING 3" in out
    vertex = next(line for line in out if "Keyed Sum" in line).split()
    assert vertex[-7:-2] == ["3", "DEPLOYING", "2,", "RUNNING", "1"]
    assert vertex[-2:] == ["12,000", "11,000"]
    assert next(line for line in out if "Source: Files" in line).split()[-2:] == ["0", "12,345"]
    assert out[out.index("Root cause: ZeroDivisionError: division by zero") + 1] == "  in task Map (2/2)"
    assert out[out.index("Remote traceback:") + 1:] == ["Traceback (most recent call last):", '  File "job.py", line 7, in f',
                                                       "ZeroDivisionError: division by zero"]


def test_status_without_per_vertex_summaries_shows_what_is_known() -> None:
    s = _summary(cpb.FINISHED, tasks_per_state={"FINISHED": 4}, end_time_ms=NOW)
    out = progress.status_report(s, NOW)
    assert "Tasks:       FINISHED 4" in out
    assert not any(line.startswith("Parallelism") or "VERTEX" in line or "Root cause" in line for line in out)


def test_json_of_a_job_is_its_summary_with_nulls_for_absent_parts() -> None:
    s = _with_vertices(_summary(slot_wait=cpb.SlotWait(slots_required=5, slots_allocated=4, timeout_at_ms=NOW + 1000)))
    data = json.loads(json.dumps(progress.summary_json(s, NOW)))
    assert data["job_id"] == JOB_ID.hex() and data["status"] == "RUNNING" and data["duration_ms"] == 65_000
    assert data["parallelism"] == 3 and data["failure"] is None
    assert data["vertices"][1] == {"name": "Keyed Sum -> Sink: Print", "parallelism": 3,
                                   "tasks_per_state": {"DEPLOYING": 2, "RUNNING": 1}, "records_in": 12000, "records_out": 11000}
    assert data["slot_wait"] == {"slots_required": 5, "slots_allocated": 4, "timeout_at_ms": NOW + 1000}
    bare = progress.summary_json(cpb.JobSummary(job_id=JOB_ID, status=cpb.CREATED), NOW)
    assert bare["slot_wait"] is None and bare["start_time_ms"] is None and bare["duration_ms"] is None and bare["parallelism"] is None


def test_printed_lines_are_rate_limited_and_skips_are_counted() -> None:
    now = [0.0]
    limiter = progress.PrintRateLimiter(burst=3, per_second=2, clock=lambda: now[0])
    assert limiter.take(["a", "b"]) == ["a", "b"]
    assert limiter.take(["c", "d", "e"]) == ["c"]  # the burst is spent: d and e are skipped
    now[0] = 1.0  # two more lines' worth
    assert limiter.take(["f", "g", "h"], dropped=10) == ["... 12 printed lines not shown", "f", "g"]
    assert limiter.flush() == ["... 1 printed line not shown"]
    assert limiter.flush() == []


def _update(summary: cpb.JobSummary, lines=(), dropped: int = 0, terminal: bool = False) -> cpb.JobStatusUpdate:
    return cpb.JobStatusUpdate(summary=summary, printed_lines=list(lines), printed_lines_dropped=dropped, terminal=terminal)


def test_run_view_without_a_terminal_prints_plain_lines() -> None:
    out = io.StringIO()
    view = progress.RunView(live=False, out=out, now_ms=lambda: NOW, slot_wait_grace_s=0.0)
    view.submitted("wordcount", JOB_ID, client=None, follow=False)
    waiting = _summary(cpb.RUNNING, slot_wait=cpb.SlotWait(slots_required=5, slots_allocated=4))
    view.update(_update(waiting))
    view.update(_update(waiting))  # the same wait is said once
    time.sleep(0.2)  # said by a timer thread (after the grace, here none)
    running = _with_vertices(_summary(cpb.RUNNING))
    view.update(_update(running, ["(a,1)", "(b,2)"]))
    done = _with_vertices(_summary(cpb.FINISHED))
    done.end_time_ms = done.start_time_ms + 7_000
    view.update(_update(done, ["(c,3)"], dropped=2, terminal=True))
    view.stopped()
    lines = out.getvalue().splitlines()
    assert lines[0] == f"Job wordcount submitted: {JOB_ID.hex()}"
    assert lines[1].startswith("Job wordcount: RUNNING")
    assert lines[2] == "waiting for slots: 4 of 5 — add a TaskManager or lower parallelism"
    assert lines[3:5] == ["(a,1)", "(b,2)"]
    assert lines[5:8] == ["... 2 printed lines not shown", "(c,3)", "Job wordcount: FINISHED (0:07)"]
    assert lines[8:] == ["  Source: Files -> Map [2]: RUNNING 2; records in 0, out 12,345",
                         "  Keyed Sum -> Sink: Print [3]: DEPLOYING 2, RUNNING 1; records in 12,000, out 11,000"]


def test_run_view_says_nothing_of_a_slot_wait_that_ends_at_once() -> None:
    out = io.StringIO()
    view = progress.RunView(live=False, out=out, now_ms=lambda: NOW, slot_wait_grace_s=0.3)
    view.submitted("quick", JOB_ID, client=None, follow=False)
    view.update(_update(_summary(cpb.RUNNING, slot_wait=cpb.SlotWait(slots_required=2, slots_allocated=0))))
    view.update(_update(_summary(cpb.RUNNING)))  # slots came within the grace
    slow = progress.RunView(live=False, out=io.StringIO(), now_ms=lambda: NOW, slot_wait_grace_s=0.3)
    slow.submitted("slow", JOB_ID, client=None, follow=False)
    slow.update(_update(_summary(cpb.RUNNING, slot_wait=cpb.SlotWait(slots_required=2, slots_allocated=1))))
    time.sleep(0.8)
    assert "waiting for slots" not in out.getvalue()
    assert "waiting for slots: 1 of 2 — add a TaskManager or lower parallelism" in slow.out.getvalue()
    view.stopped()
    slow.stopped()


def test_run_view_no_print_hides_the_jobs_lines() -> None:
    out = io.StringIO()
    view = progress.RunView(live=False, out=out, show_prints=False)
    view.submitted("j", JOB_ID, client=None, follow=False)
    view.update(_update(_summary(cpb.FINISHED), ["secret"], dropped=3))
    view.stopped()
    assert "secret" not in out.getvalue() and "not shown" not in out.getvalue()


def test_run_view_live_renders_vertices_on_a_terminal() -> None:
    out = io.StringIO()
    view = progress.RunView(live=True, out=out, now_ms=lambda: NOW, slot_wait_grace_s=0.0)
    view._start_live = lambda: None  # render only: no live thread on a StringIO
    view.submitted("wordcount", JOB_ID, client=None, follow=False)
    view.update(_update(_with_vertices(_summary(slot_wait=cpb.SlotWait(slots_required=5, slots_allocated=4)))))
    from rich.console import Console

    console = Console(file=io.StringIO(), width=140)
    console.print(view._render())
    text = console.file.getvalue()
    assert "wordcount" in text and "RUNNING" in text and "1:05" in text
    assert "Keyed Sum -> Sink: Print [3]" in text and "12,000" in text and "11,000" in text
    assert "waiting for slots: 4 of 5" in text
    view.stopped()


def test_detached_run_stops_the_program_once_the_job_id_is_printed() -> None:
    out = io.StringIO()
    view = progress.RunView(detached=True, live=False, out=out)
    with pytest.raises(JobDetached):
        view.submitted("j", JOB_ID, client=None, follow=False)
    assert out.getvalue() == f"Job j submitted: {JOB_ID.hex()}\n"


def test_an_exception_in_the_script_shows_the_users_frames_only(tmp_path, capsys) -> None:
    (tmp_path / "helper.py").write_text("def divide(x):\n    return 1 / x\n")
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent("""
        from helper import divide
        from millstream.datastream import StreamExecutionEnvironment

        env = StreamExecutionEnvironment.get_execution_environment()
        divide(0)
    """))
    assert cli.main(["plan", str(job)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):\n")
    files = [line.split('"')[1] for line in err.splitlines() if line.startswith('  File "')]
    assert files == [str(job), str(tmp_path / "helper.py")]
    assert err.rstrip().endswith("ZeroDivisionError: division by zero")


def test_an_error_raised_inside_millstream_shows_the_users_call_not_millstreams_frames(tmp_path, capsys) -> None:
    job = tmp_path / "job.py"
    job.write_text("from millstream.datastream import StreamExecutionEnvironment\n"
                   "StreamExecutionEnvironment.get_execution_environment().set_parallelism(-3)\n")
    assert cli.main(["plan", str(job)]) == 1
    err = capsys.readouterr().err
    files = [line.split('"')[1] for line in err.splitlines() if line.startswith('  File "')]
    assert files == [str(job)]
    assert "runpy" not in err and "millstream/" not in err.replace(str(tmp_path), "")


def test_a_syntax_error_in_the_script_is_shown_as_python_shows_it(tmp_path, capsys) -> None:
    job = tmp_path / "job.py"
    job.write_text("x = 1\ny = (\n")
    assert cli.main(["plan", str(job)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "runpy" not in err
    assert f'File "{job}", line 2' in err and "SyntaxError: '(' was never closed" in err


def test_lines_written_by_two_threads_never_mix() -> None:
    import threading

    out = io.StringIO()
    writer = progress.LineAtomicWriter(out)
    writer.write("SUM")
    worker = threading.Thread(target=lambda: writer.write("Job j: FINISHED\n"))
    worker.start()
    worker.join()
    writer.write(" 42\n")
    writer.write("tail")
    writer.flush()
    assert out.getvalue() == "Job j: FINISHED\nSUM 42\ntail"


@pytest.fixture
def restore_internal_logs():
    import logging

    from millstream.client.logs import INTERNAL_LOGGERS

    yield
    for name in INTERNAL_LOGGERS:
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
            handler.close()
        logger.setLevel(logging.NOTSET)
        logger.propagate = True


def test_internal_log_lines_go_to_the_file_not_to_the_users_root_logger(tmp_path, capsys, restore_internal_logs) -> None:
    import logging

    from millstream.client.logs import route_internal_logs

    seen: list[str] = []

    class Root(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    root = Root()
    logging.getLogger().addHandler(root)  # as logging.basicConfig(level=INFO) in a user's program
    try:
        path = tmp_path / "embedded.log"
        route_internal_logs(str(path), None)
        logging.getLogger("millstream.jobmanager.dispatcher.dispatcher").info("job accepted")
        logging.getLogger("py4j.clientserver").info("Closing down clientserver connection")
        logging.getLogger("user").warning("mine")
        assert seen == ["mine"] and capsys.readouterr().err == ""
        assert "job accepted" in path.read_text() and "Closing down clientserver connection" in path.read_text()

        route_internal_logs(str(path), logging.INFO)  # MILLSTREAM_LOG_LEVEL=INFO: stderr too, not twice
        logging.getLogger("millstream.client").info("now visible")
        err = capsys.readouterr().err
        assert err.count("now visible") == 1 and "INFO millstream.client: now visible" in err
        assert path.read_text().count("now visible") == 1 and seen == ["mine"]
    finally:
        logging.getLogger().removeHandler(root)


def test_a_bad_log_level_names_itself(monkeypatch, capsys) -> None:
    from millstream.client.logs import console_level

    monkeypatch.setenv("MILLSTREAM_LOG_LEVEL", "loud")
    assert cli.main(["list", "--jobmanager", "localhost:1"]) == 1
    assert capsys.readouterr().err == "millstream: error: MILLSTREAM_LOG_LEVEL: expected DEBUG, INFO, WARNING or ERROR, got 'loud'\n"
    monkeypatch.setenv("MILLSTREAM_LOG_LEVEL", "warning")
    assert console_level() == 30
    monkeypatch.delenv("MILLSTREAM_LOG_LEVEL")
    assert (console_level(0), console_level(1), console_level(2)) == (None, 20, 10)


def test_a_taskmanager_added_by_hand_is_recorded_only_for_the_clusters_own_jobmanager(tmp_path, monkeypatch) -> None:
    from millstream.client import session_cluster

    monkeypatch.setenv("MILLSTREAM_CLUSTER_DIR", str(tmp_path))
    assert not session_cluster.register_added_taskmanager("localhost:6123", pid=1)  # no cluster recorded
    (tmp_path / "cluster.json").write_text(json.dumps({"jobmanager": "localhost:41000", "processes": [], "pids": []}))
    assert not session_cluster.register_added_taskmanager("localhost:41001", pid=1)  # another JobManager
    assert not session_cluster.register_added_taskmanager(None, pid=1)
    assert session_cluster.register_added_taskmanager("127.0.0.1:41000")  # the same one, spelled differently
    state = json.loads((tmp_path / "cluster.json").read_text())
    assert state["pids"] == [__import__("os").getpid()]
    assert state["processes"][0]["identity"] == session_cluster.process_identity(state["pids"][0])


def test_status_shows_the_restarts_and_a_restarting_jobs_cause() -> None:
    restarting = _summary(cpb.RESTARTING, num_restarts=0, failure=cpb.JobFailure(message="RuntimeError: boom"))
    out = progress.status_report(restarting, NOW)
    assert "Status:      RESTARTING" in out and "Restarts:    0" in out and "Root cause: RuntimeError: boom" in out
    again = progress.status_report(_summary(cpb.RUNNING, num_restarts=3), NOW)
    assert "Restarts:    3" in again
    assert not any(line.startswith("Restarts") for line in progress.status_report(_summary(), NOW))
    assert progress.summary_json(_summary(num_restarts=2), NOW)["num_restarts"] == 2


def test_status_shows_checkpoint_figures_and_json_has_them() -> None:
    from millstream.client.progress import checkpoint_lines, summary_json
    from millstream.proto import cluster_pb2 as cpb

    summary = cpb.JobSummary(job_id=b"\x01" * 16, job_name="j", status=cpb.JobStatus.Value("RUNNING"))
    assert checkpoint_lines(summary) == [] and summary_json(summary, 0)["checkpoints"] is None
    summary.checkpoints.CopyFrom(cpb.CheckpointSummary(
        interval_ms=1500, directory="/chk/j", num_completed=4, num_failed=1, last_completed_id=5,
        last_duration_ms=30, last_size_bytes=2048, last_completed_at_ms=1_700_000_000_000,
        last_failure_reason="CHECKPOINT_EXPIRED", last_failure_message="too slow",
        latest_restored_id=3, latest_restored_at_ms=1_700_000_000_000, latest_restored_path="/chk/j/chk-3"))
    text = "\n".join(checkpoint_lines(summary))
    assert "4 completed, 1 failed, 0 in progress (every 1.5 s, in /chk/j)" in text
    assert "#5, 2.0 KB in 30 ms" in text and "CHECKPOINT_EXPIRED: too slow" in text and "#3 at" in text
    doc = summary_json(summary, 0)["checkpoints"]
    assert doc["last_completed"] == {"id": 5, "duration_ms": 30, "size_bytes": 2048, "completed_at_ms": 1_700_000_000_000}
    assert doc["latest_restore"]["path"] == "/chk/j/chk-3" and doc["last_failure"]["reason"] == "CHECKPOINT_EXPIRED"
