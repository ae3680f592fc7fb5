"""A Table job's GROUP BY state is checkpointed and restored: a streaming GROUP BY whose source
chain fails once after two checkpoints resumes from the last one, and its changelog, written by the
exactly-once FileSink, is the changelog of a run without failure (every +I/-U/+U line once)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from millstream.common import Encoder, WatermarkStrategy
from millstream.common.restart_strategy import RestartStrategies
from millstream.common.typeinfo import Types
from millstream.datastream import StreamExecutionEnvironment
from millstream.datastream.connectors.datagen import DataGeneratorSource
from millstream.datastream.connectors.file_system import FileSink
from millstream.runtime.execution_state import JobStatus
from millstream.table import StreamTableEnvironment
from millstream.table.expressions import col, lit

from .harness import ClusterSpec
from .jobs import FailWhenMarked, fail_after_checkpoints, visible_lines

pytestmark = pytest.mark.timeout(400)
CLUSTER = ClusterSpec(slots=4, tasks_per_slot=3, checkpoints=True)
KEYS = 7


def expected_changelog(count: int) -> list[str]:
    """Flink's GroupAggFunction for COUNT(*) GROUP BY i % KEYS over 0..count-1."""
    lines = []
    for k in range(KEYS):
        n = len(range(k, count, KEYS))
        lines.append(f"+I,{k},1")
        for j in range(2, n + 1):
            lines += [f"-U,{k},{j - 1}", f"+U,{k},{j}"]
    return lines


def test_a_group_by_resumes_from_its_checkpoint_and_its_changelog_is_exactly_once(cluster: Any, tmp_path: Path) -> None:
    out, marker = tmp_path / "out", tmp_path / "fail"
    count = 4000
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(200)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 100))
    numbers = env.from_source(DataGeneratorSource(lambda i: i, count, records_per_second=1000),
                              WatermarkStrategy.no_watermarks(), "numbers") \
        .map(FailWhenMarked(str(marker))).map(lambda i: i, output_type=Types.LONG())
    t_env = StreamTableEnvironment.create(env)
    counts = t_env.from_data_stream(numbers).select((col("f0") % KEYS).alias("k")) \
        .group_by(col("k")).select(col("k"), lit(1).count.alias("n"))
    (t_env.to_changelog_stream(counts)
        .map(lambda r: f"{r.get_row_kind().short_string()},{r.k},{r.n}", output_type=Types.STRING())
        .sink_to(FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build()))
    summary = fail_after_checkpoints(cluster.address, env, "table group by fails after checkpoints", marker)
    assert JobStatus.from_proto(summary.status) is JobStatus.FINISHED, summary.failure.message
    assert not marker.exists() and summary.num_restarts == 1
    assert summary.checkpoints.latest_restored_id >= 2, summary.checkpoints  # resumed from a checkpoint
    lines = visible_lines(out)
    assert len(lines) == len(set(lines)), "a changelog line was written twice"
    assert sorted(lines) == sorted(expected_changelog(count))
