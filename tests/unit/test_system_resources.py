"""The process and host figures a TaskManager reports with its heartbeat (runtime/metrics/system.py)."""
from __future__ import annotations


from millstream.runtime.metrics.system import host_memory_bytes, process_rss_bytes


def test_host_memory_is_total_and_available() -> None:
    total, available = host_memory_bytes()
    assert 0 < available <= total
    assert process_rss_bytes("no-such-pid") == 0
