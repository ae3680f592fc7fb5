"""An operator chain whose open fails closes what it opened and the operator that failed (a
KafkaSink that failed committing a restored transaction holds a consumer and a producer; the task
closes only chains that opened, so they would live on, reconnecting to a broker long gone)."""
from __future__ import annotations

import pytest

from millstream.runtime.task.chain import open_tail_first


class Op:
    def __init__(self, name: str, log: list[str], fail: bool = False) -> None:
        self.name, self.log, self.fail = name, log, fail

    def open(self) -> None:
        self.log.append(f"open {self.name}")
        if self.fail:
            raise ConnectionError(f"{self.name} failed to open")

    def close(self) -> None:
        self.log.append(f"close {self.name}")
        if self.name == "head":
            raise RuntimeError("closing an unopened head")  # logged away: the open's error is what surfaces


def test_a_failed_open_closes_the_failed_operator_and_those_opened_before_it() -> None:
    log: list[str] = []
    chain = [Op("head", log), Op("middle", log, fail=True), Op("sink", log)]
    with pytest.raises(ConnectionError, match="middle failed to open"):
        open_tail_first(chain)
    assert log == ["open sink", "open middle", "close middle", "close sink"]


def test_opening_goes_tail_first_and_closes_nothing_when_all_open() -> None:
    log: list[str] = []
    open_tail_first([Op("a", log), Op("b", log)])
    assert log == ["open b", "open a"]
