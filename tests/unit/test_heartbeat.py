"""HeartbeatMonitor: heartbeat timeout, the RPC-failure threshold, and single loss reports."""
from __future__ import annotations

import logging

import pytest

from millstream.runtime.heartbeat import HeartbeatMonitor

INTERVAL = 100
TIMEOUT = 500


@pytest.fixture
def hb() -> HeartbeatMonitor[str]:
    return HeartbeatMonitor(INTERVAL, TIMEOUT)


def test_timeout_counts_from_monitoring_and_is_reported_once(hb: HeartbeatMonitor[str],
                                                            caplog: pytest.LogCaptureFixture
                                                            ) -> None:
    hb.monitor_target("tm-1", now=1_000)
    assert hb.timed_out(now=1_000 + TIMEOUT) == []  # exactly the timeout: not *longer*
    with caplog.at_level(logging.WARNING, logger="millstream.runtime.heartbeat"):
        assert hb.timed_out(now=1_001 + TIMEOUT) == ["tm-1"]
    assert "heartbeat of tm-1 timed out" in caplog.text
    assert hb.timed_out(now=10_000) == []  # reported once
    assert hb.is_lost("tm-1") and hb.targets() == ["tm-1"]


def test_heartbeats_reset_the_timeout(hb: HeartbeatMonitor[str]) -> None:
    hb.monitor_target("tm-1", now=0)
    hb.monitor_target("tm-2", now=0)
    lost: list[tuple[int, str]] = []
    for now in range(INTERVAL, 10 * TIMEOUT, INTERVAL):
        assert hb.record_heartbeat("tm-1", now)
        lost += [(now, target) for target in hb.timed_out(now)]
    assert lost == [(TIMEOUT + INTERVAL, "tm-2")]  # the silent one only, once
    assert not hb.is_lost("tm-1") and hb.is_lost("tm-2")
    assert hb.last_heartbeat("tm-1") == 10 * TIMEOUT - INTERVAL


def test_an_older_heartbeat_does_not_move_the_clock_back(hb: HeartbeatMonitor[str]) -> None:
    hb.monitor_target("jm", now=0)
    hb.record_heartbeat("jm", now=400)
    hb.record_heartbeat("jm", now=300)  # delivered late
    assert hb.last_heartbeat("jm") == 400
    assert hb.timed_out(now=400 + TIMEOUT) == []


def test_rpc_failures_reaching_the_threshold_make_the_target_unreachable_once(
        hb: HeartbeatMonitor[str]) -> None:
    hb.monitor_target("tm-1", now=0)
    assert hb.record_rpc_failure("tm-1", now=10) is False
    assert hb.record_rpc_failure("tm-1", now=20) is True  # threshold 2: unreachable
    assert hb.is_lost("tm-1")
    assert hb.record_rpc_failure("tm-1", now=30) is False  # reported once
    assert hb.timed_out(now=10 * TIMEOUT) == []  # and not reported again as a timeout


def test_a_successful_heartbeat_resets_the_failure_count(hb: HeartbeatMonitor[str]) -> None:
    hb.monitor_target("tm-1", now=0)
    assert hb.record_rpc_failure("tm-1", now=10) is False
    assert hb.record_heartbeat("tm-1", now=20)
    assert hb.record_rpc_failure("tm-1", now=30) is False  # counting starts again
    assert hb.record_rpc_failure("tm-1", now=40) is True


def test_rpc_failures_below_threshold_still_time_out(hb: HeartbeatMonitor[str]) -> None:
    hb.monitor_target("tm-1", now=0)
    assert hb.record_rpc_failure("tm-1", now=100) is False
    assert hb.timed_out(now=TIMEOUT + 1) == ["tm-1"]
    assert hb.record_rpc_failure("tm-1", now=TIMEOUT + 2) is False


def test_threshold_below_one_disables_the_rpc_failure_rule() -> None:
    hb: HeartbeatMonitor[str] = HeartbeatMonitor(INTERVAL, TIMEOUT, rpc_failure_threshold=-1)
    hb.monitor_target("tm-1", now=0)
    assert not any(hb.record_rpc_failure("tm-1", now=i) for i in range(100))
    assert hb.timed_out(now=TIMEOUT + 1) == ["tm-1"]


def test_lost_targets_ignore_late_heartbeats_until_monitored_again(
        hb: HeartbeatMonitor[str]) -> None:
    hb.monitor_target("tm-1", now=0)
    assert hb.timed_out(now=TIMEOUT + 1) == ["tm-1"]
    assert hb.record_heartbeat("tm-1", now=TIMEOUT + 2) is False  # the loss was acted on
    assert hb.is_lost("tm-1")
    hb.monitor_target("tm-1", now=2_000)  # it registered again
    assert not hb.is_lost("tm-1")
    assert hb.timed_out(now=2_000 + TIMEOUT) == []
    assert hb.timed_out(now=2_001 + TIMEOUT) == ["tm-1"]


def test_unmonitored_and_unknown_targets_are_ignored(hb: HeartbeatMonitor[str]) -> None:
    hb.monitor_target("tm-1", now=0)
    assert hb.unmonitor_target("tm-1") is True
    assert hb.unmonitor_target("tm-1") is False
    assert hb.record_heartbeat("tm-1", now=1) is False
    assert hb.record_rpc_failure("tm-1", now=1) is False
    assert hb.timed_out(now=10 * TIMEOUT) == [] and hb.targets() == []
    assert hb.last_heartbeat("tm-1") is None and not hb.is_lost("tm-1")


def test_requests_are_due_once_per_interval_for_live_targets(hb: HeartbeatMonitor[str]) -> None:
    hb.monitor_target("tm-1", now=0)
    hb.monitor_target("tm-2", now=50)
    assert hb.requests_due(now=50) == ["tm-1", "tm-2"]
    assert hb.requests_due(now=100) == []
    assert hb.requests_due(now=150) == ["tm-1", "tm-2"]
    hb.record_rpc_failure("tm-2", now=150)
    hb.record_rpc_failure("tm-2", now=160)
    assert hb.requests_due(now=250) == ["tm-1"]  # no requests to a lost target


def test_byte_ids_work_as_targets() -> None:
    hb: HeartbeatMonitor[bytes] = HeartbeatMonitor(INTERVAL, TIMEOUT)
    hb.monitor_target(b"job", now=0)
    assert hb.timed_out(now=TIMEOUT + 1) == [b"job"]


@pytest.mark.parametrize("interval,timeout", [(0, 100), (100, 0), (200, 100)])
def test_invalid_intervals_are_rejected(interval: int, timeout: int) -> None:
    with pytest.raises(ValueError):
        HeartbeatMonitor(interval, timeout)
