"""PyFlink 2.3's own Kafka example programs run on Millstream with only ``pyflink`` changed to
``millstream`` (their ``env.add_jars(...)`` lines included), against a Kafka-protocol broker on
``localhost:9092`` as they expect, and print what PyFlink prints.

The programs are read from the apache-flink 2.3.0 wheel that ``make install`` puts in
``.venv/flink-tools`` (beside Flink's CLI; not importable from Millstream's environment, only read),
so the programs run are PyFlink's as released, not copies. Each one runs as a user runs it, ``python program.py``, on the embedded
cluster. Their reading half is an unbounded Kafka source: the test waits until it has printed what
the writing half wrote, then stops the program.
"""
from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from .kafka import KafkaBroker, kafka_unavailable

ROOT = Path(__file__).resolve().parents[2]
FLINK_TOOLS = ROOT / ".venv" / "flink-tools"
EXAMPLES = "pyflink/examples/datastream/connectors"
RUN_TIMEOUT_S = 150.0

pytestmark = pytest.mark.timeout(900)

ROWS = ["+I[1, hi]", "+I[2, hello]", "+I[3, hi]", "+I[4, hello]", "+I[5, hi]", "+I[6, hello]", "+I[6, hello]"]


def ported(source: str) -> str:
    """The one change a PyFlink user makes: ``pyflink`` becomes ``millstream``."""
    return re.sub(r"\bpyflink\b", "millstream", source)


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    examples = FLINK_TOOLS / EXAMPLES
    released = sorted(examples.glob("kafka*.py"))
    if not released:
        pytest.skip(f"no PyFlink examples in {examples} (`make install` installs apache-flink 2.3.0 there)")
    out = tmp_path_factory.mktemp("pyflink-examples")
    for program in released:
        (out / program.name).write_text(ported(program.read_text()))
    return out


@pytest.fixture(scope="module")
def broker_on_9092(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    reason = kafka_unavailable()
    if reason:
        pytest.skip(reason)
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", 9092)) == 0:
            pytest.fail("something already listens on localhost:9092, where PyFlink's examples expect Kafka")
    with KafkaBroker(tmp_path_factory.mktemp("kafka9092"), port=9092) as broker:
        yield broker


def user_shell_environment() -> dict[str, str]:
    """This process's environment without what points a program at a session cluster: the examples
    run as a user runs them, ``python program.py`` on the embedded cluster."""
    env = {k: v for k, v in os.environ.items() if k != "MILLSTREAM_JOBMANAGER"}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_until(program: Path, expected_lines: list[str], after: str | None = None) -> list[str]:
    """Runs ``python program`` until it exits, or (``expected_lines`` given) until it has printed
    them all after the line ``after``; then stops its whole process group. Returns its output lines."""
    proc = subprocess.Popen([sys.executable, str(program)], cwd=program.parent, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            env=user_shell_environment())
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)  # the program closed its output: it has ended

    threading.Thread(target=pump, daemon=True).start()
    seen: list[str] = []
    started = after is None
    wanted = list(expected_lines)
    deadline = time.monotonic() + RUN_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=0.5)
            except queue.Empty:
                continue
            if line is None:
                proc.wait(30)
                break
            seen.append(line)
            if not started:
                started = line.strip() == after
            elif printed(line) in wanted:
                wanted.remove(printed(line))
            if expected_lines and started and not wanted:
                return seen
        if proc.returncode not in (None, 0):
            raise AssertionError(f"{program.name} exited with {proc.returncode}:\n" + "\n".join(seen[-60:]))
        if expected_lines and wanted:
            raise AssertionError(f"{program.name} did not print {wanted} within {RUN_TIMEOUT_S} s:\n"
                                 + "\n".join(seen[-60:]))
        if proc.returncode is None:
            raise AssertionError(f"{program.name} did not end within {RUN_TIMEOUT_S} s:\n" + "\n".join(seen[-60:]))
        return seen
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


def printed(line: str) -> str:
    """A line of ``print()``'s output without the ``<subtask>> `` prefix that Flink's print sink
    (and Millstream's) puts in front when it runs at a parallelism above 1."""
    return re.sub(r"^\d+> ", "", line.strip())


def _printed(lines: list[str], after: str) -> list[str]:
    return [printed(x) for x in lines[[x.strip() for x in lines].index(after) + 1:]]


@pytest.mark.parametrize("example", ["kafka_json_format.py", "kafka_csv_format.py", "kafka_avro_format.py"])
def test_a_row_format_example_writes_and_reads_back_its_rows(programs: Path, broker_on_9092: KafkaBroker,
                                                              example: str) -> None:
    lines = run_until(programs / example, ROWS, after="start reading data from kafka")
    assert "start writing data to kafka" in [x.strip() for x in lines]
    assert sorted(x for x in _printed(lines, "start reading data from kafka") if x.startswith("+I[")) == sorted(ROWS)


def test_the_bytearray_example_reads_back_its_json_documents(programs: Path, broker_on_9092: KafkaBroker) -> None:
    documents = ['{"id": 1, "country": "USA"}', '{"id": 2, "country": "Canada"}', '{"id": 3, "country": "Germany"}']
    lines = run_until(programs / "kafka_bytearray_format.py", documents, after="start reading data from kafka")
    assert sorted(x for x in _printed(lines, "start reading data from kafka") if x.startswith("{")) == sorted(documents)


def test_the_row_field_extractor_example_writes_keys_and_values(programs: Path, broker_on_9092: KafkaBroker) -> None:
    import confluent_kafka as ck  # lazy: probed by kafka_unavailable()
    topic = "row-extractor-example"
    broker_on_9092.create_topic(topic, 3)  # as its instructions say: created beforehand, 3 partitions
    run_until(programs / "kafka_row_field_extractor_example.py", [])
    consumer = ck.Consumer({"bootstrap.servers": broker_on_9092.bootstrap_servers, "group.id": "check",
                            "enable.auto.commit": False})
    got: list[tuple[int, bytes, bytes]] = []
    try:
        consumer.assign([ck.TopicPartition(topic, p, 0) for p in range(3)])
        deadline = time.monotonic() + 20
        while len(got) < 4 and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                got.append((msg.partition(), msg.key(), msg.value()))
    finally:
        consumer.close()
    assert sorted(key for _, key, _ in got) == [b"user-001", b"user-001", b"user-002", b"user-003"]
    assert b'{"type": "purchase", "item": "laptop", "price": 999.99}' in [v for _, _, v in got]
    # Records with a key are partitioned by it: both of user-001's events are in one partition.
    assert len({p for p, key, _ in got if key == b"user-001"}) == 1
