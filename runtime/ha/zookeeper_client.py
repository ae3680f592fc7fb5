"""One ZooKeeper connection per process (kazoo) and the HA event thread.

kazoo calls its state listeners on its connection thread and its watches on its callback
thread; neither may block or talk to ZooKeeper. Both only post events here, onto one
:class:`EventThread`, where the election and retrieval logic runs one event at a time, and from
where contenders and listeners are called. So the HA logic needs no locks, and a callback that
blocks holds up only other HA callbacks, never ZooKeeper's own threads.

Connection states, as Curator's (and Flink's) and what this module reports:

* ``CONNECTED``: a session is open (first connect or a reconnect within the same session).
* ``SUSPENDED``: the connection dropped; the session may still be alive on the servers; kazoo
  keeps reconnecting. The session's ephemeral nodes (latch, leader info, locks) may still exist.
* ``LOST``: the session is known gone (the servers expired it, or we closed it): its ephemeral
  nodes are deleted. kazoo opens a new session when it reconnects. A connection that stays
  suspended for a whole session timeout is reported as ``LOST`` too (Curator's rule): after that
  long the servers will have expired the session, whether we can hear about it or not.
"""
from __future__ import annotations

import enum
import logging
import queue
import threading
import time
from typing import Any, Callable, Optional

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState
from kazoo.retry import KazooRetry

from millstream.runtime.ha.api import HaError
from millstream.runtime.ha.settings import HaSettings, join_zk_path

log = logging.getLogger(__name__)


class ConnectionState(str, enum.Enum):
    CONNECTED = "CONNECTED"
    SUSPENDED = "SUSPENDED"
    LOST = "LOST"


class EventThread:
    """A single daemon thread running posted callables in order (the HA event thread)."""

    def __init__(self, name: str) -> None:
        self._queue: queue.Queue[Optional[Callable[[], None]]] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._closed = False
        self._thread.start()

    def post(self, fn: Callable[[], None]) -> None:
        if not self._closed:
            self._queue.put(fn)

    def post_later(self, delay_s: float, fn: Callable[[], None]) -> threading.Timer:
        timer = threading.Timer(delay_s, self.post, (fn,))
        timer.daemon = True
        timer.start()
        return timer

    def in_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def _run(self) -> None:
        while True:
            fn = self._queue.get()
            if fn is None:
                return
            try:
                fn()
            except Exception:  # one failing HA callback must not stop the others; it is logged loudly
                log.exception("HA event failed")

    def close(self, timeout: float = 10.0) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        if not self.in_thread():
            self._thread.join(timeout)


StateListener = Callable[[ConnectionState], None]


class ZooKeeperClient:
    """A started kazoo client rooted at the cluster's namespace, with connection-state events
    delivered on the HA event thread."""

    def __init__(self, settings: HaSettings, *, name: str = "millstream-ha") -> None:
        if not settings.zookeeper:
            raise HaError("ZooKeeperClient needs high-availability.type: zookeeper")
        self.settings = settings
        self.namespace = settings.namespace
        self.events = EventThread(f"{name}-events")
        self._listeners: list[StateListener] = []
        self._state = ConnectionState.LOST
        self._suspended_timer: Optional[threading.Timer] = None
        self._suspended_since: Optional[float] = None
        self._closed = False
        self._last_session_id: Optional[int] = None
        retry_wait_s = settings.retry_wait_ms / 1000
        self.kazoo = KazooClient(
            hosts=settings.quorum,
            timeout=settings.session_timeout_ms / 1000,
            # Reconnect forever (as ZooKeeper's own client): a restarted server must find us again.
            # The delay stays well under the session timeout so a short outage keeps the session.
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_jitter=0.2,
                                        max_delay=max(0.2, min(2.0, settings.session_timeout_ms / 4000))),
            # Operations cut by a connection loss: Flink's ExponentialBackoffRetry(retry-wait, attempts).
            command_retry=KazooRetry(max_tries=settings.max_retry_attempts, delay=retry_wait_s, backoff=2,
                                     max_jitter=0.2, max_delay=max(retry_wait_s, 1.0) * 8))
        self.kazoo.add_listener(self._on_kazoo_state)

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> ZooKeeperClient:
        """Connect (blocking, at most the connection timeout) and create the namespace node."""
        timeout = self.settings.connection_timeout_ms / 1000
        try:
            self.kazoo.start(timeout=timeout)
        except KazooTimeoutError:
            self.kazoo.stop()
            self.events.close()
            raise HaError(f"could not connect to ZooKeeper at {self.settings.quorum} within "
                          f"{timeout:g} s (high-availability.zookeeper.quorum, "
                          "high-availability.zookeeper.client.connection-timeout)") from None
        self.retry(self.kazoo.ensure_path, self.namespace)
        log.info("connected to ZooKeeper %s (session 0x%x, timeout %d ms), namespace %s", self.settings.quorum,
                 self.session_id or 0, self.negotiated_session_timeout_ms, self.namespace)
        return self

    def close(self) -> None:
        """Close the session (its ephemeral nodes go at once) and stop the event thread after the
        events already posted (the LOST event among them) have run."""
        if self._closed:
            return
        self._closed = True
        self._cancel_suspended_timer()
        try:
            self.kazoo.stop()
            self.kazoo.close()
        finally:
            self.events.close()

    # -- state ---------------------------------------------------------------------------------

    @property
    def state(self) -> ConnectionState:
        return self._state

    @property
    def session_id(self) -> Optional[int]:
        client_id = self.kazoo.client_id
        return client_id[0] if client_id else None

    @property
    def negotiated_session_timeout_ms(self) -> int:
        negotiated = getattr(self.kazoo, "_session_timeout", None)
        return int(negotiated) if negotiated else self.settings.session_timeout_ms

    def add_state_listener(self, listener: StateListener) -> None:
        """``listener(state)`` on the event thread at each change (CONNECTED, SUSPENDED, LOST)."""
        self._listeners.append(listener)

    def _on_kazoo_state(self, state: str) -> bool:
        # kazoo's connection thread: only post. Returning False keeps the listener registered.
        mapped = {KazooState.CONNECTED: ConnectionState.CONNECTED, KazooState.SUSPENDED: ConnectionState.SUSPENDED,
                  KazooState.LOST: ConnectionState.LOST}[state]
        self.events.post(lambda: self._set_state(mapped))
        return False

    def _set_state(self, state: ConnectionState) -> None:
        if state is ConnectionState.SUSPENDED:
            if self._state is not ConnectionState.CONNECTED:
                return
            self._suspended_since = time.monotonic()
            delay = self.negotiated_session_timeout_ms / 1000
            self._suspended_timer = self.events.post_later(delay, self._suspended_too_long)
            log.warning("ZooKeeper connection suspended; the session ends unless it reconnects within %.1f s", delay)
        else:
            self._cancel_suspended_timer()
            if state is ConnectionState.LOST and self._state is ConnectionState.LOST:
                return
            if state is ConnectionState.CONNECTED:
                self._last_session_id = self.session_id
            log.log(logging.WARNING if state is ConnectionState.LOST else logging.INFO,
                    "ZooKeeper connection %s (session 0x%x)", state.value, self._last_session_id or 0)
        self._state = state
        self._notify(state)

    def _suspended_too_long(self) -> None:
        if self._state is ConnectionState.SUSPENDED and self._suspended_since is not None:
            log.warning("ZooKeeper connection suspended for %.1f s, a whole session timeout: the session is lost",
                        time.monotonic() - self._suspended_since)
            self._state = ConnectionState.LOST
            self._notify(ConnectionState.LOST)

    def _cancel_suspended_timer(self) -> None:
        if self._suspended_timer is not None:
            self._suspended_timer.cancel()
            self._suspended_timer = None
        self._suspended_since = None

    def _notify(self, state: ConnectionState) -> None:
        for listener in list(self._listeners):
            try:
                listener(state)
            except Exception:
                log.exception("ZooKeeper state listener %r failed on %s", listener, state.value)

    # -- operations ----------------------------------------------------------------------------

    def path(self, *parts: str) -> str:
        return join_zk_path(self.namespace, *parts)

    def retry(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args)`` retried on connection loss per retry-wait / max-retry-attempts."""
        return self.kazoo.retry(fn, *args, **kwargs)
