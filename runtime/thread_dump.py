"""A process's Python threads and their stacks (Flink's thread dump, for a Python process): what
``/jobmanager/thread-dump`` and ``/taskmanagers/:id/thread-dump`` show. The Spark JVM and the
Python workers a TaskManager starts are other processes, not listed here."""
from __future__ import annotations

import sys
import threading
import traceback

__all__ = ["python_threads"]


def python_threads() -> list[tuple[str, str]]:
    """(name, a Java-like header and the stack, innermost call last) of every live thread."""
    frames = sys._current_frames()
    dump = []
    for thread in threading.enumerate():
        header = f'"{thread.name}" {"daemon " if thread.daemon else ""}Id={thread.ident}\n'
        frame = frames.get(thread.ident) if thread.ident is not None else None
        dump.append((thread.name, header + ("".join(traceback.format_stack(frame)) if frame is not None else "")))
    return dump
