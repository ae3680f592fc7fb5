"""Checkpoint files written by several processes into one directory never clash
(tests/unit/test_checkpoint_storage.py has the storage rules)."""
from __future__ import annotations

import multiprocessing
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from millstream.runtime.checkpoint_storage import write_task_state


def test_concurrent_writers_never_clash(tmp_path: Path) -> None:
    with ThreadPoolExecutor(8) as pool:  # threads of one TaskManager
        thread_results = [p for r in pool.map(_write_many, [(str(tmp_path), w, 50) for w in range(8)]) for p in r]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:  # and other processes (TaskManagers), into the same directory
        proc_results = [p for r in pool.map(_write_many, [(str(tmp_path), w, 50) for w in (100, 101)]) for p in r]
    everything = thread_results + proc_results
    assert len({path for path, _ in everything}) == len(everything) == 500
    for path, tag in everything:
        assert Path(path).read_bytes() == f"{tag // 1000}:{tag % 1000}".encode()


def _write_many(args: tuple[str, int, int]) -> list[tuple[str, int]]:
    base, worker, n = args
    out = []
    for i in range(n):
        h = write_task_state(Path(base), JOB, 1, f"{worker}:{i}".encode())
        out.append((h.path, worker * 1000 + i))
    return out


JOB = bytes.fromhex("00112233445566778899aabbccddeeff")
