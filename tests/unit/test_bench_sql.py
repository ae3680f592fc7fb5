"""bench/sql.py's pure parts: the README figures of a run, and the result check (Spark's append
mode may leave out exactly the windows its last watermark had not closed, nothing else)."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))

import sql  # noqa: E402  (bench/sql.py)


def test_headline_ratios_are_millstream_over_the_other_engine_job_only_and_end_to_end() -> None:
    runs = {"load": 3.5, "wordcount": {"millstream": {"wall_s": 10.0, "startup_s": 5.0},
                                       "pyflink": {"wall_s": 20.0, "startup_s": 5.0}},
            "tumble": {"millstream": {"wall_s": 30.0, "startup_s": 5.0}, "spark": {"wall_s": 15.0, "startup_s": 20.0}}}
    by_key = {f.key: f.value for f in sql.headline(runs)}
    assert by_key["sql.wordcount_vs_pyflink"] == pytest.approx(0.5)
    assert by_key["sql.wordcount_end_to_end_vs_pyflink"] == pytest.approx(15 / 25)
    assert by_key["sql.tumble_vs_spark"] == pytest.approx(2.0)
    assert "sql.wordcount_vs_spark" not in by_key
    assert sql.headline({"wordcount": {}, "tumble": {}}) == []


def test_check_takes_spark_append_modes_closed_windows_only() -> None:
    expected = {(1, 0): 5, (1, 10_000): 7, (2, 20_000): 1}
    run = {"final_watermark": "1970-01-01T00:00:20.000Z"}  # closes [0, 10) and [10, 20), not [20, 30)
    assert sql.check("tumble", "spark", {(1, 0): 5, (1, 10_000): 7}, expected, run).startswith("exact; 1 window")
    with pytest.raises(AssertionError):
        sql.check("tumble", "spark", {(1, 0): 5}, expected, run)  # a closed window missing
    with pytest.raises(AssertionError):
        sql.check("tumble", "millstream", {(1, 0): 5, (1, 10_000): 7}, expected, {})
    assert sql.check("wordcount", "pyflink", {"a": 2}, {"a": 2}, {}) == "exact"
