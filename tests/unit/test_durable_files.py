"""Files written whole or not at all (checkpoint _metadata, HA pointers, job graphs)."""
from __future__ import annotations

from pathlib import Path

import pytest

from millstream.runtime.durable_files import write_atomically


def test_a_file_is_replaced_whole_and_no_temporary_file_stays(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "_metadata"
    write_atomically(target, b"first")
    write_atomically(target, b"second")
    assert target.read_bytes() == b"second"
    assert [p.name for p in target.parent.iterdir()] == ["_metadata"]


def test_a_failed_write_keeps_the_old_content_and_removes_its_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "pointer"
    write_atomically(target, b"old")
    with pytest.raises(TypeError):
        write_atomically(target, "not bytes")  # type: ignore[arg-type]
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["pointer"]
