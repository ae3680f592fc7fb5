"""The two clocks of the control plane, in integer milliseconds.

`now_ms` is monotonic: deadlines, timeouts, heartbeats and restart delays, which must not jump with
the wall clock. `wall_ms` is epoch time: what users read (job start and end times, checkpoint
times in the REST API and `millstream status`). Pure cores take either as an injected callable.
"""
from __future__ import annotations

import time


def now_ms() -> int:
    """Monotonic milliseconds (only differences mean something)."""
    return int(time.monotonic() * 1000)


def wall_ms() -> int:
    """Milliseconds since the epoch."""
    return int(time.time() * 1000)
