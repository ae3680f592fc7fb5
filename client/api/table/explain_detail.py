"""``ExplainDetail``: the extra details ``explain`` may print (PyFlink's enum)."""
from __future__ import annotations

from enum import Enum

__all__ = ["ExplainDetail"]


class ExplainDetail(Enum):
    ESTIMATED_COST = 0
    CHANGELOG_MODE = 1
    JSON_EXECUTION_PLAN = 2
    PLAN_ADVICE = 3
