"""``Row`` behaves as ``pyflink.common.Row`` (its documented examples and equality rules)."""
from __future__ import annotations

import pickle

import cloudpickle
import pytest

from millstream.common import Row, RowKind


def test_named_row_sorts_fields_by_name_and_reads_them_every_way() -> None:
    row = Row(name="Alice", age=11)
    assert repr(row) == "Row(age=11, name='Alice')"
    assert (row["name"], row["age"]) == ("Alice", 11)
    assert (row.name, row.age) == ("Alice", 11)
    assert row[0] == 11 and list(row) == [11, "Alice"] and len(row) == 2
    assert row.as_dict() == {"name": "Alice", "age": 11}


def test_in_searches_the_values() -> None:
    assert "Alice" in Row(name="Alice", age=11)
    assert "name" not in Row(name="Alice", age=11)


def test_row_class_builds_named_rows() -> None:
    person = Row("name", "age")
    assert repr(person) == "<Row('name', 'age')>"
    assert person("Alice", 11) == Row.of_names(["name", "age"], ["Alice", 11])
    assert person("Alice", 11).name == "Alice"
    with pytest.raises(ValueError):
        person("Alice", 11, "extra")


def test_as_dict_recursive_converts_nested_rows_lists_and_dicts() -> None:
    row = Row(key=1, value=Row(name="a", age=2), items=[Row(x=1)], m={"k": Row(y=2)})
    assert row.as_dict()["value"] == Row(age=2, name="a")
    assert row.as_dict(True) == {"key": 1, "value": {"name": "a", "age": 2}, "items": [{"x": 1}], "m": {"k": {"y": 2}}}
    with pytest.raises(TypeError):
        Row(1, 2).as_dict()


def test_equality_needs_same_kind_values_and_names() -> None:
    assert Row(1, "a") == Row(1, "a")
    assert Row(1, "a") != Row(1, "b")
    assert Row.of_names(["id", "s"], [1, "a"]) != Row(1, "a")  # named vs unnamed
    assert Row.of_names(["id", "s"], [1, "a"]) != Row.of_names(["x", "s"], [1, "a"])
    deleted = Row(1, "a")
    deleted.set_row_kind(RowKind.DELETE)
    assert deleted != Row(1, "a") and deleted.get_row_kind() is RowKind.DELETE
    assert hash(Row(1, "a")) == hash((1, "a"))
    assert not Row(1) == (1,)


def test_unknown_field_errors() -> None:
    row = Row(a=1)
    with pytest.raises(AttributeError):
        row.b
    with pytest.raises(KeyError):
        row["b"]


def test_setting_fields_by_name_and_position() -> None:
    row = Row(a=1, b=2)
    row["a"] = 10
    row[1] = 20
    assert row == Row(a=10, b=20)


@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps])
def test_pickling_keeps_names_and_kind(dumps) -> None:
    row = Row.of_names(["id", "info"], [1, "x"])
    row.set_row_kind(RowKind.UPDATE_AFTER)
    back = pickle.loads(dumps(row))
    assert back == row and back.info == "x" and back.get_row_kind() is RowKind.UPDATE_AFTER


def test_short_strings_are_flinks() -> None:
    assert [k.short_string() for k in RowKind] == ["+I", "-U", "+U", "-D"]
