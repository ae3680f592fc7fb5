"""Pre-aggregation before a keyed exchange in BATCH mode (a combiner).

In BATCH mode a keyed reduce or aggregation emits one final value per key. Each producer can
therefore reduce its own records per key first and send one partial value per key and producer:
the consumer's reduce of the partials gives the same result, while the exchange carries thousands of
times fewer records for skewed keys (word count). Only aggregations that need no runtime context are
combined: the built-in ones and plain reduce callables (see JobGraphGenerator._combiner).
"""
from __future__ import annotations

from typing import Any, Callable

from millstream.runtime import factories as ops
from millstream.runtime.partitioners import key_function
from millstream.runtime.operators.base import OperatorError, make_aggregator

_MISSING = object()


class CombiningWriter:
    """A ResultWriter that reduces records per key and hands the partials on at ``finish``."""

    def __init__(self, writer: Any, factory: ops.OperatorFactory, key_selector: Any, operator_name: str) -> None:
        self._writer = writer
        self._factory = factory
        self._key = key_function(key_selector)
        self._name = operator_name
        self._acc: dict[Any, Any] = {}
        self._counts: dict[Any, Any] = {}  # the (x, count) fast path: running counts per key
        self._firsts: dict[Any, Any] = {}  # ... and each key's first record
        self._reduce: Callable[[Any, Any], Any] | None = None
        self._pairs = False
        self._watermark: int | None = None
        if isinstance(factory, ops.ReduceFactory):
            self._reduce = factory.function.fn

    def _resolve(self, sample: Any) -> None:
        factory: Any = self._factory
        self._reduce = make_aggregator(factory.aggregation, factory.field, sample)
        # (key, count) pairs summed on field 1: word count's shape, inlined below.
        self._pairs = factory.aggregation == "sum" and type(sample) is tuple and len(sample) == 2 and factory.field in (1, -1)

    def emit(self, records: list[Any]) -> None:
        if not records:
            return
        try:
            if self._reduce is None:
                self._resolve(records[0])
            acc, key, reduce = self._acc, self._key, self._reduce
            assert reduce is not None
            if self._pairs and set(map(type, records)) == {tuple} and set(map(len, records)) == {2}:
                self._sum_pairs(records)
                return
            if self._pairs:
                self._leave_pairs()
            for r in records:
                k = key(r)
                cur = acc.get(k, _MISSING)
                acc[k] = r if cur is _MISSING else reduce(cur, r)
        except Exception as exc:
            raise OperatorError(f"Operator '{self._name}' (pre-aggregation): {type(exc).__name__}: {exc}", self._name) from exc

    def _sum_pairs(self, records: list[Any]) -> None:
        """``sum(1)`` over ``(x, count)`` pairs, word count's shape: running counts live in a dict of
        plain numbers (no tuple per record), each key's first record is kept for its first field.
        Counts add up in record order, so the result equals the consumer's sequential sum."""
        key, counts, firsts = self._key, self._counts, self._firsts
        get = counts.get
        for r in records:
            k = key(r)
            c = get(k, _MISSING)
            if c is _MISSING:
                firsts[k] = r
                counts[k] = r[1]
            else:
                counts[k] = c + r[1]

    def _leave_pairs(self) -> None:
        """A record of another shape arrived: continue with whole records, as the consumer would."""
        self._pairs = False
        firsts = self._firsts
        self._acc.update((k, (firsts[k][0], c)) for k, c in self._counts.items())
        self._counts.clear()
        firsts.clear()

    def flush(self) -> None:
        pass  # partials are final only at the end of the input

    def emit_watermark(self, watermark: int) -> None:
        self._watermark = watermark  # sent after the partials: no record may follow the final one

    def emit_watermark_status(self, idle: bool) -> None:
        pass  # BATCH input: the partials follow at the end whatever the status

    def finish(self) -> None:
        if self._pairs:
            self._leave_pairs()
        partials = list(self._acc.values())
        self._acc.clear()
        for start in range(0, len(partials), 4096):
            self._writer.emit(partials[start : start + 4096])
        if self._watermark is not None:
            self._writer.emit_watermark(self._watermark)
        self._writer.finish()

    def __getattr__(self, name: str) -> Any:  # wait_consumed, counters, ...: the real writer's
        return getattr(self._writer, name)
