"""Profiles the windows benchmark's job (bench/windows.py) in one process, stage by stage, without
Spark or sockets: ``python bench/window_profile.py [--events N] [--profile STAGE]``.

The job is the benchmark's: CSV lines -> map(parse) -> assign_timestamps_and_watermarks(bounded
out-of-orderness 5 s) -> key_by(user) -> 10 s tumbling event-time windows -> reduce + a
WindowFunction adding the window's start. Its two JobVertices run as real OperatorChains (the
unit-test harness pattern): the source vertex gets batches of ``--batch`` lines with the manual
clock advancing ``--ms-per-batch`` after each (so periodic watermarks come every
``auto-watermark-interval / ms-per-batch`` batches), its keyed output goes through a real
ResultPartition (routing, staging, pickling into buffers), and each buffer and watermark is decoded
as the input gate does and fed to the window chain of its subtask (``--parallelism`` of them).

Stages timed: ``upstream`` (source chain: parse, timestamps, watermarks, routing, serializing),
``decode`` (unpickling buffers), ``window`` (window chains: records and watermarks, firing, the
window function, the collect sink). Stage times are this thread's CPU time, so that other work on a
busy machine counts less; the wall time of the whole run is printed too. The windows' sums are checked against a plain loop, and a
digest of every result with its timestamp is printed, so two versions can be compared exactly.
"""
from __future__ import annotations

import argparse
import cProfile
import hashlib
import pstats
import random
import time
from typing import Any

from millstream.common import Duration, Time, Types, WatermarkStrategy
from millstream.common.watermark_strategy import TimestampAssigner
from millstream.datastream import StreamExecutionEnvironment, WindowFunction
from millstream.datastream.window import EventTimeSessionWindows, TumblingEventTimeWindows
from millstream.runtime import operator_factories
from millstream.runtime.task.chain import OperatorChain
from millstream.runtime.task.environment import ManualClock, SimpleTaskEnvironment
from millstream.runtime.network.partition import ResultPartition
from millstream.runtime.network.protocol import BUFFER, Watermark, decode_buffer, decode_event
from millstream.taskmanager.spark.daemon import tune_gc

import cloudpickle

START_MS = 1_700_000_000_000
WINDOW_MS = 10_000
DISORDER_MS = 5_000
EVENTS_PER_MS = 10


def lines(events: int, users: int, seed: int) -> list[str]:
    """The benchmark's input: the base time advances 1 ms every 10 events, each event up to 5 s behind it."""
    rng = random.Random(seed)
    r = rng.random
    return [f"{START_MS + i // EVENTS_PER_MS - int(r() * (DISORDER_MS + 1))},{int(r() * users)},{int(r() * 100)}"
            for i in range(events)]


class EventTime(TimestampAssigner):
    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return value[0]


class WithWindowStart(WindowFunction):
    def apply(self, key: Any, window: Any, inputs: Any) -> Any:
        for _, _, total in inputs:
            yield key, window.start, total


def parse(line: str) -> tuple[int, int, int]:
    ts, user, value = line.split(",")
    return int(ts), int(user), int(value)


def job(parallelism: int, session_gap_ms: int = 0) -> Any:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_seconds(5)).with_timestamp_assigner(EventTime())
    result = (env.from_collection(["0,0,0"]).set_parallelism(1)
              .map(parse, output_type=Types.TUPLE([Types.LONG(), Types.INT(), Types.INT()])).set_parallelism(1)
              .assign_timestamps_and_watermarks(strategy).set_parallelism(1)
              .key_by(lambda e: e[1], key_type=Types.INT())
              .window(EventTimeSessionWindows.with_gap(Time.milliseconds(session_gap_ms)) if session_gap_ms
                      else TumblingEventTimeWindows.of(Time.seconds(10)))
              .reduce(lambda a, b: (a[0], a[1], a[2] + b[2]), window_function=WithWindowStart(),
                      output_type=Types.TUPLE([Types.INT(), Types.LONG(), Types.LONG()])))
    result._sink("Collect Sink", operator_factories.CollectSinkFactory(collect_id="out"))
    return env.get_job_graph().proto


def chain_of(v: Any, subtask: int, clock: ManualClock, writers: dict[bytes, Any]) -> tuple[OperatorChain, Any]:
    env = SimpleTaskEnvironment(task_name=v.name, subtask_index=subtask, clock=clock, parallelism=v.parallelism,
                                max_parallelism=v.max_parallelism, print_sink=lambda lines, to_stderr: None)
    return OperatorChain(v, env, writers), env


def run(events: int, users: int, batch: int, ms_per_batch: int, parallelism: int, seed: int,
        profile: str | None, session_gap_ms: int = 0) -> dict[str, Any]:
    data = lines(events, users, seed)
    graph = job(parallelism, session_gap_ms)
    source_v, window_v = graph.vertices[0], graph.vertices[1]
    assert "Window" in window_v.name, [v.name for v in graph.vertices]
    clock = ManualClock(0)
    (ds,) = source_v.produced
    partitioner = cloudpickle.loads(ds.partitioner.payload)
    partition = ResultPartition(ds.id, 0, parallelism, partitioner, b"attempt", records_per_buffer=1024,
                                max_backlog_per_subpartition=1 << 30)
    up, _ = chain_of(source_v, 0, clock, {ds.id: partition})
    windows = [chain_of(window_v, s, clock, {}) for s in range(parallelism)]
    target = window_v.inputs[0].target_node_id
    up.open()
    for w, _ in windows:
        w.open()
    source = up.head
    times = {"upstream": 0.0, "decode": 0.0, "window": 0.0}
    profiler = cProfile.Profile() if profile else None
    perf = time.thread_time  # CPU time: other processes on a busy machine do not count

    def timed(stage: str, f: Any, *args: Any) -> Any:
        if profiler is not None and stage == profile:
            profiler.enable()
        t0 = perf()
        try:
            return f(*args)
        finally:
            times[stage] += perf() - t0
            if profiler is not None and stage == profile:
                profiler.disable()

    def drain() -> None:
        for sub, (w, _) in zip(partition._subs, windows):
            queue = sub.queue
            while queue:
                _, frame = queue.popleft() if hasattr(queue, "popleft") else queue.pop(0)
                kind, payload = frame[0], frame[5:]
                if kind == BUFFER:
                    records = timed("decode", decode_buffer, payload)
                    timed("window", w.process_batch, records, target)
                    timed("window", w.between_batches)
                else:
                    event = decode_event(payload)
                    if isinstance(event, Watermark):
                        timed("window", w.process_watermark, event.timestamp)
            sub.queued_buffers = 0

    for i in range(0, len(data), batch):
        timed("upstream", source.emit_batch, data[i:i + batch])
        clock.advance(ms_per_batch)
        timed("upstream", up.between_batches)
        drain()
    timed("upstream", up.end_input)
    timed("upstream", partition.finish)
    drain()
    for w, _ in windows:
        timed("window", w.end_input)
        w.close()
    up.close()

    results = [r for _, env in windows for r in env.collected.get("out", [])]
    truth: dict[tuple[int, int], int] = {}
    for line in data:
        ts, user, value = parse(line)
        k = (user, ts - ts % WINDOW_MS)
        truth[k] = truth.get(k, 0) + value
    got = {(u, s): t for u, s, t in results}
    if not session_gap_ms:  # sessions: compare the digest of two versions instead
        assert len(got) == len(results) and got == truth, "the windows' sums differ from the plain loop"
    digest = hashlib.sha256(repr(sorted(results)).encode()).hexdigest()[:16]
    total = sum(times.values())
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    return {"events": events, "windows": len(results), "total_s": total, "records_per_s": events / total,
            **{f"{k}_s": v for k, v in times.items()}, "digest": digest}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--users", type=int, default=10_000)
    p.add_argument("--batch", type=int, default=1000)
    p.add_argument("--ms-per-batch", type=int, default=5, help="manual clock advance per source batch")
    p.add_argument("--parallelism", type=int, default=2, help="window subtasks (all run in this process)")
    p.add_argument("--seed", type=int, default=10)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--profile", choices=("upstream", "decode", "window"), help="cProfile one stage")
    p.add_argument("--session-gap-ms", type=int, default=0,
                   help="event-time session windows of this gap instead of the 10 s tumbling ones (q11's shape)")
    a = p.parse_args()
    tune_gc()  # the collector as a TaskManager's Python workers run it
    for _ in range(a.runs):
        wall = time.perf_counter()
        r = run(a.events, a.users, a.batch, a.ms_per_batch, a.parallelism, a.seed, a.profile, a.session_gap_ms)
        wall = time.perf_counter() - wall
        stages = "  ".join(f"{k} {r[k + '_s']:.2f} s" for k in ("upstream", "decode", "window"))
        print(f"{r['events']:,} events, {r['windows']:,} windows: {r['total_s']:.2f} s, {r['records_per_s']:,.0f} records/s"
              f" CPU ({stages}; window stage alone {r['events'] / r['window_s']:,.0f} records/s; wall incl. set-up {wall:.1f} s)"
              f" digest {r['digest']}")


if __name__ == "__main__":
    main()
