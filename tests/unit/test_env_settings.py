"""PyFlink's environment settings beyond parallelism: python requirements / executable, cached
files, the default local parallelism, the changelog flag, add_jars / add_classpaths."""
from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import pytest

from millstream.datastream import StreamExecutionEnvironment
from millstream.taskmanager import python_env


def test_python_executable_must_be_the_workers_own(tmp_path: Path) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_python_executable("/opt/other/python3")
    conf = env.get_configuration().to_dict()
    assert conf["python.executable"] == "/opt/other/python3"
    with pytest.raises(python_env.PythonEnvironmentError, match="Spark workers run .*cannot choose another"):
        python_env.check_executable(conf)
    link = tmp_path / "python"
    link.symlink_to(sys.executable)
    python_env.check_executable({"python.executable": str(link)})  # the same interpreter: fine
    python_env.check_executable({})
    with pytest.raises(ValueError, match="path of a Python interpreter"):
        env.set_python_executable("")


def test_register_cached_file(tmp_path: Path) -> None:
    data = tmp_path / "data.csv"
    data.write_text("x\n")
    env = StreamExecutionEnvironment.get_execution_environment()
    env.register_cached_file(str(data), "data")
    assert env.get_cached_files() == [("data", str(data))]
    assert env.get_configuration().to_dict()["pipeline.cached-files"] == f"name:data,path:{data},executable:false"
    with pytest.raises(ValueError, match="registered already"):
        env.register_cached_file(str(data), "data")
    with pytest.raises(FileNotFoundError, match="no such file"):
        env.register_cached_file(str(tmp_path / "nope"), "other")


def test_changelog_flag_is_undefined_until_set_and_logged(caplog) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    assert env.is_changelog_state_backend_enabled() is None
    with caplog.at_level(logging.INFO):
        env.enable_changelog_state_backend(True)
    assert env.is_changelog_state_backend_enabled() is True and "full snapshots" in caplog.text
    env.enable_changelog_state_backend(False)
    assert env.is_changelog_state_backend_enabled() is False
    with pytest.raises(TypeError):
        env.enable_changelog_state_backend("yes")  # type: ignore[arg-type]


def test_add_jars_and_classpaths_are_recorded_and_logged_as_ignored(caplog) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    with caplog.at_level(logging.INFO):
        env.add_jars("file:///a.jar", "file:///b.jar").add_jars("file:///a.jar")
        env.add_classpaths("file:///classes/")
    conf = env.get_configuration().to_dict()
    assert conf["pipeline.jars"] == "file:///a.jar;file:///b.jar" and conf["pipeline.classpaths"] == "file:///classes/"
    assert "add_jars(file:///a.jar, file:///b.jar): ignored: a Millstream job has no JVM code" in caplog.text
    assert "add_classpaths(file:///classes/): ignored" in caplog.text
    assert not [r for r in caplog.records if r.levelno > logging.INFO]


def test_the_task_sees_its_python_executable_in_the_python_variable(monkeypatch) -> None:
    # PyFlink's Python workers find the job's python.executable in os.environ["python"]
    monkeypatch.setenv("python", "/usr/bin/worker-own")
    with python_env.executable_variable({"python.executable": "/opt/job/python3"}):
        assert os.environ["python"] == "/opt/job/python3"
    assert os.environ["python"] == "/usr/bin/worker-own"  # only for the task
    monkeypatch.delenv("python")
    with python_env.executable_variable({"python.executable": "/opt/job/python3"}):
        assert os.environ["python"] == "/opt/job/python3"
    assert "python" not in os.environ
    with python_env.executable_variable({}):
        assert "python" not in os.environ
