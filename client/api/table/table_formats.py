"""The table formats Kafka and filesystem tables share: ``csv``, ``json``, ``raw`` and ``avro`` (Flink's
identifiers and option names), as picklable codecs between a table row's values and bytes.

A codec covers some of a table's columns (``fields``: positions in the row, with their types):
all of them for a value, the key columns for a key. ``decode`` gives those columns' values
(cast to the column types), ``encode`` their bytes. Values follow Flink's text forms for
these formats: a TIMESTAMP as ``2020-12-30 12:13:14.123`` (the SQL form, Flink's default
``json.timestamp-format.standard``), a BOOLEAN as ``true``/``false``, null as an empty CSV field
or a JSON ``null``.

Options are read under the format's prefix: ``csv.field-delimiter`` (``,``),
``csv.ignore-parse-errors``, ``json.fail-on-missing-field``, ``json.ignore-parse-errors``,
``raw.charset``, ``avro.codec`` (``avro_rows``) (for a key: ``key.csv.field-delimiter`` and so on). An unknown format fails naming
it and the formats there are, as Flink's factory discovery does.
"""
from __future__ import annotations

import csv
import datetime
import decimal
import io
import json
from typing import Any, Sequence

from millstream.runtime import config as cfg
from millstream.table.expression import TableException, cast_value
from millstream.table.types import DataType

__all__ = ["FORMATS", "RowCodec", "codec_for", "format_options", "duration_ms", "memory_bytes"]

FORMATS = ("csv", "json", "raw", "avro")
_OPTIONS = {"csv": ("field-delimiter", "ignore-parse-errors", "quote-character", "null-literal"),
            "json": ("fail-on-missing-field", "ignore-parse-errors", "timestamp-format.standard",
                     "encode.decimal-as-plain-number"),
            "raw": ("charset", "endianness"),
            "avro": ("codec", "timestamp_mapping.legacy")}


def format_options(fmt: str) -> tuple[str, ...]:
    """The option names (without the format prefix) format ``fmt`` reads."""
    return _OPTIONS.get(fmt, ())


def codec_for(fmt: str | None, option: str, fields: Sequence[tuple[int, str, DataType]], options: dict[str, str],
              prefix: str, table: str) -> "RowCodec":
    """The codec of format ``fmt`` (named by table option ``option``) for ``fields`` (position in the
    row, name, type); ``prefix``: where its options are (``""`` or ``"key."``)."""
    if fmt is None:
        raise TableException(f"Table {table}: a format is required: set the option '{option}' "
                             f"(one of {', '.join(FORMATS)})")
    if fmt not in FORMATS:
        raise TableException(f"Could not find any factory for identifier '{fmt}' that implements "
                             f"'DeserializationFormatFactory' (option '{option}' of table {table}). Available "
                             f"factory identifiers in Millstream are: {', '.join(FORMATS)}")
    own = {k[len(prefix) + len(fmt) + 1:]: v for k, v in options.items() if k.startswith(f"{prefix}{fmt}.")}
    if fmt == "raw" and len(fields) != 1:
        raise TableException(f"Table {table}: the 'raw' format ('{option}') supports only one physical column, "
                             f"got {len(fields)}: {[n for _, n, _ in fields]}")
    return RowCodec(fmt, tuple(fields), own)


def _text(v: Any, t: DataType) -> str:
    """A value's text in Flink's csv/json (SQL) forms."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, datetime.datetime):
        text = v.strftime("%Y-%m-%d %H:%M:%S")
        if v.microsecond:
            frac = f"{v.microsecond:06d}"[:max(1, min(6, t.length if t.length is not None else 6))]
            text += "." + (frac.rstrip("0") or "0")
        return text
    if isinstance(v, (datetime.date, datetime.time)):
        return v.isoformat()
    return str(v)


def _json_value(v: Any, t: DataType) -> Any:
    if v is None or isinstance(v, (bool, int, float, str, decimal.Decimal)):
        return v  # a DECIMAL is a JSON number (the encoder's default below)
    return _text(v, t)


def _decimal_default(o: Any) -> Any:
    if isinstance(o, decimal.Decimal):
        return float(o)
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


class RowCodec:
    """Bytes <-> the values of some of a row's columns in one format (see the module doc)."""

    def __init__(self, fmt: str, fields: tuple[tuple[int, str, DataType], ...], options: dict[str, str]) -> None:
        self.fmt, self.fields, self.options = fmt, fields, options
        self.delimiter = options.get("field-delimiter", ",")
        self.ignore_errors = options.get("ignore-parse-errors", "false").lower() == "true"
        self.fail_on_missing = options.get("fail-on-missing-field", "false").lower() == "true"
        self.charset = options.get("charset", "UTF-8")
        self.avro: Any = None
        if fmt == "avro":
            from millstream.table.avro_rows import AvroRowConverter  # lazy: fastavro loads only for avro tables
            self.avro = AvroRowConverter(fields, options)

    # -- encoding ----------------------------------------------------------------------------------

    def encode(self, row: Any) -> bytes:
        """``row``: the table row (a Row or a sequence), its values by position."""
        if self.avro is not None:
            return self.avro.encode(row)
        if self.fmt == "json":
            doc = {name: _json_value(row[i], t) for i, name, t in self.fields}
            return json.dumps(doc, separators=(",", ":"), ensure_ascii=False, default=_decimal_default).encode()
        if self.fmt == "raw":
            i, _, t = self.fields[0]
            v = row[i]
            if v is None:
                return b""
            return v if isinstance(v, bytes) else _text(v, t).encode(self.charset)
        out = io.StringIO()
        csv.writer(out, delimiter=self.delimiter, lineterminator="").writerow(
            ["" if row[i] is None else _text(row[i], t) for i, _, t in self.fields])
        return out.getvalue().encode()

    # -- decoding ----------------------------------------------------------------------------------

    def decode(self, data: bytes) -> list[Any] | None:
        """The fields' values (cast to their types) in ``fields`` order; None: a bad record skipped
        (``ignore-parse-errors``). A bad record otherwise raises naming it."""
        try:
            return self._decode(data)
        except (ValueError, TableException, TypeError, EOFError, IndexError) as e:
            if self.ignore_errors:
                return None
            raise TableException(f"Failed to deserialize {self.fmt} record {data[:200]!r}: {e}") from None

    def _decode(self, data: bytes) -> list[Any]:
        if self.avro is not None:
            return self.avro.decode(data)
        if self.fmt == "raw":
            t = self.fields[0][2]
            if t.root in ("BINARY", "VARBINARY", "BYTES"):
                return [data]
            return [cast_value(data.decode(self.charset), t)]
        text = data.decode("utf-8")
        if self.fmt == "json":
            doc = json.loads(text)
            if not isinstance(doc, dict):
                raise ValueError(f"a JSON object is expected, got {type(doc).__name__}")
            values = []
            for _, name, t in self.fields:
                if name not in doc and self.fail_on_missing:
                    raise ValueError(f"Could not find field with name '{name}'")
                v = doc.get(name)
                values.append(None if v is None else cast_value(v if not isinstance(v, (dict, list)) else json.dumps(v), t))
            return values
        fields = next(csv.reader([text], delimiter=self.delimiter))
        if len(fields) != len(self.fields):
            raise ValueError(f"the line has {len(fields)} fields, the format {len(self.fields)}")
        return [None if f == "" and t.root not in ("VARCHAR", "CHAR") else cast_value(f, t)
                for f, (_, _, t) in zip(fields, self.fields)]


def duration_ms(text: str) -> int:
    """A Flink Duration option (``30 s``, ``1 min``, ``500 ms``; a bare number is milliseconds) in ms."""
    try:
        return cfg.parse_duration(str(text))
    except ValueError:
        raise TableException(f"Could not parse the duration {text!r} (e.g. '30 s', '1 min', '500 ms')") from None


def memory_bytes(text: str) -> int:
    """A Flink MemorySize option (``128mb``, ``1 kb``, ``4096``) in bytes."""
    try:
        return cfg.parse_memory_size(str(text))
    except ValueError:
        raise TableException(f"Could not parse the memory size {text!r} (e.g. '128mb', '1 kb', '4096')") from None