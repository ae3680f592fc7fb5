"""The file sink (Flink's FileSink with a row encoder or a bulk writer), one subtask's part files.

A bulk format (``bulk_writer_factory``: Avro, Parquet, CSV) writes a part file through one
BulkWriter, finished when the file rolls; it rolls only on checkpoints and at the end of the input
(Flink's OnCheckpointRollingPolicy), and is committed as a row-format file is.

Each bucket (a sub-directory chosen from the processing time, or from the record by
``partition_bucket`` (a table's ``k=v/`` partitions), or the base path itself) has at
most one open part file per subtask. A part file is written under a hidden in-progress name
``.<prefix>-<uid>-<subtask>-<n><suffix>.inprogress.<uuid>``, so readers never see half-written
files under final names. Rolling follows Flink's DefaultRollingPolicy: on a record when the file
already holds more than ``part_size`` bytes (checked per batch), and on processing time (every
bucket check interval, from the task's flush ticks) when it is ``rollover_interval`` old or was
inactive that long. The counter ``n`` is shared by the subtask's buckets, as Flink's.

Without checkpointing, a rolled file is renamed to its final name at once, and so is every open
file when the input ends. With checkpointing the sink is exactly-once, as Flink's FileSink: a
rolled file becomes *pending* (closed, synced, still hidden); a checkpoint rolls every open file
and takes the pending files not yet taken by a checkpoint; when checkpoint ``n`` completes, the
pending files of checkpoints <= ``n`` are committed (renamed to their final names). A restore
commits the restored checkpoint's pending files and deletes what the failed attempt wrote after
it, so a file only becomes visible once the records in it can never be replayed.

*Partition commit* (``partition_commit_trigger``, a table's ``sink.partition-commit.*``): a
partition (bucket) gets its success file (``success_file_name``, ``_SUCCESS``) once the checkpoint
that made its data visible completes and the trigger says the partition is done, as of that
checkpoint: ``partition-time`` when the watermark at the checkpoint has passed the partition's time
plus the delay, ``process-time`` when the processing time has passed the partition's creation plus
the delay; at the end of the input every partition is done. Several subtasks may write one
partition, and each commits only its own files, so each leaves a hidden marker
``.<success>.<uid family>.<subtask>`` when its part is done, and the success file is written (by
whichever comes last) once every subtask with a part file in the partition has left its marker.
Without checkpointing the partitions are committed at the end of the input.
"""
from __future__ import annotations

import hashlib
import os
import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, BinaryIO

from millstream.common.serialization import Encoder
from millstream.runtime import operator_factories
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
    writer: Any = None  # a bulk format's BulkWriter over ``file``


_STATE_VERSION = 1


class FileSinkOperator(StreamOperator):
    """One subtask of the row-format FileSink.

    Its checkpoint state (what :meth:`snapshot_state` returns, plain builtins)::

        {"version": 1, "uid": str, "subtask": int, "counter": int,
         "pending": {checkpoint_id: {hidden_path: final_path}}}

    ``uid`` and ``subtask`` name the part files this writer makes (a restored writer goes on
    with them, so its names stay unique and the failed attempt's leftovers can be recognized);
    ``counter`` is the next part number; ``pending`` holds the files closed for each checkpoint
    that was not yet known complete when the snapshot was taken.
    """

    def __init__(self, factory: operator_factories.FileSinkFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        self.f = factory
        self._encoder: Any = factory.encoder or Encoder.simple_string_encoder()
        self._text = record_formatter(factory.type_info)
        # The uid's first 8 hex digits name the job and operator, the rest is this writer's own:
        # a later attempt of the job recognizes the part files of a failed one by them.
        self._family = hashlib.sha256(f"{getattr(ctx.env, 'job_id', '')}/{ctx.operator_id}".encode()).hexdigest()[:8]
        self._unique_id = self._family + str(uuid.uuid4())[8:]
        self._restored = False
        self._subtask = ctx.env.subtask_index
        self._counter = 0
        self._parts: dict[str, _PartFile] = {}
        self._bucket_strftime = java_date_pattern_to_strftime(factory.bucket_format) if factory.bucket_format else None
        self._tz: Any = None
        self._last_check_ms = 0
        self._exactly_once = bool(ctx.env.checkpointing_enabled)
        self._pending_unassigned: dict[str, str] = {}  # hidden path -> final path, closed since the last checkpoint
        self._pending: dict[int, dict[str, str]] = {}  # checkpoint id -> hidden path -> final path
        # partition commit: bucket -> [creation ms, snapshots taken when it was last written]
        self._waiting: dict[str, list[int]] = {}
        self._snapshots = 0
        # checkpoint id -> (watermark, now, input ended, snapshots before it, buckets) as of its snapshot
        self._candidates: dict[int, tuple[int, int, bool, int, list[str]]] = {}
        self._ended = False

    def open(self) -> None:
        base = self.f.base_path
        try:
            os.makedirs(base, exist_ok=True)
            if not os.access(base, os.W_OK):
                raise PermissionError(f"[Errno 13] Permission denied: {base!r}")
        except OSError as e:
            self.fail(e, f"opening its output: cannot write to directory {base!r}")
        if not self._restored:
            self._delete_stale_attempts()
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
        part = _PartFile(os.path.join(bucket, name), in_progress, open(in_progress, "wb"), now_ms, now_ms)
        if self.f.bulk_writer_factory is not None:
            part.writer = self.f.bulk_writer_factory.create(part.file)
        return part

    def process_batch(self, records: list[Any]) -> None:
        now = self.ctx.env.now_ms()
        if self.f.partition_bucket is None:
            self._write(self._bucket_dir(now), records, now)
            return
        groups: dict[str, list[Any]] = {}
        for r in records:
            groups.setdefault(os.path.join(self.f.base_path, self.f.partition_bucket(r)), []).append(r)
        for bucket, group in groups.items():
            self._write(bucket, group, now)

    @property
    def _committing(self) -> bool:
        return self.f.partition_commit_trigger is not None and self.f.partition_bucket is not None

    def _write(self, bucket: str, records: list[Any], now: int) -> None:
        part = self._parts.get(bucket)
        if self._committing:
            self._waiting.setdefault(bucket, [now, 0])[1] = self._snapshots
        try:
            if self.f.bulk_writer_factory is not None:  # rolls on checkpoints and at the end only
                if part is None:
                    part = self._parts[bucket] = self._new_part(bucket, now)
                part.writer.add_elements(records)
                part.last_write_ms = now
                return
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
        """Rolls the bucket's open part file: finished at once, or pending when checkpointing."""
        part = self._parts.pop(bucket)
        try:
            if part.writer is not None:
                part.writer.finish()  # the format's buffered records and trailer
            if self._exactly_once:
                # a checkpoint that takes this file promises its records are durable
                part.file.flush()
                os.fsync(part.file.fileno())
                part.file.close()
                self._pending_unassigned[part.in_progress_path] = part.final_path
            else:
                part.file.close()
                os.replace(part.in_progress_path, part.final_path)
        except Exception as e:  # noqa: BLE001 - a bulk writer's finish raises what its library raises
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
        """Bounded input ended: every part file is finished (Flink's BATCH commit at the end), or,
        when checkpointing, becomes pending until a (final) checkpoint covering it completes."""
        for bucket in list(self._parts):
            self._finish(bucket)
        self._ended = True
        if self._committing and not self._exactly_once:
            for bucket in list(self._waiting):
                self._commit_partition(bucket)
            self._waiting.clear()
        super().end_input()

    # -- checkpoints -----------------------------------------------------------------------------

    def snapshot_state(self, checkpoint_id: int) -> dict[str, Any]:
        """Rolls every open part file and gives checkpoint ``checkpoint_id`` the pending files no
        checkpoint took yet; returns a copy of the pending files and the names' identity."""
        for bucket in list(self._parts):
            self._finish(bucket)
        if self._pending_unassigned:
            self._pending.setdefault(checkpoint_id, {}).update(self._pending_unassigned)
            self._pending_unassigned = {}
        if self._committing:
            self._candidates[checkpoint_id] = (self.current_watermark, self.ctx.env.now_ms(), self._ended, self._snapshots,
                                               list(self._waiting))
            self._snapshots += 1
        return {
            "version": _STATE_VERSION,
            "uid": self._unique_id,
            "subtask": self._subtask,
            "counter": self._counter,
            "pending": {cid: dict(files) for cid, files in self._pending.items()},
            "partitions": {b: created for b, (created, _) in self._waiting.items()},
        }

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Commits the pending files of every checkpoint <= ``checkpoint_id`` (a notification may
        have been lost for an earlier one)."""
        for cid in sorted(c for c in self._pending if c <= checkpoint_id):
            files = self._pending[cid]
            for hidden in list(files):
                self._commit(hidden, files[hidden], cid)
                del files[hidden]
            del self._pending[cid]
        for cid in sorted(c for c in self._candidates if c <= checkpoint_id):
            self._commit_partitions(*self._candidates.pop(cid))

    # -- partition commit ------------------------------------------------------------------------

    def _partition_done(self, bucket: str, watermark: int, now: int, ended: bool) -> bool:
        delay = self.f.partition_commit_delay_ms
        if ended:
            return True
        if self.f.partition_commit_trigger == "process-time":
            return now > self._waiting[bucket][0] + delay
        try:
            at = self.f.partition_time_of(os.path.relpath(bucket, self.f.base_path))
        except Exception as e:  # noqa: BLE001 - the extractor names the partition and its pattern
            self.fail(e, f"extracting the time of partition {bucket!r}")
        return watermark > at + delay

    def _commit_partitions(self, watermark: int, now: int, ended: bool, epoch: int, buckets: list[str]) -> None:
        """The partitions of a completed checkpoint (its files are committed) that are done."""
        for bucket in buckets:
            if bucket in self._waiting and self._partition_done(bucket, watermark, now, ended):
                self._commit_partition(bucket)
                if self._waiting[bucket][1] <= epoch:  # not written since that checkpoint
                    del self._waiting[bucket]

    def _commit_partition(self, bucket: str) -> None:
        """This subtask's part of ``bucket`` is done: its marker, then the success file when every
        subtask with a part file there has left its marker."""
        name = self.f.success_file_name
        try:
            open(os.path.join(bucket, f".{name}.{self._family}.{self._subtask}"), "wb").close()
            prefix = re.escape(self.f.part_prefix)
            writer = re.compile(rf"\.?{prefix}-{self._family}[0-9a-f-]{{28}}-(\d+)-\d+.*")
            marker = re.compile(rf"\.{re.escape(name)}\.{self._family}\.(\d+)")
            writers, done = set(), set()
            for entry in os.listdir(bucket):
                if (m := marker.fullmatch(entry)) is not None:
                    done.add(m.group(1))
                elif (m := writer.fullmatch(entry)) is not None:
                    writers.add(m.group(1))
            if writers <= done:
                hidden = os.path.join(bucket, f".{name}.{uuid.uuid4()}.tmp")
                open(hidden, "wb").close()
                os.replace(hidden, os.path.join(bucket, name))
        except OSError as e:
            self.fail(e, f"committing partition {bucket!r} (its {name} file)")

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        """The aborted checkpoint's pending files stay pending: the next completed one commits them
        (its id is larger), and its snapshot carries them, as Flink's."""

    def has_uncommitted_output(self) -> bool:
        return self._exactly_once and bool(self._parts or self._pending_unassigned or self._pending or self._waiting)

    def initialize_state(self, state: Any) -> None:
        """Restores from a completed checkpoint: commits its pending files (idempotently: one
        already renamed is left alone) and deletes the hidden part files this writer made after
        it, which hold records the sources will replay. Goes on with the state's part names."""
        uid, subtask, counter, pending = self._check_state(state)
        self._restored = True
        if self._committing:  # the restored checkpoint's partitions wait for their commit again
            now = self.ctx.env.now_ms()
            for bucket, created in dict(state.get("partitions") or {}).items():
                self._waiting[bucket] = [int(created) if isinstance(created, int) else now, 0]
        for cid in sorted(pending):
            for hidden, final in pending[cid].items():
                self._commit(hidden, final, cid)
        if subtask == self._subtask:
            self._delete_uncommitted(uid, subtask)
            self._unique_id = uid
            self._counter = max(self._counter, counter)
        # else a rescaled restore handed this subtask another's state: it commits that state's files
        # but keeps its fresh uid, so its names cannot meet the old writer's, and leaves the cleanup
        # to the subtask of the old index (were several handed the state, one could otherwise delete
        # files another already writes under that name); a leftover stays hidden either way

    def _check_state(self, state: Any) -> tuple[str, int, int, dict[int, dict[str, str]]]:
        problem = None
        if not isinstance(state, dict) or state.get("version") != _STATE_VERSION:
            problem = f"expected a dict with version {_STATE_VERSION}, got {type(state).__name__}"
            if isinstance(state, dict):
                problem += f" with version {state.get('version')!r}"
        elif not (
            isinstance(state.get("uid"), str)
            and isinstance(state.get("subtask"), int)
            and isinstance(state.get("counter"), int)
            and isinstance(state.get("pending"), dict)
            and all(isinstance(files, dict) for files in state["pending"].values())
        ):
            problem = f"expected keys uid (str), subtask, counter (int), pending (dict), got {state!r}"
        if problem is not None:
            self.fail(ValueError(f"unreadable FileSink state: {problem}"), "restoring its state")
        return state["uid"], state["subtask"], state["counter"], state["pending"]

    def _commit(self, hidden: str, final: str, checkpoint_id: int) -> None:
        try:
            os.replace(hidden, final)
        except FileNotFoundError:
            if os.path.exists(final):
                return  # committed before: by an earlier notification or an earlier attempt's restore
            lost = FileNotFoundError(
                f"pending part file {final!r} of completed checkpoint {checkpoint_id} is lost: "
                f"neither it nor its in-progress file {hidden!r} exists"
            )
            self.fail(lost, "committing its part files")
        except OSError as e:
            self.fail(e, f"committing part file {final!r} of checkpoint {checkpoint_id}")

    def _delete_stale_attempts(self) -> None:
        """A writer that starts without state deletes the hidden part files of this subtask index
        that earlier attempts of the same job and operator left (same uid family, another uid).

        Safe: starting without state means no completed checkpoint holds this subtask's state, so
        none of those files is pending in one (a rescaled restore commits the pending files it is
        handed before its writers open, and a subtask index a checkpoint covers always gets state).
        Files of other jobs, operators, subtasks or already committed (final names) are left alone.
        """
        prefix, suffix = re.escape(self.f.part_prefix), re.escape(self.f.part_suffix)
        uid = rf"{self._family}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{12}}"
        stale = re.compile(rf"\.{prefix}-({uid})-{self._subtask}-\d+{suffix}\.inprogress\.[0-9a-f-]+")
        for directory, _dirs, names in os.walk(self.f.base_path):
            for name in names:
                match = stale.fullmatch(name)
                if match is None or match.group(1) == self._unique_id:
                    continue
                try:
                    os.remove(os.path.join(directory, name))
                except FileNotFoundError:
                    continue
                except OSError as e:
                    self.fail(e, f"deleting the part file {name!r} of a failed attempt")

    def _delete_uncommitted(self, uid: str, subtask: int) -> None:
        """Deletes the hidden part files named by ``uid`` and ``subtask`` under the base path (any
        bucket): after the commits above, they are exactly what was written after the checkpoint.
        Other subtasks' and other writers' files have other names and are left alone."""
        prefix, suffix = re.escape(self.f.part_prefix), re.escape(self.f.part_suffix)
        mine = re.compile(rf"\.{prefix}-{re.escape(uid)}-{subtask}-\d+{suffix}\.inprogress\.[0-9a-f-]+")
        base = self.f.base_path
        for directory, _dirs, names in os.walk(base):
            for name in names:
                if mine.fullmatch(name):
                    path = os.path.join(directory, name)
                    try:
                        os.remove(path)
                    except FileNotFoundError:
                        continue  # another subtask restoring the same state removed it first
                    except OSError as e:
                        self.fail(e, f"deleting the uncommitted part file {path!r} of a failed attempt")

    def close(self) -> None:
        """Closes what is open and never commits: files not finished by ``end_input`` (or, when
        checkpointing, not committed by a completed checkpoint) stay hidden."""
        parts, self._parts = list(self._parts.values()), {}
        try:
            for part in parts:
                part.file.close()
        except OSError as e:
            self.fail(e, f"closing {part.in_progress_path!r}")
        finally:
            super().close()
