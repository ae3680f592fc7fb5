"""PyFlink's documented behaviour on a real cluster (JobManager, TaskManager, Spark executors):
non-parallel sources run once at parallelism 2, the collect sink keeps a parallelism-1 source's
order, declared numeric types narrow as Java's, a keyed stream collects as Row(key, value), a
key selector may return a list, and add_python_archive's files are found by relative path."""
from __future__ import annotations

import zipfile

import pytest

from millstream.common import Row, Types
from millstream.datastream import RuntimeExecutionMode, SourceFunction, StreamExecutionEnvironment
from millstream.datastream.functions import ParallelSourceFunction, SinkFunction

from .harness import ClusterSpec

pytestmark = pytest.mark.timeout(300)
CLUSTER = ClusterSpec(tasks_per_slot=2, jobmanager_env=True)


def _env(parallelism: int = 2) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    return env


class Numbers(SourceFunction):
    def __init__(self, n: int) -> None:
        self.n = n

    def run(self, ctx) -> None:
        for i in range(self.n):
            ctx.collect(i)


class NumbersPerSubtask(ParallelSourceFunction):
    def open(self, runtime_context) -> None:
        self.index = runtime_context.get_index_of_this_subtask()

    def run(self, ctx) -> None:
        for i in range(3):
            ctx.collect((self.index, i))


@pytest.mark.parametrize("source, expected", [
    (lambda env: env.add_source(Numbers(100)), list(range(100))),
    (lambda env: env.from_collection(list(range(50))), list(range(50))),
    (lambda env: env.from_sequence(1, 40), list(range(1, 41))),
], ids=["add_source", "from_collection", "from_sequence"])
def test_sources_at_parallelism_2_emit_each_record_once(cluster, source, expected) -> None:
    env = _env(2)
    mapped = source(env).map(lambda x: x)  # at parallelism 2, after the source
    with mapped.execute_and_collect("sources p2") as results:
        assert sorted(results) == expected


def test_a_parallel_source_function_runs_once_per_subtask(cluster) -> None:
    with _env(2).add_source(NumbersPerSubtask()).execute_and_collect("parallel source") as results:
        assert sorted(results) == [(s, i) for s in (0, 1) for i in range(3)]


def test_collecting_a_collection_keeps_its_order_at_parallelism_2(cluster) -> None:
    env = _env(2)
    words = env.from_collection(["pyflink", "datastream", "execute", "collect"])
    assert list(words.execute_and_collect(limit=3)) == ["pyflink", "datastream", "execute"]


def test_declared_short_and_int_narrow_as_in_pyflink(cluster) -> None:
    env = _env(2)
    rows = env.from_collection([(43878, 9147483648)], type_info=Types.ROW([Types.SHORT(), Types.INT()]))
    mapped = rows.map(lambda r: (r[0] * 2, r[1]), output_type=Types.TUPLE([Types.BYTE(), Types.LONG()]))
    with rows.execute_and_collect("narrowing") as results:
        (row,) = list(results)
    assert list(row) == [-21658, 557549056]
    with mapped.execute_and_collect("narrowing map") as results:
        assert list(results) == [((-21658 * 2 + 128) % 256 - 128, 557549056)]


def test_a_keyed_stream_collects_rows_of_key_and_value(cluster) -> None:
    env = _env(2)
    keyed = env.from_collection([(1, "a"), (2, "b")]).key_by(lambda x: x[0])
    with keyed.execute_and_collect("keyed collect") as results:
        got = sorted(results, key=lambda r: r.f0)
    assert got == [Row.of_names(["f0", "f1"], [1, (1, "a")]), Row.of_names(["f0", "f1"], [2, (2, "b")])]


def test_a_list_key_as_in_pyflinks_keyed_min_by(cluster) -> None:
    for mode in (RuntimeExecutionMode.STREAMING, RuntimeExecutionMode.BATCH):
        env = _env(2)
        env.set_runtime_mode(mode)
        pairs = env.from_collection([(1, 9), (1, 5), (2, 6), (3, 1)])
        with pairs.key_by(lambda x: [1]).min_by(1).execute_and_collect(f"list key {mode.name}") as results:
            got = list(results)
        assert got[-1] == (3, 1), got
        assert len(got) == (4 if mode is RuntimeExecutionMode.STREAMING else 1)


def test_an_archive_is_extracted_into_the_tasks_working_directory(cluster, tmp_path) -> None:
    for name, target, folder in (("data.zip", "data", "data"), ("plain.zip", None, "plain.zip")):
        with zipfile.ZipFile(tmp_path / name, "w") as z:
            z.writestr("data.txt", f"contents of {name}")
        env = _env(2)
        env.add_python_archive(str(tmp_path / name), target)

        def read(x, folder=folder):
            with open(f"{folder}/data.txt") as f:
                return f.read()

        with env.from_sequence(1, 4).map(read).execute_and_collect(f"archive {name}") as results:
            assert list(results) == [f"contents of {name}"] * 4


class _Discard(SinkFunction):
    def invoke(self, value, context) -> None:
        pass


def test_an_archive_reaches_a_job_started_with_execute_async(cluster, tmp_path) -> None:
    # execute_async ships what execute ships: the archive is there when the task opens the file
    with zipfile.ZipFile(tmp_path / "data.zip", "w") as z:
        z.writestr("data.txt", "async contents")
    env = _env(1)
    env.add_python_archive(str(tmp_path / "data.zip"), "data")

    seen = tmp_path / "seen"
    seen.mkdir()

    def read(x, seen=str(seen)):
        with open("data/data.txt") as f, open(f"{seen}/{x}", "w") as out:
            out.write(f.read())
        return x

    env.from_sequence(1, 3).map(read).add_sink(_Discard())
    job = env.execute_async("archive, execute_async")
    result = job.get_job_execution_result().result(timeout=120)
    assert result.get_job_id() == job.get_job_id()
    assert {p.name: p.read_text() for p in seen.iterdir()} == {str(i): "async contents" for i in (1, 2, 3)}
