"""The FileSink with checkpointing is exactly-once, as Flink's FileSink: a part file becomes visible
only when a checkpoint covering it completes; a restore commits the restored checkpoint's files and
removes what the failed attempt wrote after it, so replayed records are never visible twice."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from millstream.datastream import StreamExecutionEnvironment
from millstream.datastream.connectors import RollingPolicy
from millstream.proto import cluster_pb2 as cpb
from millstream.proto import jobgraph_pb2 as pb
from millstream.runtime.operators.base import MapOperator, OperatorError
from millstream.runtime.operators.file_sink import FileSinkOperator
from millstream.runtime.task.environment import ManualClock, SimpleTaskEnvironment
from tests.unit.test_file_sink import UUID, files, flat_sink
from tests.unit.test_runtime_chain import make_chain, vertex


def visible(base: Path) -> list[str]:
    return [n for n in files(base) if not Path(n).name.startswith(".")]


def hidden(base: Path) -> list[str]:
    return [n for n in files(base) if Path(n).name.startswith(".")]


def visible_lines(base: Path) -> list[str]:
    return sorted(line for n in visible(base) for line in (base / n).read_text().splitlines())


def part_number(name: str) -> int:
    return int(re.sub(r"\.inprogress\..*$", "", Path(name).name).rsplit("-", 1)[1])


class Sinks:
    """Builds FileSink subtasks of one job graph (one operator id), the way a task would."""

    def __init__(self, env: StreamExecutionEnvironment, base: Path, parallelism: int = 1, **builder: Any) -> None:
        env.set_parallelism(parallelism)
        env.from_sequence(1, 2).sink_to(flat_sink(base, **builder))  # a parallel source: one chain per subtask
        self.vertex = vertex(env, "Sequence")
        self.clock = ManualClock(10_000)

    def new(self, subtask: int = 0, state: Any = None, checkpointing: bool = True, job_id: str = "",
            prepare: Any = None) -> FileSinkOperator:
        """A fresh subtask (a new attempt): restored from ``state`` before ``open()`` when given;
        ``prepare(sink)`` first, when given."""
        run = make_chain(self.vertex, subtask, clock=self.clock, checkpointing_enabled=checkpointing, job_id=job_id)
        sink = run.chain.operators[-1]
        assert isinstance(sink, FileSinkOperator)
        if prepare is not None:
            prepare(sink)
        if state is not None:
            sink.initialize_state(state)
        run.chain.open()
        return sink


@pytest.fixture
def base(tmp_path: Path) -> Path:
    return tmp_path / "out"


def test_nothing_is_visible_before_the_checkpoint_completes(env: StreamExecutionEnvironment, base: Path) -> None:
    sink = Sinks(env, base).new()
    sink.process_batch(["a", "b"])
    sink.flush()
    state = sink.snapshot_state(1)
    assert visible(base) == [] and len(hidden(base)) == 1
    [(hidden_path, final_path)] = state["pending"][1].items()
    assert Path(hidden_path).exists() and not Path(final_path).exists()
    sink.notify_checkpoint_complete(1)
    [name] = visible(base)
    assert re.fullmatch(f"part-{UUID}-0-0", name) and (base / name).read_text() == "a\nb\n"
    assert hidden(base) == []


def test_a_completed_checkpoint_commits_only_files_of_checkpoints_up_to_its_id(
    env: StreamExecutionEnvironment, base: Path
) -> None:
    sink = Sinks(env, base).new()
    for cid, record in enumerate("abcd", start=1):
        sink.process_batch([record])
        sink.snapshot_state(cid)  # each checkpoint rolls the open file: one part per checkpoint
    sink.notify_checkpoint_complete(1)
    assert visible_lines(base) == ["a"]
    sink.notify_checkpoint_complete(2)
    assert visible_lines(base) == ["a", "b"]
    sink.notify_checkpoint_complete(4)  # 3's notification never came: 4 subsumes it
    assert visible_lines(base) == ["a", "b", "c", "d"]
    assert hidden(base) == []
    sink.notify_checkpoint_complete(4)  # a repeated notification commits nothing twice
    assert visible_lines(base) == ["a", "b", "c", "d"]


def test_files_rolled_on_size_become_visible_only_with_the_covering_checkpoint(
    env: StreamExecutionEnvironment, base: Path
) -> None:
    sink = Sinks(env, base, with_rolling_policy=RollingPolicy.default_rolling_policy(part_size=10)).new()
    for i in range(3):
        sink.process_batch([f"line{i}", f"more{i}"])  # 12 bytes: the next batch rolls the file
    assert visible(base) == [] and len(hidden(base)) == 3  # two rolled (pending), one open
    state = sink.snapshot_state(7)
    assert len(state["pending"][7]) == 3
    sink.process_batch(["after"])  # after the barrier: belongs to the next checkpoint
    sink.notify_checkpoint_complete(7)
    assert visible_lines(base) == sorted(f"{w}{i}" for i in range(3) for w in ("line", "more"))
    assert [part_number(n) for n in hidden(base)] == [3]


def test_files_rolled_on_time_stay_pending(env: StreamExecutionEnvironment, base: Path) -> None:
    policy = RollingPolicy.default_rolling_policy(inactivity_interval=1_000, rollover_interval=3_600_000)
    sinks = Sinks(env, base, with_rolling_policy=policy, with_bucket_check_interval=1_000)
    sink = sinks.new()
    sink.process_batch(["a"])
    sinks.clock.advance(5_000)
    sink.flush()  # the inactivity roll: closed, but not visible
    sink.process_batch(["b"])
    assert visible(base) == [] and sorted(part_number(n) for n in hidden(base)) == [0, 1]
    sink.snapshot_state(1)
    sink.notify_checkpoint_complete(1)
    assert visible_lines(base) == ["a", "b"]


def test_an_aborted_checkpoints_files_go_with_the_next_checkpoint(env: StreamExecutionEnvironment, base: Path) -> None:
    sink = Sinks(env, base).new()
    sink.process_batch(["a"])
    first = sink.snapshot_state(1)
    sink.notify_checkpoint_aborted(1)
    assert visible(base) == [] and sink.has_uncommitted_output()
    sink.process_batch(["b"])
    second = sink.snapshot_state(2)
    assert second["pending"][1] == first["pending"][1]  # still carried: a restore from 2 commits it
    sink.notify_checkpoint_complete(2)
    assert visible_lines(base) == ["a", "b"] and not sink.has_uncommitted_output()


def test_end_of_input_leaves_files_pending_until_a_final_checkpoint(env: StreamExecutionEnvironment, base: Path) -> None:
    sink = Sinks(env, base).new()
    assert not sink.has_uncommitted_output()
    sink.process_batch(["a"])
    sink.end_input()
    assert visible(base) == [] and sink.has_uncommitted_output()
    sink.snapshot_state(3)
    assert sink.has_uncommitted_output()
    sink.notify_checkpoint_aborted(3)
    assert sink.has_uncommitted_output()
    sink.snapshot_state(4)
    sink.notify_checkpoint_complete(4)
    assert not sink.has_uncommitted_output() and visible_lines(base) == ["a"]
    sink.close()
    assert visible_lines(base) == ["a"] and hidden(base) == []


def test_close_never_commits(env: StreamExecutionEnvironment, base: Path) -> None:
    sink = Sinks(env, base).new()
    sink.process_batch(["a"])
    sink.snapshot_state(1)
    sink.process_batch(["b"])
    sink.end_input()
    sink.close()
    assert visible(base) == [] and len(hidden(base)) == 2


def test_without_checkpointing_files_are_finished_at_the_end_as_before(env: StreamExecutionEnvironment, base: Path) -> None:
    sink = Sinks(env, base).new(checkpointing=False)
    sink.process_batch(["a"])
    assert visible(base) == []
    sink.end_input()
    assert visible_lines(base) == ["a"] and hidden(base) == []
    assert not sink.has_uncommitted_output()


def test_restore_commits_the_checkpoints_pending_files_exactly_once(env: StreamExecutionEnvironment, base: Path) -> None:
    sinks = Sinks(env, base)
    sink = sinks.new()
    sink.process_batch(["a"])
    state = sink.snapshot_state(1)  # checkpoint 1 completes, but the task dies before the notification
    restored = sinks.new(state=state)
    assert visible_lines(base) == ["a"] and hidden(base) == []
    sinks.new(state=state)  # restored again from the same checkpoint (a second failure): nothing changes
    assert visible_lines(base) == ["a"] and hidden(base) == []
    restored.initialize_state(state)  # called twice on one operator: idempotent as well
    assert visible_lines(base) == ["a"]


def test_restore_after_the_notification_already_committed(env: StreamExecutionEnvironment, base: Path) -> None:
    sinks = Sinks(env, base)
    sink = sinks.new()
    sink.process_batch(["a"])
    state = sink.snapshot_state(1)
    sink.notify_checkpoint_complete(1)
    sinks.new(state=state)
    assert visible_lines(base) == ["a"] and hidden(base) == []


def test_a_lost_pending_file_is_a_loud_error(env: StreamExecutionEnvironment, base: Path) -> None:
    sinks = Sinks(env, base)
    sink = sinks.new()
    sink.process_batch(["a"])
    state = sink.snapshot_state(1)
    [(hidden_path, final_path)] = state["pending"][1].items()
    Path(hidden_path).unlink()
    with pytest.raises(OperatorError, match=re.escape(final_path) + ".*checkpoint 1 is lost"):
        sinks.new(state=state)
    with pytest.raises(OperatorError, match=re.escape(final_path)):
        sink.notify_checkpoint_complete(1)


def test_restore_rejects_a_state_it_cannot_read(env: StreamExecutionEnvironment, base: Path) -> None:
    sinks = Sinks(env, base)
    with pytest.raises(OperatorError, match="unreadable FileSink state: expected a dict with version 1, got list"):
        sinks.new(state=[1, 2])
    with pytest.raises(OperatorError, match="expected keys uid"):
        sinks.new(state={"version": 1, "uid": "u", "subtask": 0, "counter": 0, "pending": [("a", "b")]})


def test_restore_deletes_this_subtasks_uncommitted_files_only(env: StreamExecutionEnvironment, base: Path) -> None:
    sinks = Sinks(env, base, parallelism=2, with_rolling_policy=RollingPolicy.default_rolling_policy(part_size=1))
    mine, other = sinks.new(0), sinks.new(1)
    mine.process_batch(["a"])
    other.process_batch(["x"])
    state = mine.snapshot_state(1)
    other.snapshot_state(1)
    mine.process_batch(["b"])
    mine.process_batch(["c"])  # rolls b: a pending file no checkpoint took
    mine.snapshot_state(2)  # never completes
    mine.process_batch(["d"])  # an open file: the crash comes now
    other.process_batch(["y"])  # the other subtask goes on (or failed too: its files are its own)
    others_files = {n for n in hidden(base) if re.fullmatch(f"\\.part-{UUID}-1-.*", n)}
    assert len(others_files) == 2
    sinks.new(0, state=state)
    assert visible_lines(base) == ["a"]
    assert set(hidden(base)) == others_files  # b, c, d are gone; x and y untouched


def test_a_restored_writer_goes_on_with_the_states_names(env: StreamExecutionEnvironment, base: Path) -> None:
    sinks = Sinks(env, base)
    sink = sinks.new()
    sink.process_batch(["a"])
    state = sink.snapshot_state(1)
    sink.process_batch(["b"])
    sink.snapshot_state(2)
    restored = sinks.new(state=state)
    restored.process_batch(["b"])
    restored.snapshot_state(2)
    restored.notify_checkpoint_complete(2)
    names = visible(base)
    assert [part_number(n) for n in names] == [0, 1]
    assert len({n.rsplit("-", 2)[0] for n in names}) == 1  # the same uid: restarts never clash on names


def test_another_subtasks_state_is_committed_under_fresh_names(env: StreamExecutionEnvironment, base: Path) -> None:
    """A rescaled restore may hand subtask 0 the state of old subtask 1: its files are committed, and
    subtask 0 writes under its own fresh uid (so nothing it writes can meet old subtask 1's names)."""
    sinks = Sinks(env, base, parallelism=2)
    old = sinks.new(1)
    old.process_batch(["a"])
    state = old.snapshot_state(1)
    new = sinks.new(0, state=state)
    new.process_batch(["b"])
    new.snapshot_state(2)
    new.notify_checkpoint_complete(2)
    assert visible_lines(base) == ["a", "b"]
    uids = {re.search(UUID, n).group(0) for n in visible(base)}  # type: ignore[union-attr]
    assert len(uids) == 2


def test_replay_after_a_crash_makes_each_record_visible_once(env: StreamExecutionEnvironment, base: Path) -> None:
    """write A, checkpoint 1, notify 1, write B, checkpoint 2 (never completes), write C, crash;
    a fresh attempt restored from checkpoint 1 replays B and C: the output is A + B + C, once each."""
    sinks = Sinks(env, base, with_rolling_policy=RollingPolicy.default_rolling_policy(part_size=5))
    a, b, c = ["a1", "a2", "a3"], ["b1", "b2"], ["c1", "c2", "c3"]
    sink = sinks.new()
    for record in a:
        sink.process_batch([record])
    checkpoint_1 = sink.snapshot_state(1)
    sink.notify_checkpoint_complete(1)
    for record in b:
        sink.process_batch([record])
    sink.snapshot_state(2)
    for record in c:
        sink.process_batch([record])  # c1 rolls into a pending file, c3 is still open: then the crash
    assert visible_lines(base) == sorted(a)

    replay = sinks.new(state=checkpoint_1)
    for record in b + c:
        replay.process_batch([record])
    replay.end_input()
    replay.snapshot_state(2)  # the restored job's checkpoint ids go on after the restored one
    replay.notify_checkpoint_complete(2)
    assert not replay.has_uncommitted_output()
    assert visible_lines(base) == sorted(a + b + c)
    assert hidden(base) == []
    numbers = [part_number(n) for n in visible(base)]
    assert len(numbers) == len(set(numbers))


def test_operators_without_state_take_part_in_checkpoints_as_no_ops(env: StreamExecutionEnvironment) -> None:
    env.from_collection([1]).map(lambda x: x).print()
    operator = make_chain(vertex(env, "Collection")).chain.operators[1]
    assert isinstance(operator, MapOperator)
    assert operator.snapshot_state(1) is None and operator.has_uncommitted_output() is False
    operator.initialize_state(None)
    operator.notify_checkpoint_complete(1)
    operator.notify_checkpoint_aborted(2)


@pytest.mark.parametrize(("checkpoint_dir", "enabled"), [("", False), ("/tmp/checkpoints", True)])
def test_the_task_environment_knows_whether_the_job_checkpoints(checkpoint_dir: str, enabled: bool) -> None:
    tdd = cpb.TaskDeploymentDescriptor(
        vertex=pb.JobVertex(name="v", parallelism=1, max_parallelism=128),
        checkpoint_dir=checkpoint_dir,
    )
    assert SimpleTaskEnvironment.from_deployment(tdd).checkpointing_enabled is enabled
    assert SimpleTaskEnvironment().checkpointing_enabled is False


@pytest.mark.parametrize("checkpointing", [True, False])
def test_an_attempt_that_failed_before_its_first_checkpoint_leaves_nothing_behind(
    env: StreamExecutionEnvironment, base: Path, checkpointing: bool
) -> None:
    """Flink cleans up a failed attempt's in-progress files: the next attempt of the same job starts
    without state and deletes them, and only them."""
    sinks = Sinks(env, base, parallelism=2)
    failed = sinks.new(0, checkpointing=checkpointing, job_id="aa" * 16)
    failed.process_batch(["lost"])
    failed.flush()
    other_subtask = sinks.new(1, checkpointing=checkpointing, job_id="aa" * 16)
    other_subtask.process_batch(["subtask 1"])
    other_subtask.flush()
    other_job = sinks.new(0, checkpointing=checkpointing, job_id="bb" * 16)
    other_job.process_batch(["another job"])
    other_job.flush()
    [stale] = [n for n in hidden(base) if "-0-0" in n and (base / n).read_text() == "lost\n"]
    failed.close()  # the attempt fails: nothing is committed
    retry = sinks.new(0, checkpointing=checkpointing, job_id="aa" * 16)
    assert stale not in hidden(base), "the failed attempt's in-progress file is still there"
    left = sorted((base / n).read_text() for n in hidden(base))
    assert left == ["another job\n", "subtask 1\n"]  # other subtasks' and other jobs' files stay
    retry.process_batch(["again"])
    retry.end_input()
    if checkpointing:
        retry.snapshot_state(1)
        retry.notify_checkpoint_complete(1)
    assert visible_lines(base) == ["again"]


def test_a_fresh_attempt_never_deletes_what_a_completed_checkpoint_references(
    env: StreamExecutionEnvironment, base: Path
) -> None:
    """Checkpoint 1 completed but its notification was lost: its pending file is hidden still. The
    subtask it belongs to restores and commits it; a fresh subtask of the same job leaves it alone."""
    sinks = Sinks(env, base, parallelism=2)
    first = sinks.new(0, job_id="aa" * 16)
    first.process_batch(["checkpointed"])
    state = first.snapshot_state(1)
    first.close()
    fresh = sinks.new(1, job_id="aa" * 16)  # a subtask index no checkpoint covers starts fresh
    [pending] = state["pending"][1]
    assert Path(pending).exists()
    restored = sinks.new(0, state=state, job_id="aa" * 16)
    assert visible_lines(base) == ["checkpointed"]
    fresh.close()
    restored.close()


class FirstChar:
    """A partition bucket: ``k=<first character>``."""

    def __call__(self, record: str) -> str:
        return f"k={record[0]}"


def committing(sink: FileSinkOperator, trigger: str, delay_ms: int, time_of: Any = None) -> FileSinkOperator:
    """The sink as a partitioned table's sink with a success-file partition commit."""
    from dataclasses import replace

    sink.f = replace(sink.f, partition_bucket=FirstChar(), partition_commit_trigger=trigger,
                     partition_commit_delay_ms=delay_ms, partition_time_of=time_of)
    return sink


def test_a_partition_is_committed_after_its_checkpoint_completes_its_delay_passed_and_every_writer_is_done(
        env: StreamExecutionEnvironment, base: Path) -> None:
    sinks = Sinks(env, base, parallelism=2)
    s0, s1 = (committing(sinks.new(i), "process-time", 1000) for i in range(2))
    s0.process_batch(["a1", "b1"])
    s1.process_batch(["a2"])
    for s in (s0, s1):
        s.snapshot_state(1)
    assert not list(base.rglob("_SUCCESS"))
    sinks.clock.advance(500)  # completed, but the partitions were created less than the delay ago
    for s in (s0, s1):
        s.notify_checkpoint_complete(1)
    assert not list(base.rglob("_SUCCESS")) and visible_lines(base) == ["a1", "a2", "b1"]
    sinks.clock.advance(1000)
    s0.snapshot_state(2)
    s1.snapshot_state(2)
    assert not list(base.rglob("_SUCCESS"))  # checkpoint 2 has not completed yet
    s0.notify_checkpoint_complete(2)
    # k=b was written by subtask 0 only; k=a waits for subtask 1, which wrote there too
    assert sorted(p.parent.name for p in base.rglob("_SUCCESS")) == ["k=b"]
    s1.notify_checkpoint_complete(2)
    assert sorted(p.parent.name for p in base.rglob("_SUCCESS")) == ["k=a", "k=b"]
    assert not s0.has_uncommitted_output() and not s1.has_uncommitted_output()


def test_partition_time_commits_once_the_watermark_at_the_checkpoint_passed_time_plus_delay(
        env: StreamExecutionEnvironment, base: Path) -> None:
    times = {"k=a": 1_000, "k=b": 5_000}
    sink = committing(Sinks(env, base).new(), "partition-time", 100, time_of=times.__getitem__)
    sink.process_batch(["a", "b"])
    sink.process_watermark(1_100)  # not past a's 1_000 + 100
    sink.snapshot_state(1)
    sink.process_watermark(9_999)  # after the snapshot: not checkpoint 1's watermark
    sink.notify_checkpoint_complete(1)
    assert not list(base.rglob("_SUCCESS"))
    sink.snapshot_state(2)
    sink.notify_checkpoint_complete(2)
    assert sorted(p.parent.name for p in base.rglob("_SUCCESS")) == ["k=a", "k=b"]


def test_a_restored_writer_still_owes_its_partitions_commit(env: StreamExecutionEnvironment, base: Path) -> None:
    sinks = Sinks(env, base)
    sink = committing(sinks.new(), "process-time", 60_000)
    sink.process_batch(["a"])
    state = sink.snapshot_state(1)
    sink.close()  # the attempt fails before the checkpoint's notification
    again = sinks.new(state=state, prepare=lambda s: committing(s, "process-time", 60_000))
    assert visible_lines(base) == ["a"] and not list(base.rglob("_SUCCESS"))
    again.end_input()
    again.snapshot_state(2)
    again.notify_checkpoint_complete(2)  # the end of the input ends every partition
    assert [p.parent.name for p in base.rglob("_SUCCESS")] == ["k=a"]
