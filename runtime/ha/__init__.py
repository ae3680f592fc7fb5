"""JobManager high availability (Flink's HighAvailabilityServices): leader election and retrieval,
the JobGraphStore, the JobResultStore, checkpoint id counters and completed-checkpoint stores.

``high-availability.type: NONE`` (default) gives :class:`StandaloneHaServices` (one JobManager at
a fixed address, as without HA); ``zookeeper`` gives :class:`ZooKeeperHaServices` (kazoo). The
threading contract is in :mod:`millstream.runtime.ha.api`.
"""
from millstream.runtime.checkpoint_ids import CheckpointIDCounter
from millstream.runtime.ha.api import (
    DEFAULT_LEADER_ID,
    HaError,
    HaStorageError,
    JobGraphStore,
    JobResultEntry,
    JobResultStatus,
    JobResultStore,
    LeaderContender,
    LeaderElection,
    LeaderInformation,
    LeaderRetrieval,
    LeaderRetrievalListener,
)
from millstream.runtime.ha.asyncio_bridge import LoopContender, LoopListener
from millstream.runtime.ha.services import (
    HighAvailabilityServices,
    StandaloneHaServices,
    ZooKeeperHaServices,
    create_ha_services,
)
from millstream.runtime.ha.settings import HaConfigurationError, HaSettings

__all__ = [
    "DEFAULT_LEADER_ID", "CheckpointIDCounter", "HaError", "HaStorageError", "JobGraphStore", "JobResultEntry",
    "JobResultStatus", "JobResultStore", "LeaderContender", "LeaderElection", "LeaderInformation", "LeaderRetrieval",
    "LeaderRetrievalListener", "LoopContender", "LoopListener", "HighAvailabilityServices", "StandaloneHaServices",
    "ZooKeeperHaServices", "create_ha_services", "HaConfigurationError", "HaSettings",
]
