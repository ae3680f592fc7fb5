"""Leader election on ZooKeeper (Flink's ZooKeeperLeaderElectionDriver + DefaultLeaderElectionService).

ZooKeeper layout under the cluster's namespace ``<path.root>/<cluster-id>``::

    latch/latch-0000000007                  EPHEMERAL_SEQUENTIAL, one per contending process
    leader/<component>/connection_info      EPHEMERAL, {"address": ..., "session_id": ...} of the leader

The contender whose latch node has the lowest sequence number leads (Curator's LeaderLatch, as
Flink). Each grant draws a fresh leader session id (a UUID): the fencing token every RPC of the
leader carries. The leader confirms with its address, which is then published as connection_info;
an ephemeral node, so it disappears with the leader's session.

Losing the connection (what happens, exactly):

* ``SUSPENDED`` (connection dropped, session maybe alive): with
  ``high-availability.zookeeper.client.tolerate-suspended-connections: false`` (Flink's default)
  the leader revokes its leadership at once, since it can no longer tell whether a standby took
  over; when the connection comes back within the same session its latch node is still there, and
  if it is still the lowest the leadership is granted again, under a NEW session id. With ``true``
  the leader keeps leading while suspended, and revokes only when the session is LOST.
* ``LOST`` (the session expired or was closed; its ephemeral nodes are gone), or SUSPENDED for a
  whole session timeout (by then the servers have expired the session): leadership is revoked; on
  reconnection with a new session the process joins the election again with a new latch node.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import threading
import uuid
from typing import Optional

from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.protocol.states import EventType, WatchedEvent

from millstream.runtime.ha.api import LeaderContender, LeaderInformation
from millstream.runtime.ha.zookeeper_client import ConnectionState, ZooKeeperClient

log = logging.getLogger(__name__)

LATCH_NODE = "latch"
LEADER_NODE = "leader"
CONNECTION_INFO_NODE = "connection_info"
JOBMANAGER_COMPONENT = "jobmanager"  # Dispatcher, ResourceManager and JobMasters share one leadership


def connection_info_path(client: ZooKeeperClient, component: str) -> str:
    return client.path(LEADER_NODE, component, CONNECTION_INFO_NODE)


def encode_leader_information(info: LeaderInformation) -> bytes:
    return json.dumps({"address": info.address, "session_id": str(info.session_id)}).encode("utf-8")


def decode_leader_information(data: bytes) -> Optional[LeaderInformation]:
    """The leader published in a connection_info node; None for an empty node. A malformed one
    raises ValueError."""
    if not data:
        return None
    doc = json.loads(data.decode("utf-8"))
    if not isinstance(doc, dict) or not isinstance(doc.get("address"), str) or not doc["address"]:
        raise ValueError(f"not a leader record: {data[:200]!r}")
    return LeaderInformation(doc["address"], uuid.UUID(str(doc["session_id"])))


class ZooKeeperLeaderElection:
    """This process's seat in the election of ``component`` (see the module docstring).

    ``start``, ``confirm_leadership`` and ``close`` may be called from any thread; the work runs
    on the client's event thread, and so do the contender's callbacks.
    """

    def __init__(self, client: ZooKeeperClient, component: str = JOBMANAGER_COMPONENT) -> None:
        self._client = client
        self._zk = client.kazoo
        self.component = component
        self._latch_path = client.path(LATCH_NODE)
        self._info_path = connection_info_path(client, component)
        self._contender: Optional[LeaderContender] = None
        self._my_node: Optional[str] = None  # full path of our latch node
        self._session_id: Optional[uuid.UUID] = None  # the current grant
        self._confirmed: Optional[LeaderInformation] = None
        self._running = False
        client.add_state_listener(self._on_connection_state)

    # -- the LeaderElection interface ---------------------------------------------------------

    def start(self, contender: LeaderContender) -> None:
        if self._contender is not None:
            raise RuntimeError(f"leader election of {self.component} was started already")
        self._contender = contender
        self._running = True
        self._client.events.post(self._join)

    def confirm_leadership(self, session_id: uuid.UUID, address: str) -> None:
        self._client.events.post(lambda: self._confirm(session_id, address))

    def has_leadership(self, session_id: uuid.UUID) -> bool:
        return self._running and self._session_id == session_id

    def close(self) -> None:
        """Revoke (if leading) and withdraw from the election: our latch node and our published
        address are deleted, so a standby is granted at once rather than after a session timeout."""
        if not self._running:
            return
        done = threading.Event()

        def leave() -> None:
            try:
                self._running = False
                self._revoke("the leader election is closed")
                for path in (self._info_path if self._owns(self._info_path) else None, self._my_node):
                    if path is not None:
                        try:
                            self._zk.delete(path)
                        except (NoNodeError, KazooException) as e:
                            log.debug("could not delete %s on close: %s", path, e)
                self._my_node = None
            finally:
                done.set()

        if self._client.events.in_thread():
            leave()
        else:
            self._client.events.post(leave)
            done.wait(10)

    # -- the election, on the event thread ------------------------------------------------------

    def _join(self) -> None:
        if not self._running or self._client.state is not ConnectionState.CONNECTED:
            return
        try:
            self._ensure_latch_node()
        except KazooException as e:
            log.warning("leader election of %s: cannot create a latch node (%s); retrying on reconnection",
                        self.component, e)
            return
        self._check_leadership()

    def _ensure_latch_node(self) -> None:
        if self._my_node is not None and self._zk.exists(self._my_node) is not None:
            return
        who = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "component": self.component})
        self._my_node = self._zk.create(self._latch_path + "/latch-", who.encode(), ephemeral=True, sequence=True,
                                        makepath=True)
        log.info("joined the leader election of %s as %s", self.component, self._my_node)

    def _check_leadership(self) -> None:
        if not self._running or self._my_node is None or self._client.state is not ConnectionState.CONNECTED:
            return
        try:
            children = sorted(self._zk.get_children(self._latch_path), key=lambda name: name.rsplit("-", 1)[-1])
        except KazooException as e:
            log.warning("leader election of %s: cannot list %s (%s); retrying on reconnection", self.component,
                        self._latch_path, e)
            return
        mine = self._my_node.rsplit("/", 1)[-1]
        if mine not in children:  # deleted under us (session expired in between): join again
            self._my_node = None
            self._revoke("our latch node is gone")
            self._join()
            return
        index = children.index(mine)
        if index == 0:
            if self._session_id is None:
                self._grant()
            return
        self._revoke("another contender holds the latch")
        predecessor = f"{self._latch_path}/{children[index - 1]}"
        try:
            gone = self._zk.exists(predecessor, watch=self._on_predecessor_event) is None
        except KazooException as e:
            log.warning("leader election of %s: cannot watch %s (%s); retrying on reconnection", self.component,
                        predecessor, e)
            return
        if gone:
            self._check_leadership()  # it went away between the listing and the watch

    def _on_predecessor_event(self, event: WatchedEvent) -> None:
        # kazoo's callback thread. NONE events are connection changes, handled by the state listener.
        if event.type != EventType.NONE:
            self._client.events.post(self._check_leadership)

    def _grant(self) -> None:
        self._session_id = uuid.uuid4()
        self._confirmed = None
        log.info("%s: leadership granted with leader session id %s", self.component, self._session_id)
        if self._contender is not None:
            self._contender.grant_leadership(self._session_id)

    def _revoke(self, reason: str) -> None:
        if self._session_id is None:
            return
        log.warning("%s: leadership of session %s revoked: %s", self.component, self._session_id, reason)
        self._session_id = None
        self._confirmed = None
        if self._contender is not None:
            self._contender.revoke_leadership()

    def _confirm(self, session_id: uuid.UUID, address: str) -> None:
        if session_id != self._session_id:
            log.info("%s: confirmation of leader session %s ignored: the current one is %s", self.component,
                     session_id, self._session_id)
            return
        self._confirmed = LeaderInformation(address, session_id)
        self._publish()

    def _owns(self, path: str) -> bool:
        try:
            stat = self._zk.exists(path)
        except KazooException:
            return False
        return stat is not None and stat.ephemeralOwner == self._client.session_id

    def _publish(self) -> None:
        """Write our confirmed address to connection_info (Flink's writeLeaderInformationToZooKeeper:
        a node of another session, a deposed leader's, is replaced)."""
        info = self._confirmed
        while info is not None and info == self._confirmed and self._client.state is ConnectionState.CONNECTED:
            data = encode_leader_information(info)
            try:
                stat = self._zk.exists(self._info_path)
                if stat is None:
                    self._zk.create(self._info_path, data, ephemeral=True, makepath=True)
                elif stat.ephemeralOwner == self._client.session_id:
                    self._zk.set(self._info_path, data)
                else:
                    self._zk.delete(self._info_path)
                    continue
            except (NodeExistsError, NoNodeError):
                continue  # raced with another writer or a deletion: look again
            except KazooException as e:
                log.warning("%s: could not publish the leader address (%s); retrying on reconnection", self.component, e)
                return
            log.info("%s: published leader %s (session %s)", self.component, info.address, info.session_id)
            return

    def _on_connection_state(self, state: ConnectionState) -> None:
        if not self._running:
            return
        if state is ConnectionState.CONNECTED:
            if self._session_id is None and self._owns(self._info_path):
                # Revoked while suspended: the address we published under our (surviving) session
                # is stale; take it down before anyone reconnects to it.
                try:
                    self._zk.delete(self._info_path)
                except (NoNodeError, KazooException) as e:
                    log.debug("could not delete stale %s: %s", self._info_path, e)
            self._join()
            if self._session_id is not None and self._confirmed is not None:
                self._publish()  # a leader that kept its leadership while suspended
        elif state is ConnectionState.SUSPENDED:
            if not self._client.settings.tolerate_suspended:
                self._revoke("the ZooKeeper connection is suspended")
        else:
            # _my_node is kept: if the session survives after all (a server restart keeps sessions),
            # _ensure_latch_node finds the node again instead of queueing behind our own old node.
            self._revoke("the ZooKeeper session is lost")
