"""Flink 2.3's /jobs/:jobid/rescales/* bodies from a job's rescale events (FLIP-495/487): which
paths answer when (the adaptive scheduler; web.adaptive-scheduler.rescale-history.size above 0,
as Flink gates them), what they count and keep, and each rescale's fields. Their JSON shapes are
checked against Flink's own classes in tests/integration/test_adaptive_scheduler.py."""
from __future__ import annotations

import pytest

from millstream.jobmanager.jobmaster.adaptive_scheduler import AdaptiveSettings
from millstream.jobmanager.rest import rescales
from millstream.jobmanager.rest.rescales import RescaleHistorySettings
from millstream.jobmanager.rest.views import JobView, NotFound
from millstream.proto import cluster_pb2 as cpb

JOB = bytes(range(16))
SOURCE, SINK = b"s" * 16, b"k" * 16
ADAPTIVE = AdaptiveSettings(resource_stabilization_timeout_ms=1_000, resource_wait_timeout_ms=60_000)
ON = RescaleHistorySettings(history_size=10, adaptive=ADAPTIVE)


def _rescale(job: JobView, start: int, end: int, before: int, after: int, cause: str, rescale_id: bytes) -> None:
    r = job.summary.rescales.add(timestamp_ms=end, start_timestamp_ms=start, old_parallelism=before,
                                 new_parallelism=after, reason="why", trigger_cause=cause, rescale_id=rescale_id)
    r.vertices.add(vertex_id=SOURCE, name="Source", slot_sharing_group="default", desired_parallelism=4,
                   sufficient_parallelism=1, pre_rescale_parallelism=before, post_rescale_parallelism=after)
    r.vertices.add(vertex_id=SINK, name="Sink", slot_sharing_group="sinks", desired_parallelism=1,
                   sufficient_parallelism=1, pre_rescale_parallelism=1, post_rescale_parallelism=1)


def job(status: int = cpb.RUNNING) -> JobView:
    view = JobView(cpb.JobSummary(job_id=JOB, job_name="counting", status=status), scheduler_type="Adaptive")
    _rescale(view, 1_000, 1_600, 1, 2, "NEW_RESOURCE_AVAILABLE", b"\x01" * 16)
    _rescale(view, 5_000, 5_900, 2, 1, "RECOVERABLE_FAILOVER", b"\x02" * 16)
    return view


@pytest.mark.parametrize("view", [rescales.overview_view, rescales.summary_view, rescales.history_view,
                                  rescales.config_view])
def test_under_the_default_scheduler_every_path_answers_404_naming_the_adaptive_scheduler(view) -> None:  # noqa: ANN001
    with pytest.raises(NotFound, match="AdaptiveScheduler is not enabled"):
        view(job(), RescaleHistorySettings(history_size=10, adaptive=None))


@pytest.mark.parametrize("view", [rescales.overview_view, rescales.summary_view, rescales.history_view])
def test_with_the_history_size_at_flinks_default_0_the_history_is_off_but_the_config_is_served(view) -> None:  # noqa: ANN001
    off = RescaleHistorySettings(history_size=0, adaptive=ADAPTIVE)
    with pytest.raises(NotFound, match="web.adaptive-scheduler.rescale-history.size"):
        view(job(), off)
    with pytest.raises(NotFound):
        rescales.details_view(job(), off, (b"\x01" * 16).hex())
    assert rescales.config_view(job(), off)["rescaleHistoryMax"] == 0


def test_history_lists_the_latest_rescales_first_each_a_completed_one_with_its_cause_times_and_vertices() -> None:
    first, second = (b"\x01" * 16).hex(), (b"\x02" * 16).hex()
    history = rescales.history_view(job(), ON)
    assert [h["rescaleUuid"] for h in history] == [second, first]
    latest = history[0]
    assert (latest["triggerCause"], latest["terminalState"], latest["terminatedReason"]) == (
        "RECOVERABLE_FAILOVER", "COMPLETED", "SUCCEEDED")
    assert (latest["startTimestampInMillis"], latest["endTimestampInMillis"]) == (5_000, 5_900)
    assert latest["rescaleAttemptId"] == 2 and history[1]["rescaleAttemptId"] == 1
    assert latest["resourceRequirementsUuid"] == history[1]["resourceRequirementsUuid"]  # no requirements update
    assert latest["schedulerStates"] is None  # the history leaves them out, as Flink's does
    source = latest["vertices"][SOURCE.hex()]
    assert source == {"jobVertexId": SOURCE.hex(), "jobVertexName": "Source", "slotSharingGroupId": source["slotSharingGroupId"],
                      "slotSharingGroupName": "default", "desiredParallelism": 4, "sufficientParallelism": 1,
                      "preRescaleParallelism": 2, "postRescaleParallelism": 1}
    # a slot sharing group's slots are its widest vertex's subtasks
    slots = {s["slotSharingGroupName"]: s for s in latest["slots"].values()}
    assert {name: (s["desiredSlots"], s["preRescaleSlots"], s["postRescaleSlots"]) for name, s in slots.items()} == {
        "default": (4, 2, 1), "sinks": (1, 1, 1)}
    assert slots["default"]["slotSharingGroupId"] == source["slotSharingGroupId"]
    assert len(source["slotSharingGroupId"]) == 32 and source["slotSharingGroupId"] != slots["sinks"]["slotSharingGroupId"]


def test_the_history_keeps_only_the_configured_number_of_latest_rescales_and_the_counts_all() -> None:
    one = RescaleHistorySettings(history_size=1, adaptive=ADAPTIVE)
    assert [h["rescaleUuid"] for h in rescales.history_view(job(), one)] == [(b"\x02" * 16).hex()]
    with pytest.raises(NotFound, match="Could not find rescale details"):
        rescales.details_view(job(), one, (b"\x01" * 16).hex())  # dropped from the history
    assert rescales.summary_view(job(), one)["rescalesCounts"]["completed"] == 2


def test_details_of_one_rescale_carry_its_scheduler_states_and_an_unknown_id_answers_404() -> None:
    details = rescales.details_view(job(), ON, (b"\x02" * 16).hex().upper())
    assert details["rescaleUuid"] == (b"\x02" * 16).hex()
    assert details["schedulerStates"] == [{"state": "Restarting", "enterTimestampInMillis": 5_000,
                                           "leaveTimestampInMillis": 5_900, "durationInMillis": 900,
                                           "stringifiedException": "why"}]
    with pytest.raises(NotFound, match="Could not find rescale details of specified rescaleUuid 00"):
        rescales.details_view(job(), ON, "00" * 16)


def test_overview_and_summary_count_the_rescales_and_time_them() -> None:
    overview = rescales.overview_view(job(), ON)
    assert overview["rescalesCounts"] == {"ignored": 0, "inProgress": 0, "completed": 2, "failed": 0}
    assert overview["latest"]["completed"]["rescaleUuid"] == (b"\x02" * 16).hex()
    assert overview["latest"]["failed"] is None and overview["latest"]["ignored"] is None
    assert rescales.overview_view(job(cpb.RESTARTING), ON)["rescalesCounts"]["inProgress"] == 1
    summary = rescales.summary_view(job(), ON)
    stats = summary["completedRescalesDurationStatsInMillis"]
    assert (stats["min"], stats["max"], stats["avg"]) == (600, 900, 750)
    assert summary["rescalesDurationStatsInMillis"] == stats
    assert summary["failedRescalesDurationStatsInMillis"]["max"] == 0


def test_a_job_without_rescales_has_an_empty_history_and_no_latest() -> None:
    quiet = JobView(cpb.JobSummary(job_id=JOB, status=cpb.RUNNING), scheduler_type="Adaptive")
    assert rescales.history_view(quiet, ON) == []
    assert rescales.overview_view(quiet, ON)["latest"] == {"completed": None, "failed": None, "ignored": None}


def test_config_reports_the_adaptive_schedulers_timeouts_and_reactive_mode() -> None:
    config = rescales.config_view(job(), ON)
    assert config["rescaleHistoryMax"] == 10 and config["schedulerExecutionMode"] is None
    assert config["submissionResourceStabilizationTimeoutInMillis"] == 1_000
    assert config["executingResourceStabilizationTimeoutInMillis"] == 1_000
    assert config["submissionResourceWaitTimeoutInMillis"] == 60_000
    reactive = RescaleHistorySettings(10, AdaptiveSettings(resource_stabilization_timeout_ms=0, reactive=True))
    assert rescales.config_view(job(), reactive)["schedulerExecutionMode"] == "REACTIVE"
