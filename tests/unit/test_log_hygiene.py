"""Bounded logs: repeated warnings rate limited, a process's stdout file rotated by size."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from millstream.runtime.entrypoint.log_hygiene import RepeatFilter


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _logger(name: str, repeat: RepeatFilter) -> tuple[logging.Logger, list[str]]:
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = Collect()
    handler.addFilter(repeat)
    logger = logging.getLogger(name)
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    return logger, lines


def test_a_flood_of_one_error_is_a_burst_then_a_count() -> None:
    clock = Clock()
    logger, lines = _logger("test.flood", RepeatFilter(burst=3, interval_s=10, clock=clock))
    for i in range(1000):  # asyncio's accept error, once per retry
        logger.error("socket.accept() out of system resource\nsocket: fd=%d", 6)
        logger.info("info %d is never limited", i)
    errors = [line for line in lines if line.startswith("socket.accept()")]
    assert len(errors) == 3
    assert len([line for line in lines if line.startswith("info")]) == 1000
    logger.warning("another message")
    assert lines[-1] == "another message"  # other messages have their own allowance
    clock.now = 10.5
    logger.error("socket.accept() out of system resource\nsocket: fd=%d", 6)
    assert lines[-1] == "socket.accept() out of system resource\nsocket: fd=6 [997 more like this suppressed in 10 s]"


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


def test_each_handler_counts_a_record_once() -> None:
    from millstream.runtime.entrypoint.log_hygiene import install_repeat_filter

    logger = logging.getLogger("test.two-handlers")
    logger.propagate, logger.handlers[:] = False, []
    seen: list[list[str]] = [[], []]
    for lines in seen:
        handler = logging.Handler()
        handler.emit = lambda record, lines=lines: lines.append(record.getMessage())  # type: ignore[method-assign]
        logger.addHandler(handler)
    install_repeat_filter(logger, burst=4)
    for _ in range(10):
        logger.warning("refused a call from %s", "peer")
    assert [len(lines) for lines in seen] == [4, 4]


def test_a_cluster_process_raises_its_open_files_limit() -> None:
    script = ("import resource; from millstream.runtime.entrypoint.process import raise_open_files_limit; "
              "soft = raise_open_files_limit(); print(soft, resource.getrlimit(resource.RLIMIT_NOFILE)[0])")
    done = subprocess.run(["sh", "-c", f"ulimit -S -n 256; exec {sys.executable} -c '{script}'"],
                          capture_output=True, text=True, check=True, timeout=60)
    soft, now = map(int, done.stdout.split())
    assert soft == now and now > 256
