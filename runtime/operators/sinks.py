"""Sink operators: print, SinkFunction and the collect sink (the file sink is ``file_sink``).

Sinks take whole batches: print builds its lines in one comprehension, the collect sink sends
``COLLECT_BATCH_SIZE`` records per call.
"""
from __future__ import annotations

from typing import Any, Callable

from millstream.datastream import functions as fn
from millstream.runtime import operator_factories
from millstream.runtime.operators.record_text import record_formatter
from millstream.runtime.operators.base import LONG_MIN, OperatorContext, StreamOperator
from millstream.runtime.task.environment import TaskEnvironment

__all__ = ["COLLECT_BATCH_SIZE", "PrintSinkOperator", "SinkFunctionOperator", "CollectSinkOperator"]

# Records per emit_collect call unless the sink's options say otherwise. Each call is a report to the
# JobMaster and a fetch by the client (~1.6 ms of their CPU in the windows benchmark, which has 500 k
# results): 1,024 cost 1.45-1.54 s of the client process's CPU there, 8,192 0.82-0.84 s. Payloads
# are cut to 1 MB parts whatever the count; a trickle still leaves at the buffer timeout.
COLLECT_BATCH_SIZE = 8192



class PrintSinkOperator(StreamOperator):
    """Flink's PrintSinkFunction: ``id:N> `` / ``N> `` / ``id> `` prefixes (N = subtask + 1 when parallel)."""

    def __init__(self, factory: operator_factories.PrintSinkFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        env = ctx.env
        prefix = factory.sink_identifier or ""
        if env.parallelism > 1:
            prefix = f"{prefix}:{env.subtask_index + 1}" if prefix else str(env.subtask_index + 1)
        self.prefix = f"{prefix}> " if prefix else ""
        self._stderr = factory.to_stderr
        self._text = record_formatter(factory.type_info)

    def process_batch(self, records: list[Any]) -> None:
        p, text = self.prefix, self._text
        try:
            lines = [p + text(r) for r in records] if p else list(map(text, records))
            if self._stderr:
                self.ctx.env.print_lines(lines, to_stderr=True)
            else:
                self.ctx.env.print_lines(lines)
        except Exception as e:
            self.fail(e, "print")


class _SinkContext:
    """The ``context`` argument of ``SinkFunction.invoke``."""

    def __init__(self, env: TaskEnvironment) -> None:
        self._env = env

    def current_processing_time(self) -> int:
        return self._env.now_ms()

    def current_watermark(self) -> int:
        return LONG_MIN

    def timestamp(self) -> int | None:
        return None


class SinkFunctionOperator(StreamOperator):
    def __init__(self, factory: operator_factories.SinkFunctionFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        function = factory.function
        # A wrapped plain function is called with the value alone; a SinkFunction's invoke with the
        # value and the context, directly (no lambda in between: one Python call per record, not two).
        self._invoke: Callable[..., Any] = function.fn if type(function) is fn._SinkWrapper else function.invoke
        self._sink_ctx = None if type(function) is fn._SinkWrapper else _SinkContext(ctx.env)

    def process_batch(self, records: list[Any]) -> None:
        invoke, sink_ctx = self._invoke, self._sink_ctx
        try:
            if sink_ctx is None:
                for r in records:
                    invoke(r)
            else:
                for r in records:
                    invoke(r, sink_ctx)
        except Exception as e:
            self.fail(e, "invoke")


class CollectSinkOperator(StreamOperator):
    """Sends records to the client for ``execute_and_collect``, ``batch_size`` records per call at
    most, the rest on flush (buffer timeout or end of input): never one call per record."""

    def __init__(self, factory: operator_factories.CollectSinkFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        self._collect_id = factory.collect_id
        self._batch_size = max(1, int(factory.options.get("batch_size", COLLECT_BATCH_SIZE)))
        self._buffer: list[Any] = []

    def process_batch(self, records: list[Any]) -> None:
        buf = self._buffer
        buf.extend(records)
        if len(buf) >= self._batch_size:
            n = len(buf) - len(buf) % self._batch_size
            for i in range(0, n, self._batch_size):
                self._send(buf[i : i + self._batch_size])
            del buf[:n]

    def _send(self, records: list[Any]) -> None:
        try:
            self.ctx.env.emit_collect(self._collect_id, records)
        except Exception as e:
            self._buffer = []
            self.fail(e, "sending records to the client")

    def flush(self) -> None:
        if self._buffer:
            buf, self._buffer = self._buffer, []
            self._send(buf)

    def end_input(self) -> None:
        self.flush()
