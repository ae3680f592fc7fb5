"""A job's printed lines on their way to its attached clients: bounded, oldest dropped first.

TaskManagers report a job's print-sink lines in batches; the Dispatcher keeps the last
``max_lines`` of them (and at most ``max_chars`` characters) per job. Each attached client
(WaitJobResult) reads through its own :class:`LineCursor`, so every client gets every line still
buffered, and learns how many it missed: lines evicted before it read them, plus lines the
TaskManagers dropped on their side (reported as a count).
"""
from __future__ import annotations

import collections
from dataclasses import dataclass

DEFAULT_MAX_LINES = 1000
DEFAULT_MAX_CHARS = 256 << 10
MAX_LINE_CHARS = 8 << 10  # one longer line is cut here, so a single line never empties the buffer
TRUNCATED = " ... (line truncated)"


def truncate_line(line: str, limit: int = MAX_LINE_CHARS) -> str:
    return line if len(line) <= limit else line[: limit - len(TRUNCATED)] + TRUNCATED


class BoundedLines:
    """Lines bounded by count and characters, the oldest dropped first; a line longer than
    ``MAX_LINE_CHARS`` (or the whole character bound) is cut. Shared by the TaskManager's outbox
    and the Dispatcher's per-job buffer."""

    def __init__(self, max_lines: int, max_chars: int, what: str) -> None:
        if max_lines < 1 or max_chars < 1:
            raise ValueError(f"{what} needs room for a line, got {max_lines} lines / {max_chars} chars")
        self.max_lines = max_lines
        self.max_chars = max_chars
        self.lines: collections.deque[str] = collections.deque()
        self.chars = 0

    def __len__(self) -> int:
        return len(self.lines)

    def add(self, lines: list[str]) -> int:
        """Appends ``lines``; returns how many of the oldest were dropped to stay in bounds."""
        limit = min(MAX_LINE_CHARS, self.max_chars)
        for line in lines:
            line = truncate_line(line, limit)
            self.lines.append(line)
            self.chars += len(line)
        dropped = 0
        while len(self.lines) > self.max_lines or self.chars > self.max_chars:
            self.chars -= len(self.lines.popleft())
            dropped += 1
        return dropped

    def clear(self) -> None:
        self.lines.clear()
        self.chars = 0


@dataclass
class LineCursor:
    """One reader's position: the next line's sequence number, and the drop count it has seen."""

    next_seq: int = 0
    dropped_seen: int = 0


class PrintedLines:
    """A job's printed lines at the JobManager, bounded (oldest dropped first), numbered so that each
    reader (a ``LineCursor``) gets every line once and learns how many it missed. The client's
    console rate limit is another thing: ``client.progress.PrintRateLimiter``."""

    def __init__(self, max_lines: int = DEFAULT_MAX_LINES, max_chars: int = DEFAULT_MAX_CHARS) -> None:
        self._buffer = BoundedLines(max_lines, max_chars, "the printed-lines buffer")
        self._lines = self._buffer.lines
        self.first_seq = 0  # sequence number of the oldest buffered line
        self.dropped_upstream = 0  # lines the TaskManagers dropped (reported counts), in total
        self.evicted = 0  # lines this buffer dropped, oldest first, in total

    @property
    def end_seq(self) -> int:
        return self.first_seq + len(self._lines)

    def __len__(self) -> int:
        return len(self._lines)

    @property
    def chars(self) -> int:
        return self._buffer.chars

    def add(self, lines: list[str], dropped_upstream: int = 0) -> None:
        if dropped_upstream < 0:
            raise ValueError(f"a negative count of dropped lines: {dropped_upstream}")
        self.dropped_upstream += dropped_upstream
        evicted = self._buffer.add(lines)
        self.first_seq += evicted
        self.evicted += evicted

    def reader(self) -> LineCursor:
        """A cursor for a newly attached client: it gets what is buffered now, and the drops from now on."""
        return LineCursor(self.first_seq, self.dropped_upstream)

    def has_unread(self, cursor: LineCursor) -> bool:
        return cursor.next_seq < self.end_seq or cursor.dropped_seen < self.dropped_upstream

    def read(self, cursor: LineCursor) -> tuple[list[str], int]:
        """The lines after ``cursor`` and how many it missed since its last read; advances it."""
        missed = max(0, self.first_seq - cursor.next_seq) + (self.dropped_upstream - cursor.dropped_seen)
        start = max(cursor.next_seq, self.first_seq) - self.first_seq
        lines = list(self._lines)[start:] if start else list(self._lines)
        cursor.next_seq = self.end_seq
        cursor.dropped_seen = self.dropped_upstream
        return lines, missed
