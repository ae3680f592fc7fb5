"""Log hygiene of real processes: a cluster process's stdout file rotated by size, a stdout that is
no file left alone, the open files limit raised (tests/unit/test_log_hygiene.py has the rest)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path


def test_stdout_written_to_a_file_is_rotated_by_size(tmp_path: Path) -> None:
    out = tmp_path / "jobmanager.log"
    script = textwrap.dedent("""
        import sys, time
        from millstream.runtime.entrypoint.log_hygiene import StdoutRotation
        rotation = StdoutRotation(max_bytes=20_000, backups=2, interval_s=0.05).start()
        assert rotation.path is not None
        for i in range(400):
            print("x" * 99, flush=True)           # stdout
            print("e" * 99, file=sys.stderr, flush=True)   # stderr shares the file
            if i % 20 == 0:
                time.sleep(0.06)
    """)
    with open(out, "ab") as log:
        subprocess.run([sys.executable, "-c", script], stdout=log, stderr=subprocess.STDOUT, check=True, timeout=60)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["jobmanager.log", "jobmanager.log.1", "jobmanager.log.2"], files
    for name in files:
        assert os.path.getsize(tmp_path / name) < 20_000 + 8_000, name  # bounded (one check interval over)
    assert (tmp_path / "jobmanager.log").read_text().count("e" * 99) > 0  # stderr followed the rotation


def test_stdout_that_is_not_a_file_is_left_alone() -> None:
    script = "from millstream.runtime.entrypoint.log_hygiene import StdoutRotation; print(StdoutRotation(1, 1).path)"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == "None"  # a pipe


def test_a_cluster_process_raises_its_open_files_limit() -> None:
    script = ("import resource; from millstream.runtime.entrypoint.process import raise_open_files_limit; "
              "soft = raise_open_files_limit(); print(soft, resource.getrlimit(resource.RLIMIT_NOFILE)[0])")
    done = subprocess.run(["sh", "-c", f"ulimit -S -n 256; exec {sys.executable} -c '{script}'"],
                          capture_output=True, text=True, check=True, timeout=60)
    soft, now = map(int, done.stdout.split())
    assert soft == now and now > 256
