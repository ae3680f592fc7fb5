"""PyFlink's CSV row formats (millstream.datastream.formats.csv), from Flink's documented behaviour.

Flink's CsvRowSerializationSchema/CsvRowDeserializationSchema (Jackson's CSV underneath): columns
in the row type's order, ``,`` between fields, ``"`` quotes a value that holds the delimiter or a
quote (a quote inside doubled), ``;`` between array elements, no null literal unless set, lines end
with ``\\n``; a line of the wrong length or a column that does not parse fails unless
ignore_parse_errors (then the column is null); ``#`` comments only with allow_comments.
"""
from __future__ import annotations

import datetime as dt
import decimal
import pickle

import pytest

from millstream.common import DeserializationSchema, Row, SerializationSchema, Types
from millstream.datastream.formats.csv import CsvRowDeserializationSchema, CsvRowSerializationSchema

T = Types.ROW_NAMED(["id", "name", "score", "ok"], [Types.INT(), Types.STRING(), Types.DOUBLE(), Types.BOOLEAN()])


def test_the_schemas_are_pyflinks_schema_types() -> None:
    assert isinstance(CsvRowDeserializationSchema.Builder(T).build(), DeserializationSchema)
    assert isinstance(CsvRowSerializationSchema.Builder(T).build(), SerializationSchema)


def test_a_row_is_one_line_and_reads_back_with_field_names() -> None:
    data = CsvRowSerializationSchema.Builder(T).build().serialize(Row(1, "ann", 2.5, True))
    assert data == b"1,ann,2.5,true\n"
    back = CsvRowDeserializationSchema.Builder(T).build().deserialize(data)
    assert back == Row.of_names(["id", "name", "score", "ok"], [1, "ann", 2.5, True])
    assert back.name == "ann"


def test_a_value_holding_the_delimiter_or_a_quote_is_quoted_and_reads_back() -> None:
    ser = CsvRowSerializationSchema.Builder(T).build()
    data = ser.serialize(Row(1, 'Hello "Flink", hi', 0.0, False))
    assert data == b'1,"Hello ""Flink"", hi",0.0,false\n'
    assert CsvRowDeserializationSchema.Builder(T).build().deserialize(data).name == 'Hello "Flink", hi'


def test_field_delimiter_and_quote_character_are_configurable() -> None:
    ser = CsvRowSerializationSchema.Builder(T).set_field_delimiter("|").set_quote_character("'").build()
    data = ser.serialize(Row(1, "a|b", 1.0, True))
    assert data == b"1|'a|b'|1.0|true\n"
    de = CsvRowDeserializationSchema.Builder(T).set_field_delimiter("|").set_quote_character("'").build()
    assert list(de.deserialize(data)) == [1, "a|b", 1.0, True]


def test_the_escape_character_escapes_the_next_character_when_reading() -> None:
    de = CsvRowDeserializationSchema.Builder(T).set_escape_character("\\").build()
    assert de.deserialize(b'1,a\\,b,1.0,true').name == "a,b"
    assert de.deserialize(b'1,"say \\"hi\\"",1.0,true').name == 'say "hi"'


def test_without_quoting_a_delimiter_in_a_value_needs_the_escape_character() -> None:
    t = Types.ROW_NAMED(["a", "b"], [Types.STRING(), Types.STRING()])
    escaped = CsvRowSerializationSchema.Builder(t).disable_quote_character().set_escape_character("\\").build()
    assert escaped.serialize(Row("x,y", "z")) == b"x\\,y,z\n"
    with pytest.raises(ValueError, match="Failed to serialize row"):
        CsvRowSerializationSchema.Builder(t).disable_quote_character().build().serialize(Row("x,y", "z"))


def test_null_is_empty_by_default_and_the_null_literal_when_set() -> None:
    assert CsvRowSerializationSchema.Builder(T).build().serialize(Row(None, None, None, None)) == b",,,\n"
    ser = CsvRowSerializationSchema.Builder(T).set_null_literal("n/a").build()
    assert ser.serialize(Row(None, "x", None, None)) == b"n/a,x,n/a,n/a\n"
    de = CsvRowDeserializationSchema.Builder(T).set_null_literal("n/a").build()
    assert list(de.deserialize(b"n/a,n/a,1.5,n/a")) == [None, None, 1.5, None]


def test_without_a_null_literal_an_empty_string_column_is_empty_and_an_empty_number_fails() -> None:
    de = CsvRowDeserializationSchema.Builder(T).build()
    with pytest.raises(ValueError, match=r"field 'id'.*''.*INT"):
        de.deserialize(b",,1.0,true")
    assert list(de.deserialize(b"1,,1.0,true")) == [1, "", 1.0, True]


def test_a_column_that_does_not_parse_fails_naming_field_and_line() -> None:
    with pytest.raises(ValueError) as caught:
        CsvRowDeserializationSchema.Builder(T).build().deserialize(b"1,a,abc,true")
    text = str(caught.value)
    assert "field 'score'" in text and "'abc'" in text and "DOUBLE" in text and "1,a,abc,true" in text


def test_ignore_parse_errors_makes_a_bad_column_null() -> None:
    de = CsvRowDeserializationSchema.Builder(T).set_ignore_parse_errors(True).build()
    assert list(de.deserialize(b"x,a,abc,true")) == [None, "a", None, True]


def test_a_line_of_the_wrong_length_fails_unless_ignore_parse_errors() -> None:
    with pytest.raises(ValueError, match="4 fields expected but was 2"):
        CsvRowDeserializationSchema.Builder(T).build().deserialize(b"1,a")
    de = CsvRowDeserializationSchema.Builder(T).set_ignore_parse_errors(True).build()
    assert list(de.deserialize(b"1,a")) == [1, "a", None, None]
    assert list(de.deserialize(b"1,a,1.0,true,extra")) == [1, "a", 1.0, True]


@pytest.mark.parametrize("bad", [b'1,"unterminated,1.0,true', b"1,\xff\xfe,1.0,true"])
def test_a_line_that_is_not_csv_fails_or_is_skipped(bad: bytes) -> None:
    with pytest.raises(ValueError, match="Failed to deserialize CSV row"):
        CsvRowDeserializationSchema.Builder(T).build().deserialize(bad)
    assert CsvRowDeserializationSchema.Builder(T).set_ignore_parse_errors(True).build().deserialize(bad) is None


def test_comments_only_with_allow_comments() -> None:
    t = Types.ROW_NAMED(["a"], [Types.STRING()])
    assert CsvRowDeserializationSchema.Builder(t).set_allow_comments(True).build().deserialize(b"# note") is None
    assert list(CsvRowDeserializationSchema.Builder(t).build().deserialize(b"# note")) == ["# note"]


def test_arrays_and_nested_rows_use_the_array_element_delimiter() -> None:
    t = Types.ROW_NAMED(["tags", "nums", "point"], [Types.LIST(Types.STRING()), Types.BASIC_ARRAY(Types.INT()),
                                                     Types.ROW_NAMED(["x", "y"], [Types.INT(), Types.DOUBLE()])])
    row = Row(["a", "b"], [1, None, 3], Row(4, 5.5))
    assert CsvRowSerializationSchema.Builder(t).build().serialize(row) == b"a;b,1;;3,4;5.5\n"
    ser = CsvRowSerializationSchema.Builder(t).set_array_element_delimiter(":").set_null_literal("-").build()
    data = ser.serialize(row)
    assert data == b"a:b,1:-:3,4:5.5\n"
    back = CsvRowDeserializationSchema.Builder(t).set_array_element_delimiter(":").set_null_literal("-").build() \
        .deserialize(data)
    assert back.tags == ["a", "b"] and back.nums == [1, None, 3]
    assert back.point == Row.of_names(["x", "y"], [4, 5.5])


def test_sql_date_time_and_timestamp_as_flink_writes_them() -> None:
    t = Types.ROW_NAMED(["d", "t", "ts", "whole"], [Types.SQL_DATE(), Types.SQL_TIME(), Types.SQL_TIMESTAMP(),
                                                     Types.SQL_TIMESTAMP()])
    row = Row(dt.date(1990, 10, 14), dt.time(12, 12, 43), dt.datetime(1990, 10, 14, 12, 12, 43, 123000),
              dt.datetime(2024, 1, 2, 3, 4, 5))
    data = CsvRowSerializationSchema.Builder(t).build().serialize(row)
    # java.sql.Timestamp's text holds a space, which Jackson's writer quotes by default.
    assert data == b'1990-10-14,12:12:43,"1990-10-14 12:12:43.123","2024-01-02 03:04:05.0"\n'
    assert list(CsvRowDeserializationSchema.Builder(t).build().deserialize(data)) == list(row)


def test_line_delimiter_is_configurable_and_checked() -> None:
    ser = CsvRowSerializationSchema.Builder(T).set_line_delimiter("\r\n").build()
    data = ser.serialize(Row(1, "a", 1.0, True))
    assert data == b"1,a,1.0,true\r\n"
    assert list(CsvRowDeserializationSchema.Builder(T).build().deserialize(data)) == [1, "a", 1.0, True]
    assert CsvRowSerializationSchema.Builder(T).set_line_delimiter("").build().serialize(Row(1, "a", 1.0, True)) \
        == b"1,a,1.0,true"
    with pytest.raises(ValueError, match="line delimiter"):
        CsvRowSerializationSchema.Builder(T).set_line_delimiter(";")


def test_bad_options_and_types_fail_at_the_builder() -> None:
    with pytest.raises(ValueError, match="single character"):
        CsvRowDeserializationSchema.Builder(T).set_field_delimiter("||")
    with pytest.raises(TypeError, match="must not be None"):
        CsvRowSerializationSchema.Builder(None)
    nested = Types.ROW_NAMED(["a"], [Types.LIST(Types.LIST(Types.INT()))])
    with pytest.raises(TypeError, match="nest one level only"):
        CsvRowDeserializationSchema.Builder(nested)


def test_serializing_a_wrong_value_fails_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"field 'ok': 'yes' is not a BOOLEAN value"):
        CsvRowSerializationSchema.Builder(T).build().serialize(Row(1, "a", 1.0, "yes"))


def test_a_built_schema_does_not_change_with_its_builder_and_pickles() -> None:
    builder = CsvRowSerializationSchema.Builder(T)
    schema = builder.build()
    builder.set_field_delimiter(";")
    assert pickle.loads(pickle.dumps(schema)).serialize(Row(1, "a", 1.0, True)) == b"1,a,1.0,true\n"


@pytest.mark.parametrize("field_type, value, text", [
    (Types.STRING(), "123'4*", "'123''4**'"),
    (Types.STRING(), "a;b'c", "'a;b''c'"),
    (Types.INT(), 12, "12"),
    (Types.ROW([Types.STRING(), Types.STRING()]), Row("1", "hello"), "'1:hello'"),
    (Types.ROW([Types.STRING(), Types.STRING()]), Row("1", "hello world"), "'1:hello world'"),
    (Types.STRING(), "null", "null"),
])
def test_pyflinks_own_field_cases(field_type, value, text) -> None:
    """PyFlink's test_csv_row_serialization_schema: escape '*', quote "'", elements ':', fields ';'."""
    t = Types.ROW([Types.STRING(), field_type, Types.STRING()])
    ser = CsvRowSerializationSchema.Builder(t).set_escape_character("*").set_quote_character("'") \
        .set_array_element_delimiter(":").set_field_delimiter(";").build()
    de = CsvRowDeserializationSchema.Builder(t).set_escape_character("*").set_quote_character("'") \
        .set_array_element_delimiter(":").set_field_delimiter(";").build()
    line = f"BEGIN;{text};END\n"
    assert ser.serialize(Row("BEGIN", value, "END")).decode() == line
    back = de.deserialize(line.encode())
    assert back[0] == "BEGIN" and back[2] == "END"
    assert (list(back[1]) if isinstance(value, Row) else back[1]) == (list(value) if isinstance(value, Row) else value)


def test_numbers_are_written_as_java_writes_them() -> None:
    t = Types.ROW_NAMED(["f", "d", "small", "big"], [Types.FLOAT(), Types.DOUBLE(), Types.DOUBLE(), Types.BIG_DEC()])
    data = CsvRowSerializationSchema.Builder(t).build().serialize(Row(3e38, 2e-308, 0.001, decimal.Decimal("1.50")))
    assert data == b"3.0E38,2.0E-308,0.001,1.50\n"
    back = CsvRowDeserializationSchema.Builder(t).build().deserialize(data)
    assert list(back) == [pytest.approx(3e38, rel=1e-7), 2e-308, 0.001, decimal.Decimal("1.50")]


def test_strings_jackson_quotes_by_its_loose_check() -> None:
    t = Types.ROW_NAMED(["s"], [Types.STRING()])
    ser = CsvRowSerializationSchema.Builder(t).build()
    assert ser.serialize(Row("plain-text.ok")) == b"plain-text.ok\n"
    assert ser.serialize(Row("two words")) == b'"two words"\n'
    assert ser.serialize(Row("x" * 25)) == b'"' + b"x" * 25 + b'"\n'  # longer than 24: always quoted
