"""The checkpoint coordinator's rules (Flink's CheckpointCoordinator, CheckpointRequestDecider and
CheckpointFailureManager), with time passed in: no clock, no sleeps."""
from __future__ import annotations

import random

import pytest

from millstream.jobmanager.checkpoint.coordinator import (
    CheckpointCoordinator,
    CheckpointFailureReason as R,
    CheckpointSettings,
    DiscardCheckpoint,
    DiscardState,
    FailJob,
    FinalizeCheckpoint,
    NotifyCheckpointAborted,
    NotifyCheckpointComplete,
    TaskSnapshot,
    TriggerCheckpoint,
)
from millstream.runtime.checkpoint_ids import StandaloneCheckpointIDCounter
from millstream.runtime.execution_state import ExecutionState as S

SRC, MAP, SINK = b"src-a1", b"map-a1", b"sink-a1"


def job(src: S = S.RUNNING, map_: S = S.RUNNING, sink: S = S.RUNNING) -> list[TaskSnapshot]:
    """source -> map -> sink, one subtask each."""
    return [
        TaskSnapshot(SRC, "src_0", src),
        TaskSnapshot(MAP, "map_0", map_, frozenset({"src_0"})),
        TaskSnapshot(SINK, "sink_0", sink, frozenset({"map_0"})),
    ]


def coordinator(interval: int = 1000, min_pause: int = 0, timeout: int = 10_000, tolerable: int = 0,
                counter: StandaloneCheckpointIDCounter | None = None) -> CheckpointCoordinator:
    return CheckpointCoordinator(CheckpointSettings(interval, timeout, min_pause, tolerable),
                                 counter or StandaloneCheckpointIDCounter(), rng=random.Random(7))


def of(commands: list, kind: type) -> list:
    return [c for c in commands if isinstance(c, kind)]


def started(c: CheckpointCoordinator, now: float = 0) -> float:
    """Start the scheduler without triggering; return when the first trigger is due."""
    assert c.start(now) == []
    due = c.next_deadline()
    assert due is not None
    return due


def trigger(c: CheckpointCoordinator, now: float, tasks: list[TaskSnapshot] | None = None) -> TriggerCheckpoint:
    out = of(c.tick(now, job() if tasks is None else tasks), TriggerCheckpoint)
    assert len(out) == 1, out
    return out[0]


def ack_all(c: CheckpointCoordinator, cid: int, attempts: tuple[bytes, ...] = (SRC, MAP, SINK)) -> list:
    out: list = []
    for a in attempts:
        out += c.acknowledge(cid, a, handle=f"h-{a.decode()}-{cid}", state_size=10)
    return out


def complete(c: CheckpointCoordinator, now: float) -> int:
    t = trigger(c, now)
    assert of(ack_all(c, t.checkpoint_id), FinalizeCheckpoint)
    c.checkpoint_finalized(t.checkpoint_id, now + 5)
    return t.checkpoint_id


# -- trigger timing --------------------------------------------------------------------------------


def test_first_trigger_comes_after_a_delay_between_min_pause_and_interval() -> None:
    for seed in range(20):
        c = CheckpointCoordinator(CheckpointSettings(1000, min_pause_ms=300), StandaloneCheckpointIDCounter(),
                                  rng=random.Random(seed))
        due = started(c, now=5000)
        assert 5300 <= due <= 6000
        assert c.tick(due - 1, job()) == []
        assert of(c.tick(due, job()), TriggerCheckpoint)


def test_periodic_triggers_every_interval_with_sources_only_triggered() -> None:
    c = coordinator(interval=1000)
    due = started(c)
    first = trigger(c, due)
    assert first.attempt_ids == (SRC,)
    assert first.checkpoint_id == 1
    ack_all(c, 1)
    c.checkpoint_finalized(1, due + 10)
    assert c.tick(due + 999, job()) == []
    second = trigger(c, due + 1000)
    assert second.checkpoint_id == 2


def test_nothing_triggers_before_start_or_after_stop() -> None:
    c = coordinator()
    assert c.tick(1_000_000, job()) == []
    due = started(c)
    c.stop()
    assert c.tick(due + 10_000, job()) == []
    assert c.next_deadline() is None


def test_min_pause_counts_from_the_last_completion() -> None:
    c = coordinator(interval=1000, min_pause=800)
    due = started(c)
    t = trigger(c, due)
    ack_all(c, t.checkpoint_id)
    c.checkpoint_finalized(t.checkpoint_id, due + 700)  # completed late: min pause ends at due+1500
    assert c.tick(due + 1000, job()) == []  # the periodic trigger is too early and is postponed
    assert c.next_deadline() == due + 1500
    assert c.tick(due + 1499, job()) == []
    assert trigger(c, due + 1500).checkpoint_id == 2


def test_no_concurrent_checkpoints_the_due_trigger_waits_for_the_one_in_flight() -> None:
    c = coordinator(interval=1000)
    due = started(c)
    t = trigger(c, due)
    assert c.tick(due + 1000, job()) == []  # one in flight: the periodic request is queued
    assert c.tick(due + 2000, job()) == []
    assert c.pending is not None and c.pending.checkpoint_id == t.checkpoint_id
    ack_all(c, t.checkpoint_id)
    out = c.checkpoint_finalized(t.checkpoint_id, due + 2100, job())
    assert [x.checkpoint_id for x in of(out, TriggerCheckpoint)] == [2]  # the queued request runs now


def test_queued_trigger_respects_min_pause_after_completion() -> None:
    c = coordinator(interval=1000, min_pause=500)
    due = started(c)
    t = trigger(c, due)
    c.tick(due + 1000, job())
    ack_all(c, t.checkpoint_id)
    assert of(c.checkpoint_finalized(t.checkpoint_id, due + 1200, job()), TriggerCheckpoint) == []
    assert c.next_deadline() == due + 1700
    assert trigger(c, due + 1700).checkpoint_id == 2


def test_trigger_fails_without_an_id_when_a_task_is_not_running() -> None:
    counter = StandaloneCheckpointIDCounter()
    c = coordinator(counter=counter)
    due = started(c)
    assert c.tick(due, job(sink=S.DEPLOYING)) == []
    assert counter.get() == 1  # no id was drawn
    assert c.stats.num_failed == 1 and c.stats.last_failure_reason == R.NOT_ALL_REQUIRED_TASKS_RUNNING.value
    assert trigger(c, due + 1000).checkpoint_id == 1  # and it never fails the job


# -- finished tasks --------------------------------------------------------------------------------


def test_finished_tasks_are_excluded_and_tasks_below_finished_sources_are_triggered() -> None:
    c = coordinator()
    due = started(c)
    other_src = TaskSnapshot(b"src2-a1", "src2_0", S.RUNNING)
    tasks = [TaskSnapshot(SRC, "src_0", S.FINISHED), other_src,
             TaskSnapshot(MAP, "map_0", S.RUNNING, frozenset({"src_0"})),
             TaskSnapshot(SINK, "sink_0", S.RUNNING, frozenset({"map_0", "src2_0"}))]
    t = trigger(c, due, tasks)
    assert set(t.attempt_ids) == {b"src2-a1", MAP}  # not the finished source, not the sink
    assert c.acknowledge(t.checkpoint_id, SRC, "h") == [DiscardState(t.checkpoint_id, "h")]
    out = ack_all(c, t.checkpoint_id, (b"src2-a1", MAP, SINK))
    assert set(of(out, FinalizeCheckpoint)[0].task_states) == {"src2_0", "map_0", "sink_0"}


def test_a_task_finishing_before_its_ack_aborts_without_failing_the_job() -> None:
    c = coordinator(tolerable=0)
    due = started(c)
    t = trigger(c, due)
    c.acknowledge(t.checkpoint_id, SRC, "h")
    out = c.task_finished(MAP)
    assert DiscardCheckpoint(t.checkpoint_id) in out and not of(out, FailJob)
    assert c.pending is None


# -- completion ------------------------------------------------------------------------------------


def test_completion_only_after_every_ack_then_notify_only_after_metadata() -> None:
    c = coordinator()
    due = started(c)
    t = trigger(c, due)
    assert c.acknowledge(t.checkpoint_id, SRC, "hs", 3) == []
    assert c.acknowledge(t.checkpoint_id, MAP, "hm", 4) == []
    out = c.acknowledge(t.checkpoint_id, SINK, None, 0)
    assert out == [FinalizeCheckpoint(t.checkpoint_id, due, {"src_0": "hs", "map_0": "hm", "sink_0": None})]
    assert c.stats.num_completed == 0  # not complete until the metadata is written
    out = c.checkpoint_finalized(t.checkpoint_id, due + 40)
    assert sorted(of(out, NotifyCheckpointComplete), key=lambda n: n.attempt_id) == sorted(
        [NotifyCheckpointComplete(a, t.checkpoint_id) for a in (SRC, MAP, SINK)], key=lambda n: n.attempt_id)
    s = c.stats
    assert (s.num_completed, s.last_completed_id, s.last_completed_duration_ms, s.last_completed_size_bytes) == (
        1, t.checkpoint_id, 40, 7)


def test_metadata_write_failure_aborts_and_nothing_is_notified() -> None:
    c = coordinator()
    due = started(c)
    t = trigger(c, due)
    ack_all(c, t.checkpoint_id)
    out = c.checkpoint_finalize_failed(t.checkpoint_id, "disk full")
    assert not of(out, NotifyCheckpointComplete) and DiscardCheckpoint(t.checkpoint_id) in out
    assert c.stats.num_completed == 0 and c.stats.num_failed == 1


def test_duplicate_ack_is_ignored() -> None:
    c = coordinator()
    due = started(c)
    t = trigger(c, due)
    assert c.acknowledge(t.checkpoint_id, SRC, "h", 5) == []
    assert c.acknowledge(t.checkpoint_id, SRC, "h", 5) == []
    assert c.pending is not None and c.pending.not_yet_acked == {MAP, SINK}


def test_acks_from_unknown_or_stale_attempts_are_ignored_and_their_state_discarded() -> None:
    c = coordinator()
    due = started(c)
    t = trigger(c, due)
    stale = b"src-a0"  # the previous attempt of the source
    assert c.acknowledge(t.checkpoint_id, stale, "zombie") == [DiscardState(t.checkpoint_id, "zombie")]
    assert c.acknowledge(t.checkpoint_id + 7, SRC, "future") == [DiscardState(t.checkpoint_id + 7, "future")]
    assert c.decline(t.checkpoint_id, stale) == []
    assert c.pending is not None and c.pending.not_yet_acked == {SRC, MAP, SINK}
    c.tick(due + 20_000)  # expire it
    assert c.acknowledge(t.checkpoint_id, SRC, "late") == [DiscardState(t.checkpoint_id, "late")]


# -- aborts and tolerable failures -------------------------------------------------------------------


def test_timeout_aborts_and_counts_a_failure_that_fails_the_job_at_default_tolerance() -> None:
    c = coordinator(timeout=5000)
    due = started(c)
    t = trigger(c, due)
    c.acknowledge(t.checkpoint_id, SRC, "h")
    assert c.next_deadline() == due + 1000  # the periodic trigger first; then the timeout
    assert of(c.tick(due + 4999, job()), NotifyCheckpointAborted) == []
    out = c.tick(due + 5000, job())
    assert DiscardCheckpoint(t.checkpoint_id) in out
    assert set(of(out, NotifyCheckpointAborted)) == {NotifyCheckpointAborted(a, t.checkpoint_id) for a in (SRC, MAP, SINK)}
    fails = of(out, FailJob)
    assert len(fails) == 1 and fails[0].reason is R.CHECKPOINT_EXPIRED
    assert c.stats.num_failed == 1 and c.stats.last_failed_id == t.checkpoint_id


def test_tolerable_failures_fail_the_job_only_after_more_than_n_in_a_row() -> None:
    c = coordinator(tolerable=2, timeout=100_000)
    now = started(c)
    for i in range(2):
        t = trigger(c, now)
        assert not of(c.decline(t.checkpoint_id, MAP, R.CHECKPOINT_DECLINED, "boom"), FailJob)
        now += 1000
    complete(c, now)  # a completed checkpoint resets the count
    now += 1000
    for i in range(2):
        t = trigger(c, now)
        assert not of(c.decline(t.checkpoint_id, SINK), FailJob)
        now += 1000
    t = trigger(c, now)
    fails = of(c.decline(t.checkpoint_id, SRC), FailJob)
    assert len(fails) == 1 and "tolerable" in fails[0].message


def test_a_decline_aborts_the_checkpoint() -> None:
    c = coordinator(tolerable=5)
    due = started(c)
    t = trigger(c, due)
    out = c.decline(t.checkpoint_id, MAP, R.CHECKPOINT_DECLINED, "state too large")
    assert c.pending is None and DiscardCheckpoint(t.checkpoint_id) in out
    assert "state too large" in (c.stats.last_failure_message or "")
    assert c.acknowledge(t.checkpoint_id, SINK, "h") == [DiscardState(t.checkpoint_id, "h")]


def test_failures_that_do_not_count_never_fail_the_job() -> None:
    c = coordinator(tolerable=0)
    due = started(c)
    t = trigger(c, due)
    assert not of(c.decline(t.checkpoint_id, MAP, R.CHECKPOINT_DECLINED_TASK_NOT_READY), FailJob)
    t = trigger(c, due + 1000)
    out = c.task_failed(SINK, "user code raised")
    assert c.pending is None and not of(out, FailJob)
    t = trigger(c, due + 2000)
    assert not of(c.stop(), FailJob)
    assert c.stats.num_failed == 3


def test_a_task_failure_after_its_ack_does_not_abort() -> None:
    c = coordinator()
    due = started(c)
    t = trigger(c, due)
    c.acknowledge(t.checkpoint_id, SRC, "h")
    assert c.task_failed(SRC) == []
    assert c.pending is not None


def test_a_checkpoint_expiring_while_its_metadata_is_written_is_discarded_when_the_write_returns() -> None:
    c = coordinator(timeout=5000, tolerable=3)
    due = started(c)
    t = trigger(c, due)
    ack_all(c, t.checkpoint_id)
    c.tick(due + 5000, job())
    out = c.checkpoint_finalized(t.checkpoint_id, due + 6000)
    assert out == [DiscardCheckpoint(t.checkpoint_id)]
    assert c.stats.num_completed == 0


# -- ids -------------------------------------------------------------------------------------------


def test_ids_strictly_increase_and_are_never_reused_across_a_restore() -> None:
    counter = StandaloneCheckpointIDCounter()
    c = coordinator(counter=counter)
    now = started(c)
    ids = []
    for _ in range(3):
        t = trigger(c, now)
        ids.append(t.checkpoint_id)
        c.decline(t.checkpoint_id, MAP, R.CHECKPOINT_DECLINED_TASK_NOT_READY)
        now += 1000
    ids.append(complete(c, now))
    assert ids == sorted(set(ids))
    # The job restarts from checkpoint 4 with the same counter: the next id is 5, not 4 or 1.
    c.stop()
    c.restored(ids[-1], now + 100, "/ckpt/job/chk-4")
    due = started(c, now + 200)
    assert trigger(c, due).checkpoint_id == ids[-1] + 1
    assert (c.stats.latest_restored_id, c.stats.latest_restored_path) == (ids[-1], "/ckpt/job/chk-4")


def test_a_recovered_counter_behind_the_restored_checkpoint_moves_past_it() -> None:
    c = coordinator(counter=StandaloneCheckpointIDCounter(1))
    c.restored(41, 0)
    due = started(c)
    assert trigger(c, due).checkpoint_id == 42


def test_bad_settings_are_rejected_with_the_setting_named() -> None:
    with pytest.raises(ValueError, match="interval"):
        CheckpointSettings(0)
    with pytest.raises(ValueError, match="tolerable"):
        CheckpointSettings(1000, tolerable_failed_checkpoints=-1)
    with pytest.raises(ValueError, match="start at 1"):
        StandaloneCheckpointIDCounter(0)


def test_history_keeps_the_latest_completed_and_failed_checkpoints_bounded() -> None:
    from millstream.jobmanager.checkpoint.coordinator import CHECKPOINT_HISTORY_SIZE
    c = coordinator(interval=1000, timeout=500, tolerable=100)
    due = started(c)
    first = complete(c, due)
    [record] = c.stats.history
    assert (record.checkpoint_id, record.status, record.is_savepoint, record.trigger_ms, record.end_ms, record.size_bytes) == (
        first, "COMPLETED", False, due, due + 5, 30)
    expiring = trigger(c, due + 1000)
    c.tick(due + 1500, job())
    failed = c.stats.history[-1]
    assert (failed.checkpoint_id, failed.status, failed.end_ms) == (expiring.checkpoint_id, "FAILED", due + 1500)
    assert "expired" in failed.failure_message
    forced = of(c.trigger_now(due + 1600, job()), TriggerCheckpoint)[0]  # a savepoint
    ack_all(c, forced.checkpoint_id)
    c.checkpoint_finalized(forced.checkpoint_id, due + 1700)
    assert c.stats.history[-1].is_savepoint and c.stats.history[-1].checkpoint_id == forced.checkpoint_id
    for n in range(CHECKPOINT_HISTORY_SIZE):
        complete(c, due + 3000 + n * 1000)
    assert len(c.stats.history) == CHECKPOINT_HISTORY_SIZE and c.stats.history[0].checkpoint_id > forced.checkpoint_id
    # Flink's latest.failed and latest.savepoint: still whole once they left the history.
    assert c.stats.last_failed == failed and c.stats.last_savepoint is not None
    assert (c.stats.last_savepoint.checkpoint_id, c.stats.last_savepoint.end_ms) == (forced.checkpoint_id, due + 1700)


def test_a_stop_savepoint_tells_its_tasks_it_is_synchronous_and_whether_to_drain() -> None:
    c = coordinator(interval=1000, timeout=500)
    due = started(c)
    c.suspend_periodic()
    plain = of(c.trigger_now(due, job()), TriggerCheckpoint)[0]
    assert (plain.stop, plain.drain) == (False, False)
    ack_all(c, plain.checkpoint_id)
    c.checkpoint_finalized(plain.checkpoint_id, due + 10)
    stop = of(c.trigger_now(due + 20, job(), stop=True, drain=True), TriggerCheckpoint)[0]
    assert (stop.stop, stop.drain) == (True, True) and stop.checkpoint_id > plain.checkpoint_id


def test_a_recovered_coordinator_goes_on_from_the_counts_and_history_the_checkpoint_kept() -> None:
    """JobManager failover: the statistics a completed checkpoint kept (as of its completion)
    seed the new leader's coordinator, which then keeps counting from them."""
    c = coordinator(interval=1000, timeout=500, tolerable=100)
    due = started(c)
    complete(c, due)
    expiring = trigger(c, due + 1000)
    c.tick(due + 1500, job())  # expired: one failed
    finalizing = trigger(c, due + 2000)
    ack_all(c, finalizing.checkpoint_id)
    completed, failed, history = c.stats_at_completion(finalizing.checkpoint_id, due + 2010)
    assert (completed, failed) == (2, 1)  # as they will be once it completes
    assert [(r.checkpoint_id, r.status) for r in history][-2:] == [(expiring.checkpoint_id, "FAILED"),
                                                                   (finalizing.checkpoint_id, "COMPLETED")]
    recovered = coordinator(interval=1000, timeout=500, counter=StandaloneCheckpointIDCounter(finalizing.checkpoint_id + 1))
    recovered.restore_stats(completed, failed, history)
    s = recovered.stats
    assert (s.num_completed, s.num_failed, s.last_completed_id) == (2, 1, finalizing.checkpoint_id)
    assert s.last_completed_duration_ms == 10 and list(s.history) == history
    complete(recovered, started(recovered, due + 3000))
    assert (recovered.stats.num_completed, recovered.stats.num_failed) == (3, 1)


def test_records_count_the_subtasks_to_acknowledge_and_those_that_did() -> None:
    c = coordinator(interval=1000, timeout=500, tolerable=100)
    due = started(c)
    complete(c, due)
    assert (c.stats.history[-1].num_subtasks, c.stats.history[-1].num_acknowledged) == (3, 3)
    expiring = trigger(c, due + 1000)
    c.acknowledge(expiring.checkpoint_id, SRC, handle="h", state_size=1)
    c.tick(due + 1500, job())
    assert (c.stats.history[-1].status, c.stats.history[-1].num_subtasks, c.stats.history[-1].num_acknowledged) == (
        "FAILED", 3, 1)


def test_a_checkpoint_by_hand_is_no_savepoint() -> None:
    """trigger_now(savepoint=False): Flink's POST /jobs/:id/checkpoints, recorded as a checkpoint."""
    c = coordinator()
    started(c)
    [triggered] = of(c.trigger_now(5, job(), savepoint=False), TriggerCheckpoint)
    ack_all(c, triggered.checkpoint_id)
    c.checkpoint_finalized(triggered.checkpoint_id, 10)
    assert c.stats.history[-1].is_savepoint is False and c.stats.last_savepoint is None
    assert c.stats.last_completed_id == triggered.checkpoint_id


def test_the_history_keeps_each_subtasks_ack_with_its_size_and_durations() -> None:
    """Flink's SubtaskStateStats: when each ack arrived and what it reported (state size, sync and
    async parts, alignment, start delay); a stale or duplicate ack adds nothing."""
    from millstream.jobmanager.checkpoint.coordinator import SubtaskAck

    c = coordinator()
    t = trigger(c, started(c))
    cid = t.checkpoint_id
    c.acknowledge(cid, SRC, "h-src", 120, now_ms=t.timestamp_ms + 30, sync_ms=2, async_ms=5, start_delay_ms=1)
    c.acknowledge(cid, b"stale-attempt", "h-old", 999, now_ms=t.timestamp_ms + 31)
    c.acknowledge(cid, MAP, None, 0, now_ms=t.timestamp_ms + 40, alignment_ms=7)
    c.acknowledge(cid, MAP, "h-dup", 50, now_ms=t.timestamp_ms + 41)  # a duplicate: ignored
    c.acknowledge(cid, SINK, "h-sink", 300, now_ms=t.timestamp_ms + 55, sync_ms=1, async_ms=9, alignment_ms=3)
    c.checkpoint_finalized(cid, t.timestamp_ms + 60)
    [record] = c.stats.history
    assert record.size_bytes == 420 == sum(a.state_size for a in record.subtasks)
    assert record.subtasks == (
        SubtaskAck("src_0", t.timestamp_ms + 30, 120, 2, 5, 0, 1),
        SubtaskAck("map_0", t.timestamp_ms + 40, 0, 0, 0, 7, 0),
        SubtaskAck("sink_0", t.timestamp_ms + 55, 300, 1, 9, 3, 0),
    )


def test_the_acks_survive_a_jobmanager_failover_in_the_checkpoints_metadata(tmp_path) -> None:  # noqa: ANN001
    """The statistics a completed checkpoint's metadata keeps (what a recovering JobManager goes
    on from) hold each subtask's ack too, so per-vertex sizes are not lost with the JobManager."""
    from millstream.jobmanager.checkpoint.driver import CheckpointDriver
    from millstream.jobmanager.checkpoint.settings import JobCheckpointing
    from millstream.runtime.checkpoint_storage import CompletedCheckpoint
    from tests.unit.test_live_view import _core

    def driver() -> CheckpointDriver:
        checkpointing = JobCheckpointing(CheckpointSettings(1000), "EXACTLY_ONCE", tmp_path, 1)
        return CheckpointDriver(_core(parallelism=1), checkpointing, lambda *a: None, lambda m: None, lambda c: None)

    first = driver()
    tasks = [TaskSnapshot(SRC, "aa" * 16 + "_0", S.RUNNING)]
    [t] = of(first.coordinator.trigger_now(1_000, tasks), TriggerCheckpoint)
    first.coordinator.acknowledge(t.checkpoint_id, SRC, None, 64, now_ms=1_020, sync_ms=3, async_ms=7,
                                  alignment_ms=2, start_delay_ms=1)
    stats = first._persisted_stats(t.checkpoint_id)
    assert stats is not None
    second = driver()
    second._restore_stats(stats, CompletedCheckpoint(second.store.job_id, t.checkpoint_id, 1_000, tmp_path, {}))
    [entry] = second.summary().history
    [ack] = entry.subtasks
    assert (ack.vertex_id, ack.subtask_index, ack.state_size) == (bytes.fromhex("aa" * 16), 0, 64)
    assert (ack.sync_duration_ms, ack.async_duration_ms, ack.alignment_duration_ms, ack.start_delay_ms) == (3, 7, 2, 1)
    # when it arrived, in wall-clock time, through both JobManagers' clocks (each its own monotonic one)
    assert abs(ack.ack_timestamp_ms - (1_020 + first._wall_minus_monotonic_ms)) <= 1
