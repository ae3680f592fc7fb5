"""File connectors shaped like PyFlink's ``pyflink.datastream.connectors.file_system``.

``FileSource.for_record_stream_format(StreamFormat.text_line_format(), path).build()`` reads text
lines in parallel over byte-range splits; with another stream format (``formats.csv``, ``.avro``,
``.parquet``) or ``for_bulk_file_format`` each file (each row group of a Parquet file) is read by
one subtask, and
``monitor_continuously`` keeps reading the files that appear. ``FileSink.for_bulk_format(path,
writer_factory)`` writes part files through a bulk writer, rolled on every checkpoint. ``FileSink.for_row_format(path, encoder)`` writes one
encoded record per line into part files, as Flink's row-format FileSink: each subtask writes
``<bucket>/<prefix>-<uuid>-<subtask>-<n><suffix>``, where the bucket is a directory chosen by the
bucket assigner (by default the hour of processing time, ``yyyy-MM-dd--HH``). A part file is
written hidden (``.<name>.inprogress.<uuid>``) and appears under its final name when it is rolled
(by size, age or inactivity, per the rolling policy) or when the input ends.
"""
from __future__ import annotations

import os
import re
import urllib.parse
from dataclasses import dataclass
from typing import Any, Iterator

from millstream.common.serialization import BulkWriterFactory, Encoder
from millstream.common.time import Duration
from millstream.datastream.functions import SinkFunction
from millstream.runtime import operator_factories

__all__ = [
    "BucketAssigner",
    "BulkFormat",
    "FileSink",
    "FileSource",
    "FileSourceBuilder",
    "OutputFileConfig",
    "RollingPolicy",
    "StreamFormat",
]


def _local_path(path: str | os.PathLike[str]) -> str:
    """A job's file path as the program sees it, fixed when the job is built: a relative path is
    relative to the program's working directory (not to wherever the TaskManager was started), and
    a ``file://`` URI is the local path it carries. Other file systems are not readable yet."""
    text = os.fspath(path)
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]+):/", text)
    if scheme:
        parsed = urllib.parse.urlparse(text)
        if scheme.group(1).lower() != "file" or parsed.netloc not in ("", "localhost"):
            raise ValueError(f"{text!r}: Millstream reads and writes only local files "
                             f"(a path or a file:// URI), not {scheme.group(1)}:// yet")
        text = urllib.parse.unquote(parsed.path)
    return os.path.abspath(text)


class StreamFormat:
    """Reads the records of one file from its byte stream (Flink's StreamFormat).

    ``text_line_format()`` is read over byte-range splits, several subtasks sharing a file. The
    other formats (``CsvReaderFormat``, ``AvroInputFormat``, ``AvroParquetReaders``) implement
    ``_read_file(path, batch_size)``, the batches of records of one file, and a file is read whole
    by one subtask unless the format splits it (``_splits(path)``, with ``_read_file(path,
    batch_size, part)``: Parquet by row groups); a checkpoint stores how many records of each split
    were read, so a restore skips exactly those.
    """

    def __init__(self, kind: str, charset: str = "utf-8") -> None:
        self.kind = kind
        self.charset = charset

    @staticmethod
    def text_line_format(charset_name: str = "UTF-8") -> "StreamFormat":
        return StreamFormat("text-line", charset_name.lower())

    def _read_file(self, path: str, batch_size: int) -> Iterator[list[Any]]:
        """The file's records in batches of about ``batch_size``. The text line format's lines
        (when the whole file is read by one subtask, as a continuously monitored source does)."""
        if self.kind != "text-line":
            raise NotImplementedError(f"{type(self).__name__} does not read files")
        with open(path, "rb") as f:
            data = f.read()
        try:
            lines = data.decode(self.charset).split("\n")
        except UnicodeDecodeError as e:
            raise ValueError(f"cannot decode as {self.charset} near byte {e.start}: {e.reason}") from None
        if lines and lines[-1] == "":
            lines.pop()  # a trailing newline ends the last line; it does not start a new one
        lines = [ln[:-1] if ln.endswith("\r") else ln for ln in lines]
        for i in range(0, len(lines), batch_size):
            yield lines[i : i + batch_size]

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(other) == vars(self)

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.kind))

    def __repr__(self) -> str:
        return f"StreamFormat(kind={self.kind!r}, charset={self.charset!r})"


class BulkFormat:
    """Reads the records of one file a batch at a time (Flink's BulkFormat: Parquet, ORC).

    Subclasses implement ``_read_file(path, batch_size)`` as a StreamFormat does; a file is read
    whole by one subtask unless the format splits it (``_splits``: Parquet, by row groups).
    """

    kind = "bulk"


def _check_format(fmt: Any, expected: type, entry: str) -> None:
    if not isinstance(fmt, expected):
        raise TypeError(f"FileSource.{entry} needs a {expected.__name__}, got {type(fmt).__name__}")


class FileSource:
    """Reads files with a stream or bulk format: the files present when the job starts (bounded,
    the default), or, with ``monitor_continuously``, also every file that appears later.

    A continuous source lists its paths every discovery interval. Flink hands new files out from a
    split enumerator on the JobManager; Millstream has none, so each subtask lists the paths itself
    and reads the files whose path hashes to it (a file, or a Parquet row group, goes to the subtask
    chosen deterministically from its path, the same in every subtask and every attempt). The files a
    subtask has read (and how far into the current one) are in its checkpoints: after a failover
    it neither reads a file again nor skips one. The parallelism of a continuous file source
    cannot change on a restore (the hash would send old files to other subtasks). As in Flink, a
    file should appear whole (written elsewhere or under a hidden name, then renamed): names
    starting with ``.`` or ``_`` are not listed, and a file is read once, as it is when listed.
    """

    def __init__(self, stream_format: Any, paths: tuple[str, ...], monitor_interval_ms: int | None = None) -> None:
        self.stream_format = stream_format
        self.paths = paths
        self.monitor_interval_ms = monitor_interval_ms

    @staticmethod
    def for_record_stream_format(stream_format: StreamFormat, *paths: str) -> "FileSourceBuilder":
        _check_format(stream_format, StreamFormat, "for_record_stream_format")
        if not paths:
            raise ValueError("FileSource needs at least one path")
        return FileSourceBuilder(stream_format, tuple(_local_path(p) for p in paths))

    @staticmethod
    def for_bulk_file_format(bulk_format: BulkFormat, *paths: str) -> "FileSourceBuilder":
        _check_format(bulk_format, BulkFormat, "for_bulk_file_format")
        if not paths:
            raise ValueError("FileSource needs at least one path")
        return FileSourceBuilder(bulk_format, tuple(_local_path(p) for p in paths))

    def _source_factory(self) -> operator_factories.SourceFactory:
        fmt = self.stream_format
        if isinstance(fmt, StreamFormat) and fmt.kind == "text-line" and self.monitor_interval_ms is None:
            return operator_factories.TextFileSourceFactory(paths=self.paths, charset=fmt.charset)
        return operator_factories.FormatFileSourceFactory(
            paths=self.paths, file_format=fmt, monitor_interval_ms=self.monitor_interval_ms)


class FileSourceBuilder:
    def __init__(self, stream_format: Any, paths: tuple[str, ...]) -> None:
        self._format = stream_format
        self._paths = paths
        self._monitor_interval_ms: int | None = None

    def monitor_continuously(self, discovery_interval: Duration) -> "FileSourceBuilder":
        """Streaming mode: keep running, list the paths every ``discovery_interval`` and read the
        files that appeared (see :class:`FileSource` for how files are shared and checkpointed)."""
        if not isinstance(discovery_interval, Duration):
            raise TypeError(f"monitor_continuously needs a Duration, got {type(discovery_interval).__name__}")
        interval = discovery_interval.to_milliseconds()
        if interval <= 0:
            raise ValueError(f"the discovery interval must be positive, got {interval} ms")
        self._monitor_interval_ms = interval
        return self

    def process_static_file_set(self) -> "FileSourceBuilder":
        """Read the files present now and end (bounded): the default."""
        self._monitor_interval_ms = None
        return self

    def build(self) -> FileSource:
        return FileSource(self._format, self._paths, self._monitor_interval_ms)


@dataclass(frozen=True)
class OutputFileConfig:
    """Part-file name prefix and suffix (Flink's defaults: ``part`` and none)."""

    part_prefix: str = "part"
    part_suffix: str = ""

    def get_part_prefix(self) -> str:
        return self.part_prefix

    def get_part_suffix(self) -> str:
        return self.part_suffix

    @staticmethod
    def builder() -> "OutputFileConfig.OutputFileConfigBuilder":
        return OutputFileConfig.OutputFileConfigBuilder()

    class OutputFileConfigBuilder:
        def __init__(self) -> None:
            self._prefix = "part"
            self._suffix = ""

        def with_part_prefix(self, prefix: str) -> "OutputFileConfig.OutputFileConfigBuilder":
            self._prefix = prefix
            return self

        def with_part_suffix(self, suffix: str) -> "OutputFileConfig.OutputFileConfigBuilder":
            self._suffix = suffix
            return self

        def build(self) -> "OutputFileConfig":
            return OutputFileConfig(self._prefix, self._suffix)


@dataclass(frozen=True)
class RollingPolicy:
    """When a part file is finished and a new one started (Flink's DefaultRollingPolicy): once it
    holds ``part_size`` bytes, is ``rollover_interval`` ms old, or got nothing for
    ``inactivity_interval`` ms. ``on_checkpoint_rolling_policy`` never rolls on size or time."""

    part_size: int | None = 128 * 1024 * 1024
    rollover_interval_ms: int | None = 60_000
    inactivity_interval_ms: int | None = 60_000

    @staticmethod
    def default_rolling_policy(
        part_size: int = 128 * 1024 * 1024, rollover_interval: int = 60_000, inactivity_interval: int = 60_000
    ) -> "RollingPolicy":
        for name, value in (("part_size", part_size), ("rollover_interval", rollover_interval), ("inactivity_interval", inactivity_interval)):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"RollingPolicy {name} must be a positive number, got {value!r}")
        return RollingPolicy(part_size, rollover_interval, inactivity_interval)

    @staticmethod
    def on_checkpoint_rolling_policy() -> "RollingPolicy":
        return RollingPolicy(None, None, None)


@dataclass(frozen=True)
class BucketAssigner:
    """The sub-directory of the base path a record goes to: the processing time formatted with a
    Java date pattern (Flink's DateTimeBucketAssigner, ``yyyy-MM-dd--HH``), or the base path itself."""

    date_format: str | None = "yyyy-MM-dd--HH"
    timezone_id: str | None = None

    @staticmethod
    def base_path_bucket_assigner() -> "BucketAssigner":
        return BucketAssigner(None)

    @staticmethod
    def date_time_bucket_assigner(format_str: str = "yyyy-MM-dd--HH", timezone_id: str | None = None) -> "BucketAssigner":
        return BucketAssigner(format_str, timezone_id)


class FileSink:
    name = "FileSink"

    def __init__(
        self,
        base_path: str,
        encoder: Encoder,
        output_file_config: OutputFileConfig,
        rolling_policy: RollingPolicy,
        bucket_assigner: BucketAssigner,
        bucket_check_interval_ms: int,
        bulk_writer_factory: BulkWriterFactory | None = None,
    ) -> None:
        self.base_path = base_path
        self.bulk_writer_factory = bulk_writer_factory
        self.encoder = encoder
        self.output_file_config = output_file_config
        self.rolling_policy = rolling_policy
        self.bucket_assigner = bucket_assigner
        self.bucket_check_interval_ms = bucket_check_interval_ms

    @staticmethod
    def for_row_format(base_path: str, encoder: Encoder | None = None) -> "FileSink.RowFormatBuilder":
        return FileSink.RowFormatBuilder(_local_path(base_path), encoder or Encoder.simple_string_encoder())

    @staticmethod
    def for_bulk_format(base_path: str, writer_factory: BulkWriterFactory) -> "FileSink.BulkFormatBuilder":
        """Part files written by a bulk writer (Avro, Parquet, CSV): each part file is one writer's
        output, finished and rolled on every checkpoint (Flink's OnCheckpointRollingPolicy, the only
        rolling policy of bulk formats) and at the end of a bounded input. With checkpointing it is
        exactly-once as the row format: a rolled file is committed when its checkpoint completes."""
        if not isinstance(writer_factory, BulkWriterFactory):
            raise TypeError(f"FileSink.for_bulk_format needs a BulkWriterFactory, got {type(writer_factory).__name__}")
        return FileSink.BulkFormatBuilder(_local_path(base_path), writer_factory)

    def _sink_factory(self) -> operator_factories.SinkFactory:
        return operator_factories.FileSinkFactory(
            base_path=self.base_path,
            encoder=self.encoder,
            part_prefix=self.output_file_config.part_prefix,
            part_suffix=self.output_file_config.part_suffix,
            part_size=self.rolling_policy.part_size,
            rollover_interval_ms=self.rolling_policy.rollover_interval_ms,
            inactivity_interval_ms=self.rolling_policy.inactivity_interval_ms,
            bucket_format=self.bucket_assigner.date_format,
            bucket_timezone=self.bucket_assigner.timezone_id,
            bucket_check_interval_ms=self.bucket_check_interval_ms,
            bulk_writer_factory=self.bulk_writer_factory,
        )

    class RowFormatBuilder:
        def __init__(self, base_path: str, encoder: Encoder) -> None:
            self._base_path = base_path
            self._encoder = encoder
            self._output_file_config = OutputFileConfig()
            self._rolling_policy = RollingPolicy()
            self._bucket_assigner = BucketAssigner()
            self._bucket_check_interval_ms = 60_000

        def with_output_file_config(self, output_file_config: OutputFileConfig) -> "FileSink.RowFormatBuilder":
            self._output_file_config = output_file_config
            return self

        def with_rolling_policy(self, rolling_policy: RollingPolicy) -> "FileSink.RowFormatBuilder":
            self._rolling_policy = rolling_policy
            return self

        def with_bucket_assigner(self, bucket_assigner: BucketAssigner) -> "FileSink.RowFormatBuilder":
            self._bucket_assigner = bucket_assigner
            return self

        def with_bucket_check_interval(self, interval: int) -> "FileSink.RowFormatBuilder":
            """How often (ms) part files are checked for rolling on age or inactivity."""
            if not isinstance(interval, int) or interval <= 0:
                raise ValueError(f"bucket check interval must be a positive number of ms, got {interval!r}")
            self._bucket_check_interval_ms = interval
            return self

        def build(self) -> "FileSink":
            return FileSink(
                self._base_path,
                self._encoder,
                self._output_file_config,
                self._rolling_policy,
                self._bucket_assigner,
                self._bucket_check_interval_ms,
            )

    class BulkFormatBuilder:
        """``FileSink.for_bulk_format(...)``'s builder: output file config, bucket assigner and check
        interval as the row format; the rolling policy is always on checkpoint."""

        def __init__(self, base_path: str, writer_factory: BulkWriterFactory) -> None:
            self._base_path = base_path
            self._writer_factory = writer_factory
            self._output_file_config = OutputFileConfig()
            self._bucket_assigner = BucketAssigner()
            self._bucket_check_interval_ms = 60_000

        def with_output_file_config(self, output_file_config: OutputFileConfig) -> "FileSink.BulkFormatBuilder":
            self._output_file_config = output_file_config
            return self

        def with_bucket_assigner(self, bucket_assigner: BucketAssigner) -> "FileSink.BulkFormatBuilder":
            self._bucket_assigner = bucket_assigner
            return self

        def with_bucket_check_interval(self, interval: int) -> "FileSink.BulkFormatBuilder":
            if not isinstance(interval, int) or interval <= 0:
                raise ValueError(f"bucket check interval must be a positive number of ms, got {interval!r}")
            self._bucket_check_interval_ms = interval
            return self

        def with_rolling_policy(self, rolling_policy: RollingPolicy) -> "FileSink.BulkFormatBuilder":
            """Bulk formats roll on checkpoints only (Flink accepts only an OnCheckpointRollingPolicy)."""
            if rolling_policy != RollingPolicy.on_checkpoint_rolling_policy():
                raise ValueError("bulk formats roll on every checkpoint only: pass RollingPolicy.on_checkpoint_rolling_policy()")
            return self

        def build(self) -> "FileSink":
            return FileSink(self._base_path, Encoder.simple_string_encoder(), self._output_file_config,
                            RollingPolicy.on_checkpoint_rolling_policy(), self._bucket_assigner,
                            self._bucket_check_interval_ms, self._writer_factory)


FileSinkBuilder = FileSink.RowFormatBuilder


class StreamingFileSink(SinkFunction):
    """PyFlink's deprecated row-format file sink, used with ``add_sink``: the same part files,
    rolling and buckets as :class:`FileSink`, and the same exactly-once commit on checkpoints
    (it is a FileSink behind the SinkFunction interface; ``add_sink`` runs it as one)."""

    name = "StreamingFileSink"

    def __init__(self, file_sink: FileSink) -> None:
        self._file_sink = file_sink

    @staticmethod
    def for_row_format(base_path: str, encoder: Encoder) -> "StreamingFileSink.DefaultRowFormatBuilder":
        if not isinstance(encoder, Encoder):
            raise TypeError(f"StreamingFileSink.for_row_format needs an Encoder, got {type(encoder).__name__}")
        return StreamingFileSink.DefaultRowFormatBuilder(FileSink.for_row_format(base_path, encoder))

    def _sink_factory(self) -> operator_factories.SinkFactory:
        return self._file_sink._sink_factory()

    def invoke(self, value: object, context: object = None) -> None:
        """Not called: ``add_sink`` runs this sink as its FileSink (``_sink_factory``), which
        writes whole batches and commits on checkpoints."""
        raise RuntimeError("StreamingFileSink writes through its FileSink: add it with add_sink, not by calling invoke")

    class DefaultRowFormatBuilder:
        def __init__(self, builder: FileSink.RowFormatBuilder) -> None:
            self._builder = builder

        def with_bucket_check_interval(self, interval: int) -> "StreamingFileSink.DefaultRowFormatBuilder":
            self._builder.with_bucket_check_interval(interval)
            return self

        def with_bucket_assigner(self, bucket_assigner: BucketAssigner) -> "StreamingFileSink.DefaultRowFormatBuilder":
            self._builder.with_bucket_assigner(bucket_assigner)
            return self

        def with_rolling_policy(self, policy: RollingPolicy) -> "StreamingFileSink.DefaultRowFormatBuilder":
            self._builder.with_rolling_policy(policy)
            return self

        def with_output_file_config(self, output_file_config: OutputFileConfig) -> "StreamingFileSink.DefaultRowFormatBuilder":
            self._builder.with_output_file_config(output_file_config)
            return self

        def build(self) -> "StreamingFileSink":
            return StreamingFileSink(self._builder.build())
