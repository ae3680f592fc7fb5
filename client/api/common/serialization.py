"""Encoders for row-format file sinks (``pyflink.common.serialization``)."""
from __future__ import annotations

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
