"""``execution.checkpointing.*`` keys set CheckpointConfig as PyFlink's ``configure()`` does.

PyFlink's ``env.configure(conf)`` (and ``get_execution_environment(conf)``) hands the configuration
to Flink's CheckpointConfig.configure, so ``get_checkpoint_config()`` reports the configured
interval, mode, timeout, minimum pause, maximum concurrent checkpoints, tolerable failures and
unaligned flag; setters called afterwards win; bad values are rejected. What the JobManager
enforces (timeout, minimum pause, tolerable failures) must reach the job's configuration.
"""
from __future__ import annotations

import pytest

from millstream.common import Configuration
from millstream.datastream import CheckpointingMode, StreamExecutionEnvironment
from millstream.runtime.config import ConfigurationError

# key, configured text, getter, expected value
TABLE = [
    ("execution.checkpointing.interval", "5 s", lambda c: c.get_checkpoint_interval(), 5000),
    ("execution.checkpointing.interval", "250", lambda c: c.is_checkpointing_enabled(), True),
    ("execution.checkpointing.mode", "AT_LEAST_ONCE", lambda c: c.get_checkpointing_mode(), CheckpointingMode.AT_LEAST_ONCE),
    ("execution.checkpointing.timeout", "12000", lambda c: c.get_checkpoint_timeout(), 12000),
    ("execution.checkpointing.timeout", "2 min", lambda c: c.get_checkpoint_timeout(), 120_000),
    ("execution.checkpointing.min-pause", "1500 ms", lambda c: c.get_min_pause_between_checkpoints(), 1500),
    ("execution.checkpointing.max-concurrent-checkpoints", "3", lambda c: c.get_max_concurrent_checkpoints(), 3),
    ("execution.checkpointing.tolerable-failed-checkpoints", "4", lambda c: c.get_tolerable_checkpoint_failure_number(), 4),
    ("execution.checkpointing.unaligned.enabled", "true", lambda c: c.is_unaligned_checkpoints_enabled(), True),
    ("execution.checkpointing.unaligned", "true", lambda c: c.is_unaligned_checkpoints_enabled(), True),
]


def _conf(key: str, value: str) -> Configuration:
    conf = Configuration()
    conf.set_string(key, value)
    return conf


@pytest.mark.parametrize("key, value, read, expected", TABLE)
def test_configure_sets_the_checkpoint_config(key, value, read, expected) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    before = read(env.get_checkpoint_config())
    assert before != expected  # the default differs: the key did something
    env.configure(_conf(key, value))
    assert read(env.get_checkpoint_config()) == expected


@pytest.mark.parametrize("key, value, read, expected", TABLE)
def test_the_environments_configuration_sets_it_too(key, value, read, expected) -> None:
    env = StreamExecutionEnvironment.get_execution_environment(_conf(key, value))
    assert read(env.get_checkpoint_config()) == expected


def test_the_issues_timeout() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(_conf("execution.checkpointing.timeout", "12000"))
    assert env.get_checkpoint_config().get_checkpoint_timeout() == 12000


def test_defaults_are_flinks() -> None:
    c = StreamExecutionEnvironment.get_execution_environment().get_checkpoint_config()
    assert (c.get_checkpoint_interval(), c.get_checkpointing_mode(), c.get_checkpoint_timeout(),
            c.get_min_pause_between_checkpoints(), c.get_max_concurrent_checkpoints(),
            c.get_tolerable_checkpoint_failure_number(), c.is_unaligned_checkpoints_enabled()) == (
        -1, CheckpointingMode.EXACTLY_ONCE, 600_000, 0, 1, 0, False)


def test_a_setter_after_configure_wins_and_configure_after_a_setter_wins() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(_conf("execution.checkpointing.timeout", "12000"))
    env.get_checkpoint_config().set_checkpoint_timeout(30_000)
    assert env.get_checkpoint_config().get_checkpoint_timeout() == 30_000
    env.configure(_conf("execution.checkpointing.timeout", "45 s"))
    assert env.get_checkpoint_config().get_checkpoint_timeout() == 45_000


@pytest.mark.parametrize("key, value, error", [
    ("execution.checkpointing.timeout", "5", "Checkpoint timeout must be at least 10 ms"),
    ("execution.checkpointing.interval", "5", "Checkpoint interval must be at least 10 ms"),
    ("execution.checkpointing.max-concurrent-checkpoints", "0", "at least one"),
    ("execution.checkpointing.tolerable-failed-checkpoints", "-1", "zero or positive"),
    ("execution.checkpointing.mode", "SOMETIMES", "execution.checkpointing.mode"),
    ("execution.checkpointing.timeout", "soon", "execution.checkpointing.timeout"),
])
def test_bad_values_are_rejected_naming_the_problem(key, value, error) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises((ValueError, ConfigurationError), match=error):
        env.configure(_conf(key, value))


def test_what_the_jobmanager_enforces_reaches_the_jobs_configuration() -> None:
    from millstream.jobmanager.checkpoint.settings import checkpointing_for_job

    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(1000)
    env.configure(_conf("execution.checkpointing.timeout", "12000"))
    config = env.get_checkpoint_config()
    config.set_min_pause_between_checkpoints(700)
    config.set_tolerable_checkpoint_failure_number(3)
    env.from_collection([1]).print()
    job = checkpointing_for_job(env.get_job_graph().proto, {})
    assert job is not None
    assert (job.settings.interval_ms, job.settings.timeout_ms, job.settings.min_pause_ms,
            job.settings.tolerable_failed_checkpoints) == (1000, 12000, 700, 3)


def test_unset_values_leave_the_clusters_in_force() -> None:
    from millstream.jobmanager.checkpoint.settings import checkpointing_for_job

    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(1000)
    env.from_collection([1]).print()
    cluster = {"execution.checkpointing.timeout": 90_000, "execution.checkpointing.min-pause": 50}
    job = checkpointing_for_job(env.get_job_graph().proto, cluster)
    assert job is not None and (job.settings.timeout_ms, job.settings.min_pause_ms) == (90_000, 50)


def test_externalized_checkpoint_retention_is_pyflinks_and_reaches_the_job() -> None:
    from millstream.datastream import ExternalizedCheckpointRetention
    from millstream.datastream.externalized_checkpoint_retention import ExternalizedCheckpointRetention as AtItsPath

    assert AtItsPath is ExternalizedCheckpointRetention
    assert [m.name for m in ExternalizedCheckpointRetention] == [
        "DELETE_ON_CANCELLATION", "RETAIN_ON_CANCELLATION", "NO_EXTERNALIZED_CHECKPOINTS"]
    env = StreamExecutionEnvironment.get_execution_environment()
    c = env.get_checkpoint_config()
    # Flink 2's default: NO_EXTERNALIZED_CHECKPOINTS, so externalized checkpoints are off
    assert c.get_externalized_checkpoint_retention() is ExternalizedCheckpointRetention.NO_EXTERNALIZED_CHECKPOINTS
    assert not c.is_externalized_checkpoints_enabled()
    assert c.set_externalized_checkpoint_retention(ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION) is c
    assert c.get_externalized_checkpoint_retention() is ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION
    assert c.is_externalized_checkpoints_enabled()
    key = "execution.checkpointing.externalized-checkpoint-retention"
    assert c._job_settings()[key] == "RETAIN_ON_CANCELLATION"
    c.set_externalized_checkpoint_retention(ExternalizedCheckpointRetention.NO_EXTERNALIZED_CHECKPOINTS)
    assert not c.is_externalized_checkpoints_enabled()
    with pytest.raises(TypeError, match="ExternalizedCheckpointRetention"):
        c.set_externalized_checkpoint_retention("RETAIN_ON_CANCELLATION")
    env.configure(_conf(key, "DELETE_ON_CANCELLATION"))
    assert c.get_externalized_checkpoint_retention() is ExternalizedCheckpointRetention.DELETE_ON_CANCELLATION
    with pytest.raises(ConfigurationError):
        env.configure(_conf(key, "SOMETIMES"))


def test_fail_on_checkpointing_errors_is_the_tolerable_failure_number() -> None:
    # PyFlink 2.x: failing on errors means no tolerated failure; not failing tolerates every one
    c = StreamExecutionEnvironment.get_execution_environment().get_checkpoint_config()
    assert c.is_fail_on_checkpointing_errors()
    c.set_fail_on_checkpointing_errors(False)
    assert not c.is_fail_on_checkpointing_errors() and c.get_tolerable_checkpoint_failure_number() == 2_147_483_647
    assert c._job_settings()["execution.checkpointing.tolerable-failed-checkpoints"] == "2147483647"
    c.set_fail_on_checkpointing_errors(True)
    assert c.is_fail_on_checkpointing_errors() and c.get_tolerable_checkpoint_failure_number() == 0


def test_unaligned_checkpoint_settings_behave_as_pyflinks_and_reach_the_job() -> None:
    # PyFlink 2.3's CheckpointConfig: every unaligned setting has a setter and a getter, none raises
    from millstream.common import Duration

    c = StreamExecutionEnvironment.get_execution_environment().get_checkpoint_config()
    assert not c.is_unaligned_checkpoints_enabled() and c.is_force_unaligned_checkpoints() is False
    assert c.get_aligned_checkpoint_timeout() == Duration.of_millis(0) == c.get_alignment_timeout()
    key = "execution.checkpointing.unaligned.enabled"
    assert key not in c._job_settings()
    assert c.enable_unaligned_checkpoints() is c and c.is_unaligned_checkpoints_enabled()
    assert c._job_settings()[key] == "true"  # the JobManager sees the request (and warns)
    assert c.disable_unaligned_checkpoints() is c and not c.is_unaligned_checkpoints_enabled()
    assert c._job_settings()[key] == "false"
    assert c.set_force_unaligned_checkpoints(True) is c and c.is_force_unaligned_checkpoints() is True
    assert c.set_force_unaligned_checkpoints(False) is c and c.is_force_unaligned_checkpoints() is False
    assert c.set_alignment_timeout(Duration.of_minutes(1)) is c
    assert c.get_alignment_timeout() == Duration.of_minutes(1) == c.get_aligned_checkpoint_timeout()
    assert c.set_aligned_checkpoint_timeout(Duration.of_seconds(5)) is c
    assert c.get_alignment_timeout() == Duration.of_seconds(5)
    with pytest.raises(TypeError, match="needs a Duration"):
        c.set_aligned_checkpoint_timeout(1000)
    with pytest.raises(ValueError, match="must not be negative"):
        c.set_alignment_timeout(Duration.of_millis(-1))