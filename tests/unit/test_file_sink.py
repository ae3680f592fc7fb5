"""The row-format FileSink as Flink's: part-file names, hidden in-progress files, rolling policy,
buckets, output file config, and the encoder's text of typed records."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from millstream.common import Encoder, Types
from millstream.datastream import StreamExecutionEnvironment
from millstream.datastream.connectors import BucketAssigner, FileSink, OutputFileConfig, RollingPolicy
from millstream.runtime.operators.file_sink import java_date_pattern_to_strftime
from millstream.runtime.task.environment import ManualClock
from tests.unit.test_runtime_chain import make_chain, run_source, vertex

UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def files(base: Path) -> list[str]:
    return sorted(str(p.relative_to(base)) for p in base.rglob("*") if p.is_file())


def flat_sink(base: Path, **builder: Any) -> FileSink:
    b = FileSink.for_row_format(str(base), Encoder.simple_string_encoder()).with_bucket_assigner(
        BucketAssigner.base_path_bucket_assigner()
    )
    for method, arg in builder.items():
        b = getattr(b, method)(arg)
    return b.build()


def test_each_subtask_writes_named_part_files(env: StreamExecutionEnvironment, tmp_path: Path) -> None:
    env.set_parallelism(2)
    env.from_sequence(1, 6).sink_to(flat_sink(tmp_path / "out"))
    v = vertex(env, "Sequence")
    for subtask in (0, 1):
        run_source(v, subtask)
    names = files(tmp_path / "out")
    assert len(names) == 2
    for subtask, name in enumerate(sorted(names, key=lambda n: n.rsplit("-", 2)[-2])):
        assert re.fullmatch(f"part-{UUID}-{subtask}-0", name), name
    contents = sorted((tmp_path / "out" / n).read_text() for n in names)
    assert contents == ["1\n2\n3\n", "4\n5\n6\n"]


def test_output_file_config_sets_prefix_and_suffix(env: StreamExecutionEnvironment, tmp_path: Path) -> None:
    config = OutputFileConfig.builder().with_part_prefix("prefix").with_part_suffix(".ext").build()
    env.from_collection(["a"]).sink_to(flat_sink(tmp_path, with_output_file_config=config))
    run_source(vertex(env, "Collection"))
    [name] = files(tmp_path)
    assert re.fullmatch(f"prefix-{UUID}-0-0\\.ext", name)


def test_part_files_are_hidden_in_progress_until_finished(env: StreamExecutionEnvironment, tmp_path: Path) -> None:
    env.from_collection(["a", "b"]).sink_to(flat_sink(tmp_path))
    run = make_chain(vertex(env, "Collection"))
    run.chain.open()
    assert run.chain.run_source()
    run.chain.flush()
    [name] = files(tmp_path)
    assert re.fullmatch(f"\\.part-{UUID}-0-0\\.inprogress\\.{UUID}", name)
    assert (tmp_path / name).read_text() == "a\nb\n"
    run.chain.end_input()
    run.chain.close()
    [final] = files(tmp_path)
    assert not final.startswith(".") and (tmp_path / final).read_text() == "a\nb\n"


def test_a_failed_task_leaves_no_finished_file(env: StreamExecutionEnvironment, tmp_path: Path) -> None:
    env.from_collection(["a"]).sink_to(flat_sink(tmp_path))
    run = make_chain(vertex(env, "Collection"))
    run.chain.open()
    assert run.chain.run_source()
    run.chain.close()  # no end of input: a failure or a cancel
    assert all(n.startswith(".") for n in files(tmp_path))


def test_rolls_when_the_part_exceeds_its_size(env: StreamExecutionEnvironment, tmp_path: Path) -> None:
    policy = RollingPolicy.default_rolling_policy(part_size=10)
    env.from_collection([f"line{i}" for i in range(6)]).sink_to(flat_sink(tmp_path, with_rolling_policy=policy))
    run_source(vertex(env, "Collection"), source_batch_size=1)
    names = sorted(files(tmp_path), key=lambda n: int(n.rsplit("-", 1)[1]))
    # 6 bytes per line: a part rolls once it holds more than 10 bytes, i.e. after two lines
    assert [n.rsplit("-", 1)[1] for n in names] == ["0", "1", "2"]
    assert [(tmp_path / n).read_text() for n in names] == ["line0\nline1\n", "line2\nline3\n", "line4\nline5\n"]


def _timed_run(env: StreamExecutionEnvironment, tmp_path: Path, policy: RollingPolicy) -> tuple[Any, ManualClock]:
    clock = ManualClock(10_000)
    env.from_collection(["x"]).sink_to(flat_sink(tmp_path, with_rolling_policy=policy, with_bucket_check_interval=1_000))
    run = make_chain(vertex(env, "Collection"), clock=clock)
    run.chain.open()
    return run, clock


def test_rolls_on_inactivity_at_the_next_bucket_check(env: StreamExecutionEnvironment, tmp_path: Path) -> None:
    policy = RollingPolicy.default_rolling_policy(inactivity_interval=5_000, rollover_interval=3_600_000)
    run, clock = _timed_run(env, tmp_path, policy)
    sink = run.chain.operators[-1]
    sink.process_batch(["a"])
    clock.advance(4_000)
    sink.flush()
    assert all(n.startswith(".") for n in files(tmp_path))
    clock.advance(1_000)
    sink.flush()
    assert [n for n in files(tmp_path) if not n.startswith(".")] != []
    sink.process_batch(["b"])  # a new part file with the next counter
    run.chain.end_input()
    run.chain.close()
    assert sorted(n.rsplit("-", 1)[1] for n in files(tmp_path)) == ["0", "1"]


def test_rolls_on_age_even_while_written(env: StreamExecutionEnvironment, tmp_path: Path) -> None:
    policy = RollingPolicy.default_rolling_policy(rollover_interval=3_000, inactivity_interval=3_600_000)
    run, clock = _timed_run(env, tmp_path, policy)
    sink = run.chain.operators[-1]
    for _ in range(3):
        sink.process_batch(["a"])
        clock.advance(1_000)
        sink.flush()
    assert [n for n in files(tmp_path) if not n.startswith(".")] != []
    run.chain.close()


def test_on_checkpoint_policy_never_rolls_on_size_or_time(env: StreamExecutionEnvironment, tmp_path: Path) -> None:
    run, clock = _timed_run(env, tmp_path, RollingPolicy.on_checkpoint_rolling_policy())
    sink = run.chain.operators[-1]
    sink.process_batch(["a" * 1000])
    clock.advance(10_000_000)
    sink.flush()
    sink.process_batch(["b"])
    assert len(files(tmp_path)) == 1 and files(tmp_path)[0].startswith(".")
    run.chain.end_input()
    run.chain.close()


def test_default_buckets_are_the_hour_of_processing_time(env: StreamExecutionEnvironment, tmp_path: Path) -> None:
    env.from_collection(["a"]).sink_to(FileSink.for_row_format(str(tmp_path)).build())
    run = make_chain(vertex(env, "Collection"), clock=ManualClock(1_700_000_000_000))  # 2023-11-14 22:13 UTC
    run.chain.open()
    assert run.chain.run_source()
    run.chain.end_input()
    run.chain.close()
    [name] = files(tmp_path)
    bucket = os.path.dirname(name)
    assert re.fullmatch(r"2023-11-1[45]--\d\d", bucket)  # the machine's zone, as Java's default


def test_date_time_bucket_assigner_with_zone(env: StreamExecutionEnvironment, tmp_path: Path) -> None:
    sink = (
        FileSink.for_row_format(str(tmp_path))
        .with_bucket_assigner(BucketAssigner.date_time_bucket_assigner("yyyy/MM/dd 'at' HH", "Asia/Tokyo"))
        .build()
    )
    env.from_collection(["a"]).sink_to(sink)
    run_source(vertex(env, "Collection"), clock=ManualClock(1_700_000_000_000))
    [name] = files(tmp_path)
    assert os.path.dirname(name) == "2023/11/15 at 07"


def test_java_date_patterns() -> None:
    assert java_date_pattern_to_strftime("yyyy-MM-dd--HH") == "%Y-%m-%d--%H"
    assert java_date_pattern_to_strftime("yy'%'mm:ss") == "%y%%%M:%S"


def test_simple_string_encoder_writes_typed_records_as_java_text(env: StreamExecutionEnvironment, tmp_path: Path) -> None:
    env.from_collection(["a"]).map(lambda w: (w, 1), output_type=Types.TUPLE([Types.STRING(), Types.INT()])).sink_to(
        flat_sink(tmp_path)
    )
    run_source(vertex(env, "Collection"))
    [name] = files(tmp_path)
    assert (tmp_path / name).read_text() == "(a,1)\n"


@pytest.mark.parametrize("bad", [0, -1, "1"])
def test_rolling_policy_rejects_non_positive_values(bad: Any) -> None:
    with pytest.raises(ValueError, match="part_size"):
        RollingPolicy.default_rolling_policy(part_size=bad)


def test_streaming_file_sink_with_add_sink_is_the_file_sink(env: StreamExecutionEnvironment, tmp_path: Path) -> None:
    """PyFlink's deprecated StreamingFileSink.for_row_format(...).build() used with add_sink: the
    same part files, output file config and buckets as FileSink (not a per-record SinkFunction)."""
    from millstream.datastream.connectors.file_system import StreamingFileSink

    config = OutputFileConfig.builder().with_part_prefix("legacy").with_part_suffix(".txt").build()
    sink = (StreamingFileSink.for_row_format(str(tmp_path / "out"), Encoder.simple_string_encoder())
            .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
            .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy())
            .with_output_file_config(config)
            .with_bucket_check_interval(1000)
            .build())
    env.set_parallelism(1)
    env.from_collection(["a", "b"]).add_sink(sink)
    v = vertex(env, "Collection")
    assert "StreamingFileSink" in v.name
    run_source(v)
    [name] = files(tmp_path / "out")
    assert re.fullmatch(f"legacy-{UUID}-0-0\\.txt", name)
    assert (tmp_path / "out" / name).read_text() == "a\nb\n"
    with pytest.raises(TypeError, match="needs an Encoder"):
        StreamingFileSink.for_row_format(str(tmp_path), "utf-8")  # type: ignore[arg-type]
