"""bench/nexmark/kafka_input.py's pure parts: the topic argument passed to a measuring process, the
records written (the line without its newline, the event's date_time as the timestamp), and the
engines a Kafka run measures."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))

from nexmark import generator, kafka_input  # noqa: E402


def test_a_topic_travels_as_bootstrap_slash_name() -> None:
    topic = kafka_input.Topic("127.0.0.1:9092", "nexmark-events")
    assert kafka_input.Topic.parse(topic.arg()) == topic


@pytest.mark.parametrize("bad", ["", "nexmark", "/nexmark", "127.0.0.1:9092/"])
def test_a_topic_argument_without_broker_or_name_is_refused_naming_it(bad: str) -> None:
    with pytest.raises(ValueError, match="bootstrap/topic"):
        kafka_input.Topic.parse(bad)


def test_records_are_the_lines_in_stream_order_stamped_with_their_event_time(tmp_path) -> None:
    paths = generator.generate(2_500, files=2, seed=3, directory=tmp_path / "events")
    lines = [line for path in paths for line in open(path, encoding="utf-8")]
    records = list(kafka_input._records(paths))
    assert [value.decode() + "\n" for value, _ in records] == lines
    assert [t for _, t in records] == [int(line.split(",")[1]) for line in lines]
    assert all(not value.endswith(b"\n") for value, _ in records)
