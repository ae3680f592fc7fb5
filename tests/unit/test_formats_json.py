"""PyFlink's JSON row formats (millstream.datastream.formats.json), from Flink's documented behaviour.

Flink's JsonRowDeserializationSchema: a missing field is null, or fails with fail_on_missing_field;
ignore_parse_errors makes a field that does not convert null and a message that is not JSON null;
the two options exclude each other; numbers may come as JSON strings; SQL dates and times are ISO
text. JsonRowSerializationSchema writes what the deserializer reads back.
"""
from __future__ import annotations

import datetime as dt
import decimal
import json
import pickle

import pytest

from millstream.common import DeserializationSchema, Row, SerializationSchema, Types
from millstream.datastream.formats.json import JsonRowDeserializationSchema, JsonRowSerializationSchema

USER = Types.ROW_NAMED(
    ["id", "name", "score", "active", "tags", "address"],
    [Types.LONG(), Types.STRING(), Types.DOUBLE(), Types.BOOLEAN(), Types.LIST(Types.STRING()),
     Types.ROW_NAMED(["city", "zip"], [Types.STRING(), Types.INT()])],
)


def reader(type_info=USER, **options):
    builder = JsonRowDeserializationSchema.builder().type_info(type_info)
    if options.get("fail_on_missing_field"):
        builder = builder.fail_on_missing_field()
    if options.get("ignore_parse_errors"):
        builder = builder.ignore_parse_errors()
    return builder.build()


def writer(type_info=USER):
    return JsonRowSerializationSchema.builder().with_type_info(type_info).build()


def test_the_schemas_are_pyflinks_schema_types() -> None:
    assert isinstance(reader(), DeserializationSchema)
    assert isinstance(writer(), SerializationSchema)


def test_a_row_round_trips_with_its_field_names() -> None:
    row = Row(7, "ann", 2.5, True, ["a", "b"], Row("Oslo", 150))
    data = writer().serialize(row)
    assert isinstance(data, bytes)
    assert json.loads(data) == {"id": 7, "name": "ann", "score": 2.5, "active": True, "tags": ["a", "b"],
                                "address": {"city": "Oslo", "zip": 150}}
    back = reader().deserialize(data)
    assert back == Row.of_names(USER.field_names, [7, "ann", 2.5, True, ["a", "b"], Row.of_names(["city", "zip"], ["Oslo", 150])])
    assert back.name == "ann" and back.address.city == "Oslo" and back.as_dict()["id"] == 7


def test_properties_the_type_does_not_name_are_ignored_and_order_is_the_types() -> None:
    back = reader().deserialize(b'{"name": "bo", "extra": [1, 2], "id": 3}')
    assert list(back.as_dict()) == ["id", "name", "score", "active", "tags", "address"]
    assert back.id == 3 and back.name == "bo"


def test_a_missing_field_is_null_by_default() -> None:
    back = reader().deserialize(b'{"id": 1}')
    assert back.as_dict() == {"id": 1, "name": None, "score": None, "active": None, "tags": None, "address": None}


def test_a_missing_field_fails_with_fail_on_missing_field() -> None:
    with pytest.raises(ValueError, match=r"Could not find field with name 'name'"):
        reader(fail_on_missing_field=True).deserialize(b'{"id": 1, "score": 1.0, "active": true}')


def test_a_missing_nested_field_fails_naming_it() -> None:
    schema = reader(Types.ROW_NAMED(["a"], [Types.ROW_NAMED(["b"], [Types.INT()])]), fail_on_missing_field=True)
    with pytest.raises(ValueError, match=r"'b' in 'a'"):
        schema.deserialize(b'{"a": {}}')


def test_fail_on_missing_field_and_ignore_parse_errors_exclude_each_other() -> None:
    with pytest.raises(ValueError, match="fail_on_missing_field and ignore_parse_errors"):
        reader(fail_on_missing_field=True, ignore_parse_errors=True)


def test_a_field_that_does_not_parse_fails_naming_field_and_message() -> None:
    with pytest.raises(ValueError) as caught:
        reader().deserialize(b'{"id": "twelve"}')
    text = str(caught.value)
    assert "field 'id'" in text and "'twelve'" in text and "LONG" in text and '{"id": "twelve"}' in text


def test_ignore_parse_errors_makes_a_bad_field_null_and_keeps_the_others() -> None:
    back = reader(ignore_parse_errors=True).deserialize(b'{"id": "twelve", "name": "x", "address": {"zip": "z"}}')
    assert (back.id, back.name, back.address.city, back.address.zip) == (None, "x", None, None)


@pytest.mark.parametrize("message", [b"{not json", b"[1, 2]", b"42", b""])
def test_a_message_that_is_not_a_json_object_fails_or_is_skipped(message: bytes) -> None:
    with pytest.raises(ValueError, match="Failed to deserialize JSON"):
        reader().deserialize(message)
    assert reader(ignore_parse_errors=True).deserialize(message) is None


def test_numbers_and_booleans_given_as_json_strings_parse() -> None:
    t = Types.ROW_NAMED(["i", "d", "b", "f"], [Types.INT(), Types.DOUBLE(), Types.BOOLEAN(), Types.BOOLEAN()])
    # Java's Boolean.parseBoolean, as Flink: "true" in any case is true, any other text false.
    assert list(reader(t).deserialize(b'{"i": " 42 ", "d": "1.5", "b": "TRUE", "f": "no"}')) == [42, 1.5, True, False]


def test_an_int_out_of_javas_range_fails() -> None:
    t = Types.ROW_NAMED(["i"], [Types.INT()])
    with pytest.raises(ValueError, match="out of range for INT"):
        reader(t).deserialize(b'{"i": 2147483648}')
    assert list(reader(Types.ROW_NAMED(["i"], [Types.LONG()])).deserialize(b'{"i": 2147483648}')) == [2147483648]


def test_a_string_field_given_an_object_receives_its_json_text() -> None:
    t = Types.ROW_NAMED(["s", "n"], [Types.STRING(), Types.STRING()])
    assert list(reader(t).deserialize(b'{"s": {"k": [1, 2]}, "n": 5}')) == ['{"k":[1,2]}', "5"]


def test_json_null_is_null_for_every_type() -> None:
    assert list(reader().deserialize(
        b'{"id": null, "name": null, "score": null, "active": null, "tags": null, "address": null}'
    )) == [None] * 6
    assert json.loads(writer().serialize(Row(None, None, None, None, None, None))) == dict.fromkeys(
        ["id", "name", "score", "active", "tags", "address"])


def test_sql_date_time_and_timestamp_are_iso_text_both_ways() -> None:
    t = Types.ROW_NAMED(["d", "t", "ts", "whole"], [Types.SQL_DATE(), Types.SQL_TIME(), Types.SQL_TIMESTAMP(),
                                                     Types.SQL_TIMESTAMP()])
    row = Row(dt.date(1990, 10, 14), dt.time(12, 12, 43), dt.datetime(1990, 10, 14, 12, 12, 43, 123000),
              dt.datetime(2024, 1, 2, 3, 4, 5))
    data = writer(t).serialize(row)
    assert json.loads(data) == {"d": "1990-10-14", "t": "12:12:43", "ts": "1990-10-14T12:12:43.123",
                                "whole": "2024-01-02T03:04:05"}
    assert list(reader(t).deserialize(data)) == list(row)


def test_a_utc_timestamp_reads_and_another_zone_fails() -> None:
    t = Types.ROW_NAMED(["ts"], [Types.SQL_TIMESTAMP()])
    assert list(reader(t).deserialize(b'{"ts": "1990-10-14T12:12:43.123Z"}')) == [dt.datetime(1990, 10, 14, 12, 12, 43, 123000)]
    with pytest.raises(ValueError, match="only UTC"):
        reader(t).deserialize(b'{"ts": "1990-10-14T12:12:43+02:00"}')
    with pytest.raises(ValueError, match=r"field 'ts'.*'1990/10/14'"):
        reader(t).deserialize(b'{"ts": "1990/10/14"}')


def test_decimals_maps_and_byte_arrays() -> None:
    t = Types.ROW_NAMED(["dec", "m", "raw", "ints"], [Types.BIG_DEC(), Types.MAP(Types.STRING(), Types.INT()),
                                                       Types.PRIMITIVE_ARRAY(Types.BYTE()),
                                                       Types.BASIC_ARRAY(Types.INT())])
    row = Row(decimal.Decimal("12345678901234567890.123456789"), {"a": 1, "b": None}, b"\x00\xffab", [1, None, 3])
    data = writer(t).serialize(row)
    assert b"12345678901234567890.123456789" in data  # a number, every digit kept
    assert list(reader(t).deserialize(data)) == list(row)


def test_serializing_a_wrong_value_fails_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"field 'address.zip': 'x' is not an integer"):
        writer().serialize(Row(1, "a", 1.0, True, [], Row("c", "x")))
    with pytest.raises(ValueError, match="2 fields does not match the 6 fields"):
        writer().serialize(Row(1, "a"))


def test_build_needs_a_row_type() -> None:
    with pytest.raises(TypeError, match="type_info"):
        JsonRowDeserializationSchema.builder().build()
    with pytest.raises(TypeError, match="Typeinfo should be set"):
        JsonRowSerializationSchema.builder().build()
    with pytest.raises(TypeError, match="Types.ROW_NAMED"):
        JsonRowDeserializationSchema.builder().type_info(Types.STRING()).build()


def test_schemas_pickle_as_tasks_receive_them() -> None:
    schema = pickle.loads(pickle.dumps(reader(fail_on_missing_field=True)))
    with pytest.raises(ValueError, match="Could not find field"):
        schema.deserialize(b"{}")
    assert pickle.loads(pickle.dumps(writer())).serialize(Row(1, None, None, None, None, None)).startswith(b'{"id":1,')


def test_pyflinks_own_round_trip_case() -> None:
    """PyFlink's test_json: missing fields come back as null, output is compact, fields in type order."""
    t = Types.ROW_NAMED(["svt", "ops", "ids"],
                        [Types.STRING(), Types.ROW_NAMED(["id"], [Types.STRING()]), Types.PRIMITIVE_ARRAY(Types.INT())])
    cases = {
        '{"svt":"2020-02-24T12:58:09.209+0800"}': '{"svt":"2020-02-24T12:58:09.209+0800","ops":null,"ids":null}',
        '{"svt":"2020-02-24T12:58:09.209+0800", "ops":{"id":"281708d0"},"ids":[1, 2, 3]}':
            '{"svt":"2020-02-24T12:58:09.209+0800","ops":{"id":"281708d0"},"ids":[1,2,3]}',
    }
    for given, expected in cases.items():
        assert writer(t).serialize(reader(t).deserialize(given.encode())).decode() == expected


def test_floating_point_numbers_are_written_as_java_writes_them() -> None:
    t = Types.ROW_NAMED(["f", "d", "n"], [Types.FLOAT(), Types.DOUBLE(), Types.DOUBLE()])
    data = writer(t).serialize(Row(0.1, 3e38, float("nan")))
    assert data == b'{"f":0.1,"d":3.0E38,"n":"NaN"}'
    back = reader(t).deserialize(data)
    assert back.d == 3e38 and back.n != back.n
