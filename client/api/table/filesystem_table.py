"""The ``filesystem`` table connector's sink (and its ``json`` reading), on the DataStream FileSink.

``INSERT INTO`` a filesystem table writes part files under ``path`` in ``format`` ``csv`` or
``json`` (one row a line). In streaming mode it is the FileSink's exactly-once: with checkpointing,
a part file becomes visible (renamed from its hidden in-progress name) only when a checkpoint
covering its rows completes; rolling follows Flink's options ``sink.rolling-policy.file-size``
(default 128MB), ``sink.rolling-policy.rollover-interval`` (30 min),
``sink.rolling-policy.inactivity-interval`` (30 min) and ``sink.rolling-policy.check-interval``
(1 min). In batch mode every part file is finished at the end of the input.

``PARTITIONED BY (a, b)``: rows go to ``path/a=<value>/b=<value>/`` (Flink's Hive-style layout,
the values escaped as Hive escapes them; null or empty: ``partition.default-name``, default
``__DEFAULT_PARTITION__``), and, as in Flink, the partition columns are in the path, not in the
files. The sink accepts insert-only input: an updating query fails naming the sink, as Flink's.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from millstream.common.row import Row
from millstream.common.serialization import Encoder
from millstream.datastream.connectors.file_system import _local_path
from millstream.datastream.functions import FlatMapFunction
from millstream.runtime import operator_factories
from millstream.table.expression import TableException, ValidationException
from millstream.table.table_formats import RowCodec, codec_for, duration_ms, format_options, memory_bytes
from millstream.table.types import DataType

__all__ = ["filesystem_sink", "JsonLineParser", "PartitionPath", "partition_path"]

SINK_FORMATS = ("csv", "json", "avro")
_OPTIONS = {"connector", "path", "format", "sink.rolling-policy.file-size", "sink.rolling-policy.rollover-interval",
            "sink.rolling-policy.inactivity-interval", "sink.rolling-policy.check-interval", "sink.parallelism",
            "partition.default-name", "source.monitor-interval"}
DEFAULT_PARTITION = "__DEFAULT_PARTITION__"
# Hive's FileUtils.escapePathName: these characters (and control characters) become %XX.
_ESCAPED = set('"#%\'*/:=?\\\x7f{[]^')


def _escape(value: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED or ord(c) < 0x20 else c for c in value)


def partition_path(names: Sequence[str], values: Sequence[Any], default_name: str = DEFAULT_PARTITION) -> str:
    """``a=1/b=x`` of the partition columns' values (Flink's / Hive's layout)."""
    parts = []
    for n, v in zip(names, values):
        text = "" if v is None else ("true" if v is True else "false" if v is False else str(v))
        parts.append(f"{_escape(n)}={_escape(text) if text else default_name}")
    return "/".join(parts)


class PartitionPath:
    """A row's partition directory (relative to the table's path): the FileSink's per-record bucket."""

    def __init__(self, positions: Sequence[int], names: Sequence[str], default_name: str) -> None:
        self.positions, self.names, self.default_name = tuple(positions), tuple(names), default_name

    def __call__(self, row: Row) -> str:
        return partition_path(self.names, [row[i] for i in self.positions], self.default_name)


@dataclass(frozen=True)
class RowEncoder(Encoder):
    """A row as one line of its format (the FileSink's row encoder)."""

    codec: Any = None

    def encode(self, record: object) -> bytes:
        return self.codec.encode(record) + b"\n"


class JsonLineParser(FlatMapFunction):
    """A JSON line of a filesystem table as a row of its columns (blank lines skipped)."""

    def __init__(self, codec: RowCodec, width: int) -> None:
        self.codec, self.width = codec, width

    def flat_map(self, value: str) -> Any:
        if not value.strip():
            return
        decoded = self.codec.decode(value.encode())
        if decoded is None:
            return
        values: list[Any] = [None] * self.width
        for (i, _, _), v in zip(self.codec.fields, decoded):
            values[i] = v
        yield Row(*values)


class _TableFileSink:
    """The FileSink of a table: the DataStream FileSink's operator with a per-row partition bucket."""

    name = "FileSink"

    def __init__(self, factory: Any) -> None:
        self.factory = factory

    def _sink_factory(self) -> Any:
        return self.factory


def check_options(full_name: str, options: dict[str, str], role: str) -> None:
    fmt = options.get("format")
    prefixes = tuple(f"{fmt}.{o}" for o in format_options(fmt)) if fmt else ()
    unknown = sorted(k for k in options if k not in _OPTIONS and k not in prefixes)
    if unknown:
        raise ValidationException(
            f"Unable to create a {role} for {'writing' if role == 'sink' else 'reading'} table '{full_name}'.\n\n"
            f"Caused by: Unsupported options found for 'filesystem'.\n\nUnsupported options:\n\n" + "\n".join(unknown)
            + "\n\nSupported options:\n\n" + "\n".join(sorted(_OPTIONS)))
    if not options.get("path"):
        raise ValidationException(f"Unable to create a {role} for table '{full_name}': One or more required options "
                                  f"are missing.\n\nMissing required options are:\n\npath")


def filesystem_sink(full_name: str, columns: Sequence[tuple[str, DataType]], options: dict[str, str],
                    partition_keys: Sequence[str], stream: Any, name: str) -> Any:
    """Adds the FileSink of a filesystem table to ``stream`` (rows)."""
    check_options(full_name, options, "sink")
    fmt = options.get("format")
    if fmt not in SINK_FORMATS:
        raise TableException(f"table {full_name}: the filesystem sink writes format 'csv', 'json' or 'avro' in Millstream "
                             f"(option 'format'), got {fmt!r}")
    names = [n for n, _ in columns]
    for k in partition_keys:
        if k not in names:
            raise ValidationException(f"Partition column '{k}' of table {full_name} is not one of its columns {names}")
    fields = [(i, n, t) for i, (n, t) in enumerate(columns) if n not in partition_keys]
    codec = codec_for(fmt, "format", fields, options, "", full_name)
    o = options
    try:
        size = memory_bytes(o.get("sink.rolling-policy.file-size", "128mb"))
        rollover = duration_ms(o.get("sink.rolling-policy.rollover-interval", "30 min"))
        inactivity = duration_ms(o.get("sink.rolling-policy.inactivity-interval", "30 min"))
        check = duration_ms(o.get("sink.rolling-policy.check-interval", "1 min"))
    except TableException as e:
        raise ValidationException(f"table {full_name}: {e} in a 'sink.rolling-policy.*' option") from None
    for key, value in (("file-size", size), ("rollover-interval", rollover), ("inactivity-interval", inactivity),
                       ("check-interval", check)):
        if value <= 0:
            raise ValidationException(f"table {full_name}: 'sink.rolling-policy.{key}' must be positive")
    bucket = PartitionPath([names.index(k) for k in partition_keys], list(partition_keys),
                           o.get("partition.default-name", DEFAULT_PARTITION)) if partition_keys else None
    bulk = None
    if fmt == "avro":  # lazy: fastavro loads only for avro tables
        from millstream.table.avro_rows import AvroRowWriterFactory
        bulk = AvroRowWriterFactory(codec.avro)  # container files: rolled on checkpoints and at the end
    factory = operator_factories.FileSinkFactory(
        base_path=_local_path(o["path"]), encoder=RowEncoder("utf-8", codec), part_size=size,
        rollover_interval_ms=rollover, inactivity_interval_ms=inactivity, bucket_format=None,
        bucket_check_interval_ms=check, partition_bucket=bucket, bulk_writer_factory=bulk)
    out = stream.sink_to(_TableFileSink(factory)).name(name)
    if "sink.parallelism" in o:
        out = out.set_parallelism(int(o["sink.parallelism"]))
    return out

