"""A WatermarkStrategy applied to what one operator emits: the source head's (``from_source``) and
``assign_timestamps_and_watermarks``'s (see :mod:`~millstream.runtime.operators.event_time`).

Every batch goes out stamped, then the watermarks the generator made on those events
(punctuated); periodic watermarks go out every ``pipeline.auto-watermark-interval`` of processing
time, from the chain's between-batches housekeeping.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from millstream.common.watermark_strategy import WatermarkStrategy
from millstream.runtime.timestamps import stamped, timestamps_of
from millstream.runtime.watermarks import TimestampsAndWatermarks, WatermarkEvent, WatermarkStatus

if TYPE_CHECKING:
    from millstream.runtime.operators.base import StreamOperator

__all__ = ["Watermarking"]


def _check_strategy(strategy: Any, operator: StreamOperator) -> Any:
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

    def emit(self, records: list[Any], split: str | None = None) -> None:
        """Stamps ``records`` (when the strategy has an assigner or they carry timestamps) and emits
        them, then the watermarks the generator made on them; records of one ``split`` go through
        that split's generator (the subtask's watermark is the minimum over its splits)."""
        op = self.operator
        previous = timestamps_of(records)
        try:
            batch = self.timestamps.process_batch(records, previous, split)
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

    def add_split(self, split: str) -> None:
        self.timestamps.add_split(split)

    def release_split(self, split: str) -> None:
        """``split`` is finished: its generator no longer holds the watermark back."""
        self.send(self.timestamps.release_split(split))

    def periodic(self) -> None:
        self.send(self.timestamps.emit_periodic_if_due())

    def next_periodic_ms(self) -> int | None:
        return self.timestamps.next_periodic_ms()

    def end_of_input(self) -> None:
        """The final round: the generator's last periodic watermark, then ``LONG_MAX``."""
        if not self.timestamps.finished:
            self.send(self.timestamps.end_of_input())
