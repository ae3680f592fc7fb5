"""A failure as Flink's REST clients read it: the Java serialization of a SerializedThrowable (pure).

Flink's REST API carries the cause of a failed asynchronous operation (a savepoint, a checkpoint by
hand, a savepoint disposal) as ``{"class", "stack-trace", "serialized-throwable"}``, and Flink's
Java client reads only the last: the Java-serialized bytes (base64 in JSON) of an
``org.apache.flink.util.SerializedThrowable``. Without them its CLI cannot parse the answer and
retries until it times out. This writes those bytes for a class name, a message and a stack trace:
the object stream of a SerializedThrowable (no stack frames, no cause, no suppressed exceptions)
whose ``serializedException`` is a plain ``java.lang.Exception`` with the same text. The fixed
parts are the stream's class descriptors (field layouts and serialVersionUIDs of Throwable,
Exception and SerializedThrowable, as a JVM writes them); only the strings vary.
"""
from __future__ import annotations

import base64

__all__ = ["serialized_throwable", "failure_cause"]

_MAX_STRING_BYTES = 0xFFFF  # TC_STRING's length is two bytes: longer text is cut

# SerializedThrowable's descriptor, then Exception's and Throwable's; Throwable's fields follow:
# cause null, then detailMessage (the string written after this).
_OUTER_PREFIX = bytes.fromhex(
    "aced0005737200296f72672e6170616368652e666c696e6b2e7574696c2e53657269616c697a65645468726f7761626c65"
    "65169df51fa713f30200034c001966756c6c537472696e676966696564537461636b54726163657400124c6a6176612f6c"
    "616e672f537472696e673b4c00166f726967696e616c4572726f72436c6173734e616d6571007e00015b00137365726961"
    "6c697a6564457863657074696f6e7400025b42787200136a6176612e6c616e672e457863657074696f6ed0fd1f3e1a3b1c"
    "c4020000787200136a6176612e6c616e672e5468726f7761626c65d5c635273977b8cb0300044c00056361757365740015"
    "4c6a6176612f6c616e672f5468726f7761626c653b4c000d64657461696c4d65737361676571007e00015b000a73746163"
    "6b547261636574001e5b4c6a6176612f6c616e672f537461636b5472616365456c656d656e743b4c001473757070726573"
    "736564457863657074696f6e737400104c6a6176612f7574696c2f4c6973743b787070")
# After detailMessage: an empty StackTraceElement[] and Collections.EMPTY_LIST (no suppressed
# exceptions), the end of Throwable's writeObject; SerializedThrowable's own fields follow
# (fullStringifiedStackTrace, originalErrorClassName: the two strings written after this).
_OUTER_MIDDLE = bytes.fromhex(
    "7572001e5b4c6a6176612e6c616e672e537461636b5472616365456c656d656e743b02462a3c3cfd223902000078700000"
    "00007372001f6a6176612e7574696c2e436f6c6c656374696f6e7324456d7074794c6973747ab817b43ca79ede02000078"
    "7078")
# serializedException: a byte[] (its descriptor; the 4-byte length and the bytes follow).
_BYTE_ARRAY = bytes.fromhex("757200025b42acf317f8060854e00200007870")
# The nested stream: a java.lang.Exception whose cause is itself (Throwable's "no cause"), its
# detailMessage (the string written between these), no stack frames, no suppressed exceptions.
_INNER_PREFIX = bytes.fromhex(
    "aced0005737200136a6176612e6c616e672e457863657074696f6ed0fd1f3e1a3b1cc4020000787200136a6176612e6c61"
    "6e672e5468726f7761626c65d5c635273977b8cb0300044c000563617573657400154c6a6176612f6c616e672f5468726f"
    "7761626c653b4c000d64657461696c4d6573736167657400124c6a6176612f6c616e672f537472696e673b5b000a737461"
    "636b547261636574001e5b4c6a6176612f6c616e672f537461636b5472616365456c656d656e743b4c00147375707072"
    "6573736564457863657074696f6e737400104c6a6176612f7574696c2f4c6973743b787071007e0006")
_INNER_SUFFIX = _OUTER_MIDDLE


def _modified_utf8(text: str) -> bytes:
    """Java's modified UTF-8 (DataOutput.writeUTF): NUL as two bytes, characters beyond the BMP as
    their two UTF-16 surrogates, three bytes each."""
    out = bytearray()
    units = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(units), 2):
        c = (units[i] << 8) | units[i + 1]
        if 0 < c < 0x80:
            out.append(c)
        elif c < 0x800:
            out += bytes((0xC0 | (c >> 6), 0x80 | (c & 0x3F)))
        else:
            out += bytes((0xE0 | (c >> 12), 0x80 | ((c >> 6) & 0x3F), 0x80 | (c & 0x3F)))
    return bytes(out)


def _string(text: str) -> bytes:
    """TC_STRING: the tag, a two-byte length, the modified UTF-8 (cut to fit, on a character)."""
    data = _modified_utf8(text)
    while len(data) > _MAX_STRING_BYTES:
        text = text[: len(text) * _MAX_STRING_BYTES // len(data) - 1]
        data = _modified_utf8(text)
    return b"\x74" + len(data).to_bytes(2, "big") + data


def serialized_throwable(class_name: str, message: str, stack_trace: str) -> bytes:
    """The Java serialization of a SerializedThrowable of ``class_name`` (its
    ``originalErrorClassName``) with ``message``; ``stack_trace`` is what it prints."""
    inner = _INNER_PREFIX + _string(message) + _INNER_SUFFIX
    return (_OUTER_PREFIX + _string(message) + _OUTER_MIDDLE + _string(stack_trace) + _string(class_name)
            + _BYTE_ARRAY + len(inner).to_bytes(4, "big") + inner)


def failure_cause(class_name: str, message: str) -> dict[str, str]:
    """Flink's JSON of a SerializedThrowable: ``class``, ``stack-trace``, ``serialized-throwable``."""
    stack_trace = f"{class_name}: {message}"
    return {"class": class_name, "stack-trace": stack_trace,
            "serialized-throwable": base64.b64encode(serialized_throwable(class_name, message, stack_trace)).decode()}
