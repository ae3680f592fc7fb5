"""Profiles word count's producer chain (file source -> split -> combiner -> keyed partition) in
one process, without Spark or sockets: ``python bench/wordcount_profile.py [FILE] [--profile]``.

The job is examples/word_count.py's, BATCH mode, parallelism 2. Subtask 0 of the source vertex runs
as a real OperatorChain (the unit-test harness pattern) over its split of FILE, through the
BATCH combiner into a real
ResultPartition (routing, staging, pickling into buffers) whose queues are emptied as they fill.
Its CPU time is compared with ``collections.Counter`` over the same half of the file, the per-core
floor the issue's "records per second per core" target is measured against.
"""
from __future__ import annotations

import argparse
import collections
import cProfile
import os
import pstats
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

import cloudpickle  # noqa: E402

from millstream.datastream import RuntimeExecutionMode, StreamExecutionEnvironment  # noqa: E402
from millstream.runtime.operators.combiner import CombiningWriter  # noqa: E402
from millstream.runtime.task.chain import OperatorChain  # noqa: E402
from millstream.runtime.task.environment import SimpleTaskEnvironment  # noqa: E402
from millstream.runtime.network.partition import ResultPartition  # noqa: E402


def producer_chain(path: str, parallelism: int) -> tuple[OperatorChain, ResultPartition]:
    from word_count import build

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    env.set_parallelism(parallelism)
    build(env, path, None)
    graph = env.get_job_graph("word count profile").proto
    source_v = graph.vertices[0]
    (ds,) = source_v.produced
    partition = ResultPartition(ds.id, 0, parallelism, cloudpickle.loads(ds.partitioner.payload), b"attempt",
                                records_per_buffer=1024, max_backlog_per_subpartition=1 << 30)
    writer = partition
    if ds.combiner:  # as taskmanager/task_body.py wires it
        writer = CombiningWriter(partition, cloudpickle.loads(ds.combiner), partition.partitioner.key_selector, "combiner")
    task_env = SimpleTaskEnvironment(task_name=source_v.name, subtask_index=0, parallelism=parallelism,
                                     max_parallelism=source_v.max_parallelism, runtime_mode="BATCH",
                                     print_sink=lambda lines, to_stderr: None)
    return OperatorChain(source_v, task_env, {ds.id: writer}), partition


def drain(partition: ResultPartition) -> int:
    frames = 0
    for sub in partition._subs:
        frames += len(sub.queue)
        sub.queue.clear()
        sub.queued_buffers = 0
    return frames


def run_chain(path: str, parallelism: int, profile: bool) -> float:
    chain, partition = producer_chain(path, parallelism)
    chain.housekeeping = lambda: drain(partition)
    profiler = cProfile.Profile() if profile else None
    started = time.thread_time()
    if profiler:
        profiler.enable()
    chain.open()
    assert chain.run_source()
    chain.end_input()
    partition.finish()
    drain(partition)
    chain.close()
    if profiler:
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(20)
    return time.thread_time() - started


def run_counter(path: str, parallelism: int) -> tuple[float, int]:
    """Counter over the bytes subtask 0 reads (the first 1/parallelism of the file, to a line end)."""
    size = os.path.getsize(path)
    started = time.thread_time()
    counts: collections.Counter[str] = collections.Counter()
    with open(path, encoding="utf-8") as f:
        for line in f:
            counts.update(line.split())
            if f.buffer.tell() >= size // parallelism:  # text I/O reads ahead: roughly half
                break
    return time.thread_time() - started, sum(counts.values())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("path", nargs="?", default=os.path.join(os.path.dirname(HERE), "data", "corpus-20mb.txt"))
    p.add_argument("--parallelism", type=int, default=2)
    p.add_argument("--profile", action="store_true", help="print cProfile's top functions of the chain")
    a = p.parse_args()
    chain_s = run_chain(a.path, a.parallelism, a.profile)
    counter_s, _ = run_counter(a.path, a.parallelism)
    print(f"producer chain (subtask 0 of {a.parallelism}) {chain_s:.2f} s CPU; Counter over about the same half "
          f"{counter_s:.2f} s CPU: chain at {counter_s / chain_s:.0%} of the Counter's rate")


if __name__ == "__main__":
    main()
