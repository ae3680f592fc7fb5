"""Contenders and listeners that live on an asyncio loop.

The HA services call back on their own event thread; these adapters hand each call to the loop
with ``call_soon_threadsafe``, in order, so the component's code runs on its loop like any other
event and needs no locks. If the loop is closed the call is dropped (the process is stopping).
"""
from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Callable, Optional

from millstream.runtime.ha.api import LeaderContender, LeaderInformation, LeaderRetrievalListener

log = logging.getLogger(__name__)


def _call_on(loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: object) -> None:
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:  # the loop is closed: the process is shutting down
        log.debug("HA callback %r dropped: its loop is closed", fn)


class LoopContender:
    """Wraps a contender whose methods must run on ``loop``."""

    def __init__(self, contender: LeaderContender, loop: asyncio.AbstractEventLoop) -> None:
        self._contender = contender
        self._loop = loop

    def grant_leadership(self, session_id: uuid.UUID) -> None:
        _call_on(self._loop, self._contender.grant_leadership, session_id)

    def revoke_leadership(self) -> None:
        _call_on(self._loop, self._contender.revoke_leadership)

    def handle_error(self, error: BaseException) -> None:
        _call_on(self._loop, self._contender.handle_error, error)


class LoopListener:
    """Wraps a retrieval listener whose methods must run on ``loop``."""

    def __init__(self, listener: LeaderRetrievalListener, loop: asyncio.AbstractEventLoop) -> None:
        self._listener = listener
        self._loop = loop

    def notify_leader_address(self, leader: Optional[LeaderInformation]) -> None:
        _call_on(self._loop, self._listener.notify_leader_address, leader)

    def handle_error(self, error: BaseException) -> None:
        _call_on(self._loop, self._listener.handle_error, error)
