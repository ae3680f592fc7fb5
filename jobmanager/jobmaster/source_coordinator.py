"""A KafkaSource's split enumerator on the JobManager, without I/O (Flink's SourceCoordinator
around its KafkaSourceEnumerator, with the SplitAssignmentTracker).

One per KafkaSource vertex. Events go in (``start``, ``discovered``, ``reader_registered``,
``reader_lost``, ``snapshot``, ``checkpoint_complete``); commands come out (:class:`Discover`,
:class:`SendEvent`), carried out by the shell in ``source_coordinators``, which also asks the
broker (partitions, offsets) in a thread.

The rules are Flink's:

* Discovery at the start, then every ``partition.discovery.interval.ms`` (a bounded source, or
  an interval <= 0: once). The first discovery's new partitions start at the builder's starting
  offsets, later ones at their earliest offset; each becomes a split, *unassigned* until its
  reader registers, then *assigned*. A partition's reader is ``split_owner`` (Flink's
  getSplitOwner) at the vertex's current parallelism.
* A reader registers when it opens; it then gets its unassigned splits (AddSplits) and, for a
  bounded source once the one-time discovery ran, NoMoreSplits.
* A checkpoint snapshots the assigned and unassigned splits and whether the first discovery ran.
  The assignments made since are remembered per checkpoint: when a reader re-registers after a
  failure with the state of checkpoint c, every split assigned to its subtask after c goes back to
  unassigned and is assigned again (Flink's addSplitsBack): its offsets were never in any state
  the reader restored, so it is read from its starting offset again, exactly once.
* Restore (failover of the JobManager, a savepoint, another parallelism): the snapshot's splits;
  unassigned ones go to their owner at the *new* parallelism (the assigned ones are in the readers'
  state, redistributed with it). A rescale of the running job (the adaptive scheduler) resets the
  enumerator to the restored checkpoint's state at the new parallelism (``reset_to_checkpoint``).

Ordering (the shell's part, Flink's event valve): events sent before a snapshot reach the task
before that checkpoint's barrier, events after it after the barrier, so a split is either in the
reader's snapshot or in the assignments since the checkpoint, never in neither.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Iterable, Union

from millstream.runtime.operators.kafka_splits import Partition, split_id, split_owner
from millstream.runtime.operators.source_events import AddSplits, KafkaSplit, NoMoreSplits, SourceEvent

log = logging.getLogger(__name__)

__all__ = ["Discover", "SendEvent", "CoordinatorCommand", "KafkaSplitEnumerator", "STATE_VERSION"]

STATE_VERSION = 1


@dataclass(frozen=True)
class Discover:
    """Ask the broker for the subscribed partitions; the new ones (not in ``known``) become splits
    at the starting offsets (``initial``) or their earliest offsets. The answer: ``discovered``."""

    known: frozenset[Partition]
    initial: bool


@dataclass(frozen=True)
class SendEvent:
    subtask: int
    attempt_id: bytes
    event: SourceEvent


CoordinatorCommand = Union[Discover, SendEvent]


@dataclass
class KafkaSplitEnumerator:
    """See the module docstring. ``parallelism``: the source vertex's; ``bounded``: ``set_bounded``
    (only then NoMoreSplits, as Flink's Boundedness.BOUNDED); ``periodic``: discovery repeats."""

    parallelism: int
    bounded: bool
    periodic: bool
    assigned: dict[Partition, KafkaSplit] = field(default_factory=dict)
    unassigned: dict[Partition, KafkaSplit] = field(default_factory=dict)
    initial_discovery_done: bool = False
    no_more_new_splits: bool = False
    readers: dict[int, bytes] = field(default_factory=dict)  # subtask -> registered attempt
    # Assignments per checkpoint id they were snapshotted with (None: since the last snapshot).
    _by_checkpoint: dict[int | None, dict[int, list[KafkaSplit]]] = field(default_factory=dict)
    _discovering: bool = False
    _no_more_sent: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.parallelism < 1:
            raise ValueError(f"a source's parallelism must be at least 1, got {self.parallelism}")

    # -- discovery -------------------------------------------------------------------------------

    def known(self) -> frozenset[Partition]:
        return frozenset(self.assigned) | frozenset(self.unassigned)

    def start(self) -> list[CoordinatorCommand]:
        """Flink's start(): a discovery now (after a restore too: partitions created meanwhile)."""
        return self.discover()

    def discover(self) -> list[CoordinatorCommand]:
        """A discovery, unless one is running or a one-time discovery already ran."""
        if self._discovering or self.no_more_new_splits:
            return []
        self._discovering = True
        return [Discover(self.known(), initial=not self.initial_discovery_done)]

    def discovery_failed(self) -> None:
        self._discovering = False

    def discovered(self, splits: Iterable[KafkaSplit]) -> list[CoordinatorCommand]:
        """The new partitions of a discovery as splits with their offsets resolved."""
        self._discovering = False
        self.initial_discovery_done = True
        if not self.periodic:
            self.no_more_new_splits = True
        new = [s for s in splits if s.tp not in self.assigned and s.tp not in self.unassigned]
        if new:
            log.info("KafkaSource enumerator: new splits %s", [split_id(*s.tp) for s in sorted(new, key=_order)])
        for split in new:
            self.unassigned[split.tp] = split
        return self._assign_pending(sorted(self.readers))

    # -- readers ---------------------------------------------------------------------------------

    def reader_registered(self, subtask: int, attempt_id: bytes, restored_checkpoint_id: int) -> list[CoordinatorCommand]:
        """A reader opened. What was assigned to its subtask after the checkpoint it restored
        (``0``: none) goes back to the unassigned splits first (Flink's addSplitsBack)."""
        if not 0 <= subtask < self.parallelism:
            raise ValueError(f"reader subtask {subtask} is outside the source's parallelism {self.parallelism}")
        back = self._assignments_after(subtask, restored_checkpoint_id)
        if back:
            log.info("KafkaSource enumerator: splits %s of subtask %d go back (assigned after checkpoint %d)",
                     [split_id(*s.tp) for s in back], subtask, restored_checkpoint_id)
        for split in back:
            self.assigned.pop(split.tp, None)
            self.unassigned[split.tp] = split
        self.readers[subtask] = attempt_id
        self._no_more_sent.discard(subtask)
        return self._assign_pending([subtask])

    def reader_lost(self, subtask: int, attempt_id: bytes) -> None:
        """The reader's attempt ended (failed, cancelled, finished): nothing more is sent to it."""
        if self.readers.get(subtask) == attempt_id:
            del self.readers[subtask]

    def _assign_pending(self, subtasks: Iterable[int]) -> list[CoordinatorCommand]:
        out: list[CoordinatorCommand] = []
        by_owner: dict[int, list[KafkaSplit]] = {}
        for split in sorted(self.unassigned.values(), key=_order):
            by_owner.setdefault(split_owner(split.topic, split.partition, self.parallelism), []).append(split)
        for subtask in subtasks:
            attempt = self.readers.get(subtask)
            if attempt is None:
                continue
            splits = by_owner.get(subtask, [])
            if splits:
                for split in splits:
                    del self.unassigned[split.tp]
                    self.assigned[split.tp] = split
                self._by_checkpoint.setdefault(None, {}).setdefault(subtask, []).extend(splits)
                out.append(SendEvent(subtask, attempt, AddSplits(tuple(splits))))
            if self.no_more_new_splits and self.bounded and subtask not in self._no_more_sent:
                self._no_more_sent.add(subtask)
                out.append(SendEvent(subtask, attempt, NoMoreSplits()))
        return out

    # -- checkpoints -----------------------------------------------------------------------------

    def snapshot(self, checkpoint_id: int) -> dict[str, Any]:
        """The enumerator's state for checkpoint ``checkpoint_id`` (JSON); the assignments since the
        last snapshot are now those of this checkpoint."""
        since = self._by_checkpoint.pop(None, None)
        if since:
            self._by_checkpoint[checkpoint_id] = since
        return {"version": STATE_VERSION,
                "assigned": [s.to_json() for s in sorted(self.assigned.values(), key=_order)],
                "unassigned": [s.to_json() for s in sorted(self.unassigned.values(), key=_order)],
                "initial_discovery_done": self.initial_discovery_done}

    def checkpoint_complete(self, checkpoint_id: int) -> None:
        """Assignments up to a completed checkpoint are in its reader states: never added back."""
        for cid in [c for c in self._by_checkpoint if c is not None and c <= checkpoint_id]:
            del self._by_checkpoint[cid]

    def restore(self, state: dict[str, Any]) -> None:
        """From a snapshot (of this parallelism or another), before the readers register."""
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise ValueError(f"not a KafkaSource enumerator state this Millstream reads: {str(state)[:200]}")
        self.assigned = {s.tp: s for s in map(KafkaSplit.from_json, state["assigned"])}
        self.unassigned = {s.tp: s for s in map(KafkaSplit.from_json, state["unassigned"])}
        self.initial_discovery_done = bool(state["initial_discovery_done"])
        self.no_more_new_splits = False
        self.readers.clear()
        self._by_checkpoint.clear()
        self._no_more_sent.clear()
        self._discovering = False

    def reset_to_checkpoint(self, parallelism: int, state: dict[str, Any] | None) -> None:
        """The job restarts at another ``parallelism`` (the adaptive scheduler rescaled it): the
        enumerator starts over from the state of the checkpoint the tasks restore (None: no
        checkpoint, a fresh enumerator that discovers anew), as Flink resets an OperatorCoordinator
        to the checkpoint on a global restart. Its unassigned splits then go to their owner at the
        new parallelism as the readers register; the assigned ones are in the readers' state,
        redistributed with it. What was assigned after that checkpoint was unassigned in its
        state, so it is assigned again."""
        if parallelism < 1:
            raise ValueError(f"a source's parallelism must be at least 1, got {parallelism}")
        self.parallelism = parallelism
        if state is not None:
            self.restore(state)
            return
        self.assigned, self.unassigned = {}, {}
        self.initial_discovery_done = self.no_more_new_splits = self._discovering = False
        self.readers.clear()
        self._by_checkpoint.clear()
        self._no_more_sent.clear()

    def _assignments_after(self, subtask: int, checkpoint_id: int) -> list[KafkaSplit]:
        out: list[KafkaSplit] = []
        for cid in [c for c in self._by_checkpoint if c is None or c > checkpoint_id]:
            out += self._by_checkpoint[cid].pop(subtask, [])
            if not self._by_checkpoint[cid]:
                del self._by_checkpoint[cid]
        return out


def _order(split: KafkaSplit) -> tuple[str, int]:
    return split.tp
