"""Leader retrieval on ZooKeeper (Flink's ZooKeeperLeaderRetrievalDriver).

Watches ``leader/<component>/connection_info`` and tells the listener each change of
``(address, session id)``, on the client's event thread. The listener is told ``None`` when the
node is gone (no leader) and when the connection to ZooKeeper is SUSPENDED (unless
``tolerate-suspended-connections``, Flink's LeaderInformationClearancePolicy) or LOST: a process
that cannot see ZooKeeper cannot know who leads. After reconnection the node is read again.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Optional

from kazoo.exceptions import KazooException, NoNodeError
from kazoo.protocol.states import EventType, WatchedEvent

from millstream.runtime.ha.api import HaError, LeaderInformation, LeaderRetrievalListener
from millstream.runtime.ha.leader_election import JOBMANAGER_COMPONENT, connection_info_path, decode_leader_information
from millstream.runtime.ha.zookeeper_client import ConnectionState, ZooKeeperClient

log = logging.getLogger(__name__)


class ZooKeeperLeaderRetrieval:
    """Follows the leader of ``component``; ``current_leader(timeout)`` for blocking callers."""

    def __init__(self, client: ZooKeeperClient, component: str = JOBMANAGER_COMPONENT) -> None:
        self._client = client
        self._zk = client.kazoo
        self.component = component
        self._path = connection_info_path(client, component)
        self._listener: Optional[LeaderRetrievalListener] = None
        self._leader: Optional[LeaderInformation] = None
        self._known = threading.Condition()
        self._started = False
        self._running = False
        client.add_state_listener(self._on_connection_state)

    def start(self, listener: Optional[LeaderRetrievalListener] = None) -> None:
        """Start watching; ``listener`` (optional: ``current_leader`` works without one) hears of
        every change, the first being the leader known now (or None)."""
        if self._started:
            raise RuntimeError(f"leader retrieval of {self.component} was started already")
        self._started = self._running = True
        self._listener = listener
        self._client.events.post(self._read)

    def stop(self) -> None:
        self._running = False

    def current_leader(self, timeout: float) -> LeaderInformation:
        if not self._started:
            self.start()
        deadline = time.monotonic() + timeout
        with self._known:
            while self._leader is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise HaError(f"no {self.component} leader in ZooKeeper {self._client.settings.quorum} "
                                  f"(node {self._path}) within {timeout:g} s: is a JobManager with the same "
                                  "high-availability.cluster-id running?")
                self._known.wait(left)
            return self._leader

    @property
    def leader(self) -> Optional[LeaderInformation]:
        return self._leader

    # -- on the event thread ------------------------------------------------------------------

    def _read(self) -> None:
        if not self._running or self._client.state is not ConnectionState.CONNECTED:
            return
        try:
            try:
                data, _ = self._zk.get(self._path, watch=self._on_node_event)
            except NoNodeError:
                # Watch for its creation; if it appeared in between, read it again.
                if self._zk.exists(self._path, watch=self._on_node_event) is not None:
                    self._client.events.post(self._read)
                    return
                self._set(None)
                return
        except KazooException as e:
            log.warning("cannot read the %s leader from %s (%s); retrying on reconnection", self.component, self._path, e)
            return
        try:
            self._set(decode_leader_information(data))
        except ValueError as e:
            log.error("the %s leader record in %s is malformed (%s); treating it as no leader", self.component,
                      self._path, e)
            self._set(None)

    def _on_node_event(self, event: WatchedEvent) -> None:
        if event.type != EventType.NONE:
            self._client.events.post(self._read)

    def _on_connection_state(self, state: ConnectionState) -> None:
        if not self._running:
            return
        if state is ConnectionState.CONNECTED:
            self._read()
        elif state is ConnectionState.LOST or not self._client.settings.tolerate_suspended:
            self._set(None)

    def _set(self, leader: Optional[LeaderInformation]) -> None:
        with self._known:
            if leader == self._leader and self._listener_told:
                return
            self._leader = leader
            self._known.notify_all()
        self._listener_told = True
        log.info("%s leader: %s", self.component, f"{leader.address} (session {leader.session_id})" if leader else "none")
        if self._listener is not None and self._running:
            try:
                self._listener.notify_leader_address(leader)
            except Exception as e:
                log.exception("leader retrieval listener %r failed", self._listener)
                self._listener.handle_error(e)

    _listener_told = False
