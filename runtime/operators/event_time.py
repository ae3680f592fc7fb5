"""Where timestamps and watermarks enter a job: ``assign_timestamps_and_watermarks`` and sources
created with a WatermarkStrategy (Flink's TimestampsAndWatermarksOperator and the source
operator's watermarking).

:class:`Watermarking` applies a strategy (``runtime.watermarks.TimestampsAndWatermarks``) to what
an operator emits: every batch goes out stamped, then the watermarks the generator made on those
events (punctuated); periodic watermarks go out every ``pipeline.auto-watermark-interval`` of
processing time, from the chain's between-batches housekeeping. One generator serves the subtask
(Flink's sources keep one per split; a subtask here reads its splits one after the other).
"""
from __future__ import annotations

from typing import Any

from millstream.runtime import operator_factories
from millstream.runtime.operators.base import OperatorContext, StreamOperator
from millstream.runtime.timestamps import LONG_MAX, stamped, timestamps_of
from millstream.runtime.watermarks import TimestampsAndWatermarks, WatermarkEvent, WatermarkStatus

__all__ = ["TimestampsAndWatermarksOperator", "Watermarking"]


def _check_strategy(strategy: Any, operator: StreamOperator) -> Any:
    from millstream.common.watermark_strategy import WatermarkStrategy

    if not isinstance(strategy, WatermarkStrategy):
        raise TypeError(f"Operator '{operator.name}': expected a WatermarkStrategy, got {type(strategy).__name__}")
    return strategy


class Watermarking:
    """A WatermarkStrategy applied to ``operator``'s output (see the module docstring)."""

    def __init__(self, operator: StreamOperator, strategy: Any) -> None:
        env = operator.ctx.env
        self.operator = operator
        self.assigns = _check_strategy(strategy, operator).timestamp_assigner is not None
        self.timestamps = TimestampsAndWatermarks(
            strategy, auto_watermark_interval_ms=env.auto_watermark_interval_ms, clock=env.now_ms)

    def emit(self, records: list[Any]) -> None:
        """Stamps ``records`` (when the strategy has an assigner or they carry timestamps) and emits
        them, then the watermarks the generator made on them."""
        op = self.operator
        previous = timestamps_of(records)
        try:
            batch = self.timestamps.process_batch(records, previous)
        except Exception as e:
            op.fail(e, "extract_timestamp")
        if records:
            op.output(stamped(list(records), batch.timestamps) if self.assigns or previous is not None else records)
        self.send(batch.events)

    def send(self, events: list[WatermarkEvent]) -> None:
        op = self.operator
        for event in events:
            if type(event) is int:
                if event > op.current_watermark:
                    op.current_watermark = event
                    op.watermark_output(event)
            else:
                op.status_output(event is WatermarkStatus.IDLE)

    def periodic(self) -> None:
        self.send(self.timestamps.emit_periodic_if_due())

    def next_periodic_ms(self) -> int | None:
        return self.timestamps.next_periodic_ms()

    def end_of_input(self) -> None:
        """The final round: the generator's last periodic watermark, then ``LONG_MAX``."""
        if not self.timestamps.finished:
            self.send(self.timestamps.end_of_input())


class TimestampsAndWatermarksOperator(StreamOperator):
    """``assign_timestamps_and_watermarks``: records get the assigner's timestamps; the strategy's
    watermarks replace the upstream ones, except the final ``LONG_MAX``, which ends the generator
    (Flink drops upstream watermarks and idleness here)."""

    def __init__(self, factory: operator_factories.TimestampsAndWatermarksFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        self._watermarking = Watermarking(self, factory.watermark_strategy)
        self.uses_processing_time = ctx.env.auto_watermark_interval_ms > 0

    def process_batch(self, records: list[Any]) -> None:
        self._watermarking.emit(records)

    def process_watermark(self, watermark: int) -> None:
        if watermark >= LONG_MAX:
            self._watermarking.end_of_input()

    def process_watermark_status(self, idle: bool) -> None:
        pass  # the strategy decides this stream's idleness

    def on_processing_time(self, now_ms: int) -> None:
        self._watermarking.periodic()

    def next_timer_ms(self) -> int | None:
        return self._watermarking.next_periodic_ms()
