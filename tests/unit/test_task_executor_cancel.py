"""A CancelTask that overtakes its SubmitTask (two independent RPCs) must still cancel the task:
the TaskExecutor remembers it, reports the task CANCELED when it arrives and never starts it."""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from millstream.proto import cluster_pb2 as cpb
from millstream.proto import jobgraph_pb2 as pb
from millstream.taskmanager.spark.host import TaskExit
from millstream.taskmanager.task_executor import TaskExecutor

JOB, ALLOCATION = b"j" * 16, b"a" * 16


class FakeSpark:
    master = "local[2]"
    placement = "task"
    max_concurrent_tasks = 4

    def __init__(self) -> None:
        self.submitted: list[str] = []

    def running_task_ids(self) -> list[str]:
        return []

    def submit(self, task_id: str, payload: bytes, on_event: Any, secrets: Any = None, slot: Any = None) -> Any:
        self.submitted.append(task_id)
        raise AssertionError("a cancelled task must not start")


def _tdd(attempt: bytes) -> cpb.TaskDeploymentDescriptor:
    return cpb.TaskDeploymentDescriptor(job_id=JOB, execution_attempt_id=attempt, allocation_id=ALLOCATION,
                                        vertex=pb.JobVertex(name="Map", parallelism=1), subtask_index=0)


def test_a_cancel_that_overtakes_the_submission_cancels_the_task(tmp_path: Path) -> None:
    async def body() -> None:
        spark = FakeSpark()
        te = TaskExecutor("tm-1", 1, spark, 5.0, 4 << 20, str(tmp_path), "127.0.0.1:1")  # type: ignore[arg-type]
        reported: list[Any] = []

        async def forward(attempt_id: bytes, runtime: Any) -> None:
            reported.append(await runtime.events.get())

        te._forward_events = forward  # type: ignore[method-assign]
        te.slots.allocate_slot(0, JOB, ALLOCATION, "127.0.0.1:1")
        te.cancel_task(b"late-attempt")
        await te.submit_task(_tdd(b"late-attempt"))
        await te.submit_task(_tdd(b"other-attempt"))  # not cancelled: it starts
        await asyncio.sleep(0.05)
        assert reported[0] == TaskExit("CANCELED")
        assert spark.submitted == [b"other-attempt".hex()]

    asyncio.run(body())
