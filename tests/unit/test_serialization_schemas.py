"""PyFlink's ``SimpleStringSchema`` (strings in a charset, UTF-8 by default) and ``ByteArraySchema``
(the bytes themselves), both serialization and deserialization schemas, exported from
``pyflink.common``; undecodable bytes fail naming the charset."""
from __future__ import annotations

import pytest

from millstream.common import (
    ByteArraySchema,
    DeserializationSchema,
    SerializationSchema,
    SimpleStringSchema,
)
from millstream.common.serialization import ByteArraySchema as ModuleByteArraySchema
from millstream.common.serialization import SimpleStringSchema as ModuleSimpleStringSchema


def test_exported_from_common_and_its_serialization_module() -> None:
    assert SimpleStringSchema is ModuleSimpleStringSchema and ByteArraySchema is ModuleByteArraySchema


@pytest.mark.parametrize("schema_class", [SimpleStringSchema, ByteArraySchema])
def test_both_are_serialization_and_deserialization_schemas(schema_class: type) -> None:
    assert issubclass(schema_class, SerializationSchema) and issubclass(schema_class, DeserializationSchema)


def test_simple_string_schema_is_utf8_by_default() -> None:
    schema = SimpleStringSchema()
    assert schema.serialize("naïve €") == "naïve €".encode("utf-8")
    assert schema.deserialize("naïve €".encode("utf-8")) == "naïve €"


def test_simple_string_schema_round_trips_in_its_charset() -> None:
    schema = SimpleStringSchema("ISO-8859-1")
    assert schema.serialize("café") == b"caf\xe9"
    assert schema.deserialize(b"caf\xe9") == "café"
    utf16 = SimpleStringSchema("UTF-16")
    assert utf16.deserialize(utf16.serialize("ab")) == "ab"


def test_undecodable_bytes_fail_naming_the_charset() -> None:
    with pytest.raises(ValueError, match="SimpleStringSchema: the message is not valid UTF-8"):
        SimpleStringSchema().deserialize(b"caf\xe9")


def test_unencodable_text_fails_naming_the_charset() -> None:
    with pytest.raises(ValueError, match="cannot be encoded as US-ASCII"):
        SimpleStringSchema("US-ASCII").serialize("café")


def test_unknown_charset_is_refused_when_the_schema_is_made() -> None:
    with pytest.raises(ValueError, match="unknown charset 'no-such-charset'"):
        SimpleStringSchema("no-such-charset")


def test_simple_string_schema_serializes_only_strings() -> None:
    with pytest.raises(TypeError, match="SimpleStringSchema serializes str records, got int"):
        SimpleStringSchema().serialize(42)


def test_byte_array_schema_passes_bytes_through() -> None:
    schema = ByteArraySchema()
    assert schema.serialize(b"\x00\xffraw") == b"\x00\xffraw"
    assert schema.serialize(bytearray(b"ab")) == b"ab"
    assert schema.deserialize(b"\x00\xffraw") == b"\x00\xffraw"
    assert isinstance(schema.deserialize(bytearray(b"x")), bytes)


def test_byte_array_schema_refuses_non_bytes() -> None:
    with pytest.raises(TypeError, match="ByteArraySchema serializes bytes records, got str"):
        ByteArraySchema().serialize("text")
