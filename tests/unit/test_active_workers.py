"""TaskManagers on demand (jobmanager/resourcemanager/active_workers.py), from Flink's active
ResourceManager: workers start for unmet slot needs (slots of starting workers count), never beyond
slotmanager.number-of-slots.max, idle ones of its own stop after resourcemanager.taskmanager-timeout,
and a worker that cannot start is reported once and retried with a growing back-off."""
from __future__ import annotations

import pytest

from millstream.jobmanager.resourcemanager.active_workers import (
    ActiveWorkers,
    ReportFailure,
    StartWorker,
    StopWorker,
    TaskManagerSlots,
    WorkerState,
)

IDLE, RETRY = 30_000, 3_000


def workers(slots: int = 2, max_slots: int | None = None) -> ActiveWorkers:
    return ActiveWorkers(slots, max_slots, IDLE, RETRY)


def starts(commands: list) -> list[str]:
    return [c.worker_id for c in commands if isinstance(c, StartWorker)]


def stops(commands: list) -> list[str]:
    return [c.worker_id for c in commands if isinstance(c, StopWorker)]


def test_no_demand_starts_nothing() -> None:
    assert workers().check(0, 0, []) == []


def test_starts_enough_workers_for_the_unmet_slots() -> None:
    w = workers(slots=2)
    assert len(starts(w.check(0, 3, []))) == 2  # 3 slots: two workers of 2
    assert w.workers() == {"taskmanager-active-1": WorkerState.STARTING, "taskmanager-active-2": WorkerState.STARTING}


def test_starting_workers_count_so_a_check_does_not_start_them_again() -> None:
    w = workers(slots=2)
    assert len(starts(w.check(0, 2, []))) == 1
    assert starts(w.check(100, 2, [])) == []
    assert starts(w.check(200, 4, [])) == ["taskmanager-active-2"]  # more demand: one more


def test_free_slots_of_registered_taskmanagers_count_against_the_demand() -> None:
    w = workers(slots=2)
    assert starts(w.check(0, 2, [TaskManagerSlots("by-hand", 2, 2)])) == []
    assert len(starts(w.check(0, 3, [TaskManagerSlots("by-hand", 2, 2)]))) == 1


def test_the_maximum_number_of_slots_caps_the_workers() -> None:
    w = workers(slots=2, max_slots=4)
    assert len(starts(w.check(0, 10, [TaskManagerSlots("by-hand", 2, 0)]))) == 1  # 2 + 2 = 4
    assert starts(w.check(100, 10, [TaskManagerSlots("by-hand", 2, 0)])) == []
    assert starts(workers(slots=2, max_slots=1).check(0, 1, [])) == []  # a worker would exceed it


def test_a_registered_worker_stops_after_the_idle_timeout() -> None:
    w = workers(slots=2)
    (worker,) = starts(w.check(0, 2, []))
    busy = [TaskManagerSlots(worker, 2, 0)]
    assert w.check(1_000, 0, busy) == []  # registered, in use
    assert w.workers() == {worker: WorkerState.REGISTERED}
    idle = [TaskManagerSlots(worker, 2, 2)]
    assert w.check(50_000, 0, idle) == []  # idle from now on
    assert w.check(50_000 + IDLE - 1, 0, idle) == []
    assert stops(w.check(50_000 + IDLE, 0, idle)) == [worker]
    assert w.check(50_000 + IDLE + 1, 0, idle) == []  # asked once


def test_use_resets_the_idle_clock() -> None:
    w = workers(slots=1)
    (worker,) = starts(w.check(0, 1, []))
    w.check(10, 0, [TaskManagerSlots(worker, 1, 1)])
    w.check(IDLE - 5, 0, [TaskManagerSlots(worker, 1, 0)])
    assert w.check(IDLE + 10, 0, [TaskManagerSlots(worker, 1, 1)]) == []
    assert stops(w.check(2 * IDLE + 10, 0, [TaskManagerSlots(worker, 1, 1)])) == [worker]


def test_an_idle_worker_is_kept_while_a_job_is_short_of_slots() -> None:
    w = workers(slots=1, max_slots=1)
    (worker,) = starts(w.check(0, 1, []))
    w.registered(worker, 0)
    # its slot is free, but a job still lacks 2 slots: not idle
    assert stops(w.check(2 * IDLE, 2, [TaskManagerSlots(worker, 1, 1)])) == []


def test_taskmanagers_started_by_hand_are_never_stopped() -> None:
    w = workers()
    assert w.check(0, 0, [TaskManagerSlots("by-hand", 2, 2)]) == []
    assert w.check(10 * IDLE, 0, [TaskManagerSlots("by-hand", 2, 2)]) == []


def test_a_failed_start_is_reported_once_and_retried_with_back_off() -> None:
    w = workers(slots=2)
    (first,) = starts(w.check(0, 2, []))
    reported = w.exited(first, "image missing", 100)
    assert [type(c) for c in reported] == [ReportFailure]
    assert "image missing" in reported[0].message
    assert starts(w.check(100 + RETRY - 1, 2, [])) == []  # backing off
    (second,) = starts(w.check(100 + RETRY, 2, []))
    assert w.exited(second, "image missing", 200 + RETRY) == []  # the same cause: not reported again
    assert w.repeats == 1
    assert starts(w.check(200 + 2 * RETRY, 2, [])) == []  # the back-off doubled
    (third,) = starts(w.check(200 + 3 * RETRY, 2, []))
    assert "docker down" in w.exited(third, "docker down", 300 + 3 * RETRY)[0].message  # a new cause is reported


def test_a_cause_that_differs_only_by_the_workers_own_id_is_the_same_cause() -> None:
    # a TaskManager names itself in its error ("TaskManager <id>: the Spark cluster ... gave it no
    # executor core"): every retry against a full Spark cluster is the same failure, reported once
    w = workers(slots=2)
    (first,) = starts(w.check(0, 2, []))
    reported = w.exited(first, f"TaskManager {first}: the Spark cluster spark://m:7077 gave it no executor core", 100)
    assert len(reported) == 1 and f"TaskManager {first}: the Spark cluster spark://m:7077" in reported[0].message
    (second,) = starts(w.check(100 + RETRY, 2, []))
    assert second != first
    assert w.exited(second, f"TaskManager {second}: the Spark cluster spark://m:7077 gave it no executor core",
                    200 + RETRY) == []
    assert w.repeats == 1
    (third,) = starts(w.check(200 + 3 * RETRY, 2, []))
    assert len(w.exited(third, f"TaskManager {third}: the Spark cluster spark://other:7077 gave it no executor core",
                        300 + 3 * RETRY)) == 1  # another master is another cause


def test_the_back_off_stops_growing_and_a_registration_resets_it() -> None:
    w = workers(slots=1)
    now = 0
    for _ in range(12):
        now = w.retry_at_ms() or now
        (worker,) = starts(w.check(now, 1, []))
        w.exited(worker, "no", now)
    assert w.retry_at_ms() == now + 32 * RETRY
    (worker,) = starts(w.check(now + 32 * RETRY, 1, []))
    w.registered(worker, now + 32 * RETRY)
    assert w.retry_at_ms() is None


def test_a_stopped_worker_exiting_is_no_failure() -> None:
    w = workers(slots=1)
    (worker,) = starts(w.check(0, 1, []))
    w.registered(worker, 0)
    assert stops(w.check(IDLE, 0, [TaskManagerSlots(worker, 1, 1)])) == [worker]
    assert w.exited(worker, "terminated", IDLE + 5) == []
    assert w.retry_at_ms() is None and w.workers() == {}


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="slots_per_worker"):
        ActiveWorkers(0, None, IDLE, RETRY)
    with pytest.raises(ValueError, match="number-of-slots.max"):
        ActiveWorkers(1, -1, IDLE, RETRY)


def test_where_the_output_is_is_named_but_not_part_of_the_cause() -> None:
    w = workers(slots=1)
    (first,) = starts(w.check(0, 1, []))
    (report,) = w.exited(first, "port taken", 0, "output: /log/1.out")
    assert "port taken (output: /log/1.out)" in report.message
    (second,) = starts(w.check(RETRY, 1, []))
    assert w.exited(second, "port taken", RETRY, "output: /log/2.out") == []
