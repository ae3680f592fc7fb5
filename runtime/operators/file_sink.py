"""The row-format file sink (Flink's FileSink with a row encoder), one subtask's part files.

Each bucket (a sub-directory chosen from the processing time, or the base path itself) has at
most one open part file per subtask. A part file is written under a hidden in-progress name
``.<prefix>-<uuid>-<subtask>-<n><suffix>.inprogress.<uuid>`` and renamed to its final name when it
is rolled or when the input ends, so readers never see half-written files under final names.
Rolling follows Flink's DefaultRollingPolicy: on a record when the file already holds more than
``part_size`` bytes (checked per batch), and on processing time (every bucket check interval,
from the task's flush ticks) when it is ``rollover_interval`` old or was inactive that long.
The counter ``n`` is shared by the subtask's buckets, as Flink's.
"""
from __future__ import annotations

import os
import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, BinaryIO

from millstream.common.serialization import Encoder
from millstream.runtime import factories as ops
from millstream.runtime.operators.base import OperatorContext, StreamOperator
from millstream.runtime.operators.record_text import record_formatter

__all__ = ["FileSinkOperator", "java_date_pattern_to_strftime"]

_JAVA_DATE_FIELDS = {"yyyy": "%Y", "yy": "%y", "MM": "%m", "dd": "%d", "HH": "%H", "mm": "%M", "ss": "%S"}


def java_date_pattern_to_strftime(pattern: str) -> str:
    """``yyyy-MM-dd--HH`` → ``%Y-%m-%d--%H``; text in single quotes is literal, as in Java."""
    out: list[str] = []
    for token in re.findall(r"'[^']*'|yyyy|yy|MM|dd|HH|mm|ss|.", pattern):
        if token.startswith("'") and len(token) > 1:
            out.append(token[1:-1].replace("%", "%%"))
        else:
            out.append(_JAVA_DATE_FIELDS.get(token, token.replace("%", "%%")))
    return "".join(out)


@dataclass
class _PartFile:
    final_path: str
    in_progress_path: str
    file: BinaryIO
    created_ms: int
    last_write_ms: int
    size: int = 0


class FileSinkOperator(StreamOperator):
    def __init__(self, factory: ops.FileSinkFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        self.f = factory
        self._encoder: Any = factory.encoder or Encoder.simple_string_encoder()
        self._text = record_formatter(factory.type_info)
        self._unique_id = str(uuid.uuid4())
        self._subtask = ctx.env.subtask_index
        self._counter = 0
        self._parts: dict[str, _PartFile] = {}
        self._bucket_strftime = java_date_pattern_to_strftime(factory.bucket_format) if factory.bucket_format else None
        self._tz: Any = None
        self._last_check_ms = 0

    def open(self) -> None:
        base = self.f.base_path
        try:
            os.makedirs(base, exist_ok=True)
            if not os.access(base, os.W_OK):
                raise PermissionError(f"[Errno 13] Permission denied: {base!r}")
        except OSError as e:
            self.fail(e, f"opening its output: cannot write to directory {base!r}")
        if self.f.bucket_timezone:
            from zoneinfo import ZoneInfo

            try:
                self._tz = ZoneInfo(self.f.bucket_timezone)
            except Exception as e:  # noqa: BLE001 - ZoneInfo raises several types for a bad id
                self.fail(ValueError(f"unknown time zone {self.f.bucket_timezone!r}: {e}"), "opening its output")
        self._last_check_ms = self.ctx.env.now_ms()
        super().open()

    # -- records ---------------------------------------------------------------------------------

    def _encode(self, records: list[Any]) -> bytes:
        enc = self._encoder
        if type(enc) is Encoder:  # the simple string encoder: one join and one encode per batch
            return ("\n".join(map(self._text, records)) + "\n").encode(enc.charset)
        return b"".join([enc.encode(r) for r in records])

    def _bucket_dir(self, now_ms: int) -> str:
        if self._bucket_strftime is None:
            return self.f.base_path
        moment = datetime.fromtimestamp(now_ms / 1000, tz=self._tz or timezone.utc)
        if self._tz is None:
            moment = moment.astimezone()  # the machine's zone, as Java's default
        return os.path.join(self.f.base_path, moment.strftime(self._bucket_strftime))

    def _new_part(self, bucket: str, now_ms: int) -> _PartFile:
        name = f"{self.f.part_prefix}-{self._unique_id}-{self._subtask}-{self._counter}{self.f.part_suffix}"
        self._counter += 1
        os.makedirs(bucket, exist_ok=True)
        in_progress = os.path.join(bucket, f".{name}.inprogress.{uuid.uuid4()}")
        return _PartFile(os.path.join(bucket, name), in_progress, open(in_progress, "wb"), now_ms, now_ms)

    def process_batch(self, records: list[Any]) -> None:
        now = self.ctx.env.now_ms()
        bucket = self._bucket_dir(now)
        part = self._parts.get(bucket)
        try:
            data = self._encode(records)
            if part is not None and self.f.part_size is not None and part.size > self.f.part_size:
                self._finish(bucket)
                part = None
            if part is None:
                part = self._parts[bucket] = self._new_part(bucket, now)
            part.file.write(data)
            part.size += len(data)
            part.last_write_ms = now
        except Exception as e:  # fail() passes an OperatorError from _finish as is
            self.fail(e, f"writing {part.in_progress_path if part else bucket!r}")

    # -- rolling ---------------------------------------------------------------------------------

    def _finish(self, bucket: str) -> None:
        part = self._parts.pop(bucket)
        try:
            part.file.close()
            os.replace(part.in_progress_path, part.final_path)
        except OSError as e:
            self.fail(e, f"finishing part file {part.final_path!r}")

    def _roll_on_processing_time(self, now_ms: int) -> None:
        rollover, inactivity = self.f.rollover_interval_ms, self.f.inactivity_interval_ms
        for bucket, part in list(self._parts.items()):
            if (rollover is not None and now_ms - part.created_ms >= rollover) or (
                inactivity is not None and now_ms - part.last_write_ms >= inactivity
            ):
                self._finish(bucket)

    def flush(self) -> None:
        now = self.ctx.env.now_ms()
        for part in self._parts.values():
            try:
                part.file.flush()
            except OSError as e:
                self.fail(e, f"writing {part.in_progress_path!r}")
        if now - self._last_check_ms >= self.f.bucket_check_interval_ms:
            self._last_check_ms = now
            self._roll_on_processing_time(now)

    def end_input(self) -> None:
        """Bounded input ended: every part file is finished (Flink's BATCH commit at the end)."""
        for bucket in list(self._parts):
            self._finish(bucket)
        super().end_input()

    def close(self) -> None:
        """Closes what is open; files not finished by ``end_input`` stay hidden as in-progress."""
        parts, self._parts = list(self._parts.values()), {}
        try:
            for part in parts:
                part.file.close()
        except OSError as e:
            self.fail(e, f"closing {part.in_progress_path!r}")
        finally:
            super().close()
