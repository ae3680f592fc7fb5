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

*Partition commit* (a partitioned table with ``sink.partition-commit.policy.kind`` set, as in
Flink): policy ``success-file`` writes ``sink.partition-commit.success-file.name`` (``_SUCCESS``)
into a partition once the checkpoint holding its data completes and ``sink.partition-commit.trigger``
says it is done: ``process-time`` (the default: its creation plus ``sink.partition-commit.delay``
has passed) or ``partition-time`` (the watermark passed its time plus the delay; the time from
``partition.time-extractor.timestamp-pattern`` such as ``$dt $hr:00:00``, default the first
partition value, read in ``sink.partition-commit.watermark-time-zone``, default UTC). ``metastore``
needs a Hive table and ``custom`` (``sink.partition-commit.policy.class``, a Java class) has no
Python form: both fail naming the policy.
"""
from __future__ import annotations

import datetime
import re
import urllib.parse
from dataclasses import dataclass
from typing import Any, Sequence
from zoneinfo import ZoneInfo

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
            "partition.default-name", "source.monitor-interval", "sink.partition-commit.trigger",
            "sink.partition-commit.delay", "sink.partition-commit.watermark-time-zone",
            "partition.time-extractor.timestamp-pattern", "sink.partition-commit.policy.kind",
            "sink.partition-commit.policy.class", "sink.partition-commit.success-file.name"}
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


_TIME = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,9}))?)?)?")


class PartitionTimeExtractor:
    """A partition's time (epoch ms) from its directory ``a=1/b=2`` (Flink's default extractor):
    ``pattern``'s ``$name`` replaced by the partition values (no pattern: the first value), read
    as ``yyyy-MM-dd[ HH:mm[:ss]]`` in time zone ``zone``."""

    def __init__(self, keys: Sequence[str], pattern: str | None, zone: str) -> None:
        self.keys, self.pattern, self.zone = tuple(keys), pattern, zone

    def __call__(self, relative_dir: str) -> int:
        spec = dict(part.split("=", 1) for part in relative_dir.split("/") if "=" in part)
        values = {k: urllib.parse.unquote(v) for k, v in spec.items()}
        if self.pattern is None:
            text = values.get(self.keys[0], "")
        else:
            text = re.sub(r"\$(\w+)", lambda m: values.get(m.group(1), m.group(0)), self.pattern)
        m = _TIME.fullmatch(text.strip())
        if m is None:
            raise ValueError(f"the partition time {text!r} of partition {relative_dir!r} (pattern "
                             f"{self.pattern or '$' + self.keys[0]!r}) is not 'yyyy-MM-dd[ HH:mm:ss]'")
        y, mo, d, h, mi, sec, frac = m.groups()
        local = datetime.datetime(int(y), int(mo), int(d), int(h or 0), int(mi or 0), int(sec or 0),
                                  int((frac or "0").ljust(6, "0")[:6]))
        return int(local.replace(tzinfo=ZoneInfo(self.zone)).timestamp() * 1000)


def _partition_commit(full_name: str, options: dict[str, str], partition_keys: Sequence[str]) -> dict[str, Any]:
    """The FileSinkFactory fields of the table's partition commit (empty: none configured)."""
    o = options
    kinds = [k.strip() for k in o.get("sink.partition-commit.policy.kind", "").split(",") if k.strip()]
    if not kinds or not partition_keys:
        return {}
    for kind in kinds:
        if kind == "metastore":
            raise ValidationException(f"table {full_name}: Can not configure a 'metastore' partition commit policy "
                                      f"for a file system table. You can only configure 'metastore' partition commit "
                                      f"policy for a hive table.")
        if kind == "custom":
            raise ValidationException(f"table {full_name}: the partition commit policy 'custom' "
                                      f"('sink.partition-commit.policy.class', a Java PartitionCommitPolicy) is not "
                                      f"supported by Millstream; use 'success-file'")
        if kind != "success-file":
            raise ValidationException(f"table {full_name}: unknown partition commit policy {kind!r} in "
                                      f"'sink.partition-commit.policy.kind' (Millstream supports 'success-file')")
    trigger = o.get("sink.partition-commit.trigger", "process-time")
    if trigger not in ("process-time", "partition-time"):
        raise ValidationException(f"table {full_name}: 'sink.partition-commit.trigger' must be 'process-time' or "
                                  f"'partition-time', got {trigger!r}")
    try:
        delay = duration_ms(o.get("sink.partition-commit.delay", "0 s"))
    except TableException as e:
        raise ValidationException(f"table {full_name}: {e} in 'sink.partition-commit.delay'") from None
    zone = o.get("sink.partition-commit.watermark-time-zone", "UTC")
    try:
        ZoneInfo(zone)
    except Exception:  # noqa: BLE001 - ZoneInfo raises several types for a bad id
        raise ValidationException(f"table {full_name}: unknown time zone {zone!r} in "
                                  f"'sink.partition-commit.watermark-time-zone'") from None
    extractor = PartitionTimeExtractor(partition_keys, o.get("partition.time-extractor.timestamp-pattern"), zone)
    return {"partition_commit_trigger": trigger, "partition_commit_delay_ms": delay, "partition_time_of": extractor,
            "success_file_name": o.get("sink.partition-commit.success-file.name", "_SUCCESS")}


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
    if fmt == "avro":
        from millstream.table.avro_rows import AvroRowWriterFactory  # lazy: fastavro loads only for avro tables
        bulk = AvroRowWriterFactory(codec.avro)  # container files: rolled on checkpoints and at the end
    factory = operator_factories.FileSinkFactory(
        base_path=_local_path(o["path"]), encoder=RowEncoder("utf-8", codec), part_size=size,
        rollover_interval_ms=rollover, inactivity_interval_ms=inactivity, bucket_format=None,
        bucket_check_interval_ms=check, partition_bucket=bucket, bulk_writer_factory=bulk,
        **_partition_commit(full_name, o, partition_keys))
    out = stream.sink_to(_TableFileSink(factory)).name(name)
    if "sink.parallelism" in o:
        out = out.set_parallelism(int(o["sink.parallelism"]))
    return out

