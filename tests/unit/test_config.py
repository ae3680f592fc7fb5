"""Configuration registry and loader: defaults -> YAML -> environment -> -D, parsing and errors."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from millstream.runtime import config as c
from millstream.runtime.config import Configuration, ConfigurationError, load_configuration

LOGGER = "millstream.runtime.config"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


# ---- defaults --------------------------------------------------------------------------------


def test_defaults_are_flinks() -> None:
    conf = load_configuration(env={})
    assert conf == Configuration()
    assert conf.get(c.JOBMANAGER_RPC_ADDRESS) == "localhost"
    assert conf.get(c.JOBMANAGER_RPC_PORT) == 6123
    assert conf.get(c.TASKMANAGER_NUM_TASK_SLOTS) == 1
    assert conf.get(c.TASKMANAGER_RPC_PORT) == 0
    assert conf.get(c.HEARTBEAT_INTERVAL) == 10_000
    assert conf.get(c.HEARTBEAT_TIMEOUT) == 50_000
    assert conf.get(c.SLOT_REQUEST_TIMEOUT) == 300_000
    assert conf.get(c.BUFFER_TIMEOUT) == 100
    assert conf.get(c.DEFAULT_PARALLELISM) == 1
    assert conf.get(c.MAX_PARALLELISM) == -1
    assert conf.get(c.RUNTIME_MODE) == "STREAMING"
    assert conf.get(c.CLIENT_SUBMISSION_TIMEOUT) == 60_000
    assert conf.get(c.JOBSTORE_EXPIRATION_TIME) == 3600
    assert conf.get(c.NETWORK_BUFFERS_PER_CHANNEL) == 4
    assert conf.get(c.NETWORK_MAX_BUFFERS_PER_CHANNEL) == 4
    assert conf.get(c.RPC_MAX_MESSAGE_SIZE) == 64 * 1024 * 1024
    assert conf.get(c.RPC_TIMEOUT) == 10_000
    assert conf.get(c.SPARK_MASTER) == ""
    assert conf.get(c.SPARK_CONF) == ()
    assert conf.get(c.OPERATOR_CHAINING) is True
    assert conf.to_dict() == {}
    assert c.HEARTBEAT_TIMEOUT not in conf


def test_every_default_is_a_valid_value_of_its_type() -> None:
    for option in c.registered_options():
        if option.default is not None:
            assert option.parse(option.format(option.default)) == option.default, option.key


# ---- YAML ------------------------------------------------------------------------------------


def test_yaml_flat_form(tmp_path: Path) -> None:
    path = write(tmp_path, """
jobmanager.rpc.address: jm.example.org
jobmanager.rpc.port: 7000
taskmanager.numberOfTaskSlots: 4
heartbeat.timeout: 5 s
execution.buffer-timeout: 1min
millstream.rpc.max-message-size: 64kb
pipeline.operator-chaining.enabled: false
""")
    conf = load_configuration(path, env={})
    assert conf.get(c.JOBMANAGER_RPC_ADDRESS) == "jm.example.org"
    assert conf.get(c.JOBMANAGER_RPC_PORT) == 7000
    assert conf.get(c.TASKMANAGER_NUM_TASK_SLOTS) == 4
    assert conf.get(c.HEARTBEAT_TIMEOUT) == 5_000
    assert conf.get(c.BUFFER_TIMEOUT) == 60_000
    assert conf.get(c.RPC_MAX_MESSAGE_SIZE) == 65_536
    assert conf.get(c.OPERATOR_CHAINING) is False


def test_yaml_nested_mappings_are_flattened_with_dots(tmp_path: Path) -> None:
    path = write(tmp_path, """
jobmanager:
  rpc:
    address: jm
    port: 7001
taskmanager:
  numberOfTaskSlots: 3
  network.memory.buffers-per-channel: 6
pipeline:
  operator-chaining:
    enabled: false
  max-parallelism: 256
millstream.spark:
  conf:
    spark.ui.enabled: true
    spark.executor.memory: 2g
""")
    conf = load_configuration(path, env={})
    assert conf.get(c.JOBMANAGER_RPC_ADDRESS) == "jm"
    assert conf.get(c.JOBMANAGER_RPC_PORT) == 7001
    assert conf.get(c.TASKMANAGER_NUM_TASK_SLOTS) == 3
    assert conf.get(c.NETWORK_BUFFERS_PER_CHANNEL) == 6
    assert conf.get(c.OPERATOR_CHAINING) is False
    assert conf.get(c.MAX_PARALLELISM) == 256
    # A mapping under a list option is its value, not more nesting.
    assert conf.get(c.SPARK_CONF) == ("spark.ui.enabled=true", "spark.executor.memory=2g")


def test_yaml_empty_file_gives_defaults(tmp_path: Path) -> None:
    assert load_configuration(write(tmp_path, "# nothing\n"), env={}) == Configuration()


def test_missing_yaml_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "config.yaml"
    with pytest.raises(ConfigurationError, match="not found") as error:
        load_configuration(missing, env={})
    assert str(missing) in str(error.value)


def test_yaml_that_is_not_a_mapping_names_the_path(tmp_path: Path) -> None:
    path = write(tmp_path, "- a\n- b\n")
    with pytest.raises(ConfigurationError, match="expected a mapping") as error:
        load_configuration(path, env={})
    assert str(path) in str(error.value)


def test_bad_value_in_yaml_names_the_key(tmp_path: Path) -> None:
    path = write(tmp_path, "jobmanager.rpc.port: sixty\n")
    with pytest.raises(ConfigurationError, match=r"jobmanager.rpc.port: expected an integer, got 'sixty'"):
        load_configuration(path, env={})


def test_config_file_from_environment(tmp_path: Path) -> None:
    path = write(tmp_path, "slot.request.timeout: 9 s\n")
    conf = load_configuration(env={c.ENV_CONFIG_FILE: str(path)})
    assert conf.get(c.SLOT_REQUEST_TIMEOUT) == 9000


# ---- layering --------------------------------------------------------------------------------


def test_environment_overrides_yaml(tmp_path: Path) -> None:
    path = write(tmp_path, "heartbeat.timeout: 5 s\nslot.request.timeout: 9 s\n")
    env = {
        "MILLSTREAM_CONF_HEARTBEAT_TIMEOUT": "7 s",
        "MILLSTREAM_CONF_TASKMANAGER_NUMBEROFTASKSLOTS": "8",
        "MILLSTREAM_CONF_MILLSTREAM_RPC_MAX_MESSAGE_SIZE": "1 mb",
        "UNRELATED": "x",
    }
    conf = load_configuration(path, env=env)
    assert conf.get(c.HEARTBEAT_TIMEOUT) == 7_000
    assert conf.get(c.SLOT_REQUEST_TIMEOUT) == 9000
    assert conf.get(c.TASKMANAGER_NUM_TASK_SLOTS) == 8
    assert conf.get(c.RPC_MAX_MESSAGE_SIZE) == 1 << 20
    assert "UNRELATED" not in conf and "unrelated" not in conf


def test_dynamic_properties_override_environment(tmp_path: Path) -> None:
    path = write(tmp_path, "heartbeat.timeout: 5 s\n")
    conf = load_configuration(
        path,
        env={"MILLSTREAM_CONF_HEARTBEAT_TIMEOUT": "7 s", "MILLSTREAM_CONF_SLOT_REQUEST_TIMEOUT": "9001"},
        dynamic_properties=["heartbeat.timeout=9 s", "-Dparallelism.default=4"],
    )
    assert conf.get(c.HEARTBEAT_TIMEOUT) == 9_000
    assert conf.get(c.SLOT_REQUEST_TIMEOUT) == 9001
    assert conf.get(c.DEFAULT_PARALLELISM) == 4


def test_parse_dynamic_properties() -> None:
    assert c.parse_dynamic_properties(["a.b=1", "-Dc = x=y ", "empty="]) == {
        "a.b": "1", "c": "x=y", "empty": ""}
    for bad in ("novalue", "=1", "-D"):
        with pytest.raises(ConfigurationError, match="expected key=value") as error:
            c.parse_dynamic_properties([bad])
        assert repr(bad) in str(error.value)


def test_jobmanager_address_from_environment() -> None:
    conf = load_configuration(env={"MILLSTREAM_JOBMANAGER": "jm.internal:7123"})
    assert conf.get(c.JOBMANAGER_RPC_ADDRESS) == "jm.internal"
    assert conf.get(c.JOBMANAGER_RPC_PORT) == 7123

    host_only = load_configuration(env={"MILLSTREAM_JOBMANAGER": "jm"})
    assert (host_only.get(c.JOBMANAGER_RPC_ADDRESS), host_only.get(c.JOBMANAGER_RPC_PORT)) == ("jm", 6123)

    ipv6 = load_configuration(env={"MILLSTREAM_JOBMANAGER": "[::1]:6124"})
    assert (ipv6.get(c.JOBMANAGER_RPC_ADDRESS), ipv6.get(c.JOBMANAGER_RPC_PORT)) == ("::1", 6124)

    # The per-key variable is the more specific one and wins.
    both = load_configuration(
        env={"MILLSTREAM_JOBMANAGER": "jm:7123", "MILLSTREAM_CONF_JOBMANAGER_RPC_PORT": "7999"})
    assert both.get(c.JOBMANAGER_RPC_PORT) == 7999


@pytest.mark.parametrize("bad", ["jm:port", ":6123", "jm:99999", "a:b:c"])
def test_bad_jobmanager_address_is_an_error(bad: str) -> None:
    with pytest.raises(ConfigurationError, match="MILLSTREAM_JOBMANAGER: expected host:port"):
        load_configuration(env={"MILLSTREAM_JOBMANAGER": bad})


# ---- value parsing ---------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "millis"), [
    ("10 s", 10_000), ("10s", 10_000), ("10 sec", 10_000), ("10 seconds", 10_000),
    ("500 ms", 500), ("500ms", 500), ("1 min", 60_000), ("1m", 60_000), ("3 minutes", 180_000),
    ("2 h", 7_200_000), ("2 hours", 7_200_000), ("1 d", 86_400_000), ("  7 S ", 7_000),
    ("250", 250), (250, 250), (0, 0),
])
def test_duration_forms(text: str | int, millis: int) -> None:
    assert c.parse_duration(text) == millis
    assert Configuration().set(c.HEARTBEAT_TIMEOUT, text).get(c.HEARTBEAT_TIMEOUT) == millis


def test_duration_error_names_the_key_and_the_value() -> None:
    with pytest.raises(ConfigurationError) as error:
        Configuration().set(c.HEARTBEAT_TIMEOUT, "abc")
    assert str(error.value) == "heartbeat.timeout: expected a duration like '50 s' or milliseconds, got 'abc'"


@pytest.mark.parametrize("bad", ["abc", "10 parsecs", "1.5 s", "-1 s", "s", "", -5, True, 1.5])
def test_bad_durations(bad: object) -> None:
    with pytest.raises(ConfigurationError, match=r"^slot\.request\.timeout: expected a duration"):
        Configuration.from_dict({"slot.request.timeout": bad})


@pytest.mark.parametrize(("text", "size"), [
    ("32 kb", 32 * 1024), ("32kb", 32 * 1024), ("32k", 32 * 1024), ("32 kibibytes", 32 * 1024),
    ("64 mb", 64 << 20), ("64m", 64 << 20), ("1 gb", 1 << 30), ("2g", 2 << 30), ("1 tb", 1 << 40),
    ("100 b", 100), ("100 bytes", 100), ("4096", 4096), (4096, 4096),
])
def test_memory_size_forms(text: str | int, size: int) -> None:
    assert c.parse_memory_size(text) == size
    assert Configuration().set(c.RPC_MAX_MESSAGE_SIZE, text).get(c.RPC_MAX_MESSAGE_SIZE) == size


@pytest.mark.parametrize("bad", ["lots", "1.5 mb", "12 pb", "-1", -1])
def test_bad_memory_size_names_the_key(bad: object) -> None:
    with pytest.raises(ConfigurationError) as error:
        Configuration().set(c.RPC_MAX_MESSAGE_SIZE, bad)
    assert str(error.value) == (
        f"millstream.rpc.max-message-size: expected a memory size like '64 mb' or bytes, got {bad!r}")


def test_format_round_trips() -> None:
    assert c.format_duration(10_000) == "10 s"
    assert c.format_duration(90_000) == "90 s"
    assert c.format_duration(1_500) == "1500 ms"
    assert c.format_duration(0) == "0 ms"
    assert c.format_duration(3_600_000) == "1 h"
    assert c.format_memory_size(32 * 1024) == "32 kb"
    assert c.format_memory_size(1000) == "1000 b"


@pytest.mark.parametrize(("value", "expected"), [
    ("true", True), ("false", False), ("TRUE", True), (" False ", False), (True, True), (False, False),
])
def test_bool_parsing(value: object, expected: bool) -> None:
    assert Configuration().set(c.OPERATOR_CHAINING, value).get(c.OPERATOR_CHAINING) is expected


@pytest.mark.parametrize("bad", ["yes", "1", "", 1, "maybe"])
def test_bad_bool_names_the_key(bad: object) -> None:
    with pytest.raises(ConfigurationError) as error:
        Configuration.from_dict({"pipeline.operator-chaining.enabled": bad})
    assert str(error.value) == f"pipeline.operator-chaining.enabled: expected true or false, got {bad!r}"


def test_int_and_float_parsing() -> None:
    conf = Configuration.from_dict({
        "parallelism.default": " 12 ", "pipeline.max-parallelism": "-1",
    })
    assert conf.get(c.DEFAULT_PARALLELISM) == 12
    assert conf.get(c.MAX_PARALLELISM) == -1
    for bad in ("1.5", "two", True):
        with pytest.raises(ConfigurationError, match="parallelism.default: expected an integer"):
            Configuration.from_dict({"parallelism.default": bad})
    factor = c.ConfigOption("some.factor", c.OptionType.FLOAT, 0.1, "an unregistered float option")
    assert factor.parse("0.25") == 0.25 and factor.parse(3) == 3.0
    with pytest.raises(ConfigurationError, match="some.factor: expected a number, got 'lots'"):
        factor.parse("lots")


def test_choices_are_spelling_insensitive_and_stored_canonically() -> None:
    assert Configuration.from_dict({"execution.runtime-mode": "batch"}).get(c.RUNTIME_MODE) == "BATCH"
    assert Configuration.from_dict({"execution.runtime-mode": "Auto_Matic"}).get(c.RUNTIME_MODE) == "AUTOMATIC"
    with pytest.raises(ConfigurationError) as error:
        Configuration.from_dict({"execution.runtime-mode": "sometimes"})
    assert str(error.value) == (
        "execution.runtime-mode: expected one of STREAMING, BATCH, AUTOMATIC, got 'sometimes'")


def test_list_option_forms() -> None:
    for value in ("a=1;b=2", " a=1 ; b=2 ;", ["a=1", "b=2"], {"a": 1, "b": 2}):
        assert Configuration().set(c.SPARK_CONF, value).get(c.SPARK_CONF) == ("a=1", "b=2")
    with pytest.raises(ConfigurationError, match="millstream.spark.conf: expected a list"):
        Configuration().set(c.SPARK_CONF, 5)


def test_list_option_from_environment_and_dynamic_properties() -> None:
    conf = load_configuration(
        env={"MILLSTREAM_CONF_MILLSTREAM_SPARK_CONF": "spark.ui.enabled=false;spark.a=b"},
        dynamic_properties=["millstream.spark.master=spark://m:7077"])
    assert conf.get(c.SPARK_CONF) == ("spark.ui.enabled=false", "spark.a=b")
    assert conf.get(c.SPARK_MASTER) == "spark://m:7077"


# ---- unknown, fallback and deprecated keys ---------------------------------------------------


def test_unknown_keys_are_kept_and_near_misses_warn(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    conf = load_configuration(
        env={"MILLSTREAM_CONF_MY_JOB_INPUT": "/data/in"},
        dynamic_properties=["heartbeat.timout=5 s", "wordcount.min-length=3"])
    assert conf.get_raw("heartbeat.timout") == "5 s"
    assert conf.get_raw("wordcount.min-length") == "3"
    assert conf.get_raw("my.job.input") == "/data/in"
    assert conf.get(c.HEARTBEAT_TIMEOUT) == 50_000  # the typo did not set the real option
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "'heartbeat.timout'" in warnings[0] and "did you mean 'heartbeat.timeout'" in warnings[0]
    assert "-D" in warnings[0]


def test_unknown_yaml_keys_warn_with_the_closest_key(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    path = write(tmp_path, "taskmanager:\n  numberOfTaskSlot: 4\n")
    conf = load_configuration(path, env={})
    assert conf.get(c.TASKMANAGER_NUM_TASK_SLOTS) == 1
    assert "'taskmanager.numberOfTaskSlot'" in caplog.text
    assert "did you mean 'taskmanager.numberOfTaskSlots'" in caplog.text
    assert str(path) in caplog.text


def test_closest_key_and_user_keys() -> None:
    assert c.closest_key("heartbeat.timout") == "heartbeat.timeout"
    assert c.closest_key("execution.buffer-timeout.intervall") == "execution.buffer-timeout.interval"
    assert c.closest_key("wordcount.min-length") is None
    assert c.did_you_mean("parallelism.defualt") == ": did you mean 'parallelism.default'?"
    assert c.did_you_mean("zzz") == ""
    conf = Configuration.from_dict({"heartbeat.timeout": "5 s", "my.param": 1, "client.timeout": "1 s"})
    assert conf.user_keys() == ["my.param"]  # a fallback spelling is stored under its option


def test_wrong_case_of_a_known_key_warns(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    Configuration.from_dict({"taskmanager.numberoftaskslots": 4})
    assert "did you mean 'taskmanager.numberOfTaskSlots'" in caplog.text


def test_fallback_and_deprecated_keys(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    conf = Configuration.from_dict({"execution.buffer-timeout.interval": "5 ms", "client.timeout": "2 min"})
    assert conf.get(c.BUFFER_TIMEOUT) == 5
    assert conf.get(c.CLIENT_SUBMISSION_TIMEOUT) == 120_000
    assert caplog.text == ""  # fallback keys are read silently

    conf = Configuration.from_dict({"pipeline.operator-chaining": "false"})
    assert conf.get(c.OPERATOR_CHAINING) is False
    assert "'pipeline.operator-chaining' is deprecated: use 'pipeline.operator-chaining.enabled'" in caplog.text

    both = Configuration.from_dict({"pipeline.operator-chaining.enabled": "true", "pipeline.operator-chaining": "false"})
    assert both.get(c.OPERATOR_CHAINING) is True  # the registered key wins within one layer
    assert c.find_option("blob.storage.directory") is c.BLOB_STORAGE_DIR


# ---- the container ---------------------------------------------------------------------------


def test_set_get_unset_and_dict_round_trip() -> None:
    conf = Configuration()
    conf.set(c.TASKMANAGER_NUM_TASK_SLOTS, 4).set(c.HEARTBEAT_TIMEOUT, "20 s").set(c.SPARK_CONF, ["a=1"])
    conf.update({"user.param": [1, 2]})
    assert conf.to_dict() == {
        "taskmanager.numberOfTaskSlots": 4, "heartbeat.timeout": 20_000,
        "millstream.spark.conf": ("a=1",), "user.param": [1, 2]}
    assert Configuration.from_dict(conf.to_dict()) == conf
    strings = conf.copy().set(c.SPARK_CONF, None).to_dict(as_strings=True)
    assert strings == {"taskmanager.numberOfTaskSlots": "4", "heartbeat.timeout": "20 s", "user.param": "1;2"}
    assert Configuration.from_dict(strings).get(c.HEARTBEAT_TIMEOUT) == 20_000
    assert c.SPARK_CONF in conf and "millstream.spark.conf" in conf

    conf.set(c.HEARTBEAT_TIMEOUT, None)
    assert c.HEARTBEAT_TIMEOUT not in conf and conf.get(c.HEARTBEAT_TIMEOUT) == 50_000


def test_to_dict_with_defaults_covers_every_option() -> None:
    full = Configuration().set(c.JOBMANAGER_RPC_PORT, 1).to_dict(include_defaults=True, as_strings=True)
    assert full["jobmanager.rpc.port"] == "1"
    assert full["heartbeat.timeout"] == "50 s"
    assert set(full) == {o.key for o in c.registered_options() if o.default is not None}


def test_registering_a_key_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="declared twice"):
        c._option("heartbeat.timeout", c.OptionType.DURATION, 1, "again")


# ---- documentation ---------------------------------------------------------------------------


def test_markdown_table_lists_every_registered_key() -> None:
    table = c.render_markdown_table()
    rows = table.strip().splitlines()
    assert rows[0] == "| Key | Type | Default | Description |"
    assert len(rows) == 2 + len(c.registered_options())
    for option in c.registered_options():
        assert f"| `{option.key}` | {option.type.value} |" in table
    assert "| `heartbeat.timeout` | duration | `50 s` |" in table
    assert "| `taskmanager.host` | string | (none) |" in table
    assert all(row.count(" | ") == 3 for row in rows[2:])  # no stray pipe in a cell
