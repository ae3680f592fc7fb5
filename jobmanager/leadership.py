"""The JobManager's leadership rules (pure): which calls it serves, and what a new leader recovers.

Fencing (HA.md, Flink's FencedRpcEndpoint): while not the leader a JobManager still serves gRPC,
but its client-facing services (Dispatcher, BlobServer) answer UNAVAILABLE "JobManager <addr> is
not the leader" (a client then looks the leader up again), and its TaskManager-facing services
(ResourceManager, JobMasterService) refuse with FAILED_PRECONDITION "fenced: ..." every call whose
token is not the current leader session id. Health and reflection are always served. Without HA
the session id is DEFAULT_LEADER_ID; a TaskManager that sends no token at all (one from before
fencing) is accepted then, and only then.

Recovery (Flink's Dispatcher leader process): every job in the JobGraphStore that has no entry in
the JobResultStore is recovered; a job with an entry is globally terminal and never runs again:
its left-over HA data is cleaned up and its result marked clean. A job whose stored graph cannot
be read (unreadable, corrupt or missing file) is not run and not given up: it stays in HA storage
for a leader that can read it, and this leader lists it with the reason and serves the others
(Flink stops the whole JobManager there; one bad file should not take every other job down).
"""
from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

import grpc

from millstream.proto import cluster_pb2 as cpb
from millstream.runtime.rpc.fencing import Refusal
from millstream.runtime.ha.api import HaStorageError, JobGraphStore, JobResultEntry, JobResultStore

log = logging.getLogger(__name__)

_SERVICES = cpb.DESCRIPTOR.services_by_name
CLIENT_FACING = frozenset(_SERVICES[n].full_name for n in ("Dispatcher", "BlobServer"))
TASKMANAGER_FACING = frozenset(_SERVICES[n].full_name for n in ("ResourceManager", "JobMasterService"))


def service_of(method: str) -> str:
    """``/millstream.v1.Dispatcher/SubmitJob`` -> ``millstream.v1.Dispatcher``."""
    parts = method.split("/")
    return parts[1] if len(parts) >= 3 else ""


class LeadershipGuard:
    """The fencing guard of the JobManager's RpcServer: ``guard(method, token)`` is None (serve)
    or the refusal. Its state is set on the JobManager's loop: ``session`` is the leader session id
    (None while not leader; dropped first thing on revocation), ``serving_clients`` turns True once
    a new leader has recovered its jobs (a client must not see a half-recovered job list)."""

    def __init__(self, address: str, *, tokenless_allowed: bool) -> None:
        self.address = address
        self.tokenless_allowed = tokenless_allowed  # NONE mode: a TaskManager without fencing sends none
        self.session: Optional[uuid.UUID] = None
        self.serving_clients = False

    @property
    def token(self) -> Optional[str]:
        """What this JobManager sends to TaskManagers (None while not leader)."""
        return str(self.session) if self.session is not None else None

    def grant(self, session: uuid.UUID) -> None:
        self.session = session
        self.serving_clients = False

    def revoke(self) -> None:
        self.session = None
        self.serving_clients = False

    def __call__(self, method: str, token: Optional[str]) -> Optional[Refusal]:
        service = service_of(method)
        if service in CLIENT_FACING:
            if self.session is None or not self.serving_clients:
                return grpc.StatusCode.UNAVAILABLE, f"JobManager {self.address} is not the leader"
            return None
        if service in TASKMANAGER_FACING:
            if self.session is None:
                return (grpc.StatusCode.FAILED_PRECONDITION,
                        f"fenced: JobManager {self.address} is not the leader (call with leader session {token})")
            if token is None:
                if self.tokenless_allowed:
                    return None
                return (grpc.StatusCode.FAILED_PRECONDITION,
                        f"fenced: the call carries no leader session id; JobManager {self.address} leads under "
                        f"session {self.session}")
            if token != str(self.session):
                return (grpc.StatusCode.FAILED_PRECONDITION,
                        f"fenced: the call carries leader session {token}, JobManager {self.address} leads under "
                        f"session {self.session}")
        return None


@dataclass
class RecoveryPlan:
    """What a new leader does with the jobs in HA storage."""

    recover: list[bytes] = field(default_factory=list)  # run again, from their latest checkpoint
    clean_up: list[bytes] = field(default_factory=list)  # globally terminal: finish the cleanup, mark clean
    unrecoverable: dict[bytes, str] = field(default_factory=dict)  # its job graph cannot be read: why


def plan_recovery(job_ids: Iterable[bytes], has_result: Callable[[bytes], bool],
                  dirty: Iterable[JobResultEntry]) -> RecoveryPlan:
    """A job with a result (dirty or clean) is never recovered; a dirty result (or a clean one whose
    job graph is still there: a crash between the steps) is cleaned up again (idempotent)."""
    plan = RecoveryPlan()
    for job_id in sorted(set(job_ids)):
        (plan.clean_up if has_result(job_id) else plan.recover).append(job_id)
    for entry in dirty:
        if entry.job_id not in plan.clean_up:
            plan.clean_up.append(entry.job_id)
    return plan


def read_jobs_to_recover(graphs: JobGraphStore, results: JobResultStore) -> tuple[RecoveryPlan, dict[bytes, bytes]]:
    """Blocking (ZooKeeper, files): the plan and the payload of every job to recover (read and
    locked). A job whose graph cannot be read moves from ``plan.recover`` to ``plan.unrecoverable``
    with the reason (it is never run, nor started without its graph); an unreadable listing of the
    stores raises HaStorageError (nothing can be decided then)."""
    plan = plan_recovery(graphs.job_ids(), results.has_job_result_entry, results.dirty_results())
    payloads: dict[bytes, bytes] = {}
    for job_id in plan.recover:
        try:
            payloads[job_id] = graphs.recover_job_graph(job_id)
        except HaStorageError as exc:
            plan.unrecoverable[job_id] = str(exc)
    plan.recover = [job_id for job_id in plan.recover if job_id in payloads]
    return plan, payloads
