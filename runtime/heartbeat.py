"""Heartbeat bookkeeping for one side of a connection (Flink's HeartbeatManager, without timers).

Pure core: the caller passes `now` in milliseconds and runs the I/O. Both sides use it: the
ResourceManager and each JobMaster monitor their TaskManagers (sending a heartbeat request every
`interval_ms` to the targets `requests_due()` names), and a TaskManager monitors its
ResourceManager and JobMasters (recording the requests it receives).

A target is lost when nothing was heard from it for longer than `timeout_ms` (`timed_out`), or
when `rpc_failure_threshold` heartbeat RPCs in a row failed (`record_rpc_failure`, Flink's
`heartbeat.rpc-failure-threshold`; a value below 1 disables it). A lost target is reported once
and stays lost, ignoring late heartbeats, until it is monitored again or unmonitored: the caller
has already acted on the loss (failed the tasks, dropped the slots).
"""
from __future__ import annotations

import logging
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

TargetId = TypeVar("TargetId", bound=Hashable)


@dataclass(eq=False)
class _Target:
    last_heartbeat_ms: int
    last_request_ms: int | None = None
    consecutive_rpc_failures: int = 0
    lost: bool = False


class HeartbeatMonitor(Generic[TargetId]):
    """Tracks when each monitored target was last heard from and decides when it is lost."""

    def __init__(self, interval_ms: int, timeout_ms: int, rpc_failure_threshold: int = 2) -> None:
        if interval_ms <= 0 or timeout_ms <= 0:
            raise ValueError(f"heartbeat interval ({interval_ms} ms) and timeout ({timeout_ms} ms) "
                             f"must be positive")
        if timeout_ms < interval_ms:
            raise ValueError(f"heartbeat.timeout ({timeout_ms} ms) must not be smaller than "
                             f"heartbeat.interval ({interval_ms} ms)")
        self.interval_ms = interval_ms
        self.timeout_ms = timeout_ms
        self.rpc_failure_threshold = rpc_failure_threshold
        self._targets: dict[TargetId, _Target] = {}

    def monitor_target(self, target_id: TargetId, now: int) -> None:
        """Start (or restart) monitoring; the timeout counts from `now`."""
        self._targets[target_id] = _Target(last_heartbeat_ms=now)

    def unmonitor_target(self, target_id: TargetId) -> bool:
        return self._targets.pop(target_id, None) is not None

    def record_heartbeat(self, target_id: TargetId, now: int) -> bool:
        """A heartbeat was answered or received. False if the target is unknown or already lost."""
        target = self._targets.get(target_id)
        if target is None or target.lost:
            return False
        target.last_heartbeat_ms = max(target.last_heartbeat_ms, now)
        target.consecutive_rpc_failures = 0
        return True

    def record_rpc_failure(self, target_id: TargetId, now: int) -> bool:
        """A heartbeat RPC to the target failed. True exactly once: when it is now unreachable."""
        target = self._targets.get(target_id)
        if target is None or target.lost:
            return False
        target.consecutive_rpc_failures += 1
        if 0 < self.rpc_failure_threshold <= target.consecutive_rpc_failures:
            target.lost = True
            log.warning("heartbeat target %s unreachable: %d heartbeat RPCs in a row failed "
                        "(at %d ms)", target_id, target.consecutive_rpc_failures, now)
            return True
        return False

    def timed_out(self, now: int) -> list[TargetId]:
        """Targets not heard from for longer than the timeout; each is reported once."""
        lost = []
        for target_id, target in self._targets.items():
            if not target.lost and now - target.last_heartbeat_ms > self.timeout_ms:
                target.lost = True
                log.warning("heartbeat of %s timed out: nothing heard for %d ms (timeout %d ms)",
                            target_id, now - target.last_heartbeat_ms, self.timeout_ms)
                lost.append(target_id)
        return lost

    def requests_due(self, now: int) -> list[TargetId]:
        """Targets to send a heartbeat request to now (one per interval); records the send."""
        due = []
        for target_id, target in self._targets.items():
            if target.lost:
                continue
            if target.last_request_ms is None or now - target.last_request_ms >= self.interval_ms:
                target.last_request_ms = now
                due.append(target_id)
        return due

    def targets(self) -> list[TargetId]:
        """Monitored targets, lost ones included until they are unmonitored."""
        return list(self._targets)

    def is_lost(self, target_id: TargetId) -> bool:
        target = self._targets.get(target_id)
        return target is not None and target.lost

    def last_heartbeat(self, target_id: TargetId) -> int | None:
        target = self._targets.get(target_id)
        return None if target is None else target.last_heartbeat_ms
