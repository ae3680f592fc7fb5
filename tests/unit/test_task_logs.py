"""`millstream logs`: which subtasks a request names, the errors for what does not exist, the
JobManager's answers when a TaskManager is gone, and the CLI's argument errors."""
from __future__ import annotations

import asyncio

import grpc
import pytest

from millstream.client.cli import main
from millstream.client.progress import format_outputs
from millstream.jobmanager.task_logs import SubtaskAttempt, TaskLogError, TaskLogs, select_attempts
from millstream.proto import cluster_pb2 as cpb

SOURCE, MAP = bytes.fromhex("aa" * 16), bytes.fromhex("bb" * 16)


def _attempts() -> list[SubtaskAttempt]:
    return [SubtaskAttempt(SOURCE, "Source: Collection", 0, 1, 0, b"s0", "FINISHED", "tm-1")] + [
        SubtaskAttempt(MAP, "Map -> Sink: Print", i, 2, 1, b"m%d" % i, "RUNNING", "tm-%d" % (i + 1)) for i in range(2)]


def test_every_subtask_unless_one_is_named() -> None:
    assert len(select_attempts(_attempts(), "", None)) == 3
    assert [a.attempt_id for a in select_attempts(_attempts(), "map", None)] == [b"m0", b"m1"]
    assert [a.attempt_id for a in select_attempts(_attempts(), MAP.hex(), 1)] == [b"m1"]
    assert [a.attempt_id for a in select_attempts(_attempts(), "Source: Collection", 0)] == [b"s0"]
    assert [a.attempt_id for a in select_attempts(_attempts(), "", 0)] == [b"s0", b"m0"]


def test_an_unknown_vertex_names_the_job_s_vertices() -> None:
    with pytest.raises(TaskLogError, match=r"no vertex 'Filter'; its vertices: 'Source: Collection' \(aa") as info:
        select_attempts(_attempts(), "Filter", None)
    assert info.value.code is grpc.StatusCode.NOT_FOUND


def test_an_ambiguous_vertex_asks_for_the_id() -> None:
    with pytest.raises(TaskLogError, match="matches several vertices") as info:
        select_attempts(_attempts(), "n", None)  # in "Collection" and "Sink: Print"
    assert info.value.code is grpc.StatusCode.INVALID_ARGUMENT


def test_a_subtask_out_of_range_names_the_range() -> None:
    with pytest.raises(TaskLogError, match=r"No subtask 2 \(subtasks count from 0; 'Map -> Sink: Print': 0..1\)"):
        select_attempts(_attempts(), "Map", 2)


class _Stub:
    def __init__(self, answers: dict[bytes, cpb.TaskOutputResponse]) -> None:
        self.answers = answers

    async def get_task_output(self, request: cpb.TaskOutputRequest, timeout: float) -> cpb.TaskOutputResponse:
        return self.answers.get(request.execution_attempt_id, cpb.TaskOutputResponse(found=False))


def test_outputs_say_when_a_taskmanager_is_gone_or_forgot_the_attempt() -> None:
    stub = _Stub({b"m0": cpb.TaskOutputResponse(found=True, lines=["t INFO stdout: hi"], dropped_lines=2)})
    addresses = {"tm-1": "h:1"}  # tm-2 is gone
    logs = TaskLogs(lambda job_id: ("my job", _attempts()), addresses.get, lambda address: stub)
    response = asyncio.run(logs.task_outputs(cpb.TaskOutputsRequest(job_id=b"j" * 16)))
    source, m0, m1 = response.subtasks
    assert not source.available and "no longer keeps this attempt's output" in source.unavailable_reason
    assert m0.available and list(m0.lines) == ["t INFO stdout: hi"] and m0.dropped_lines == 2
    assert not m1.available and m1.unavailable_reason == "TaskManager tm-2 is gone (no longer registered): its output is lost"
    text = "\n".join(format_outputs(response))
    assert "==> Map -> Sink: Print (1/2) subtask 0, attempt 1, RUNNING on tm-1 <==" in text
    assert "(2 earlier lines dropped" in text and "t INFO stdout: hi" in text
    assert "(no output: TaskManager tm-2 is gone" in text


def test_an_unknown_taskmanager_is_not_found() -> None:
    logs = TaskLogs(lambda job_id: ("j", []), {}.get, lambda address: None)
    with pytest.raises(TaskLogError, match="TaskManager tm-9 not found"):
        asyncio.run(logs.list_files("tm-9"))


@pytest.mark.parametrize("argv, message", [
    (["logs", "xyz"], "Not a job id (32 hex characters): xyz"),
    (["logs", "ab" * 16, "--subtask", "-1"], "subtasks count from 0, got -1"),
    (["logs", "ab" * 16, "--subtask", "one"], "expected a subtask index (0, 1, ...), got 'one'"),
])
def test_cli_argument_errors_name_the_argument(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    assert code == 2
    assert message in capsys.readouterr().err
