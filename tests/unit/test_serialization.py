"""The record serializer: builtin records on the C pickler, user classes by value, one class per
process, and the same serializer in the task environment, the state backend and the network."""
from __future__ import annotations

import pickle
import sys
import threading
from collections import namedtuple
from dataclasses import dataclass, field
from typing import Any

import pytest

from millstream.datastream.state import ValueStateDescriptor
from millstream.runtime import serialization
from millstream.runtime.keygroups import KeyGroupRange, java_hash_code
from millstream.runtime.serialization import DeserializationError, RecordSerializer, SerializationError, deserialize
from millstream.runtime.state.heap_backend import KeyedStateBackend
from millstream.runtime.task.environment import SimpleTaskEnvironment


def main_class() -> type:
    """A dataclass as a job script defines it, seen from a process where ``__main__`` is not that
    script (a Spark worker; here pytest): the C pickler cannot find it by reference."""

    @dataclass(frozen=True)
    class Order:
        customer: str
        amount: int

    Order.__module__ = "__main__"
    Order.__qualname__ = "Order"
    return Order


def word_count_buffer() -> list[tuple[str, int]]:
    return [(f"word{i % 300}", i) for i in range(1024)]


def test_builtin_records_take_the_c_pickler_unchanged() -> None:
    s = RecordSerializer()
    records = word_count_buffer()
    assert s.serialize(records) == pickle.dumps(records, protocol=5)
    assert s.by_value is False
    assert deserialize(s.serialize(records)) == records


def test_records_in_flight_go_without_the_picklers_memo_and_read_back_equal() -> None:
    """A result partition's serializer (shared=False): no memo, so an object held twice arrives as
    two equal objects, as records pickled one at a time would; the default keeps the sharing."""
    bid = (1041, 1008, 225, "Google", "https://www.nexmark.com/ryoz/_wej/ff_/item.htm?query=1", 1700000000090, "x" * 60)
    records = [bid] * 3 + word_count_buffer()
    unshared, shared = RecordSerializer(shared=False), RecordSerializer()
    data = unshared.serialize(records)
    assert deserialize(data) == records and unshared.by_value is False
    inner = [1, 2]
    (got,) = deserialize(unshared.serialize([(inner, inner)]))
    assert got == ([1, 2], [1, 2]) and got[0] is not got[1]
    (got,) = deserialize(shared.serialize([(inner, inner)]))
    assert got[0] is got[1]


def test_a_cyclic_record_in_flight_goes_with_the_memo() -> None:
    cyclic: list[Any] = [1]
    cyclic.append(cyclic)
    s = RecordSerializer(shared=False)
    (got,) = deserialize(s.serialize([cyclic]))
    assert got[0] == 1 and got[1] is got
    assert s.by_value is False  # not the cloudpickle fallback: the next batches go without the memo again


def test_a_class_not_importable_by_reference_travels_by_value_in_flight_too() -> None:
    Order = main_class()
    s = RecordSerializer(shared=False)
    assert deserialize(s.serialize([Order("a", 1), Order("a", 1)])) == [Order("a", 1)] * 2
    assert s.by_value is True


def test_a_class_not_importable_by_reference_travels_by_value() -> None:
    Order = main_class()
    with pytest.raises(pickle.PicklingError):
        pickle.dumps([Order("a", 1)], protocol=5)  # what every exchange did before
    s = RecordSerializer()
    data = s.serialize([Order("a", 1), Order("b", 2)])
    assert s.by_value is True
    got = deserialize(data)
    assert got == [Order("a", 1), Order("b", 2)]
    assert type(got[0]) is Order  # this process's own class: cloudpickle's tracker id maps back to it


def test_namedtuples_plain_and_local_classes_travel_by_value() -> None:
    Point = namedtuple("Point", "x y")  # defined in a function: not an attribute of its module

    class Plain:
        def __init__(self, v: int) -> None:
            self.v = v

    records = [Point(1, 2), Plain(3)]
    got = deserialize(RecordSerializer().serialize(records))
    assert got[0] == Point(1, 2) and type(got[0]) is Point
    assert type(got[1]) is Plain and got[1].v == 3


def test_the_fallback_is_sticky_per_serializer(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = serialization._dumps

    def counting(obj: Any, protocol: int) -> bytes:
        calls.append(len(obj))
        return real(obj, protocol)

    monkeypatch.setattr(serialization, "_dumps", counting)
    Order = main_class()
    s = RecordSerializer()
    for i in range(5):
        assert deserialize(s.serialize([Order("a", i)] * 3)) == [Order("a", i)] * 3
    assert calls == [3]  # one failed C pickle, then straight to cloudpickle
    assert deserialize(s.serialize([1, 2])) == [1, 2]  # builtins on a by-value writer still work
    other = RecordSerializer()
    other.serialize([1, 2])
    assert other.by_value is False and calls == [3, 2]  # another writer starts on the fast path


def test_a_record_that_cannot_be_serialized_at_all_is_a_clear_error() -> None:
    s = RecordSerializer()
    with pytest.raises(SerializationError, match="cannot serialize the records.*lock") as info:
        s.serialize([1, threading.Lock()])
    assert isinstance(info.value, TypeError)
    assert s.by_value is False


def test_deserialize_reads_bytes_bytearray_and_memoryview() -> None:
    data = RecordSerializer().serialize([("a", 1)])
    assert deserialize(bytearray(data)) == deserialize(memoryview(data)) == [("a", 1)]


def test_the_task_environment_collects_through_the_same_serializer() -> None:
    Order = main_class()
    env = SimpleTaskEnvironment()
    assert type(env.serializer) is RecordSerializer
    env.emit_collect("out", [Order("a", 1)])
    assert env.collected["out"] == [Order("a", 1)] and env.serializer.by_value
    with pytest.raises(SerializationError, match="lock"):
        SimpleTaskEnvironment().emit_collect("out", [threading.Lock()])  # as the real transfer would
    sent: list[tuple[str, bytes]] = []
    wired = SimpleTaskEnvironment(collect_sink=lambda cid, payload: sent.append((cid, payload)))
    wired.emit_collect("out", [("w", 1)])
    assert sent == [("out", pickle.dumps([("w", 1)], protocol=5))]  # the bytes the worker sends


def test_keyed_state_holding_a_user_class_snapshots_and_restores() -> None:
    Order = main_class()
    backend = KeyedStateBackend(128, 1, KeyGroupRange.of(0, 127))
    state = backend.get_value_state(ValueStateDescriptor("largest", None))
    for key in ("a", "b"):
        backend.set_current_key(key)
        state.update(Order(key, len(key)))
    restored = KeyedStateBackend(128, 1, KeyGroupRange.of(0, 127))
    restored.restore(backend.snapshot())
    assert restored.entries("largest") == {"a": Order("a", 1), "b": Order("b", 1)}


def test_dataclass_keys_hash_over_their_compared_fields_in_any_process() -> None:
    @dataclass(frozen=True)
    class Key:
        site: str
        sensor: int
        note: str = field(default="", compare=False)

    assert java_hash_code(Key("x", 3)) == java_hash_code(("x", 3))  # a List of its fields, as Java would
    assert java_hash_code(Key("x", 3, note="ignored")) == java_hash_code(Key("x", 3))
    Sensor = namedtuple("Sensor", "site sensor")
    assert java_hash_code(Sensor("x", 3)) == java_hash_code(("x", 3))

    class Opaque:
        pass

    with pytest.raises(TypeError, match="no stable hash.*dataclasses"):
        java_hash_code(Opaque())


def test_records_whose_class_module_is_missing_here_fail_with_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    module = types.ModuleType("vanishing_helpers")
    exec("class Box:\n    pass\n", module.__dict__)
    module.Box.__module__ = "vanishing_helpers"
    monkeypatch.setitem(sys.modules, "vanishing_helpers", module)
    data = RecordSerializer().serialize([module.Box()])  # by reference: importable where written
    monkeypatch.delitem(sys.modules, "vanishing_helpers")
    with pytest.raises(DeserializationError, match="No module named 'vanishing_helpers'.*add_python_file"):
        deserialize(data)
    with pytest.raises(DeserializationError, match="UnpicklingError"):
        deserialize(b"not a pickle")
