"""Records of user-defined classes (dataclass, namedtuple, plain class, a shipped module's class)
cross every exchange, ``execute_and_collect``, print and keyed state.

The first test is the user's day-one case: a real job script run as ``python job.py`` (embedded
cluster), where the classes live in ``__main__`` — which, in a Spark worker, is not the script. The
others run on an in-process cluster whose test module travels by value, the same situation.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import namedtuple
from dataclasses import dataclass

import pytest

from millstream.common import Types
from millstream.datastream import KeyedProcessFunction, RuntimeExecutionMode, StreamExecutionEnvironment
from millstream.datastream.state import ValueStateDescriptor

from .harness import ClusterSpec

pytestmark = pytest.mark.timeout(240)
CLUSTER = ClusterSpec(taskmanagers=2, jobmanager_env=True)

SHAPES = '''
from dataclasses import dataclass


@dataclass(frozen=True)
class Box:
    label: str
    size: int
'''

JOB = '''
import json
import os
from collections import namedtuple
from dataclasses import dataclass

from millstream.common import Types
from millstream.datastream import KeyedProcessFunction, RuntimeExecutionMode, StreamExecutionEnvironment
from millstream.datastream.state import ValueStateDescriptor
from shapes import Box  # a module shipped with add_python_file: its class travels by reference


@dataclass(frozen=True)
class Order:
    customer: str
    amount: int


Region = namedtuple("Region", "customer parity")


class Tally:
    """A plain class."""

    def __init__(self, customer, n):
        self.customer = customer
        self.n = n

    def __eq__(self, other):
        return type(other) is Tally and (self.customer, self.n) == (other.customer, other.n)

    def __repr__(self):
        return f"Tally({self.customer!r}, {self.n})"


class LargestOrder(KeyedProcessFunction):
    """Keeps each region's largest Order in a ValueState and emits it with the key."""

    def open(self, runtime_context):
        self.largest = runtime_context.get_state(ValueStateDescriptor("largest", Types.PICKLED_BYTE_ARRAY()))

    def process_element(self, order, ctx):
        best = self.largest.value()
        if best is None or order.amount > best.amount:
            best = order
            self.largest.update(best)
        assert type(best) is Order and type(ctx.get_current_key()) is Region
        yield "largest", ctx.get_current_key(), best


env = StreamExecutionEnvironment.get_execution_environment()
env.add_python_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), "shapes.py"))
env.set_parallelism(2)
env.set_runtime_mode(RuntimeExecutionMode.BATCH)

orders = env.from_sequence(0, 199).map(lambda i: Order(f"c{i % 5}", i))  # created in the workers
totals = orders.key_by(lambda o: o.customer).reduce(lambda a, b: Order(a.customer, a.amount + b.amount))
largest = orders.key_by(lambda o: Region(o.customer, o.amount % 2)).process(LargestOrder())
tallies = (orders.map(lambda o: Tally(o.customer, 1))
           .key_by(lambda t: t.customer).reduce(lambda a, b: Tally(a.customer, a.n + b.n)))
given = env.from_collection([Order("given", 1), Order("given", 2)])  # created in the client
orders.filter(lambda o: o.amount < 3).rebalance().print()

# The collect sink has several inputs, so every branch reaches it through the exchange.
# (7 vertices at parallelism 2: within the embedded TaskManager's concurrent task limit.)
everything = totals.map(lambda o: ("total", o)).union(
    largest,
    tallies.map(lambda t: ("tally", t)),
    given.map(lambda o: ("given", o, Box(f"b{o.amount}", o.amount))),
)
with everything.execute_and_collect("user classes") as results:
    got = list(results)

expected_totals = [Order(f"c{c}", sum(i for i in range(200) if i % 5 == c)) for c in range(5)]
assert sorted((r[1] for r in got if r[0] == "total"), key=lambda o: o.customer) == expected_totals
assert all(type(r[1]) is Order for r in got if r[0] == "total")  # the script's own class, not a copy

final_largest = {}
for r in got:
    if r[0] == "largest":
        assert type(r[1]) is Region and type(r[2]) is Order and r[1] == Region(r[2].customer, r[2].amount % 2)
        final_largest[r[1]] = max(final_largest.get(r[1], -1), r[2].amount)
assert final_largest == {Region(f"c{c}", p): max(i for i in range(200) if i % 5 == c and i % 2 == p)
                         for c in range(5) for p in range(2)}
assert sum(1 for r in got if r[0] == "largest") <= 200

assert sorted((r[1] for r in got if r[0] == "tally"), key=lambda t: t.customer) == [Tally(f"c{c}", 40) for c in range(5)]
assert sorted((r[1:] for r in got if r[0] == "given"), key=lambda g: g[0].amount) == [
    (Order("given", 1), Box("b1", 1)), (Order("given", 2), Box("b2", 2))]
print("RESULT", json.dumps(sorted(r[0] for r in got)))
'''


def test_a_job_script_with_its_own_classes_runs_through_exchanges_collect_print_and_state(tmp_path) -> None:
    (tmp_path / "shapes.py").write_text(textwrap.dedent(SHAPES))
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent(JOB))
    env = {k: v for k, v in os.environ.items() if k != "MILLSTREAM_JOBMANAGER"}
    run = subprocess.run([sys.executable, str(job)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=220)
    assert run.returncode == 0, run.stderr[-4000:]
    lines = run.stdout.splitlines()
    printed = sorted(line.split("> ", 1)[1] for line in lines if "> " in line)
    assert printed == [f"Order(customer='c{i}', amount={i})" for i in range(3)]
    result = next(line for line in lines if line.startswith("RESULT "))
    kinds = json.loads(result[len("RESULT "):])
    assert kinds.count("total") == 5 and kinds.count("tally") == 5
    assert kinds.count("given") == 2 and kinds.count("largest") >= 10


# ---- the same on an in-process cluster (this module travels by value, like a job script) -------


@dataclass
class Reading:
    sensor: str
    value: int


Sensor = namedtuple("Sensor", "site sensor")


@dataclass(frozen=True)
class Bucket:
    """A dataclass as a key: hashed over its fields, the same in every process."""

    index: int


class Running:
    """A plain class kept in keyed state."""

    def __init__(self, total: int, count: int) -> None:
        self.total = total
        self.count = count


class Average(KeyedProcessFunction):
    def open(self, runtime_context) -> None:
        self.acc = runtime_context.get_state(ValueStateDescriptor("acc", Types.PICKLED_BYTE_ARRAY()))

    def process_element(self, reading, ctx):
        acc = self.acc.value() or Running(0, 0)
        acc = Running(acc.total + reading.value, acc.count + 1)
        self.acc.update(acc)
        yield ctx.get_current_key(), Reading(reading.sensor, acc.total // acc.count), acc.count


@pytest.mark.parametrize("mode", [RuntimeExecutionMode.STREAMING, RuntimeExecutionMode.BATCH])
def test_dataclass_records_and_namedtuple_keys_cross_two_task_managers(cluster, mode) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(4)
    env.set_runtime_mode(mode)
    readings = env.from_sequence(0, 999).map(lambda i: Reading(f"s{i % 4}", i)).rebalance()
    averaged = readings.key_by(lambda r: Sensor(f"site{int(r.sensor[1:]) % 2}", r.sensor)).process(Average())
    summed = readings.key_by(lambda r: r.sensor).reduce(lambda a, b: Reading(a.sensor, a.value + b.value))
    both = averaged.map(lambda t: ("avg",) + t).union(summed.map(lambda r: ("sum", r)))
    with both.execute_and_collect(f"readings {mode.name}") as results:
        got = list(results)
    sums = {r[1].sensor: r[1].value for r in got if r[0] == "sum"}  # the final (largest) rolling sum
    for r in got:
        if r[0] == "sum":
            sums[r[1].sensor] = max(sums[r[1].sensor], r[1].value)
            assert type(r[1]) is Reading
    assert sums == {f"s{s}": sum(i for i in range(1000) if i % 4 == s) for s in range(4)}
    averages = [r for r in got if r[0] == "avg"]
    assert len(averages) == 1000
    for s in range(4):
        key = Sensor(f"site{s % 2}", f"s{s}")
        final = max((r for r in averages if r[1] == key), key=lambda r: r[3])
        assert type(final[1]) is Sensor and final[3] == 250
        assert final[2] == Reading(f"s{s}", sum(i for i in range(1000) if i % 4 == s) // 250)


def test_collected_records_come_back_as_the_clients_own_class(cluster) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    stream = env.from_sequence(1, 3000).map(lambda i: Reading("x", i)).key_by(lambda r: Bucket(r.value % 3)).reduce(lambda a, b: b)
    # A rolling reduce that keeps the latest record emits every record, through keyed state whose key
    # groups the consumer checks against its own hash of the key.
    with stream.execute_and_collect("collect readings") as results:
        got = sorted(results, key=lambda r: r.value)
    assert got == [Reading("x", i) for i in range(1, 3001)]
    assert {type(r) for r in got} == {Reading}
