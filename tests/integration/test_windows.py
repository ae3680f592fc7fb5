"""Windows on the embedded cluster (two TaskManagers, real Spark), keyed by a key_by before the
window with parallelism 2: count windows (tumbling and sliding), a global window with a purging
count trigger and an evictor, and window_all (one instance). Expected outputs are computed here
from the rules, independently of the operator.

Event-time windows need records with timestamps (``assign_timestamps_and_watermarks``), which the
runtime's event-time plumbing provides; the operator's event-time behaviour is unit tested through
a real OperatorChain in tests/unit/test_window_operator.py."""
from __future__ import annotations

import sys
from typing import Any, Iterable

import cloudpickle
import pytest

from millstream.client.minicluster import MiniCluster
from millstream.common import Types
from millstream.datastream import StreamExecutionEnvironment, WindowFunction
from millstream.datastream.functions import ProcessAllWindowFunction
from millstream.datastream.window import CountEvictor, CountTrigger, GlobalWindows, PurgingTrigger
from millstream.taskmanager.spark_runner import SparkHost

from .harness import fast_config, jobmanager_env

# Functions and classes of this module run on TaskManagers, which cannot import test modules.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.timeout(180)

KEYS = ["k0", "k1", "k2", "k3", "k4"]
RECORDS = [(KEYS[i % len(KEYS)], i) for i in range(103)]  # one source: each key's records stay in order


@pytest.fixture(scope="module")
def cluster():
    with SparkHost(slots=4, tasks_per_slot=4) as spark:
        with MiniCluster(fast_config(), num_slots=2, spark=spark) as mc:  # starts one TaskManager
            mc.add_task_manager()
            with jobmanager_env(mc.address):
                yield mc


def _env(parallelism: int) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    return env


def _per_key() -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for k, v in RECORDS:
        out.setdefault(k, []).append(v)
    return out


class KeyedValues(WindowFunction):
    def apply(self, key: Any, window: Any, inputs: Iterable[Any]) -> Iterable[Any]:
        yield key, window.id, [v for _, v in inputs]


def test_tumbling_and_sliding_count_windows_after_key_by(cluster) -> None:
    env = _env(2)
    source = env.from_collection(RECORDS, Types.TUPLE([Types.STRING(), Types.INT()]))
    sums = source.key_by(lambda r: r[0]).count_window(4).reduce(lambda a, b: (a[0], a[1] + b[1]))
    with sums.execute_and_collect("count windows") as results:
        got = list(results)
    expected = [(k, sum(vs[i:i + 4])) for k, vs in _per_key().items() for i in range(0, len(vs) - 3, 4)]
    assert sorted(got) == sorted(expected)

    env = _env(2)
    source = env.from_collection(RECORDS, Types.TUPLE([Types.STRING(), Types.INT()]))
    sliding = source.key_by(lambda r: r[0]).count_window(5, 2).apply(KeyedValues())
    with sliding.execute_and_collect("sliding count windows") as results:
        got = list(results)
    # PyFlink's sliding count window k: a key's elements k*slide .. k*slide + size - 1, fired when full.
    expected = [(k, w, vs[w * 2:w * 2 + 5]) for k, vs in _per_key().items() for w in range(len(vs)) if w * 2 + 5 <= len(vs)]
    assert sorted(got) == sorted(expected)


def test_global_window_with_purging_count_trigger_and_count_evictor(cluster) -> None:
    env = _env(2)
    source = env.from_collection(RECORDS, Types.TUPLE([Types.STRING(), Types.INT()]))
    windowed = (source.key_by(lambda r: r[0]).window(GlobalWindows.create())
                .trigger(PurgingTrigger.of(CountTrigger.of(6))).evictor(CountEvictor.of(2))
                .reduce(lambda a, b: (a[0], a[1] + b[1])))
    with windowed.execute_and_collect("evicting global windows") as results:
        got = list(results)
    # Each batch of 6 fires; the evictor keeps its last 2, which the reduce sums; the purge empties it.
    expected = [(k, vs[i + 4] + vs[i + 5]) for k, vs in _per_key().items() for i in range(0, len(vs) - 5, 6)]
    assert sorted(got) == sorted(expected)


class Batches(ProcessAllWindowFunction):
    def process(self, context: Any, elements: Iterable[Any]) -> Iterable[Any]:
        yield sorted(v for _, v in elements)


def test_window_all_sees_every_record_in_one_instance(cluster) -> None:
    env = _env(2)
    source = env.from_collection(RECORDS, Types.TUPLE([Types.STRING(), Types.INT()]))
    evens = source.filter(lambda r: r[1] % 2 == 0)  # runs with parallelism 2 before the window
    batches = evens.window_all(GlobalWindows.create()).trigger(PurgingTrigger.of(CountTrigger.of(10))).process(Batches())
    with batches.execute_and_collect("window_all") as results:
        got = list(results)
    total = [v for _, v in RECORDS if v % 2 == 0]
    # The filter's two subtasks interleave, so which records share a batch varies; that every batch
    # holds 10 distinct records of the stream, and all but the last incomplete 10 are emitted, does not.
    assert [len(b) for b in got] == [10] * (len(total) // 10)
    emitted = [v for b in got for v in b]
    assert len(set(emitted)) == len(emitted) and set(emitted) <= set(total)
