"""Which sources may run in parallel, checked against Flink's rules.

Flink (StreamExecutionEnvironment / DataStreamSource): a ``SourceFunction`` that is not a
``ParallelSourceFunction`` is non-parallel, so ``add_source`` makes a parallelism-1 source, and
asking such a source for a parallelism other than 1 fails ("The parallelism of non parallel
operator must be 1."). PyFlink's ``from_collection`` forces its source non-parallel. The number
sequence source, file sources and the data generator are parallel: they take the environment's
parallelism. The collect sink of ``execute_and_collect`` always runs at parallelism 1
(CollectStreamSink), while ``print`` runs at the environment's.
"""
from __future__ import annotations

import pytest

from millstream.common import WatermarkStrategy
from millstream.datastream import SourceFunction
from millstream.datastream.connectors.datagen import DataGeneratorSource
from millstream.datastream.connectors.file_system import FileSource, StreamFormat
from millstream.datastream.functions import ParallelSourceFunction


class Numbers(SourceFunction):
    def run(self, ctx):
        for i in range(3):
            ctx.collect(i)


class ParallelNumbers(ParallelSourceFunction):
    def run(self, ctx):
        ctx.collect(0)


def _source_parallelism(env, name: str) -> int:
    sg = env.get_stream_graph()
    (node,) = [sg.nodes[i] for i in sg.source_ids if sg.nodes[i].operator_name == name]
    return node.parallelism


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("a\nb\n")
    return str(path)


def _parallel_sources(env, text_file):
    return {
        "Source: Sequence Source": lambda: env.from_sequence(1, 10),
        "Source: Read Text File": lambda: env.read_text_file(text_file),
        "Source: files": lambda: env.from_source(
            FileSource.for_record_stream_format(StreamFormat.text_line_format(), text_file).build(),
            WatermarkStrategy.no_watermarks(), "files"),
        "Source: generated": lambda: env.from_source(
            DataGeneratorSource(lambda i: i, count=10), WatermarkStrategy.no_watermarks(), "generated"),
        "Source: parallel": lambda: env.add_source(ParallelNumbers(), "parallel"),
    }


def _non_parallel_sources(env):
    return {
        "Source: Custom Source": lambda: env.add_source(Numbers()),
        "Source: Collection Source": lambda: env.from_collection([1, 2, 3]),
    }


def test_non_parallel_sources_run_at_parallelism_1_at_any_environment_parallelism(env) -> None:
    env.set_parallelism(2)
    for name, make in _non_parallel_sources(env).items():
        make().print()
        assert _source_parallelism(env, name) == 1, name


def test_a_non_parallel_source_rejects_a_parallelism_above_1_with_flinks_message(env) -> None:
    for name, make in _non_parallel_sources(env).items():
        source = make()
        source.set_parallelism(1)  # allowed
        with pytest.raises(ValueError, match="The parallelism of non parallel operator .*must be 1"):
            source.set_parallelism(2)


def test_parallel_sources_take_the_environment_parallelism_and_may_be_set(env, text_file) -> None:
    env.set_parallelism(2)
    for name, make in _parallel_sources(env, text_file).items():
        stream = make()
        stream.print()
        assert _source_parallelism(env, name) == 2, name
        stream.set_parallelism(3)
        assert _source_parallelism(env, name) == 3, name


def test_print_runs_at_the_environment_parallelism_after_a_parallelism_1_source(env) -> None:
    env.set_parallelism(2)
    env.from_collection(["pyflink", "datastream"]).print()
    sg = env.get_stream_graph()
    by_name = {n.operator_name: n for n in sg.nodes.values()}
    assert by_name["Sink: Print to Std. Out"].parallelism == 2
    assert by_name["Source: Collection Source"].parallelism == 1


def _planned_collect_job(env, stream, monkeypatch):
    """The JobGraph ``execute_and_collect`` would submit (the submission itself is captured)."""
    import millstream.client.execution as execution

    planned = {}

    def capture(job_graph, configuration, python_files, collect_id, limit):
        planned["graph"] = job_graph
        return iter(())

    monkeypatch.setattr(execution, "execute_and_collect", capture)
    stream.execute_and_collect(limit=3)
    return [(v.name, v.parallelism) for v in planned["graph"].vertices]


def test_execute_and_collect_runs_its_sink_at_parallelism_1(env, monkeypatch) -> None:
    """So a parallelism-1 source chains into it and its records keep the collection's order."""
    env.set_parallelism(2)
    stream = env.from_collection(["pyflink", "datastream", "execute", "collect"])
    assert _planned_collect_job(env, stream, monkeypatch) == [("Source: Collection Source -> Sink: Collect Sink", 1)]


def test_execute_and_collect_after_a_parallel_operator_gathers_into_one_sink(env, monkeypatch) -> None:
    env.set_parallelism(2)
    stream = env.from_sequence(1, 10).map(lambda x: x)
    assert _planned_collect_job(env, stream, monkeypatch) == [
        ("Source: Sequence Source -> Map", 2), ("Sink: Collect Sink", 1)]


def test_a_plain_source_function_is_not_a_parallel_one() -> None:
    from millstream.runtime.operator_factories import SourceFunctionFactory

    assert not SourceFunctionFactory(function=Numbers()).parallel
    assert SourceFunctionFactory(function=ParallelNumbers()).parallel
