"""Spark's Python daemon (``spark.python.daemon.module``) with Millstream's task modules loaded.

Spark forks every Python worker from one daemon process per executor. pyspark's daemon imports
nothing before it forks, so each new worker imported Millstream's task code on its own (~1 s of
CPU each, four at once for a parallelism-2 job). Imported here once, every fork has it. Those
imports start no thread (a test checks it): forking a process with threads is what pyspark's
daemon avoids by importing late.
"""
from __future__ import annotations

import millstream.taskmanager.task_body  # noqa: F401 (the body every worker runs: run_task and its imports)
from pyspark.daemon import manager

if __name__ == "__main__":
    manager()
