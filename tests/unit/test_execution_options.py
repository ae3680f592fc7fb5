"""Execution options from the configuration reach the StreamExecutionEnvironment and the JobGraph.

As in Flink, ``parallelism.default``, ``pipeline.max-parallelism``, ``execution.runtime-mode``,
``pipeline.operator-chaining.enabled`` and ``execution.buffer-timeout`` come from the configuration
file, the environment (``MILLSTREAM_CONF_*``) or the job's ``Configuration``; the environment's
setters override them.
"""
from __future__ import annotations

import pytest

from millstream.common import Configuration
from millstream.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from millstream.runtime.config import ConfigurationError


def _pipeline(env: StreamExecutionEnvironment) -> None:
    env.from_sequence(1, 10).map(lambda x: x + 1).filter(lambda x: x > 2).print()


def test_defaults_without_configuration() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    assert env.get_parallelism() == 1
    assert env.get_buffer_timeout() == 100
    assert env.is_chaining_enabled() is True
    assert env.get_runtime_mode() is RuntimeExecutionMode.STREAMING
    assert env.get_max_parallelism() == -1


def test_options_from_the_jobs_configuration_reach_the_job_graph() -> None:
    conf = Configuration({
        "parallelism.default": 3, "pipeline.max-parallelism": 256, "execution.runtime-mode": "batch",
        "pipeline.operator-chaining.enabled": False, "execution.buffer-timeout": "5 ms",
    })
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    assert env.get_parallelism() == 3
    assert env.get_max_parallelism() == 256
    assert env.get_runtime_mode() is RuntimeExecutionMode.BATCH
    assert env.is_chaining_enabled() is False
    assert env.get_buffer_timeout() == 5
    _pipeline(env)
    graph = env.get_job_graph("configured").proto
    assert graph.execution_config.buffer_timeout_ms == 5
    assert graph.execution_config.parallelism == 3
    assert len(graph.vertices) == 4  # no chaining: source, map, filter, sink each a vertex


def test_chaining_enabled_fuses_the_same_pipeline() -> None:
    env = StreamExecutionEnvironment.get_execution_environment(Configuration({"parallelism.default": 3}))
    _pipeline(env)
    assert len(env.get_job_graph().proto.vertices) == 1


def test_options_from_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MILLSTREAM_CONF_PARALLELISM_DEFAULT", "4")
    monkeypatch.setenv("MILLSTREAM_CONF_EXECUTION_BUFFER_TIMEOUT", "1 s")
    env = StreamExecutionEnvironment.get_execution_environment()
    assert (env.get_parallelism(), env.get_buffer_timeout()) == (4, 1000)
    # The job's own Configuration wins over the environment; a setter wins over both.
    env = StreamExecutionEnvironment.get_execution_environment(Configuration({"parallelism.default": 2}))
    assert env.get_parallelism() == 2
    env.set_parallelism(5)
    assert env.get_parallelism() == 5


def test_configure_applies_the_execution_options_it_sets() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_buffer_timeout(7)
    env.configure(Configuration({"parallelism.default": 6, "pipeline.operator-chaining": "false"}))
    assert env.get_parallelism() == 6
    assert env.is_chaining_enabled() is False
    assert env.get_buffer_timeout() == 7  # not in the configuration: left as set


@pytest.mark.parametrize(("key", "value", "message"), [
    ("parallelism.default", "0", "parallelism.default"),
    ("parallelism.default", "many", "parallelism.default: expected an integer"),
    ("execution.runtime-mode", "sometimes", "execution.runtime-mode: expected one of"),
    ("execution.buffer-timeout", "soon", "execution.buffer-timeout: expected a duration"),
    ("pipeline.max-parallelism", "0", "pipeline.max-parallelism"),
])
def test_bad_values_name_the_key(key: str, value: str, message: str) -> None:
    with pytest.raises((ConfigurationError, ValueError), match=message):
        StreamExecutionEnvironment.get_execution_environment(Configuration({key: value}))
