"""bench/table.py: the README's generated benchmark table (render, parse, compare, partial update)."""
from __future__ import annotations

import math
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))

from table import (  # noqa: E402
    BEGIN,
    END,
    Block,
    Figure,
    Generated,
    compare,
    describe,
    format_value,
    merge,
    parse_block,
    parse_value,
    previous_value,
    render_block,
    replace_block,
)

FIGURES = [
    Figure("wordcount.millstream_job_s", "word count job only, Millstream", 8.93, "s", "lower"),
    Figure("wordcount.vs_dataframe", "word count job only, Millstream / PySpark DataFrame", 1.19, "x", "lower", "≤ 1.0x"),
    Figure("exchange.records_per_s", "exchange, records/s", 3_412_345.0, "records/s", "higher", "≥ 3 M"),
    Figure("latency.p50_ms", "latency p50", 0.1, "ms", "lower"),
    Figure("startup.embedded_minus_spark_s", "embedded start-up minus Spark's", -0.25, "s", "lower", "≤ +1 s"),
]
RUN = Generated(("wordcount", "exchange", "latency", "startup"), "generated 2026-11-26 by `python bench/run.py`")

README = "# Title\n\n## Performance\n\nIntro paragraph.\n\nProse.\n\n## Next\n"


def test_render_then_parse_gives_back_every_figure() -> None:
    block = render_block(FIGURES, [RUN])
    parsed = parse_block("before\n" + block + "\nafter")
    assert list(parsed.rows) == [f.key for f in FIGURES]
    for f in FIGURES:
        label, value, unit, goal = parsed.rows[f.key]
        assert (label, unit, goal) == (f.label, f.unit, f.goal)
        assert value == pytest.approx(f.value, rel=5e-3)  # three significant figures
    assert parsed.generated == [RUN]


def test_values_keep_three_significant_figures_and_units() -> None:
    assert format_value(3_412_345.0, "records/s") == "3,412,345 records/s"
    assert format_value(8.93, "s") == "8.93 s"
    assert format_value(0.1234, "ms") == "0.123 ms"
    assert format_value(1.19, "x") == "1.19x"
    assert format_value(-0.25, "s") == "-0.250 s"
    assert parse_value("1.19x") == (1.19, "x")
    assert parse_value("**3,412,345 records/s**") == (3412345.0, "records/s")
    assert parse_value("-0.250 s") == (-0.25, "s")
    assert parse_value("n/a") is None
    assert math.isnan(parse_value(format_value(float("nan"), "s"))[0])


def test_ratio_and_direction() -> None:
    lower = Figure("wordcount.millstream_job_s", "job", 9.0, "s", "lower")
    c = compare(lower, 10.0)
    assert c.ratio == pytest.approx(0.9) and c.verdict == "better"
    assert compare(lower, 8.0).verdict == "worse"
    assert compare(lower, 9.05).verdict == "same"
    higher = Figure("exchange.records_per_s", "rate", 3.0e6, "records/s", "higher")
    assert compare(higher, 2.0e6).verdict == "better"
    assert compare(higher, 4.0e6).verdict == "worse"
    assert "1.50x, better (higher is better)" in describe(compare(higher, 2.0e6))


def test_signed_figures_compare_by_difference() -> None:
    f = Figure("startup.embedded_minus_spark_s", "minus", -0.25, "s", "lower")
    c = compare(f, 0.45)
    assert c.ratio is None and c.difference == pytest.approx(-0.7) and c.verdict == "better"
    assert "-0.7 s" in describe(c)
    assert compare(Figure("checkpoints.loss_pct", "loss", 5.0, "%", "lower"), 0.0).verdict == "worse"
    # a signed figure compares by difference even when both values are positive
    small = compare(Figure("startup.paired_difference_s", "paired", 0.3, "s", "lower", signed=True), 0.03)
    assert small.ratio is None and small.difference == pytest.approx(0.27) and small.verdict == "worse"


def test_no_previous_figure_is_new() -> None:
    c = compare(FIGURES[0], None)
    assert c.verdict == "new" and c.ratio is None
    assert "no previous figure" in describe(c)


def test_a_previous_figure_in_another_unit_is_no_previous_figure() -> None:
    block = parse_block(render_block(FIGURES, [RUN]))
    assert previous_value(block, FIGURES[0]) == pytest.approx(8.93)
    assert previous_value(block, Figure("wordcount.millstream_job_s", "job", 9000.0, "ms", "lower")) is None
    assert previous_value(block, Figure("wordcount.other_s", "other", 1.0, "s", "lower")) is None


def test_missing_block_means_no_previous_figures() -> None:
    assert parse_block(README) == Block({}, [])
    assert parse_block("x " + BEGIN + " never closed") == Block({}, [])


def test_garbled_rows_are_skipped_not_fatal() -> None:
    text = "\n".join([BEGIN, "| figure | value | goal | key |", "|---|---|---|---|",
                      "| a | n/a | | `a.x` |", "| b | 2.5 s | | `b.y` |", "| c | no key |", "- not a generated line", END])
    assert parse_block(text).rows == {"b.y": ("b", 2.5, "s", "")}


def test_partial_update_keeps_the_other_benchmarks_rows_and_says_which_run_made_them() -> None:
    first = replace_block(README, render_block(FIGURES, [RUN]))
    new = [Figure("exchange.records_per_s", "exchange, records/s", 2_000_000.0, "records/s", "higher", "≥ 3 M")]
    second_run = Generated(("exchange",), "generated later by `python bench/run.py --only exchange`")
    updated = replace_block(first, merge(parse_block(first), new, second_run, order=["wordcount", "exchange", "latency", "startup"]))
    parsed = parse_block(updated)
    assert list(parsed.rows) == [f.key for f in FIGURES]  # same rows, same order
    assert parsed.rows["exchange.records_per_s"][1] == 2_000_000.0
    assert parsed.rows["wordcount.millstream_job_s"][1] == pytest.approx(8.93)
    assert parsed.rows["latency.p50_ms"][1] == pytest.approx(0.1)
    assert parsed.generated == [Generated(("wordcount", "latency", "startup"), RUN.text), second_run]
    assert updated.startswith("# Title\n\n## Performance\n\nIntro paragraph.\n\n" + BEGIN)
    assert updated.endswith(END + "\n\nProse.\n\n## Next\n")


def test_a_run_covering_every_benchmark_leaves_one_generated_line() -> None:
    block = merge(parse_block(render_block(FIGURES, [RUN])), FIGURES, RUN)
    assert parse_block(block).generated == [RUN]


def test_new_figure_of_a_measured_benchmark_is_added() -> None:
    extra = Figure("exchange.mb_per_s", "exchange, MB/s", 340.0, "MB/s", "higher")
    run = Generated(("exchange",), "later")
    parsed = parse_block(merge(parse_block(render_block(FIGURES, [RUN])), [FIGURES[2], extra], run))
    assert parsed.rows["exchange.mb_per_s"][1] == 340.0


def test_block_goes_after_the_performance_intro_when_missing() -> None:
    updated = replace_block(README, render_block(FIGURES[:1], [RUN]))
    assert updated.index("Intro paragraph.") < updated.index(BEGIN) < updated.index("Prose.")
    assert replace_block("no heading", "B") == "no heading\n\nB\n"


def test_figure_rejects_bad_direction_and_keys() -> None:
    with pytest.raises(ValueError, match="better"):
        Figure("a.b", "x", 1.0, "s", "smaller")
    with pytest.raises(ValueError, match="benchmark.name"):
        Figure("nodot", "x", 1.0, "s", "lower")


def _readme_keys() -> set[str]:
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "README.md"), encoding="utf-8") as f:
        return set(parse_block(f.read()).rows)


def test_benchmark_modules_headline_figures_are_rows_of_the_readme_table() -> None:
    import checkpoints
    import ha_failover
    import metrics_overhead
    import startup
    import windows

    runs = [{"leader_s": 5.0, "running_s": 7.0, "first_record_s": 6.5, "first_commit_s": 7.2, "detect_s": 1.1}]
    figures = (
        checkpoints.headline({
            "throughput": {"records": 10_000_000, "median_records_per_s_checkpointed": 1.8e6, "loss_pct": 2.0},
            "recovery": {"runs": [{"detect_s": 1.0, "running_s": 5.0, "first_commit_s": 6.0},
                                  {"detect_s": 1.2, "running_s": 4.0, "first_commit_s": 5.0}]},
            "state": {"keys": 1_000_000, "checkpoints": [{"duration_ms": 200, "size_bytes": 6_900_000}], "sync_part_s": [0.15, 0.19]},
        })
        + ha_failover.headline(runs)
        + metrics_overhead.headline({"loss_pct": 1.0, "records": 20_000_000, "median_records_per_s_on": 2.9e6,
                                     "poll": {"poll_us_added": 0.1}})
        + startup.headline({"spark_ready_s": 4.6, "embedded_ready_s": 5.1, "paired_ready_difference_s": 0.1, "cluster_ready_s": 7.0})
        + windows.headline({"events": 5_000_000, "millstream": {"wall_s": 15.0, "startup_s": 8.0},
                            "spark": {"wall_s": 20.0, "startup_s": 6.0}})
    )
    keys = [f.key for f in figures]
    assert len(keys) == len(set(keys)) == 24
    assert set(keys) <= _readme_keys()
    by_key = {f.key: f for f in figures}
    assert by_key["checkpoints.recovery_running_after_detection_s"].value == pytest.approx(3.4)  # median of 4.0 and 2.8
    assert by_key["startup.embedded_minus_spark_s"].value == pytest.approx(0.5)
    assert {f.key for f in figures if f.signed} == {"startup.embedded_minus_spark_s", "startup.paired_difference_s",
                                                    "startup.cluster_start_minus_spark_s", "checkpoints.loss_pct",
                                                    "metrics.loss_pct", "metrics.poll_us_added"}
    assert by_key["windows.end_to_end_vs_spark"].value == pytest.approx(23 / 26)
    assert ha_failover.headline(None) == [] and windows.headline({"events": 1}) == []
