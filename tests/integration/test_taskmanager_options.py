"""The TaskManager's addresses towards an external Spark master: found by asking the kernel for the
route to the master (a UDP connect, which sends nothing but needs the network stack), so not unit
tests; the pure option rules are tests/unit/test_taskmanager_options.py."""
from __future__ import annotations

import pytest

from millstream.runtime import config as cfg
from millstream.taskmanager.taskmanager import address_towards, spark_host_for, taskmanager_hosts


def test_an_external_master_binds_every_interface_and_advertises_the_address_towards_the_master() -> None:
    conf = cfg.Configuration.from_dict({"millstream.spark.master": "spark://127.0.0.1:7077"})
    assert taskmanager_hosts(conf) == ("127.0.0.1", "0.0.0.0")  # the route to 127.0.0.1 is loopback
    conf.set(cfg.TASKMANAGER_HOST, "tm.example").set(cfg.TASKMANAGER_BIND_HOST, "10.0.0.5")
    assert taskmanager_hosts(conf) == ("tm.example", "10.0.0.5")
    host = spark_host_for(conf.set(cfg.SPARK_CONTROL_PORT, "50100-50102"))
    assert (host.control_host, host.bind_host, host.control_ports) == ("tm.example", "10.0.0.5", range(50100, 50103))


def test_the_address_towards_a_master_url_takes_its_first_host() -> None:
    assert address_towards("spark://127.0.0.1:7077,127.0.0.2:7077") == "127.0.0.1"
    assert address_towards("spark://[::1]:7077") == "::1"
    with pytest.raises(cfg.ConfigurationError, match="set taskmanager.host"):
        address_towards("spark://no-such-host.invalid:7077")
