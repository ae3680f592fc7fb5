"""The on-demand ResourceManager's shell warns about reactive mode without a slot limit: a reactive
job wishes slots up to each vertex's max parallelism, and TaskManagers would start for all of them
(Flink supports reactive mode on standalone clusters only)."""
from __future__ import annotations

import asyncio
import logging

import pytest

from millstream.jobmanager.resourcemanager.process_workers import OnDemandWorkers, ProcessDriver
from millstream.runtime import config as cfg


def started_with(options: dict[str, str], caplog: pytest.LogCaptureFixture, tmp_path) -> list[str]:
    conf = cfg.Configuration.from_dict({"resourcemanager.type": "process", "env.log.dir": str(tmp_path), **options})

    async def start_and_stop() -> None:
        workers = OnDemandWorkers(conf, lambda: "jm:6123", lambda: None, ProcessDriver(conf))
        workers.start()
        await workers.stop()

    with caplog.at_level(logging.WARNING, logger="millstream.jobmanager.resourcemanager.process_workers"):
        asyncio.run(start_and_stop())
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_reactive_mode_without_slotmanager_number_of_slots_max_is_warned(caplog, tmp_path) -> None:
    (warning,) = started_with({"scheduler-mode": "reactive"}, caplog, tmp_path)
    assert "scheduler-mode reactive" in warning and "slotmanager.number-of-slots.max" in warning


def test_reactive_mode_with_a_slot_limit_or_the_adaptive_scheduler_is_not_warned(caplog, tmp_path) -> None:
    assert started_with({"scheduler-mode": "reactive", "slotmanager.number-of-slots.max": "8"}, caplog, tmp_path) == []
    assert started_with({"jobmanager.scheduler": "adaptive"}, caplog, tmp_path) == []
