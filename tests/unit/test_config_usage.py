"""Every registered option is read by the code, and its description says what the code does.

An option that nothing reads is a promise the runtime does not keep: a user sets it and nothing
changes. The check is textual but precise: the option's constant (``cfg.HEARTBEAT_TIMEOUT``) must be
read through the configuration API (``.get(...)``) in a module of the package other than the
registry itself, and a test outside the registry's own tests must name the option or its key.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from millstream.runtime import config as cfg

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_FOLDERS = ("client", "runtime", "jobmanager", "taskmanager")
REGISTRY = ROOT / "runtime" / "config.py"
REGISTRY_TESTS = {Path(__file__).resolve(), ROOT / "tests" / "unit" / "test_config.py"}


def _constants() -> dict[str, cfg.ConfigOption]:
    return {name: value for name, value in vars(cfg).items() if isinstance(value, cfg.ConfigOption)}


def _sources(folders: tuple[str, ...], exclude: set[Path]) -> str:
    files = [p for folder in folders for p in sorted((ROOT / folder).rglob("*.py")) if p.resolve() not in exclude]
    return "\n".join(p.read_text(encoding="utf-8") for p in files)


PACKAGE = _sources(PACKAGE_FOLDERS, {REGISTRY})
TESTS = _sources(("tests",), REGISTRY_TESTS)


def test_every_registered_option_has_a_constant() -> None:
    assert {o.key for o in _constants().values()} == {o.key for o in cfg.registered_options()}


@pytest.mark.parametrize("name", sorted(_constants()))
def test_option_is_read_by_the_package(name: str) -> None:
    # .get(cfg.X) on a Configuration, or _job_value(graph, cfg.X): the JobManager reading a job's own
    read = re.compile(rf"\.get\(\s*(?:\w+\.)?{name}\s*\)|_job_value\(\s*\w+,\s*(?:\w+\.)?{name}\s*\)")
    assert read.search(PACKAGE), f"{name} ({_constants()[name].key}) is registered but nothing reads it"


@pytest.mark.parametrize("name", sorted(_constants()))
def test_option_is_exercised_by_a_test(name: str) -> None:
    key = _constants()[name].key
    assert re.search(rf"\b{name}\b", TESTS) or key in TESTS, f"no test outside the registry's names {name} ({key})"


def test_the_check_sees_an_option_that_nothing_reads() -> None:
    unread = re.compile(r"\.get\(\s*(?:\w+\.)?NOT_AN_OPTION\s*\)")
    assert not unread.search(PACKAGE)
    assert re.compile(r"\.get\(\s*(?:\w+\.)?HEARTBEAT_TIMEOUT\s*\)").search("c.get(cfg.HEARTBEAT_TIMEOUT)")


@pytest.mark.parametrize("key", [
    "taskmanager.data.port", "taskmanager.memory.segment-size",
])
def test_options_of_features_that_do_not_exist_are_not_registered(key: str) -> None:
    assert cfg.find_option(key) is None


def test_descriptions_match_the_code() -> None:
    # The embedded Spark is local[slots] (placement slot, the default) or local[slots x tasks-per-slot] (task).
    from millstream.taskmanager.taskmanager import spark_host_for

    conf = cfg.Configuration.from_dict({"taskmanager.numberOfTaskSlots": 2, "millstream.spark.tasks-per-slot": 3})
    assert spark_host_for(conf).master == "local[2]"
    assert "slots (millstream.spark.task-placement=slot, the default)" in cfg.SPARK_MASTER.description
    conf.set(cfg.SPARK_TASK_PLACEMENT, "task")
    assert spark_host_for(conf).master == "local[6]"
    assert "local[slots x millstream.spark.tasks-per-slot] (task)" in cfg.SPARK_MASTER.description
    # Unset bind host: the JobManager listens on jobmanager.rpc.address.
    assert "unset: jobmanager.rpc.address" in cfg.JOBMANAGER_BIND_HOST.description
    assert "unset: 127.0.0.1" in cfg.TASKMANAGER_HOST.description
