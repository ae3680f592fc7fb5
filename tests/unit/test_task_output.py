"""A task attempt's captured output: the worker-side capture and the TaskManager's bounded store."""
from __future__ import annotations

import logging
import sys

import pytest

from millstream.runtime import config as cfg
from millstream.taskmanager.task_output import OutputCapture, TaskOutputStore
from millstream.taskmanager.taskmanager import task_output_store


def test_prints_and_log_records_are_captured_tagged_with_time_and_level() -> None:
    sent: list[tuple[list[str], int]] = []
    saved_out, saved_err = sys.stdout, sys.stderr
    with OutputCapture(lambda lines, dropped: sent.append((lines, dropped)), interval_s=60):
        print("hello from map")
        print("oops", file=sys.stderr)
        logging.getLogger("user.fn").info("seen %d", 3)
        logging.getLogger("user.fn").debug("below INFO: not kept")
        sys.stdout.write("no newline at the end")
    assert sys.stdout is saved_out and sys.stderr is saved_err
    lines = [line for batch, _ in sent for line in batch]
    assert len(lines) == 4, lines
    assert lines[0].endswith(" INFO stdout: hello from map")
    assert lines[1].endswith(" ERROR stderr: oops")
    assert lines[2].endswith(" INFO user.fn: seen 3")
    assert lines[3].endswith(" INFO stdout: no newline at the end")
    assert lines[0][:4].isdigit() and lines[0][10] == " "  # "YYYY-MM-DD HH:MM:SS,mmm ..."
    assert logging.getLogger().handlers == [h for h in logging.getLogger().handlers if "Record" not in type(h).__name__]


def test_the_store_keeps_the_newest_bytes_per_attempt_and_counts_the_rest() -> None:
    store = TaskOutputStore(max_chars=30, retained_ended=2)
    store.started(b"a")
    assert store.read(b"a") == ([], 0)
    store.add(b"a", ["0123456789", "abcdefghij", "ABCDEFGHIJ", "klmnopqrst"], dropped=2)
    lines, dropped = store.read(b"a")  # type: ignore[misc]
    assert lines == ["abcdefghij", "ABCDEFGHIJ", "klmnopqrst"] and dropped == 3
    assert store.read(b"unknown") is None


def test_ended_attempts_beyond_the_retained_number_are_forgotten_oldest_first() -> None:
    store = TaskOutputStore(max_chars=100, retained_ended=2)
    for attempt in (b"1", b"2", b"3", b"running"):
        store.add(attempt, [attempt.decode()])
    for attempt in (b"1", b"2", b"3"):
        store.ended(attempt)
    assert store.read(b"1") is None
    assert store.read(b"2") == (["2"], 0) and store.read(b"3") == (["3"], 0)
    assert store.read(b"running") == (["running"], 0)  # running attempts are always kept


def test_the_store_bounds_come_from_the_configuration() -> None:
    store = task_output_store(cfg.load_configuration(None, dynamic_properties=[
        "taskmanager.task-output.max-size=64kb", "taskmanager.task-output.retained-attempts=7"]))
    assert (store.max_chars, store.retained_ended) == (64 << 10, 7)
    with pytest.raises(cfg.ConfigurationError, match="taskmanager.task-output.retained-attempts"):
        task_output_store(cfg.load_configuration(None, dynamic_properties=["taskmanager.task-output.retained-attempts=0"]))


def test_captures_on_two_threads_each_get_their_own_threads_lines() -> None:
    """A slot's subtasks share one worker (placement slot), each on its thread: the process-wide
    swap routes every print and log record to the capture of the thread that made it."""
    import threading

    saved_out, saved_err = sys.stdout, sys.stderr
    sent: dict[str, list[str]] = {"a": [], "b": []}
    inside, leave = threading.Barrier(2), threading.Barrier(2)

    def subtask(name: str) -> None:
        with OutputCapture(lambda lines, dropped: sent[name].extend(lines), interval_s=60):
            inside.wait(10)  # both captures active at once
            print(f"print of {name}")
            logging.getLogger("user").warning("log of %s", name)
            leave.wait(10)

    threads = [threading.Thread(target=subtask, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert sys.stdout is saved_out and sys.stderr is saved_err
    for name, other in (("a", "b"), ("b", "a")):
        assert [line.split(" ", 3)[3] for line in sent[name]] == [f"stdout: print of {name}", f"user: log of {name}"]
        assert not any(other in line.rsplit(" ", 1)[1] for line in sent[name])
