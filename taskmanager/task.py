"""The body of a deployed task: runs inside a PySpark executor's Python worker.

It unpacks the TaskDeploymentDescriptor, makes the job's artifacts importable, builds the operator
chain and drives it for the task's whole life. Everything it tells the TaskManager (state changes,
printed lines, collected records) travels in order over the worker's control channel; the final
FINISHED / FAILED / CANCELED is the runner's TaskExit.
"""
from __future__ import annotations

import pickle
import sys
import threading
import time
from typing import Any

from millstream.proto import cluster_pb2 as cpb
from millstream.runtime.chain import OperatorChain
from millstream.runtime.keygroups import KeyGroupRange

# Messages from the worker to the TaskManager.
STATE = "state"        # ("state", "INITIALIZING" | "RUNNING")
PRINT = "print"        # ("print", [lines])
COLLECT = "collect"    # ("collect", collect_id, subtask_index, sequence, pickled list)

SOURCE_BATCH_SIZE = 1024


class WorkerTaskEnvironment:
    """What the chain sees of its task: subtask facts and the doors to the TaskManager."""

    def __init__(self, tdd: cpb.TaskDeploymentDescriptor, channel: Any) -> None:
        vertex = tdd.vertex
        self._channel = channel
        self.job_name = tdd.job_name
        self.task_name = vertex.name
        self.subtask_index = tdd.subtask_index
        self.parallelism = vertex.parallelism
        self.max_parallelism = vertex.max_parallelism
        self.attempt_number = tdd.attempt_number
        self.key_group_range = KeyGroupRange.of(tdd.key_group_start, tdd.key_group_end)
        self.runtime_mode = "BATCH" if tdd.execution_config.runtime_mode == 2 else "STREAMING"
        self.job_parameters = dict(tdd.execution_config.configuration)
        self.buffer_timeout_ms = tdd.execution_config.buffer_timeout_ms
        self.source_batch_size = SOURCE_BATCH_SIZE
        self._collect_sequence = 0

    def print_lines(self, lines: list[str], to_stderr: bool = False) -> None:
        self._channel.send((PRINT, lines, to_stderr))

    def emit_collect(self, collect_id: str, records: list) -> None:
        payload = pickle.dumps(records, protocol=pickle.HIGHEST_PROTOCOL)
        self._channel.send((COLLECT, collect_id, self.subtask_index, self._collect_sequence, payload))
        self._collect_sequence += 1

    def is_cancelled(self) -> bool:
        return self._channel.cancelled

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def wait_ms(self, timeout_ms: int) -> None:
        self._channel.wait_cancelled(timeout_ms / 1000)


def run_task(tdd_bytes: bytes, artifact_paths: list[str], channel: Any) -> None:
    tdd = cpb.TaskDeploymentDescriptor.FromString(tdd_bytes)
    for path in reversed(artifact_paths):
        if path not in sys.path:
            sys.path.insert(0, path)
    channel.send((STATE, "INITIALIZING"))
    env = WorkerTaskEnvironment(tdd, channel)
    if not tdd.vertex.is_source:
        raise NotImplementedError(
            f"Task {tdd.vertex.name} reads from other tasks; data exchange between tasks is not available yet"
        )
    chain = OperatorChain(tdd.vertex, env, {})

    def relay_cancel() -> None:  # a SourceFunction's run() only stops when told through cancel()
        while not channel.wait_cancelled(3600):
            pass
        chain.cancel()

    threading.Thread(target=relay_cancel, name="millstream-cancel-relay", daemon=True).start()
    chain.open()
    try:
        channel.send((STATE, "RUNNING"))
        chain.run_source()
        if not env.is_cancelled():
            chain.end_input()
    finally:
        chain.close()
