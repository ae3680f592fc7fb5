"""OperatorChain and runtime operators: real JobGraphs from the public API, run one vertex (or a whole
job, vertex by vertex, in process) with a fake TaskEnvironment and in-memory result writers.

No Spark, no sockets, no sleeps: processing time comes from a ManualClock.
"""
from __future__ import annotations

import collections
import re
import threading
from dataclasses import dataclass, field
from typing import Any, Iterable

import cloudpickle
import pytest

from millstream.common import Row, Types
from millstream.datastream import (
    KeyedProcessFunction,
    MapFunction,
    OutputTag,
    ProcessFunction,
    RuntimeExecutionMode,
    SinkFunction,
    SourceFunction,
    StreamExecutionEnvironment,
)
from millstream.datastream.connectors.file_system import FileSink
from millstream.datastream.functions import AggregateFunction, FilterFunction, FlatMapFunction, ReduceFunction
from millstream.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from millstream.runtime import operator_factories
from millstream.runtime.operators import sinks
from millstream.runtime.serialization import RecordSerializer, deserialize
from millstream.runtime.task.chain import OperatorChain, OperatorError
from millstream.runtime.task.environment import BATCH, STREAMING, ManualClock, SimpleTaskEnvironment
from tests.unit import state_backends

# -- harness -----------------------------------------------------------------------------------


class MemoryWriter:
    """A ResultWriter that serializes every batch with the network layer's own serializer."""

    def __init__(self) -> None:
        self.records: list[Any] = []
        self.emits = 0
        self.flushes = 0
        self.serializer = RecordSerializer()
        self.watermarks: list = []
        self.statuses: list = []

    def emit(self, records: list[Any]) -> None:
        self.emits += 1
        self.records.extend(deserialize(self.serializer.serialize(records)))

    def flush(self) -> None:
        self.flushes += 1

    def emit_watermark(self, watermark: int) -> None:
        self.watermarks.append(watermark)

    def emit_watermark_status(self, idle: bool) -> None:
        self.statuses.append(idle)


@dataclass
class Run:
    chain: OperatorChain
    env: SimpleTaskEnvironment
    writers: dict[bytes, MemoryWriter]
    printed: list[str] = field(default_factory=list)

    def collected(self, collect_id: str = "out") -> list[Any]:
        return self.env.collected.get(collect_id, [])

    def written(self) -> list[Any]:
        return [r for w in self.writers.values() for r in w.records]


def collect(ds: Any, collect_id: str = "out") -> None:
    """What execute_and_collect adds to a stream, with a fixed id."""
    ds._sink("Collect Sink", operator_factories.CollectSinkFactory(collect_id=collect_id))


def vertex(env: StreamExecutionEnvironment, contains: str = "", index: int | None = None) -> Any:
    vertices = list(env.get_job_graph().proto.vertices)
    if index is not None:
        return vertices[index]
    matches = [v for v in vertices if contains in v.name]
    assert len(matches) == 1, [v.name for v in vertices]
    return matches[0]


def make_chain(v: Any, subtask: int = 0, clock: ManualClock | None = None, **env_kwargs: Any) -> Run:
    printed: list[str] = []
    env_kwargs.setdefault("parallelism", v.parallelism)
    env_kwargs.setdefault("max_parallelism", v.max_parallelism)
    backend_params = state_backends.job_parameters()  # the state_backend fixture's backend, if any
    if backend_params:
        env_kwargs["job_parameters"] = {**backend_params, **env_kwargs.get("job_parameters", {})}
    env = SimpleTaskEnvironment(
        task_name=v.name,
        subtask_index=subtask,
        clock=clock or ManualClock(1_000),
        print_sink=lambda lines, to_stderr: printed.extend(lines),
        **env_kwargs,
    )
    writers = {ds.id: MemoryWriter() for ds in v.produced}
    return Run(OperatorChain(v, env, writers), env, writers, printed)


def run_source(v: Any, subtask: int = 0, **env_kwargs: Any) -> Run:
    run = make_chain(v, subtask, **env_kwargs)
    run.chain.open()
    assert run.chain.run_source() is True
    run.chain.end_input()
    run.chain.close()
    return run


def run_input(v: Any, records: list[Any], subtask: int = 0, batch: int = 1000, **env_kwargs: Any) -> Run:
    run = make_chain(v, subtask, **env_kwargs)
    run.chain.open()
    target = v.inputs[0].target_node_id
    for i in range(0, len(records), batch):
        run.chain.process_batch(records[i : i + batch], target)
    run.chain.end_input()
    run.chain.close()
    return run


def run_job(env: StreamExecutionEnvironment, mode: str = STREAMING, **env_kwargs: Any) -> dict[str, list[Any]]:
    """Every vertex and subtask in topological order, routing produced records with the edge's own
    partitioner to the consumer's input (a stand-in for the network layer); returns the collected
    records per collect id. A consumer reads its inputs' records in the order of the producing
    vertices (for two inputs: the one whose source was created first, first)."""
    graph = env.get_job_graph().proto
    inbox: dict[tuple[bytes, int], list[tuple[int, int, list[Any]]]] = collections.defaultdict(list)
    collected: dict[str, list[Any]] = collections.defaultdict(list)
    for v in graph.vertices:
        for subtask in range(v.parallelism):
            run = make_chain(v, subtask, runtime_mode=mode, **env_kwargs)
            run.chain.open()
            if v.is_source:
                assert run.chain.run_source()
            for target, input_index, records in inbox.pop((v.id, subtask), []):
                run.chain.process_batch(records, target, input_index)
            run.chain.end_input()
            run.chain.close()
            for k, recs in run.env.collected.items():
                collected[k].extend(recs)
            for ds in v.produced:
                consumer = next(c for c in graph.vertices if c.id == ds.consumer_vertex)
                input_index = next(e.input_index for e in consumer.inputs if e.result_id == ds.id)
                partitioner = cloudpickle.loads(ds.partitioner.payload)
                partitioner.setup(consumer.parallelism)
                for record in run.writers[ds.id].records:
                    if partitioner.broadcast:
                        channels: Iterable[int] = range(consumer.parallelism)
                    elif partitioner.pointwise:
                        assert consumer.parallelism == v.parallelism
                        channels = [subtask]
                    else:
                        channels = [partitioner.select_channel(record)]
                    for ch in channels:
                        inbox[(consumer.id, ch)].append((ds.target_node_id, input_index, [record]))
    return collected


@pytest.fixture
def env() -> StreamExecutionEnvironment:
    return StreamExecutionEnvironment.get_execution_environment()


# -- stateless operators and wiring ------------------------------------------------------------


def test_source_flat_map_map_print_runs_in_one_chain(env: StreamExecutionEnvironment) -> None:
    env.from_collection(["a b", "b c"]).flat_map(lambda s: s.split()).map(lambda w: (w, 1)).print()
    v = vertex(env, "Collection")
    assert [op.kind for op in v.operators] == ["source", "flat_map", "map", "sink"]
    run = run_source(v)
    assert run.printed == ["('a', 1)", "('b', 1)", "('b', 1)", "('c', 1)"]


class BatchWriter(MemoryWriter):
    """Keeps every emitted batch as it came (with its timestamps, if any)."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[Any]] = []

    def emit(self, records: list[Any]) -> None:
        self.batches.append(records)


@pytest.mark.parametrize("stamped_input", [False, True])
def test_flat_map_expands_a_big_batch_in_slices_of_about_its_output_target(
        env: StreamExecutionEnvironment, monkeypatch: pytest.MonkeyPatch, stamped_input: bool) -> None:
    """Word count's shape: a batch of lines becomes many more words. The flat_map hands them on in
    slices near OUTPUT_TARGET records, in order, each word with its line's timestamp."""
    from millstream.runtime.operators.base import FlatMapOperator
    from millstream.runtime.timestamps import TimestampedBatch, timestamps_of

    monkeypatch.setattr(FlatMapOperator, "OUTPUT_TARGET", 64)
    lines = [" ".join(f"w{i}.{j}" for j in range(i % 7 + 1)) for i in range(3000)]  # 1-7 words, 4 on average
    env.from_collection(["x"]).rebalance().flat_map(lambda line: line.split()).rebalance().print()
    v = vertex(env, "FlatMap")
    run = make_chain(v)
    writer = BatchWriter()
    run.chain = OperatorChain(v, run.env, {ds.id: writer for ds in v.produced})
    run.chain.open()
    target = v.inputs[0].target_node_id
    batch = TimestampedBatch(lines, [1000 + i for i in range(len(lines))]) if stamped_input else lines
    run.chain.process_batch(batch, target)
    run.chain.end_input()
    run.chain.close()

    assert [w for b in writer.batches for w in b] == [w for line in lines for w in line.split()]
    assert len(writer.batches) > 12_000 // 64 // 2  # sliced, not one 12,000-word batch
    assert len(writer.batches[0]) == sum(len(line.split()) for line in lines[:256])  # the first slice probes
    assert max(map(len, writer.batches[1:])) <= 2 * 64 + 7  # then each is sized from the one before
    if stamped_input:
        stamps = [t for b in writer.batches for t in timestamps_of(b)]
        assert stamps == [1000 + i for i, line in enumerate(lines) for _ in line.split()]
    else:
        assert all(timestamps_of(b) is None for b in writer.batches)


def test_a_flat_map_that_shrinks_its_input_keeps_whole_batches(env: StreamExecutionEnvironment) -> None:
    env.from_collection(["x"]).rebalance().flat_map(lambda n: [n] if n % 2 else []).rebalance().print()
    run = run_input(vertex(env, "FlatMap"), list(range(10_000)), batch=1000)
    (writer,) = run.writers.values()
    assert writer.records == list(range(1, 10_000, 2))
    assert writer.emits <= 10 + 3  # the first batch probes in slices; the rest go whole


def test_print_follows_the_declared_type_as_pyflink(env: StreamExecutionEnvironment) -> None:
    """A declared tuple prints as Flink's Tuple2, a row as ``+I[...]``; undeclared as Python's str."""
    words = env.from_collection(["a b", "b"]).flat_map(lambda s: s.split())
    words.map(lambda w: (w, 1), output_type=Types.TUPLE([Types.STRING(), Types.INT()])).print()
    v = vertex(env, "Collection")
    assert run_source(v).printed == ["(a,1)", "(b,1)", "(b,1)"]


def test_a_named_row_source_hands_functions_rows_with_fields(env: StreamExecutionEnvironment) -> None:
    row_type = Types.ROW_NAMED(["id", "info"], [Types.INT(), Types.STRING()])
    rows = env.from_collection([(1, "x"), (2, "y")], type_info=row_type)
    rows.map(lambda r: (r.id, r.info.upper())).print()
    rows.filter(lambda r: r["id"] == 2).print()
    v = vertex(env, "Collection")
    assert sorted(run_source(v).printed) == sorted(["(1, 'X')", "(2, 'Y')", "+I[2, y]"])


class Upper(MapFunction):
    def map(self, value: str) -> str:
        return value.upper()


class Words(FlatMapFunction):
    def flat_map(self, value: str) -> Iterable[str]:
        yield from value.split()


class Long(FilterFunction):
    def filter(self, value: str) -> bool:
        return len(value) > 1


def test_function_classes_and_lambdas_give_the_same_results(env: StreamExecutionEnvironment) -> None:
    source = env.from_collection(["ab c", "de fgh i"])
    collect(source.flat_map(Words()).filter(Long()).map(Upper()), "classes")
    collect(source.flat_map(lambda s: s.split()).filter(lambda w: len(w) > 1).map(str.upper), "lambdas")
    run = run_source(vertex(env, "Collection"))
    assert run.collected("classes") == run.collected("lambdas") == ["AB", "DE", "FGH"]


def test_fan_out_gives_every_chained_branch_every_record(env: StreamExecutionEnvironment) -> None:
    doubled = env.from_collection([1, 2, 3]).map(lambda x: x * 2)
    collect(doubled.filter(lambda x: x > 2), "big")
    collect(doubled.map(lambda x: -x), "negated")
    collect(doubled, "all")
    v = vertex(env, "Collection")
    assert len(v.operators) == 7 and not v.produced  # everything chained
    run = run_source(v)
    assert run.collected("big") == [4, 6]
    assert run.collected("negated") == [-2, -4, -6]
    assert run.collected("all") == [2, 4, 6]


ODD = OutputTag("odd")
LARGE = OutputTag("large")


class Split(ProcessFunction):
    def process_element(self, value: int, ctx: ProcessFunction.Context) -> Iterable[Any]:
        if value % 2:
            yield ODD, f"odd {value}"
        else:
            yield value
        if value > 3:
            ctx.output(LARGE, value)  # type: ignore[attr-defined]


def test_side_outputs_by_tag_chained_and_to_a_result_writer(env: StreamExecutionEnvironment) -> None:
    split = env.from_collection([1, 2, 3, 4, 5]).process(Split())
    collect(split, "main")
    collect(split.get_side_output(ODD), "odd")
    split.get_side_output(LARGE).map(lambda x: x * 10).set_parallelism(2).print()  # not chainable
    v = vertex(env, "Collection")
    (ds,) = v.produced
    assert ds.output_tag == "large"
    run = run_source(v)
    assert run.collected("main") == [2, 4]
    assert run.collected("odd") == ["odd 1", "odd 3", "odd 5"]
    assert run.writers[ds.id].records == [4, 5]


def test_side_output_nobody_consumes_is_dropped(env: StreamExecutionEnvironment) -> None:
    collect(env.from_collection([1, 2, 3]).process(Split()))
    assert run_source(vertex(env, "Collection")).collected() == [2]


def test_non_chained_outputs_reach_result_writers_in_batches(env: StreamExecutionEnvironment) -> None:
    env.from_sequence(1, 5000).map(lambda x: x + 1).key_by(lambda x: x % 7).sum().print()
    v = vertex(env, "Sequence")
    run = run_source(v, source_batch_size=1000)
    (writer,) = run.writers.values()
    assert writer.records == list(range(2, 5002))
    assert writer.emits == 5 and writer.flushes >= 1


class Recorder(MapFunction):
    """Logs its lifecycle into ``log`` (set on the unpickled copy by the test)."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.log: list[Any] = []

    def open(self, runtime_context: Any) -> None:
        self.log.append(
            (
                "open",
                self.tag,
                runtime_context.get_index_of_this_subtask(),
                runtime_context.get_number_of_parallel_subtasks(),
                runtime_context.get_max_number_of_parallel_subtasks(),
                runtime_context.get_attempt_number(),
                runtime_context.get_task_name_with_subtasks(),
                runtime_context.get_job_parameter("greeting", "none"),
            )
        )

    def map(self, value: Any) -> Any:
        return value

    def close(self) -> None:
        self.log.append(("close", self.tag))


def test_open_tail_first_close_head_first_with_subtask_info(env: StreamExecutionEnvironment) -> None:
    env.set_parallelism(3)
    env.from_sequence(1, 10).map(Recorder("first")).map(Recorder("second")).print()
    v = vertex(env, "Sequence")
    run = make_chain(v, subtask=1, attempt_number=2, job_parameters={"greeting": "hi"})
    log: list[Any] = []
    for op in run.chain.operators[1:3]:
        op.factory.function.log = log  # type: ignore[attr-defined]
    run.chain.open()
    run.chain.run_source()
    run.chain.end_input()
    run.chain.close()
    name = f"{v.name} (2/3)#2"
    assert log == [
        ("open", "second", 1, 3, v.max_parallelism, 2, name, "hi"),
        ("open", "first", 1, 3, v.max_parallelism, 2, name, "hi"),
        ("close", "first"),
        ("close", "second"),
    ]


# -- keyed state -------------------------------------------------------------------------------


class Average(AggregateFunction):
    def create_accumulator(self) -> tuple[int, int]:
        return (0, 0)

    def add(self, value: int, acc: tuple[int, int]) -> tuple[int, int]:
        return (acc[0] + value, acc[1] + 1)

    def get_result(self, acc: tuple[int, int]) -> float:
        return acc[0] / acc[1]


class AllStates(KeyedProcessFunction):
    """Exercises every state kind; a record ("reset", key) clears them all for that key."""

    def open(self, runtime_context: Any) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))
        self.seen = runtime_context.get_list_state(ListStateDescriptor("seen"))
        self.by_value = runtime_context.get_map_state(MapStateDescriptor("by_value"))
        self.total = runtime_context.get_reducing_state(ReducingStateDescriptor("total", lambda a, b: a + b))
        self.avg = runtime_context.get_aggregating_state(AggregatingStateDescriptor("avg", Average()))

    def process_element(self, value: tuple[str, Any], ctx: Any) -> Iterable[Any]:
        key, x = value
        assert ctx.get_current_key() == key
        if x == "reset":
            for s in (self.count, self.seen, self.by_value, self.total, self.avg):
                s.clear()
            yield key, "cleared", self.count.value(), self.seen.get(), self.by_value.is_empty(), self.total.get(), self.avg.get()
            return
        self.count.update((self.count.value() or 0) + 1)
        self.seen.add(x)
        self.by_value.put(x, self.by_value.get(x) + 1 if self.by_value.contains(x) else 1)
        self.total.add(x)
        self.avg.add(x)
        yield key, self.count.value(), self.seen.get(), dict(self.by_value.items()), self.total.get(), self.avg.get()


def test_every_keyed_state_kind_is_scoped_to_its_key_and_clears(env: StreamExecutionEnvironment) -> None:
    collect(env.from_collection([("a", 1)]).key_by(lambda r: r[0]).process(AllStates()))
    v = vertex(env, "KeyedProcess")
    records = [("a", 1), ("b", 10), ("a", 2), ("a", 2), ("b", 20), ("a", "reset"), ("a", 5), ("b", 30)]
    run = run_input(v, records, batch=3)
    assert run.collected() == [
        ("a", 1, [1], {1: 1}, 1, 1.0),
        ("b", 1, [10], {10: 1}, 10, 10.0),
        ("a", 2, [1, 2], {1: 1, 2: 1}, 3, 1.5),
        ("a", 3, [1, 2, 2], {1: 1, 2: 2}, 5, 5 / 3),
        ("b", 2, [10, 20], {10: 1, 20: 1}, 30, 15.0),
        ("a", "cleared", None, [], True, None, None),
        ("a", 1, [5], {5: 1}, 5, 5.0),
        ("b", 3, [10, 20, 30], {10: 1, 20: 1, 30: 1}, 60, 20.0),
    ]
    (backend,) = run.chain.keyed_state_backends().values()
    assert backend.entries("count") == {"a": 1, "b": 3}


class CountPerKey(MapFunction):
    def open(self, runtime_context: Any) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("n"))

    def map(self, value: str) -> tuple[str, int]:
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        return value, n


class FirstOnly(FilterFunction):
    def open(self, runtime_context: Any) -> None:
        self.seen = runtime_context.get_state(ValueStateDescriptor("seen"))

    def filter(self, value: str) -> bool:
        first = self.seen.value() is None
        self.seen.update(True)
        return first


class RepeatByCount(FlatMapFunction):
    def open(self, runtime_context: Any) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("n"))

    def flat_map(self, value: str) -> Iterable[str]:
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        return [value] * n


@pytest.mark.parametrize(
    "build, expected",
    [
        (lambda ks: ks.map(CountPerKey()), [("x", 1), ("y", 1), ("x", 2), ("x", 3)]),
        (lambda ks: ks.filter(FirstOnly()), ["x", "y"]),
        (lambda ks: ks.flat_map(RepeatByCount()), ["x", "y", "x", "x", "x", "x", "x"]),
    ],
)
def test_keyed_map_filter_flat_map_use_keyed_state(env: StreamExecutionEnvironment, build: Any, expected: list[Any]) -> None:
    collect(build(env.from_collection(["x"]).key_by(lambda w: w)))
    v = vertex(env, index=1)
    assert v.operators[0].state_key_selector
    assert run_input(v, ["x", "y", "x", "x"], batch=2).collected() == expected


def test_state_outside_a_keyed_stream_is_an_error_naming_the_operator(env: StreamExecutionEnvironment) -> None:
    collect(env.from_collection(["x"]).map(CountPerKey()).name("Counter"))
    run = make_chain(vertex(env, "Collection"))
    with pytest.raises(OperatorError, match="'Counter'.*open.*keyed stream"):
        run.chain.open()


# -- reduce and aggregations -------------------------------------------------------------------


def _keyed_job(env: StreamExecutionEnvironment, mode: str, build: Any, records: list[Any]) -> list[Any]:
    collect(build(env.from_collection(records).key_by(lambda r: r[0])))
    v = vertex(env, index=1)
    return run_input(v, records, batch=2, runtime_mode=mode).collected()


class Concat(ReduceFunction):
    def reduce(self, a: tuple[str, str], b: tuple[str, str]) -> tuple[str, str]:
        return a[0], a[1] + b[1]


def test_reduce_is_rolling_in_streaming_and_final_in_batch(env: StreamExecutionEnvironment) -> None:
    records = [("a", "1"), ("b", "2"), ("a", "3"), ("a", "4"), ("b", "5")]
    streaming = _keyed_job(env, STREAMING, lambda ks: ks.reduce(Concat()), records)
    assert streaming == [("a", "1"), ("b", "2"), ("a", "13"), ("a", "134"), ("b", "25")]
    env2 = StreamExecutionEnvironment.get_execution_environment()
    batch = _keyed_job(env2, BATCH, lambda ks: ks.reduce(lambda a, b: (a[0], a[1] + b[1])), records)
    assert sorted(batch) == [("a", "134"), ("b", "25")]


TUPLES = [("a", 3, "x"), ("b", 1, "y"), ("a", 1, "z"), ("a", 5, "w"), ("b", 1, "v")]


@pytest.mark.parametrize(
    "agg, field, expected_a",
    [
        ("sum", 1, [("a", 3, "x"), ("a", 4, "x"), ("a", 9, "x")]),
        ("min", 1, [("a", 3, "x"), ("a", 1, "x"), ("a", 1, "x")]),
        ("max", 1, [("a", 3, "x"), ("a", 3, "x"), ("a", 5, "x")]),
        ("min_by", 1, [("a", 3, "x"), ("a", 1, "z"), ("a", 1, "z")]),
        ("max_by", 1, [("a", 3, "x"), ("a", 3, "x"), ("a", 5, "w")]),
    ],
)
def test_aggregations_on_tuples_follow_flink(env: StreamExecutionEnvironment, agg: str, field: int, expected_a: list[Any]) -> None:
    out = _keyed_job(env, STREAMING, lambda ks: getattr(ks, agg)(field), TUPLES)
    assert [r for r in out if r[0] == "a"] == expected_a


def test_min_by_and_max_by_keep_the_first_record_on_ties(env: StreamExecutionEnvironment) -> None:
    records = [("b", 1, "first"), ("b", 1, "second"), ("b", 0, "low"), ("b", 0, "tie")]
    assert _keyed_job(env, STREAMING, lambda ks: ks.min_by(1), records)[-1] == ("b", 0, "low")
    env2 = StreamExecutionEnvironment.get_execution_environment()
    assert _keyed_job(env2, STREAMING, lambda ks: ks.max_by(1), records)[-1] == ("b", 1, "first")


def test_aggregations_on_named_and_positional_rows_lists_and_numbers(env: StreamExecutionEnvironment) -> None:
    named = [Row(key="a", n=2), Row(key="a", n=5)]  # PyFlink sorts named fields: (key, n)
    out = _keyed_job(env, STREAMING, lambda ks: ks.sum("n"), named)
    assert out == [Row(key="a", n=2), Row(key="a", n=7)]
    assert out[1].as_dict() == {"key": "a", "n": 7} and named[0].n == 2  # inputs never mutated
    positional = [Row("a", 2, "p"), Row("a", 1, "q")]
    env2 = StreamExecutionEnvironment.get_execution_environment()
    assert _keyed_job(env2, STREAMING, lambda ks: ks.min(1), positional) == [Row("a", 2, "p"), Row("a", 1, "p")]
    env3 = StreamExecutionEnvironment.get_execution_environment()
    lists = [["a", 1], ["a", 2]]
    assert _keyed_job(env3, BATCH, lambda ks: ks.max(-1), lists) == [["a", 2]]
    assert lists == [["a", 1], ["a", 2]]
    env4 = StreamExecutionEnvironment.get_execution_environment()
    collect(env4.from_collection([1]).key_by(lambda x: x % 2).sum())
    assert sorted(run_input(vertex(env4, index=1), [1, 2, 3, 4, 5], runtime_mode=BATCH).collected()) == [6, 9]


def test_sum_over_pairs_handles_records_of_other_shapes(env: StreamExecutionEnvironment) -> None:
    records: list[Any] = [("a", 1), ("b", 1, "extra"), ("a", 2), ["c", 5], ("b", 4), ("c", 1), ("a", 3)]
    out = _keyed_job(env, STREAMING, lambda ks: ks.sum(1), records)
    assert out == [("a", 1), ("b", 1, "extra"), ("a", 3), ["c", 5], ("b", 5, "extra"), ["c", 6], ("a", 6)]


def test_aggregation_field_errors_name_the_operator(env: StreamExecutionEnvironment) -> None:
    with pytest.raises(OperatorError, match=r"'Keyed Aggregation'.*sum\('count'\).*no field named 'count'"):
        _keyed_job(env, STREAMING, lambda ks: ks.sum("count"), [("a", 1)])
    env2 = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(OperatorError, match="'Keyed Aggregation'.*IndexError"):
        _keyed_job(env2, STREAMING, lambda ks: ks.sum(5), [("a", 1)])


def test_word_count_matches_counter_at_parallelism_1_to_4() -> None:
    text = ["the quick brown fox", "jumps over the lazy dog", "the end"] * 50
    expected = collections.Counter(w for line in text for w in line.split())
    for p in (1, 2, 3, 4):
        for mode in (STREAMING, BATCH):
            env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(p)
            if mode == BATCH:
                env.set_runtime_mode(RuntimeExecutionMode.BATCH)
            words = env.from_collection(text).flat_map(lambda s: s.split()).map(lambda w: (w, 1))
            collect(words.key_by(lambda t: t[0]).sum(1))
            out = run_job(env, mode)["out"]
            final: dict[str, int] = {}
            for w, n in out:
                final[w] = max(final.get(w, 0), n)
            assert final == expected
            if mode == BATCH:
                assert len(out) == len(expected)  # one result per key


# -- timers --------------------------------------------------------------------------------------


class Timeout(KeyedProcessFunction):
    """Emits ("timeout", key, ts) 10 ms after the key's last record; ("delete", k) cancels it."""

    def open(self, runtime_context: Any) -> None:
        self.deadline = runtime_context.get_state(ValueStateDescriptor("deadline"))

    def process_element(self, value: tuple[str, str], ctx: Any) -> Iterable[Any]:
        timers = ctx.timer_service()
        old = self.deadline.value()
        if old is not None:
            timers.delete_processing_time_timer(old)
        if value[1] == "delete":
            self.deadline.clear()
            return
        deadline = timers.current_processing_time() + 10
        timers.register_processing_time_timer(deadline)
        timers.register_processing_time_timer(deadline)  # deduplicated
        self.deadline.update(deadline)
        yield "seen", value

    def on_timer(self, timestamp: int, ctx: Any) -> Iterable[Any]:
        yield "timeout", ctx.get_current_key(), timestamp, ctx.timestamp(), ctx.time_domain()
        self.deadline.clear()


def _timer_chain(env: StreamExecutionEnvironment, mode: str = STREAMING) -> tuple[Run, ManualClock, int]:
    collect(env.from_collection([("a", "")]).key_by(lambda r: r[0]).process(Timeout()))
    v = vertex(env, index=1)
    clock = ManualClock(1_000)
    run = make_chain(v, clock=clock, runtime_mode=mode)
    run.chain.open()
    return run, clock, v.inputs[0].target_node_id


def test_processing_time_timers_fire_per_key_when_due(env: StreamExecutionEnvironment) -> None:
    run, clock, target = _timer_chain(env)
    chain = run.chain
    chain.process_batch([("a", "1"), ("b", "1")], target)
    clock.advance(5)
    chain.process_batch([("a", "2"), ("c", "1"), ("c", "delete")], target)  # a moves to 1015
    assert chain.next_timer_ms() == 1010
    chain.advance_processing_time(1009)
    chain.advance_processing_time(1010)
    chain.flush()
    assert [r for r in run.collected() if r[0] == "timeout"] == [("timeout", "b", 1010, 1010, "PROCESSING_TIME")]
    chain.advance_processing_time(2_000)
    chain.flush()
    timeouts = [r for r in run.collected() if r[0] == "timeout"]
    assert timeouts[1:] == [("timeout", "a", 1015, 1015, "PROCESSING_TIME")]
    assert chain.next_timer_ms() is None


def test_pending_processing_timers_are_dropped_at_end_of_streaming_input_but_fire_in_batch(
    env: StreamExecutionEnvironment,
) -> None:
    run, _, target = _timer_chain(env, STREAMING)
    run.chain.process_batch([("a", "1")], target)
    run.chain.end_input()
    assert [r[0] for r in run.collected()] == ["seen"]
    env2 = StreamExecutionEnvironment.get_execution_environment()
    run, _, target = _timer_chain(env2, BATCH)
    run.chain.process_batch([("a", "1")], target)
    run.chain.end_input()
    assert run.collected()[-1] == ("timeout", "a", 1010, 1010, "PROCESSING_TIME")


class AtEnd(KeyedProcessFunction):
    """Registers an event-time timer per record; they fire at the final watermark, in order."""

    def process_element(self, value: tuple[str, int], ctx: Any) -> Iterable[Any]:
        ctx.timer_service().register_event_time_timer(value[1])
        yield "watermark", ctx.timer_service().current_watermark()

    def on_timer(self, timestamp: int, ctx: Any) -> Iterable[Any]:
        yield ctx.time_domain(), ctx.get_current_key(), timestamp
        yield ODD, ("side", timestamp)


def test_event_time_timers_fire_at_the_end_of_input(env: StreamExecutionEnvironment) -> None:
    fired = env.from_collection([("a", 1)]).key_by(lambda r: r[0]).process(AtEnd())
    collect(fired)
    collect(fired.get_side_output(ODD), "side")
    run = run_input(vertex(env, index=1), [("a", 30), ("b", 10), ("a", 20), ("a", 30)])
    assert run.collected()[:4] == [("watermark", -(2**63))] * 4
    assert run.collected()[4:] == [("EVENT_TIME", "b", 10), ("EVENT_TIME", "a", 20), ("EVENT_TIME", "a", 30)]
    assert run.collected("side") == [("side", 10), ("side", 20), ("side", 30)]


def test_timers_in_a_non_keyed_process_function_are_rejected(env: StreamExecutionEnvironment) -> None:
    class SetsTimer(ProcessFunction):
        def process_element(self, value: Any, ctx: Any) -> None:
            ctx.timer_service().register_processing_time_timer(5)

    collect(env.from_collection([1]).process(SetsTimer()))
    with pytest.raises(OperatorError, match="'Process'.*process_element.*keyed stream"):
        run_source(vertex(env, "Collection"))


def test_rate_limited_source_waits_on_the_clock_and_flushes_on_the_buffer_timeout(
    env: StreamExecutionEnvironment,
) -> None:
    factory = operator_factories.GeneratorSourceFactory(lambda i: i, records_per_second=100, count=20)
    collect(env._source("Generator", factory, None))  # the API entry point comes later
    run = make_chain(vertex(env, "Generator"), buffer_timeout_ms=50, source_batch_size=1000)
    run.chain.open()
    assert run.chain.run_source()
    flushed_while_running = list(run.env.collected["out"])
    assert len(flushed_while_running) >= 15  # flushed every 50 ms of manual time, not only at the end
    assert run.env.collect_calls >= 3
    run.chain.end_input()
    assert run.env.collected["out"] == list(range(20))
    assert sum(run.env.clock.waits) >= 180  # type: ignore[attr-defined]  # ~20 records at 100/s


@pytest.mark.parametrize("buffer_timeout_ms, flushes", [(100, 1), (0, 1), (-1, 0)])
def test_an_idle_task_flushes_its_result_writers_once_per_new_output(
    env: StreamExecutionEnvironment, buffer_timeout_ms: int, flushes: int
) -> None:
    """Before a task waits for input it sends what it staged (low latency at low rates), once for
    what it emitted since; -1 (flush only full buffers) keeps them; sinks are left to their timeout."""
    env.from_collection([1]).rebalance().map(lambda x: x + 1).name("Inc").rebalance().print()
    v = vertex(env, "Inc")
    run = make_chain(v, buffer_timeout_ms=buffer_timeout_ms)
    run.chain.open()
    [writer] = run.writers.values()
    run.chain.flush_when_idle()
    assert writer.flushes == 0  # nothing emitted yet
    run.chain.process_batch([1, 2, 3], v.inputs[0].target_node_id)
    run.chain.flush_when_idle()
    run.chain.flush_when_idle()  # nothing new since: no second flush
    assert writer.flushes == flushes and writer.records == [2, 3, 4]


# -- sinks -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "identifier, parallelism, subtask, prefix",
    [(None, 1, 0, ""), (None, 3, 1, "2> "), ("out", 1, 0, "out> "), ("out", 3, 2, "out:3> ")],
)
def test_print_sink_uses_flinks_prefixes(
    env: StreamExecutionEnvironment, identifier: str | None, parallelism: int, subtask: int, prefix: str
) -> None:
    env.set_parallelism(parallelism)
    env.from_sequence(1, 2 * parallelism).print(identifier)
    run = run_source(vertex(env, "Sequence"), subtask)
    assert run.printed == [f"{prefix}{2 * subtask + 1}", f"{prefix}{2 * subtask + 2}"]


class ListSink(SinkFunction):
    def __init__(self) -> None:
        self.values: list[Any] = []

    def invoke(self, value: Any, context: Any = None) -> None:
        self.values.append((value, context.current_processing_time()))


def test_sink_function_invoked_per_record_with_a_context(env: StreamExecutionEnvironment) -> None:
    env.from_collection(["a", "b"]).add_sink(ListSink())
    run = run_source(vertex(env, "Collection"))
    sink = run.chain.operators[-1].factory.function  # type: ignore[attr-defined]
    assert sink.values == [("a", 1000), ("b", 1000)]


def test_file_sink_unwritable_directory_names_operator_and_path(env: StreamExecutionEnvironment, tmp_path: Any) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    base = str(blocker / "out")
    env.from_collection([1]).sink_to(FileSink.for_row_format(base).build()).name("Results")
    run = make_chain(vertex(env, "Collection"))
    with pytest.raises(OperatorError, match=f"'Sink: Results'.*{re.escape(base)}"):
        run.chain.open()
    run.chain.close()  # closing after a failed open is safe


def test_collect_sink_emits_batches_never_per_record(env: StreamExecutionEnvironment) -> None:
    size = sinks.COLLECT_BATCH_SIZE
    collect(env.from_sequence(1, 2 * size + size // 2))
    run = run_source(vertex(env, "Sequence"), source_batch_size=10)
    assert run.collected() == list(range(1, 2 * size + size // 2 + 1))
    assert run.env.collect_calls == 3  # a batch, another as they fill up, the rest at the end


# -- failures name the operator ----------------------------------------------------------------


def test_a_key_selector_that_raises_names_the_operator(env: StreamExecutionEnvironment) -> None:
    collect(env.from_collection([{"k": 1}]).key_by(lambda r: r["missing"]).sum(0).name("Totals"))
    with pytest.raises(OperatorError, match=r"'Totals'.*key selector.*KeyError: 'missing'") as info:
        run_input(vertex(env, index=1), [{"k": 1}])
    assert isinstance(info.value.__cause__, KeyError)


def test_a_none_key_names_the_operator(env: StreamExecutionEnvironment) -> None:
    collect(env.from_collection([1]).key_by(lambda r: None).reduce(lambda a, b: a))
    with pytest.raises(OperatorError, match="'Keyed Reduce'.*key selector.*must not be None"):
        run_input(vertex(env, index=1), [1])


def test_user_exception_names_the_operator_and_keeps_the_cause(env: StreamExecutionEnvironment) -> None:
    collect(env.from_collection([1, 0]).map(lambda x: 1 / x).name("Invert"))
    with pytest.raises(OperatorError, match=r"'Invert' \(subtask 1/1\) failed in map: ZeroDivisionError") as info:
        run_source(vertex(env, "Collection"))
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_unpicklable_record_at_the_collect_sink_names_the_operator(env: StreamExecutionEnvironment) -> None:
    collect(env.from_collection([1]).map(lambda x: threading.Lock()).name("MakeLock"))
    with pytest.raises(OperatorError, match="'Sink: Collect Sink'.*client.*lock"):
        run_source(vertex(env, "Collection"))


def test_unpicklable_record_at_a_result_writer_names_the_operator(env: StreamExecutionEnvironment) -> None:
    env.from_collection([1]).map(lambda x: threading.Lock()).name("MakeLock").rebalance().print()
    with pytest.raises(OperatorError, match="'MakeLock'.*writing to result.*lock"):
        run_source(vertex(env, "Collection"))


def test_a_factory_that_cannot_be_unpickled_names_the_operator(env: StreamExecutionEnvironment) -> None:
    env.from_collection([1]).map(lambda x: x).name("Broken").print()
    v = vertex(env, "Collection")
    v.operators[1].factory = b"not a pickle"
    with pytest.raises(OperatorError, match="'Broken'.*deserialize"):
        make_chain(v)


def test_missing_result_writer_is_reported_at_construction(env: StreamExecutionEnvironment) -> None:
    env.from_collection([1]).rebalance().print()
    v = vertex(env, "Collection")
    with pytest.raises(ValueError, match="no writer"):
        OperatorChain(v, SimpleTaskEnvironment(clock=ManualClock()), {})


# -- sources through the chain -----------------------------------------------------------------


class Counter(SourceFunction):
    def __init__(self, limit: int | None = None) -> None:
        self.limit = limit
        self.running = True
        self.cancelled = 0

    def run(self, ctx: Any) -> None:
        i = 0
        while self.running and (self.limit is None or i < self.limit):
            try:
                ctx.collect(i)
            except Exception:  # a careless user: must not swallow cancellation
                pass
            i += 1

    def cancel(self) -> None:
        self.cancelled += 1
        self.running = False


def test_source_function_runs_to_its_end_in_batches(env: StreamExecutionEnvironment) -> None:
    collect(env.add_source(Counter(2500)))
    run = run_source(vertex(env, "Custom Source"), source_batch_size=1000)
    assert run.collected() == list(range(2500))
    assert run.chain.snapshot_positions() == {"records": 2500}


def test_cancel_stops_an_endless_source_function(env: StreamExecutionEnvironment) -> None:
    seen: list[int] = []

    def stop_after(records: list[Any]) -> None:
        seen.extend(records)
        if len(seen) >= 300:
            run.env.cancel()

    env.add_source(Counter()).add_sink(lambda x: None)
    run = make_chain(vertex(env, "Custom Source"), source_batch_size=100)
    run.chain.head.output = stop_after
    run.chain.open()
    assert run.chain.run_source() is False
    source = run.chain.head.factory.function  # type: ignore[attr-defined]
    assert source.cancelled == 1 and len(seen) == 300


def test_cancel_stops_a_pull_source(env: StreamExecutionEnvironment) -> None:
    env.from_sequence(1, 10_000).print()
    run = make_chain(vertex(env, "Sequence"), source_batch_size=100)
    run.chain.open()
    run.env.cancel()
    assert run.chain.run_source() is False
    assert run.printed == []


def test_missing_input_file_names_operator_and_path(env: StreamExecutionEnvironment, tmp_path: Any) -> None:
    path = str(tmp_path / "nope.txt")
    env.read_text_file(path).print()
    run = make_chain(vertex(env, "Read Text File"))
    with pytest.raises(OperatorError, match=f"'Source: Read Text File'.*{re.escape(path)}"):
        run.chain.open()


def test_positions_restore_resumes_a_sequence(env: StreamExecutionEnvironment) -> None:
    collect(env.from_sequence(1, 100))
    v = vertex(env, "Sequence")
    run = make_chain(v, source_batch_size=30)
    run.chain.restore_positions({"1..100": 61})
    run.chain.open()
    run.chain.run_source()
    run.chain.end_input()
    assert run.collected() == list(range(61, 101))
    assert run.chain.snapshot_positions() == {"1..100": 101}


@pytest.mark.parametrize("restored, expected", [
    ({"1..30": 21, "71..75": 71}, [*range(21, 31), *range(71, 76)]),  # ranges a rescale cut anew
    ({}, []),  # a subtask a rescale left without ranges
])
def test_a_restored_sequence_reads_the_ranges_it_restored_not_its_share_of_the_plan(
        env: StreamExecutionEnvironment, restored: dict[str, int], expected: list[int]) -> None:
    """The bug: at the same parallelism after a rescale (a failover, a resumed savepoint) a
    generator or sequence subtask read its plan's range from the start again, ignoring the
    ranges in its snapshot: records were read twice."""
    env.set_parallelism(2)
    collect(env.from_sequence(1, 100))
    run = make_chain(vertex(env, "Sequence"), subtask=0, source_batch_size=30)
    run.chain.restore_positions(restored)
    run.chain.open()
    run.chain.run_source()
    run.chain.end_input()
    assert run.collected() == expected


def test_keyed_state_snapshot_and_restore_through_the_chain(env: StreamExecutionEnvironment) -> None:
    collect(env.from_collection([("a", 1)]).key_by(lambda r: r[0]).sum(1))
    v = vertex(env, index=1)
    first = run_input(v, [("a", 1), ("b", 2), ("a", 3)])
    snapshot = first.chain.snapshot_keyed_state()
    second = make_chain(v)
    second.chain.restore_keyed_state(snapshot)
    second.chain.open()
    second.chain.process_batch([("a", 10), ("b", 10)], v.inputs[0].target_node_id)
    second.chain.end_input()
    assert second.collected() == [("a", 14), ("b", 12)]


def test_a_job_scripts_dataclass_crosses_the_harness_exchange_and_collect() -> None:
    """The harness writes through the real serializer: a class the C pickler cannot find by reference
    (a job script's, as a Spark worker sees it) must travel, as it does on a cluster."""

    @dataclass(frozen=True)
    class Order:
        customer: str
        amount: int

    Order.__module__, Order.__qualname__ = "__main__", "Order"
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    orders = env.from_sequence(0, 99).map(lambda i: Order(f"c{i % 3}", i))
    collect(orders.key_by(lambda o: o.customer).reduce(lambda a, b: Order(a.customer, a.amount + b.amount)))
    out = run_job(env, BATCH)["out"]
    assert sorted(out, key=lambda o: o.customer) == [Order(f"c{c}", sum(range(c, 100, 3))) for c in range(3)]


class _Batched:
    """A flat_map function with ``flat_map_batch``: one call per slice, one output list per record."""

    def flat_map(self, value: Any) -> Any:
        raise AssertionError("the operator calls flat_map_batch, not flat_map per record")

    def flat_map_batch(self, records: list[Any]) -> list[list[Any]]:
        return [[r, -r] if r % 3 == 0 else [] for r in records]


@pytest.mark.parametrize("stamped_input", [False, True])
def test_a_flat_map_with_flat_map_batch_gets_each_slice_in_one_call(
        env: StreamExecutionEnvironment, stamped_input: bool) -> None:
    """The Table API's pandas functions (millstream.table.vectorized): the operator hands a slice to
    ``flat_map_batch`` whole; each record's outputs keep its place and its timestamp."""
    from millstream.datastream.functions import FlatMapFunction
    from millstream.runtime.timestamps import TimestampedBatch, timestamps_of

    class Batched(_Batched, FlatMapFunction):
        pass

    function = Batched()
    env.from_collection([0]).rebalance().flat_map(function).rebalance().print()
    v = vertex(env, "FlatMap")
    run = make_chain(v)
    writer = BatchWriter()
    run.chain = OperatorChain(v, run.env, {ds.id: writer for ds in v.produced})
    run.chain.open()
    records = list(range(1000))
    batch = TimestampedBatch(records, [5000 + r for r in records]) if stamped_input else records
    run.chain.process_batch(batch, v.inputs[0].target_node_id)
    run.chain.end_input()
    run.chain.close()
    assert [x for b in writer.batches for x in b] == [x for r in records if r % 3 == 0 for x in (r, -r)]
    if stamped_input:
        assert [t for b in writer.batches for t in timestamps_of(b)] == [5000 + r for r in records if r % 3 == 0
                                                                         for _ in (0, 1)]
