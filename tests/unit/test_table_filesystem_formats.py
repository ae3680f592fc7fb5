"""Pure pieces of the filesystem table's partitions and the avro table format, from Flink's docs:
the Avro schema Flink's AvroSchemaConverter derives, rows through it and back, partition values
typed from directory names, the partition time of the default extractor, the partition-commit
options' errors, and which WHERE conjuncts prune partitions."""
from __future__ import annotations

import datetime
import decimal
import io
import os
import pickle

import fastavro
import pytest

from millstream.common.row import Row
from millstream.table import DataTypes
from millstream.table.avro_rows import AvroRowConverter, avro_schema
from millstream.table.expression import TableException, ValidationException, resolve
from millstream.table.expressions import col, lit
from millstream.table.filesystem_source import list_partitions, partition_conjuncts, partition_value
from millstream.table.filesystem_table import PartitionTimeExtractor, check_options, _partition_commit

NS = "org.apache.flink.avro.generated"


def test_the_avro_schema_is_the_one_flinks_converter_derives() -> None:
    columns = [("id", DataTypes.INT().not_null()), ("price", DataTypes.DECIMAL(10, 2)), ("t", DataTypes.TIME(3)),
               ("ts", DataTypes.TIMESTAMP(3).not_null()), ("tags", DataTypes.ARRAY(DataTypes.STRING())),
               ("m", DataTypes.MAP(DataTypes.STRING(), DataTypes.BIGINT().not_null()).not_null()),
               ("addr", DataTypes.ROW([DataTypes.FIELD("city", DataTypes.STRING().not_null())]))]
    assert avro_schema(columns) == {"type": "record", "name": "record", "namespace": NS, "fields": [
        {"name": "id", "type": "int"},
        {"name": "price", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}],
         "default": None},
        {"name": "t", "type": ["null", {"type": "int", "logicalType": "time-millis"}], "default": None},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tags", "type": ["null", {"type": "array", "items": ["null", "string"]}], "default": None},
        {"name": "m", "type": {"type": "map", "values": "long"}},
        {"name": "addr", "type": ["null", {"type": "record", "name": "record_addr", "namespace": NS,
                                           "fields": [{"name": "city", "type": "string"}]}], "default": None}]}
    fastavro.parse_schema(avro_schema(columns))  # a valid Avro schema


def test_types_avro_cannot_hold_fail_as_flinks_converter_does() -> None:
    with pytest.raises(TableException, match="Avro does not support TIMESTAMP type with precision: 6"):
        avro_schema([("ts", DataTypes.TIMESTAMP(6))])
    with pytest.raises(TableException, match="non-string as key type of map"):
        avro_schema([("m", DataTypes.MAP(DataTypes.INT(), DataTypes.INT()))])
    with pytest.raises(TableException, match="Unsupported avro.codec 'lzma'"):
        AvroRowConverter([(0, "a", DataTypes.INT())], {"codec": "lzma"})


def test_a_row_goes_through_avro_and_back_equal() -> None:
    fields = [(0, "id", DataTypes.BIGINT()), (1, "price", DataTypes.DECIMAL(10, 2)), (2, "d", DataTypes.DATE()),
              (3, "ts", DataTypes.TIMESTAMP(3)), (4, "tags", DataTypes.ARRAY(DataTypes.STRING())),
              (5, "m", DataTypes.MAP(DataTypes.STRING(), DataTypes.INT())),
              (6, "addr", DataTypes.ROW([DataTypes.FIELD("city", DataTypes.STRING())])),
              (7, "raw", DataTypes.BYTES()), (8, "none", DataTypes.STRING())]
    converter = pickle.loads(pickle.dumps(AvroRowConverter(fields, {})))
    row = Row(7, decimal.Decimal("12.50"), datetime.date(2024, 1, 2), datetime.datetime(2024, 1, 2, 3, 4, 5, 6000),
              ["a", None], {"k": 1}, Row("Berlin"), b"\x00\x01", None)
    data = converter.encode(row)
    assert converter.decode(data) == list(row)
    # the plain binary encoding of one record: another reader decodes it with the derived schema
    plain = fastavro.schemaless_reader(io.BytesIO(data), fastavro.parse_schema(converter.schema), None)
    assert plain["price"] == decimal.Decimal("12.50") and plain["addr"] == {"city": "Berlin"}
    with pytest.raises(ValueError, match="left over"):
        converter.decode(data + b"\x00")


def test_partition_values_are_typed_from_directory_names(tmp_path) -> None:
    assert partition_value("2024-01-02", DataTypes.DATE(), "__DEFAULT_PARTITION__") == datetime.date(2024, 1, 2)
    assert partition_value("07", DataTypes.INT(), "__DEFAULT_PARTITION__") == 7
    assert partition_value("a%2Fb%3D", DataTypes.STRING(), "__DEFAULT_PARTITION__") == "a/b="
    assert partition_value("__DEFAULT_PARTITION__", DataTypes.INT(), "__DEFAULT_PARTITION__") is None
    assert partition_value("NULL", DataTypes.INT(), "NULL") is None
    with pytest.raises(TableException, match="'x' cannot be read as INT"):
        partition_value("x", DataTypes.INT(), "__DEFAULT_PARTITION__")
    for d in ("dt=2024-01-01/hr=1", "dt=2024-01-01/hr=2", "dt=2024-01-02/hr=__DEFAULT_PARTITION__",
              "dt=2024-01-02/.hr=3", "other=1", "dt=2024-01-03/wrong=1"):
        (tmp_path / d).mkdir(parents=True)
    keys = [("dt", DataTypes.STRING()), ("hr", DataTypes.INT())]
    listed = list_partitions(str(tmp_path), keys, "__DEFAULT_PARTITION__")
    assert [(os.path.relpath(d, tmp_path), v) for d, v in listed] == [
        ("dt=2024-01-01/hr=1", ["2024-01-01", 1]), ("dt=2024-01-01/hr=2", ["2024-01-01", 2]),
        ("dt=2024-01-02/hr=__DEFAULT_PARTITION__", ["2024-01-02", None])]


def test_the_partition_time_of_the_default_extractor() -> None:
    hourly = PartitionTimeExtractor(["dt", "hr"], "$dt $hr:00:00", "UTC")
    assert hourly("dt=2024-01-01/hr=13") == int(datetime.datetime(2024, 1, 1, 13, tzinfo=datetime.timezone.utc).timestamp() * 1000)
    shanghai = PartitionTimeExtractor(["dt", "hr"], "$dt $hr:00:00", "Asia/Shanghai")
    assert shanghai("dt=2024-01-01/hr=13") == hourly("dt=2024-01-01/hr=05")  # UTC+8
    assert PartitionTimeExtractor(["dt"], None, "UTC")("dt=1970-01-02") == 86_400_000  # the first value, a date
    with pytest.raises(ValueError, match="'abc' of partition 'dt=abc'"):
        PartitionTimeExtractor(["dt"], None, "UTC")("dt=abc")


def test_partition_commit_options_fail_naming_the_problem() -> None:
    base = {"connector": "filesystem", "path": "/tmp/x", "format": "csv"}
    assert _partition_commit("t", base, ["dt"]) == {}  # no policy kind: no commit, as Flink
    with pytest.raises(ValidationException, match="'metastore' partition commit policy for a hive table"):
        _partition_commit("t", {**base, "sink.partition-commit.policy.kind": "metastore,success-file"}, ["dt"])
    with pytest.raises(ValidationException, match="'custom'.*not supported"):
        _partition_commit("t", {**base, "sink.partition-commit.policy.kind": "custom",
                                "sink.partition-commit.policy.class": "a.B"}, ["dt"])
    with pytest.raises(ValidationException, match="'process-time' or 'partition-time', got 'event-time'"):
        _partition_commit("t", {**base, "sink.partition-commit.policy.kind": "success-file",
                                "sink.partition-commit.trigger": "event-time"}, ["dt"])
    with pytest.raises(ValidationException, match="unknown time zone 'Mars/Base'"):
        _partition_commit("t", {**base, "sink.partition-commit.policy.kind": "success-file",
                                "sink.partition-commit.watermark-time-zone": "Mars/Base"}, ["dt"])
    got = _partition_commit("t", {**base, "sink.partition-commit.policy.kind": "success-file",
                                  "sink.partition-commit.delay": "1 h",
                                  "sink.partition-commit.success-file.name": "_DONE"}, ["dt"])
    assert (got["partition_commit_trigger"], got["partition_commit_delay_ms"], got["success_file_name"]) == (
        "process-time", 3_600_000, "_DONE")
    with pytest.raises(ValidationException, match=r"Unsupported options found for 'filesystem'[\s\S]*"
                                                  r"Unsupported options:\n\navro.compression\n"):
        check_options("t", {**base, "format": "avro", "avro.codec": "null", "avro.compression": "x"}, "sink")


def test_only_conjuncts_on_partition_columns_prune() -> None:
    columns = [("id", DataTypes.BIGINT()), ("dt", DataTypes.STRING()), ("hr", DataTypes.INT())]
    condition = resolve((col("hr") > lit(1)) & (col("id") > lit(3)) & (col("dt") == lit("2024-01-01")), columns)
    assert [str(c) for c in partition_conjuncts(condition, {1, 2})] == [
        str(resolve(col("hr") > lit(1), columns)), str(resolve(col("dt") == lit("2024-01-01"), columns))]
    either = resolve((col("hr") > lit(1)) | (col("id") > lit(3)), columns)
    assert partition_conjuncts(either, {1, 2}) == []  # an OR with a data column cannot prune
