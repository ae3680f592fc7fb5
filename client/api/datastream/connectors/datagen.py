"""``DataGeneratorSource``: records from a function of their index, optionally rate-limited.

Flink's DataGeneratorSource for Python: ``generator_fn(index)`` for index 0, 1, ..., ``count``
records in all (None: unbounded), at most ``records_per_second`` in total across subtasks.

    env.from_source(DataGeneratorSource(lambda i: i, count=1000, records_per_second=100),
                    WatermarkStrategy.no_watermarks(), "numbers")
"""
from __future__ import annotations

from typing import Any, Callable

from millstream.runtime import operator_factories


class DataGeneratorSource:
    def __init__(
        self, generator_fn: Callable[[int], Any], count: int | None = None, records_per_second: float | None = None
    ) -> None:
        if not callable(generator_fn):
            raise TypeError("DataGeneratorSource needs a callable generator_fn(index)")
        if count is not None and count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        if records_per_second is not None and records_per_second <= 0:
            raise ValueError(f"records_per_second must be > 0, got {records_per_second}")
        self.generator_fn = generator_fn
        self.count = count
        self.records_per_second = records_per_second

    def _source_factory(self) -> operator_factories.SourceFactory:
        return operator_factories.GeneratorSourceFactory(
            generator_fn=self.generator_fn, records_per_second=self.records_per_second, count=self.count
        )
