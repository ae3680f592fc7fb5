"""The processes a task's user code starts end with the task.

A user function may start processes (``subprocess``, a ``multiprocessing`` fork); a forked copy
of the worker can hang on a lock another thread held at the fork, and nothing ever waited for it,
so such children outlived their task, and the Spark worker, reused for the next task, collected
them. A task therefore runs inside :class:`TaskProcesses`: on entry the worker becomes a *child
subreaper* (Linux: a grandchild whose parent exits is re-parented to this worker, not to init, so
double forks stay visible) and notes the descendants it already has; on exit, every descendant
that appeared since gets SIGTERM, then SIGKILL after a grace period, and the worker reaps them.

A cancelled task whose user code does not return is ended by Spark killing its worker, and then
no code of the worker runs. For that case a small watchdog process (:data:`_WATCHDOG`, its stdin
a pipe from the worker) notes the task's processes every 0.1 s and, when the pipe closes without
the worker's word that the task ended (``e``), which means the worker died, kills those still
running (the same process: pid and start time). Spark reuses a worker for task after task, so the
watchdog is started on the worker's first task and serves the later ones too (told of each task's
begin and end), idle and blocked on its pipe in between: a task neither starts a process for it
nor waits for one to end.

Processes are found through ``/proc`` (each process's parent id), so this is Linux only; elsewhere
it does nothing. A child that calls ``setsid`` keeps its parent and is still found; only one whose
parent chain leaves this worker entirely (re-parented above a dead subreaper) escapes.
"""
from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
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


# The watchdog: argv = the worker's pid. Plain os calls only (no imports of Millstream), started
# with -S -I: it must start in milliseconds and outlive the worker. One serves every task the
# (reused) worker runs: "b PID PID...\n" begins a task (the pids to leave alone: the worker's own
# from before it), "e\n" ends it; only between a "b" and its "e" does it scan and, on the pipe's
# end, kill. Idle, it blocks on the pipe and costs nothing.
_WATCHDOG = r"""
import os, select, signal, sys
worker, me = int(sys.argv[1]), os.getpid()
def stat(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[1]), fields[19]) if fields[0] != b"Z" else None  # (parent, start time)
def children(pid):
    found = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                found += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return found
def scan(keep):  # the worker's descendants: a few small reads, not all of /proc
    seen, stack = {}, [worker]
    while stack:
        for pid in children(stack.pop()):
            if pid not in seen and pid not in keep:
                found = stat(pid)
                if found:
                    seen[pid] = found[1]
                    stack.append(pid)
    return seen
keep, noted, in_task, pending = {me}, {}, False, b""
while True:
    ready, _, _ = select.select([0], [], [], 0.1 if in_task else None)
    if ready:
        said = os.read(0, 4096)
        if not said:  # end of file: the worker died (killed by Spark) or ended
            break
        pending += said
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            if line.startswith(b"b"):  # a task begins
                keep = {int(p) for p in line.split()[1:]} | {me}
                noted, in_task = {}, True
            elif line == b"e":  # the worker ended its task itself (and its processes)
                noted, in_task = {}, False
    if in_task:
        noted.update(scan(keep))
if in_task:  # died in a task without the worker's word: end what the task left
    for pid, start in noted.items():  # the same processes: pid and start time
        found = stat(pid)
        if found and found[1] == start:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
"""

_watchdog: subprocess.Popen[bytes] | None = None  # this worker's, shared by its tasks
_watchdog_owner = 0  # the pid that started it


def _worker_watchdog() -> subprocess.Popen[bytes]:
    """The watchdog of this process, started on its first task (or when the last one died)."""
    global _watchdog, _watchdog_owner
    if _watchdog is None or _watchdog.poll() is not None or _watchdog_owner != os.getpid():
        # a forked copy of a worker does not talk to its parent's watchdog
        _watchdog = subprocess.Popen(
            [sys.executable, "-S", "-I", "-c", _WATCHDOG, str(os.getpid())],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)  # not in the worker's group: a kill of it spares the watchdog
        _watchdog_owner = os.getpid()
    return _watchdog


def _tell(watchdog: subprocess.Popen[bytes], line: bytes) -> bool:
    assert watchdog.stdin is not None
    try:
        watchdog.stdin.write(line)
        watchdog.stdin.flush()
        return True
    except (BrokenPipeError, ValueError):  # it died (or its pipe was closed)
        return False


class TaskProcesses:
    """``with TaskProcesses(): run the task`` ends every process the task started (see the module)."""

    def __init__(self, grace_s: float = GRACE_S, watchdog: bool = True) -> None:
        self.grace_s = grace_s
        self._before: set[int] = set()
        self._watchdog_wanted = watchdog
        self.watchdog: subprocess.Popen[bytes] | None = None
        self.terminated: list[int] = []

    def __enter__(self) -> "TaskProcesses":
        if os.path.isdir("/proc"):
            _become_subreaper()
            self._before = descendants(os.getpid())
            if self._watchdog_wanted:
                self._start_watch()
        return self

    def _start_watch(self) -> None:
        line = b" ".join([b"b", *(str(p).encode() for p in sorted(self._before))]) + b"\n"
        for _ in range(2):  # a watchdog that died since the last task is replaced once
            try:
                watchdog = _worker_watchdog()
            except OSError as exc:
                log.warning("no watchdog for the task's processes: %s", exc)
                return
            self._before.add(watchdog.pid)
            if _tell(watchdog, line):
                self.watchdog = watchdog
                return
            try:  # its pipe is gone: it leaves (end of file) if it has not already
                watchdog.wait(5)
            except subprocess.TimeoutExpired:
                watchdog.kill()
                watchdog.wait()

    def __exit__(self, *exc: object) -> None:
        if not os.path.isdir("/proc"):
            return
        try:
            self._end_started()
        finally:
            if self.watchdog is not None:  # the worker lives: the watchdog stands down until the next task
                # Said, not inferred from the pipe's end: a killed worker's pipe closes before the
                # kernel marks it dead, so a watchdog looking at the worker then would see it alive.
                # Not waited for: it stays for the worker's next task (one process per worker, not per task).
                _tell(self.watchdog, b"e\n")

    def _end_started(self) -> None:
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
