"""PyFlink's ORC formats (``pyflink.datastream.formats.orc``), on pyarrow.orc.

``OrcColumnarRowInputFormat(row_type)``: a FileSource bulk format reading the row type's columns
(by name) of ORC files as Rows (Flink's OrcColumnarRowInputFormat in flink-orc; PyFlink has no
Python class for it, so the constructor follows ``ParquetColumnarRowInputFormat``'s). An ORC file
is splittable by stripes: each stripe is a split, read by one subtask, ``batch_size`` rows decoded
at a time. A column missing from a file, or of a type that cannot be cast to the row type's,
fails the job naming the file and the column.

``OrcBulkWriters.for_row_type(row_type)``: a FileSink bulk writer factory writing Rows of
``Types.ROW_NAMED(...)`` into ORC files, with the column types of the Parquet writer
(``formats.parquet.arrow_type``). A part file's rows are written as one stripe set when the part
file rolls (on each checkpoint, or at the end of the input). ``writer_properties`` and
``hadoop_config`` are accepted and unused.
"""
from __future__ import annotations

from typing import Any, BinaryIO, Iterator

import pyarrow as pa
import pyarrow.orc as orc

from millstream.common.serialization import BulkWriter, BulkWriterFactory
from millstream.common.typeinfo import TypeInformation
from millstream.datastream.connectors.file_system import BulkFormat
from millstream.datastream.formats.parquet import _needs_conversion, _ParquetWriter, _row_schema, _rows

__all__ = ["OrcBulkWriters", "OrcColumnarRowInputFormat"]


def _open(path: str) -> orc.ORCFile:
    try:
        return orc.ORCFile(path)
    except (pa.ArrowInvalid, OSError) as e:
        raise ValueError(f"not an ORC file: {e}") from None


class OrcColumnarRowInputFormat(BulkFormat):
    """Reads the columns of ``row_type`` (by name) from ORC files into Rows of that type; see the
    module docstring. ``hadoop_config`` is accepted and unused (files are local)."""

    def __init__(self, row_type: TypeInformation, hadoop_config: Any = None, batch_size: int = 2048,
                 is_case_sensitive: bool = True) -> None:
        self.schema = _row_schema(row_type, "OrcColumnarRowInputFormat")
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"batch_size must be a positive number, got {batch_size!r}")
        self.row_type = row_type
        self.batch_size = batch_size
        self.is_case_sensitive = is_case_sensitive

    def get_produced_type(self) -> TypeInformation:
        return self.row_type

    def _columns(self, f: orc.ORCFile) -> list[str]:
        present = f.schema.names
        if self.is_case_sensitive:
            found = [n if n in present else None for n in self.schema.names]
        else:
            lower = {n.lower(): n for n in present}
            found = [lower.get(n.lower()) for n in self.schema.names]
        missing = [w for w, c in zip(self.schema.names, found) if c is None]
        if missing:
            raise ValueError(f"the file has no column {missing[0]!r} (its columns: {present})")
        return [c for c in found if c is not None]

    def _splits(self, path: str) -> list[tuple[int, int]]:
        """One split per stripe, ``(first, end)`` (Flink splits ORC files at stripe boundaries)."""
        return [(i, i + 1) for i in range(_open(path).nstripes)]

    def _read_file(self, path: str, batch_size: int, part: tuple[int, int] | None = None) -> Iterator[list[Any]]:
        f = _open(path)
        columns = self._columns(f)
        nested = [_needs_conversion(t) for t in self.schema.types]
        for stripe in range(f.nstripes) if part is None else range(*part):
            data = f.read_stripe(stripe, columns=columns)
            for offset in range(0, data.num_rows, self.batch_size):
                batch = data.slice(offset, self.batch_size)
                # by name: ORC hands the selected columns in the file's order, not the row type's
                yield _rows(self.schema, (batch.column(c) for c in columns), nested)

    def __repr__(self) -> str:
        return f"OrcColumnarRowInputFormat({self.row_type})"


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
