"""Keyed state backend: each state kind scoped to the current key, clear(), key-group layout,
snapshot/restore per key group (including rescaling), and timers travelling with the state."""
from __future__ import annotations

import pytest

from millstream.datastream.functions import AggregateFunction
from millstream.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from millstream.runtime.keygroups import (
    KeyGroupRange,
    assign_to_key_group,
    compute_key_group_range_for_operator_index,
)
from millstream.runtime.state.heap_backend import KeyedStateBackend, KeyGroupOutOfRangeError, TimerQueue

MAX_P = 128


def backend(parallelism: int = 1, index: int = 0) -> KeyedStateBackend:
    return KeyedStateBackend(MAX_P, parallelism, compute_key_group_range_for_operator_index(MAX_P, parallelism, index))


class Mean(AggregateFunction):
    def create_accumulator(self) -> list[int]:
        return [0, 0]

    def add(self, value: int, acc: list[int]) -> list[int]:
        return [acc[0] + value, acc[1] + 1]

    def get_result(self, acc: list[int]) -> float:
        return acc[0] / acc[1]


def test_value_state_per_key_update_none_clears() -> None:
    b = backend()
    s = b.get_value_state(ValueStateDescriptor("v"))
    b.set_current_key("a")
    assert s.value() is None
    s.update(1)
    b.set_current_key("b")
    assert s.value() is None
    s.update(2)
    b.set_current_key("a")
    assert s.value() == 1
    s.update(None)
    assert s.value() is None
    assert b.entries("v") == {"b": 2}


def test_list_state_add_add_all_update_get_is_a_copy() -> None:
    b = backend()
    s = b.get_list_state(ListStateDescriptor("l"))
    b.set_current_key(1)
    assert s.get() == []
    s.add("x")
    s.add_all(["y", "z"])
    got = s.get()
    got.append("mutated")
    assert s.get() == ["x", "y", "z"]
    b.set_current_key(2)
    s.update(["only"])
    assert s.get() == ["only"]
    s.update([])
    assert s.get() == [] and b.entries("l") == {1: ["x", "y", "z"]}
    with pytest.raises(ValueError, match="None"):
        s.add(None)
    b.set_current_key(1)
    s.clear()
    assert s.get() == [] and b.entries("l") == {}


def test_map_state_operations_and_iteration_while_modifying() -> None:
    b = backend()
    m = b.get_map_state(MapStateDescriptor("m"))
    b.set_current_key("k1")
    assert m.is_empty() and m.get("a") is None and not m.contains("a")
    m.put("a", 1)
    m.put_all({"b": 2, "c": 3})
    for key in m.keys():  # removing while iterating is allowed
        if key == "b":
            m.remove("b")
    assert dict(m.items()) == {"a": 1, "c": 3}
    assert sorted(m.values()) == [1, 3] and m.contains("c")
    b.set_current_key("k2")
    assert m.is_empty()
    m.put("z", 26)
    b.set_current_key("k1")
    m.remove("a")
    m.remove("c")
    assert m.is_empty() and b.entries("m") == {"k2": {"z": 26}}  # an emptied map leaves no entry


def test_reducing_and_aggregating_state() -> None:
    b = backend()
    r = b.get_reducing_state(ReducingStateDescriptor("r", lambda x, y: x * y))
    a = b.get_aggregating_state(AggregatingStateDescriptor("a", Mean()))
    for key, values in (("p", [2, 3, 4]), ("q", [5])):
        b.set_current_key(key)
        assert r.get() is None and a.get() is None
        for v in values:
            r.add(v)
            a.add(v)
    b.set_current_key("p")
    assert (r.get(), a.get()) == (24, 3.0)
    r.clear()
    a.clear()
    assert (r.get(), a.get()) == (None, None)
    b.set_current_key("q")
    assert (r.get(), a.get()) == (5, 5.0)


def test_state_needs_a_current_key() -> None:
    b = backend()
    s = b.get_value_state(ValueStateDescriptor("v"))
    with pytest.raises(RuntimeError, match="No key set for state 'v'"):
        s.value()


def test_same_name_returns_the_same_handle_and_other_kind_is_rejected() -> None:
    b = backend()
    assert b.get_value_state(ValueStateDescriptor("s")) is b.get_value_state(ValueStateDescriptor("s"))
    with pytest.raises(ValueError, match="'s' is a ValueState; it cannot also be used as a ListState"):
        b.get_list_state(ListStateDescriptor("s"))


def test_state_is_laid_out_by_key_group() -> None:
    b = backend()
    s = b.get_value_state(ValueStateDescriptor("v"))
    keys = [f"key-{i}" for i in range(200)]
    for k in keys:
        b.set_current_key(k)
        s.update(k.upper())
    table = b.table("v", "value")
    for kg, group in table.groups.items():
        assert all(assign_to_key_group(k, MAX_P) == kg for k in group)
    assert b.key_groups() == sorted({assign_to_key_group(k, MAX_P) for k in keys})


def test_key_outside_the_subtask_range_is_rejected() -> None:
    b = backend(parallelism=2, index=0)
    foreign = next(k for k in range(1000) if assign_to_key_group(k, MAX_P) >= 64)
    with pytest.raises(KeyGroupOutOfRangeError, match=f"Key {foreign} is in key group"):
        b.set_current_key(foreign)
    with pytest.raises(KeyGroupOutOfRangeError):
        b.check_key_groups([foreign], [assign_to_key_group(foreign, MAX_P)])


def _fill(b: KeyedStateBackend, keys: list[int]) -> None:
    v = b.get_value_state(ValueStateDescriptor("v"))
    lst = b.get_list_state(ListStateDescriptor("l"))
    m = b.get_map_state(MapStateDescriptor("m"))
    for k in keys:
        b.set_current_key(k)
        v.update(k * 10)
        lst.add_all([k, k + 1])
        m.put("k", k)
        b.processing_timers.register(1000 + k, k, b.current_key_group)
        b.event_timers.register(k, k, b.current_key_group)


def test_snapshot_restore_round_trip_with_timers() -> None:
    b = backend()
    _fill(b, list(range(50)))
    snapshot = b.snapshot()
    assert set(snapshot) == set(b.key_groups()) and all(isinstance(v, bytes) for v in snapshot.values())
    restored = backend()
    assert restored.restore(snapshot) == sorted(snapshot)
    for name in ("v", "l", "m"):
        assert restored.entries(name) == b.entries(name)
        assert restored.state_kind(name) == b.state_kind(name)
    assert len(restored.processing_timers) == 50 and restored.processing_timers.peek() == 1000
    fired = []
    while (t := restored.event_timers.poll(10)) is not None:
        fired.append(t[:2])
    assert fired == [(k, k) for k in range(11)]
    # Handles registered after restore see the restored values.
    v = restored.get_value_state(ValueStateDescriptor("v"))
    restored.set_current_key(7)
    assert v.value() == 70


def test_snapshot_is_a_copy() -> None:
    b = backend()
    _fill(b, [1])
    snapshot = b.snapshot()
    b.get_list_state(ListStateDescriptor("l")).add(99)
    restored = backend()
    restored.restore(snapshot)
    assert restored.entries("l") == {1: [1, 2]}


@pytest.mark.parametrize("old_p, new_p", [(2, 3), (3, 2), (1, 4), (4, 1)])
def test_rescaling_restores_each_key_exactly_once(old_p: int, new_p: int) -> None:
    keys = list(range(300)) + [f"s{i}" for i in range(300)]
    blobs: dict[int, bytes] = {}
    for i in range(old_p):
        b = backend(old_p, i)
        mine = [k for k in keys if b.key_group_range.contains(assign_to_key_group(k, MAX_P))]
        v = b.get_value_state(ValueStateDescriptor("v"))
        for k in mine:
            b.set_current_key(k)
            v.update(repr(k))
        blobs.update(b.snapshot())  # a later issue hands the union of the overlapping old subtasks
    seen: dict[object, str] = {}
    for i in range(new_p):
        b = backend(new_p, i)
        b.restore(blobs)
        entries = b.entries("v")
        assert all(b.key_group_range.contains(assign_to_key_group(k, MAX_P)) for k in entries)
        assert not set(entries) & set(seen)
        seen.update(entries)
    assert seen == {k: repr(k) for k in keys}


def test_restore_ignores_key_groups_of_other_subtasks() -> None:
    source = backend()
    _fill(source, list(range(100)))
    half = KeyedStateBackend(MAX_P, 2, KeyGroupRange(64, 127))
    loaded = half.restore(source.snapshot())
    assert loaded and all(kg >= 64 for kg in loaded)
    assert all(assign_to_key_group(k, MAX_P) >= 64 for k in half.entries("v"))


def test_timer_queue_orders_deduplicates_and_deletes() -> None:
    q = TimerQueue()
    q.register(20, "a", 1)
    q.register(10, "b", 2)
    q.register(10, "b", 2)  # duplicate
    q.register(10, "c", 3)
    q.register(30, "d", 4)
    q.delete(30, "d", 4)
    q.register(30, "d", 4)  # re-registered after a delete: fires once
    assert len(q) == 4 and q.peek() == 10
    fired = []
    while (t := q.poll(100)) is not None:
        fired.append((t[0], t[1]))
    assert fired == [(10, "b"), (10, "c"), (20, "a"), (30, "d")]
    assert q.peek() is None and len(q) == 0


def test_timer_keys_need_not_be_orderable() -> None:
    q = TimerQueue()
    q.register(5, frozenset({1}), 0)
    q.register(5, frozenset({2}), 0)  # a tuple compare of the keys would raise
    assert q.poll(5) is not None and q.poll(5) is not None and q.poll(5) is None


def test_batch_key_groups_match_flink_for_every_key_type_and_never_mix_equal_keys() -> None:
    b = backend()
    keys: list[object] = ["a", 1, 1.0, True, b"x", (1, "a"), -7, 2**40, "a", 1, True, 1.0]
    expected = [assign_to_key_group(k, MAX_P) for k in keys]
    assert b.assign_key_groups(keys) == expected
    assert b.assign_key_groups(keys) == expected  # from the cache the second time
    assert b.assign_key_groups([1.0, True, 1]) == [assign_to_key_group(k, MAX_P) for k in (1.0, True, 1)]
    assert b.assign_key_groups([1, 2, 1.0]) == [assign_to_key_group(k, MAX_P) for k in (1, 2, 1.0)]
    assert b.assign_key_groups([True, 1]) == [assign_to_key_group(k, MAX_P) for k in (True, 1)]
    with pytest.raises(ValueError, match="None"):
        b.assign_key_groups(["a", None])


def test_batch_key_groups_check_the_range_and_bound_the_cache() -> None:
    b = KeyedStateBackend(MAX_P, 2, KeyGroupRange(0, 63), batch_cache_size=10)
    mine = [k for k in range(500) if assign_to_key_group(k, MAX_P) < 64]
    for i in range(0, 200, 20):
        assert b.assign_key_groups(mine[i : i + 20]) == [assign_to_key_group(k, MAX_P) for k in mine[i : i + 20]]
    assert len(b._int_kg_cache) <= 30
    foreign = next(k for k in range(500) if assign_to_key_group(k, MAX_P) >= 64)
    with pytest.raises(KeyGroupOutOfRangeError, match=f"Key {foreign} "):
        b.assign_key_groups([mine[0], foreign])
    with pytest.raises(KeyGroupOutOfRangeError, match=f"Key {foreign!r} "):  # also on the uncached path
        b.assign_key_groups([(1,), foreign])


# -- PyFlink's state surface: item syntax, iteration, getters ----------------------------------


def test_map_state_item_syntax_as_pyflink_defines_it() -> None:
    b = backend()
    m = b.get_map_state(MapStateDescriptor("m", None, None))
    b.set_current_key("k")
    m["a"] = 1
    m["b"] = 2
    assert m["a"] == 1 and m.get("a") == 1
    assert m["missing"] is None  # PyFlink: m[k] is get(k), None for a missing key (no KeyError)
    assert "a" in m and "missing" not in m
    assert sorted(m) == ["a", "b"]
    del m["a"]
    del m["missing"]  # remove() of a missing key is no error
    assert dict(m.items()) == {"b": 2}
    b.set_current_key("other")
    assert "b" not in m and m["b"] is None


def test_list_state_is_iterable() -> None:
    b = backend()
    s = b.get_list_state(ListStateDescriptor("l", None))
    b.set_current_key("k")
    s.add_all([1, 2])
    assert [x for x in s] == [1, 2]


def test_broadcast_state_item_syntax_and_operator_state_store() -> None:
    from millstream.datastream.state import OperatorStateStore
    from millstream.runtime.state.broadcast import BroadcastStates

    desc = MapStateDescriptor("rules", None, None)
    store = BroadcastStates([desc], "op")
    assert isinstance(store, OperatorStateStore)
    writable = store.get_broadcast_state(desc)
    writable["x"] = 1
    writable["y"] = 2
    del writable["y"]
    view = store.read_only(desc)
    assert view["x"] == 1 and "x" in view and "y" not in view and list(view) == ["x"]
    with pytest.raises(TypeError):
        view["z"] = 3  # type: ignore[index]  # the read-only view has no item assignment
    with pytest.raises(ValueError, match="does not exist"):
        store.get_broadcast_state(MapStateDescriptor("other", None, None))


def test_descriptor_getters_as_pyflink() -> None:
    add = lambda a, b: a + b  # noqa: E731
    r = ReducingStateDescriptor("r", add, None)
    assert r.get_name() == "r" and r.get_reduce_function().reduce(1, 2) == 3
    a = AggregatingStateDescriptor("a", Mean(), None)
    assert a.get_agg_function() is a.agg_function
    v = ValueStateDescriptor("v", None)
    assert v.get_ttl_config() is None


def test_list_and_map_descriptors_carry_their_collection_type_as_pyflink() -> None:
    from millstream.common import Types

    assert ListStateDescriptor("l", Types.INT()).type_info == Types.LIST(Types.INT())
    m = MapStateDescriptor("m", Types.STRING(), Types.INT())
    assert m.type_info == Types.MAP(Types.STRING(), Types.INT())
    assert (m.key_type_info, m.value_type_info) == (Types.STRING(), Types.INT())
    assert ValueStateDescriptor("v", Types.INT()).type_info == Types.INT()
