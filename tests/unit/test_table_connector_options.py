"""The kafka / upsert-kafka / filesystem table connectors' pure parts: option validation with
Flink's messages (naming the option), the csv/json/raw codecs, upsert records and tombstones,
ChangelogNormalize's changelog, the k=v/ partition paths. Nothing here starts a job."""
from __future__ import annotations

import datetime
from typing import Any

import pytest

from millstream.common.row import Row, RowKind
from millstream.table import EnvironmentSettings, TableEnvironment
from millstream.table.expression import TableException
from millstream.table.filesystem_table import partition_path
from millstream.table.kafka_table import ChangelogNormalize, KafkaRowDeserializer, KafkaRowSerializer, KafkaTable
from millstream.table.table_formats import codec_for, duration_ms, memory_bytes
from millstream.table.types import DataTypes

COLUMNS = [("w", DataTypes.STRING()), ("c", DataTypes.BIGINT())]
BASE = {"connector": "kafka", "topic": "t", "properties.bootstrap.servers": "127.0.0.1:1", "format": "json"}


def t_env() -> TableEnvironment:
    return TableEnvironment.create(EnvironmentSettings.in_streaming_mode())


def source_error(options: dict[str, str], ddl_extra: str = "") -> str:
    env = t_env()
    with_ = ", ".join(f"'{k}' = '{v}'" for k, v in options.items())
    env.execute_sql(f"CREATE TABLE src (w STRING, c BIGINT{ddl_extra}) WITH ({with_})")
    with pytest.raises(TableException) as e:
        env.sql_query("SELECT * FROM src").execute()
    return str(e.value)


def sink_error(options: dict[str, str], query: str = "SELECT w, c FROM words", ddl_extra: str = "") -> str:
    env = t_env()
    env.create_temporary_view("words", env.from_elements([("a", 1)], ["w", "c"]))
    with_ = ", ".join(f"'{k}' = '{v}'" for k, v in options.items())
    env.execute_sql(f"CREATE TABLE snk (w STRING, c BIGINT{ddl_extra}) WITH ({with_})")
    with pytest.raises(TableException) as e:
        env.execute_sql(f"INSERT INTO snk {query}")
    return str(e.value)


# -- validation ----------------------------------------------------------------------------------

def test_a_kafka_table_without_topic_names_the_missing_option() -> None:
    message = source_error({k: v for k, v in BASE.items() if k != "topic"})
    assert "Unable to create a source for reading table 'default_catalog.default_database.src'" in message
    assert "Missing required options are:\n\ntopic" in message


def test_a_kafka_sink_without_bootstrap_servers_names_the_option() -> None:
    message = sink_error({k: v for k, v in BASE.items() if k != "properties.bootstrap.servers"})
    assert "Unable to create a sink for writing table" in message
    assert "properties.bootstrap.servers" in message.split("Missing required options are:")[1]


def test_an_unknown_format_names_the_format_and_its_option() -> None:
    message = source_error({**BASE, "format": "protobuf-x"})
    assert "Could not find any factory for identifier 'protobuf-x'" in message
    assert "'format'" in message and "csv, json, raw" in message


def test_an_unknown_option_is_listed_as_unsupported() -> None:
    message = source_error({**BASE, "scan.startup.mod": "earliest-offset"})
    assert "Unsupported options found for 'kafka'" in message
    assert "Unsupported options:\n\nscan.startup.mod\n" in message


def test_a_bad_startup_mode_names_the_option_and_the_modes() -> None:
    message = source_error({**BASE, "scan.startup.mode": "beginning"})
    assert "'scan.startup.mode'" in message and "'beginning'" in message and "earliest-offset" in message


def test_group_offsets_need_a_group_id() -> None:
    message = source_error({**BASE, "scan.startup.mode": "group-offsets"})
    assert "'properties.group.id' is required" in message


def test_exactly_once_needs_a_transactional_id_prefix() -> None:
    message = sink_error({**BASE, "sink.delivery-guarantee": "exactly-once"})
    assert "sink.transactional-id-prefix must be specified when using DeliveryGuarantee.EXACTLY_ONCE" in message


def test_a_key_format_needs_key_fields() -> None:
    message = source_error({**BASE, "key.format": "raw"})
    assert "'key.fields'" in message


def test_upsert_kafka_needs_a_primary_key_and_both_formats() -> None:
    upsert = {"connector": "upsert-kafka", "topic": "t", "properties.bootstrap.servers": "127.0.0.1:1",
              "key.format": "json", "value.format": "json"}
    assert "require to define a PRIMARY KEY constraint" in source_error(upsert)
    message = source_error({k: v for k, v in upsert.items() if k != "key.format"}, ", PRIMARY KEY (w) NOT ENFORCED")
    assert "Missing required options are:\n\nkey.format" in message


def test_an_enforced_primary_key_is_refused_as_flink_does() -> None:
    with pytest.raises(TableException, match="only\\s+supported mode is the NOT ENFORCED mode"):
        t_env().execute_sql("CREATE TABLE x (w STRING, PRIMARY KEY (w)) WITH ('connector' = 'print')")


def test_an_append_only_sink_refuses_an_updating_query_naming_the_sink_and_the_node() -> None:
    for options in (BASE, {"connector": "filesystem", "path": "/tmp/never-written", "format": "csv"}):
        env = t_env()
        with_ = ", ".join(f"'{k}' = '{v}'" for k, v in options.items())
        env.execute_sql(f"CREATE TABLE snk (w STRING, c BIGINT) WITH ({with_})")
        words = env.from_elements([("a",), ("b",), ("a",)], ["w"])
        env.create_temporary_view("words", words)
        with pytest.raises(TableException) as e:
            env.execute_sql("INSERT INTO snk SELECT w, COUNT(*) FROM words GROUP BY w")
        assert "Table sink 'default_catalog.default_database.snk' doesn't support consuming update changes" in str(e.value)
        assert "GroupAggregate" in str(e.value)


def test_filesystem_sink_options_are_checked() -> None:
    fs = {"connector": "filesystem", "path": "/tmp/never-written", "format": "csv"}
    assert "Unsupported options:\n\nsink.rolling-policy.file-sizes" in sink_error(
        {**fs, "sink.rolling-policy.file-sizes": "1mb"})
    assert "sink.rolling-policy" in sink_error({**fs, "sink.rolling-policy.rollover-interval": "soon"})
    assert "'csv', 'json' or 'avro'" in sink_error({**fs, "format": "raw"})


# -- formats -------------------------------------------------------------------------------------

def fields(*types: Any) -> list[tuple[int, str, Any]]:
    return [(i, f"f{i}", t) for i, t in enumerate(types)]


def test_json_writes_flinks_sql_timestamp_form_and_reads_it_back() -> None:
    codec = codec_for("json", "format", fields(DataTypes.STRING(), DataTypes.BIGINT(), DataTypes.TIMESTAMP(3),
                                               DataTypes.BOOLEAN()), {}, "", "t")
    row = ["a", 3, datetime.datetime(2024, 1, 2, 3, 4, 5, 120000), True]
    data = codec.encode(row)
    assert data == b'{"f0":"a","f1":3,"f2":"2024-01-02 03:04:05.12","f3":true}'
    assert codec.decode(data) == row
    assert codec.decode(b'{"f0":"b"}') == ["b", None, None, None]  # a missing field is null by default


def test_json_fail_on_missing_field_and_ignore_parse_errors() -> None:
    strict = codec_for("json", "format", fields(DataTypes.STRING()), {"json.fail-on-missing-field": "true"}, "", "t")
    with pytest.raises(TableException, match="Could not find field with name 'f0'"):
        strict.decode(b"{}")
    lenient = codec_for("json", "format", fields(DataTypes.BIGINT()), {"json.ignore-parse-errors": "true"}, "", "t")
    assert lenient.decode(b"not json") is None


def test_csv_uses_the_field_delimiter_quotes_when_needed_and_reads_null_as_empty() -> None:
    codec = codec_for("csv", "format", fields(DataTypes.STRING(), DataTypes.INT()), {"csv.field-delimiter": ";"}, "", "t")
    assert codec.encode(["a;b", None]) == b'"a;b";'
    assert codec.decode(b'"a;b";') == ["a;b", None]
    assert codec.decode(b"x;7") == ["x", 7]


def test_raw_takes_exactly_one_column() -> None:
    assert codec_for("raw", "key.format", fields(DataTypes.STRING()), {}, "key.", "t").encode(["k"]) == b"k"
    with pytest.raises(TableException, match="only one physical column"):
        codec_for("raw", "format", fields(DataTypes.STRING(), DataTypes.INT()), {}, "", "t")


def test_durations_and_memory_sizes_in_flinks_notation() -> None:
    assert [duration_ms(x) for x in ("500 ms", "30 s", "1 min", "2h", "1000")] == [500, 30_000, 60_000, 7_200_000, 1000]
    assert [memory_bytes(x) for x in ("128mb", "1 kb", "4096")] == [128 << 20, 1024, 4096]
    with pytest.raises(TableException, match="duration"):
        duration_ms("soon")


# -- upsert records --------------------------------------------------------------------------------

def upsert_table() -> KafkaTable:
    return KafkaTable("upsert-kafka", "default_catalog.default_database.u", COLUMNS,
                      {"connector": "upsert-kafka", "topic": "t", "properties.bootstrap.servers": "127.0.0.1:1",
                       "key.format": "json", "value.format": "json"}, ("w",))


def kind(values: Any, k: RowKind) -> Row:
    r = Row(*values)
    r.set_row_kind(k)
    return r


def test_the_upsert_sink_writes_the_key_and_a_tombstone_for_a_delete() -> None:
    key, value = upsert_table()._codecs("sink")
    serializer = KafkaRowSerializer("t", key, value, upsert=True)
    assert serializer.serialize_record(kind(["a", 2], RowKind.UPDATE_AFTER)) == ("t", b'{"w":"a"}', b'{"w":"a","c":2}')
    assert serializer.serialize_record(kind(["a", 2], RowKind.DELETE)) == ("t", b'{"w":"a"}', None)


def test_the_upsert_source_reads_a_tombstone_as_a_delete_of_its_key() -> None:
    key, value = upsert_table()._codecs("source")
    d = KafkaRowDeserializer(2, key, value, upsert=True)
    upsert = d.deserialize_key_value(b'{"w":"a"}', b'{"w":"a","c":2}')
    assert (list(upsert), upsert.get_row_kind()) == (["a", 2], RowKind.UPDATE_AFTER)
    tomb = d.deserialize_key_value(b'{"w":"a"}', None)
    assert (list(tomb), tomb.get_row_kind()) == (["a", None], RowKind.DELETE)


class _State:
    def __init__(self) -> None:
        self.v: Any = None

    def value(self) -> Any:
        return self.v

    def update(self, v: Any) -> None:
        self.v = v

    def clear(self) -> None:
        self.v = None


def test_changelog_normalize_turns_upserts_into_flinks_changelog() -> None:
    f = ChangelogNormalize()
    f.state = _State()  # one key's state

    def feed(values: Any, k: RowKind) -> list[tuple[str, list[Any]]]:
        return [(r.get_row_kind().short_string(), list(r)) for r in f.process_element(kind(values, k), None)]

    assert feed(["a", 1], RowKind.UPDATE_AFTER) == [("+I", ["a", 1])]
    assert feed(["a", 1], RowKind.UPDATE_AFTER) == []  # unchanged: nothing
    assert feed(["a", 2], RowKind.UPDATE_AFTER) == [("-U", ["a", 1]), ("+U", ["a", 2])]
    assert feed(["a", None], RowKind.DELETE) == [("-D", ["a", 2])]
    assert feed(["a", None], RowKind.DELETE) == []  # a delete of an absent key: nothing


def test_partition_paths_follow_hives_layout_and_escaping() -> None:
    assert partition_path(["dt", "h"], ["2024-01-02", 7]) == "dt=2024-01-02/h=7"
    assert partition_path(["p"], ["a/b=c"]) == "p=a%2Fb%3Dc"
    assert partition_path(["p"], [None]) == "p=__DEFAULT_PARTITION__"
    assert partition_path(["p"], [""], "none") == "p=none"


class _Captured:
    """A stream that keeps what sink_to gets (the FileSink's factory)."""

    def __init__(self) -> None:
        self.factory: Any = None

    def sink_to(self, sink: Any) -> "_Captured":
        self.factory = sink._sink_factory()
        return self

    def name(self, _name: str) -> "_Captured":
        return self


def test_the_rolling_policy_options_reach_the_file_sink_with_flinks_defaults() -> None:
    from millstream.table.filesystem_table import filesystem_sink
    fs = {"connector": "filesystem", "path": "/tmp/never-written", "format": "csv"}
    defaults = filesystem_sink("t", COLUMNS, fs, (), _Captured(), "Sink").factory
    assert (defaults.part_size, defaults.rollover_interval_ms, defaults.inactivity_interval_ms,
            defaults.bucket_check_interval_ms) == (128 << 20, 30 * 60_000, 30 * 60_000, 60_000)
    assert defaults.bucket_format is None and defaults.partition_bucket is None
    set_ = filesystem_sink("t", COLUMNS, {**fs, "sink.rolling-policy.file-size": "1kb",
                                          "sink.rolling-policy.rollover-interval": "10 s",
                                          "sink.rolling-policy.inactivity-interval": "5 s",
                                          "sink.rolling-policy.check-interval": "1 s"}, ("w",), _Captured(), "Sink").factory
    assert (set_.part_size, set_.rollover_interval_ms, set_.inactivity_interval_ms,
            set_.bucket_check_interval_ms) == (1024, 10_000, 5_000, 1_000)
    row = Row("a/b", 3)
    assert set_.partition_bucket(row) == "w=a%2Fb"
    assert set_.encoder.encode(row) == b"3\n"  # the partition column is in the path, not the file


def test_a_key_prefix_is_stripped_from_the_key_formats_field_names_and_needs_except_key() -> None:
    options = {**BASE, "key.format": "json", "key.fields": "k_w", "key.fields-prefix": "k_",
               "value.fields-include": "EXCEPT_KEY"}
    table = KafkaTable("kafka", "t", [("k_w", DataTypes.STRING()), ("c", DataTypes.BIGINT())], options)
    key, value = table._codecs("sink")
    assert key is not None and key.encode(["a", 1]) == b'{"w":"a"}' and value.encode(["a", 1]) == b'{"c":1}'
    message = source_error({**options, "value.fields-include": "ALL"}, ", k_w STRING")
    assert "'key.fields-prefix'" in message and "EXCEPT_KEY" in message


def test_a_partitioner_other_than_default_is_refused_naming_the_option() -> None:
    assert "'sink.partitioner'" in sink_error({**BASE, "sink.partitioner": "round-robin"})
