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


@dataclass
class LineCursor:
    """One reader's position: the next line's sequence number, and the drop count it has seen."""

    next_seq: int = 0
    dropped_seen: int = 0


class PrintedLines:
    def __init__(self, max_lines: int = DEFAULT_MAX_LINES, max_chars: int = DEFAULT_MAX_CHARS) -> None:
        if max_lines < 1 or max_chars < 1:
            raise ValueError(f"the printed-lines buffer needs room for a line, got {max_lines} lines / {max_chars} chars")
        self.max_lines = max_lines
        self.max_chars = max_chars
        self._lines: collections.deque[str] = collections.deque()
        self._chars = 0
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
        return self._chars

    def add(self, lines: list[str], dropped_upstream: int = 0) -> None:
        if dropped_upstream < 0:
            raise ValueError(f"a negative count of dropped lines: {dropped_upstream}")
        self.dropped_upstream += dropped_upstream
        limit = min(MAX_LINE_CHARS, self.max_chars)
        for line in lines:
            line = truncate_line(line, limit)
            self._lines.append(line)
            self._chars += len(line)
        while len(self._lines) > self.max_lines or self._chars > self.max_chars:
            self._chars -= len(self._lines.popleft())
            self.first_seq += 1
            self.evicted += 1

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
