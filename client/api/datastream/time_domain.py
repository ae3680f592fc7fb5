"""TimeDomain: which clock fired a timer (PyFlink's ``pyflink.datastream.TimeDomain``)."""
from __future__ import annotations

import enum

__all__ = ["TimeDomain"]


class TimeDomain(str, enum.Enum):
    """``ctx.time_domain()`` in ``on_timer``. A str enum, so it also equals its name."""

    EVENT_TIME = "EVENT_TIME"
    PROCESSING_TIME = "PROCESSING_TIME"
