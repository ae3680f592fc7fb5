"""The client's pure leader-finding parts: address lists, which JobManager leads, and how often a
call may look the leader up again after "not the leader" answers (HA.md's client protocol)."""
from __future__ import annotations

import grpc
import pytest

from millstream.client.cluster_client import (
    LeaderFailover,
    LeaderResolver,
    NoJobManagerLeader,
    choose_leader,
    is_not_leader,
    parse_addresses,
)
from millstream.runtime import config as cfg
from millstream.runtime.config import ConfigurationError


def test_a_list_of_jobmanagers_is_parsed_checked_and_deduplicated() -> None:
    assert parse_addresses("jm-a:6123") == ["jm-a:6123"]
    assert parse_addresses(" jm-a:6123 , jm-b:6124,[::1]:6125 ") == ["jm-a:6123", "jm-b:6124", "[::1]:6125"]
    assert parse_addresses("a:1,b:2,a:1") == ["a:1", "b:2"]


@pytest.mark.parametrize("text, named", [("", "expected host:port"), ("a:1,,b:2", "an empty address"),
                                         ("a:1,b", "'b'"), ("a:1,b:x", "b:x")])
def test_a_bad_list_names_the_bad_entry(text: str, named: str) -> None:
    with pytest.raises(ConfigurationError, match="MILLSTREAM_JOBMANAGER") as info:
        parse_addresses(text)
    assert named in str(info.value)


def test_several_jobmanagers_in_the_environment_configure_the_first_as_the_address() -> None:
    conf = cfg.load_configuration(env={"MILLSTREAM_JOBMANAGER": "jm-a:7123,jm-b:7124"})
    assert conf.get(cfg.JOBMANAGER_RPC_ADDRESS) == "jm-a" and conf.get(cfg.JOBMANAGER_RPC_PORT) == 7123


class Answer(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


def test_only_an_unavailable_not_the_leader_answer_is_a_standby() -> None:
    assert is_not_leader(Answer(grpc.StatusCode.UNAVAILABLE, "JobManager jm-a:6123 is not the leader"))
    assert not is_not_leader(Answer(grpc.StatusCode.UNAVAILABLE, "failed to connect: connection refused"))
    assert not is_not_leader(Answer(grpc.StatusCode.FAILED_PRECONDITION, "fenced: JobManager is not the leader"))
    assert not is_not_leader(ValueError("is not the leader"))


def test_the_first_jobmanager_that_answers_as_the_leader_is_chosen() -> None:
    answers = {"a:1": "connection refused", "b:2": "not the leader", "c:3": None, "d:4": None}
    probed: list[str] = []

    def probe(address: str) -> str | None:
        probed.append(address)
        return answers[address]

    leader, tried = choose_leader(list(answers), probe)
    assert leader == "c:3" and probed == ["a:1", "b:2", "c:3"]
    assert tried == [("a:1", "connection refused"), ("b:2", "not the leader")]
    assert choose_leader(["a:1", "b:2"], probe) == (None, [("a:1", "connection refused"), ("b:2", "not the leader")])


def test_one_address_without_ha_is_used_as_it_is() -> None:
    resolver = LeaderResolver(["jm:6123"])
    assert not resolver.highly_available and resolver.resolve() == "jm:6123"
    assert LeaderResolver(["a:1", "b:2"]).highly_available
    assert LeaderResolver.from_configuration(cfg.Configuration(), None) is None  # nothing named: embedded


def test_no_leader_among_several_names_each_answer() -> None:
    resolver = LeaderResolver(["a:1", "b:2"])
    resolver._probe = lambda address: {"a:1": "connection refused", "b:2": "not the leader"}[address]  # type: ignore[method-assign]
    with pytest.raises(NoJobManagerLeader) as info:
        resolver.resolve()
    message = str(info.value)
    assert "a:1: connection refused" in message and "b:2: not the leader" in message


def test_looking_again_is_bounded_by_count_and_names_every_answer() -> None:
    failover = LeaderFailover("a:1, b:2", max_lookups=2, budget_s=60.0, clock=lambda: 0.0)
    failover.record("a:1", "not the leader")
    failover.record("b:2", "connection refused")
    with pytest.raises(NoJobManagerLeader) as info:
        failover.record("a:1", "not the leader")
    message = str(info.value)
    assert "a:1, b:2" in message and "3 attempts" in message
    assert "a:1: not the leader; b:2: connection refused; a:1: not the leader" in message


def test_looking_again_is_bounded_by_time() -> None:
    now = [0.0]
    failover = LeaderFailover("ZooKeeper zk:2181, cluster /default", max_lookups=100, budget_s=5.0, clock=lambda: now[0])
    failover.record("a:1", "not the leader")
    now[0] = 5.0
    with pytest.raises(NoJobManagerLeader, match="in 5 s"):
        failover.record("a:1", "not the leader")


def test_pauses_between_looks_at_the_same_leader_grow_to_a_second() -> None:
    failover = LeaderFailover("x", max_lookups=100, budget_s=60.0, clock=lambda: 0.0)
    pauses = []
    for _ in range(6):
        failover.record("a:1", "connection refused")
        pauses.append(failover.pause())
    assert pauses == sorted(pauses) and pauses[0] == pytest.approx(0.2) and pauses[-1] == 1.0


@pytest.mark.parametrize("address", ["garbage", "localhost:70000", "local host:6123"])
def test_one_bad_address_is_named_as_before(address: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_addresses(address, "JobManager address")
    assert str(info.value) == f"JobManager address: expected host:port, got {address!r}"
