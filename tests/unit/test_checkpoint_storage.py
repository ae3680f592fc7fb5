"""File system checkpoint storage: layout, atomic metadata last, retention, recovery (Flink's
FsCheckpointStorage and completed-checkpoint store rules). Real files in a temporary directory."""
from __future__ import annotations

import os
import shutil

from pathlib import Path

import pytest

from millstream.runtime.checkpoint_storage import (
    METADATA_FILE,
    CheckpointStorageError,
    CompletedCheckpointStore,
    FileStateHandle,
    checkpoint_directory,
    discard_state,
    dispose_savepoint,
    parse_checkpoint_dir,
    write_task_state,
)

JOB = bytes.fromhex("00112233445566778899aabbccddeeff")


def write_checkpoint(store: CompletedCheckpointStore, cid: int, payloads: dict[str, bytes]):
    handles = {k: write_task_state(store.base, JOB, cid, v) for k, v in payloads.items()}
    return store.add_checkpoint(cid, 1000.0 * cid, handles)


# -- the directory option --------------------------------------------------------------------------


def test_plain_directory_and_file_uris_name_the_same_directory(tmp_path: Path) -> None:
    assert parse_checkpoint_dir(str(tmp_path)) == tmp_path
    assert parse_checkpoint_dir(f"file://{tmp_path}") == tmp_path
    assert parse_checkpoint_dir(f"file://localhost{tmp_path}") == tmp_path
    assert parse_checkpoint_dir(f"file:{tmp_path}") == tmp_path
    assert parse_checkpoint_dir("file:///tmp/with%20space") == Path("/tmp/with space")


@pytest.mark.parametrize("bad, words", [
    ("s3://bucket/ckpt", "scheme"), ("hdfs://nn:8020/ckpt", "scheme"), ("relative/dir", "absolute"),
    ("file://otherhost/ckpt", "host"), ("", "empty")])
def test_unusable_directories_are_rejected_clearly(bad: str, words: str) -> None:
    with pytest.raises(CheckpointStorageError, match=words):
        parse_checkpoint_dir(bad)


def test_a_file_uri_works_end_to_end(tmp_path: Path) -> None:
    store = CompletedCheckpointStore(parse_checkpoint_dir(f"file://{tmp_path}"), JOB)
    write_checkpoint(store, 1, {"a_0": b"x"})
    assert (tmp_path / JOB.hex() / "chk-1" / METADATA_FILE).is_file()


# -- layout and task state ------------------------------------------------------------------------


def test_task_state_goes_to_the_checkpoints_directory_and_reads_back(tmp_path: Path) -> None:
    handle = write_task_state(tmp_path, JOB, 3, b"state bytes")
    assert Path(handle.path).parent == tmp_path / JOB.hex() / "chk-3"
    assert handle.size == 11 and handle.read() == b"state bytes"
    assert checkpoint_directory(tmp_path, JOB, 3) == tmp_path / JOB.hex() / "chk-3"


# -- metadata last, atomically ---------------------------------------------------------------------


def test_metadata_makes_a_checkpoint_complete_and_is_found_on_recovery(tmp_path: Path) -> None:
    store = CompletedCheckpointStore(tmp_path, JOB)
    cp = write_checkpoint(store, 1, {"src_0": b"offset=7", "map_0": b"sum=3"})
    assert cp.size_bytes == 13
    recovered = CompletedCheckpointStore(tmp_path, JOB).recover()
    assert recovered is not None and recovered.checkpoint_id == 1
    assert {k: h.read() for k, h in recovered.task_states.items() if h} == {"src_0": b"offset=7", "map_0": b"sum=3"}


def test_a_crash_between_state_files_and_metadata_leaves_no_completed_checkpoint(tmp_path: Path) -> None:
    store = CompletedCheckpointStore(tmp_path, JOB)
    write_checkpoint(store, 1, {"a_0": b"one"})
    # checkpoint 2: every task wrote its state, the JobManager died before the rename of _metadata
    write_task_state(tmp_path, JOB, 2, b"two")
    (checkpoint_directory(tmp_path, JOB, 2) / f"{METADATA_FILE}.123.inprogress").write_bytes(b'{"version": 1')
    latest = CompletedCheckpointStore(tmp_path, JOB).recover()
    assert latest is not None and latest.checkpoint_id == 1
    only_state = tmp_path / "fresh"
    write_task_state(only_state, JOB, 1, b"orphan")
    assert CompletedCheckpointStore(only_state, JOB).recover() is None


def test_ids_after_recovery_continue_after_every_directory_even_incomplete(tmp_path: Path) -> None:
    store = CompletedCheckpointStore(tmp_path, JOB)
    write_checkpoint(store, 4, {"a_0": b"x"})
    write_task_state(tmp_path, JOB, 5, b"incomplete")
    recovered = CompletedCheckpointStore(tmp_path, JOB)
    recovered.recover()
    assert recovered.highest_checkpoint_id() == 5


def test_a_corrupt_or_incomplete_latest_checkpoint_fails_loudly(tmp_path: Path) -> None:
    store = CompletedCheckpointStore(tmp_path, JOB)
    cp = write_checkpoint(store, 1, {"a_0": b"x"})
    cp.metadata_path.write_text("{not json")
    with pytest.raises(CheckpointStorageError, match="corrupt"):
        CompletedCheckpointStore(tmp_path, JOB).recover()
    other = tmp_path / "other"
    cp = write_checkpoint(CompletedCheckpointStore(other, JOB), 1, {"a_0": b"x"})
    os.unlink(next(h for h in cp.task_states.values() if h).path)
    with pytest.raises(CheckpointStorageError, match="missing"):
        CompletedCheckpointStore(other, JOB).recover()


def test_a_truncated_state_file_is_an_error_on_read(tmp_path: Path) -> None:
    h = write_task_state(tmp_path, JOB, 1, b"0123456789")
    Path(h.path).write_bytes(b"01234")
    with pytest.raises(CheckpointStorageError, match="truncated"):
        h.read()


# -- retention -------------------------------------------------------------------------------------


def test_retention_keeps_one_by_default_and_deletes_older_and_incomplete_directories(tmp_path: Path) -> None:
    store = CompletedCheckpointStore(tmp_path, JOB)
    write_checkpoint(store, 1, {"a_0": b"1"})
    write_task_state(tmp_path, JOB, 2, b"aborted")  # an aborted checkpoint's leftovers
    write_checkpoint(store, 3, {"a_0": b"3"})
    assert sorted(p.name for p in (tmp_path / JOB.hex()).iterdir()) == ["chk-3"]
    assert [c.checkpoint_id for c in store.checkpoints] == [3]


def test_num_retained_keeps_that_many(tmp_path: Path) -> None:
    store = CompletedCheckpointStore(tmp_path, JOB, num_retained=2)
    for cid in (1, 2, 3):
        write_checkpoint(store, cid, {"a_0": str(cid).encode()})
    assert sorted(p.name for p in (tmp_path / JOB.hex()).iterdir()) == ["chk-2", "chk-3"]
    again = CompletedCheckpointStore(tmp_path, JOB, num_retained=1)
    assert again.recover().checkpoint_id == 3  # type: ignore[union-attr]
    assert sorted(p.name for p in (tmp_path / JOB.hex()).iterdir()) == ["chk-3"]


def test_an_incomplete_directory_newer_than_the_latest_is_kept_on_add(tmp_path: Path) -> None:
    store = CompletedCheckpointStore(tmp_path, JOB)
    write_task_state(tmp_path, JOB, 6, b"in flight")
    write_checkpoint(store, 5, {"a_0": b"5"})
    assert (tmp_path / JOB.hex() / "chk-6").is_dir()


def test_discarding_an_aborted_checkpoint_and_a_late_handle(tmp_path: Path) -> None:
    store = CompletedCheckpointStore(tmp_path, JOB)
    h = write_task_state(tmp_path, JOB, 1, b"late")
    discard_state(h)
    assert not os.path.exists(h.path)
    write_task_state(tmp_path, JOB, 2, b"aborted")
    store.discard_checkpoint(2)
    assert not checkpoint_directory(tmp_path, JOB, 2).exists()
    write_checkpoint(store, 3, {"a_0": b"3"})
    with pytest.raises(CheckpointStorageError, match="completed"):
        store.discard_checkpoint(3)


def test_bad_input_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(CheckpointStorageError, match="num-retained"):
        CompletedCheckpointStore(tmp_path, JOB, num_retained=0)
    store = CompletedCheckpointStore(tmp_path, JOB)
    write_checkpoint(store, 2, {"a_0": b"x"})
    with pytest.raises(CheckpointStorageError, match="not newer"):
        write_checkpoint(store, 2, {"a_0": b"x"})
    with pytest.raises(CheckpointStorageError, match="outside"):
        store.add_checkpoint(3, 0.0, {"a_0": FileStateHandle(str(tmp_path / "elsewhere.state"), 1)})


def test_a_checkpoint_keeps_the_statistics_it_was_given_and_recovery_reads_them_back(tmp_path: Path) -> None:
    store = CompletedCheckpointStore(tmp_path, JOB)
    stats = {"num_completed": 4, "num_failed": 1, "history": [{"id": 4, "status": "COMPLETED"}]}
    handles = {"src_0": write_task_state(store.base, JOB, 4, b"offset=7")}
    assert store.add_checkpoint(4, 4000.0, handles, stats=stats).stats == stats
    assert CompletedCheckpointStore(tmp_path, JOB).recover().stats == stats
    assert write_checkpoint(store, 5, {"src_0": b"x"}).stats is None  # none given: none kept


# -- savepoint disposal (flink savepoint -d) ---------------------------------------------------------

def test_dispose_savepoint_deletes_a_savepoint_named_by_directory_metadata_file_or_uri(tmp_path: Path) -> None:
    store = CompletedCheckpointStore(tmp_path, JOB)
    for n, name in enumerate(("dir", "metadata", "uri"), start=1):
        directory = write_checkpoint(store, n, {"a_0": b"state"}).directory
        shutil.copytree(directory, tmp_path / name)
    assert dispose_savepoint(str(tmp_path / "dir")) == tmp_path / "dir"
    assert dispose_savepoint(str(tmp_path / "metadata" / METADATA_FILE)) == tmp_path / "metadata"
    assert dispose_savepoint(f"file://{tmp_path / 'uri'}") == tmp_path / "uri"
    assert not any((tmp_path / name).exists() for name in ("dir", "metadata", "uri"))


def test_dispose_savepoint_refuses_what_is_no_savepoint_and_deletes_nothing(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "precious.txt").write_text("keep me")
    with pytest.raises(CheckpointStorageError, match="has no _metadata"):
        dispose_savepoint(str(plain))
    assert (plain / "precious.txt").read_text() == "keep me"
    with pytest.raises(CheckpointStorageError, match="does not exist"):
        dispose_savepoint(str(tmp_path / "missing"))
    with pytest.raises(CheckpointStorageError, match="not a directory"):
        dispose_savepoint(str(plain / "precious.txt"))
    with pytest.raises(CheckpointStorageError, match="savepoint path 'relative/sp'.*not absolute"):
        dispose_savepoint("relative/sp")


def test_the_coordinators_states_are_kept_in_the_metadata_and_recovered(tmp_path: Path) -> None:
    # Flink keeps OperatorCoordinator state in the checkpoint's metadata, not in a task's state.
    store = CompletedCheckpointStore(tmp_path, JOB)
    state = {"version": 1, "assigned": [["t", 0, 5, None]], "unassigned": [], "initial_discovery_done": True}
    handles = {"src_0": write_task_state(tmp_path, JOB, 1, b"offset=7")}
    written = store.add_checkpoint(1, 1000.0, handles, coordinator_states={"ab12": state})
    assert written.coordinator_states == {"ab12": state}
    recovered = CompletedCheckpointStore(tmp_path, JOB).recover()
    assert recovered is not None and recovered.coordinator_states == {"ab12": state}
    plain = write_checkpoint(store, 2, {"src_0": b"x"})  # a job without coordinators: none, and older metadata reads
    assert plain.coordinator_states == {} and store.load(plain.directory).coordinator_states == {}
