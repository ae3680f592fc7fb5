"""State time-to-live as Flink defines it (docs "State Time-To-Live (TTL)"; TtlValueState,
TtlListState, TtlMapState, TtlReducingState, TtlAggregatingState, TtlIncrementalCleanup): expiry by
processing time from the last access timestamp, update types, visibility, incremental and
full-snapshot cleanup, timestamps carried through snapshot and restore.

The backend's clock is a ManualClock: no sleeps.
"""
from __future__ import annotations

import pytest

from millstream.common.time import Duration, Time
from millstream.datastream.functions import AggregateFunction
from millstream.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
)
from millstream.runtime.keygroups import compute_key_group_range_for_operator_index
from millstream.runtime.state.heap_backend import KeyedStateBackend
from millstream.runtime.task.environment import ManualClock
from tests.unit import state_backends

# Every test runs on each keyed state backend (heap, RocksDB, RocksDB with heap timers).
pytestmark = pytest.mark.usefixtures("state_backend")

MAX_P = 128
TTL = 10_000
T0 = 1_000_000

UpdateType = StateTtlConfig.UpdateType
Visibility = StateTtlConfig.StateVisibility


def backend(clock: ManualClock, parallelism: int = 1, index: int = 0) -> KeyedStateBackend:
    kgr = compute_key_group_range_for_operator_index(MAX_P, parallelism, index)
    return state_backends.keyed_backend(MAX_P, parallelism, kgr, clock=clock.now_ms)


def config(update: UpdateType = UpdateType.OnCreateAndWrite, visibility: Visibility = Visibility.NeverReturnExpired,
           background: bool = False) -> StateTtlConfig:
    b = StateTtlConfig.new_builder(Time.milliseconds(TTL)).set_update_type(update).set_state_visibility(visibility)
    if not background:
        b.disable_cleanup_in_background()
    return b.build()


def with_ttl(descriptor, ttl_config: StateTtlConfig | None = None):
    descriptor.enable_time_to_live(ttl_config or config())
    return descriptor


class Mean(AggregateFunction):
    def create_accumulator(self) -> list[int]:
        return [0, 0]

    def add(self, value: int, acc: list[int]) -> list[int]:
        return [acc[0] + value, acc[1] + 1]

    def get_result(self, acc: list[int]) -> float:
        return acc[0] / acc[1]

    def merge(self, a: list[int], b: list[int]) -> list[int]:
        return [a[0] + b[0], a[1] + b[1]]


# -- the configuration ---------------------------------------------------------------------------


def test_builder_defaults_and_getters_are_flinks() -> None:
    c = StateTtlConfig.new_builder(Time.seconds(1)).build()
    assert c.get_ttl() == Duration.of_seconds(1)
    assert c.get_update_type() is UpdateType.OnCreateAndWrite
    assert c.get_state_visibility() is Visibility.NeverReturnExpired
    assert c.get_ttl_time_characteristic() is StateTtlConfig.TtlTimeCharacteristic.ProcessingTime
    assert c.is_enabled()
    s = c.get_cleanup_strategies()
    assert s.is_cleanup_in_background() and not s.in_full_snapshot()
    inc = s.get_incremental_cleanup_strategy()  # the background default: 5 entries per access
    assert (inc.get_cleanup_size(), inc.run_cleanup_for_every_record()) == (5, False)
    assert s.get_rocksdb_compact_filter_cleanup_strategy().get_query_time_after_num_entries() == 1000

    c2 = (StateTtlConfig.new_builder(Time.seconds(1)).update_ttl_on_read_and_write().return_expired_if_not_cleaned_up()
          .use_processing_time().cleanup_full_snapshot().cleanup_incrementally(7, True)
          .cleanup_in_rocksdb_compact_filter(42, Duration.of_hours(1)).disable_cleanup_in_background()
          .set_ttl(Time.minutes(2)).build())
    assert c2.get_ttl() == Duration.of_minutes(2)
    assert c2.get_update_type() is UpdateType.OnReadAndWrite
    assert c2.get_state_visibility() is Visibility.ReturnExpiredIfNotCleanedUp
    s2 = c2.get_cleanup_strategies()
    assert s2.in_full_snapshot() and not s2.is_cleanup_in_background()
    assert s2.get_incremental_cleanup_strategy().get_cleanup_size() == 7
    assert s2.get_incremental_cleanup_strategy().run_cleanup_for_every_record()
    rocks = s2.get_rocksdb_compact_filter_cleanup_strategy()
    assert (rocks.get_query_time_after_num_entries(), rocks.get_periodic_compaction_time()) == (42, Duration.of_hours(1))
    # Without background cleanup and no explicit one there is none.
    none = StateTtlConfig.new_builder(Time.seconds(1)).disable_cleanup_in_background().build().get_cleanup_strategies()
    assert none.get_incremental_cleanup_strategy() is None
    assert none.get_rocksdb_compact_filter_cleanup_strategy() is None
    assert not StateTtlConfig.new_builder(Time.seconds(1)).set_update_type(UpdateType.Disabled).build().is_enabled()


def test_bad_configuration_is_rejected_with_the_reason() -> None:
    with pytest.raises(ValueError, match="TTL must be positive"):
        StateTtlConfig.new_builder(Time.seconds(0)).build()
    with pytest.raises(TypeError, match="Duration"):
        StateTtlConfig.new_builder(10).build()  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cleanup_size"):
        StateTtlConfig.new_builder(Time.seconds(1)).cleanup_incrementally(-1, False)
    with pytest.raises(TypeError, match="UpdateType"):
        StateTtlConfig.new_builder(Time.seconds(1)).set_update_type("OnReadAndWrite").build()  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="StateTtlConfig"):
        ValueStateDescriptor("v", None).enable_time_to_live(Time.seconds(1))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"call \.build\(\)"):
        ValueStateDescriptor("v", None).enable_time_to_live(StateTtlConfig.new_builder(Time.seconds(1)))  # type: ignore[arg-type]


def test_a_descriptor_with_ttl_survives_shipping_to_a_task() -> None:
    """Functions (and descriptors they hold) are cloudpickled to the TaskManagers; the runtime
    compares the enums by identity."""
    import pickle

    import cloudpickle

    from millstream.runtime.state.ttl import ttl_policy

    d = with_ttl(ValueStateDescriptor("v", None), StateTtlConfig.new_builder(Time.seconds(1))
                 .update_ttl_on_read_and_write().return_expired_if_not_cleaned_up().cleanup_full_snapshot()
                 .cleanup_incrementally(3, True).build())
    policy = ttl_policy(pickle.loads(cloudpickle.dumps(d)))
    assert policy is not None
    assert (policy.ttl_ms, policy.update_on_read, policy.return_expired) == (1000, True, True)
    assert (policy.cleanup_size, policy.cleanup_every_record, policy.full_snapshot) == (3, True, True)


# -- value state: expiry, update type, visibility ----------------------------------------------


def test_value_expires_ttl_after_the_last_write_and_a_write_prolongs_it() -> None:
    clock = ManualClock(T0)
    b = backend(clock)
    s = b.get_value_state(with_ttl(ValueStateDescriptor("v", None)))
    b.set_current_key("a")
    s.update(1)
    clock.set(T0 + TTL - 1)
    assert s.value() == 1  # OnCreateAndWrite: this read does not prolong
    s.update(2)  # a write does
    clock.set(T0 + TTL - 1 + TTL - 1)
    assert s.value() == 2
    clock.advance(1)  # expired at exactly last write + ttl
    assert s.value() is None
    assert b.entries("v") == {}  # the read found it expired and removed it


def test_on_read_and_write_prolongs_on_every_read() -> None:
    clock = ManualClock(T0)
    b = backend(clock)
    s = b.get_value_state(with_ttl(ValueStateDescriptor("v", None), config(UpdateType.OnReadAndWrite)))
    b.set_current_key("a")
    s.update("x")
    for _ in range(5):
        clock.advance(TTL - 1)
        assert s.value() == "x"
    clock.advance(TTL)
    assert s.value() is None


def test_return_expired_if_not_cleaned_up_returns_it_once_then_it_is_gone() -> None:
    clock = ManualClock(T0)
    b = backend(clock)
    s = b.get_value_state(with_ttl(ValueStateDescriptor("v", None), config(visibility=Visibility.ReturnExpiredIfNotCleanedUp)))
    b.set_current_key("a")
    s.update("x")
    clock.advance(TTL)
    assert s.value() == "x"  # expired but not cleaned up yet: returned, and cleaned up by this read
    assert s.value() is None


def test_update_type_disabled_means_no_ttl() -> None:
    clock = ManualClock(T0)
    b = backend(clock)
    s = b.get_value_state(with_ttl(ValueStateDescriptor("v", None), config(UpdateType.Disabled)))
    b.set_current_key("a")
    s.update(1)
    clock.advance(100 * TTL)
    assert s.value() == 1
    assert b.entries("v") == {"a": 1}  # stored as plain state


def test_update_none_clears_and_keys_expire_independently() -> None:
    clock = ManualClock(T0)
    b = backend(clock)
    s = b.get_value_state(with_ttl(ValueStateDescriptor("v", None)))
    b.set_current_key("a")
    s.update(1)
    clock.advance(TTL // 2)
    b.set_current_key("b")
    s.update(2)
    clock.advance(TTL // 2)
    assert s.value() == 2
    b.set_current_key("a")
    assert s.value() is None
    b.set_current_key("b")
    s.update(None)
    assert s.value() is None and b.entries("v") == {}


# -- list state: per element -------------------------------------------------------------------


def test_list_elements_expire_one_by_one() -> None:
    clock = ManualClock(T0)
    b = backend(clock)
    s = b.get_list_state(with_ttl(ListStateDescriptor("l", None)))
    b.set_current_key("k")
    s.add(1)
    clock.advance(TTL // 2)
    s.add_all([2, 3])
    assert list(s) == [1, 2, 3]  # ListState is iterable, as in PyFlink
    clock.set(T0 + TTL)
    assert s.get() == [2, 3]  # 1 expired, the others were added later
    assert len(b.entries("l")["k"]) == 3  # as in Flink, not removed by this read (2 and 3 are unexpired)
    clock.set(T0 + TTL // 2 + TTL)
    assert s.get() == []
    assert b.entries("l") == {}
    s.update([7, 8])
    clock.advance(TTL - 1)
    s.add(9)
    clock.advance(1)
    assert s.get() == [9]


def test_list_on_read_and_write_refreshes_the_unexpired_elements_and_return_expired_shows_them_once() -> None:
    clock = ManualClock(T0)
    b = backend(clock)
    s = b.get_list_state(with_ttl(ListStateDescriptor("l", None), config(UpdateType.OnReadAndWrite)))
    b.set_current_key("k")
    s.add("a")
    clock.advance(TTL - 1)
    s.add("b")
    assert s.get() == ["a", "b"]  # refreshes both
    clock.advance(TTL - 1)
    assert s.get() == ["a", "b"]

    r = b.get_list_state(with_ttl(ListStateDescriptor("r", None), config(visibility=Visibility.ReturnExpiredIfNotCleanedUp)))
    r.add("old")
    clock.advance(TTL // 2)
    r.add("new")
    clock.advance(TTL // 2)
    assert r.get() == ["old", "new"]  # "old" expired but still stored: returned
    assert r.get() == ["old", "new"]  # a read cleans up only a list with nothing unexpired left
    clock.advance(TTL // 2)
    assert r.get() == ["old", "new"]  # now both expired: returned once more, and the list is cleared
    assert r.get() == [] and b.entries("r") == {}


def test_list_rejects_none_with_ttl_too() -> None:
    b = backend(ManualClock(T0))
    s = b.get_list_state(with_ttl(ListStateDescriptor("l", None)))
    b.set_current_key("k")
    with pytest.raises(ValueError, match="None"):
        s.add(None)
    with pytest.raises(ValueError, match="None"):
        s.add_all([1, None])


# -- map state: per entry ----------------------------------------------------------------------


def test_map_entries_expire_one_by_one_on_every_read_path() -> None:
    clock = ManualClock(T0)
    b = backend(clock)
    m = b.get_map_state(with_ttl(MapStateDescriptor("m", None, None)))
    b.set_current_key("k")
    m.put("a", 1)
    clock.advance(TTL // 2)
    m.put_all({"b": 2, "c": 3})
    m["d"] = 4
    clock.set(T0 + TTL)  # "a" expired
    assert m.get("a") is None and m["a"] is None
    assert "a" not in m and not m.contains("a")
    assert sorted(m.keys()) == ["b", "c", "d"]
    assert sorted(m.items()) == [("b", 2), ("c", 3), ("d", 4)]
    assert sorted(m.values()) == [2, 3, 4]
    assert sorted(m) == ["b", "c", "d"]
    m.put("b", 20)  # only this entry is prolonged
    clock.set(T0 + TTL // 2 + TTL)
    assert dict(m.items()) == {"b": 20}
    assert not m.is_empty()
    del m["b"]
    assert m.is_empty() and b.entries("m") == {}


def test_map_on_read_and_write_refreshes_the_entries_read() -> None:
    clock = ManualClock(T0)
    b = backend(clock)
    m = b.get_map_state(with_ttl(MapStateDescriptor("m", None, None), config(UpdateType.OnReadAndWrite)))
    b.set_current_key("k")
    m.put_all({"read": 1, "unread": 2})
    clock.advance(TTL - 1)
    assert m.get("read") == 1
    clock.advance(TTL - 1)
    assert dict(m.items()) == {"read": 1}


def test_map_is_empty_when_every_entry_expired_and_return_expired_shows_them_once() -> None:
    clock = ManualClock(T0)
    b = backend(clock)
    m = b.get_map_state(with_ttl(MapStateDescriptor("m", None, None)))
    r = b.get_map_state(with_ttl(MapStateDescriptor("r", None, None), config(visibility=Visibility.ReturnExpiredIfNotCleanedUp)))
    b.set_current_key("k")
    m.put("a", 1)
    r.put("a", 1)
    clock.advance(TTL)
    assert m.is_empty()
    assert r.get("a") == 1 and r.get("a") is None


# -- reducing and aggregating state ------------------------------------------------------------


def test_reducing_state_restarts_after_expiry_and_add_prolongs() -> None:
    clock = ManualClock(T0)
    b = backend(clock)
    s = b.get_reducing_state(with_ttl(ReducingStateDescriptor("r", lambda x, y: x + y, None)))
    b.set_current_key("k")
    s.add(1)
    clock.advance(TTL - 1)
    s.add(2)
    clock.advance(TTL - 1)
    assert s.get() == 3
    clock.advance(1)
    assert s.get() is None
    s.add(5)
    clock.advance(TTL)
    s.add(7)  # the expired 5 is not combined
    assert s.get() == 7

    # ReturnExpiredIfNotCleanedUp: the expired value is still combined with (Flink's TtlReduceFunction).
    r = b.get_reducing_state(with_ttl(ReducingStateDescriptor("r2", lambda x, y: x + y, None),
                                      config(visibility=Visibility.ReturnExpiredIfNotCleanedUp)))
    r.add(5)
    clock.advance(TTL)
    r.add(7)
    assert r.get() == 12


def test_aggregating_state_restarts_its_accumulator_after_expiry() -> None:
    clock = ManualClock(T0)
    b = backend(clock)
    s = b.get_aggregating_state(with_ttl(AggregatingStateDescriptor("a", Mean(), None)))
    b.set_current_key("k")
    s.add(2)
    s.add(4)
    assert s.get() == 3
    clock.advance(TTL)
    assert s.get() is None
    s.add(10)
    clock.advance(TTL)
    s.add(20)
    assert s.get() == 20


# -- incremental cleanup -----------------------------------------------------------------------


def _with_expired_keys(clock: ManualClock, name: str, n: int) -> KeyedStateBackend:
    """A backend restored from a snapshot holding ``n`` keys of TTL value state ``name``, all expired
    at ``clock``'s time: a cleanup walk starts at the first access after the restore, so the
    counts below are exact."""
    writer = backend(ManualClock(clock.now_ms() - TTL))
    s = writer.get_value_state(with_ttl(ValueStateDescriptor(name, None)))
    for i in range(n):
        writer.set_current_key(f"old{i}")
        s.update(i)
    b = backend(clock)
    b.restore(writer.snapshot())
    return b


def test_incremental_cleanup_checks_cleanup_size_entries_per_access() -> None:
    clock = ManualClock(T0)
    b = _with_expired_keys(clock, "v", 6)
    ttl = StateTtlConfig.new_builder(Time.milliseconds(TTL)).cleanup_incrementally(2, False).build()
    s = b.get_value_state(with_ttl(ValueStateDescriptor("v", None), ttl))
    assert len(b.entries("v")) == 6
    b.set_current_key("fresh")
    s.update("x")  # one access: two entries checked (both expired, removed)
    assert len(b.entries("v")) == 4 + 1
    s.value()
    assert len(b.entries("v")) == 2 + 1
    s.value()
    assert set(b.entries("v")) == {"fresh"}
    s.value()  # a new walk checks "fresh": not expired, kept
    assert b.entries("v") == {"fresh": ("x", T0)}


def test_background_cleanup_is_on_by_default_and_can_be_disabled() -> None:
    clock = ManualClock(T0)
    b = _with_expired_keys(clock, "d", 12)
    default = b.get_value_state(with_ttl(ValueStateDescriptor("d", None), config(background=True)))
    b.set_current_key("other")
    default.value()  # Flink's default: 5 entries per access
    assert len(b.entries("d")) == 12 - 5

    b2 = _with_expired_keys(clock, "n", 12)
    disabled = b2.get_value_state(with_ttl(ValueStateDescriptor("n", None), config(background=False)))
    b2.set_current_key("other")
    for _ in range(5):
        disabled.value()
    assert len(b2.entries("n")) == 12


def test_incremental_cleanup_of_lists_and_maps_removes_expired_elements_and_entries() -> None:
    clock = ManualClock(T0)
    b = backend(clock)
    ttl = StateTtlConfig.new_builder(Time.milliseconds(TTL)).cleanup_incrementally(10, False).build()
    lst = b.get_list_state(with_ttl(ListStateDescriptor("l", None), ttl))
    mp = b.get_map_state(with_ttl(MapStateDescriptor("m", None, None), ttl))
    b.set_current_key("k")
    lst.add("old")
    mp.put("old", 1)
    clock.advance(TTL // 2)
    lst.add("new")
    mp.put("new", 2)
    clock.advance(TTL // 2)
    b.set_current_key("other")
    lst.get()  # accesses for another key clean up key "k" too
    mp.get("x")
    assert [v for v, _ in b.entries("l")["k"]] == ["new"]
    assert list(b.entries("m")["k"]) == ["new"]


def test_cleanup_for_every_record_runs_per_record_of_a_batch() -> None:
    clock = ManualClock(T0)
    b = _with_expired_keys(clock, "v", 5)
    ttl = StateTtlConfig.new_builder(Time.milliseconds(TTL)).cleanup_incrementally(1, True).build()
    b.get_value_state(with_ttl(ValueStateDescriptor("v", None), ttl))
    b.run_record_cleanups(3)  # what a keyed operator calls for a batch of three records
    assert len(b.entries("v")) == 2
    plain = backend(clock)
    plain.get_value_state(with_ttl(ValueStateDescriptor("v", None), config(background=True)))
    # not per record unless asked for: no per-batch work, but for RocksDB's compaction-filter sweep
    # (Flink's background cleanup on that backend), which is driven by the records processed
    from millstream.runtime.state.rocksdb_backend import RocksTtlCompactionCleanup
    rocks = state_backends.selected["type"] == "rocksdb"
    assert [type(c) for c in plain.record_cleanups] == ([RocksTtlCompactionCleanup] if rocks else [])


# -- snapshots ---------------------------------------------------------------------------------


def _restore(snapshot: dict[int, bytes], clock: ManualClock) -> KeyedStateBackend:
    b = backend(clock)
    b.restore(snapshot)
    return b


def test_restored_values_expire_at_their_original_time() -> None:
    clock = ManualClock(T0)
    b = backend(clock)
    desc = lambda: with_ttl(ValueStateDescriptor("v", None))  # noqa: E731 - a fresh descriptor per "job run"
    ldesc = lambda: with_ttl(ListStateDescriptor("l", None))  # noqa: E731
    s, lst = b.get_value_state(desc()), b.get_list_state(ldesc())
    b.set_current_key("a")
    s.update(1)
    lst.add("early")
    clock.advance(TTL // 2)
    lst.add("late")
    snap = b.snapshot()

    clock2 = ManualClock(T0 + TTL - 1)  # the restarted job's clock: time went on during the failover
    r = _restore(snap, clock2)
    rs, rl = r.get_value_state(desc()), r.get_list_state(ldesc())
    r.set_current_key("a")
    assert rs.value() == 1
    assert rl.get() == ["early", "late"]
    clock2.advance(1)
    assert rs.value() is None  # restore did not restart the clock of the value
    assert rl.get() == ["late"]


def test_full_snapshot_cleanup_leaves_expired_entries_out_of_the_checkpoint_only() -> None:
    clock = ManualClock(T0)
    b = backend(clock)
    full = (StateTtlConfig.new_builder(Time.milliseconds(TTL)).cleanup_full_snapshot()
            .disable_cleanup_in_background().build())
    v = b.get_value_state(with_ttl(ValueStateDescriptor("v", None), full))
    lst = b.get_list_state(with_ttl(ListStateDescriptor("l", None), full))
    m = b.get_map_state(with_ttl(MapStateDescriptor("m", None, None), full))
    keep = b.get_value_state(with_ttl(ValueStateDescriptor("keep", None)))  # no full-snapshot cleanup
    b.set_current_key("old")
    v.update(1)
    keep.update(1)
    b.set_current_key("k")
    lst.add("old")
    m.put("old", 1)
    clock.advance(TTL // 2)
    b.set_current_key("new")
    v.update(2)
    b.set_current_key("k")
    lst.add("new")
    m.put("new", 2)
    clock.advance(TTL // 2)
    snap = b.snapshot()
    assert set(b.entries("v")) == {"old", "new"}  # the running state is untouched
    r = _restore(snap, ManualClock(T0 + TTL))
    assert set(r.entries("v")) == {"new"}
    assert [e[0] for e in r.entries("l")["k"]] == ["new"]
    assert list(r.entries("m")["k"]) == ["new"]
    assert set(r.entries("keep")) == {"old"}  # expired, but this state does not clean up in snapshots


def test_ttl_and_plain_state_of_one_name_do_not_mix_even_across_a_restore() -> None:
    clock = ManualClock(T0)
    b = backend(clock)
    b.get_value_state(with_ttl(ValueStateDescriptor("v", None)))
    with pytest.raises(ValueError, match="with time-to-live"):
        b.get_value_state(ValueStateDescriptor("v", None))
    b.set_current_key("a")
    b.get_value_state(with_ttl(ValueStateDescriptor("v", None))).update(1)
    with pytest.raises(ValueError, match="with time-to-live"):
        _restore(b.snapshot(), clock).get_value_state(ValueStateDescriptor("v", None))

    plain = backend(clock)
    plain.get_value_state(ValueStateDescriptor("p", None))
    plain.set_current_key("a")
    plain.get_value_state(ValueStateDescriptor("p", None)).update(1)
    with pytest.raises(ValueError, match="without time-to-live"):
        _restore(plain.snapshot(), clock).get_value_state(with_ttl(ValueStateDescriptor("p", None)))


def test_ttl_state_rescales_like_any_keyed_state() -> None:
    clock = ManualClock(T0)
    b = backend(clock)
    s = b.get_value_state(with_ttl(ValueStateDescriptor("v", None)))
    for i in range(50):
        b.set_current_key(i)
        s.update(i)
    snap = b.snapshot()
    clock.advance(TTL - 1)
    seen = {}
    for index in range(3):
        r = backend(clock, 3, index)
        r.restore(snap)
        rs = r.get_value_state(with_ttl(ValueStateDescriptor("v", None)))
        for key in r.entries("v"):
            r.set_current_key(key)
            seen[key] = rs.value()
    assert seen == {i: i for i in range(50)}


# -- through the operator chain: PyFlink's own programs ----------------------------------------

from millstream.common import Types, WatermarkStrategy  # noqa: E402
from millstream.common.watermark_strategy import TimestampAssigner  # noqa: E402
from millstream.datastream import KeyedProcessFunction, RuntimeContext, StreamExecutionEnvironment  # noqa: E402
from millstream.runtime.task.environment import BATCH, STREAMING  # noqa: E402
from tests.unit.test_runtime_chain import collect, make_chain, run_job, vertex  # noqa: E402


class _ThirdColumn(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp) -> int:
        return int(value[2])


class _PyFlinkStateFunction(KeyedProcessFunction):
    """PyFlink's test_keyed_process_function_with_state: a map state with TTL (1 s,
    OnReadAndWrite, ReturnExpiredIfNotCleanedUp, no background cleanup) next to plain states."""

    def open(self, runtime_context: RuntimeContext):
        self.value_state = runtime_context.get_state(ValueStateDescriptor('value_state', Types.INT()))
        self.list_state = runtime_context.get_list_state(ListStateDescriptor('list_state', Types.INT()))
        map_state_descriptor = MapStateDescriptor('map_state', Types.INT(), Types.STRING())
        state_ttl_config = StateTtlConfig \
            .new_builder(Time.seconds(1)) \
            .set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite) \
            .set_state_visibility(StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp) \
            .disable_cleanup_in_background() \
            .build()
        map_state_descriptor.enable_time_to_live(state_ttl_config)
        self.map_state = runtime_context.get_map_state(map_state_descriptor)

    def process_element(self, value, ctx):
        current_value = self.value_state.value()
        self.value_state.update(value[0])
        current_list = [_ for _ in self.list_state.get()]
        self.list_state.add(value[0])
        map_entries = {k: v for k, v in self.map_state.items()}
        keys = sorted(map_entries.keys())
        map_entries_string = '{' + ', '.join(str(k) + ': ' + str(map_entries[k]) for k in keys) + '}'
        self.map_state.put(value[0], value[1])
        yield "current key: {}, current value state: {}, current list state: {}, current map state: {}, " \
              "current value: {}".format(ctx.get_current_key(), current_value, current_list, map_entries_string, value)


@pytest.mark.parametrize("mode", [STREAMING, BATCH])
def test_pyflink_keyed_process_function_with_state_and_ttl(mode: str) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    data = env.from_collection(
        [(1, 'hi', '1603708211000'), (2, 'hello', '1603708224000'), (3, 'hi', '1603708226000'),
         (4, 'hello', '1603708289000'), (5, 'hi', '1603708291000'), (6, 'hello', '1603708293000')],
        type_info=Types.ROW([Types.INT(), Types.STRING(), Types.STRING()]))
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(_ThirdColumn())
    collect(data.assign_timestamps_and_watermarks(strategy).key_by(lambda x: x[1], key_type=Types.STRING())
            .process(_PyFlinkStateFunction(), output_type=Types.STRING()))
    results = run_job(env, mode)["out"]
    expected = [
        "current key: hi, current value state: None, current list state: [], current map state: {}, "
        "current value: Row(f0=1, f1='hi', f2='1603708211000')",
        "current key: hello, current value state: None, current list state: [], current map state: {}, "
        "current value: Row(f0=2, f1='hello', f2='1603708224000')",
        "current key: hi, current value state: 1, current list state: [1], current map state: {1: hi}, "
        "current value: Row(f0=3, f1='hi', f2='1603708226000')",
        "current key: hello, current value state: 2, current list state: [2], current map state: {2: hello}, "
        "current value: Row(f0=4, f1='hello', f2='1603708289000')",
        "current key: hi, current value state: 3, current list state: [1, 3], current map state: {1: hi, 3: hi}, "
        "current value: Row(f0=5, f1='hi', f2='1603708291000')",
        "current key: hello, current value state: 4, current list state: [2, 4], "
        "current map state: {2: hello, 4: hello}, current value: Row(f0=6, f1='hello', f2='1603708293000')",
    ]
    assert sorted(results) == sorted(expected)


class _Sum(AggregateFunction):
    def create_accumulator(self):
        return 0

    def add(self, value, accumulator):
        return value + accumulator

    def get_result(self, accumulator):
        return accumulator

    def merge(self, acc_a, acc_b):
        return acc_a + acc_b


class _AggregatingWithTtl(KeyedProcessFunction):
    """PyFlink's test_aggregating_state: an aggregating state with TTL (1 s, OnReadAndWrite)."""

    def open(self, runtime_context: RuntimeContext):
        descriptor = AggregatingStateDescriptor('aggregating_state', _Sum(), Types.INT())
        state_ttl_config = StateTtlConfig \
            .new_builder(Time.seconds(1)) \
            .set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite) \
            .disable_cleanup_in_background() \
            .build()
        descriptor.enable_time_to_live(state_ttl_config)
        self.aggregating_state = runtime_context.get_aggregating_state(descriptor)

    def process_element(self, value, ctx):
        self.aggregating_state.add(value[0])
        yield self.aggregating_state.get(), value[1]


def test_pyflink_aggregating_state_with_ttl() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    data = env.from_collection([(1, 'hi'), (2, 'hello'), (3, 'hi'), (4, 'hello'), (5, 'hi'), (6, 'hello')],
                               type_info=Types.TUPLE([Types.INT(), Types.STRING()]))
    collect(data.key_by(lambda x: x[1], key_type=Types.STRING()).process(_AggregatingWithTtl()))
    results = run_job(env)["out"]
    assert sorted(results) == sorted([(1, 'hi'), (2, 'hello'), (4, 'hi'), (6, 'hello'), (9, 'hi'), (12, 'hello')])


class _RememberIfFlagged(KeyedProcessFunction):
    """Writes TTL state only for records flagged so; the others only pass through the operator."""

    def open(self, runtime_context: RuntimeContext):
        descriptor = ValueStateDescriptor("seen", Types.INT())
        descriptor.enable_time_to_live(StateTtlConfig.new_builder(Time.milliseconds(TTL))
                                       .cleanup_incrementally(1, True).build())
        self.seen = runtime_context.get_state(descriptor)

    def process_element(self, value, ctx):
        if value[1]:
            self.seen.update(1)
        return []


def test_cleanup_for_every_record_runs_in_a_keyed_operator_without_state_access() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    collect(env.from_collection([("x", True)]).key_by(lambda r: r[0]).process(_RememberIfFlagged()))
    v = vertex(env, index=1)
    clock = ManualClock(T0)
    run = make_chain(v, clock=clock)
    run.chain.open()
    target = v.inputs[0].target_node_id
    run.chain.process_batch([(f"k{i}", True) for i in range(6)], target)
    (b,) = run.chain._backends.values()
    assert len(b.entries("seen")) == 6
    clock.advance(TTL)
    run.chain.process_batch([("other", False)] * 4, target)  # four records, no state access
    assert len(b.entries("seen")) == 6 - 4  # one entry checked per record
    run.chain.process_batch([("other", False)] * 10, target)
    assert b.entries("seen") == {}



def _window_function(per_window: bool):
    """Counts firings per key in global state with TTL, or asks for per-window state with TTL."""
    from millstream.datastream.functions import ProcessWindowFunction

    class Fires(ProcessWindowFunction):
        def process(self, key, context, elements):
            desc = ValueStateDescriptor("fires", Types.INT())
            desc.enable_time_to_live(config())
            store = context.window_state() if per_window else context.global_state()
            s = store.get_state(desc)
            s.update((s.value() or 0) + 1)
            yield key, context.window().start, s.value()

    return Fires()


def test_window_global_state_honours_ttl_and_per_window_state_with_ttl_is_refused() -> None:
    from millstream.datastream.window import TumblingEventTimeWindows
    from millstream.runtime.operators.base import OperatorError
    from tests.unit.window_harness import WindowHarness

    h = WindowHarness(lambda s: s.key_by(lambda r: r[0]).window(TumblingEventTimeWindows.of(Time.milliseconds(10)))
                      .process(_window_function(False)), clock_ms=T0)
    h.feed((("a", 1), 1)).watermark(9)
    h.feed((("a", 1), 11)).watermark(19)
    h.clock.advance(TTL)
    h.feed((("a", 1), 21)).watermark(29)
    assert h.take() == [("a", 0, 1), ("a", 10, 2), ("a", 20, 1)]  # the count expired before the third window

    refused = WindowHarness(lambda s: s.key_by(lambda r: r[0]).window(TumblingEventTimeWindows.of(Time.milliseconds(10)))
                            .process(_window_function(True)), clock_ms=T0)
    with pytest.raises(OperatorError, match="time-to-live is not supported for per-window state"):
        refused.feed((("a", 1), 1)).watermark(9)


class _LastSeen(KeyedProcessFunction):
    """Emits the key's remembered value (TTL state) and then remembers the record's."""

    def open(self, runtime_context: RuntimeContext):
        descriptor = ValueStateDescriptor("last", Types.INT())
        descriptor.enable_time_to_live(StateTtlConfig.new_builder(Time.milliseconds(TTL)).build())
        self.last = runtime_context.get_state(descriptor)

    def process_element(self, value, ctx):
        yield value[0], self.last.value()
        if value[1] is not None:
            self.last.update(value[1])


def test_a_restored_task_expires_state_at_its_original_time() -> None:
    """Through the task's own checkpoint path (OperatorChain.snapshot_keyed_state / restore)."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    collect(env.from_collection([("a", 1)]).key_by(lambda r: r[0]).process(_LastSeen()))
    v = vertex(env, index=1)
    target = v.inputs[0].target_node_id
    clock = ManualClock(T0)
    first = make_chain(v, clock=clock)
    first.chain.open()
    first.chain.process_batch([("a", 1), ("b", 2)], target)
    checkpoint = first.chain.snapshot_keyed_state()

    clock.advance(TTL - 1)  # the failover took almost the whole TTL
    second = make_chain(v, clock=clock)
    second.chain.restore_keyed_state(checkpoint)
    second.chain.open()
    second.chain.process_batch([("a", None)], target)  # reads "a" without writing it
    clock.advance(1)
    second.chain.process_batch([("a", None), ("b", None)], target)
    second.chain.end_input()
    second.chain.close()
    assert second.collected() == [("a", 1), ("a", None), ("b", None)]
