"""Serialize + deserialize of one 1,024-record network buffer: the record serializer against the
plain ``pickle.dumps(protocol=5)`` / ``pickle.loads`` every exchange used before it.

``python bench/serialization.py`` prints µs per buffer (CPU time of this thread, best of many rounds, the two paths
interleaved so that a loaded machine slows both alike). Builtin records must cost the same on both
paths; user classes (which plain pickle cannot send from a worker at all) show the by-value cost.
"""
from __future__ import annotations

import pickle
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

from millstream.runtime.serialization import RecordSerializer, deserialize

RECORDS = 1024


@dataclass(frozen=True)
class Order:
    customer: str
    amount: int


def _best_us(fn: Callable[[], Any], rounds: int, loops: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.thread_time()
        for _ in range(loops):
            fn()
        best = min(best, (time.thread_time() - started) / loops)
    return best * 1e6


def main(rounds: int = 40, loops: int = 100) -> None:
    shapes = {
        "word count (str, int)": [(f"word{i}", i % 50) for i in range(RECORDS)],
        "exchange (int, 90-char str)": [(i, f"{i:090d}") for i in range(RECORDS)],
        "int": list(range(RECORDS)),
    }
    print(f"Python {sys.version.split()[0]}, {RECORDS} records per buffer, best of {rounds} rounds of {loops}, alternating")
    print(f"{'records':<30}{'pickle µs':>12}{'serializer µs':>15}{'ratio':>8}")
    for name, records in shapes.items():
        serializer = RecordSerializer()
        plain, new = float("inf"), float("inf")
        for _ in range(rounds):  # alternate the two paths round by round
            plain = min(plain, _best_us(lambda: pickle.loads(pickle.dumps(records, protocol=5)), 1, loops))
            new = min(new, _best_us(lambda: deserialize(serializer.serialize(records)), 1, loops))
        assert not serializer.by_value
        print(f"{name:<30}{plain:>12.1f}{new:>15.1f}{new / plain:>8.3f}")

    # User classes: by reference when importable (this module's Order), by value when not.
    importable = [Order(f"c{i % 50}", i) for i in range(RECORDS)]
    by_ref = _best_us(lambda: deserialize(RecordSerializer().serialize(importable)), rounds, loops // 4)
    Order.__qualname__ = "NotFindable"  # what a job script's class looks like from a Spark worker
    by_value_serializer = RecordSerializer()
    by_value = _best_us(lambda: deserialize(by_value_serializer.serialize(importable)), rounds, loops // 4)
    assert by_value_serializer.by_value
    size_value = len(by_value_serializer.serialize(importable))
    Order.__qualname__ = "Order"
    size_ref = len(pickle.dumps(importable, protocol=5))
    print(f"{'dataclass, by reference':<30}{by_ref:>12.1f}{'':>15}  {size_ref:,} bytes per buffer")
    print(f"{'dataclass, by value (fallback)':<30}{'':>12}{by_value:>15.1f}  {size_value:,} bytes per buffer")


if __name__ == "__main__":
    main()
