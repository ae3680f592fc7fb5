"""Two-input jobs on the embedded cluster (two TaskManagers, real Spark): connect with a CoMapFunction,
a keyed join of two streams with a KeyedCoProcessFunction, and broadcast rules applied to a keyed
stream with a KeyedBroadcastProcessFunction. Expected outputs are computed here independently."""
from __future__ import annotations


import pytest

from millstream.common import Types
from millstream.datastream import (
    CoMapFunction,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
    StreamExecutionEnvironment,
)
from millstream.datastream.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor

from .harness import ClusterSpec

pytestmark = pytest.mark.timeout(180)
CLUSTER = ClusterSpec(taskmanagers=2, jobmanager_env=True)


def _env(parallelism: int) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    return env


class Describe(CoMapFunction):
    def map1(self, value: int) -> str:
        return f"number {value}"

    def map2(self, value: str) -> str:
        return f"word {value}"


def test_connected_streams_co_map_sees_which_input_each_record_came_from(cluster) -> None:
    env = _env(2)
    numbers = env.from_collection(list(range(50)))
    words = env.from_collection([f"w{i}" for i in range(30)])
    described = numbers.connect(words).map(Describe(), Types.STRING())
    with described.execute_and_collect("co-map") as results:
        got = list(results)
    assert sorted(got) == sorted([f"number {i}" for i in range(50)] + [f"word w{i}" for i in range(30)])


class Join(KeyedCoProcessFunction):
    """Orders (id, customer) and payments (id, amount) joined by order id, whichever comes first."""

    def open(self, runtime_context) -> None:
        self.order = runtime_context.get_state(ValueStateDescriptor("order", Types.STRING()))
        self.paid = runtime_context.get_list_state(ListStateDescriptor("paid", Types.INT()))

    def process_element1(self, value, ctx):
        self.order.update(value[1])
        for amount in self.paid.get():
            yield (ctx.get_current_key(), value[1], amount)
        self.paid.clear()

    def process_element2(self, value, ctx):
        customer = self.order.value()
        if customer is None:
            self.paid.add(value[1])
        else:
            yield (ctx.get_current_key(), customer, value[1])


def test_keyed_connected_streams_join_orders_and_payments_across_task_managers(cluster) -> None:
    env = _env(3)
    orders = env.from_collection([(f"o{i}", f"customer{i % 7}") for i in range(200)])
    # two payments for every third order, none for every fifth
    payments = env.from_collection(
        [(f"o{i}", i) for i in range(200) if i % 5] + [(f"o{i}", 1000 + i) for i in range(0, 200, 3) if i % 5]
    )
    joined = orders.connect(payments).key_by(lambda o: o[0], lambda p: p[0]).process(Join())
    with joined.execute_and_collect("keyed join") as results:
        got = list(results)
    expected = [(f"o{i}", f"customer{i % 7}", i) for i in range(200) if i % 5]
    expected += [(f"o{i}", f"customer{i % 7}", 1000 + i) for i in range(0, 200, 3) if i % 5]
    assert sorted(got) == sorted(expected)


LIMITS = MapStateDescriptor("limits", Types.STRING(), Types.INT())


class OverLimit(KeyedBroadcastProcessFunction):
    """Readings (sensor, value) alert when above their sensor's limit; limits come as broadcast rules.
    A reading whose rule has not arrived yet waits in keyed state until the end of input (the final
    watermark fires its event-time timer), so the output does not depend on which input is read first."""

    def open(self, runtime_context) -> None:
        self.waiting = runtime_context.get_list_state(ListStateDescriptor("waiting", Types.INT()))

    def _check(self, sensor, value, limits):
        if value > limits.get(sensor):
            yield (sensor, value, limits.get(sensor))

    def process_element(self, value, ctx):
        limits = ctx.get_broadcast_state(LIMITS)
        if limits.contains(value[0]):
            yield from self._check(value[0], value[1], limits)
        else:
            self.waiting.add(value[1])
            ctx.timer_service().register_event_time_timer(0)

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(LIMITS).put(value[0], value[1])

    def on_timer(self, timestamp, ctx):
        limits = ctx.get_broadcast_state(LIMITS)
        sensor = ctx.get_current_key()
        for value in self.waiting.get():
            if limits.contains(sensor):
                yield from self._check(sensor, value, limits)
            else:
                yield (sensor, value, "no rule")
        self.waiting.clear()


def test_broadcast_rules_apply_to_a_keyed_stream_on_every_parallel_instance(cluster) -> None:
    env = _env(3)
    sensors = [f"s{i}" for i in range(12)]
    limits = {s: 10 * i for i, s in enumerate(sensors) if s != "s11"}  # s11 has no rule
    readings = [(s, v) for v in range(0, 130, 7) for s in sensors]
    rules = env.from_collection(sorted(limits.items()))
    alerts = (
        env.from_collection(readings)
        .key_by(lambda r: r[0])
        .connect(rules.broadcast(LIMITS))
        .process(OverLimit())
    )
    with alerts.execute_and_collect("broadcast rules") as results:
        got = list(results)
    expected = [(s, v, limits[s]) for s, v in readings if s in limits and v > limits[s]]
    expected += [("s11", v, "no rule") for s, v in readings if s == "s11"]
    assert sorted(got, key=repr) == sorted(expected, key=repr)  # each reading checked once, on its key's instance
