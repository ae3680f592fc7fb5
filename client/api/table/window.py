"""Group windows and over windows of the Table API (PyFlink's ``pyflink.table.window``).

``Tumble.over(lit(5).seconds).on(col('ts')).alias('w')``, ``Slide.over(size).every(slide)``,
``Session.with_gap(gap)`` make a :class:`GroupWindow` for ``Table.window``;
``Over.partition_by(...).order_by(col('ts')).preceding(row_interval(2)).alias('w')`` makes an
:class:`OverWindow` for ``Table.over_window``. They only describe the window: the planner turns
them into a :class:`WindowSpec` (plan) and Millstream's window operators (runtime).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from millstream.table.expression import INTERVAL_UNITS_MS, Expression, ValidationException, as_expression

__all__ = ["Tumble", "Slide", "Session", "Over", "GroupWindow", "OverWindow", "WindowSpec"]


@dataclass(frozen=True)
class WindowSpec:
    """A resolved window: ``kind`` tumble / hop / cumulate / session, its time column (an index of
    the input), and its sizes in milliseconds (``size``; ``slide`` for hop and the step of
    cumulate; ``gap`` for session). ``event_time``: a rowtime column (watermarks fire it) or a
    proctime one (the clock does). ``offset``: the window TVFs' optional OFFSET (ms), which shifts
    where windows start: they start at ``offset`` plus a multiple of the size (of the slide for
    HOP); any offset, positive or negative, works modulo that period, as in Flink."""

    kind: str
    time_col: int
    time_name: str
    size: int = 0
    slide: int = 0
    gap: int = 0
    event_time: bool = True
    offset: int = 0

    @property
    def period(self) -> int:
        """What window starts are a multiple of (plus the offset): the slide of HOP, else the size."""
        return self.slide if self.kind == "hop" else self.size

    @property
    def aligned_offset(self) -> int:
        """The offset modulo the period (0 <= it < period): the same windows, in the range the
        DataStream window assigners accept."""
        return self.offset % self.period if self.period else 0

    def describe(self) -> str:
        """Flink's window description in plans: ``TUMBLE(time_col=[ts], size=[5 s])``."""
        t = f"time_col=[{self.time_name}]"
        offset = f", offset=[{_secs(self.offset)}]" if self.offset else ""
        if self.kind == "tumble":
            return f"TUMBLE({t}, size=[{_secs(self.size)}]{offset})"
        if self.kind == "hop":
            return f"HOP({t}, size=[{_secs(self.size)}], slide=[{_secs(self.slide)}]{offset})"
        if self.kind == "cumulate":
            return f"CUMULATE({t}, max_size=[{_secs(self.size)}], step=[{_secs(self.slide)}]{offset})"
        return f"SESSION({t}, gap=[{_secs(self.gap)}])"


def _secs(millis: int) -> str:
    return f"{millis // 1000} s" if millis % 1000 == 0 else f"{millis} ms"


def _interval_ms(e: Any, what: str) -> int:
    """Milliseconds of ``lit(5).seconds`` (or of a plain int of milliseconds)."""
    e = as_expression(e)
    if e.kind == "interval" and e.args[0].kind == "lit" and isinstance(e.args[0].value, int):
        return e.args[0].value * INTERVAL_UNITS_MS[e.value]
    if e.kind == "lit" and isinstance(e.value, int) and not isinstance(e.value, bool):
        return e.value
    raise ValidationException(f"{what} needs a time interval such as lit(5).seconds, got {e}")


class GroupWindow:
    """A group window with its time attribute and alias: ``table.window(w).group_by(..., col('w'))``."""

    def __init__(self, kind: str, size: int = 0, slide: int = 0, gap: int = 0,
                 time_field: Expression | None = None, alias: str | None = None) -> None:
        self.kind, self.size, self.slide, self.gap = kind, size, slide, gap
        self.time_field, self.alias_name = time_field, alias

    def _with(self, **changes: Any) -> "GroupWindow":
        fields: dict[str, Any] = dict(kind=self.kind, size=self.size, slide=self.slide, gap=self.gap, time_field=self.time_field,
                      alias=self.alias_name)
        fields.update(changes)
        return GroupWindow(**fields)

    def on(self, time_field: Any) -> "GroupWindow":
        return self._with(time_field=as_expression(time_field))

    def alias(self, alias: Any) -> "GroupWindow":
        name = alias.value if isinstance(alias, Expression) else str(alias)
        return self._with(alias=name)

    def every(self, slide: Any) -> "GroupWindow":
        if self.kind != "hop":
            raise ValidationException("every() is for a sliding window (Slide.over(size).every(slide))")
        return self._with(slide=_interval_ms(slide, "Slide.every"))


class Tumble:
    @staticmethod
    def over(size: Any) -> GroupWindow:
        return GroupWindow("tumble", size=_interval_ms(size, "Tumble.over"))


class Slide:
    @staticmethod
    def over(size: Any) -> GroupWindow:
        return GroupWindow("hop", size=_interval_ms(size, "Slide.over"))


class Session:
    @staticmethod
    def with_gap(gap: Any) -> GroupWindow:
        return GroupWindow("session", gap=_interval_ms(gap, "Session.with_gap"))


class OverWindow:
    """An over window: partition keys, the time attribute it is ordered by, and how far back it
    reaches: ``preceding`` a row count (``row_interval(2)``), a time interval (``lit(1).hours``),
    or unbounded (``UNBOUNDED_ROW`` / ``UNBOUNDED_RANGE``, the default)."""

    def __init__(self, partition: tuple[Expression, ...] = (), order: Expression | None = None,
                 preceding: Expression | None = None, following: Expression | None = None,
                 alias: str | None = None) -> None:
        self.partition_keys, self.order_key = partition, order
        self.preceding_bound, self.following_bound, self.alias_name = preceding, following, alias

    def _with(self, **changes: Any) -> "OverWindow":
        fields: dict[str, Any] = dict(partition=self.partition_keys, order=self.order_key, preceding=self.preceding_bound,
                      following=self.following_bound, alias=self.alias_name)
        fields.update(changes)
        return OverWindow(**fields)

    def order_by(self, order_by: Any) -> "OverWindow":
        return self._with(order=as_expression(order_by))

    def preceding(self, preceding: Any) -> "OverWindow":
        return self._with(preceding=as_expression(preceding))

    def following(self, following: Any) -> "OverWindow":
        return self._with(following=as_expression(following))

    def alias(self, alias: Any) -> "OverWindow":
        return self._with(alias=alias.value if isinstance(alias, Expression) else str(alias))


class Over:
    @staticmethod
    def partition_by(*partition_by: Any) -> OverWindow:
        return OverWindow(tuple(as_expression(p) for p in partition_by))

    @staticmethod
    def order_by(order_by: Any) -> OverWindow:
        return OverWindow((), as_expression(order_by))
