"""Bounds on every count, size and id a peer sends: the one place they are declared.

A gRPC request is decoded by protobuf, so it is well formed, but its numbers are whatever the
sender wrote: ``RegisterTaskManager(num_slots=2**31-1)`` would make the SlotManager build two
billion slot objects on the JobManager's event loop. Every request is therefore checked here before
its servicer runs (:class:`BoundsServerInterceptor`, installed on every :class:`RpcServer`), and a
submitted JobGraph is checked the same way once the Dispatcher has decoded it. A violation answers
INVALID_ARGUMENT naming the field, the value and the bound.

The check walks the message (pure code, no grpc): a field listed in :data:`FIELD_BOUNDS` gets its
own bound; otherwise a default by kind applies: an integer is non-negative and below
:data:`MAX_COUNT`, an id (a bytes field named in :data:`ID_FIELDS`) is at most :data:`MAX_ID_BYTES`
long, a string at most :data:`MAX_NAME_CHARS`, a repeated field or map holds at most
:data:`MAX_ENTRIES` entries and an enum holds one of its declared values. Other bytes fields
(pickled factories, payloads, artifacts) are bounded by the channel's message size only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import grpc
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from millstream.runtime.keygroups import UPPER_BOUND_MAX_PARALLELISM

__all__ = [
    "Bound", "BoundsServerInterceptor", "FIELD_BOUNDS", "ID_FIELDS", "MAX_COUNT", "MAX_ENTRIES", "MAX_ID_BYTES",
    "MAX_JOB_TASKS", "MAX_CREDIT", "MAX_FRAME_BYTES", "MAX_HELLO_BYTES", "MAX_NAME_CHARS", "MAX_SLOTS_PER_TASKMANAGER", "MAX_TEXT_CHARS", "check_message", "hello_problem",
]

MAX_SLOTS_PER_TASKMANAGER = 4096           # a slot is a Spark core; no machine has more
MAX_PARALLELISM = UPPER_BOUND_MAX_PARALLELISM  # Flink's bound: 32768 key groups
MAX_ID_BYTES = 16                          # job, vertex, attempt, allocation, result ids: 16 bytes
MAX_NAME_CHARS = 1 << 16                   # names (a long chain's vertex name), addresses, resource ids, paths
MAX_TEXT_CHARS = 1 << 20                   # a failure message or traceback: 1 MiB of text
MAX_COUNT = 1 << 62                        # any other integer: non-negative (records, bytes, ms, ids)
MAX_ENTRIES = 100_000                      # any repeated field or map
MAX_VERTICES = 10_000                      # a JobGraph's vertices, operators of one chain, edges
MAX_READ_BYTES = 64 << 20                  # what one answer may be asked to carry (logs, collected batches)
MAX_ATTEMPTS = 2**31 - 1                   # attempt numbers, restart attempts (Flink's infinite: Integer.MAX_VALUE)
MAX_JOB_TASKS = 1 << 17                    # a JobGraph's subtasks, summed over its vertices

# The data plane (runtime/network/protocol.py): its frames carry a length and a credit count.
MAX_FRAME_BYTES = 1 << 30                  # one frame (a buffer of records): the largest length field read
MAX_HELLO_BYTES = 4096                     # a consumer's handshake: fixed fields and two ids
MAX_CREDIT = 1 << 16                       # buffers a consumer may grant a producer at once


@dataclass(frozen=True)
class Bound:
    """``low <= value <= high`` for an integer, ``len(value) <= high`` for a string, bytes or list."""

    low: int
    high: int

    def describe(self) -> str:
        return f"{self.low}..{self.high}"


_INDEX = Bound(0, MAX_PARALLELISM - 1)
_PARALLELISM = Bound(1, MAX_PARALLELISM)
_TEXT = Bound(0, MAX_TEXT_CHARS)

# (message full name without the package, field name) -> bound. Integer fields: the value's range;
# string, bytes and repeated fields: the largest length. "*" matches every message.
FIELD_BOUNDS: dict[tuple[str, str], Bound] = {
    # slots
    ("RegisterTaskManagerRequest", "num_slots"): Bound(1, MAX_SLOTS_PER_TASKMANAGER),
    ("*", "slot_index"): Bound(0, MAX_SLOTS_PER_TASKMANAGER - 1),
    ("SlotReport", "slots"): Bound(0, MAX_SLOTS_PER_TASKMANAGER),
    ("OfferSlotsRequest", "offers"): Bound(0, MAX_SLOTS_PER_TASKMANAGER),
    # parallelism, subtasks, partitions, key groups
    ("JobVertex", "parallelism"): _PARALLELISM,
    ("ExecutionConfig", "parallelism"): Bound(-1, MAX_PARALLELISM),  # -1: not set
    ("ExecutionConfig", "buffer_timeout_ms"): Bound(-1, MAX_COUNT),  # -1: flush only when full
    ("*", "max_parallelism"): Bound(0, MAX_PARALLELISM),             # 0: derived
    ("*", "subtask_index"): _INDEX,
    ("*", "old_subtask_index"): _INDEX,
    ("TaskOutputsRequest", "subtask"): _INDEX,
    ("*", "partition_index"): _INDEX,
    ("*", "subpartition_index"): _INDEX,
    ("ResultPartitionDescriptor", "num_subpartitions"): _PARALLELISM,
    ("*", "key_group_start"): _INDEX,
    ("*", "key_group_end"): _INDEX,
    ("*", "input_index"): Bound(0, 1),                              # one- and two-input operators
    ("*", "node_id"): Bound(0, 1 << 30),
    ("*", "target_node_id"): Bound(-1, 1 << 30),
    ("*", "source_node_id"): Bound(-1, 1 << 30),
    ("*", "attempt_number"): Bound(0, MAX_ATTEMPTS),
    ("RestartStrategy", "attempts"): Bound(0, MAX_ATTEMPTS),
    ("RestartStrategy", "max_failures_per_interval"): Bound(0, MAX_ATTEMPTS),
    # JobGraph sizes
    ("JobGraph", "vertices"): Bound(0, MAX_VERTICES),
    ("JobVertex", "operators"): Bound(0, MAX_VERTICES),
    ("JobVertex", "inputs"): Bound(0, MAX_VERTICES),
    ("JobVertex", "produced"): Bound(0, MAX_VERTICES),
    ("TaskDeploymentDescriptor", "input_gates"): Bound(0, MAX_VERTICES),
    ("TaskDeploymentDescriptor", "produced_partitions"): Bound(0, MAX_VERTICES),
    ("ConsumedPartitionGroupDescriptor", "partitions"): Bound(0, MAX_PARALLELISM),
    ("TaskRestore", "rescaled"): Bound(0, MAX_PARALLELISM),
    # what a caller asks to be read for it
    ("FetchCollectRequest", "max_bytes"): Bound(0, MAX_READ_BYTES),
    ("ReadLogRequest", "max_bytes"): Bound(0, MAX_READ_BYTES),
    # free text: failures, reasons, printed lines
    ("JobFailure", "message"): _TEXT,
    ("JobFailure", "traceback"): _TEXT,
    ("DeclineCheckpointRequest", "message"): _TEXT,
    ("TaskManagerRef", "reason"): _TEXT,
    ("FreeSlotRequest", "cause"): _TEXT,
    ("PrintedLinesReport", "lines"): Bound(0, MAX_ENTRIES),
}

# Bytes fields that carry an id (16 bytes; empty where "none" is allowed).
ID_FIELDS = frozenset({
    "job_id", "execution_attempt_id", "allocation_id", "producer_attempt_id", "result_id", "id",
    "source_vertex", "consumer_vertex", "operator_id", "accepted",
})


def _bound(message_name: str, field: str) -> Bound | None:
    return FIELD_BOUNDS.get((message_name, field)) or FIELD_BOUNDS.get(("*", field))


_INTEGER_TYPES = frozenset({
    FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_FIXED32,
    FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED32, FieldDescriptor.TYPE_SFIXED64,
})


def _is_repeated(field: FieldDescriptor) -> bool:
    return bool(field.is_repeated)


def _is_map(field: FieldDescriptor) -> bool:
    message_type = field.message_type
    return message_type is not None and message_type.GetOptions().map_entry


def _problems(message: Message, path: str) -> Iterator[str]:
    descriptor = message.DESCRIPTOR
    name = descriptor.name
    for field, value in message.ListFields():
        where = f"{path}.{field.name}" if path else field.name
        bound = _bound(name, field.name)
        if _is_repeated(field):
            limit = bound.high if bound is not None and field.type not in _INTEGER_TYPES else MAX_ENTRIES
            if len(value) > limit:
                yield f"{where} has {len(value)} entries; at most {limit} are allowed"
                continue
            if _is_map(field):
                entries = value.items()
                assert field.message_type is not None  # a map field's entries are a message (_is_map)
                value_field = field.message_type.fields_by_name["value"]
                for key, item in entries:
                    if isinstance(key, str) and len(key) > MAX_NAME_CHARS:
                        yield f"{where} has a key of {len(key)} characters; at most {MAX_NAME_CHARS} are allowed"
                    if value_field.type == FieldDescriptor.TYPE_MESSAGE:
                        yield from _problems(item, f"{where}[{key!r}]")
                    else:
                        text = _TEXT if value_field.type == FieldDescriptor.TYPE_STRING else None
                        yield from _scalar(value_field, item, f"{where}[{key!r}]", text, field.name)
                continue
            for i, item in enumerate(value):
                if field.type == FieldDescriptor.TYPE_MESSAGE:
                    yield from _problems(item, f"{where}[{i}]")
                else:
                    # a repeated integer's bound is its entries' range; a list's bound is its length,
                    # its entries (printed lines, ids) get their kind's default
                    entry_bound = bound if field.type in _INTEGER_TYPES else (
                        _TEXT if field.type == FieldDescriptor.TYPE_STRING else None)
                    yield from _scalar(field, item, f"{where}[{i}]", entry_bound, field.name)
            continue
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            yield from _problems(value, where)
        else:
            yield from _scalar(field, value, where, bound, field.name)


def _scalar(field: FieldDescriptor, value: Any, where: str, bound: Bound | None, name: str) -> Iterator[str]:
    kind = field.type
    if kind in _INTEGER_TYPES:
        b = bound or Bound(0, MAX_COUNT)
        if not b.low <= value <= b.high:
            yield f"{where} is {value}; it must be within {b.describe()}"
    elif kind == FieldDescriptor.TYPE_STRING:
        limit = bound.high if bound is not None else MAX_NAME_CHARS
        if len(value) > limit:
            yield f"{where} has {len(value)} characters; at most {limit} are allowed"
    elif kind == FieldDescriptor.TYPE_BYTES:
        if bound is not None:
            max_bytes: int | None = bound.high
        else:
            max_bytes = MAX_ID_BYTES if name in ID_FIELDS else None
        if max_bytes is not None and len(value) > max_bytes:
            what = "an id" if name in ID_FIELDS else "a value"
            yield f"{where} is {what} of {len(value)} bytes; at most {max_bytes} are allowed"
    elif kind == FieldDescriptor.TYPE_ENUM:
        enum = field.enum_type  # set on every enum field
        if enum is not None and enum.values_by_number.get(value) is None:
            known = ", ".join(v.name for v in enum.values)
            yield f"{where} is {value}, not a {enum.name} ({known})"
    elif kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        if value != value:  # NaN would poison every sum and comparison it reaches
            yield f"{where} is NaN"


def hello_problem(partition: int, subpartition: int, credit: int, result_id: bytes, attempt_id: bytes) -> str | None:
    """What is out of bounds in a data connection's HELLO (the partition service's request), or None."""
    for name, value in (("partition_index", partition), ("subpartition_index", subpartition)):
        if not _INDEX.low <= value <= _INDEX.high:
            return f"{name} is {value}; it must be within {_INDEX.describe()}"
    if not 1 <= credit <= MAX_CREDIT:
        return f"initial_credit is {credit}; it must be within 1..{MAX_CREDIT}"
    for name, ident in (("result_id", result_id), ("attempt_id", attempt_id)):
        if len(ident) > MAX_ID_BYTES:
            return f"{name} is an id of {len(ident)} bytes; at most {MAX_ID_BYTES} are allowed"
    return None


def check_message(message: Message) -> str | None:
    """The first field of ``message`` (recursively) outside its bound, in words, or None."""
    for problem in _problems(message, ""):
        return problem
    return None


class BoundsServerInterceptor(grpc.aio.ServerInterceptor):
    """Answers INVALID_ARGUMENT, before the servicer runs, to a request with a field out of bounds."""

    async def intercept_service(self, continuation: Any, handler_call_details: Any) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or not (handler.unary_unary or handler.unary_stream):
            return handler
        method = handler_call_details.method.rsplit(".", 1)[-1]  # "Service/Method"
        kwargs = {"request_deserializer": handler.request_deserializer, "response_serializer": handler.response_serializer}

        if handler.unary_unary is not None:
            behavior = handler.unary_unary

            async def checked(request: Any, context: grpc.aio.ServicerContext) -> Any:
                problem = check_message(request) if isinstance(request, Message) else None
                if problem is not None:
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{method}: {problem}")
                result = behavior(request, context)
                return await result if hasattr(result, "__await__") else result

            return grpc.unary_unary_rpc_method_handler(checked, **kwargs)
        stream_behavior = handler.unary_stream

        async def checked_stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
            problem = check_message(request) if isinstance(request, Message) else None
            if problem is not None:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{method}: {problem}")
            result = stream_behavior(request, context)
            if hasattr(result, "__aiter__"):
                async for item in result:
                    yield item
            else:  # a servicer that writes with context.write (the health service's Watch)
                await result

        return grpc.unary_stream_rpc_method_handler(checked_stream, **kwargs)
