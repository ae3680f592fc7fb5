"""The ``filesystem`` table connector's source for partitioned tables and the ``avro`` format.

A table ``PARTITIONED BY (dt, hr)`` over ``path`` reads the files of every partition directory
``path/dt=<v>/hr=<v>/`` (Flink's Hive-style layout, as the sink writes it): the partitions are
listed when the job is built, as Flink's FileSystemTableSource lists them, and each row gets its
partition columns from its directory's names, unescaped and typed per the schema
(``partition.default-name``, default ``__DEFAULT_PARTITION__``, is NULL). Names starting with
``.`` or ``_`` (in-progress part files, ``_SUCCESS``) are not read.

*Partition pruning*: the planner hands the source the conjuncts of a WHERE that use only partition
columns (``partition_filter``); a partition whose values do not satisfy them is not listed, so
its files are never opened (Flink's PushPartitionIntoTableSourceScanRule). The filter stays in the
Calc above the scan too, so rows are exactly those of the unpruned plan.

The files themselves are read whole (one subtask each) by the FileSource with a stream format of
the table's format (``csv``, ``json`` a line a row, ``avro`` object container files).
"""
from __future__ import annotations

import datetime
import os
import re
import urllib.parse
from typing import Any, Iterator, Sequence

from millstream.common.row import Row
from millstream.common.watermark_strategy import WatermarkStrategy
from millstream.datastream.connectors.file_system import FileSource, StreamFormat, _local_path
from millstream.table.expression import Resolved, TableException, ValidationException, cast_value
from millstream.table.table_formats import RowCodec, codec_for
from millstream.table.types import DataType

__all__ = ["filesystem_source", "list_partitions", "partition_conjuncts", "TableFileFormat"]

DEFAULT_PARTITION = "__DEFAULT_PARTITION__"
# calls whose value is not a function of the row alone: never used to prune
_NONDETERMINISTIC = {"proctime", "now", "current_timestamp", "localtimestamp", "current_date", "current_time",
                     "localtime", "rand", "rand_integer", "uuid", "unix_timestamp"}


def partition_value(text: str, t: DataType, default_name: str) -> Any:
    """A directory name's value (after ``k=``) as a value of the partition column's type."""
    if text == default_name:
        return None
    raw = urllib.parse.unquote(text)  # Hive's %XX escapes
    try:
        if t.root == "DATE":
            return datetime.date.fromisoformat(raw)
        if t.root == "TIME":
            return datetime.time.fromisoformat(raw)
        return cast_value(raw, t)
    except (ValueError, TableException) as e:
        raise TableException(f"The partition value {raw!r} cannot be read as {t}: {e}") from None


def list_partitions(base: str, keys: Sequence[tuple[str, DataType]], default_name: str) -> list[tuple[str, list[Any]]]:
    """(directory, typed values) of every partition under ``base``, in path order; directories whose
    names are not ``<key>=<value>`` of the key at their depth are not partitions of the table."""
    found: list[tuple[str, list[Any]]] = [(base, [])]
    for name, t in keys:
        prefix = re.escape(name)
        nxt = []
        for directory, values in found:
            try:
                entries = sorted(os.listdir(directory))
            except FileNotFoundError:
                continue
            for entry in entries:
                m = re.fullmatch(rf"{prefix}=(.*)", entry)
                full = os.path.join(directory, entry)
                if m and not entry.startswith((".", "_")) and os.path.isdir(full):
                    nxt.append((full, values + [partition_value(m.group(1), t, default_name)]))
        found = nxt
    return found


def _conjuncts(e: Resolved) -> list[Resolved]:
    if e.kind == "call" and e.value == "and":
        return [c for a in e.args for c in _conjuncts(a)]
    return [e]


def _only_partition_refs(e: Resolved, positions: set[int]) -> bool:
    if e.kind == "ref":
        return e.value in positions
    if e.kind == "udf" or (e.kind == "call" and str(e.value).lower() in _NONDETERMINISTIC):
        return False
    return e.kind in ("lit", "call", "cast") and all(_only_partition_refs(a, positions) for a in e.args)


def partition_conjuncts(condition: Resolved, positions: set[int]) -> list[Resolved]:
    """The conjuncts of ``condition`` that use only the columns at ``positions`` (partition columns)."""
    return [c for c in _conjuncts(condition) if _only_partition_refs(c, positions)]


def _keeps(filters: Sequence[Resolved], width: int, positions: Sequence[int], values: Sequence[Any]) -> bool:
    row: list[Any] = [None] * width
    for i, v in zip(positions, values):
        row[i] = v
    try:
        return all(f.eval(row) is True for f in filters)
    except Exception:  # noqa: BLE001 - a filter that cannot be evaluated here prunes nothing; the Calc still filters
        return True


class TableFileFormat(StreamFormat):
    """The rows of one file of a filesystem table: its format's records as the non-partition
    columns, the partition columns from the file's directory names under ``base``."""

    def __init__(self, fmt: str, codec: RowCodec, width: int, base: str,
                 partitions: Sequence[tuple[int, str, DataType]], default_name: str) -> None:
        StreamFormat.__init__(self, f"table-{fmt}")
        self.fmt, self.codec, self.width, self.base = fmt, codec, width, base
        self.partitions, self.default_name = tuple(partitions), default_name

    def _partition_values(self, path: str) -> dict[int, Any]:
        rel = os.path.relpath(os.path.dirname(path), self.base).split(os.sep)
        spec = dict(part.split("=", 1) for part in rel if "=" in part)
        return {i: partition_value(spec[n], t, self.default_name) if n in spec else None
                for i, n, t in self.partitions}

    def _records(self, path: str) -> Iterator[list[Any]]:
        with open(path, "rb") as f:
            if self.fmt == "avro":
                try:
                    yield from self.codec.avro.read_file(f)
                except (ValueError, EOFError, TypeError) as e:
                    raise TableException(f"Failed to read the avro file {path}: {e}") from None
                return
            for line in f:
                line = line.rstrip(b"\r\n")
                if line.strip():
                    decoded = self.codec.decode(line)
                    if decoded is not None:
                        yield decoded

    def _read_file(self, path: str, batch_size: int) -> Iterator[list[Any]]:
        fixed = self._partition_values(path)
        batch: list[Any] = []
        for decoded in self._records(path):
            values: list[Any] = [None] * self.width
            for (i, _, _), v in zip(self.codec.fields, decoded):
                values[i] = v
            for i, v in fixed.items():
                values[i] = v
            batch.append(Row(*values))
            if len(batch) >= batch_size:
                yield batch
                batch = []
        if batch:
            yield batch

    def __reduce__(self) -> tuple:
        return (TableFileFormat, (self.fmt, self.codec, self.width, self.base, self.partitions, self.default_name))


def pruned_partitions(columns: Sequence[tuple[str, DataType]], options: dict[str, str], partition_keys: Sequence[str],
                      filters: Sequence[Resolved]) -> list[tuple[str, list[Any]]]:
    """The partitions (directory, values) the source reads: all, less those ``filters`` reject."""
    names = [n for n, _ in columns]
    positions = [names.index(k) for k in partition_keys]
    keys = [(k, columns[i][1]) for k, i in zip(partition_keys, positions)]
    listed = list_partitions(_local_path(options["path"]), keys, options.get("partition.default-name", DEFAULT_PARTITION))
    return [(d, v) for d, v in listed if _keeps(filters, len(columns), positions, v)]


def filesystem_source(env: Any, full_name: str, columns: Sequence[tuple[str, DataType]], options: dict[str, str],
                      partition_keys: Sequence[str], filters: Sequence[Resolved] = ()) -> Any:
    """The rows of a filesystem table: every (unpruned) partition's files, or the path's files."""
    names = [n for n, _ in columns]
    for k in partition_keys:
        if k not in names:
            raise ValidationException(f"Partition column '{k}' of table {full_name} is not one of its columns {names}")
    fields = [(i, n, t) for i, (n, t) in enumerate(columns) if n not in partition_keys]
    fmt = options.get("format")
    codec = codec_for(fmt, "format", fields, options, "", full_name)
    if fmt not in ("csv", "json", "avro"):
        raise TableException(f"table {full_name}: the filesystem connector reads format 'csv', 'json' or 'avro' in "
                             f"Millstream, got {fmt!r}")
    base = _local_path(options["path"])
    paths = [d for d, _ in pruned_partitions(columns, options, partition_keys, filters)] if partition_keys else [base]
    partitions = [(names.index(k), k, columns[names.index(k)][1]) for k in partition_keys]
    file_format = TableFileFormat(fmt, codec, len(columns), base, partitions,
                                  options.get("partition.default-name", DEFAULT_PARTITION))
    # no partition left: the base path, whose entries are all directories, holds no file to read
    source = FileSource.for_record_stream_format(file_format, *(paths or [base])).build()
    return env.from_source(source, WatermarkStrategy.no_watermarks(), "FileSource")
