"""ExecutionConfig: per-job settings PyFlink reaches through ``env.get_config()``."""
from __future__ import annotations

__all__ = ["ExecutionConfig"]


class ExecutionConfig:
    """The settings of one job's execution that are not options of the environment itself."""

    def __init__(self) -> None:
        self._auto_watermark_interval_ms = 200  # pipeline.auto-watermark-interval

    def set_auto_watermark_interval(self, interval: int) -> "ExecutionConfig":
        """How often (milliseconds) timestamp assigners emit periodic watermarks; 0 disables them."""
        interval = int(interval)
        if interval < 0:
            raise ValueError(f"The auto watermark interval cannot be negative, got {interval} ms")
        self._auto_watermark_interval_ms = interval
        return self

    def get_auto_watermark_interval(self) -> int:
        return self._auto_watermark_interval_ms
