"""CLI papercuts a new user meets: output meant for a pipe, and -D typos on `cluster start`."""
from __future__ import annotations

import os

import textwrap

import grpc

from millstream.client import cli

JOB = textwrap.dedent("""
    from millstream.datastream import StreamExecutionEnvironment

    print("Executing with the default input data set.")  # as PyFlink's examples do
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1, 2, 3]).map(lambda x: x + 1).print()
    env.execute("printing script")
""")


def test_plan_dot_stdout_is_only_the_graph_the_scripts_prints_go_to_stderr(tmp_path, capsys) -> None:
    # `millstream plan job.py --dot | dot -Tpng` must get a valid graph even when the script prints
    script = tmp_path / "job.py"
    script.write_text(JOB)
    assert cli.main(["plan", str(script), "--dot"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("digraph "), captured.out
    assert "Executing with the default input" in captured.err


def test_cluster_start_names_a_misspelled_key_on_the_console(monkeypatch, capsys) -> None:
    started: list[list[str]] = []

    def fake_start(taskmanagers, slots, port, dynamic, config_file):  # noqa: ANN001, ANN202
        started.append(list(dynamic))
        return {"jobmanager": f"localhost:{port}", "log_dir": "/tmp/log"}

    from millstream.client import session_cluster

    monkeypatch.setattr(session_cluster, "start", fake_start)
    assert cli.main(["cluster", "start", "--port", "0", "-D", "heartbeat.intervall=5s", "-D", "heartbeat.timeout=60s"]) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "heartbeat" in line]
    assert len(lines) == 1, err  # the typo only, once, in one line
    assert "'heartbeat.intervall'" in lines[0] and "did you mean 'heartbeat.interval'?" in lines[0]
    assert started == [["heartbeat.intervall=5s", "heartbeat.timeout=60s"]]


class _FakeRpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


def test_a_job_the_cluster_does_not_know_is_one_plain_line(monkeypatch, capsys) -> None:
    # the JobManager's answer is the message; gRPC's status name is plumbing the user did not ask for
    def unknown(args):  # noqa: ANN001, ANN202
        raise _FakeRpcError(grpc.StatusCode.NOT_FOUND, "No job with id 0123456789abcdef0123456789abcdef.")

    monkeypatch.setattr(cli, "_status", unknown)
    assert cli.main(["status", "0123456789abcdef0123456789abcdef"]) == 1
    assert capsys.readouterr().err == "millstream: error: No job with id 0123456789abcdef0123456789abcdef.\n"


def test_a_transport_failure_keeps_its_status_name(monkeypatch, capsys) -> None:
    def slow(args):  # noqa: ANN001, ANN202
        raise _FakeRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")

    monkeypatch.setattr(cli, "_status", slow)
    assert cli.main(["status", "0123456789abcdef0123456789abcdef"]) == 1
    assert "DEADLINE_EXCEEDED" in capsys.readouterr().err


def test_run_shows_a_misspelled_configuration_key_on_the_console(tmp_path, monkeypatch, capsys) -> None:
    # `millstream run` keeps Millstream's log lines in a file, but a key no option has is the user's
    # mistake: it is reported where the user looks ("did you mean ...?")
    monkeypatch.setenv("MILLSTREAM_LOG_DIR", str(tmp_path / "log"))
    monkeypatch.delenv("MILLSTREAM_LOG_LEVEL", raising=False)
    monkeypatch.setenv("MILLSTREAM_CONF_PIPELINE_MAX_PARALELISM", "64")
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        from millstream.common import Configuration
        from millstream.datastream import StreamExecutionEnvironment

        conf = Configuration()
        conf.set_string("parallelism.defualt", "4")
        StreamExecutionEnvironment.get_execution_environment(conf)
    """))

    class _Reachable:  # the script never submits: only run's "is a JobManager there" check is faked
        def close(self) -> None:
            pass

    monkeypatch.setattr(cli, "_client", lambda args: _Reachable())
    import logging

    from millstream.client.logs import INTERNAL_LOGGERS

    loggers = [logging.getLogger(name) for name in INTERNAL_LOGGERS]
    saved = [(lg.level, list(lg.handlers), lg.propagate) for lg in loggers]
    environment = dict(os.environ)
    try:
        cli.main(["run", str(script)])
    finally:  # run routed Millstream's loggers for this process: give later tests theirs back
        # run also sets MILLSTREAM_JOBMANAGER (and -D options) in os.environ for its script: left
        # set, every later job of this pytest process would go to that address
        os.environ.clear()
        os.environ.update(environment)
        for lg, (level, handlers, propagate) in zip(loggers, saved):
            for handler in lg.handlers:
                if handler not in handlers:
                    handler.close()
            lg.setLevel(level)
            lg.handlers[:] = handlers
            lg.propagate = propagate
    err = capsys.readouterr().err
    assert "'parallelism.defualt'" in err and "did you mean 'parallelism.default'?" in err, err
    # the environment is read more than once (the JobManager's address, the job's defaults): said once
    assert err.count("did you mean 'pipeline.max-parallelism'?") == 1, err
