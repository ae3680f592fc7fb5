"""Source readers: what one subtask of a source reads, batch by batch, and where it is.

Splits are computed the same way in every subtask from the factory and the parallelism, so no
coordinator is needed: subtask ``i`` reads split ``i`` (sequences, generators) or its share of the
bytes of all input files (text). Every reader reports ``position()`` per split id, the value a
later checkpoint stores and ``start_positions`` resumes from.

Pull readers (:class:`SourceReader`) return a batch per ``poll()``: a list, ``[]`` when nothing is
available yet (a rate limit), ``None`` at the end. A ``SourceFunction`` pushes instead
(:class:`SourceFunctionReader`), so it gets its own ``run``.
"""
from __future__ import annotations

import math
import os
import re
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from millstream.datastream.functions import RuntimeContext, SourceFunction
from millstream.runtime import operator_factories
from millstream.runtime.operators.kafka_splits import parse_split_id
from millstream.runtime.operators.source_reader import SourceReader
from millstream.runtime.timestamps import stamped

if TYPE_CHECKING:
    from millstream.runtime.task.environment import TaskEnvironment

__all__ = [
    "SourceReader", "CollectionReader", "SequenceReader", "TextFileReader", "GeneratorReader",
    "SourceFunctionReader", "FileSplit", "SourceCancelled", "sequence_splits", "text_file_splits",
    "create_source_reader", "rescaled_positions", "reads_index_ranges", "FormatFileReader", "subtask_of_path", "DONE", "LISTED",
]

Emit = Callable[[list[Any]], None]
_LONG_MAX = 2**63 - 1
_MIN_CHUNK = 4 << 10
_MAX_CHUNK = 8 << 20


class CollectionReader(SourceReader):
    """``from_collection``: non-parallel, so subtask 0 owns the single split."""

    SPLIT_ID = "collection"

    def __init__(self, elements: list[Any], batch_size: int, start: int = 0) -> None:
        self._elements = elements
        self._batch_size = batch_size
        self._next = start

    def poll(self) -> list[Any] | None:
        if self._next >= len(self._elements):
            return None
        batch = self._elements[self._next : self._next + self._batch_size]
        self._next += len(batch)
        return batch

    def position(self) -> dict[str, Any]:
        return {self.SPLIT_ID: self._next}


def sequence_splits(start: int, end: int, num_splits: int) -> list[tuple[str, int, int]]:
    """Flink's NumberSequenceIterator.split: contiguous inclusive ranges ``(split_id, from, to)``; the
    first ``total % num_splits`` splits hold one number more; empty splits are dropped. A split's id
    is its range, ``"from..to"``, so a checkpointed position can be read at another parallelism."""
    total = end - start + 1
    per_split, extra = divmod(total, num_splits)
    splits: list[tuple[str, int, int]] = []
    current = start
    for i in range(num_splits):
        n = per_split + (1 if i < extra else 0)
        if n > 0:
            splits.append((f"{current}..{current + n - 1}", current, current + n - 1))
        current += n
    return splits


def _split_of_subtask(splits: list[tuple[str, int, int]], subtask_index: int) -> tuple[str, int, int] | None:
    # Empty splits are only dropped at the tail (counts never increase), so split i is subtask i's.
    return splits[subtask_index] if subtask_index < len(splits) else None


def range_split(split_id: str) -> tuple[str, int, int]:
    """A sequence split back from its id ``"from..to"``."""
    low, sep, high = split_id.partition("..")
    try:
        if not sep:
            raise ValueError(split_id)
        return split_id, int(low), int(high)
    except ValueError:
        raise ValueError(f"not a sequence split id: {split_id!r}") from None


def respread_ranges(every: Mapping[str, Any], parallelism: int, subtask_index: int) -> dict[str, int]:
    """This subtask's share of the indices that range splits ``every`` (split id -> next index,
    from every old subtask) left unread: all of them in index order, cut into ``parallelism``
    contiguous shares as :func:`sequence_splits` cuts a fresh sequence, as splits ``"a..b"`` to
    read from ``a``. Every new subtask cuts the same positions the same way, so each index is
    read by exactly one of them, and a subtask that a scale-up added gets its share."""
    if parallelism < 1 or not 0 <= subtask_index < parallelism:
        raise ValueError(f"subtask {subtask_index} of parallelism {parallelism} does not exist")
    unread = sorted((int(nxt), high) for sid, nxt in every.items()
                    for _, _, high in [range_split(sid)] if int(nxt) <= high)
    per, extra = divmod(sum(high - nxt + 1 for nxt, high in unread), parallelism)
    skip = subtask_index * per + min(subtask_index, extra)
    want = per + (1 if subtask_index < extra else 0)
    mine: dict[str, int] = {}
    for nxt, high in unread:
        if want <= 0:
            break
        size = high - nxt + 1
        if skip >= size:
            skip -= size
            continue
        low = nxt + skip
        last = min(high, low + want - 1)
        mine[f"{low}..{last}"] = low
        want -= last - low + 1
        skip = 0
    return mine


def rescaled_positions(factory: operator_factories.OperatorFactory, assigned: Mapping[str, Any],
                       every: Mapping[str, Any], parallelism: int, subtask_index: int) -> dict[str, Any]:
    """The splits a source subtask reads after a restore at another parallelism: for a sequence
    or a generator (whose splits are index ranges, cut anew at will) its share of every old
    subtask's unread indices; for a KafkaSource every old reader's splits spread one by one
    (:func:`spread_splits`); for other sources the splits ``assigned`` to it (old subtask j's
    to j mod the new parallelism)."""
    if reads_index_ranges(factory):
        return respread_ranges(every, parallelism, subtask_index)
    if isinstance(factory, operator_factories.KafkaSourceFactory):
        return spread_splits(every, parallelism, subtask_index)
    return dict(assigned)


def spread_splits(every: Mapping[str, Any], parallelism: int, subtask_index: int) -> dict[str, Any]:
    """A KafkaSource reader's splits after a rescale: every old reader's splits in the order of
    their ids, the i-th to subtask i mod ``parallelism``, as Flink redistributes the readers'
    split list state element by element (so a reader a scale-up added reads too)."""
    if parallelism < 1 or not 0 <= subtask_index < parallelism:
        raise ValueError(f"subtask {subtask_index} of parallelism {parallelism} does not exist")
    ordered = sorted(every, key=parse_split_id)
    return {sid: every[sid] for i, sid in enumerate(ordered) if i % parallelism == subtask_index}


def reads_index_ranges(factory: operator_factories.OperatorFactory) -> bool:
    """A sequence or generator source: its splits are index ranges named by their bounds, and a
    restored subtask reads the ranges of its snapshot, not its share of the plan (after a rescale
    cut them anew, the plan's shares are not what the subtasks read)."""
    return isinstance(factory, (operator_factories.SequenceSourceFactory, operator_factories.GeneratorSourceFactory))


class _Ranges:
    """Contiguous index ranges read one after the other, each with its next index: the splits of a
    sequence or generator subtask (one from the plan, or any number handed over by a rescale)."""

    def __init__(self, splits: list[tuple[str, int, int]], positions: Mapping[str, Any]) -> None:
        # [split id, next index, last index], the next index moving as the subtask reads
        self._ranges: list[list[Any]] = [[sid, int(positions.get(sid, low)), high] for sid, low, high in splits]

    def take(self, n: int) -> range | None:
        """The next up to ``n`` indices (from the current range only), or None when all are read."""
        for r in self._ranges:
            if r[1] <= r[2]:
                stop = min(r[1] + n, r[2] + 1)
                taken = range(r[1], stop)
                r[1] = stop
                return taken
        return None

    def position(self) -> dict[str, Any]:
        return {sid: nxt for sid, nxt, _ in self._ranges}


class SequenceReader(SourceReader):
    """``from_sequence``: this subtask's contiguous range of numbers (or the ranges a rescaled
    restore handed it)."""

    def __init__(self, splits: list[tuple[str, int, int]], batch_size: int, start_positions: Mapping[str, Any]) -> None:
        self._ranges = _Ranges(splits, start_positions)
        self._batch_size = batch_size

    def poll(self) -> list[Any] | None:
        taken = self._ranges.take(self._batch_size)
        return None if taken is None else list(taken)

    def position(self) -> dict[str, Any]:
        return self._ranges.position()


@dataclass(frozen=True)
class FileSplit:
    """Bytes [start, end) of one file; it owns every line that *starts* in that range."""

    path: str
    start: int
    end: int
    whole_file: bool = False  # charsets where b"\n" is not a line break byte cannot be cut

    @property
    def split_id(self) -> str:
        return f"{self.path}@{self.start}-{self.end}"


def _list_files(paths: list[str]) -> list[tuple[str, int]]:
    """(path, size) for every input; a directory stands for its visible files, like Flink's
    FileInputFormat (names starting with '.' or '_' are skipped)."""
    files: list[tuple[str, int]] = []
    for path in paths:
        if os.path.isdir(path):
            for name in sorted(os.listdir(path)):
                full = os.path.join(path, name)
                if not name.startswith((".", "_")) and os.path.isfile(full):
                    files.append((full, os.path.getsize(full)))
            continue
        try:
            files.append((path, os.path.getsize(path)))
        except FileNotFoundError:
            raise FileNotFoundError(f"Input file not found: {path}") from None
    return files


def _splittable(charset: str) -> bool:
    """Byte-range splits need b"\\n" to be the line break byte (UTF-8, ASCII, Latin-1, GBK...; not UTF-16)."""
    try:
        return "\n".encode(charset) == b"\n" and "a\nb".encode(charset) == b"a\nb"
    except LookupError:
        raise ValueError(f"Unknown charset {charset!r}") from None


def text_file_splits(paths: list[str], parallelism: int, charset: str = "utf-8") -> list[list[FileSplit]]:
    """Per subtask, its splits: the files' bytes concatenated and cut into ``parallelism`` equal
    contiguous ranges, so the work is balanced whatever the file sizes."""
    files = _list_files(paths)
    plan: list[list[FileSplit]] = [[] for _ in range(parallelism)]
    if not _splittable(charset):
        for i, (path, _) in enumerate(files):
            plan[i % parallelism].append(FileSplit(path, 0, 0, whole_file=True))
        return plan
    total = sum(size for _, size in files)
    bounds = [total * k // parallelism for k in range(parallelism + 1)]
    offset = 0
    for path, size in files:
        for k in range(parallelism):
            lo, hi = max(bounds[k], offset), min(bounds[k + 1], offset + size)
            if lo < hi:
                plan[k].append(FileSplit(path, lo - offset, hi - offset))
        offset += size
    return plan


class TextFileReader(SourceReader):
    """Lines of this subtask's file splits; a line belongs to the split where it starts.

    A split that does not start at 0 or right after a newline skips the partial first line (the
    previous split reads it); the last line a split owns is read to its end even past the split.
    Lines end at ``\\n``; a ``\\r`` before it is dropped (Flink's TextInputFormat). The reader reads
    chunks sized to yield about ``batch_size`` lines, so every batch ends on a line boundary and the
    position after it is an exact byte offset.
    """

    def __init__(
        self,
        splits: list[FileSplit],
        charset: str,
        batch_size: int,
        start_positions: Mapping[str, Any],
        chunk_bytes: int = 64 << 10,
        min_chunk_bytes: int = _MIN_CHUNK,
    ) -> None:
        self._splits = splits
        self._charset = charset
        self._batch_size = batch_size
        self._positions: dict[str, int] = {s.split_id: int(start_positions.get(s.split_id, -1)) for s in splits}
        self._chunk = chunk_bytes
        self._min_chunk = min_chunk_bytes
        self._batches: Iterator[list[str]] | None = None

    def open(self) -> None:
        for split in self._splits:  # fail before the first record, naming the path
            if not os.path.isfile(split.path):
                raise FileNotFoundError(f"Input file not found: {split.path}")
        self._batches = self._read_all()

    def poll(self) -> list[Any] | None:
        if self._batches is None:
            self.open()
        assert self._batches is not None
        return next(self._batches, None)

    def position(self) -> dict[str, Any]:
        """Per split: the byte offset of the next line to read (-1: not started)."""
        return dict(self._positions)

    def _read_all(self) -> Iterator[list[str]]:
        for split in self._splits:
            if split.whole_file:
                yield from self._read_whole(split)
            else:
                yield from self._read_split(split)

    def _decode(self, data: bytes, split: FileSplit, pos: int) -> list[str]:
        try:
            text = data.decode(self._charset)
        except UnicodeDecodeError as e:
            raise ValueError(
                f"Cannot decode {split.path} as {self._charset} near byte {pos + e.start}: {e.reason}"
            ) from None
        lines = text.split("\n")
        if "\r" in text:
            lines = [ln[:-1] if ln.endswith("\r") else ln for ln in lines]
        return lines

    def _read_split(self, split: FileSplit) -> Iterator[list[str]]:
        sid, end = split.split_id, split.end
        pos = self._positions[sid]
        with open(split.path, "rb") as f:
            if pos < 0:  # a fresh split: find the first line that starts inside it
                pos = split.start
                if pos > 0:
                    f.seek(pos - 1)
                    if f.read(1) != b"\n":
                        pos += len(f.readline())  # the partial line belongs to the previous split
            f.seek(pos)
            self._positions[sid] = pos
            pending: list[bytes] = []  # a line longer than a chunk, read so far
            pending_len = 0
            chunk = self._chunk
            while pos < end:
                data = f.read(chunk)
                if not data:  # EOF: what is pending is the file's last line, without newline
                    if pending:
                        tail = b"".join(pending)
                        pos += len(tail)
                        self._positions[sid] = pos
                        yield self._decode(tail, split, pos - len(tail))
                    break
                nl = data.rfind(b"\n")
                if nl < 0:
                    pending.append(data)
                    pending_len += len(data)
                    chunk = min(chunk * 2, _MAX_CHUNK)  # amortize very long lines
                    continue
                buf = b"".join(pending) + data if pending else data
                last_nl = pending_len + nl
                limit = end - pos  # lines starting before this offset of buf are ours
                done = last_nl >= limit
                cut = buf.find(b"\n", limit - 1) if done else last_nl
                lines = self._decode(buf[:cut], split, pos)
                consumed = cut + 1
                rest = buf[consumed:]  # f stays at pos + len(buf): rest is the start of the next line
                pos += consumed
                pending, pending_len = ([rest], len(rest)) if rest else ([], 0)
                self._positions[sid] = pos
                # Size the next read to about batch_size lines of the average length seen.
                chunk = max(self._min_chunk, min(_MAX_CHUNK, consumed * self._batch_size // max(len(lines), 1)))
                self._chunk = chunk
                yield lines
                if done:
                    break
            self._positions[sid] = max(pos, end)

    def _read_whole(self, split: FileSplit) -> Iterator[list[str]]:
        """An unsplittable file: decode it whole; the position counts lines."""
        sid = split.split_id
        start = max(self._positions[sid], 0)
        with open(split.path, "rb") as f:
            lines = self._decode(f.read(), split, 0)
        if lines and lines[-1] == "":
            lines.pop()  # a trailing newline ends the last line; it does not start a new one
        for i in range(start, len(lines), self._batch_size):
            batch = lines[i : i + self._batch_size]
            self._positions[sid] = i + len(batch)
            yield batch
        self._positions[sid] = max(len(lines), start)


# -- files through a file format -------------------------------------------------------------
# The reader of a FileSource with a file format (CSV, Avro, Parquet...): splits, one subtask each. A
# split is a whole file (its id is the path), or, when the format is splittable (``_splits(path)``:
# Parquet, by row groups), a part of one (``<path>@rg<first>-<end>``).
#
# Which subtask reads a split is decided the same way in every subtask, with no coordinator: in a
# bounded source, the splits of the files listed at the start, in order, go round-robin (split ``i``
# to subtask ``i % parallelism``); in a continuously monitored source, where the listing grows, a
# split goes to the subtask its id hashes to (CRC-32, so every subtask and every attempt agrees).
# Flink hands splits out from a split enumerator on the JobManager instead; the effect is the same
# for correctness (each split read by exactly one subtask), the balance is by count of splits only.
#
# The position of a split is the number of its records already emitted, or
# ``DONE`` once the split is read to its end: a restore skips that many records of a half-read split
# and never opens a finished one again, and a continuous source's positions hold every split it has
# read, so a failover neither reads a file twice nor misses one that appeared meanwhile. A bounded
# source's positions also hold ``LISTED``: a restore reads its checkpointed files and does not list
# the paths again (the static file set is the one of the job's start, as Flink's enumerator keeps it).

DONE = -1
LISTED = "<listed>"  # in a bounded source's positions: its share of the files is fixed (not a path)


def subtask_of_path(split_id: str, parallelism: int) -> int:
    """The subtask that reads a split (a file's path, or a part's id) in a continuously monitored source."""
    return zlib.crc32(split_id.encode("utf-8", "surrogateescape")) % parallelism


_PART = re.compile(r"(.*)@rg(\d+)-(\d+)", re.DOTALL)


def _file_splits(file_format: Any, path: str) -> list[str]:
    """The split ids of one file: its path, or its parts when the format splits it."""
    splits = getattr(file_format, "_splits", None)
    if splits is None:
        return [path]
    try:
        ranges = splits(path)
    except OSError:
        raise
    except Exception as e:  # noqa: BLE001 - the format's failure, reported with the file
        raise ValueError(f"cannot read {path}: {e}") from e
    return [path] if len(ranges) <= 1 else [f"{path}@rg{a}-{b}" for a, b in ranges]


def _split_of(split_id: str) -> tuple[str, tuple[int, int] | None]:
    """A split id back as (path, part or None); a path holding ``@rg`` is a whole file unless the
    rest is a range."""
    m = _PART.fullmatch(split_id)
    return (m.group(1), (int(m.group(2)), int(m.group(3)))) if m else (split_id, None)


class FormatFileReader(SourceReader):
    def __init__(self, factory: operator_factories.FormatFileSourceFactory, env: "TaskEnvironment",
                 batch_size: int, start_positions: Mapping[str, Any], assigned: bool = False) -> None:
        self._format = factory.file_format
        self._paths = list(factory.paths)
        self._interval = factory.monitor_interval_ms
        self._env = env
        self._batch_size = batch_size
        self._positions: dict[str, int] = {p: int(n) for p, n in start_positions.items()}
        self._assigned = assigned
        if assigned and self._interval is not None:
            raise ValueError("a continuously monitored FileSource cannot be restored at another parallelism: "
                             "its files are shared among subtasks by the hash of their path")
        self._queue: list[str] = []  # split ids to read, in order
        self._current: tuple[str, Iterator[list[Any]]] | None = None
        self._next_listing_ms = 0
        self._seen = {_split_of(sid)[0] for sid in self._positions if sid != LISTED}  # files listed before

    def open(self) -> None:
        restored = [p for p in self._positions if p != LISTED]
        if self._assigned or (self._interval is None and LISTED in self._positions):
            # a bounded source's files are those listed when the job started, never listed again
            # (a file added since must not move the round-robin share of the others)
            owned = restored
        elif self._interval is None:
            splits = [sid for p, _ in sorted(_list_files(self._paths)) for sid in _file_splits(self._format, p)]
            env = self._env
            owned = [sid for i, sid in enumerate(splits) if i % env.parallelism == env.subtask_index]
        else:  # the restored files (some half-read) and the new ones
            owned = restored + self._discover()
        if self._interval is None:
            self._positions[LISTED] = 0
        for path in owned:
            self._positions.setdefault(path, 0)
        self._queue = [p for p in owned if self._positions[p] != DONE]

    def _discover(self) -> list[str]:
        """The splits of the files under the paths never seen before that hash to this subtask."""
        self._next_listing_ms = self._env.now_ms() + (self._interval or 0)
        env = self._env
        new = [p for p, _ in sorted(_list_files(self._paths)) if p not in self._seen]
        self._seen.update(new)
        return [sid for p in new for sid in _file_splits(self._format, p)
                if sid not in self._positions and subtask_of_path(sid, env.parallelism) == env.subtask_index]

    def poll(self) -> list[Any] | None:
        while True:
            if self._current is None:
                if not self._queue:
                    if self._interval is None:
                        return None
                    if self._env.now_ms() < self._next_listing_ms:
                        return []
                    new = self._discover()
                    for path in new:
                        self._positions[path] = 0
                    self._queue.extend(new)
                    if not new:
                        return []
                    continue
                path = self._queue.pop(0)
                self._current = (path, self._open(path))
            sid, batches = self._current
            try:
                batch = next(batches, None)
            except OSError:
                raise  # names the file itself
            except Exception as e:  # noqa: BLE001 - any format's failure is reported with the file
                raise ValueError(f"cannot read {_split_of(sid)[0]}: {e}") from e
            if batch is None:
                self._positions[sid] = DONE
                self._current = None
                continue
            if batch:
                self._positions[sid] += len(batch)
                return batch

    def _open(self, split_id: str) -> Iterator[list[Any]]:
        """The split's batches from the first record not yet emitted."""
        skip = self._positions.get(split_id, 0)
        path, part = _split_of(split_id)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Input file not found: {path}")
        read = self._format._read_file
        for batch in (read(path, self._batch_size) if part is None else read(path, self._batch_size, part)):
            if skip:
                if len(batch) <= skip:
                    skip -= len(batch)
                    continue
                batch, skip = batch[skip:], 0
            yield batch

    def wait_hint_ms(self) -> int:
        return max(1, self._next_listing_ms - self._env.now_ms())

    def position(self) -> dict[str, Any]:
        return dict(self._positions)


class GeneratorReader(SourceReader):
    """Records ``generator_fn(index)`` over this subtask's index range, at most ``records_per_second``
    / parallelism per second (Flink's DataGeneratorSource with a RateLimiterStrategy)."""

    def __init__(
        self,
        factory: "operator_factories.GeneratorSourceFactory",
        env: "TaskEnvironment",
        batch_size: int,
        start_positions: Mapping[str, Any],
        splits: list[tuple[str, int, int]] | None = None,
    ) -> None:
        """``splits``: the index ranges to read (default: this subtask's share of the plan)."""
        if splits is None:
            last = (factory.count - 1) if factory.count is not None else _LONG_MAX - 1
            split = _split_of_subtask(sequence_splits(0, last, env.parallelism), env.subtask_index)
            splits = [split] if split else []
        self._ranges = _Ranges(splits, start_positions)
        self._fn = factory.generator_fn
        rate = factory.records_per_second
        self._rate = None if rate is None else float(rate) / env.parallelism
        self._env = env
        self._batch_size = batch_size
        self._start_ms: int | None = None
        self._emitted = 0
        self._wait = 1

    def poll(self) -> list[Any] | None:
        n = self._batch_size
        if self._rate is not None:
            now = self._env.now_ms()
            if self._start_ms is None:
                self._start_ms = now
            due = int((now - self._start_ms) * self._rate / 1000) + 1  # the first record is due at once
            n = min(n, due - self._emitted)
            if n <= 0:
                next_due_ms = self._start_ms + self._emitted * 1000 / self._rate
                self._wait = max(1, math.ceil(next_due_ms - now))
                return []
        taken = self._ranges.take(n)
        if taken is None:
            return None
        fn = self._fn
        batch = [fn(i) for i in taken]
        self._emitted += len(taken)
        return batch

    def wait_hint_ms(self) -> int:
        return self._wait

    def position(self) -> dict[str, Any]:
        return self._ranges.position()


class SourceCancelled(BaseException):
    """Unwinds a SourceFunction's ``run`` on cancellation; a BaseException so that a user's
    ``except Exception`` inside ``run`` cannot swallow it."""


class _SourceContext(SourceFunction.SourceContext):
    """Buffers collected records into batches: full batches go at once, a partial one after the
    buffer timeout, so a slow source still has low latency."""

    def __init__(self, reader: "SourceFunctionReader", emit: Emit, between_batches: Callable[[], None],
                 watermark: Callable[[int], None]) -> None:
        self._reader = reader
        self._emit = emit
        self._between = between_batches
        self._watermark = watermark
        self._stamps: list[int | None] | None = None  # parallel to the buffer once a timestamp came
        env = reader.env
        self._now = env.now_ms
        self._timeout = env.buffer_timeout_ms
        self._batch_size = reader.batch_size
        self._buffer: list[Any] = []
        self._last_push = self._now()

    def collect(self, element: Any) -> None:
        if self._stamps is not None:
            self._stamps.append(None)
        self._add(element)

    def collect_with_timestamp(self, element: Any, timestamp: int) -> None:
        if self._stamps is None:
            self._stamps = [None] * len(self._buffer)
        self._stamps.append(int(timestamp))
        self._add(element)

    def _add(self, element: Any) -> None:
        buf = self._buffer
        buf.append(element)
        if len(buf) >= self._batch_size or (self._timeout >= 0 and self._now() - self._last_push >= self._timeout):
            self.push()

    def emit_watermark(self, watermark: int) -> None:
        self.push()  # the records before it go first
        self._watermark(int(watermark))

    def push(self) -> None:
        reader = self._reader
        if reader.cancelled():
            reader.cancel()
            raise SourceCancelled()
        buf, self._buffer = self._buffer, []
        stamps, self._stamps = self._stamps, None
        reader.records += len(buf)
        if buf:
            self._emit(stamped(buf, stamps))
        self._last_push = self._now()
        self._between()


class SourceFunctionReader:
    """Runs a user ``SourceFunction``; ``run`` returns True when the function ended, False when cancelled."""

    def __init__(self, function: SourceFunction[Any], env: "TaskEnvironment", batch_size: int) -> None:
        self.function = function
        self.env = env
        self.batch_size = batch_size
        self.records = 0
        self._cancel_requested = False
        self._cancel_called = False

    def open(self) -> None:
        pass

    def cancelled(self) -> bool:
        return self._cancel_requested or self.env.is_cancelled()

    def run(self, emit: Emit, between_batches: Callable[[], None], watermark: Callable[[int], None] = lambda w: None) -> bool:
        ctx = _SourceContext(self, emit, between_batches, watermark)
        try:
            self.function.run(ctx)
            ctx.push()  # the tail of the input
        except SourceCancelled:
            return False
        return not self.cancelled()

    def cancel(self) -> None:
        """Asks the function to stop (Flink calls ``cancel()`` from the cancelling thread); once."""
        self._cancel_requested = True
        if not self._cancel_called:
            self._cancel_called = True
            self.function.cancel()

    def position(self) -> dict[str, Any]:
        return {"records": self.records}

    def close(self) -> None:
        pass


def create_source_reader(
    factory: operator_factories.SourceFactory,
    env: "TaskEnvironment",
    runtime_context: RuntimeContext,
    start_positions: Mapping[str, Any] | None = None,
    assigned: bool = False,
) -> SourceReader | SourceFunctionReader:
    """The reader of this subtask (``env.subtask_index`` of ``env.parallelism``) for ``factory``.
    ``assigned``: a restore at another parallelism handed this subtask exactly the splits in
    ``start_positions`` (by id, with their positions), instead of its share of the plan (a
    KafkaSource's reader reads its restored splits and what its enumerator sends it)."""
    positions = start_positions or {}
    batch_size = max(1, int(env.source_batch_size))
    if isinstance(factory, operator_factories.KafkaSourceFactory):
        # lazy: confluent-kafka loads only in tasks that read Kafka
        from millstream.runtime.operators.kafka_source import KafkaSourceReader
        return KafkaSourceReader(factory, env, batch_size, positions)
    if assigned:
        return _assigned_reader(factory, env, batch_size, positions)
    if isinstance(factory, operator_factories.CollectionSourceFactory):
        elements = list(factory.elements) if env.subtask_index == 0 else []
        return CollectionReader(elements, batch_size, int(positions.get(CollectionReader.SPLIT_ID, 0)))
    if isinstance(factory, operator_factories.SequenceSourceFactory):
        split = _split_of_subtask(sequence_splits(factory.start, factory.end, env.parallelism), env.subtask_index)
        return SequenceReader([split] if split else [], batch_size, positions)
    if isinstance(factory, operator_factories.TextFileSourceFactory):
        plan = text_file_splits(list(factory.paths), env.parallelism, factory.charset)
        return TextFileReader(plan[env.subtask_index], factory.charset, batch_size, positions)
    if isinstance(factory, operator_factories.GeneratorSourceFactory):
        return GeneratorReader(factory, env, batch_size, positions)
    if isinstance(factory, operator_factories.FormatFileSourceFactory):
        return FormatFileReader(factory, env, batch_size, positions)
    if isinstance(factory, operator_factories.SourceFunctionFactory):
        return SourceFunctionReader(factory.function, env, batch_size)
    raise TypeError(f"No source reader for {type(factory).__name__}")


def _assigned_reader(factory: operator_factories.SourceFactory, env: "TaskEnvironment", batch_size: int,
                     positions: Mapping[str, Any]) -> SourceReader:
    """A reader of the splits a rescaled restore assigned (their ids describe them)."""
    if isinstance(factory, operator_factories.SequenceSourceFactory):
        return SequenceReader([range_split(sid) for sid in positions], batch_size, positions)
    if isinstance(factory, operator_factories.GeneratorSourceFactory):
        return GeneratorReader(factory, env, batch_size, positions, [range_split(sid) for sid in positions])
    if isinstance(factory, operator_factories.FormatFileSourceFactory):
        return FormatFileReader(factory, env, batch_size, positions, assigned=True)
    if isinstance(factory, operator_factories.TextFileSourceFactory):
        whole = not _splittable(factory.charset)
        splits = []
        for sid in positions:
            path, _, span = sid.rpartition("@")
            start, _, end = span.partition("-")
            splits.append(FileSplit(path, int(start), int(end), whole_file=whole))
        return TextFileReader(splits, factory.charset, batch_size, positions)
    raise ValueError(f"{type(factory).__name__}: its read positions cannot move to another parallelism")
