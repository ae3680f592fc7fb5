"""The ``kafka`` and ``upsert-kafka`` table connectors, on the DataStream KafkaSource and KafkaSink.

Options are Flink's: ``topic`` (or, for a ``kafka`` source, ``topic-pattern``),
``properties.bootstrap.servers`` and any other ``properties.<kafka property>``,
``scan.startup.mode`` (``earliest-offset`` / ``latest-offset`` / ``group-offsets`` (the default,
which needs ``properties.group.id``; a partition without a committed offset starts where
``properties.auto.offset.reset`` says, and fails without it, as Flink's) / ``timestamp`` with
``scan.startup.timestamp-millis`` / ``specific-offsets`` with ``scan.startup.specific-offsets``
``partition:0,offset:42;partition:1,offset:300``), ``scan.bounded.mode`` (``unbounded``, the
default, ``latest-offset``, ``timestamp``, ``group-offsets``), ``format`` or ``value.format``,
``key.format`` with ``key.fields`` (``a;b``), ``value.fields-include`` (``ALL`` / ``EXCEPT_KEY``),
``sink.delivery-guarantee`` (``at-least-once``, the default, ``exactly-once`` with
``sink.transactional-id-prefix``, ``none``), ``sink.parallelism``.

``upsert-kafka`` needs a ``PRIMARY KEY ... NOT ENFORCED``: its columns are the Kafka record's key
(``key.format``), the value (``value.format``) is the row. Its sink writes each +I/+U as an upsert
of its key and each -D as a tombstone (a null value); -U is dropped, as Flink's upsert sink does.
Its source reads the topic from its earliest offset as an upsert changelog and normalizes it
(Flink's ``ChangelogNormalize``, state per key): the first value of a key is +I, a changed one
-U/+U, an unchanged one nothing, a tombstone -D of the last value.

An unknown option, a missing required one or a bad value fails when the table is read or written,
before the job is submitted, naming the option (Flink's ``Unsupported options found for 'kafka'``
and ``Missing required options are: ...``).
"""
from __future__ import annotations

from typing import Any, Sequence

from millstream.common.row import Row, RowKind
from millstream.common.serialization import DeserializationSchema
from millstream.common.typeinfo import Types
from millstream.common.watermark_strategy import WatermarkStrategy
from millstream.datastream.connectors.base import DeliveryGuarantee
from millstream.datastream.connectors.kafka import (KafkaOffsetResetStrategy, KafkaOffsetsInitializer, KafkaSink,
                                                    KafkaSource, KafkaTopicPartition)
from millstream.datastream.connectors.kafka.sink import KafkaRecordSerializationSchema
from millstream.datastream.functions import FilterFunction, KeyedProcessFunction
from millstream.datastream.state import ValueStateDescriptor
from millstream.table.expression import TableException, ValidationException
from millstream.table.planner import KeyOf
from millstream.table.table_formats import RowCodec, codec_for, duration_ms, format_options
from millstream.table.types import DataType

__all__ = ["KafkaTable", "ChangelogNormalize"]

_COMMON = {"connector", "topic", "key.format", "value.format", "key.fields-prefix", "value.fields-include",
           "sink.parallelism", "sink.delivery-guarantee", "sink.transactional-id-prefix", "scan.bounded.mode",
           "scan.bounded.timestamp-millis", "scan.bounded.specific-offsets", "scan.parallelism"}
_KAFKA_ONLY = {"topic-pattern", "format", "key.fields", "scan.startup.mode", "scan.startup.specific-offsets",
               "scan.startup.timestamp-millis", "scan.topic-partition-discovery.interval", "sink.partitioner"}
_UPSERT_ONLY: set[str] = set()  # Flink's sink.buffer-flush.* (upsert batching) is not built: refused as unknown
STARTUP_MODES = ("earliest-offset", "latest-offset", "group-offsets", "timestamp", "specific-offsets")
BOUNDED_MODES = ("unbounded", "latest-offset", "group-offsets", "timestamp", "specific-offsets")
GUARANTEES = {"at-least-once": DeliveryGuarantee.AT_LEAST_ONCE, "exactly-once": DeliveryGuarantee.EXACTLY_ONCE,
              "none": DeliveryGuarantee.NONE}


class KafkaTable:
    """One ``kafka`` / ``upsert-kafka`` table: its options checked, its codecs, its source and sink."""

    def __init__(self, connector: str, full_name: str, columns: Sequence[tuple[str, DataType]],
                 options: dict[str, str], primary_key: Sequence[str] = ()) -> None:
        self.connector, self.full_name = connector, full_name
        self.columns, self.options, self.primary_key = list(columns), dict(options), tuple(primary_key)
        self.upsert = connector == "upsert-kafka"

    # -- options ---------------------------------------------------------------------------------

    def _fail(self, role: str, message: str) -> TableException:
        opts = "\n".join(f"'{k}'='{v}'" for k, v in sorted(self.options.items()))
        what = "a source for reading" if role == "source" else "a sink for writing"
        return ValidationException(f"Unable to create {what} table '{self.full_name}'.\n\nTable options are:\n\n"
                                   f"{opts}\n\nCaused by: {message}")

    def _formats(self) -> tuple[str | None, str, str | None]:
        """(key format, value format option, value format)."""
        o = self.options
        value_option = "value.format" if "value.format" in o or self.upsert else "format"
        return o.get("key.format"), value_option, o.get(value_option)

    def _check(self, role: str) -> None:
        o = self.options
        key_fmt, value_option, value_fmt = self._formats()
        allowed = _COMMON | (_UPSERT_ONLY if self.upsert else _KAFKA_ONLY)
        prefixes = ["properties."]
        for fmt, prefix in ((key_fmt, "key."), (value_fmt, "value." if value_option == "value.format" else "")):
            if fmt is not None:
                prefixes += [f"{prefix}{fmt}.{name}" for name in format_options(fmt)]
        unknown = sorted(k for k in o if k not in allowed and not any(k == p or (p.endswith(".") and k.startswith(p))
                                                                          for p in prefixes))
        if unknown:
            raise self._fail(role, f"Unsupported options found for '{self.connector}'.\n\nUnsupported options:\n\n"
                             + "\n".join(unknown) + "\n\nSupported options:\n\n"
                             + "\n".join(sorted(allowed | {"properties.*"})))
        missing = [k for k in ("properties.bootstrap.servers",) if not o.get(k)]
        if self.upsert:
            missing = [k for k in ("topic", "key.format", "value.format") if not o.get(k)] + missing
        elif not o.get("topic") and not (role == "source" and o.get("topic-pattern")):
            missing = ["topic"] + missing
        if missing:
            raise self._fail(role, "One or more required options are missing.\n\nMissing required options are:\n\n"
                             + "\n".join(missing))
        if "format" in o and "value.format" in o:
            raise self._fail(role, "The options 'format' and 'value.format' cannot be set at the same time: "
                             "use 'value.format'")
        if value_fmt is None:
            raise self._fail(role, "Could not find required scan format: set the option 'format' or 'value.format'")
        if role == "sink" and "topic-pattern" in o:
            raise self._fail(role, "Option 'topic-pattern' is only supported by the Kafka source; the sink "
                             "writes to 'topic'")
        if self.upsert and not self.primary_key:
            raise self._fail(role, "'upsert-kafka' tables require to define a PRIMARY KEY constraint. The PRIMARY "
                             "KEY specifies which columns should be read from or write to the Kafka message key.")
        if not self.upsert and key_fmt is not None and not o.get("key.fields"):
            raise self._fail(role, "A key format 'key.format' requires the declaration of one or more of key fields "
                             "using 'key.fields'.")
        include = o.get("value.fields-include", "ALL")
        if include not in ("ALL", "EXCEPT_KEY"):
            raise self._fail(role, f"Invalid value for option 'value.fields-include': {include!r} (ALL or EXCEPT_KEY)")
        names = [n for n, _ in self.columns]
        for k in self._key_names():
            if k not in names:
                raise self._fail(role, f"Could not find the field '{k}' (of 'key.fields' or the primary key) in the "
                                 f"table schema {names}")

    def _key_names(self) -> list[str]:
        if self.upsert:
            return list(self.primary_key)
        return [k.strip() for k in self.options.get("key.fields", "").split(";") if k.strip()]

    def _codecs(self, role: str) -> tuple[RowCodec | None, RowCodec]:
        self._check(role)
        key_fmt, value_option, value_fmt = self._formats()
        names = [n for n, _ in self.columns]
        key_names = self._key_names()
        fields = [(i, n, t) for i, (n, t) in enumerate(self.columns)]
        prefix = self.options.get("key.fields-prefix", "")
        if prefix and self.options.get("value.fields-include", "ALL") != "EXCEPT_KEY":
            raise self._fail(role, "A key prefix ('key.fields-prefix') is not allowed when 'value.fields-include' "
                             "is 'ALL'. Set 'value.fields-include' to 'EXCEPT_KEY' instead.")
        # the key format names its fields without the prefix (Flink's key.fields-prefix)
        key_fields = [(i, n[len(prefix):] if prefix and n.startswith(prefix) else n, t)
                      for i, n, t in (fields[names.index(k)] for k in key_names)]
        value_fields = fields if self.options.get("value.fields-include", "ALL") == "ALL" else \
            [f for f in fields if f[1] not in key_names]
        try:
            key = codec_for(key_fmt, "key.format", key_fields, self.options, "key.", self.full_name) \
                if key_fmt is not None else None
            value = codec_for(value_fmt, value_option, value_fields, self.options,
                              "value." if value_option == "value.format" else "", self.full_name)
        except TableException as e:
            raise self._fail(role, str(e)) from None
        return key, value

    def _properties(self) -> dict[str, str]:
        return {k[len("properties."):]: v for k, v in self.options.items() if k.startswith("properties.")}

    def _guarantee(self) -> tuple[DeliveryGuarantee, str | None]:
        text = self.options.get("sink.delivery-guarantee", "at-least-once")
        if text not in GUARANTEES:
            raise self._fail("sink", f"Invalid value for option 'sink.delivery-guarantee': {text!r} "
                             f"(one of {', '.join(GUARANTEES)})")
        prefix = self.options.get("sink.transactional-id-prefix")
        if GUARANTEES[text] is DeliveryGuarantee.EXACTLY_ONCE and not prefix:
            raise self._fail("sink", "sink.transactional-id-prefix must be specified when using "
                             "DeliveryGuarantee.EXACTLY_ONCE.")
        return GUARANTEES[text], prefix

    # -- source ----------------------------------------------------------------------------------

    def is_bounded(self) -> bool:
        return self.options.get("scan.bounded.mode", "unbounded") != "unbounded"

    def _offsets(self, option: str, modes: Sequence[str], default: str, what: str) -> Any:
        o = self.options
        mode = o.get(option, default)
        if mode not in modes:
            raise self._fail("source", f"Invalid value for option '{option}': {mode!r} (one of {', '.join(modes)})")
        if mode == "earliest-offset":
            return KafkaOffsetsInitializer.earliest()
        if mode == "latest-offset":
            return KafkaOffsetsInitializer.latest()
        if mode == "group-offsets":
            if not o.get("properties.group.id"):
                raise self._fail("source", f"'properties.group.id' is required when '{option}' is 'group-offsets'")
            reset = o.get("properties.auto.offset.reset", "none").upper()
            if reset not in KafkaOffsetResetStrategy.__members__:
                raise self._fail("source", f"Invalid value for option 'properties.auto.offset.reset': {reset.lower()!r}")
            return KafkaOffsetsInitializer.committed_offsets(KafkaOffsetResetStrategy[reset])
        if mode == "timestamp":
            key = f"scan.{what}.timestamp-millis"
            try:
                return KafkaOffsetsInitializer.timestamp(int(o[key]))
            except (KeyError, ValueError):
                raise self._fail("source", f"'{key}' (epoch milliseconds) is required when '{option}' is "
                                 f"'timestamp', got {o.get(key)!r}") from None
        key = f"scan.{what}.specific-offsets"
        topic = o.get("topic", "")
        offsets = {}
        try:
            for part in o[key].split(";"):
                fields = dict(kv.split(":", 1) for kv in part.strip().split(","))
                offsets[KafkaTopicPartition(topic, int(fields["partition"]))] = int(fields["offset"])
        except (KeyError, ValueError, AttributeError):
            raise self._fail("source", f"Invalid value for option '{key}': {o.get(key)!r}; expected "
                             "'partition:0,offset:42;partition:1,offset:300'") from None
        return KafkaOffsetsInitializer.offsets(offsets)

    def source(self, env: Any) -> Any:
        return self._source(env, WatermarkStrategy.no_watermarks())

    def source_with_watermarks(self, env: Any, strategy: WatermarkStrategy) -> Any:
        """The source with the DDL's watermark applied per partition (Flink's watermark push-down
        into its Kafka table source); only for ``kafka``: an upsert source normalizes first."""
        return self._source(env, strategy)

    def _source(self, env: Any, watermarks: WatermarkStrategy) -> Any:
        key, value = self._codecs("source")
        o = self.options
        builder = KafkaSource.builder().set_properties(self._properties())
        if o.get("topic"):
            builder.set_topics(*[t.strip() for t in o["topic"].split(";") if t.strip()])
        else:
            builder.set_topic_pattern(o["topic-pattern"])
        start = self._offsets("scan.startup.mode", STARTUP_MODES, "group-offsets", "startup") \
            if not self.upsert else None
        if start is not None:
            builder.set_starting_offsets(start)  # upsert-kafka reads its whole changelog: earliest (the default)
        if "scan.topic-partition-discovery.interval" in o:
            builder.set_property("partition.discovery.interval.ms", str(duration_ms(o["scan.topic-partition-discovery.interval"])))
        if self.is_bounded():
            builder.set_bounded(self._offsets("scan.bounded.mode", BOUNDED_MODES[1:], "latest-offset", "bounded"))
        width = len(self.columns)
        builder.set_value_only_deserializer(KafkaRowDeserializer(width, key, value, self.upsert))
        name = f"TableSourceScan(table=[[{self.full_name.replace('.', ', ')}]], fields=[{', '.join(n for n, _ in self.columns)}])"
        stream = env.from_source(builder.build(), watermarks, name)
        if "scan.parallelism" in o:
            stream = stream.set_parallelism(int(o["scan.parallelism"]))
        if not self.upsert:
            return stream
        keys = tuple(i for i, (n, _) in enumerate(self.columns) if n in self.primary_key)
        return stream.key_by(KeyOf(keys)).process(ChangelogNormalize()).name(
            f"ChangelogNormalize(key=[{', '.join(self.primary_key)}])")

    # -- sink ------------------------------------------------------------------------------------

    def accepts_updates(self) -> bool:
        return self.upsert

    def sink(self, stream: Any, name: str) -> Any:
        key, value = self._codecs("sink")
        guarantee, prefix = self._guarantee()
        if self.options.get("sink.partitioner", "default") != "default":
            raise self._fail("sink", f"Unsupported value for option 'sink.partitioner': "
                             f"{self.options['sink.partitioner']!r}: Millstream partitions as Flink's 'default' "
                             "(by the key's hash when there is a key, else spread)")
        props = self._properties()
        servers = props.pop("bootstrap.servers")
        builder = (KafkaSink.builder().set_bootstrap_servers(servers).set_delivery_guarantee(guarantee)
                   .set_record_serializer(KafkaRowSerializer(self.options["topic"], key, value, self.upsert)))
        if prefix is not None:
            builder.set_transactional_id_prefix(prefix)
        for k, v in props.items():
            builder.set_property(k, v)
        if self.upsert:
            # Flink's upsert sink: UPDATE_BEFORE carries nothing an upsert of the key does not
            stream = stream.filter(_NotUpdateBefore()).name("DropUpdateBefore") \
                .set_parallelism(stream.get_transformation().parallelism)
        out = stream.sink_to(builder.build()).name(name)
        if "sink.parallelism" in self.options:
            out = out.set_parallelism(int(self.options["sink.parallelism"]))
        return out


class _NotUpdateBefore(FilterFunction):
    def filter(self, value: Row) -> bool:
        return value.get_row_kind() is not RowKind.UPDATE_BEFORE


class KafkaRowDeserializer(DeserializationSchema):
    """A Kafka record (key and value) as a table row: the key's columns from the key, the rest
    from the value. Upsert: a record is an upsert (+U) of its key, a null value a -D of it."""

    def __init__(self, width: int, key: RowCodec | None, value: RowCodec, upsert: bool) -> None:
        self.width, self.key, self.value, self.upsert = width, key, value, upsert

    def deserialize(self, message: bytes | None) -> Row | None:  # a tombstone is None
        return self.deserialize_key_value(None, message)

    def deserialize_key_value(self, key: bytes | None, value: bytes | None) -> Row | None:
        values: list[Any] = [None] * self.width
        if value is None and not self.upsert:
            return None  # a tombstone in an append-only table: skipped, as Flink's kafka source does
        if value is not None:
            decoded = self.value.decode(value)
            if decoded is None:
                return None  # ignore-parse-errors
            for (i, _, _), v in zip(self.value.fields, decoded):
                values[i] = v
        if self.key is not None and key is not None:
            decoded = self.key.decode(key)
            if decoded is not None:
                for (i, _, _), v in zip(self.key.fields, decoded):
                    values[i] = v
        row = Row(*values)
        if self.upsert:
            row.set_row_kind(RowKind.DELETE if value is None else RowKind.UPDATE_AFTER)
        return row

    def get_produced_type(self) -> Any:
        return None


class KafkaRowSerializer(KafkaRecordSerializationSchema):
    """A table row as a Kafka record: the key columns through the key format, the row through the
    value format; upsert: -D is a tombstone (its key, a null value)."""

    def __init__(self, topic: str, key: RowCodec | None, value: RowCodec, upsert: bool) -> None:
        self.topic, self.key, self.value, self.upsert = topic, key, value, upsert

    def serialize(self, element: object) -> bytes:
        return self.value.encode(element)

    def serialize_record(self, element: Row) -> tuple[str, bytes | None, bytes | None]:
        key = self.key.encode(element) if self.key is not None else None
        if self.upsert and element.get_row_kind() is RowKind.DELETE:
            return self.topic, key, None
        return self.topic, key, self.value.encode(element)


class ChangelogNormalize(KeyedProcessFunction):
    """Flink's ChangelogNormalize of an upsert source: the last row per key in state; an upsert
    emits +I (new key) or -U/+U (changed; nothing when unchanged), a delete -D of the last row."""

    def open(self, runtime_context: Any) -> None:
        self.state = runtime_context.get_state(ValueStateDescriptor("last-row", Types.PICKLED_BYTE_ARRAY()))

    def process_element(self, value: Row, ctx: Any) -> Any:
        before = self.state.value()
        if value.get_row_kind() in (RowKind.INSERT, RowKind.UPDATE_AFTER):
            row = tuple(value)
            if before is not None and tuple(before) == row:
                return
            if before is None:
                yield _kind(row, RowKind.INSERT)
            else:
                yield _kind(before, RowKind.UPDATE_BEFORE)
                yield _kind(row, RowKind.UPDATE_AFTER)
            self.state.update(row)
        elif before is not None:
            yield _kind(before, RowKind.DELETE)
            self.state.clear()


def _kind(values: Any, kind: RowKind) -> Row:
    r = Row(*values)
    r.set_row_kind(kind)
    return r
