"""File connectors shaped like PyFlink's ``FileSource`` / ``FileSink``.

``FileSource.for_record_stream_format(StreamFormat.text_line_format(), path).build()`` reads text
lines in parallel over byte-range splits; ``FileSink.for_row_format(path, encoder).build()`` writes
one part file per subtask.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from millstream.common.serialization import Encoder
from millstream.runtime import factories as ops


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
        return FileSourceBuilder(stream_format, tuple(os.fspath(p) for p in paths))

    def _source_factory(self) -> ops.SourceFactory:
        return ops.TextFileSourceFactory(paths=self.paths, charset=self.stream_format.charset)


class FileSourceBuilder:
    def __init__(self, stream_format: StreamFormat, paths: tuple[str, ...]) -> None:
        self._format = stream_format
        self._paths = paths

    def process_static_file_set(self) -> "FileSourceBuilder":
        return self

    def build(self) -> FileSource:
        return FileSource(self._format, self._paths)


class FileSink:
    name = "FileSink"

    def __init__(self, base_path: str, encoder: Encoder) -> None:
        self.base_path = base_path
        self.encoder = encoder

    @staticmethod
    def for_row_format(base_path: str, encoder: Encoder | None = None) -> "FileSinkBuilder":
        return FileSinkBuilder(os.fspath(base_path), encoder or Encoder.simple_string_encoder())

    def _sink_factory(self) -> ops.SinkFactory:
        return ops.FileSinkFactory(base_path=self.base_path, encoder=self.encoder)


class FileSinkBuilder:
    def __init__(self, base_path: str, encoder: Encoder) -> None:
        self._base_path = base_path
        self._encoder = encoder

    def build(self) -> FileSink:
        return FileSink(self._base_path, self._encoder)
