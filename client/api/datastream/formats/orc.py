"""PyFlink's ORC writer (``pyflink.datastream.formats.orc``), on pyarrow.orc.

``OrcBulkWriters.for_row_type(row_type)``: a FileSink bulk writer factory writing Rows of
``Types.ROW_NAMED(...)`` into ORC files, with the column types of the Parquet writer
(``formats.parquet.arrow_type``). A part file's rows are written as one stripe set when the part
file rolls (on each checkpoint, or at the end of the input). ``writer_properties`` and
``hadoop_config`` are accepted and unused.
"""
from __future__ import annotations

from typing import Any, BinaryIO

import pyarrow.orc as orc

from millstream.common.serialization import BulkWriter, BulkWriterFactory
from millstream.common.typeinfo import TypeInformation
from millstream.datastream.formats.parquet import _ParquetWriter, _row_schema

__all__ = ["OrcBulkWriters"]


class _OrcWriter(_ParquetWriter):
    """The Parquet writer's row checks and conversion; ORC has no incremental row groups here, so
    the rows are buffered until ``finish`` (a part file holds one checkpoint interval's rows)."""

    def add_elements(self, elements: list) -> None:
        self._buffer.extend(elements)

    def finish(self) -> None:
        table = self._table(self._buffer)
        self._buffer = []
        writer = orc.ORCWriter(self._stream)
        writer.write(table)
        writer.close()


class _OrcWriterFactory(BulkWriterFactory):
    def __init__(self, row_type: TypeInformation) -> None:
        self.row_type = row_type
        self.schema = _row_schema(row_type, "OrcBulkWriters.for_row_type")

    def create(self, stream: BinaryIO) -> BulkWriter:
        return _OrcWriter(stream, self.schema, False)


class OrcBulkWriters:
    """Bulk writer factories writing Rows into ORC files (``FileSink.for_bulk_format``)."""

    @staticmethod
    def for_row_type(row_type: TypeInformation, writer_properties: Any = None,
                     hadoop_config: Any = None) -> BulkWriterFactory:
        return _OrcWriterFactory(row_type)
