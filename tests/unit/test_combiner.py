"""Pre-aggregation before a keyed exchange in BATCH mode: when it applies, and that it is exact."""
from __future__ import annotations

import collections
import random

import cloudpickle

from millstream.datastream import ReduceFunction, RuntimeExecutionMode, StreamExecutionEnvironment
from millstream.runtime.operators.combiner import CombiningWriter
from millstream.runtime.serialization import RecordSerializer, deserialize


class ListWriter:
    """A ResultWriter that serializes every batch with the network layer's own serializer."""

    def __init__(self) -> None:
        self.records: list = []
        self.finished = False
        self.serializer = RecordSerializer()
        self.watermarks: list = []
        self.statuses: list = []

    def emit(self, records: list) -> None:
        self.records.extend(deserialize(self.serializer.serialize(records)))

    def flush(self) -> None:
        pass

    def emit_watermark(self, watermark: int) -> None:
        self.watermarks.append(watermark)

    def emit_watermark_status(self, idle: bool) -> None:
        self.statuses.append(idle)

    def finish(self) -> None:
        self.finished = True


def _dataset(mode: RuntimeExecutionMode, keyed_op):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(mode)
    env.set_parallelism(2)
    keyed_op(env.from_sequence(1, 10).map(lambda x: (x % 3, x)).key_by(lambda t: t[0])).print()
    graph = env.get_job_graph().proto
    producer = next(v for v in graph.vertices if v.produced)
    return producer.produced[0]


class StatefulReduce(ReduceFunction):
    def reduce(self, a, b):
        return (a[0], a[1] + b[1])


def test_batch_keyed_aggregations_and_plain_reduces_get_a_combiner() -> None:
    assert _dataset(RuntimeExecutionMode.BATCH, lambda k: k.sum(1)).combiner
    assert _dataset(RuntimeExecutionMode.BATCH, lambda k: k.reduce(lambda a, b: (a[0], a[1] + b[1]))).combiner
    assert _dataset(RuntimeExecutionMode.BATCH, lambda k: k.max_by(1)).combiner


def test_no_combiner_in_streaming_mode_or_for_function_classes_or_other_operators() -> None:
    assert not _dataset(RuntimeExecutionMode.STREAMING, lambda k: k.sum(1)).combiner
    assert not _dataset(RuntimeExecutionMode.BATCH, lambda k: k.reduce(StatefulReduce())).combiner
    assert not _dataset(RuntimeExecutionMode.BATCH, lambda k: k.map(lambda x: x)).combiner


def _combine(dataset, records_per_producer: list[list]) -> list[list]:
    factory = cloudpickle.loads(dataset.combiner)
    key_selector = cloudpickle.loads(dataset.partitioner.payload).key_selector
    outputs = []
    for records in records_per_producer:
        writer = ListWriter()
        combiner = CombiningWriter(writer, factory, key_selector, "test")
        for start in range(0, len(records), 7):
            combiner.emit(records[start : start + 7])
        assert writer.records == []  # nothing leaves before the end of input
        combiner.finish()
        assert writer.finished
        outputs.append(writer.records)
    return outputs


def test_partial_sums_add_up_to_the_exact_counts() -> None:
    rng = random.Random(3)
    words = [(rng.choice("abcdefg"), 1) for _ in range(1000)]
    halves = [words[:400], words[400:]]
    partials = _combine(_dataset(RuntimeExecutionMode.BATCH, lambda k: k.sum(1)), halves)
    assert all(len(p) == len({w for w, _ in half}) for p, half in zip(partials, halves))  # one per key and producer
    total: collections.Counter = collections.Counter()
    for p in partials:
        for word, count in p:
            total[word] += count
    assert total == collections.Counter(w for w, _ in words)


def test_partial_max_by_keeps_whole_records() -> None:
    records = [(k, v) for v in range(20) for k in (0, 1, 2)]
    (partial,) = _combine(_dataset(RuntimeExecutionMode.BATCH, lambda k: k.max_by(1)), [records])
    assert sorted(partial) == [(0, 19), (1, 19), (2, 19)]


def test_a_change_of_record_shape_midway_keeps_the_sequential_result() -> None:
    dataset = _dataset(RuntimeExecutionMode.BATCH, lambda k: k.sum(1))
    pairs = [("a", 1), ("b", 2.5), ("a", 3), ("a", 1), ("b", 1), ("a", 1), ("b", 1)]  # one whole batch of 7
    records = pairs + [("a", 10, "extra"), ("c", 1, "x"), ("b", 0.25)]
    (partial,) = _combine(dataset, [records])
    assert sorted(partial, key=lambda r: r[0]) == [("a", 16), ("b", 4.75), ("c", 1, "x")]
