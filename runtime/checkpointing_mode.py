"""The checkpointing mode: one enum for the user API and the tasks.

It is PyFlink's ``CheckpointingMode``, values included; the user API (``millstream.datastream``)
re-exports this class, since the engine never imports the API. It reaches the tasks by name, as
``execution.checkpointing.mode`` spells it: EXACTLY_ONCE aligns barriers, AT_LEAST_ONCE tracks them.
"""
from __future__ import annotations

import enum


class CheckpointingMode(enum.Enum):
    EXACTLY_ONCE = 0
    AT_LEAST_ONCE = 1
