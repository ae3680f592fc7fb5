"""Spark's Python daemon (``spark.python.daemon.module``) with Millstream's task modules loaded.

Spark forks every Python worker from one daemon process per executor. pyspark's daemon imports
nothing before it forks, so each new worker imported Millstream's task code on its own (~1 s of
CPU each, four at once for a parallelism-2 job). Imported here once, every fork has it. Those
imports start no thread (a test checks it): forking a process with threads is what pyspark's
daemon avoids by importing late.

The daemon also sets the workers' garbage collector for streaming (:data:`GC_THRESHOLDS`).
"""
from __future__ import annotations

import gc

import millstream.taskmanager.task_body  # noqa: F401 (the body every worker runs: run_task and its imports)
from pyspark.daemon import manager

# A task allocates a tuple or two per record, nearly all freed by reference counting, yet CPython's
# defaults (700, 10, 10) run a young collection every 700 container allocations, a middle one every
# 10 of those and a full one every 100 (once a quarter of the old objects is new), each traversing
# what survived: the window panes, the buffers in flight, the job's state. 50,000 keeps the older
# generations' ratios and bounds what cyclic garbage waits to 50,000 objects. The windows benchmark,
# 3 alternating runs: 8.4 / 8.2 / 7.8 s before, 7.6 / 7.4 / 7.2 s with this and the freeze below.
GC_THRESHOLDS = (50_000, 10, 10)


def tune_gc() -> None:
    """Before forking: the imported modules' objects move to the permanent generation (no
    collection traverses them again, and the workers' pages stay shared with the daemon), and
    the young generation's threshold rises to :data:`GC_THRESHOLDS`."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


if __name__ == "__main__":
    tune_gc()
    manager()
