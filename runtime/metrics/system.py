"""The process's and the host's resources, read from Linux's ``/proc`` (elsewhere: what the
standard library offers). Cheap enough for every heartbeat: a few small files, no process scan."""
from __future__ import annotations

import os


def process_rss_bytes(pid: int | str = "self") -> int:
    """A process's resident memory (``/proc/PID/statm``; elsewhere this process's peak, from getrusage)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        if pid != "self":
            return 0
        import resource
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _children(pid: int) -> list[int]:
    """Direct children of a process, from each of its threads' ``children`` file."""
    found: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue
    return found


def process_tree_rss_bytes() -> int:
    """Resident memory of this process and its descendants: for a TaskManager, its embedded Spark
    JVM and that JVM's Python workers too (shared pages count once per process, as ``ps`` shows)."""
    total, stack, seen = 0, [os.getpid()], set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += process_rss_bytes(pid if pid != os.getpid() else "self")
        stack.extend(_children(pid))
    return total


def host_memory_bytes() -> tuple[int, int]:
    """(physical memory, available memory) of the host; (0, 0) where ``/proc/meminfo`` is missing."""
    fields: dict[str, int] = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("MemTotal", "MemAvailable"):
                    fields[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return 0, 0
    return fields.get("MemTotal", 0), fields.get("MemAvailable", 0)
