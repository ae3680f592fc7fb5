"""What a running task knows about itself and how it reaches the outside (Flink's Environment).

An :class:`~millstream.runtime.task.chain.OperatorChain` never touches sockets, consoles or clocks
directly: it goes through a :class:`TaskEnvironment`. The Spark worker gives it one wired to its
control channel; tests give it a :class:`SimpleTaskEnvironment` with a :class:`ManualClock`, so
timers and rate limits run without sleeping. :class:`StreamingRuntimeContext` is what user
functions receive in ``open(runtime_context)``.
"""
from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

from millstream.datastream.functions import RuntimeContext
from millstream.runtime.keygroups import KeyGroupRange, compute_key_group_range_for_operator_index
from millstream.runtime.metrics.groups import MetricGroup, TaskMetricGroup
from millstream.runtime.serialization import RecordSerializer, deserialize

MAX_COLLECT_PAYLOAD_BYTES = 1 << 20  # one collected part; the client pulls 2 MB per request

if TYPE_CHECKING:
    from millstream.datastream.state import (
        AggregatingState,
        AggregatingStateDescriptor,
        ListState,
        ListStateDescriptor,
        MapState,
        MapStateDescriptor,
        ReducingState,
        ReducingStateDescriptor,
        ValueState,
        ValueStateDescriptor,
    )
    from millstream.runtime.state.heap_backend import KeyedStateBackend

__all__ = [
    "STREAMING", "BATCH", "Clock", "ManualClock", "WallClock", "TaskEnvironment", "SimpleTaskEnvironment",
    "StreamingRuntimeContext",
]

STREAMING = "STREAMING"
BATCH = "BATCH"


class TaskEnvironment(Protocol):
    """The task's identity and its doors to the outside; every method is called from the task's thread,
    except :meth:`is_cancelled`, which any thread may call."""

    job_name: str
    task_name: str  # the vertex (chain) name, e.g. "Source: A -> Map"
    subtask_index: int
    parallelism: int
    max_parallelism: int
    attempt_number: int
    key_group_range: KeyGroupRange
    runtime_mode: str  # STREAMING or BATCH
    job_parameters: Mapping[str, str]
    source_batch_size: int  # records per batch a source reader emits (approximately, for text files)
    buffer_timeout_ms: int  # flush partial outputs at least this often; -1: only when full or at the end
    auto_watermark_interval_ms: int  # periodic watermarks of timestamp assigners; 0: none
    checkpointing_enabled: bool  # the job takes checkpoints: sinks hold output back until one completes
    metrics: TaskMetricGroup  # the task's metric groups (operators' groups for get_metrics_group)
    restored_checkpoint_id: int  # the checkpoint the task's state came from (0: none)
    # The source reader's handler of its coordinator's events (set by the reader when it opens).
    operator_event_handler: Callable[[bytes], None] | None

    def send_operator_event(self, payload: bytes) -> None:
        """An event for the vertex's coordinator on the JobManager (a reader's registration)."""

    def deliver_operator_event(self, payload: bytes) -> None:
        """An event of the coordinator for this task, on the task thread (between two batches)."""

    def print_lines(self, lines: list[str], to_stderr: bool = False) -> None:
        """Print sink output, one call per batch of lines."""

    def emit_collect(self, collect_id: str, records: list[Any]) -> None:
        """Records for ``execute_and_collect``. Serializes synchronously (with the task's
        :class:`~millstream.runtime.serialization.RecordSerializer`), so a record that cannot be
        serialized raises here, where the collect sink can name itself in the error."""

    def is_cancelled(self) -> bool: ...

    def now_ms(self) -> int:
        """Processing time: wall-clock milliseconds in production, a manual clock in tests."""

    def wait_ms(self, timeout_ms: int) -> None:
        """Block up to ``timeout_ms`` (a rate-limited source ahead of its rate); returns early on cancel."""


class Clock(Protocol):
    def now_ms(self) -> int: ...

    def sleep_ms(self, timeout_ms: int, wake: threading.Event) -> None: ...


class WallClock:
    """Processing time as Flink defines it: epoch milliseconds."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def sleep_ms(self, timeout_ms: int, wake: threading.Event) -> None:
        wake.wait(max(timeout_ms, 0) / 1000)


class ManualClock:
    """A clock that moves only when told to; waiting on it moves it, so tests never sleep."""

    def __init__(self, start_ms: int = 0) -> None:
        self._now = start_ms
        self.waits: list[int] = []

    def now_ms(self) -> int:
        return self._now

    def advance(self, ms: int) -> int:
        self._now += ms
        return self._now

    def set(self, now_ms: int) -> None:
        self._now = now_ms

    def sleep_ms(self, timeout_ms: int, wake: threading.Event) -> None:
        self.waits.append(timeout_ms)
        self._now += max(timeout_ms, 0)


def _print_to_console(lines: list[str], to_stderr: bool) -> None:
    stream = sys.stderr if to_stderr else sys.stdout
    stream.write("\n".join(lines) + "\n")
    stream.flush()


@dataclass
class SimpleTaskEnvironment:
    """A TaskEnvironment from plain values and callables: the worker plugs in its channel, tests use defaults.

    Collected batches are always serialized with the serializer of the real transfer (one
    :class:`~millstream.runtime.serialization.RecordSerializer` per task): ``collect_sink`` receives
    the bytes (the worker sends them to the client); without one they are deserialized into
    ``collected`` (tests), so a test fails on exactly the records a cluster fails on. Printed lines
    go to the console by default.
    """

    job_name: str = "job"
    job_id: str = ""  # hex; "" in tests that run no job
    task_name: str = "task"
    subtask_index: int = 0
    parallelism: int = 1
    max_parallelism: int = 128
    attempt_number: int = 0
    key_group_range: KeyGroupRange = KeyGroupRange.EMPTY  # EMPTY: derived from max parallelism, parallelism, index
    runtime_mode: str = STREAMING
    job_parameters: Mapping[str, str] = field(default_factory=dict)
    source_batch_size: int = 1024
    buffer_timeout_ms: int = 100
    auto_watermark_interval_ms: int = 200
    checkpointing_enabled: bool = False
    clock: Clock = field(default_factory=WallClock)
    print_sink: Callable[[list[str], bool], None] = _print_to_console
    collect_sink: Callable[[str, bytes], None] | None = None  # (collect id, serialized list of records)
    collected: dict[str, list[Any]] = field(default_factory=dict)
    collect_calls: int = 0
    serializer: RecordSerializer = field(default_factory=RecordSerializer, repr=False)
    metrics: TaskMetricGroup = field(default_factory=TaskMetricGroup, repr=False)
    restored_checkpoint_id: int = 0
    operator_event_sink: Callable[[bytes], None] | None = None  # the worker: to the TaskManager, on to the JobMaster
    operator_event_handler: Callable[[bytes], None] | None = None
    _cancelled: threading.Event = field(default_factory=threading.Event, repr=False)

    def __post_init__(self) -> None:
        self.metrics.variables.update(job_name=self.job_name, task_name=self.task_name,
                                      subtask_index=str(self.subtask_index), task_attempt_num=str(self.attempt_number))
        if self.runtime_mode not in (STREAMING, BATCH):
            raise ValueError(f"runtime_mode must be {STREAMING!r} or {BATCH!r}, got {self.runtime_mode!r}")
        if self.key_group_range == KeyGroupRange.EMPTY:
            self.key_group_range = compute_key_group_range_for_operator_index(
                self.max_parallelism, self.parallelism, self.subtask_index
            )

    @classmethod
    def from_deployment(cls, tdd: Any, **hooks: Any) -> "SimpleTaskEnvironment":
        """From a ``TaskDeploymentDescriptor`` proto; ``hooks`` sets the remaining fields (sinks, clock)."""
        vertex, config = tdd.vertex, tdd.execution_config
        batch = config.runtime_mode == 2  # jobgraph_pb2.BATCH; no proto import in the worker's hot module
        env = cls(
            job_name=tdd.job_name,
            job_id=tdd.job_id.hex(),
            task_name=vertex.name,
            subtask_index=tdd.subtask_index,
            parallelism=vertex.parallelism,
            max_parallelism=vertex.max_parallelism,
            attempt_number=tdd.attempt_number,
            key_group_range=KeyGroupRange.of(tdd.key_group_start, tdd.key_group_end),
            runtime_mode=BATCH if batch else STREAMING,
            job_parameters=dict(config.configuration),
            buffer_timeout_ms=int(config.buffer_timeout_ms),
            auto_watermark_interval_ms=int(config.auto_watermark_interval_ms),
            checkpointing_enabled=bool(tdd.checkpoint_dir),  # set by the JobMaster only when the job checkpoints
            restored_checkpoint_id=int(tdd.restore.checkpoint_id) if tdd.HasField("restore") else 0,
            **hooks,
        )
        return env

    def print_lines(self, lines: list[str], to_stderr: bool = False) -> None:
        self.print_sink(lines, to_stderr)

    def emit_collect(self, collect_id: str, records: list[Any]) -> None:
        self.collect_calls += 1
        if type(records) is not list:  # a TimestampedBatch: the client gets the records alone
            records = list(records)
        # fails here on a record that cannot travel; parts of at most 1 MB, as the JobManager buffers
        # collected bytes and the client pulls bounded amounts
        for payload in self.serializer.serialize_parts(records, MAX_COLLECT_PAYLOAD_BYTES):
            if self.collect_sink is not None:
                self.collect_sink(collect_id, payload)
            else:
                self.collected.setdefault(collect_id, []).extend(deserialize(payload))

    def send_operator_event(self, payload: bytes) -> None:
        if self.operator_event_sink is None:
            raise RuntimeError(f"task {self.task_name} has no way to its coordinator (an operator event needs a cluster)")
        self.operator_event_sink(payload)

    def deliver_operator_event(self, payload: bytes) -> None:
        if self.operator_event_handler is None:
            raise RuntimeError(f"task {self.task_name} got an operator event but has no operator taking one")
        self.operator_event_handler(payload)

    def cancel(self) -> None:
        self._cancelled.set()

    def is_cancelled(self) -> bool:
        return self._cancelled.is_set()

    def now_ms(self) -> int:
        return self.clock.now_ms()

    def wait_ms(self, timeout_ms: int) -> None:
        self.clock.sleep_ms(timeout_ms, self._cancelled)


_NOT_KEYED = (
    "Keyed state can only be used on a 'keyed stream', i.e., after a 'key_by()' operation "
    "(operator '{name}' is not keyed)."
)


class StreamingRuntimeContext(RuntimeContext):
    """The RuntimeContext of one operator of one subtask; keyed state only when the operator is keyed."""

    def __init__(self, env: TaskEnvironment, operator_name: str, backend: "KeyedStateBackend | None") -> None:
        self._env = env
        self._operator_name = operator_name
        self._backend = backend

    def get_task_name(self) -> str:
        return self._env.task_name

    def get_number_of_parallel_subtasks(self) -> int:
        return self._env.parallelism

    def get_max_number_of_parallel_subtasks(self) -> int:
        return self._env.max_parallelism

    def get_index_of_this_subtask(self) -> int:
        return self._env.subtask_index

    def get_attempt_number(self) -> int:
        return self._env.attempt_number

    def get_task_name_with_subtasks(self) -> str:
        env = self._env
        return f"{env.task_name} ({env.subtask_index + 1}/{env.parallelism})#{env.attempt_number}"

    def get_job_parameter(self, key: str, default_value: str) -> str:
        return self._env.job_parameters.get(key, default_value)

    def get_metrics_group(self) -> MetricGroup:
        """This operator's metric group: metrics registered here are reported with the task's,
        to the JobManager (REST) and to Prometheus, as ``<operator>.<groups>.<name>``."""
        return self._env.metrics.operator_group(self._operator_name)

    def _keyed(self) -> "KeyedStateBackend":
        if self._backend is None:
            raise RuntimeError(_NOT_KEYED.format(name=self._operator_name))
        return self._backend

    def get_state(self, state_descriptor: "ValueStateDescriptor") -> "ValueState[Any]":
        return self._keyed().get_value_state(state_descriptor)

    def get_list_state(self, state_descriptor: "ListStateDescriptor") -> "ListState[Any]":
        return self._keyed().get_list_state(state_descriptor)

    def get_map_state(self, state_descriptor: "MapStateDescriptor") -> "MapState[Any, Any]":
        return self._keyed().get_map_state(state_descriptor)

    def get_reducing_state(self, state_descriptor: "ReducingStateDescriptor") -> "ReducingState[Any]":
        return self._keyed().get_reducing_state(state_descriptor)

    def get_aggregating_state(self, state_descriptor: "AggregatingStateDescriptor") -> "AggregatingState[Any, Any]":
        return self._keyed().get_aggregating_state(state_descriptor)
