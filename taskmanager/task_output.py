"""A task attempt's own output: what its user functions print and log (Flink: the TaskManager's
``.out`` and ``.log``, per attempt here).

In the Spark worker, :class:`OutputCapture` stands in for ``sys.stdout`` / ``sys.stderr`` and adds
a handler on the root logger for the task's whole life (a Python worker runs one task at a time,
so the process-wide swap is the task's alone). Each line is tagged with its time and level
(``stdout``: INFO, ``stderr``: ERROR, a logging record: its own level and logger name) and sent to
the TaskManager in batches, at most every ``FLUSH_INTERVAL_S``. The print sink is not captured:
its lines travel to the client on their own path.

On the TaskManager, :class:`TaskOutputStore` keeps the last ``taskmanager.task-output.max-size``
of each attempt's lines, running and ended ones (at most
``taskmanager.task-output.retained-attempts`` ended), for ``millstream logs`` and the REST API.
"""
from __future__ import annotations

import collections
import io
import logging
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from millstream.runtime import config as cfg
from millstream.runtime.bounded_lines import BoundedLines

FLUSH_INTERVAL_S = 0.2
PENDING_MAX_CHARS = 1 << 20  # the worker's unsent lines: a print loop faster than the channel loses the oldest
MAX_LINES_PER_ATTEMPT = 1_000_000  # the byte bound is the one that matters


def format_line(timestamp: float, level: str, source: str, text: str) -> str:
    """``2026-11-26 09:50:24,123 INFO stdout: text``: the process log's layout."""
    seconds = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))
    return f"{seconds},{int(timestamp * 1000) % 1000:03d} {level} {source}: {text}"


class _Pending:
    """Lines not sent yet, shared by the writers and the flusher thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lines = BoundedLines(MAX_LINES_PER_ATTEMPT, PENDING_MAX_CHARS, "the pending task output")
        self.dropped = 0

    def add(self, line: str) -> None:
        with self._lock:
            self.dropped += self._lines.add([line])

    def take(self) -> tuple[list[str], int]:
        with self._lock:
            lines, dropped = list(self._lines.lines), self.dropped
            self._lines.clear()
            self.dropped = 0
            return lines, dropped


class _LineWriter(io.TextIOBase):
    """A text stream that turns complete lines into tagged output lines."""

    def __init__(self, pending: _Pending, level: str, source: str, original: Any) -> None:
        self._pending = pending
        self._level = level
        self._source = source
        self._partial = ""
        self._lock = threading.Lock()
        self._encoding = getattr(original, "encoding", None) or "utf-8"

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._encoding

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        with self._lock:
            *complete, self._partial = (self._partial + text).split("\n")
        now = time.time()
        for line in complete:
            self._pending.add(format_line(now, self._level, self._source, line))
        return len(text)

    def flush(self) -> None:
        pass

    def end(self) -> None:
        """The task ends: an unterminated last line is a line too."""
        with self._lock:
            partial, self._partial = self._partial, ""
        if partial:
            self._pending.add(format_line(time.time(), self._level, self._source, partial))

    def isatty(self) -> bool:
        return False


class _RecordHandler(logging.Handler):
    def __init__(self, pending: _Pending) -> None:
        super().__init__(logging.INFO)
        self._pending = pending
        self.setFormatter(logging.Formatter("%(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
        except Exception:  # a bad format string in user code must not fail the task
            text = f"{record.msg!r} (unformattable with {record.args!r})"
        for i, line in enumerate(text.split("\n")):
            self._pending.add(format_line(record.created, record.levelname, record.name if i == 0 else "  ", line))


class OutputCapture:
    """``with OutputCapture(send): ...`` captures the task's prints and log records; ``send(lines,
    dropped)`` gets them in batches, from a thread of its own and once more at the end."""

    def __init__(self, send: Callable[[list[str], int], None], interval_s: float = FLUSH_INTERVAL_S) -> None:
        self._send = send
        self._interval_s = interval_s
        self._pending = _Pending()
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        self._saved: tuple[Any, Any, int] | None = None
        self._handler = _RecordHandler(self._pending)
        self._writers: list[_LineWriter] = []

    def __enter__(self) -> OutputCapture:
        root = logging.getLogger()
        self._saved = (sys.stdout, sys.stderr, root.level)
        out = _LineWriter(self._pending, "INFO", "stdout", sys.stdout)
        err = _LineWriter(self._pending, "ERROR", "stderr", sys.stderr)
        self._writers = [out, err]
        sys.stdout, sys.stderr = out, err
        root.addHandler(self._handler)
        if root.level == logging.NOTSET or root.level > logging.INFO:
            root.setLevel(logging.INFO)  # Flink's default: a user's logger.info() is kept
        self._flusher = threading.Thread(target=self._flush_loop, name="millstream-task-output", daemon=True)
        self._flusher.start()
        return self

    def _flush_loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.flush()

    def flush(self) -> None:
        lines, dropped = self._pending.take()
        if lines or dropped:
            try:
                self._send(lines, dropped)
            except OSError:  # the channel is gone: the task is ending anyway
                pass

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._flusher is not None:
            self._flusher.join()
        assert self._saved is not None
        root = logging.getLogger()
        sys.stdout, sys.stderr, level = self._saved
        root.removeHandler(self._handler)
        root.setLevel(level)
        for writer in self._writers:
            writer.end()
        self.flush()


@dataclass
class AttemptOutput:
    lines: BoundedLines
    dropped: int = 0  # lines lost: dropped in the worker, or evicted here
    ended: bool = False


class TaskOutputStore:
    """The TaskManager's captured output per task attempt (pure: called on its event loop)."""

    def __init__(self, max_chars: int, retained_ended: int) -> None:
        if max_chars < 1:
            raise ValueError(f"taskmanager.task-output.max-size must be at least 1 byte, got {max_chars}")
        if retained_ended < 1:
            raise ValueError(f"taskmanager.task-output.retained-attempts must be at least 1, got {retained_ended}")
        self.max_chars = max_chars
        self.retained_ended = retained_ended
        self._attempts: dict[bytes, AttemptOutput] = {}
        self._ended: collections.deque[bytes] = collections.deque()

    @classmethod
    def with_defaults(cls) -> TaskOutputStore:
        return cls(cfg.TASK_OUTPUT_MAX_SIZE.default, cfg.TASK_OUTPUT_RETAINED_ATTEMPTS.default)

    def _entry(self, attempt_id: bytes) -> AttemptOutput:
        entry = self._attempts.get(attempt_id)
        if entry is None:
            entry = self._attempts[attempt_id] = AttemptOutput(BoundedLines(MAX_LINES_PER_ATTEMPT, self.max_chars, "task output"))
        return entry

    def started(self, attempt_id: bytes) -> None:
        self._entry(attempt_id)

    def add(self, attempt_id: bytes, lines: list[str], dropped: int = 0) -> None:
        entry = self._entry(attempt_id)
        entry.dropped += dropped + entry.lines.add(lines)

    def ended(self, attempt_id: bytes) -> None:
        entry = self._attempts.get(attempt_id)
        if entry is None or entry.ended:
            return
        entry.ended = True
        self._ended.append(attempt_id)
        while len(self._ended) > self.retained_ended:
            self._attempts.pop(self._ended.popleft(), None)

    def read(self, attempt_id: bytes) -> tuple[list[str], int] | None:
        """The attempt's kept lines and how many were lost; None if it is unknown here."""
        entry = self._attempts.get(attempt_id)
        if entry is None:
            return None
        return list(entry.lines.lines), entry.dropped
