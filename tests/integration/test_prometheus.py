"""The Prometheus reporter's HTTP side on real sockets: /metrics read at scrape time, the port range
skipping a taken port (the pure rules are tests/unit/test_prometheus.py)."""
from __future__ import annotations

import asyncio
import socket

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from millstream.runtime import config as cfg
from millstream.runtime.metrics.prometheus import PrometheusReporter, start_reporter, taskmanager_families


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
