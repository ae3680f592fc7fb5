"""``millstream plan JOB.py``: the JobGraph a script would submit, without running it."""
from __future__ import annotations

import json
import textwrap

import pytest

from millstream.client.cli import main

JOB = textwrap.dedent("""
    import sys
    from millstream.datastream import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
    counts = env.from_sequence(1, 10).map(lambda x: (x % 3, 1)).key_by(lambda p: p[0]).sum(1)
    with counts.execute_and_collect("planned") as results:
        raise AssertionError("plan must not run the job")
""")


@pytest.fixture
def job(tmp_path):
    path = tmp_path / "job.py"
    path.write_text(JOB)
    return str(path)


def test_plan_prints_the_chained_vertices_and_their_exchange(job, capsys) -> None:
    assert main(["plan", job]) == 0
    out = capsys.readouterr().out
    assert "Job: planned" in out
    assert "[2] Source: Sequence Source -> Map" in out
    assert "[2] Keyed Aggregation" in out and "<- HASH from Source: Sequence Source -> Map" in out
    # Flink's collect sink runs at parallelism 1 whatever the job's parallelism
    assert "[1] Sink: Collect Sink" in out and "<- REBALANCE from Keyed Aggregation" in out


def test_plan_json_and_script_arguments(job, capsys) -> None:
    assert main(["plan", job, "--json", "3"]) == 0
    graph = json.loads(capsys.readouterr().out)
    assert [v["parallelism"] for v in graph["vertices"]] == [3, 3, 1]
    assert graph["vertices"][1]["inputs"][0]["ship_strategy"] == "HASH"


def test_plan_dot_renders_for_graphviz(job, capsys) -> None:
    assert main(["plan", job, "--dot"]) == 0
    out = capsys.readouterr().out
    assert out.startswith('digraph "planned" {') and '[label="HASH\\nALL_TO_ALL"]' in out


def test_a_missing_job_file_is_a_clear_error(capsys) -> None:
    assert main(["plan", "/nonexistent/job.py"]) == 2
    assert "Job file not found: /nonexistent/job.py" in capsys.readouterr().err
