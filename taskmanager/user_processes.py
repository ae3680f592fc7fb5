"""The processes a task's user code starts end with the task.

A user function may start processes (``subprocess``, a ``multiprocessing`` fork); a forked copy
of the worker can hang on a lock another thread held at the fork, and nothing ever waited for it,
so such children outlived their task, and the Spark worker, reused for the next task, collected
them. A task therefore runs inside :class:`TaskProcesses`: on entry the worker becomes a *child
subreaper* (Linux: a grandchild whose parent exits is re-parented to this worker, not to init, so
double forks stay visible) and notes the descendants it already has; on exit, every descendant
that appeared since gets SIGTERM, then SIGKILL after a grace period, and the worker reaps them.

Processes are found through ``/proc`` (each process's parent id), so this is Linux only; elsewhere
it does nothing. A child that calls ``setsid`` keeps its parent and is still found; only one whose
parent chain leaves this worker entirely (re-parented above a dead subreaper) escapes.
"""
from __future__ import annotations

import ctypes
import logging
import os
import signal
import time
from typing import Iterable

log = logging.getLogger(__name__)

__all__ = ["TaskProcesses", "descendants"]

_PR_SET_CHILD_SUBREAPER = 36
GRACE_S = 1.0


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process visible in /proc."""
    parents: dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return parents
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # it ended meanwhile
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ')'
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) >= 2 and fields[0] != b"Z":
            parents[int(entry)] = int(fields[1])
    return parents


def descendants(pid: int) -> set[int]:
    """The live (not zombie) descendants of ``pid``."""
    children: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    found: set[int] = set()
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def _become_subreaper() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: orphans go to init, as before
        pass


def _signal(pids: Iterable[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _reap(pids: Iterable[int]) -> None:
    """Collects those of ``pids`` that exited and are children of this process (directly, or
    adopted as subreaper), so none stays a zombie of the reused worker. Only these: another
    child's exit status belongs to whoever waits for it."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


class TaskProcesses:
    """``with TaskProcesses(): run the task`` ends every process the task started (see the module)."""

    def __init__(self, grace_s: float = GRACE_S) -> None:
        self.grace_s = grace_s
        self._before: set[int] = set()
        self.terminated: list[int] = []

    def __enter__(self) -> "TaskProcesses":
        if os.path.isdir("/proc"):
            _become_subreaper()
            self._before = descendants(os.getpid())
        return self

    def __exit__(self, *exc: object) -> None:
        if not os.path.isdir("/proc"):
            return
        started = descendants(os.getpid()) - self._before
        if not started:
            return
        self.terminated = sorted(started)
        killed = set(started)
        log.info("the task's user code left %d processes running (%s): terminating them",
                 len(started), ", ".join(map(str, self.terminated)))
        _signal(started, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        while time.monotonic() < deadline:
            _reap(killed)
            started &= descendants(os.getpid())
            if not started:
                return
            time.sleep(0.02)
        started |= descendants(os.getpid()) - self._before  # children they started meanwhile
        killed |= started
        _signal(started, signal.SIGKILL)  # e.g. a forked copy hung on a lock
        for _ in range(50):
            _reap(killed)
            if not (descendants(os.getpid()) - self._before):
                break
            time.sleep(0.02)
        _reap(killed)
