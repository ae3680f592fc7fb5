"""What a task's worker and its TaskManager tell each other over the task's control channel, typed.

The task body (``taskmanager.task_body``, inside a Spark worker) sends :data:`WorkerEvent` values, in
order, for the task's whole life; the TaskExecutor reads them by type and field name. The other
way go :data:`ControlMessage` values (checkpoint triggers and notifications; a cancel is the
channel's own ``CANCEL``). The final FINISHED / FAILED / CANCELED is the runner's ``TaskExit``
(``taskmanager.spark.host``), not one of these.

Every class pickles as ``(class, field values)`` (``__reduce__``): the frame then holds the field
values as a tuple would, plus one reference to the class, with none of the default dataclass
pickling's per-field state dictionary. They are sent once per state change, batch of printed
lines, collected batch or metrics interval, never once per record.
"""
from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Callable, Union


class _Wire:
    """Pickles as the class and its field values, in field order (see the module docstring)."""

    __slots__ = ()
    _getters: dict[type, Callable[[Any], tuple[Any, ...]]] = {}

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        cls = type(self)
        values = _Wire._getters.get(cls)
        if values is None:  # once per class: its slots are its fields, in order
            names: tuple[str, ...] = cls.__slots__
            getter = attrgetter(names[0], *names[1:])
            values = _Wire._getters[cls] = (lambda e: (getter(e),)) if len(names) == 1 else getter
        return cls, values(self)


# -- worker -> TaskManager ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StateChanged(_Wire):
    """The task reached INITIALIZING or RUNNING (its end is the runner's TaskExit)."""

    state: str


@dataclass(frozen=True, slots=True)
class PartitionsServed(_Wire):
    """Where ("host:port") this task serves its result partitions to its consumers."""

    address: str


@dataclass(frozen=True, slots=True)
class LinesPrinted(_Wire):
    """Lines a print sink of the task wrote (to the client's console and the TaskManager's stdout)."""

    lines: list[str]
    to_stderr: bool


@dataclass(frozen=True, slots=True)
class OutputCaptured(_Wire):
    """What user functions printed and logged (``task_output``), and how many lines were dropped."""

    lines: list[str]
    dropped: int


@dataclass(frozen=True, slots=True)
class CollectedBatch(_Wire):
    """Records of a collect sink (``execute_and_collect``), serialized; ``sequence`` counts the
    task's batches so a repeated report is recognised."""

    collect_id: str
    subtask_index: int
    sequence: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class MetricsReported(_Wire):
    """The task's running record totals (Flink's numRecordsIn / numRecordsOut) and metric snapshot
    ({identifier: number}: I/O and user metrics); ``descriptors`` ({identifier: (Prometheus name,
    labels)} of the user metrics) only when they changed since the last report, else None."""

    records_in: int
    records_out: int
    metrics: dict[str, float]
    descriptors: dict[str, tuple[str, dict[str, str]]] | None


@dataclass(frozen=True, slots=True)
class Failing(_Wire):
    """The body failed (before any cancel reached it) and now cleans up; ``caused_by_peer`` when
    the failure is a broken exchange, i.e. the sign of a neighbour's failure."""

    traceback: str
    caused_by_peer: bool


@dataclass(frozen=True, slots=True)
class CheckpointAcknowledged(_Wire):
    """The task's snapshot of a checkpoint is written (``state_path`` "" and size 0: no state),
    with how long its parts took (ms; Flink's CheckpointMetrics): the snapshot on the task thread,
    the write off it, the alignment (first barrier to last) and the start delay (trigger to the
    first barrier at the task)."""

    checkpoint_id: int
    state_path: str
    state_size: int
    sync_ms: int = 0
    async_ms: int = 0
    alignment_ms: int = 0
    start_delay_ms: int = 0


@dataclass(frozen=True, slots=True)
class CheckpointDeclined(_Wire):
    """The task takes no part in a checkpoint; ``reason`` is a CheckpointFailureReason's name."""

    checkpoint_id: int
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class OperatorEventSent(_Wire):
    """An event of the task's source reader for its coordinator on the JobMaster (source_events)."""

    payload: bytes


WorkerEvent = Union[StateChanged, PartitionsServed, LinesPrinted, OutputCaptured, CollectedBatch, MetricsReported,
                    Failing, CheckpointAcknowledged, CheckpointDeclined, OperatorEventSent]


# -- TaskManager -> worker ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TriggerCheckpoint(_Wire):
    """Inject the barrier of ``checkpoint_id`` here (a source task, or one whose inputs all ended)."""

    checkpoint_id: int
    timestamp_ms: int
    stop: bool
    drain: bool
    savepoint: bool = False  # keyed state in the canonical format (RocksDB: not incremental)


@dataclass(frozen=True, slots=True)
class NotifyCheckpoint(_Wire):
    """The checkpoint completed (or, ``aborted``, was given up)."""

    checkpoint_id: int
    aborted: bool


@dataclass(frozen=True, slots=True)
class OperatorEventDelivered(_Wire):
    """An event of the vertex's coordinator for the task's source reader (in order with the
    checkpoint triggers: an event the coordinator sent before its snapshot comes before the barrier)."""

    payload: bytes


ControlMessage = Union[TriggerCheckpoint, NotifyCheckpoint, OperatorEventDelivered]
