"""The connectors a table of ``create_temporary_table`` / ``CREATE TABLE`` uses, on DataStream
sources and sinks: ``datagen`` and ``filesystem`` (format ``csv``, ``json`` or ``avro``; partitioned
tables by ``filesystem_source``) read, ``print``,
``blackhole`` and ``filesystem`` (``filesystem_table``) write, ``kafka`` and ``upsert-kafka``
(``kafka_table``) do both. Options use Flink's keys (``rows-per-second``, ``fields.<f>.kind``, ``path``,
``print-identifier``); an unknown connector or format fails naming it."""
from __future__ import annotations

import csv
import datetime
import random
import time
from typing import Any, Sequence

from millstream.common.typeinfo import Types
from millstream.datastream.functions import FlatMapFunction, SinkFunction, SourceFunction
from millstream.table.expression import TableException, cast_value
from millstream.table.runtime_functions import RowToText, row_of
from millstream.table.types import DataType

__all__ = ["ConnectorTable", "SOURCES", "SINKS"]

SOURCES = ("datagen", "filesystem", "kafka", "upsert-kafka")
SINKS = ("print", "blackhole", "filesystem", "kafka", "upsert-kafka")
_KAFKA = ("kafka", "upsert-kafka")


class ConnectorTable:
    """A table backed by a connector: its columns, options, primary key and partition keys."""

    def __init__(self, path: str, columns: Sequence[tuple[str, DataType]], options: dict[str, str],
                 primary_key: Sequence[str] = (), partition_keys: Sequence[str] = ()) -> None:
        self.path, self.columns, self.options = path, list(columns), dict(options)
        self.primary_key, self.partition_keys = tuple(primary_key), tuple(partition_keys)
        self.connector = self.options.get("connector")
        if self.connector not in SOURCES + SINKS:
            known = sorted(set(SOURCES + SINKS))
            raise TableException(f"Could not find any factory for identifier '{self.connector}' (table {path}): "
                                 f"Millstream's table connectors are {', '.join(known)}")

    def _kafka(self) -> Any:
        from millstream.table.kafka_table import KafkaTable  # lazy: the Kafka client loads only for Kafka tables
        return KafkaTable(str(self.connector), self.full_name, self.columns, self.options, self.primary_key)

    def accepts_updates(self) -> bool:
        """Whether the sink takes an updating changelog (-U/+U/-D), not only inserts."""
        return self.connector in ("print", "blackhole", "upsert-kafka")

    @property
    def full_name(self) -> str:
        return f"default_catalog.default_database.{self.path}"

    def is_bounded(self) -> bool:
        if self.connector in _KAFKA:
            return self._kafka().is_bounded()
        if self.connector == "datagen":
            return "number-of-rows" in self.options
        return True

    def source_with_watermarks(self, env: Any, strategy: Any) -> Any | None:
        """The source with ``strategy`` applied per split inside it (Flink's watermark push-down),
        or None when the connector cannot (only ``kafka`` can: an upsert source normalizes first)."""
        return self._kafka().source_with_watermarks(env, strategy) if self.connector == "kafka" else None

    def source(self, env: Any, partition_filters: Sequence[Any] = ()) -> Any:
        """The table's rows; ``partition_filters``: conditions on partition columns only (a filesystem
        table reads only the partitions satisfying them)."""
        if self.connector == "datagen":
            return env.add_source(DataGenSource(self.columns, self.options), "DataGen")
        if self.connector in _KAFKA:
            return self._kafka().source(env)
        if self.connector == "filesystem" and (self.partition_keys or self.options.get("format") == "avro"):
            from millstream.table.filesystem_source import filesystem_source  # lazy: partitioned / avro reading, on use
            from millstream.table.filesystem_table import check_options  # lazy: as above
            check_options(self.full_name, self.options, "source")
            return filesystem_source(env, self.full_name, self.columns, self.options, self.partition_keys,
                                     partition_filters)
        if self.connector == "filesystem" and self.options.get("format") == "json":
            from millstream.table.filesystem_table import JsonLineParser, check_options  # lazy: the json reader's, on use
            from millstream.table.table_formats import codec_for  # lazy: as above
            check_options(self.full_name, self.options, "source")
            codec = codec_for("json", "format", [(i, n, t) for i, (n, t) in enumerate(self.columns)], self.options,
                              "", self.full_name)
            return env.read_text_file(self.options["path"]).flat_map(JsonLineParser(codec, len(self.columns)))
        if self.connector == "filesystem":
            fmt = self.options.get("format")
            if fmt != "csv":
                raise TableException(f"table {self.path}: the filesystem connector reads format 'csv', 'json' or 'avro' in Millstream, "
                                     f"got {fmt!r}")
            delimiter = self.options.get("csv.field-delimiter", ",")
            return env.read_text_file(self.options["path"]).flat_map(CsvParser(self.columns, delimiter))
        raise TableException(f"Connector '{self.connector}' can only be used as a sink (table {self.path})")

    def sink(self, stream: Any) -> Any:
        name = f"Sink(table=[{self.full_name}], fields=[{', '.join(n for n, _ in self.columns)}])"
        if self.connector == "print":
            text = stream.map(RowToText([t for _, t in self.columns]), output_type=Types.STRING()).name(name)
            return text.print(self.options.get("print-identifier")).name(name)
        if self.connector == "blackhole":
            return stream.add_sink(BlackholeSink()).name(name)
        if self.connector in _KAFKA:
            return self._kafka().sink(stream, name)
        if self.connector == "filesystem":
            from millstream.table.filesystem_table import filesystem_sink  # lazy: the sink's module, on use
            return filesystem_sink(self.full_name, self.columns, self.options, self.partition_keys, stream, name)
        raise TableException(f"Connector '{self.connector}' can only be used as a source (table {self.path})")


class BlackholeSink(SinkFunction):
    """Flink's blackhole connector: swallows every row."""

    def invoke(self, value: Any, context: Any = None) -> None:
        return None


class CsvParser(FlatMapFunction):
    """A CSV line as a row of the table's types (Flink's csv format; a bad field fails the job)."""

    def __init__(self, columns: Sequence[tuple[str, DataType]], delimiter: str) -> None:
        self.types = [t for _, t in columns]
        self.delimiter = delimiter

    def flat_map(self, value: str) -> Any:
        if not value:
            return
        fields = next(csv.reader([value], delimiter=self.delimiter))
        if len(fields) != len(self.types):
            raise TableException(f"csv: the line {value!r} has {len(fields)} fields, the table {len(self.types)}")
        yield row_of([None if f == "" and t.root not in ("VARCHAR", "CHAR") else cast_value(f, t)
                      for f, t in zip(fields, self.types)])


_BITS = {"TINYINT": 8, "SMALLINT": 16, "INT": 32, "BIGINT": 64}


class DataGenSource(SourceFunction):
    """Flink's datagen connector: ``rows-per-second`` (default 10000), ``number-of-rows`` (default
    unbounded), per field ``kind`` random (``min``/``max``, ``length``) or sequence (``start``/``end``)."""

    def __init__(self, columns: Sequence[tuple[str, DataType]], options: dict[str, str]) -> None:
        self.columns, self.options = list(columns), options
        self.running = True

    def _value(self, name: str, t: DataType, n: int, rng: random.Random) -> Any:
        o = self.options
        kind = o.get(f"fields.{name}.kind", "random")
        if kind == "sequence":
            return int(o[f"fields.{name}.start"]) + n
        if t.root in _BITS:
            bits = _BITS[t.root]  # Flink's default range: the type's whole range
            return rng.randint(int(o.get(f"fields.{name}.min", -2**(bits - 1))),
                               int(o.get(f"fields.{name}.max", 2**(bits - 1) - 1)))
        if t.root in ("FLOAT", "DOUBLE", "DECIMAL"):
            return rng.uniform(float(o.get(f"fields.{name}.min", 0)), float(o.get(f"fields.{name}.max", 1)))
        if t.root == "BOOLEAN":
            return rng.random() < 0.5
        if t.root in ("TIMESTAMP", "TIMESTAMP_LTZ"):
            # Flink's default: the current time, less a random ``max-past`` (default 0)
            past = rng.randint(0, int(o.get(f"fields.{name}.max-past", 0)))
            return cast_value(datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(milliseconds=past), t)
        if t.root in ("VARCHAR", "CHAR"):
            length = int(o.get(f"fields.{name}.length", 100))
            return "".join(rng.choice("0123456789abcdef") for _ in range(length))
        raise TableException(f"datagen cannot generate values of type {t} (field {name})")

    def run(self, ctx: Any) -> None:
        rate = float(self.options.get("rows-per-second", 10000))
        total = self.options.get("number-of-rows")
        limit = int(total) if total is not None else None
        rng = random.Random()
        start = time.monotonic()
        n = 0
        while self.running and (limit is None or n < limit):
            ctx.collect(row_of([self._value(name, t, n, rng) for name, t in self.columns]))
            n += 1
            ahead = n / rate - (time.monotonic() - start)
            if ahead > 0:
                time.sleep(ahead)

    def cancel(self) -> None:
        self.running = False
