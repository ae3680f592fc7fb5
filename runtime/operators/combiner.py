"""Pre-aggregation before a keyed exchange in BATCH mode (a combiner).

In BATCH mode a keyed reduce or aggregation emits one final value per key. Each producer can
therefore reduce its own records per key first and send one partial value per key and producer:
the consumer's reduce of the partials gives the same result, while the exchange carries thousands of
times fewer records for skewed keys (word count). Only aggregations that need no runtime context are
combined: the built-in ones and plain reduce callables (see JobGraphGenerator._combiner).
"""
from __future__ import annotations

import collections
from operator import countOf, itemgetter
from typing import Any, Callable

from millstream.runtime import operator_factories
from millstream.runtime.keys import hashable_key, hashable_keys
from millstream.runtime.partitioners import key_function
from millstream.runtime.subscripts import subscript_of
from millstream.runtime.operators.base import OperatorError, make_aggregator

_MISSING = object()
_first, _second = itemgetter(0), itemgetter(1)


def _hashable(value: Any) -> bool:
    try:
        hash(value)
        return True
    except TypeError:
        return False


def _all_pairs(records: list[Any]) -> bool:
    """Whether every record is a plain tuple (not a subclass) of two fields: C-level passes that
    count instead of building sets (~25 against ~30 ns a record each)."""
    n = len(records)
    return countOf(map(type, records), tuple) == n and countOf(map(len, records), 2) == n


def _all_ones(pairs: list[tuple[Any, Any]]) -> bool:
    """Whether the second field of every pair is the int 1 (not True, 1.0 or another number equal
    to it: the consumer's sum would keep their types)."""
    increments = list(map(_second, pairs))
    n = len(increments)
    return increments.count(1) == n and countOf(map(type, increments), int) == n


class CombiningWriter:
    """A ResultWriter that reduces records per key and hands the partials on at ``finish``."""

    def __init__(self, writer: Any, factory: operator_factories.OperatorFactory, key_selector: Any, operator_name: str) -> None:
        self._writer = writer
        self._factory = factory
        self._key = key_function(key_selector)
        self._name = operator_name
        self._acc: dict[Any, Any] = {}
        self._counts: collections.Counter[Any] = collections.Counter()  # the (x, count) fast path: running counts per key
        self._firsts: dict[Any, Any] = {}  # ... and each key's first record
        # Keyed by ``lambda r: r[0]`` (word count's shape): a key is the first field, and the dict
        # keeps the first record's own key object, so no first record needs keeping.
        field = subscript_of(self._key)
        self._by_field_0 = type(field) is int and field == 0
        self._reduce: Callable[[Any, Any], Any] | None = None
        self._pairs = False
        self._watermark: int | None = None
        if isinstance(factory, operator_factories.ReduceFactory):
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
            if self._pairs and _all_pairs(records):
                self._sum_pairs(records)
                return
            if self._pairs:
                self._leave_pairs()
            for r in records:
                k = key(r)
                try:
                    cur = acc.get(k, _MISSING)
                except TypeError:  # a list, dict or set key (PyFlink accepts them): its hashable twin
                    k = hashable_key(k)
                    cur = acc.get(k, _MISSING)
                acc[k] = r if cur is _MISSING else reduce(cur, r)
        except Exception as exc:
            raise OperatorError(f"Operator '{self._name}' (pre-aggregation): {type(exc).__name__}: {exc}", self._name) from exc

    def _sum_pairs(self, records: list[Any]) -> None:
        """``sum(1)`` over ``(x, count)`` pairs, word count's shape: running counts live in a dict of
        plain numbers (no tuple per record), each key's first record is kept for its first field.
        Counts add up in record order, so the result equals the consumer's sequential sum. Keyed by
        the first field and every count exactly the int 1 (``(word, 1)``), a batch is a C-level
        count of its keys: integer sums do not depend on their order."""
        key, counts, firsts = self._key, self._counts, self._firsts
        if self._by_field_0 and _all_ones(records):
            self._count_keys(records)
            return
        get = counts.get
        by_field_0 = self._by_field_0
        for r in records:
            k = key(r)
            try:
                c = get(k, _MISSING)
            except TypeError:  # as in emit: an unhashable key's twin
                k = hashable_key(k)
                c = get(k, _MISSING)
            if c is _MISSING:
                if not by_field_0:
                    firsts[k] = r
                counts[k] = r[1]
            else:
                counts[k] = c + r[1]

    def _count_keys(self, records: list[Any]) -> None:
        """Every record is ``(key, 1)``: a C-level count of the keys."""
        counts = self._counts
        try:
            counts.update(map(_first, records))
        except TypeError:  # an unhashable key: the records before it are counted, the rest by twin
            first_bad = next(i for i, r in enumerate(records) if not _hashable(r[0]))
            counts.update(hashable_keys(list(map(_first, records[first_bad:]))))

    def emit_unnarrowed(self, records: list[Any], narrow: Callable[[list[Any]], list[Any]]) -> None:
        """``records`` as the producing operator emitted them, before ``narrow``, Java's narrowing of
        its declared output type (runtime.narrowing.batch_narrower). A batch of plain ``(key, 1)``
        pairs counted by key needs none when the type's integers are at most its count field: the
        int 1 is in range for every integer type, and the narrowing changes nothing else. So the
        count path's own check stands for the narrowing's; any other batch is narrowed first."""
        if records and self._pairs and self._by_field_0 and set(getattr(narrow, "int_fields", None) or (0,)) <= {1}:
            try:
                if _all_pairs(records) and _all_ones(records):
                    self._count_keys(records)
                    return
            except Exception as exc:
                raise OperatorError(f"Operator '{self._name}' (pre-aggregation): {type(exc).__name__}: {exc}", self._name) from exc
        self.emit(narrow(records))

    def _leave_pairs(self) -> None:
        """A record of another shape arrived: continue with whole records, as the consumer would."""
        self._pairs = False
        firsts = self._firsts
        if self._by_field_0:
            self._acc.update((k, (k, c)) for k, c in self._counts.items())
        else:
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
