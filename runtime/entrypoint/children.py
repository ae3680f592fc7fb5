"""Child processes that end with their parent: the local TaskManagers an application cluster
(``millstream run-application --taskmanagers N``) or a ``resourcemanager.type: process``
ResourceManager starts.

On Linux each child asks the kernel for SIGTERM when its parent goes (``PR_SET_PDEATHSIG``), so a
JobManager killed with ``kill -9`` leaves no TaskManager behind retrying a JobManager that is gone.
The signal comes when the *thread* that started the child ends: start children from a thread that
lives as long as they should (the main thread, the JobManager's event loop), never from a pool's.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
from typing import Callable, Optional, Sequence

_PR_SET_PDEATHSIG = 1


def _pdeathsig_setter() -> Optional[Callable[[], None]]:
    """A function to run in the child between fork and exec (resolved here, in the parent: the
    child must not load libraries or take locks), or None where prctl does not exist."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def set_pdeathsig() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the call: nobody would send it
            os._exit(1)

    return set_pdeathsig


def spawn_child(args: Sequence[str], log_path: str, env: Optional[dict[str, str]] = None) -> "subprocess.Popen[bytes]":
    """``python args...`` with stdout and stderr appended to ``log_path``, in its own session (a
    Ctrl-C at the terminal reaches the parent, which stops its children in order), ending with
    this process."""
    with open(log_path, "ab") as log:
        return subprocess.Popen([sys.executable, *args], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, env=env,
                                preexec_fn=_pdeathsig_setter())


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
