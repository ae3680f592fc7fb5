"""Child processes that end with their parent: the local TaskManagers an application cluster
(``millstream run-application --taskmanagers N``) or a ``resourcemanager.type: process``
ResourceManager starts.

On Linux each child asks the kernel for SIGTERM when its parent goes (``PR_SET_PDEATHSIG``), so a
JobManager killed with ``kill -9`` leaves no TaskManager behind retrying a JobManager that is gone.
The child does it itself, first thing (:func:`end_with_parent`, called by the TaskManager's
launcher when :data:`ENV_PARENT` names its parent): nothing runs between fork and exec, since a
fork among gRPC's threads that runs code in the child crashed it (SIGSEGV, SIGABRT in gRPC's
epoll). The signal comes when the *thread* that started the child ends: start children from a
thread that lives as long as they should (the main thread, the JobManager's event loop), never
from a pool's.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
from typing import Optional, Sequence

_PR_SET_PDEATHSIG = 1
ENV_PARENT = "MILLSTREAM_END_WITH_PARENT"  # the pid of the process whose end ends this one


def end_with_parent() -> None:
    """In a child started by :func:`spawn_child`: SIGTERM when the parent ends (Linux); exits at
    once if the parent is gone already. Elsewhere, or when not started so, nothing."""
    expected = os.environ.pop(ENV_PARENT, "")
    if not expected or not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if str(os.getppid()) != expected:  # the parent died before the call: no signal would come
        sys.exit(1)


def spawn_child(args: Sequence[str], log_path: str, env: Optional[dict[str, str]] = None) -> "subprocess.Popen[bytes]":
    """``python args...`` with stdout and stderr appended to ``log_path``, in its own session (a
    Ctrl-C at the terminal reaches the parent, which stops its children in order), ending with
    this process."""
    environment = dict(os.environ if env is None else env)
    environment[ENV_PARENT] = str(os.getpid())
    with open(log_path, "ab") as log:
        return subprocess.Popen([sys.executable, *args], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, env=environment)


def stop_children(children: Sequence["subprocess.Popen[bytes]"], grace_s: float = 15.0) -> None:
    """SIGTERM to each child still running, SIGKILL to any not gone after ``grace_s``."""
    for child in children:
        if child.poll() is None:
            child.terminate()
    for child in children:
        try:
            child.wait(grace_s)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
