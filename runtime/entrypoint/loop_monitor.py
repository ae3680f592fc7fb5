"""How long a process's asyncio event loop was blocked (as dask's worker watches its ticks).

A timer that should fire every ``interval`` fires late by as long as something held the loop;
every heartbeat and RPC of the process waited as long. The monitor keeps the longest lag seen and
warns when one exceeds ``warn_ms``, naming the time, so a regression shows in the log.
"""
from __future__ import annotations

import asyncio
import logging

log = logging.getLogger(__name__)


class EventLoopMonitor:
    def __init__(self, name: str, interval_s: float = 0.02, warn_ms: float = 100.0) -> None:
        self.name = name
        self.interval_s = interval_s
        self.warn_ms = warn_ms
        self.max_lag_ms = 0.0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> "EventLoopMonitor":
        self._task = asyncio.ensure_future(self._run())
        return self

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self.interval_s
            await asyncio.sleep(self.interval_s)
            lag_ms = max(0.0, (loop.time() - due) * 1000)
            self.max_lag_ms = max(self.max_lag_ms, lag_ms)
            if lag_ms > self.warn_ms:
                log.warning("%s: the event loop was blocked for %.0f ms", self.name, lag_ms)
