"""Flink 2.3's rescale history of an adaptive-scheduler job (FLIP-495/487): the bodies of
``/jobs/:jobid/rescales/{config,overview,summary,history}`` and ``.../details/:rescaleuuid``, with
Flink's field names, from the job's rescale events (``JobSummary.rescales``, the same history as
Millstream's ``/jobs/:jobid/rescale-events`` timeline).

As in Flink, the history is served for jobs of the adaptive scheduler when
``web.adaptive-scheduler.rescale-history.size`` is above 0 (its default is 0: off), and holds that
many of the latest rescales; ``config`` is served for every adaptive-scheduler job. Elsewhere each
path answers 404 with Flink's message.

What Millstream records of a rescale, in Flink's terms: every new execution graph at another
parallelism is a COMPLETED rescale (terminatedReason SUCCEEDED) that began when the old graph began
to stop and ended when the new one was created; its triggerCause is NEW_RESOURCE_AVAILABLE (slots
came) or RECOVERABLE_FAILOVER (a failure, such as a lost TaskManager, restarted it smaller). Restarts
at the same parallelism and the first deployment are not rescales here (Flink lists them too, as
RECOVERABLE_FAILOVER and INITIAL_SCHEDULE). Slots carry no resource profile (Flink's UNKNOWN: -1).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from millstream.jobmanager.jobmaster.adaptive_scheduler import AdaptiveSettings
from millstream.jobmanager.rest.views import JobView, NotFound, stats_summary
from millstream.proto import cluster_pb2 as cpb
from millstream.runtime.execution_state import JobStatus

HISTORY_SIZE_KEY = "web.adaptive-scheduler.rescale-history.size"
# Flink's ResourceProfileInfo of ResourceProfile.UNKNOWN: no profile was requested or granted.
_UNKNOWN_PROFILE = {"cpuCores": -1.0, "taskHeapMemory": -1, "taskOffHeapMemory": -1, "managedMemory": -1,
                    "networkMemory": -1, "extendedResources": {}}


@dataclass(frozen=True)
class RescaleHistorySettings:
    """``history_size``: web.adaptive-scheduler.rescale-history.size; ``adaptive``: the cluster's
    adaptive scheduler settings (None: the default scheduler, no rescales)."""

    history_size: int = 0
    adaptive: AdaptiveSettings | None = None


def _adaptive(job: JobView, settings: RescaleHistorySettings) -> AdaptiveSettings:
    if settings.adaptive is None:  # the cluster's scheduler schedules every job of it
        raise NotFound(f"AdaptiveScheduler is not enabled for this job ({job.summary.job_id.hex()}).")
    return settings.adaptive


def _history(job: JobView, settings: RescaleHistorySettings) -> list[tuple[int, cpb.RescaleEvent]]:
    """The rescales kept (the latest ``history_size``), each with its attempt number (1, 2, ...)."""
    _adaptive(job, settings)
    if settings.history_size <= 0:
        raise NotFound(f"The job `{job.summary.job_id.hex()}` has not enabled the `Adaptive` scheduler, or it has "
                       f"been enabled but the value of configuration option `{HISTORY_SIZE_KEY}` has not been set "
                       "to greater than `0`.")
    numbered = list(enumerate(job.summary.rescales, start=1))
    return numbered[-settings.history_size:]


def config_view(job: JobView, settings: RescaleHistorySettings) -> dict[str, Any]:
    """Flink's JobRescaleConfigInfo: one stabilization timeout serves the submission and the running
    job here; a rescale waits for no cooldown and takes its checkpoint at once (0 ms), and a failed
    checkpoint does not count towards one (0)."""
    adaptive = _adaptive(job, settings)
    return {
        "rescaleHistoryMax": settings.history_size,
        "schedulerExecutionMode": "REACTIVE" if adaptive.reactive else None,
        "submissionResourceWaitTimeoutInMillis": adaptive.resource_wait_timeout_ms,
        "submissionResourceStabilizationTimeoutInMillis": adaptive.resource_stabilization_timeout_ms,
        "slotIdleTimeoutInMillis": 0,
        "executingCooldownTimeoutInMillis": 0,
        "executingResourceStabilizationTimeoutInMillis": adaptive.resource_stabilization_timeout_ms,
        "maximumDelayForTriggeringRescaleInMillis": 0,
        "rescaleOnFailedCheckpointCount": 0,
    }


def _counts(job: JobView) -> dict[str, int]:
    restarting = JobStatus.from_proto(job.summary.status) is JobStatus.RESTARTING
    return {"ignored": 0, "inProgress": 1 if restarting else 0, "completed": len(job.summary.rescales), "failed": 0}


def overview_view(job: JobView, settings: RescaleHistorySettings) -> dict[str, Any]:
    """Flink's JobRescalesOverview: the counts and the latest rescale of each terminal state."""
    kept = _history(job, settings)
    latest = _details(job, *kept[-1], with_states=False) if kept else None
    return {"rescalesCounts": _counts(job), "latest": {"completed": latest, "failed": None, "ignored": None}}


def summary_view(job: JobView, settings: RescaleHistorySettings) -> dict[str, Any]:
    """Flink's JobRescalesSummary: the counts and the durations (ms) of every rescale so far."""
    _history(job, settings)
    durations = [_duration(r) for r in job.summary.rescales]
    return {"rescalesCounts": _counts(job), "rescalesDurationStatsInMillis": stats_summary(durations),
            "completedRescalesDurationStatsInMillis": stats_summary(durations),
            "ignoredRescalesDurationStatsInMillis": stats_summary([]),
            "failedRescalesDurationStatsInMillis": stats_summary([])}


def history_view(job: JobView, settings: RescaleHistorySettings) -> list[dict[str, Any]]:
    """Flink's JobRescalesHistory: the kept rescales, latest first, without scheduler states."""
    return [_details(job, attempt, r, with_states=False) for attempt, r in reversed(_history(job, settings))]


def details_view(job: JobView, settings: RescaleHistorySettings, rescale_uuid: str) -> dict[str, Any]:
    """Flink's JobRescaleDetails of one kept rescale, with its scheduler states."""
    for attempt, r in _history(job, settings):
        if _rescale_uuid(job, attempt, r) == rescale_uuid.lower():
            return _details(job, attempt, r, with_states=True)
    raise NotFound(f"Could not find rescale details of specified rescaleUuid {rescale_uuid}.")


def _duration(r: cpb.RescaleEvent) -> int:
    return max(0, r.timestamp_ms - (r.start_timestamp_ms or r.timestamp_ms))


def _id(*parts: bytes) -> str:
    """A stable 32-hex-digit id (Flink's AbstractID) for what Millstream names, not numbers."""
    return hashlib.md5(b"\0".join(parts)).hexdigest()


def _rescale_uuid(job: JobView, attempt: int, r: cpb.RescaleEvent) -> str:
    return r.rescale_id.hex() or _id(job.summary.job_id, b"rescale", str(attempt).encode())


def _details(job: JobView, attempt: int, r: cpb.RescaleEvent, with_states: bool) -> dict[str, Any]:
    job_id = job.summary.job_id
    vertices: dict[str, Any] = {}
    slots: dict[str, dict[str, Any]] = {}
    for v in r.vertices:
        group_id = _id(job_id, b"slot-sharing-group", v.slot_sharing_group.encode())
        vertices[v.vertex_id.hex()] = {
            "jobVertexId": v.vertex_id.hex(), "jobVertexName": v.name, "slotSharingGroupId": group_id,
            "slotSharingGroupName": v.slot_sharing_group, "desiredParallelism": v.desired_parallelism,
            "sufficientParallelism": v.sufficient_parallelism, "preRescaleParallelism": v.pre_rescale_parallelism,
            "postRescaleParallelism": v.post_rescale_parallelism}
        # a slot sharing group takes as many slots as its widest vertex has subtasks
        group = slots.setdefault(group_id, {
            "slotSharingGroupId": group_id, "slotSharingGroupName": v.slot_sharing_group,
            "requestResourceProfile": _UNKNOWN_PROFILE, "desiredSlots": 0, "minimalRequiredSlots": 0,
            "preRescaleSlots": 0, "postRescaleSlots": 0, "acquiredResourceProfile": _UNKNOWN_PROFILE})
        for key, value in (("desiredSlots", v.desired_parallelism), ("minimalRequiredSlots", v.sufficient_parallelism),
                           ("preRescaleSlots", v.pre_rescale_parallelism),
                           ("postRescaleSlots", v.post_rescale_parallelism)):
            group[key] = max(group[key], value)
    start = r.start_timestamp_ms or r.timestamp_ms
    failover = r.trigger_cause == "RECOVERABLE_FAILOVER"
    # The one scheduler state Millstream times within a rescale: Restarting, from the old graph's
    # stop to the new graph (the exception: the failure that restarted it).
    states = [{"state": "Restarting", "enterTimestampInMillis": start, "leaveTimestampInMillis": r.timestamp_ms,
               "durationInMillis": _duration(r), "stringifiedException": r.reason if failover else None}]
    return {
        "rescaleUuid": _rescale_uuid(job, attempt, r),
        # no resource requirements update (Flink's UPDATE_REQUIREMENT) here: one epoch per job
        "resourceRequirementsUuid": _id(job_id, b"resource-requirements"),
        "rescaleAttemptId": attempt,
        "vertices": vertices,
        "slots": slots,
        "schedulerStates": states if with_states else None,
        "startTimestampInMillis": start,
        "endTimestampInMillis": r.timestamp_ms,
        "terminalState": "COMPLETED",
        "triggerCause": r.trigger_cause or "NEW_RESOURCE_AVAILABLE",
        "terminatedReason": "SUCCEEDED",
    }
