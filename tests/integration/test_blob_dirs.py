"""Temporary blob directories of JobManagers that were killed are removed by the next one."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from millstream.jobmanager.blob_server import BlobStore, remove_stale_blob_dirs

HOLD = ("import sys, time; from millstream.jobmanager.blob_server import BlobStore; "
        "store = BlobStore(); print(store.storage_dir, flush=True); time.sleep(120)")


def _jobmanager_like(tmp: Path) -> "subprocess.Popen[str]":
    return subprocess.Popen([sys.executable, "-c", HOLD], env={**os.environ, "TMPDIR": str(tmp)},
                            stdout=subprocess.PIPE, text=True)


def _age(path: str, seconds: float) -> None:
    past = os.stat(path).st_mtime - seconds
    os.utime(path, (past, past))


def test_a_killed_jobmanagers_blob_directory_is_removed_and_a_live_ones_kept(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    killed, live = _jobmanager_like(tmp_path), _jobmanager_like(tmp_path)
    try:
        killed_dir, live_dir = killed.stdout.readline().strip(), live.stdout.readline().strip()
        Path(killed_dir, "a" * 64).write_bytes(b"artifact")
        killed.send_signal(signal.SIGKILL)
        killed.wait(10)
        assert os.path.isdir(killed_dir)  # nothing removed it
        legacy = tmp_path / "millstream-blobs-legacy"  # no lock file: its owner cannot be known
        legacy.mkdir()
        fresh = tmp_path / "millstream-blobs-fresh"    # just made: its owner may not hold the lock yet
        fresh.mkdir()
        (fresh / ".owner.lock").touch()
        for path in (killed_dir, live_dir, str(legacy)):
            _age(path, 3600)
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
        store = BlobStore()  # a new JobManager starts
        try:
            assert not os.path.exists(killed_dir)
            assert os.path.isdir(live_dir) and legacy.is_dir() and fresh.is_dir()
            _age(store.storage_dir, 3600)
            assert remove_stale_blob_dirs() == []  # its own is locked too
        finally:
            store.close()
        assert not os.path.exists(store.storage_dir)
    finally:
        live.kill()
        live.wait(10)
    _age(live_dir, 3600)
    assert remove_stale_blob_dirs(str(tmp_path)) == [live_dir]
