"""Encoders for row-format file sinks (``pyflink.common.serialization``)."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass


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
