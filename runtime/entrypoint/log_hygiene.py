"""Logs that stay bounded under a flood: repeated warnings are rate limited, stdout is rotated.

When a JobManager ran out of file descriptors, asyncio logged its accept error (with a traceback)
for every retry, ~0.7 MB/s, into the stdout file ``cluster start`` gives it, which nothing rotated.
:class:`RepeatFilter` lets a burst of one message through per interval and then says how many it
held back; :class:`StdoutRotation` renames this process's stdout file when it passes
``log.file.max-size`` (keeping ``env.log.max`` backups, as the process's own log) and points
stdout and stderr at a fresh file.
"""
from __future__ import annotations

import logging
import os
import stat
import sys
import threading
import time
from typing import Callable

__all__ = ["RepeatFilter", "StdoutRotation", "install_repeat_filter"]


class RepeatFilter(logging.Filter):
    """At most ``burst`` records of one kind (logger, level, message template's first line) per
    ``interval_s``, for WARNING and above; the first record let through after a suppression says
    how many were dropped. Records below WARNING pass untouched."""

    def __init__(self, burst: int = 20, interval_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.burst, self.interval_s, self._clock = burst, interval_s, clock
        self._windows: dict[tuple[str, int, str], list[float | int]] = {}  # key -> [start, passed, suppressed]
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        template = record.msg if isinstance(record.msg, str) else type(record.msg).__name__
        key = (record.name, record.levelno, template.split("\n", 1)[0][:200])
        now = self._clock()
        with self._lock:
            window = self._windows.get(key)
            if window is None or now - window[0] >= self.interval_s:
                suppressed = int(window[2]) if window is not None else 0
                self._windows[key] = [now, 1, 0]
                if len(self._windows) > 10_000:  # many distinct messages: forget the oldest windows
                    for old in sorted(self._windows, key=lambda k: self._windows[k][0])[:5_000]:
                        del self._windows[old]
                if suppressed:
                    record.msg = f"{record.getMessage()} [{suppressed} more like this suppressed in {self.interval_s:g} s]"
                    record.args = None
                return True
            if window[1] < self.burst:
                window[1] += 1
                return True
            window[2] += 1
            return False


def install_repeat_filter(logger: logging.Logger | None = None, **kwargs: float) -> list[RepeatFilter]:
    """Puts a :class:`RepeatFilter` on every handler of ``logger`` (the root logger): a filter on
    a handler sees the records of every logger that propagates to it. One per handler, since a
    shared one would count each record once per handler."""
    installed = []
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, RepeatFilter) for f in handler.filters):
            repeat = RepeatFilter(**kwargs)  # type: ignore[arg-type]
            handler.addFilter(repeat)
            installed.append(repeat)
    return installed


class StdoutRotation:
    """Rotates this process's stdout file (when it is a regular file) by size, from a thread."""

    def __init__(self, max_bytes: int, backups: int, interval_s: float = 1.0) -> None:
        self.max_bytes, self.backups, self.interval_s = max_bytes, max(1, backups), interval_s
        self.path = _regular_file_of(1)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "StdoutRotation":
        if self.path is not None and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="millstream-stdout-rotation", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.check()
            except OSError as exc:  # a full or vanished disk: keep writing where we are
                logging.getLogger(__name__).warning("stdout rotation of %s failed: %s", self.path, exc)

    def check(self) -> bool:
        """Rotates now if stdout has grown past ``max_bytes``; True if it did."""
        if self.path is None or os.fstat(1).st_size <= self.max_bytes:
            return False
        stderr_same = _same_file(1, 2)
        for i in range(self.backups - 1, 0, -1):
            older = f"{self.path}.{i}"
            if os.path.exists(older):
                os.replace(older, f"{self.path}.{i + 1}")
        os.replace(self.path, f"{self.path}.1")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            os.dup2(fd, 1)
            if stderr_same:
                os.dup2(fd, 2)
        finally:
            os.close(fd)
        return True


def _regular_file_of(fd: int) -> str | None:
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        path = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    return path if os.path.isabs(path) and os.path.exists(path) else None


def _same_file(a: int, b: int) -> bool:
    try:
        sa, sb = os.fstat(a), os.fstat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)
