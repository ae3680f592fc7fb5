"""An embedded cluster: a JobManager and TaskManagers on a private event loop in this process.

``python job.py`` without ``MILLSTREAM_JOBMANAGER`` runs its job on one (one TaskManager with a
local Spark), through the same gRPC path as a real cluster, and stops it afterwards (PyFlink's
local mode). Tests use it as a harness: more TaskManagers, sharing one SparkHost.
"""
from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from typing import Any

from millstream.runtime import config as cfg


class MiniCluster:
    def __init__(self, configuration: cfg.Configuration, num_slots: int, spark: Any = None) -> None:
        self.config = configuration.copy()
        self.config.set(cfg.JOBMANAGER_RPC_ADDRESS, "127.0.0.1")
        self.config.set(cfg.JOBMANAGER_RPC_PORT, 0)
        self.config.set(cfg.TASKMANAGER_RPC_PORT, 0)
        self.config.set(cfg.TASKMANAGER_NUM_TASK_SLOTS, max(1, num_slots))
        self.address = ""
        self._spark = spark
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
        from millstream.jobmanager.jobmanager import JobManager
        from millstream.taskmanager.taskmanager import spark_host_for

        if self._spark is None:
            # Spark forks its JVM: do it before any gRPC server or channel runs in this process,
            # since a fork among gRPC's threads can break the child (JAVA_GATEWAY_EXITED).
            self._spark = self._owned_spark = spark_host_for(self.config)
            self._spark.start()
        self._thread.start()
        try:
            self.job_manager = self.call(JobManager(self.config).start())
            self.address = self.job_manager.address
            for _ in range(task_managers):
                self.add_task_manager()
        except BaseException:
            self.close()
            raise
        return self

    def add_task_manager(self, num_slots: int | None = None) -> Any:
        from millstream.taskmanager.taskmanager import TaskManager

        config = self.config.copy()
        if num_slots is not None:
            config.set(cfg.TASKMANAGER_NUM_TASK_SLOTS, num_slots)
        tm = self.call(TaskManager(config, self.address, spark=self._spark).start())
        self.task_managers.append(tm)
        return tm

    def stop_task_manager(self, tm: Any) -> None:
        self.task_managers.remove(tm)
        self.call(tm.stop(), timeout=60)

    def close(self) -> None:
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
        if self._owned_spark is not None:
            self._owned_spark.stop()
            self._owned_spark = None

    def __enter__(self) -> "MiniCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
