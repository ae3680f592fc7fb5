"""What the CLI shows of jobs: ``list`` rows, ``status`` reports, JSON, ``run``'s live view, and
``logs``' subtask output.

Everything here renders :class:`~millstream.proto.cluster_pb2.JobSummary` messages as they come;
a field the JobManager left empty (no per-vertex summaries, no parallelism) is left out, and what
is known is shown. The formatting functions are pure (the time is a parameter) and unit tested.
"""
from __future__ import annotations

import datetime
import sys
import threading
import time
from typing import Any, Callable, Iterable, TextIO

from millstream.client.execution import JobDetached
from millstream.proto import cluster_pb2 as cpb
from millstream.runtime.execution_state import JobStatus
from millstream.runtime.clock import wall_ms

# The job's print-sink lines, as the live view shows them: a burst, then a steady rate. The lines
# over the rate are counted and said to be skipped; the job is never slowed down by its console.
PRINT_BURST = 200
PRINT_LINES_PER_S = 100.0
# run's view says a job waits for slots once the wait lasted this long (most jobs get them at once)
SLOT_WAIT_GRACE_S = 2.0


def status_name(summary: cpb.JobSummary) -> str:
    return JobStatus.from_proto(summary.status).value


def is_terminal(summary: cpb.JobSummary) -> bool:
    return JobStatus.from_proto(summary.status).is_terminal()


def format_duration(ms: int) -> str:
    """``0:07``, ``12:30``, ``1:02:03``."""
    seconds = max(0, int(ms // 1000))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


def duration_ms(summary: cpb.JobSummary, now_ms: int) -> int | None:
    if not summary.start_time_ms:
        return None
    end = summary.end_time_ms or now_ms
    return max(0, end - summary.start_time_ms)


def format_start(ms: int) -> str:
    if not ms:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def parallelism(summary: cpb.JobSummary) -> int | None:
    """The job's parallelism (its largest vertex's), when the JobManager said."""
    if summary.parallelism:
        return summary.parallelism
    return max((v.parallelism for v in summary.vertices), default=None) or None


def format_tasks(tasks_per_state: Any) -> str:
    return ", ".join(f"{state} {count}" for state, count in sorted(tasks_per_state.items()) if count) or "-"


def slot_wait_line(summary: cpb.JobSummary, now_ms: int) -> str | None:
    """``waiting for slots: 4 of 5 — add a TaskManager or lower parallelism; timeout in 4:37``."""
    if not summary.HasField("slot_wait") or summary.slot_wait.slots_required <= 0 or is_terminal(summary):
        return None
    wait = summary.slot_wait
    line = (f"waiting for slots: {wait.slots_allocated} of {wait.slots_required} — "
            "add a TaskManager or lower parallelism")
    if wait.timeout_at_ms:
        line += f"; timeout in {format_duration(max(0, wait.timeout_at_ms - now_ms))}"
    return line


def _count(n: int) -> str:
    return f"{n:,}"


# -- list ----------------------------------------------------------------------------------------

LIST_HEADER = ("JOB ID", "NAME", "STATUS", "START", "DURATION", "PARALLELISM")


def list_rows(jobs: list[cpb.JobSummary], now_ms: int) -> list[str]:
    """``millstream list``: a header and one row per job (newest first, as the web UI lists them);
    a job waiting for slots gets an indented line saying so."""
    jobs = sorted(jobs, key=lambda s: s.start_time_ms, reverse=True)
    rows = []
    for s in jobs:
        d = duration_ms(s, now_ms)
        p = parallelism(s)
        rows.append((s.job_id.hex(), s.job_name, status_name(s), format_start(s.start_time_ms),
                     format_duration(d) if d is not None else "-", str(p) if p else "-"))
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(LIST_HEADER)]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

    out = [line(LIST_HEADER)]
    for s, row in zip(jobs, rows):
        out.append(line(row))
        waiting = slot_wait_line(s, now_ms)
        if waiting:
            out.append(f"    {waiting}")
    return out


# -- status --------------------------------------------------------------------------------------

def vertex_rows(summary: cpb.JobSummary) -> list[tuple[str, str, str, str, str]]:
    return [(v.name, str(v.parallelism or "-"), format_tasks(v.tasks_per_state), _count(v.records_in), _count(v.records_out))
            for v in summary.vertices]


def status_report(summary: cpb.JobSummary, now_ms: int) -> list[str]:
    """``millstream status JOB``: the job, its vertices' states and record counts, a slot wait,
    and the root cause of a failure with its remote traceback."""
    d = duration_ms(summary, now_ms)
    p = parallelism(summary)
    out = [
        f"Job:         {summary.job_name} ({summary.job_id.hex()})",
        f"Status:      {status_name(summary)}",
        f"Started:     {format_start(summary.start_time_ms)}",
        f"Duration:    {format_duration(d) if d is not None else '-'}",
    ]
    if p:
        out.append(f"Parallelism: {p}")
    out.append(f"Tasks:       {format_tasks(summary.tasks_per_state)}")
    if summary.num_restarts or status_name(summary) == "RESTARTING":
        out.append(f"Restarts:    {summary.num_restarts}")
    waiting = slot_wait_line(summary, now_ms)
    if waiting:
        out.append(waiting)
    out.extend(checkpoint_lines(summary))
    rows = vertex_rows(summary)
    if rows:
        header = ("VERTEX", "PARALLELISM", "TASKS", "RECORDS IN", "RECORDS OUT")
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
        out.append("")
        for cells in (header, *rows):
            out.append("  " + "  ".join(c.rjust(w) if i >= 3 else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip())
    failure = summary.failure
    if failure.message:
        out.append("")
        out.append(f"Root cause: {failure.message}")
        if failure.task_name:
            out.append(f"  in task {failure.task_name}")
        if failure.traceback:
            out.append("")
            out.append("Remote traceback:")
            out.extend(failure.traceback.rstrip("\n").splitlines())
    return out


def _size(n: int) -> str:
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def checkpoint_lines(summary: cpb.JobSummary) -> list[str]:
    """The job's checkpoint figures: counts, the last completed one, the last failure, the restore."""
    if not summary.HasField("checkpoints"):
        return []
    c = summary.checkpoints
    out = [f"Checkpoints: {c.num_completed} completed, {c.num_failed} failed, {c.num_in_progress} in progress "
           f"(every {c.interval_ms / 1000:g} s, in {c.directory})"]
    if c.last_completed_id:
        out.append(f"  last:      #{c.last_completed_id}, {_size(c.last_size_bytes)} in {c.last_duration_ms} ms, "
                   f"at {format_start(c.last_completed_at_ms)}")
    if c.last_failure_reason:
        out.append(f"  failed:    {c.last_failure_reason}: {c.last_failure_message}")
    if c.latest_restored_id:
        out.append(f"  restored:  #{c.latest_restored_id} at {format_start(c.latest_restored_at_ms)} "
                   f"from {c.latest_restored_path}")
    return out


def checkpoints_json(summary: cpb.JobSummary) -> dict[str, Any] | None:
    if not summary.HasField("checkpoints"):
        return None
    c = summary.checkpoints
    return {
        "interval_ms": c.interval_ms, "directory": c.directory, "num_completed": c.num_completed,
        "num_failed": c.num_failed, "num_in_progress": c.num_in_progress,
        "last_completed": None if not c.last_completed_id else {
            "id": c.last_completed_id, "duration_ms": c.last_duration_ms, "size_bytes": c.last_size_bytes,
            "completed_at_ms": c.last_completed_at_ms},
        "last_failure": None if not c.last_failure_reason else {
            "reason": c.last_failure_reason, "message": c.last_failure_message},
        "latest_restore": None if not c.latest_restored_id else {
            "id": c.latest_restored_id, "restored_at_ms": c.latest_restored_at_ms, "path": c.latest_restored_path},
    }


def summary_json(summary: cpb.JobSummary, now_ms: int) -> dict[str, Any]:
    """A job for ``--json``: field names as in the protobuf; absent parts are null."""
    wait = summary.slot_wait if summary.HasField("slot_wait") and summary.slot_wait.slots_required > 0 else None
    failure = summary.failure if summary.failure.message else None
    return {
        "job_id": summary.job_id.hex(),
        "job_name": summary.job_name,
        "status": status_name(summary),
        "start_time_ms": summary.start_time_ms or None,
        "end_time_ms": summary.end_time_ms or None,
        "duration_ms": duration_ms(summary, now_ms),
        "parallelism": parallelism(summary),
        "num_tasks": summary.num_tasks,
        "tasks_per_state": dict(sorted(summary.tasks_per_state.items())),
        "num_restarts": summary.num_restarts,
        "checkpoints": checkpoints_json(summary),
        "vertices": [
            {"name": v.name, "parallelism": v.parallelism, "tasks_per_state": dict(sorted(v.tasks_per_state.items())),
             "records_in": v.records_in, "records_out": v.records_out}
            for v in summary.vertices
        ],
        "slot_wait": None if wait is None else {
            "slots_required": wait.slots_required, "slots_allocated": wait.slots_allocated,
            "timeout_at_ms": wait.timeout_at_ms or None,
        },
        "failure": None if failure is None else {
            "message": failure.message, "task_name": failure.task_name or None, "traceback": failure.traceback or None,
        },
    }


# -- `millstream logs` -------------------------------------------------------------------------

def format_outputs(response: cpb.TaskOutputsResponse) -> Iterable[str]:
    """The lines ``millstream logs`` prints: a header per subtask, then its lines."""
    for out in response.subtasks:
        where = f" on {out.taskmanager_id}" if out.taskmanager_id else ""
        yield (f"==> {out.vertex_name} ({out.subtask_index + 1}/{out.parallelism}) subtask {out.subtask_index}, "
               f"attempt {out.attempt_number}, {out.state}{where} <==")
        if not out.available:
            yield f"(no output: {out.unavailable_reason})"
        else:
            if out.dropped_lines:
                yield f"({out.dropped_lines} earlier lines dropped: taskmanager.task-output.max-size)"
            yield from out.lines
            if not out.lines:
                yield "(no output)"
        yield ""


# -- printed lines -------------------------------------------------------------------------------

class PrintRateLimiter:
    """Rate-limits the job's printed lines on the way to the console (a token bucket): a burst of
    ``burst`` lines, then ``per_second``. Lines over the rate, and lines the JobManager dropped,
    are counted and reported in one line (``... 1,234 printed lines not shown``)."""

    def __init__(self, burst: int = PRINT_BURST, per_second: float = PRINT_LINES_PER_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.burst, self.per_second, self._clock = burst, per_second, clock
        self._tokens = float(burst)
        self._last = clock()
        self.skipped = 0
        self.skipped_total = 0

    def take(self, lines: list[str], dropped: int = 0) -> list[str]:
        """The lines to show now, a skip notice first when lines were skipped since the last call."""
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.per_second)
        self._last = now
        allowed = min(len(lines), int(self._tokens))
        self._tokens -= allowed
        self.skipped += dropped  # the JobManager's drops came before these lines
        out = self.flush() if allowed else []
        self.skipped += len(lines) - allowed
        return out + lines[:allowed]

    def flush(self) -> list[str]:
        if not self.skipped:
            return []
        notice = self.notice()
        self.skipped_total += self.skipped
        self.skipped = 0
        return [notice]

    def notice(self) -> str:
        return f"... {_count(self.skipped)} printed line{'s' if self.skipped != 1 else ''} not shown"


class LineAtomicWriter:
    """A text stream whose lines never mix: each thread's text is held until its newline, then
    written whole. ``run`` puts the program's stdout behind one, so the view's lines (written from
    a thread following a collect job) never land inside a line the program is printing."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._lock = threading.Lock()
        self._pending: dict[int, str] = {}

    def write(self, text: str) -> int:
        me = threading.get_ident()
        buffered = self._pending.pop(me, "") + text
        head, newline, tail = buffered.rpartition("\n")
        if newline:
            with self._lock:
                self.stream.write(head + newline)
        if tail:
            self._pending[me] = tail
        return len(text)

    def flush(self) -> None:
        tail = self._pending.pop(threading.get_ident(), "")
        with self._lock:
            if tail:
                self.stream.write(tail)
            self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def __getattr__(self, name: str) -> Any:  # encoding, fileno, ... of the real stream
        return getattr(self.stream, name)


# -- run's view ----------------------------------------------------------------------------------

class RunView:
    """``millstream run``'s view of the jobs a program submits (a :class:`JobObserver`).

    On a terminal, a live ``rich`` panel redrawn a few times a second (status, each vertex's task
    states and records, elapsed time, a slot wait) with the job's printed lines scrolling above it.
    Elsewhere (a pipe, a file), plain lines: the job id, each status change, the printed lines, and
    a final summary. ``detached``: stop the program once its job is submitted.
    """

    def __init__(self, *, detached: bool = False, show_prints: bool = True, live: bool | None = None,
                 out: TextIO | None = None, now_ms: Callable[[], int] = wall_ms,
                 slot_wait_grace_s: float = SLOT_WAIT_GRACE_S) -> None:
        self._now_ms = now_ms
        self.slot_wait_grace_s = slot_wait_grace_s
        self.detached = detached
        self.show_prints = show_prints
        self.out = out or sys.stdout
        self.live = self.out.isatty() if live is None else live
        self.job_id: bytes | None = None
        self.job_name = ""
        self.client: Any = None
        self.summary: cpb.JobSummary | None = None
        self._printed = PrintRateLimiter()
        self._last_status = ""
        self._last_wait: tuple[int, int] | None = None
        self._lock = threading.Lock()
        self._live: Any = None
        self._console: Any = None
        self._follower: threading.Thread | None = None
        self._stopped = threading.Event()
        self._updated = 0.0
        self._wait_since: float | None = None  # monotonic time the current slot wait was first seen

    # JobObserver --------------------------------------------------------------------------------
    def submitted(self, job_name: str, job_id: bytes, client: Any, follow: bool) -> None:
        self.job_id, self.job_name, self.client, self.summary = job_id, job_name, client, None
        self._last_status, self._last_wait, self._wait_since = "", None, None
        self._stopped.clear()
        self._write(f"Job {job_name} submitted: {job_id.hex()}")
        if self.detached:
            raise JobDetached(job_id)
        if self.live:
            self._start_live()
        if self.live and client is not None:
            threading.Thread(target=self._poll, args=(client, job_id), name="millstream-run-poll", daemon=True).start()
        if follow:
            self._follower = threading.Thread(target=self._follow, args=(client, job_id), name="millstream-run-view", daemon=True)
            self._follower.start()

    def update(self, update: cpb.JobStatusUpdate) -> None:
        with self._lock:
            self.summary = update.summary
            if self.show_prints:
                lines = self._printed.take(list(update.printed_lines), update.printed_lines_dropped)
                for line in lines:
                    self._write(line)
            if not self.live:
                self._plain_progress(update.summary)
            elif self._live is not None:
                self._live.refresh()
            self._updated = time.monotonic()

    def stopped(self) -> None:
        with self._lock:
            if self._stopped.is_set():
                return
            self._stopped.set()
            if self.show_prints:
                for line in self._printed.flush():
                    self._write(line)
            if self._live is not None:
                self._live.refresh()
                self._live.stop()
                self._live = None
            elif self.summary is not None and not self.live:
                self._plain_final(self.summary)

    def finish(self, timeout_s: float = 3.0) -> None:
        """The program ended: let the view see the end of a job it follows (a collect job ends just
        after its last results were read), then stop."""
        follower = self._follower
        if follower is not None and follower.is_alive():
            follower.join(timeout_s)
        self.stopped()

    # --------------------------------------------------------------------------------------------
    def _follow(self, client: Any, job_id: bytes) -> None:
        import grpc

        try:
            for update in client.wait(job_id):
                self.update(update)
        except grpc.RpcError:  # the program closed its results (and the channel): nothing to follow
            pass
        finally:
            self.stopped()

    def _poll(self, client: Any, job_id: bytes) -> None:
        """Between the status stream's updates, asks for the job's summary once a second, so the
        live view's task states and record counts move even when the job's status does not."""
        import grpc

        while not self._stopped.wait(1.0):
            if time.monotonic() - self._updated < 1.0:
                continue
            try:
                summary = client.status(job_id)
            except (grpc.RpcError, ValueError):  # ValueError: the program closed the channel meanwhile
                continue  # the stream's next update, or the job's end, will tell
            with self._lock:
                if self._stopped.is_set() or self.job_id != job_id:
                    return
                self.summary = summary
                if self._live is not None:
                    self._live.refresh()

    def _write(self, line: str) -> None:
        if self._console is not None:
            self._console.print(line, markup=False, highlight=False, soft_wrap=True)
        else:
            self.out.write(line + "\n")
            self.out.flush()

    def _plain_progress(self, summary: cpb.JobSummary) -> None:
        status = status_name(summary)
        if status != self._last_status:
            self._last_status = status
            d = duration_ms(summary, self._now_ms())
            self._write(f"Job {summary.job_name or self.job_name}: {status}" + (f" ({format_duration(d)})" if d is not None else ""))
        wait = summary.slot_wait
        key = (wait.slots_allocated, wait.slots_required) if summary.HasField("slot_wait") else None
        line = slot_wait_line(summary, self._now_ms())
        if line and key != self._last_wait:
            if self._wait_since is None:
                self._wait_since = time.monotonic()
            # said once per change, and only if the wait lasts: most jobs get their slots at once
            timer = threading.Timer(max(0.0, self._wait_since + self.slot_wait_grace_s - time.monotonic()),
                                    self._say_slot_wait, args=(self.job_id, key))
            timer.daemon = True
            timer.start()
        self._last_wait = key if line else None
        if not line:
            self._wait_since = None

    def _say_slot_wait(self, job_id: bytes | None, key: tuple[int, int]) -> None:
        with self._lock:
            summary = self.summary
            if self._stopped.is_set() or summary is None or job_id != self.job_id or self._last_wait != key:
                return
            line = slot_wait_line(summary, self._now_ms())
            if line:
                self._write(line)

    def _plain_final(self, summary: cpb.JobSummary) -> None:
        for name, par, tasks, rin, rout in vertex_rows(summary):
            self._write(f"  {name} [{par}]: {tasks}; records in {rin}, out {rout}")

    def _start_live(self) -> None:
        from rich.console import Console
        from rich.live import Live

        self._console = Console(file=self.out)
        self._live = Live(self._renderable(), console=self._console, refresh_per_second=4, transient=False,
                          redirect_stdout=True, redirect_stderr=False)
        self._live.start()

    def _renderable(self) -> Any:
        view = self

        class _Current:  # re-rendered at each refresh, so the elapsed time moves between updates
            def __rich__(self) -> Any:
                return view._render()

        return _Current()

    def _render(self) -> Any:
        from rich.table import Table
        from rich.text import Text

        summary = self.summary
        now = self._now_ms()
        grid = Table.grid(padding=(0, 2))
        if summary is None:
            grid.add_row(Text(f"{self.job_name}  {self.job_id.hex() if self.job_id else ''}  submitted", style="bold"))
            return grid
        d = duration_ms(summary, now)
        status = status_name(summary)
        style = {"FINISHED": "green", "FAILED": "red", "CANCELED": "yellow", "RUNNING": "cyan"}.get(status, "")
        head = Text.assemble((summary.job_name or self.job_name, "bold"), "  ", (status, f"bold {style}".strip()),
                             f"  {format_duration(d) if d is not None else '-'}")
        grid.add_row(head)
        waiting = slot_wait_line(summary, now)
        if not waiting:
            self._wait_since = None
        elif self._wait_since is None:
            self._wait_since = time.monotonic()
        if waiting and self._wait_since is not None and time.monotonic() - self._wait_since >= self.slot_wait_grace_s:
            grid.add_row(Text(waiting, style="yellow"))
        rows = vertex_rows(summary)
        if rows:
            table = Table(box=None, pad_edge=False, show_edge=False)
            table.add_column("vertex")
            table.add_column("tasks")
            table.add_column("records in", justify="right")
            table.add_column("records out", justify="right")
            for name, par, tasks, rin, rout in rows:
                table.add_row(f"{name} [{par}]", tasks, rin, rout)
            grid.add_row(table)
        else:
            grid.add_row(Text(f"tasks: {format_tasks(summary.tasks_per_state)}"))
        if summary.failure.message:
            grid.add_row(Text(f"cause: {summary.failure.message}", style="red"))
        return grid
