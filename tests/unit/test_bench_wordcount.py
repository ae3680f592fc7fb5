"""bench/run.py's word count: the faster DataFrame variant per round, the floors, the session jobs,
the two-process Counter's halves, and the rows its figures give the README's table."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))

import run  # noqa: E402  (bench/run.py)
from table import Generated, merge, parse_block  # noqa: E402


def _round(**figures: float) -> dict[str, float]:
    base = {"counter": 6.0, "counter2": 3.5, "user_fn2": 5.0, "rdd": 16.0, "frame_regex": 9.0, "frame_literal": 8.0, "mill": 8.0,
            "e2e_frame": 15.0, "e2e_mill": 14.0, "spark_startup": 5.0, "mill_startup": 5.5}
    return {**base, **figures}


def test_the_faster_split_is_the_one_with_the_shorter_job() -> None:
    assert run.faster_split({"regex": 9.0, "literal": 7.9}) == "literal"
    assert run.faster_split({"regex": 7.5, "literal": 7.9}) == "regex"
    assert run.faster_split({"regex": 8.0, "literal": 8.0}) == "regex"  # a tie keeps the first


def test_a_missing_split_is_named() -> None:
    with pytest.raises(ValueError, match="literal"):
        run.faster_split({"regex": 9.0})


def test_each_round_is_compared_with_its_own_faster_dataframe_variant() -> None:
    rounds = [_round(frame_regex=9.0, frame_literal=8.0, mill=8.0),   # literal faster: 1.0x
              _round(frame_regex=7.0, frame_literal=10.0, mill=7.7),  # regex faster: 1.1x
              _round(frame_regex=9.5, frame_literal=7.0, mill=8.4)]   # literal faster: 1.2x
    m = run.wordcount_summary(rounds)
    assert m["frame"] == pytest.approx(7.0)  # median of 8.0, 7.0, 7.0
    assert m["frame_regex"] == pytest.approx(9.0) and m["frame_literal"] == pytest.approx(8.0)
    assert m["vs_frame"] == pytest.approx(1.1)  # the median of the rounds' own ratios, not of the medians
    assert m["vs_rdd"] == pytest.approx(8.0 / 16.0)


def test_floors_one_core_halved_and_two_processes() -> None:
    m = run.wordcount_summary([_round(counter=6.0, counter2=3.6, user_fn2=4.5, mill=7.5)])
    assert m["vs_floor"] == pytest.approx(7.5 / 3.0)
    assert m["vs_two_process_floor"] == pytest.approx(7.5 / 3.6)
    assert m["vs_user_function_floor"] == pytest.approx(7.5 / 4.5)
    assert m["user_function_floor_vs_floor"] == pytest.approx(4.5 / 3.0)


def test_session_jobs_report_the_first_apart_from_the_median_of_the_rest() -> None:
    session = {"jobs": [{"wall_s": 9.5}, {"wall_s": 8.1}, {"wall_s": 7.7}, {"wall_s": 7.9}]}
    m = run.wordcount_summary([_round()], session)
    assert m["session_first"] == 9.5 and m["session_next"] == pytest.approx(7.9)
    keys = {f.key for f in run.wordcount_figures(m, 200)}
    assert {"wordcount.session_first_job_s", "wordcount.session_next_job_s"} <= keys
    assert not {k for k in (f.key for f in run.wordcount_figures(run.wordcount_summary([_round()]), 200)) if "session" in k}


def test_no_rounds_is_an_error() -> None:
    with pytest.raises(ValueError, match="no word count rounds"):
        run.wordcount_summary([])


def test_halves_split_on_a_line_boundary_and_count_every_word_once(tmp_path) -> None:
    path = tmp_path / "corpus.txt"
    lines = [" ".join(f"w{(i * 7 + j) % 13}" for j in range(1 + i % 5)) for i in range(101)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    middle, first_lines = run.halves(str(path))
    data = path.read_bytes()
    assert data[middle - 1 : middle] == b"\n" and data[:middle].count(b"\n") == first_lines
    assert abs(middle - len(data) / 2) < max(len(line) for line in lines) + 1
    first, second = run._counts(str(path), 0, first_lines), run._counts(str(path), middle)
    assert sum(first.values()) == sum(len(line.split()) for line in lines[:first_lines])
    first.update(second)
    assert first == run._counts(str(path))
    two, one = run.measure_counter_two(str(path)), run.measure_counter(str(path))
    assert (two["words"], two["distinct"], two["digest"]) == (one["words"], one["distinct"], one["digest"])
    # Through the job's own split_words: the same counts (its pairs' words are the line's words).
    assert run._counts(str(path), user_function=True) == first
    user = run.measure_counter_two(str(path), "true")
    assert (user["words"], user["distinct"], user["digest"]) == (one["words"], one["distinct"], one["digest"])


def test_the_new_figures_become_rows_of_the_readme_table() -> None:
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "README.md"), encoding="utf-8") as f:
        previous = parse_block(f.read())
    session = {"jobs": [{"wall_s": 9.5}, {"wall_s": 8.1}]}
    figures = run.wordcount_figures(run.wordcount_summary([_round()], session), 200)
    parsed = parse_block(merge(previous, figures, Generated(("wordcount",), "now"), order=run.BENCHMARKS))
    assert {f.key for f in figures} <= set(parsed.rows)
    assert set(previous.rows) <= set(parsed.rows)  # the other benchmarks' rows stay
    for key in ("wordcount.dataframe_regex_job_s", "wordcount.dataframe_literal_job_s", "wordcount.counter_two_processes_s",
                "wordcount.vs_floor", "wordcount.vs_two_process_floor"):
        assert key in parsed.rows
    assert parsed.rows["wordcount.vs_floor"][1] == pytest.approx(8.0 / 3.0, rel=5e-3)
