"""The Prometheus reporter: Flink's names and labels, the port range, /metrics over HTTP."""
from __future__ import annotations

import asyncio
import socket

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from millstream.runtime import config as cfg
from millstream.runtime.metrics.prometheus import (
    JobReport,
    PrometheusReporter,
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_reporter_serves_metrics_read_at_scrape_time_and_takes_the_next_free_port() -> None:
    scrapes = []

    def read() -> list:
        scrapes.append(1)
        return taskmanager_families("tm-1", "h", 2, len(scrapes), 0, 1, [])

    async def main() -> None:
        blocker = socket.socket()
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        taken = blocker.getsockname()[1]
        reporter = PrometheusReporter("TaskManager tm-1", read)
        try:
            port = await reporter.start("127.0.0.1", range(taken, taken + 1))
        except OSError as exc:
            assert "no free port for the Prometheus reporter" in str(exc)
        else:
            raise AssertionError(f"bound the taken port {port}")
        free = _free_port()
        port = await reporter.start("127.0.0.1", range(free, free + 1))
        try:
            async with aiohttp.ClientSession() as session:
                for expected in (1, 2):
                    async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
                        assert response.status == 200 and response.headers["Content-Type"].startswith("text/plain")
                        text = await response.text()
                    values = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
                    assert values["flink_taskmanager_Status_taskSlotsAvailable"] == expected
        finally:
            await reporter.stop()
            blocker.close()

    asyncio.run(main())


def test_start_reporter_without_the_option_or_without_a_free_port() -> None:
    async def main() -> None:
        assert await start_reporter("JobManager", list, "127.0.0.1", None) is None
        blocker = socket.socket()
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        try:
            assert await start_reporter("JobManager", list, "127.0.0.1", str(port)) is None  # logged, runs on
        finally:
            blocker.close()
        with pytest.raises(cfg.ConfigurationError):
            await start_reporter("JobManager", list, "127.0.0.1", "92x")

    asyncio.run(main())
