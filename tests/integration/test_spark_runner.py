"""SparkHost against real Spark (local[3]): one session for the whole module, as a TaskManager has.

The bodies below are defined here, a module the Spark workers cannot import (pytest puts tests/ on
this process's sys.path only), so they are registered to be pickled by value.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import pickle
import secrets
import signal
import socket
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

import pytest

from millstream.taskmanager.spark.host import (
    JavaNotFoundError,
    SparkHost,
    TaskExit,
    WorkerChannel,
    check_java,
    make_payload,
)

pytestmark = pytest.mark.timeout(60)  # the first test also pays the session start (~5-20 s)

T = TypeVar("T")


def poll_for(probe: Callable[[], T | None], timeout: float, what: str) -> T:
    """Return probe()'s first truthy value, checking every 10 ms; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class Recorder:
    """An on_event sink: events per task with arrival times; counts overlapping calls per task."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[str, list[tuple[float, Any]]] = {}
        self._inside: set[str] = set()
        self.overlaps = 0

    def __call__(self, task_id: str, msg: Any) -> None:
        with self._lock:
            self.overlaps += task_id in self._inside
            self._inside.add(task_id)
        time.sleep(0)  # yield, to widen the window a concurrent call would hit
        with self._lock:
            self._events.setdefault(task_id, []).append((time.monotonic(), msg))
            self._inside.discard(task_id)

    def events(self, task_id: str) -> list[Any]:
        with self._lock:
            return [msg for _, msg in self._events.get(task_id, [])]

    def first(self, task_id: str, pred: Callable[[Any], bool]) -> tuple[float, Any] | None:
        with self._lock:
            return next((e for e in self._events.get(task_id, []) if pred(e[1])), None)

    def wait_exit(self, task_id: str, timeout: float) -> tuple[float, TaskExit]:
        return poll_for(lambda: self.first(task_id, lambda m: isinstance(m, TaskExit)), timeout,
                        f"the TaskExit of {task_id}")

    def wait_pid(self, task_id: str, timeout: float = 20) -> int:
        found = poll_for(lambda: self.first(task_id, lambda m: isinstance(m, tuple) and m[0] == "pid"),
                         timeout, f"{task_id} to start")
        return int(found[1][1])


# -- bodies (run in the Spark worker) ---------------------------------------------------------

def count_body(n: int, channel: WorkerChannel) -> None:
    for i in range(n):
        channel.send(("n", i))


def failing_body(channel: WorkerChannel) -> None:
    def parse_record() -> None:
        raise ValueError("bad record 42")

    channel.send("about to fail")
    parse_record()


def cooperative_body(channel: WorkerChannel) -> None:
    channel.send(("pid", os.getpid()))
    while not channel.wait_cancelled(0.05):
        pass
    channel.send("saw cancel")


def stubborn_body(channel: WorkerChannel) -> None:
    """Ignores the cancel flag and keeps talking: only a kill stops it."""
    channel.send(("pid", os.getpid()))
    while True:
        time.sleep(0.01)
        try:
            channel.send("tick")
        except OSError:
            pass


def echo_body(channel: WorkerChannel) -> None:
    while True:
        msg = channel.recv_nowait()
        if msg == "stop":
            return
        if msg is not None:
            channel.send(("echo", msg))
        elif channel.wait_cancelled(0.01):
            return


def rendezvous_body(directory: str, parties: int, channel: WorkerChannel) -> None:
    """Finishes only if all ``parties`` tasks run at the same time."""
    Path(directory, str(os.getpid())).touch()
    deadline = time.monotonic() + 30
    while len(os.listdir(directory)) < parties:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(os.listdir(directory))} of {parties} tasks ran at once")
        time.sleep(0.01)
    channel.send(("met", os.getpid()))


# -- fixtures ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def host() -> Iterator[SparkHost]:
    spark_host = SparkHost(slots=3, app_name="millstream-test-spark-runner")
    spark_host.start()
    yield spark_host
    leaked = spark_host.running_task_ids()
    spark_host.stop()
    assert leaked == [], f"tasks still tracked after the module: {leaked}"


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


# -- tests ------------------------------------------------------------------------------------

def test_check_java_finds_java_and_explains_a_missing_one(monkeypatch: pytest.MonkeyPatch) -> None:
    assert os.path.basename(check_java()) == "java"
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", "")
    with pytest.raises(JavaNotFoundError, match="openjdk-17-jre-headless"):
        check_java()


def test_finished_body_delivers_messages_in_order(host: SparkHost, recorder: Recorder) -> None:
    handle = host.submit("ordered", make_payload(count_body, 2000), recorder)
    assert handle.wait(30) == TaskExit("FINISHED")
    assert recorder.events("ordered") == [("n", i) for i in range(2000)] + [TaskExit("FINISHED")]
    assert recorder.overlaps == 0


def test_slow_consumer_still_gets_every_event_then_the_exit(host: SparkHost) -> None:
    """The job ends long before a slow on_event drains the channel: no early verdict."""
    seen: list[Any] = []

    def slow_on_event(task_id: str, msg: Any) -> None:
        time.sleep(0.001)
        seen.append(msg)

    handle = host.submit("slow-consumer", make_payload(count_body, 2500), slow_on_event)
    assert handle.wait(30) == TaskExit("FINISHED")
    assert seen == [("n", i) for i in range(2500)] + [TaskExit("FINISHED")]


def test_failing_body_reports_the_users_traceback(host: SparkHost, recorder: Recorder) -> None:
    handle = host.submit("failing", make_payload(failing_body), recorder)
    out = handle.wait(30)
    assert out is not None and out.status == "FAILED" and out.error is not None
    assert out.error.startswith("Traceback (most recent call last):")
    assert "in parse_record" in out.error and out.error.rstrip().endswith("ValueError: bad record 42")
    assert "org.apache.spark" not in out.error  # the worker's traceback, not Spark's
    assert recorder.events("failing") == ["about to fail", out]


def test_control_messages_reach_the_body(host: SparkHost, recorder: Recorder) -> None:
    handle = host.submit("echo", make_payload(echo_body), recorder)
    handle.send("early")  # most likely before the worker connected: queued, not lost
    poll_for(lambda: recorder.first("echo", lambda m: m == ("echo", "early")), 20, "echo of 'early'")
    with pytest.raises(ValueError, match="still running"):
        host.submit("echo", make_payload(echo_body), recorder)
    handle.send({"k": 1})
    poll_for(lambda: recorder.first("echo", lambda m: m == ("echo", {"k": 1})), 5, "echo of a dict")
    handle.send("stop")
    assert handle.wait(10) == TaskExit("FINISHED")


def test_foreign_stale_and_second_connections_are_refused(host: SparkHost, recorder: Recorder) -> None:
    ended = host.submit("ended", make_payload(count_body, 1), recorder)
    assert ended.wait(30) == TaskExit("FINISHED")
    live = host.submit("live", make_payload(echo_body), recorder)
    live.send("ping")
    poll_for(lambda: recorder.first("live", lambda m: m == ("echo", "ping")), 20, "the live echo")
    assert host._listener is not None
    forged = pickle.dumps(TaskExit("FAILED", "forged"))
    # An unknown peer, a stale attempt, and a second connection for a live attempt.
    for token in (secrets.token_bytes(16), ended._token, live._token):
        with socket.create_connection(host._listener.getsockname()[:2], timeout=5) as sock:
            sock.sendall(struct.pack("!I", len(token)) + token + struct.pack("!I", len(forged)) + forged)
            with contextlib.suppress(ConnectionResetError):
                assert sock.recv(1) == b""  # the host hung up without reading the forged exit
    live.send("stop")
    assert live.wait(10) == TaskExit("FINISHED")
    assert recorder.events("ended") == [("n", 0), TaskExit("FINISHED")]


def test_cancel_cooperative_body(host: SparkHost, recorder: Recorder) -> None:
    handle = host.submit("coop", make_payload(cooperative_body), recorder)
    recorder.wait_pid("coop")
    t0 = time.monotonic()
    handle.cancel()
    at, out = recorder.wait_exit("coop", 5)
    assert out == TaskExit("CANCELED") and at - t0 < 2.0


def test_cancel_body_that_ignores_the_flag(host: SparkHost, recorder: Recorder) -> None:
    handle = host.submit("stubborn", make_payload(stubborn_body), recorder)
    pid = recorder.wait_pid("stubborn")
    poll_for(lambda: "tick" in recorder.events("stubborn"), 5, "the first tick")
    t0 = time.monotonic()
    handle.cancel()
    at, out = recorder.wait_exit("stubborn", 5)
    assert out == TaskExit("CANCELED") and at - t0 < 3.0
    # Fenced at once when the TaskManager drops the channel; Spark's own kill takes >= 2 s.
    poll_for(lambda: not pid_alive(pid), 1.5, f"the stubborn worker {pid} to die")
    events = recorder.events("stubborn")  # the worker is gone: nothing more can arrive
    assert events[-1] == out and sum(isinstance(e, TaskExit) for e in events) == 1


def test_cancel_right_after_submit(host: SparkHost, recorder: Recorder) -> None:
    """Cancel may beat the job's start and the worker's connection: the task must still end."""
    handle = host.submit("early-cancel", make_payload(stubborn_body), recorder)
    handle.cancel()
    assert handle.wait(10) == TaskExit("CANCELED")


def test_kill_9_of_the_worker_fails_the_task(host: SparkHost, recorder: Recorder) -> None:
    host.submit("killed", make_payload(cooperative_body), recorder)
    pid = recorder.wait_pid("killed")
    t0 = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    at, out = recorder.wait_exit("killed", 5)
    assert out.status == "FAILED" and out.error is not None and at - t0 < 5.0
    assert "Python worker exited unexpectedly" in out.error
    assert "\tat " not in out.error  # Spark's message, not its JVM stack


def test_three_tasks_run_at_once(host: SparkHost, recorder: Recorder, tmp_path: Path) -> None:
    ids = [f"concurrent-{i}" for i in range(3)]
    handles = [host.submit(i, make_payload(rendezvous_body, str(tmp_path), 3), recorder) for i in ids]
    assert [h.wait(40) for h in handles] == [TaskExit("FINISHED")] * 3
    pids = {recorder.events(i)[0][1] for i in ids}
    assert len(pids) == 3 and all(recorder.events(i)[0][0] == "met" for i in ids)


def test_payload_that_cannot_be_unpickled_fails_clearly(
        host: SparkHost, recorder: Recorder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A module only the TaskManager can import: the classic "works on the driver" mistake.
    (tmp_path / "ms_driver_only_mod.py").write_text("def body(channel):\n    channel.send('ran')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        payload = make_payload(importlib.import_module("ms_driver_only_mod").body)
    finally:
        sys.modules.pop("ms_driver_only_mod", None)
    out = host.submit("unpicklable", payload, recorder).wait(30)
    assert out is not None and out.status == "FAILED" and out.error is not None
    assert "could not be unpickled in the worker" in out.error
    assert "No module named 'ms_driver_only_mod'" in out.error
    assert recorder.events("unpicklable") == [out]


def test_host_still_serves_after_all_of_the_above(host: SparkHost, recorder: Recorder) -> None:
    assert host.submit("after", make_payload(count_body, 3), recorder).wait(30) == TaskExit("FINISHED")
    assert recorder.events("after")[:-1] == [("n", 0), ("n", 1), ("n", 2)]
    assert host.running_task_ids() == []


# -- start-up (each in a fresh interpreter: this module's session holds the process's Spark) ---

def _run_python(code: str, env: dict[str, str] | None = None, timeout: float = 120) -> str:
    import subprocess
    import textwrap

    run = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         env={**os.environ, **(env or {})}, timeout=timeout)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout


@pytest.mark.timeout(180)
def test_a_host_stopped_while_booting_leaves_no_session_and_the_next_host_starts() -> None:
    out = _run_python("""
        from pyspark import SparkContext
        from millstream.taskmanager.spark.host import SparkHost

        first = SparkHost(1)
        first.start_in_background("skip")  # forks the JVM now; the session boots on a thread
        first.stop()                       # waits for the boot, then stops what it started
        print("ACTIVE AFTER STOP", SparkContext._active_spark_context is not None)
        second = SparkHost(2)
        timings = second.start("background")  # the JVM of the first is reused
        print("SECOND", second.capacity(), timings.session_start_s >= 0, second.running_task_ids())
        second.stop()
    """)
    assert "ACTIVE AFTER STOP False" in out, out
    assert "SECOND 2 True []" in out, out


@pytest.mark.timeout(120)
def test_a_host_whose_java_is_missing_says_so() -> None:
    # Java is checked only when its JVM did not come up (checking costs a JVM start of its own).
    out = _run_python("""
        from millstream.taskmanager.spark.host import JavaNotFoundError, SparkHost

        try:
            SparkHost(1).start()
        except JavaNotFoundError as exc:
            print("JAVA", exc, "| CAUSE", type(exc.__cause__).__name__)
    """, env={"JAVA_HOME": "/nonexistent-java-home"})
    assert "JAVA no Java runtime found (JAVA_HOME='/nonexistent-java-home'" in out, out
    assert "CAUSE PySparkRuntimeError" in out, out
