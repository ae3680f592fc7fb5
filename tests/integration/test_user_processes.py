"""A task's user-started processes end with the task (taskmanager/user_processes.py), in a child
Python process standing in for a Spark worker (it becomes a subreaper)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="Linux /proc")

WORKER = textwrap.dedent("""
    import json, multiprocessing, os, subprocess, sys, threading, time
    from millstream.taskmanager.user_processes import TaskProcesses, descendants

    already = subprocess.Popen(["sleep", "30"])      # the worker's own, from before the task
    lock = threading.Lock()

    def hang():
        lock.acquire()                                # held by the parent at the fork: hangs forever

    with TaskProcesses(grace_s=0.5) as task:
        sleeper = subprocess.Popen(["sleep", "300"])
        ignores_term = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 300"])
        subprocess.run(["sh", "-c", "sleep 300 & echo $! > orphan.pid"], check=True)  # double fork
        lock.acquire()
        fork = multiprocessing.get_context("fork").Process(target=hang)
        fork.start()
        time.sleep(0.3)
        started = sorted(descendants(os.getpid()) - {already.pid})
    orphan = int(open("orphan.pid").read())
    left = sorted(descendants(os.getpid()))
    print(json.dumps({"started": started, "orphan": orphan, "left": left, "already": already.pid,
                      "terminated": task.terminated}))
    already.kill()
""")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def test_processes_a_task_started_are_terminated_when_it_ends(tmp_path) -> None:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", WORKER], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert len(result["started"]) >= 4  # sleep, sh (+ its sleep), the fork, the adopted orphan
    assert result["orphan"] in result["started"], "the double-forked sleep was not adopted by the subreaper"
    assert result["left"] == [result["already"]]  # only what the worker had before the task
    for pid in result["started"]:
        assert not _alive(pid), pid
    assert time.monotonic() - started < 20


KILLED_WORKER = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    from millstream.taskmanager.user_processes import TaskProcesses

    with TaskProcesses():
        sleeper = subprocess.Popen(["sleep", "300"])
        print(sleeper.pid, flush=True)
        time.sleep(1.5)                       # the watchdog notes it
        os.kill(os.getpid(), signal.SIGKILL)  # Spark kills the worker of a cancelled task
""")


def test_processes_of_a_task_whose_worker_is_killed_are_ended_by_the_watchdog(tmp_path) -> None:
    worker = subprocess.Popen([sys.executable, "-c", KILLED_WORKER], stdout=subprocess.PIPE, text=True)
    sleeper = int(worker.stdout.readline())
    assert worker.wait(30) == -9
    deadline = time.monotonic() + 10
    while _alive(sleeper) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(sleeper), "the killed worker's sleep outlived it"


DYING_WORKER = textwrap.dedent("""
    import os, subprocess, sys, time
    from millstream.taskmanager.user_processes import TaskProcesses

    task = TaskProcesses()
    task.__enter__()
    sleeper = subprocess.Popen(["sleep", "300"])
    print(sleeper.pid, flush=True)
    time.sleep(0.5)                           # the watchdog notes it
    os.close(task.watchdog.stdin.fileno())    # what a kill does first: the worker's files close...
    time.sleep(1.0)                           # ...while the kernel has not yet marked it dead
    os._exit(0)
""")


def test_a_worker_whose_pipe_closes_before_it_is_dead_still_counts_as_killed(tmp_path) -> None:
    """The watchdog leaves quietly only on the worker's word, never because the worker still looks
    alive when its pipe closes (a SIGKILLed process closes its files before it becomes a zombie)."""
    worker = subprocess.Popen([sys.executable, "-c", DYING_WORKER], stdout=subprocess.PIPE, text=True)
    sleeper = int(worker.stdout.readline())
    deadline = time.monotonic() + 1.0  # while the worker still runs
    while _alive(sleeper) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert worker.poll() is None, "the worker was to outlive this check"
    assert not _alive(sleeper), "the watchdog took the worker for alive and left its task's sleep running"
    worker.wait(10)
