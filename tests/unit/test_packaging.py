"""The project metadata a fresh `make install` builds from: no deprecated forms (each one prints a
screenful of warnings before the demo's first line)."""
from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_license_is_an_spdx_expression_not_a_table() -> None:
    # PEP 639: `project.license` is an SPDX expression string; the `{ text = ... }` table is deprecated
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    assert isinstance(project["license"], str) and project["license"] == "Apache-2.0"
