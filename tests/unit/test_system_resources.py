"""The process and host figures a TaskManager reports with its heartbeat (runtime/metrics/system.py)."""
from __future__ import annotations

import subprocess
import sys
import time

from millstream.runtime.metrics.system import host_memory_bytes, process_rss_bytes, process_tree_rss_bytes


def test_a_child_process_counts_in_the_process_tree() -> None:
    alone = process_tree_rss_bytes()
    assert alone >= process_rss_bytes() > 1 << 20
    # A child that holds ~200 MB resident: the tree grows by about that much, this process does not.
    child = subprocess.Popen([sys.executable, "-c", "import sys, time; b = bytearray(200 << 20); "
                              "print('ready', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        with_child = process_tree_rss_bytes()
        assert with_child - alone > 150 << 20, (alone, with_child)
        assert process_rss_bytes(child.pid) > 190 << 20
    finally:
        child.kill()
        child.wait()
    time.sleep(0.05)
    assert process_tree_rss_bytes() - alone < 50 << 20


def test_host_memory_is_total_and_available() -> None:
    total, available = host_memory_bytes()
    assert 0 < available <= total
    assert process_rss_bytes("no-such-pid") == 0
