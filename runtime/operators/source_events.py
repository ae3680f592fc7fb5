"""The events between a source's readers and its split enumerator on the JobManager (Flink's
SourceEventWrapper payloads: ReaderRegistrationEvent, AddSplitEvent, NoMoreSplitsEvent).

They travel as bytes through the OperatorEvent RPCs (task -> TaskManager -> JobMaster and back),
encoded as JSON so the JobManager never unpickles anything a task sent. A split is Flink's
KafkaPartitionSplit: topic, partition, starting offset, stopping offset (None: unbounded).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Union

__all__ = ["KafkaSplit", "ReaderRegistration", "AddSplits", "NoMoreSplits", "SourceEvent", "encode", "decode"]


@dataclass(frozen=True)
class KafkaSplit:
    topic: str
    partition: int
    start: int
    stop: int | None = None

    @property
    def tp(self) -> tuple[str, int]:
        return self.topic, self.partition

    def to_json(self) -> list[object]:
        return [self.topic, self.partition, self.start, self.stop]

    @classmethod
    def from_json(cls, value: list[Any]) -> "KafkaSplit":
        topic, partition, start, stop = value
        return cls(str(topic), int(partition), int(start), None if stop is None else int(stop))


@dataclass(frozen=True)
class ReaderRegistration:
    """A reader opened (Flink's ReaderRegistrationEvent). ``restored_checkpoint_id``: the checkpoint
    its state came from (0: none), so the enumerator adds back what it assigned to the subtask since."""

    subtask: int
    restored_checkpoint_id: int


@dataclass(frozen=True)
class AddSplits:
    splits: tuple[KafkaSplit, ...]


@dataclass(frozen=True)
class NoMoreSplits:
    """A bounded source's enumerator will assign this reader nothing more: it ends with its splits."""


SourceEvent = Union[ReaderRegistration, AddSplits, NoMoreSplits]


def encode(event: SourceEvent) -> bytes:
    if isinstance(event, ReaderRegistration):
        doc: dict[str, object] = {"type": "register", "subtask": event.subtask,
                                  "restored": event.restored_checkpoint_id}
    elif isinstance(event, AddSplits):
        doc = {"type": "add_splits", "splits": [s.to_json() for s in event.splits]}
    elif isinstance(event, NoMoreSplits):
        doc = {"type": "no_more_splits"}
    else:
        raise TypeError(f"not a source event: {event!r}")
    return json.dumps(doc).encode("utf-8")


def decode(payload: bytes) -> SourceEvent:
    try:
        doc = json.loads(payload.decode("utf-8"))
        kind = doc["type"]
        if kind == "register":
            return ReaderRegistration(int(doc["subtask"]), int(doc["restored"]))
        if kind == "add_splits":
            return AddSplits(tuple(KafkaSplit.from_json(s) for s in doc["splits"]))
        if kind == "no_more_splits":
            return NoMoreSplits()
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"malformed source event {payload[:200]!r}: {e}") from None
    raise ValueError(f"unknown source event type {kind!r}")
