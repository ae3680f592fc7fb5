"""HighAvailabilityServices: what a JobManager, a TaskManager or a client gets from HA, by mode.

    services = create_ha_services(conf)            # NONE -> StandaloneHaServices, ZOOKEEPER -> ZooKeeperHaServices
    election = services.jobmanager_leader_election()
    retrieval = services.jobmanager_leader_retrieval()
    ...
    services.close()

One services object per process (it holds the ZooKeeper session). Stores and counters block:
use them from a thread (see :mod:`millstream.runtime.ha.api`).
"""
from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Optional, Union

from kazoo.exceptions import NoNodeError

from millstream.runtime import config as cfg
from millstream.runtime.checkpoint_ids import StandaloneCheckpointIDCounter
from millstream.runtime.checkpoint_storage import CompletedCheckpointStore
from millstream.runtime.ha.api import JobGraphStore, JobResultStore, LeaderElection, LeaderRetrieval
from millstream.runtime.ha.checkpoints import (
    CHECKPOINTS_NODE,
    COUNTER_NODE,
    ZooKeeperCheckpointIDCounter,
    ZooKeeperCompletedCheckpointStore,
)
from millstream.runtime.ha.job_stores import (
    JOB_RESULT_STORE_DIR,
    FileSystemJobResultStore,
    InMemoryJobGraphStore,
    InMemoryJobResultStore,
    ZooKeeperJobGraphStore,
)
from millstream.runtime.ha.leader_election import JOBMANAGER_COMPONENT, ZooKeeperLeaderElection
from millstream.runtime.ha.leader_retrieval import ZooKeeperLeaderRetrieval
from millstream.runtime.ha.settings import HaSettings
from millstream.runtime.ha.standalone import StandaloneLeaderElection, StandaloneLeaderRetrieval
from millstream.runtime.ha.zookeeper_client import EventThread, ZooKeeperClient

log = logging.getLogger(__name__)

CheckpointIDCounterImpl = Union[StandaloneCheckpointIDCounter, ZooKeeperCheckpointIDCounter]


class HighAvailabilityServices:
    """The interface (Flink's HighAvailabilityServices); both implementations below."""

    highly_available: bool = False

    def jobmanager_leader_election(self) -> LeaderElection:
        """This process's seat in the JobManager election (one per process, created once)."""
        raise NotImplementedError

    def jobmanager_leader_retrieval(self) -> LeaderRetrieval:
        """A new retrieval of the JobManager leader (for a TaskManager, a client, a CLI call)."""
        raise NotImplementedError

    def job_graph_store(self) -> JobGraphStore:
        raise NotImplementedError

    def job_result_store(self) -> JobResultStore:
        raise NotImplementedError

    def checkpoint_id_counter(self, job_id: bytes) -> CheckpointIDCounterImpl:
        raise NotImplementedError

    def completed_checkpoint_store(self, base: Path, job_id: bytes, num_retained: int) -> CompletedCheckpointStore:
        raise NotImplementedError

    def cleanup_job_data(self, job_id: bytes) -> None:
        """Delete what HA keeps of a globally terminal job besides its job graph (Flink's
        globalCleanup): the checkpoint id counter and checkpoint pointers."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def close_and_cleanup_all_data(self) -> None:
        """Shut the whole cluster down for good: every HA entry of this cluster id goes too."""
        raise NotImplementedError

    def __enter__(self) -> HighAvailabilityServices:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class StandaloneHaServices(HighAvailabilityServices):
    """No HA: a fixed JobManager address, nothing survives the process (as Millstream without HA)."""

    def __init__(self, jobmanager_address: str) -> None:
        self.jobmanager_address = jobmanager_address
        self._events = EventThread("millstream-ha-standalone")
        self._election: Optional[StandaloneLeaderElection] = None
        self._graphs = InMemoryJobGraphStore()
        self._results = InMemoryJobResultStore()

    def jobmanager_leader_election(self) -> StandaloneLeaderElection:
        if self._election is None:
            self._election = StandaloneLeaderElection(self._events)
        return self._election

    def jobmanager_leader_retrieval(self) -> StandaloneLeaderRetrieval:
        return StandaloneLeaderRetrieval(self._events, self.jobmanager_address)

    def job_graph_store(self) -> InMemoryJobGraphStore:
        return self._graphs

    def job_result_store(self) -> InMemoryJobResultStore:
        return self._results

    def checkpoint_id_counter(self, job_id: bytes, start: int = 1) -> StandaloneCheckpointIDCounter:
        """Without HA a restarted JobManager continues after the checkpoint directories on disk:
        pass ``start=store.highest_checkpoint_id() + 1`` (what the checkpoint driver does today)."""
        return StandaloneCheckpointIDCounter(start)

    def completed_checkpoint_store(self, base: Path, job_id: bytes, num_retained: int) -> CompletedCheckpointStore:
        return CompletedCheckpointStore(base, job_id, num_retained)

    def cleanup_job_data(self, job_id: bytes) -> None:
        pass  # nothing outside the process

    def close(self) -> None:
        if self._election is not None:
            self._election.close()
        self._events.close()

    def close_and_cleanup_all_data(self) -> None:
        self.close()


class ZooKeeperHaServices(HighAvailabilityServices):
    """ZooKeeper for leadership and pointers, ``high-availability.storageDir`` for the data."""

    highly_available = True

    def __init__(self, settings: HaSettings, *, name: str = "millstream-ha") -> None:
        self.settings = settings
        self.client = ZooKeeperClient(settings, name=name).start()
        self.storage_dir = settings.cluster_storage_dir
        self._election: Optional[ZooKeeperLeaderElection] = None
        self._retrievals: list[ZooKeeperLeaderRetrieval] = []
        self._graphs: Optional[ZooKeeperJobGraphStore] = None
        self._results: Optional[FileSystemJobResultStore] = None

    def jobmanager_leader_election(self) -> ZooKeeperLeaderElection:
        if self._election is None:
            self._election = ZooKeeperLeaderElection(self.client, JOBMANAGER_COMPONENT)
        return self._election

    def jobmanager_leader_retrieval(self) -> ZooKeeperLeaderRetrieval:
        retrieval = ZooKeeperLeaderRetrieval(self.client, JOBMANAGER_COMPONENT)
        self._retrievals.append(retrieval)
        return retrieval

    def job_graph_store(self) -> ZooKeeperJobGraphStore:
        if self._graphs is None:
            self._graphs = ZooKeeperJobGraphStore(self.client, self.storage_dir)
        return self._graphs

    def job_result_store(self) -> FileSystemJobResultStore:
        if self._results is None:
            self._results = FileSystemJobResultStore(self.storage_dir / JOB_RESULT_STORE_DIR)
        return self._results

    def checkpoint_id_counter(self, job_id: bytes) -> ZooKeeperCheckpointIDCounter:
        return ZooKeeperCheckpointIDCounter(self.client, job_id)

    def completed_checkpoint_store(self, base: Path, job_id: bytes,
                                   num_retained: int) -> ZooKeeperCompletedCheckpointStore:
        return ZooKeeperCompletedCheckpointStore(self.client, base, job_id, num_retained)

    def cleanup_job_data(self, job_id: bytes) -> None:
        zk = self.client.kazoo
        for path in (self.client.path(COUNTER_NODE, job_id.hex()), self.client.path(CHECKPOINTS_NODE, job_id.hex())):
            try:
                self.client.retry(zk.delete, path, recursive=True)
            except NoNodeError:
                pass

    def close(self) -> None:
        for retrieval in self._retrievals:
            retrieval.stop()
        if self._election is not None:
            self._election.close()
        self.client.close()

    def close_and_cleanup_all_data(self) -> None:
        try:
            self.client.retry(self.client.kazoo.delete, self.client.namespace, recursive=True)
        except NoNodeError:
            pass
        self.close()
        shutil.rmtree(self.storage_dir, ignore_errors=True)


def jobmanager_address_of(conf: cfg.Configuration) -> str:
    return f"{conf.get(cfg.JOBMANAGER_RPC_ADDRESS)}:{conf.get(cfg.JOBMANAGER_RPC_PORT)}"


def create_ha_services(conf: cfg.Configuration, *, jobmanager_address: Optional[str] = None,
                       name: str = "millstream-ha") -> HighAvailabilityServices:
    """The services ``high-availability.type`` asks for. Without HA, ``jobmanager_address``
    (default: jobmanager.rpc.address:jobmanager.rpc.port) is the one leader. With ZooKeeper this
    connects (blocking, at most the connection timeout)."""
    settings = HaSettings.from_configuration(conf)
    if not settings.zookeeper:
        return StandaloneHaServices(jobmanager_address or jobmanager_address_of(conf))
    return ZooKeeperHaServices(settings, name=name)
