"""A task attempt's own output: what its user functions print and log (Flink: the TaskManager's
``.out`` and ``.log``, per attempt here).

In the Spark worker, :class:`OutputCapture` stands in for ``sys.stdout`` / ``sys.stderr`` and adds
a handler on the root logger for the task's whole life. The swap is process-wide and routes each
write by thread: a worker that runs one task gives it everything; a worker that runs a slot's
subtasks on threads of their own (placement ``slot``) gives each what its own thread prints and
logs (a line from another thread goes to the worker's own stream). Each line is tagged with its time and level
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


class _TextStream(io.TextIOBase):
    """A writable text stream in place of ``original`` (sys.stdout / sys.stderr), with its encoding."""

    def __init__(self, original: Any) -> None:
        self._encoding = getattr(original, "encoding", None) or "utf-8"

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._encoding

    def writable(self) -> bool:
        return True


class _LineWriter(_TextStream):
    """A text stream that turns complete lines into tagged output lines."""

    def __init__(self, pending: _Pending, level: str, source: str, original: Any) -> None:
        super().__init__(original)
        self._pending = pending
        self._level = level
        self._source = source
        self._partial = ""
        self._lock = threading.Lock()

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


class _Router:
    """The process's one stdout/stderr swap and root-logger handler while any capture is active."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active: list[OutputCapture] = []
        self.saved: tuple[Any, Any, int] | None = None
        self.handler = _RoutedHandler(self)

    def owner(self, thread: int | None) -> OutputCapture | None:
        active = self.active  # replaced, never mutated: safe to read without the lock
        for capture in active:
            if capture._thread == thread:
                return capture
        return active[0] if len(active) == 1 else None

    def enter(self, capture: OutputCapture) -> None:
        with self.lock:
            if not self.active:
                root = logging.getLogger()
                self.saved = (sys.stdout, sys.stderr, root.level)
                sys.stdout = _RoutedStream(self, 0, sys.stdout)
                sys.stderr = _RoutedStream(self, 1, sys.stderr)
                root.addHandler(self.handler)
                if root.level == logging.NOTSET or root.level > logging.INFO:
                    root.setLevel(logging.INFO)  # Flink's default: a user's logger.info() is kept
            self.active = [*self.active, capture]

    def exit(self, capture: OutputCapture) -> None:
        with self.lock:
            self.active = [c for c in self.active if c is not capture]
            if not self.active and self.saved is not None:
                root = logging.getLogger()
                sys.stdout, sys.stderr, level = self.saved
                root.removeHandler(self.handler)
                root.setLevel(level)
                self.saved = None


class _RoutedStream(_TextStream):
    def __init__(self, router: _Router, index: int, original: Any) -> None:
        super().__init__(original)
        self._router, self._index, self._original = router, index, original

    def write(self, text: str) -> int:
        capture = self._router.owner(threading.get_ident())
        if capture is None:
            return int(self._original.write(text))
        return capture._writers[self._index].write(text)

    def flush(self) -> None:
        if self._router.owner(threading.get_ident()) is None:
            self._original.flush()

    def isatty(self) -> bool:
        return False


class _RoutedHandler(logging.Handler):
    def __init__(self, router: _Router) -> None:
        super().__init__(logging.INFO)
        self._router = router

    def emit(self, record: logging.LogRecord) -> None:
        capture = self._router.owner(record.thread)
        if capture is not None:
            capture._handler.emit(record)


_ROUTER = _Router()


class OutputCapture:
    """``with OutputCapture(send): ...`` captures the task's prints and log records; ``send(lines,
    dropped)`` gets them in batches, from a thread of its own and once more at the end."""

    def __init__(self, send: Callable[[list[str], int], None], interval_s: float = FLUSH_INTERVAL_S) -> None:
        self._send = send
        self._interval_s = interval_s
        self._pending = _Pending()
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        self._thread: int | None = None
        self._handler = _RecordHandler(self._pending)
        self._writers: list[_LineWriter] = []

    def __enter__(self) -> OutputCapture:
        self._thread = threading.get_ident()
        self._writers = [_LineWriter(self._pending, "INFO", "stdout", sys.stdout),
                         _LineWriter(self._pending, "ERROR", "stderr", sys.stderr)]
        _ROUTER.enter(self)
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
        _ROUTER.exit(self)
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
