"""Encoders for row-format file sinks and the schemas connectors use (``pyflink.common.serialization``)."""
from __future__ import annotations

import codecs
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import BinaryIO

from millstream.common.row import Row


@dataclass(frozen=True)
class Encoder:
    """Turns a record into one line of a part file."""

    charset: str = "utf-8"

    @staticmethod
    def simple_string_encoder(charset_name: str = "UTF-8") -> "Encoder":
        return Encoder(charset_name.lower())

    def encode(self, record: object) -> bytes:
        return (str(record) + "\n").encode(self.charset)


class SerializationSchema(ABC):
    """Turns a record into the bytes a connector writes (PyFlink's ``SerializationSchema``).

    Millstream's schemas are Python values: a sink calls ``serialize`` in the task.
    """

    @abstractmethod
    def serialize(self, element: object) -> bytes:
        """The record's bytes."""


class DeserializationSchema(ABC):
    """Turns the bytes a connector reads into a record (PyFlink's ``DeserializationSchema``).

    A source calls ``deserialize`` in the task; None means the message yields no record.
    """

    @abstractmethod
    def deserialize(self, message: bytes) -> object:
        """The message's record, or None to skip it."""


class SimpleStringSchema(SerializationSchema, DeserializationSchema):
    """Strings as bytes in one charset, both ways (PyFlink's ``SimpleStringSchema``, UTF-8 by default)."""

    def __init__(self, charset: str = "UTF-8") -> None:
        try:
            # Checked here, not at the first record: a misspelt charset fails where the job is built.
            codecs.lookup(charset)
        except LookupError:
            raise ValueError(f"SimpleStringSchema: unknown charset {charset!r}") from None
        self.charset = charset

    def serialize(self, element: object) -> bytes:
        if not isinstance(element, str):
            raise TypeError(f"SimpleStringSchema serializes str records, got {type(element).__name__}")
        try:
            return element.encode(self.charset)
        except UnicodeEncodeError as e:
            raise ValueError(f"SimpleStringSchema: the record cannot be encoded as {self.charset}: {e}") from None

    def deserialize(self, message: bytes) -> str:
        try:
            return bytes(message).decode(self.charset)
        except UnicodeDecodeError as e:
            raise ValueError(f"SimpleStringSchema: the message is not valid {self.charset}: {e}") from None

    def __repr__(self) -> str:
        return f"SimpleStringSchema(charset={self.charset!r})"


class ByteArraySchema(SerializationSchema, DeserializationSchema):
    """Records that are the message's bytes themselves (PyFlink's ``ByteArraySchema``)."""

    def serialize(self, element: object) -> bytes:
        if not isinstance(element, (bytes, bytearray, memoryview)):
            raise TypeError(f"ByteArraySchema serializes bytes records, got {type(element).__name__}")
        return bytes(element)

    def deserialize(self, message: bytes) -> bytes:
        return bytes(message)

    def __repr__(self) -> str:
        return "ByteArraySchema()"


class RowFieldExtractorSchema(SerializationSchema):
    """One field of a Row, which must already be bytes, as the serialized form (PyFlink 2.3's
    ``RowFieldExtractorSchema``): typically field 0 as a Kafka record's key and field 1 as its
    value, the conversion to bytes done by the user beforehand. A None record or a None field
    serializes to empty bytes, as Flink's."""

    def __init__(self, field_index: int) -> None:
        if isinstance(field_index, bool) or not isinstance(field_index, int):
            raise TypeError(f"RowFieldExtractorSchema: the field index must be an int, got {type(field_index).__name__}")
        if field_index < 0:
            raise ValueError(f"Field index must be non-negative, got: {field_index}")
        self.field_index = field_index

    def get_field_index(self) -> int:
        return self.field_index

    def serialize(self, element: object) -> bytes:
        if element is None:
            return b""
        if not isinstance(element, Row):
            raise TypeError(f"RowFieldExtractorSchema serializes Row records, got {type(element).__name__}")
        if self.field_index >= len(element):
            raise ValueError(f"Cannot access field {self.field_index} in Row with arity {len(element)}")
        field = element[self.field_index]
        if field is None:
            return b""
        if not isinstance(field, (bytes, bytearray)):
            raise TypeError(f"Field at index {self.field_index} must be of type bytes, but was {type(field).__name__}")
        return bytes(field)

    def __eq__(self, other: object) -> bool:
        return type(other) is RowFieldExtractorSchema and other.field_index == self.field_index

    def __hash__(self) -> int:
        return self.field_index

    def __repr__(self) -> str:
        return f"RowFieldExtractorSchema({self.field_index})"


class BulkWriter(ABC):
    """Writes a batch of records at a time into one part file's stream (Flink's BulkWriter).

    A FileSink with a bulk format makes one writer per part file; ``finish`` writes what the format
    buffers and its footer, and the part file is complete after it (the sink closes the stream).
    """

    @abstractmethod
    def add_elements(self, elements: list) -> None:
        """Encodes ``elements`` (a batch, in order) into the stream, or buffers them."""

    @abstractmethod
    def finish(self) -> None:
        """Writes everything buffered and the file's trailer; no element is added after it."""


class BulkWriterFactory(ABC):
    """Makes the BulkWriter of a new part file (PyFlink's ``BulkWriterFactory``), for
    ``FileSink.for_bulk_format``. A picklable value: the sink's tasks call ``create``."""

    @abstractmethod
    def create(self, stream: BinaryIO) -> BulkWriter:
        """A writer over ``stream``, a binary file opened for writing at its start."""
