"""Every keyed state kind, timers, snapshots and rescaling, on each keyed state backend.

The ``state_backend`` fixture runs each test on the heap backend, on RocksDB (timers in RocksDB)
and on RocksDB with heap timers; the expected results are Flink's documented behaviour, the same
for every backend. Further per-backend suites: test_state_ttl, test_window_operator and
test_window_fast_path run whole on each backend too. RocksDB-only tests (layout, memory of map
iteration, the task's directory) are at the end.
"""
from __future__ import annotations

import os
import tracemalloc
from typing import Any

import pytest

from millstream.common import Types
from millstream.datastream import (EmbeddedRocksDBStateBackend, HashMapStateBackend, KeyedProcessFunction,
                                   RuntimeContext, StreamExecutionEnvironment)
from millstream.datastream.functions import AggregateFunction, ReduceFunction
from millstream.datastream.window import TimeWindow
from millstream.datastream.state import (AggregatingStateDescriptor, ListStateDescriptor, MapStateDescriptor,
                                         ReducingStateDescriptor, ValueStateDescriptor)
from millstream.runtime.keygroups import KeyGroupRange, compute_key_group_range_for_operator_index
from millstream.runtime.state.heap_backend import TimerQueue
from millstream.runtime.task.environment import ManualClock
from tests.unit import state_backends
from tests.unit.test_runtime_chain import collect, make_chain, run_job, vertex

MAX_P = 128
ALL = KeyGroupRange.of(0, MAX_P - 1)


def backend(parallelism: int = 1, index: int = 0, kind: str | None = None) -> Any:
    kgr = compute_key_group_range_for_operator_index(MAX_P, parallelism, index)
    return state_backends.keyed_backend(MAX_P, parallelism, kgr, clock=ManualClock(0).now_ms, kind=kind)


class Sum(ReduceFunction):
    def reduce(self, a: int, b: int) -> int:
        return a + b


class Mean(AggregateFunction):
    def create_accumulator(self) -> list[int]:
        return [0, 0]

    def add(self, value: int, acc: list[int]) -> list[int]:
        acc[0] += value  # in place, as Python accumulators often are
        acc[1] += 1
        return acc

    def get_result(self, acc: list[int]) -> float:
        return acc[0] / acc[1]

    def merge(self, a: list[int], b: list[int]) -> list[int]:
        return [a[0] + b[0], a[1] + b[1]]


def handles(b: Any) -> dict[str, Any]:
    return {
        "value": b.get_value_state(ValueStateDescriptor("value", Types.PICKLED_BYTE_ARRAY())),
        "list": b.get_list_state(ListStateDescriptor("list", Types.PICKLED_BYTE_ARRAY())),
        "map": b.get_map_state(MapStateDescriptor("map", Types.PICKLED_BYTE_ARRAY(), Types.PICKLED_BYTE_ARRAY())),
        "reducing": b.get_reducing_state(ReducingStateDescriptor("reducing", Sum(), Types.LONG())),
        "aggregating": b.get_aggregating_state(AggregatingStateDescriptor("aggregating", Mean(), Types.PICKLED_BYTE_ARRAY())),
    }


pytestmark = pytest.mark.usefixtures("state_backend")


def test_value_state_per_key_and_none_clears() -> None:
    b = backend()
    s = handles(b)["value"]
    b.set_current_key("a")
    assert s.value() is None
    s.update({"n": 1})
    b.set_current_key(("b", 2))
    s.update([1, 2])
    b.set_current_key("a")
    assert s.value() == {"n": 1}
    s.update(None)  # Flink: updating to null clears the state
    assert s.value() is None
    b.set_current_key(("b", 2))
    assert s.value() == [1, 2]
    s.clear()
    assert s.value() is None and b.entries("value") == {}


def test_list_state_add_add_all_update_and_get_returns_a_copy() -> None:
    b = backend()
    s = handles(b)["list"]
    b.set_current_key(7)
    assert list(s.get()) == []
    s.add(1)
    s.add_all([2, 3])
    got = s.get()
    got.append(99)  # a copy: changing it leaves the state alone
    assert list(s.get()) == [1, 2, 3]
    s.update([5])
    assert list(s.get()) == [5]
    with pytest.raises(ValueError, match="None"):
        s.add(None)
    s.update([])
    assert list(s.get()) == [] and b.entries("list") == {}


def test_map_state_every_operation() -> None:
    b = backend()
    s = handles(b)["map"]
    b.set_current_key("k")
    assert s.is_empty() and s.get("x") is None and not s.contains("x")
    s.put("x", 1)
    s.put_all({"y": 2, ("t", 1): [3]})
    assert s.get("x") == 1 and s.contains(("t", 1)) and s.get(("t", 1)) == [3]
    assert sorted(map(str, s.keys())) == sorted(map(str, ["x", "y", ("t", 1)]))
    assert sorted(s.values(), key=str) == sorted([1, 2, [3]], key=str)
    for key, _ in s.items():  # the map may change while it is iterated
        s.remove(key)
    assert s.is_empty() and b.entries("map") == {}
    b.set_current_key("other")
    s.put("z", 0)
    b.set_current_key("k")
    assert s.is_empty()


def test_reducing_and_aggregating_state() -> None:
    b = backend()
    h = handles(b)
    for key, values in (("a", [1, 2, 3]), ("b", [10])):
        b.set_current_key(key)
        for v in values:
            h["reducing"].add(v)
            h["aggregating"].add(v)
    b.set_current_key("a")
    assert h["reducing"].get() == 6 and h["aggregating"].get() == 2.0
    b.set_current_key("b")
    assert h["reducing"].get() == 10 and h["aggregating"].get() == 10.0
    h["aggregating"].clear()
    assert h["aggregating"].get() is None


def test_a_state_name_keeps_its_kind() -> None:
    b = backend()
    b.get_value_state(ValueStateDescriptor("s", Types.INT()))
    with pytest.raises(ValueError, match="is a ValueState; it cannot also be used as a ListState"):
        b.get_list_state(ListStateDescriptor("s", Types.INT()))


def test_equal_keys_find_the_same_state_however_they_were_built() -> None:
    b = backend()
    s = handles(b)["value"]
    word = "".join(["ab", "c"])
    b.set_current_key((word, word))  # one string object twice
    s.update(1)
    b.set_current_key(("abc", "ab" + "c".upper().lower()))  # equal, distinct objects
    assert s.value() == 1


def test_in_place_changes_of_many_keys_are_kept() -> None:
    """More keys than any cache a backend may keep, each appended to round-robin."""
    b = backend()
    s = handles(b)["list"]
    keys = [f"k{i}" for i in range(6000)]
    for round_ in range(3):
        for k in keys:
            b.set_current_key(k)
            s.add(round_)
    snap = b.snapshot()
    h = backend(kind="hashmap")
    h.restore(snap)
    assert h.entries("list") == {k: [0, 1, 2] for k in keys}


def test_timers_fire_in_order_deduplicated_and_deletable() -> None:
    b = backend()
    q = b.event_timers
    for ts, key in [(30, "a"), (10, "b"), (20, "c"), (10, "b"), (15, "a"), (25, "d")]:
        q.register(ts, key, b.key_group_of(key))
    q.delete(20, "c", b.key_group_of("c"))
    assert len(q) == 4 and q.peek() == 10
    fired = []
    while (t := q.poll(26)) is not None:
        fired.append(t[:2])
    assert fired == [(10, "b"), (15, "a"), (25, "d")]
    assert q.peek() == 30 and q.poll(29) is None
    q.register(5, "e", b.key_group_of("e"))
    assert q.poll(100)[:2] == (5, "e") and q.poll(100)[:2] == (30, "a") and q.poll(100) is None


def test_heap_timers_of_one_timestamp_fire_in_registration_order_and_snapshot_so() -> None:
    """The heap queue (timers bucketed by timestamp): timers of one timestamp fire in the order they
    were first registered (a duplicate keeps the first place, a deleted timer registered again its
    old one, as the heap of (timestamp, sequence) entries it replaced), and a key group's snapshot
    lists its timers in timestamp order and that order, so a restored queue fires them alike."""
    q = TimerQueue()
    keys = [(f"k{i}", TimeWindow(0, 10)) for i in range(50)]  # window timers' keys
    for k in keys:
        q.register(9, k, 7)
    q.register(9, keys[3], 7)
    q.delete(9, keys[5], 7)
    q.register(9, keys[5], 7)
    q.delete(9, keys[8], 7)
    q.register(4, "early", 7)
    q.register(12, "late", 2)
    assert len(q) == 51 and sorted(q.key_groups()) == [2, 7] and q.peek() == 4
    expected = [(4, "early")] + [(9, k) for i, k in enumerate(keys) if i != 8]
    assert q.snapshot_group(7) == expected and q.snapshot_group(2) == [(12, "late")] and q.snapshot_group(3) == []
    restored = TimerQueue()
    restored.restore_group(7, q.snapshot_group(7))
    for queue in (q, restored):
        fired = []
        while (t := queue.poll(9)) is not None:
            fired.append(t[:2])
        assert fired == expected
    assert q.peek() == 12 and restored.peek() is None and len(q) == 1
    # a timestamp's only timer, deleted: nothing is due; registered again, then a second one joins
    # it: the first keeps its place, as does a deleted one revived after another joined
    q.register(5, "a", 1)
    q.delete(5, "a", 1)
    assert q.peek() == 12 and len(q) == 1
    q.register(5, "a", 1)
    q.register(5, "b", 1)
    q.register(5, "a", 1)
    q.register(6, "x", 1)
    q.delete(6, "x", 1)
    q.register(6, "y", 1)
    q.register(6, "x", 1)
    assert q.snapshot_group(1) == [(5, "a"), (5, "b"), (6, "x"), (6, "y")]
    assert [q.poll(6)[:2] for _ in range(4)] == [(5, "a"), (5, "b"), (6, "x"), (6, "y")] and q.poll(6) is None


@pytest.mark.parametrize("target", ["hashmap", "rocksdb"])
def test_a_snapshot_restores_on_either_backend(target: str) -> None:
    """The canonical savepoint format: what one backend snapshots, the other restores, timers too."""
    b = backend()
    h = handles(b)
    for i in range(50):
        b.set_current_key(i)
        h["value"].update(f"v{i}")
        h["list"].add_all([i, i + 1])
        h["map"].put("m", i)
        h["reducing"].add(i)
        h["aggregating"].add(i)
        b.event_timers.register(1000 + i, i, b.current_key_group)
    snap = b.snapshot()
    r = backend(kind=target)
    r.restore(snap)
    rh = handles(r)
    for i in range(50):
        r.set_current_key(i)
        assert rh["value"].value() == f"v{i}" and list(rh["list"].get()) == [i, i + 1]
        assert dict(rh["map"].items()) == {"m": i} and rh["reducing"].get() == i and rh["aggregating"].get() == i
    fired = []
    while (t := r.event_timers.poll(10_000)) is not None:
        fired.append((t[0], t[1]))
    assert fired == [(1000 + i, i) for i in range(50)]


def test_rescale_restores_exactly_the_key_groups_of_the_new_range() -> None:
    """Two subtasks' snapshots restored at parallelism 3: each new subtask takes the keys of its
    key-group range (Flink's KeyGroupRangeAssignment), none lost, none twice."""
    old = [backend(2, i) for i in range(2)]
    for i in range(300):
        kg_owner = next(b for b in old if b.key_group_range.contains(old[0].key_group_of(i)))
        kg_owner.set_current_key(i)
        handles(kg_owner)["reducing"].add(i)
        kg_owner.processing_timers.register(i, i, kg_owner.current_key_group)
    snapshots: dict[int, bytes] = {}
    for b in old:
        snapshots.update(b.snapshot())
    seen: dict[Any, int] = {}
    timers = 0
    for index in range(3):
        new = backend(3, index)
        loaded = new.restore(snapshots)
        assert all(new.key_group_range.contains(kg) for kg in loaded)
        for key, value in new.entries("reducing").items():
            assert new.key_group_range.contains(new.key_group_of(key))
            seen[key] = value
        while new.processing_timers.poll(10**9) is not None:
            timers += 1
    assert seen == {i: i for i in range(300)} and timers == 300


class EveryKind(KeyedProcessFunction):
    """Every state kind and an event-time timer per key: at the timer, all of them are emitted."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.h = {
            "value": runtime_context.get_state(ValueStateDescriptor("v", Types.INT())),
            "list": runtime_context.get_list_state(ListStateDescriptor("l", Types.INT())),
            "map": runtime_context.get_map_state(MapStateDescriptor("m", Types.STRING(), Types.INT())),
            "reducing": runtime_context.get_reducing_state(ReducingStateDescriptor("r", Sum(), Types.INT())),
            "aggregating": runtime_context.get_aggregating_state(AggregatingStateDescriptor("a", Mean(), Types.INT())),
        }

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Any:
        key, n = value
        h = self.h
        h["value"].update(n)
        h["list"].add(n)
        h["map"].put(f"n{n % 3}", n)
        h["reducing"].add(n)
        h["aggregating"].add(n)
        ctx.timer_service().register_event_time_timer(100)
        return ()

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Any:
        h = self.h
        yield (ctx.get_current_key(), h["value"].value(), list(h["list"].get()), dict(h["map"].items()),
               h["reducing"].get(), h["aggregating"].get())


def test_a_keyed_process_function_with_every_state_kind_and_a_timer() -> None:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    records = [(k, n) for n in range(1, 7) for k in ("a", "b", "c")]
    ds = env.from_collection(records).key_by(lambda r: r[0]).process(EveryKind())
    collect(ds)
    out = run_job(env)["out"]
    assert sorted(out) == sorted(
        (k, 6, [1, 2, 3, 4, 5, 6], {"n1": 4, "n2": 5, "n0": 6}, 21, 3.5) for k in ("a", "b", "c"))


# -- RocksDB only ---------------------------------------------------------------------------------


def _rocksdb_only() -> None:
    if state_backends.selected["type"] != "rocksdb":
        pytest.skip("about the RocksDB backend's own layout")


def test_rocksdb_row_keys_of_tuples_are_the_memo_less_pickle_of_the_key() -> None:
    """Row keys written without a Pickler (tuples of ints, strings, None, booleans, TimeWindows,
    nested) are byte for byte what the memo-less Pickler writes, so rows and snapshots decode with
    pickle and equal keys meet the same row; other elements (floats, long strings) take the Pickler."""
    _rocksdb_only()
    import pickle
    import random

    from millstream.datastream.window import TimeWindow
    from millstream.runtime.state import rocksdb_backend as rb

    rng = random.Random(29)
    ints = [0, 1, 255, 256, 65535, 65536, -1, -2**31, 2**31 - 1, 2**31, -2**31 - 1, 2**63, -2**63 - 1, 10**40, -10**40]

    def element(depth: int = 0) -> Any:
        c = rng.randrange(9 if depth < 2 else 7)
        if c == 0:
            return rng.choice(ints) + rng.choice([0, 0, 1, -1])
        if c == 1:
            return rng.randrange(-10**15, 10**15)
        if c == 2:
            return "".join(rng.choice("ab\u00e9\u4e2d\ud800x") for _ in range(rng.randrange(0, 300 if rng.random() < 0.1 else 10)))
        if c == 3:
            return rng.choice([None, True, False])
        if c in (4, 5):
            start = rng.randrange(-10**13, 10**13)
            return TimeWindow(start, start + rng.randrange(1, 10**5))
        if c == 6:
            return rng.random()
        return tuple(element(depth + 1) for _ in range(rng.randrange(0, 6)))

    for _ in range(20_000):
        key = tuple(element() for _ in range(rng.randrange(0, 5)))
        row = rb.encode_key(key)
        assert row == rb._pickled_without_memo(key), key
        assert pickle.loads(row) == key
    window = TimeWindow(1_700_000_000_000, 1_700_000_010_000)
    assert rb.encode_key((7, window)) == rb.encode_key((7, TimeWindow(window.start, window.end)))  # equal keys, one row


@pytest.mark.parametrize("cache", [1, 3, 128])
def test_rocksdb_timer_queue_with_its_per_key_group_cache_polls_in_timer_order(cache: int, monkeypatch: Any) -> None:
    """The RocksDB timer queue keeps each key group's first rows in memory (Flink's caching
    priority queue): random registers (repeats too), deletes and polls, with caches small enough to
    overflow and refill, give exactly what a plain ordered set gives (timestamp, then key group,
    then key), and RocksDB holds exactly the timers not polled or deleted."""
    _rocksdb_only()
    import random

    from millstream.runtime.state.rocksdb_backend import RocksTimerQueue, encode_key

    monkeypatch.setattr(RocksTimerQueue, "CACHE", cache)
    b = backend()
    q = b.event_timers
    if not isinstance(q, RocksTimerQueue):
        pytest.skip("heap timers")
    rng = random.Random(cache)
    model: set[tuple[int, int, Any]] = set()
    order = lambda t: (t[0], t[1], encode_key(t[2]))  # noqa: E731
    watermark = 0
    for step in range(4000):
        op = rng.random()
        if op < 0.55:
            key = rng.randrange(40)
            ts = watermark + rng.randrange(0, 50)
            kg = b.key_group_of(key)
            q.register(ts, key, kg)
            model.add((ts, kg, key))
        elif op < 0.7 and model:
            ts, kg, key = rng.choice(sorted(model, key=order))
            q.delete(ts, key, kg)
            model.discard((ts, kg, key))
        else:
            watermark += rng.randrange(0, 10)
            while (t := q.poll(watermark)) is not None:
                expected = min(model, key=order)
                assert expected[0] <= watermark and (t[0], t[2], t[1]) == expected, (step, t, expected)
                model.discard(expected)
            assert not model or min(model)[0] > watermark
        assert q.peek() == (min(model)[0] if model else None)
    assert len(q) == len(model)
    assert sorted((ts, key) for kg in q.key_groups() for ts, key in q.snapshot_group(kg)) == sorted((ts, key) for ts, _, key in model)


def test_rocksdb_rows_start_with_the_key_group() -> None:
    """Flink's layout: 2-byte key group first, so a key group is one contiguous key range."""
    _rocksdb_only()
    from millstream.runtime.state.rocksdb_backend import encode_key

    b = backend()
    s = handles(b)["value"]
    for key in ("x", "y", 42):
        b.set_current_key(key)
        s.update(key)
    table = b.table("value", "value")
    rows = [k for k, _ in table.cf.scan(b"")]
    expected = sorted(b.key_group_of(k).to_bytes(2, "big") + encode_key(k) for k in ("x", "y", 42))
    assert rows == expected


def test_rocksdb_updates_of_a_cached_immutable_value_are_written_back_once_yet_every_read_sees_the_last() -> None:
    """A count updated 1,000 times (read-modify-write of an int, as every aggregation does) costs
    one row write, not 1,000; reads, a snapshot and a restore still see the last value."""
    _rocksdb_only()
    b = backend()
    s = handles(b)["value"]
    b.set_current_key("k")
    s.update(0)
    writes = _count_writes(b.table("value", "value"))
    for _ in range(1000):
        s.update(s.value() + 1)
    assert s.value() == 1000 and len(writes) == 0
    snapshot = b.snapshot()
    assert 1 <= len(writes) <= 2  # written back (the snapshot flushes before it reads)
    restored = backend()
    restored.restore(snapshot)
    restored.set_current_key("k")
    assert handles(restored)["value"].value() == 1000


def _count_writes(table: Any) -> list[bytes]:
    """The rows ``table`` writes from now on (its column family wrapped)."""
    writes: list[bytes] = []
    cf = table.cf

    class CountingWrites:
        def __getattr__(self, name: str) -> Any:
            return getattr(cf, name)

        def put(self, k: bytes, v: bytes) -> None:
            writes.append(k)
            cf.put(k, v)

    table.cf = CountingWrites()
    return writes


def _restored(snapshot: Any) -> Any:
    b = backend()
    b.restore(snapshot)
    return b


def test_rocksdb_snapshot_writes_back_only_the_cached_values_changed_since_the_last_one() -> None:
    """A full snapshot writes back the cached values written since the previous snapshot, not every
    cached one: 10 of 100 counts updated between two snapshots make 10 row writes, none updated
    makes none; each snapshot still holds every key's latest value."""
    _rocksdb_only()
    b = backend()
    s = handles(b)["value"]
    for i in range(100):
        b.set_current_key(i)
        s.update(0)
        s.update(s.value() + i)  # a read-modify-write of a cached value: written back at the snapshot
    writes = _count_writes(b.table("value", "value"))
    first = b.snapshot()
    assert len(set(writes)) == 100
    writes.clear()
    for i in range(10):
        b.set_current_key(i)
        s.update(s.value() + 1000)
    second = b.snapshot()
    assert len(writes) == 10 and len(set(writes)) == 10
    writes.clear()
    third = b.snapshot()
    assert writes == []
    for snapshot, bumped in ((first, 0), (second, 1000), (third, 1000)):
        r = _restored(snapshot)
        rs = handles(r)["value"]
        for i in range(100):
            r.set_current_key(i)
            assert rs.value() == i + (bumped if i < 10 else 0)


def test_rocksdb_a_cached_value_changed_in_place_after_a_snapshot_is_in_the_next() -> None:
    """Lists and accumulators are changed in place (``list.append``, an AggregateFunction's
    ``add``) with no write: a value handed out after a snapshot counts as changed for the next one."""
    _rocksdb_only()
    b = backend()
    h = handles(b)
    for key in ("a", "b"):
        b.set_current_key(key)
        h["list"].add(1)
        h["aggregating"].add(10)
    b.snapshot()
    writes = _count_writes(b.table("list", "list"))
    b.set_current_key("a")
    h["list"].add(2)  # appended to the cached list in place
    h["aggregating"].add(20)  # Mean.add changes the cached accumulator in place
    second = b.snapshot()
    assert len(writes) == 1  # key "a" of the list state; "b" was not touched
    r = _restored(second)
    rh = handles(r)
    r.set_current_key("a")
    assert list(rh["list"].get()) == [1, 2] and rh["aggregating"].get() == 15
    r.set_current_key("b")
    assert list(rh["list"].get()) == [1] and rh["aggregating"].get() == 10


def test_rocksdb_evicting_an_unchanged_cached_value_writes_nothing_and_a_changed_one_its_value() -> None:
    """The write-back cache holds ``_LOANS`` values per state; one that leaves it is written only if
    it changed since its row was last written."""
    _rocksdb_only()
    from millstream.runtime.state.rocksdb_backend import _LOANS, encode_key

    b = backend()
    h = handles(b)
    n = _LOANS + 500
    for i in range(n):  # first writes go through at once; the cached ints are unchanged after them
        b.set_current_key(i)
        h["value"].update(i)
    writes = _count_writes(b.table("value", "value"))
    for i in range(n):  # reads of cached ints evict others: nothing to write
        b.set_current_key(i)
        assert h["value"].value() == i
    assert writes == []
    b.set_current_key("x")
    h["list"].add(1)
    h["list"].add(2)  # in place, cached
    list_writes = _count_writes(b.table("list", "list"))
    for i in range(_LOANS):  # new keys push "x" out of the cache
        b.set_current_key(i)
        h["list"].add(i)
    x_row = b.key_group_of("x").to_bytes(2, "big") + encode_key("x")
    assert len(list_writes) == _LOANS + 1 and list_writes.count(x_row) == 1  # each first write, and "x" on eviction
    b.set_current_key("x")
    assert list(h["list"].get()) == [1, 2]


def test_rocksdb_map_iteration_does_not_load_the_map() -> None:
    _rocksdb_only()
    b = backend()
    s = handles(b)["map"]
    b.set_current_key("big")
    payload = "x" * 200
    s.put_all({i: payload + str(i) for i in range(20_000)})  # ~4 MB of map entries
    tracemalloc.start()
    try:
        it = s.items()
        first = [next(it) for _ in range(10)]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [k for k, _ in first] == sorted(k for k, _ in first) and len(first) == 10
    assert peak < 500_000, f"iterating 10 entries took {peak} bytes: the map was loaded"


def test_rocksdb_task_keeps_its_instance_under_the_localdir_and_deletes_it_at_the_end(tmp_path: Any) -> None:
    _rocksdb_only()
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)
    collect(env.from_collection([("a", 1)]).key_by(lambda r: r[0]).reduce(lambda a, b: a))
    v = vertex(env, "Reduce")
    run = make_chain(v)
    run.chain.open()
    local = os.path.join(str(state_backends.selected["dir"]), "millstream-rocksdb")
    (instance,) = os.listdir(local)
    assert "attempt_0" in instance and os.path.exists(os.path.join(local, instance, "CURRENT"))
    run.chain.close()
    assert os.listdir(local) == []


def test_set_state_backend_names_pyflinks_classes() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_state_backend(EmbeddedRocksDBStateBackend(enable_incremental_checkpointing=True))
    conf = env.get_configuration().to_dict()
    assert conf["state.backend.type"] == "rocksdb" and conf["execution.checkpointing.incremental"] == "true"
    assert isinstance(env.get_state_backend(), EmbeddedRocksDBStateBackend)
    env.set_state_backend(HashMapStateBackend())
    assert isinstance(env.get_state_backend(), HashMapStateBackend)
    rocks = EmbeddedRocksDBStateBackend()
    rocks.set_db_storage_paths("/data/rocks")
    assert rocks.get_db_storage_paths() == ["/data/rocks"]
    env.set_state_backend(rocks)
    assert env.get_configuration().to_dict()["state.backend.rocksdb.localdir"] == "/data/rocks"
    with pytest.raises(ValueError, match="one directory"):
        rocks.set_db_storage_paths("/a", "/b")
    with pytest.raises(TypeError, match="enable_incremental_checkpointing"):
        EmbeddedRocksDBStateBackend(enable_incremental_checkpointing="yes")  # type: ignore[arg-type]


def test_rocksdb_memory_stays_within_the_managed_budget() -> None:
    """state.backend.rocksdb.memory.managed with memory.fixed-per-slot: block cache and memtables
    share one budget, whatever is written (here ~5x the budget)."""
    _rocksdb_only()
    from millstream.runtime.state.backends import KeyedBackendFactory
    from millstream.runtime.task.environment import SimpleTaskEnvironment

    budget = 4 << 20
    env = SimpleTaskEnvironment(job_parameters={
        **state_backends.job_parameters(), "state.backend.rocksdb.memory.managed": "true",
        "state.backend.rocksdb.memory.fixed-per-slot": "4 mb", "state.backend.rocksdb.memory.write-buffer-ratio": "0.5"})
    factory = KeyedBackendFactory(env)
    b = factory.create("op")
    s = handles(b)["value"]
    blob = os.urandom(1000)
    peak_tables = 0
    for i in range(20_000):  # ~20 MB
        b.set_current_key(i)
        s.update(blob)
        if i % 1000 == 0:
            peak_tables = max(peak_tables, factory.db.db.property_int_value("rocksdb.cur-size-all-mem-tables"))
    assert factory.db.cache.get_usage() <= budget * 1.1
    assert peak_tables <= budget  # memtables charged to the cache, bounded with it
    assert factory.db.write_buffer_manager.get_buffer_size() == budget // 2
    factory.close()
    unmanaged = KeyedBackendFactory(SimpleTaskEnvironment(job_parameters={
        **state_backends.job_parameters(), "state.backend.rocksdb.memory.managed": "false"}))
    unmanaged.create("op")
    assert unmanaged.db.cache is None
    unmanaged.close()


def test_rocksdb_full_snapshot_off_the_task_thread_equals_the_synchronous_one() -> None:
    """The writer thread's canonical key groups (read through the views pinned at the snapshot) hold
    what the backend's own snapshot holds: every kind, timers, and with cleanup_full_snapshot no
    expired entry."""
    _rocksdb_only()
    from millstream.common.time import Time
    from millstream.datastream.state import StateTtlConfig
    from millstream.runtime.serialization import deserialize
    from millstream.runtime.state.rocksdb_snapshot import take_full_snapshot
    from millstream.runtime.state.row_format import as_canonical

    clock = ManualClock(1_000)
    kgr = compute_key_group_range_for_operator_index(MAX_P, 1, 0)
    b = state_backends.keyed_backend(MAX_P, 1, kgr, clock=clock.now_ms)
    h = handles(b)
    plain = b.get_value_state(ValueStateDescriptor("plain", Types.INT()))
    descriptor = ValueStateDescriptor("expiring", Types.INT())
    descriptor.enable_time_to_live(StateTtlConfig.new_builder(Time.milliseconds(100)).cleanup_full_snapshot().build())
    expiring = b.get_value_state(descriptor)
    for i in range(40):
        b.set_current_key(i)
        h["value"].update(i)
        h["list"].add_all([i, -i])
        h["map"].put(str(i), [i])
        h["reducing"].add(i)
        h["aggregating"].add(i)
        plain.update(i)
        if i % 2:
            expiring.update(i)
        b.event_timers.register(500 + i, i, b.current_key_group)
    clock.advance(50)
    for i in range(0, 40, 4):
        b.set_current_key(i)
        expiring.update(i)  # these stay unexpired
    clock.advance(60)  # the odd keys' values (written at 1000) expired at 1100
    expected = {kg: deserialize(blob) for kg, blob in b.snapshot().items()}
    native = take_full_snapshot(b.db, {"op": b}, 1)
    got = {kg: as_canonical(deserialize(blob)) for kg, blob in native.canonical()["op"].items()}
    normalize = lambda groups: {kg: ({n: (k, dict(sorted(e.items(), key=repr))) for n, (k, e) in p["states"].items()},
                                     sorted(p["event_timers"]), sorted(p.get("ttl", []))) for kg, p in groups.items()}
    assert normalize(got) == normalize(expected)
    kept = {k for p in got.values() for k in p["states"].get("expiring", (None, {}))[1]}
    assert kept == set(range(0, 40, 4))


@pytest.mark.parametrize("target", ["hashmap", "rocksdb"])
def test_a_full_rocksdb_checkpoint_restores_on_either_backend_at_another_parallelism(target: str) -> None:
    """A full RocksDB checkpoint (the writer thread's snapshot: the rows' bytes per key group, as
    Flink's full snapshot writes them) restores on either backend, rescaled to two subtasks: every
    state kind, window-shaped keys, timers of both domains, each key in exactly its new owner."""
    _rocksdb_only()
    from millstream.datastream.window import TimeWindow
    from millstream.runtime.serialization import deserialize
    from millstream.runtime.state.rocksdb_snapshot import take_full_snapshot
    from millstream.runtime.state.row_format import ROWS_VERSION

    b = backend()
    h = handles(b)
    keys = [i for i in range(60)] + [f"k{i}" for i in range(20)] + [(i, TimeWindow(i * 10, i * 10 + 10)) for i in range(20)]
    for i, key in enumerate(keys):
        b.set_current_key(key)
        h["value"].update(f"v{i}")
        h["list"].add_all([i, -i])
        h["map"].put(f"m{i % 3}", [i])
        h["reducing"].add(i)
        h["aggregating"].add(i)
        b.event_timers.register(1000 + i, key, b.current_key_group)
        b.processing_timers.register(5000 + i, key, b.current_key_group)
    native = take_full_snapshot(b.db, {"op": b}, 1)
    blobs = native.canonical()["op"]
    assert {deserialize(blob)["version"] for blob in blobs.values()} == {ROWS_VERSION} == {3}
    seen: dict[Any, tuple] = {}
    timers: list[tuple[str, int, Any]] = []
    for index in range(2):
        r = backend(2, index, kind=target)
        loaded = r.restore(blobs)
        assert loaded and all(r.key_group_range.contains(kg) for kg in loaded)
        rh = handles(r)
        for i, key in enumerate(keys):
            if not r.key_group_range.contains(r.key_group_of(key)):
                continue
            r.set_current_key(key)
            seen[key] = (rh["value"].value(), list(rh["list"].get()), dict(rh["map"].items()), rh["reducing"].get(),
                         rh["aggregating"].get())
        for domain in ("event_timers", "processing_timers"):
            queue = getattr(r, domain)
            while (t := queue.poll(10**9)) is not None:
                assert r.key_group_range.contains(t[2])
                timers.append((domain, t[0], t[1]))
    assert seen == {key: (f"v{i}", [i, -i], {f"m{i % 3}": [i]}, i, i) for i, key in enumerate(keys)}
    assert sorted(timers, key=repr) == sorted([("event_timers", 1000 + i, k) for i, k in enumerate(keys)]
                                              + [("processing_timers", 5000 + i, k) for i, k in enumerate(keys)], key=repr)


def _as_version_2(blob: bytes) -> bytes:
    """A version-3 key group as a version-2 snapshot wrote it: rows as [(row key after the key group,
    value)], timer rows as their keys after the key group (row_format's docstring)."""
    import pickle

    from millstream.runtime.serialization import deserialize

    p = deserialize(blob)
    assert p["version"] == 3
    p["version"] = 2
    p["rows"] = {name: (kind, ttl, [(k[2:], v) for k, v in zip(keys, values)])
                 for name, (kind, ttl, keys, values) in p["rows"].items()}
    p["timer_rows"] = {field: [k[2:] for k in keys] for field, keys in p["timer_rows"].items()}
    return pickle.dumps(p)


@pytest.mark.parametrize("target", ["hashmap", "rocksdb"])
@pytest.mark.parametrize("version", [2, 3])
def test_a_full_rocksdb_snapshot_of_many_rows_restores_whole_from_either_row_format(target: str, version: int) -> None:
    """10,000 keys of a value state, a list state and event timers in one key-group range: the
    writer thread reads them in chunks, splits them by key group and writes each group's row keys
    and values as two lists (version 3); a version-2 snapshot (one (key, value) pair per row,
    written before) still restores. Either backend, rescaled to two subtasks, gets every key."""
    _rocksdb_only()
    from millstream.runtime.state.rocksdb_snapshot import take_full_snapshot

    b = backend()
    h = handles(b)
    n = 10_000
    for i in range(n):
        b.set_current_key(i)
        h["value"].update(i * 3)
        h["list"].add(i)
        b.event_timers.register(100 + i, i, b.current_key_group)
    blobs = take_full_snapshot(b.db, {"op": b}, 1).canonical()["op"]
    if version == 2:
        blobs = {kg: _as_version_2(blob) for kg, blob in blobs.items()}
    values, lists, timers = {}, {}, []
    for index in range(2):
        r = backend(2, index, kind=target)
        r.restore(blobs)
        rh = handles(r)
        for i in range(n):
            if r.key_group_range.contains(r.key_group_of(i)):
                r.set_current_key(i)
                values[i], lists[i] = rh["value"].value(), list(rh["list"].get())
        while (t := r.event_timers.poll(10**9)) is not None:
            timers.append(t[:2])
    assert values == {i: i * 3 for i in range(n)} and lists == {i: [i] for i in range(n)}
    assert sorted(timers) == [(100 + i, i) for i in range(n)]


@pytest.mark.parametrize("version", [2, 3])
def test_rocksdb_timer_rows_of_a_full_snapshot_restore_into_heap_timers(version: int) -> None:
    """A full snapshot taken with RocksDB timers restores on a RocksDB backend whose timers are on
    the heap (``timer-service.factory: HEAP``): the timer rows are decoded, from either row format."""
    _rocksdb_only()
    from millstream.runtime.state.rocksdb_backend import RocksTimerQueue
    from millstream.runtime.state.rocksdb_snapshot import take_full_snapshot

    was = state_backends.selected.get("timers", "ROCKSDB")
    try:
        state_backends.selected["timers"] = "ROCKSDB"
        b = backend()
        assert isinstance(b.event_timers, RocksTimerQueue)
        for i in range(300):
            b.set_current_key(("k", i))
            b.event_timers.register(7 + i, ("k", i), b.current_key_group)
        blobs = take_full_snapshot(b.db, {"op": b}, 1).canonical()["op"]
        if version == 2:
            blobs = {kg: _as_version_2(blob) for kg, blob in blobs.items()}
        state_backends.selected["timers"] = "HEAP"
        r = backend()
        assert not isinstance(r.event_timers, RocksTimerQueue)
        r.restore(blobs)
    finally:
        state_backends.selected["timers"] = was
    fired = []
    while (t := r.event_timers.poll(10**9)) is not None:
        fired.append(t[:2])
    assert fired == [(7 + i, ("k", i)) for i in range(300)]


def test_splitting_sorted_row_keys_by_key_group() -> None:
    from millstream.runtime.state.rocksdb_snapshot import _split_groups

    keys = [bytes([0, 1, 5]), bytes([0, 1, 9]), bytes([0, 7, 1]), bytes([1, 0, 0]), bytes([1, 0, 2]),
            bytes([0xFF, 0xFF, 1]), bytes([0xFF, 0xFF, 2])]
    assert _split_groups(keys) == [(1, 0, 2), (7, 2, 3), (256, 3, 5), (0xFFFF, 5, 7)]
    assert _split_groups([]) == []


def test_the_rest_checkpoint_config_names_the_jobs_state_backend(tmp_path: Any) -> None:
    """/jobs/:id/checkpoints/config says which backend the job runs on, as Flink's does."""
    from millstream.jobmanager.checkpoint.settings import checkpointing_for_job
    from millstream.jobmanager.rest.views import checkpoint_config

    for backend, name in ((HashMapStateBackend(), "HashMapStateBackend"),
                          (EmbeddedRocksDBStateBackend(), "EmbeddedRocksDBStateBackend")):
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_state_backend(backend)
        env.enable_checkpointing(1000)
        env.from_collection([1]).print()
        graph = env.get_job_graph("j").proto
        checkpointing = checkpointing_for_job(graph, {"execution.checkpointing.dir": str(tmp_path)})
        kind = graph.execution_config.configuration.get("state.backend.type", "hashmap")
        assert checkpoint_config(checkpointing, kind)["state_backend"] == name


def test_a_later_attempt_deletes_what_earlier_attempts_of_its_subtask_left() -> None:
    """A TaskManager killed with SIGKILL never closes its tasks' RocksDB: the subtask's next attempt
    removes those directories, and leaves other subtasks' and other jobs' alone."""
    _rocksdb_only()
    from millstream.runtime.state.backends import KeyedBackendFactory
    from millstream.runtime.task.environment import SimpleTaskEnvironment

    def factory(subtask: int, attempt: int, job: str = "ab") -> KeyedBackendFactory:
        f = KeyedBackendFactory(SimpleTaskEnvironment(job_id=job, task_name="Reduce", subtask_index=subtask,
                                                      parallelism=2, attempt_number=attempt,
                                                      job_parameters=state_backends.job_parameters()))
        f.create("op")
        return f

    left = [factory(0, 0), factory(1, 0), factory(0, 1, job="cd")]  # never closed: killed
    parent = os.path.dirname(left[0].db.path)
    assert len(os.listdir(parent)) == 3
    later = factory(0, 2)
    remaining = sorted(os.listdir(parent))
    assert os.path.basename(left[0].db.path) not in remaining
    assert {os.path.basename(f.db.path) for f in (left[1], left[2], later)} == set(remaining)
    for f in (*left, later):
        f.close()
