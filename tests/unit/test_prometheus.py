"""The Prometheus reporter: Flink's names and labels, the port range, /metrics over HTTP."""
from __future__ import annotations

import asyncio

import pytest

from millstream.runtime import config as cfg
from millstream.runtime.metrics.prometheus import (
    JobReport,
    TaskReport,
    jobmanager_families,
    process_rss_bytes,
    start_reporter,
    taskmanager_families,
)


def _samples(families: list) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def test_port_ranges_as_flink_spells_them() -> None:
    key = cfg.METRICS_PROMETHEUS_PORT.key
    assert cfg.parse_port_range("9249", key) == range(9249, 9250)
    assert cfg.parse_port_range(" 9249-9260 ", key) == range(9249, 9261)
    for bad in ("", "abc", "9260-9249", "70000", "1-2-3", "0-10"):
        with pytest.raises(cfg.ConfigurationError, match="metrics.reporter.prom.port"):
            asyncio.run(start_reporter("jobmanager", list, "127.0.0.1", bad or " "))


def test_taskmanager_families_use_flinks_names_and_labels() -> None:
    task = TaskReport("ab" * 16, "wc", "Map -> Sink", 1, 0,
                      {"numRecordsIn": 10, "Map.my.seen": 7, "Map.region.eu.size": 3},
                      {"Map.my.seen": ("operator_my_seen", {"operator_name": "Map"}),
                       "Map.region.eu.size": ("operator_region_size", {"operator_name": "Map", "region": "eu"})})
    samples = _samples(taskmanager_families("tm-1", "host-a", 4, 3, 12, 1000, [task]))
    base = {"host": "host-a", "tm_id": "tm-1", "job_id": "ab" * 16, "job_name": "wc", "task_name": "Map -> Sink",
            "subtask_index": "1", "task_attempt_num": "0"}
    assert samples[("flink_taskmanager_job_task_numRecordsIn", tuple(sorted(base.items())))] == 10
    assert samples[("flink_taskmanager_job_task_operator_my_seen",
                    tuple(sorted({**base, "operator_name": "Map"}.items())))] == 7
    assert samples[("flink_taskmanager_job_task_operator_region_size",
                    tuple(sorted({**base, "operator_name": "Map", "region": "eu"}.items())))] == 3
    tm = (("host", "host-a"), ("tm_id", "tm-1"))
    assert samples[("flink_taskmanager_Status_taskSlotsTotal", tm)] == 4
    assert samples[("flink_taskmanager_Status_taskSlotsAvailable", tm)] == 3
    assert samples[("flink_taskmanager_Status_numHeartbeatsReceived", tm)] == 12
    assert samples[("flink_taskmanager_Status_ProcessTree_Memory_RSS", tm)] == 1000


def test_jobmanager_families() -> None:
    job = JobReport("cd" * 16, "wc", uptime_ms=5000, num_restarts=2, completed_checkpoints=3, failed_checkpoints=1,
                    last_checkpoint_duration_ms=40, last_checkpoint_size=2048)
    samples = _samples(jobmanager_families("jm-host", 2, 8, 5, 1, 1000, [job]))
    labels = (("host", "jm-host"), ("job_id", "cd" * 16), ("job_name", "wc"))
    assert samples[("flink_jobmanager_job_uptime", labels)] == 5000
    assert samples[("flink_jobmanager_job_numRestarts", labels)] == 2
    assert samples[("flink_jobmanager_job_numberOfCompletedCheckpoints", labels)] == 3
    assert samples[("flink_jobmanager_job_numberOfFailedCheckpoints", labels)] == 1
    assert samples[("flink_jobmanager_job_totalNumberOfCheckpoints", labels)] == 4
    assert samples[("flink_jobmanager_job_lastCheckpointDuration", labels)] == 40
    assert samples[("flink_jobmanager_job_lastCheckpointSize", labels)] == 2048
    assert samples[("flink_jobmanager_taskSlotsAvailable", (("host", "jm-host"),))] == 5


def test_process_rss_is_a_plausible_size() -> None:
    assert 1 << 20 < process_rss_bytes() < 1 << 40
