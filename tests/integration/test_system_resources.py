"""A child process counts in the process tree's resources (tests/unit/test_system_resources.py has
the rest)."""
from __future__ import annotations

import subprocess
import sys
import time

from millstream.runtime.metrics.system import process_tree_rss_bytes
from millstream.runtime.metrics.system import process_rss_bytes


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
