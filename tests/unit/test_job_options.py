"""Per-job options (`millstream run -D key=value job.py`): the registry says once which options a job
may set (job-level), which tell a client how to reach the cluster, and which belong to the cluster.
A job-level option travels in the JobGraph and the JobManager applies it to that job; `run` refuses
a cluster option instead of ignoring it."""
from __future__ import annotations

import argparse

import pytest

from millstream.client import cli
from millstream.common import Configuration
from millstream.datastream import StreamExecutionEnvironment
from millstream.jobmanager.jobmaster.job_master import job_slot_request_timeout
from millstream.jobmanager.resourcemanager.slot_manager import RequirementsTimedOut, SlotManager
from millstream.runtime import config as cfg
from millstream.runtime.restart_strategy import FixedDelay, options_of, spec_for_job


@pytest.mark.parametrize("key", ["slot.request.timeout", "restart-strategy.type", "restart-strategy.fixed-delay.attempts",
                                 "execution.checkpointing.interval", "execution.checkpointing.dir", "parallelism.default",
                                 "pipeline.max-parallelism", "execution.savepoint.path"])
def test_job_level_options(key: str) -> None:
    assert cfg.option_scope(cfg.find_option(key)) == "job"


@pytest.mark.parametrize("key", ["taskmanager.numberOfTaskSlots", "rest.port", "heartbeat.interval", "jobstore.max-capacity",
                                 "millstream.spark.master", "web.exception-history-size"])
def test_cluster_level_options(key: str) -> None:
    assert cfg.option_scope(cfg.find_option(key)) == "cluster"


def test_the_three_classes_do_not_overlap() -> None:
    job = set(cfg.PIPELINE_OPTIONS) | set(cfg.JOBMANAGER_JOB_OPTIONS)
    assert not job & set(cfg.CLIENT_OPTIONS)
    assert {o.key for o in job | set(cfg.CLIENT_OPTIONS)} <= {o.key for o in cfg.registered_options()}


def _run_args(*dynamic: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(["run", *[a for d in dynamic for a in ("-D", d)], "job.py"])


def test_run_refuses_a_cluster_option_naming_it() -> None:
    with pytest.raises(cli.CliError, match=r"-D taskmanager.numberOfTaskSlots, rest.port: cluster options, not a job's"):
        cli._refuse_cluster_options(_run_args("slot.request.timeout=5 s", "taskmanager.numberOfTaskSlots=4", "rest.port=9000"))
    cli._refuse_cluster_options(_run_args("slot.request.timeout=5 s", "restart-strategy.type=none", "my.own.key=1",
                                          "high-availability.type=zookeeper"))


def test_job_options_from_the_environment_travel_in_the_job_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    # `millstream run -D k=v` hands them to the script as MILLSTREAM_CONF_* variables.
    monkeypatch.setenv("MILLSTREAM_CONF_SLOT_REQUEST_TIMEOUT", "7 s")
    monkeypatch.setenv("MILLSTREAM_CONF_RESTART_STRATEGY_FIXED_DELAY_ATTEMPTS", "4")
    monkeypatch.setenv("MILLSTREAM_CONF_EXECUTION_CHECKPOINTING_INTERVAL", "2 s")
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_sequence(1, 3).print()
    graph = env.get_job_graph("j").proto
    conf = graph.execution_config.configuration
    assert conf["slot.request.timeout"] == "7 s" and conf["restart-strategy.fixed-delay.attempts"] == "4"
    assert conf["execution.checkpointing.interval"] == "2 s"
    assert job_slot_request_timeout(graph) == 7000


def test_a_jobs_slot_request_timeout_replaces_the_clusters_for_that_job_only() -> None:
    sm = SlotManager(300_000)
    sm.declare_requirements(b"A" * 16, "jm:1", 2, now=0, timeout_ms=3_000)
    sm.declare_requirements(b"B" * 16, "jm:1", 2, now=0)
    assert sm.requirements_deadline(b"A" * 16) == 3_000 and sm.requirements_deadline(b"B" * 16) == 300_000
    [timed_out] = sm.check_timeouts(3_001)
    assert isinstance(timed_out, RequirementsTimedOut) and timed_out.job_id == b"A" * 16
    assert sm.check_timeouts(299_000) == []


def test_a_jobs_restart_strategy_key_overrides_the_clusters_same_key() -> None:
    cluster = options_of(cfg.Configuration.from_dict({"restart-strategy.type": "fixed-delay",
                                                      "restart-strategy.fixed-delay.attempts": "1"}))
    own = Configuration()
    own.set_string("restart-strategy.fixed-delay.attempts", "5")
    env = StreamExecutionEnvironment.get_execution_environment(own)
    env.from_sequence(1, 3).print()
    spec = spec_for_job(env.get_job_graph("j").proto, cluster, False)
    assert isinstance(spec, FixedDelay) and spec.attempts == 5


def test_a_key_of_no_option_reaches_the_job_as_its_parameter(monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # noqa: ANN001
    monkeypatch.setenv("MILLSTREAM_CONF_MY_THRESHOLD", "7")  # `millstream run -D my.threshold=7`
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_sequence(1, 3).print()
    assert env.get_job_graph("j").proto.execution_config.configuration["my.threshold"] == "7"
    cli._refuse_cluster_options(_run_args("my.threshold=7", "slot.request.timout=5 s"))
    warnings = capsys.readouterr().err
    assert "'my.threshold' (from -D) is no configuration option; the job gets it as a job parameter" in warnings
    assert "did you mean 'slot.request.timeout'?" in warnings
