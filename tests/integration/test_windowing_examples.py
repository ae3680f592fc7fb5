"""The windowing and event-time example programs, run as a user runs them (``python examples/...``,
embedded cluster), against the output PyFlink prints for the same programs.

Expected output is derived here from Flink's window semantics, by hand (in the comments) or by a
few lines of independent computation, never from Millstream's implementation:

- a tumbling window of size s holds [t - t mod s, + s); a sliding one (size s, slide d) every
  start k*d with start <= t < start + s; an element's session window is [t, t + gap) and windows
  merge when they intersect, ends inclusive (Flink's ``TimeWindow.intersects``);
- with the default EventTimeTrigger a window fires once the watermark reaches end - 1; a key's
  windows fire in that order; the end of a bounded input brings the watermark +inf;
- ``for_monotonous_timestamps`` gives watermark max - 1, ``for_bounded_out_of_orderness(b)`` max - b - 1,
  emitted every 200 ms: a ``from_collection`` of a few records is read in one go, so no watermark
  falls between its records and timers fire at the end of the input;
- PyFlink prints a typed tuple as Java's ``(a,b)``, an untyped record as Python's ``str``, and
  prefixes ``N> `` when the printing operator runs with parallelism > 1.

``MILLSTREAM_PYFLINK_EXAMPLES=<flink>/flink-python/pyflink/examples/datastream`` also runs PyFlink's
own copies of the programs, with ``pyflink`` replaced by ``millstream`` in their imports, against the
same expected output.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .harness import EXAMPLES, ROOT, run_example

HEADER = "Printing result to stdout. Use --output to specify output path."


# -- independent window arithmetic (Flink's rules) ------------------------------------------------


def tumbling_counts(timestamps: list[int], size: int) -> list[tuple[int, int, int]]:
    counts: dict[int, int] = {}
    for t in timestamps:
        start = t - t % size
        counts[start] = counts.get(start, 0) + 1
    return [(start, start + size, n) for start, n in sorted(counts.items())]


def sliding_counts(timestamps: list[int], size: int, slide: int) -> list[tuple[int, int, int]]:
    counts: dict[int, int] = {}
    for t in timestamps:
        start = t - t % slide
        while start > t - size:
            counts[start] = counts.get(start, 0) + 1
            start -= slide
    return [(start, start + size, n) for start, n in sorted(counts.items())]


def session_counts(timestamps: list[int], gap_of: object) -> list[tuple[int, int, int]]:
    """Sessions in arrival order: each element opens [t, t + gap) and absorbs every session it
    intersects (ends inclusive)."""
    sessions: list[list[int]] = []  # [start, end, count]
    for t in timestamps:
        window = [t, t + gap_of(t), 1]  # type: ignore[operator]
        for s in [s for s in sessions if s[0] <= window[1] and s[1] >= window[0]]:
            sessions.remove(s)
            window = [min(s[0], window[0]), max(s[1], window[1]), s[2] + window[2]]
        sessions.append(window)
    return sorted((s, e, n) for s, e, n in sessions)


def java_tuple(*fields: object) -> str:
    return "(" + ",".join(str(f) for f in fields) + ")"


# -- the programs PyFlink ships ---------------------------------------------------------------------

HI = [1, 2, 3, 4, 5, 8, 9, 15]  # the timestamps of ('hi', t) in the tumbling/sliding/continuous programs


def expected_tumbling() -> list[str]:
    # [0,5): 1 2 3 4 | [5,10): 5 8 9 | [15,20): 15
    rows = tumbling_counts(HI, 5)
    assert rows == [(0, 5, 4), (5, 10, 3), (15, 20, 1)]
    return [HEADER] + [java_tuple("hi", *row) for row in rows]


def expected_sliding() -> list[str]:
    # size 5, slide 2: starts -2 0 2 4 6 8 12 14 (10 holds nothing: [10,15) has no reading)
    rows = sliding_counts(HI, 5, 2)
    assert rows[0] == (-2, 3, 2) and (10, 15, 0) not in rows and len(rows) == 8
    return [HEADER] + [java_tuple("hi", *row) for row in rows]


def expected_session() -> list[str]:
    # gap 5: 1..4 -> [1,9), 8 joins -> [1,13), 9 -> [1,14); 15 opens [15,20) (14 < 15: apart)
    rows = session_counts([1, 2, 3, 4, 8, 9, 15], lambda t: 5)
    assert rows == [(1, 14, 6), (15, 20, 1)]
    return [HEADER] + [java_tuple("hi", *row) for row in rows]


def expected_dynamic_session() -> list[str]:
    # gap = t: [1,2) [2,4) touch (2 <= 2) and merge, then [3,6) [4,8) -> [1,8); 9 opens [9,18),
    # twice; 15 opens [15,30) and merges -> [9,30)
    rows = session_counts([1, 2, 3, 4, 9, 9, 15], lambda t: t)
    assert rows == [(1, 8, 4), (9, 30, 3)]
    return [HEADER] + [java_tuple("hi", *row) for row in rows]


def expected_continuous() -> list[str]:
    # Tumbling 10 with ContinuousEventTimeTrigger.of(5). Window [0,10) (max timestamp 9): its first
    # element (t=1) registers the window-end timer 9 and the first fire at min(1 - 1 % 5 + 5, 9) = 5.
    # All 8 readings are in before the watermark moves, so at the final watermark: timer 5 FIREs
    # with the 7 readings of [0,10) (and sets the next fire to min(10, 9) = 9, already set); timer 9
    # (= max timestamp) FIREs again with the same 7 (FIRE does not purge), then the window is
    # cleaned up. Window [10,20): 15 sets next fire min(15 + 5, 19) = 19 = its end timer: one FIRE.
    in_first = len([t for t in HI if t < 10])
    return [HEADER, java_tuple("hi", 0, 10, in_first), java_tuple("hi", 0, 10, in_first), java_tuple("hi", 10, 20, 1)]


def expected_tumbling_count() -> list[str]:
    # count_window(3) per key: hi gets 1 3 5 -> fires at its 3rd (the 5th record) with 9; hello
    # gets 2 4 6 -> fires at the 6th record with 12; hello's 4th value (6) waits for two more forever.
    return [HEADER, "(hi,9)", "(hello,12)"]


PAYMENTS = [(1000, "Alice", 110.1), (4000, "Bob", 30.2), (3000, "Alice", 20.0), (2000, "Bob", 53.1),
            (5000, "Alice", 13.1), (3000, "Bob", 3.1), (7000, "Bob", 16.1), (10000, "Alice", 20.1)]


def expected_event_time_timer() -> dict[str, list[str]]:
    # Each payment sets a timer at t + 2000 on its name (timers are unique per key and time): Alice
    # 3000 5000 7000 12000, Bob 6000 4000 5000 9000 -> 4 each. The 8 payments are in before the
    # watermark (max - 2001) moves, so every timer fires at the end of the input and emits the
    # name's final sum, summed in arrival order as the function does.
    out: dict[str, list[str]] = {}
    for name in ("Alice", "Bob"):
        total = 0
        timers = set()
        for t, who, amount in PAYMENTS:
            if who == name:
                total += amount
                timers.add(t + 2000)
        out[name] = [str((name, total))] * len(timers)
    return out


def by_key(lines: list[str]) -> dict[str, list[str]]:
    """Lines of a parallel printer: ``N> record``, grouped by the record's first field, prefix dropped."""
    out: dict[str, list[str]] = {}
    for line in lines:
        prefix, sep, record = line.partition("> ")
        assert sep and prefix.isdigit(), line
        key = re.match(r"\(\'?([^,']+)", record)
        assert key, record
        out.setdefault(key.group(1), []).append(record)
    return out


PYFLINK_PROGRAMS = {
    "windowing/tumbling_time_window.py": expected_tumbling,
    "windowing/sliding_time_window.py": expected_sliding,
    "windowing/session_with_gap_window.py": expected_session,
    "windowing/session_with_dynamic_gap_window.py": expected_dynamic_session,
    "windowing/tumbling_time_window_with_continuous_trigger.py": expected_continuous,
    "windowing/tumbling_count_window.py": expected_tumbling_count,
}


@pytest.mark.parametrize("program", sorted(PYFLINK_PROGRAMS))
def test_pyflink_windowing_program_prints_pyflinks_output(program: str) -> None:
    assert run_example(program) == PYFLINK_PROGRAMS[program]()


def test_tumbling_time_window_writes_the_same_records_with_a_file_sink(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert run_example("windowing/tumbling_time_window.py", "--output", str(out)) == []
    files = [p for p in out.rglob("*") if p.is_file() and not p.name.startswith(".")]
    assert files and all(p.name.startswith("prefix") and p.name.endswith(".ext") for p in files)
    assert [line for p in sorted(files) for line in p.read_text().splitlines()] == expected_tumbling()[1:]


def test_event_time_timer_emits_each_names_sum_once_per_timer() -> None:
    assert by_key(run_example("event_time_timer.py")) == expected_event_time_timer()


# -- PyFlink's own copies, when a Flink checkout is named ---------------------------------------------


def _pyflink_examples() -> Path | None:
    where = os.environ.get("MILLSTREAM_PYFLINK_EXAMPLES")
    return Path(where) if where else None


@pytest.mark.skipif(_pyflink_examples() is None, reason="MILLSTREAM_PYFLINK_EXAMPLES names no PyFlink examples directory")
@pytest.mark.parametrize("program", sorted([*PYFLINK_PROGRAMS, "event_time_timer.py"]))
def test_pyflinks_own_program_with_its_imports_changed(program: str, tmp_path: Path) -> None:
    original = _pyflink_examples() / program  # type: ignore[operator]
    ported = tmp_path / Path(program).name
    ported.write_text(re.sub(r"\bpyflink\b", "millstream", original.read_text()))
    env = dict(os.environ)
    env.pop("MILLSTREAM_JOBMANAGER", None)
    proc = subprocess.run([sys.executable, str(ported)], capture_output=True, text=True, timeout=240, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    if program == "event_time_timer.py":
        assert by_key(lines) == expected_event_time_timer()
    else:
        assert lines == PYFLINK_PROGRAMS[program]()


# -- our own programs for the scenarios PyFlink ships none for -----------------------------------------


def test_allowed_lateness_refires_late_windows_and_sends_too_late_readings_aside() -> None:
    # An independent model of WindowOperator with EventTimeTrigger, tumbling 10 s, allowed lateness
    # 5 s, watermark max - 1000 - 1 emitted between readings (they come a second apart).
    readings = [(1000, 1), (3000, 2), (12000, 4), (5000, 8), (22000, 16), (7000, 32), (26000, 64)]
    size, lateness = 10_000, 5_000
    watermark, high = -(1 << 63), -(1 << 63)
    panes: dict[int, list[int]] = {}
    fired: list[str] = []
    late: list[str] = []
    for t, value in readings:
        start = t - t % size
        if start + size - 1 + lateness <= watermark:  # the window is gone: late data
            late.append(f"too late> {java_tuple('sensor-1', t, value)}")
        else:
            panes.setdefault(start, []).append(value)
            if start + size - 1 <= watermark:  # EventTimeTrigger: behind the watermark -> FIRE now
                fired.append(f"window> {java_tuple('sensor-1', start, sum(panes[start]))}")
        high = max(high, t)
        new_watermark = high - 1000 - 1
        for s in sorted(panes):  # windows whose end the watermark passes fire once; cleanup later
            if s + size - 1 <= new_watermark and not s + size - 1 <= watermark:
                fired.append(f"window> {java_tuple('sensor-1', s, sum(panes[s]))}")
        watermark = new_watermark
        panes = {s: v for s, v in panes.items() if s + size - 1 + lateness > watermark}
    fired += [f"window> {java_tuple('sensor-1', s, sum(panes[s]))}" for s in sorted(panes) if s + size - 1 > watermark]
    assert fired == ["window> (sensor-1,0,3)", "window> (sensor-1,0,11)", "window> (sensor-1,10000,4)", "window> (sensor-1,20000,80)"]
    assert late == ["too late> (sensor-1,7000,32)"]

    lines = run_example("windowing/allowed_lateness.py")
    assert [line for line in lines if line.startswith("window> ")] == fired
    assert [line for line in lines if not line.startswith("window> ")] == late


def test_sliding_count_window_fires_each_window_once_it_is_full() -> None:
    # PyFlink's count_window(3, 2): window k of a key holds its elements 2k..2k+2 and fires when full.
    values = [("a", 1), ("a", 2), ("b", 10), ("a", 3), ("b", 20), ("a", 4), ("b", 30), ("a", 5), ("a", 6), ("a", 7)]
    seen: dict[str, list[int]] = {}
    expected = []
    for key, value in values:
        seen.setdefault(key, []).append(value)
        n = len(seen[key]) - 1  # this element's index within its key
        if n >= 2 and (n - 2) % 2 == 0:  # it completes window (n - 2) / 2
            expected.append(java_tuple(key, sum(seen[key][n - 2 : n + 1])))
    assert expected == ["(a,6)", "(b,60)", "(a,12)", "(a,18)"]
    assert run_example("windowing/sliding_count_window.py") == expected


def test_process_window_function_keeps_per_window_and_per_key_state() -> None:
    # Hand derivation (trigger: FIRE every 2nd element of a window, and at its end; the watermark,
    # max - 5001, reaches no window end before the input ends):
    #   ada [0,10): 1000 2000 -> #1 (2 clicks, ada's 1st firing); 4000 6000 -> #2 (4, 2nd)
    #   bob [0,10): 2500 7000 -> #1 (2, bob's 1st)
    #   ada [10,20): 12000 13000 -> #1 (2, ada's 3rd)
    #   end: ada [0,10) #3 (4, 4th); bob [0,10) #2 (3 with 9000, 2nd); ada [10,20) #2 (2, 5th)
    lines = run_example("windowing/process_window_state.py")
    per_user: dict[str, list[str]] = {}
    for line in lines:
        per_user.setdefault(line.strip("()").split(",")[0], []).append(line)
    assert per_user == {
        "ada": ["(ada,0,1,2,1)", "(ada,0,2,4,2)", "(ada,10000,1,2,3)", "(ada,0,3,4,4)", "(ada,10000,2,2,5)"],
        "bob": ["(bob,0,1,2,1)", "(bob,0,2,3,2)"],
    }
    # bob's early firing comes between ada's second and third, in arrival order
    assert lines[:4] == ["(ada,0,1,2,1)", "(ada,0,2,4,2)", "(bob,0,1,2,1)", "(ada,10000,1,2,3)"]


def test_every_windowing_example_is_tested() -> None:
    tested = set(PYFLINK_PROGRAMS) | {"windowing/allowed_lateness.py", "windowing/sliding_count_window.py",
                                      "windowing/process_window_state.py"}
    assert {str(p.relative_to(EXAMPLES)) for p in (EXAMPLES / "windowing").glob("*.py")} == tested
