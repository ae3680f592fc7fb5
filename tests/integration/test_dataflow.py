"""Multi-vertex jobs across two TaskManagers: exchanges, keyed state, sources and sinks, word count."""
from __future__ import annotations

import collections
import os
import sys

import pytest

from millstream.client.execution import JobExecutionException
from millstream.common import Types, WatermarkStrategy
from millstream.datastream import (
    KeyedProcessFunction,
    OutputTag,
    ProcessFunction,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
)
from millstream.datastream.connectors.file_system import FileSink, FileSource, StreamFormat
from millstream.common.time import Time
from millstream.datastream.state import StateTtlConfig, ValueStateDescriptor

from .harness import ClusterSpec

pytestmark = pytest.mark.timeout(180)
CLUSTER = ClusterSpec(taskmanagers=2, jobmanager_env=True)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    from corpus import generate

    return generate(str(tmp_path_factory.mktemp("corpus") / "corpus.txt"), 600_000, vocabulary_size=2_000)


def _env(parallelism: int, mode: RuntimeExecutionMode = RuntimeExecutionMode.STREAMING) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.set_runtime_mode(mode)
    return env


@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_word_count_equals_a_counter_over_the_same_file(cluster, corpus, parallelism: int) -> None:
    import word_count
    from word_count import build

    env = _env(parallelism, RuntimeExecutionMode.BATCH)
    env.add_python_file(word_count.__file__)  # build()'s functions live in that module
    counts = build(env, corpus, None)
    with counts.execute_and_collect(f"word count p{parallelism}") as results:
        got = list(results)
    with open(corpus, encoding="utf-8") as f:
        expected = collections.Counter(w for line in f for w in line.split())
    assert len(got) == len(expected)  # BATCH: exactly one final count per word
    assert dict(got) == dict(expected)


def test_streaming_reduce_emits_a_rolling_result_per_record(cluster) -> None:
    env = _env(2)
    pairs = env.from_collection([("a", 1), ("b", 2), ("a", 3), ("a", 4), ("b", 5)])
    rolling = pairs.key_by(lambda p: p[0]).reduce(lambda x, y: (x[0], x[1] + y[1]))
    with rolling.execute_and_collect() as results:
        got = list(results)
    assert sorted(v for k, v in got if k == "a") == [1, 4, 8]
    assert sorted(v for k, v in got if k == "b") == [2, 7]


class CountPerKey(KeyedProcessFunction):
    def open(self, runtime_context) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        yield ctx.get_current_key(), n


def test_keyed_state_is_scoped_to_the_key_across_a_hash_exchange(cluster) -> None:
    env = _env(3)
    keys = env.from_sequence(0, 299).rebalance().map(lambda i: i % 7)
    counted = keys.key_by(lambda k: k).process(CountPerKey())
    with counted.execute_and_collect() as results:
        got = list(results)
    final = {}
    for key, n in got:
        final[key] = max(final.get(key, 0), n)
    assert final == collections.Counter(i % 7 for i in range(300))
    for key in range(7):  # every key's counts are 1..n without gaps: one subtask owns each key
        assert sorted(n for k, n in got if k == key) == list(range(1, final[key] + 1))


LATE = OutputTag("odd", Types.LONG())


class SplitOdd(ProcessFunction):
    def process_element(self, value, ctx):
        if value % 2:
            yield LATE, value
        else:
            yield value


def test_union_side_outputs_and_partitioners_deliver_every_record_once(cluster) -> None:
    env = _env(2)
    numbers = env.from_sequence(1, 200)
    main = numbers.process(SplitOdd())
    odd = main.get_side_output(LATE).shuffle().map(lambda x: -x)
    evens = main.rescale().map(lambda x: x).set_parallelism(4)
    merged = evens.union(odd, env.from_collection([1000]).broadcast().map(lambda x: x).set_parallelism(2))
    with merged.global_().map(lambda x: x).set_parallelism(2).execute_and_collect() as results:
        got = sorted(results)
    expected = sorted([x for x in range(1, 201) if x % 2 == 0] + [-x for x in range(1, 201) if x % 2] + [1000, 1000])
    assert got == expected


def test_a_union_of_keyed_streams_runs_through_the_values_operators_and_delivers_every_record_once(cluster) -> None:
    # PyFlink: KeyedStream.union is _values().union(...): each keyed stream is hashed into its
    # _keyed_stream_values_operator, whose records then reach the union's consumer unchanged
    env = _env(2)
    a = env.from_sequence(1, 100).key_by(lambda x: x % 3)
    b = env.from_sequence(101, 150).key_by(lambda x: x % 5)
    with a.union(b, env.from_collection([1000])).map(lambda x: x).set_parallelism(3).execute_and_collect() as results:
        got = sorted(results)
    assert got == list(range(1, 151)) + [1000]


def test_file_sink_writes_one_part_file_per_subtask(cluster, tmp_path) -> None:
    env = _env(2)
    env.from_sequence(1, 100).rebalance().map(str).sink_to(FileSink.for_row_format(str(tmp_path / "out")).build())
    env.execute("file sink")
    parts = sorted(p for p in (tmp_path / "out").rglob("*") if p.is_file())  # in the hour's bucket directory
    assert len(parts) == 2 and sorted(p.name.rsplit("-", 2)[1] for p in parts) == ["0", "1"]  # part-<uuid>-<subtask>-<n>
    assert not [p for p in parts if p.name.startswith(".")]  # finished: nothing left in progress
    lines = [line for p in parts for line in p.read_text().splitlines()]
    assert sorted(map(int, lines)) == list(range(1, 101))


def test_a_missing_input_file_fails_the_job_naming_the_path(cluster, tmp_path) -> None:
    env = _env(2)
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(tmp_path / "nope.txt")).build()
    env.from_source(source, WatermarkStrategy.no_watermarks(), "missing").key_by(lambda x: x).map(len).add_sink(lambda x: None)
    with pytest.raises(JobExecutionException) as info:
        env.execute("missing file")
    assert "nope.txt" in str(info.value)


def test_a_key_selector_that_raises_fails_the_job_naming_the_operator(cluster) -> None:
    env = _env(2)
    env.from_sequence(1, 10).key_by(lambda x: 1 // (x - 5)).map(lambda x: x).name("after-bad-key").add_sink(lambda x: None)
    with pytest.raises(JobExecutionException) as info:
        env.execute("bad key")
    assert "ZeroDivisionError" in str(info.value)


def test_a_record_that_cannot_be_pickled_fails_the_job_naming_the_operator(cluster) -> None:
    import threading

    env = _env(2)
    env.from_sequence(1, 3).map(lambda x: threading.Lock()).name("makes-locks").rebalance().add_sink(lambda x: None)
    with pytest.raises(JobExecutionException) as info:
        env.execute("unpicklable")
    assert "makes-locks" in str(info.value) and "lock" in str(info.value).lower()


def test_an_unwritable_sink_directory_fails_the_job_naming_the_path(cluster, tmp_path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    env = _env(2)
    env.from_sequence(1, 10).rebalance().map(str).sink_to(FileSink.for_row_format(str(blocker / "out")).build())
    with pytest.raises(JobExecutionException) as info:
        env.execute("unwritable")
    assert "FileSink" in str(info.value) and str(blocker / "out") in str(info.value)


class TimerEcho(KeyedProcessFunction):
    """Registers a processing-time timer 50 ms ahead for each key's first record; emits when it fires."""

    def open(self, runtime_context) -> None:
        self.seen = runtime_context.get_state(ValueStateDescriptor("seen", Types.BOOLEAN()))

    def process_element(self, value, ctx):
        if not self.seen.value():
            self.seen.update(True)
            ctx.timer_service().register_processing_time_timer(ctx.timer_service().current_processing_time() + 50)
        return []

    def on_timer(self, timestamp, ctx):
        yield ("fired", ctx.get_current_key())


def test_processing_time_timers_fire_per_key_on_the_cluster(cluster) -> None:
    from millstream.datastream.connectors.datagen import DataGeneratorSource

    env = _env(2)
    # An unbounded source keeps the job running; the iterator stops after the three timers and
    # closing it cancels the job (pending timers of a bounded STREAMING input are dropped, as in Flink).
    source = DataGeneratorSource(lambda i: i % 3, records_per_second=200)
    stream = env.from_source(source, WatermarkStrategy.no_watermarks(), "slow")
    with stream.key_by(lambda k: k).process(TimerEcho()).execute_and_collect(limit=3) as results:
        assert sorted(results) == [("fired", 0), ("fired", 1), ("fired", 2)]


class TtlProbe(KeyedProcessFunction):
    """On each key's first record writes a value with a 300 ms TTL and a plain one, and sets a
    processing-time timer past the TTL; when it fires, reads both."""

    TTL_MS = 300

    def open(self, runtime_context) -> None:
        expiring = ValueStateDescriptor("expiring", Types.LONG())
        expiring.enable_time_to_live(StateTtlConfig.new_builder(Time.milliseconds(self.TTL_MS)).build())
        self.expiring = runtime_context.get_state(expiring)
        self.plain = runtime_context.get_state(ValueStateDescriptor("plain", Types.LONG()))

    def process_element(self, value, ctx):
        if self.plain.value() is None:
            self.expiring.update(value)
            self.plain.update(value)
            now = ctx.timer_service().current_processing_time()
            ctx.timer_service().register_processing_time_timer(now + self.TTL_MS + 50)
            yield "written", ctx.get_current_key(), self.expiring.value()

    def on_timer(self, timestamp, ctx):
        yield "after ttl", ctx.get_current_key(), self.expiring.value(), self.plain.value()


def test_state_ttl_expires_values_on_the_cluster(cluster) -> None:
    from millstream.datastream.connectors.datagen import DataGeneratorSource

    env = _env(2)
    source = DataGeneratorSource(lambda i: i % 3, records_per_second=200)  # unbounded: timers may fire
    stream = env.from_source(source, WatermarkStrategy.no_watermarks(), "slow")
    with stream.key_by(lambda k: k).process(TtlProbe()).execute_and_collect(limit=6) as results:
        got = sorted(results, key=str)
    assert got == sorted([("written", k, k) for k in range(3)] + [("after ttl", k, None, k) for k in range(3)], key=str)


def _slow_stamp(x: int) -> tuple[int, float]:
    import time

    time.sleep(0.02)  # a slow user function: 20 ms a record
    return x, time.time()


def test_a_slow_function_hands_on_its_output_within_about_a_buffer_timeout(cluster) -> None:
    """Flink hands each record on as it is produced and flushes every buffer timeout; a slow
    function must not hold a whole input buffer's output until the buffer is done."""
    import time

    env = _env(1)
    env.set_buffer_timeout(100)
    stamped = env.from_sequence(1, 200).rebalance().map(_slow_stamp)  # one 200-record buffer, 4 s of work
    delays = []
    with stamped.execute_and_collect("slow map") as results:
        for x, produced in results:
            delays.append(time.time() - produced)
    assert len(delays) == 200
    # Without slicing the first record waited ~4 s for the other 199; now about a buffer timeout
    # plus the collect path.
    assert min(delays[:5]) < 2.0, delays[:5]
