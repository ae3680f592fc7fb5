"""Keyed-state access cost in one process, without Spark or sockets: ``python bench/keyed_state.py``.

Three figures for the hot path without TTL, per record: a keyed ``reduce`` vertex and a
``KeyedProcessFunction`` counting in a ``ValueState`` (both as real OperatorChains, the unit-test
harness pattern), and raw ``value()`` + ``update()`` on the heap backend. Then the raw pair on a
state with TTL, without and with Flink's default background cleanup (5 entries per access). 200,000
records over 5,000 keys; each figure is the minimum of ``--rounds`` runs (the machine is shared).

Then the same keyed updates on the embedded RocksDB backend (``state.backend.type: rocksdb``): the
reduce and ValueState chains and the raw pair, as updates/s against the heap's; the memory a
process gains holding 1 M keys of 200-byte values on each backend (RSS growth); and, for that state,
a full checkpoint against an incremental one after 1 % of the keys changed (bytes written, seconds
on the task thread and in all).
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
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


def _rocksdb_params(local: str) -> dict[str, str]:
    return {"state.backend.type": "rocksdb", "state.backend.rocksdb.localdir": local}


def chain_run(build: Callable[[Any], Any], backend: str = "hashmap") -> float:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    collect(build(env.from_collection(RECORDS).key_by(lambda r: r[0])))
    v = vertex(env, index=1)
    with tempfile.TemporaryDirectory() as local:
        params = _rocksdb_params(local) if backend == "rocksdb" else {}
        run = make_chain(v, runtime_mode=STREAMING, job_parameters=params)
        run.chain.open()
        target = v.inputs[0].target_node_id
        start = time.perf_counter()
        for i in range(0, N, 1000):
            run.chain.process_batch(RECORDS[i : i + 1000], target)
        took = time.perf_counter() - start
        run.chain.close()
    return took


def _backend(kind: str, local: str) -> Any:
    kgr = compute_key_group_range_for_operator_index(128, 1, 0)
    if kind == "hashmap":
        return KeyedStateBackend(128, 1, kgr)
    from millstream.runtime.state.rocksdb_backend import RocksDBKeyedStateBackend, RocksDBOptions, TaskRocksDB

    return RocksDBKeyedStateBackend(TaskRocksDB(os.path.join(local, "db"), RocksDBOptions(local)), "op", 128, 1, kgr)


def raw_run(ttl: StateTtlConfig | None, kind: str = "hashmap") -> float:
    with tempfile.TemporaryDirectory() as local:
        b = _backend(kind, local)
        try:
            return _raw_run(ttl, b)
        finally:
            if kind == "rocksdb":
                b.db.close()


def _raw_run(ttl: StateTtlConfig | None, b: Any) -> float:
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


def rss_growth(kind: str, keys: int = 1_000_000) -> float:
    """MB of resident memory a fresh process gains writing ``keys`` keys of 200-byte values."""
    out = subprocess.run([sys.executable, __file__, "--rss", kind, str(keys)], capture_output=True, text=True, check=True)
    return float(out.stdout.split()[-1])


def _rss_child(kind: str, keys: int) -> None:
    def rss_mb() -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize() / 1e6

    with tempfile.TemporaryDirectory() as local:
        b = _backend(kind, local)
        state = b.get_value_state(ValueStateDescriptor("v", None))
        before = rss_mb()
        for i in range(0, keys, 10_000):
            chunk = [f"key-{j}" for j in range(i, min(i + 10_000, keys))]
            for key, kg in zip(chunk, b.assign_key_groups(chunk)):
                b.current_key, b.current_key_group = key, kg
                state.update(f"{kg:04d}{key:>196}")  # 200 characters, a distinct object per key
        print(rss_mb() - before)


def checkpoint_sizes(keys: int = 500_000, changed: float = 0.01) -> dict[str, float]:
    """A full checkpoint of ``keys`` keys against an incremental one after ``changed`` of them
    changed, through the task's real checkpointer: bytes written and seconds (task thread, total)."""
    from millstream.runtime.task.barrier_handler import CheckpointBarrier
    from millstream.runtime.task.checkpointing import TaskCheckpointer

    out: dict[str, float] = {}
    for mode in ("full", "incremental"):
        with tempfile.TemporaryDirectory() as tmp:
            env = StreamExecutionEnvironment.get_execution_environment()
            env.set_parallelism(1)
            collect(env.from_collection([("a", 1)]).key_by(lambda r: r[0]).reduce(lambda x, y: (x[0], x[1] + y[1])))
            v = vertex(env, index=1)
            params = {**_rocksdb_params(os.path.join(tmp, "local")),
                      "execution.checkpointing.incremental": "true" if mode == "incremental" else "false"}
            run = make_chain(v, runtime_mode=STREAMING, job_parameters=params)
            run.chain.open()
            sent: list[Any] = []
            cp = TaskCheckpointer(run.chain, lambda e: None, os.path.join(tmp, "chk"), b"b" * 16, sent.append)
            target = v.inputs[0].target_node_id
            records = [(f"key-{i}", 1) for i in range(keys)]
            for i in range(0, keys, 10_000):
                run.chain.process_batch(records[i:i + 10_000], target)
            cp.checkpoint(CheckpointBarrier(1, 0), forward=False)
            cp._writer.submit(lambda: None).result()
            cp.notify(1, aborted=False)
            step = int(1 / changed)
            run.chain.process_batch(records[::step], target)

            def disk() -> int:
                return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(os.path.join(tmp, "chk")) for f in fs)

            written = disk()
            start = time.perf_counter()
            cp.checkpoint(CheckpointBarrier(2, 0), forward=False)
            sync = time.perf_counter() - start
            cp._writer.submit(lambda: None).result()
            total = time.perf_counter() - start
            out[f"{mode}_mb"] = (disk() - written) / 1e6
            out[f"{mode}_sync_s"] = sync
            out[f"{mode}_total_s"] = total
            run.chain.close()
            cp.close()
    return out


def report(rounds: int = 3) -> dict[str, float]:
    """Updates/s per case and backend, RSS growth, checkpoint sizes (the README table's figures)."""
    r: dict[str, float] = {}
    for kind in ("hashmap", "rocksdb"):
        r[f"reduce_{kind}"] = N / min(chain_run(lambda ks: ks.reduce(lambda x, y: (x[0], x[1] + y[1])), kind)
                                      for _ in range(rounds))
        r[f"process_{kind}"] = N / min(chain_run(lambda ks: ks.process(Count()), kind) for _ in range(rounds))
        r[f"raw_{kind}"] = N / min(raw_run(None, kind) for _ in range(rounds))
        r[f"rss_{kind}_mb"] = rss_growth(kind)
    r.update(checkpoint_sizes())
    return r


def headline(r: dict[str, float]) -> list:
    from table import Figure

    return [
        Figure("keyed_state.reduce_heap", "keyed reduce, heap backend", r["reduce_hashmap"], "updates/s", "higher"),
        Figure("keyed_state.reduce_rocksdb", "keyed reduce, RocksDB backend", r["reduce_rocksdb"], "updates/s", "higher"),
        Figure("keyed_state.process_heap", "process function ValueState update, heap", r["process_hashmap"],
               "updates/s", "higher"),
        Figure("keyed_state.process_rocksdb", "process function ValueState update, RocksDB", r["process_rocksdb"],
               "updates/s", "higher"),
        Figure("keyed_state.rss_heap_mb", "RSS gained by 1 M keys x 200 B, heap", r["rss_hashmap_mb"], "MB", "lower"),
        Figure("keyed_state.rss_rocksdb_mb", "RSS gained by 1 M keys x 200 B, RocksDB", r["rss_rocksdb_mb"], "MB", "lower"),
        Figure("keyed_state.full_checkpoint_mb", "RocksDB checkpoint of 500 k keys after 1 % changed, full",
               r["full_mb"], "MB", "lower"),
        Figure("keyed_state.incremental_checkpoint_mb", "... incremental", r["incremental_mb"], "MB", "lower"),
        Figure("keyed_state.full_checkpoint_sync_s", "... full: time on the task thread", r["full_sync_s"], "s", "lower"),
        Figure("keyed_state.incremental_checkpoint_sync_s", "... incremental: time on the task thread",
               r["incremental_sync_s"], "s", "lower"),
        Figure("keyed_state.incremental_checkpoint_total_s", "... incremental: time with the upload",
               r["incremental_total_s"], "s", "lower"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rss", nargs=2, help=argparse.SUPPRESS)
    a = parser.parse_args()
    if a.rss:
        _rss_child(a.rss[0], int(a.rss[1]))
        return
    hour = Time.hours(1)
    cases: list[tuple[str, Callable[[], float]]] = [
        ("keyed reduce (chain)", lambda: chain_run(lambda ks: ks.reduce(lambda x, y: (x[0], x[1] + y[1])))),
        ("process + ValueState (chain)", lambda: chain_run(lambda ks: ks.process(Count()))),
        ("ValueState value+update", lambda: raw_run(None)),
        ("  with TTL, no background cleanup",
         lambda: raw_run(StateTtlConfig.new_builder(hour).disable_cleanup_in_background().build())),
        ("  with TTL, default cleanup", lambda: raw_run(StateTtlConfig.new_builder(hour).build())),
        ("keyed reduce (chain), RocksDB", lambda: chain_run(lambda ks: ks.reduce(lambda x, y: (x[0], x[1] + y[1])),
                                                            "rocksdb")),
        ("process + ValueState (chain), RocksDB", lambda: chain_run(lambda ks: ks.process(Count()), "rocksdb")),
        ("ValueState value+update, RocksDB", lambda: raw_run(None, "rocksdb")),
    ]
    for name, case in cases:
        best = min(case() for _ in range(a.rounds))
        print(f"{name:36s} {best * 1e9 / N:6.0f} ns/record")


if __name__ == "__main__":
    main()
