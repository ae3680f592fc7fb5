"""Where timestamps and watermarks enter a job: ``assign_timestamps_and_watermarks`` and sources
created with a WatermarkStrategy (Flink's TimestampsAndWatermarksOperator and the source
operator's watermarking).

:class:`~millstream.runtime.operators.watermarking.Watermarking` applies a strategy (``runtime.watermarks.TimestampsAndWatermarks``) to what
an operator emits: every batch goes out stamped, then the watermarks the generator made on those
events (punctuated); periodic watermarks go out every ``pipeline.auto-watermark-interval`` of
processing time, from the chain's between-batches housekeeping. One generator serves the subtask
(Flink's sources keep one per split; a subtask here reads its splits one after the other).
"""
from __future__ import annotations

from typing import Any

from millstream.runtime import operator_factories
from millstream.runtime.operators.base import OperatorContext, StreamOperator
from millstream.runtime.operators.watermarking import Watermarking
from millstream.runtime.timestamps import LONG_MAX, stamped

__all__ = ["TimestampsAndWatermarksOperator", "RestampOperator", "Watermarking"]


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


class RestampOperator(StreamOperator):
    """A new timestamp per record from the factory's assigner; watermarks and idleness pass as they
    are (unlike ``assign_timestamps_and_watermarks``, which replaces them)."""

    def __init__(self, factory: operator_factories.RestampFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        self._extract = factory.assigner.extract_timestamp

    def process_batch(self, records: list[Any]) -> None:
        try:
            timestamps: list[int | None] = [int(self._extract(r, None)) for r in records]
        except Exception as e:
            self.fail(e, "extract_timestamp")
        self.output(stamped(list(records), timestamps))
