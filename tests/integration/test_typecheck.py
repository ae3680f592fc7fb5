"""The package type-checks clean with the mypy configuration in pyproject.toml, each module checked
once under its import name (``millstream/`` is a folder of symlinks; ``client/api/`` is reached as
``millstream.datastream`` etc., so reaching it again as ``millstream.client.api`` is excluded)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy")

ROOT = Path(__file__).resolve().parents[2]


def package_modules() -> list[str]:
    """The package's modules as Python imports them: millstream/ followed through its symlinks,
    without millstream/client/api (the same files as millstream/{datastream,common,...})."""
    found = []
    for folder, dirs, files in os.walk(ROOT / "millstream", followlinks=True):
        rel = Path(folder).relative_to(ROOT)
        if rel.parts[:3] == ("millstream", "client", "api"):
            dirs.clear()
            continue
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        found += [str(rel / f) for f in files if f.endswith(".py")]
    return sorted(found)


def test_mypy_is_clean_and_checks_every_module_once() -> None:
    run = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    checked = re.search(r"Success: no issues found in (\d+) source files", run.stdout)
    assert checked is not None, run.stdout
    modules = package_modules()
    assert len(modules) > 150  # the walk found the package
    assert int(checked.group(1)) == len(modules)
