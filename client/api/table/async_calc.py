"""Async scalar functions of the Table API (PyFlink 2.3's ``AsyncScalarFunction`` and ``udf`` of an
``async def`` function) run in an async Calc.

A Calc calling one is translated to Millstream's async wait operator in ORDERED mode (Flink's
AsyncCalc keeps the input order): each row's coroutine runs on the operator's asyncio loop, up to
``table.exec.async-scalar.max-concurrent-operations`` rows are in flight, a call that does not end
within ``table.exec.async-scalar.timeout`` fails the job, and one that raises is made again after
``table.exec.async-scalar.retry-delay``, at most ``table.exec.async-scalar.max-attempts`` times
(``retry-strategy`` FIXED_DELAY; NO_RETRY fails at once). The rows in flight are part of each
checkpoint, as any async operator's.
"""
from __future__ import annotations

from typing import Any, Sequence

from millstream.common.row import Row
from millstream.datastream import async_retry_predicates, async_retry_strategies
from millstream.datastream.functions import AsyncFunction
from millstream.runtime import config as cfg
from millstream.table.expression import Resolved, TableException

__all__ = ["AsyncCalc", "has_async_udf", "is_async_udf", "async_options"]


def is_async_udf(e: Resolved) -> bool:
    return e.kind == "udf" and getattr(e.value, "func_type", "general") == "async"


def has_async_udf(e: Resolved | None) -> bool:
    return e is not None and (is_async_udf(e) or any(has_async_udf(a) for a in e.args))


class AsyncCalc(AsyncFunction):
    """One row through a Calc whose expressions call async scalar functions: each call (innermost
    first) is awaited into an extra column of the row, then the filter and the projection read them.
    Calls in the projection are made only for rows the filter keeps."""

    def __init__(self, projections: Sequence[Resolved], condition: Resolved | None, width: int) -> None:
        self.width = width
        self.calls: list[tuple[Any, tuple[Resolved, ...]]] = []
        self.condition = self._lift(condition) if condition is not None else None
        self.condition_calls = len(self.calls)
        self.projections = tuple(self._lift(p) for p in projections)

    def _lift(self, e: Resolved) -> Resolved:
        if e.kind == "udf" and getattr(e.value, "func_type", "general") == "pandas":
            raise TableException(f"{e.text}: a pandas function and an async function cannot be called in one "
                                 "projection; select the async function's result first")
        args = tuple(self._lift(a) for a in e.args)
        if is_async_udf(e):
            self.calls.append((e.value, args))
            return Resolved("ref", e.dtype, value=self.width + len(self.calls) - 1, text=e.text)
        return Resolved(e.kind, e.dtype, args, e.value, e.text) if args != e.args else e

    async def _fill(self, row: list[Any], calls: range) -> None:
        for i in calls:
            wrapper, args = self.calls[i]
            row[self.width + i] = await wrapper.eval(*[a.eval(row) for a in args])

    async def async_invoke(self, value: Row) -> list[Row]:
        row = list(value) + [None] * len(self.calls)
        if self.condition is not None:
            await self._fill(row, range(self.condition_calls))
            if self.condition.eval(row) is not True:
                return []
        await self._fill(row, range(self.condition_calls, len(self.calls)))
        out = Row(*[p.eval(row) for p in self.projections])
        out.set_row_kind(value.get_row_kind())
        return [out]

    def timeout(self, value: Row) -> list[Row]:
        names = ", ".join(w.name for w, _ in self.calls)
        raise TimeoutError(f"Async scalar function call ({names}) did not complete within "
                           f"table.exec.async-scalar.timeout for the row {value!r}")

    def close(self) -> None:
        for wrapper, _ in self.calls:
            wrapper.close()


def async_options(table_options: dict[str, Any]) -> dict[str, Any]:
    """The ``table.exec.async-scalar.*`` values among a TableConfig's options (defaults when unset)."""
    conf = cfg.Configuration.from_dict(table_options)
    return {"capacity": conf.get(cfg.ASYNC_SCALAR_MAX_CONCURRENT_OPERATIONS),
            "timeout_ms": conf.get(cfg.ASYNC_SCALAR_TIMEOUT),
            "strategy": conf.get(cfg.ASYNC_SCALAR_RETRY_STRATEGY),
            "delay_ms": conf.get(cfg.ASYNC_SCALAR_RETRY_DELAY),
            "max_attempts": conf.get(cfg.ASYNC_SCALAR_MAX_ATTEMPTS)}


def retry_strategy(options: dict[str, Any]) -> Any:
    if options["strategy"] == "NO_RETRY" or options["max_attempts"] <= 0:
        return async_retry_strategies.NO_RETRY_STRATEGY
    return async_retry_strategies.FixedDelayRetryStrategy(
        options["max_attempts"], max(1, options["delay_ms"]), None, async_retry_predicates.has_exception_predicate)
