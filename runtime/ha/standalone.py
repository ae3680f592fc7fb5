"""No high availability (``high-availability.type: NONE``): one JobManager at a fixed address,
as Millstream behaves without HA (Flink's StandaloneHaServices / StandaloneLeaderElection).

The one contender is granted leadership at once, under :data:`DEFAULT_LEADER_ID`, and never loses
it; retrieval always answers the configured JobManager address with that id. Callbacks run on a
small event thread, as with ZooKeeper, so a component is written once for both.
"""
from __future__ import annotations

import logging
import uuid
from typing import Optional

from millstream.runtime.ha.api import (
    DEFAULT_LEADER_ID,
    LeaderContender,
    LeaderInformation,
    LeaderRetrievalListener,
)
from millstream.runtime.ha.zookeeper_client import EventThread

log = logging.getLogger(__name__)


class StandaloneLeaderElection:
    def __init__(self, events: EventThread) -> None:
        self._events = events
        self._contender: Optional[LeaderContender] = None
        self._leading = False
        self.confirmed: Optional[LeaderInformation] = None

    def start(self, contender: LeaderContender) -> None:
        if self._contender is not None:
            raise RuntimeError("the leader election was started already")
        self._contender = contender
        self._leading = True
        self._events.post(lambda: contender.grant_leadership(DEFAULT_LEADER_ID))

    def confirm_leadership(self, session_id: uuid.UUID, address: str) -> None:
        if session_id == DEFAULT_LEADER_ID and self._leading:
            self.confirmed = LeaderInformation(address, session_id)

    def has_leadership(self, session_id: uuid.UUID) -> bool:
        return self._leading and session_id == DEFAULT_LEADER_ID

    def close(self) -> None:
        if self._leading and self._contender is not None:
            self._leading = False
            contender = self._contender
            self._events.post(contender.revoke_leadership)


class StandaloneLeaderRetrieval:
    """Always the configured JobManager (Flink's StandaloneLeaderRetrievalService)."""

    def __init__(self, events: EventThread, address: str) -> None:
        self._events = events
        self.leader = LeaderInformation(address, DEFAULT_LEADER_ID)

    def start(self, listener: Optional[LeaderRetrievalListener] = None) -> None:
        if listener is not None:
            leader = self.leader
            self._events.post(lambda: listener.notify_leader_address(leader))

    def current_leader(self, timeout: float) -> LeaderInformation:
        return self.leader

    def stop(self) -> None:
        pass
