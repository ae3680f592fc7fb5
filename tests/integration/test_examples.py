"""Our example programs, run as a user runs them (``python examples/X.py``, embedded cluster),
with their exact output. The PyFlink-shaped ones cover named rows, keyed state, side outputs and
the file connectors."""
from __future__ import annotations

from pathlib import Path

from .harness import run_example



def test_basic_operations_on_named_rows() -> None:
    assert run_example("basic_operations.py") == [
        "-- map",
        "(1, 144)",
        "(2, 42)",
        "(3, 96)",
        "(4, 72)",
        "-- filter",
        "(2, 42)",
        "(4, 72)",
        "-- running total per country",
        "(UK,120)",
        "(FI,35)",
        "(US,80)",
        "(UK,180)",
        "-- rows as they are",
        '+I[1, {"customer": "ada", "total": 120, "ship_to": {"country": "UK", "city": "London"}}]',
    ]


def test_state_access_keeps_running_statistics_per_key() -> None:
    lines = run_example("state_access.py")
    # parallelism 2: each line is prefixed by its subtask; per key the order is the input's
    by_key: dict[str, list[str]] = {}
    for line in lines:
        prefix, record = line.split("> ", 1)
        assert prefix in {"1", "2"}
        by_key.setdefault(record.strip("()").split(",")[0], []).append(record)
    assert by_key == {
        "kitchen": ["(kitchen,1,21.5,22)", "(kitchen,2,22.0,22)", "(kitchen,3,21.87,22)"],
        "attic": ["(attic,1,30.0,30)", "(attic,2,29.0,28)"],
        "cellar": ["(cellar,1,12.0,12)"],
    }


def test_process_json_routes_malformed_events_to_a_side_output() -> None:
    lines = run_example("process_json.py")
    assert [line for line in lines if line.startswith("event> ")] == [
        'event> {"action": "login", "ms": 1000, "spend": false, "user": "ada"}',
        'event> {"action": "buy", "amount": 30, "ms": 4000, "spend": true, "user": "ada"}',
        'event> {"action": "buy", "amount": 12, "ms": 5000, "spend": true, "user": "grace"}',
    ]
    assert [line for line in lines if not line.startswith("event> ")] == ["malformed> not json at all"]


def test_word_count_from_a_file_source_to_a_file_sink(tmp_path: Path) -> None:
    text = tmp_path / "in.txt"
    text.write_text("to be or not to be\nthat is the question\n")
    out = tmp_path / "out"
    run_example("word_count.py", "--input", str(text), "--output", str(out), "--parallelism", "2")
    finished = [p for p in out.rglob("*") if p.is_file() and not p.name.startswith(".")]
    assert finished and not [p for p in out.rglob(".*") if p.is_file()]  # nothing left in progress
    lines = sorted(line for p in finished for line in p.read_text().splitlines())
    assert lines == sorted(["(to,2)", "(be,2)", "(or,1)", "(not,1)", "(that,1)", "(is,1)", "(the,1)", "(question,1)"])
