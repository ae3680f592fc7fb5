"""The Spark daemon module imports Millstream's task code before it forks workers: safe only if
those imports start no thread (a fork copies just the forking one, with locks held by others)."""
from __future__ import annotations

import subprocess
import sys

from millstream.taskmanager.spark import host


def test_the_daemon_module_is_spark_s_and_its_imports_start_no_thread() -> None:
    assert host._DEFAULT_CONF["spark.python.daemon.module"] == "millstream.taskmanager.spark.daemon"
    probe = ("import os, sys, millstream.taskmanager.spark.daemon as d; "
             "print(len(os.listdir('/proc/self/task')), 'millstream.taskmanager.task_body' in sys.modules, callable(d.manager))")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["1", "True", "True"]
