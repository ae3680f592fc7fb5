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
        started = sorted(descendants(os.getpid()) - {already.pid, task.watchdog.pid})
    orphan = int(open("orphan.pid").read())
    left = sorted(descendants(os.getpid()))
    print(json.dumps({"started": started, "orphan": orphan, "left": left, "already": already.pid,
                      "terminated": task.terminated, "watchdog": task.watchdog.pid}))
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
    # only what the worker had before the task, and the watchdog it keeps for its next tasks
    assert sorted(result["left"]) == sorted([result["already"], result["watchdog"]])
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


REUSED_WORKER = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    from millstream.taskmanager.user_processes import TaskProcesses

    watchdogs = []
    for _ in range(2):                        # Spark reuses the worker: tasks one after another
        with TaskProcesses() as task:
            watchdogs.append(task.watchdog.pid)
            subprocess.Popen(["sleep", "300"])
    print(watchdogs[0], watchdogs[1], flush=True)
    with TaskProcesses():                     # the third task's worker is killed
        sleeper = subprocess.Popen(["sleep", "300"])
        print(sleeper.pid, flush=True)
        time.sleep(1.0)                       # the watchdog notes it
        os.kill(os.getpid(), signal.SIGKILL)
""")


def test_one_watchdog_serves_a_reused_workers_tasks_and_still_ends_a_killed_tasks_processes(tmp_path) -> None:
    """A worker's later tasks start no watchdog of their own, and its watchdog, told each task's
    end, still ends the processes of a task whose worker is killed after earlier tasks ended."""
    worker = subprocess.Popen([sys.executable, "-c", REUSED_WORKER], stdout=subprocess.PIPE, text=True)
    first, second = map(int, worker.stdout.readline().split())
    sleeper = int(worker.stdout.readline())
    assert first == second
    assert worker.wait(30) == -9
    deadline = time.monotonic() + 10
    while (_alive(sleeper) or _alive(first)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(sleeper), "the killed worker's sleep outlived it"
    assert not _alive(first), "the watchdog outlived its worker"


IDLE_WORKER_ENDS = textwrap.dedent("""
    import subprocess, sys
    from millstream.taskmanager.user_processes import TaskProcesses

    with TaskProcesses() as task:
        pass
    print(task.watchdog.pid, flush=True)
    keep = subprocess.Popen(["sleep", "300"])  # the worker's own, started between tasks
    print(keep.pid, flush=True)
    sys.stdin.read()                            # until the test closes it, then the worker exits
""")


def test_the_watchdog_of_an_idle_worker_leaves_with_it_and_kills_nothing(tmp_path) -> None:
    """Between tasks nothing the worker runs is a task's: its end kills nothing, and the watchdog goes."""
    worker = subprocess.Popen([sys.executable, "-c", IDLE_WORKER_ENDS], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    watchdog = int(worker.stdout.readline())
    keep = int(worker.stdout.readline())
    try:
        worker.stdin.close()
        assert worker.wait(30) == 0
        deadline = time.monotonic() + 10
        while _alive(watchdog) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(watchdog), "the watchdog outlived its worker"
        time.sleep(0.3)
        assert _alive(keep), "the watchdog killed a process started outside any task"
    finally:
        os.kill(keep, 9)


REPLACED_WATCHDOG = textwrap.dedent("""
    import os, signal, time
    from millstream.taskmanager.user_processes import TaskProcesses

    with TaskProcesses() as task:
        first = task.watchdog.pid
    os.kill(first, signal.SIGKILL)            # its watchdog died between tasks
    time.sleep(0.2)
    with TaskProcesses() as task:
        second = task.watchdog.pid
        alive = task.watchdog.poll() is None
    print(first, second, alive, flush=True)
""")


def test_a_watchdog_that_died_between_tasks_is_replaced_by_the_next_task() -> None:
    done = subprocess.run([sys.executable, "-c", REPLACED_WATCHDOG], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    first, second, alive = done.stdout.split()
    assert first != second and alive == "True"
