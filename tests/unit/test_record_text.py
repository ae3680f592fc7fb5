"""Typed records print as PyFlink prints them (Java's toString); untyped ones as Python's str."""
from __future__ import annotations

import pytest

from millstream.common import Row, RowKind, Types
from millstream.runtime.operators.record_text import java_double, record_formatter


def test_a_declared_tuple_prints_like_flinks_tuple() -> None:
    text = record_formatter(Types.TUPLE([Types.STRING(), Types.INT()]))
    assert text(("a", 5)) == "(a,5)"


def test_a_row_prints_its_kind_and_fields() -> None:
    text = record_formatter(Types.ROW_NAMED(["id", "info"], [Types.INT(), Types.STRING()]))
    assert text(Row.of_names(["id", "info"], [1, "x y"])) == "+I[1, x y]"
    deleted = Row(1, "x")
    deleted.set_row_kind(RowKind.DELETE)
    assert record_formatter(Types.ROW([Types.INT(), Types.STRING()]))(deleted) == "-D[1, x]"


def test_untyped_records_print_their_python_str() -> None:
    assert record_formatter(None)(("a", 5)) == "('a', 5)"
    assert record_formatter(Types.PICKLED_BYTE_ARRAY())(("a", 5)) == "('a', 5)"
    assert record_formatter(None)(Row(a=1)) == "Row(a=1)"


@pytest.mark.parametrize(
    ("type_info", "value", "text"),
    [
        (Types.BOOLEAN(), True, "true"),
        (Types.STRING(), None, "null"),
        (Types.STRING(), "plain", "plain"),
        (Types.LONG(), 12345678901, "12345678901"),
        (Types.DOUBLE(), 1.0, "1.0"),
        (Types.DOUBLE(), 0.001, "0.001"),
        (Types.DOUBLE(), 1e7, "1.0E7"),
        (Types.DOUBLE(), 12345678.9, "1.23456789E7"),
        (Types.DOUBLE(), 1.5e-5, "1.5E-5"),
        (Types.DOUBLE(), -2.5e20, "-2.5E20"),
        (Types.DOUBLE(), float("inf"), "Infinity"),
        (Types.DOUBLE(), float("nan"), "NaN"),
        (Types.LIST(Types.INT()), [1, 2], "[1, 2]"),
        (Types.MAP(Types.STRING(), Types.BOOLEAN()), {"a": False}, "{a=false}"),
        (Types.TUPLE([Types.STRING(), Types.ROW([Types.INT(), Types.DOUBLE()])]), ("k", Row(1, 2.0)), "(k,+I[1, 2.0])"),
    ],
)
def test_java_text_of_typed_values(type_info, value, text) -> None:
    assert record_formatter(type_info)(value) == text


def test_a_record_that_does_not_match_its_declared_shape_still_prints() -> None:
    assert record_formatter(Types.TUPLE([Types.STRING(), Types.INT()]))("lonely") == "lonely"


def test_java_double_plain_range() -> None:
    assert java_double(9999999.0) == "9999999.0"
    assert java_double(0.0) == "0.0"
    assert java_double(-0.5) == "-0.5"


def test_sql_time_and_timestamp_print_as_javas_sql_types() -> None:
    # java.sql.Time shows whole seconds; java.sql.Timestamp its fraction without trailing zeros
    import datetime

    row = Types.ROW([Types.SQL_DATE(), Types.SQL_TIME(), Types.SQL_TIMESTAMP()])
    value = (datetime.date(2021, 1, 9), datetime.time(12, 0, 0, 123000), datetime.datetime(2021, 1, 9, 12, 0, 0, 11000))
    assert record_formatter(row)(value) == "+I[2021-01-09, 12:00:00, 2021-01-09 12:00:00.011]"
    assert record_formatter(Types.SQL_TIMESTAMP())(datetime.datetime(2020, 4, 15, 8, 2, 6)) == "2020-04-15 08:02:06.0"
    assert record_formatter(Types.SQL_TIMESTAMP())(datetime.datetime(2020, 4, 15, 8, 2, 6, 235000)) == "2020-04-15 08:02:06.235"
    assert record_formatter(Types.SQL_TIME())(None) == "null"


def test_a_byte_array_field_prints_its_signed_bytes() -> None:
    row = Types.ROW([Types.PICKLED_BYTE_ARRAY(), Types.STRING()])
    assert record_formatter(row)((bytearray(b"flink"), "x")) == "+I[[102, 108, 105, 110, 107], x]"
    assert record_formatter(Types.ROW([Types.PRIMITIVE_ARRAY(Types.BYTE())]))((b"\xff\x01",)) == "+I[[-1, 1]]"


def _as_float32(value: float) -> float:
    """What PyFlink hands Python for a ``Types.FLOAT`` value: the 32-bit float widened to a double."""
    import struct

    return struct.unpack("f", struct.pack("f", value))[0]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.1, "1.1"),  # widened it is 1.100000023841858; Java's Float.toString prints 1.1
        (0.1, "0.1"),
        (3.14159, "3.14159"),
        (-2.5, "-2.5"),
        (1.0, "1.0"),
        (16777216.0, "1.6777216E7"),
        (1e-5, "1.0E-5"),
        (3.4028235e38, "3.4028235E38"),
        (0.001, "0.001"),
        (0.0, "0.0"),
    ],
)
def test_a_float_typed_value_prints_as_javas_float(value, text) -> None:
    assert record_formatter(Types.FLOAT())(_as_float32(value)) == text


def test_floats_inside_rows_and_tuples_print_as_javas_float() -> None:
    row = record_formatter(Types.ROW([Types.FLOAT(), Types.DOUBLE()]))
    assert row(Row(_as_float32(1.1), 1.1)) == "+I[1.1, 1.1]"
    pair = record_formatter(Types.TUPLE([Types.STRING(), Types.FLOAT()]))
    assert pair(("a", _as_float32(2.2))) == "(a,2.2)"


def test_a_double_typed_value_keeps_every_digit_of_the_double() -> None:
    # a double is not narrowed: its text is the shortest decimal of the 64-bit value
    assert record_formatter(Types.DOUBLE())(_as_float32(1.1)) == "1.100000023841858"
