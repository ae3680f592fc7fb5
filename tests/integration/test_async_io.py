"""Async I/O on a real cluster (JobManager, TaskManager, Spark): AsyncDataStream with PyFlink's
AsyncFunction — order, skewed latencies, capacity, timeout, retries, and exactly-once output after
a failover with calls in flight."""
from __future__ import annotations

import asyncio
import functools
import os
import random
import sys
import time

import pytest

from millstream.client.execution import JobExecutionException
from millstream.common import Encoder, Time, WatermarkStrategy
from millstream.common.restart_strategy import RestartStrategies
from millstream.datastream import AsyncDataStream, AsyncFunction, AsyncRetryStrategy, StreamExecutionEnvironment
from millstream.datastream import async_retry_predicates
from millstream.datastream.connectors.datagen import DataGeneratorSource
from millstream.datastream.connectors.file_system import FileSink
from millstream.runtime.execution_state import JobStatus

from .harness import ClusterSpec, jobmanager_env
from .jobs import KEYS, FailWhenMarked, assert_exactly_once, fail_after_checkpoints

pytestmark = pytest.mark.timeout(240)
CLUSTER = ClusterSpec(slots=4, tasks_per_slot=3, checkpoints=True)


def collected(cluster, stream) -> list:
    with jobmanager_env(cluster.address), stream.execute_and_collect("async io") as results:
        return list(results)


class Lookup(AsyncFunction):
    """A remote lookup: ``value -> [(value, finished_at, peak calls in flight)]`` after ``slow_s``
    for every ``every``-th value and ``fast_s`` for the others."""

    def __init__(self, slow_s: float, fast_s: float = 0.0, every: int = 4) -> None:
        self.slow_s, self.fast_s, self.every = slow_s, fast_s, every

    def open(self, runtime_context) -> None:
        self.in_flight = self.peak = 0

    async def async_invoke(self, value):
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(self.slow_s if value % self.every == 0 else self.fast_s)
        finally:
            self.in_flight -= 1
        return [(value, time.monotonic(), self.peak)]


def lookup_job(ordered: bool, function: AsyncFunction, count: int, capacity: int):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    wait = AsyncDataStream.ordered_wait if ordered else AsyncDataStream.unordered_wait
    return wait(env.from_collection(list(range(count))), function, Time.seconds(30), capacity)


def test_ordered_keeps_the_input_order_and_unordered_is_faster_with_skewed_latencies(cluster) -> None:
    count = 32
    ordered = collected(cluster, lookup_job(True, Lookup(slow_s=0.6), count, capacity=4))
    unordered = collected(cluster, lookup_job(False, Lookup(slow_s=0.6), count, capacity=4))
    assert [r[0] for r in ordered] == list(range(count))
    assert sorted(r[0] for r in unordered) == list(range(count))
    assert [r[0] for r in unordered] != list(range(count))  # fast lookups overtook slow ones
    span = lambda rows: max(r[1] for r in rows) - min(r[1] for r in rows)  # noqa: E731
    # ordered: each slow lookup holds the full queue (4 places) behind it, so the 8 slow ones run
    # one after the other (~4.8 s); unordered: fast ones leave at once and 4 slow ones overlap (~1.2 s)
    assert span(unordered) * 2 < span(ordered), (span(unordered), span(ordered))


def test_at_most_capacity_calls_are_in_flight(cluster) -> None:
    rows = collected(cluster, lookup_job(False, Lookup(slow_s=0.05, fast_s=0.05), 60, capacity=5))
    assert sorted(r[0] for r in rows) == list(range(60))
    assert max(r[2] for r in rows) == 5  # the capacity was used, never exceeded


class Hanging(AsyncFunction):
    async def async_invoke(self, value):
        await asyncio.sleep(60)
        return [value]


class HangingWithFallback(Hanging):
    def timeout(self, value):
        return [("timed out", value)]


def test_a_timeout_fails_the_job_unless_timeout_is_overridden(cluster) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    stream = AsyncDataStream.unordered_wait(env.from_collection([1, 2]), Hanging(), Time.milliseconds(300), 10)
    with pytest.raises(JobExecutionException, match="TimeoutError: Async function call has timed out for input"):
        collected(cluster, stream)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    stream = AsyncDataStream.ordered_wait(env.from_collection([1, 2]), HangingWithFallback(), Time.milliseconds(300), 10)
    assert collected(cluster, stream) == [("timed out", 1), ("timed out", 2)]


class Flaky(AsyncFunction):
    """Each value's first two calls raise ConnectionError; the answer names the attempt."""

    def open(self, runtime_context) -> None:
        self.calls: dict = {}

    async def async_invoke(self, value):
        n = self.calls[value] = self.calls.get(value, 0) + 1
        if n <= 2:
            raise ConnectionError(f"attempt {n} for {value}")
        return [(value, n)]


def test_retries_with_a_fixed_delay_strategy(cluster) -> None:
    strategy = AsyncRetryStrategy.fixed_delay(
        max_attempts=3, backoff_time_millis=20, result_predicate=None,
        exception_predicate=functools.partial(async_retry_predicates.exception_type_predicate,
                                              expected_error_type=ConnectionError))
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    stream = AsyncDataStream.ordered_wait_with_retry(env.from_collection([1, 2, 3]), Flaky(), Time.seconds(10), strategy, 10)
    assert collected(cluster, stream) == [(1, 3), (2, 3), (3, 3)]
    strategy = AsyncRetryStrategy.fixed_delay(1, 20, None, async_retry_predicates.has_exception_predicate)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    stream = AsyncDataStream.ordered_wait_with_retry(env.from_collection([1]), Flaky(), Time.seconds(10), strategy, 10)
    with pytest.raises(JobExecutionException, match="ConnectionError: attempt 2 for 1"):  # retries ran out
        collected(cluster, stream)


class Jittery(AsyncFunction):
    async def async_invoke(self, value):
        await asyncio.sleep(random.uniform(0.005, 0.05))
        return [value]


def test_inputs_in_flight_at_a_checkpoint_are_called_again_after_a_failover_exactly_once(cluster, tmp_path) -> None:
    out, marker = tmp_path / "out", tmp_path / "fail"
    count = 5000
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(200)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 100))
    numbers = env.from_source(DataGeneratorSource(lambda i: i, count, records_per_second=1200),
                              WatermarkStrategy.no_watermarks(), "numbers")
    looked_up = AsyncDataStream.unordered_wait(numbers, Jittery(), Time.seconds(10), 50)
    (looked_up.map(FailWhenMarked(str(marker)))
        .map(lambda i: (i % KEYS, 1))
        .key_by(lambda t: t[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .map(lambda t: f"{t[0]},{t[1]}")
        .sink_to(FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build()))
    summary = fail_after_checkpoints(cluster.address, env, "async failover", marker)
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
    assert not marker.exists() and summary.num_restarts == 1
    assert summary.checkpoints.latest_restored_id >= 2
    assert_exactly_once(out, count)


def test_a_program_shaped_like_pyflinks_remote_model_inference_example_runs(cluster, tmp_path) -> None:
    """The example's shape: AsyncFunction[Row, str] with open/close, a random retryable TimeoutError,
    a fallback timeout(), AsyncRetryStrategy.fixed_delay with functools.partial of
    exception_type_predicate, unordered_wait_with_retry by keywords, checkpoints, a FileSink."""
    script = tmp_path / "inference.py"
    out = tmp_path / "out"
    script.write_text(INFERENCE.replace("OUTPUT", repr(str(out))))
    import subprocess

    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=200,
                         env={**os.environ, "MILLSTREAM_JOBMANAGER": cluster.address})
    assert run.returncode == 0, run.stderr[-3000:]
    lines = [line for p in out.rglob("*") if p.is_file() and not p.name.startswith(".") for line in p.read_text().splitlines()]
    import json

    rows = [json.loads(line) for line in lines]
    assert sorted(r["user_id"] for r in rows) == list(range(40))
    assert all(r["analysis_result"] == "positive" for r in rows)


INFERENCE = '''
import asyncio
import functools
import json
import random
from typing import List

from millstream.common import Encoder, Row, Time, Types
from millstream.datastream import (StreamExecutionEnvironment, AsyncDataStream, AsyncFunction, RuntimeContext,
                                   AsyncRetryStrategy, async_retry_predicates, CheckpointingMode)
from millstream.datastream.connectors.file_system import FileSink, OutputFileConfig, RollingPolicy


class Sentiment(AsyncFunction[Row, str]):
    def __init__(self):
        self.failed_once = {}

    def open(self, runtime_context: RuntimeContext):
        self.client = "connected"

    def close(self):
        self.client = None

    async def async_invoke(self, value: Row) -> List[str]:
        await asyncio.sleep(random.uniform(0.01, 0.1))
        if value.user_id not in self.failed_once and random.randint(1, 3) == 1:
            self.failed_once[value.user_id] = True
            raise TimeoutError
        self.failed_once.pop(value.user_id, None)
        return [json.dumps({"user_id": value.user_id, "comments": value.comments, "analysis_result": "positive"})]

    def timeout(self, value: Row) -> List[str]:
        return [json.dumps({"user_id": value.user_id, "comments": value.comments, "analysis_result": None})]


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
env.enable_checkpointing(1000, CheckpointingMode.EXACTLY_ONCE)
ds = env.from_collection([(i, f"comment {i}") for i in range(40)],
                         type_info=Types.ROW_NAMED(["user_id", "comments"], [Types.INT(), Types.STRING()]))
strategy = AsyncRetryStrategy.fixed_delay(
    max_attempts=100, backoff_time_millis=10, result_predicate=None,
    exception_predicate=functools.partial(async_retry_predicates.exception_type_predicate,
                                          expected_error_type=TimeoutError))
result = AsyncDataStream.unordered_wait_with_retry(
    data_stream=ds, async_function=Sentiment(), timeout=Time.seconds(10), async_retry_strategy=strategy,
    capacity=1000, output_type=Types.STRING())
result.sink_to(FileSink.for_row_format(base_path=OUTPUT, encoder=Encoder.simple_string_encoder())
               .with_output_file_config(OutputFileConfig.builder().with_part_prefix("prefix").with_part_suffix(".ext").build())
               .with_rolling_policy(RollingPolicy.default_rolling_policy())
               .build())
env.execute()
'''
