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


def _sequential_sums(records: list) -> list:
    """What the consumer's keyed sum(1) ends with, key by key: the first record's fields, the
    second summed in record order (keys compare as dict keys do: 1, 1.0 and True are one key)."""
    result: dict = {}
    for r in records:
        result[r[0]] = r if r[0] not in result else (result[r[0]][0], result[r[0]][1] + r[1])
    return list(result.values())


def test_counting_whole_batches_of_ones_gives_the_sequential_sums_exactly() -> None:
    """Keyed by ``lambda t: t[0]``, a batch of (key, 1) pairs is counted at C speed; a batch with
    another count (2, 1.0, True) goes record by record. Either way each key's result, its type and
    its key object included, is what the consumer's sequential sum gives."""
    rng = random.Random(7)
    keys = ["a", "b", "c", 1, 1.0, True, 2]
    records = [(rng.choice(keys), 1) for _ in range(300)]
    records[150:157] = [("a", 2), ("b", 1.0), ("z", True), ("c", 1), (1.0, 1), ("a", 1), ("b", 1)]
    (partial,) = _combine(_dataset(RuntimeExecutionMode.BATCH, lambda k: k.sum(1)), [records])
    expected = _sequential_sums(records)
    assert sorted(map(repr, partial)) == sorted(map(repr, expected))
    only_true = [("t", True)] * 3 + [("u", True)]  # bools add up to ints, but a lone True stays True
    (partial,) = _combine(_dataset(RuntimeExecutionMode.BATCH, lambda k: k.sum(1)), [only_true])
    assert sorted(map(repr, partial)) == ["('t', 3)", "('u', True)"]


def _counting(narrow):
    """``narrow`` with a count of the batches it was given (its attributes kept)."""
    calls = []

    def counted(records):
        calls.append(len(records))
        return narrow(records)

    counted.int_fields = narrow.int_fields
    return counted, calls


def _narrowed_sums(records: list, type_info) -> list:
    """The consumer's sequential sums over the records as PyFlink hands them on: narrowed first."""
    from millstream.runtime.narrowing import batch_narrower

    return _sequential_sums(batch_narrower(type_info)(records))


def test_a_typed_batch_of_ones_is_counted_without_the_narrowing_and_any_other_is_narrowed_first() -> None:
    """A (word, 1) batch needs no narrowing: the count path proves every count is the int 1, in
    range for every integer type. Out-of-range counts, bools, or an integer key field still go
    through Java's narrowing before they are summed, so results stay PyFlink's."""
    from millstream.common import Types
    from millstream.runtime.narrowing import batch_narrower

    dataset = _dataset(RuntimeExecutionMode.BATCH, lambda k: k.sum(1))
    factory = cloudpickle.loads(dataset.combiner)
    key_selector = cloudpickle.loads(dataset.partitioner.payload).key_selector
    typed = Types.TUPLE([Types.STRING(), Types.INT()])
    narrow, calls = _counting(batch_narrower(typed))
    batches = [[("a", 1), ("b", 1)], [("a", 1), ("c", 1), ("a", 1)], [("b", 2**31 + 5), ("a", 1)], [("c", True), ("d", 1)],
               [("a", 1)] * 5]
    writer = ListWriter()
    combiner = CombiningWriter(writer, factory, key_selector, "test")
    for batch in batches:
        combiner.emit_unnarrowed(batch, narrow)
    combiner.finish()
    assert calls == [2, 2, 2]  # the first batch (shape not yet known), the out-of-range one, the one with a bool
    expected = _narrowed_sums([r for batch in batches for r in batch], typed)
    assert sorted(map(repr, writer.records)) == sorted(map(repr, expected))
    assert ("b", 1 + 5 - 2**31) in writer.records  # Java's int overflow, as PyFlink's typed output

    keyed_by_int = Types.TUPLE([Types.INT(), Types.INT()])  # the key field narrows too: never skipped
    narrow, calls = _counting(batch_narrower(keyed_by_int))
    writer = ListWriter()
    combiner = CombiningWriter(writer, factory, key_selector, "test")
    int_batches = [[(1, 1), (2, 1)], [(2**32 + 1, 1), (1, 1)]]
    for batch in int_batches:
        combiner.emit_unnarrowed(batch, narrow)
    combiner.finish()
    assert calls == [2, 2]
    assert sorted(writer.records) == [(1, 3), (2, 1)]


def test_a_chained_typed_flat_map_hands_its_batches_to_the_combiner_unnarrowed(monkeypatch) -> None:
    """The chain gives an operator's typed output to a combining writer before the narrowing, and
    the writer narrows what it must: a word count's batches of ones skip it, exact counts either way."""
    from millstream.common import Types
    from millstream.runtime import narrowing
    from millstream.runtime.task import chain as chain_module
    from millstream.runtime.task.chain import OperatorChain
    from millstream.runtime.task.environment import SimpleTaskEnvironment

    calls: list = []

    def counting_narrower(type_info):
        narrow = narrowing.batch_narrower(type_info)
        if narrow is None:
            return None
        counted, seen = _counting(narrow)
        calls.append(seen)
        return counted

    monkeypatch.setattr(chain_module, "batch_narrower", counting_narrower)
    lines = [" ".join(random.Random(i).choice("abcde") for _ in range(12)) for i in range(3000)] + ["big"]
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    env.set_parallelism(1)
    typed = Types.TUPLE([Types.STRING(), Types.INT()])
    pairs = env.from_collection(lines).flat_map(lambda line: [(w, 1) if w != "big" else (w, 2**31) for w in line.split()],
                                                output_type=typed)
    pairs.key_by(lambda p: p[0]).sum(1).print()
    producer = next(v for v in env.get_job_graph().proto.vertices if v.produced)
    (ds,) = producer.produced
    writer = ListWriter()
    combiner = CombiningWriter(writer, cloudpickle.loads(ds.combiner), cloudpickle.loads(ds.partitioner.payload).key_selector, "c")
    task_env = SimpleTaskEnvironment(task_name=producer.name, subtask_index=0, parallelism=1,
                                     max_parallelism=producer.max_parallelism, runtime_mode="BATCH",
                                     print_sink=lambda lines, to_stderr: None)
    chain = OperatorChain(producer, task_env, {ds.id: combiner})
    chain.open()
    assert chain.run_source()
    chain.end_input()
    combiner.finish()  # as the task does once its chain ended
    chain.close()
    (seen,) = calls
    assert 0 < len(seen) < 3  # the first batch, and the one holding the out-of-range count
    words = [w for line in lines for w in line.split()]
    assert sorted(writer.records) == sorted({**collections.Counter(words), "big": -(2**31)}.items())
