"""Where a job's file paths point: the program's view of the file system, as in PyFlink's local mode.

A relative path names a file relative to where the program runs (`millstream run job.py --input
in.txt` from the directory holding in.txt), not to wherever the TaskManager was started; a
``file://`` URI (Flink's local file system scheme) names the local path it carries; a scheme
Millstream cannot read fails when the job is built, naming the path.
"""
from __future__ import annotations

import os

import pytest

from millstream.datastream.connectors.file_system import FileSink, FileSource, StreamFormat


def _source_paths(*paths: str) -> tuple[str, ...]:
    return FileSource.for_record_stream_format(StreamFormat.text_line_format(), *paths).build()._source_factory().paths


def test_relative_source_and_sink_paths_are_the_programs_working_directory(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert _source_paths("in.txt", "data/more") == (str(tmp_path / "in.txt"), str(tmp_path / "data" / "more"))
    sink = FileSink.for_row_format("out").build()
    assert sink._sink_factory().base_path == str(tmp_path / "out")
    os.chdir("/")  # the job's paths were fixed when it was built
    assert sink._sink_factory().base_path == str(tmp_path / "out")


def test_file_uris_are_local_paths(tmp_path) -> None:
    assert _source_paths(f"file://{tmp_path}/in.txt", f"file:{tmp_path}/b.txt") == (
        str(tmp_path / "in.txt"), str(tmp_path / "b.txt"))
    assert FileSink.for_row_format(f"file://{tmp_path}/out").build()._sink_factory().base_path == str(tmp_path / "out")


@pytest.mark.parametrize("uri", ["hdfs://namenode:8020/in", "s3://bucket/key"])
def test_a_file_system_millstream_cannot_read_fails_when_built(uri) -> None:
    with pytest.raises(ValueError, match="only local files"):
        _source_paths(uri)
    with pytest.raises(ValueError, match="only local files"):
        FileSink.for_row_format(uri)


def test_read_text_file_takes_the_same_paths(tmp_path, monkeypatch) -> None:
    from millstream.datastream import StreamExecutionEnvironment

    monkeypatch.chdir(tmp_path)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.read_text_file("in.txt").print()
    env.read_text_file(f"file://{tmp_path}/b.txt").print()
    graph = env.get_stream_graph()
    paths = sorted(n.factory.paths for n in graph.nodes.values() if hasattr(n.factory, "paths"))
    assert paths == [(str(tmp_path / "b.txt"),), (str(tmp_path / "in.txt"),)]


def test_a_name_with_a_colon_is_still_a_relative_path(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert _source_paths("run:2024.txt") == (str(tmp_path / "run:2024.txt"),)
