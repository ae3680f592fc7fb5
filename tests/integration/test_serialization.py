"""Records made in another process come back as the client's own class
(tests/unit/test_serialization.py has the in-process rules)."""
from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from typing import Any

import cloudpickle

from millstream.runtime.serialization import deserialize


def test_records_made_in_another_process_come_back_as_the_clients_own_class() -> None:
    Order = main_class()

    def make(start: int, end: int) -> list[Any]:
        return [Order(f"c{i}", i) for i in range(start, end)]

    worker = subprocess.run([sys.executable, "-c", WORKER], input=cloudpickle.dumps(make), capture_output=True, timeout=60)
    assert worker.returncode == 0, worker.stderr.decode()[-2000:]
    result = [r for data in pickle.loads(worker.stdout) for r in deserialize(data)]
    assert result == [Order(f"c{i}", i) for i in range(5)]
    assert all(type(r) is Order for r in result)


def main_class() -> type:
    """A dataclass as a job script defines it, seen from a process where ``__main__`` is not that
    script (a Spark worker; here pytest): the C pickler cannot find it by reference."""

    @dataclass(frozen=True)
    class Order:
        customer: str
        amount: int

    Order.__module__ = "__main__"
    Order.__qualname__ = "Order"
    return Order

WORKER = textwrap.dedent("""
    import pickle, sys
    import cloudpickle
    from millstream.runtime.serialization import RecordSerializer, deserialize

    make = cloudpickle.loads(sys.stdin.buffer.read())   # the job's function, as a task loads it
    s = RecordSerializer()
    buffers = [s.serialize(make(0, 3)), s.serialize(make(3, 5))]
    # One class per process: records unpickled from a buffer are instances of the class the task's
    # own functions use.
    assert type(deserialize(buffers[1])[0]) is type(make(0, 1)[0])
    sys.stdout.buffer.write(pickle.dumps(buffers))
""")
