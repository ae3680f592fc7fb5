"""A KafkaSource reader whose open() fails after it made its consumer closes that consumer: the
operator never gets the reader to close, and a consumer left open keeps reconnecting (logging
"Connection refused" once its broker is gone) for as long as the failure's traceback holds it."""
from __future__ import annotations

from typing import Any

import pytest

from millstream.runtime.operator_factories import KafkaSourceFactory
from millstream.runtime.operators import kafka_source


class FakeConsumer:
    made: list["FakeConsumer"] = []

    def __init__(self, conf: dict[str, Any]) -> None:
        self.conf, self.closed = conf, False
        FakeConsumer.made.append(self)

    def assign(self, partitions: Any) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class Env:
    subtask_index = 0
    restored_checkpoint_id = None
    operator_event_handler = None

    def send_operator_event(self, payload: bytes) -> None:
        raise ConnectionError("the JobManager is gone")


def test_a_reader_whose_open_fails_after_making_its_consumer_closes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka_source.ck, "Consumer", FakeConsumer)
    FakeConsumer.made.clear()
    factory = KafkaSourceFactory(properties={"bootstrap.servers": "127.0.0.1:1"}, topics=("t",))
    reader = kafka_source.KafkaSourceReader(factory, Env(), 100, {})  # type: ignore[arg-type]
    with pytest.raises(ConnectionError, match="the JobManager is gone"):
        reader.open()
    assert len(FakeConsumer.made) == 1 and FakeConsumer.made[0].closed
