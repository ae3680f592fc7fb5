"""Event time through the runtime: timestamps on records, watermarks between operators and tasks.

Rules (Flink): a record keeps its timestamp through map/filter/flat_map/reduce/process; the
results of a process function carry their input's timestamp, an event-time timer's results the
timer's; ``assign_timestamps_and_watermarks`` emits ``max timestamp - bound - 1`` every
auto-watermark interval; an operator forwards a watermark after firing the event-time timers it
makes due; a task's watermark is the minimum over its input channels; a two-input operator's is
the minimum of its inputs (idle ones excluded); the end of input is the watermark ``Long.MAX_VALUE``.

Jobs are built with the public API and run vertex by vertex in process: ``run_job`` below carries
batches (with their timestamps) and watermark events from each producer's writer to its consumers'
input channels in order, through the task's own watermark valves, as the network does.
"""
from __future__ import annotations

import collections
from typing import Any

import cloudpickle
import pytest

from millstream.common import Configuration, Duration, WatermarkStrategy
from millstream.common.watermark_strategy import TimestampAssigner
from millstream.datastream import (
    KeyedProcessFunction,
    ProcessFunction,
    SourceFunction,
    StreamExecutionEnvironment,
)
from millstream.runtime import operator_factories
from millstream.runtime.partitioners import KeyGroupStreamPartitioner, RebalancePartitioner
from millstream.runtime.task.chain import OperatorChain
from millstream.runtime.task.environment import ManualClock, SimpleTaskEnvironment
from millstream.runtime.timestamps import LONG_MAX, LONG_MIN, TimestampedBatch, stamped, timestamps_of
from millstream.runtime.watermarks import InputWatermarks, WatermarkStatus

# -- harness -----------------------------------------------------------------------------------


class EventWriter:
    """A ResultWriter that keeps what was emitted in order: batches and watermark events."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def emit(self, records: list[Any]) -> None:
        self.events.append(("records", records))

    def flush(self) -> None:
        pass

    def emit_watermark(self, watermark: int) -> None:
        self.events.append(("watermark", watermark))

    def emit_watermark_status(self, idle: bool) -> None:
        self.events.append(("idle", idle))

    @property
    def watermarks(self) -> list[int]:
        return [w for kind, w in self.events if kind == "watermark"]


def collect(ds: Any, collect_id: str = "out") -> None:
    ds._sink("Collect Sink", operator_factories.CollectSinkFactory(collect_id=collect_id))


def make_chain(v: Any, subtask: int, clock: ManualClock, **kwargs: Any) -> tuple[OperatorChain, SimpleTaskEnvironment, dict]:
    env = SimpleTaskEnvironment(task_name=v.name, subtask_index=subtask, parallelism=v.parallelism,
                                max_parallelism=v.max_parallelism, clock=clock, **kwargs)
    writers = {ds.id: EventWriter() for ds in v.produced}
    return OperatorChain(v, env, writers), env, writers


def run_job(env: StreamExecutionEnvironment, clock: ManualClock | None = None, ms_per_batch: int = 0,
            **kwargs: Any) -> dict[str, list[Any]]:
    """Runs every vertex and subtask in topological order. A source reads batch by batch with the
    clock moving ``ms_per_batch`` after each; consumers get each producer's batches and watermarks
    in order, channel by channel, through an InputWatermarks valve per task (as taskmanager/task_body.py)."""
    clock = clock or ManualClock(1_000)
    graph = env.get_job_graph().proto
    inbox: dict[tuple[bytes, int], list[tuple[int, str, Any, int]]] = collections.defaultdict(list)  # (channel, kind, payload, target)
    channels_of: dict[tuple[bytes, int], list[int]] = collections.defaultdict(list)  # input index per channel
    collected: dict[str, list[Any]] = collections.defaultdict(list)
    for v in graph.vertices:
        for subtask in range(v.parallelism):
            chain, task_env, writers = make_chain(v, subtask, clock, **kwargs)
            chain.open()
            if v.is_source:
                source = chain.head
                reader = source.reader
                while (batch := reader.poll()) is not None:
                    if batch:
                        source.emit_batch(batch)
                    clock.advance(ms_per_batch)
                    chain.between_batches()
            else:
                valves = InputWatermarks(channels_of[(v.id, subtask)])
                for channel, kind, payload, target in inbox.pop((v.id, subtask), []):
                    input_index = channels_of[(v.id, subtask)][channel]
                    if kind == "records":
                        chain.process_batch(payload, target, input_index)
                        clock.advance(ms_per_batch)
                        chain.between_batches()
                        continue
                    if kind == "watermark":
                        events = valves.watermark(channel, payload)
                    elif kind == "idle":
                        events = valves.status(channel, payload)
                    else:
                        events = valves.end_of_input(channel)
                    for index, event in events:
                        if type(event) is int:
                            chain.process_watermark(event, index)
                        else:
                            chain.process_watermark_status(event is WatermarkStatus.IDLE, index)
            chain.end_input()
            chain.close()
            for k, recs in task_env.collected.items():
                collected[k].extend(recs)
            for ds in v.produced:
                consumer = next(c for c in graph.vertices if c.id == ds.consumer_vertex)
                input_index = next(e.input_index for e in consumer.inputs if e.result_id == ds.id)
                partitioner = cloudpickle.loads(ds.partitioner.payload)
                partitioner.setup(consumer.parallelism)
                targets = [subtask] if partitioner.pointwise else list(range(consumer.parallelism))
                channel_ids = {}
                for t in targets:
                    channels_of[(consumer.id, t)].append(input_index)
                    channel_ids[t] = len(channels_of[(consumer.id, t)]) - 1
                for kind, payload in writers[ds.id].events + [("end", None)]:
                    if kind != "records":
                        for t in targets:
                            inbox[(consumer.id, t)].append((channel_ids[t], kind, payload, ds.target_node_id))
                        continue
                    if len(targets) == 1:
                        routed = [(payload, timestamps_of(payload))]
                    elif partitioner.broadcast:
                        routed = [(payload, timestamps_of(payload))] * len(targets)
                    else:
                        ts = timestamps_of(payload)
                        routed = partitioner.route_stamped(payload, ts) if ts is not None else [
                            (r, None) for r in partitioner.route(payload)]
                    for t, (recs, ts) in zip(targets, routed):
                        if recs:
                            inbox[(consumer.id, t)].append((channel_ids[t], "records", stamped(recs, ts), ds.target_node_id))
    return collected


class WithTimestamp(ProcessFunction):
    """Emits (value, ctx.timestamp(), current watermark): what a record carries when it gets here."""

    def process_element(self, value: Any, ctx: ProcessFunction.Context):  # type: ignore[override]
        yield value, ctx.timestamp(), ctx.timer_service().current_watermark()


class FirstField(TimestampAssigner):
    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return value[0]


def bounded(ms: int = 0) -> WatermarkStrategy:
    return WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(ms)).with_timestamp_assigner(FirstField())


@pytest.fixture
def env() -> StreamExecutionEnvironment:
    e = StreamExecutionEnvironment.get_execution_environment()
    e.set_parallelism(1)
    return e


# -- timestamps on records ---------------------------------------------------------------------


def test_records_keep_their_timestamps_through_stateless_and_keyed_operators(env: StreamExecutionEnvironment) -> None:
    rows = [(5, "a"), (3, "b b"), (9, "c"), (1, "d")]
    stream = env.from_collection(rows).assign_timestamps_and_watermarks(bounded())
    stream = stream.map(lambda r: (r[0], r[1].upper())).filter(lambda r: r[1] != "D")
    stream = stream.flat_map(lambda r: [(r[0], w) for w in r[1].split()])
    stream = stream.key_by(lambda r: r[1]).map(lambda r: r).key_by(lambda r: r[1]).reduce(lambda a, b: (a[0] + b[0], a[1]))
    collect(stream.process(WithTimestamp()))
    out = run_job(env)["out"]
    # every result carries the timestamp of the record it came from (a reduce's: the latest record's)
    assert sorted((v, ts) for v, ts, _ in out) == sorted([((5, "A"), 5), ((3, "B"), 3), ((6, "B"), 3), ((9, "C"), 9)])


def test_a_record_without_a_timestamp_has_none(env: StreamExecutionEnvironment) -> None:
    collect(env.from_collection([1, 2]).map(lambda x: x * 10).process(WithTimestamp()))
    assert run_job(env)["out"] == [(10, None, LONG_MIN), (20, None, LONG_MIN)]


def test_process_results_and_side_outputs_carry_the_input_timestamp(env: StreamExecutionEnvironment) -> None:
    from millstream.datastream import OutputTag

    tag = OutputTag("odd")

    class Split(ProcessFunction):
        def process_element(self, value: Any, ctx: ProcessFunction.Context):  # type: ignore[override]
            if value[0] % 2:
                ctx.output(tag, value)
            else:
                yield value

    main = env.from_collection([(2, "x"), (3, "y")]).assign_timestamps_and_watermarks(bounded()).process(Split())
    collect(main.process(WithTimestamp()), "main")
    collect(main.get_side_output(tag).process(WithTimestamp()), "side")
    out = run_job(env)
    assert [(v, ts) for v, ts, _ in out["main"]] == [((2, "x"), 2)]
    assert [(v, ts) for v, ts, _ in out["side"]] == [((3, "y"), 3)]


# -- watermarks --------------------------------------------------------------------------------


def test_bounded_out_of_orderness_emits_max_minus_bound_minus_one_every_interval(env: StreamExecutionEnvironment) -> None:
    env.get_config().set_auto_watermark_interval(200)
    stream = env.from_collection([(1000, "a"), (5000, "b"), (3000, "c")]).assign_timestamps_and_watermarks(bounded(1000))
    collect(stream.process(WithTimestamp()))
    graph = env.get_job_graph().proto
    assert graph.execution_config.auto_watermark_interval_ms == 200
    clock = ManualClock(0)
    chain, _, writers = make_chain(graph.vertices[0], 0, clock, source_batch_size=1,
                                   auto_watermark_interval_ms=200)
    chain.open()
    source = chain.head
    seen = []
    while (batch := source.reader.poll()) is not None:
        source.emit_batch(batch)
        clock.advance(250)
        chain.between_batches()
        seen.append(chain.operators[-2].current_watermark)
    # after each record: the periodic watermark is max(ts) - 1000 - 1
    assert seen == [-1, 3999, 3999]
    chain.end_input()
    chain.close()


def test_event_time_timers_fire_in_order_as_the_watermark_passes_not_only_at_the_end(env: StreamExecutionEnvironment) -> None:
    class Alarm(KeyedProcessFunction):
        def process_element(self, value: Any, ctx: KeyedProcessFunction.Context):  # type: ignore[override]
            ctx.timer_service().register_event_time_timer(value[0] + 10)
            yield "in", value[0], ctx.timer_service().current_watermark()

        def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext):  # type: ignore[override]
            yield "timer", timestamp, ctx.timestamp(), ctx.time_domain()

    rows = [(0, "k"), (5, "k"), (30, "k"), (31, "j"), (100, "k")]
    stream = env.from_collection(rows).assign_timestamps_and_watermarks(bounded(0))
    collect(stream.key_by(lambda r: r[1]).process(Alarm()).process(WithTimestamp()))
    out = run_job(env, ms_per_batch=1000, source_batch_size=1)["out"]
    values = [v for v, _, _ in out]
    # timers at 10 and 15 fire when the watermark passes 15 (after record 30), before record 31 arrives;
    # 40 and 41 after record 100 (watermark 99); 110 only at the final watermark
    assert values == [
        ("in", 0, LONG_MIN), ("in", 5, -1), ("in", 30, 4),
        ("timer", 10, 10, "EVENT_TIME"), ("timer", 15, 15, "EVENT_TIME"),
        ("in", 31, 29), ("in", 100, 30),
        ("timer", 40, 40, "EVENT_TIME"), ("timer", 41, 41, "EVENT_TIME"),
        ("timer", 110, 110, "EVENT_TIME"),
    ]
    # a timer's results carry the timer's timestamp
    assert [ts for v, ts, _ in out if v[0] == "timer"] == [10, 15, 40, 41, 110]


def test_watermarks_go_downstream_only_when_they_advance_and_end_with_long_max(env: StreamExecutionEnvironment) -> None:
    stream = env.from_collection([(10, "a"), (5, "b"), (20, "c")]).assign_timestamps_and_watermarks(bounded(0))
    stream.key_by(lambda r: r[1]).map(lambda r: r).print()
    graph = env.get_job_graph().proto
    chain, _, writers = make_chain(graph.vertices[0], 0, ManualClock(0), source_batch_size=1)
    chain.open()
    source = chain.head
    while (batch := source.reader.poll()) is not None:
        source.emit_batch(batch)
        chain.env.clock.advance(500)  # type: ignore[attr-defined]
        chain.between_batches()
    chain.end_input()
    (writer,) = writers.values()
    assert writer.watermarks == [9, 19, LONG_MAX]
    # each watermark follows the records it covers
    kinds = [k for k, _ in writer.events]
    assert kinds == ["records", "watermark", "records", "records", "watermark", "watermark"]


def test_a_task_watermark_is_the_minimum_over_its_channels_and_a_rebalance_keeps_it_moving(env: StreamExecutionEnvironment) -> None:
    env.set_parallelism(2)
    rows = [(t, "k") for t in range(0, 100, 10)]
    stream = env.from_collection(rows).assign_timestamps_and_watermarks(bounded(0)).set_parallelism(1)
    collect(stream.rebalance().map(lambda r: r).process(WithTimestamp()))
    out = run_job(env, ms_per_batch=1000, source_batch_size=1)["out"]
    assert sorted(v[0] for v, _, _ in out) == list(range(0, 100, 10))
    # the watermark seen with a record never passes the record's own timestamp (no record is late)
    assert all(wm < ts for (v, ts, wm) in out)
    # and it advanced on both subtasks, though each gets every other record
    assert max(wm for _, _, wm in out) >= 70


def test_input_watermarks_keep_one_valve_per_input_and_take_the_minimum_per_input() -> None:
    valves = InputWatermarks([0, 0, 1])  # channels 0 and 1 feed input 0, channel 2 input 1
    assert valves.watermark(0, 10) == []  # channel 1 still at Long.MIN_VALUE
    assert valves.watermark(1, 7) == [(0, 7)]
    assert valves.watermark(2, 3) == [(1, 3)]
    assert valves.status(1, True) == [(0, 10)]  # the idle channel no longer holds input 0 back
    assert valves.end_of_input(0) == [(0, LONG_MAX)]


def test_a_two_input_operator_takes_the_minimum_of_its_inputs_and_skips_an_idle_one(env: StreamExecutionEnvironment) -> None:
    from millstream.datastream import CoProcessFunction

    class Both(CoProcessFunction):
        def process_element1(self, value: Any, ctx: Any):  # type: ignore[override]
            yield value

        def process_element2(self, value: Any, ctx: Any):  # type: ignore[override]
            yield value

    one = env.from_collection([(1, "a")])
    two = env.from_collection([(2, "b")])
    one.connect(two).process(Both()).print()
    v = next(x for x in env.get_job_graph().proto.vertices if not x.is_source)
    chain, _, writers = make_chain(v, 0, ManualClock(0))
    chain.open()
    (writer,) = writers.values() if writers else (None,)
    head = chain.head
    chain.process_watermark(100, 0)
    assert head.current_watermark == LONG_MIN
    chain.process_watermark(50, 1)
    assert head.current_watermark == 50
    chain.process_watermark_status(True, 1)  # input 1 idle: input 0 alone decides
    assert head.current_watermark == 100
    chain.end_input()
    assert head.current_watermark == LONG_MAX


# -- sources -----------------------------------------------------------------------------------


def test_a_source_function_emits_timestamps_and_its_own_watermarks(env: StreamExecutionEnvironment) -> None:
    class Clocked(SourceFunction):
        def run(self, ctx: SourceFunction.SourceContext) -> None:
            ctx.collect_with_timestamp("a", 100)
            ctx.collect("b")
            ctx.emit_watermark(150)
            ctx.collect_with_timestamp("c", 200)

        def cancel(self) -> None:
            pass

    collect(env.add_source(Clocked()).process(WithTimestamp()))
    graph = env.get_job_graph().proto
    chain, task_env, _ = make_chain(graph.vertices[0], 0, ManualClock(0))
    chain.open()
    assert chain.run_source()
    chain.end_input()
    assert task_env.collected["out"] == [("a", 100, LONG_MIN), ("b", None, LONG_MIN), ("c", 200, 150)]


def test_from_source_with_a_strategy_stamps_the_records(env: StreamExecutionEnvironment, tmp_path: Any) -> None:
    from millstream.datastream.connectors.file_system import FileSource, StreamFormat

    path = tmp_path / "in.txt"
    path.write_text("3\n1\n2\n")
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(path)).build()
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda line, _: int(line) * 1000)
    collect(env.from_source(source, strategy, "lines").process(WithTimestamp()))
    out = run_job(env)["out"]
    assert [(v, ts) for v, ts, _ in out] == [("3", 3000), ("1", 1000), ("2", 2000)]


def test_the_auto_watermark_interval_is_read_from_the_configuration() -> None:
    conf = Configuration()
    conf.set_string("pipeline.auto-watermark-interval", "50 ms")
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    assert env.get_config().get_auto_watermark_interval() == 50
    env.from_collection([1]).print()
    assert env.get_job_graph().proto.execution_config.auto_watermark_interval_ms == 50
    with pytest.raises(ValueError, match="negative"):
        env.get_config().set_auto_watermark_interval(-1)


def test_assign_timestamps_and_watermarks_needs_a_strategy(env: StreamExecutionEnvironment) -> None:
    with pytest.raises(TypeError, match="WatermarkStrategy"):
        env.from_collection([1]).assign_timestamps_and_watermarks(lambda x: x)  # type: ignore[arg-type]


def test_a_failing_timestamp_assigner_is_reported_as_the_operator_s_error(env: StreamExecutionEnvironment) -> None:
    from millstream.runtime.task.chain import OperatorError

    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, _: v["missing"])
    collect(env.from_collection([{"a": 1}]).assign_timestamps_and_watermarks(strategy))
    with pytest.raises(OperatorError, match="Timestamps/Watermarks.*extract_timestamp.*KeyError"):
        run_job(env)


# -- the network carries timestamps ------------------------------------------------------------


@pytest.mark.parametrize("partitioner", [KeyGroupStreamPartitioner(lambda r: r[1], 128), RebalancePartitioner()])
def test_route_stamped_sends_each_timestamp_with_its_record(partitioner: Any) -> None:
    from millstream.runtime.partitioners import key_function  # noqa: F401  (the selector is a plain function)

    if isinstance(partitioner, KeyGroupStreamPartitioner):
        partitioner.key_selector = type("K", (), {"get_key": staticmethod(lambda r: r[1])})()
    partitioner.setup(3)
    records = [(i, f"k{i % 7}") for i in range(50)]
    routed = partitioner.route_stamped(records, [r[0] * 10 for r in records])
    for recs, ts in routed:
        assert ts == [r[0] * 10 for r in recs]
    assert sorted(r for recs, _ in routed for r in recs) == records


def test_a_slice_of_a_timestamped_batch_keeps_its_timestamps() -> None:
    from millstream.runtime.task.batch_slicer import BatchSlicer

    batch = TimestampedBatch(list("abcdef"), [1, 2, 3, 4, 5, 6])
    assert timestamps_of(batch[2:4]) == [3, 4] and batch[1] == "b"
    slicer = BatchSlicer(100)
    parts = list(slicer.slices(batch))  # the first slice is a probe of a few records
    assert [t for p in parts for t in timestamps_of(p)] == [1, 2, 3, 4, 5, 6]
