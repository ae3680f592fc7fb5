"""Run long-lived task bodies inside PySpark executors, with a control channel to the TaskManager.

``SparkHost.submit()`` starts a one-partition Spark job in its own job group; the partition's Python
worker connects back to the host over TCP, receives the payload on that connection, unpickles it
with cloudpickle and runs ``body(*args, channel)`` for the task's whole life. Events flow worker ->
TaskManager in order through ``on_event``; control messages (``CANCEL`` or anything else) flow back.
Every task ends with exactly one :class:`TaskExit`. Frames are a 4-byte length and a pickle; the
worker's first frame is the attempt's random token as raw bytes, so nothing from an unknown peer is
unpickled and a stale or second connection for an attempt is refused (fencing by task id +
connection). The host answers with its greeting, JSON: the secrets a body may need (the cluster
token for its calls to TaskManagers), then the payload, then the control messages sent so far. So
task bodies and secrets travel the control channel only; a Spark task carries just where to
connect, the attempt token and the TLS file paths.

With ``tls`` (security.ssl.*) the control channel is mutual TLS: the worker verifies the host's
certificate (and that it names the control host) and presents its own, which the host verifies
before it reads the hello.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import pickle
import queue
import re
import secrets
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Literal, Mapping

import cloudpickle

from millstream.runtime.rpc.tls import TlsSettings
from millstream.runtime.network.protocol import tune_socket
from millstream.taskmanager.spark.launch import connect_driver_jvm, launch_driver_jvm

if TYPE_CHECKING:  # pyspark.sql is heavy: keep it out of the worker, which imports this module.
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

CANCEL = "cancel"  # the control message that sets WorkerChannel.cancelled
OnEvent = Callable[[str, Any], None]
WarmUp = Literal["wait", "background", "skip"]

_HEADER = struct.Struct("!I")
_TOKEN_BYTES = 16
_GREETING_LIMIT = 1 << 16
_HELLO_TIMEOUT_S = 10.0  # a peer that connects but never says who it is gets dropped
_ATTACH_GRACE_S = 2.0  # job returned: its worker connected, but our accept thread may lag
_DRAIN_TIMEOUT_S = 30.0  # job returned: the channel is closed, the reader drains to the TaskExit
_EOF_GRACE_S = 1.0  # job failed: an in-flight TaskExit (a user traceback) beats Spark's text
_MAX_ERROR_LINES = 12
_JVM_NOISE = re.compile(r"\s*(at |\.\.\. \d+ more|Driver stacktrace:)")
_BOOT_TIMEOUT_S = 120.0  # stop() waits this long for a session still booting
_FENCED_EXIT_CODE = 75  # worker exit code when the TaskManager dropped the channel mid-body
_SLOT_LINGER_S = 5.0  # a slot with no subtask left waits this long for bodies still ending
_SLOT_CANCEL_GRACE_S = 10.0  # a cancelled subtask of a slot that has not ended by then counts as CANCELED
Placement = Literal["task", "slot"]

# Spark must not retry or duplicate a task: the JobMaster's restart strategy owns recovery.
_REQUIRED_CONF = {"spark.task.maxFailures": "1", "spark.speculation": "false"}
_DEFAULT_CONF = {
    "spark.ui.showConsoleProgress": "false",
    "spark.ui.enabled": "false",
    # Workers forked from the daemon and reused across tasks: a warm submit() costs ~0.1 s, not ~1 s.
    "spark.python.worker.reuse": "true",
    "spark.python.use.daemon": "true",
    # Spark's own kill of a worker that ignores cancellation; the fenced channel usually wins.
    "spark.python.task.killTimeout": "2s",
    # A body is silent towards Spark for its whole life: that must never count as an idle worker.
    "spark.python.worker.idleTimeoutSeconds": "0",
    "spark.python.worker.killOnIdleTimeout": "false",
    # The daemon that forks the workers loads Millstream's task code first: a fork has it.
    "spark.python.daemon.module": "millstream.taskmanager.spark.daemon",
    # The driver JVM's boot is CPU-bound (~8 s of CPU on 2 cores to a session, mostly C2 compiles
    # and GC threads) while it does little once up (records move between Python workers, not
    # through it): the C1 compiler alone and the serial collector boot it on about half the CPU.
    # A user's spark.driver.extraJavaOptions replaces these.
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}
# Embedded mode must not depend on the machine's hostname or network interfaces.
_LOCAL_CONF = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}


class NoSparkCores(RuntimeError):
    """An external Spark cluster grants no core to the TaskManager's application."""


class JavaNotFoundError(RuntimeError):
    """No usable Java runtime: Spark cannot start."""


def check_java() -> str:
    """Return the ``java`` Spark will launch (JAVA_HOME first, then PATH); raise if missing or < 17."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    hint = ("PySpark 4 needs Java 17 or newer: install one (e.g. `apt-get install "
            "openjdk-17-jre-headless`) and put `java` on PATH or set JAVA_HOME.")
    if not java or not os.access(java, os.X_OK):
        raise JavaNotFoundError(f"no Java runtime found (JAVA_HOME={home!r}, none on PATH). {hint}")
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    m = re.search(r'version "(?:1\.)?(\d+)', out)  # "17.0.15" or the old "1.8.0_x"
    if not m or int(m.group(1)) < 17:
        raise JavaNotFoundError(f"{java} is {out.strip().splitlines()[:1]}. {hint}")
    return java


@dataclass(frozen=True)
class TaskExit:
    """The one terminal event of a task. ``error``: the body's traceback, or Spark's summary."""

    status: Literal["FINISHED", "FAILED", "CANCELED"]
    error: str | None = None


@dataclass(frozen=True)
class SparkHostTimings:
    session_start_s: float
    warmup_s: float


def make_payload(body: Callable[..., None], *args: Any) -> bytes:
    """Pickle a body and its leading arguments; the worker calls ``body(*args, channel)``."""
    payload: bytes = cloudpickle.dumps((body, args))
    return payload


def _send_frame(sock: socket.socket, data: bytes) -> None:
    sock.sendall(_HEADER.pack(len(data)) + data)  # one segment, one syscall (TCP_NODELAY is on)


def _recv_frame(rfile: Any, limit: int = 1 << 32) -> bytes:
    header = rfile.read(_HEADER.size)
    if len(header) == _HEADER.size and (size := _HEADER.unpack(header)[0]) <= limit:
        data: bytes = rfile.read(size)
        if len(data) == size:
            return data
    raise EOFError("control channel closed (or an oversized hello)")


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # shutdown(), unlike close(), wakes a blocked reader
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


def bind_in_range(host: str, ports: range, what: str) -> socket.socket:
    """A listening socket on ``host`` at the first free port of ``ports``; the error names them."""
    last_error: OSError | None = None
    for port in ports:
        try:
            return socket.create_server((host, port), backlog=128)
        except OSError as exc:
            last_error = exc
    span = str(ports.start) if len(ports) == 1 else f"{ports.start}-{ports[-1]}"
    raise OSError(f"{what} cannot listen on {host} at port {span}: {last_error}")


@dataclass(frozen=True)
class _WorkerSpec:
    """What a Spark task carries to its worker: where to connect and how to say who it is."""

    task_id: str
    address: tuple[str, int]
    token: bytes
    tls: TlsSettings | None = None


class WorkerChannel:
    """The worker's end of a task's control channel: ``send`` events, watch ``cancelled``.

    A reader thread applies control messages as they arrive, so a body only polls a flag. If the
    TaskManager drops the channel while the body still runs (it already reported the task as ended,
    or it died), the reader ends the worker process: nobody reads that attempt's output any more,
    and Spark's own kill comes seconds later or, with a dead driver, never. ``secrets``: what the
    host's greeting gave the body; ``payload``: the pickled body and its arguments.
    """

    def __init__(self, task_id: str, sock: socket.socket, rfile: Any = None,
                 secrets: Mapping[str, str] | None = None, payload: bytes = b"", shared_process: bool = False) -> None:
        self.task_id = task_id
        # slot placement: this body is one thread of a worker its slot's other subtasks share, so
        # process-wide cleanup (ending the worker, its child processes) is the slot's, not the body's
        self.shared_process = shared_process
        self.secrets: Mapping[str, str] = dict(secrets or {})
        self.payload = payload
        self._sock = sock
        self._rfile = rfile if rfile is not None else sock.makefile("rb")
        self._send_lock = threading.Lock()  # bodies may send from several threads
        self._cancelled = threading.Event()
        self._body_done = threading.Event()
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        threading.Thread(target=self._read_loop, name=f"ms-channel-{task_id}", daemon=True).start()

    @classmethod
    def _connect(cls, spec: _WorkerSpec, shared_process: bool = False) -> WorkerChannel:
        sock = socket.create_connection(spec.address, timeout=_HELLO_TIMEOUT_S)
        tune_socket(sock)  # a TaskManager host that vanished ends this worker within ~30 s
        if spec.tls is not None:
            try:
                sock = spec.tls.client_context().wrap_socket(sock, server_hostname=spec.address[0])
            except BaseException:
                sock.close()
                raise
        _send_frame(sock, spec.token)
        rfile = sock.makefile("rb")
        secrets = json.loads(_recv_frame(rfile, limit=_GREETING_LIMIT))
        payload = _recv_frame(rfile)
        sock.settimeout(None)
        return cls(spec.task_id, sock, rfile, secrets, payload, shared_process)

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    @property
    def local_host(self) -> str:
        """This worker's address on the interface that reaches its TaskManager: where the
        TaskManager and the other workers it reaches can reach this one too."""
        return str(self._sock.getsockname()[0])

    def wait_cancelled(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds, waking at once on cancel; return ``cancelled``."""
        return self._cancelled.wait(timeout)

    def recv(self, timeout: float) -> Any | None:
        """The next control message other than CANCEL, waiting up to ``timeout``; None if none came."""
        try:
            return self._inbox.get(timeout=timeout)
        except queue.Empty:
            return None

    def recv_nowait(self) -> Any | None:
        """The next control message other than CANCEL, or None when none is waiting."""
        return None if self._inbox.empty() else self._inbox.get_nowait()  # one reader: no race

    def send(self, msg: Any) -> None:
        if isinstance(msg, TaskExit):
            raise TypeError("the runner sends the TaskExit: a body ends by returning or raising")
        self._send(msg)

    def _send(self, msg: Any) -> None:
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
        with self._send_lock:
            _send_frame(self._sock, data)

    def _read_loop(self) -> None:
        rfile = self._rfile
        while True:
            try:
                frame = _recv_frame(rfile)
            except (EOFError, OSError, ValueError):
                break
            try:
                msg = pickle.loads(frame)
            except Exception:  # a control message this worker cannot import: say so, keep serving
                traceback.print_exc()
                continue
            if isinstance(msg, str) and msg == CANCEL:  # not ==: a numpy array would misbehave
                self._cancelled.set()
            else:
                self._inbox.put(msg)
        if not self._body_done.is_set():
            if self.shared_process:  # the slot's other subtasks live on: this body is told to stop
                self._cancelled.set()
            else:
                os._exit(_FENCED_EXIT_CODE)

    def _finish(self, outcome: TaskExit) -> None:
        self._body_done.set()  # first: from now on a closed channel is expected, not a fence
        try:
            self._send(outcome)
        finally:
            _close(self._sock)


def _worker_main(spec: _WorkerSpec, rows: Iterable[Any]) -> Iterator[Any]:
    """The partition function: run the body, report its outcome on the channel, yield nothing.

    Outcomes travel on the channel, not as a Spark failure: the user's traceback arrives intact,
    Spark logs stay quiet, and the worker stays reusable. Only a broken channel fails the job."""
    for _ in rows:  # the one dummy element
        pass
    _run_body(WorkerChannel._connect(spec))
    return iter(())


def _run_body(channel: WorkerChannel) -> None:
    """Run the channel's payload to its end and send the one TaskExit."""
    outcome = TaskExit("FAILED", "internal error: no outcome")
    try:
        try:
            body, args = cloudpickle.loads(channel.payload)
            channel.payload = b""  # the body holds what it needs; a reused worker must not keep it
        except BaseException as exc:
            outcome = TaskExit("FAILED", "the task payload could not be unpickled in the worker "
                               f"(pid {os.getpid()}):\n{_format_exc(exc)}")
        else:
            try:
                body(*args, channel)
                outcome = TaskExit("CANCELED" if channel.cancelled else "FINISHED")
            except BaseException as exc:  # SystemExit too: it must not end the worker unreported
                outcome = TaskExit("CANCELED") if channel.cancelled else TaskExit("FAILED", _format_exc(exc))
    finally:
        channel._finish(outcome)


def _slot_main(spec: _WorkerSpec, rows: Iterable[Any]) -> Iterator[Any]:
    """The partition function of a slot (placement ``slot``): one Spark task, one Python worker,
    running every subtask the TaskManager deploys into the slot on a thread of its own.

    The slot's channel carries one ``_WorkerSpec`` per subtask; each subtask then connects its own
    control channel, exactly as a task of its own would, so its events, cancellation and outcome
    stay its own. CANCEL on the slot's channel means "no subtask left": the worker waits a moment
    for bodies still ending, and ends itself if one does not (Spark must not reuse a worker that
    still runs user code, and the core must come free)."""
    from millstream.taskmanager.user_processes import TaskProcesses  # lazy: only a slot's worker needs it

    for _ in rows:
        pass
    channel = WorkerChannel._connect(spec)
    threads: list[threading.Thread] = []
    try:
        with TaskProcesses():  # processes the slot's user code started end with the slot
            while not channel.cancelled:
                msg = channel.recv(0.2)
                if isinstance(msg, _WorkerSpec):
                    thread = threading.Thread(target=_run_in_slot, args=(msg,), name=f"ms-subtask-{msg.task_id}",
                                              daemon=True)
                    thread.start()
                    threads.append(thread)
                threads = [t for t in threads if t.is_alive()]
            deadline = time.monotonic() + _SLOT_LINGER_S
            for thread in threads:
                thread.join(max(0.0, deadline - time.monotonic()))
    finally:
        channel._finish(TaskExit("FINISHED"))
    if any(t.is_alive() for t in threads):  # a body that ignored its cancel: end it with the worker
        os._exit(_FENCED_EXIT_CODE)
    return iter(())


def _run_in_slot(spec: _WorkerSpec) -> None:
    try:
        channel = WorkerChannel._connect(spec, shared_process=True)
    except (OSError, EOFError, ValueError):
        return  # fenced: the attempt ended (cancelled) before its thread connected
    _run_body(channel)


def _format_exc(exc: BaseException) -> str:
    tb = exc.__traceback__.tb_next if exc.__traceback__ else None  # drop the runner's own frame
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _warm(barrier: bool, rows: Iterable[Any]) -> Iterator[int]:
    # Importing this module is half the point: the pooled worker now has it loaded. The barrier
    # keeps all partitions alive at once, so each gets its own worker (a fresh fork costs ~0.3-1 s).
    if barrier:
        from pyspark import BarrierTaskContext

        BarrierTaskContext.get().barrier()
    return iter([os.getpid()])


class TaskHandle:
    """One submitted task: cancel it, send it control messages, wait for its TaskExit.

    Events are delivered under one lock, so ``on_event`` is never called concurrently for a task
    and sees the worker's order; after the TaskExit everything is dropped.
    """

    def __init__(self, host: SparkHost, task_id: str, on_event: OnEvent, payload: bytes = b"",
                 greeting: bytes | None = None) -> None:
        self.task_id = task_id
        self._host = host
        self._greeting = host._greeting if greeting is None else greeting  # this attempt's secrets
        self._payload: bytes | None = payload  # sent to the worker when it connects, then dropped
        self._on_event = on_event
        self._token = secrets.token_bytes(_TOKEN_BYTES)
        self._ctl_lock = threading.Lock()  # _conn, _pending, _cancel_requested; orders sends
        self._conn: socket.socket | None = None
        self._pending: list[bytes] = []  # control messages sent before the worker connected
        self._cancel_requested = False
        self._deliver_lock = threading.Lock()
        self._outcome: TaskExit | None = None
        self._done = threading.Event()
        self._attached = threading.Event()
        self._reader_done = threading.Event()
        # The worker's connection ended with no TaskExit before anyone asked it to stop: it died,
        # and a cancel sent afterwards (say, because its consumers saw it die) must not hide that.
        self._died_uncancelled = False
        self._runner: _SlotRunner | None = None  # placement "slot": the slot's Spark task it runs in

    def wait(self, timeout: float | None = None) -> TaskExit | None:
        """The TaskExit, or None if the task has not ended within ``timeout`` seconds."""
        self._done.wait(timeout)
        return self._outcome

    def send(self, msg: Any) -> None:
        """Send a control message to the worker (queued until it connects; dropped once ended)."""
        if msg is None:
            raise ValueError("None is reserved: recv_nowait() returns it for 'nothing waiting'")
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
        with self._ctl_lock:
            if self._outcome is not None:
                return
            if self._conn is None:
                self._pending.append(data)
                return
            with contextlib.suppress(OSError):  # worker gone: the job thread reports it
                _send_frame(self._conn, data)

    def cancel(self) -> None:
        """Tell the body to stop, and cancel the job group for a body that does not listen.

        Blocks for one py4j call (a few ms)."""
        with self._ctl_lock:
            if self._cancel_requested or self._outcome is not None:
                return
            self._cancel_requested = True
        self.send(CANCEL)
        if self._runner is None:
            self._host._cancel_job_group(self.task_id)
        else:  # a thread cannot be killed: a body deaf to its cancel is let go, and dies with its slot
            timer = threading.Timer(_SLOT_CANCEL_GRACE_S, self._deliver, args=(TaskExit("CANCELED"),))
            timer.daemon = True
            timer.start()

    def _attach(self, conn: socket.socket) -> bool:
        with self._ctl_lock:
            if self._conn is not None or self._outcome is not None:
                return False  # a second or late connection for this attempt: fenced
            self._conn, pending = conn, self._pending
            self._attached.set()
            self._pending = []
            payload, self._payload = self._payload or b"", None
            with contextlib.suppress(OSError):
                _send_frame(conn, self._greeting)
                _send_frame(conn, payload)
                for data in pending:
                    _send_frame(conn, data)
        if self._cancel_requested and self._runner is None:  # cancel() may have run before the job existed
            self._host._cancel_job_group(self.task_id)
        return True

    def _deliver(self, msg: Any, conn: socket.socket | None = None) -> None:
        terminal = isinstance(msg, TaskExit)
        with self._deliver_lock:
            if self._outcome is not None or (conn is not None and conn is not self._conn):
                return  # stale: after the terminal event, or from a fenced connection
            if terminal:
                with self._ctl_lock:
                    self._outcome = msg
            try:
                self._on_event(self.task_id, msg)
            except Exception:
                log.exception("on_event failed for task %s", self.task_id)
        if terminal:
            if self._conn is not None:
                _close(self._conn)  # a worker still in its body exits on this (WorkerChannel)
            self._host._forget(self)
            self._done.set()  # last: whoever waits sees the host's books already settled


class _SlotRunner:
    """The TaskManager's side of one slot's Spark task (placement ``slot``): a one-partition job
    running :func:`_slot_main`, and the channel that hands it the subtasks deployed into the slot.

    It lives while the slot has subtasks: when the last one ends it is told to stop (its core comes
    free) and the next subtask deployed into the slot starts a new one. If its Spark task ends
    while subtasks still run (the worker died, Spark failed it), they fail with the reason."""

    def __init__(self, host: SparkHost, key: str) -> None:
        self.host = host
        self.key = key
        self.token = secrets.token_bytes(_TOKEN_BYTES)
        self.group = f"millstream-slot-{key}-{self.token.hex()[:8]}"
        self.handles: dict[str, TaskHandle] = {}  # guarded by the host's lock
        self.stopping = False  # guarded by the host's lock
        self._lock = threading.Lock()  # _conn, _pending; orders sends
        self._conn: socket.socket | None = None
        self._pending: list[bytes] = []

    def run(self, handle: TaskHandle, spec: _WorkerSpec) -> None:
        """Called under the host's lock: the slot's worker starts ``spec``'s subtask."""
        self.handles[handle.task_id] = handle
        handle._runner = self
        self._send(pickle.dumps(spec, protocol=pickle.HIGHEST_PROTOCOL))

    def task_ended(self, task_id: str) -> None:
        """Called under the host's lock: the last subtask gone stops the slot's Spark task."""
        if self.handles.pop(task_id, None) is not None and not self.handles and not self.stopping:
            self.stopping = True
            if self.host._runners.get(self.key) is self:
                del self.host._runners[self.key]
            self._send(pickle.dumps(CANCEL, protocol=pickle.HIGHEST_PROTOCOL))

    def _send(self, data: bytes) -> None:
        with self._lock:
            if self._conn is None:
                self._pending.append(data)
                return
            with contextlib.suppress(OSError):  # worker gone: the job thread reports it
                _send_frame(self._conn, data)

    def attach(self, conn: socket.socket) -> bool:
        with self._lock:
            if self._conn is not None:
                return False
            self._conn, pending, self._pending = conn, self._pending, []
            with contextlib.suppress(OSError):
                _send_frame(conn, b"{}")  # greeting: no secrets (each subtask's channel has its own)
                _send_frame(conn, b"")  # payload: none, the subtasks come as messages
                for data in pending:
                    _send_frame(conn, data)
        return True

    def start(self, spec: _WorkerSpec) -> None:
        from pyspark import InheritableThread  # lazy: pyspark is heavy (see submit)

        InheritableThread(target=self._run_job, args=(spec,), name=f"ms-slot-{self.key}", daemon=True).start()

    def _run_job(self, spec: _WorkerSpec) -> None:
        host = self.host
        error: str | None = None
        try:
            if host._spark is None:
                raise RuntimeError("SparkHost stopped before the slot's job started")
            sc = host._spark.sparkContext
            sc.setJobGroup(self.group, f"millstream slot {self.key}", interruptOnCancel=True)
            sc.parallelize([0], 1).mapPartitions(partial(_slot_main, spec)).collect()
        except Exception as exc:
            error = _spark_error_summary(exc)
        with host._lock:
            self.stopping = True
            if host._runners.get(self.key) is self:
                del host._runners[self.key]
            host._runners_by_token.pop(self.token, None)
            orphans = list(self.handles.values())
        with self._lock:
            if self._conn is not None:
                _close(self._conn)
        for handle in orphans:
            if handle._attached.is_set():  # a TaskExit in flight beats the slot's summary
                handle._reader_done.wait(_EOF_GRACE_S)
            if handle._cancel_requested and not handle._died_uncancelled:
                handle._deliver(TaskExit("CANCELED"))
                continue
            reason = error or "the slot's Spark task ended while the subtask ran"
            died = host._death(wait_s=1.0)
            reason = f"{reason}\n{died}" if died is not None else (
                f"{reason}\nPython worker crashed: it ended without reporting the task's outcome")
            handle._deliver(TaskExit("FAILED", reason))

    def cancel(self) -> None:
        self.host._cancel_job_group(self.group)


class SparkHost:
    """Owns the TaskManager's SparkSession and control listener; runs task bodies in workers.

    ``placement="slot"``: bodies submitted with the same ``slot`` key run as threads of one Spark
    task (:class:`_SlotRunner`), so Spark needs one core per slot: the embedded master is
    ``local[slots]`` and an external one is asked for ``slots`` cores.

    ``slots`` is the TaskManager's slots; with slot sharing each may run ``tasks_per_slot`` tasks at
    once. The embedded master is ``local[slots x tasks_per_slot]`` so all of them hold a core at the
    same time (a pipelined consumer waiting for a core its producer holds would deadlock). A
    ``local[N]`` master given is lowered to what the TaskManager can use, never raised (fewer
    threads: fewer tasks at once), and so is a ``spark.cores.max`` in ``conf``. An
    external ``master`` grants what its workers have free (:meth:`capacity`); its executors connect
    to the control listener at ``control_host`` (advertised), which binds ``bind_host`` on a port
    of ``control_ports`` (``range(0, 1)``: any free one; else the first free one of the range).
    """

    def __init__(self, slots: int, master: str | None = None, app_name: str = "millstream-taskmanager",
                 conf: Mapping[str, str] | None = None, control_host: str = "127.0.0.1",
                 log_level: str = "WARN", tasks_per_slot: int = 1, bind_host: str | None = None,
                 control_ports: range = range(0, 1), executor_wait_s: float = 60.0, tls: TlsSettings | None = None,
                 worker_secrets: Mapping[str, str] | None = None, placement: Placement = "task") -> None:
        """``tls``: the control channel's (None: plaintext); ``worker_secrets``: given to every
        body on its channel (``WorkerChannel.secrets``). ``placement``: "task", every body a Spark
        task of its own; "slot", the bodies submitted with one ``slot`` key share one Spark task."""
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        if placement not in ("task", "slot"):
            raise ValueError(f"millstream.spark.task-placement: expected task or slot, got {placement!r}")
        self.slots = slots
        self.placement = placement
        # Every task the TaskManager hosts runs at once (a pipelined consumer waiting for a core its
        # producer holds would deadlock): with slot sharing that is slots x tasks per slot, or one
        # Spark task per slot when the slot's subtasks share it.
        self.max_concurrent_tasks = slots if placement == "slot" else slots * tasks_per_slot
        self.master = master or f"local[{self.max_concurrent_tasks}]"
        threads = _local_threads(self.master)
        if threads is not None and threads > self.max_concurrent_tasks:  # cores it could never use
            log.warning("Spark master %s: asking for local[%d], the most tasks this TaskManager runs at once "
                        "(task placement %s)", self.master, self.max_concurrent_tasks, placement)
            self.master = f"local[{self.max_concurrent_tasks}]"
        elif threads is not None:  # fewer: the core check counts what Spark really runs at once
            self.max_concurrent_tasks = threads
        self.app_name = app_name
        self.conf = dict(conf or {})
        self.control_host = control_host
        self.bind_host = bind_host or control_host
        self.control_ports = control_ports
        self.executor_wait_s = executor_wait_s
        self.log_level = log_level
        self.tls = tls
        self._greeting = json.dumps(dict(worker_secrets or {})).encode()
        self._server_context = tls.server_context() if tls is not None else None
        self.timings: SparkHostTimings | None = None
        self._spark: SparkSession | None = None
        self._listener: socket.socket | None = None
        self._lock = threading.Lock()  # the two dicts: touched by caller, job and reader threads
        self._tasks: dict[str, TaskHandle] = {}
        self._by_token: dict[bytes, TaskHandle] = {}
        self._runners: dict[str, _SlotRunner] = {}  # placement "slot": the live runner per slot key
        self._runners_by_token: dict[bytes, _SlotRunner] = {}
        self._jvm: subprocess.Popen | None = None  # the Spark driver's JVM, when this process launched it
        self._stopping = False
        self.died: str | None = None  # "Spark died: ..." once the JVM exited under us
        self._death_listeners: list[Callable[[str], object]] = []
        self._booting: Future[SparkHostTimings] | None = None  # start_in_background's boot, until stop()

    @property
    def _local(self) -> bool:
        return self.master.startswith("local")

    def __enter__(self) -> SparkHost:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, warm_up: WarmUp = "wait") -> SparkHostTimings:
        """Start the session (5-20 s) and, with ``warm_up="wait"``, warm one worker per slot
        (1.5-4.5 s) before returning; return the timings. See :meth:`start_in_background`."""
        self.start_in_background(warm_up)
        return self.wait_started()

    def start_in_background(self, warm_up: WarmUp = "wait") -> None:
        """Fork Spark's JVM in this thread, then boot the session on a thread of its own: the
        caller may start gRPC servers meanwhile and :meth:`wait_started` later. ``warm_up``:
        "wait" warms the workers before the host counts as started, "background" after (tasks
        may run meanwhile), "skip" not at all (the first tasks start the workers)."""
        from pyspark import SparkContext

        if warm_up not in ("wait", "background", "skip"):
            raise ValueError(f"warm_up: expected wait, background or skip, got {warm_up!r}")
        if self._booting is not None and not (self._booting.done() and self._booting.exception() is not None):
            raise RuntimeError("this SparkHost is started already")
        if SparkContext._active_spark_context is not None:
            raise RuntimeError("a SparkContext already runs in this process and its config would "
                               "silently win over this SparkHost's: stop it first")
        # Workers must run this interpreter, or they cannot import millstream or the user's modules.
        os.environ["PYSPARK_PYTHON"] = sys.executable
        if self._local:
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # silences the hostname probe
        conf = self.session_conf()
        self._stopping = False
        self.died = None
        t0 = time.monotonic()
        jvm = launch_driver_jvm(conf)
        booting: Future[SparkHostTimings] = Future()
        self._booting = booting
        threading.Thread(target=self._boot, args=(booting, jvm, conf, warm_up, t0), name="ms-spark-boot",
                         daemon=True).start()

    def session_conf(self) -> dict[str, str]:
        """The Spark conf the session starts with."""
        # External: executors reach the driver where the TaskManager is reached, and the
        # application asks for no more cores than its slots can use (standalone would grant every
        # free core of the cluster to the first TaskManager and none to the next): slots x
        # tasks-per-slot, or slots when a slot's subtasks share one Spark task.
        placement = _LOCAL_CONF if self._local else {
            "spark.driver.host": self.control_host, "spark.driver.bindAddress": self.bind_host,
            "spark.cores.max": str(self.max_concurrent_tasks)}
        conf = {"spark.master": self.master, "spark.app.name": self.app_name, **_DEFAULT_CONF, **placement,
                **self.conf, "spark.pyspark.python": sys.executable}
        asked = conf.get("spark.cores.max", "")
        if not self._local and asked.isdigit() and int(asked) > self.max_concurrent_tasks:
            log.warning("ignoring spark.cores.max=%s: this TaskManager runs at most %d tasks at once (task placement "
                        "%s), so it asks for %d cores", asked, self.max_concurrent_tasks, self.placement,
                        self.max_concurrent_tasks)
            conf["spark.cores.max"] = str(self.max_concurrent_tasks)
        for key, value in _REQUIRED_CONF.items():
            if conf.get(key, value) != value:
                log.warning("ignoring %s=%s: Millstream needs %s", key, conf[key], value)
            conf[key] = value
        return conf

    def wait_started(self, timeout: float | None = None) -> SparkHostTimings:
        """The timings once :meth:`start_in_background`'s boot is done; raises what failed it."""
        if self._booting is None:
            raise RuntimeError("SparkHost is not starting")
        return self._booting.result(timeout)

    def _boot(self, booting: Future, jvm: Any, conf: Mapping[str, str], warm_up: WarmUp, t0: float) -> None:
        from pyspark.sql import SparkSession

        try:
            if jvm is not None:
                connect_driver_jvm(jvm)
            builder = SparkSession.builder
            for key, value in conf.items():
                builder = builder.config(key, value)
            self._spark = builder.getOrCreate()
            self._spark.sparkContext.setLogLevel(self.log_level)
            self._watch_jvm()
            t1 = time.monotonic()
            if not self._local and self.wait_for_executors(self.executor_wait_s) < 1:
                # a job now would wait for a core with no word, forever
                raise NoSparkCores(
                    f"the Spark cluster {self.master} gave it no executor core within {self.executor_wait_s:g} s: are "
                    "its workers running, with free cores and memory for an executor, and can they reach this "
                    f"machine at {self.control_host}?")
            if warm_up == "wait":
                self._warm_up()
            self._listen()
        except BaseException as exc:
            if jvm is not None and self._spark is None:  # a JVM no session uses: nobody else would stop it
                _forget_jvm(jvm.proc)
                try:  # a missing or old Java is the likely cause: say so (checked only now: it costs a JVM start)
                    check_java()
                except JavaNotFoundError as java:
                    java.__cause__, exc = exc, java
            self._stop_session()
            booting.set_exception(exc)
            return
        self.timings = SparkHostTimings(session_start_s=t1 - t0, warmup_s=time.monotonic() - t1)
        log.info("Spark %s started in %.1f s, warmed in %.1f s (warm-up: %s, task placement: %s)", self.master,
                 self.timings.session_start_s, self.timings.warmup_s, warm_up, self.placement)
        booting.set_result(self.timings)
        if warm_up == "background":
            try:
                started = time.monotonic()
                self._warm_up()
                log.info("Spark workers warmed in %.1f s, in the background", time.monotonic() - started)
            except Exception as exc:  # only a head start for the first tasks: never fatal
                if not self._stopping:
                    log.warning("warming Spark's workers failed (the first tasks start them): %s", exc)

    def on_death(self, listener: Callable[[str], object]) -> None:
        """Call ``listener(reason)`` (from a watcher thread) if Spark's JVM dies while started."""
        self._death_listeners.append(listener)
        if self.died is not None:
            listener(self.died)

    def _watch_jvm(self) -> None:
        # py4j keeps the JVM it launched as a Popen: waiting on it both notices a death at once and
        # reaps the process (a JVM killed under us must not linger <defunct>).
        assert self._spark is not None
        gateway = getattr(self._spark.sparkContext, "_gateway", None)
        self._jvm = getattr(gateway, "proc", None)
        if self._jvm is not None:
            threading.Thread(target=self._await_jvm_exit, args=(self._jvm,), name="ms-spark-jvm-watch", daemon=True).start()

    def _await_jvm_exit(self, proc: subprocess.Popen) -> None:
        code = proc.wait()
        if self._stopping or proc is not self._jvm:
            return
        self.died = f"Spark died: its JVM (pid {proc.pid}) exited with code {code}"
        log.error("%s; the tasks of this host fail and no new task can start", self.died)
        for listener in list(self._death_listeners):
            try:
                listener(self.died)
            except Exception:
                log.exception("a Spark death listener failed")

    def _death(self, wait_s: float) -> str | None:
        """Why Spark died, waiting up to ``wait_s`` for a JVM that is going (its py4j socket may
        close a moment before the process is reaped); None while it lives."""
        proc = self._jvm
        if self.died is None and proc is not None and not self._stopping:
            try:
                code = proc.wait(wait_s)
            except subprocess.TimeoutExpired:
                return None
            return self.died or f"Spark died: its JVM (pid {proc.pid}) exited with code {code}"
        return self.died

    def stop(self, timeout: float = 10.0) -> None:
        """Cancel running tasks (each still gets its TaskExit), then stop listener and session."""
        self._stopping = True
        booting, self._booting = self._booting, None
        if booting is not None:  # a session still booting would outlive this stop
            with contextlib.suppress(Exception):
                booting.exception(_BOOT_TIMEOUT_S)
        self._stop_session(timeout)

    def _stop_session(self, timeout: float = 10.0) -> None:
        self._stopping = True
        with self._lock:
            running = list(self._tasks.values())
        for handle in running:
            handle.cancel()
        for handle in running:
            handle.wait(timeout)
        with self._lock:
            runners = list(self._runners_by_token.values())
        for runner in runners:
            with contextlib.suppress(Exception):
                runner.cancel()
        if self._listener is not None:
            _close(self._listener)
            self._listener = None
        if self._spark is not None:
            if self.died is None:
                self._spark.stop()
            else:  # nothing to stop over py4j; forget the context so a new one may start
                from pyspark import SparkContext

                with contextlib.suppress(Exception):
                    self._spark.stop()
                SparkContext._active_spark_context = None
                SparkContext._gateway = None
                SparkContext._jvm = None
            self._spark = None

    def capacity(self) -> int:
        """Tasks Spark runs at once for this TaskManager: ``max_concurrent_tasks`` when embedded;
        with an external master the cores its executors hold right now (workers come and go)."""
        if self._local or self._spark is None:
            return self.max_concurrent_tasks
        sc = self._spark.sparkContext._jsc.sc()
        return int(sc.maxNumConcurrentTasks(sc.resourceProfileManager().defaultResourceProfile()))

    def wait_for_executors(self, timeout_s: float) -> int:
        """External master: waits until its executors hold a core for us; returns the capacity,
        0 when none came within ``timeout_s`` (no worker with a free core)."""
        deadline = time.monotonic() + timeout_s
        while True:
            capacity = self.capacity()
            if capacity > 0 or time.monotonic() >= deadline:
                return capacity
            time.sleep(0.2)

    def running_task_ids(self) -> list[str]:
        with self._lock:
            return sorted(self._tasks)

    def submit(self, task_id: str, payload: bytes, on_event: OnEvent,
               secrets: Mapping[str, str] | None = None, slot: str | None = None) -> TaskHandle:
        """Start a one-partition job running the payload's body (see ``make_payload``); ``secrets``
        (this attempt's, e.g. its task credential) replace the host's ``worker_secrets`` in its greeting.
        Placement "slot": the body runs on a thread of ``slot``'s Spark task (started if none runs)."""
        from pyspark import InheritableThread  # pinned-thread mode: cleans up its JVM thread

        if self.died is not None:
            raise RuntimeError(self.died)
        if self._spark is None or self._listener is None:
            raise RuntimeError("SparkHost is not started")
        greeting = None if secrets is None else json.dumps(dict(secrets)).encode()
        handle = TaskHandle(self, task_id, on_event, payload, greeting)
        with self._lock:
            if task_id in self._tasks:
                raise ValueError(f"task {task_id} is still running on this host")
            self._tasks[task_id] = handle
            self._by_token[handle._token] = handle
        address = (self.control_host, self._listener.getsockname()[1])
        spec = _WorkerSpec(task_id, address, handle._token, self.tls)
        if self.placement == "slot":
            self._run_in_slot(handle, spec, slot or task_id)
            return handle
        InheritableThread(target=self._run_job, args=(handle, spec), name=f"ms-job-{task_id}",
                          daemon=True).start()
        return handle

    def _run_in_slot(self, handle: TaskHandle, spec: _WorkerSpec, key: str) -> None:
        started: _SlotRunner | None = None
        with self._lock:
            runner = self._runners.get(key)
            if runner is None:
                runner = started = self._runners[key] = _SlotRunner(self, key)
                self._runners_by_token[runner.token] = runner
            runner.run(handle, spec)
        if started is not None:
            started.start(_WorkerSpec(f"slot-{key}", spec.address, started.token, self.tls))

    def slots_in_use(self) -> list[str]:
        """Placement "slot": the slots whose Spark task runs (each holds a core)."""
        with self._lock:
            return sorted(self._runners)

    def _run_job(self, handle: TaskHandle, spec: _WorkerSpec) -> None:
        error: str | None = None
        try:
            if self._spark is None:
                raise RuntimeError("SparkHost stopped before the task's job started")
            sc = self._spark.sparkContext
            # Job groups are thread-local: set in the submitting thread, or cancelJobGroup misses it.
            sc.setJobGroup(handle.task_id, f"millstream task {handle.task_id}", interruptOnCancel=True)
            if not handle._cancel_requested:
                sc.parallelize([0], 1).mapPartitions(partial(_worker_main, spec)).collect()
        except Exception as exc:  # py4j's error for any job failure, a killed worker included
            error = _spark_error_summary(exc)
        if handle._cancel_requested and not (error is not None and handle._died_uncancelled):
            handle._deliver(TaskExit("CANCELED"))
        elif error is None:  # the worker closed the channel before returning: drain it, bounded
            if handle._attached.wait(_ATTACH_GRACE_S):
                handle._reader_done.wait(_DRAIN_TIMEOUT_S)
            handle._deliver(TaskExit("FAILED", "the worker returned without reporting an outcome"))
        else:  # a dead worker's socket is closed by the kernel; a lost remote one may never be
            if handle._attached.is_set():
                handle._reader_done.wait(_EOF_GRACE_S)
            died = self._death(wait_s=1.0)
            if died is not None:  # the last line is what a job's failure message shows
                error = f"{error}\n{died}"
            elif handle._attached.is_set():
                error = f"{error}\nPython worker crashed: it ended without reporting the task's outcome"
            handle._deliver(TaskExit("FAILED", error))

    def _warm_up(self) -> None:
        # Embedded: one worker per slot, as a TaskManager deploys its tasks together. Idle workers
        # expire after a minute (Spark's PythonWorkerFactory), so this pays off for deployments
        # soon after start, e.g. a mini-cluster's job. External: one worker, since a barrier stage
        # fails with dynamic allocation or when slots exceed the cluster's cores.
        assert self._spark is not None
        n = min(self.slots, self.max_concurrent_tasks) if self._local else 1  # a barrier needs them all at once
        rdd = self._spark.sparkContext.parallelize(range(n), n)
        (rdd.barrier() if n > 1 else rdd).mapPartitions(partial(_warm, n > 1)).collect()

    def _cancel_job_group(self, task_id: str) -> None:
        if self._spark is not None and self.died is None:
            try:
                self._spark.sparkContext.cancelJobGroup(task_id)
            except Exception:
                if self._death(wait_s=1.0) is None:
                    raise  # Spark lives: a real error

    def _forget(self, handle: TaskHandle) -> None:
        with self._lock:
            if self._tasks.get(handle.task_id) is handle:
                del self._tasks[handle.task_id]
            self._by_token.pop(handle._token, None)
            if handle._runner is not None:
                handle._runner.task_ended(handle.task_id)

    def _listen(self) -> None:
        self._listener = listener = bind_in_range(self.bind_host, self.control_ports, "the Spark control channel")

        def accept_loop() -> None:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return  # closed by stop()
                threading.Thread(target=self._serve, args=(conn,), name="ms-control-conn",
                                 daemon=True).start()

        threading.Thread(target=accept_loop, name="ms-control-accept", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        handle: TaskHandle | None = None
        try:
            conn.settimeout(_HELLO_TIMEOUT_S)
            tune_socket(conn)  # a worker host that vanished fails its task within ~30 s, not never
            if self._server_context is not None:
                conn = self._tls_accept(conn)
            rfile = conn.makefile("rb")
            token = _recv_frame(rfile, limit=_TOKEN_BYTES)  # unauthenticated: read no more
            with self._lock:
                handle = self._by_token.get(token)
                runner = self._runners_by_token.get(token)
            if runner is not None:
                if runner.attach(conn):
                    conn.settimeout(None)
                    while True:  # the slot sends only its end; EOF: it ended or died
                        _recv_frame(rfile)
                return
            if handle is None or not handle._attach(conn):
                handle = None
                return
            conn.settimeout(None)
            while True:  # unpickling here, not on the caller's event loop
                handle._deliver(pickle.loads(_recv_frame(rfile)), conn)
        except (EOFError, OSError):
            pass  # closed: by the worker at its end, by a killed worker, or by us after TaskExit
        except Exception:  # an event the TaskManager cannot unpickle: the attempt is unusable
            if handle is not None:
                handle._deliver(TaskExit("FAILED", "undecodable event from the worker:\n"
                                         + traceback.format_exc()), conn)
        finally:
            _close(conn)
            if handle is not None:
                with handle._ctl_lock:
                    handle._died_uncancelled = handle._outcome is None and not handle._cancel_requested
                handle._reader_done.set()


    def _tls_accept(self, conn: socket.socket) -> socket.socket:
        """The TLS side of an accepted connection; a peer that fails the handshake (no
        certificate, one not signed by the truststore's CA, or plaintext) is logged and dropped."""
        assert self._server_context is not None
        try:
            peer = conn.getpeername()
        except OSError:
            peer = "?"
        try:
            return self._server_context.wrap_socket(conn, server_side=True)
        except (OSError, ValueError) as exc:
            log.warning("control channel: refused a connection from %s: TLS handshake failed: %s", peer, exc)
            raise OSError(f"TLS handshake failed: {exc}") from exc


def _local_threads(master: str) -> int | None:
    """The threads of a local master (``local``, ``local[N]``, ``local[*]``, ``local[N,F]``): the
    tasks it runs at once; None for any other master."""
    m = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", master.strip())
    if m is None:
        return None
    if m.group(1) is None:
        return 1
    return (os.cpu_count() or 1) if m.group(1) == "*" else int(m.group(1))


def _forget_jvm(proc: subprocess.Popen) -> None:
    from pyspark import SparkContext

    if proc.poll() is None:
        proc.kill()
        proc.wait()
    with SparkContext._lock:
        if getattr(SparkContext._gateway, "proc", None) is proc:
            SparkContext._gateway = None
            SparkContext._jvm = None


def _spark_error_summary(exc: BaseException) -> str:
    """Spark's failure text without JVM stack frames (the Java exception's message lines)."""
    java = getattr(exc, "java_exception", None)
    text = str(java.toString()) if java is not None else f"{type(exc).__name__}: {exc}"
    lines = [ln for ln in text.splitlines() if ln.strip() and not _JVM_NOISE.match(ln)]
    return "\n".join(lines[:_MAX_ERROR_LINES])
