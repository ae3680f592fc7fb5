"""The metric types and groups user functions register, as PyFlink documents them."""
from __future__ import annotations

import pytest

from millstream.datastream import MapFunction, RuntimeContext
from millstream.runtime.metrics import Counter, Distribution, Meter, TaskMetricGroup
from millstream.runtime.metrics.groups import sanitize
from millstream.runtime.task.environment import SimpleTaskEnvironment, StreamingRuntimeContext


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_counter_goes_up_and_down() -> None:
    c = Counter()
    c.inc()
    c.inc(5)
    c.dec(2)
    assert c.get_count() == 4


def test_meter_rate_over_its_time_span() -> None:
    clock = FakeClock()
    meter = Meter(time_span_in_seconds=10, clock=clock)
    for _ in range(20):  # 100 events a second for 20 s, sampled every second
        meter.mark_event(100)
        clock.now += 1
        meter.get_rate()
    assert meter.get_count() == 2000
    assert meter.get_rate() == pytest.approx(100.0, rel=0.01)
    for _ in range(10):  # then 10 a second: after one span the old rate is forgotten
        meter.mark_event(10)
        clock.now += 1
        meter.get_rate()
    assert meter.get_rate() == pytest.approx(10.0, rel=0.1)


def test_young_meter_rate_is_over_the_elapsed_time() -> None:
    clock = FakeClock()
    meter = Meter(clock=clock)  # 60 s span by default
    meter.mark_event(50)
    clock.now += 2
    assert meter.get_rate() == pytest.approx(25.0)


def test_meter_rejects_a_non_positive_span() -> None:
    with pytest.raises(ValueError, match="time span"):
        Meter(0)


def test_distribution_statistics() -> None:
    d = Distribution()
    assert d.statistics()["count"] == 0
    for v in range(1, 101):
        d.update(v)
    stats = d.statistics()
    assert stats == {"count": 100, "min": 1, "max": 100, "mean": 50.5, "p50": 50, "p95": 95, "p99": 99}


def test_groups_identifiers_and_snapshot() -> None:
    task = TaskMetricGroup(clock=FakeClock())
    op = task.operator_group("Map: parse")
    hits = op.counter("hits")
    hits.inc(3)
    op.add_group("cache").counter("misses").inc()
    op.add_group("region", "eu").gauge("size", lambda: 7)
    op.distribution("latency").update(4)
    snapshot = task.snapshot()
    assert snapshot["Map__parse.hits"] == 3
    assert snapshot["Map__parse.cache.misses"] == 1
    assert snapshot["Map__parse.region.eu.size"] == 7
    assert snapshot["Map__parse.latency_max"] == 4 and snapshot["Map__parse.latency_count"] == 1
    descriptors = task.descriptors()
    assert descriptors["Map__parse.hits"] == ("operator_hits", {"operator_name": "Map: parse"})
    # a key/value group keeps its key in the name and its value in a label, as Flink's reporters
    assert descriptors["Map__parse.region.eu.size"] == ("operator_region_size", {"operator_name": "Map: parse", "region": "eu"})
    assert descriptors["Map__parse.latency_p99"] == ("operator_latency_p99", {"operator_name": "Map: parse"})


def test_registering_again_returns_the_same_metric_and_a_type_clash_is_an_error() -> None:
    task = TaskMetricGroup()
    op = task.operator_group("Map")
    assert op.counter("n") is op.counter("n")
    assert op.add_group("g") is op.add_group("g")
    with pytest.raises(ValueError, match="registered already as a Counter"):
        op.meter("n")
    with pytest.raises(ValueError, match="non-empty string"):
        op.counter("")
    with pytest.raises(TypeError, match="callable"):
        op.gauge("g2", 5)  # type: ignore[arg-type]


def test_a_failing_or_non_numeric_gauge_is_left_out() -> None:
    task = TaskMetricGroup()
    op = task.operator_group("Map")
    op.gauge("broken", lambda: 1 / 0)
    op.gauge("text", lambda: "x")
    op.gauge("nan", lambda: float("nan"))
    op.gauge("ok", lambda: 2.5)
    assert task.snapshot() == {"Map.ok": 2.5}


def test_registration_bumps_the_version() -> None:
    task = TaskMetricGroup()
    before = task.version
    task.operator_group("Map").counter("a")
    assert task.version == before + 1


def test_sanitize_as_flinks_query_service() -> None:
    assert sanitize("Source: numbers") == "Source__numbers"
    assert sanitize("a.b c") == "a_b_c"


def test_runtime_context_gives_the_operators_group() -> None:
    env = SimpleTaskEnvironment()

    class Counting(MapFunction):
        def open(self, runtime_context: RuntimeContext) -> None:
            self.seen = runtime_context.get_metrics_group().add_group("my").counter("seen")

        def map(self, value: int) -> int:
            self.seen.inc()
            return value

    f = Counting()
    f.open(StreamingRuntimeContext(env, "Map", None))
    for i in range(5):
        f.map(i)
    assert env.metrics.snapshot() == {"Map.my.seen": 5}


def test_scope_variables_and_identifiers_as_pyflinks_metric_group() -> None:
    from millstream.metrics import MetricGroup

    env = SimpleTaskEnvironment(job_name="wc", task_name="Map -> Sink", subtask_index=1, parallelism=2)
    group = StreamingRuntimeContext(env, "Map", None).get_metrics_group()
    assert isinstance(group, MetricGroup)
    region = group.add_group("region", "eu")
    assert region.get_scope_components() == ["Map", "region", "eu"]
    assert region.get_metric_identifier("hits") == "Map.region.eu.hits"
    assert region.get_all_variables() == {"<job_name>": "wc", "<task_name>": "Map -> Sink", "<subtask_index>": "1",
                                          "<task_attempt_num>": "0", "<operator_name>": "Map", "<region>": "eu"}
    assert "<region>" not in group.add_group("region").get_all_variables()  # a plain group adds no variable
