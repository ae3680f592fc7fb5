"""File connectors shaped like PyFlink's ``pyflink.datastream.connectors.file_system``.

``FileSource.for_record_stream_format(StreamFormat.text_line_format(), path).build()`` reads text
lines in parallel over byte-range splits. ``FileSink.for_row_format(path, encoder)`` writes one
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

from millstream.common.serialization import Encoder
from millstream.datastream.functions import SinkFunction
from millstream.runtime import operator_factories

__all__ = [
    "BucketAssigner",
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


@dataclass(frozen=True)
class StreamFormat:
    kind: str
    charset: str = "utf-8"

    @staticmethod
    def text_line_format(charset_name: str = "UTF-8") -> "StreamFormat":
        return StreamFormat("text-line", charset_name.lower())


class FileSource:
    def __init__(self, stream_format: StreamFormat, paths: tuple[str, ...]) -> None:
        self.stream_format = stream_format
        self.paths = paths

    @staticmethod
    def for_record_stream_format(stream_format: StreamFormat, *paths: str) -> "FileSourceBuilder":
        if not paths:
            raise ValueError("FileSource needs at least one path")
        return FileSourceBuilder(stream_format, tuple(_local_path(p) for p in paths))

    def _source_factory(self) -> operator_factories.SourceFactory:
        return operator_factories.TextFileSourceFactory(paths=self.paths, charset=self.stream_format.charset)


class FileSourceBuilder:
    def __init__(self, stream_format: StreamFormat, paths: tuple[str, ...]) -> None:
        self._format = stream_format
        self._paths = paths

    def process_static_file_set(self) -> "FileSourceBuilder":
        """Read the files present now and end (bounded): the only mode there is so far."""
        return self

    def build(self) -> FileSource:
        return FileSource(self._format, self._paths)


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
    ) -> None:
        self.base_path = base_path
        self.encoder = encoder
        self.output_file_config = output_file_config
        self.rolling_policy = rolling_policy
        self.bucket_assigner = bucket_assigner
        self.bucket_check_interval_ms = bucket_check_interval_ms

    @staticmethod
    def for_row_format(base_path: str, encoder: Encoder | None = None) -> "FileSink.RowFormatBuilder":
        return FileSink.RowFormatBuilder(_local_path(base_path), encoder or Encoder.simple_string_encoder())

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
