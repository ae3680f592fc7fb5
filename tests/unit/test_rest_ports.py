"""rest.bind-port (Flink's): a port, a range or a list of both; the JobManager takes the first free
one, so JobManagers sharing a host get a port each. Unset: rest.port."""
from __future__ import annotations

import pytest

from millstream.jobmanager.rest.ports import describe, parse_bind_ports, rest_ports
from millstream.runtime import config as cfg


def test_spellings() -> None:
    assert parse_bind_ports("8081") == [8081]
    assert parse_bind_ports("50100-50103") == [50100, 50101, 50102, 50103]
    assert parse_bind_ports("50100, 50102-50103,50100") == [50100, 50102, 50103]
    assert describe(parse_bind_ports("8081-8083")) == "8081-8083" and describe([1, 3]) == "1,3"


@pytest.mark.parametrize("text", ["", "abc", "8081-", "9000-8000", "70000", "1-2-3"])
def test_bad_values_name_the_key(text: str) -> None:
    with pytest.raises(cfg.ConfigurationError, match="rest.bind-port"):
        parse_bind_ports(text)


def test_unset_falls_back_to_rest_port() -> None:
    assert rest_ports(cfg.Configuration()) == ([8081], False)
    assert rest_ports(cfg.Configuration.from_dict({"rest.port": "9000"})) == ([9000], True)
    assert rest_ports(cfg.Configuration.from_dict({"rest.port": "9000", "rest.bind-port": "9100-9101"})) == ([9100, 9101], True)
