"""The processes a task's user code starts end with the task.

A user function may start processes (``subprocess``, a ``multiprocessing`` fork); a forked copy
of the worker can hang on a lock another thread held at the fork, and nothing ever waited for it,
so such children outlived their task, and the Spark worker, reused for the next task, collected
them. A task therefore runs inside :class:`TaskProcesses`: on entry the worker becomes a *child
subreaper* (Linux: a grandchild whose parent exits is re-parented to this worker, not to init, so
double forks stay visible) and notes the descendants it already has; on exit, every descendant
that appeared since gets SIGTERM, then SIGKILL after a grace period, and the worker reaps them.

A cancelled task whose user code does not return is ended by Spark killing its worker, and then
no code of the worker runs. For that case a small watchdog process (:data:`_WATCHDOG`, started
at the task's start, its stdin a pipe from the worker) notes the task's processes every 0.1 s
and, when the pipe closes without the worker's word that the task ended (``q``), which means the
worker died, kills those still running (the same process: pid and start time).

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


# The watchdog: argv = worker pid, then the pids to leave alone. Plain os calls only (no imports of
# Millstream), started with -S -I: it must start in milliseconds and outlive the worker.
_WATCHDOG = r"""
import os, select, signal, sys
worker, keep = int(sys.argv[1]), {int(p) for p in sys.argv[2:]} | {os.getpid()}
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
def scan():  # the worker's descendants: a few small reads, not all of /proc
    seen, stack = {}, [worker]
    while stack:
        for pid in children(stack.pop()):
            if pid not in seen and pid not in keep:
                found = stat(pid)
                if found:
                    seen[pid] = found[1]
                    stack.append(pid)
    return seen
noted = scan()
while True:
    ready, _, _ = select.select([0], [], [], 0.1)
    if ready:
        said = os.read(0, 1)
        if said == b"q":  # the worker ended its task itself (and its processes): leave quietly
            sys.exit(0)
        if not said:  # end of file without a word: the worker died (killed by Spark)
            break
    noted.update(scan())
for pid, start in noted.items():  # end what its task left (the same processes: pid and start time)
    found = stat(pid)
    if found and found[1] == start:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
"""


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
                try:
                    self.watchdog = subprocess.Popen(
                        [sys.executable, "-S", "-I", "-c", _WATCHDOG, str(os.getpid()), *map(str, self._before)],
                        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                        start_new_session=True)  # not in the worker's group: a kill of it spares the watchdog
                    self._before.add(self.watchdog.pid)
                except OSError as exc:
                    log.warning("no watchdog for the task's processes: %s", exc)
        return self

    def __exit__(self, *exc: object) -> None:
        if not os.path.isdir("/proc"):
            return
        try:
            self._end_started()
        finally:
            if self.watchdog is not None:  # the worker lives: the watchdog leaves quietly
                assert self.watchdog.stdin is not None
                # Said, not inferred from the pipe's end: a killed worker's pipe closes before the
                # kernel marks it dead, so a watchdog looking at the worker then would see it alive.
                try:
                    self.watchdog.stdin.write(b"q")
                    self.watchdog.stdin.close()
                except BrokenPipeError:
                    pass
                try:
                    self.watchdog.wait(5)
                except subprocess.TimeoutExpired:
                    self.watchdog.kill()
                    self.watchdog.wait()

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
