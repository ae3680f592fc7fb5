"""The Java serialization of Flink's SerializedThrowable that the REST API sends with a failure.
(Flink's own client reading it back is tested in tests/integration/flink_compat/test_flink_cli.py.)"""
from __future__ import annotations

import base64

from millstream.jobmanager.rest.java_throwable import _modified_utf8, failure_cause, serialized_throwable


def test_modified_utf8_is_javas() -> None:
    assert _modified_utf8("a\x00b") == b"a\xc0\x80b"  # NUL as two bytes
    assert _modified_utf8("é") == "é".encode()
    assert _modified_utf8("\U0001F600") == b"\xed\xa0\xbd\xed\xb8\x80"  # two 3-byte surrogates, not 4 bytes


def test_the_stream_holds_the_strings_with_their_lengths() -> None:
    data = serialized_throwable("CheckpointException", "the job is CANCELED", "CheckpointException: trace")
    assert data.startswith(b"\xac\xed\x00\x05")  # Java's stream magic and version
    for text in (b"the job is CANCELED", b"CheckpointException: trace", b"CheckpointException"):
        assert b"\x74" + len(text).to_bytes(2, "big") + text in data
    # serializedException: a byte[] whose 4-byte length is what follows it, a stream of its own.
    inner_at = data.index(b"\xac\xed\x00\x05", 4)
    assert int.from_bytes(data[inner_at - 4:inner_at], "big") == len(data) - inner_at


def test_a_long_message_is_cut_to_what_a_java_string_holds() -> None:
    data = serialized_throwable("E", "x" * 70_000, "E")
    assert b"\x74\xff\xff" not in data and b"\x74\xff\xfe" in data  # cut to 65534 + one character's room


def test_failure_cause_has_flinks_fields() -> None:
    cause = failure_cause("SavepointException", "boom")
    assert cause["class"] == "SavepointException" and cause["stack-trace"] == "SavepointException: boom"
    assert base64.b64decode(cause["serialized-throwable"]) == serialized_throwable(
        "SavepointException", "boom", "SavepointException: boom")
