"""One transition helper for every state machine (execution and job states, slots, checkpoints).

Each machine keeps its table of allowed moves beside the states it documents; this module only
checks a move against such a table. `transition()` is the one place a state changes: it rejects an
illegal move with `IllegalStateTransition` (naming the machine, the subject, both states and the
reason) and logs `(from, to, reason)` either way. A caller that meets illegal moves as a normal
event (the JobMaster: a late report from a task that already ended) catches the error and ignores
the event; a caller that only wants to know asks `can_transition()`.
"""
from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

S = TypeVar("S", bound=enum.Enum)


class IllegalStateTransition(RuntimeError):
    """A state change the machine's transition table forbids."""

    def __init__(self, machine: str, subject: str, current: enum.Enum, target: enum.Enum,
                 reason: str) -> None:
        who = f"{machine} {subject}" if subject else machine
        super().__init__(f"{who}: illegal transition {current.value} -> {target.value} ({reason or 'no reason'})")
        self.machine = machine
        self.subject = subject
        self.current = current
        self.target = target
        self.reason = reason


class StateMachine(Generic[S]):
    """A named table of allowed moves: ``table[state]`` holds the states it may go to."""

    def __init__(self, name: str, table: Mapping[S, frozenset[S]],
                 logger: logging.Logger = log) -> None:
        self.name = name
        self.table = table
        self.log = logger  # the owning component's logger, so its log routing applies

    def can_transition(self, current: S, target: S) -> bool:
        return target in self.table[current]

    def transition(self, current: S, target: S, subject: str = "", reason: str = "") -> S:
        """``target`` when ``current -> target`` is allowed, else raises IllegalStateTransition.
        ``subject`` names the instance (``job 3fa2…``, ``slot 4``) in the log and the error."""
        if not self.can_transition(current, target):
            error = IllegalStateTransition(self.name, subject, current, target, reason)
            self.log.warning("%s", error)
            raise error
        self.log.debug("%s %s: %s -> %s (%s)", self.name, subject, current.value, target.value, reason)
        return target
