"""The checked-in protobuf modules match a fresh generation from proto/*.proto."""
from __future__ import annotations

import pathlib

from millstream.proto import generate


def test_generated_modules_are_current(tmp_path: pathlib.Path) -> None:
    written = generate.generate(tmp_path)
    assert written, "no .proto files compiled"
    for fresh in written:
        checked_in = generate.PROTO_DIR / fresh.name
        assert checked_in.exists(), f"{fresh.name} is not checked in: run `make proto`"
        assert checked_in.read_bytes() == fresh.read_bytes(), f"{fresh.name} is stale: run `make proto`"
