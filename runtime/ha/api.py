"""The high-availability services' interfaces (Flink's HighAvailabilityServices and its parts).

A JobManager process takes part in one leader election (its Dispatcher, ResourceManager and
JobMasters share the leadership, as Flink's single leader latch), persists submitted jobs in a
:class:`JobGraphStore`, records globally terminal jobs in a :class:`JobResultStore`, and gives each
job's checkpoint coordinator a :class:`~millstream.runtime.checkpoint_ids.CheckpointIDCounter` and a completed-checkpoint store.
TaskManagers and clients find the leader through a :class:`LeaderRetrieval`.

Threads. Every callback (``grant_leadership``, ``revoke_leadership``, ``notify_leader_address``)
runs on the services' own event thread, one at a time, in order, never on an asyncio loop: a
callback must return quickly and must not call back into blocking store methods. A component that
lives on an asyncio loop wraps its contender or listener in :mod:`millstream.runtime.ha.asyncio_bridge`,
which marshals each call onto the loop. Store methods (JobGraphStore, JobResultStore, counters,
checkpoint stores) block on ZooKeeper and file I/O: call them from a thread
(``await asyncio.to_thread(store.put_job_graph, ...)``), never on the loop.
``LeaderElection.confirm_leadership`` and ``has_leadership`` never block and may be called anywhere.
"""
from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field
from typing import Optional, Protocol, runtime_checkable

# The fencing token of a cluster without HA (Flink's HighAvailabilityServices.DEFAULT_LEADER_ID).
DEFAULT_LEADER_ID = uuid.UUID(int=0)


class HaError(Exception):
    """A high-availability service cannot do what was asked; the message says what and where."""


class HaStorageError(HaError):
    """HA data (a pointer in ZooKeeper or a file in high-availability.storageDir) is missing,
    unreadable or corrupt. Recovery stops loudly on it; it never falls back to a fresh start."""


@dataclass(frozen=True)
class LeaderInformation:
    """Who leads: the leader's RPC address and its leader session id (the fencing token)."""

    address: str
    session_id: uuid.UUID


# -- leader election --------------------------------------------------------------------------


@runtime_checkable
class LeaderContender(Protocol):
    """Takes part in a leader election (Flink's LeaderContender).

    ``grant_leadership(session_id)``: this process is leader under ``session_id`` from now on; the
    contender starts its services fenced by that id and then calls
    ``LeaderElection.confirm_leadership(session_id, address)``, which publishes its address.
    ``revoke_leadership()``: the leadership is gone (another process may be leader already): stop
    acting as leader at once (suspend jobs, refuse fenced calls). Both run on the HA event thread.
    ``handle_error(error)``: the election failed in a way it cannot recover from (Flink's fatal
    error handler); the process should stop.
    """

    def grant_leadership(self, session_id: uuid.UUID) -> None: ...

    def revoke_leadership(self) -> None: ...

    def handle_error(self, error: BaseException) -> None: ...


class LeaderElection(Protocol):
    """One contender's seat in the election of one component (Flink's LeaderElection)."""

    def start(self, contender: LeaderContender) -> None:
        """Join the election; ``contender`` is called back on the HA event thread."""

    def confirm_leadership(self, session_id: uuid.UUID, address: str) -> None:
        """Publish ``address`` as the leader's under ``session_id``. Ignored (logged) when
        ``session_id`` is not the current grant: a late confirmation of a revoked leadership
        must not publish a stale address. Never blocks."""

    def has_leadership(self, session_id: uuid.UUID) -> bool:
        """Whether this process is leader under ``session_id`` right now (as far as it knows:
        a partitioned leader learns it is deposed when its connection is suspended)."""

    def close(self) -> None:
        """Leave the election; a leader's leadership is revoked first."""


# -- leader retrieval -------------------------------------------------------------------------


@runtime_checkable
class LeaderRetrievalListener(Protocol):
    """Told of every change of the leader (Flink's LeaderRetrievalListener), on the HA event
    thread: ``notify_leader_address(LeaderInformation)`` or ``None`` when there is no known leader
    (none elected yet, or the connection to ZooKeeper is suspended or lost)."""

    def notify_leader_address(self, leader: Optional[LeaderInformation]) -> None: ...

    def handle_error(self, error: BaseException) -> None: ...


class LeaderRetrieval(Protocol):
    """Follows the leader of one component (Flink's LeaderRetrievalService)."""

    def start(self, listener: Optional[LeaderRetrievalListener] = None) -> None:
        """Start following; ``listener`` (if any) hears each leader change."""

    def current_leader(self, timeout: float) -> LeaderInformation:
        """Block until a leader is known (at most ``timeout`` seconds; then :class:`HaError`).
        For the CLI and other synchronous callers; never call it on an asyncio loop."""

    def stop(self) -> None: ...


# -- job graphs and job results ---------------------------------------------------------------


class JobGraphStore(Protocol):
    """Submitted jobs that are not globally terminal (Flink's JobGraphStore).

    Payloads are opaque bytes (the Dispatcher decides what a job's recovery needs: the JobGraph,
    its artifacts). A leader that put or recovered a job holds a lock on it; ``remove_job_graph``
    by one leader deletes the job only when no other JobManager holds a lock, so a job being
    recovered by a new leader is never deleted by a deposed one.
    """

    def put_job_graph(self, job_id: bytes, payload: bytes) -> None: ...

    def recover_job_graph(self, job_id: bytes) -> bytes:
        """Read and lock the job's payload; :class:`HaStorageError` when it cannot be read."""

    def job_ids(self) -> list[bytes]: ...

    def remove_job_graph(self, job_id: bytes) -> None:
        """Release this leader's lock and delete the job's data if no other lock remains
        (call it only once the job is globally terminal and its result is in the JobResultStore)."""

    def release_job_graph(self, job_id: bytes) -> None:
        """Release the lock without deleting (a job suspended)."""

    def release_all(self) -> None:
        """Release every lock of this leader (on revoked leadership), deleting nothing."""


class JobResultStatus(str, enum.Enum):
    """How a globally terminal job ended (the JobStatus values that are globally terminal)."""

    FINISHED = "FINISHED"
    CANCELED = "CANCELED"
    FAILED = "FAILED"


@dataclass(frozen=True)
class JobResultEntry:
    """A globally terminal job (Flink's JobResultEntry): never run again once recorded."""

    job_id: bytes
    status: JobResultStatus
    job_name: str = ""
    failure: str = ""
    end_time_ms: int = 0
    extra: dict[str, str] = field(default_factory=dict)


class JobResultStore(Protocol):
    """Results of globally terminal jobs (Flink's JobResultStore).

    An entry is *dirty* from ``create_dirty_result`` (the job ended; its HA data, checkpoints and
    blobs may still exist) until ``mark_result_clean`` (all cleaned up). A recovering leader skips
    every job with an entry (it never re-runs a finished job) and finishes the cleanup of the dirty
    ones."""

    def create_dirty_result(self, entry: JobResultEntry) -> None: ...

    def mark_result_clean(self, job_id: bytes) -> None: ...

    def has_job_result_entry(self, job_id: bytes) -> bool: ...

    def has_dirty_job_result_entry(self, job_id: bytes) -> bool: ...

    def has_clean_job_result_entry(self, job_id: bytes) -> bool: ...

    def dirty_results(self) -> list[JobResultEntry]: ...
