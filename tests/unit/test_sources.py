"""Source readers: Flink's sequence splits, text-file byte-range splits that never lose or repeat a
line, positions per split, rate limiting on a manual clock, and SourceFunction batching."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from millstream.datastream import SourceFunction
from millstream.runtime import operator_factories
from millstream.runtime.operators.sources import (
    CollectionReader,
    FileSplit,
    SourceFunctionReader,
    TextFileReader,
    create_source_reader,
    rescaled_positions,
    respread_ranges,
    sequence_splits,
    text_file_splits,
)
from millstream.runtime.task.environment import ManualClock, SimpleTaskEnvironment, StreamingRuntimeContext


def task_env(parallelism: int = 1, subtask: int = 0, **kwargs: Any) -> SimpleTaskEnvironment:
    kwargs.setdefault("clock", ManualClock(0))
    return SimpleTaskEnvironment(parallelism=parallelism, subtask_index=subtask, **kwargs)


def reader_for(factory: operator_factories.SourceFactory, env: SimpleTaskEnvironment, positions: dict[str, Any] | None = None) -> Any:
    reader = create_source_reader(factory, env, StreamingRuntimeContext(env, "source", None), positions)
    reader.open()
    return reader


def drain(reader: Any) -> list[Any]:
    out: list[Any] = []
    while (batch := reader.poll()) is not None:
        out.extend(batch)
    return out


def expected_lines(data: bytes, charset: str = "utf-8") -> list[str]:
    """Flink's TextInputFormat: split on \\n, a trailing \\n ends the last line, a \\r before \\n is dropped."""
    if not data:
        return []
    parts = data.split(b"\n")
    if parts[-1] == b"":
        parts.pop()
    return [p[:-1].decode(charset) if p.endswith(b"\r") else p.decode(charset) for p in parts]


# -- sequences ---------------------------------------------------------------------------------


def test_sequence_splits_follow_flinks_number_sequence_iterator() -> None:
    assert sequence_splits(0, 9, 3) == [("0..3", 0, 3), ("4..6", 4, 6), ("7..9", 7, 9)]
    assert sequence_splits(1, 2, 4) == [("1..1", 1, 1), ("2..2", 2, 2)]  # empty splits are dropped
    assert sequence_splits(5, 5, 1) == [("5..5", 5, 5)]
    assert sequence_splits(-3, 3, 2) == [("-3..0", -3, 0), ("1..3", 1, 3)]


@pytest.mark.parametrize("parallelism", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("start, end", [(1, 1), (0, 3), (-10, 10), (1, 10_001)])
def test_sequence_readers_cover_the_range_once_in_contiguous_pieces(parallelism: int, start: int, end: int) -> None:
    factory = operator_factories.SequenceSourceFactory(start=start, end=end)
    pieces = []
    for subtask in range(parallelism):
        reader = reader_for(factory, task_env(parallelism, subtask, source_batch_size=333))
        numbers = drain(reader)
        assert numbers == list(range(numbers[0], numbers[0] + len(numbers))) if numbers else True
        pieces.append(numbers)
    assert [n for piece in pieces for n in piece] == list(range(start, end + 1))
    sizes = [len(p) for p in pieces]
    assert max(sizes) - min(sizes) <= 1


def test_sequence_batches_and_positions() -> None:
    reader = reader_for(operator_factories.SequenceSourceFactory(start=1, end=10), task_env(source_batch_size=4))
    assert reader.position() == {"1..10": 1}
    assert reader.poll() == [1, 2, 3, 4] and reader.position() == {"1..10": 5}
    assert drain(reader) == [5, 6, 7, 8, 9, 10] and reader.position() == {"1..10": 11}
    resumed = reader_for(operator_factories.SequenceSourceFactory(start=1, end=10), task_env(), {"1..10": 8})
    assert drain(resumed) == [8, 9, 10]


def test_collection_reader_batches_positions_and_resume() -> None:
    factory = operator_factories.CollectionSourceFactory(elements=list("abcdefg"))
    reader = reader_for(factory, task_env(source_batch_size=3))
    assert reader.poll() == ["a", "b", "c"] and reader.position() == {CollectionReader.SPLIT_ID: 3}
    assert drain(reader_for(factory, task_env(), {CollectionReader.SPLIT_ID: 5})) == ["f", "g"]


# -- text files ------------------------------------------------------------------------------------

FILES: dict[str, bytes] = {
    "trailing.txt": b"alpha\nbeta\n\ngamma delta\n",
    "no_trailing.txt": b"one\ntwo\nthree",
    "crlf.txt": b"win 1\r\nwin 2\r\n\r\nwin 4\r\n",
    "crlf_no_trailing.txt": b"a\r\nb",
    "long.txt": b"short\n" + b"L" * 300_000 + b"\nmiddle\n" + b"M" * 150_001 + b"\nend\n",
    "empty.txt": b"",
    "blank_lines.txt": b"\n\n\nx\n\n",
    "unicode.txt": "größe\nnaïve café\n日本語のテキスト\n🙂 emoji\n".encode(),
    "single_newline.txt": b"\n",
}


@pytest.fixture
def text_files(tmp_path: Path) -> list[str]:
    paths = []
    for name, data in FILES.items():
        path = tmp_path / name
        path.write_bytes(data)
        paths.append(str(path))
    return paths


@pytest.mark.parametrize("parallelism", [1, 2, 3, 4, 5])
def test_text_splits_read_every_line_exactly_once(text_files: list[str], parallelism: int) -> None:
    factory = operator_factories.TextFileSourceFactory(paths=tuple(text_files))
    expected = [line for name in FILES for line in expected_lines(FILES[name])]
    lines = []
    for subtask in range(parallelism):
        lines += drain(reader_for(factory, task_env(parallelism, subtask, source_batch_size=2)))
    assert lines == expected


@pytest.mark.parametrize("name", sorted(FILES))
def test_every_cut_point_splits_a_file_without_losing_or_repeating_lines(tmp_path: Path, name: str) -> None:
    data = FILES[name]
    if len(data) > 100:  # the long file: cut around its line boundaries instead of everywhere
        cuts = sorted({c for nl in range(len(data)) if data[nl : nl + 1] == b"\n" for c in (nl - 1, nl, nl + 1, nl + 2)})
        cuts = [c for c in cuts if 0 <= c <= len(data)] + [1, 70_000, len(data)]
    else:
        cuts = list(range(len(data) + 1))
    path = tmp_path / name
    path.write_bytes(data)
    for cut in cuts:
        lines = []
        for start, end in ((0, cut), (cut, len(data))):
            reader = TextFileReader([FileSplit(str(path), start, end)], "utf-8", 3, {}, chunk_bytes=7, min_chunk_bytes=5)
            lines += drain(reader)
        assert lines == expected_lines(data), f"cut at {cut}"


def test_text_positions_are_byte_offsets_of_the_next_line_and_resume_exactly(tmp_path: Path) -> None:
    data = b"".join(f"line {i:04d}\r\n".encode() for i in range(500))  # 11 bytes per line
    path = tmp_path / "lines.txt"
    path.write_bytes(data)
    split = FileSplit(str(path), 0, len(data))
    reader = TextFileReader([split], "utf-8", 50, {}, chunk_bytes=1000)
    first = reader.poll() + reader.poll()
    offset = reader.position()[split.split_id]
    assert offset == 11 * len(first)
    resumed = TextFileReader([split], "utf-8", 50, {split.split_id: offset})
    assert first + drain(resumed) == expected_lines(data)
    assert resumed.position()[split.split_id] == len(data)


def test_batches_follow_the_configured_size_approximately(tmp_path: Path) -> None:
    path = tmp_path / "many.txt"
    path.write_bytes(b"".join(b"word %d\n" % i for i in range(20_000)))
    reader = TextFileReader(text_file_splits([str(path)], 1)[0], "utf-8", 500, {})
    sizes = []
    while (batch := reader.poll()) is not None:
        sizes.append(len(batch))
    assert sum(sizes) == 20_000
    assert max(sizes[1:]) <= 1_000 and len(sizes) >= 20


def test_splits_balance_bytes_across_files(text_files: list[str]) -> None:
    total = sum(len(d) for d in FILES.values())
    for p in (1, 2, 3, 5):
        plan = text_file_splits(text_files, p)
        sizes = [sum(s.end - s.start for s in splits) for splits in plan]
        assert sum(sizes) == total and max(sizes) - min(sizes) <= 1


def test_missing_file_fails_naming_the_path(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.txt")
    with pytest.raises(FileNotFoundError, match=missing):
        text_file_splits([missing], 2)


def test_a_directory_stands_for_its_visible_files(tmp_path: Path) -> None:
    (tmp_path / "b.txt").write_text("b1\nb2\n")
    (tmp_path / "a.txt").write_text("a1\n")
    (tmp_path / ".hidden").write_text("no\n")
    (tmp_path / "_SUCCESS").write_text("")
    factory = operator_factories.TextFileSourceFactory(paths=(str(tmp_path),))
    lines = drain(reader_for(factory, task_env(2, 0))) + drain(reader_for(factory, task_env(2, 1)))
    assert lines == ["a1", "b1", "b2"]


def test_utf16_files_are_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "wide.txt"
    path.write_bytes("first\r\nsecond\nthird".encode("utf-16"))
    factory = operator_factories.TextFileSourceFactory(paths=(str(path),), charset="utf-16")
    per_subtask = [drain(reader_for(factory, task_env(3, i))) for i in range(3)]
    assert per_subtask == [["first", "second", "third"], [], []]


def test_undecodable_bytes_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.txt"
    path.write_bytes(b"ok\n\xff\xfe\n")
    with pytest.raises(ValueError, match=f"Cannot decode {path}"):
        drain(reader_for(operator_factories.TextFileSourceFactory(paths=(str(path),)), task_env()))


# -- generator and SourceFunction ----------------------------------------------------------------


def test_generator_source_is_rate_limited_on_the_clock() -> None:
    clock = ManualClock(10_000)
    env = task_env(clock=clock, source_batch_size=100)
    reader = reader_for(operator_factories.GeneratorSourceFactory(lambda i: f"r{i}", records_per_second=50, count=None), env)
    assert reader.poll() == ["r0"]
    assert reader.poll() == [] and reader.wait_hint_ms() == 20
    clock.advance(20)
    assert reader.poll() == ["r1"]
    clock.advance(1000)  # behind by a second: catches up at once
    assert len(reader.poll()) == 50
    assert reader.position() == {f"0..{2**63 - 2}": 52}


def test_generator_splits_count_and_rate_across_subtasks() -> None:
    factory = operator_factories.GeneratorSourceFactory(lambda i: i, records_per_second=None, count=10)
    parts = [drain(reader_for(factory, task_env(3, i))) for i in range(3)]
    assert parts == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    clock = ManualClock(0)
    limited = reader_for(operator_factories.GeneratorSourceFactory(lambda i: i, records_per_second=300), task_env(3, 1, clock=clock))
    [(split, position)] = limited.position().items()
    assert limited.poll() == [int(split.split("..")[0])]  # the first record is due at once
    assert limited.position()[split] == position + 1
    clock.advance(1000)
    assert len(limited.poll()) == 100  # 300/s shared by 3 subtasks
    assert factory.bounded and not operator_factories.GeneratorSourceFactory(lambda i: i, 1.0).bounded


class SlowSource(SourceFunction):
    """Collects 10 records, 30 ms of manual time apart."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock

    def run(self, ctx: Any) -> None:
        for i in range(10):
            ctx.collect(i)
            self.clock.advance(30)


def test_source_function_batches_by_size_and_by_buffer_timeout() -> None:
    clock = ManualClock(0)
    env = task_env(clock=clock, buffer_timeout_ms=100, source_batch_size=1000)
    reader = SourceFunctionReader(SlowSource(clock), env, env.source_batch_size)
    batches: list[list[int]] = []
    housekeeping = []
    assert reader.run(batches.append, lambda: housekeeping.append(clock.now_ms())) is True
    assert [r for b in batches for r in b] == list(range(10))
    assert [len(b) for b in batches] == [5, 4, 1]  # pushed once 100 ms passed (at 120 and 240 ms), then the tail
    assert len(housekeeping) == 3 and reader.position() == {"records": 10}


def test_source_function_batches_by_size() -> None:
    class Burst(SourceFunction):
        def run(self, ctx: Any) -> None:
            for i in range(25):
                ctx.collect(i)

    env = task_env(buffer_timeout_ms=-1)
    batches: list[list[int]] = []
    SourceFunctionReader(Burst(), env, 10).run(batches.append, lambda: None)
    assert [len(b) for b in batches] == [10, 10, 5]


def test_text_reader_requires_existing_files_at_open(tmp_path: Path) -> None:
    path = tmp_path / "gone.txt"
    path.write_text("x\n")
    splits = text_file_splits([str(path)], 1)[0]
    os.remove(path)
    with pytest.raises(FileNotFoundError, match=str(path)):
        TextFileReader(splits, "utf-8", 10, {}).open()


def _assigned(factory: operator_factories.SourceFactory, env: SimpleTaskEnvironment, positions: dict[str, Any]) -> Any:
    reader = create_source_reader(factory, env, StreamingRuntimeContext(env, "source", None), positions, assigned=True)
    reader.open()
    return reader


@pytest.mark.parametrize("kind", ["sequence", "generator"])
def test_splits_checkpointed_at_one_parallelism_are_read_exactly_at_another(kind: str) -> None:
    """Positions are list state: old subtask j's splits go to new subtask j mod p', which reads
    exactly what was left of them; a subtask given none reads nothing."""
    factory: operator_factories.SourceFactory = (operator_factories.SequenceSourceFactory(start=0, end=99) if kind == "sequence"
                                  else operator_factories.GeneratorSourceFactory(lambda i: i, records_per_second=None, count=100))
    old = [reader_for(factory, task_env(2, j, source_batch_size=7)) for j in range(2)]
    read = [r for reader in old for _ in range(3) for r in reader.poll()]  # some of each split, then a checkpoint
    snapshots = [reader.position() for reader in old]
    new_parallelism = 3
    resumed = []
    for i in range(new_parallelism):
        positions = {sid: pos for j, snap in enumerate(snapshots) if j % new_parallelism == i for sid, pos in snap.items()}
        resumed.append(drain(_assigned(factory, task_env(new_parallelism, i, source_batch_size=7), positions)))
    assert resumed[2] == []
    assert sorted(read + resumed[0] + resumed[1]) == list(range(100))


def _rescaled(factory: operator_factories.SourceFactory, snapshots: list[dict[str, Any]], parallelism: int,
              batch: int = 7) -> list[Any]:
    """New readers as a rescaled restore makes them: each given every old snapshot (its round-robin
    ones as ``assigned``), its splits from rescaled_positions."""
    every = {sid: pos for snap in snapshots for sid, pos in snap.items()}
    readers = []
    for i in range(parallelism):
        assigned = {sid: pos for j, snap in enumerate(snapshots) if j % parallelism == i for sid, pos in snap.items()}
        positions = rescaled_positions(factory, assigned, every, parallelism, i)
        readers.append(_assigned(factory, task_env(parallelism, i, source_batch_size=batch), positions))
    return readers


@pytest.mark.parametrize("kind", ["sequence", "generator"])
def test_after_a_scale_up_the_added_subtasks_share_the_unread_indices(kind: str) -> None:
    """The bug: a generator at parallelism 1 rescaled to 2 kept its one split on subtask 0; the
    added subtask read nothing. Now the unread indices are cut anew, evenly, over every subtask,
    through several rescales, each index read exactly once."""
    factory: operator_factories.SourceFactory = (operator_factories.SequenceSourceFactory(start=0, end=999) if kind == "sequence"
                                  else operator_factories.GeneratorSourceFactory(lambda i: i, records_per_second=None, count=1000))
    readers = [reader_for(factory, task_env(1, 0, source_batch_size=7))]
    read: list[int] = []
    for parallelism in (2, 3, 1, 4):
        read += [r for reader in readers for _ in range(5) for r in (reader.poll() or [])]
        readers = _rescaled(factory, [reader.position() for reader in readers], parallelism)
        shares = [sum(high - pos + 1 for sid, pos in r.position().items() for high in [int(sid.split("..")[1])])
                  for r in readers]
        assert max(shares) - min(shares) <= 1, shares  # every subtask, the added ones too, has its share
    rest = [drain(r) for r in readers]
    assert all(rest)
    assert sorted(read + [x for part in rest for x in part]) == list(range(1000))


def test_respread_ranges_cuts_the_unread_indices_of_every_old_split_into_contiguous_shares() -> None:
    every = {"0..9": 4, "10..19": 20, "20..29": 28}  # 4..9 and 28..29 unread; 10..19 read to its end
    assert [respread_ranges(every, 3, i) for i in range(3)] == [{"4..6": 4}, {"7..9": 7}, {"28..29": 28}]
    assert [respread_ranges(every, 2, i) for i in range(2)] == [{"4..7": 4}, {"8..9": 8, "28..29": 28}]
    assert respread_ranges(every, 1, 0) == {"4..9": 4, "28..29": 28}
    assert respread_ranges({"0..1": 2}, 2, 1) == {}  # all read: nothing for anyone
    with pytest.raises(ValueError, match="subtask 2 of parallelism 2"):
        respread_ranges(every, 2, 2)


def test_a_kafka_source_spreads_every_old_reader_s_splits_one_by_one_over_the_new_readers() -> None:
    """The bug: after 1 -> 2 every partition stayed with the reader of old subtask 0 (its whole
    state went to new subtask 0) and the added reader read nothing; Flink redistributes the
    readers' split list state element by element."""
    factory = operator_factories.KafkaSourceFactory(properties={"bootstrap.servers": "h:1"}, topics=("t",))
    old = {f"t-{p}": [10 * p, None] for p in (3, 0, 2, 1, 10)}  # one old reader held them all
    shares = [rescaled_positions(factory, old if i == 0 else {}, old, 2, i) for i in range(2)]
    assert shares == [{"t-0": [0, None], "t-2": [20, None], "t-10": [100, None]}, {"t-1": [10, None], "t-3": [30, None]}]
    assert respread_ranges({}, 1, 0) == {}
    with pytest.raises(ValueError, match="subtask 3 of parallelism 2"):
        rescaled_positions(factory, {}, old, 2, 3)


def test_sources_whose_splits_cannot_be_cut_keep_their_round_robin_share(tmp_path: Path) -> None:
    factory = operator_factories.TextFileSourceFactory(paths=(str(tmp_path / "x"),), charset="utf-8")
    assert rescaled_positions(factory, {"a@0-5": 2}, {"a@0-5": 2, "b@0-5": 0}, 2, 0) == {"a@0-5": 2}


def test_text_file_splits_move_to_another_parallelism(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_text("".join(f"line {i}\n" for i in range(500)))
    factory = operator_factories.TextFileSourceFactory(paths=(str(path),), charset="utf-8")
    old = [reader_for(factory, task_env(3, j, source_batch_size=10)) for j in range(3)]
    read = [line for reader in old for line in reader.poll()]
    snapshots = [reader.position() for reader in old]
    merged = {sid: pos for snap in snapshots for sid, pos in snap.items()}
    rest = drain(_assigned(factory, task_env(1, 0, source_batch_size=10), merged))
    assert sorted(read + rest) == sorted(f"line {i}" for i in range(500))
    assert len(read + rest) == 500


def test_a_java_source_or_sink_function_class_name_is_refused_naming_it() -> None:
    # PyFlink's SourceFunction("org...") wraps a Java class run in its JVM; Millstream runs no JVM code
    from millstream import JavaCodeNotSupported
    from millstream.datastream import SinkFunction, SourceFunction

    with pytest.raises(JavaCodeNotSupported, match=r"org\.example\.MySource.*cannot run"):
        SourceFunction("org.example.MySource")
    with pytest.raises(JavaCodeNotSupported, match=r"org\.example\.MySink"):
        SinkFunction(sink_func="org.example.MySink")
    assert issubclass(JavaCodeNotSupported, TypeError)

    class PathSource(SourceFunction):  # a Python subclass's own arguments are its own
        def __init__(self, path: str) -> None:
            self.path = path

        def run(self, ctx) -> None:
            ctx.collect(self.path)

    assert PathSource("/data/in").path == "/data/in"
