"""Forwards the lines a job's tasks print to the job's JobManager, for its attached clients.

A task's print sink must never wait for the JobManager: lines go into a bounded outbox per job
(the oldest are dropped and counted when it is full) and a loop sends each job's outbox at most
every ``interval_s``, one report in flight per job. A report that fails counts its lines as
dropped; the count travels with the next report, so clients learn what they missed.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

import grpc

from millstream.runtime.bounded_lines import BoundedLines
from millstream.proto import cluster_pb2 as cpb

log = logging.getLogger(__name__)

FORWARD_INTERVAL_S = 0.2
OUTBOX_MAX_LINES = 1000
OUTBOX_MAX_CHARS = 256 << 10


class LineOutbox:
    """One job's lines waiting to be sent: bounded by count and characters, oldest dropped first."""

    def __init__(self, max_lines: int = OUTBOX_MAX_LINES, max_chars: int = OUTBOX_MAX_CHARS) -> None:
        self._buffer = BoundedLines(max_lines, max_chars, "an outbox")
        self.dropped = 0  # not sent since the last take(): evicted here or lost with a failed report

    def __len__(self) -> int:
        return len(self._buffer)

    def pending(self) -> bool:
        return bool(self._buffer) or self.dropped > 0

    def add(self, lines: list[str]) -> None:
        self.dropped += self._buffer.add(lines)

    def take(self) -> tuple[list[str], int]:
        lines, dropped = list(self._buffer.lines), self.dropped
        self._buffer.clear()
        self.dropped = 0
        return lines, dropped


Send = Callable[[str, cpb.PrintedLinesReport], Awaitable[Any]]  # (JobMaster address, report)


class PrintForwarder:
    """The TaskManager's outboxes, one per job, and the loop that sends them."""

    def __init__(self, send: Send, interval_s: float = FORWARD_INTERVAL_S,
                 max_lines: int = OUTBOX_MAX_LINES, max_chars: int = OUTBOX_MAX_CHARS) -> None:
        self._send = send
        self.interval_s = interval_s
        self._bounds = (max_lines, max_chars)
        self._outboxes: dict[bytes, tuple[str, LineOutbox, asyncio.Lock]] = {}
        self._loop_task: asyncio.Task[None] | None = None
        self._sending: set[asyncio.Task[None]] = set()
        self.reports_sent = 0

    def add(self, job_id: bytes, jobmaster_address: str, lines: list[str]) -> None:
        """Never blocks: called on the event loop for every printed batch."""
        entry = self._outboxes.get(job_id)
        if entry is None:
            entry = self._outboxes[job_id] = (jobmaster_address, LineOutbox(*self._bounds), asyncio.Lock())
        entry[1].add(lines)
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while self._outboxes:
            await asyncio.sleep(self.interval_s)
            for job_id, (_, outbox, lock) in list(self._outboxes.items()):
                if outbox.pending() and not lock.locked():  # one report in flight per job
                    task = asyncio.ensure_future(self.flush(job_id))
                    self._sending.add(task)
                    task.add_done_callback(self._sending.discard)

    async def flush(self, job_id: bytes) -> None:
        """Sends the job's pending lines now (after a report in flight): a task's last lines go out
        before its final state, so a client sees them before the job's end."""
        entry = self._outboxes.get(job_id)
        if entry is None:
            return
        address, outbox, lock = entry
        async with lock:
            if not outbox.pending():
                return
            lines, dropped = outbox.take()
            try:
                await self._send(address, cpb.PrintedLinesReport(job_id=job_id, lines=lines, dropped=dropped))
                self.reports_sent += 1
            except grpc.aio.AioRpcError as exc:
                if exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION):
                    return  # the job is over: nobody reads its lines
                log.info("printed lines of job %s not delivered (%s): %d counted as dropped", job_id.hex(), exc.code().name, len(lines))
                outbox.dropped += dropped + len(lines)

    def forget(self, job_id: bytes) -> None:
        self._outboxes.pop(job_id, None)

    def close(self) -> None:
        if self._loop_task is not None:
            self._loop_task.cancel()
        for task in list(self._sending):
            task.cancel()
