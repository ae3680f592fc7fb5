"""An embedded cluster: a JobManager and TaskManagers on a private event loop in this process.

``python job.py`` without ``MILLSTREAM_JOBMANAGER`` runs its job on one (one TaskManager with a
local Spark), through the same gRPC path as a real cluster, and stops it afterwards (PyFlink's
local mode). Tests use it as a harness: more TaskManagers, sharing one SparkHost.
"""
from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import sys
import logging
import threading
from concurrent.futures import Future
from typing import Any, Iterator

from millstream.client.logs import console_level, new_log_file, route_internal_logs, stderr_redirected_to
from millstream.runtime import config as cfg

# lazy: the engine (JobManager, TaskManager, Spark) is imported when the embedded cluster starts: a
# program that names a cluster never loads it.

log = logging.getLogger(__name__)


class MiniCluster:
    def __init__(self, configuration: cfg.Configuration, num_slots: int, spark: Any = None, embedded: bool = False,
                 jvm_stderr: str | None = None, warm_up: str = "wait") -> None:
        """``embedded``: the cluster of a user program (``python job.py``), whose TaskManagers print
        the job's lines straight to this process's console and do not also stream them to the
        client (which would print them twice); a test's cluster streams them as a real one does.
        ``jvm_stderr``: a file that gets the stderr of the Spark JVM this cluster starts (its
        banner and log4j lines); None: this process's stderr. ``warm_up``: how a Spark this cluster
        starts warms its workers (SparkHost.start_in_background): "wait" before the cluster is up."""
        self.jvm_stderr = jvm_stderr
        self._warm_up = warm_up
        self.config = configuration.copy()
        self.config.set(cfg.JOBMANAGER_RPC_ADDRESS, "127.0.0.1")
        self.config.set(cfg.JOBMANAGER_RPC_PORT, 0)
        self.config.set(cfg.TASKMANAGER_RPC_PORT, 0)
        self.config.set(cfg.TASKMANAGER_NUM_TASK_SLOTS, max(1, num_slots))
        self.address = ""
        self._spark = spark
        self._embedded = embedded
        self._owned_spark: Any = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="millstream-minicluster", daemon=True)
        self.job_manager: Any = None
        self.task_managers: list[Any] = []

    def call(self, coro: Any, timeout: float | None = None) -> Any:
        """Runs a coroutine on the cluster's event loop and returns its result."""
        future: Future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout)

    def start(self, task_managers: int = 1) -> "MiniCluster":
        from millstream.taskmanager.spark.host_config import spark_host_for

        if self._spark is None:
            # Spark forks its JVM: that fork happens here, before any gRPC server or channel runs in
            # this process (a fork among gRPC's threads can break the child: JAVA_GATEWAY_EXITED);
            # the session then boots on a thread of its own while the JobManager starts.
            self._spark = self._owned_spark = spark_host_for(self.config)
            with self._noting_spark_output(), stderr_redirected_to(self.jvm_stderr):
                self._spark.start_in_background(warm_up=self._warm_up)
        self._thread.start()
        try:
            from millstream.jobmanager.jobmanager import JobManager  # imported while Spark boots

            self.job_manager = self.call(JobManager(self.config).start())
            self.address = self.job_manager.address
            if self._owned_spark is not None:
                with self._noting_spark_output():
                    self._owned_spark.wait_started()
            for _ in range(task_managers):
                self.add_task_manager()
        except BaseException:
            self.close()
            raise
        return self

    @contextlib.contextmanager
    def _noting_spark_output(self) -> Iterator[None]:
        try:
            yield
        except Exception as exc:
            # what Spark printed on its way down is in the file, not on the console (notes: Python 3.11+)
            if self.jvm_stderr and sys.version_info >= (3, 11):
                exc.add_note(f"Spark's output: {self.jvm_stderr}")
            raise

    def add_task_manager(self, num_slots: int | None = None) -> Any:
        from millstream.taskmanager.taskmanager import TaskManager

        config = self.config.copy()
        if num_slots is not None:
            config.set(cfg.TASKMANAGER_NUM_TASK_SLOTS, num_slots)
        tm = self.call(TaskManager(config, self.address, spark=self._spark, forward_printed_lines=not self._embedded).start())
        self.task_managers.append(tm)
        return tm

    def close(self, at_exit: bool = False) -> None:
        """Stops the TaskManagers, the JobManager and an owned Spark. ``at_exit``: the interpreter
        is exiting, so the Spark JVM is left to end by itself (it exits, running Spark's shutdown
        hook, when this process closes its stdin), which saves the ~1 s a graceful stop takes."""
        for component in [*reversed(self.task_managers), self.job_manager]:
            if component is not None:
                try:
                    self.call(component.stop(), timeout=60)
                except Exception:  # best effort: keep stopping the rest
                    pass
        self.task_managers.clear()
        self.job_manager = None
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        if self._owned_spark is not None and not at_exit:
            self._owned_spark.stop()
        self._owned_spark = None

    def __enter__(self) -> "MiniCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- the embedded cluster of a user program -----------------------------------------------------------

_embedded: MiniCluster | None = None
_embedded_key: tuple[dict[str, Any], int] | None = None
_embedded_lock = threading.Lock()
_atexit_registered = False
starts = 0  # embedded clusters started by this process (tests check that executes reuse one)


def embedded_cluster(configuration: cfg.Configuration, slots: int) -> MiniCluster:
    """The process's embedded cluster, started at the first ``env.execute()`` and reused by later ones.

    A process holds one Spark for its whole life: a SparkContext stopped and started again in a
    process whose gRPC threads already run crashed it (SIGABRT/SIGSEGV) in about 3 % of programs
    with several ``execute()`` calls. It is replaced only when a job needs more slots or another
    configuration, and stopped when the interpreter exits."""
    global _embedded, _embedded_key, _atexit_registered, starts
    with _embedded_lock:
        wanted = configuration.to_dict()
        if _embedded is not None and _embedded_key is not None:
            config, have = _embedded_key
            if config == wanted and have >= slots:
                return _embedded
            log.info("replacing the embedded cluster: the job needs %d slots (it has %d) or another configuration", slots, have)
            _embedded.close()
            _embedded = _embedded_key = None
        # As many slots as cores at least (the local default parallelism), so a program's later jobs
        # at other parallelisms fit the running cluster instead of replacing its Spark.
        slots = max(slots, os.cpu_count() or 1)
        # Its job comes at once: warming Spark's workers first delayed that job by 3-4 s, warming
        # them meanwhile slowed its first tasks (2.4 s instead of 1.7 s to a one-record job's end).
        cluster = MiniCluster(configuration, slots, embedded=True, jvm_stderr=_quiet_console(), warm_up="skip").start()
        starts += 1
        _embedded, _embedded_key = cluster, (wanted, slots)
        if not _atexit_registered:
            _register_exit_hook()
            _atexit_registered = True
        return cluster


log_file: str | None = None  # where the embedded cluster's (and its Spark's) log lines go


def _quiet_console() -> str | None:
    """Keeps the user's console for the user: Millstream's, py4j's and Spark's log lines go to a log
    file (and to stderr too at ``MILLSTREAM_LOG_LEVEL``). Returns the file for the JVM's stderr,
    None when the user asked to see the logs."""
    global log_file
    level = console_level()
    if log_file is None:
        log_file = new_log_file("embedded")
    route_internal_logs(log_file, level)
    return None if level is not None else log_file


def _register_exit_hook() -> None:
    """Closes the embedded cluster when the program ends, while thread pools still run.

    An ``atexit`` hook runs too late: at interpreter exit concurrent.futures shuts every thread
    pool down first (its hook on threading's shutdown), so the cluster's stop, which hands blocking
    work (checkpoint files, HA storage) to ``asyncio.to_thread``, failed with "cannot schedule new
    futures after interpreter shutdown" on the program's stderr. Registered on the same threading
    hook after concurrent.futures (hooks run in reverse order), ours runs before it."""
    register = getattr(threading, "_register_atexit", None)
    if register is None:  # not CPython's threading: the plain atexit hook, as before
        atexit.register(close_embedded_cluster, at_exit=True)
        return
    import concurrent.futures.thread  # registers its hook first, whatever imported what

    def close_at_exit() -> None:
        # Python joins the program's own non-daemon threads (an execute() still waiting for its job)
        # only after these hooks: wait for them here as before, then close. Thread pools' workers
        # are non-daemon too, but end only in concurrent.futures' hook, after this one.
        workers = set(getattr(concurrent.futures.thread, "_threads_queues", {}))
        for thread in threading.enumerate():
            if thread is not threading.current_thread() and not thread.daemon and thread not in workers:
                thread.join()
        close_embedded_cluster(at_exit=True)

    register(close_at_exit)


def close_embedded_cluster(at_exit: bool = False) -> None:
    global _embedded, _embedded_key
    with _embedded_lock:
        cluster, _embedded, _embedded_key = _embedded, None, None
    if cluster is not None:
        cluster.close(at_exit=at_exit)
