"""OperatorChain: one task's chained operators, wired by direct calls (Flink's OperatorChain).

Built from a ``JobVertex`` (operators in chain order, head first, each with its cloudpickled
factory), a :class:`TaskEnvironment` and one :class:`ResultWriter` per produced data set. The task
loop that owns it (the Spark worker) calls, from one thread:

    chain.open()
    finished = chain.run_source()                 # a source vertex, or, for another vertex:
    chain.process_batch(records, target_node_id, input_index)  # per input batch, then
    chain.between_batches()                       #   due timers and the buffer-timeout flush;
    chain.wait_bound_ms(max_wait)                 #   how long an idle loop may wait
    if finished / all inputs ended: chain.end_input()
    chain.close()

Only :meth:`OperatorChain.cancel` may be called from another thread.

The chain counts its task's records as Flink's numRecordsIn / numRecordsOut: ``records_in`` the
records given to ``process_batch`` (read from the network; a source reads none), ``records_out``
the records emitted into result writers (a sink vertex writes none). Counting costs one addition
per batch; ``between_batches`` hands the totals to ``records_listener`` at most every
``records_interval_ms``.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Mapping, Protocol, Sequence

import cloudpickle

from millstream.runtime.partitioners import key_function
from millstream.runtime.narrowing import batch_narrower
from millstream.runtime.operators.co_process import TwoInputOperator
from millstream.runtime.operators.base import (
    Emit,
    OperatorContext,
    OperatorError,
    SourceOperator,
    StreamOperator,
    discard,
)
from millstream.runtime.operators import create_operator
from millstream.runtime.operators.sources import SourceFunctionReader, reads_index_ranges, rescaled_positions
from millstream.runtime.state.backends import KeyedBackendFactory
from millstream.runtime.state.heap_backend import KeyedStateBackend
from millstream.runtime.timestamps import LONG_MAX
from millstream.runtime.task.environment import (
    BATCH,
    STREAMING,
    SimpleTaskEnvironment,
    StreamingRuntimeContext,
    TaskEnvironment,
)

__all__ = [
    "BATCH", "STREAMING", "OperatorChain", "OperatorError", "ResultWriter", "SimpleTaskEnvironment",
    "TaskEnvironment",
]


class ResultWriter(Protocol):
    """The producer side of one IntermediateDataSet: partitions, buffers and sends records.

    ``emit`` may buffer; ``flush`` sends what is buffered. Either may raise if a record cannot be
    serialized; the chain reports that as the emitting operator's error.
    """

    def emit(self, records: list[Any]) -> None: ...

    def flush(self) -> None: ...

    def emit_watermark(self, watermark: int) -> None:
        """Sends a watermark to every consumer, after the records emitted before it."""

    def emit_watermark_status(self, idle: bool) -> None:
        """Tells every consumer that this producer went idle (or active again)."""


def _fan_out_events(targets: list[Callable[[Any], None]]) -> Callable[[Any], None]:
    if len(targets) == 1:
        return targets[0]
    fixed = tuple(targets)

    def fan_out(event: Any) -> None:
        for target in fixed:
            target(event)

    return fan_out


def _fan_out(targets: list[Emit]) -> Emit:
    if not targets:
        return discard
    if len(targets) == 1:
        return targets[0]
    fixed = tuple(targets)

    def fan_out(records: list[Any]) -> None:
        for emit in fixed:  # every consumer gets the same list: operators never mutate their input
            emit(records)

    return fan_out


def _narrowed(emit: Emit, output_type: Any, writer_output: _WriterOutput | None = None) -> Emit:
    """``emit`` behind Java's narrowing of ``output_type`` (as PyFlink's typed output), when the type
    declares anything to narrow. ``writer_output``: the only consumer, when it is a result writer;
    one that narrows a batch only when it must (a combiner) takes the batches unnarrowed."""
    narrow = batch_narrower(output_type)
    if narrow is None or emit is discard:
        return emit
    lazy = writer_output.narrowing_emit(narrow) if writer_output is not None else None
    if lazy is not None:
        return lazy

    def emit_narrowed(records: list[Any]) -> None:
        emit(narrow(records))

    return emit_narrowed


class _WriterOutput:
    """Emits into a ResultWriter and names the producing operator if the writer fails."""

    def __init__(self, writer: ResultWriter, operator: StreamOperator, result_id: bytes) -> None:
        self.writer = writer
        self.operator = operator
        self.result_id = result_id
        self._emit = writer.emit
        self._emitted = 0
        self.watermark: int | None = None  # the latest sent (Flink's currentOutputWatermark)

    @property
    def records(self) -> int:
        """Records written to the result (Flink's numRecordsOut): what the writer sent, which a
        BATCH pre-aggregation (CombiningWriter) cuts to one partial per key, so the consumer's
        numRecordsIn adds up to it; else what was emitted into it."""
        sent = getattr(self.writer, "records_out", None)
        return sent if type(sent) is int else self._emitted

    def emit(self, records: list[Any]) -> None:
        self._emitted += len(records)
        try:
            self._emit(records)
        except Exception as e:
            self.operator.fail(e, f"writing to result {self.result_id.hex()}")

    def narrowing_emit(self, narrow: Callable[[list[Any]], list[Any]]) -> Emit | None:
        """An emit of batches not yet narrowed, which the writer narrows itself when it must (its
        ``emit_unnarrowed``); None when the writer has no such path."""
        take = getattr(self.writer, "emit_unnarrowed", None)
        if take is None:
            return None

        def emit(records: list[Any]) -> None:
            self._emitted += len(records)
            try:
                take(records, narrow)
            except Exception as e:
                self.operator.fail(e, f"writing to result {self.result_id.hex()}")

        return emit

    def flush(self) -> None:
        try:
            self.writer.flush()
        except Exception as e:
            self.operator.fail(e, f"flushing result {self.result_id.hex()}")

    def emit_watermark(self, watermark: int) -> None:
        self.watermark = watermark
        try:
            self.writer.emit_watermark(watermark)
        except Exception as e:
            self.operator.fail(e, f"sending a watermark to result {self.result_id.hex()}")

    def emit_watermark_status(self, idle: bool) -> None:
        try:
            self.writer.emit_watermark_status(idle)
        except Exception as e:
            self.operator.fail(e, f"sending a watermark status to result {self.result_id.hex()}")


class OperatorChain:
    """Runs one subtask of a JobVertex: its operators from the head to the sinks and result writers."""

    def __init__(
        self,
        vertex: Any,  # millstream.proto.jobgraph_pb2.JobVertex
        task_env: TaskEnvironment,
        result_writers: Mapping[bytes, ResultWriter] | None = None,
    ) -> None:
        if not vertex.operators:
            raise ValueError(f"Vertex '{vertex.name}' has no operators")
        self.vertex = vertex
        self.env = task_env
        self.operators: list[StreamOperator] = []
        self._by_node: dict[int, StreamOperator] = {}
        self._backends: dict[str, KeyedStateBackend] = {}
        self.backend_factory = KeyedBackendFactory(task_env)  # state.backend.type: heap or the task's RocksDB
        for op in vertex.operators:
            operator = self._build(op)
            self.operators.append(operator)
            self._by_node[op.node_id] = operator
        self._writer_outputs: list[_WriterOutput] = []
        self._wire(result_writers or {})
        self.head = self.operators[0]
        self._timer_operators = [o for o in self.operators if o.uses_processing_time]
        self._cancelled = False
        self._last_flush_ms = task_env.now_ms()
        self._opened = False
        self.records_in = 0
        self._records_out_at_flush = 0  # at the last idle flush: an idle task that emitted nothing new skips it
        self._input_watermarks: dict[int, int] = {}  # per head input: the latest combined watermark
        self.records_listener: Callable[[int, int], None] | None = None
        # Wraps a source's emit to time it (its task's idle time is the time outside emit, off the CPU).
        self.time_source_emits: Callable[[Callable[[Any], None]], Callable[[Any], None]] | None = None
        self.records_interval_ms = 1000
        self._last_records_ms = self._last_flush_ms
        # Called at the end of every between_batches(): the task loop's control messages
        # (checkpoint triggers, notifications) are handled there, between two records.
        self.housekeeping: Callable[[], None] | None = None

    # -- construction --------------------------------------------------------------------------

    def _build(self, op: Any) -> StreamOperator:
        env = self.env
        try:
            factory = cloudpickle.loads(op.factory)
            key_selector = key_function(cloudpickle.loads(op.state_key_selector)) if op.state_key_selector else None
            key_selector2 = key_function(cloudpickle.loads(op.state_key_selector2)) if op.state_key_selector2 else None
        except Exception as e:
            raise OperatorError(
                f"Operator '{op.name}': cannot deserialize its function or key selector: {type(e).__name__}: {e} "
                "(is the module that defines it shipped with the job?)",
                op.name,
            ) from e
        backend = None
        if key_selector is not None:
            backend = self.backend_factory.create(op.operator_id.hex())
            self._backends[op.operator_id.hex()] = backend
        ctx = OperatorContext(
            name=op.name,
            node_id=op.node_id,
            operator_id=op.operator_id.hex(),
            env=env,
            runtime_context=StreamingRuntimeContext(env, op.name, backend),
            key_selector=key_selector,
            backend=backend,
            key_selector2=key_selector2,
        )
        try:
            return create_operator(factory, ctx)
        except OperatorError:
            raise
        except Exception as e:
            raise OperatorError(f"Operator '{op.name}': {type(e).__name__}: {e}", op.name) from e

    def _wire(self, result_writers: Mapping[bytes, ResultWriter]) -> None:
        produced = {ds.id: ds for ds in self.vertex.produced}
        for op in self.vertex.operators:
            operator = self._by_node[op.node_id]
            main: list[Emit] = []
            main_writers: list[_WriterOutput] = []
            side: dict[str, list[Emit]] = {}
            # Watermarks and statuses go to every consumer, main and side outputs alike (as in Flink).
            watermarks: list[Callable[[int], None]] = []
            statuses: list[Callable[[bool], None]] = []
            for out in op.chained_outputs:
                target = self._by_node.get(out.target_node_id)
                if target is None:
                    raise ValueError(f"Operator '{op.name}' chains to unknown node {out.target_node_id}")
                (side.setdefault(out.output_tag, []) if out.output_tag else main).append(target.process_batch)
                watermarks.append(target.process_watermark)
                statuses.append(target.process_watermark_status)
            for result_id in op.non_chained_outputs:
                writer = result_writers.get(result_id)
                dataset = produced.get(result_id)
                if writer is None or dataset is None:
                    raise ValueError(f"Operator '{op.name}' emits into result {result_id.hex()}, which has no writer")
                output = _WriterOutput(writer, operator, result_id)
                self._writer_outputs.append(output)
                tag = dataset.output_tag
                (side.setdefault(tag, []) if tag else main).append(output.emit)
                if not tag:
                    main_writers.append(output)
                watermarks.append(output.emit_watermark)
                statuses.append(output.emit_watermark_status)
            only_writer = main_writers[0] if len(main) == 1 and len(main_writers) == 1 else None
            operator.output = _narrowed(_fan_out(main), getattr(operator.factory, "output_type", None), only_writer)
            if watermarks:
                operator.watermark_output = _fan_out_events(watermarks)
                operator.status_output = _fan_out_events(statuses)
            operator.side_outputs = {tag: _fan_out(targets) for tag, targets in side.items()}

    # -- lifecycle -----------------------------------------------------------------------------

    def open(self) -> None:
        """Opens every operator, the tail first, so an operator never emits into an unopened one."""
        self._opened = True
        open_tail_first(self.operators)

    def run_source(self) -> bool:
        """Reads this subtask's splits through the chain. True when the input is exhausted (then call
        ``end_input``), False when cancelled."""
        source = self.head
        if not isinstance(source, SourceOperator):
            raise TypeError(f"Vertex '{self.vertex.name}' is not a source vertex")
        if not self._opened:
            raise RuntimeError("open() the chain before run_source()")
        reader = source.reader
        emit: Callable[[list[Any]], None] = source.emit_batch
        if self.time_source_emits is not None:  # the task's idle time is what the source spends outside emit
            emit = self.time_source_emits(emit)
        if isinstance(reader, SourceFunctionReader):
            try:
                return reader.run(emit, self.between_batches, source.emit_source_watermark)
            except Exception as e:
                source.fail(e, "run()")
        assert reader is not None
        env = self.env
        while not (self._cancelled or env.is_cancelled()):
            try:
                batch = reader.poll()
            except Exception as e:
                source.fail(e, "reading")
            if batch is None:
                return True
            if batch:
                emit(batch)
            else:  # ahead of a rate limit: send what is staged, wait, but not past a due timer
                self.flush_when_idle()
                env.wait_ms(self.wait_bound_ms(reader.wait_hint_ms()))
            self.between_batches()
        return False

    def wait_bound_ms(self, wait_ms: int) -> int:
        """``wait_ms`` cut short so an idle task loop wakes for the next due timer or flush."""
        now = self.env.now_ms()
        next_timer = self.next_timer_ms()
        if next_timer is not None:
            wait_ms = min(wait_ms, next_timer - now)
        if self.env.buffer_timeout_ms >= 0:
            wait_ms = min(wait_ms, self._last_flush_ms + self.env.buffer_timeout_ms - now)
        return max(wait_ms, 0)

    def flush_when_idle(self) -> None:
        """The task is about to wait (no input ready, or a source ahead of its rate): the records
        its result writers staged go out now instead of at the buffer timeout. At low rates a
        record then crosses an exchange in milliseconds whatever the timeout; under load input is
        always ready, no task waits and buffers fill as before. Sinks keep their own pace (the
        collect sink's batches, a file's writes: the buffer timeout). A timeout of -1 (Flink's
        "only when full") keeps buffers until they are full."""
        if self.env.buffer_timeout_ms < 0 or not self._writer_outputs:
            return
        records_out = self.records_out
        if records_out > self._records_out_at_flush:
            self._records_out_at_flush = records_out
            for output in self._writer_outputs:
                output.flush()

    def between_batches(self) -> None:
        """Fires due timers and flushes on the buffer timeout: a task loop's housekeeping, to call
        after every input batch (or wait) of a non-source vertex; ``run_source`` calls it itself."""
        now = self.env.now_ms()
        if self._timer_operators:
            self.advance_processing_time(now)
        timeout = self.env.buffer_timeout_ms
        if timeout >= 0 and now - self._last_flush_ms >= timeout:
            self.flush()
        if self.records_listener is not None and now - self._last_records_ms >= self.records_interval_ms:
            self._last_records_ms = now
            self.records_listener(self.records_in, self.records_out)
        if self.housekeeping is not None:
            self.housekeeping()

    @property
    def current_input_watermark(self) -> int | None:
        """The head's input watermark (the smaller of two inputs'), None before the first."""
        marks = self._input_watermarks
        if not marks or (isinstance(self.head, TwoInputOperator) and len(marks) < 2):
            return None
        return min(marks.values())

    @property
    def current_output_watermark(self) -> int | None:
        """The lowest watermark sent to the result writers, None before every writer sent one."""
        marks = [o.watermark for o in self._writer_outputs]
        if not marks or None in marks:
            return None
        return min(marks)  # type: ignore[type-var]

    @property
    def records_out(self) -> int:
        """Records emitted into this task's result writers so far (every output counts)."""
        return sum(output.records for output in self._writer_outputs)

    # The first task loop (taskmanager/task_body.py) was written against these private names.
    _wait_bound = wait_bound_ms
    _between_batches = between_batches

    def process_batch(self, records: list[Any], target_node_id: int, input_index: int = 0) -> None:
        """One input batch for the chain's head (``target_node_id`` from the JobEdge)."""
        operator = self._by_node.get(target_node_id)
        if operator is not self.head or isinstance(operator, SourceOperator):
            raise ValueError(f"Node {target_node_id} is not the input operator of vertex '{self.vertex.name}'")
        self.records_in += len(records)
        if isinstance(operator, TwoInputOperator):
            if input_index == 0:
                operator.process_batch1(records)
            elif input_index == 1:
                operator.process_batch2(records)
            else:
                raise ValueError(f"Operator '{operator.name}' has inputs 0 and 1, not {input_index}")
        else:
            operator.process_batch(records)

    def process_watermark(self, watermark: int, input_index: int = 0) -> None:
        """The combined watermark of the head's input ``input_index`` advanced (from its input valve)."""
        self._input_watermarks[input_index] = watermark
        head = self.head
        if isinstance(head, TwoInputOperator):
            head.process_input_watermark(watermark, input_index)
        else:
            head.process_watermark(watermark)

    def process_watermark_status(self, idle: bool, input_index: int = 0) -> None:
        """Every channel of the head's input ``input_index`` went idle, or one became active again."""
        head = self.head
        if isinstance(head, TwoInputOperator):
            head.process_input_watermark_status(idle, input_index)
        else:
            head.process_watermark_status(idle)

    def end_input(self) -> None:
        """Bounded input done: the final watermark (``LONG_MAX``) goes through the chain first, so every
        event-time timer and window fires (Flink's sources emit it at their end; a consumer has it from
        its inputs already), then every operator emits what it held back (head first, so its last
        records reach operators that have not ended yet), then everything is flushed."""
        for input_index in (0, 1) if isinstance(self.head, TwoInputOperator) else (0,):
            self.process_watermark(LONG_MAX, input_index)
        for operator in self.operators:
            operator.end_input()
        self.flush()

    def advance_processing_time(self, now_ms: int) -> None:
        """Fires every processing-time timer due at ``now_ms``."""
        for operator in self._timer_operators:
            operator.on_processing_time(now_ms)

    def next_timer_ms(self) -> int | None:
        """The earliest pending processing-time timer, so the task loop knows when to wake."""
        times = [t for o in self._timer_operators if (t := o.next_timer_ms()) is not None]
        return min(times) if times else None

    def flush(self) -> None:
        """Hands buffered output on: sinks' buffers, then the result writers."""
        self._last_flush_ms = self.env.now_ms()
        for operator in self.operators:
            operator.flush()
        for output in self._writer_outputs:
            output.flush()

    def close(self) -> None:
        """Closes every operator, head first; all are closed even if one fails, then the first error is raised."""
        first: BaseException | None = None
        for operator in self.operators:
            try:
                operator.close()
            except Exception as e:
                first = first or e
        try:
            self.backend_factory.close()  # the task's RocksDB, if any: closed and its directory deleted
        except Exception as e:
            first = first or e
        if first is not None:
            raise first

    def cancel(self) -> None:
        """From any thread: stop the source loop; a SourceFunction gets ``cancel()``."""
        self._cancelled = True
        head = self.head
        if isinstance(head, SourceOperator) and isinstance(head.reader, SourceFunctionReader):
            head.reader.cancel()

    # -- positions and state, for checkpoints --------------------------------------------------

    def restore_positions(self, positions: Mapping[str, Any], assigned: bool = False,
                          every: Mapping[str, Any] | None = None) -> None:
        """Before ``open()``: resume the source's splits at ``positions`` (from ``snapshot_positions``).
        ``assigned``: at another parallelism, these are the splits to read, whatever the plan says;
        ``every``: then the positions of every old subtask (a sequence or generator source takes
        its share of all of their unread indices instead, see sources.rescaled_positions). A
        sequence or generator source always reads the ranges it restored: since a rescale they
        are not the plan's."""
        if isinstance(self.head, SourceOperator):
            assigned = assigned or reads_index_ranges(self.head.factory)
            if assigned and every is not None:
                positions = rescaled_positions(self.head.factory, positions, every, self.env.parallelism,
                                               self.env.subtask_index)
            self.head.start_positions = dict(positions)
            self.head.assigned_splits = assigned

    def snapshot_positions(self) -> dict[str, Any]:
        """The source's read position per split id (empty for a non-source vertex)."""
        head = self.head
        if isinstance(head, SourceOperator) and head.reader is not None:
            return head.reader.position()
        return {}

    def keyed_state_backends(self) -> dict[str, KeyedStateBackend]:
        """Keyed state per operator id (hex), for the keyed operators of this chain."""
        return dict(self._backends)

    def snapshot_keyed_state(self) -> dict[str, dict[int, bytes]]:
        """Per keyed operator id: one blob per key group holding state or timers."""
        return {op_id: backend.snapshot() for op_id, backend in self._backends.items()}

    def restore_keyed_state(self, states: Mapping[str, Mapping[int, bytes]]) -> None:
        """Loads the key groups of this subtask's range, per operator id; unknown operators are an error
        (Flink refuses state it cannot map unless told to skip it)."""
        for op_id, groups in states.items():
            backend = self._backends.get(op_id)
            if backend is None:
                raise ValueError(f"Keyed state for operator {op_id}, which is not a keyed operator of '{self.vertex.name}'")
            backend.restore(groups)

    def operator(self, node_id: int) -> StreamOperator:
        return self._by_node[node_id]

    def operator_by_id(self, operator_id: str) -> StreamOperator | None:
        """The operator with this id (hex), as snapshots name operators."""
        return next((o for o in self.operators if o.ctx.operator_id == operator_id), None)

    def __repr__(self) -> str:
        env = self.env
        return f"OperatorChain({self.vertex.name!r} {env.subtask_index + 1}/{env.parallelism})"


def open_tail_first(operators: Sequence[Any]) -> None:
    """Opens ``operators`` tail first. When one fails, it and those already open are closed (their
    errors suppressed, the open's raised): the task closes only a chain that opened, and what a failed
    open leaves behind (a KafkaSink's consumer after a restored transaction's commit failed, a
    reader's client) would otherwise live on in the worker, reconnecting to a broker long gone."""
    opened: list[Any] = []
    for operator in reversed(operators):
        try:
            operator.open()
        except BaseException:
            for o in (operator, *reversed(opened)):
                with contextlib.suppress(Exception):
                    o.close()
            raise
        opened.append(operator)

