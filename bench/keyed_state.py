"""Keyed-state access cost in one process, without Spark or sockets: ``python bench/keyed_state.py``.

Three figures for the hot path without TTL, per record: a keyed ``reduce`` vertex and a
``KeyedProcessFunction`` counting in a ``ValueState`` (both as real OperatorChains, the unit-test
harness pattern), and raw ``value()`` + ``update()`` on the heap backend. Then the raw pair on a
state with TTL, without and with Flink's default background cleanup (5 entries per access). 200,000
records over 5,000 keys; each figure is the minimum of ``--rounds`` runs (the machine is shared).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Callable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from millstream.common.time import Time  # noqa: E402
from millstream.datastream import KeyedProcessFunction, StreamExecutionEnvironment  # noqa: E402
from millstream.datastream.state import StateTtlConfig, ValueStateDescriptor  # noqa: E402
from millstream.runtime.keygroups import compute_key_group_range_for_operator_index  # noqa: E402
from millstream.runtime.state.heap_backend import KeyedStateBackend  # noqa: E402
from millstream.runtime.task.environment import STREAMING  # noqa: E402
from tests.unit.test_runtime_chain import collect, make_chain, vertex  # noqa: E402

N = 200_000
RECORDS = [(f"k{i % 5000}", i) for i in range(N)]


class Count(KeyedProcessFunction):
    def open(self, runtime_context: Any) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count", None))

    def process_element(self, value: Any, ctx: Any) -> Any:
        c = self.count.value()
        c = 1 if c is None else c + 1
        self.count.update(c)
        yield c


def chain_run(build: Callable[[Any], Any]) -> float:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    collect(build(env.from_collection(RECORDS).key_by(lambda r: r[0])))
    v = vertex(env, index=1)
    run = make_chain(v, runtime_mode=STREAMING)
    run.chain.open()
    target = v.inputs[0].target_node_id
    start = time.perf_counter()
    for i in range(0, N, 1000):
        run.chain.process_batch(RECORDS[i : i + 1000], target)
    return time.perf_counter() - start


def raw_run(ttl: StateTtlConfig | None) -> float:
    b = KeyedStateBackend(128, 1, compute_key_group_range_for_operator_index(128, 1, 0))
    descriptor = ValueStateDescriptor("count", None)
    if ttl is not None:
        descriptor.enable_time_to_live(ttl)
    state = b.get_value_state(descriptor)
    keys = [r[0] for r in RECORDS]
    key_groups = b.assign_key_groups(keys)
    start = time.perf_counter()
    for key, kg in zip(keys, key_groups):
        b.current_key, b.current_key_group = key, kg
        c = state.value()
        state.update(1 if c is None else c + 1)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    a = parser.parse_args()
    hour = Time.hours(1)
    cases: list[tuple[str, Callable[[], float]]] = [
        ("keyed reduce (chain)", lambda: chain_run(lambda ks: ks.reduce(lambda x, y: (x[0], x[1] + y[1])))),
        ("process + ValueState (chain)", lambda: chain_run(lambda ks: ks.process(Count()))),
        ("ValueState value+update", lambda: raw_run(None)),
        ("  with TTL, no background cleanup",
         lambda: raw_run(StateTtlConfig.new_builder(hour).disable_cleanup_in_background().build())),
        ("  with TTL, default cleanup", lambda: raw_run(StateTtlConfig.new_builder(hour).build())),
    ]
    for name, case in cases:
        best = min(case() for _ in range(a.rounds))
        print(f"{name:36s} {best * 1e9 / N:6.0f} ns/record")


if __name__ == "__main__":
    main()
